// The oracle checked by a different algorithm: a brute-force scatter (loop over dy and the taps, add into
// y) with its own input decoding path for HF32. Small-integer data keeps every sum exact, so the two must
// agree exactly.
#include "reference/reference.hpp"

#include <cmath>

#include "numeric/numeric.hpp"
#include "support/testing.hpp"

namespace conv3d_dx::testing {
namespace {

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
          ASSERT_EQ(got, brute_force_scatter(c, inst)) << c.name();
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
  const auto want = brute_force_scatter(c, inst);
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
