#include "common/cpu_model.hpp"

#include <cpuid.h>
#include <unistd.h>

#include <cstring>

#include "common/engine.hpp"

namespace conv3d_dx {
namespace {

struct CpuId {
  std::string vendor, brand;
  unsigned family = 0, model = 0;
};

CpuId read_cpuid() {
  CpuId id;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d) == 0) return id;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  id.vendor = vendor;
  if (__get_cpuid(1, &a, &b, &c, &d) != 0) {
    // Display family and model: the extended fields count only where the base family says so.
    const unsigned base_family = (a >> 8) & 0xF, base_model = (a >> 4) & 0xF;
    id.family = base_family == 0xF ? base_family + ((a >> 20) & 0xFF) : base_family;
    id.model = base_family == 0x6 || base_family == 0xF ? base_model | (((a >> 16) & 0xF) << 4) : base_model;
  }
  char brand[49] = {};
  for (unsigned leaf = 0; leaf < 3; ++leaf)
    if (__get_cpuid(0x80000002 + leaf, &a, &b, &c, &d) != 0) {
      const unsigned regs[4] = {a, b, c, d};
      std::memcpy(brand + 16 * leaf, regs, 16);
    }
  id.brand = brand;
  const auto first = id.brand.find_first_not_of(' ');
  id.brand = first == std::string::npos ? id.vendor : id.brand.substr(first);
  return id;
}

// Per-core cache size from the C library (which reads CPUID), or the fallback where it does not know.
std::int64_t cache_bytes(int name, std::int64_t fallback) {
  const long v = sysconf(name);
  return v > 0 ? v : fallback;
}

}  // namespace

const char* to_string(Uarch u) {
  switch (u) {
    case Uarch::intel_avx512:
      return "intel_avx512";
    case Uarch::amd_zen4:
      return "amd_zen4";
    case Uarch::amd_zen5:
      return "amd_zen5";
    case Uarch::other:
      break;
  }
  return "other";
}

Uarch classify_cpu(const std::string& vendor, unsigned family, unsigned model, bool avx512) {
  if (!avx512) return Uarch::other;
  if (vendor == "GenuineIntel" && family == 6) return Uarch::intel_avx512;
  if (vendor == "AuthenticAMD" && family == 0x19 && model >= 0x10) return Uarch::amd_zen4;
  if (vendor == "AuthenticAMD" && family == 0x1A) return Uarch::amd_zen5;
  return Uarch::other;
}

double bf16_dot_rate(Uarch u) {
  switch (u) {
    case Uarch::intel_avx512:
      return 0.5;
    case Uarch::amd_zen4:
    case Uarch::amd_zen5:
      return 2.0;
    case Uarch::other:
      break;
  }
  return 1.0;
}

bool shared_w_over_wide(Uarch u) { return u == Uarch::intel_avx512; }

bool broadcast_one_tap_avx512(Uarch u) { return u == Uarch::intel_avx512; }

std::string CpuModel::describe() const {
  return name + " (" + to_string(uarch) + ", L1d " + std::to_string(l1d_bytes >> 10) + " KiB, L2 " +
         std::to_string(l2_bytes >> 10) + " KiB per core, " +
         (has_bf16_dot
              ? "vdpbf16ps at " + std::to_string(bf16_dot_rate).substr(0, 4) + "x the fp32 FMA flop rate)"
              : std::string("no vdpbf16ps)"));
}

const CpuModel& host_cpu_model() {
  static const CpuModel model = [] {
    const CpuId id = read_cpuid();
    CpuModel m;
    m.name = id.brand.empty() ? "unknown CPU" : id.brand;
    m.uarch = classify_cpu(id.vendor, id.family, id.model, cpu_supports(Isa::avx512));
    m.bf16_dot_rate = bf16_dot_rate(m.uarch);
    m.shared_w_over_wide = shared_w_over_wide(m.uarch);
    m.broadcast_one_tap_avx512 = broadcast_one_tap_avx512(m.uarch);
    m.has_bf16_dot = cpu_supports(Isa::avx512_bf16);
    m.l1d_bytes = cache_bytes(_SC_LEVEL1_DCACHE_SIZE, m.l1d_bytes);
    m.l2_bytes = cache_bytes(_SC_LEVEL2_CACHE_SIZE, m.l2_bytes);
    return m;
  }();
  return model;
}

}  // namespace conv3d_dx
