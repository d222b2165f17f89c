// The oracle checked by a different algorithm: a brute-force scatter (loop over dy and the taps, add into
// y) with its own input decoding path for HF32. Small-integer data keeps every sum exact, so the two must
// agree exactly.
#include "reference/reference.hpp"

#include <bit>
#include <cmath>

#include "numeric/numeric.hpp"
#include "support/testing.hpp"

namespace conv3d_dx::testing {
namespace {

double hf32(double v) {
  const auto u = std::bit_cast<std::uint32_t>(static_cast<float>(v));
  return std::bit_cast<float>((u + 0x1000u) & ~0x1FFFu);
}

// y[n][c][d][h][w] in canonical contiguous order, scattered from every dy element through every tap.
std::vector<double> scatter(const Case& c, const Instance& inst) {
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
            if (c.hf32) g = hf32(g);
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
                    if (c.hf32) w = hf32(w);
                    const std::int64_t channel = group * Cin_g + ci;
                    y[static_cast<std::size_t>(
                        (((n * c.Cin + channel) * c.in[0] + id) * c.in[1] + ih) * c.in[2] + iw)] += g * w;
                  }
          }
  return y;
}

TEST(Reference, AgreesExactlyWithBruteForceScatter) {
  std::mt19937_64 rng(11);
  int cases = 0;
  for (DType t : kAllDtypes)
    for (Layout fmt : kDataFormats)
      for (Layout ffmt : kFilterFormats)
        for (int rep = 0; rep < 4; ++rep) {
          Case c = random_case(rng, t, fmt, ffmt);
          c.strided_views = rep % 2 == 1;
          const Instance inst = instantiate(c, rng, Fill::small_integers);
          const Problem p = validate(inst.spec);
          const auto got = reference::compute(p, inst.dy.view.data, inst.filter.view.data);
          ASSERT_EQ(got, scatter(c, inst)) << c.name();
          ++cases;
        }
  EXPECT_EQ(cases, 5 * 2 * 3 * 4);
}

TEST(Reference, Hf32RoundsBothInputsBeforeMultiplying) {
  std::mt19937_64 rng(12);
  Case c = random_case(rng, DType::f32, Layout::NCDHW, Layout::NCDHW);
  c.hf32 = true;
  Instance inst = instantiate(c, rng, Fill::random);  // random fp32 values carry low mantissa bits
  const Problem p = validate(inst.spec);
  const auto got = reference::compute(p, inst.dy.view.data, inst.filter.view.data);
  const auto want = scatter(c, inst);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-12 * (1 + std::fabs(want[i]))) << i;  // summation order differs
  c.hf32 = false;
  inst.spec.attrs.enable_hf32 = false;
  const auto plain = reference::compute(validate(inst.spec), inst.dy.view.data, inst.filter.view.data);
  EXPECT_NE(plain, got) << "HF32 rounding must change results on data with low mantissa bits";
}

TEST(Reference, ReportsSumOfMagnitudes) {
  Case c;
  c.Cin = c.Cout = 1;
  c.in = {1, 1, 3};
  c.kernel = {1, 1, 2};
  c.pad_front = {0, 0, 1};
  c.pad_back = {0, 0, 0};
  std::mt19937_64 rng(13);
  Instance inst = instantiate(c, rng, Fill::small_integers);
  // dy = [2, -3, 1] (Wo = 3), w = [5, -1]: y[iw] = dy[iw] * w[1] + dy[iw + 1] * w[0].
  const float dy[] = {2, -3, 1}, w[] = {5, -1};
  for (int i = 0; i < 3; ++i) numeric::store_f32(DType::f32, inst.dy.view.data, i, dy[i], OverflowMode::ieee);
  for (int i = 0; i < 2; ++i)
    numeric::store_f32(DType::f32, inst.filter.view.data, i, w[i], OverflowMode::ieee);
  std::vector<double> magnitude;
  const auto y =
      reference::compute(validate(inst.spec), inst.dy.view.data, inst.filter.view.data, &magnitude);
  EXPECT_EQ(y, (std::vector<double>{-2 - 15, 3 + 5, -1}));
  EXPECT_EQ(magnitude, (std::vector<double>{2 + 15, 3 + 5, 1}));
}

}  // namespace
}  // namespace conv3d_dx::testing
