// AVX-512 tile kernels: fp32 FMAs and bf16 pairs through vdpbf16ps (avx512_bf16). Entered only after
// cpu_supports(Isa::avx512); the bf16 kernels only after cpu_supports(Isa::avx512_bf16).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "common/engine.hpp"
#include "cpu/kernels.hpp"
#include "numeric/numeric.hpp"

namespace conv3d_dx::cpu {
namespace avx512 {

#include "cpu/tile_kernel.hpp"

struct V {
  using R = __m512;
  static constexpr int kLanes = 16;
  static constexpr bool kEveryRange = false;  // Tile::run_part: unmeasured on AVX-512 cores
  static CONV3D_DX_INLINE R zero() { return _mm512_setzero_ps(); }
  static CONV3D_DX_INLINE R load(const char* p) { return _mm512_load_ps(reinterpret_cast<const float*>(p)); }
  static CONV3D_DX_INLINE R loadu(const float* p) { return _mm512_loadu_ps(p); }
  static CONV3D_DX_INLINE R bcast(float v) { return _mm512_set1_ps(v); }
  static CONV3D_DX_INLINE R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static CONV3D_DX_INLINE void store(float* p, R v) { _mm512_storeu_ps(p, v); }
  static CONV3D_DX_INLINE void store_uncached(float* p, R v) { _mm512_stream_ps(p, v); }  // p aligned to R
  using M = __mmask16;
  static CONV3D_DX_INLINE M mask(std::uint16_t bits) { return bits; }
  static CONV3D_DX_INLINE R masked_fma(R a, R b, R c, M m) { return _mm512_mask3_fmadd_ps(a, b, c, m); }
};

// One step takes the dy pair (c, c+1) and the filter pairs; vdpbf16ps adds both exact products in fp32.
struct Bf16Step {
  using In = std::uint16_t;
  static CONV3D_DX_INLINE __m512 bcast(const std::uint16_t* d) {
    std::int32_t pair;
    std::memcpy(&pair, d, sizeof pair);
    return _mm512_castsi512_ps(_mm512_set1_epi32(pair));
  }
  static CONV3D_DX_INLINE __m512 fma(__m512 acc, __m512 b, __m512 w) {
    return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_castps_si512(b), (__m512bh)_mm512_castps_si512(w));
  }
};

// bf16 pairs widened to fp32: the even channel of a pair is its low half, the odd one its high half.
CONV3D_DX_INLINE __m512 widen_lo(__m512 pairs) {
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, _mm512_castps_si512(pairs), 16));
}
CONV3D_DX_INLINE __m512 widen_hi(__m512 pairs) {
  return _mm512_castsi512_ps(
      _mm512_and_si512(_mm512_castps_si512(pairs), _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// The operands of Bf16Step, summed by fp32 FMAs without flushing denormals, in vdpbf16ps's order (odd
// channel, then even): where nothing is flushed the two give the same bits, so whether a tile or chunk runs
// these or vdpbf16ps (decided by its data) changes no result.
struct Bf16ExactStep {
  using In = std::uint16_t;
  static CONV3D_DX_INLINE __m512 bcast(const std::uint16_t* d) { return Bf16Step::bcast(d); }
  static CONV3D_DX_INLINE __m512 fma(__m512 acc, __m512 b, __m512 w) {
    acc = _mm512_fmadd_ps(widen_hi(b), widen_hi(w), acc);
    return _mm512_fmadd_ps(widen_lo(b), widen_lo(w), acc);
  }
};

// acc += x . w over bf16 pairs in the lanes of k only (vdpbf16ps with a merge mask). Inline asm because
// GCC 12 moves the mask of _mm512_mask_dpbf16_ps with kmovb, which drops lanes 8 to 15.
CONV3D_DX_INLINE __m512 masked_dpbf16(__m512 acc, __mmask16 k, __m512 x, __m512 w) {
  __asm__("vdpbf16ps %[w], %[x], %[acc]%{%[k]%}" : [acc] "+v"(acc) : [x] "v"(x), [w] "v"(w), [k] "Yk"(k));
  return acc;
}

// CI channels x R rows x P vectors of 16 pixels; masked loads and masked FMAs keep every lane outside
// [lo, hi) untouched, so padding never enters a sum (not even as 0 * inf). Modes: fp32 values; bf16
// channel pairs per pixel through vdpbf16ps; the same pairs widened to fp32 and summed by FMAs (exact).
enum class PixMode { f32, pair, pair_exact };

constexpr int kPixBudget = 24;  // of the 32 vector registers

template <int CI, int P, PixMode Mode>
struct PixTile {
  static constexpr int R = pix_rows(CI, P, kPixBudget);

  static void kernel(const PixArgs& a) {
    __m512 acc[CI][R][P];
    static_for<0, CI>([&](auto c) __attribute__((always_inline)) {
      static_for<0, R>([&](auto r) __attribute__((always_inline)) {
        static_for<0, P>([&](auto v) __attribute__((always_inline)) { acc[c][r][v] = _mm512_setzero_ps(); });
      });
    });
    // Addresses are formed as integers: a tap's first pixel may lie before dy where it is masked off.
    const auto dy = reinterpret_cast<std::uintptr_t>(a.dy);
    const std::int64_t co_bytes = a.co_stride * 4, row_bytes = a.row_stride * 4;
    for (std::int64_t t = 0; t < a.ntaps; ++t) {
      const PixTap& tap = a.taps[t];
      __mmask16 m[P];
      static_for<0, P>([&](auto v) __attribute__((always_inline)) {
        const int lo = std::clamp(tap.lo - 16 * v, 0, 16), hi = std::clamp(tap.hi - 16 * v, 0, 16);
        m[v] = static_cast<__mmask16>(hi > lo ? ((1u << hi) - 1u) & ~((1u << lo) - 1u) : 0u);
      });
      const std::uint32_t rows = tap.rows;
      std::uintptr_t d = dy + static_cast<std::uintptr_t>(tap.dy_off * 4);
      const char* w = static_cast<const char*>(tap.w);
      for (std::int64_t s = 0; s < a.k; ++s, d += static_cast<std::uintptr_t>(co_bytes), w += CI * 4) {
        __m512 wv[CI];
        static_for<0, CI>([&](auto c) __attribute__((always_inline)) {
          std::int32_t bits;
          std::memcpy(&bits, w + 4 * c, sizeof bits);
          wv[c] = _mm512_castsi512_ps(_mm512_set1_epi32(bits));
        });
        static_for<0, R>([&](auto r) __attribute__((always_inline)) {
          if (!((rows >> r) & 1u)) return;
          static_for<0, P>([&](auto v) __attribute__((always_inline)) {
            const auto* src =
                reinterpret_cast<const float*>(d + static_cast<std::uintptr_t>(r * row_bytes + 64 * v));
            const __m512 x = _mm512_maskz_loadu_ps(m[v], src);
            static_for<0, CI>([&](auto c) __attribute__((always_inline)) {
              if constexpr (Mode == PixMode::pair) {
                acc[c][r][v] = masked_dpbf16(acc[c][r][v], m[v], x, wv[c]);
              } else if constexpr (Mode == PixMode::pair_exact) {  // vdpbf16ps's order, as Bf16ExactStep
                acc[c][r][v] = _mm512_mask3_fmadd_ps(widen_hi(x), widen_hi(wv[c]), acc[c][r][v], m[v]);
                acc[c][r][v] = _mm512_mask3_fmadd_ps(widen_lo(x), widen_lo(wv[c]), acc[c][r][v], m[v]);
              } else {
                acc[c][r][v] = _mm512_mask3_fmadd_ps(x, wv[c], acc[c][r][v], m[v]);
              }
            });
          });
        });
      }
    }
    static_for<0, CI>([&](auto c) __attribute__((always_inline)) {
      static_for<0, R>([&](auto r) __attribute__((always_inline)) {
        static_for<0, P>([&](auto v) __attribute__((always_inline)) {
          _mm512_store_ps(a.tile + ((c * R + r) * P + v) * 16, acc[c][r][v]);
        });
      });
    });
  }
};

void copy_uncached(const float* src, float* dst, std::int64_t n) {
  const auto at = reinterpret_cast<std::uintptr_t>(dst);
  // Plain stores up to dst's first 64-byte boundary, streaming stores of whole lines, plain stores after.
  std::int64_t i = 0;
  const std::int64_t head = std::min<std::int64_t>(n, static_cast<std::int64_t>((64 - at % 64) % 64 / 4));
  for (; i < head; ++i) dst[i] = src[i];
  for (; i + 16 <= n; i += 16) _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
  for (; i < n; ++i) dst[i] = src[i];
}

// 16 fp32 -> 16 bf16, round to nearest even; saturate clamps overflow and inf to the largest finite value.
// NaN lanes must be handled by the caller (numeric's encoding).
CONV3D_DX_INLINE __m256i bf16_round(__m512 v, bool saturate) {
  const __m512i bits = _mm512_castps_si512(v), one = _mm512_set1_epi32(1);
  __m512i r = _mm512_add_epi32(
      bits, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF),
                             _mm512_and_si512(_mm512_maskz_srli_epi32(0xFFFF, bits, 16), one)));
  r = _mm512_maskz_srli_epi32(0xFFFF, r, 16);
  if (saturate) {
    const __mmask16 over =
        _mm512_cmpeq_epi32_mask(_mm512_and_si512(r, _mm512_set1_epi32(0x7FFF)), _mm512_set1_epi32(0x7F80));
    r = _mm512_mask_sub_epi32(r, over, r, one);  // 0x7F80 -> 0x7F7F, sign kept
  }
  return _mm512_maskz_cvtepi32_epi16(0xFFFF, r);
}

// The lanes of a vector of 16 that hold elements when `left` remain.
CONV3D_DX_INLINE __mmask16 tail16(std::int64_t left) {
  return static_cast<__mmask16>(left >= 16 ? 0xFFFFu : (1u << left) - 1u);
}

// The lanes of a vector of 32 (16-bit elements) that hold elements when `left` remain.
CONV3D_DX_INLINE __mmask32 tail32(std::int64_t left) {
  return left >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((std::uint32_t{1} << left) - 1u);
}

CONV3D_DX_INLINE bool has_nan(__m512 v, __mmask16 m) {
  return _mm512_mask_cmp_ps_mask(m, v, v, _CMP_UNORD_Q) != 0;
}

// 16 fp32 -> 16 fp16, round to nearest even; saturate clamps overflow and inf to +-65504. NaN lanes must be
// handled by the caller (numeric's encoding).
CONV3D_DX_INLINE __m256i fp16_round(__m512 v, bool saturate) {
  // (maskz forms: GCC 12 warns about the undefined pass-through of the plain ones)
  if (saturate) {
    const __m512 max = _mm512_set1_ps(65504.0f);
    v = _mm512_maskz_max_ps(0xFFFF, _mm512_maskz_min_ps(0xFFFF, v, max),
                            _mm512_sub_ps(_mm512_setzero_ps(), max));
  }
  return _mm512_maskz_cvtps_ph(0xFFFF, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

void to_bf16(const float* src, std::uint16_t* dst, std::int64_t n, bool saturate) {
  std::int64_t i = 0;
  // Whole vectors: unmasked loads and stores; NaN lanes are rare and go through numeric.
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(src + i);
    if (has_nan(v, 0xFFFF)) {
      for (std::int64_t k = i; k < i + 16; ++k) dst[k] = numeric::f32_to_bf16(src[k], saturate);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), bf16_round(v, saturate));
    }
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail16(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, src + i);
    if (has_nan(v, m)) {
      for (std::int64_t k = i; k < std::min<std::int64_t>(n, i + 16); ++k)
        dst[k] = numeric::f32_to_bf16(src[k], saturate);
    } else {
      _mm256_mask_storeu_epi16(dst + i, m, bf16_round(v, saturate));
    }
  }
}

