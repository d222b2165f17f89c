// `conv3d-dx run` end to end: inputs written as .npy, the CLI run as a subprocess, y.npy read back and
// compared with the float64 reference within docs/numerics.md.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>

#include "check.hpp"
#include "npy.hpp"
#include "numeric/numeric.hpp"
#include "support.hpp"

namespace conv3d_dx::cli::testing {
namespace {

struct Outcome {
  ProcessResult process;
  Problem problem;
  npy::Array y;
  CheckResult check;
};

// Runs the case through the CLI and checks y against the reference.
Outcome run_case(const Case& c, const std::vector<std::string>& extra = {}) {
  TempDir dir;
  Prepared prep = prepare(c, dir);
  std::vector<std::string> args = prep.args;
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"-o", dir.file("y.npy")});
  Outcome o;
  o.process = run_cli(args);
  EXPECT_EQ(o.process.exit_code, 0) << o.process.err;
  if (o.process.exit_code != 0) return o;
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"dy.npy", "w.npy", "y.npy"}))
      << "no temporary files left";
  o.problem = validate(prep.spec);
  o.y = npy::read(dir.file("y.npy"));
  EXPECT_EQ(o.y.descr, npy::descr_for(o.problem.y_dtype));
  EXPECT_EQ(o.y.shape, prep.y_shape);
  EXPECT_EQ(static_cast<std::int64_t>(o.y.data.size()),
            o.problem.y_elements() * static_cast<std::int64_t>(dtype_size(o.problem.y_dtype)));
  if (o.y.data.size() == static_cast<std::size_t>(o.problem.y_elements()) * dtype_size(o.problem.y_dtype)) {
    o.check = check_against_reference(o.problem, prep.dy.data(), prep.w.data(), o.y.data.data());
    EXPECT_TRUE(o.check.ok()) << o.problem.describe() << ": " << o.check.failures << " wrong, first "
                              << o.check.first_failure;
  }
  return o;
}

struct Combo {
  DType dtype;
  Layout data, filter;
  std::string name() const {
    return std::string(to_string(dtype)) + "_" + to_string(data) + "_" + to_string(filter);
  }
  friend void PrintTo(const Combo& c, std::ostream* os) { *os << c.name(); }
};

std::vector<Combo> every_combo() {
  std::vector<Combo> all;
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::hif8, DType::fp8_e4m3fn}) {
    for (Layout data : {Layout::NCDHW, Layout::NDHWC}) {
      for (Layout filter : {Layout::NCDHW, Layout::NDHWC, Layout::DHWCN})
        all.push_back({dtype, data, filter});
    }
  }
  return all;
}

class RunEveryLayout : public ::testing::TestWithParam<Combo> {};

// Each combination gets a different mix of groups, strides, dilations and asymmetric pads.
TEST_P(RunEveryLayout, MatchesReference) {
  const Combo combo = GetParam();
  const int i =
      static_cast<int>(combo.dtype) * 6 + static_cast<int>(combo.data) * 3 + static_cast<int>(combo.filter);
  Case c;
  c.dtype = combo.dtype;
  c.data = combo.data;
  c.filter = combo.filter;
  c.seed = static_cast<std::uint64_t>(100 + i);
  c.N = 1 + i % 2;
  switch (i % 3) {
    case 0:  // dense
      c.G = 1, c.Cin_g = 3, c.Cout_g = 4;
      break;
    case 1:  // grouped
      c.G = 2, c.Cin_g = 2, c.Cout_g = 3;
      break;
    default:  // depthwise with channel multiplier 2
      c.G = 3, c.Cin_g = 1, c.Cout_g = 2;
      break;
  }
  c.in = {4, 6, 5};
  c.kernel = {2, 3, 2};
  c.stride = {1 + i % 2, 1 + (i / 3) % 3, 2};
  c.dilation = {1 + (i / 2) % 2, 1 + i % 2, 1};
  c.pad_front = {i % 2, 1, 0};
  c.pad_back = {1, 0, 2};
  const Outcome o = run_case(c);
  EXPECT_GT(o.check.checked, 0);
}

INSTANTIATE_TEST_SUITE_P(Cli, RunEveryLayout, ::testing::ValuesIn(every_combo()),
                         [](const ::testing::TestParamInfo<Combo>& p) { return p.param.name(); });

TEST(Run, DtypeInferredFromFp32AndFp16Files) {
  for (DType dtype : {DType::f32, DType::f16}) {
    Case c;
    c.dtype = dtype;
    c.pass_dtype = false;
    run_case(c);
  }
}

