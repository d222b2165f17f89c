// The portable `direct` engine — the default on CPUs without AVX2 and the fallback for strides the fast
// engines decline — against the float64 reference like the fast engines: random sweeps of every dtype and
// layout (groups, depthwise, dilations, strides, asymmetric pads, strided views, HF32, saturation, fp32 and
// 8-bit outputs), exact on small integers, filters that differ per group, HF32 on data whose rounding shows,
// saturation of every low-precision output, and the same bits for 1, 2 and 3 threads.
#include <cfloat>
#include <cmath>

#include "common/engine.hpp"
#include "cpu/direct.hpp"
#include "numeric/numeric.hpp"
#include "reference/reference.hpp"
#include "support/testing.hpp"

namespace conv3d_dx::testing {
namespace {

void run_direct(const Problem& p, Instance& inst, int threads = 2) {
  std::string why;
  std::unique_ptr<EngineImpl> engine = make_direct_engine(EngineRequest{p, threads, Isa::portable}, why);
  ASSERT_TRUE(engine) << why;
  std::vector<unsigned char> workspace(engine->workspace_bytes());
  engine->pack_filter(inst.filter.view.data);
  engine->execute(inst.dy.view.data, inst.y.view.data, workspace.data());
}

TEST(DirectEngine, RandomSweepAllDtypesAndLayouts) {
  std::mt19937_64 rng(211);
  int cases = 0, grouped = 0, hf32 = 0, saturated = 0, eight_bit_y = 0;
  random_sweep(rng, 5, [&](const Case& c, Fill fill) {
    Instance inst = instantiate(c, rng, fill);
    const Problem p = validate(inst.spec);
    run_direct(p, inst);
    ASSERT_TRUE(matches_reference(p, inst)) << c.name();
    if (fill == Fill::small_integers && c.y_dtype == DType::f32) {
      ASSERT_TRUE(exactly_reference(p, inst)) << c.name();
    }
    ++cases;
    grouped += c.groups > 1;
    hf32 += c.hf32;
    saturated += c.overflow == OverflowMode::saturate;
    eight_bit_y += c.y_dtype == DType::hif8 || c.y_dtype == DType::fp8_e4m3fn;
  });
  EXPECT_EQ(cases, 150);
  // What the sweep is for: each of these must actually occur.
  EXPECT_GE(grouped, 60);
  EXPECT_EQ(hf32, 6);
  EXPECT_EQ(saturated, 24);
  EXPECT_EQ(eight_bit_y, 36);
}

// Three groups with different filters, and depthwise with a channel multiplier: a filter read from the
// wrong group gives wrong sums.
TEST(DirectEngine, EachGroupUsesItsOwnFilter) {
  std::mt19937_64 rng(223);
  for (Layout fmt : kDataFormats)
    for (Layout ffmt : kFilterFormats) {
      Case c;
      c.data_format = fmt;
      c.filter_format = ffmt;
      c.groups = 3;
      c.Cin = 6;
      c.Cout = 9;
      c.in = {3, 4, 5};
      c.kernel = {2, 2, 3};
      c.dilation = {2, 1, 1};
      c.stride = {1, 2, 1};
      c.pad_front = {1, 0, 1};
      c.pad_back = {0, 1, 1};
      for (const std::int64_t depthwise : {0, 1}) {
        if (depthwise) {
          c.groups = c.Cin = 5;
          c.Cout = 10;
        }
        Instance inst = instantiate(c, rng, Fill::small_integers);
        const Problem p = validate(inst.spec);
        run_direct(p, inst);
        ASSERT_TRUE(exactly_reference(p, inst)) << c.name();
      }
    }
}

// HF32 keeps 10 mantissa bits of both inputs. With full-precision fp32 data and 2 products per element the
// fp32 allowance is ~2^-23 of the sum, far below HF32's ~2^-11, so skipping the rounding of either input
// fails; and the result differs from the unrounded one.
TEST(DirectEngine, Hf32RoundsBothInputs) {
  std::mt19937_64 rng(227);
  for (Layout fmt : kDataFormats) {
    Case c;
    c.data_format = fmt;
    c.Cin = 3;
    c.Cout = 2;
    c.in = {2, 3, 4};
    c.kernel = {1, 1, 1};
    c.hf32 = true;
    Instance inst = instantiate(c, rng, Fill::random);
    const Problem p = validate(inst.spec);
    run_direct(p, inst);
    ASSERT_TRUE(matches_reference(p, inst)) << c.name();
    Instance plain = inst;
    plain.spec.attrs.enable_hf32 = false;
    plain.spec.out_backprop = plain.dy.view;
    plain.spec.filter = plain.filter.view;
    plain.spec.y = plain.y.view;
    const Problem q = validate(plain.spec);
    run_direct(q, plain);
    ASSERT_TRUE(matches_reference(q, plain));
    EXPECT_FALSE(same_bits(inst.y, plain.y)) << "the data do not show HF32 rounding";
  }
}

// Sums beyond each low-precision type's range: saturate gives the largest finite value, ieee inf (fp8 NaN).
TEST(DirectEngine, SaturateAndIeeeOverflow) {
  for (DType t : {DType::f16, DType::bf16, DType::hif8, DType::fp8_e4m3fn})
    for (OverflowMode mode : {OverflowMode::ieee, OverflowMode::saturate}) {
      Case c = with_dtype(Case{}, t);
      c.Cin = c.Cout = 1;
      c.in = {1, 1, 3};
      c.kernel = {1, 1, 1};
      c.overflow = mode;
      std::mt19937_64 rng(229);
      Instance inst = instantiate(c, rng, Fill::small_integers);
      const float dy[] = {FLT_MAX, -FLT_MAX, 1.0f};  // stored saturated: the dtype's largest value
      for (int i = 0; i < 3; ++i) numeric::store_f32(t, inst.dy.view.data, i, dy[i], OverflowMode::saturate);
      numeric::store_f32(t, inst.filter.view.data, 0, 2.0f, OverflowMode::ieee);
      const Problem p = validate(inst.spec);
      run_direct(p, inst);
      ASSERT_TRUE(matches_reference(p, inst)) << c.name();
      const double big = element(inst.y, {0, 0, 0, 0, 0}), small = element(inst.y, {0, 0, 0, 0, 1});
      if (mode == OverflowMode::saturate) {
        EXPECT_EQ(big, element(inst.dy, {0, 0, 0, 0, 0})) << c.name();
        EXPECT_EQ(small, -big) << c.name();
      } else {
        EXPECT_FALSE(std::isfinite(big)) << c.name();
        EXPECT_FALSE(std::isfinite(small)) << c.name();
      }
      EXPECT_EQ(element(inst.y, {0, 0, 0, 0, 2}), 2.0) << c.name();
    }
}

TEST(DirectEngine, SameBitsForOneTwoAndThreeThreads) {
  std::mt19937_64 rng(233);
  for (DType t : {DType::f32, DType::bf16, DType::hif8})
    for (Layout fmt : kDataFormats) {
      Case c = random_case(rng, t, fmt, Layout::NCDHW);
      c.N = 2;
      Instance inst = instantiate(c, rng, Fill::random);
      const Problem p = validate(inst.spec);
      run_direct(p, inst, 1);
      const Tensor one = inst.y;
      for (int threads : {2, 3}) {
        fill_canary(inst.y);
        run_direct(p, inst, threads);
        EXPECT_TRUE(same_bits(one, inst.y)) << c.name() << ", " << threads << " threads";
      }
    }
}

// Plan runs it when asked for the portable ISA.
TEST(DirectEngine, IsWhatPlanRunsForThePortableIsa) {
  std::mt19937_64 rng(239);
  Instance inst = instantiate(random_case(rng, DType::bf16, Layout::NDHWC, Layout::DHWCN), rng, Fill::random);
  Options o;
  o.isa = Isa::portable;
  Plan plan(validate(inst.spec), o);
  EXPECT_EQ(plan.engine_name(), "direct");
  plan.execute(inst.dy.view.data, inst.filter.view.data, inst.y.view.data);
  EXPECT_TRUE(matches_reference(plan.problem(), inst));
}

}  // namespace
}  // namespace conv3d_dx::testing
