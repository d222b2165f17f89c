// The output file of `conv3d-dx run`: symbolic links followed, names up to the file system's limit, mode
// and owner kept, FIFOs and devices written in place, no temporary file left by SIGINT, SIGTERM or SIGHUP;
// and the threads: a count above the limit refused, threads the system refuses to start not fatal.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "check.hpp"
#include "npy.hpp"
#include "support.hpp"

namespace conv3d_dx::cli::testing {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// A small problem's files in `dir`; run(...) adds -o and any extra flags.
struct Small {
  TempDir dir;
  Prepared prep = prepare(Case{}, dir);

  ProcessResult run(const std::string& out, std::vector<std::string> extra = {}) const {
    std::vector<std::string> args = prep.args;
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"-o", out});
    return run_cli(args);
  }
  // y as written to `bytes` (a whole .npy file) matches the reference.
  void expect_y(const std::string& bytes) const {
    const std::string path = dir.file("check.npy");
    write_file(path, bytes);
    const npy::Array y = npy::read(path);
    std::remove(path.c_str());
    ASSERT_EQ(y.shape, prep.y_shape);
    const Problem p = validate(prep.spec);
    const CheckResult check = check_against_reference(p, prep.dy.data(), prep.w.data(), y.data.data());
    EXPECT_TRUE(check.ok()) << check.first_failure;
  }
};

struct stat status_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

TEST(CliOutputFile, ASymbolicLinkIsFollowed) {
  Small s;
  write_file(s.dir.file("target.npy"), "old");
  ASSERT_EQ(::symlink("target.npy", s.dir.file("link.npy").c_str()), 0);
  const ProcessResult r = s.run(s.dir.file("link.npy"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(S_ISLNK(status_of(s.dir.file("link.npy")).st_mode)) << "the link was replaced";
  s.expect_y(read_file(s.dir.file("target.npy")));
  // A dangling link: the file it names is created.
  ASSERT_EQ(::symlink("sub/new.npy", s.dir.file("dangling.npy").c_str()), 0);
  ASSERT_EQ(::mkdir(s.dir.file("sub").c_str(), 0755), 0);
  const ProcessResult d = s.run(s.dir.file("dangling.npy"));
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_TRUE(S_ISLNK(status_of(s.dir.file("dangling.npy")).st_mode));
  s.expect_y(read_file(s.dir.file("sub/new.npy")));
  EXPECT_EQ(s.dir.entries(),
            (std::vector<std::string>{"dangling.npy", "dy.npy", "link.npy", "sub", "target.npy", "w.npy"}));
}

TEST(CliOutputFile, ANameOfTheLongestLengthWorks) {
  Small s;
  const std::string name = std::string(251, 'y') + ".npy";  // 255 bytes, NAME_MAX
  const ProcessResult r = s.run(s.dir.file(name));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  s.expect_y(read_file(s.dir.file(name)));
  EXPECT_EQ(s.dir.entries(), (std::vector<std::string>{"dy.npy", "w.npy", name}));
}

TEST(CliOutputFile, AnExistingFileKeepsItsModeAndOwner) {
  Small s;
  const std::string y = s.dir.file("y.npy");
  write_file(y, "old");
  ASSERT_EQ(::chmod(y.c_str(), 0640), 0);
  const bool root = ::geteuid() == 0;
  if (root) {
    ASSERT_EQ(::chown(y.c_str(), 4321, 8765), 0);
  }
  const ProcessResult r = s.run(y);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const struct stat st = status_of(y);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  if (root) {
    EXPECT_EQ(st.st_uid, 4321u);
    EXPECT_EQ(st.st_gid, 8765u);
  }
  s.expect_y(read_file(y));
  // A new file gets 0666 less the umask, as a file the shell creates.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  const ProcessResult n = s.run(s.dir.file("new.npy"));
  ASSERT_EQ(n.exit_code, 0) << n.err;
  EXPECT_EQ(status_of(s.dir.file("new.npy")).st_mode & 07777, 0666u & ~mask);
}

TEST(CliOutputFile, AFifoIsWrittenInPlace) {
  Small s;
  const std::string fifo = s.dir.file("y.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  // A reader that does not block: the output is small enough for the pipe's buffer.
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  const ProcessResult r = s.run(fifo);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::string bytes;
  char buf[4096];
  for (ssize_t n; (n = ::read(reader, buf, sizeof buf)) > 0;) bytes.append(buf, static_cast<std::size_t>(n));
  ::close(reader);
  EXPECT_TRUE(S_ISFIFO(status_of(fifo).st_mode)) << "the FIFO was replaced";
  s.expect_y(bytes);
  EXPECT_EQ(s.dir.entries(), (std::vector<std::string>{"dy.npy", "w.npy", "y.fifo"}));
}

TEST(CliOutputFile, ACharacterDeviceIsWrittenInPlace) {
  Small s;
  const ProcessResult null = s.run("/dev/null");
  EXPECT_EQ(null.exit_code, 0) << null.err;
  EXPECT_TRUE(S_ISCHR(status_of("/dev/null").st_mode));
  struct stat full {};
  if (::stat("/dev/full", &full) == 0 && S_ISCHR(full.st_mode)) {
    const ProcessResult r = s.run("/dev/full");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("conv3d-dx: cannot write /dev/full: No space left on device"), std::string::npos)
        << r.err;
    EXPECT_TRUE(S_ISCHR(status_of("/dev/full").st_mode));
  }
  // A directory is refused before any work.
  const ProcessResult d = s.run(s.dir.path());
  EXPECT_EQ(d.exit_code, 1);
  EXPECT_NE(d.err.find("it is a directory"), std::string::npos) << d.err;
}

// A run long enough to be stopped while it computes: the reference engine on 124 million products.
TEST(CliOutputFile, NoTemporaryFileIsLeftWhenASignalStopsTheRun) {
  TempDir dir, logs;
  Case c;
  c.Cin_g = c.Cout_g = 24;
  c.in = {20, 20, 20};
  c.kernel = {3, 3, 3};
  c.pad_front = c.pad_back = {1, 1, 1};
  const Prepared prep = prepare(c, dir);
  std::vector<std::string> args = prep.args;
  args.insert(args.end(), {"--isa", "reference", "--threads", "1", "-o", dir.file("y.npy")});
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    SCOPED_TRACE(strsignal(sig));
    const int pid = start_cli(args, logs);
    // Wait for the temporary file: from then on the CLI computes.
    bool started = false;
    for (int i = 0; i < 6000 && !started; ++i) {
      for (const std::string& e : dir.entries()) started |= e != "dy.npy" && e != "w.npy";
      if (!started) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_TRUE(started) << read_file(logs.file("stderr"));
    ::kill(pid, sig);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) {
    }
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig)
        << "status " << status << ": " << read_file(logs.file("stderr"));
    EXPECT_EQ(dir.entries(), (std::vector<std::string>{"dy.npy", "w.npy"}));
  }
}

