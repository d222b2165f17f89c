// 64-bit arithmetic that reports overflow instead of wrapping.
#pragma once

#include <cstdint>
#include <string>

#include "conv3d_dx/conv3d_dx.hpp"

namespace conv3d_dx {

inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, const std::string& what) {
  std::int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    throw Error(ErrorCode::size_overflow, what,
                what + " size overflows 64 bits: " + std::to_string(a) + " * " + std::to_string(b));
  return r;
}

inline std::int64_t checked_add(std::int64_t a, std::int64_t b, const std::string& what) {
  std::int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    throw Error(ErrorCode::size_overflow, what,
                what + " size overflows 64 bits: " + std::to_string(a) + " + " + std::to_string(b));
  return r;
}

// For estimates (memory a plan would need): products and sums that would overflow give INT64_MAX, which is
// above any limit. Operands are non-negative.
inline std::int64_t saturating_mul(std::int64_t a, std::int64_t b) {
  std::int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}
inline std::int64_t saturating_add(std::int64_t a, std::int64_t b) {
  std::int64_t r;
  return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

}  // namespace conv3d_dx
