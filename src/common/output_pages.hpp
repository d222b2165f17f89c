// Mapping in the pages of a large output before the engines write it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace conv3d_dx {

// Outputs of at least this many bytes are mapped in beforehand (smaller ones fault in about as fast as
// they are written, and allocators usually hand back memory already mapped).
inline constexpr std::size_t kMapInMinBytes = std::size_t{4} << 20;

// Counts of what map_in_pages did, for tests.
struct MapInCounts {
  std::int64_t pages = 0;     // pages of the range
  std::int64_t absent = 0;    // of them, not in memory when looked at (mincore)
  std::int64_t requests = 0;  // populate requests made (one per run of absent pages)
};

// Maps in, writable, every page of [data, data + bytes) that is not in memory yet, on up to `threads`
// threads: Linux's MADV_POPULATE_WRITE over each run of absent pages, found with mincore. The bytes are
// never changed; pages already in memory are left alone. Advice only: where the kernel or the memory refuses
// (kernels before 5.14, device memory), nothing is done and the writes fault the pages in as usual.
MapInCounts map_in_pages(void* data, std::size_t bytes, int threads);

}  // namespace conv3d_dx
