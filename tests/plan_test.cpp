// The Plan API end to end: whichever engine the CPU gets by default, and the reference engine, against the
// oracle over random sweeps of every dtype and layout, plus the edge cases of docs/operator.md (edge
// shapes, unreached positions, huge strides, 4-value input_size).
#include <atomic>
#include <cfloat>
#include <cmath>
#include <thread>

#include "common/engine.hpp"
#include "numeric/numeric.hpp"
#include "support/testing.hpp"

namespace conv3d_dx::testing {
namespace {

// Runs the case through a Plan with the given options; y holds the result.
Problem run(Instance& inst, const Options& options = {}) {
  const Problem p = validate(inst.spec);
  Plan plan(p, options);
  plan.execute(inst.dy.view.data, inst.filter.view.data, inst.y.view.data);
  return p;
}

class Sweep : public ::testing::TestWithParam<std::tuple<DType, Layout>> {};

TEST_P(Sweep, DefaultEngineMatchesReference) {
  const auto [dtype, fmt] = GetParam();
  std::mt19937_64 rng(100 + static_cast<int>(dtype) * 2 + static_cast<int>(fmt));
  for (Layout ffmt : kFilterFormats)
    for (int rep = 0; rep < 6; ++rep) {
      Case c = random_case(rng, dtype, fmt, ffmt);
      c.strided_views = rep % 3 == 2;
      if (rep == 4) c.y_dtype = DType::f32;  // fp32 y for any input dtype
      const Fill kind = rep % 2 ? Fill::random : Fill::small_integers;
      Instance inst = instantiate(c, rng, kind);
      const Problem p = run(inst);
      ASSERT_TRUE(matches_reference(p, inst)) << c.name();
    }
}

INSTANTIATE_TEST_SUITE_P(AllDtypesAndLayouts, Sweep,
                         ::testing::Combine(::testing::ValuesIn(kAllDtypes),
                                            ::testing::ValuesIn(kDataFormats)),
                         [](const auto& test) {
                           return std::string(to_string(std::get<0>(test.param))) + "_" +
                                  to_string(std::get<1>(test.param));
                         });

// The reference engine (Isa::reference) against the brute-force scatter, not against reference::compute
// it is built on: on small integers every sum is exact, so y is the scatter's sum rounded once to y's dtype.
TEST(Plan, ReferenceEngineMatchesBruteForceScatter) {
  std::mt19937_64 rng(7);
  int compared = 0;
  for (DType t : kAllDtypes)
    for (int rep = 0; rep < 3; ++rep) {
      Case c = random_case(rng, t, rep == 1 ? Layout::NDHWC : Layout::NCDHW, kFilterFormats[rep]);
      c.strided_views = rep == 2;
      if (rep == 1) c.overflow = OverflowMode::saturate;
      Instance inst = instantiate(c, rng, Fill::small_integers);
      Options o;
      o.isa = Isa::reference;
      const Problem p = validate(inst.spec);
      Plan plan(p, o);
      EXPECT_EQ(plan.engine_name(), "reference");
      plan.execute(inst.dy.view.data, inst.filter.view.data, inst.y.view.data);
      const std::vector<double> want = brute_force_scatter(c, inst);
      std::size_t k = 0;
      for (std::int64_t n = 0; n < c.N; ++n)
        for (std::int64_t ch = 0; ch < c.Cin; ++ch)
          for (std::int64_t d = 0; d < c.in[0]; ++d)
            for (std::int64_t h = 0; h < c.in[1]; ++h)
              for (std::int64_t w = 0; w < c.in[2]; ++w, ++compared) {
                unsigned char cell[4];
                numeric::store_f32(c.y_dtype, cell, 0, static_cast<float>(want[k++]), c.overflow);
                const double got = element(inst.y, {n, ch, d, h, w});
                const double expected = numeric::load_f32(c.y_dtype, cell, 0);
                ASSERT_TRUE(got == expected || (std::isnan(got) && std::isnan(expected)))
                    << c.name() << " at " << k - 1 << ": " << got << ", scatter gives " << expected;
              }
      EXPECT_TRUE(padding_intact(inst.y)) << c.name();
    }
  EXPECT_GT(compared, 1000);
}

TEST(Plan, StrideLargerThanKernelLeavesUnreachedPositionsZero) {
  Case c;
  c.Cin = 3;
  c.Cout = 2;
  c.in = {7, 9, 8};
  c.kernel = {2, 1, 2};
  c.stride = {3, 4, 3};
  c.pad_front = {1, 0, 2};
  std::mt19937_64 rng(8);
  Instance inst = instantiate(c, rng, Fill::small_integers);
  const Problem p = run(inst);
  ASSERT_TRUE(matches_reference(p, inst));
  int zeros = 0;
  for (std::int64_t d = 0; d < c.in[0]; ++d)
    for (std::int64_t h = 0; h < c.in[1]; ++h)
      for (std::int64_t w = 0; w < c.in[2]; ++w) {
        const bool reached = (d + 1) % 3 < 2 && h % 4 == 0 && (w + 2) % 3 < 2 && (d + 1) / 3 < p.dy_size[0] &&
                             h / 4 < p.dy_size[1] && (w + 2) / 3 < p.dy_size[2];
        if (reached) continue;
        for (std::int64_t ch = 0; ch < c.Cin; ++ch) {
          const double v = element(inst.y, {0, ch, d, h, w});
          ASSERT_EQ(v, 0.0);
          ASSERT_FALSE(std::signbit(v)) << "unreached positions are +0";
          ++zeros;
        }
      }
  EXPECT_GT(zeros, 100);
}

TEST(Plan, EdgeShapes) {
  std::mt19937_64 rng(9);
  std::vector<Case> cases;
  Case k1;  // kernel 1, stride 2
  k1.kernel = {1, 1, 1};
  k1.stride = {2, 2, 2};
  k1.in = {4, 5, 6};
  cases.push_back(k1);
  Case ones;  // every size 1
  ones.Cin = ones.Cout = 1;
  ones.in = {1, 1, 1};
  ones.kernel = {1, 1, 1};
  cases.push_back(ones);
  Case wide;  // Cout > 1000
  wide.Cout = 1031;
  wide.Cin = 3;
  wide.in = {2, 3, 3};
  wide.kernel = {2, 2, 2};
  wide.pad_front = {1, 0, 1};
  cases.push_back(wide);
  Case flat;  // a 2-D problem written as D = 1
  flat.in = {1, 6, 6};
  flat.kernel = {1, 3, 3};
  flat.stride = {1, 2, 2};
  flat.pad_back = {0, 1, 1};
  cases.push_back(flat);
  for (const Case& base : cases)
    for (DType t : kAllDtypes)
      for (Layout fmt : kDataFormats) {
        Case c = with_dtype(base, t);
        c.data_format = fmt;
        Instance inst = instantiate(c, rng, Fill::small_integers);
        const Problem p = run(inst);
        ASSERT_TRUE(matches_reference(p, inst)) << c.name();
      }
}

TEST(Plan, HugeStridesStillCompute) {
  // Engines whose tables grow with the stride decline; one that does not depend on it takes over.
  Case c;
  c.Cin = c.Cout = 16;
  c.in = {2, 3, 5};
  c.kernel = {1, 2, 1};
  c.stride = {2147483647, 1, 2147483647};
  std::mt19937_64 rng(19);
  for (DType t : {DType::f32, DType::bf16}) {
    Instance inst = instantiate(with_dtype(c, t), rng, Fill::random);
    const Problem p = run(inst);
    EXPECT_TRUE(matches_reference(p, inst)) << c.name();
  }
}

TEST(Plan, FourValueInputSize) {
  Case c;
  c.in = {1, 7, 5};
  c.kernel = {1, 3, 2};
  c.stride = {1, 2, 1};
  c.pad_front = {0, 1, 0};
  std::mt19937_64 rng(10);
  for (Layout fmt : kDataFormats) {
    c.data_format = fmt;
    Instance inst = instantiate(c, rng, Fill::small_integers);
    inst.spec.attrs.input_size =
        fmt == Layout::NDHWC ? std::vector<std::int64_t>{1, 7, 5, 4} : std::vector<std::int64_t>{1, 4, 7, 5};
    const Problem p = run(inst);
    EXPECT_TRUE(matches_reference(p, inst)) << c.name();
  }
}

TEST(Plan, BitwiseIdenticalForOneAndTwoThreads) {
  std::mt19937_64 rng(14);
  for (DType t : kAllDtypes)
    for (Layout fmt : kDataFormats) {
      Case c = random_case(rng, t, fmt, Layout::NCDHW);
      c.Cin *= 3;
      c.Cout *= 5;
      c.groups = 1;
      Instance inst = instantiate(c, rng, Fill::random);
      Options options;
      options.threads = 1;
      run(inst, options);
      const Tensor one = inst.y;
      fill_canary(inst.y);
      options.threads = 2;
      run(inst, options);
      ASSERT_EQ(one.bytes, inst.y.bytes) << c.name();
    }
}

// Random problems with channel counts of real layers (several channel blocks, partial last blocks, long
// reductions) rather than the sweeps' few channels, through the AVX-512 and AVX2 kernels where the CPU has
// them, on 1 and 3 threads: y matches the reference, and the thread counts give the same bits.
TEST(Plan, RealisticChannelCountsMatchReference) {
  std::mt19937_64 rng(17);
  const auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  // A random case with such channels, drawn again until the reference's multiply-adds stay quick.
  const auto draw = [&](int rep) {
    while (true) {
      const DType t = kAllDtypes[rep % 5];
      Case c = random_case(rng, t, kDataFormats[rep % 2], kFilterFormats[rep % 3]);
      if (c.groups == 1) {
        c.Cin = pick(17, 200);
        c.Cout = pick(17, 260);
      } else if (c.groups == c.Cin) {
        c.groups = c.Cin = pick(17, 80);  // depthwise
        c.Cout = c.groups * pick(1, 2);
      } else {
        c.Cin = c.groups * pick(9, 40);
        c.Cout = c.groups * pick(9, 40);
      }
      if (rep % 4 == 1) c.y_dtype = DType::f32;
      if (rep % 4 == 2 && t != DType::f32) c.overflow = OverflowMode::saturate;
      c.strided_views = rep % 7 == 3;
      const auto o = c.out();
      if (c.N * c.Cout * o[0] * o[1] * o[2] * (c.Cin / c.groups) * c.kernel[0] * c.kernel[1] * c.kernel[2] <=
          15'000'000)
        return c;
    }
  };
  int ran = 0;
  for (const Isa isa : {Isa::avx512, Isa::avx2}) {
    if (!cpu_supports(isa)) continue;
    for (int rep = 0; rep < 20; ++rep) {
      const Case c = draw(rep);
      Instance inst = instantiate(c, rng, rep % 2 ? Fill::random : Fill::small_integers);
      Options options;
      options.isa = isa;
      options.threads = 1;
      const Problem p = run(inst, options);
      ASSERT_TRUE(matches_reference(p, inst)) << to_string(isa) << " " << c.name();
      const Tensor one = inst.y;
      fill_canary(inst.y);
      options.threads = 3;
      run(inst, options);
      ASSERT_TRUE(same_bits(one, inst.y)) << to_string(isa) << " 1 and 3 threads: " << c.name();
      ++ran;
    }
  }
  if (ran == 0) GTEST_SKIP() << "the CPU lacks AVX2: only the portable kernels run here";
}

// One Plan shared by threads: execute_packed calls run side by side, each with the plan's workspace or one
// of its own, while other threads repack the filter; every result is exactly one filter's, never a mixture.
TEST(PlanConcurrency, SharedPlanGivesWholeResultsToEveryThread) {
  std::mt19937_64 rng(16);
  Case c = with_dtype(Case{}, DType::f16);  // fp16 dy is converted: the engine needs a workspace
  c.Cin = 24;
  c.Cout = 20;
  c.in = {4, 9, 11};
  Instance inst = instantiate(c, rng, Fill::random);
  Tensor other = inst.filter;
  fill(other, rng, Fill::random);
  const Problem p = validate(inst.spec);
  Options options;
  options.threads = 2;
  Plan plan(p, options);
  std::vector<Tensor> expected;
  for (const Tensor* w : {&inst.filter, &other}) {
    plan.execute(inst.dy.view.data, w->view.data, inst.y.view.data);
    expected.push_back(inst.y);
  }
  ASSERT_FALSE(same_bits(expected[0], expected[1]));
  if (plan.workspace_bytes() == 0) GTEST_SKIP() << plan.engine_name() << " needs no workspace here";
  plan.pack_filter(inst.filter.view.data);

  std::atomic<int> mixed{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      Tensor y = inst.y;
      for (int i = 0; i < 20; ++i) {
        if (t == 3) {  // repacks, alternating the filters
          const int k = i % 2;
          plan.execute(inst.dy.view.data, (k ? other : inst.filter).view.data, y.view.data);
          wrong += !same_bits(y, expected[static_cast<std::size_t>(k)]);
        } else {
          plan.execute_packed(inst.dy.view.data, y.view.data);
          mixed += !same_bits(y, expected[0]) && !same_bits(y, expected[1]);
        }
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mixed.load(), 0) << "execute_packed results that are neither filter's";
  EXPECT_EQ(wrong.load(), 0) << "execute results that are not their filter's";
}

TEST(Plan, PackOnceExecuteMany) {
  std::mt19937_64 rng(15);
  Case c = random_case(rng, DType::bf16, Layout::NDHWC, Layout::NDHWC);
  Instance inst = instantiate(c, rng, Fill::random);
  const Problem p = validate(inst.spec);
  Plan plan(p);
  EXPECT_THROW(plan.execute_packed(inst.dy.view.data, inst.y.view.data), Error);  // nothing packed yet
  plan.pack_filter(inst.filter.view.data);
  std::vector<unsigned char> workspace(plan.workspace_bytes() + 1);
  for (int run = 0; run < 3; ++run) {
    fill(inst.dy, rng, Fill::random);
    plan.execute_packed(inst.dy.view.data, inst.y.view.data, workspace.data());
    ASSERT_TRUE(matches_reference(p, inst)) << "run " << run;
  }
  // The packed filter is the engine's own copy: changing the caller's filter has no effect until repacked.
  const std::vector<unsigned char> before = inst.y.bytes;
  fill(inst.filter, rng, Fill::random);
  plan.execute_packed(inst.dy.view.data, inst.y.view.data);
  EXPECT_EQ(inst.y.bytes, before);
  plan.pack_filter(inst.filter.view.data);
  plan.execute_packed(inst.dy.view.data, inst.y.view.data);
  EXPECT_TRUE(matches_reference(p, inst));
}

// Plan::execute keeps the filter packed for execute_packed unless Options::keep_filter is false; then
// execute_packed asks for pack_filter first, and works after it. Same on every engine, including the one that
// reads a large filter in place (stream_avx512, where the CPU has it).
TEST(Plan, KeepFilterDecidesWhetherExecuteLeavesItPacked) {
  std::mt19937_64 rng(16);
  Case small = random_case(rng, DType::f32, Layout::NCDHW, Layout::NCDHW), large;
  large.data_format = Layout::NCDHW;
  large.Cin = 256;
  large.Cout = 160;
  large.in = {2, 4, 4};
  large.pad_front = large.pad_back = {1, 1, 1};
  for (const Case& c : {small, large})
    for (bool keep : {true, false}) {
      Instance inst = instantiate(c, rng, Fill::random);
      const Problem p = validate(inst.spec);
      Options o;
      o.keep_filter = keep;
      Plan plan(p, o);
      plan.execute(inst.dy.view.data, inst.filter.view.data, inst.y.view.data);
      ASSERT_TRUE(matches_reference(p, inst)) << plan.engine_name();
      fill_canary(inst.y);
      if (keep) {
        plan.execute_packed(inst.dy.view.data, inst.y.view.data);
      } else {
        try {
          plan.execute_packed(inst.dy.view.data, inst.y.view.data);
          ADD_FAILURE() << plan.engine_name() << ": execute_packed ran without a kept filter";
        } catch (const Error& e) {
          EXPECT_EQ(e.parameter(), "filter");
          EXPECT_TRUE(canary_intact(inst.y)) << "y written by a refused call";
        }
        plan.pack_filter(inst.filter.view.data);
        plan.execute_packed(inst.dy.view.data, inst.y.view.data);
      }
      EXPECT_TRUE(matches_reference(p, inst)) << plan.engine_name() << (keep ? ", kept" : ", packed again");
    }
}

// Both overflow modes, on the default engine and on the reference engine.
TEST(Plan, OverflowModes) {
  Case c;
  c.Cin = c.Cout = 1;
  c.in = {1, 1, 4};
  c.kernel = {1, 1, 1};
  std::mt19937_64 rng(16);
  for (Isa isa : {Isa::best, Isa::reference})
    for (DType t : {DType::f16, DType::bf16, DType::hif8, DType::fp8_e4m3fn})
      for (OverflowMode mode : {OverflowMode::ieee, OverflowMode::saturate}) {
        c = with_dtype(c, t);
        c.overflow = mode;
        Instance inst = instantiate(c, rng, Fill::small_integers);
        // dy = [max, -max, 1, NaN] of the dtype and w = 2: the first two sums overflow the dtype.
        const float dy[] = {FLT_MAX, -FLT_MAX, 1.0f, std::nanf("")};
        for (int i = 0; i < 4; ++i)
          numeric::store_f32(t, inst.dy.view.data, i, dy[i], OverflowMode::saturate);
        if (t == DType::f16 || t == DType::bf16) {  // their saturating stores keep NaN; 8-bit ones give 0
          ASSERT_TRUE(std::isnan(element(inst.dy, {0, 0, 0, 0, 3})));
        }
        numeric::store_f32(t, inst.filter.view.data, 0, 2.0f, OverflowMode::ieee);
        Options options;
        options.isa = isa;
        const Problem p = run(inst, options);
        ASSERT_TRUE(matches_reference(p, inst)) << c.name() << ", isa " << to_string(isa);
        const double big = element(inst.y, {0, 0, 0, 0, 0}), small = element(inst.y, {0, 0, 0, 0, 1});
        if (mode == OverflowMode::saturate) {
          EXPECT_TRUE(std::isfinite(big) && std::isfinite(small))
              << to_string(t) << ", isa " << to_string(isa);
          EXPECT_EQ(big, element(inst.dy, {0, 0, 0, 0, 0})) << "saturates to the largest finite value";
          EXPECT_EQ(small, -big);
        } else {
          EXPECT_FALSE(std::isfinite(big)) << to_string(t) << ", isa " << to_string(isa);
          EXPECT_FALSE(std::isfinite(small)) << to_string(t) << ", isa " << to_string(isa);
        }
        EXPECT_EQ(element(inst.y, {0, 0, 0, 0, 2}), 2.0);
      }
}

// Options::max_memory_bytes: engines that would need more decline, a leaner one takes the problem, and when
// none fits Plan throws out_of_memory naming max_memory and the bytes the leanest engine needs.
TEST(PlanMemory, EnginesAboveTheLimitDeclineAndTheLeanestIsNamed) {
  std::mt19937_64 rng(17);
  Case c = with_dtype(Case{}, DType::bf16);
  c.Cin = 40;
  c.Cout = 24;
  Instance inst = instantiate(c, rng, Fill::random);
  const Problem p = validate(inst.spec);
  Options options;
  options.max_memory_bytes = 1;
  std::int64_t leanest = 0;  // what the leanest engine needs, from the message
  try {
    Plan plan(p, options);
    ADD_FAILURE() << "planned within 1 byte with " << plan.engine_name();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory);
    EXPECT_EQ(e.parameter(), "max_memory");
    EXPECT_EQ(what.rfind("out of memory: ", 0), 0u) << what;
    EXPECT_NE(what.find("but max_memory is 1"), std::string::npos) << what;
    const std::size_t at = what.find(" needs ");
    ASSERT_NE(at, std::string::npos) << what;
    leanest = std::stoll(what.substr(at + 7));
  }
  // The estimate is the admission rule, to the byte; the plan then runs correctly.
  ASSERT_GT(leanest, 0);
  options.max_memory_bytes = leanest - 1;
  EXPECT_THROW(Plan(p, options), Error);
  options.max_memory_bytes = leanest;
  EXPECT_NO_THROW(Plan(p, options));
  run(inst, options);
  EXPECT_TRUE(matches_reference(p, inst));
  options.max_memory_bytes = -1;
  EXPECT_THROW(Plan(p, options), Error);
}

// A plan that does not keep the filter states (and is held to) only what its calls allocate: the GEMM
// engine's block slots instead of the whole packed filter. Packing the whole filter on such a plan later is
// held to the same limit: refused, naming max_memory, when it would go past it; the plan still runs.
TEST(PlanMemory, NotKeepingTheFilterCountsBlockSlotsAndPackingIsHeldToTheLimit) {
  std::mt19937_64 rng(19);
  Case c = with_dtype(Case{}, DType::f32);
  c.Cin = 256;  // 27 taps x 16 output channels: 432 KiB packed; a slot is one block of 16 to 64 channels
  c.Cout = 16;
  c.in = {4, 4, 4};
  Instance inst = instantiate(c, rng, Fill::random);
  const Problem p = validate(inst.spec);
  const auto leanest = [&](bool keep) -> std::int64_t {
    Options options;
    options.threads = 1;
    options.keep_filter = keep;
    options.max_memory_bytes = 1;
    try {
      Plan plan(p, options);
    } catch (const Error& e) {
      const std::string what = e.what();
      return std::stoll(what.substr(what.find(" needs ") + 7));
    }
    ADD_FAILURE() << "planned within 1 byte";
    return 0;
  };
  if (!cpu_supports(Isa::avx2)) GTEST_SKIP() << "CPU lacks avx2: no GEMM engine";
  Options options;
  options.threads = 1;
  options.keep_filter = false;
  options.max_memory_bytes = leanest(false);
  Plan plan(p, options);
  ASSERT_EQ(plan.engine_name().rfind("gemm_", 0), 0u) << "taken by " << plan.engine_name();
  EXPECT_LT(options.max_memory_bytes, leanest(true) - (256 << 10)) << "the packed filter was counted";
  plan.execute(inst.dy.view.data, inst.filter.view.data, inst.y.view.data);
  EXPECT_TRUE(matches_reference(p, inst));
  try {
    plan.pack_filter(inst.filter.view.data);
    ADD_FAILURE() << "packed the whole filter past the limit";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory);
    EXPECT_EQ(e.parameter(), "max_memory");
    EXPECT_NE(std::string(e.what()).find("packing the whole filter"), std::string::npos) << e.what();
  }
  fill_canary(inst.y);
  plan.execute(inst.dy.view.data, inst.filter.view.data, inst.y.view.data);
  EXPECT_TRUE(matches_reference(p, inst));
  options.max_memory_bytes = 0;  // no limit: packs, and execute_packed runs
  Plan unlimited(p, options);
  unlimited.pack_filter(inst.filter.view.data);
  fill_canary(inst.y);
  unlimited.execute_packed(inst.dy.view.data, inst.y.view.data);
  EXPECT_TRUE(matches_reference(p, inst));
}

// The portable engine's planning memory does not grow with y: a 2^31 - 1 pixel axis reached by a stride of
// 2^30 (dy has 2 pixels) plans within a few kilobytes. Tables per y position would need tens of gigabytes.
TEST(PlanMemory, PortableEngineNeedsNoTablesPerPosition) {
  Problem p;
  p.N = 1;
  p.Cin_g = p.Cout_g = 2;
  p.y_size = {1, 1, 2147483647};
  p.kernel = {1, 1, 3};
  p.stride = {1, 1, std::int64_t{1} << 30};
  p.dy_size = {1, 1, 2};
  p.dy_strides = {4, 2, 2, 2, 1};
  p.filter_strides = {6, 3, 3, 3, 1};
  p.y_strides = {2 * p.y_size[2], p.y_size[2], p.y_size[2], p.y_size[2], 1};
  Options options;
  options.isa = Isa::portable;
  options.max_memory_bytes = 64 << 10;
  const Plan plan(p, options);
  EXPECT_EQ(plan.engine_name(), "direct");
}

TEST(Plan, RevalidatesHandMadeProblems) {
  std::mt19937_64 rng(18);
  Instance inst = instantiate(random_case(rng, DType::f32, Layout::NDHWC, Layout::NCDHW), rng, Fill::random);
  Problem p = validate(inst.spec);
  EXPECT_NO_THROW(Plan{p});
  Problem zero_stride = p;
  zero_stride.stride = {0, 1, 1};
  EXPECT_THROW(Plan{zero_stride}, Error);
  Problem wrong_out = p;
  wrong_out.dy_size[2] += 1;
  try {
    Plan plan(wrong_out);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.parameter(), "out_backprop") << e.what();
  }
  Problem huge = p;
  huge.Cin_g = huge.G = 1LL << 40;
  EXPECT_THROW(Plan{huge}, Error);
}

TEST(Plan, IsaRequestsAreResolvedOrRefused) {
  std::mt19937_64 rng(17);
  Instance inst = instantiate(random_case(rng, DType::f32, Layout::NDHWC, Layout::NCDHW), rng, Fill::random);
  const Problem p = validate(inst.spec);
  for (Isa isa : {Isa::avx512_bf16, Isa::avx512, Isa::avx2, Isa::portable}) {
    Options o;
    o.isa = isa;
    if (!cpu_supports(isa)) {
      EXPECT_THROW(Plan(p, o), Error) << to_string(isa);
      continue;
    }
    Plan plan(p, o);
    plan.execute(inst.dy.view.data, inst.filter.view.data, inst.y.view.data);
    EXPECT_TRUE(matches_reference(p, inst)) << to_string(isa) << " engine " << plan.engine_name();
  }
  for (int threads : {-1, 4097}) {
    Options bad;
    bad.threads = threads;
    EXPECT_THROW(Plan(p, bad), Error) << threads;
  }
}

}  // namespace
}  // namespace conv3d_dx::testing
