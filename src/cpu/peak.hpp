// This CPU's arithmetic peaks, measured: the rates that shares of peak in benchmarks and profiles are taken
// against (`conv3d-dx peak`). A measurement, used only for reports; nothing the engines compute depends on
// it.
#pragma once

#include <string>
#include <vector>

#include "common/engine.hpp"

namespace conv3d_dx::cpu {

struct PeakRate {
  std::string instruction;  // "vfmadd231ps zmm (fp32)" and the like
  Isa isa;                  // the instruction set it belongs to
  int threads;
  double gflops;  // the best of a few timed runs, each thread running the probe for about `seconds`
};

// For each multiply-add instruction this CPU (and, for AMX, Linux) allows: its rate on one thread and, when
// `threads` > 1, on that many threads at once (one probe per thread). threads >= 1, seconds > 0.
std::vector<PeakRate> measure_peaks(int threads, double seconds);

}  // namespace conv3d_dx::cpu
