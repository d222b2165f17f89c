// The per-CPU cost table: which microarchitecture a CPUID identity maps to, and which kernels bf16 inputs get
// on each — chosen from the table, so the same CPU always computes the same bits.
#include "common/cpu_model.hpp"

#include <random>

#include "common/engine.hpp"
#include "support/testing.hpp"

namespace conv3d_dx::testing {
namespace {

TEST(CpuModel, ClassifiesKnownMicroarchitectures) {
  EXPECT_EQ(classify_cpu("GenuineIntel", 6, 0x8F, true), Uarch::intel_avx512);  // Sapphire Rapids
  EXPECT_EQ(classify_cpu("GenuineIntel", 6, 0xCF, true), Uarch::intel_avx512);  // Emerald Rapids
  EXPECT_EQ(classify_cpu("AuthenticAMD", 0x19, 0x11, true), Uarch::amd_zen4);   // Genoa
  EXPECT_EQ(classify_cpu("AuthenticAMD", 0x19, 0x01, true), Uarch::other);      // Zen 3: no AVX-512 anyway
  EXPECT_EQ(classify_cpu("AuthenticAMD", 0x1A, 0x02, true), Uarch::amd_zen5);   // Turin
  EXPECT_EQ(classify_cpu("GenuineIntel", 6, 0x8F, false), Uarch::other);        // AVX-512 disabled
  EXPECT_EQ(classify_cpu("HygonGenuine", 0x18, 0x01, true), Uarch::other);
}

// Entries measured on Intel cores only: narrower fp32 blocks whose tiles share W taps' dy loads, and
// AVX-512's broadcast mode for kernels at most the stride.
TEST(CpuModel, IntelOnlyEntriesWhereMeasured) {
  for (bool (*entry)(Uarch) : {&shared_w_over_wide, &broadcast_one_tap_avx512}) {
    EXPECT_TRUE(entry(Uarch::intel_avx512));
    EXPECT_FALSE(entry(Uarch::amd_zen4));
    EXPECT_FALSE(entry(Uarch::amd_zen5));
    EXPECT_FALSE(entry(Uarch::other));
  }
  const CpuModel& host = host_cpu_model();
  EXPECT_EQ(host.shared_w_over_wide, shared_w_over_wide(host.uarch));
  EXPECT_EQ(host.broadcast_one_tap_avx512, broadcast_one_tap_avx512(host.uarch));
}

TEST(CpuModel, Bf16DotProductsOnlyWhereTheyOutrunFma) {
  EXPECT_LT(bf16_dot_rate(Uarch::intel_avx512), 1.0);
  EXPECT_GT(bf16_dot_rate(Uarch::amd_zen4), 1.0);
  EXPECT_GT(bf16_dot_rate(Uarch::amd_zen5), 1.0);
  EXPECT_EQ(bf16_dot_rate(Uarch::other), 1.0);  // unknown: keep the narrower data
  const CpuModel& host = host_cpu_model();
  EXPECT_FALSE(host.name.empty());
  EXPECT_GT(host.l1d_bytes, 0);
  EXPECT_GT(host.l2_bytes, 0);
  EXPECT_NE(host.describe().find(to_string(host.uarch)), std::string::npos) << host.describe();
}

// The one-line description names a vdpbf16ps rate only for a CPU that has the instruction.
TEST(CpuModel, DescribesTheBf16RateOnlyWhereVdpbf16psExists) {
  CpuModel zen3;  // family 19h model 01h: AVX2 only
  zen3.name = "AMD EPYC";
  zen3.l1d_bytes = 32 << 10;
  zen3.l2_bytes = 512 << 10;
  EXPECT_EQ(zen3.describe(), "AMD EPYC (other, L1d 32 KiB, L2 512 KiB per core, no vdpbf16ps)");
  CpuModel zen4 = zen3;
  zen4.uarch = Uarch::amd_zen4;
  zen4.bf16_dot_rate = bf16_dot_rate(zen4.uarch);
  zen4.has_bf16_dot = true;
  EXPECT_EQ(
      zen4.describe(),
      "AMD EPYC (amd_zen4, L1d 32 KiB, L2 512 KiB per core, vdpbf16ps at 2.00x the fp32 FMA flop rate)");
}

// The engine list under a given CPU model: the first engine that accepts, and the reasons of the others.
std::string first_engine(const Problem& p, const CpuModel& cpu, bool isa_named,
                         std::vector<std::string>& declined) {
  EngineRequest request{p, 2, Isa::avx512_bf16, cpu};
  request.isa_named = isa_named;
  for (const EngineFactory& factory : cpu_engines()) {
    std::string why;
    if (factory.create(request, why)) return factory.name;
    declined.push_back(why);
  }
  return "none";
}

TEST(CpuModel, Bf16InputsFollowTheCostTable) {
  if (!cpu_supports(Isa::avx512_bf16)) GTEST_SKIP() << "CPU lacks avx512_bf16";
  std::mt19937_64 rng(7);
  Case wide = with_dtype(Case{}, DType::bf16);
  wide.Cin = 20;  // the GEMM engine's problem
  wide.Cout = 2;  // too few for AMX tiles, which decline
  Instance inst = instantiate(wide, rng, Fill::random);
  const Problem p = validate(inst.spec);
  CpuModel intel = host_cpu_model(), zen = host_cpu_model();
  intel.uarch = Uarch::intel_avx512;
  intel.bf16_dot_rate = bf16_dot_rate(intel.uarch);
  zen.uarch = Uarch::amd_zen5;
  zen.bf16_dot_rate = bf16_dot_rate(zen.uarch);

  std::vector<std::string> declined;
  EXPECT_EQ(first_engine(p, zen, false, declined), "gemm_avx512_bf16");
  declined.clear();
  EXPECT_EQ(first_engine(p, intel, false, declined), "gemm_avx512");
  bool cost_named = false;
  for (const auto& why : declined) cost_named |= why.find("0.50x the flops of fp32 FMA") != std::string::npos;
  EXPECT_TRUE(cost_named) << "the cost table is the reason given";
  declined.clear();
  EXPECT_EQ(first_engine(p, intel, true, declined), "gemm_avx512_bf16");  // an ISA named by the caller

  // Plan on this machine agrees with the table for its own CPU.
  Plan plan(p);
  EXPECT_EQ(plan.engine_name(),
            host_cpu_model().bf16_dot_pays() ? std::string("gemm_avx512_bf16") : std::string("gemm_avx512"));
}

}  // namespace
}  // namespace conv3d_dx::testing
