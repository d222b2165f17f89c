// AVX2 + FMA tile kernels (fp32 only: bf16 and 8-bit inputs are widened to fp32 by the engine). Entered only
// after cpu_supports(Isa::avx2).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cpu/kernels.hpp"
#include "numeric/numeric.hpp"

namespace conv3d_dx::cpu {
namespace avx2 {

#include "cpu/tile_kernel.hpp"

struct V {
  using R = __m256;
  static constexpr int kLanes = 8;
  static constexpr bool kEveryRange = true;  // Tile::run_part
  static CONV3D_DX_INLINE R zero() { return _mm256_setzero_ps(); }
  static CONV3D_DX_INLINE R load(const char* p) { return _mm256_load_ps(reinterpret_cast<const float*>(p)); }
  static CONV3D_DX_INLINE R loadu(const float* p) { return _mm256_loadu_ps(p); }
  static CONV3D_DX_INLINE R bcast(float v) { return _mm256_set1_ps(v); }
  static CONV3D_DX_INLINE R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static CONV3D_DX_INLINE void store(float* p, R v) { _mm256_storeu_ps(p, v); }
  static CONV3D_DX_INLINE void store_uncached(float* p, R v) { _mm256_stream_ps(p, v); }  // p aligned to R
  // No mask registers: a mask is a vector of all-ones lanes, and a masked FMA a blend after the FMA.
  using M = __m256;
  static CONV3D_DX_INLINE M mask(std::uint16_t bits) {
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(bits), bit), bit));
  }
  static CONV3D_DX_INLINE R masked_fma(R a, R b, R c, M m) {
    return _mm256_blendv_ps(c, _mm256_fmadd_ps(a, b, c), m);
  }
};

// 8 fp32 -> 8 bf16, round to nearest even; saturate turns overflow and inf (0x7F80) into the largest finite
// value (0x7F7F), sign kept. NaN lanes must be handled by the caller (numeric's encoding).
CONV3D_DX_INLINE __m128i bf16_round(__m256 v, bool saturate) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb)), 16);
  if (saturate) {
    const __m256i over =
        _mm256_cmpeq_epi32(_mm256_and_si256(r, _mm256_set1_epi32(0x7FFF)), _mm256_set1_epi32(0x7F80));
    r = _mm256_add_epi32(r, over);  // -1 where over
  }
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

void to_bf16(const float* src, std::uint16_t* dst, std::int64_t n, bool saturate) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(src + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {  // rare: numeric's NaN encoding
      for (std::int64_t k = i; k < i + 8; ++k) dst[k] = numeric::f32_to_bf16(src[k], saturate);
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), bf16_round(v, saturate));
    }
  }
  for (; i < n; ++i) dst[i] = numeric::f32_to_bf16(src[i], saturate);
}

void to_fp16(const float* src, std::uint16_t* dst, std::int64_t n, bool saturate) {
  const __m256 max = _mm256_set1_ps(65504.0f), min = _mm256_set1_ps(-65504.0f);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(src + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {  // rare: numeric's NaN encoding
      for (std::int64_t k = i; k < i + 8; ++k) dst[k] = numeric::f32_to_fp16(src[k], saturate);
      continue;
    }
    if (saturate) v = _mm256_max_ps(_mm256_min_ps(v, max), min);  // beyond 65504 would round to inf
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) dst[i] = numeric::f32_to_fp16(src[i], saturate);
}

// Exact widening of 16-bit codes to fp32: bf16 by a shift, fp16 by vcvtph2ps (subnormals included).
void bf16_to_f32(const std::uint16_t* src, float* dst, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i bits = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(bits, 16)));
  }
  for (; i < n; ++i) dst[i] = numeric::bf16_to_f32(src[i]);
}

void fp16_to_f32(const std::uint16_t* src, float* dst, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = numeric::fp16_to_f32(src[i]);
}

// numeric::round_to_hf32 on 8 lanes: half of the kept ulp added to the bits, the 13 dropped bits cleared;
// inf and NaN unchanged.
void round_hf32(const float* src, float* dst, std::int64_t n) {
  const __m256i half = _mm256_set1_epi32(0x1000), keep = _mm256_set1_epi32(~0x1FFF);
  const __m256i abs = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(src + i));
    const __m256i finite = _mm256_cmpgt_epi32(inf, _mm256_and_si256(u, abs));  // |u| < inf, as signed ints
    const __m256i r = _mm256_and_si256(_mm256_add_epi32(u, half), keep);
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_blendv_epi8(u, r, finite)));
  }
  for (; i < n; ++i) dst[i] = numeric::round_to_hf32(src[i]);
}

