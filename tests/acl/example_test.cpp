// The CANN-style example (examples/aclnn_conv3d_backward_bf16.cpp) is run as a program; its printed
// gradInput must equal the same problem computed through the C++ API.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "conv3d_dx/conv3d_dx.hpp"
#include "numeric/numeric.hpp"

namespace {

// The example's problem and data, restated.
constexpr std::int64_t kN = 2, kCin = 4, kCout = 6, kGroups = 2;
constexpr std::int64_t kIn[3] = {5, 6, 7}, kOut[3] = {3, 3, 4}, kK = 3;

std::vector<std::uint16_t> expected_gradient() {
  using namespace conv3d_dx;
  std::vector<std::uint16_t> dy(static_cast<std::size_t>(kN * kCout * kOut[0] * kOut[1] * kOut[2]));
  for (std::size_t i = 0; i < dy.size(); ++i)
    dy[i] = numeric::f32_to_bf16(static_cast<float>(static_cast<int>((i * 37 + 11) % 19) - 9) / 8.0f, false);
  std::vector<std::uint16_t> w(static_cast<std::size_t>(kCout * (kCin / kGroups) * kK * kK * kK));
  for (std::size_t i = 0; i < w.size(); ++i)
    w[i] = numeric::f32_to_bf16(static_cast<float>(static_cast<int>((i * 53 + 5) % 13) - 6) / 4.0f, false);
  std::vector<std::uint16_t> y(static_cast<std::size_t>(kN * kCin * kIn[0] * kIn[1] * kIn[2]), 0xFFFF);
  ProblemSpec spec;
  spec.attrs.data_format = Layout::NCDHW;
  spec.attrs.input_size = {kN, kCin, kIn[0], kIn[1], kIn[2]};
  spec.attrs.strides = {1, 1, 2, 2, 2};
  spec.attrs.pads = {1, 1, 1, 1, 1, 1};
  spec.attrs.groups = kGroups;
  spec.out_backprop =
      TensorView::contiguous(dy.data(), DType::bf16, Layout::NCDHW, {kN, kCout, kOut[0], kOut[1], kOut[2]});
  spec.filter =
      TensorView::contiguous(w.data(), DType::bf16, Layout::NCDHW, {kCout, kCin / kGroups, kK, kK, kK});
  spec.y = TensorView::contiguous(y.data(), DType::bf16, Layout::NCDHW, {kN, kCin, kIn[0], kIn[1], kIn[2]});
  conv3d_backprop_input(spec);
  return y;
}

TEST(AclnnExample, PrintsTheGradientOfTheCppApi) {
  std::FILE* pipe = popen(CONV3D_DX_ACL_EXAMPLE, "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  while (std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  ASSERT_EQ(pclose(pipe), 0) << output;

  const std::vector<std::uint16_t> expected = expected_gradient();
  std::istringstream lines(output);
  std::string line;
  std::size_t rows = 0, values = 0;
  while (std::getline(lines, line)) {
    long long n, c, d, h;
    int consumed = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "gradInput[%lld][%lld][%lld][%lld] =%n", &n, &c, &d, &h, &consumed),
              4)
        << line;
    const std::size_t row = static_cast<std::size_t>(((n * kCin + c) * kIn[0] + d) * kIn[1] + h);
    ASSERT_EQ(row, rows++) << line;  // every row, in order
    std::istringstream numbers(line.substr(static_cast<std::size_t>(consumed)));
    for (std::int64_t x = 0; x < kIn[2]; ++x) {
      float v = 0;
      ASSERT_TRUE(numbers >> v) << line;
      const std::size_t i = row * static_cast<std::size_t>(kIn[2]) + static_cast<std::size_t>(x);
      EXPECT_EQ(v, conv3d_dx::numeric::bf16_to_f32(expected[i])) << line << " element " << x;
      ++values;
    }
    float extra;
    EXPECT_FALSE(numbers >> extra) << line;
  }
  EXPECT_EQ(values, expected.size());
}

}  // namespace