// y[r * y_rs + c] = a[r * a_rs + c] rounded by Round (bf16_round, fp16_round) for r < nr, c < nc: to_bf16
// or to_fp16 over the rows of a tile in one call; rows holding a NaN go through numeric's Encode.
template <__m256i (*Round)(__m512, bool), std::uint16_t (*Encode)(float, bool)>
void store_rows16(const float* a, std::int64_t a_rs, std::int64_t nr, std::int64_t nc, std::uint16_t* y,
                  std::int64_t y_rs, bool saturate) {
  const std::int64_t full = nc / 16 * 16;
  const auto tail = static_cast<__mmask16>((1u << (nc - full)) - 1u);
  for (std::int64_t r = 0; r < nr; ++r) {
    const float* src = a + r * a_rs;
    std::uint16_t* dst = y + r * y_rs;
    bool nan = false;
    for (std::int64_t c = 0; c < full; c += 16) {
      const __m512 v = _mm512_loadu_ps(src + c);
      nan |= has_nan(v, 0xFFFF);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c), Round(v, saturate));
    }
    if (tail != 0) {
      const __m512 v = _mm512_maskz_loadu_ps(tail, src + full);
      nan |= has_nan(v, tail);
      _mm256_mask_storeu_epi16(dst + full, tail, Round(v, saturate));
    }
    if (nan)  // rare: numeric's encoding of the NaN lanes (and the rest again)
      for (std::int64_t c = 0; c < nc; ++c) dst[c] = Encode(src[c], saturate);
  }
}

void store_rows_bf16(const float* a, std::int64_t a_rs, std::int64_t nr, std::int64_t nc, std::uint16_t* y,
                     std::int64_t y_rs, bool saturate) {
  store_rows16<bf16_round, numeric::f32_to_bf16>(a, a_rs, nr, nc, y, y_rs, saturate);
}

// store_rows_bf16 by vcvtne2ps2bf16 (avx512_bf16: only where the CPU has it), 32 values an instruction. It
// rounds every finite normal value to nearest even as bf16_round does, but flushes denormal inputs to zero
// and encodes NaN its own way: a row holding either goes through store_rows_bf16 instead. saturate clamps
// to the largest finite bf16 first, which is where bf16_round takes what would round past it.
void store_rows_bf16_cvt(const float* a, std::int64_t a_rs, std::int64_t nr, std::int64_t nc,
                         std::uint16_t* y, std::int64_t y_rs, bool saturate) {
  constexpr int kNanOrDenormal = 0x01 | 0x20 | 0x80;  // vfpclassps: QNaN, denormal, SNaN
  const __m512 max = _mm512_set1_ps(std::bit_cast<float>(0x7F7F0000u)), min = _mm512_set1_ps(-max[0]);
  const auto clamp = [&](__m512 v) __attribute__((always_inline)) {
    return saturate ? _mm512_maskz_max_ps(0xFFFF, _mm512_maskz_min_ps(0xFFFF, v, max), min) : v;
  };
  const std::int64_t pairs = nc / 32 * 32;
  for (std::int64_t r = 0; r < nr; ++r) {
    const float* src = a + r * a_rs;
    std::uint16_t* dst = y + r * y_rs;
    __mmask16 special = 0;
    std::int64_t c = 0;
    for (; c < pairs; c += 32) {
      const __m512 lo = _mm512_loadu_ps(src + c), hi = _mm512_loadu_ps(src + c + 16);
      special |= static_cast<__mmask16>(_mm512_fpclass_ps_mask(lo, kNanOrDenormal) |
                                        _mm512_fpclass_ps_mask(hi, kNanOrDenormal));
      _mm512_storeu_si512(dst + c, std::bit_cast<__m512i>(_mm512_cvtne2ps_pbh(clamp(hi), clamp(lo))));
    }
    for (; c < nc; c += 16) {
      const __mmask16 m = tail16(nc - c);
      const __m512 v = _mm512_maskz_loadu_ps(m, src + c);
      special |= _mm512_mask_fpclass_ps_mask(m, v, kNanOrDenormal);
      _mm256_mask_storeu_epi16(dst + c, m, std::bit_cast<__m256i>(_mm512_cvtneps_pbh(clamp(v))));
    }
    if (special != 0) store_rows_bf16(src, a_rs, 1, nc, dst, y_rs, saturate);
  }
}

void to_fp16(const float* src, std::uint16_t* dst, std::int64_t n, bool saturate) {
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail16(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, src + i);
    if (has_nan(v, m)) {
      for (std::int64_t k = i; k < std::min<std::int64_t>(n, i + 16); ++k)
        dst[k] = numeric::f32_to_fp16(src[k], saturate);
      continue;
    }
    _mm256_mask_storeu_epi16(dst + i, m, fp16_round(v, saturate));
  }
}

// GCC 12 reports the undefined pass-through inside plain (unmasked) intrinsics as maybe-uninitialized once
// they are inlined into a loop; every lane of every result below is defined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// The 8-bit encoders run on 16-bit lanes, 32 values a vector: a value's code depends only on its top half
// (sign, exponent, 7 mantissa bits) and on whether its low half is zero, which sets bit 0 of the top half
// (sticky) where a rounding needs it. Both formats keep at most 3 mantissa bits, so the rounding bit lies in
// the top half: HiFloat8 rounds half away, on the rounding bit alone; FP8 ties to even, on the rounding bit,
// the last bit kept and the bits below (bit 0 standing in for the low half). Xeon with AMX (model 167), from
// L1, timestamp-counter cycles per 32 values: HiFloat8 11.1, FP8 12.8, against 18.9 and 19.0 on 32-bit lanes
// (every one of the 2^32 fp32 values gives numeric's code, in both overflow modes: checked once).
CONV3D_DX_INLINE __m512i top_halves(__m512 lo, __m512 hi) {
  // Word 2 i + 1 of the pair (lo, hi) for i = 0..31: the odd words, in order.
  const __m512i odd = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29,
                                       27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  return _mm512_permutex2var_epi16(_mm512_castps_si512(lo), odd, _mm512_castps_si512(hi));
}