TEST(Run, Hf32RoundsInputs) {
  Case c;
  c.hf32 = true;
  c.Cin_g = 4;
  c.Cout_g = 5;
  // Random fp32 data has 23-bit mantissas: ignoring --hf32 would differ from the HF32 reference far beyond
  // the fp32 tolerance.
  const Outcome o = run_case(c);
  EXPECT_EQ(o.problem.input_rounding, InputRounding::hf32);
}

TEST(Run, OutputDtypeFp32ForLowPrecisionInputs) {
  for (DType dtype : {DType::bf16, DType::hif8}) {
    Case c;
    c.dtype = dtype;
    c.output = DType::f32;
    const Outcome o = run_case(c);
    EXPECT_EQ(o.y.descr, "<f4");
  }
}

// fp16 outputs that overflow: inf by default, 65504 with --saturate.
TEST(Run, OverflowModes) {
  for (bool saturate : {false, true}) {
    Case c;
    c.dtype = DType::f16;
    c.scale = 400.0f;  // products up to 1.6e5, far beyond fp16's 65504
    c.Cin_g = 3;
    c.Cout_g = 4;
    c.saturate = saturate;
    const Outcome o = run_case(c);
    int at_max = 0, infinite = 0;
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(o.y.data.size() / 2); ++i) {
      const float v = numeric::load_f32(DType::f16, o.y.data.data(), i);
      at_max += std::fabs(v) == 65504.0f;
      infinite += std::isinf(v);
    }
    if (saturate) {
      EXPECT_GT(at_max, 0);
      EXPECT_EQ(infinite, 0);
    } else {
      EXPECT_GT(infinite, 0);
    }
  }
}

TEST(Run, TwoDimensionalProblemWith4DArrays) {
  for (Layout data : {Layout::NDHWC, Layout::NCDHW}) {
    Case c;
    c.data = data;
    c.filter = Layout::DHWCN;
    c.two_d = true;
    c.in = {1, 6, 5};
    c.kernel = {1, 3, 3};
    c.stride = {1, 2, 1};
    c.pad_front = {0, 1, 1};
    c.pad_back = {0, 1, 0};
    const Outcome o = run_case(c);
    EXPECT_EQ(o.y.shape.size(), 4u);
  }
}

TEST(Run, EmptyBatchWritesEmptyY) {
  Case c;
  c.N = 0;
  const Outcome o = run_case(c);
  ASSERT_EQ(o.y.shape.size(), 5u);
  EXPECT_EQ(o.y.shape[0], 0);
  EXPECT_TRUE(o.y.data.empty());
}

TEST(Run, StrideLargerThanKernelAndKernel1) {
  Case c;
  c.kernel = {1, 1, 2};
  c.stride = {2, 3, 4};
  c.in = {4, 7, 9};
  run_case(c);
}

TEST(Run, ThreadCountsAndReferenceIsaGiveTheSameBits) {
  Case c;
  c.Cin_g = 5;
  c.Cout_g = 7;
  c.in = {3, 7, 6};
  const std::string one = [&] {
    const Outcome o = run_case(c, {"--threads", "1"});
    return std::string(reinterpret_cast<const char*>(o.y.data.data()), o.y.data.size());
  }();
  const Outcome two = run_case(c, {"--threads", "2", "--verbose"});
  EXPECT_EQ(one, std::string(reinterpret_cast<const char*>(two.y.data.data()), two.y.data.size()));
  EXPECT_NE(two.process.err.find("engine"), std::string::npos) << "--verbose names the engine";
  run_case(c, {"--isa", "reference"});
  run_case(c, {"--isa", "portable"});
}

TEST(Run, ReadsVersion2InputFiles) {
  TempDir dir;
  Case c;
  Prepared prep = prepare(c, dir);
  // Rewrite dy.npy with a version 2.0 header.
  const npy::Array dy = npy::read(dir.file("dy.npy"));
  std::string shape = "(";
  for (const auto d : dy.shape) shape += std::to_string(d) + ", ";
  write_file(dir.file("dy.npy"),
             npy_bytes(2, "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + "), }",
                       std::string(reinterpret_cast<const char*>(dy.data.data()), dy.data.size())));
  std::vector<std::string> args = prep.args;
  args.insert(args.end(), {"-o", dir.file("y.npy")});
  const ProcessResult r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const npy::Array y = npy::read(dir.file("y.npy"));
  const Problem p = validate(prep.spec);
  EXPECT_TRUE(check_against_reference(p, prep.dy.data(), prep.w.data(), y.data.data()).ok());
}

}  // namespace
}  // namespace conv3d_dx::cli::testing
