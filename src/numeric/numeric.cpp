// fp16, bf16, float8_e4m3fn and HF32 conversions, and the generic element load/store (docs/numerics.md).
// HiFloat8 lives in hifloat8.cpp because its layout is not IEEE-like.
#include "numeric/numeric.hpp"

#include <bit>
#include <cstring>

namespace conv3d_dx::numeric {
namespace {

constexpr std::uint32_t kAbsMask = 0x7FFFFFFFu;
constexpr std::uint32_t kInfF32 = 0x7F800000u;
constexpr std::uint32_t kQuietNanF32 = 0x7FC00000u;

std::uint32_t bits_of(float v) { return std::bit_cast<std::uint32_t>(v); }
float float_of(std::uint32_t u) { return std::bit_cast<float>(u); }

// m >> s rounded to nearest, ties to even; 1 <= s <= 31.
std::uint32_t shift_right_rne(std::uint32_t m, int s) {
  const std::uint32_t q = m >> s;
  const std::uint32_t rem = m & ((1u << s) - 1u);
  const std::uint32_t half = 1u << (s - 1);
  return q + ((rem > half || (rem == half && (q & 1u) != 0)) ? 1u : 0u);
}

// Magnitude bits (exponent field << man | mantissa) of the finite fp32 magnitude `a` in an IEEE-like format
// with `man` explicit mantissa bits and smallest normal exponent `emin`, rounded to nearest even. A carry
// out of the mantissa correctly bumps the exponent (or a subnormal into the smallest normal); the caller
// handles overflow beyond the format's largest finite value before calling.
std::uint32_t round_magnitude_rne(std::uint32_t a, int man, int emin) {
  if (a < 0x00800000u) return 0;  // fp32 subnormals are far below half of any fp16/fp8 subnormal
  const int e = static_cast<int>(a >> 23) - 127;
  if (e >= emin) {
    // Re-bias so that emin has exponent field 1, then drop the fraction bits the format lacks.
    const std::uint32_t rebiased = (static_cast<std::uint32_t>(e - emin + 1) << 23) | (a & 0x7FFFFFu);
    return shift_right_rne(rebiased, 23 - man);
  }
  // A subnormal of the format: count units of 2^(emin - man) in the 24-bit significand.
  const int s = 23 - man + (emin - e);
  if (s > 24) return 0;  // below half of the smallest subnormal
  return shift_right_rne((a & 0x7FFFFFu) | 0x800000u, s);
}

template <typename T>
T read_as(const void* base, std::int64_t index) {
  T v;
  std::memcpy(&v, static_cast<const unsigned char*>(base) + index * static_cast<std::int64_t>(sizeof(T)),
              sizeof(T));
  return v;
}

template <typename T>
void write_as(void* base, std::int64_t index, T v) {
  std::memcpy(static_cast<unsigned char*>(base) + index * static_cast<std::int64_t>(sizeof(T)), &v,
              sizeof(T));
}

}  // namespace

float fp8_e4m3fn_to_f32(std::uint8_t code) {
  if ((code & 0x7Fu) == 0x7Fu) return float_of(kQuietNanF32);  // the format's only NaNs (no inf)
  const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x80u) << 24;
  const std::uint32_t e = (code >> 3) & 0xFu;
  const std::uint32_t m = code & 0x7u;
  if (e != 0) return float_of(sign | ((e + 127 - 7) << 23) | (m << 20));
  const float magnitude = static_cast<float>(m) * 0x1p-9f;  // subnormal: m * 2^-9
  return sign != 0 ? -magnitude : magnitude;
}

std::uint16_t f32_to_fp16(float v, bool saturate) {
  const std::uint32_t u = bits_of(v);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & kAbsMask;
  if (a > kInfF32) return static_cast<std::uint16_t>(sign | 0x7E00u);  // quiet NaN, sign kept, both modes
  // 65520 (0x477FF000) is the midpoint between 65504 and 2^16 and ties to the even 2^16, i.e. overflow.
  if (a >= 0x477FF000u) return static_cast<std::uint16_t>(sign | (saturate ? 0x7BFFu : 0x7C00u));
  return static_cast<std::uint16_t>(sign | round_magnitude_rne(a, 10, -14));
}