// The pair's NaN lanes, in the order of top_halves' words.
CONV3D_DX_INLINE __mmask32 nan_lanes(__m512 lo, __m512 hi) {
  return _mm512_kunpackw(_mm512_cmp_ps_mask(hi, hi, _CMP_UNORD_Q), _mm512_cmp_ps_mask(lo, lo, _CMP_UNORD_Q));
}

// The low halves of the pair's values, in order (their even words).
CONV3D_DX_INLINE __m512i low_halves(__m512 lo, __m512 hi) {
  const __m512i even = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30,
                                        28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  return _mm512_permutex2var_epi16(_mm512_castps_si512(lo), even, _mm512_castps_si512(hi));
}

// Encodes n values, 32 at a time: codes(lo, hi) gives the 16-bit codes of a vector's 16 + 16 values. Whole
// vectors load and store unmasked (masked throughout, the HiFloat8 encoder as first written took 14.1
// timestamp-counter cycles a vector rather than 12.0), the tail masked.
template <class Codes>
CONV3D_DX_INLINE void encode8(const float* src, std::uint8_t* dst, std::int64_t n, Codes codes) {
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtepi16_epi8(codes(_mm512_loadu_ps(src + i), _mm512_loadu_ps(src + i + 16))));
  if (i < n) {
    const __mmask32 m = tail32(n - i);
    _mm512_mask_cvtepi16_storeu_epi8(
        dst + i, m,
        codes(_mm512_maskz_loadu_ps(static_cast<__mmask16>(m), src + i),
              _mm512_maskz_loadu_ps(static_cast<__mmask16>(m >> 16), src + i + 16)));
  }
}

// f32_to_hif8 on 32 lanes: each magnitude rounded half away at the last mantissa bit its exponent E's range
// keeps (numeric::hif8_mantissa_bits), by adding half of that bit; then the rounded exponent's code
// (numeric's code of 2^E: below 2^-15 the denormal k = E + 23, and 1 for 2^-23, which ties away to 2^-22)
// with the kept mantissa bits. A carry into the next exponent leaves no mantissa bits, so the shift by the
// first exponent's kept bits serves for the mantissa. The kept bits' table is one register, indexed by the
// biased exponent's low 5 bits (E + 127 for E in [-16, 15], E clamped to -16: every denormal keeps none of
// the 7), the codes' two, indexed by E + 23 (the lanes below 2^-23, whose index wraps, are zeroed).
// Magnitudes are clamped at 40960 (ties away past 32768), which rounds to inf's code; the sign, the tiny
// values and NaN are applied around it. The codes of a pair of vectors, as a function of (lo, hi) holding
// the tables in registers.
CONV3D_DX_INLINE auto hif8_codes(bool saturate) {
  struct Tables {
    alignas(64) std::array<std::int16_t, 32> kept{};  // by (E + 127) mod 32: the mantissa bits kept
    alignas(64) std::array<std::int16_t, 64> code{};  // by E + 23: the code of 2^E
  };
  static const Tables tables = [] {
    Tables t;
    for (int e = -16; e <= 15; ++e)
      t.kept[static_cast<std::size_t>((e + 127) % 32)] =
          static_cast<std::int16_t>(numeric::hif8_mantissa_bits(e));
    for (int e = -23; e <= 15; ++e)
      t.code[static_cast<std::size_t>(e + 23)] = numeric::f32_to_hif8(std::ldexp(1.0f, e), false);
    return t;
  }();
  const __m512i kept_of = _mm512_load_si512(tables.kept.data()),
                code_lo = _mm512_load_si512(tables.code.data()),
                code_hi = _mm512_load_si512(tables.code.data() + 32);
  const __m512i one = _mm512_set1_epi16(1), sign_bit = _mm512_set1_epi16(0x80), inf = _mm512_set1_epi16(0x6F);
  const __m512i nan = saturate ? _mm512_setzero_si512() : sign_bit;
  return [=](__m512 lo, __m512 hi) {
    const __m512i h = top_halves(lo, hi), whole = _mm512_and_si512(h, _mm512_set1_epi16(0x7FFF));
    const __m512i a = _mm512_min_epu16(whole, _mm512_set1_epi16(0x4720));
    const __m512i e = _mm512_max_epi16(_mm512_srli_epi16(a, 7), _mm512_set1_epi16(127 - 16));
    const __m512i kept = _mm512_permutexvar_epi16(e, kept_of);
    const __m512i rounded = _mm512_add_epi16(a, _mm512_srlv_epi16(_mm512_set1_epi16(0x40), kept));
    const __m512i biased = _mm512_srli_epi16(rounded, 7);  // E + 127 after rounding
    const __m512i mantissa =
        _mm512_srli_epi16(_mm512_sllv_epi16(_mm512_and_si512(rounded, _mm512_set1_epi16(0x7F)), kept), 7);
    __m512i code = _mm512_or_si512(
        _mm512_permutex2var_epi16(code_lo, _mm512_sub_epi16(biased, _mm512_set1_epi16(127 - 23)), code_hi),
        mantissa);
    if (saturate)  // inf's code (0x6F: finite values never take it) becomes the largest finite's
      code = _mm512_mask_sub_epi16(code, _mm512_cmpeq_epi16_mask(code, inf), code, one);
    code =
        _mm512_ternarylogic_epi32(code, _mm512_srli_epi16(h, 8), sign_bit, 0xF8);  // code | (h >> 8 & 0x80)
    // Below 2^-23: +0 (no sign).
    code = _mm512_maskz_mov_epi16(_mm512_cmpge_epu16_mask(a, _mm512_set1_epi16(0x3400)), code);
    // NaN: NaN or +0. A top half of inf's bits may be NaN's (low half not zero): compared whole, only then.
    if (_mm512_cmpge_epu16_mask(whole, _mm512_set1_epi16(0x7F80)) != 0)
      code = _mm512_mask_mov_epi16(code, nan_lanes(lo, hi), nan);
    return code;
  };
}

void to_hif8(const float* src, std::uint8_t* dst, std::int64_t n, bool saturate) {
  encode8(src, dst, n, hif8_codes(saturate));
}

// f32_to_fp8_e4m3fn on 32 lanes: normals (from 2^-6) round to nearest even on the top half's bit 4 (3
// mantissa bits kept) and are rebiased; subnormals count units of 2^-9, which adding 2^14 to the magnitude
// (whose last bit is worth 2^-9 there) rounds to nearest even, in fp32, leaving the count in the sum's low
// bits (8 units is the smallest normal's code). The codes of a pair of vectors, as a function of (lo, hi).
CONV3D_DX_INLINE auto fp8_e4m3fn_codes(bool saturate) {
  const __m512i one = _mm512_set1_epi16(1);
  const __m512 magnitude = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF)),
               units_at = _mm512_set1_ps(0x1p14f);
  const __m512i over = _mm512_set1_epi16(saturate ? 0x7E : 0x7F);
  return [=](__m512 lo, __m512 hi) {
    // The top halves with bit 0 set where the low half is not zero.
    const __m512i h = _mm512_or_si512(top_halves(lo, hi), _mm512_min_epu16(low_halves(lo, hi), one));
    const __m512i a = _mm512_and_si512(h, _mm512_set1_epi16(0x7FFF));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi16(a, 4), one);
    const __m512i normal = _mm512_sub_epi16(
        _mm512_srli_epi16(_mm512_add_epi16(a, _mm512_add_epi16(lsb, _mm512_set1_epi16(7))), 4),
        _mm512_set1_epi16(120 << 3));
    const __m512i units = low_halves(_mm512_add_ps(_mm512_and_ps(lo, magnitude), units_at),
                                     _mm512_add_ps(_mm512_and_ps(hi, magnitude), units_at));
    __m512i code =
        _mm512_mask_blend_epi16(_mm512_cmplt_epu16_mask(a, _mm512_set1_epi16(0x3C80)), normal, units);
    // Above 464 (ties to even 448 below it; NaN too): NaN or the largest finite.
    code = _mm512_mask_mov_epi16(code, _mm512_cmpgt_epu16_mask(a, _mm512_set1_epi16(0x43E8)), over);
    code = _mm512_ternarylogic_epi32(code, _mm512_srli_epi16(h, 8), _mm512_set1_epi16(0x80),
                                     0xF8);  // code | (h >> 8 & 0x80)
    // Saturating, NaN is +0.
    if (saturate) code = _mm512_maskz_mov_epi16(_mm512_cmple_epu16_mask(a, _mm512_set1_epi16(0x7F80)), code);
    return code;
  };
}

void to_fp8_e4m3fn(const float* src, std::uint8_t* dst, std::int64_t n, bool saturate) {
  encode8(src, dst, n, fp8_e4m3fn_codes(saturate));
}

