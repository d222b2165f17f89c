#include "npy.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string_view>

namespace conv3d_dx::npy {

static_assert(std::endian::native == std::endian::little,
              "the .npy convention here assumes a little-endian host");

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicLen = 6;

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

// A minimal reader for the Python literal numpy writes as the header: a dict of strings, booleans and
// tuples of non-negative integers.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& what) : s_(text), what_(what) {}

  void parse(std::string& descr, std::vector<std::int64_t>& shape) {
    bool have_descr = false, have_order = false, have_shape = false, fortran = false;
    expect('{');
    while (true) {
      skip_ws();
      if (peek() == '}') break;
      const std::string key = string_literal();
      expect(':');
      skip_ws();
      if (key == "descr") {
        if (have_descr) fail("duplicate key 'descr'");
        if (peek() != '\'' && peek() != '"') fail("structured dtypes are not supported");
        descr = string_literal();
        have_descr = true;
      } else if (key == "fortran_order") {
        if (have_order) fail("duplicate key 'fortran_order'");
        fortran = boolean();
        have_order = true;
      } else if (key == "shape") {
        if (have_shape) fail("duplicate key 'shape'");
        shape = tuple();
        have_shape = true;
      } else {
        fail("unexpected key '" + key + "'");
      }
      skip_ws();
      if (peek() == ',') {
        ++pos_;
      } else if (peek() != '}') {
        fail("expected ',' or '}'");
      }
    }
    ++pos_;
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected text after the header dictionary");
    if (!have_descr || !have_order || !have_shape)
      fail("the header lacks 'descr', 'fortran_order' or 'shape'");
    if (fortran) {
      throw NpyError(what_ + ": Fortran-order arrays are not supported; save a C-order array " +
                     "(numpy.ascontiguousarray)");
    }
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw NpyError(what_ + ": malformed .npy header (" + why + " at offset " + std::to_string(pos_) + ")");
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  void expect(char c) {
    skip_ws();
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string string_literal() {
    skip_ws();
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail("expected a string");
    const std::size_t end = s_.find(quote, pos_ + 1);
    if (end == std::string::npos) fail("unterminated string");
    std::string v = s_.substr(pos_ + 1, end - pos_ - 1);
    pos_ = end + 1;
    return v;
  }
  bool boolean() {
    if (s_.compare(pos_, 4, "True") == 0) {
      pos_ += 4;
      return true;
    }
    if (s_.compare(pos_, 5, "False") == 0) {
      pos_ += 5;
      return false;
    }
    fail("expected True or False");
  }
  std::vector<std::int64_t> tuple() {
    std::vector<std::int64_t> v;
    expect('(');
    while (true) {
      skip_ws();
      if (peek() == ')') break;
      if (peek() < '0' || peek() > '9') fail("expected a non-negative integer in 'shape'");
      std::int64_t x = 0;
      while (peek() >= '0' && peek() <= '9') {
        const int digit = peek() - '0';
        if (x > (std::numeric_limits<std::int64_t>::max() - digit) / 10)
          fail("dimension too large in 'shape'");
        x = x * 10 + digit;
        ++pos_;
      }
      v.push_back(x);
      skip_ws();
      if (peek() == ',') {
        ++pos_;
      } else if (peek() != ')') {
        fail("expected ',' or ')' in 'shape'");
      }
    }
    ++pos_;
    return v;
  }

  const std::string& s_;
  const std::string& what_;
  std::size_t pos_ = 0;
};

// Maps a header descr to the canonical spelling used here, or throws naming the problem.
std::string normalise_descr(const std::string& descr, const std::string& what) {
  if (descr.size() == 3) {
    const char order = descr[0];
    const std::string_view type(descr.data() + 1, 2);
    if (type == "u1" && (order == '|' || order == '<' || order == '>' || order == '=')) return "|u1";
    if (type == "f4" || type == "f2" || type == "u2") {
      if (order == '<' || order == '=') return "<" + std::string(type);
      if (order == '>') {
        throw NpyError(what + ": big-endian data ('" + descr +
                       "') is not supported; convert with .astype('<" + std::string(type) + "')");
      }
    }
  }
  throw NpyError(
      what + ": unsupported dtype '" + descr +
      "' (conv3d-dx reads '<f4' fp32, '<f2' fp16, '<u2' bf16 bits, '|u1' hifloat8 or float8_e4m3fn "
      "codes)");
}

std::int64_t element_count(const std::vector<std::int64_t>& shape, const std::string& what) {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) {
    if (d < 0) throw NpyError(what + ": negative dimension in shape " + shape_text(shape));
    if (d != 0 && n > std::numeric_limits<std::int64_t>::max() / 8 / d) {
      throw NpyError(what + ": shape " + shape_text(shape) + " is too large");
    }
    n *= d;
  }
  return n;
}

std::string header_bytes(const std::string& descr, const std::vector<std::int64_t>& shape) {
  std::string dict =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape_text(shape) + ", }";
  // Version 1.0: magic, 2 version bytes, 2 length bytes, then the dict padded with spaces and ended by '\n'
  // so that the data starts at a multiple of 64 bytes.
  const std::size_t unpadded = kMagicLen + 4 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  if (dict.size() > 0xFFFF) throw NpyError("npy header too long for format 1.0");
  std::string out(kMagic, kMagicLen);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xFF);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict;
}

