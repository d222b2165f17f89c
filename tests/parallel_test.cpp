// parallel_for (src/common/parallel.hpp): fixed chunks covering every index once, exceptions reaching the
// caller, nested calls run serially, concurrent callers with their own workers, a forked child, and a
// system that refuses to start threads (the work then runs on the threads that did start). parallel_chunks:
// chunks of the grain each taken once, no overflow near INT64_MAX, exceptions. Plan's thread limit. The
// Threads* names are what the ThreadSanitizer build of .ci/run runs.
#include "common/parallel.hpp"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "support/testing.hpp"

namespace conv3d_dx::testing {
namespace {

using Chunks = std::vector<std::pair<std::int64_t, std::int64_t>>;

Chunks chunks_of(int threads, std::int64_t n) {
  Chunks chunks;
  std::mutex m;
  parallel_for(threads, n, [&](std::int64_t b, std::int64_t e) {
    std::lock_guard<std::mutex> lock(m);
    chunks.emplace_back(b, e);
  });
  std::sort(chunks.begin(), chunks.end());
  return chunks;
}

TEST(ThreadsParallelFor, FixedChunksCoverEveryIndexOnce) {
  for (int threads : {1, 2, 3, 5, 8})
    for (std::int64_t n : {0, 1, 2, 3, 7, 100, 1000003}) {
      const Chunks chunks = chunks_of(threads, n);
      const std::int64_t used = std::min<std::int64_t>(threads, n);
      ASSERT_EQ(static_cast<std::int64_t>(chunks.size()), used) << threads << " threads, n " << n;
      for (std::int64_t t = 0; t < used; ++t) {
        EXPECT_EQ(chunks[static_cast<std::size_t>(t)].first, n * t / used) << threads << " threads, n " << n;
        EXPECT_EQ(chunks[static_cast<std::size_t>(t)].second, n * (t + 1) / used) << threads << ", n " << n;
      }
    }
}

TEST(ThreadsParallelFor, RangesNearInt64MaxDoNotOverflow) {
  const std::int64_t n = INT64_MAX;
  const Chunks chunks = chunks_of(3, n);
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks.front().first, 0);
  EXPECT_EQ(chunks.back().second, n);
  for (std::size_t i = 1; i < chunks.size(); ++i) EXPECT_EQ(chunks[i].first, chunks[i - 1].second);
  EXPECT_EQ(chunks[1].first, n / 3);  // floor(n * 1 / 3), computed without n * t
}

TEST(ThreadsParallelFor, AnExceptionReachesTheCallerAfterEveryChunkRan) {
  for (int failing : {0, 1, 2}) {
    std::atomic<int> ran{0};
    try {
      parallel_for(3, 3, [&](std::int64_t b, std::int64_t) {
        ++ran;
        if (b == failing) throw std::runtime_error("chunk " + std::to_string(b));
      });
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "chunk " + std::to_string(failing));
    }
    EXPECT_EQ(ran.load(), 3);
  }
  EXPECT_EQ(chunks_of(3, 9).size(), 3u);  // the workers are still there
}

// parallel_chunks: the chunks every call took, and how many calls there were.
std::pair<Chunks, int> drained(int threads, std::int64_t n, std::int64_t grain) {
  Chunks chunks;
  int calls = 0;
  std::mutex m;
  ChunkQueue queue(n, grain);
  parallel_chunks(threads, queue, [&](ChunkQueue& q) {
    Chunks mine;
    for (std::int64_t b, e; q.next(b, e);) mine.emplace_back(b, e);
    std::lock_guard<std::mutex> lock(m);
    ++calls;
    chunks.insert(chunks.end(), mine.begin(), mine.end());
  });
  std::sort(chunks.begin(), chunks.end());
  return {chunks, calls};
}

