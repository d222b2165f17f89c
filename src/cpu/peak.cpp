#include "cpu/peak.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "common/parallel.hpp"
#include "cpu/kernels.hpp"

namespace conv3d_dx::cpu {
namespace {

using Clock = std::chrono::steady_clock;
using Probe = std::int64_t (*)(std::int64_t rounds, double* accumulated);

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Total flops over wall-clock seconds of the calling thread's team (common/parallel.hpp, the threads the
// engines run on) each running probe(rounds) once, on `threads` threads or as many as the system starts
// (`used`). The team's own threads, so none of them is still spinning beside the probe after a call, as
// they would be beside threads of the probe's own (a 1 ms probe right after a call then read half the peak).
double run_rate(Probe probe, int threads, std::int64_t rounds, int* used = nullptr) {
  const int n = reserve_threads(threads);
  if (used != nullptr) *used = n;
  std::atomic<std::int64_t> flops{0};
  const Clock::time_point start = Clock::now();
  parallel_for(n, n, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) flops += probe(rounds, nullptr);
  });
  return static_cast<double>(flops.load()) / seconds_since(start) / 1e9;
}

// Rounds that take about `seconds` on one thread: runs double until one takes a tenth of that (which also
// brings the core to its working clock); that count is timed twice more and the fastest of the three scaled,
// since noise only ever slows a run down.
std::int64_t calibrate(Probe probe, double seconds) {
  auto time = [probe](std::int64_t rounds) {
    const Clock::time_point start = Clock::now();
    probe(rounds, nullptr);
    return seconds_since(start);
  };
  std::int64_t rounds = 1024;
  double took = time(rounds);
  while (took < seconds / 10 && rounds < (std::int64_t{1} << 40)) took = time(rounds *= 2);
  took = std::min({took, time(rounds), time(rounds)});
  if (!(took > 0)) return rounds;
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(static_cast<double>(rounds) * seconds / took));
}

struct Candidate {
  const char* instruction;
  Isa isa;
  Probe probe;
};
constexpr Candidate kCandidates[] = {
    {"vfmadd231ps ymm (fp32)", Isa::avx2, &peak_fma_avx2},
    {"vfmadd231ps zmm (fp32)", Isa::avx512, &peak_fma_avx512},
    {"vdpbf16ps zmm (bf16 pairs)", Isa::avx512_bf16, &peak_dpbf16_avx512},
    {"tdpbf16ps 16x16x32 (bf16 tiles)", Isa::amx_bf16, &peak_tdpbf16_amx},
};

}  // namespace

std::optional<PeakProbe> PeakProbe::for_isa(Isa isa, int threads, double seconds) {
  for (const Candidate& c : kCandidates)
    if (c.isa == isa && cpu_supports(isa))
      return PeakProbe(c.instruction, c.probe, std::max(1, threads), calibrate(c.probe, seconds));
  return std::nullopt;
}

double PeakProbe::run() const { return run_rate(fn_, threads_, rounds_); }

std::vector<PeakRate> measure_peaks(int threads, double seconds) {
  constexpr int kTrials = 3;  // noise only ever slows a run down: the best of a few
  std::vector<PeakRate> rates;
  for (const Candidate& c : kCandidates) {
    if (!cpu_supports(c.isa)) continue;
    const std::int64_t rounds = calibrate(c.probe, seconds);
    for (const int t : threads > 1 ? std::vector<int>{1, threads} : std::vector<int>{1}) {
      double best = 0;
      int used = 1;
      for (int trial = 0; trial < kTrials; ++trial)
        best = std::max(best, run_rate(c.probe, t, rounds, &used));
      rates.push_back({c.instruction, c.isa, used, best});
    }
  }
  return rates;
}

}  // namespace conv3d_dx::cpu