// Lanes [0, n) of 8 set, for the masked loads and stores of row and column tails.
CONV3D_DX_INLINE __m256i tail8(std::int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The low bytes of 8 int32 lanes (each 0..255) to dst[0, n), n <= 8.
CONV3D_DX_INLINE void store_bytes(__m256i codes, std::uint8_t* dst, std::int64_t n) {
  const __m128i words = _mm_packus_epi32(_mm256_castsi256_si128(codes), _mm256_extracti128_si256(codes, 1));
  const __m128i bytes = _mm_packus_epi16(words, words);
  if (n == 8) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), bytes);
    return;
  }
  alignas(16) std::uint8_t b[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(b), bytes);
  std::memcpy(dst, b, static_cast<std::size_t>(n));
}

// Lanes of magnitude a (non-negative as int32) above `bound`.
CONV3D_DX_INLINE __m256i above(__m256i a, std::uint32_t bound) {
  return _mm256_cmpgt_epi32(a, _mm256_set1_epi32(static_cast<int>(bound)));
}

// f32_to_fp8_e4m3fn on 8 lanes: normals round to nearest even on bit 20 and are rebiased; subnormals (below
// 2^-6) are counted in units of 2^-9, rounded to nearest even (8 units is the smallest normal's code).
CONV3D_DX_INLINE __m256i fp8_e4m3fn_codes(__m256 v, bool saturate) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(a, 20), _mm256_set1_epi32(1));
  const __m256i normal = _mm256_sub_epi32(
      _mm256_srli_epi32(_mm256_add_epi32(a, _mm256_add_epi32(_mm256_set1_epi32(0x7FFFF), lsb)), 20),
      _mm256_set1_epi32(120 << 3));
  // Rounded to an integer first (to nearest even, whatever MXCSR says), then converted exactly.
  const __m256i units =
      _mm256_cvttps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(512.0f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  __m256i code = _mm256_or_si256(sign, _mm256_blendv_epi8(units, normal, above(a, 0x3C7FFFFFu)));
  // Above 464 (ties to even 448 below it): NaN or the largest finite; NaN: NaN or +0.
  code = _mm256_blendv_epi8(code, _mm256_or_si256(sign, _mm256_set1_epi32(saturate ? 0x7E : 0x7F)),
                            above(a, 0x43E80000u));
  return _mm256_blendv_epi8(
      code, saturate ? _mm256_setzero_si256() : _mm256_or_si256(sign, _mm256_set1_epi32(0x7F)),
      above(a, 0x7F800000u));
}

// f32_to_hif8 on 8 lanes: numeric's codes by the top 12 magnitude bits, looked up by a gather; the sign, the
// tiny values that round to +0, overflow and NaN are applied around it. Its 4 KiB table stays in L1 where
// the two 64 KiB tables of numeric's scalar encoder miss it inside the engines (Zen 3, suite h channels_last
// with HiFloat8 y, 1 thread, profiled: 1.2 ns a value against 2.9).
CONV3D_DX_INLINE __m256i hif8_codes(__m256 v, const int* table, bool saturate) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
  const __m256i looked =
      _mm256_and_si256(_mm256_i32gather_epi32(table, _mm256_srli_epi32(a, 19), 1), _mm256_set1_epi32(0xFF));
  // Below 2^-23: +0 (no sign); from 40960 (ties away past 32768) and infinities: inf or the largest finite;
  // NaN: NaN or +0.
  __m256i code = _mm256_and_si256(_mm256_or_si256(looked, sign), above(a, 0x33FFFFFFu));
  code = _mm256_blendv_epi8(code, _mm256_or_si256(sign, _mm256_set1_epi32(saturate ? 0x6E : 0x6F)),
                            above(a, 0x471FFFFFu));
  return _mm256_blendv_epi8(code, _mm256_set1_epi32(saturate ? 0 : 0x80), above(a, 0x7F800000u));
}

