#include "support/testing.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "numeric/numeric.hpp"
#include "reference/accuracy.hpp"
#include "reference/reference.hpp"

namespace conv3d_dx::testing {
namespace {

constexpr unsigned char kCanary = 0xA5;

// Position of canonical axis i in a tensor laid out as `layout` (filters and feature maps differ).
int position(Layout layout, bool filter, int i) {
  static constexpr int ndhwc[5] = {0, 4, 1, 2, 3};
  static constexpr int dhwcn[5] = {4, 3, 0, 1, 2};
  if (layout == Layout::NDHWC) return ndhwc[i];
  if (layout == Layout::DHWCN && filter) return dhwcn[i];
  return i;
}

std::int64_t offset(const TensorView& v, bool filter, const std::array<std::int64_t, 5>& index) {
  std::int64_t at = 0;
  for (int i = 0; i < 5; ++i) at += index[i] * v.strides[position(v.layout, filter, i)];
  return at;
}

// Calls fn(index) for every canonical index of a shape.
template <class F>
void for_each_index(const std::array<std::int64_t, 5>& shape, F&& fn) {
  std::array<std::int64_t, 5> i{};
  for (i[0] = 0; i[0] < shape[0]; ++i[0])
    for (i[1] = 0; i[1] < shape[1]; ++i[1])
      for (i[2] = 0; i[2] < shape[2]; ++i[2])
        for (i[3] = 0; i[3] < shape[3]; ++i[3])
          for (i[4] = 0; i[4] < shape[4]; ++i[4]) fn(i);
}

std::array<std::int64_t, 5> canonical_shape(const TensorView& v, bool filter) {
  std::array<std::int64_t, 5> s{};
  for (int i = 0; i < 5; ++i) s[i] = v.shape[position(v.layout, filter, i)];
  return s;
}

// HF32 rounding written independently of numeric's: 10 mantissa bits, ties away from zero.
double round_hf32(double v) {
  const auto u = std::bit_cast<std::uint32_t>(static_cast<float>(v));
  return std::bit_cast<float>((u + 0x1000u) & ~0x1FFFu);
}

}  // namespace

std::array<std::int64_t, 3> Case::out() const {
  std::array<std::int64_t, 3> o{};
  for (int a = 0; a < 3; ++a)
    o[a] = (in[a] + pad_front[a] + pad_back[a] - ((kernel[a] - 1) * dilation[a] + 1)) / stride[a] + 1;
  return o;
}

std::string Case::name() const {
  std::ostringstream s;
  auto t3 = [&](const char* label, const std::array<std::int64_t, 3>& a) {
    s << ' ' << label << a[0] << 'x' << a[1] << 'x' << a[2];
  };
  s << "N" << N << " Cin" << Cin << " Cout" << Cout << " G" << groups;
  t3("in", in);
  t3("k", kernel);
  t3("s", stride);
  t3("d", dilation);
  t3("pf", pad_front);
  t3("pb", pad_back);
  s << ' ' << to_string(dtype) << "->" << to_string(y_dtype) << ' ' << to_string(data_format) << " filter "
    << to_string(filter_format) << (hf32 ? " hf32" : "")
    << (overflow == OverflowMode::saturate ? " saturate" : "") << (strided_views ? " strided" : "");
  return s.str();
}

Case with_dtype(Case c, DType t) {
  c.dtype = c.y_dtype = t;
  return c;
}

Case random_case(std::mt19937_64& rng, DType dtype, Layout data_format, Layout filter_format) {
  auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  Case c = with_dtype(Case{}, dtype);
  c.data_format = data_format;
  c.filter_format = filter_format;
  c.N = pick(1, 2);
  switch (pick(0, 2)) {
    case 0:  // dense
      c.groups = 1;
      c.Cin = pick(1, 6);
      c.Cout = pick(1, 6);
      break;
    case 1:  // grouped
      c.groups = 2;
      c.Cin = 2 * pick(1, 3);
      c.Cout = 2 * pick(1, 3);
      break;
    default:  // depthwise, sometimes with a channel multiplier
      c.groups = c.Cin = pick(2, 5);
      c.Cout = c.groups * pick(1, 2);
  }
  for (int a = 0; a < 3; ++a) {
    c.kernel[a] = pick(1, 4);
    c.stride[a] = pick(1, 4);
    c.dilation[a] = pick(1, 3);
    c.pad_front[a] = pick(0, 2);
    c.pad_back[a] = pick(0, 3);
    const std::int64_t dilated = (c.kernel[a] - 1) * c.dilation[a] + 1;
    const std::int64_t min_in = std::max<std::int64_t>(1, dilated - c.pad_front[a] - c.pad_back[a]);
    c.in[a] = min_in + pick(0, 5);
  }
  return c;
}

std::int64_t Tensor::elements() const {
  std::int64_t n = 1;
  for (auto d : view.shape) n *= d;
  return n;
}

Tensor make_tensor(DType dtype, Layout layout, const std::array<std::int64_t, 5>& canonical, bool filter,
                   bool padded) {
  Tensor t;
  t.view.dtype = dtype;
  t.view.layout = layout;
  for (int i = 0; i < 5; ++i) t.view.shape[position(layout, filter, i)] = canonical[i];
  // Padded views get one spare element per dimension plus an offset, so strides are not contiguous.
  std::int64_t stride = 1;
  for (int i = 4; i >= 0; --i) {
    t.view.strides[i] = stride;
    stride *= std::max<std::int64_t>(t.view.shape[i], 1) + (padded ? 1 : 0);
  }
  const std::int64_t lead = padded ? 3 : 0;
  t.bytes.assign(static_cast<std::size_t>(stride + lead) * dtype_size(dtype), kCanary);
  t.view.data = t.bytes.data() + static_cast<std::size_t>(lead) * dtype_size(dtype);
  return t;
}

void fill(Tensor& t, std::mt19937_64& rng, Fill kind) {
  std::uniform_int_distribution<int> small(-3, 3);
  std::uniform_real_distribution<double> mantissa(-2.0, 2.0);
  std::uniform_int_distribution<int> exponent(-4, 3);
  for_each_index(t.view.shape, [&](const std::array<std::int64_t, 5>& i) {
    std::int64_t at = 0;
    for (int d = 0; d < 5; ++d) at += i[d] * t.view.strides[d];
    const double v = kind == Fill::small_integers ? small(rng)
                     : kind == Fill::nan          ? std::numeric_limits<double>::quiet_NaN()
                                                  : std::ldexp(mantissa(rng), exponent(rng));
    numeric::store_f32(t.view.dtype, t.view.data, at, static_cast<float>(v), OverflowMode::ieee);
  });
}

void fill_canary(Tensor& t) { std::memset(t.bytes.data(), kCanary, t.bytes.size()); }

bool canary_intact(const Tensor& t) {
  for (unsigned char b : t.bytes)
    if (b != kCanary) return false;
  return true;
}

bool padding_intact(const Tensor& t) {
  std::vector<bool> inside(t.bytes.size(), false);
  const std::size_t size = dtype_size(t.view.dtype);
  const auto base = static_cast<const unsigned char*>(t.view.data) - t.bytes.data();
  for_each_index(t.view.shape, [&](const std::array<std::int64_t, 5>& i) {
    std::int64_t at = 0;
    for (int d = 0; d < 5; ++d) at += i[d] * t.view.strides[d];
    for (std::size_t b = 0; b < size; ++b)
      inside[static_cast<std::size_t>(base + at * static_cast<std::int64_t>(size)) + b] = true;
  });
  for (std::size_t b = 0; b < t.bytes.size(); ++b)
    if (!inside[b] && t.bytes[b] != kCanary) return false;
  return true;
}

Instance instantiate(const Case& c, std::mt19937_64& rng, Fill kind) {
  Instance inst;
  const auto o = c.out();
  inst.dy = make_tensor(c.dtype, c.data_format, {c.N, c.Cout, o[0], o[1], o[2]}, false, c.strided_views);
  inst.filter =
      make_tensor(c.dtype, c.filter_format, {c.Cout, c.Cin / c.groups, c.kernel[0], c.kernel[1], c.kernel[2]},
                  true, c.strided_views);
  inst.y =
      make_tensor(c.y_dtype, c.data_format, {c.N, c.Cin, c.in[0], c.in[1], c.in[2]}, false, c.strided_views);
  fill(inst.dy, rng, kind);
  fill(inst.filter, rng, kind);

  Attributes& a = inst.spec.attrs;
  a.data_format = c.data_format;
  const bool ndhwc = c.data_format == Layout::NDHWC;
  a.input_size = ndhwc ? std::vector<std::int64_t>{c.N, c.in[0], c.in[1], c.in[2], c.Cin}
                       : std::vector<std::int64_t>{c.N, c.Cin, c.in[0], c.in[1], c.in[2]};
  a.strides = ndhwc ? std::array<std::int64_t, 5>{1, c.stride[0], c.stride[1], c.stride[2], 1}
                    : std::array<std::int64_t, 5>{1, 1, c.stride[0], c.stride[1], c.stride[2]};
  a.dilations = ndhwc ? std::array<std::int64_t, 5>{1, c.dilation[0], c.dilation[1], c.dilation[2], 1}
                      : std::array<std::int64_t, 5>{1, 1, c.dilation[0], c.dilation[1], c.dilation[2]};
  a.pads = {c.pad_front[0], c.pad_back[0], c.pad_front[1], c.pad_back[1], c.pad_front[2], c.pad_back[2]};
  a.groups = c.groups;
  a.enable_hf32 = c.hf32;
  inst.spec.overflow = c.overflow;
  inst.spec.out_backprop = inst.dy.view;
  inst.spec.filter = inst.filter.view;
  inst.spec.y = inst.y.view;
  return inst;
}

double element(const Tensor& t, const std::array<std::int64_t, 5>& canonical_index) {
  return numeric::load_f32(t.view.dtype, t.view.data, offset(t.view, false, canonical_index));
}

::testing::AssertionResult matches_reference(const Problem& p, const Instance& inst) {
  std::vector<double> magnitude;
  const std::vector<double> ref = reference::compute(p, inst.dy.view.data, inst.filter.view.data, &magnitude);
  if (!padding_intact(inst.y))
    return ::testing::AssertionFailure() << "y written outside its view: " << p.describe();
  const std::int64_t terms = p.Cout_g * p.kernel[0] * p.kernel[1] * p.kernel[2];  // at most, per element
  std::size_t k = 0, bad = 0;
  std::ostringstream why;
  for_each_index(canonical_shape(inst.y.view, false), [&](const std::array<std::int64_t, 5>& i) {
    const double r = ref[k], got = element(inst.y, i);
    const bool ok =
        reference::acceptable(p.y_dtype, p.overflow, r, reference::fp32_allowance(magnitude[k], terms), got);
    ++k;
    if (!ok && bad++ < 5)
      why << "\n  y[" << i[0] << "," << i[1] << "," << i[2] << "," << i[3] << "," << i[4] << "] = " << got
          << ", reference " << r << " (sum |dy*w| " << magnitude[k - 1] << ")";
  });
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << k << " elements differ for " << p.describe() << why.str();
}

::testing::AssertionResult exactly_reference(const Problem& p, const Instance& inst) {
  const std::vector<double> ref = reference::compute(p, inst.dy.view.data, inst.filter.view.data);
  std::size_t k = 0, bad = 0;
  for_each_index(canonical_shape(inst.y.view, false),
                 [&](const std::array<std::int64_t, 5>& i) { bad += element(inst.y, i) != ref[k++]; });
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " elements differ from the exact sums for " << p.describe();
}

void random_sweep(std::mt19937_64& rng, int reps, const std::function<void(const Case&, Fill)>& check) {
  for (DType t : kAllDtypes)
    for (Layout fmt : kDataFormats)
      for (Layout ffmt : kFilterFormats)
        for (int rep = 0; rep < reps; ++rep) {
          Case c = random_case(rng, t, fmt, ffmt);
          c.strided_views = rep == 3;
          if (rep == 2 || rep == 4) c.y_dtype = DType::f32;
          if (rep == 1 && t == DType::f32) c.hf32 = true;
          if (rep == 1 && t != DType::f32) c.overflow = OverflowMode::saturate;
          check(c, rep % 2 ? Fill::random : Fill::small_integers);
          if (::testing::Test::HasFatalFailure()) return;
        }
}

::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b) {
  const std::size_t size = dtype_size(a.view.dtype);
  std::int64_t bad = 0;
  for_each_index(a.view.shape, [&](const std::array<std::int64_t, 5>& i) {
    std::int64_t at = 0, bt = 0;
    for (int d = 0; d < 5; ++d) {
      at += i[d] * a.view.strides[d];
      bt += i[d] * b.view.strides[d];
    }
    if (std::memcmp(static_cast<const unsigned char*>(a.view.data) + at * static_cast<std::int64_t>(size),
                    static_cast<const unsigned char*>(b.view.data) + bt * static_cast<std::int64_t>(size),
                    size))
      ++bad;
  });
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " elements differ bitwise";
}