TEST(ThreadsParallelChunks, ChunksOfTheGrainCoverEveryIndexOnce) {
  for (int threads : {1, 2, 3, 5, 8})
    for (std::int64_t n : {0, 1, 2, 7, 100, 1000003})
      for (std::int64_t grain : {1, 3, 64}) {
        const auto [chunks, calls] = drained(threads, n, grain);
        const std::int64_t expected = (n + grain - 1) / grain;
        ASSERT_EQ(static_cast<std::int64_t>(chunks.size()), expected) << threads << " threads, n " << n;
        EXPECT_LE(calls, std::min<std::int64_t>(threads, expected)) << threads << " threads, n " << n;
        for (std::size_t i = 0; i < chunks.size(); ++i) {
          EXPECT_EQ(chunks[i].first, static_cast<std::int64_t>(i) * grain);
          EXPECT_EQ(chunks[i].second, std::min(n, chunks[i].first + grain));
        }
      }
}

TEST(ThreadsParallelChunks, CountsNearInt64MaxDoNotOverflow) {
  const std::int64_t n = INT64_MAX, grain = INT64_MAX / 2 + 1;
  const auto [chunks, calls] = drained(3, n, grain);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0], std::make_pair(std::int64_t{0}, grain));
  EXPECT_EQ(chunks[1], std::make_pair(grain, n));
  ChunkQueue queue(n, grain);
  std::int64_t b = 0, e = 0;
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(queue.next(b, e));
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(queue.next(b, e));  // asking again past the end stays false
}

TEST(ThreadsParallelChunks, AnExceptionReachesTheCallerAfterEveryCallEnded) {
  std::atomic<int> ran{0};
  ChunkQueue queue(100, 1);
  try {
    parallel_chunks(3, queue, [&](ChunkQueue& q) {
      ++ran;
      for (std::int64_t b, e; q.next(b, e);)
        if (b == 50) throw std::runtime_error("chunk 50");
    });
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "chunk 50");
  }
  EXPECT_GE(ran.load(), 1);
  EXPECT_LE(ran.load(), 3);
}

TEST(ThreadsParallelFor, NestedCallsRunSerially) {
  std::atomic<int> inner_calls{0}, whole{0};
  parallel_for(2, 2, [&](std::int64_t, std::int64_t) {
    parallel_for(4, 10, [&](std::int64_t b, std::int64_t e) {
      ++inner_calls;
      if (b == 0 && e == 10) ++whole;
    });
  });
  EXPECT_EQ(inner_calls.load(), 2);
  EXPECT_EQ(whole.load(), 2);
}

// Several threads calling at once, each with its own workers, each getting its own sums.
TEST(ThreadsParallelFor, ConcurrentCallersGetTheirOwnResults) {
  constexpr int kCallers = 4, kRounds = 200;
  std::vector<std::int64_t> bad(kCallers, 0);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c)
    callers.emplace_back([&bad, c] {
      for (int round = 0; round < kRounds; ++round) {
        const std::int64_t n = 1000 + c * 7 + round;
        std::vector<std::int64_t> out(static_cast<std::size_t>(n), -1);
        parallel_for(2 + c % 2, n, [&](std::int64_t b, std::int64_t e) {
          for (std::int64_t i = b; i < e; ++i) out[static_cast<std::size_t>(i)] = i * c;
        });
        for (std::int64_t i = 0; i < n; ++i)
          bad[static_cast<std::size_t>(c)] += out[static_cast<std::size_t>(i)] != i * c;
      }
    });
  for (auto& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) EXPECT_EQ(bad[static_cast<std::size_t>(c)], 0) << "caller " << c;
}

// Runs `body` in a forked child (killed after 60 s) and returns its exit status, -1 if it did not exit.
template <class F>
int in_child(F&& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(60);
    _exit(body() ? 0 : 1);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool sums_right(int threads) {
  std::vector<std::int64_t> out(1000, 0);
  parallel_for(threads, 1000, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) out[static_cast<std::size_t>(i)] = 3 * i;
  });
  for (std::int64_t i = 0; i < 1000; ++i)
    if (out[static_cast<std::size_t>(i)] != 3 * i) return false;
  return true;
}

// The parent's workers do not exist in a forked child; the child starts its own.
TEST(ThreadsParallelFor, WorksInAForkedChild) {
  if (kSanitizedBuild) GTEST_SKIP() << "fork with sanitizer runtimes' threads is not reliable";
  ASSERT_TRUE(sums_right(2));  // the parent has workers now
  EXPECT_EQ(in_child([] { return sums_right(2) && reserve_threads(2) == 2; }), 0);
}

