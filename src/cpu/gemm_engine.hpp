// The implicit-GEMM engine: phase decomposition into stride-1 correlations (geometry.hpp), filter packed per
// channel block, register-blocked tiles (kernels.hpp) over (pixels of one row x input channels), reduction
// over (taps x output channels) in fp32, output rounding at the store. One factory per instruction set.
#pragma once

#include <memory>
#include <string>

#include "common/engine.hpp"

namespace conv3d_dx::cpu {

// Blocking overrides for tests and tuning; 0 keeps the engine's choice.
struct GemmTuning {
  int nv = 0;          // vectors of input channels per block
  int max_m = 0;       // largest tile width in pixels
  int plane = -1;      // 1: a task is a whole y plane, taps in groups of (kd, kh); 0: a task is one row
  int dh_group = 0;    // (kd, kh) pairs per tap group in plane mode
  bool fuse_w = true;  // fuse the W taps of a phase into one reduction where dy allows
};

std::unique_ptr<EngineImpl> make_gemm_avx512_bf16(const EngineRequest&, std::string& why_not);
std::unique_ptr<EngineImpl> make_gemm_avx512(const EngineRequest&, std::string& why_not);
std::unique_ptr<EngineImpl> make_gemm_avx2(const EngineRequest&, std::string& why_not);

// The same engines with explicit blocking; `isa` picks the kernel set (avx512_bf16, avx512 or avx2).
std::unique_ptr<EngineImpl> make_gemm(const EngineRequest&, Isa isa, const GemmTuning&, std::string& why_not);

}  // namespace conv3d_dx::cpu
