// Scalar conversions between fp32 and the storage types (docs/numerics.md). Decoding is exact; encoding
// rounds once.
#pragma once

#include <bit>
#include <cstdint>

#include "conv3d_dx/conv3d_dx.hpp"

namespace conv3d_dx::numeric {

// Inline: the engines' input readers call these per element.
inline float fp16_to_f32(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t e = (bits >> 10) & 0x1Fu;
  const std::uint32_t m = bits & 0x3FFu;
  if (e == 0x1F)
    return std::bit_cast<float>(sign | 0x7F800000u | (m << 13));  // inf, or NaN keeping its payload
  if (e != 0) return std::bit_cast<float>(sign | ((e + 127 - 15) << 23) | (m << 13));
  // Subnormal: m * 2^-24, exact in fp32 (m < 2^10).
  const float magnitude = static_cast<float>(m) * 0x1p-24f;
  return sign != 0 ? -magnitude : magnitude;
}
inline float bf16_to_f32(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}
float hif8_to_f32(std::uint8_t code);
float fp8_e4m3fn_to_f32(std::uint8_t code);

// Round to nearest even (fp16, bf16, fp8) or nearest with ties away from zero (hifloat8).
// saturate: finite overflow and inf clamp to the largest finite value (see docs/numerics.md for NaN).
std::uint16_t f32_to_fp16(float v, bool saturate);
std::uint16_t f32_to_bf16(float v, bool saturate);
std::uint8_t f32_to_hif8(float v, bool saturate);
// The mantissa bits HiFloat8 keeps for values in [2^E, 2^(E+1)): 3 where |E| <= 3, 2 for 4..7, 1 for 8..15,
// 0 beyond (the denormal range below 2^-15, and past the largest finite).
int hif8_mantissa_bits(int exponent);
std::uint8_t f32_to_fp8_e4m3fn(float v, bool saturate);
// f32_to_hif8's codes (no saturation) of the non-negative fp32 values by their bits 19-30, for the AVX2
// encoder: HiFloat8 keeps at most 3 mantissa bits and rounds half away from zero, so a finite value's code
// depends only on its exponent and top 4 mantissa bits (the bounds of the tiny and overflow ranges too have
// no lower bits). 4096 codes and 3 bytes more, so a 4-byte gather at any of them stays inside.
const std::uint8_t* hif8_codes_by_top_bits();

inline bool is_8bit(DType t) { return t == DType::hif8 || t == DType::fp8_e4m3fn; }

// f32_to_hif8 / f32_to_fp8_e4m3fn by table, the same codes. Every 8-bit value and every rounding boundary
// between two of them (and the overflow thresholds) has at most 5 significant bits, so as fp32 its low 16
// bits are zero: all fp32 values with the same top 16 bits and nonzero low bits lie strictly between two
// boundaries and encode alike (NaNs included). Two tables of 65536 codes: for low bits zero, and nonzero.
class Encoder8 {
 public:
  Encoder8(DType dtype, bool saturate);  // dtype hif8 or fp8_e4m3fn
  std::uint8_t operator()(float v) const {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(v);
    return ((u & 0xFFFFu) != 0 ? above_ : exact_)[u >> 16];
  }

 private:
  std::uint8_t exact_[1 << 16], above_[1 << 16];
};
// The encoder of an 8-bit dtype and overflow mode, built on first use.
const Encoder8& encoder8(DType dtype, bool saturate);

// HF32: keep 10 explicit mantissa bits, rounding half away from zero; inf and NaN unchanged.
float round_to_hf32(float v);

// Element `index` (in elements) of an array of `dtype`, widened exactly to fp32.
float load_f32(DType dtype, const void* base, std::int64_t index);
// Round v to `dtype` and store it as element `index`.
void store_f32(DType dtype, void* base, std::int64_t index, float v, OverflowMode mode);
// load_f32 followed by the problem's input rounding (hf32 only rounds fp32 inputs; fp16 rounds any).
float load_rounded(DType dtype, const void* base, std::int64_t index, InputRounding rounding);

}  // namespace conv3d_dx::numeric
