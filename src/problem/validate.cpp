// The one place where arguments become a Problem: every rule of docs/operator.md is checked here, before
// anything is computed or written, and each failure names the parameter, the value and the rule.
#include "problem/validate.hpp"

#include <algorithm>
#include <string>
#include <tuple>

#include "numeric/numeric.hpp"
#include "problem/checked.hpp"
#include "problem/overlap.hpp"

namespace conv3d_dx {
namespace {

constexpr std::int64_t kMaxGroups = 65535;
using Axes = std::array<std::string, 5>;

[[noreturn]] void fail(const std::string& parameter, const std::string& message) {
  throw Error(ErrorCode::invalid_argument, parameter, parameter + " " + message);
}

std::string join(const std::int64_t* v, std::size_t n) {
  std::string s = "[";
  for (std::size_t i = 0; i < n; ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// An attribute as messages quote it: as the caller wrote it when the names say, else its values.
std::string quoted(const std::string& text, const std::int64_t* v, std::size_t n) {
  return text.empty() ? join(v, n) : text;
}

// "in [lo, 2147483647]"
std::string range(std::int64_t lo) {
  return "in [" + std::to_string(lo) + ", " + std::to_string(kMaxDim) + "]";
}

// Position of canonical axis c (N, C, D, H, W) in a feature map laid out as `layout`.
int feature_position(Layout layout, int c) {
  static constexpr int ndhwc[5] = {0, 4, 1, 2, 3};
  return layout == Layout::NDHWC ? ndhwc[c] : c;
}

// Position of canonical filter axis c (Cout, Cin_g, kD, kH, kW) in `layout`.
int filter_position(Layout layout, int c) {
  static constexpr int ndhwc[5] = {0, 4, 1, 2, 3};
  static constexpr int dhwcn[5] = {4, 3, 0, 1, 2};
  if (layout == Layout::NDHWC) return ndhwc[c];
  if (layout == Layout::DHWCN) return dhwcn[c];
  return c;
}

// Shape and strides of a view in canonical order, after checking its rank-independent rules.
struct Canonical {
  std::array<std::int64_t, 5> shape, strides;
};

Canonical canonicalize(const TensorView& v, bool is_filter) {
  Canonical c{};
  for (int i = 0; i < 5; ++i) {
    const int p = is_filter ? filter_position(v.layout, i) : feature_position(v.layout, i);
    c.shape[i] = v.shape[p];
    c.strides[i] = v.strides[p];
  }
  return c;
}

void check_dims(const std::string& name, const std::array<std::int64_t, 5>& shape, const Axes& axes,
                bool batch_may_be_zero) {
  for (int i = 0; i < 5; ++i) {
    const std::int64_t lo = (batch_may_be_zero && i == 0) ? 0 : 1;
    if (shape[i] < lo || shape[i] > kMaxDim)
      fail(name, axes[i] + " is " + std::to_string(shape[i]) + " but must be " + range(lo));
  }
}

// Element count and largest element offset must fit in 64 bits; negative strides are not accepted.
void check_extent(const std::string& name, const Canonical& c, const Axes& axes) {
  std::int64_t elements = 1, last = 0;
  for (int i = 0; i < 5; ++i) {
    if (c.strides[i] < 0)
      fail(name, "stride of " + axes[i] + " is " + std::to_string(c.strides[i]) + " but must be >= 0");
    elements = checked_mul(elements, c.shape[i], name);
    if (c.shape[i] > 0) last = checked_add(last, checked_mul(c.shape[i] - 1, c.strides[i], name), name);
  }
  checked_mul(checked_add(last, 1, name), 8, name);  // byte offsets of the widest type fit as well
}

// y is written, so no two of its elements may share memory: with axes sorted by stride, each stride
// must step over everything the smaller axes span.
void check_no_overlap(const std::string& name, const Canonical& c, const Axes& axes) {
  // An empty y (N = 0) has no elements to share memory, whatever its strides (DLPack gives empty arrays
  // zero strides).
  if (std::find(c.shape.begin(), c.shape.end(), 0) != c.shape.end()) return;
  std::array<int, 5> order{0, 1, 2, 3, 4};
  std::sort(order.begin(), order.end(), [&](int a, int b) { return c.strides[a] < c.strides[b]; });
  std::int64_t span = 1;
  for (int i : order) {
    if (c.shape[i] <= 1) continue;
    if (c.strides[i] < span)
      fail(name, "strides " + join(c.strides.data(), 5) + " make elements overlap; " + name +
                     " must not alias itself (stride of " + axes[i] + " is " + std::to_string(c.strides[i]) +
                     ", needs >= " + std::to_string(span) + ")");
    span = c.strides[i] * c.shape[i];
  }
}

void check_dtypes(const ProblemSpec& spec, const ParameterNames& names) {
  const DType dy = spec.out_backprop.dtype, w = spec.filter.dtype;
  for (auto [name, t] : {std::pair{&names.out_backprop, dy}, {&names.filter, w}, {&names.y, spec.y.dtype}})
    if (static_cast<unsigned>(t) > static_cast<unsigned>(DType::fp8_e4m3fn))
      fail(*name, "dtype " + std::to_string(static_cast<int>(t)) + " is not a known dtype");
  if (dy != w) {
    const std::string mixed = std::string("dtype is ") + to_string(w) + " but " + names.out_backprop +
                              " is " + to_string(dy) + "; ";
    if (!spec.allow_mixed_dtypes) fail(names.filter, mixed + "both must have the same dtype");
    if (numeric::is_8bit(dy) || numeric::is_8bit(w))
      fail(names.filter, mixed + "hif8 and fp8_e4m3fn cannot be mixed with other dtypes");
  }
  // y has the input dtype or fp32 (docs/operator.md); where aclnn promotes or computes in fp16, the result is
  // cast to the output's dtype, so any 16/32-bit dtype is fine there.
  const DType y = spec.y.dtype;
  const bool cast_result =
      (spec.allow_mixed_dtypes && !numeric::is_8bit(dy)) || spec.input_rounding == InputRounding::fp16;
  if (y != dy && y != w && y != DType::f32 && !(cast_result && !numeric::is_8bit(y)))
    fail(names.y, std::string("dtype is ") + to_string(y) + " but must be the input dtype (" + to_string(dy) +
                      (w != dy ? std::string(" or ") + to_string(w) : std::string()) + ") or fp32");
  if (spec.attrs.enable_hf32 && (dy != DType::f32 || w != DType::f32))
    fail("enable_hf32",
         std::string("is set but the inputs are ") + to_string(dy) + "; HF32 applies to fp32 only");
  if (spec.attrs.enable_hf32 && spec.input_rounding == InputRounding::fp16)
    fail("enable_hf32", "is set together with fp16 input rounding; choose one");
}

}  // namespace

std::array<std::int64_t, 5> expand_to_5d(const std::vector<std::int64_t>& values, Layout layout,
                                         std::int64_t fill) {
  std::vector<std::int64_t> v = values;
  const std::ptrdiff_t d = layout == Layout::NCDHW ? 2 : layout == Layout::NDHWC ? 1 : 0;  // where D sits
  if (v.size() < 5) v.insert(v.begin() + d, 5 - v.size(), fill);
  return {v.at(0), v.at(1), v.at(2), v.at(3), v.at(4)};
}

Problem validate(const ProblemSpec& spec) { return validate(spec, ParameterNames{}); }

Problem validate(const ProblemSpec& spec, const ParameterNames& names) {
  const Attributes& a = spec.attrs;
  const Axes& axes = names.axes;
  if (a.data_format != Layout::NCDHW && a.data_format != Layout::NDHWC)
    fail("data_format", std::string("is ") + to_string(a.data_format) + " but must be NDHWC or NCDHW");
  const Layout fmt = a.data_format;

  // input_size: 5 values in data_format order, or 4 with D = 1 inserted.
  if (a.input_size.size() != 5 && a.input_size.size() != 4)
    fail(names.input_size, "has " + std::to_string(a.input_size.size()) + " values but must have 4 or 5");
  const std::array<std::int64_t, 5> input_size = expand_to_5d(a.input_size, fmt);  // in data_format order
  std::array<std::int64_t, 5> y_shape{};                                           // canonical N, C, D, H, W
  for (int i = 0; i < 5; ++i) y_shape[i] = input_size[feature_position(fmt, i)];
  check_dims(names.input_size, y_shape, axes, true);

  // strides and dilations: N and C entries are 1, D, H, W >= 1.
  for (auto [name, text, values] : {std::tuple{&names.strides, &names.strides_text, &a.strides},
                                    {&names.dilations, &names.dilations_text, &a.dilations}}) {
    for (int i = 0; i < 5; ++i) {
      const std::int64_t v = (*values)[feature_position(fmt, i)];
      const std::string entry = quoted(*text, values->data(), 5) + ": the " + axes[i] + " entry is " +
                                std::to_string(v) + " but must be ";
      if (i < 2 && v != 1) fail(*name, entry + "1 (data_format " + to_string(fmt) + ")");
      if (i >= 2 && (v < 1 || v > kMaxDim)) fail(*name, entry + range(1));
    }
  }
  for (int i = 0; i < 6; ++i)
    if (a.pads[i] < 0 || a.pads[i] > kMaxDim)
      fail(names.pads, quoted(names.pads_text, a.pads.data(), 6) + ": the " + axes[2 + i / 2] +
                           (i % 2 ? " back" : " front") + " entry is " + std::to_string(a.pads[i]) +
                           " but must be " + range(0));
  if (a.groups < 1 || a.groups > kMaxGroups)
    fail(names.groups,
         "is " + std::to_string(a.groups) + " but must be in [1, " + std::to_string(kMaxGroups) + "]");

  check_dtypes(spec, names);
  if (spec.input_rounding != InputRounding::none && spec.input_rounding != InputRounding::hf32 &&
      spec.input_rounding != InputRounding::fp16)
    fail("input_rounding",
         "is " + std::to_string(static_cast<int>(spec.input_rounding)) + ", not a known mode");
  if (spec.overflow != OverflowMode::ieee && spec.overflow != OverflowMode::saturate)
    fail("overflow", "is " + std::to_string(static_cast<int>(spec.overflow)) + ", not a known mode");

  // The three views: layouts, dims, extents.
  if (spec.out_backprop.layout != fmt)
    fail(names.out_backprop, std::string("layout is ") + to_string(spec.out_backprop.layout) +
                                 " but must equal data_format " + to_string(fmt));
  if (spec.y.layout != fmt)
    fail(names.y, std::string("layout is ") + to_string(spec.y.layout) + " but must equal data_format " +
                      to_string(fmt));
  if (spec.filter.layout != Layout::NCDHW && spec.filter.layout != Layout::NDHWC &&
      spec.filter.layout != Layout::DHWCN)
    fail(names.filter, "layout is " + std::to_string(static_cast<int>(spec.filter.layout)) +
                           " but must be NCDHW, NDHWC or DHWCN");
  const Canonical dy = canonicalize(spec.out_backprop, false);
  const Canonical w = canonicalize(spec.filter, true);
  const Canonical y = canonicalize(spec.y, false);
  check_dims(names.out_backprop, dy.shape, axes, true);
  check_dims(names.filter, w.shape, names.filter_axes, false);
  check_dims(names.y, y.shape, axes, true);
  for (int i = 0; i < 5; ++i)
    if (y.shape[i] != y_shape[i])
      fail(names.y, axes[i] + " is " + std::to_string(y.shape[i]) + " but " + names.input_size + " says " +
                        std::to_string(y_shape[i]));

  // Channels: y's split into groups, the filter's Cout too, Cin_g and dy's C to match.
  const std::string& Cout = names.filter_axes[0];
  Problem p;
  p.N = y_shape[0];
  p.G = a.groups;
  if (y_shape[1] % a.groups != 0)
    fail(names.groups, "is " + std::to_string(a.groups) + " but " + names.input_size + " C (" +
                           std::to_string(y_shape[1]) + ") is not divisible by it");
  if (w.shape[0] % a.groups != 0)
    fail(names.groups, "is " + std::to_string(a.groups) + " but " + names.filter + " " + Cout + " (" +
                           std::to_string(w.shape[0]) + ") is not divisible by it");
  if (w.shape[1] * a.groups != y_shape[1])
    fail(names.filter, names.filter_axes[1] + " is " + std::to_string(w.shape[1]) + " but " +
                           names.input_size + " C (" + std::to_string(y_shape[1]) + ") / " + names.groups +
                           " (" + std::to_string(a.groups) + ") is " + std::to_string(y_shape[1] / a.groups));
  if (dy.shape[0] != p.N)
    fail(names.out_backprop,
         "N is " + std::to_string(dy.shape[0]) + " but " + names.input_size + " N is " + std::to_string(p.N));
  if (dy.shape[1] != w.shape[0])
    fail(names.out_backprop, "C is " + std::to_string(dy.shape[1]) + " but " + names.filter + " " + Cout +
                                 " is " + std::to_string(w.shape[0]));
  p.Cin_g = w.shape[1];
  p.Cout_g = w.shape[0] / a.groups;

  // The output-size rule, per spatial axis.
  for (int ax = 0; ax < 3; ++ax) {
    const int c = ax + 2;
    p.y_size[ax] = y_shape[c];
    p.kernel[ax] = w.shape[c];
    p.stride[ax] = a.strides[feature_position(fmt, c)];
    p.dilation[ax] = a.dilations[feature_position(fmt, c)];
    p.pad_front[ax] = a.pads[2 * ax];
    p.pad_back[ax] = a.pads[2 * ax + 1];
    // All terms are below 2^31 (dims, pads) or 2^62 (dilated kernel): no overflow in 64 bits.
    const std::int64_t padded = p.y_size[ax] + p.pad_front[ax] + p.pad_back[ax];
    const std::int64_t dilated = (p.kernel[ax] - 1) * p.dilation[ax] + 1;
    if (padded < dilated)
      fail(names.input_size, axes[c] + " + " + names.pads + " (" + std::to_string(padded) +
                                 ") is smaller than the dilated " + names.filter + " " + axes[c] + " (" +
                                 std::to_string(dilated) + ")");
    const std::int64_t expected = (padded - dilated) / p.stride[ax] + 1;
    if (dy.shape[c] != expected)
      fail(names.out_backprop, axes[c] + " is " + std::to_string(dy.shape[c]) + " but " + names.input_size +
                                   ", " + names.filter + ", " + names.strides + ", " + names.pads + " and " +
                                   names.dilations + " imply " + std::to_string(expected));
    p.dy_size[ax] = expected;
  }

  check_extent(names.out_backprop, dy, axes);
  check_extent(names.filter, w, names.filter_axes);
  check_extent(names.y, y, axes);
  check_no_overlap(names.y, y, axes);
  // Work counts used by engines (taps per y element times elements) must fit too.
  checked_mul(checked_mul(checked_mul(p.N, p.G * p.Cin_g, names.y), p.y_size[0] * p.y_size[1], names.y),
              p.y_size[2], names.y);

  p.dy_dtype = spec.out_backprop.dtype;
  p.filter_dtype = spec.filter.dtype;
  p.y_dtype = spec.y.dtype;
  p.data_format = fmt;
  p.filter_format = spec.filter.layout;
  p.input_rounding = a.enable_hf32 ? InputRounding::hf32 : spec.input_rounding;
  p.overflow = spec.overflow;
  p.dy_strides = dy.strides;
  p.filter_strides = w.strides;
  p.y_strides = y.strides;
  // The one rule that needs the data pointers, applied when the spec carries them.
  require_y_disjoint(p, spec.out_backprop.data, spec.filter.data, spec.y.data, names);
  return p;
}

Problem validate(const Problem& p) {
  // Every field of a Problem comes from a ProblemSpec; rebuilding that spec (canonical NCDHW views with the
  // problem's strides) and validating it again checks a hand-made or edited Problem by the same rules.
  if (p.data_format != Layout::NCDHW && p.data_format != Layout::NDHWC)
    fail("data_format",
         "is " + std::to_string(static_cast<int>(p.data_format)) + " but must be NDHWC or NCDHW");
  if (p.filter_format != Layout::NCDHW && p.filter_format != Layout::NDHWC &&
      p.filter_format != Layout::DHWCN)
    fail("filter", "layout is " + std::to_string(static_cast<int>(p.filter_format)) +
                       " but must be NCDHW, NDHWC or DHWCN");
  // Cin and Cout are products; they must fit before anything can be checked.
  const std::int64_t Cin = checked_mul(p.G, p.Cin_g, "input_size"),
                     Cout = checked_mul(p.G, p.Cout_g, "filter");
  ProblemSpec spec;
  spec.attrs.input_size = {p.N, Cin, p.y_size[0], p.y_size[1], p.y_size[2]};
  spec.attrs.strides = {1, 1, p.stride[0], p.stride[1], p.stride[2]};
  spec.attrs.dilations = {1, 1, p.dilation[0], p.dilation[1], p.dilation[2]};
  spec.attrs.pads = {p.pad_front[0], p.pad_back[0],  p.pad_front[1],
                     p.pad_back[1],  p.pad_front[2], p.pad_back[2]};
  spec.attrs.groups = p.G;
  spec.attrs.data_format = Layout::NCDHW;
  spec.input_rounding = p.input_rounding;
  spec.overflow = p.overflow;
  spec.allow_mixed_dtypes = true;
  spec.out_backprop = {nullptr,
                       p.dy_dtype,
                       Layout::NCDHW,
                       {p.N, Cout, p.dy_size[0], p.dy_size[1], p.dy_size[2]},
                       p.dy_strides};
  spec.filter = {nullptr,
                 p.filter_dtype,
                 Layout::NCDHW,
                 {Cout, p.Cin_g, p.kernel[0], p.kernel[1], p.kernel[2]},
                 p.filter_strides};
  spec.y = {
      nullptr, p.y_dtype, Layout::NCDHW, {p.N, Cin, p.y_size[0], p.y_size[1], p.y_size[2]}, p.y_strides};
  Problem checked = validate(spec);
  checked.data_format = p.data_format;
  checked.filter_format = p.filter_format;
  return checked;
}

}  // namespace conv3d_dx
