// The other two gradients of a convolution: with respect to its filter (dW) and its bias (db).
//
// Both work on a GradientProblem: the geometry of a validated Problem with the tensors these gradients
// read and write, x (the forward input, the shape of y), dy and dW (the shape of the filter).
// Plain loops: float64 sums in a fixed order, parallel over output elements only (a sum is never split
// across threads), so results are bitwise identical for any thread count. No workspace.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "conv3d_dx/conv3d_dx.hpp"

namespace conv3d_dx::backward {

// A tensor's dtype and element strides in canonical order.
struct Operand {
  DType dtype = DType::f32;
  std::array<std::int64_t, 5> strides{};
};

struct GradientProblem {
  std::int64_t N = 0, G = 1, Cin_g = 0, Cout_g = 0;
  std::array<std::int64_t, 3> x_size{}, dy_size{};  // spatial D, H, W
  std::array<std::int64_t, 3> kernel{}, stride{1, 1, 1}, dilation{1, 1, 1}, pad_front{};
  Operand x;   // [N, Cin, D, H, W], read
  Operand dy;  // [N, Cout, Do, Ho, Wo], read
  Operand dw;  // [Cout, Cin_g, kD, kH, kW], written
  InputRounding input_rounding = InputRounding::none;
  OverflowMode overflow = OverflowMode::ieee;

  std::int64_t Cout() const { return G * Cout_g; }
};

// The gradients of p's convolution: dy as p has it, x the shape of p's y and dW of p's filter.
GradientProblem gradient_problem(const Problem& p, const Operand& x, const Operand& dw);

struct GradientOptions {
  int threads = 0;  // 0: all hardware threads
  // aclnn USE_FP16 ("computed in fp16, the result cast back"): round each result to fp16 first, then to the
  // output dtype. Only for dW, the Cube computation; db is a plain reduction.
  bool through_fp16 = false;
};

// dW[co, ci, kd, kh, kw] = sum over n, od, oh, ow of
//     dy[n, co, od, oh, ow] * x[n, g*Cin_g + ci, od*sD + kd*dD - pad_front, oh*sH + kh*dH - pad_top, ...]
// with g = co / Cout_g; taps outside x contribute nothing. dy and x get p.input_rounding; each sum is rounded
// once to p.dw.dtype with p.overflow. N == 0 gives zeros.
void weight_gradient(const GradientProblem& p, const void* dy, const void* x, void* dw,
                     const GradientOptions& = {});

// db[co] = sum over n, od, oh, ow of dy[n, co, od, oh, ow], dy read exactly (no input rounding), each sum
// rounded once to `dtype` with p.overflow and stored as element co * stride of db. N == 0 gives zeros.
// Reads nothing of p.x and p.dw.
void bias_gradient(const GradientProblem& p, const void* dy, void* db, DType dtype, std::int64_t stride,
                   const GradientOptions& = {});

// Outputs are written, so no two of their elements may share memory: throws Error(invalid_argument,
// parameter) when they would. `shape` and `strides` in any axis order, strides >= 0.
void require_distinct(const std::string& parameter, const std::array<std::int64_t, 5>& shape,
                      const std::array<std::int64_t, 5>& strides);

}  // namespace conv3d_dx::backward
