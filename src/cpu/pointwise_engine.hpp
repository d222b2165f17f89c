// The pointwise engine: a 1x1x1 kernel with stride 1 and no padding is a plain matrix product per image,
// y[ci][p] = sum over co of w[co][ci] * dy[co][p].
// - Channel-first tensors (NCDHW): the GEMM engine would read dy with strided channels (or transpose all of
//   it first); this one transposes dy tile by tile: the tile's pixels of a chunk of output channels (rows a
//   plane apart) into a pixel-major panel that stays in L2 (bf16: channel pairs on the way), then the GEMM
//   engine's tile kernels reduce blocks of up to 64 input channels against it, chunk after chunk, and each
//   [pixel][channel] result is transposed into y's planes.
// - Channel-first tensors on AVX2, and on AVX-512 one-tap kernels (below) other than 1x1x1 at stride 1
//   where the CPU's table says so (the broadcast mode): no transposes. The filter values are broadcast over
//   vectors of pixels copied from dy's rows, and the results are y's rows as they lie. This also takes
//   kernels that give each y pixel at most one tap (kernel <= stride, such as a U-Net's k2 s2 layers or a
//   k1 s2 shortcut): a product with (input channel, tap) rows, each stored to its phase of y, the phases
//   past the kernel zero.
// - Channel-last tensors on AMX: the same chunked reduction over tiles of 32 pixels, each chunk of the
//   tile's dy copied into a panel that the AMX tiles read from L1 for every channel block, rather than all of
//   dy converted into a workspace first (the GEMM engine's way).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/engine.hpp"

namespace conv3d_dx::cpu {

// The engine's blocking for a problem on a CPU, with `isa`'s kernels (pointwise_engine.cpp says why).
struct PointwiseBlocking {
  // Filter values broadcast over vectors of pixels (channel-first tensors, no transposes;
  // pointwise_engine.cpp says where): then nv counts pixel vectors per kernel call and rows the GEMM rows
  // (input channel, tap) of one, the chunk is in output channels, and kp is unused.
  bool broadcast = false;
  int rows = 0;
  std::int64_t row_block = 0;  // broadcast mode: rows whose filter chunk is reused over the tile's vectors
  int nv = 1;                  // vectors of input channels per channel block
  std::int64_t width = 1;      // pixels per tile
  std::int64_t chunk = 1;      // reduction steps (output channels, or bf16 channel pairs) per panel
  std::int64_t kp = 16;        // 4-byte units per pixel of the panel: a chunk and padding
  bool uncached_y = false;     // an fp32 y's 16-pixel runs on lines skip the caches (AVX-512, large y)
};
PointwiseBlocking pointwise_blocking(const Problem&, const CpuModel&, int threads, Isa isa);

// isa Isa::amx_bf16: channel-last dy and y, inputs exact in bf16 (bf16, HiFloat8, FP8 E4M3FN), a group's
// packed filter within 3/4 of L2; Isa::avx512_bf16: bf16 channel pairs through vdpbf16ps (bf16 dy, filter
// exact in bf16); both decline otherwise. Isa::avx512 and Isa::avx2: any dtype and input rounding, widened
// exactly to fp32 (dy tile by tile, as it is copied), fp32 FMAs on that ISA's tile kernels (the
// filter-streaming ones in the broadcast mode); Isa::avx2 also kernel <= stride with no padding, dilation
// only where the kernel is 1, y = stride x dy and stride at most 2 along W, and so does Isa::avx512 on a CPU
// whose table says so (CpuModel::broadcast_one_tap_avx512) for at most 1536 (input channel, tap) rows.
std::unique_ptr<EngineImpl> make_pointwise(const EngineRequest&, Isa isa, std::string& why_not);

}  // namespace conv3d_dx::cpu
