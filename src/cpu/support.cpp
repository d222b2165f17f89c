#include "cpu/support.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <type_traits>

#include "problem/checked.hpp"

namespace conv3d_dx::cpu {

int isa_level(Isa isa) {
  switch (isa) {
    case Isa::amx_bf16:
      return 4;
    case Isa::avx512_bf16:
      return 3;
    case Isa::avx512:
      return 2;
    case Isa::avx2:
      return 1;
    default:
      return 0;
  }
}

std::string isa_refusal(Isa isa, const EngineRequest& request) {
  if (isa == Isa::amx_bf16 && !amx_unavailable().empty()) return amx_unavailable();
  if (!cpu_supports(isa)) return std::string("the CPU lacks ") + to_string(isa);
  if (isa_level(request.isa) < isa_level(isa))
    return std::string("needs ") + to_string(isa) + ", requested " + to_string(request.isa);
  return {};
}

std::string fast_engine_refusal(Isa isa, const EngineRequest& request, bool bf16) {
  std::string why_not = isa_refusal(isa, request);
  if (!why_not.empty()) return why_not;
  const Problem& p = request.problem;
  if (bf16 && !(exact_in_bf16(p.dy_dtype) && exact_in_bf16(p.filter_dtype) &&
                p.input_rounding != InputRounding::fp16))
    return std::string("inputs not exact in bf16 (dy ") + to_string(p.dy_dtype) + ", filter " +
           to_string(p.filter_dtype) + (p.input_rounding == InputRounding::fp16 ? ", fp16 rounding)" : ")");
  // Naming avx512_bf16 forces vdpbf16ps; naming amx_bf16 (or detecting it) does not.
  if (isa == Isa::avx512_bf16 && !request.cpu.bf16_dot_pays() &&
      !(request.isa_named && request.isa == Isa::avx512_bf16))
    return "vdpbf16ps does " + std::to_string(request.cpu.bf16_dot_rate).substr(0, 4) +
           "x the flops of fp32 FMA on " + to_string(request.cpu.uarch) +
           ": bf16 is widened to fp32 (--isa avx512_bf16 forces vdpbf16ps)";
  // Tap lists and per-phase tables live in memory: refuse absurd geometry rather than allocate gigabytes.
  if (p.kernel[0] * p.kernel[1] * p.kernel[2] > (std::int64_t{1} << 22))
    return "kernel has more than 2^22 taps";
  for (int a = 0; a < 3; ++a)
    if (p.stride[a] > (std::int64_t{1} << 16))
      return "stride " + std::to_string(p.stride[a]) + " is above 65536 (one phase table per stride step)";
  return {};
}

AlignedPtr alloc_zeroed64(std::size_t bytes, const char* what) {
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr)
    throw OutOfMemory("", "out of memory: needs " + std::to_string(rounded) + " bytes for " + what,
                      static_cast<std::int64_t>(rounded));
  std::memset(p, 0, rounded);
  return AlignedPtr(p);
}

Reader::Reader(DType dtype, InputRounding rounding) : dtype_(dtype), rounding_(rounding) {
  if (dtype == DType::f32 && rounding == InputRounding::none) {
    kind_ = Kind::f32;
  } else if (dtype == DType::f32 && rounding == InputRounding::hf32) {
    kind_ = Kind::hf32;
  } else if (dtype == DType::bf16 && rounding != InputRounding::fp16) {
    kind_ = Kind::bf16;  // HF32 rounding only touches fp32 inputs
  } else if (dtype == DType::f16) {
    kind_ = Kind::fp16;  // fp16 values are unchanged by any input rounding
  } else if (dtype == DType::hif8 || dtype == DType::fp8_e4m3fn) {
    kind_ = Kind::lut8;
    lut_bf16_exact_ = true;
    std::uint16_t bf16[256];
    for (int c = 0; c < 256; ++c) {
      const auto code = static_cast<std::uint8_t>(c);
      lut_[c] = numeric::load_rounded(dtype, &code, 0, rounding);
      const auto bits = std::bit_cast<std::uint32_t>(lut_[c]);
      bf16[c] = static_cast<std::uint16_t>(bits >> 16);
      lut_bf16_exact_ = lut_bf16_exact_ && (bits & 0xFFFFu) == 0;
    }
    lut_bf16_ = Lut8(bf16);
  }
}

