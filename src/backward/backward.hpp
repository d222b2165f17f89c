// The other two gradients of a convolution: with respect to its filter (dW) and its bias (db).
//
// Both are described by the same validated Problem as the input gradient, read differently:
//   dy      p.dy_strides, p.dy_dtype          (out_backprop, read)
//   x       p.y_strides, p.y_dtype            (the forward input: same shape as y, read)
//   dW      p.filter_strides, p.filter_dtype  (same shape as the filter, written)
// Plain loops: float64 sums in a fixed order, parallel over output elements only (a sum is never split
// across threads), so results are bitwise identical for any thread count. No workspace.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "conv3d_dx/conv3d_dx.hpp"

namespace conv3d_dx::backward {

struct GradientOptions {
  int threads = 0;  // 0: all hardware threads
  // aclnn USE_FP16 ("computed in fp16, the result cast back"): round each result to fp16 first, then to the
  // output dtype. Only for dW, the Cube computation; db is a plain reduction.
  bool through_fp16 = false;
};

// dW[co, ci, kd, kh, kw] = sum over n, od, oh, ow of
//     dy[n, co, od, oh, ow] * x[n, g*Cin_g + ci, od*sD + kd*dD - pad_front, oh*sH + kh*dH - pad_top, ...]
// with g = co / Cout_g; taps outside x contribute nothing. dy and x get p.input_rounding; each sum is rounded
// once to p.filter_dtype with p.overflow. N == 0 gives zeros. Nothing is read from the filter.
void weight_gradient(const Problem& p, const void* dy, const void* x, void* dw, const GradientOptions& = {});

// db[co] = sum over n, od, oh, ow of dy[n, co, od, oh, ow], dy read exactly (no input rounding), each sum
// rounded once to `dtype` with p.overflow and stored as element co * stride of db. N == 0 gives zeros.
void bias_gradient(const Problem& p, const void* dy, void* db, DType dtype, std::int64_t stride,
                   const GradientOptions& = {});

// Outputs are written, so no two of their elements may share memory: throws Error(invalid_argument,
// parameter) when they would. `shape` and `strides` in any axis order, strides >= 0.
void require_distinct(const std::string& parameter, const std::array<std::int64_t, 5>& shape,
                      const std::array<std::int64_t, 5>& strides);

}  // namespace conv3d_dx::backward
