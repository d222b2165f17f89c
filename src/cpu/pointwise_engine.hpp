// The pointwise engine for channel-first tensors: a 1x1x1 kernel with stride 1 and no padding on NCDHW dy
// and y is a plain matrix product per image, y[ci][p] = sum over co of w[co][ci] * dy[co][p]. The GEMM
// engine would read NCDHW dy with strided channels (or transpose all of it first); this one vectorises over
// pixels instead, as the pixel engine does: per tile of 32 pixels it copies the tile's dy rows of every
// output channel into a contiguous panel (bf16: interleaved into channel pairs on the way), then runs the
// pixel kernels over blocks of 8 input channels against that panel, which stays in L2.
#pragma once

#include <memory>
#include <string>

#include "common/engine.hpp"

namespace conv3d_dx::cpu {

// isa Isa::avx512_bf16: bf16 channel pairs through vdpbf16ps (bf16 dy, filter exact in bf16), declines
// otherwise; Isa::avx512: any dtype and input rounding, widened exactly to fp32 (dy tile by tile, as it is
// copied), fp32 FMAs.
std::unique_ptr<EngineImpl> make_pointwise(const EngineRequest&, Isa isa, std::string& why_not);

}  // namespace conv3d_dx::cpu
