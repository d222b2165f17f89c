// A freshly allocated output (a new mmap: glibc's malloc for 32 MiB and more, so numpy and torch results of
// that size on every call) has no pages until it is written. Each first write to a page then stops the
// writing thread for a page fault, and inside the engines those cost more than the same pages mapped in
// together beforehand. AMD EPYC Zen 3 VM, fp32, 2 threads, a new 32 MiB y per call (suite down_s2), medians
// of paired calls against faulting in the engines: channels_last 0.79x and 0.84x the time (two builds), NCDHW
// 0.96x. A y already in memory pays one mincore pass on the calling thread (about 12 us for 16 MiB); paired
// against the same build with the step off, unet_up and a (16 and 6 MiB of y) within noise (about 0.5 %).
#include "common/output_pages.hpp"

#include <algorithm>
#include <cstdint>

#include "common/parallel.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#ifndef MADV_POPULATE_WRITE  // glibc's headers before 2.35; the kernel's value
#define MADV_POPULATE_WRITE 23
#endif
#endif

namespace conv3d_dx {

MapInCounts map_in_y(const Problem& p, const ByteExtent& extent, int threads) {
  const std::size_t bytes = static_cast<std::size_t>(p.y_elements()) * dtype_size(p.y_dtype);
  if (extent.empty() || bytes < kMapInMinBytes || extent.end - extent.begin != bytes) return {};
  return map_in_pages(reinterpret_cast<void*>(extent.begin), bytes, threads);
}

#if defined(__linux__)

namespace {

std::uintptr_t page_size() {
  static const std::uintptr_t size = [] {
    const long s = sysconf(_SC_PAGESIZE);
    return s > 0 ? static_cast<std::uintptr_t>(s) : std::uintptr_t{4096};
  }();
  return size;
}

// Pages [first, last) (addresses, page-aligned), looked at with mincore in slices of kSlice pages: calls
// absent(page address, pages) for each run of absent ones, in order, until it returns false. False where
// mincore fails first (part of the range is not mapped).
template <class Absent>
bool for_absent_runs(std::uintptr_t first, std::uintptr_t last, Absent&& absent) {
  constexpr std::uintptr_t kSlice = 4096;
  const std::uintptr_t page = page_size();
  unsigned char resident[kSlice];
  for (std::uintptr_t at = first; at < last;) {
    const std::uintptr_t n = std::min(kSlice, (last - at) / page);
    if (mincore(reinterpret_cast<void*>(at), n * page, resident) != 0) return false;
    for (std::uintptr_t i = 0; i < n;) {
      if (resident[i] & 1) {
        ++i;
        continue;
      }
      std::uintptr_t j = i + 1;
      while (j < n && !(resident[j] & 1)) ++j;
      if (!absent(at + i * page, j - i)) return true;
      i = j;
    }
    at += n * page;
  }
  return true;
}

// Maps in the absent pages of [first, last): one populate request per run, until one is refused (memory
// that cannot be mapped in this way, such as a device mapping: the writes fault it in).
void map_in_part(std::uintptr_t first, std::uintptr_t last, MapInCounts& counts) {
  const std::uintptr_t page = page_size();
  for_absent_runs(first, last, [&](std::uintptr_t at, std::uintptr_t pages) {
    counts.absent += static_cast<std::int64_t>(pages);
    ++counts.requests;
    return madvise(reinterpret_cast<void*>(at), pages * page, MADV_POPULATE_WRITE) == 0;
  });
}

}  // namespace

bool kernel_maps_in_pages() {
  // One private page of our own: kernels before 5.14 refuse the request as unknown.
  static const bool maps_in = [] {
    void* p = mmap(nullptr, page_size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    const bool ok = madvise(p, page_size(), MADV_POPULATE_WRITE) == 0;
    munmap(p, page_size());
    return ok;
  }();
  return maps_in;
}

MapInCounts map_in_pages(void* data, std::size_t bytes, int threads) {
  MapInCounts total;
  const std::uintptr_t page = page_size(), begin = reinterpret_cast<std::uintptr_t>(data);
  if (data == nullptr || bytes == 0 || bytes > UINTPTR_MAX - begin - page || !kernel_maps_in_pages())
    return total;
  const std::uintptr_t first = begin & ~(page - 1), last = (begin + bytes + page - 1) & ~(page - 1);
  // A first look on this thread alone: an output already in memory (the usual case) costs one mincore pass
  // and starts no threads.
  bool any_absent = false;
  const bool mapped = for_absent_runs(first, last, [&](std::uintptr_t, std::uintptr_t) {
    any_absent = true;
    return false;  // one is enough
  });
  if (!mapped) return total;  // part of the range is not mapped: left to the writes
  const std::int64_t pages = static_cast<std::int64_t>((last - first) / page);
  total.pages = pages;
  if (!any_absent) return total;
  const std::int64_t shares = std::clamp<std::int64_t>(threads, 1, std::min<std::int64_t>(pages, 64));
  MapInCounts parts[64];
  parallel_for(static_cast<int>(shares), shares, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t)
      map_in_part(first + static_cast<std::uintptr_t>(pages * t / shares) * page,
                  first + static_cast<std::uintptr_t>(pages * (t + 1) / shares) * page,
                  parts[static_cast<std::size_t>(t)]);
  });
  for (std::int64_t t = 0; t < shares; ++t) {
    total.absent += parts[t].absent;
    total.requests += parts[t].requests;
  }
  return total;
}

#else

bool kernel_maps_in_pages() { return false; }
MapInCounts map_in_pages(void*, std::size_t, int) { return {}; }

#endif

}  // namespace conv3d_dx
