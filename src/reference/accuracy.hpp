// The accuracy rule for one y element, shared by the tests and `conv3d-dx demo`.
#pragma once

#include <cstdint>

#include "conv3d_dx/conv3d_dx.hpp"

namespace conv3d_dx::reference {

// The fp32 accumulation error allowed for a sum of `terms` products whose magnitudes add up to abs_sum: a
// proven bound, so no correct engine and no data can exceed it. However the engines order and block their
// sums, each product reaches y through at most `terms` fp32 roundings (its own, when not fused, and the
// additions it takes part in), each of relative error at most u = 2^-24, so the error is at most
// gamma(n) * sum |dy*w| with gamma(n) = n*u / (1 - n*u) (Higham, Accuracy and Stability of Numerical
// Algorithms, 2nd ed., section 3.1); plus 2^-150 absolute per rounding for results in fp32's subnormal range,
// and 2^-20 relative for the reference's own float64 sums. Infinite from n = 2^24 on (no bound holds there).
// Typical errors are far smaller (random signs: ~sqrt(n) units); data made to round the same way at every
// step reach it (tests/accuracy_test.cpp), which is why an allowance growing with log2(n) was not a bound.
double fp32_allowance(double abs_sum, std::int64_t terms);

// Whether `got` (y as stored, decoded) is an acceptable result for the exact sum `exact`: within the
// allowance (plus fp32's own rounding) for fp32 y; otherwise one rounding to y's dtype of some value within
// the allowance. Non-finite exact sums must give exactly what rounding them gives.
bool acceptable(DType y_dtype, OverflowMode mode, double exact, double allowance, double got);

}  // namespace conv3d_dx::reference
