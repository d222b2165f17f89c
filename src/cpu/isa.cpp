#include "common/engine.hpp"

namespace conv3d_dx {

bool cpu_supports(Isa isa) {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("fma");
  switch (isa) {
    case Isa::avx512_bf16:
      return avx512 && __builtin_cpu_supports("avx512bf16");
    case Isa::avx512:
      return avx512;
    case Isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case Isa::best:
    case Isa::portable:
    case Isa::reference:
      return true;
  }
  return false;
}

Isa detect_isa() {
  for (Isa isa : {Isa::avx512_bf16, Isa::avx512, Isa::avx2})
    if (cpu_supports(isa)) return isa;
  return Isa::portable;
}

}  // namespace conv3d_dx
