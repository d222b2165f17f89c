// Bad command lines exit 2 and name the flag or parameter; I/O failures exit 1; neither leaves y behind.
#include <gtest/gtest.h>

#include <filesystem>

#include "npy.hpp"
#include "support.hpp"

namespace conv3d_dx::cli::testing {
namespace {

// A valid fp32 problem on disk; each test edits one flag of its command line.
class RunErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    Case c;  // NDHWC data, NCDHW filter: dy [1, 2, 3, 4, 3], w [3, 2, 2, 2, 2], input-size 1,3,4,5,2
    prep_ = prepare(c, dir_);
    y_ = dir_.file("y.npy");
  }

  // The valid command line with `flag`'s value replaced (or the flag removed when value is nullopt),
  // plus extra arguments.
  std::vector<std::string> with(const std::string& flag, std::optional<std::string> value,
                                const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> args;
    bool found = false;
    for (std::size_t i = 0; i < prep_.args.size(); ++i) {
      if (prep_.args[i] == flag) {
        found = true;
        if (value) args.insert(args.end(), {flag, *value});
        ++i;
      } else {
        args.push_back(prep_.args[i]);
      }
    }
    if (!found && value) args.insert(args.end(), {flag, *value});
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"-o", y_});
    return args;
  }

  // Runs and checks the status, that stderr mentions `needle`, and that y was not written.
  void expect_failure(const std::vector<std::string>& args, int status, const std::string& needle) {
    const ProcessResult r = run_cli(args);
    std::string line;
    for (const auto& a : args) line += a + " ";
    EXPECT_EQ(r.exit_code, status) << line << "\nstderr: " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos)
        << line << "\nstderr should name '" << needle << "': " << r.err;
    EXPECT_EQ(r.err.rfind("conv3d-dx: ", 0), 0u) << r.err;
    EXPECT_FALSE(exists(y_)) << line;
    EXPECT_EQ(dir_.entries(), (std::vector<std::string>{"dy.npy", "w.npy"})) << line << ": stray files";
  }

  TempDir dir_;
  Prepared prep_;
  std::string y_;
};

