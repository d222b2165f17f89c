// Mapping in the pages of a large output before the engines write it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "conv3d_dx/conv3d_dx.hpp"
#include "problem/overlap.hpp"

namespace conv3d_dx {

// Outputs of at least this many bytes are mapped in beforehand (smaller ones fault in about as fast as
// they are written, and allocators usually hand back memory already mapped).
inline constexpr std::size_t kMapInMinBytes = std::size_t{4} << 20;

// What map_in_pages did, for tests.
struct MapInCounts {
  std::int64_t pages = 0;     // pages of the range looked at (0: nothing was)
  std::int64_t absent = 0;    // of them, not in memory when looked at (mincore)
  std::int64_t requests = 0;  // populate requests made (one per run of absent pages)
};

// Whether this kernel maps pages in on request (Linux's MADV_POPULATE_WRITE, 5.14 on); asked once.
bool kernel_maps_in_pages();

// Maps in, writable, every page of [data, data + bytes) that is not in memory yet, on up to `threads`
// threads: MADV_POPULATE_WRITE over each run of absent pages, found with mincore (a run that crosses a
// thread's share or a mincore slice takes two requests). The bytes are never changed; pages already in
// memory are left alone. Advice only: where the kernel cannot (before 5.14) nothing is done; where the
// memory refuses (device mappings) the rest of that thread's share is left to fault in as usual, the other
// shares go on, and later calls try again.
MapInCounts map_in_pages(void* data, std::size_t bytes, int threads);

// map_in_pages for the y of `p` over `extent` (require_y_disjoint's), where it is dense (the extent holds
// nothing but y's elements) and of kMapInMinBytes or more. A strided view is left alone: its gaps are not
// y's to touch (a shared file mapping's pages would be marked dirty).
MapInCounts map_in_y(const Problem& p, const ByteExtent& extent, int threads);

}  // namespace conv3d_dx