bool Reader::widens(const KernelSet& ks) const {
  switch (kind_) {
    case Kind::f32:
      return true;
    case Kind::hf32:
      return ks.round_hf32 != nullptr;
    case Kind::bf16:
      return ks.bf16_to_f32 != nullptr;
    case Kind::fp16:
      return ks.fp16_to_f32 != nullptr;
    case Kind::lut8:
      return true;
    default:
      return false;
  }
}

void Reader::widen(const KernelSet& ks, const void* base, std::int64_t at, std::int64_t n, float* dst) const {
  switch (kind_) {
    case Kind::f32:
      std::memcpy(dst, static_cast<const float*>(base) + at, static_cast<std::size_t>(n) * sizeof(float));
      break;
    case Kind::hf32:
      ks.round_hf32(static_cast<const float*>(base) + at, dst, n);
      break;
    case Kind::bf16:
      if (n < 64) {  // a short run: the compiler's own vector loop beats a call
        const auto* p = static_cast<const std::uint16_t*>(base) + at;
        for (std::int64_t i = 0; i < n; ++i) dst[i] = numeric::bf16_to_f32(p[i]);
      } else {
        ks.bf16_to_f32(static_cast<const std::uint16_t*>(base) + at, dst, n);
      }
      break;
    case Kind::fp16:
      ks.fp16_to_f32(static_cast<const std::uint16_t*>(base) + at, dst, n);
      break;
    default: {  // lut8: codes to bf16 by vector table lookups, then to fp32, a chunk at a time
      const auto* codes = static_cast<const std::uint8_t*>(base) + at;
      if (bf16_lut() == nullptr || ks.widen8 == nullptr || ks.bf16_to_f32 == nullptr) {
        for (std::int64_t i = 0; i < n; ++i) dst[i] = lut_[codes[i]];  // a run through the fp32 table
        break;
      }
      constexpr std::int64_t kChunk = 256;
      std::uint16_t bits[kChunk];
      for (std::int64_t i = 0; i < n; i += kChunk) {
        const std::int64_t m = std::min(kChunk, n - i);
        ks.widen8(codes + i, lut_bf16_, bits, m);
        ks.bf16_to_f32(bits, dst + i, m);
      }
    }
  }
}

namespace {

// Vector conversion of contiguous chunks; gathers and scatters around it when the runs are strided.
template <class Code>
void store_converted(void (*convert)(const float*, Code*, std::int64_t, bool), const float* src,
                     std::int64_t src_stride, Code* out, std::int64_t y_stride, std::int64_t n,
                     bool saturate) {
  if (src_stride == 1 && y_stride == 1) {
    convert(src, out, n, saturate);
    return;
  }
  constexpr std::int64_t kChunk = 64;
  float in[kChunk];
  Code codes[kChunk];
  for (std::int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const std::int64_t m = std::min(kChunk, n - i0);
    for (std::int64_t i = 0; i < m; ++i) in[i] = src[(i0 + i) * src_stride];
    convert(in, codes, m, saturate);
    for (std::int64_t i = 0; i < m; ++i) out[(i0 + i) * y_stride] = codes[i];
  }
}

}  // namespace

void store_run(const Problem& p, const KernelSet& ks, const float* src, std::int64_t src_stride, void* y,
               std::int64_t at, std::int64_t y_stride, std::int64_t n) {
  if (p.y_dtype == DType::f32) {
    float* out = static_cast<float*>(y) + at;
    if (src_stride == 1 && y_stride == 1) {
      std::memcpy(out, src, static_cast<std::size_t>(n) * sizeof(float));
    } else {
      for (std::int64_t i = 0; i < n; ++i) out[i * y_stride] = src[i * src_stride];
    }
  } else if (p.y_dtype == DType::bf16 || p.y_dtype == DType::f16) {
    store_converted(p.y_dtype == DType::bf16 ? ks.to_bf16 : ks.to_fp16, src, src_stride,
                    static_cast<std::uint16_t*>(y) + at, y_stride, n, p.overflow == OverflowMode::saturate);
  } else {
    const bool saturate = p.overflow == OverflowMode::saturate;
    const auto convert = p.y_dtype == DType::hif8 ? ks.to_hif8 : ks.to_fp8_e4m3fn;
    auto* out = static_cast<std::uint8_t*>(y) + at;
    if (convert != nullptr) {
      store_converted(convert, src, src_stride, out, y_stride, n, saturate);
      return;
    }
    const numeric::Encoder8& encode = numeric::encoder8(p.y_dtype, saturate);
    for (std::int64_t i = 0; i < n; ++i) out[i * y_stride] = encode(src[i * src_stride]);
  }
}