// With VBMI (Ice Lake and Zen 4 on), 64 values a block: each lane's code is made in its high byte, where the
// top half's sign already lies (no shift to apply it), and one vpermt2b packs the high bytes of two vectors
// (two vpmovwb of 2 micro-ops each did 32), zeroing the lanes its mask clears. Xeon with AMX (model 167),
// from L1, timestamp-counter cycles per 32 values against the encoders above in the same runs:
// HiFloat8 7.9-8.2 against 10.1-10.4 (saturating 11.3-13.4 against 17.9-18.8), FP8 11.3-12.5
// against 12.7-13.1 (saturating 11.6-13.0 against 13.5-18.2); HiFloat8 unet_up and c took 0.93-0.96x the
// time. Every one of the 2^32 fp32 values gives the same code as above, in both overflow modes (checked
// once).
#define CONV3D_DX_VBMI __attribute__((target("avx512vbmi")))
#define CONV3D_DX_VBMI_INLINE inline __attribute__((always_inline, target("avx512vbmi")))
#define CONV3D_DX_VBMI_LAMBDA __attribute__((always_inline, target("avx512vbmi")))

// Byte permute indices. Over a pair of vectors (128 bytes), into byte i: byte 2 i + 1 (high: the pair's
// 16-bit lanes' high bytes, in order) or 2 i (low); into the high byte of 16-bit lane i (byte 2 i + 1), byte
// 4 i (fp32_low: the low byte of fp32 lane i). Within one vector, into byte 16 k + r of 128-bit lane k:
// byte 8 k + r for r < 8, 32 + 8 k + r - 8 for the rest (interleave: the order from which vpunpcklbw and
// vpunpckhbw give bytes 0-31 and 32-63 in sequence).
struct BytePicks {
  alignas(64) std::array<std::uint8_t, 64> high{}, low{}, fp32_low{}, interleave{}, top_half{}, low_half{},
      pair_interleave{};
};
constexpr BytePicks kBytePicks = [] {  // (constexpr: no code of this file runs before the CPU is checked)
  BytePicks b;
  for (std::size_t i = 0; i < 64; ++i) {
    b.high[i] = static_cast<std::uint8_t>(2 * i + 1);
    b.low[i] = static_cast<std::uint8_t>(2 * i);
    b.top_half[i] = static_cast<std::uint8_t>(4 * (i / 2) + 2 + i % 2);
    b.low_half[i] = static_cast<std::uint8_t>(4 * (i / 2) + i % 2);
    b.fp32_low[i] = static_cast<std::uint8_t>(4 * (i / 2) % 128);
    const std::size_t k = i / 16, r = i % 16;
    b.interleave[i] = static_cast<std::uint8_t>(r < 8 ? 8 * k + r : 32 + 8 * k + r - 8);
  }
  // Over (a, b): the sequence a0 b0 a1 b1 ... in interleave's order.
  for (std::size_t i = 0; i < 64; ++i) {
    const std::size_t j = b.interleave[i];
    b.pair_interleave[i] = static_cast<std::uint8_t>(j % 2 == 0 ? j / 2 : 64 + j / 2);
  }
  return b;
}();

// top_halves and low_halves by one vpermt2b each: on the Xeon with AMX a vpermt2w takes three
// micro-ops, two of them on the shuffle port, where vpermt2b takes one. With these and Hif8Vbmi's kept-bits
// lookup by vpermb (model 167, from L1, timestamp-counter cycles per 32 values, medians, against the word
// permutes in the same runs): HiFloat8 8.1 against 8.9-9.1, FP8 10.9-11.5 against 11.0-11.4 (unchanged);
// HiFloat8 channels_last unet_up 0.94-1.02x the time (median 0.95), c 0.92-1.01x (0.96). Every one of the
// 2^32 fp32 values gives the same code as the encoders without VBMI, in both overflow modes (checked once).
CONV3D_DX_VBMI_INLINE __m512i top_halves_vbmi(__m512 lo, __m512 hi) {
  return _mm512_permutex2var_epi8(_mm512_castps_si512(lo), _mm512_load_si512(kBytePicks.top_half.data()),
                                  _mm512_castps_si512(hi));
}
CONV3D_DX_VBMI_INLINE __m512i low_halves_vbmi(__m512 lo, __m512 hi) {
  return _mm512_permutex2var_epi8(_mm512_castps_si512(lo), _mm512_load_si512(kBytePicks.low_half.data()),
                                  _mm512_castps_si512(hi));
}

// The high bytes of (c0, c1)'s 64 16-bit lanes in order, zero where keep0 / keep1 is clear.
CONV3D_DX_VBMI_INLINE __m512i pack_high_bytes(__m512i c0, __mmask32 keep0, __m512i c1, __mmask32 keep1) {
  return _mm512_maskz_permutex2var_epi8(_mm512_kunpackd(keep1, keep0), c0,
                                        _mm512_load_si512(kBytePicks.high.data()), c1);
}

// Encodes n values, 64 at a time: codes(v0, v1, v2, v3) gives the 64 values' codes as bytes.
template <class Codes>
CONV3D_DX_VBMI void encode8_blocks(const float* src, std::uint8_t* dst, std::int64_t n, const Codes& codes) {
  std::int64_t i = 0;
  for (; i + 64 <= n; i += 64)
    _mm512_storeu_si512(dst + i, codes(_mm512_loadu_ps(src + i), _mm512_loadu_ps(src + i + 16),
                                       _mm512_loadu_ps(src + i + 32), _mm512_loadu_ps(src + i + 48)));
  if (i < n) {
    const std::int64_t left = n - i;
    const __mmask64 m = left >= 64 ? ~__mmask64{0} : (__mmask64{1} << left) - 1;
    const auto part = [&](int q) {
      return _mm512_maskz_loadu_ps(static_cast<__mmask16>(m >> (16 * q)), src + i + 16 * q);
    };
    _mm512_mask_storeu_epi8(dst + i, m, codes(part(0), part(1), part(2), part(3)));
  }
}

// hif8_codes with VBMI, on the magnitudes doubled (a = 2 x top half: the sign drops out, the exponent fills
// the high byte): the kept mantissa bits by the exponent before rounding (a 64-entry table: E + 127 mod 64
// tells E from -23 to 15 apart; lanes below are zeroed by the pack), half of the last kept bit added; the
// code of 2^E by the high byte after rounding (vpermi2b's 128-entry table), with the kept bits shifted up to
// it from the low byte. Saturating clamps at 32768 (the largest finite) rather than 40960 (inf's code). Below
// 2^-23 (+0) and NaN as there.
template <bool kSaturate>
struct Hif8Vbmi {
  struct Tables {
    alignas(64) std::array<std::uint8_t, 64> kept{};   // by (E + 127) mod 64
    alignas(64) std::array<std::uint8_t, 128> code{};  // by (E + 127) mod 128: the code of 2^E
  };
  __m512i kept_of, code_lo, code_hi;
  Hif8Vbmi() {
    static const Tables tables = [] {
      Tables t;
      for (int e = -23; e <= 15; ++e) {
        t.kept[static_cast<std::size_t>((e + 127) % 64)] =
            static_cast<std::uint8_t>(numeric::hif8_mantissa_bits(e));
        t.code[static_cast<std::size_t>((e + 127) % 128)] = numeric::f32_to_hif8(std::ldexp(1.0f, e), false);
      }
      return t;
    }();
    kept_of = _mm512_load_si512(tables.kept.data());
    code_lo = _mm512_load_si512(tables.code.data());
    code_hi = _mm512_load_si512(tables.code.data() + 64);
  }
  // Codes in the high bytes of 32 lanes, from their top halves h and 2 h; not_tiny: the lanes from 2^-23.
  CONV3D_DX_VBMI_INLINE __m512i high_codes(__m512i h, __m512i h2, __mmask32& not_tiny) const {
    const __m512i a =
        _mm512_min_epu16(h2, _mm512_set1_epi16(static_cast<std::int16_t>(kSaturate ? 0x8E00 : 0x8E40)));
    // Each byte of a picks a byte of the table by its low 6 bits; the high byte's pick, shifted down.
    const __m512i kept = _mm512_srli_epi16(_mm512_permutexvar_epi8(a, kept_of), 8);
    const __m512i rounded = _mm512_add_epi16(a, _mm512_srlv_epi16(_mm512_set1_epi16(0x80), kept));
    const __m512i mantissa = _mm512_sllv_epi16(_mm512_and_si512(rounded, _mm512_set1_epi16(0xFF)), kept);
    const __m512i code = _mm512_or_si512(_mm512_permutex2var_epi8(code_lo, rounded, code_hi), mantissa);
    not_tiny = _mm512_cmpge_epu16_mask(a, _mm512_set1_epi16(0x6800));
    return _mm512_ternarylogic_epi32(code, h, _mm512_set1_epi16(-0x8000), 0xF8);  // code | (h & 0x8000)
  }
  CONV3D_DX_VBMI_INLINE __m512i operator()(__m512 v0, __m512 v1, __m512 v2, __m512 v3) const {
    const __m512i h0 = top_halves_vbmi(v0, v1), h1 = top_halves_vbmi(v2, v3);
    const __m512i d0 = _mm512_add_epi16(h0, h0), d1 = _mm512_add_epi16(h1, h1);
    __mmask32 k0 = 0, k1 = 0;
    __m512i c0 = high_codes(h0, d0, k0), c1 = high_codes(h1, d1, k1);
    // NaN: NaN or +0. A top half of inf's bits may be NaN's (low half not zero): compared whole, only then.
    if (_mm512_cmpge_epu16_mask(_mm512_max_epu16(d0, d1),
                                _mm512_set1_epi16(static_cast<std::int16_t>(0xFF00))) != 0) {
      const __m512i nan = _mm512_set1_epi16(static_cast<std::int16_t>(kSaturate ? 0 : 0x8000));
      c0 = _mm512_mask_mov_epi16(c0, nan_lanes(v0, v1), nan);
      c1 = _mm512_mask_mov_epi16(c1, nan_lanes(v2, v3), nan);
    }
    return pack_high_bytes(c0, k0, c1, k1);
  }
};

