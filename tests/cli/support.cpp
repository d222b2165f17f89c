#include "support.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "check.hpp"
#include "npy.hpp"

extern char** environ;

namespace conv3d_dx::cli::testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/conv3d-dx-cli-XXXXXX";
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::vector<std::string> TempDir::entries() const {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(path_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

bool exists(const std::string& path) { return fs::exists(path); }

std::string join(const std::vector<std::int64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

namespace {

pid_t spawn(std::vector<std::string> argv, const std::string& out_path, const std::string& err_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGHUP, SIGINT, SIGTERM}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw std::runtime_error("cannot start " + argv[0]);
  return pid;
}

}  // namespace

ProcessResult run_program(const std::vector<std::string>& argv) {
  TempDir dir;
  const std::string out_path = dir.file("stdout"), err_path = dir.file("stderr");
  const pid_t pid = spawn(argv, out_path, err_path);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  ProcessResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file(out_path);
  r.err = read_file(err_path);
  return r;
}

ProcessResult run_cli(const std::vector<std::string>& args) {
  std::vector<std::string> all = {CONV3D_DX_CLI};
  all.insert(all.end(), args.begin(), args.end());
  return run_program(all);
}

int start_cli(const std::vector<std::string>& args, const TempDir& logs) {
  std::vector<std::string> all = {CONV3D_DX_CLI};
  all.insert(all.end(), args.begin(), args.end());
  return spawn(all, logs.file("stdout"), logs.file("stderr"));
}

std::array<std::int64_t, 5> in_layout(const std::array<std::int64_t, 5>& c, Layout layout, bool filter) {
  if (layout == Layout::NDHWC) return {c[0], c[2], c[3], c[4], c[1]};
  if (layout == Layout::DHWCN && filter) return {c[2], c[3], c[4], c[1], c[0]};
  return c;
}

namespace {

// The array shape written to a file: 5-D, or 4-D with D removed for a 2-D problem.
std::vector<std::int64_t> file_shape(const std::array<std::int64_t, 5>& s, Layout layout, bool two_d) {
  std::vector<std::int64_t> v(s.begin(), s.end());
  if (two_d) v.erase(v.begin() + (layout == Layout::NCDHW ? 2 : layout == Layout::NDHWC ? 1 : 0));
  return v;
}

std::array<std::int64_t, 5> attribute(const std::array<std::int64_t, 3>& v, Layout data) {
  return data == Layout::NDHWC ? std::array<std::int64_t, 5>{1, v[0], v[1], v[2], 1}
                               : std::array<std::int64_t, 5>{1, 1, v[0], v[1], v[2]};
}

std::string list(const std::array<std::int64_t, 5>& v) { return join({v.begin(), v.end()}); }

}  // namespace

Prepared prepare(const Case& c, const TempDir& dir) {
  std::array<std::int64_t, 3> out{};
  for (int a = 0; a < 3; ++a) {
    out[a] =
        (c.in[a] + c.pad_front[a] + c.pad_back[a] - ((c.kernel[a] - 1) * c.dilation[a] + 1)) / c.stride[a] +
        1;
  }
  const auto y_shape = in_layout({c.N, c.G * c.Cin_g, c.in[0], c.in[1], c.in[2]}, c.data, false);
  const auto dy_shape = in_layout({c.N, c.G * c.Cout_g, out[0], out[1], out[2]}, c.data, false);
  const auto w_shape =
      in_layout({c.G * c.Cout_g, c.Cin_g, c.kernel[0], c.kernel[1], c.kernel[2]}, c.filter, true);

  Prepared p;
  Attributes& a = p.spec.attrs;
  a.data_format = c.data;
  a.input_size = file_shape(y_shape, c.data, c.two_d);
  a.strides = attribute(c.stride, c.data);
  a.dilations = attribute(c.dilation, c.data);
  a.pads = {c.pad_front[0], c.pad_back[0], c.pad_front[1], c.pad_back[1], c.pad_front[2], c.pad_back[2]};
  a.groups = c.G;
  a.enable_hf32 = c.hf32;
  p.spec.overflow = c.saturate ? OverflowMode::saturate : OverflowMode::ieee;
  p.spec.out_backprop = TensorView::contiguous(nullptr, c.dtype, c.data, dy_shape);
  p.spec.filter = TensorView::contiguous(nullptr, c.dtype, c.filter, w_shape);
  p.spec.y = TensorView::contiguous(nullptr, c.output.value_or(c.dtype), c.data, y_shape);
  p.y_shape = a.input_size;

  const std::int64_t dy_n = dy_shape[0] * dy_shape[1] * dy_shape[2] * dy_shape[3] * dy_shape[4];
  const std::int64_t w_n = w_shape[0] * w_shape[1] * w_shape[2] * w_shape[3] * w_shape[4];
  p.dy.resize(static_cast<std::size_t>(std::max<std::int64_t>(dy_n, 1)) * dtype_size(c.dtype));
  p.w.resize(static_cast<std::size_t>(w_n) * dtype_size(c.dtype));
  fill_random(c.dtype, p.dy.data(), dy_n, c.seed, c.scale);
  fill_random(c.dtype, p.w.data(), w_n, c.seed + 7919, c.scale);
  const std::string descr = npy::descr_for(c.dtype);
  npy::write(dir.file("dy.npy"), descr, file_shape(dy_shape, c.data, c.two_d), p.dy.data(),
             static_cast<std::size_t>(dy_n) * dtype_size(c.dtype));
  npy::write(dir.file("w.npy"), descr, file_shape(w_shape, c.filter, c.two_d), p.w.data(), p.w.size());

  p.args = {"run",
            "--out-backprop",
            dir.file("dy.npy"),
            "--filter",
            dir.file("w.npy"),
            "--input-size",
            join(a.input_size),
            "--strides",
            list(a.strides),
            "--pads",
            join({a.pads.begin(), a.pads.end()}),
            "--dilations",
            list(a.dilations),
            "--groups",
            std::to_string(c.G),
            "--data-format",
            to_string(c.data),
            "--filter-format",
            to_string(c.filter)};
  if (c.pass_dtype) p.args.insert(p.args.end(), {"--dtype", to_string(c.dtype)});
  if (c.output) p.args.insert(p.args.end(), {"--output-dtype", to_string(*c.output)});
  if (c.hf32) p.args.push_back("--hf32");
  if (c.saturate) p.args.push_back("--saturate");
  return p;
}

std::string npy_bytes(int major, const std::string& dict, const std::string& data) {
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  std::string header = dict;
  const std::size_t unpadded = 6 + 2 + len_bytes + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  for (std::size_t i = 0; i < len_bytes; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return out + header + data;
}

}  // namespace conv3d_dx::cli::testing
