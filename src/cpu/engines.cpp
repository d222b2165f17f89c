#include "common/engine.hpp"
#include "cpu/direct.hpp"
#include "cpu/gemm_engine.hpp"
#include "cpu/pixel_engine.hpp"
#include "cpu/pointwise_engine.hpp"
#include "cpu/stream_engine.hpp"

namespace conv3d_dx {
namespace {

// The factory of one instruction set of an engine made for several.
template <std::unique_ptr<EngineImpl> (*make)(const EngineRequest&, Isa, std::string&), Isa isa>
std::unique_ptr<EngineImpl> with_isa(const EngineRequest& request, std::string& why_not) {
  return make(request, isa, why_not);
}

}  // namespace

// In order of preference: pointwise problems on channel-last tensors on AMX tiles, the implicit GEMM on AMX
// tiles (bf16-exact inputs with enough channels; on the Xeon measured it beat the pixel engine on 3 input
// channels and the pointwise one on NCDHW 1x1x1, 1.4x and 1.9x), few input channels per group
// (pixel-vectorised), pointwise problems on channel-first tensors (on AVX2, and by the CPU's table on
// AVX-512, also kernel <= stride), then the implicit GEMM; the AVX-512 engines first, then the same engines
// on AVX2, so that on a CPU with AVX-512 an AVX2 engine's looser limits (smaller chunks and blocks) never
// take what its AVX-512 version declined from the AVX-512 GEMM. Each fast engine declines (and says why) when
// its ISA is above the request or missing on this CPU. `direct` is the portable fallback and never declines.
const std::vector<EngineFactory>& cpu_engines() {
  static const std::vector<EngineFactory> engines = {
      {"pointwise_amx_bf16", &with_isa<cpu::make_pointwise, Isa::amx_bf16>},
      {"gemm_amx_bf16", &cpu::make_gemm_amx_bf16},
      {"stream_avx512", &with_isa<cpu::make_stream, Isa::avx512>},
      {"pixel_avx512_bf16", &with_isa<cpu::make_pixel, Isa::avx512_bf16>},
      {"pixel_avx512", &with_isa<cpu::make_pixel, Isa::avx512>},
      {"pointwise_avx512_bf16", &with_isa<cpu::make_pointwise, Isa::avx512_bf16>},
      {"pointwise_avx512", &with_isa<cpu::make_pointwise, Isa::avx512>},
      {"gemm_avx512_bf16", &cpu::make_gemm_avx512_bf16},
      {"gemm_avx512", &cpu::make_gemm_avx512},
      {"stream_avx2", &with_isa<cpu::make_stream, Isa::avx2>},
      {"pixel_avx2", &with_isa<cpu::make_pixel, Isa::avx2>},
      {"pointwise_avx2", &with_isa<cpu::make_pointwise, Isa::avx2>},
      {"gemm_avx2", &cpu::make_gemm_avx2},
      {"direct", &make_direct_engine},
  };
  return engines;
}

}  // namespace conv3d_dx