TEST(CliThreads, MoreThanFourPerHardwareThreadIsInvalid) {
  Small s;
  const int most = 4 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const ProcessResult r = s.run(s.dir.file("y.npy"), {"--threads", std::to_string(most + 1)});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("invalid threads: threads is " + std::to_string(most + 1) + " but must be in [0, " +
                       std::to_string(most) + "]"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(s.dir.entries(), (std::vector<std::string>{"dy.npy", "w.npy"}));
}

// Thread stacks of 1 GiB in an address space of 900 MB: no worker can start; the run uses the main thread
// alone and says so with --verbose.
TEST(CliThreads, ThreadsTheSystemRefusesAreNotFatal) {
  if (kSanitized) GTEST_SKIP() << "sanitizer runtimes need more address space than this limit";
  Small s;
  std::vector<std::string> argv = {"/bin/sh", "-c", "ulimit -s 1048576 && ulimit -v 900000 && exec \"$@\"",
                                   "sh", CONV3D_DX_CLI};
  argv.insert(argv.end(), s.prep.args.begin(), s.prep.args.end());
  argv.insert(argv.end(), {"--threads", "4", "--verbose", "-o", s.dir.file("y.npy")});
  const ProcessResult r = run_program(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("only 1 of 4 threads could be started"), std::string::npos) << r.err;
  s.expect_y(read_file(s.dir.file("y.npy")));
  EXPECT_EQ(s.dir.entries(), (std::vector<std::string>{"dy.npy", "w.npy", "y.npy"}));
}

}  // namespace
}  // namespace conv3d_dx::cli::testing