std::string system_error(const std::string& what) { return what + ": " + std::strerror(errno); }

void write_all(int fd, const void* data, std::size_t bytes, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw NpyError(system_error("cannot write " + what));
    }
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

}  // namespace

std::int64_t Array::elements() const { return element_count(shape, "array"); }

const char* descr_for(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "<f4";
    case DType::f16:
      return "<f2";
    case DType::bf16:
      return "<u2";
    case DType::hif8:
    case DType::fp8_e4m3fn:
      return "|u1";
  }
  return "?";
}

std::size_t item_size(const std::string& descr) {
  if (descr == "<f4") return 4;
  if (descr == "<f2" || descr == "<u2") return 2;
  if (descr == "|u1") return 1;
  throw NpyError("unsupported dtype '" + descr + "'");
}

void parse_header(const std::string& header, const std::string& what, std::string& descr,
                  std::vector<std::int64_t>& shape) {
  std::string raw;
  HeaderParser(header, what).parse(raw, shape);
  descr = normalise_descr(raw, what);
  element_count(shape, what);
}

Array read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw NpyError(system_error("cannot open " + path));
  in.seekg(0, std::ios::end);
  const std::streamoff file_size = in.tellg();
  in.seekg(0, std::ios::beg);
  if (file_size < 0 || !in) throw NpyError(path + ": cannot read (not a regular file?)");

  char prefix[kMagicLen + 2] = {};
  if (!in.read(prefix, sizeof prefix) || std::memcmp(prefix, kMagic, kMagicLen) != 0) {
    throw NpyError(path + ": not a .npy file (bad magic; expected \\x93NUMPY)");
  }
  const int major = static_cast<unsigned char>(prefix[kMagicLen]);
  const int minor = static_cast<unsigned char>(prefix[kMagicLen + 1]);
  if (major < 1 || major > 3 || minor != 0) {
    throw NpyError(path + ": unsupported .npy format version " + std::to_string(major) + "." +
                   std::to_string(minor) + " (1.0, 2.0 and 3.0 are read)");
  }
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  unsigned char len_raw[4] = {};
  if (!in.read(reinterpret_cast<char*>(len_raw), static_cast<std::streamsize>(len_bytes))) {
    throw NpyError(path + ": truncated header (file ends inside the header length)");
  }
  std::uint64_t header_len = 0;
  for (std::size_t i = 0; i < len_bytes; ++i) header_len |= std::uint64_t{len_raw[i]} << (8 * i);
  const std::uint64_t data_offset = kMagicLen + 2 + len_bytes + header_len;
  if (data_offset > static_cast<std::uint64_t>(file_size)) {
    throw NpyError(path + ": truncated header (declares " + std::to_string(header_len) +
                   " bytes, the file has " + std::to_string(file_size) + " bytes in all)");
  }
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));

  Array a;
  parse_header(header, path, a.descr, a.shape);
  const std::uint64_t need = static_cast<std::uint64_t>(element_count(a.shape, path)) * item_size(a.descr);
  const std::uint64_t have = static_cast<std::uint64_t>(file_size) - data_offset;
  if (have < need) {
    throw NpyError(path + ": truncated data (shape " + shape_text(a.shape) + " of '" + a.descr + "' needs " +
                   std::to_string(need) + " bytes, the file holds " + std::to_string(have) + ")");
  }
  if (have > need) {
    throw NpyError(path + ": " + std::to_string(have - need) +
                   " unexpected bytes after the array data (shape " + shape_text(a.shape) + " of '" +
                   a.descr + "' is " + std::to_string(need) + " bytes)");
  }
  a.data.resize(need);
  if (need > 0 && !in.read(reinterpret_cast<char*>(a.data.data()), static_cast<std::streamsize>(need))) {
    throw NpyError(path + ": read error in the array data");
  }
  return a;
}

