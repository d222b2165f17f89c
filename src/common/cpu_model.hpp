// What the engines need to know about the CPU beyond its instruction sets: its microarchitecture's relative
// instruction costs (a fixed table, never a timing, so one CPU always computes the same bits) and its
// per-core cache sizes. Plan detects it once; tests build their own to exercise other CPUs' choices.
#pragma once

#include <cstdint>
#include <string>

namespace conv3d_dx {

enum class Uarch {
  other,         // not in the table: assume bf16 dot products and fp32 FMAs cost the same
  intel_avx512,  // Intel cores with AVX-512 (Skylake-SP .. Granite Rapids)
  amd_zen4,      // AMD family 19h with AVX-512 (512-bit operations split in two halves)
  amd_zen5,      // AMD family 1Ah
};

struct CpuModel {
  std::string name;  // the processor's brand string
  Uarch uarch = Uarch::other;
  // Flops per cycle of vdpbf16ps over those of fp32 FMA, from the table: on Intel cores vdpbf16ps issues
  // once per two cycles on one port while FMAs issue on two ports every cycle (0.5); on Zen 4 and 5 it
  // runs at the FMA instruction rate and does twice the flops (2.0).
  double bf16_dot_rate = 1.0;
  bool has_bf16_dot = false;  // the CPU has vdpbf16ps (avx512_bf16): only then is the rate worth printing
  // fp32 FMA tiles: where a phase's W taps can share their dy loads, blocks narrowed to the widest that have
  // shared tiles (2 vectors on AVX-512) beat wider blocks loading a dy value per tap (from the table: Intel
  // cores; not measured on AMD's).
  bool shared_w_over_wide = false;
  // AVX-512: kernels that give each y pixel at most one tap (kernel <= stride, not 1x1x1 at stride 1) run on
  // the pointwise engine's broadcast mode rather than the GEMM engine (from the table: Intel cores; not
  // measured on AMD's). AVX2 takes them there on every CPU.
  bool broadcast_one_tap_avx512 = false;
  std::int64_t l1d_bytes = 32 << 10;  // per core
  std::int64_t l2_bytes = 1 << 20;    // per core

  // Whether bf16 inputs should use vdpbf16ps rather than being widened to fp32 for FMAs.
  bool bf16_dot_pays() const { return bf16_dot_rate >= 1.0; }
  std::string describe() const;  // one line for --verbose and benchmark reports
};

const char* to_string(Uarch);
// The table entry for a CPU identified by its CPUID vendor, family and model (display values).
Uarch classify_cpu(const std::string& vendor, unsigned family, unsigned model, bool avx512);
// The relative vdpbf16ps rate of a microarchitecture.
double bf16_dot_rate(Uarch);
// Whether its fp32 tiles take narrower blocks to share W taps' dy loads (CpuModel::shared_w_over_wide).
bool shared_w_over_wide(Uarch);
// Whether AVX-512 takes one-tap kernels in the broadcast mode (CpuModel::broadcast_one_tap_avx512).
bool broadcast_one_tap_avx512(Uarch);
// This machine's model, detected once.
const CpuModel& host_cpu_model();

}  // namespace conv3d_dx