// fp8_e4m3fn_codes with VBMI: the normals' codes made in the high byte ((a + rounding - bias) << 4), the
// subnormals' units picked into it from the fp32 sums' low bytes (vpermt2b). Magnitudes are clamped so that
// overflow rounds to the NaN code (at 464 and a sticky bit: above 464), or saturating to 448 (above 448 all
// round to it); saturating, NaN lanes are zeroed by the pack.
template <bool kSaturate>
struct Fp8Vbmi {
  // Codes in the high bytes of 32 lanes; keep: the lanes not NaN (all where not saturating).
  CONV3D_DX_VBMI_INLINE static __m512i high_codes(__m512 lo, __m512 hi, __mmask32& keep) {
    const __m512i one = _mm512_set1_epi16(1);
    const __m512 magnitude = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF)),
                 units_at = _mm512_set1_ps(0x1p14f);
    const __m512i h =
        _mm512_or_si512(top_halves_vbmi(lo, hi), _mm512_min_epu16(low_halves_vbmi(lo, hi), one));
    const __m512i a = _mm512_and_si512(h, _mm512_set1_epi16(0x7FFF));
    const __m512i c = _mm512_min_epu16(a, _mm512_set1_epi16(kSaturate ? 0x43E0 : 0x43E9));
    const __m512i rounding = _mm512_add_epi16(_mm512_and_si512(_mm512_srli_epi16(c, 4), one),
                                              _mm512_set1_epi16(static_cast<std::int16_t>(7 - (120 << 7))));
    const __m512i normal = _mm512_slli_epi16(_mm512_add_epi16(c, rounding), 4);
    const __m512i units =
        _mm512_permutex2var_epi8(_mm512_castps_si512(_mm512_add_ps(_mm512_and_ps(lo, magnitude), units_at)),
                                 _mm512_load_si512(kBytePicks.fp32_low.data()),
                                 _mm512_castps_si512(_mm512_add_ps(_mm512_and_ps(hi, magnitude), units_at)));
    const __m512i code =
        _mm512_mask_blend_epi16(_mm512_cmplt_epu16_mask(a, _mm512_set1_epi16(0x3C80)), normal, units);
    keep = kSaturate ? _mm512_cmple_epu16_mask(a, _mm512_set1_epi16(0x7F80)) : ~__mmask32{0};
    return _mm512_ternarylogic_epi32(code, h, _mm512_set1_epi16(-0x8000), 0xF8);  // code | (h & 0x8000)
  }
  CONV3D_DX_VBMI_INLINE __m512i operator()(__m512 v0, __m512 v1, __m512 v2, __m512 v3) const {
    __mmask32 k0 = 0, k1 = 0;
    const __m512i c0 = high_codes(v0, v1, k0), c1 = high_codes(v2, v3, k1);
    return pack_high_bytes(c0, k0, c1, k1);
  }
};

// to_hif8 and to_fp8_e4m3fn with VBMI: Codes<saturate>'s blocks.
template <template <bool> class Codes>
CONV3D_DX_VBMI void encode8_vbmi(const float* src, std::uint8_t* dst, std::int64_t n, bool saturate) {
  if (saturate)
    encode8_blocks(src, dst, n, Codes<true>{});
  else
    encode8_blocks(src, dst, n, Codes<false>{});
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Exact widening of 16-bit codes to fp32: bf16 by a shift, fp16 by vcvtph2ps (subnormals included).
void bf16_to_f32(const std::uint16_t* src, float* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail16(n - i);
    const __m512i bits = _mm512_maskz_cvtepu16_epi32(m, _mm256_maskz_loadu_epi16(m, src + i));
    _mm512_mask_storeu_ps(dst + i, m, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(m, bits, 16)));
  }
}

void fp16_to_f32(const std::uint16_t* src, float* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail16(n - i);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_maskz_cvtph_ps(m, _mm256_maskz_loadu_epi16(m, src + i)));
  }
}

// numeric::round_to_hf32 on 16 lanes: half of the kept ulp added to the bits, the 13 dropped bits cleared;
// inf and NaN unchanged.
void round_hf32(const float* src, float* dst, std::int64_t n) {
  const __m512i half = _mm512_set1_epi32(0x1000), keep = _mm512_set1_epi32(~0x1FFF);
  const __m512i abs = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail16(n - i);
    const __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, src + i));
    const __mmask16 finite = _mm512_cmplt_epu32_mask(_mm512_and_si512(u, abs), inf);
    const __m512i r = _mm512_mask_and_epi32(u, finite, _mm512_add_epi32(u, half), keep);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_castsi512_ps(r));
  }
}

// The lanes of m whose bf16 value is tiny (tiny_bf16): (|v| - 1) < 0x237F unsigned, nonzero and below 2^-56;
// zero wraps to 0xFFFF.
CONV3D_DX_INLINE __mmask32 tiny_lanes(__m512i v, __mmask32 m) {
  return _mm512_mask_cmplt_epu16_mask(
      m, _mm512_sub_epi16(_mm512_and_si512(v, _mm512_set1_epi16(0x7FFF)), _mm512_set1_epi16(1)),
      _mm512_set1_epi16(0x237F));
}

// The lanes of m whose bf16 value is tiny or, with nonfinite, an infinity or a NaN.
CONV3D_DX_INLINE __mmask32 special_lanes(__m512i v, __mmask32 m, bool nonfinite) {
  const __m512i exponent = _mm512_set1_epi16(0x7F80);
  return tiny_lanes(v, m) |
         (nonfinite ? _mm512_mask_cmpeq_epi16_mask(m, _mm512_and_si512(v, exponent), exponent) : 0);
}

// 32 codes at a time: four two-register word permutes cover the 256 table entries by the low 6 bits of the
// code; bits 6 and 7 pick among them.
struct Lut8Words {
  __m512i t[8];
  explicit Lut8Words(const std::uint16_t* lut) {
    for (int k = 0; k < 8; ++k) t[k] = _mm512_loadu_si512(lut + 32 * k);
  }
  // 32 codes (as 16-bit lanes) to their table entries.
  CONV3D_DX_INLINE __m512i operator()(__m512i idx) const {
    const __mmask32 b6 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x40));
    const __mmask32 b7 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x80));
    const __m512i lo = _mm512_mask_blend_epi16(b6, _mm512_permutex2var_epi16(t[0], idx, t[1]),
                                               _mm512_permutex2var_epi16(t[2], idx, t[3]));
    const __m512i hi = _mm512_mask_blend_epi16(b6, _mm512_permutex2var_epi16(t[4], idx, t[5]),
                                               _mm512_permutex2var_epi16(t[6], idx, t[7]));
    return _mm512_mask_blend_epi16(b7, lo, hi);
  }
};

void widen8(const std::uint8_t* src, const Lut8& lut, std::uint16_t* dst, std::int64_t n) {
  const Lut8Words table(lut.values.data());
  for (std::int64_t i = 0; i < n; i += 32) {
    const __mmask32 m = tail32(n - i);
    _mm512_mask_storeu_epi16(dst + i, m, table(_mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, src + i))));
  }
}

// widen8 of two runs into channel pairs: out[2 i] = lut[a[i]], out[2 i + 1] = lut[b[i]] (0 when b is null),
// 16 pairs at a time (the codes interleaved as bytes, then widened together); whether a value is tiny or,
// with nonfinite, not finite.
bool widen8_pairs(const std::uint8_t* a, const std::uint8_t* b, const Lut8& lut, std::uint16_t* out,
                  std::int64_t n, bool nonfinite) {
  const Lut8Words table(lut.values.data());
  __mmask32 special = 0;
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail16(n - i);
    const __m128i va = _mm_maskz_loadu_epi8(m, a + i);
    const __m128i vb = b == nullptr ? _mm_setzero_si128() : _mm_maskz_loadu_epi8(m, b + i);
    const __m256i codes = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi8(va, vb)),
                                                  _mm_unpackhi_epi8(va, vb), 1);
    __m512i wide = table(_mm512_cvtepu8_epi16(codes));
    if (b == nullptr) wide = _mm512_maskz_mov_epi16(0x55555555u, wide);
    _mm512_mask_storeu_epi32(out + 2 * i, m, wide);
    special |= special_lanes(wide, tail32(2 * (n - i)), nonfinite);
  }
  return special != 0;
}

