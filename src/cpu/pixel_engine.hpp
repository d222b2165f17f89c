// The few-channel engine: when a group has few input channels (Cin_g <= 8, depthwise included), vectorise
// over pixels instead of channels. Same phase decomposition as the GEMM engine; dy is read channel-first
// (NCDHW fp32 in place, or converted once into the workspace, on AVX2 with zero halos on its rows); the
// filter is packed as [g][tap][co][ci];
// tiles are CI channels x R rows x P vectors of 16 (AVX-512) or 8 (AVX2) pixels along W, accumulated in fp32.
#pragma once

#include <memory>
#include <string>

#include "common/engine.hpp"

namespace conv3d_dx::cpu {

// isa Isa::avx512_bf16: bf16 channel pairs through vdpbf16ps when every input is exact in bf16, declines
// otherwise; Isa::avx512 and Isa::avx2: fp32 accumulation of any inputs.
std::unique_ptr<EngineImpl> make_pixel(const EngineRequest&, Isa isa, std::string& why_not);

}  // namespace conv3d_dx::cpu
