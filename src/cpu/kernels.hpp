// Micro-kernels of the implicit-GEMM engine, one set per instruction set (kernels_avx512.cpp,
// kernels_avx2.cpp). A tile is M consecutive y pixels of one row of one phase times NV vectors of input
// channels; it reduces over (taps x output channels) in a fixed order into fp32 registers and writes an
// fp32 [M][NV * lanes] tile. The engine (gemm_engine.cpp) owns layouts, phases, packing and threading.
#pragma once

#include <array>
#include <cstdint>
#include <limits>

namespace conv3d_dx::cpu {

// The element type store_transposed writes. f32_uncached: fp32 whose runs of whole 64-byte lines skip the
// caches (non-temporal stores, AVX-512; elsewhere plain stores); the caller runs _mm_sfence before other
// threads read them.
enum class StoreType : std::uint8_t { f32, f32_uncached, bf16, fp16, hif8, fp8_e4m3fn };

// Reduction step s < k of tap t for pixel p of the tile reads dy[dy_off + p * dy_ps + s * dy_cs] (one fp32
// value, or a bf16 pair of channels, then dy_cs is 2); only pixels in [lo, hi) have that tap inside dy, and
// hi = kToTileEnd means every pixel from lo, whatever the tile's width (so one list serves tiles of several
// widths). w: the packed filter of the tap for this channel block, [k][NV * lanes] fp32 or
// [k][NV * lanes][2] bf16. A tap may cover several kernel taps whose dy values are contiguous (fused W taps).
inline constexpr std::int32_t kToTileEnd = std::numeric_limits<std::int32_t>::max();
struct TapRef {
  std::int64_t dy_off;
  const void* w;
  std::int64_t k;
  std::int32_t lo, hi;
};

struct TileArgs {
  const void* dy;      // fp32 or bf16 elements, channels contiguous
  std::int64_t dy_ps;  // elements between neighbouring pixels of the tile
  std::int64_t dy_cs;  // elements between reduction steps
  const TapRef* taps;
  std::int64_t ntaps;
  // Pixel p's NV * lanes results at tile + p * tile_ps: a staging tile or, when y is fp32 with contiguous
  // channels, y itself (any alignment, accumulating too).
  float* tile;
  std::int64_t tile_ps;
  bool accumulate;  // start from the tile's values (a later group of taps) instead of zero
  // Write the results with non-temporal stores, past the caches (not with accumulate). Required: tile and
  // tile_ps aligned to the vector width. For speed the caller asks only where each pixel's results are whole
  // 64-byte lines. The caller runs _mm_sfence before other threads read them. Ignored by the AMX tiles.
  bool uncached = false;
  // AMX tiles: channel pairs per tile product (16, or fewer for few output channels); every tap's k is a
  // multiple of it. Ignored by the other kernels.
  std::int32_t amx_pairs = 16;
  // AMX tiles: load the filter tiles with the streaming hint (tileloaddt1), which leaves L1 to the dy rows
  // the next chunks and taps reread. Ignored by the other kernels.
  bool amx_stream_filter = false;
};

using TileFn = void (*)(const TileArgs&);

// Pixel-vectorised tiles for few input channels (pixel_engine.cpp): CI channels x R rows x P vectors of
// lanes consecutive pixels of one W phase, fp32 accumulators. dy is channel-first in 4-byte units (an fp32
// value, or a bf16 pair of channels 2c and 2c + 1): unit (step s, row r, pixel x) of tap t is
// dy[dy_off + s * co_stride + r * row_stride + x]; rows whose bit is clear in `rows` and pixels outside
// [lo, hi) are skipped, so no term outside [lo, hi) enters a sum (the engine widens [lo, hi) over zero
// halos where that changes no value). w: [k][CI] 4-byte units for the tap.
struct PixTap {
  std::int64_t dy_off;
  const void* w;
  std::uint32_t rows;
  std::int32_t lo, hi;
};

struct PixArgs {
  const void* dy;
  std::int64_t co_stride, row_stride, k;
  const PixTap* taps;
  std::int64_t ntaps;
  float* tile;  // [CI][R][P * lanes]
};

using PixFn = void (*)(const PixArgs&);

inline constexpr int kMaxPixCi = 8;  // input channels per pixel tile
inline constexpr int kMaxPixP = 4;   // vectors per row
// Registers for a pixel tile's accumulators and filter values (KernelSet::pix_budget): the tile has
// R = max(1, (budget - CI) / (CI * P)) rows.
constexpr int pix_rows(int ci, int p, int budget) {
  return (budget - ci) / (ci * p) > 1 ? (budget - ci) / (ci * p) : 1;
}
// The most vectors per row a kernel set offers for CI channels: CI * P accumulators within the budget, and
// at least one vector.
constexpr int pix_max_p(int ci, int budget) {
  const int p = (budget - ci) / ci;
  return p < 1 ? 1 : p > kMaxPixP ? kMaxPixP : p;
}

// Filter-streaming tiles for small feature maps (stream_engine.cpp), also the pointwise engine's broadcast
// mode (one tap, filter rows packed [co][R]): R input channels x V vectors of lanes pixels, fp32
// accumulators. Reduction step (co, i), co < nco and i < ntaps in that order, adds, for row r,
// the pixel vectors dycol[((co * ntaps + i) * V + v) * lanes ...] times the broadcast filter value
// w[co * w_cs + r * w_rs + taps[i]]. dycol is zero where a tap misses dy; the masked kernels (R = 1) also
// leave those lanes (clear bits of masks[i * V + v]) untouched, so no term outside dy enters a sum, not even
// 0 x inf. Before each co, the lines [w + co * w_cs + prefetch, + prefetch_bytes) are prefetched (the next
// tile's part of a filter read in place).
struct StreamArgs {
  const float* dycol;
  const float* w;
  std::int64_t w_cs, w_rs;
  const std::int32_t* taps;    // flat tap index (kd, kh, kw) of each step: its offset in a channel's run
  const std::uint16_t* masks;  // masked kernels only
  std::int64_t ntaps, nco;
  std::int64_t prefetch, prefetch_bytes;  // elements after each co's first value, bytes (0: none)
  float* acc;                             // [R][V * lanes], rows acc_rs apart, 64-byte aligned
  std::int64_t acc_rs;                    // elements between rows: V * lanes or more, a multiple of lanes
  bool accumulate;                        // start from acc's values instead of zero
};

using StreamFn = void (*)(const StreamArgs&);

inline constexpr int kMaxStreamV = 4;
inline constexpr int kMaxStreamRows = 24;

inline constexpr int kMaxNv = 4;
inline constexpr int kMaxM = 14;
inline constexpr int kMaxSharedWTaps = 3;

// A widening table of 256 16-bit values, and the same split into its low bytes (bytes[c]) and high bytes
// (bytes[256 + c]) for kernels that look it up by byte permutes; built once, where the table is made.
struct Lut8 {
  alignas(64) std::array<std::uint8_t, 512> bytes{};
  std::array<std::uint16_t, 256> values{};
  Lut8() = default;
  explicit Lut8(const std::uint16_t* lut) {
    for (std::size_t c = 0; c < 256; ++c) {
      values[c] = lut[c];
      bytes[c] = static_cast<std::uint8_t>(lut[c] & 0xFF);
      bytes[256 + c] = static_cast<std::uint8_t>(lut[c] >> 8);
    }
  }
};

struct KernelSet {
  int lanes = 0;                            // fp32 lanes per vector
  int max_m[kMaxNv + 1] = {};               // largest M per NV; 0 where NV is not offered
  TileFn f32[kMaxNv + 1][kMaxM + 1] = {};   // [NV][M]
  TileFn bf16[kMaxNv + 1][kMaxM + 1] = {};  // vdpbf16ps kernels; null where the ISA has none
  // The same operands (bf16 pairs of dy and filter) widened to fp32 and summed by FMAs: exact where
  // vdpbf16ps flushes denormal inputs, products or sums (see tiny_bf16 in support.hpp).
  TileFn bf16_exact[kMaxNv + 1][kMaxM + 1] = {};
  // fp32 row tiles over (kd, kh) pairs of NT >= 2 W taps one dy pixel apart (SharedWTile in
  // tile_kernel.hpp; one tap is the single-tap tiles); shared_w_max_m[NT][NV] is 0 where the ISA has none.
  int shared_w_max_m[kMaxSharedWTaps + 1][kMaxNv + 1] = {};
  TileFn f32_shared_w[kMaxSharedWTaps + 1][kMaxNv + 1][kMaxM + 1] = {};  // [NT][NV][M]
  int pix_budget = 0;  // registers of a pixel tile (pix_rows)
  // A pixel tile's taps that cover part of its vectors cost a blend per FMA (AVX2, no mask registers): the
  // pixel engine gives converted fp32 dy halos so that they read whole vectors instead.
  bool pix_masks_cost = false;
  PixFn pix[kMaxPixCi + 1][kMaxPixP + 1] = {};                // [CI][P], R = pix_rows(CI, P, pix_budget)
  PixFn pix_bf16[kMaxPixCi + 1][kMaxPixP + 1] = {};           // the same over bf16 channel pairs (vdpbf16ps)
  PixFn pix_bf16_exact[kMaxPixCi + 1][kMaxPixP + 1] = {};     // bf16 pairs widened to fp32, FMAs
  int stream_rows[kMaxStreamV + 1] = {};                      // [V]: the most rows R a tile has
  StreamFn stream[kMaxStreamV + 1][kMaxStreamRows + 1] = {};  // [V][R]; null where not offered
  StreamFn stream_masked[kMaxStreamV + 1] = {};               // [V], one row
  // Whether any of n bf16 values is nonzero with magnitude below 2^-56 (see tiny_bf16 in support.hpp).
  bool (*any_tiny_bf16)(const std::uint16_t* p, std::int64_t n) = nullptr;
  // dst[i] = src[i] for i < n (bf16 bits), and whether any is tiny (as any_tiny_bf16). Null where the ISA
  // has none.
  bool (*copy_bf16)(const std::uint16_t* src, std::int64_t n, std::uint16_t* dst) = nullptr;
  // Whether any of n bf16 values is an infinity or a NaN. Null where the ISA has none.
  bool (*any_nonfinite_bf16)(const std::uint16_t* p, std::int64_t n) = nullptr;
  // y[c * y_cs + r] = a[r * a_rs + c] for r < nr, c < nc: a transposing store. a is fp32 or bf16 (a_bf16),
  // y fp32, or bf16, fp16, HiFloat8 or FP8 E4M3FN encoded as to_bf16, to_fp16, to_hif8 or to_fp8_e4m3fn
  // do. Null where the ISA has none.
  void (*store_transposed)(const void* a, bool a_bf16, std::int64_t a_rs, std::int64_t nr, std::int64_t nc,
                           void* y, StoreType y_type, std::int64_t y_cs, bool saturate) = nullptr;
  // Whether store_transposed writes StoreType::f32_uncached's whole lines past the caches (AVX-512); where
  // not, it stores them plainly (AVX2's 32-byte stores would leave partial lines).
  bool transposes_uncached = false;
  // y[c * y_ps + r] = a[r * a_rs + c] for r < nr (even), c < nc: a bf16 transpose by channel pairs (rows r,
  // r + 1 become one 32-bit unit of pixel c), bits unchanged. Returns whether a moved value is tiny
  // (tiny_bf16 in support.hpp). Null where the ISA has none.
  bool (*transpose_bf16_pairs)(const std::uint16_t* a, std::int64_t a_rs, std::int64_t nr, std::int64_t nc,
                               std::uint16_t* y, std::int64_t y_ps) = nullptr;
  // out[2 i] = a[i], out[2 i + 1] = b[i] (0 when b is null) for i < n: bf16 channel pairs; whether any value
  // is tiny (as any_tiny_bf16) or, with nonfinite, not finite. Null where the ISA has none.
  bool (*interleave_bf16)(const std::uint16_t* a, const std::uint16_t* b, std::uint16_t* out, std::int64_t n,
                          bool nonfinite) = nullptr;
  // fp16 and HF32 values as bf16 hi + lo (split_parts in support.hpp): hi[i], lo[i] for i < n; whether a
  // value is not finite or has a tiny part (tiny_bf16). Null where the ISA has none.
  bool (*split_bf16)(const float* src, std::int64_t n, std::uint16_t* hi, std::uint16_t* lo) = nullptr;
  // out[i] = a[i / 2] for even i, b[i / 2] for odd i, i < n. Null where the ISA has none.
  void (*interleave_f32)(const float* a, const float* b, float* out, std::int64_t n) = nullptr;
  // y[r * y_rs + c] = a[r * a_rs + c] rounded as to_bf16 does, r < nr, c < nc. Null where the ISA has none.
  void (*store_rows_bf16)(const float* a, std::int64_t a_rs, std::int64_t nr, std::int64_t nc,
                          std::uint16_t* y, std::int64_t y_rs, bool saturate) = nullptr;
  // The same as store_rows_bf16, rounded as to_fp16 does. Null where the ISA has none.
  void (*store_rows_fp16)(const float* a, std::int64_t a_rs, std::int64_t nr, std::int64_t nc,
                          std::uint16_t* y, std::int64_t y_rs, bool saturate) = nullptr;
  // fp32 -> fp16 (round to nearest even; saturate as for bf16), n values.
  void (*to_fp16)(const float* src, std::uint16_t* dst, std::int64_t n, bool saturate) = nullptr;
  // fp32 -> bf16 (round to nearest even; saturate clamps overflow and inf to the largest finite), n values.
  void (*to_bf16)(const float* src, std::uint16_t* dst, std::int64_t n, bool saturate) = nullptr;
  // fp32 -> HiFloat8 and FP8 E4M3FN, the codes of numeric's f32_to_hif8 and f32_to_fp8_e4m3fn, n values.
  // Null where the ISA has none.
  void (*to_hif8)(const float* src, std::uint8_t* dst, std::int64_t n, bool saturate) = nullptr;
  void (*to_fp8_e4m3fn)(const float* src, std::uint8_t* dst, std::int64_t n, bool saturate) = nullptr;
  // dst[i] = lut.values[src[i]] for i < n: 8-bit codes widened through a table of 256 16-bit values. Null
  // where the ISA has none.
  void (*widen8)(const std::uint8_t* src, const Lut8& lut, std::uint16_t* dst, std::int64_t n) = nullptr;
  // widen8 of two runs into bf16 channel pairs: out[2 i] = lut.values[a[i]], out[2 i + 1] = lut.values[b[i]]
  // (0 when b is null), i < n; whether any value is tiny (as any_tiny_bf16) or, with nonfinite, not finite.
  // Null where the ISA has none.
  bool (*widen8_pairs)(const std::uint8_t* a, const std::uint8_t* b, const Lut8& lut, std::uint16_t* out,
                       std::int64_t n, bool nonfinite) = nullptr;
  // bf16 and fp16 codes -> fp32 (exact), n values. Null where the ISA has none.
  void (*bf16_to_f32)(const std::uint16_t* src, float* dst, std::int64_t n) = nullptr;
  void (*fp16_to_f32)(const std::uint16_t* src, float* dst, std::int64_t n) = nullptr;
  // fp32 -> fp32 rounded to HF32 (numeric::round_to_hf32), n values. Null where the ISA has none.
  void (*round_hf32)(const float* src, float* dst, std::int64_t n) = nullptr;
  // dst[i] = src[i], i < n, fp32, stored past the caches (a copy that is not read again soon). Not fenced:
  // the caller runs _mm_sfence before other threads read dst. Null where the ISA has none.
  void (*copy_uncached)(const float* src, float* dst, std::int64_t n) = nullptr;

