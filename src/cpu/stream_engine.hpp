// The filter-streaming engine, for feature maps too small to repay packing a large filter (a deep U-Net or
// VAE level: thousands of channels on a few pixels). Every y pixel of every image is a lane of at most four
// 16-pixel vectors, so each filter value is loaded once, broadcast, and multiplied into all of them: the
// filter is read once per call, in place (fp32) or widened a small chunk at a time, instead of being packed
// (written and read again) first. dy is gathered once per call into [co][tap][pixel] rows, zero where a tap
// misses dy. Tiles are R input channels x the pixels, reduced over (co, tap) in a fixed order in fp32 by
// AVX-512 FMAs.
#pragma once

#include <memory>
#include <string>

#include "common/engine.hpp"

namespace conv3d_dx::cpu {

// Declines filters of fewer than 2^20 elements (packing them costs little); tests lift that with
// min_filter_elements.
std::unique_ptr<EngineImpl> make_stream(const EngineRequest&, std::string& why_not);
std::unique_ptr<EngineImpl> make_stream(const EngineRequest&, std::int64_t min_filter_elements,
                                        std::string& why_not);

}  // namespace conv3d_dx::cpu