std::vector<std::byte> encode(const std::string& descr, const std::vector<std::int64_t>& shape,
                              const void* data, std::size_t bytes) {
  const std::string header = header_bytes(descr, shape);
  std::vector<std::byte> out(header.size() + bytes);
  std::memcpy(out.data(), header.data(), header.size());
  if (bytes) std::memcpy(out.data() + header.size(), data, bytes);
  return out;
}

void write(const std::string& path, const std::string& descr, const std::vector<std::int64_t>& shape,
           const void* data, std::size_t bytes) {
  const std::vector<std::byte> file = encode(descr, shape, data, bytes);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(file.size()));
  out.close();
  if (!out) throw NpyError(system_error("cannot write " + path));
}

namespace {

// The temporary file of the AtomicWriter in progress, removed by a handler when a signal stops the process.
// One at a time: a second writer while one is armed gets no signal cleanup (the CLI writes one output).
constexpr int kCleanupSignals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE, SIGXCPU, SIGXFSZ};
constexpr std::size_t kSignals = sizeof kCleanupSignals / sizeof kCleanupSignals[0];
char g_temp[PATH_MAX + 1];
volatile std::sig_atomic_t g_armed = 0;
struct sigaction g_previous[kSignals];
bool g_replaced[kSignals];

extern "C" void remove_temp_and_stop(int sig) {
  if (g_armed) ::unlink(g_temp);
  // SA_RESETHAND restored the default action; the signal is blocked until this returns, then it stops the
  // process as it would have (the exit status names it).
  ::raise(sig);
}

// Installs the handler for the signals whose action is the default (an ignored signal stays ignored).
bool arm_cleanup(const std::string& temp) {
  if (g_armed || temp.size() > PATH_MAX) return false;
  std::memcpy(g_temp, temp.c_str(), temp.size() + 1);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  g_armed = 1;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  for (std::size_t i = 0; i < kSignals; ++i) {
    g_replaced[i] = false;
    struct sigaction current {};
    if (::sigaction(kCleanupSignals[i], nullptr, &current) != 0 || current.sa_handler != SIG_DFL) continue;
    struct sigaction action {};
    action.sa_handler = remove_temp_and_stop;
    action.sa_flags = SA_RESETHAND;
    sigemptyset(&action.sa_mask);
    g_replaced[i] = ::sigaction(kCleanupSignals[i], &action, &g_previous[i]) == 0;
  }
  return true;
}

