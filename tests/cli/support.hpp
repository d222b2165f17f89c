// Helpers for the CLI tests: temporary directories, running conv3d-dx as a subprocess, and problems written
// as .npy files together with the ProblemSpec they describe.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "conv3d_dx/conv3d_dx.hpp"

namespace conv3d_dx::cli::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Names of the entries in the directory, sorted.
  std::vector<std::string> entries() const;

 private:
  std::string path_;
};

struct ProcessResult {
  int exit_code = -1;  // -1 when the process did not exit normally
  std::string out, err;
};
// Runs the conv3d-dx executable with `args` and collects its exit status, stdout and stderr.
ProcessResult run_cli(const std::vector<std::string>& args);
// The same for any program: argv[0] is its path.
ProcessResult run_program(const std::vector<std::string>& argv);
// Starts conv3d-dx with `args` without waiting for it, stdout and stderr into files in `logs`, with SIGHUP,
// SIGINT and SIGTERM at their default action. Returns the process id.
int start_cli(const std::vector<std::string>& args, const TempDir& logs);

std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& bytes);
bool exists(const std::string& path);
std::string join(const std::vector<std::int64_t>& v);

// A problem in canonical terms plus how it is handed to the CLI.
struct Case {
  DType dtype = DType::f32;
  Layout data = Layout::NDHWC, filter = Layout::NCDHW;
  std::int64_t N = 1, G = 1, Cin_g = 2, Cout_g = 3;
  std::array<std::int64_t, 3> in{3, 4, 5}, kernel{2, 2, 2}, stride{1, 1, 1}, dilation{1, 1, 1};
  std::array<std::int64_t, 3> pad_front{0, 0, 0}, pad_back{0, 0, 0};
  bool hf32 = false, saturate = false;
  std::optional<DType> output;
  float scale = 1.0f;      // random data in [-scale, scale]
  bool two_d = false;      // 4-value input-size and 4-D arrays (in[0], kernel[0] must be 1)
  bool pass_dtype = true;  // give --dtype (needed for bf16, hif8 and fp8)
  std::uint64_t seed = 1;
};

struct Prepared {
  ProblemSpec spec;  // the problem the files and flags describe; data pointers are null
  std::vector<std::byte> dy, w;
  std::vector<std::string> args;      // "run", the files and every attribute flag; no -o
  std::vector<std::int64_t> y_shape;  // the shape y.npy must have
};
// Writes dy.npy and w.npy with random data into `dir` and returns the command line and the spec.
Prepared prepare(const Case& c, const TempDir& dir);

// A shape in canonical order (N, C, D, H, W / Cout, Cin_g, kD, kH, kW) reordered into `layout`.
std::array<std::int64_t, 5> in_layout(const std::array<std::int64_t, 5>& canonical, Layout layout,
                                      bool filter);

// The bytes of a .npy file with the given format version (1, 2 or 3) and raw header dictionary.
std::string npy_bytes(int major, const std::string& dict, const std::string& data);

}  // namespace conv3d_dx::cli::testing
