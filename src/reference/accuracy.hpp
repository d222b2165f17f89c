// The accuracy rule for one y element, shared by the tests and `conv3d-dx demo`.
#pragma once

#include <cstdint>

#include "conv3d_dx/conv3d_dx.hpp"

namespace conv3d_dx::reference {

// The fp32 accumulation error allowed for a sum of `terms` products whose magnitudes add up to abs_sum:
// "a few units of 2^-24 times sum |dy*w|", the few growing with log2(terms) as the error of blocked fp32
// sums does (random-sign sums of ~8000 terms were measured at up to 9 units).
double fp32_allowance(double abs_sum, std::int64_t terms);

// Whether `got` (y as stored, decoded) is an acceptable result for the exact sum `exact`: within the
// allowance (plus fp32's own rounding) for fp32 y; otherwise one rounding to y's dtype of some value within
// the allowance. Non-finite exact sums must give exactly what rounding them gives.
bool acceptable(DType y_dtype, OverflowMode mode, double exact, double allowance, double got);

}  // namespace conv3d_dx::reference
