// The filter-streaming engine, for feature maps too small to repay packing a large filter (a deep U-Net or
// VAE level: thousands of channels on a few pixels). The y pixels of all images (at most 512) are lanes of up
// to four vectors per chunk (16-pixel vectors on AVX-512, 8 on AVX2), so each filter value is loaded once per
// chunk, broadcast, and multiplied into all of them: the filter is read once per chunk, in place (fp32) or
// widened a block at a time, instead of being packed (written and read again) first. dy is gathered once per
// call into [co][tap][pixel] rows, zero where a tap misses dy. Tiles are R input channels x the pixels,
// reduced over (co, tap) in a fixed order in fp32 by FMAs.
#pragma once

#include <memory>
#include <string>

#include "common/engine.hpp"

namespace conv3d_dx::cpu {

// isa Isa::avx512 or Isa::avx2. Declines filters small enough for the GEMM engine's packing to pay (fewer
// than 2^20 elements, or beyond 128 pixels fewer than 2^17 per pixel); tests lift that with any_filter_size.
std::unique_ptr<EngineImpl> make_stream(const EngineRequest&, Isa isa, std::string& why_not);
std::unique_ptr<EngineImpl> make_stream(const EngineRequest&, Isa isa, bool any_filter_size,
                                        std::string& why_not);

}  // namespace conv3d_dx::cpu