// The table's low and high bytes (Lut8::bytes) in registers, looked up by byte permutes: each byte table by
// two vpermi2b (the code's low 7 bits) and a blend (bit 7), the two bytes then interleaved into 16-bit lanes
// (first: those of bytes 0-7 of each 128-bit lane of codes, second: bytes 8-15). Codes put in interleave's
// order come out in sequence.
struct ByteTables {
  __m512i lo[4], hi[4];  // [k]: the low and high bytes of entries 64 k to 64 k + 63
  CONV3D_DX_VBMI_INLINE explicit ByteTables(const Lut8& lut) {
    for (int k = 0; k < 4; ++k) {
      lo[k] = _mm512_load_si512(lut.bytes.data() + 64 * k);
      hi[k] = _mm512_load_si512(lut.bytes.data() + 256 + 64 * k);
    }
  }
  CONV3D_DX_VBMI_INLINE void widen(__m512i codes, __m512i& first, __m512i& second) const {
    const __mmask64 top = _mm512_movepi8_mask(codes);
    const __m512i l = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(lo[0], codes, lo[1]),
                                             _mm512_permutex2var_epi8(lo[2], codes, lo[3]));
    const __m512i h = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(hi[0], codes, hi[1]),
                                             _mm512_permutex2var_epi8(hi[2], codes, hi[3]));
    first = _mm512_unpacklo_epi8(l, h);
    second = _mm512_unpackhi_epi8(l, h);
  }
};

// widen8 with VBMI, 64 codes at a time by ByteTables, the codes first put in interleave's order. Xeon with
// AMX (model 167), from L1, timestamp-counter cycles per 32 codes against widen8: 3.7-3.9 against 7.8-8.3
// for 4096 codes a call. With the table's bytes split once where it is made (Lut8) rather than on each
// call (8 permutes, which had made runs below 128 codes cheaper through widen8), against that build's
// choice in the same runs: 64 codes 8.3-8.5 against 12.4-12.8, 96 7.9-8.3 against 10.9-11.0, 128 5.8-6.0
// against 6.5-7.1, 256 4.5 against 4.8-5.3, 4096 4.0 against 3.6-4.0.
CONV3D_DX_VBMI void widen8_vbmi(const std::uint8_t* src, const Lut8& lut, std::uint16_t* dst,
                                std::int64_t n) {
  const ByteTables tables(lut);
  const __m512i interleave = _mm512_load_si512(kBytePicks.interleave.data());
  const auto widen = [&](__m512i codes, __m512i& first, __m512i& second) CONV3D_DX_VBMI_LAMBDA {
    // (maskz: GCC 12 warns of the plain form's undefined pass-through)
    tables.widen(_mm512_maskz_permutexvar_epi8(~__mmask64{0}, interleave, codes), first, second);
  };
  std::int64_t i = 0;
  __m512i first, second;
  for (; i + 64 <= n; i += 64) {
    widen(_mm512_loadu_si512(src + i), first, second);
    _mm512_storeu_si512(dst + i, first);
    _mm512_storeu_si512(dst + i + 32, second);
  }
  if (i < n) {
    const std::int64_t left = n - i;
    const __mmask64 m = left >= 64 ? ~__mmask64{0} : (__mmask64{1} << left) - 1;
    widen(_mm512_maskz_loadu_epi8(m, src + i), first, second);
    _mm512_mask_storeu_epi16(dst + i, static_cast<__mmask32>(m), first);
    _mm512_mask_storeu_epi16(dst + i + 32, static_cast<__mmask32>(m >> 32), second);
  }
}

// widen8_pairs with VBMI, 32 pairs at a time: one vpermt2b puts the two runs' codes in pair order (and in
// the order the in-lane interleave leaves in sequence), then looked up by ByteTables. AMX Xeon (model 167),
// paired against widen8_pairs: HiFloat8 e 0.94-0.95x the time, FP8 e 0.94-0.96x.
CONV3D_DX_VBMI bool widen8_pairs_vbmi(const std::uint8_t* a, const std::uint8_t* b, const Lut8& lut,
                                      std::uint16_t* out, std::int64_t n, bool nonfinite) {
  const ByteTables tables(lut);
  const __m512i picks = _mm512_load_si512(kBytePicks.pair_interleave.data());
  const __mmask32 keep = b == nullptr ? 0x55555555u : ~__mmask32{0};  // (no second run: its lanes zero)
  __mmask32 special = 0;
  for (std::int64_t i = 0; i < n; i += 32) {
    const __mmask32 m = tail32(n - i);
    const __m512i va = _mm512_castsi256_si512(_mm256_maskz_loadu_epi8(m, a + i));
    const __m512i vb =
        b == nullptr ? _mm512_setzero_si512() : _mm512_castsi256_si512(_mm256_maskz_loadu_epi8(m, b + i));
    __m512i first, second;
    tables.widen(_mm512_permutex2var_epi8(va, picks, vb), first, second);
    first = _mm512_maskz_mov_epi16(keep, first);
    second = _mm512_maskz_mov_epi16(keep, second);
    const std::int64_t left = n - i;  // pairs from out + 2 i
    _mm512_mask_storeu_epi32(out + 2 * i, tail16(left), first);
    special |= special_lanes(first, tail32(2 * left), nonfinite);
    if (left > 16) {
      _mm512_mask_storeu_epi32(out + 2 * i + 32, tail16(left - 16), second);
      special |= special_lanes(second, tail32(2 * (left - 16)), nonfinite);
    }
  }
  return special != 0;
}

// 16 x 16 transpose in four stages of block swaps (blocks of 8, 4, 2, 1 lanes).
CONV3D_DX_INLINE void transpose16(__m512 (&r)[16]) {
  static_for<0, 4>([&](auto stage) __attribute__((always_inline)) {
    constexpr int b = 8 >> stage;
    alignas(64) static constexpr auto lo_idx = [] {
      std::array<int, 16> idx{};
      for (int j = 0; j < 16; ++j) idx[j] = (j & b) == 0 ? j : 16 + j - b;
      return idx;
    }();
    alignas(64) static constexpr auto hi_idx = [] {
      std::array<int, 16> idx{};
      for (int j = 0; j < 16; ++j) idx[j] = (j & b) == 0 ? j + b : 16 + j;
      return idx;
    }();
    const __m512i lo = _mm512_load_si512(lo_idx.data()), hi = _mm512_load_si512(hi_idx.data());
    static_for<0, 16>([&](auto i) __attribute__((always_inline)) {
      if constexpr ((i & b) == 0) {
        const __m512 a = r[i], c = r[i + b];
        r[i] = _mm512_permutex2var_ps(a, lo, c);
        r[i + b] = _mm512_permutex2var_ps(a, hi, c);
      }
    });
  });
}

// a (nr x nc, fp32 or bf16) in blocks of 16 x 16, each transposed: store(t, r0, rn, c0, cn) gets t[c] =
// column c0 + c's rows r0 .. r0 + rn (lanes from rn, and columns from cn, zero).
template <class Store>
CONV3D_DX_INLINE void transposed_blocks(const void* a, bool a_bf16, std::int64_t a_rs, std::int64_t nr,
                                        std::int64_t nc, Store store) {
  for (std::int64_t r0 = 0; r0 < nr; r0 += 16) {
    const std::int64_t rn = std::min<std::int64_t>(16, nr - r0);
    for (std::int64_t c0 = 0; c0 < nc; c0 += 16) {
      const std::int64_t cn = std::min<std::int64_t>(16, nc - c0);
      const __mmask16 cmask = tail16(cn);
      __m512 t[16];
      static_for<0, 16>([&](auto i) __attribute__((always_inline)) {
        const std::int64_t at = (r0 + i) * a_rs + c0;
        if (i >= rn) {
          t[i] = _mm512_setzero_ps();
        } else if (a_bf16) {
          const __m256i h = _mm256_maskz_loadu_epi16(cmask, static_cast<const std::uint16_t*>(a) + at);
          t[i] = _mm512_castsi512_ps(
              _mm512_maskz_slli_epi32(0xFFFF, _mm512_maskz_cvtepu16_epi32(0xFFFF, h), 16));
        } else {
          t[i] = _mm512_maskz_loadu_ps(cmask, static_cast<const float*>(a) + at);
        }
      });
      transpose16(t);
      store(t, r0, rn, c0, cn);
    }
  }
}

