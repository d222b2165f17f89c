#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>

#include "backward/detail.hpp"
#include "numeric/numeric.hpp"

namespace conv3d_dx::backward {
namespace {

// The float nearest to v toward zero, with its last bit set when that is inexact ("round to odd"). Rounding
// the result to any type of at most 22 significant bits gives exactly what rounding v directly would, so a
// float64 sum reaches fp16, bf16, hifloat8 or fp8 with a single rounding.
float round_to_odd(double v) {
  float f = static_cast<float>(v);
  if (std::isnan(v) || static_cast<double>(f) == v) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits |= 1u;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// v rounded once to fp16, as an fp32 value.
float nearest_fp16(double v, OverflowMode mode) {
  return numeric::fp16_to_f32(numeric::f32_to_fp16(round_to_odd(v), mode == OverflowMode::saturate));
}

}  // namespace

namespace detail {

int resolve_threads(int requested) {
  if (requested > 0) return requested;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

void store_sum(DType dtype, void* base, std::int64_t index, double sum, OverflowMode mode,
               bool through_fp16) {
  if (through_fp16 && dtype != DType::f16) {
    numeric::store_f32(dtype, base, index, nearest_fp16(sum, mode), OverflowMode::ieee);
  } else if (dtype == DType::f32) {
    numeric::store_f32(dtype, base, index, static_cast<float>(sum), mode);
  } else {
    numeric::store_f32(dtype, base, index, round_to_odd(sum), mode);
  }
}

}  // namespace detail

GradientProblem gradient_problem(const Problem& p, const Operand& x, const Operand& dw) {
  GradientProblem g;
  g.N = p.N, g.G = p.G, g.Cin_g = p.Cin_g, g.Cout_g = p.Cout_g;
  g.x_size = p.y_size, g.dy_size = p.dy_size;
  g.kernel = p.kernel, g.stride = p.stride, g.dilation = p.dilation, g.pad_front = p.pad_front;
  g.x = x;
  g.dy = {p.dy_dtype, p.dy_strides};
  g.dw = dw;
  g.input_rounding = p.input_rounding;
  g.overflow = p.overflow;
  return g;
}

void require_distinct(const std::string& parameter, const std::array<std::int64_t, 5>& shape,
                      const std::array<std::int64_t, 5>& strides) {
  std::array<int, 5> order{0, 1, 2, 3, 4};
  std::sort(order.begin(), order.end(), [&](int a, int b) { return strides[a] < strides[b]; });
  std::int64_t span = 1;  // elements covered by the axes with smaller strides
  for (int i : order) {
    if (shape[i] <= 1) continue;
    if (strides[i] < span) {
      throw Error(ErrorCode::invalid_argument, parameter,
                  parameter + " has overlapping elements: the stride of axis " + std::to_string(i) + " is " +
                      std::to_string(strides[i]) + " but must be >= " + std::to_string(span) +
                      " for its elements to be distinct; an output must not alias itself");
    }
    if (__builtin_mul_overflow(strides[i], shape[i], &span)) span = INT64_MAX;
  }
}

}  // namespace conv3d_dx::backward
