// Helpers shared by the fast engines: ISA levels, aligned memory, reading inputs with the problem's rounding,
// and storing fp32 results into y with its dtype and overflow mode.
#pragma once

#include <xmmintrin.h>

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "common/engine.hpp"
#include "cpu/kernels.hpp"
#include "numeric/numeric.hpp"

namespace conv3d_dx::cpu {

// 4 amx_bf16, 3 avx512_bf16, 2 avx512, 1 avx2, 0 portable.
int isa_level(Isa isa);
// Empty when the engine of `isa` may run for the request on this CPU, else why not.
std::string isa_refusal(Isa isa, const EngineRequest& request);
// What every fast engine refuses, else empty: isa_refusal, inputs a bf16 engine cannot take exactly
// (bf16 = true), and geometry whose tables would not fit in memory.
std::string fast_engine_refusal(Isa isa, const EngineRequest& request, bool bf16);
// The kernel set the fast engines of `isa` run (AMX engines: AVX-512's, beside their tiles).
inline const KernelSet& kernels_for(Isa isa) { return isa == Isa::avx2 ? avx2_kernels() : avx512_kernels(); }

inline bool exact_in_bf16(DType t) { return t == DType::bf16 || t == DType::hif8 || t == DType::fp8_e4m3fn; }
// vdpbf16ps treats denormal inputs as zero and flushes denormal products and sums to zero. A bf16 value
// with 8 significant bits and magnitude >= 2^-56 is a multiple of 2^-63, so a product of two such values is
// a multiple of 2^-126, and so is every sum of such products and every fp32 rounding of one: each is zero or
// normal, and nothing is flushed. hifloat8 and float8_e4m3fn values are multiples of 2^-22 and 2^-9, so a
// product with them is at least as coarse. So only bf16 inputs with a nonzero magnitude below 2^-56 (bits
// 0x0001..0x237F after the sign) can make vdpbf16ps differ from exact products with fp32 sums; then the
// engines use their *_exact kernels instead.
inline bool tiny_bf16(std::uint16_t bits) {
  return static_cast<std::uint16_t>((bits & 0x7FFFu) - 1u) < 0x237Fu;
}
// fp16 and HF32 inputs on AMX tiles (GemmConfig::split): a value x of 11 significant bits (fp16, or fp32
// rounded to HF32) is exactly hi + lo, hi its top 8 significant bits (x's fp32 bits truncated to bf16) and
// lo = x - hi (at most 3 bits, exact in bf16 unless x lies near the bottom of fp32's range). The tiles take
// dy's his and los as two operands and the filter's likewise, and add hi hi' + hi lo' + lo hi' + lo lo',
// four exact products summing to x w. fp16 parts are normal or zero and above tiny_bf16's bound; an HF32
// value below about 2^-45 may have a tiny part, and one below bf16's smallest denormal (2^-133), whose hi
// would be zero, gets the smallest denormal of its sign as hi instead: tiny too, so that the scans that send
// tiny inputs to unsplit kernels see it. A value that is not finite is its own hi (a NaN made quiet) with a
// zero lo; its products are not x w (inf x 0 where the other side's lo is zero), so such inputs also go to
// the unsplit kernels. Returns (hi, lo) as bf16 bits.
inline std::pair<std::uint16_t, std::uint16_t> split_parts(float x) {
  const auto bits = std::bit_cast<std::uint32_t>(x);
  if ((bits & 0x7F800000u) == 0x7F800000u)
    return {static_cast<std::uint16_t>((bits & 0x7FFFFFu) != 0 ? (bits >> 16 | 0x40u) : bits >> 16), 0};
  const bool below_bf16 = (bits & 0x7FFF0000u) == 0 && (bits & 0xFFFFu) != 0;
  const std::uint32_t hi = bits >> 16 | (below_bf16 ? 1u : 0u);
  const std::uint32_t lo = std::bit_cast<std::uint32_t>(x - std::bit_cast<float>(hi << 16)) >> 16;
  return {static_cast<std::uint16_t>(hi), static_cast<std::uint16_t>(lo)};
}
// Whether every input value splits into split_parts' parts: each input bf16-exact, an fp16 value (fp16
// inputs, or any input rounded to fp16) or fp32 rounded to HF32, so AMX tiles can take them (HF32 values
// with a tiny part fall back to fp32 kernels).
inline bool splits_into_bf16(const Problem& p) {
  const auto ok = [&](DType t) {
    return exact_in_bf16(t) || t == DType::f16 || p.input_rounding == InputRounding::fp16 ||
           (t == DType::f32 && p.input_rounding == InputRounding::hf32);
  };
  return ok(p.dy_dtype) && ok(p.filter_dtype);
}
inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
// Part k of `parts` that share `count` items out evenly: its first item and its size.
inline std::pair<std::int64_t, std::int64_t> even_part(std::int64_t count, std::int64_t parts,
                                                       std::int64_t k) {
  const std::int64_t first = count * k / parts;
  return {first, count * (k + 1) / parts - first};
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using AlignedPtr = std::unique_ptr<void, FreeDeleter>;
// 64-byte aligned, zero-filled; throws OutOfMemory saying it was for `what`.
AlignedPtr alloc_zeroed64(std::size_t bytes, const char* what);
// Requests the lines of the bytes [p, p + bytes) into L1: runs too far apart for the hardware prefetchers.
// Always inlined: GCC deems a function of prefetches alone free of effects and drops its calls.
inline __attribute__((always_inline)) void prefetch_bytes(const char* p, std::int64_t bytes) {
  for (std::int64_t b = 0; b < bytes; b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
  _mm_prefetch(p + bytes - 1, _MM_HINT_T0);
}

// The first 64-byte aligned address at or after p (workspaces are sized with 64 bytes to spare).
inline void* align64(void* p) {
  return reinterpret_cast<void*>((reinterpret_cast<std::uintptr_t>(p) + 63) / 64 * 64);
}

// Reads elements of an input tensor as fp32 with the problem's input rounding: the common cases inline,
// everything else through numeric::load_rounded (the single definition of the rounding).
class Reader {
 public:
  Reader(DType dtype, InputRounding rounding);

  // Whether widen() takes this dtype and rounding with ks: by its vector kernels, or for 8-bit codes by a
  // run through the fp32 table where ks has no table kernels or the codes are not all exact in bf16 (a
  // contiguous run either way).
  bool widens(const KernelSet& ks) const;
  // Whether the values are read as stored: fp32 without rounding, or bf16 (which no rounding changes), so
  // a vector kernel may move (or widen) them without a Reader.
  bool as_stored() const { return kind_ == Kind::f32 || kind_ == Kind::bf16; }
  // dst[i] = element at + i of `base` as fp32 (the value get() gives), i < n: only when widens(ks).
  void widen(const KernelSet& ks, const void* base, std::int64_t at, std::int64_t n, float* dst) const;
  // An 8-bit type's 256 codes as bf16 bits (after the input rounding), or null unless every one is exact in
  // bf16: the table for KernelSet::widen8 and widen8_pairs.
  const Lut8* bf16_lut() const { return kind_ == Kind::lut8 && lut_bf16_exact_ ? &lut_bf16_ : nullptr; }

  // Calls f(get) with get(i) -> float, element i of `base`.
  template <class F>
  void visit(const void* base, F&& f) const {
    switch (kind_) {
      case Kind::f32: {
        const auto* p = static_cast<const float*>(base);
        f([p](std::int64_t i) { return p[i]; });
        break;
      }
      case Kind::hf32: {
        const auto* p = static_cast<const float*>(base);
        f([p](std::int64_t i) { return numeric::round_to_hf32(p[i]); });
        break;
      }
      case Kind::bf16: {
        const auto* p = static_cast<const std::uint16_t*>(base);
        f([p](std::int64_t i) {
          const std::uint32_t bits = static_cast<std::uint32_t>(p[i]) << 16;
          float v;
          std::memcpy(&v, &bits, sizeof v);
          return v;
        });
        break;
      }
      case Kind::fp16: {
        const auto* p = static_cast<const std::uint16_t*>(base);
        f([p](std::int64_t i) { return numeric::fp16_to_f32(p[i]); });
        break;
      }
      case Kind::lut8: {
        const auto* p = static_cast<const std::uint8_t*>(base);
        const float* lut = lut_;
        f([p, lut](std::int64_t i) { return lut[p[i]]; });
        break;
      }
      case Kind::generic: {
        const DType dtype = dtype_;
        const InputRounding rounding = rounding_;
        f([=](std::int64_t i) { return numeric::load_rounded(dtype, base, i, rounding); });
        break;
      }
    }
  }

 private:
  enum class Kind { f32, hf32, bf16, fp16, lut8, generic };
  Kind kind_ = Kind::generic;
  DType dtype_;
  InputRounding rounding_;
  float lut_[256] = {};
  Lut8 lut_bf16_;  // lut_ as bf16, when every entry is exact in bf16 (lut_bf16_exact_)
  bool lut_bf16_exact_ = false;
};

// Stores v, exact in the destination type, as element i of an fp32 or bf16 array.
inline void put(float* dst, std::int64_t i, float v) { dst[i] = v; }
inline void put(std::uint16_t* dst, std::int64_t i, float v) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  dst[i] = static_cast<std::uint16_t>(bits >> 16);
}

// The type store_transposed writes for y of dtype t.
inline StoreType transposed_store_type(DType t) {
  switch (t) {
    case DType::f32:
      return StoreType::f32;
    case DType::bf16:
      return StoreType::bf16;
    case DType::f16:
      return StoreType::fp16;
    case DType::hif8:
      return StoreType::hif8;
    case DType::fp8_e4m3fn:
      return StoreType::fp8_e4m3fn;
  }
  return StoreType::f32;  // not reached: every dtype is listed
}

// y[at + i * y_stride] = src[i * src_stride] for i < n, rounded to y's dtype with the problem's overflow
// mode.
void store_run(const Problem& p, const KernelSet& ks, const float* src, std::int64_t src_stride, void* y,
               std::int64_t at, std::int64_t y_stride, std::int64_t n);

// Whether y is fp32 and over twice the threads' L2 together: then the lines an engine writes once, whole,
// are better stored past the caches (no read of each line first, no write back later).
bool y_outgrows_l2(const Problem& p, const CpuModel& cpu, int threads);

// Writes tile [m][cbw] fp32 (the first `valid` values of each row: channels of one pixel) to y with
// contiguous channels and pixels y_ps apart: y[at + i * y_ps + c] = tile[i * cbw + c], rounded to y's dtype
// with the problem's overflow mode. valid <= cbw <= 1024.
void store_channel_last(const Problem& p, const KernelSet& ks, const float* tile, std::int64_t cbw,
                        std::int64_t m, std::int64_t valid, void* y, std::int64_t at, std::int64_t y_ps);

// Writes tile [m][tile_rs] fp32 (the first `valid` values of each row: channels of one pixel) to y with
// channels c_stride apart and pixels contiguous: y[at + c * c_stride + i] = tile[i * tile_rs + c], rounded
// to y's dtype with the problem's overflow mode. valid <= kMaxNv * 16. uncached: an fp32 y's whole 64-byte
// lines skip the caches where the kernels can (StoreType::f32_uncached; the caller fences).
void store_channel_first(const Problem& p, const KernelSet& ks, const float* tile, std::int64_t tile_rs,
                         std::int64_t m, std::int64_t valid, void* y, std::int64_t at, std::int64_t c_stride,
                         bool uncached = false);

}  // namespace conv3d_dx::cpu
