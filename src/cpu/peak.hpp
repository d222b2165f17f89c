// This CPU's arithmetic peaks, measured: the rates that shares of peak in benchmarks and profiles are taken
// against (`conv3d-dx peak`). A measurement, used only for reports; nothing the engines compute depends on
// it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/cpu_model.hpp"
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

// The engines' own register-blocked tiles in a loop (`conv3d-dx peak --tile-loops`): the widest tile of each
// kernel set this CPU allows (fp32 FMA on AVX2 and AVX-512, and AVX-512's widest tile sharing three W taps'
// dy loads; vdpbf16ps; AMX 2 x 2 tiles), one call per round over a list of taps, dy held in L1 and the
// filter either in L1 (every tap reads the same slice) or streaming from L2 (each tap its own slice of a
// filter of a quarter of L2, within 4 x L1 and 512 KiB, as a row task reads a channel block's filter). What
// a tile can do at best on this CPU: an engine's share of it, not of the instruction's peak, is what its
// blocking and data movement leave on the table.
struct TileLoopRate {
  std::string tile;  // "fp32 FMA, 6 pixels x 64 channels" and the like
  Isa isa;           // the kernel set it belongs to (its peak: the instruction of that set)
  bool filter_in_l1;
  int threads;
  double gflops;  // the best of a few timed runs, as measure_peaks
};
std::vector<TileLoopRate> measure_tile_loops(const CpuModel& cpu, int threads, double seconds);

// One tile loop, for tests: `rounds` calls of the tile's kernel over its taps, accumulating into one tile
// (zeroed first) from operands of 2^-20, so every product is 2^-40; returns the flops done and, when
// `accumulated` is not null, the sum of the tile's values, exactly (products) x 2^-40 while each value stays
// below 2^-16 (rounds up to 1000). `which` indexes the loops this CPU allows, in measure_tile_loops' order;
// false when there is no such loop.
bool run_tile_loop(const CpuModel& cpu, std::size_t which, bool filter_in_l1, std::int64_t rounds,
                   std::int64_t* flops, double* accumulated);

}  // namespace conv3d_dx::cpu