void store_transposed(const void* a, bool a_bf16, std::int64_t a_rs, std::int64_t nr, std::int64_t nc,
                      void* y, StoreType y_type, std::int64_t y_cs, bool saturate) {
  // 8-bit codes: two columns at a time through the 32-lane encoders.
  const auto encoded = [&](auto codes) {
    transposed_blocks(
        a, a_bf16, a_rs, nr, nc,
        [&](const __m512(&t)[16], std::int64_t r0, std::int64_t rn, std::int64_t c0, std::int64_t cn) {
          const __mmask16 rmask = tail16(rn);
          auto* const out = static_cast<std::uint8_t*>(y) + c0 * y_cs + r0;
          static_for<0, 8>([&](auto k) __attribute__((always_inline)) {
            constexpr int c = 2 * k;
            if (c >= cn) return;
            const __m256i bytes = _mm512_maskz_cvtepi16_epi8(~__mmask32{0}, codes(t[c], t[c + 1]));
            _mm_mask_storeu_epi8(out + c * y_cs, rmask, _mm256_castsi256_si128(bytes));
            if (c + 1 < cn)
              _mm_mask_storeu_epi8(out + (c + 1) * y_cs, rmask, _mm256_extracti128_si256(bytes, 1));
          });
        });
  };
  if (y_type == StoreType::hif8) return encoded(hif8_codes(saturate));
  if (y_type == StoreType::fp8_e4m3fn) return encoded(fp8_e4m3fn_codes(saturate));
  const bool bf16 = y_type == StoreType::bf16;
  transposed_blocks(
      a, a_bf16, a_rs, nr, nc,
      [&](const __m512(&t)[16], std::int64_t r0, std::int64_t rn, std::int64_t c0, std::int64_t cn) {
        const __mmask16 rmask = tail16(rn);
        static_for<0, 16>([&](auto c) __attribute__((always_inline)) {
          if (c >= cn) return;
          const std::int64_t at = (c0 + c) * y_cs + r0;
          if (y_type == StoreType::f32_uncached && rn == 16 &&
              reinterpret_cast<std::uintptr_t>(static_cast<float*>(y) + at) % 64 == 0) {
            _mm512_stream_ps(static_cast<float*>(y) + at, t[c]);
          } else if (y_type == StoreType::f32 || y_type == StoreType::f32_uncached) {
            _mm512_mask_storeu_ps(static_cast<float*>(y) + at, rmask, t[c]);
          } else if (has_nan(t[c], rmask)) {
            alignas(64) float v[16];
            _mm512_store_ps(v, t[c]);
            for (int k = 0; k < rn; ++k)
              static_cast<std::uint16_t*>(y)[at + k] =
                  bf16 ? numeric::f32_to_bf16(v[k], saturate) : numeric::f32_to_fp16(v[k], saturate);
          } else {
            _mm256_mask_storeu_epi16(static_cast<std::uint16_t*>(y) + at, rmask,
                                     bf16 ? bf16_round(t[c], saturate) : fp16_round(t[c], saturate));
          }
        });
      });
}

bool transpose_bf16_pairs(const std::uint16_t* a, std::int64_t a_rs, std::int64_t nr, std::int64_t nc,
                          std::uint16_t* y, std::int64_t y_ps) {
  // tiny_bf16 on 32-bit lanes holding one bf16 value each (zero lanes wrap to 0xFFFFFFFF).
  const __m512i magnitude = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1),
                below = _mm512_set1_epi32(0x237F);
  const auto tiny = [&](__m512i v) {
    return _mm512_cmplt_epu32_mask(_mm512_sub_epi32(_mm512_and_si512(v, magnitude), one), below);
  };
  __mmask16 any = 0;
  for (std::int64_t r0 = 0; r0 < nr; r0 += 32) {
    const std::int64_t pairs = std::min<std::int64_t>(32, nr - r0) / 2;
    const __mmask16 pmask = tail16(pairs);
    for (std::int64_t c0 = 0; c0 < nc; c0 += 16) {
      const std::int64_t cn = std::min<std::int64_t>(16, nc - c0);
      const __mmask16 cmask = tail16(cn);
      __m512 t[16];
      static_for<0, 16>([&](auto i) __attribute__((always_inline)) {
        if (i >= pairs) {
          t[i] = _mm512_setzero_ps();
          return;
        }
        const std::uint16_t* even = a + (r0 + 2 * i) * a_rs + c0;
        const __m512i lo = _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_maskz_loadu_epi16(cmask, even));
        const __m512i hi = _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_maskz_loadu_epi16(cmask, even + a_rs));
        any = static_cast<__mmask16>(any | tiny(lo) | tiny(hi));
        t[i] = _mm512_castsi512_ps(_mm512_or_si512(lo, _mm512_maskz_slli_epi32(0xFFFF, hi, 16)));
      });
      transpose16(t);  // t[c]: the channel pairs of pixel c0 + c
      static_for<0, 16>([&](auto c) __attribute__((always_inline)) {
        if (c < cn) _mm512_mask_storeu_ps(reinterpret_cast<float*>(y + (c0 + c) * y_ps + r0), pmask, t[c]);
      });
    }
  }
  return any != 0;
}

// out[2 i] = a[i], out[2 i + 1] = b[i] (0 where b is null), 32 pairs at a time (two word permutes); whether
// a value is tiny or, with nonfinite, not finite, judged on the runs as loaded. One pass where interleaving
// and then scanning the pairs twice took three: Xeon with AMX (model 167), bf16 suite e with an NDHWC filter
// packed on each call, 0.90-0.95x the time.
bool interleave_bf16(const std::uint16_t* a, const std::uint16_t* b, std::uint16_t* out, std::int64_t n,
                     bool nonfinite) {
  alignas(64) static constexpr std::array<std::uint16_t, 64> index = [] {
    std::array<std::uint16_t, 64> x{};
    for (std::size_t i = 0; i < 64; ++i) x[i] = static_cast<std::uint16_t>(i % 2 == 0 ? i / 2 : 32 + i / 2);
    return x;
  }();
  const __m512i low = _mm512_load_si512(index.data()), high = _mm512_load_si512(index.data() + 32);
  __mmask32 special = 0;
  for (std::int64_t i = 0; i < n; i += 32) {
    const __mmask32 m = tail32(n - i);
    const __m512i va = _mm512_maskz_loadu_epi16(m, a + i);
    const __m512i vb = b == nullptr ? _mm512_setzero_si512() : _mm512_maskz_loadu_epi16(m, b + i);
    _mm512_mask_storeu_epi32(out + 2 * i, static_cast<__mmask16>(m), _mm512_permutex2var_epi16(va, low, vb));
    if (n - i > 16)
      _mm512_mask_storeu_epi32(out + 2 * i + 32, static_cast<__mmask16>(m >> 16),
                               _mm512_permutex2var_epi16(va, high, vb));
    special |= special_lanes(va, m, nonfinite) | special_lanes(vb, m, nonfinite);
  }
  return special != 0;
}

// permutex2var indices interleaving the low (high) halves of two vectors: a0, b0, a1, b1, ...
CONV3D_DX_INLINE __m512i interleave_index(bool high) {
  alignas(64) static constexpr std::array<int, 32> index{0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                         21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                         11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  return _mm512_load_si512(index.data() + (high ? 16 : 0));
}

void interleave_f32(const float* a, const float* b, float* out, std::int64_t n) {
  const __m512i lo = interleave_index(false), hi = interleave_index(true);
  for (std::int64_t i = 0; i < n; i += 32) {
    const std::int64_t left = n - i, na = (left + 1) / 2, nb = left / 2;  // from a and from b
    const __mmask16 ma = tail16(na);
    const __mmask16 mb = tail16(nb);
    const __m512 va = _mm512_maskz_loadu_ps(ma, a + i / 2), vb = _mm512_maskz_loadu_ps(mb, b + i / 2);
    const __mmask16 m0 = tail16(left);
    const __mmask16 m1 = tail16(std::max<std::int64_t>(left - 16, 0));
    _mm512_mask_storeu_ps(out + i, m0, _mm512_permutex2var_ps(va, lo, vb));
    _mm512_mask_storeu_ps(out + i + 16, m1, _mm512_permutex2var_ps(va, hi, vb));
  }
}

// split_parts (support.hpp) for n values, 16 at a time: hi[i] and lo[i] as bf16 bits; whether a value is
// not finite or has a tiny part (tiny_bf16). (Shifts by the maskz forms: GCC 12 warns of the plain forms'
// undefined source.)
bool split_bf16(const float* src, std::int64_t n, std::uint16_t* hi, std::uint16_t* lo) {
  const __m512i exponent = _mm512_set1_epi32(0x7F800000);
  // A part is tiny when (its bits without the sign) - 1 < 0x237F, unsigned (zero wraps): on the fp32 bits
  // of the part, (bits & 0x7FFF0000) - 0x10000 < 0x237F0000.
  const auto tiny = [](__m512i bits, __mmask16 m) __attribute__((always_inline)) {
    return _mm512_mask_cmplt_epu32_mask(
        m,
        _mm512_sub_epi32(_mm512_and_si512(bits, _mm512_set1_epi32(0x7FFF0000)), _mm512_set1_epi32(0x10000)),
        _mm512_set1_epi32(0x237F0000));
  };
  __mmask16 any = 0;
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail16(n - i);
    const __m512 x = _mm512_maskz_loadu_ps(m, src + i);
    const __m512i bits = _mm512_castps_si512(x);
    const __mmask16 special = _mm512_cmpeq_epi32_mask(_mm512_and_si512(bits, exponent), exponent);
    const __mmask16 nan = _mm512_mask_cmpgt_epi32_mask(
        special, _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF)), exponent);
    // Below bf16's smallest denormal: hi is that denormal.
    const __mmask16 below_bf16 = _mm512_mask_test_epi32_mask(
        _mm512_testn_epi32_mask(bits, _mm512_set1_epi32(0x7FFF0000)), bits, _mm512_set1_epi32(0xFFFF));
    const __m512i truncated = _mm512_and_si512(bits, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)));
    __m512i hi_bits = _mm512_mask_or_epi32(truncated, below_bf16, truncated, _mm512_set1_epi32(0x10000));
    const __m512i lo_bits = _mm512_maskz_and_epi32(
        static_cast<__mmask16>(~special), _mm512_castps_si512(_mm512_sub_ps(x, _mm512_castsi512_ps(hi_bits))),
        _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)));
    hi_bits = _mm512_mask_or_epi32(hi_bits, nan, hi_bits, _mm512_set1_epi32(0x400000));  // NaN made quiet
    any = static_cast<__mmask16>(any | (special & m) | tiny(hi_bits, m) | tiny(lo_bits, m));
    _mm512_mask_cvtepi32_storeu_epi16(hi + i, m, _mm512_maskz_srli_epi32(0xFFFF, hi_bits, 16));
    _mm512_mask_cvtepi32_storeu_epi16(lo + i, m, _mm512_maskz_srli_epi32(0xFFFF, lo_bits, 16));
  }
  return any != 0;
}

