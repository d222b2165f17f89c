// Which Ascend products would accept a problem, from the operator's documented constraints
// (docs/operator.md, "Ascend products").
#include <string>

#include "conv3d_dx/conv3d_dx.hpp"
#include "numeric/numeric.hpp"
#include "problem/validate.hpp"

namespace conv3d_dx {
namespace {

constexpr const char* kSpatial[3] = {"D", "H", "W"};

void check_range(std::vector<std::string>& out, const std::string& what, std::int64_t v, std::int64_t lo,
                 std::int64_t hi) {
  if (v < lo || v > hi)
    out.push_back(what + " is " + std::to_string(v) + ", outside [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "]");
}

// Limits every product shares: same dtype on all tensors, filter H/W in [1, 511].
void common_limits(const Problem& p, std::vector<std::string>& v) {
  if (p.filter_dtype != p.dy_dtype)
    v.push_back(std::string("filter dtype ") + to_string(p.filter_dtype) +
                " differs from out_backprop dtype " + to_string(p.dy_dtype));
  if (p.y_dtype != p.dy_dtype)
    v.push_back(std::string("y dtype ") + to_string(p.y_dtype) + " differs from out_backprop dtype " +
                to_string(p.dy_dtype) + " (a conv3d-dx extension)");
  if (p.input_rounding == InputRounding::fp16)
    v.push_back("fp16 input rounding is an aclnn cubeMathType, not an operator attribute");
  check_range(v, "out_backprop N", p.N, 1, kMaxDim);
  check_range(v, "filter H", p.kernel[1], 1, 511);
  check_range(v, "filter W", p.kernel[2], 1, 511);
}

}  // namespace

std::vector<ProductVerdict> ascend_compatibility(const Problem& p) {
  ProductVerdict a23{"Atlas A2/A3 training and inference series", true, {}};
  common_limits(p, a23.violations);
  for (auto [name, t] : {std::pair{"out_backprop", p.dy_dtype}, {"filter", p.filter_dtype}, {"y", p.y_dtype}})
    if (numeric::is_8bit(t))
      a23.violations.push_back(std::string(name) + " dtype " + to_string(t) +
                               " is not supported (fp16, bf16 and fp32 only)");
  check_range(a23.violations, "strides D", p.stride[0], 1, 255);
  check_range(a23.violations, "strides H", p.stride[1], 1, 63);
  check_range(a23.violations, "strides W", p.stride[2], 1, 63);
  for (int ax = 0; ax < 3; ++ax) {
    check_range(a23.violations, std::string("pads ") + kSpatial[ax] + " front", p.pad_front[ax], 0, 255);
    check_range(a23.violations, std::string("pads ") + kSpatial[ax] + " back", p.pad_back[ax], 0, 255);
    check_range(a23.violations, std::string("dilations ") + kSpatial[ax], p.dilation[ax], 1, 255);
  }

  ProductVerdict a950{"Ascend 950PR/950DT", true, {}};
  common_limits(p, a950.violations);
  if (p.G > 1 && p.data_format == Layout::NDHWC)
    a950.violations.push_back("groups " + std::to_string(p.G) +
                              " > 1 is not supported with NDHWC feature maps");
  if ((numeric::is_8bit(p.dy_dtype) || numeric::is_8bit(p.filter_dtype)) && p.filter_format != Layout::NCDHW)
    a950.violations.push_back(std::string("filter format ") + to_string(p.filter_format) +
                              " is not supported with " + to_string(p.dy_dtype) +
                              " (8-bit dtypes need an NCDHW filter)");

  std::vector<ProductVerdict> verdicts{a23, a950};
  for (auto& v : verdicts) v.accepted = v.violations.empty();
  return verdicts;
}

}  // namespace conv3d_dx