  // The most vectors of input channels its tile kernels take (NV from 1 to it are all offered).
  int widest_nv() const {
    int nv = kMaxNv;
    while (nv > 1 && max_m[nv] == 0) --nv;
    return nv;
  }
  // Where the widest tiles do not hold their filter vectors in registers (AVX2: 3 x 4 tiles take 12 of the
  // 16 registers for sums, so one filter vector is read from memory at every FMA), the usual channel block
  // is narrower (usual_nv vectors) and the widest blocks are used only where a tile's reduction runs at
  // most short_reduction steps. 0: always the widest.
  int usual_nv = 0;
  std::int64_t short_reduction = 0;
  int nv_for_reduction(std::int64_t steps) const {
    return usual_nv > 0 && steps > short_reduction ? usual_nv : widest_nv();
  }
};

// AMX tiles (kernels_amx.cpp): M <= kAmxMaxM pixels x NV <= 2 vectors of 16 input channels over bf16
// channel pairs, tdpbf16ps. Every tap covers all M pixels and has k a multiple of TileArgs::amx_pairs.
inline constexpr int kAmxMaxM = 32;
struct AmxKernels {
  TileFn tile[3][kAmxMaxM + 1] = {};  // [NV][M]
  // [M]: split fp16 and HF32 values (GemmConfig::split), one vector of 16 input channels; k a multiple of 32.
  TileFn split[kAmxMaxM + 1] = {};
};

const KernelSet& avx512_kernels();  // only after cpu_supports(Isa::avx512)
const KernelSet& avx2_kernels();    // only after cpu_supports(Isa::avx2)
const AmxKernels& amx_kernels();    // only after cpu_supports(Isa::amx_bf16)
// Releases this thread's AMX tile state (after its last AMX tile of a call); a no-op when it holds none.
void amx_release();

// The AVX-512 set's 8-bit encoders and widening with VBMI's byte permutes (only where
// cpu_has_avx512_vbmi()), which the set takes where the CPU has them, or without, which it takes elsewhere:
// for tests of both.
struct EightBitKernels {
  decltype(KernelSet::to_hif8) to_hif8;
  decltype(KernelSet::to_fp8_e4m3fn) to_fp8_e4m3fn;
  decltype(KernelSet::widen8) widen8;
  decltype(KernelSet::widen8_pairs) widen8_pairs;
};
EightBitKernels avx512_eight_bit_kernels(bool vbmi);

// Peak-rate probes (`conv3d-dx peak`): `rounds` rounds of multiply-adds into independent accumulators held in
// registers (more than latency x throughput of the instruction, no memory operands); each returns the flops
// it did. Every product is 2^-40 (operands 2^-20), so when `accumulated` is not null it receives the sum of
// all accumulator lanes, exactly (products count) x 2^-40 while the lanes stay below 2^-16: the flops
// returned are twice that count. Only after cpu_supports() of its instruction set (avx512_bf16 for
// vdpbf16ps).
std::int64_t peak_fma_avx2(std::int64_t rounds, double* accumulated);       // vfmadd231ps ymm: 16 flops each
std::int64_t peak_fma_avx512(std::int64_t rounds, double* accumulated);     // vfmadd231ps zmm: 32 flops each
std::int64_t peak_dpbf16_avx512(std::int64_t rounds, double* accumulated);  // vdpbf16ps zmm: 64 flops each
std::int64_t peak_tdpbf16_amx(std::int64_t rounds, double* accumulated);    // tdpbf16ps 16x16x32: 16384 each

}  // namespace conv3d_dx::cpu