// Holds the cleanup signals back from the calling thread while the temporary file is created and the
// handler armed: a signal in between would otherwise stop the process by its default action and leave the
// file (the CLI creates its writer before any worker thread exists, so this thread is the one to receive it).
// A signal held back is delivered, to the armed handler, when the mask is restored.
class CleanupSignalsHeld {
 public:
  CleanupSignalsHeld() {
    sigset_t held;
    sigemptyset(&held);
    for (int sig : kCleanupSignals) sigaddset(&held, sig);
    ::pthread_sigmask(SIG_BLOCK, &held, &previous_);
  }
  ~CleanupSignalsHeld() { ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  CleanupSignalsHeld(const CleanupSignalsHeld&) = delete;
  CleanupSignalsHeld& operator=(const CleanupSignalsHeld&) = delete;

 private:
  sigset_t previous_;
};

void disarm_cleanup() {
  for (std::size_t i = 0; i < kSignals; ++i)
    if (g_replaced[i]) ::sigaction(kCleanupSignals[i], &g_previous[i], nullptr);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  g_armed = 0;
}

// The file a write to `path` must replace: symbolic links followed, also dangling ones (the file they name
// is created). `st` receives the file's status and `exists` whether it exists.
std::string follow_links(const std::string& path, struct stat& st, bool& exists) {
  exists = ::stat(path.c_str(), &st) == 0;
  if (exists) {
    if (!S_ISREG(st.st_mode)) return path;  // written in place through the name as given
    char* real = ::realpath(path.c_str(), nullptr);
    if (real == nullptr) return path;
    std::string resolved(real);
    std::free(real);
    return resolved;
  }
  if (errno != ENOENT) throw NpyError(system_error("cannot write the output file " + path));
  std::string p = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat link {};
    if (::lstat(p.c_str(), &link) != 0 || !S_ISLNK(link.st_mode)) return p;
    std::string target(static_cast<std::size_t>(link.st_size > 0 ? link.st_size : PATH_MAX) + 1, '\0');
    const ssize_t n = ::readlink(p.c_str(), target.data(), target.size());
    if (n < 0) throw NpyError(system_error("cannot follow the symbolic link " + p));
    target.resize(static_cast<std::size_t>(n));
    const std::filesystem::path from(p);
    p = target.front() == '/' || !from.has_parent_path() ? target : (from.parent_path() / target).string();
  }
  throw NpyError("cannot write the output file " + path + ": more than 40 symbolic links to follow");
}

}  // namespace

AtomicWriter::AtomicWriter(std::string path) : path_(std::move(path)) {
  struct stat st {};
  bool exists = false;
  target_ = follow_links(path_, st, exists);
  if (exists && S_ISDIR(st.st_mode))
    throw NpyError("cannot write the output file " + path_ + ": it is a directory");
  if (exists && !S_ISREG(st.st_mode)) {  // a FIFO, a device, a terminal: written in place at commit
    if (::access(target_.c_str(), W_OK) != 0) throw NpyError(system_error("cannot write " + path_));
    in_place_ = true;
    return;
  }
  const std::filesystem::path target(target_);
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  std::string name = dir + "/.c3dx-XXXXXX";  // short, so any name the directory takes works
  {
    const CleanupSignalsHeld held;
    fd_ = ::mkostemp(name.data(), O_CLOEXEC);
    if (fd_ < 0)
      throw NpyError(
          system_error("cannot create the output file " + path_ + " (temporary file in " + dir + ")"));
    temp_ = name;
    armed_ = arm_cleanup(temp_);
  }
  // The file keeps its owner (where the system allows) and mode; a new one gets 0666 less the umask.
  if (exists) {
    if ((st.st_uid != ::geteuid() || st.st_gid != ::getegid()) && ::fchown(fd_, st.st_uid, st.st_gid) != 0 &&
        errno != EPERM) {
      const NpyError error(system_error("cannot keep the owner of " + path_));
      discard();
      throw error;
    }
    ::fchmod(fd_, st.st_mode & 07777);
  } else {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    ::fchmod(fd_, 0666 & ~mask);
  }
}

AtomicWriter::~AtomicWriter() { discard(); }

void AtomicWriter::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) {
    ::unlink(temp_.c_str());
    temp_.clear();
  }
  if (armed_) disarm_cleanup();
  armed_ = false;
}

void AtomicWriter::commit(const std::string& descr, const std::vector<std::int64_t>& shape, const void* data,
                          std::size_t bytes) {
  const std::string header = header_bytes(descr, shape);
  if (in_place_) {
    const int fd = ::open(target_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw NpyError(system_error("cannot write " + path_));
    try {
      write_all(fd, header.data(), header.size(), path_);
      write_all(fd, data, bytes, path_);
    } catch (...) {
      ::close(fd);
      throw;
    }
    if (::close(fd) != 0) throw NpyError(system_error("cannot write " + path_));
    return;
  }
  write_all(fd_, header.data(), header.size(), path_);
  write_all(fd_, data, bytes, path_);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw NpyError(system_error("cannot write " + path_));
  if (std::rename(temp_.c_str(), target_.c_str()) != 0)
    throw NpyError(system_error("cannot create " + path_));
  temp_.clear();
  if (armed_) disarm_cleanup();
  armed_ = false;
}

}  // namespace conv3d_dx::npy
