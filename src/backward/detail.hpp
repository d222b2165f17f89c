// Internals shared by weight_gradient.cpp and bias_gradient.cpp.
#pragma once

#include <cstdint>

#include "backward/backward.hpp"

namespace conv3d_dx::backward::detail {

// Options::threads resolved: 0 means all hardware threads.
int resolve_threads(int requested);

// Rounds a float64 sum once to `dtype` (through fp16 first when asked) and stores it as element `index`.
void store_sum(DType dtype, void* base, std::int64_t index, double sum, OverflowMode mode, bool through_fp16);

}  // namespace conv3d_dx::backward::detail