bool any_tiny_bf16(const std::uint16_t* p, std::int64_t n) {
  __mmask32 any = 0;
  for (std::int64_t i = 0; i < n; i += 32) {
    const __mmask32 m = tail32(n - i);
    any |= tiny_lanes(_mm512_maskz_loadu_epi16(m, p + i), m);
  }
  return any != 0;
}

bool copy_bf16(const std::uint16_t* src, std::int64_t n, std::uint16_t* dst) {
  __mmask32 any = 0;
  for (std::int64_t i = 0; i < n; i += 32) {
    const __mmask32 m = tail32(n - i);
    const __m512i v = _mm512_maskz_loadu_epi16(m, src + i);
    _mm512_mask_storeu_epi16(dst + i, m, v);
    any |= tiny_lanes(v, m);
  }
  return any != 0;
}

bool any_nonfinite_bf16(const std::uint16_t* p, std::int64_t n) {
  const __m512i exponent = _mm512_set1_epi16(0x7F80);
  __mmask32 any = 0;
  for (std::int64_t i = 0; i < n; i += 32) {
    const __mmask32 m = tail32(n - i);
    const __m512i v = _mm512_maskz_loadu_epi16(m, p + i);
    any |= _mm512_mask_cmpeq_epi16_mask(m, _mm512_and_si512(v, exponent), exponent);
  }
  return any != 0;
}

}  // namespace avx512

const KernelSet& avx512_kernels() {
  static const KernelSet set = [] {
    using namespace avx512;
    KernelSet s;
    s.lanes = 16;
    s.max_m[1] = 14;
    s.max_m[2] = 14;
    s.max_m[3] = 9;
    s.max_m[4] = 6;
    s.pix_budget = kPixBudget;
    fill_tiles<V, F32Step<V>, 1, 14>(s.f32);
    fill_tiles<V, F32Step<V>, 2, 14>(s.f32);
    fill_tiles<V, F32Step<V>, 3, 9>(s.f32);
    fill_tiles<V, F32Step<V>, 4, 6>(s.f32);
    // A dy load per FMA (NV = 1) or per two (NV = 2) is what sharing the loads of a phase's W taps lifts;
    // wider blocks already load less than one vector per two FMAs. Ice Lake Xeon, one thread, data in L1,
    // 16 channels per tap: 13 x 1 tiles at 80-90 GFLOP/s single-tap, 165-170 sharing three taps (of 176);
    // 13 x 2 single-tap 140, 10 x 2 sharing three 169-173.
    fill_shared_w_tiles<V, 2, 1, 14>(s);
    fill_shared_w_tiles<V, 2, 2, 10>(s);
    fill_shared_w_tiles<V, 3, 1, 14>(s);
    fill_shared_w_tiles<V, 3, 2, 10>(s);
    fill_tiles<V, Bf16Step, 1, 14>(s.bf16);
    fill_tiles<V, Bf16Step, 2, 14>(s.bf16);
    fill_tiles<V, Bf16Step, 3, 9>(s.bf16);
    fill_tiles<V, Bf16Step, 4, 6>(s.bf16);
    fill_tiles<V, Bf16ExactStep, 1, 14>(s.bf16_exact);
    fill_tiles<V, Bf16ExactStep, 2, 14>(s.bf16_exact);
    fill_tiles<V, Bf16ExactStep, 3, 9>(s.bf16_exact);
    fill_tiles<V, Bf16ExactStep, 4, 6>(s.bf16_exact);
    s.any_tiny_bf16 = &any_tiny_bf16;
    s.any_nonfinite_bf16 = &any_nonfinite_bf16;
    s.copy_bf16 = &copy_bf16;
    s.interleave_bf16 = &interleave_bf16;
    s.interleave_f32 = &interleave_f32;
    s.split_bf16 = &split_bf16;
    s.transpose_bf16_pairs = &transpose_bf16_pairs;
    static_for<1, kMaxPixCi + 1>([&](auto ci) {
      static_for<1, pix_max_p(ci, kPixBudget) + 1>([&](auto p) {
        s.pix[ci][p] = &PixTile<ci, p, PixMode::f32>::kernel;
        s.pix_bf16[ci][p] = &PixTile<ci, p, PixMode::pair>::kernel;
        s.pix_bf16_exact[ci][p] = &PixTile<ci, p, PixMode::pair_exact>::kernel;
      });
    });
    static_for<1, kMaxStreamV + 1>([&](auto v) {
      s.stream_rows[v] = kMaxStreamRows / v;  // 24 accumulators of the 32 registers
      static_for<1, kMaxStreamRows / v + 1>(
          [&](auto r) { s.stream[v][r] = &StreamTile<V, r, v, false>::kernel; });
      s.stream_masked[v] = &StreamTile<V, 1, v, true>::kernel;
    });
    s.to_bf16 = &to_bf16;
    s.store_rows_bf16 = cpu_supports(Isa::avx512_bf16) ? &store_rows_bf16_cvt : &store_rows_bf16;
    s.to_fp16 = &to_fp16;
    s.store_rows_fp16 = &store_rows16<fp16_round, numeric::f32_to_fp16>;
    s.store_transposed = &store_transposed;
    s.transposes_uncached = true;
    const EightBitKernels eight_bit = avx512_eight_bit_kernels(cpu_has_avx512_vbmi());
    s.to_hif8 = eight_bit.to_hif8;
    s.to_fp8_e4m3fn = eight_bit.to_fp8_e4m3fn;
    s.widen8 = eight_bit.widen8;
    s.widen8_pairs = eight_bit.widen8_pairs;
    s.bf16_to_f32 = &bf16_to_f32;
    s.fp16_to_f32 = &fp16_to_f32;
    s.round_hf32 = &round_hf32;
    s.copy_uncached = &copy_uncached;
    return s;
  }();
  return set;
}

EightBitKernels avx512_eight_bit_kernels(bool vbmi) {
  if (vbmi)
    return {&avx512::encode8_vbmi<avx512::Hif8Vbmi>, &avx512::encode8_vbmi<avx512::Fp8Vbmi>,
            &avx512::widen8_vbmi, &avx512::widen8_pairs_vbmi};
  return {&avx512::to_hif8, &avx512::to_fp8_e4m3fn, &avx512::widen8, &avx512::widen8_pairs};
}

std::int64_t peak_fma_avx512(std::int64_t rounds, double* accumulated) {
  constexpr int kAcc = 16;
  avx512::peak_loop<avx512::V, kAcc>(
      rounds, _mm512_set1_ps(0x1p-20f), _mm512_set1_ps(0x1p-20f),
      [](__m512 a, __m512 x, __m512 w) { return _mm512_fmadd_ps(x, w, a); }, accumulated);
  return rounds * kAcc * 32;
}

// x and w hold the bf16 pairs (2^-20, 2^-20): products and sums stay normal, so nothing is flushed.
std::int64_t peak_dpbf16_avx512(std::int64_t rounds, double* accumulated) {
  constexpr int kAcc = 16;
  const __m512 pairs = _mm512_castsi512_ps(_mm512_set1_epi16(0x3580));
  avx512::peak_loop<avx512::V, kAcc>(
      rounds, pairs, pairs,
      [](__m512 a, __m512 x, __m512 w) { return _mm512_dpbf16_ps(a, (__m512bh)x, (__m512bh)w); },
      accumulated);
  return rounds * kAcc * 64;
}

}  // namespace conv3d_dx::cpu