// With the address space too small for another thread's stack, no thread can start: the work runs on the
// caller alone, with the same results, and a Plan asking for 3 threads runs with 1.
TEST(ThreadsParallelFor, ThreadsTheSystemRefusesFallBackToTheCaller) {
  if (kSanitizedBuild) GTEST_SKIP() << "sanitizer runtimes need address space beyond the limit this sets";
  const int status = in_child([] {
    std::ifstream statm("/proc/self/statm");
    long pages = 0;
    statm >> pages;
    const rlim_t used = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE));
    // New threads get 1 GiB stacks (stacks cached from the parent's threads are too small to reuse) and
    // the address space has 64 MiB to spare.
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0 || pthread_attr_setstacksize(&attr, std::size_t{1} << 30) != 0 ||
        pthread_setattr_default_np(&attr) != 0)
      return false;
    const rlimit limit{used + (64 << 20), used + (64 << 20)};
    if (setrlimit(RLIMIT_AS, &limit) != 0) return false;
    if (reserve_threads(3) != 1) {
      std::fprintf(stderr, "threads started although the address space is full\n");
      return false;
    }
    if (!sums_right(3)) return false;
    Case c;
    std::mt19937_64 rng(3);
    Instance inst = instantiate(c, rng, Fill::small_integers);
    Options o;
    o.threads = 3;
    o.isa = Isa::portable;
    Plan plan(validate(inst.spec), o);
    if (plan.threads() != 1) {
      std::fprintf(stderr, "the plan runs %d threads\n", plan.threads());
      return false;
    }
    plan.execute(inst.dy.view.data, inst.filter.view.data, inst.y.view.data);
    return static_cast<bool>(matches_reference(plan.problem(), inst));
  });
  EXPECT_EQ(status, 0);
}

// Separate Plans (different engines and dtypes) executed on several threads at once, each with 2 threads of
// its own: every result matches the reference (and ThreadSanitizer sees no race).
TEST(ThreadsPlan, SeparatePlansRunOnSeveralThreadsAtOnce) {
  const std::pair<DType, Isa> kinds[] = {{DType::f32, Isa::best},
                                         {DType::bf16, Isa::best},
                                         {DType::hif8, Isa::portable},
                                         {DType::f16, Isa::best}};
  std::vector<Instance> instances;
  std::vector<Plan> plans;
  std::mt19937_64 rng(5);
  for (auto [t, isa] : kinds) {
    Case c = with_dtype(Case{}, t);
    c.Cin = 12;
    c.Cout = 6;
    c.in = {4, 6, 7};
    c.stride = {1, 2, 1};
    c.pad_front = {1, 1, 1};
    instances.push_back(instantiate(c, rng, Fill::random));
    Options o;
    o.isa = isa;
    o.threads = 2;
    plans.emplace_back(validate(instances.back().spec), o);
  }
  std::vector<int> wrong(plans.size(), 0);
  std::vector<std::thread> callers;
  for (std::size_t i = 0; i < plans.size(); ++i)
    callers.emplace_back([&, i] {
      for (int round = 0; round < 5; ++round) {
        Instance& inst = instances[i];
        plans[i].execute(inst.dy.view.data, inst.filter.view.data, inst.y.view.data);
        wrong[i] += !matches_reference(plans[i].problem(), inst);
      }
    });
  for (auto& t : callers) t.join();
  for (std::size_t i = 0; i < plans.size(); ++i) EXPECT_EQ(wrong[i], 0) << plans[i].engine_name();
}

TEST(ThreadsPlan, MoreThanFourPerHardwareThreadIsRefused) {
  std::mt19937_64 rng(3);
  Instance inst = instantiate(Case{}, rng, Fill::small_integers);
  const Problem p = validate(inst.spec);
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  Options o;
  o.threads = 4 * hardware;
  EXPECT_NO_THROW(Plan(p, o));
  o.threads = 4 * hardware + 1;
  try {
    Plan plan(p, o);
    ADD_FAILURE() << "accepted " << o.threads << " threads";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_EQ(e.parameter(), "threads");
    EXPECT_NE(std::string(e.what()).find("threads is " + std::to_string(4 * hardware + 1) +
                                         " but must be in [0, " + std::to_string(4 * hardware) + "]"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace conv3d_dx::testing