bool y_outgrows_l2(const Problem& p, const CpuModel& cpu, int threads) {
  return p.y_dtype == DType::f32 &&
         saturating_mul(p.y_elements(), 4) > 2 * std::int64_t{threads} * cpu.l2_bytes;
}

void store_channel_last(const Problem& p, const KernelSet& ks, const float* tile, std::int64_t cbw,
                        std::int64_t m, std::int64_t valid, void* y, std::int64_t at, std::int64_t y_ps) {
  const auto store_rows16 = p.y_dtype == DType::bf16  ? ks.store_rows_bf16
                            : p.y_dtype == DType::f16 ? ks.store_rows_fp16
                                                      : nullptr;
  if (store_rows16 != nullptr) {
    store_rows16(tile, cbw, m, valid, static_cast<std::uint16_t*>(y) + at, y_ps,
                 p.overflow == OverflowMode::saturate);
  } else if (y_ps == valid && valid == cbw) {  // the pixels' channels follow on: one run
    store_run(p, ks, tile, 1, y, at, 1, m * valid);
  } else if (p.y_dtype != DType::f32) {
    // Encoded: pixels converted together into a buffer (one call per 4 KiB of codes rather than one per
    // pixel, which for short runs cost more than the encoding; a part-filled block's padding channels too:
    // suite f, 3 of 16 channels, HiFloat8 0.86x the time, FP8 0.91x), then each pixel's valid channels
    // copied.
    const auto es = static_cast<std::int64_t>(dtype_size(p.y_dtype));
    alignas(64) unsigned char codes[4096];
    const std::int64_t per = std::max<std::int64_t>(1, std::int64_t{sizeof codes} / (es * cbw));
    // The copies at a size known here for whole blocks (a call of memcpy per pixel took 6-8 % of
    // HiFloat8 unet_up's time).
    const auto copy_pixels = [&](auto bytes, std::int64_t p0, std::int64_t count) {
      for (std::int64_t i = 0; i < count; ++i)
        std::memcpy(static_cast<char*>(y) + (at + (p0 + i) * y_ps) * es, codes + i * cbw * es,
                    static_cast<std::size_t>(bytes));
    };
    using Bytes32 = std::integral_constant<std::int64_t, 32>;
    using Bytes64 = std::integral_constant<std::int64_t, 64>;
    for (std::int64_t p0 = 0; p0 < m; p0 += per) {
      const std::int64_t count = std::min(per, m - p0), bytes = es * valid;
      store_run(p, ks, tile + p0 * cbw, 1, codes, 0, 1, count * cbw);
      if (bytes == 32)
        copy_pixels(Bytes32{}, p0, count);
      else if (bytes == 64)
        copy_pixels(Bytes64{}, p0, count);
      else
        copy_pixels(bytes, p0, count);
    }
  } else {  // one run per pixel
    for (std::int64_t i = 0; i < m; ++i) store_run(p, ks, tile + i * cbw, 1, y, at + i * y_ps, 1, valid);
  }
}

void store_channel_first(const Problem& p, const KernelSet& ks, const float* tile, std::int64_t tile_rs,
                         std::int64_t m, std::int64_t valid, void* y, std::int64_t at, std::int64_t c_stride,
                         bool uncached) {
  if (ks.store_transposed == nullptr) {  // one strided run per channel
    for (std::int64_t c = 0; c < valid; ++c) store_run(p, ks, tile + c, tile_rs, y, at + c * c_stride, 1, m);
  } else {
    const StoreType type = transposed_store_type(p.y_dtype);
    char* const to = static_cast<char*>(y) + at * static_cast<std::int64_t>(dtype_size(p.y_dtype));
    // Only runs of 16 pixels on a line skip the caches: the pixels before channel 0's first line boundary
    // are stored apart (plainly), so that the runs after them start on lines (for every channel where the
    // channels lie whole lines apart), whatever the alignment of y and of the row.
    const bool past_caches = uncached && type == StoreType::f32;
    const std::int64_t head =
        past_caches
            ? std::min<std::int64_t>(
                  m, static_cast<std::int64_t>((64 - reinterpret_cast<std::uintptr_t>(to) % 64) % 64 / 4))
            : 0;
    if (head > 0) ks.store_transposed(tile, false, tile_rs, head, valid, to, StoreType::f32, c_stride, false);
    if (m > head)
      ks.store_transposed(tile + head * tile_rs, false, tile_rs, m - head, valid, to + head * 4,
                          past_caches ? StoreType::f32_uncached : type, c_stride,
                          p.overflow == OverflowMode::saturate);
  }
}

}  // namespace conv3d_dx::cpu