std::vector<double> brute_force_scatter(const Case& c, const Instance& inst) {
  const auto o = c.out();
  const std::int64_t Cin_g = c.Cin / c.groups, Cout_g = c.Cout / c.groups;
  std::vector<double> y(static_cast<std::size_t>(c.N * c.Cin * c.in[0] * c.in[1] * c.in[2]), 0.0);
  auto filter_at = [&](std::int64_t co, std::int64_t ci, std::int64_t kd, std::int64_t kh, std::int64_t kw) {
    // Filters are read by position in their own layout, independently of the library's canonicalisation.
    const TensorView& v = inst.filter.view;
    std::array<std::int64_t, 5> at{};
    if (v.layout == Layout::NCDHW) at = {co, ci, kd, kh, kw};
    if (v.layout == Layout::NDHWC) at = {co, kd, kh, kw, ci};
    if (v.layout == Layout::DHWCN) at = {kd, kh, kw, ci, co};
    std::int64_t offset = 0;
    for (int i = 0; i < 5; ++i) offset += at[i] * v.strides[i];
    return static_cast<double>(numeric::load_f32(v.dtype, v.data, offset));
  };
  for (std::int64_t n = 0; n < c.N; ++n)
    for (std::int64_t co = 0; co < c.Cout; ++co)
      for (std::int64_t od = 0; od < o[0]; ++od)
        for (std::int64_t oh = 0; oh < o[1]; ++oh)
          for (std::int64_t ow = 0; ow < o[2]; ++ow) {
            double g = element(inst.dy, {n, co, od, oh, ow});
            if (c.hf32) g = round_hf32(g);
            const std::int64_t group = co / Cout_g;
            for (std::int64_t ci = 0; ci < Cin_g; ++ci)
              for (std::int64_t kd = 0; kd < c.kernel[0]; ++kd)
                for (std::int64_t kh = 0; kh < c.kernel[1]; ++kh)
                  for (std::int64_t kw = 0; kw < c.kernel[2]; ++kw) {
                    const std::int64_t id = od * c.stride[0] + kd * c.dilation[0] - c.pad_front[0];
                    const std::int64_t ih = oh * c.stride[1] + kh * c.dilation[1] - c.pad_front[1];
                    const std::int64_t iw = ow * c.stride[2] + kw * c.dilation[2] - c.pad_front[2];
                    if (id < 0 || ih < 0 || iw < 0 || id >= c.in[0] || ih >= c.in[1] || iw >= c.in[2])
                      continue;
                    double w = filter_at(co, ci, kd, kh, kw);
                    if (c.hf32) w = round_hf32(w);
                    const std::int64_t channel = group * Cin_g + ci;
                    y[static_cast<std::size_t>(
                        (((n * c.Cin + channel) * c.in[0] + id) * c.in[1] + ih) * c.in[2] + iw)] += g * w;
                  }
          }
  return y;
}

}  // namespace conv3d_dx::testing
