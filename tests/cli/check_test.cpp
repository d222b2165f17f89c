// The pieces the CLI is built from, in-process: argument parsing and the accuracy check used by `demo`
// and by the CLI tests (it must accept a correct result and catch a wrong one).
#include "check.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "args.hpp"
#include "numeric/numeric.hpp"
#include "support.hpp"

namespace conv3d_dx::cli::testing {
namespace {

int exit_code_of(const std::function<void()>& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const CliError& e) {
    if (message) *message = e.what();
    return e.exit_code();
  }
  return 0;
}

TEST(Args, ParsesIntegerListsAndRejectsBadOnes) {
  EXPECT_EQ(parse_int_list("--x", "1,-2,3", {3}), (std::vector<std::int64_t>{1, -2, 3}));
  EXPECT_EQ(parse_int_list("--x", "9223372036854775807", {1}), (std::vector<std::int64_t>{INT64_MAX}));
  for (const char* bad : {"", "1,,2", "1,2,", "1, 2", "a", "1.5", "+1", "0x10", "9223372036854775808",
                          "9999999999999999999999", "1,2", "1,2,3,4"}) {
    std::string msg;
    EXPECT_EQ(exit_code_of([&] { parse_int_list("--pads", bad, {3}); }, &msg), 2) << bad;
    EXPECT_NE(msg.find("--pads"), std::string::npos) << msg;
  }
  EXPECT_EQ(parse_int("--t", "7", 0, 9), 7);
  EXPECT_EQ(exit_code_of([] { parse_int("--t", "10", 0, 9); }), 2);
}

TEST(Args, FlagsValuesAndErrors) {
  const std::vector<FlagSpec> flags = {{"--a", "N", ""}, {"--sw", "", ""}, {"-o", "F", ""}};
  const Args args({"--a", "-1", "--sw", "-o", "out"}, flags, "cmd");
  EXPECT_EQ(args.get("--a"), "-1");
  EXPECT_TRUE(args.has("--sw"));
  EXPECT_EQ(args.required("-o"), "out");
  EXPECT_EQ(Args({"--a=5"}, flags, "cmd").get("--a"), "5");
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--b", "1"}, "--b"}, {{"--a"}, "--a"},    {{"--a", "--sw"}, "--a"}, {{"--a", "1", "--a", "2"}, "--a"},
      {{"--sw=1"}, "--sw"},  {{"stray"}, "stray"}};
  for (const auto& [argv, flag] : bad) {
    std::string msg;
    EXPECT_EQ(exit_code_of([&] { Args(argv, flags, "cmd"); }, &msg), 2) << flag;
    EXPECT_NE(msg.find(flag), std::string::npos) << msg;
  }
  std::string msg;
  EXPECT_EQ(exit_code_of([&] { Args({}, flags, "cmd").required("-o"); }, &msg), 2);
  EXPECT_NE(msg.find("-o"), std::string::npos);
}

// A problem computed by the library, then checked; perturbing one element must be caught.
struct Computed {
  Problem p;
  std::vector<std::byte> dy, w, y;
};

Computed compute(const Case& c) {
  TempDir dir;
  Prepared prep = prepare(c, dir);
  Computed r{validate(prep.spec), std::move(prep.dy), std::move(prep.w), {}};
  r.y.resize(static_cast<std::size_t>(r.p.y_elements()) * dtype_size(r.p.y_dtype));
  Plan plan(r.p, Options{1, Isa::best, false});
  plan.execute(r.dy.data(), r.w.data(), r.y.data());
  return r;
}

TEST(Check, AcceptsTheLibraryResultAndCatchesAnError) {
  Case c;
  c.stride = {1, 2, 3};  // stride 3 > kernel 2 on W: some y are reached by no tap and must be exactly 0
  c.Cin_g = 3;
  for (DType dtype : {DType::f32, DType::bf16, DType::hif8}) {
    c.dtype = dtype;
    Computed r = compute(c);
    const CheckResult ok = check_against_reference(r.p, r.dy.data(), r.w.data(), r.y.data());
    EXPECT_TRUE(ok.ok()) << ok.first_failure;
    EXPECT_EQ(ok.checked, r.p.y_elements());

    // Nudge one reached element well past the tolerance.
    const std::int64_t i = 5;
    const float v = numeric::load_f32(dtype, r.y.data(), i);
    numeric::store_f32(dtype, r.y.data(), i, std::fabs(v) < 1 ? v + 1 : v * 2, OverflowMode::ieee);
    const CheckResult bad = check_against_reference(r.p, r.dy.data(), r.w.data(), r.y.data());
    EXPECT_EQ(bad.failures, 1) << to_string(dtype);
    EXPECT_NE(bad.first_failure.find("reference"), std::string::npos);
  }
}

TEST(Check, UnreachedPositionsMustBeExactlyZero) {
  Case c;
  c.kernel = {1, 1, 1};
  c.stride = {2, 2, 2};
  c.in = {3, 3, 3};
  Computed r = compute(c);
  ASSERT_TRUE(check_against_reference(r.p, r.dy.data(), r.w.data(), r.y.data()).ok());
  // y[n=0, d=0, h=0, w=1, c=0] in NDHWC is not reached with stride 2 and a 1x1x1 kernel.
  const std::int64_t unreached = 1 * r.p.Cin();
  ASSERT_EQ(numeric::load_f32(DType::f32, r.y.data(), unreached), 0.0f);
  numeric::store_f32(DType::f32, r.y.data(), unreached, 1e-30f, OverflowMode::ieee);
  EXPECT_EQ(check_against_reference(r.p, r.dy.data(), r.w.data(), r.y.data()).failures, 1);
}

TEST(Check, ChannelLimitChecksOnlyTheFirstChannelsOfEachGroup) {
  Case c;
  c.G = 2;
  c.Cin_g = 3;
  Computed r = compute(c);
  const CheckResult part = check_against_reference(r.p, r.dy.data(), r.w.data(), r.y.data(), 1);
  EXPECT_TRUE(part.ok()) << part.first_failure;
  EXPECT_EQ(part.checked, r.p.y_elements() / 3);
  // Channel 1 of group 0 is not checked, channel 3 (group 1, first) is.
  numeric::store_f32(DType::f32, r.y.data(), 1, 100.0f, OverflowMode::ieee);
  EXPECT_TRUE(check_against_reference(r.p, r.dy.data(), r.w.data(), r.y.data(), 1).ok());
  numeric::store_f32(DType::f32, r.y.data(), 3, 100.0f, OverflowMode::ieee);
  EXPECT_EQ(check_against_reference(r.p, r.dy.data(), r.w.data(), r.y.data(), 1).failures, 1);
}

TEST(Check, RandomFillIsDeterministicAndInRange) {
  std::vector<std::uint16_t> a(1000), b(1000);
  fill_random(DType::bf16, a.data(), 1000, 42, 2.0f);
  fill_random(DType::bf16, b.data(), 1000, 42, 2.0f);
  EXPECT_EQ(a, b);
  float lo = 0, hi = 0;
  for (int i = 0; i < 1000; ++i) {
    const float v = numeric::bf16_to_f32(a[i]);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_LT(lo, -1.5f);
  EXPECT_GT(hi, 1.5f);
  EXPECT_LE(hi, 2.0f);
  EXPECT_GE(lo, -2.0f);
}

}  // namespace
}  // namespace conv3d_dx::cli::testing
