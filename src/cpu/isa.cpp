#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/engine.hpp"

namespace conv3d_dx {
namespace {

// AMX needs the CPU's tile unit (CPUID leaf 7: AMX-TILE, AMX-BF16), the OS saving tile state (XCR0 bits
// 17 and 18) and, on Linux, the process's permission to use it (arch_prctl ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA), asked once. Empty when all hold, else which does not.
std::string find_amx_refusal() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return "the CPU lacks AMX (no CPUID leaf 7)";
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  const bool amx_bf16 = (edx >> 22) & 1u, amx_tile = (edx >> 24) & 1u;
  if (!amx_tile || !amx_bf16) return "the CPU lacks amx_tile and amx_bf16";
  __cpuid(1, eax, ebx, ecx, edx);
  if (!((ecx >> 27) & 1u)) return "the OS has not enabled XSAVE";
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if (((xcr0_lo >> 17) & 3u) != 3u) return "the OS does not save AMX tile state (XCR0 bits 17, 18)";
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0)
    return std::string("Linux refused the AMX tile permission (arch_prctl ARCH_REQ_XCOMP_PERM: ") +
           std::strerror(errno) + ")";
#endif
  return {};
}

}  // namespace

const std::string& amx_unavailable() {
  static const std::string why = find_amx_refusal();
  return why;
}

bool cpu_supports(Isa isa) {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("fma");
  switch (isa) {
    case Isa::amx_bf16:
      return avx512 && __builtin_cpu_supports("avx512bf16") && amx_unavailable().empty();
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

bool cpu_has_avx512_vbmi() { return cpu_supports(Isa::avx512) && __builtin_cpu_supports("avx512vbmi"); }

Isa detect_isa() {
  for (Isa isa : {Isa::amx_bf16, Isa::avx512_bf16, Isa::avx512, Isa::avx2})
    if (cpu_supports(isa)) return isa;
  return Isa::portable;
}

}  // namespace conv3d_dx
