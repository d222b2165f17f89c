// Work splitting whose results never depend on scheduling: parallel_for splits statically (the same n and
// thread count always give the same chunks); parallel_chunks hands chunks to whichever thread asks next, for
// tasks whose results do not depend on the thread that runs them. Either way each index is handled by
// exactly one thread, and nothing is summed across threads.
//
// The threads: each thread that calls parallel_for gets its own team of worker threads, started on first
// need and kept until that thread exits (so concurrent callers never share or wait for workers). When the
// system refuses to start a thread (thread or memory limits), the work is split over the threads that did
// start, down to the caller alone: a thread shortage slows a call down but never fails or aborts it.
// Results do not depend on the number of threads, so they are the same either way.
#pragma once

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace conv3d_dx {
namespace detail {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Bumped in the child of every fork(): the workers of a team exist only in the process that started them.
inline std::atomic<unsigned>& fork_generation() {
  static std::atomic<unsigned> generation{0};
  return generation;
}

class Team {
 public:
  // The team of the calling thread.
  static Team& of_this_thread() {
    thread_local Team team;
    return team;
  }
  // True on a worker, and on a caller while its team runs a job: parallel_for there runs serially.
  static bool& inside_job() {
    thread_local bool inside = false;
    return inside;
  }

  // Starts workers until `count` run or the system refuses another thread; returns how many of `count` can
  // run (more may exist from earlier calls).
  int reserve(int count) noexcept {
    forget_workers_after_fork();
    const std::size_t want = static_cast<std::size_t>(std::max(count, 0));
    if (workers_.size() < want) {
      try {
        if (workers_.capacity() < want) workers_.reserve(want);
        while (workers_.size() < want) {
          auto w = std::make_unique<Worker>();
          const int task = static_cast<int>(workers_.size()) + 1;
          w->thread = std::thread(&Team::work, this, w.get(), task);
          workers_.push_back(std::move(w));  // capacity reserved: does not throw
        }
      } catch (...) {  // std::system_error (no thread) or std::bad_alloc: keep the workers that started
      }
      static const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
      spin_.store(workers_.size() + 1 <= hardware, std::memory_order_relaxed);
    }
    return static_cast<int>(std::min(workers_.size(), want));
  }

  // Runs body(ctx, t) for t in [0, used): t = 0 on the calling thread, the others on workers 1..used-1,
  // which must have been reserved. Returns when all are done; rethrows the first exception a task threw.
  void run(int used, void (*body)(void*, int), void* ctx) {
    body_ = body;
    ctx_ = ctx;
    error_ = nullptr;
    pending_.store(used - 1, std::memory_order_relaxed);
    for (int t = 1; t < used; ++t) {
      Worker& w = *workers_[static_cast<std::size_t>(t - 1)];
      w.ticket.fetch_add(1, std::memory_order_release);
      w.ticket.notify_one();
    }
    inside_job() = true;
    try {
      body(ctx, 0);
    } catch (...) {
      keep_error();
    }
    inside_job() = false;
    int left;
    for (int spin = 0; (left = pending_.load(std::memory_order_acquire)) != 0; ++spin) {
      if (spin < kSpins && spin_.load(std::memory_order_relaxed))
        cpu_relax();
      else
        pending_.wait(left, std::memory_order_acquire);
    }
    if (error_) std::rethrow_exception(error_);
  }

  Team(const Team&) = delete;
  Team& operator=(const Team&) = delete;

 private:
  // Pause iterations a waiting thread spins before it sleeps: back-to-back parallel regions of one call then
  // start without a wake-up through the kernel. How long that is depends on the CPU's pause (about 16 ns
  // on the Xeon of the README's tables: ~0.26 ms).
  static constexpr int kSpins = 1 << 14;

  struct Worker {
    std::atomic<std::uint32_t> ticket{0};  // bumped to start a job, or to stop
    std::thread thread;
  };

  Team() : generation_(fork_generation().load()) {
    static const bool registered = [] {
      pthread_atfork(nullptr, nullptr, [] { fork_generation().fetch_add(1); });
      return true;
    }();
    (void)registered;
  }

  ~Team() {
    forget_workers_after_fork();
    stopping_.store(true, std::memory_order_relaxed);
    for (auto& w : workers_) {
      w->ticket.fetch_add(1, std::memory_order_release);
      w->ticket.notify_one();
    }
    for (auto& w : workers_) w->thread.join();
  }

  void work(Worker* w, int task) {
    inside_job() = true;
    std::uint32_t seen = 0;
    for (;;) {
      std::uint32_t ticket;
      for (int spin = 0; (ticket = w->ticket.load(std::memory_order_acquire)) == seen; ++spin) {
        if (spin < kSpins && spin_.load(std::memory_order_relaxed))
          cpu_relax();
        else
          w->ticket.wait(seen, std::memory_order_acquire);
      }
      seen = ticket;
      if (stopping_.load(std::memory_order_relaxed)) return;
      try {
        body_(ctx_, task);
      } catch (...) {
        keep_error();
      }
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
    }
  }

  void keep_error() {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }

  // In the child of a fork only the forking thread exists: its old workers are gone and are never joined
  // (their objects are kept, unreachable to the team, so nothing waits on them).
  void forget_workers_after_fork() {
    const unsigned now = fork_generation().load();
    if (now == generation_) return;
    generation_ = now;
    static auto* gone = new std::vector<std::unique_ptr<Worker>>;  // never destroyed: the threads are not
    for (auto& w : workers_) gone->push_back(std::move(w));
    workers_.clear();
  }

  std::vector<std::unique_ptr<Worker>> workers_;
  unsigned generation_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> spin_{false};  // whether waiting threads spin first (not when oversubscribed)
  // The job: written by run() before it bumps the tickets, read by the workers after they see them.
  void (*body_)(void*, int) = nullptr;
  void* ctx_ = nullptr;
  std::atomic<int> pending_{0};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace detail

// Starts worker threads for the calling thread until `threads` threads in all (the caller included) can run
// parallel_for; returns how many can (at least 1), fewer than asked when the system refuses more threads.
inline int reserve_threads(int threads) {
  if (threads <= 1 || detail::Team::inside_job()) return 1;
  return 1 + detail::Team::of_this_thread().reserve(threads - 1);
}

// Calls fn(begin, end) on contiguous chunks covering [0, n), chunk t of `used` being
// [n * t / used, n * (t + 1) / used), on up to `threads` threads (the caller is one of them). An exception
// thrown by fn is rethrown here after every chunk has finished.
template <class F>
void parallel_for(int threads, std::int64_t n, F&& fn) {
  if (n <= 0) return;
  int used = static_cast<int>(std::min<std::int64_t>(std::max(threads, 1), n));
  if (used > 1) used = reserve_threads(used);
  if (used <= 1) {
    fn(std::int64_t{0}, n);
    return;
  }
  struct Job {
    F* fn;
    std::int64_t n;
    int used;
  } job{&fn, n, used};
  detail::Team::of_this_thread().run(
      used,
      [](void* ctx, int t) {
        const Job& j = *static_cast<const Job*>(ctx);
        // n * t / used without overflow: q * t + r * t / used, with r * t < used^2.
        const std::int64_t q = j.n / j.used, r = j.n % j.used;
        const std::int64_t begin = q * t + r * t / j.used, end = q * (t + 1) + r * (t + 1) / j.used;
        if (begin < end) (*j.fn)(begin, end);
      },
      &job);
}

// Chunks of [0, n), `grain` consecutive indices each (the last may be shorter), handed out in order to
// whichever thread asks next.
class ChunkQueue {
 public:
  ChunkQueue(std::int64_t n, std::int64_t grain)
      : n_(std::max<std::int64_t>(n, 0)), grain_(std::max<std::int64_t>(grain, 1)) {}
  std::int64_t chunks() const { return n_ / grain_ + (n_ % grain_ != 0); }
  // The next chunk [begin, end), or false when none is left. The counter never passes n (no overflow).
  bool next(std::int64_t& begin, std::int64_t& end) {
    std::int64_t b = next_.load(std::memory_order_relaxed), e;
    do {
      if (b >= n_) return false;
      e = b + std::min(grain_, n_ - b);
    } while (!next_.compare_exchange_weak(b, e, std::memory_order_relaxed));
    begin = b;
    end = e;
    return true;
  }

 private:
  const std::int64_t n_, grain_;
  std::atomic<std::int64_t> next_{0};
};

// Calls fn(queue) on up to `threads` threads (the caller is one of them), at most once per thread and never
// more often than the queue has chunks; each call takes chunks until none is left. For tasks whose results
// do not depend on the thread that runs them nor on the tasks it ran before: a core slowed by other work
// (a busy machine, a shared physical core) then takes fewer of them instead of holding the others up at the
// end, as a static split would. An exception thrown by fn is rethrown here after every call has finished.
template <class F>
void parallel_chunks(int threads, ChunkQueue& queue, F&& fn) {
  const std::int64_t calls = std::min<std::int64_t>(std::max(threads, 1), queue.chunks());
  parallel_for(static_cast<int>(calls), calls, [&](std::int64_t begin, std::int64_t end) {
    if (begin < end) fn(queue);  // one call per thread, however many indices it was given
  });
}

}  // namespace conv3d_dx
