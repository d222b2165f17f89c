// Static, deterministic work splitting: the same n and thread count always give the same chunks, and each
// index is handled by exactly one thread, so results never depend on scheduling.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace conv3d_dx {

// Calls fn(begin, end) on contiguous chunks covering [0, n). fn must not throw.
template <class F>
void parallel_for(int threads, std::int64_t n, F&& fn) {
  if (n <= 0) return;
  if (threads <= 1 || n == 1) {
    fn(std::int64_t{0}, n);
    return;
  }
  const int used = static_cast<int>(std::min<std::int64_t>(threads, n));
#pragma omp parallel num_threads(used)
  {
    const std::int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const std::int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    if (begin < end) fn(begin, end);
  }
}

}  // namespace conv3d_dx
