// Cache-line aligned buffers, random inputs and the accuracy check of an output against the float64
// reference (docs/numerics.md), shared by the commands and the CLI tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "conv3d_dx/conv3d_dx.hpp"

namespace conv3d_dx::cli {

// Allocations that start on a 64-byte cache line, as PyTorch's tensors (and the Python module's numpy
// results) do: the engines store whole lines of y past the caches only where y's lines are aligned, so the
// tools' tensors time what those callers get.
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(std::size_t n) {
    void* p = std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) { std::free(p); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
};
using AlignedBytes = std::vector<std::byte, CacheLineAllocator<std::byte>>;

// Fills n elements of `dtype` with values drawn uniformly from [-scale, scale], rounded to the dtype.
// The same seed gives the same data.
void fill_random(DType dtype, void* data, std::int64_t n, std::uint64_t seed, float scale = 1.0f);

struct CheckResult {
  std::int64_t checked = 0;   // output elements compared
  std::int64_t failures = 0;  // of which outside the tolerance
  double worst = 0;           // largest |y - ref| of fp32 y, in units of 2^-24 * sum|dy*w|
  std::string first_failure;  // where and by how much, when failures > 0
  bool ok() const { return failures == 0; }
};

// Compares y (read through p.y_strides as p.y_dtype) with reference::compute.
// Each element must satisfy reference::acceptable (docs/numerics.md) with reference::fp32_allowance.
// channel_limit > 0 checks only the first channel_limit input channels of each group (the reference is slow).
CheckResult check_against_reference(const Problem& p, const void* dy, const void* filter, const void* y,
                                    std::int64_t channel_limit = 0);

}  // namespace conv3d_dx::cli
