// Random inputs and the accuracy check of an output against the float64 reference (docs/numerics.md), shared
// by `conv3d-dx demo` and the CLI tests.
#pragma once

#include <cstdint>
#include <string>

#include "conv3d_dx/conv3d_dx.hpp"

namespace conv3d_dx::cli {

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