std::uint16_t f32_to_bf16(float v, bool saturate) {
  const std::uint32_t u = bits_of(v);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & kAbsMask;
  if (a > kInfF32) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN, sign kept
  // bf16 is the top half of fp32, so rounding the low 16 bits is exact for subnormals too.
  const std::uint32_t r = a == kInfF32 ? 0x7F80u : shift_right_rne(a, 16);
  if (r >= 0x7F80u) return static_cast<std::uint16_t>(sign | (saturate ? 0x7F7Fu : 0x7F80u));
  return static_cast<std::uint16_t>(sign | r);
}

std::uint8_t f32_to_fp8_e4m3fn(float v, bool saturate) {
  const std::uint32_t u = bits_of(v);
  const auto sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  const std::uint32_t a = u & kAbsMask;
  // Saturating mode maps NaN to +0 as Ascend does (float8_e4m3fn_encode_vectors.csv).
  if (a > kInfF32) return saturate ? std::uint8_t{0} : static_cast<std::uint8_t>(sign | 0x7Fu);
  // Above 464 (the midpoint between 448 and the NaN code, which ties to the even 448): NaN or clamp.
  if (a > 0x43E80000u) return static_cast<std::uint8_t>(sign | (saturate ? 0x7Eu : 0x7Fu));
  return static_cast<std::uint8_t>(sign | round_magnitude_rne(a, 3, -6));
}

Encoder8::Encoder8(DType dtype, bool saturate) {
  const auto encode = dtype == DType::hif8 ? &f32_to_hif8 : &f32_to_fp8_e4m3fn;
  for (std::uint32_t key = 0; key < (1u << 16); ++key) {
    exact_[key] = encode(float_of(key << 16), saturate);
    above_[key] = encode(float_of((key << 16) | 1u), saturate);
  }
}

const Encoder8& encoder8(DType dtype, bool saturate) {
  static const Encoder8 hif8(DType::hif8, false), hif8_sat(DType::hif8, true), fp8(DType::fp8_e4m3fn, false),
      fp8_sat(DType::fp8_e4m3fn, true);
  if (dtype == DType::hif8) return saturate ? hif8_sat : hif8;
  return saturate ? fp8_sat : fp8;
}

float round_to_hf32(float v) {
  const std::uint32_t u = bits_of(v);
  if ((u & kAbsMask) >= kInfF32) return v;
  // Adding half of the kept mantissa's ulp to the magnitude bits rounds half away from zero; a carry
  // moves into the exponent as it should (and FLT_MAX rounds to inf).
  return float_of((u + 0x1000u) & ~0x1FFFu);
}

float load_f32(DType dtype, const void* base, std::int64_t index) {
  switch (dtype) {
    case DType::f32:
      return read_as<float>(base, index);
    case DType::f16:
      return fp16_to_f32(read_as<std::uint16_t>(base, index));
    case DType::bf16:
      return bf16_to_f32(read_as<std::uint16_t>(base, index));
    case DType::hif8:
      return hif8_to_f32(read_as<std::uint8_t>(base, index));
    case DType::fp8_e4m3fn:
      return fp8_e4m3fn_to_f32(read_as<std::uint8_t>(base, index));
  }
  throw Error(ErrorCode::internal, "dtype", "load_f32: unknown dtype");
}

void store_f32(DType dtype, void* base, std::int64_t index, float v, OverflowMode mode) {
  const bool saturate = mode == OverflowMode::saturate;
  switch (dtype) {
    case DType::f32:
      return write_as<float>(base, index, v);
    case DType::f16:
      return write_as<std::uint16_t>(base, index, f32_to_fp16(v, saturate));
    case DType::bf16:
      return write_as<std::uint16_t>(base, index, f32_to_bf16(v, saturate));
    case DType::hif8:
      return write_as<std::uint8_t>(base, index, f32_to_hif8(v, saturate));
    case DType::fp8_e4m3fn:
      return write_as<std::uint8_t>(base, index, f32_to_fp8_e4m3fn(v, saturate));
  }
  throw Error(ErrorCode::internal, "dtype", "store_f32: unknown dtype");
}

float load_rounded(DType dtype, const void* base, std::int64_t index, InputRounding rounding) {
  const float v = load_f32(dtype, base, index);
  switch (rounding) {
    case InputRounding::none:
      return v;
    case InputRounding::hf32:
      return dtype == DType::f32 ? round_to_hf32(v) : v;  // the other dtypes have <= 10 mantissa bits
    case InputRounding::fp16:
      return fp16_to_f32(f32_to_fp16(v, false));
  }
  return v;
}

}  // namespace conv3d_dx::numeric
