// The accuracy rule itself (src/reference/accuracy.hpp): the fp32 allowance's value, results just inside and
// just outside the band for fp32 and every lower-precision y and both overflow modes, non-finite sums; and
// data on which a correct fp32 sum uses almost all of the allowance (so it must be a bound, not an estimate).
#include "reference/accuracy.hpp"

#include <cfloat>
#include <cmath>

#include "common/engine.hpp"
#include "numeric/numeric.hpp"
#include "support/testing.hpp"

namespace conv3d_dx::testing {
namespace {

using reference::acceptable;
using reference::fp32_allowance;

constexpr double kU = 0x1p-24;

// gamma(n) = n u / (1 - n u) times the magnitude: the bound, not more than a hair above it.
TEST(AccuracyRule, Fp32AllowanceIsGammaNTimesTheMagnitude) {
  for (std::int64_t n : {1, 2, 3, 27, 1728, 1 << 20}) {
    const double nu = static_cast<double>(n) * kU, gamma = nu / (1 - nu);
    for (double magnitude : {1.0, 3.5, 1e30}) {
      const double a = fp32_allowance(magnitude, n);
      EXPECT_GE(a, gamma * magnitude) << n;
      EXPECT_LE(a, gamma * magnitude * (1 + 0x1p-19)) << n;
    }
  }
  EXPECT_EQ(fp32_allowance(1.0, 0), fp32_allowance(1.0, 1));  // no terms: as one
  EXPECT_GT(fp32_allowance(0.0, 4), 0.0);                     // subnormal rounding, 2^-150 per step
  EXPECT_LT(fp32_allowance(0.0, 4), 0x1p-140);
  EXPECT_EQ(fp32_allowance(1.0, std::int64_t{1} << 24), INFINITY);  // n u >= 1: no bound
}

TEST(AccuracyRule, Fp32JustInsideAndJustOutside) {
  const double exact = 3.0, magnitude = 10.0;
  for (std::int64_t n : {1, 8, 300}) {
    const double a = fp32_allowance(magnitude, n);
    const double edge = a + kU * exact;  // the allowance plus fp32's rounding of the result
    for (double sign : {1.0, -1.0}) {
      EXPECT_TRUE(acceptable(DType::f32, OverflowMode::ieee, exact, a, exact + sign * edge * (1 - 1e-9)))
          << n;
      EXPECT_FALSE(acceptable(DType::f32, OverflowMode::ieee, exact, a, exact + sign * edge * (1 + 1e-9)))
          << n;
    }
    EXPECT_FALSE(acceptable(DType::f32, OverflowMode::ieee, exact, a, NAN));
  }
}

// Two neighbouring values lo < hi of a dtype and their midpoint: with a tiny allowance only the correctly
// rounded one is accepted; with one reaching across the midpoint both are; the next value up never is.
TEST(AccuracyRule, LowPrecisionOutputsAreOneRoundingOfTheBand) {
  struct Grid {
    DType t;
    double lo, hi, next;  // consecutive values of t
  };
  const Grid grids[] = {{DType::f16, 1.0, 1.0 + 0x1p-10, 1.0 + 0x1p-9},
                        {DType::bf16, 1.0, 1.0 + 0x1p-7, 1.0 + 0x1p-6},
                        {DType::fp8_e4m3fn, 1.0, 1.125, 1.25},
                        {DType::hif8, 1.0, 1.125, 1.25}};
  for (const Grid& g : grids) {
    SCOPED_TRACE(to_string(g.t));
    for (double x : {g.lo, g.hi, g.next}) {  // the grid is the dtype's: each value stores as itself
      unsigned char cell[4];
      numeric::store_f32(g.t, cell, 0, static_cast<float>(x), OverflowMode::ieee);
      ASSERT_EQ(numeric::load_f32(g.t, cell, 0), x);
    }
    const double mid = (g.lo + g.hi) / 2, step = g.hi - g.lo;
    const double above = mid + step / 64;  // rounds to hi
    EXPECT_TRUE(acceptable(g.t, OverflowMode::ieee, above, step / 128, g.hi));
    EXPECT_FALSE(acceptable(g.t, OverflowMode::ieee, above, step / 128, g.lo));
    EXPECT_TRUE(acceptable(g.t, OverflowMode::ieee, above, step / 32, g.lo));  // the band crosses mid
    EXPECT_FALSE(acceptable(g.t, OverflowMode::ieee, above, step / 32, g.next));
    EXPECT_FALSE(acceptable(g.t, OverflowMode::ieee, above, step / 32, NAN));
  }
}

TEST(AccuracyRule, OverflowFollowsTheMode) {
  // fp16: beyond 65504 is inf, or 65504 saturated; fp8: NaN (no inf), or 448 saturated.
  EXPECT_TRUE(acceptable(DType::f16, OverflowMode::ieee, 1e6, 1.0, INFINITY));
  EXPECT_FALSE(acceptable(DType::f16, OverflowMode::ieee, 1e6, 1.0, 65504.0));
  EXPECT_TRUE(acceptable(DType::f16, OverflowMode::saturate, 1e6, 1.0, 65504.0));
  EXPECT_FALSE(acceptable(DType::f16, OverflowMode::saturate, 1e6, 1.0, INFINITY));
  EXPECT_TRUE(acceptable(DType::fp8_e4m3fn, OverflowMode::ieee, 1e4, 1.0, NAN));
  EXPECT_FALSE(acceptable(DType::fp8_e4m3fn, OverflowMode::ieee, 1e4, 1.0, 448.0));
  EXPECT_TRUE(acceptable(DType::fp8_e4m3fn, OverflowMode::saturate, 1e4, 1.0, 448.0));
  EXPECT_FALSE(acceptable(DType::fp8_e4m3fn, OverflowMode::saturate, 1e4, 1.0, NAN));
  EXPECT_TRUE(acceptable(DType::f16, OverflowMode::ieee, -1e6, 1.0, -INFINITY));
  EXPECT_FALSE(acceptable(DType::f16, OverflowMode::ieee, -1e6, 1.0, INFINITY));
}

TEST(AccuracyRule, NonFiniteSumsMustComeOutExactly) {
  EXPECT_TRUE(acceptable(DType::f32, OverflowMode::ieee, NAN, 1.0, NAN));
  EXPECT_FALSE(acceptable(DType::f32, OverflowMode::ieee, NAN, 1.0, 0.0));
  EXPECT_TRUE(acceptable(DType::f32, OverflowMode::ieee, INFINITY, 1.0, INFINITY));
  EXPECT_FALSE(acceptable(DType::f32, OverflowMode::ieee, INFINITY, 1.0, FLT_MAX));
  EXPECT_FALSE(acceptable(DType::f32, OverflowMode::ieee, INFINITY, 1.0, -INFINITY));
  // Saturation applies to infinite sums too.
  EXPECT_TRUE(acceptable(DType::f16, OverflowMode::saturate, -INFINITY, 1.0, -65504.0));
  EXPECT_FALSE(acceptable(DType::f16, OverflowMode::saturate, -INFINITY, 1.0, -INFINITY));
}

// y[0] = 1 + 63 t with t just under half an ulp of 1: summed in order, every addition rounds back to 1, an
// error of 63 t = 0.98 of gamma(64) (1 - 2^-10 of 63 units). Every engine's result must pass; the direct
// engine's, summed in exactly that order, is 1, beyond the old allowance (2 + log2 n) units plus a rounding.
TEST(AccuracyRule, AnOrderedFp32SumReachesAlmostAllOfTheAllowance) {
  Case c;
  c.Cin = 1;
  c.Cout = 64;
  c.in = {1, 1, 1};
  c.kernel = {1, 1, 1};
  c.data_format = Layout::NCDHW;
  const double t = 0x1p-24 * (1 - 0x1p-10);
  for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::best}) {
    if (isa != Isa::best && !cpu_supports(isa)) continue;
    std::mt19937_64 rng(1);
    Instance inst = instantiate(c, rng, Fill::small_integers);
    for (int co = 0; co < 64; ++co) {
      numeric::store_f32(DType::f32, inst.dy.view.data, co, co == 0 ? 1.0f : static_cast<float>(t),
                         OverflowMode::ieee);
      numeric::store_f32(DType::f32, inst.filter.view.data, co, 1.0f, OverflowMode::ieee);
    }
    Options o;
    o.isa = isa;
    Plan plan(validate(inst.spec), o);
    plan.execute(inst.dy.view.data, inst.filter.view.data, inst.y.view.data);
    EXPECT_TRUE(matches_reference(plan.problem(), inst)) << plan.engine_name();
    if (isa == Isa::portable) {
      const double exact = 1 + 63 * t, magnitude = exact, got = element(inst.y, {0, 0, 0, 0, 0});
      EXPECT_EQ(got, 1.0);
      EXPECT_GT(std::fabs(got - exact), (2 + 6) * kU * magnitude + kU * exact) << "the old allowance";
      EXPECT_GT(std::fabs(got - exact), 0.98 * fp32_allowance(magnitude, 64));
    }
  }
}

}  // namespace
}  // namespace conv3d_dx::testing