// n values through Codes(8 fp32 lanes) -> 8 codes.
template <class Codes>
CONV3D_DX_INLINE void to_8bit(const float* src, std::uint8_t* dst, std::int64_t n, Codes codes) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) store_bytes(codes(_mm256_loadu_ps(src + i)), dst + i, 8);
  if (i < n) store_bytes(codes(_mm256_maskload_ps(src + i, tail8(n - i))), dst + i, n - i);
}

void to_hif8(const float* src, std::uint8_t* dst, std::int64_t n, bool saturate) {
  const auto* table = reinterpret_cast<const int*>(numeric::hif8_codes_by_top_bits());
  to_8bit(src, dst, n, [&](__m256 v) { return hif8_codes(v, table, saturate); });
}

void to_fp8_e4m3fn(const float* src, std::uint8_t* dst, std::int64_t n, bool saturate) {
  to_8bit(src, dst, n, [&](__m256 v) { return fp8_e4m3fn_codes(v, saturate); });
}

// Of the 16 vector registers: one more for dy, one for a product. A tap covering part of the tile also keeps
// its P masks live, so the widest tiles spill there (and CI = 8, one row of one vector, spills anyway).
constexpr int kPixBudget = 14;

// The pixel tile (PixArgs): CI channels x R rows x P vectors of 8 pixels, fp32. AVX2 has no mask registers:
// a tap that covers every pixel of the tile runs plain loads and FMAs; one that covers part of it loads its
// pixels with vmaskmovps (lanes outside read nothing) and keeps each sum where the lane is outside (a blend
// after the FMA), so padding never enters a sum, not even as 0 x inf.
template <int CI, int P>
struct PixTile {
  static constexpr int R = pix_rows(CI, P, kPixBudget);

  template <bool Partial>
  static CONV3D_DX_INLINE void run(__m256 (&acc)[CI][R][P], const PixArgs& a, const PixTap& tap,
                                   const __m256i (&m)[P]) {
    // Addresses are formed as integers: a tap's first pixel may lie before dy where it is masked off.
    std::uintptr_t d = reinterpret_cast<std::uintptr_t>(a.dy) + static_cast<std::uintptr_t>(tap.dy_off * 4);
    const char* w = static_cast<const char*>(tap.w);
    const std::uint32_t rows = tap.rows;
    for (std::int64_t s = 0; s < a.k; ++s, d += static_cast<std::uintptr_t>(a.co_stride * 4), w += CI * 4) {
      __m256 wv[CI];
      static_for<0, CI>([&](auto c) __attribute__((always_inline)) {
        wv[c] = _mm256_broadcast_ss(reinterpret_cast<const float*>(w) + c);
      });
      static_for<0, R>([&](auto r) __attribute__((always_inline)) {
        if (!((rows >> r) & 1u)) return;
        static_for<0, P>([&](auto v) __attribute__((always_inline)) {
          const auto* src =
              reinterpret_cast<const float*>(d + static_cast<std::uintptr_t>((r * a.row_stride + 8 * v) * 4));
          const __m256 x = Partial ? _mm256_maskload_ps(src, m[v]) : _mm256_loadu_ps(src);
          static_for<0, CI>([&](auto c) __attribute__((always_inline)) {
            const __m256 sum = _mm256_fmadd_ps(x, wv[c], acc[c][r][v]);
            acc[c][r][v] = Partial ? _mm256_blendv_ps(acc[c][r][v], sum, _mm256_castsi256_ps(m[v])) : sum;
          });
        });
      });
    }
  }

