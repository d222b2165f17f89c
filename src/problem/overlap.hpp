// The overlap rule, shared by every front end: a tensor that is written must not share a byte with a tensor
// the same call reads to compute it, nor with another tensor it writes. Each tensor is taken as its byte
// extent: from the first byte of its first element to the last byte of its last element, gaps between
// strided elements included (two interleaved views count as overlapping). Computing in place is not
// supported: engines read dy and the filter while they write y, so an overlap would give wrong results.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "conv3d_dx/conv3d_dx.hpp"
#include "problem/validate.hpp"

namespace conv3d_dx {

// Bytes [begin, end) of a tensor's extent; empty (begin == end) for a tensor without elements or data.
struct ByteExtent {
  std::uintptr_t begin = 0, end = 0;
  bool empty() const { return begin == end; }
};

// The extent of `rank` axes of sizes `shape` and element strides `strides` (>= 0) starting at `data`, with
// elements of `element_size` bytes. Throws Error(size_overflow, name) when it does not fit the address space.
ByteExtent byte_extent(const std::string& name, const void* data, std::size_t element_size,
                       const std::int64_t* shape, const std::int64_t* strides, std::size_t rank);
ByteExtent byte_extent(const std::string& name, const TensorView& view);

struct NamedExtent {
  std::string name;
  ByteExtent bytes;
};

// Throws Error(invalid_argument, written.name) naming both tensors and their bytes when `written` shares a
// byte with one of `others`.
void require_disjoint(const NamedExtent& written, const std::vector<NamedExtent>& others);

// The rule for the input gradient: y shares no byte with out_backprop or the filter, all laid out as `p`
// says, named as `names` says. A null pointer is skipped (a filter already packed is not read again).
// Returns y's extent.
ByteExtent require_y_disjoint(const Problem& p, const void* out_backprop, const void* filter, const void* y,
                              const ParameterNames& names = {});

}  // namespace conv3d_dx
