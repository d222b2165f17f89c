// This CPU's arithmetic peaks, measured: the rates that shares of peak in benchmarks and profiles are taken
// against (`conv3d-dx peak`). A measurement, used only for reports; nothing the engines compute depends on
// it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/engine.hpp"

namespace conv3d_dx::cpu {

struct PeakRate {
  std::string instruction;  // "vfmadd231ps zmm (fp32)" and the like
  Isa isa;                  // the instruction set it belongs to
  int threads;              // that ran it at once
  double gflops;            // the best of a few timed runs, each thread running the probe for about `seconds`
};

// The multiply-add that the engines of `isa` run (fp32 FMA for avx2 and avx512, vdpbf16ps, tdpbf16ps),
// timed on `threads` threads at once, each for about `seconds` per run: a call's share of the peak, with
// the peak measured right beside the call (bench --peak), moves less with a busy machine's clock than one
// against a peak measured apart. None for the portable and reference kernels; AMX only where Linux allows it.
class PeakProbe {
 public:
  static std::optional<PeakProbe> for_isa(Isa isa, int threads, double seconds);
  const std::string& instruction() const { return instruction_; }
  double run() const;  // GFLOP/s of one run

 private:
  using Fn = std::int64_t (*)(std::int64_t rounds, double* accumulated);
  PeakProbe(std::string instruction, Fn fn, int threads, std::int64_t rounds)
      : instruction_(std::move(instruction)), fn_(fn), threads_(threads), rounds_(rounds) {}
  std::string instruction_;
  Fn fn_;
  int threads_;
  std::int64_t rounds_;
};

// For each multiply-add instruction this CPU (and, for AMX, Linux) allows: its rate on one thread and, when
// `threads` > 1, on that many threads at once (one probe per thread, the threads the engines run on; fewer
// where the system refuses more, and PeakRate::threads says how many). threads >= 1, seconds > 0.
std::vector<PeakRate> measure_peaks(int threads, double seconds);

}  // namespace conv3d_dx::cpu