  static void kernel(const PixArgs& a) {
    __m256 acc[CI][R][P];
    static_for<0, CI>([&](auto c) __attribute__((always_inline)) {
      static_for<0, R>([&](auto r) __attribute__((always_inline)) {
        static_for<0, P>([&](auto v) __attribute__((always_inline)) { acc[c][r][v] = _mm256_setzero_ps(); });
      });
    });
    for (std::int64_t t = 0; t < a.ntaps; ++t) {
      const PixTap& tap = a.taps[t];
      __m256i m[P];  // lanes lo <= pixel < hi
      static_for<0, P>([&](auto v) __attribute__((always_inline)) {
        const __m256i pixel =
            _mm256_add_epi32(_mm256_set1_epi32(8 * v), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        m[v] = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(tap.lo), pixel),
                                   _mm256_cmpgt_epi32(_mm256_set1_epi32(tap.hi), pixel));
      });
      if (tap.lo == 0 && tap.hi >= 8 * P)
        run<false>(acc, a, tap, m);
      else
        run<true>(acc, a, tap, m);
    }
    static_for<0, CI>([&](auto c) __attribute__((always_inline)) {
      static_for<0, R>([&](auto r) __attribute__((always_inline)) {
        static_for<0, P>([&](auto v) __attribute__((always_inline)) {
          _mm256_store_ps(a.tile + ((c * R + r) * P + v) * 8, acc[c][r][v]);
        });
      });
    });
  }
};