TEST_F(RunErrors, TheBaseCommandWorks) {
  const ProcessResult r = run_cli(with("--groups", "1"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(exists(y_));
}

TEST_F(RunErrors, BadCommandLinesExit2NamingTheFlag) {
  struct Bad {
    std::vector<std::string> args;
    std::string needle;
  };
  const std::vector<Bad> cases = {
      {with("--bogus", "1"), "--bogus"},
      {with("--groups", "1", {"stray"}), "stray"},
      {with("--strides", "1,a,1,1,1"), "--strides"},
      {with("--strides", "1,9999999999999999999999,1,1,1"), "--strides"},
      {with("--strides", "1,1,1,1"), "--strides"},
      {with("--strides", "1,1,1,1,1,1"), "--strides"},
      {with("--pads", "0,0,0"), "--pads"},
      {with("--pads", ""), "--pads"},
      {with("--input-size", "1,3,4"), "--input-size"},
      {with("--dilations", "1,1.5,1,1,1"), "--dilations"},
      {with("--groups", "two"), "--groups"},
      {with("--groups", "1", {"--groups", "1"}), "--groups"},
      {with("--data-format", "NHWC"), "--data-format"},
      {with("--data-format", "DHWCN"), "--data-format"},
      {with("--filter-format", "OIDHW"), "--filter-format"},
      {with("--dtype", "fp64"), "--dtype"},
      {with("--output-dtype", "int8"), "--output-dtype"},
      {with("--threads", "-1"), "--threads"},
      {with("--threads", "99999999999"), "--threads"},
      {with("--isa", "sse2"), "--isa"},
      {with("--filter", std::nullopt), "--filter"},
      {with("--strides", std::nullopt), "--strides"},
      {with("--groups", "1", {"--hf32=1"}), "--hf32"},
      {[&] {
         auto a = with("--groups", "1");
         a.pop_back();  // "-o" without its value
         return a;
       }(),
       "-o"},
      // Values the library rejects: the message names the parameter.
      {with("--strides", "1,0,1,1,1"), "strides"},
      {with("--strides", "2,1,1,1,1"), "strides"},
      {with("--pads", "0,-1,0,0,0,0"), "pads"},
      {with("--dilations", "1,1,1,0,1"), "dilations"},
      {with("--groups", "0"), "groups"},
      {with("--groups", "2"), "groups"},
      {with("--input-size", "1,3,4,5,4"), "filter"},        // C = 4 but the filter has Cin_g 2 with 1 group
      {with("--input-size", "1,4,4,5,2"), "out_backprop"},  // D = 4 implies dy D = 4, the file has 3
      {with("--input-size", "2,3,4,5,2"), "out_backprop"},  // N mismatch
      {with("--pads", "1,1,0,0,0,0"), "out_backprop"},
      {with("--dtype", "bf16"), "--out-backprop"},  // the files hold '<f4'
      {with("--dtype", "fp8_e4m3fn"), "--out-backprop"},
  };
  for (const Bad& b : cases) expect_failure(b.args, 2, b.needle);
}

TEST_F(RunErrors, FileContentsThatContradictTheParametersExit2) {
  // Filter stored as fp16 while dy is fp32.
  std::vector<std::uint16_t> half(3 * 2 * 8, 0x3C00);
  npy::write(dir_.file("w.npy"), "<f2", {3, 2, 2, 2, 2}, half.data(), half.size() * 2);
  expect_failure(with("--dtype", std::nullopt), 2, "--filter");
  // Raw codes need --dtype.
  npy::write(dir_.file("w.npy"), "<u2", {3, 2, 2, 2, 2}, half.data(), half.size() * 2);
  npy::write(dir_.file("dy.npy"), "<u2", {3, 2, 2, 2, 2}, half.data(), half.size() * 2);
  expect_failure(with("--dtype", std::nullopt), 2, "--dtype bf16");
  std::vector<std::uint8_t> codes(2 * 3 * 4 * 3, 0x10);
  npy::write(dir_.file("dy.npy"), "|u1", {1, 2, 3, 4, 3}, codes.data(), codes.size());
  expect_failure(with("--dtype", std::nullopt), 2, "--dtype hif8");
  // A 4-D array where 5-D is required.
  std::vector<float> f(3 * 2 * 2 * 2, 1.0f);
  npy::write(dir_.file("w.npy"), "<f4", {3, 2, 2, 2}, f.data(), f.size() * 4);
  npy::write(dir_.file("dy.npy"), "<f4", {1, 2, 3, 4}, f.data(), 24 * 4);
  expect_failure(with("--dtype", "fp32"), 2, "--out-backprop");
}

TEST_F(RunErrors, IoFailuresExit1) {
  expect_failure(with("--out-backprop", dir_.file("missing.npy")), 1, "missing.npy");
  // Output directory that does not exist.
  {
    auto args = with("--groups", "1");
    args.back() = dir_.file("no/such/dir/y.npy");
    const ProcessResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("no/such/dir/y.npy"), std::string::npos) << r.err;
  }
  // -o names a directory: the rename fails, nothing is left behind.
  std::filesystem::create_directory(dir_.file("ydir"));
  {
    auto args = with("--groups", "1");
    args.back() = dir_.file("ydir");
    const ProcessResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(dir_.entries(), (std::vector<std::string>{"dy.npy", "w.npy", "ydir"}));
    std::filesystem::remove(dir_.file("ydir"));
  }
  // Malformed input files.
  const std::string good = read_file(dir_.file("w.npy"));
  write_file(dir_.file("w.npy"), good.substr(0, good.size() - 1));
  expect_failure(with("--groups", "1"), 1, "truncated data");
  write_file(dir_.file("w.npy"), "PK\x03\x04 not a npy file");
  expect_failure(with("--groups", "1"), 1, "bad magic");
  std::string fortran = good;
  fortran.replace(fortran.find("False"), 5, "True ");
  write_file(dir_.file("w.npy"), fortran);
  expect_failure(with("--groups", "1"), 1, "Fortran");
  std::string big = good;
  big.replace(big.find("<f4"), 3, ">f4");
  write_file(dir_.file("w.npy"), big);
  expect_failure(with("--groups", "1"), 1, "big-endian");
}

// A memory limit below what the problem needs is an out-of-memory failure (exit 1) that says how much is
// needed, not an invalid parameter; a malformed limit is a bad command line.
TEST_F(RunErrors, MemoryLimitTooSmallExits1SayingWhatIsNeeded) {
  expect_failure(with("--groups", "1", {"--max-memory", "1"}), 1, "out of memory:");
  expect_failure(with("--groups", "1", {"--max-memory", "1"}), 1, "but max_memory is 1");
  expect_failure(with("--groups", "1", {"--max-memory", "12Q"}), 2, "--max-memory");
  expect_failure(with("--groups", "1", {"--max-memory", "-1"}), 2, "--max-memory");
  EXPECT_EQ(run_cli(with("--groups", "1", {"--max-memory", "1G"})).exit_code, 0);
}

TEST_F(RunErrors, FailureLeavesAnExistingOutputUntouched) {
  write_file(y_, "previous contents");
  const ProcessResult r = run_cli(with("--strides", "1,0,1,1,1"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(read_file(y_), "previous contents");
  EXPECT_EQ(dir_.entries(), (std::vector<std::string>{"dy.npy", "w.npy", "y.npy"}));
  // And success replaces it.
  EXPECT_EQ(run_cli(with("--groups", "1")).exit_code, 0);
  EXPECT_EQ(npy::read(y_).descr, "<f4");
}

}  // namespace
}  // namespace conv3d_dx::cli::testing
