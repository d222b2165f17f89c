// The pointwise engine for channel-first tensors: a 1x1x1 kernel with stride 1 and no padding on NCDHW dy
// and y is a plain matrix product per image, y[ci][p] = sum over co of w[co][ci] * dy[co][p]. The GEMM
// engine would read NCDHW dy with strided channels (or transpose all of it first); this one transposes dy
// tile by tile: the tile's pixels of a chunk of output channels (rows a plane apart) into a pixel-major
// panel that stays in L2 (bf16: channel pairs on the way), then the GEMM engine's tile kernels reduce blocks
// of up to 64 input channels (16 on AVX2) against it, chunk after chunk, and each [pixel][channel] result is
// transposed into y's planes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/engine.hpp"

namespace conv3d_dx::cpu {

// The engine's blocking for a problem on a CPU, with `isa`'s kernels (pointwise_engine.cpp says why).
struct PointwiseBlocking {
  int nv = 1;               // vectors of input channels per channel block
  std::int64_t width = 1;   // pixels per tile
  std::int64_t chunk = 1;   // reduction steps (output channels, or bf16 channel pairs) per panel
  std::int64_t kp = 16;     // 4-byte units per pixel of the panel: a chunk and padding
  bool uncached_y = false;  // an fp32 y's 16-pixel runs on lines skip the caches (AVX-512, large y)
};
PointwiseBlocking pointwise_blocking(const Problem&, const CpuModel&, int threads, Isa isa);

// isa Isa::avx512_bf16: bf16 channel pairs through vdpbf16ps (bf16 dy, filter exact in bf16), declines
// otherwise; Isa::avx512 and Isa::avx2: any dtype and input rounding, widened exactly to fp32 (dy tile by
// tile, as it is copied), fp32 FMAs on that ISA's tile kernels.
std::unique_ptr<EngineImpl> make_pointwise(const EngineRequest&, Isa isa, std::string& why_not);

}  // namespace conv3d_dx::cpu