CONV3D_DX_INLINE void transpose8(__m256 (&r)[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// The transposing store of KernelSet, in blocks of 8 x 8. 16-bit and 8-bit y go through this set's encoders
// (to_bf16, to_fp16, to_hif8, to_fp8_e4m3fn), so their rounding (NaNs included) is theirs. Masked loads and
// stores (vmaskmovps) only for the tails: they cost more than plain ones (Zen 3, suite i NCDHW, whose dy
// panels this transposes: 24 % of the samples with masks throughout, 16 % without).
void store_transposed(const void* a, bool a_bf16, std::int64_t a_rs, std::int64_t nr, std::int64_t nc,
                      void* y, StoreType y_type, std::int64_t y_cs, bool saturate) {
  for (std::int64_t r0 = 0; r0 < nr; r0 += 8) {
    const std::int64_t rn = std::min<std::int64_t>(8, nr - r0);
    for (std::int64_t c0 = 0; c0 < nc; c0 += 8) {
      const std::int64_t cn = std::min<std::int64_t>(8, nc - c0);
      const __m256i cmask = tail8(cn), rmask = tail8(rn);
      __m256 t[8];
      for (std::int64_t i = 0; i < 8; ++i) {
        const std::int64_t at = (r0 + i) * a_rs + c0;
        if (i >= rn) {
          t[i] = _mm256_setzero_ps();
        } else if (a_bf16) {
          alignas(16) std::uint16_t h[8] = {};
          std::memcpy(h, static_cast<const std::uint16_t*>(a) + at, static_cast<std::size_t>(cn) * 2);
          const __m256i bits = _mm256_cvtepu16_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
          t[i] = _mm256_castsi256_ps(_mm256_slli_epi32(bits, 16));
        } else if (cn == 8) {
          t[i] = _mm256_loadu_ps(static_cast<const float*>(a) + at);
        } else {
          t[i] = _mm256_maskload_ps(static_cast<const float*>(a) + at, cmask);
        }
      }
      transpose8(t);
      for (std::int64_t c = 0; c < cn; ++c) {
        const std::int64_t at = (c0 + c) * y_cs + r0;
        // Uncached too: a 32-byte non-temporal store fills half a line, and the other half comes 8 channels
        // later, by when the write-combining buffer may have been flushed as a partial line.
        if (y_type == StoreType::f32 || y_type == StoreType::f32_uncached) {
          if (rn == 8)
            _mm256_storeu_ps(static_cast<float*>(y) + at, t[c]);
          else
            _mm256_maskstore_ps(static_cast<float*>(y) + at, rmask, t[c]);
          continue;
        }
        alignas(32) float v[8];
        _mm256_store_ps(v, t[c]);
        if (y_type == StoreType::hif8 || y_type == StoreType::fp8_e4m3fn) {
          auto* out = static_cast<std::uint8_t*>(y) + at;
          if (y_type == StoreType::hif8)
            to_hif8(v, out, rn, saturate);
          else
            to_fp8_e4m3fn(v, out, rn, saturate);
          continue;
        }
        auto* out = static_cast<std::uint16_t*>(y) + at;
        if (y_type == StoreType::bf16)
          to_bf16(v, out, rn, saturate);
        else
          to_fp16(v, out, rn, saturate);
      }
    }
  }
}

// out[i] = a[i / 2] for even i, b[i / 2] for odd i, i < n: 16 at a time, the rest one by one.
void interleave_f32(const float* a, const float* b, float* out, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 va = _mm256_loadu_ps(a + i / 2), vb = _mm256_loadu_ps(b + i / 2);
    const __m256 lo = _mm256_unpacklo_ps(va, vb), hi = _mm256_unpackhi_ps(va, vb);  // per 128-bit half
    _mm256_storeu_ps(out + i, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(out + i + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
  }
  for (; i < n; ++i) out[i] = (i % 2 == 0 ? a : b)[i / 2];
}

// Copies n floats with streaming stores past the caches (a copy written once and read much later).
void copy_uncached(const float* src, float* dst, std::int64_t n) {
  const std::int64_t head = std::min<std::int64_t>(
      n, static_cast<std::int64_t>((32 - reinterpret_cast<std::uintptr_t>(dst) % 32) % 32 / 4));
  std::int64_t i = 0;
  for (; i < head; ++i) dst[i] = src[i];
  for (; i + 8 <= n; i += 8) _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
  for (; i < n; ++i) dst[i] = src[i];
}

}  // namespace avx2

const KernelSet& avx2_kernels() {
  static const KernelSet set = [] {
    using namespace avx2;
    KernelSet s;
    s.lanes = 8;
    s.max_m[1] = 12;
    s.max_m[2] = 6;
    s.max_m[3] = 4;
    s.max_m[4] = 3;
    fill_tiles<V, F32Step<V>, 1, 12>(s.f32);
    fill_tiles<V, F32Step<V>, 2, 6>(s.f32);
    fill_tiles<V, F32Step<V>, 3, 4>(s.f32);
    fill_tiles<V, F32Step<V>, 4, 3>(s.f32);
    // 6 x 2 tiles keep both filter vectors in registers, 3 x 4 ones read one from memory per FMA. Blocks of
    // 4 vectors only for short reductions (steps per tile, GemmConfig), where the work per tile and per tap
    // that grows with its pixels weighs more. Zen 3, 2 threads, NDHWC, time with 4-vector blocks over time
    // with 2 (paired in one process, two to four runs): suite c (81 steps) 0.69-0.89x, unet_up (128)
    // 0.73-0.89x, k1s2 (256) 0.89-0.98x; a (1728) 1.00-1.01x, b (1024) 1.04-1.05x, i (2730) 1.03-1.06x.
    s.usual_nv = 2;
    s.short_reduction = 256;
    s.to_bf16 = &to_bf16;
    s.to_fp16 = &to_fp16;
    s.bf16_to_f32 = &bf16_to_f32;
    s.fp16_to_f32 = &fp16_to_f32;
    s.round_hf32 = &round_hf32;
    s.store_transposed = &store_transposed;
    s.to_hif8 = &to_hif8;
    s.to_fp8_e4m3fn = &to_fp8_e4m3fn;
    s.pix_budget = kPixBudget;
    s.pix_masks_cost = true;
    static_for<1, kMaxStreamV + 1>([&](auto v) {
      constexpr int rows = (15 - v) / v;  // R x V accumulators, V dy vectors, a filter value: 16 registers
      s.stream_rows[v] = rows;
      static_for<1, rows + 1>([&](auto r) { s.stream[v][r] = &StreamTile<V, r, v, false>::kernel; });
      s.stream_masked[v] = &StreamTile<V, 1, v, true>::kernel;
    });
    s.copy_uncached = &copy_uncached;
    s.interleave_f32 = &interleave_f32;
    static_for<1, kMaxPixCi + 1>([&](auto ci) {
      static_for<1, pix_max_p(ci, kPixBudget) + 1>([&](auto p) { s.pix[ci][p] = &PixTile<ci, p>::kernel; });
    });
    return s;
  }();
  return set;
}

// 12 accumulators: AVX2 has 16 vector registers, x and w take two.
std::int64_t peak_fma_avx2(std::int64_t rounds, double* accumulated) {
  constexpr int kAcc = 12;
  avx2::peak_loop<avx2::V, kAcc>(
      rounds, _mm256_set1_ps(0x1p-20f), _mm256_set1_ps(0x1p-20f),
      [](__m256 a, __m256 x, __m256 w) { return _mm256_fmadd_ps(x, w, a); }, accumulated);
  return rounds * kAcc * 16;
}

}  // namespace conv3d_dx::cpu
