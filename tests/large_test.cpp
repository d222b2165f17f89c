// 64-bit indexing end to end: a y of more than 2^31 elements (2 x 4 x 650^3 bf16 values, 4.4 GB) through
// validate, Plan and the engine the CPU gets by default; sampled elements — around linear index 2^31, at the
// end of y, at each channel plane's start and at random — checked against sums computed here in float64.
// About 6 GB of memory and a few seconds (bf16: the engines store it with vector code; the portable engine
// takes ~30 s at this size, so it is left to the sweeps of small problems).
#include <cmath>
#include <cstring>

#include "numeric/numeric.hpp"
#include "reference/accuracy.hpp"
#include "support/testing.hpp"

namespace conv3d_dx::testing {
namespace {

TEST(LargeY, MoreThan2To31ElementsAreIndexedIn64Bits) {
  Case c = with_dtype(Case{}, DType::bf16);
  c.N = 2;
  c.Cin = 4;
  c.Cout = 4;
  c.in = {650, 650, 650};
  c.kernel = {2, 2, 2};  // with stride 2 every y element gets exactly one tap per axis: little work
  c.stride = {2, 2, 2};
  c.data_format = Layout::NCDHW;
  const std::int64_t y_elements = c.N * c.Cin * c.in[0] * c.in[1] * c.in[2];
  ASSERT_GT(y_elements, std::int64_t{1} << 31);

  // The tensors, with small integers from a cheap generator: 275 million dy elements.
  const auto o = c.out();
  Tensor dy = make_tensor(c.dtype, c.data_format, {c.N, c.Cout, o[0], o[1], o[2]}, false, false);
  Tensor w = make_tensor(c.dtype, c.filter_format, {c.Cout, c.Cin, 2, 2, 2}, true, false);
  std::uint16_t codes[7];  // -3 .. 3
  for (int v = -3; v <= 3; ++v)
    numeric::store_f32(c.dtype, codes, v + 3, static_cast<float>(v), OverflowMode::ieee);
  std::uint64_t state = 0x9E3779B97F4A7C15u;
  for (Tensor* t : {&dy, &w}) {
    auto* cells = reinterpret_cast<std::uint16_t*>(t->bytes.data());
    for (std::size_t i = 0; i < t->bytes.size() / 2; ++i) {
      state = state * 6364136223846793005u + 1442695040888963407u;
      cells[i] = codes[(state >> 33) % 7];
    }
  }

  ProblemSpec spec;
  spec.attrs.data_format = Layout::NCDHW;
  spec.attrs.input_size = {c.N, c.Cin, c.in[0], c.in[1], c.in[2]};
  spec.attrs.strides = {1, 1, 2, 2, 2};
  spec.out_backprop = dy.view;
  spec.filter = w.view;
  std::vector<std::uint16_t> y(static_cast<std::size_t>(y_elements));
  spec.y = TensorView::contiguous(y.data(), c.dtype, Layout::NCDHW, {c.N, c.Cin, c.in[0], c.in[1], c.in[2]});
  const Problem p = validate(spec);

  // Linear indices to check: across 2^31, the last ones, one per channel plane start and random ones.
  std::vector<std::int64_t> samples;
  for (std::int64_t d = -3; d <= 3; ++d) samples.push_back((std::int64_t{1} << 31) + d);
  for (std::int64_t d = 1; d <= 4; ++d) samples.push_back(y_elements - d);
  for (std::int64_t plane = 0; plane < c.N * c.Cin; ++plane)
    samples.push_back(plane * c.in[0] * c.in[1] * c.in[2]);
  std::mt19937_64 rng(41);
  for (int i = 0; i < 200; ++i)
    samples.push_back(std::uniform_int_distribution<std::int64_t>(0, y_elements - 1)(rng));

  {
    std::memset(y.data(), 0xA5, y.size() * 2);
    Plan plan(p);
    plan.execute(dy.view.data, w.view.data, y.data());
    for (const std::int64_t i : samples) {
      const std::int64_t x = i % c.in[2], h = i / c.in[2] % c.in[1], d = i / (c.in[2] * c.in[1]) % c.in[0];
      const std::int64_t ch = i / (c.in[2] * c.in[1] * c.in[0]) % c.Cin,
                         n = i / (c.in[2] * c.in[1] * c.in[0] * c.Cin);
      // The one tap per axis: kernel index = position mod 2, dy index = position / 2.
      double sum = 0, magnitude = 0;
      for (std::int64_t co = 0; co < c.Cout; ++co) {
        const double g = element(dy, {n, co, d / 2, h / 2, x / 2});
        const std::int64_t at = co * w.view.strides[0] + ch * w.view.strides[1] + d % 2 * w.view.strides[2] +
                                h % 2 * w.view.strides[3] + x % 2 * w.view.strides[4];
        const double term = g * numeric::load_f32(c.dtype, w.view.data, at);
        sum += term;
        magnitude += std::fabs(term);
      }
      const double got = numeric::load_f32(c.dtype, y.data(), i);
      ASSERT_TRUE(reference::acceptable(c.dtype, OverflowMode::ieee, sum,
                                        reference::fp32_allowance(magnitude, c.Cout), got))
          << plan.engine_name() << ": y[" << i << "] = " << got << ", expected " << sum;
    }
    // Nothing left unwritten: no canary anywhere (0xA5A5 is bf16 -2.87e-16, not a sum of products of
    // integers, so a correct y never holds it).
    std::int64_t canaries = 0;
    for (const std::uint16_t v : y) canaries += v == 0xA5A5;
    EXPECT_EQ(canaries, 0) << plan.engine_name();
  }
}

}  // namespace
}  // namespace conv3d_dx::testing
