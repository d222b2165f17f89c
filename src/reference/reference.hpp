// The oracle: plain loops over the definition (docs/operator.md), 64-bit indices, float64 accumulation.
// Slow and obvious on purpose; every engine and front end is tested against it.
#pragma once

#include <vector>

#include "conv3d_dx/conv3d_dx.hpp"

namespace conv3d_dx::reference {

// y as float64 in canonical contiguous order [N, Cin, Di, Hi, Wi], before any output rounding.
// Inputs are read through the problem's strides and dtypes, with its input rounding applied.
// abs_sum, when given, receives sum |dy * w| per element: the scale of the fp32 accumulation error.
std::vector<double> compute(const Problem&, const void* dy, const void* filter,
                            std::vector<double>* abs_sum = nullptr);

}  // namespace conv3d_dx::reference
