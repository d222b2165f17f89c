#include "cpu/peak.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/parallel.hpp"
#include "cpu/kernels.hpp"
#include "cpu/support.hpp"

namespace conv3d_dx::cpu {
namespace {

using Clock = std::chrono::steady_clock;
// rounds -> flops done; `accumulated` as the probes of kernels.hpp.
using Probe = std::function<std::int64_t(std::int64_t rounds, double* accumulated)>;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Total flops over wall-clock seconds of the calling thread's team (common/parallel.hpp, the threads the
// engines run on) each running probe(rounds) once, on `threads` threads or as many as the system starts
// (`used`). The team's own threads, so none of them is still spinning beside the probe after a call, as
// they would be beside threads of the probe's own (a 1 ms probe right after a call then read half the peak).
double run_rate(const Probe& probe, int threads, std::int64_t rounds, int* used = nullptr) {
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
std::int64_t calibrate(const Probe& probe, double seconds) {
  auto time = [&probe](std::int64_t rounds) {
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
  std::int64_t (*probe)(std::int64_t rounds, double* accumulated);
};
constexpr Candidate kCandidates[] = {
    {"vfmadd231ps ymm (fp32)", Isa::avx2, &peak_fma_avx2},
    {"vfmadd231ps zmm (fp32)", Isa::avx512, &peak_fma_avx512},
    {"vdpbf16ps zmm (bf16 pairs)", Isa::avx512_bf16, &peak_dpbf16_avx512},
    {"tdpbf16ps 16x16x32 (bf16 tiles)", Isa::amx_bf16, &peak_tdpbf16_amx},
};

// The best of a few runs of `probe` on 1 and on `threads` threads, each about `seconds` long on one thread.
template <class Report>
void measure(const Probe& probe, int threads, double seconds, Report report) {
  constexpr int kTrials = 3;  // noise only ever slows a run down: the best of a few
  const std::int64_t rounds = calibrate(probe, seconds);
  for (const int t : threads > 1 ? std::vector<int>{1, threads} : std::vector<int>{1}) {
    double best = 0;
    int used = 1;
    for (int trial = 0; trial < kTrials; ++trial) best = std::max(best, run_rate(probe, t, rounds, &used));
    report(used, best);
  }
}

// A tile loop: a kernel set's widest tile, m pixels x nv vectors of `lanes` channels, over reduction steps of
// one channel (fp32) or a channel pair (bf16 pairs: vdpbf16ps and AMX tiles); w_taps > 1: a SharedWTile over
// that many W taps per list entry.
struct TileLoop {
  std::string name;
  Isa isa;
  TileFn fn;
  int m, nv, lanes;
  bool pairs, amx;
  int w_taps = 1;
};

std::vector<TileLoop> tile_loops() {
  std::vector<TileLoop> loops;
  const auto widest = [&](const KernelSet& ks, Isa isa, const TileFn(*fns)[kMaxM + 1], bool pairs) {
    // AVX2 runs its widest blocks only on short reductions; its usual block for long ones.
    const int nv = ks.nv_for_reduction(std::int64_t{1} << 20), m = ks.max_m[nv];
    loops.push_back({std::string(pairs ? "vdpbf16ps" : "fp32 FMA") + ", " + std::to_string(m) + " pixels x " +
                         std::to_string(nv * ks.lanes) + " channels",
                     isa, fns[nv][m], m, nv, ks.lanes, pairs, false});
  };
  if (cpu_supports(Isa::avx2)) widest(avx2_kernels(), Isa::avx2, avx2_kernels().f32, false);
  if (cpu_supports(Isa::avx512)) {
    const KernelSet& ks = avx512_kernels();
    widest(ks, Isa::avx512, ks.f32, false);
    // The widest tile sharing three W taps' dy loads, which Intel cores take instead (shared_w_over_wide).
    for (int nv = kMaxNv; nv >= 1; --nv)
      if (const int m = ks.shared_w_max_m[3][nv]; m > 0) {
        loops.push_back({"fp32 FMA sharing 3 W taps, " + std::to_string(m) + " pixels x " +
                             std::to_string(nv * ks.lanes) + " channels",
                         Isa::avx512, ks.f32_shared_w[3][nv][m], m, nv, ks.lanes, false, false, 3});
        break;
      }
  }
  if (cpu_supports(Isa::avx512_bf16)) widest(avx512_kernels(), Isa::avx512_bf16, avx512_kernels().bf16, true);
  if (cpu_supports(Isa::amx_bf16))
    loops.push_back({"AMX 2 x 2 tiles, " + std::to_string(kAmxMaxM) + " pixels x 32 channels", Isa::amx_bf16,
                     amx_kernels().tile[2][kAmxMaxM], kAmxMaxM, 2, 16, true, true});
  return loops;
}

// A tile loop's operands: dy of the tile's pixels (64 steps each) and taps over a filter of a quarter of L2
// (at most 512 KiB, so that a tile's sums stay exact for the tests, and at least 4 x L1), each tap its own
// 64-step slice, or every tap the first slice (filter_in_l1). Every operand is 2^-20.
class TileLoopData {
 public:
  static constexpr std::int64_t kSteps = 64;  // per tap: a multiple of the AMX tiles' 16 pairs

  TileLoopData(const CpuModel& cpu, const TileLoop& loop, bool filter_in_l1) : loop_(loop) {
    const std::int64_t step_bytes = std::int64_t{loop.nv} * loop.lanes * 4;  // an fp32 or a bf16 pair each
    const std::int64_t slice = kSteps * step_bytes * loop.w_taps;
    const std::int64_t span =
        std::max(std::min<std::int64_t>(cpu.l2_bytes / 4, 512 << 10), 4 * cpu.l1d_bytes);
    const std::int64_t ntaps = std::max<std::int64_t>(1, span / slice);
    const int dy_pixels = loop.m + loop.w_taps - 1;  // a shared tile's taps reach w_taps - 1 pixels further
    const std::int64_t dy_elements = dy_pixels * kSteps * (loop.pairs ? 2 : 1);
    w_ = alloc_zeroed64(static_cast<std::size_t>((filter_in_l1 ? 1 : ntaps) * slice), "tile loop filter");
    dy_ = alloc_zeroed64(static_cast<std::size_t>(dy_elements * (loop.pairs ? 2 : 4)), "tile loop dy");
    tile_ = alloc_zeroed64(static_cast<std::size_t>(loop.m * loop.nv * loop.lanes * 4), "tile loop tile");
    fill(w_.get(), (filter_in_l1 ? 1 : ntaps) * slice);
    fill(dy_.get(), dy_elements * (loop.pairs ? 2 : 4));
    for (std::int64_t t = 0; t < ntaps; ++t)
      taps_.push_back(
          {0, static_cast<const char*>(w_.get()) + (filter_in_l1 ? 0 : t * slice), kSteps, 0, dy_pixels});
    flops_per_call_ =
        2 * std::int64_t{loop.m} * loop.nv * loop.lanes * kSteps * (loop.pairs ? 2 : 1) * loop.w_taps * ntaps;
  }

  // `rounds` calls, the first from a zero tile and the rest accumulating; the flops done.
  std::int64_t run(std::int64_t rounds) {
    const std::int64_t ps = kSteps * (loop_.pairs ? 2 : 1);  // dy elements between pixels
    for (std::int64_t r = 0; r < rounds; ++r)
      loop_.fn(TileArgs{dy_.get(), ps, loop_.pairs ? 2 : 1, taps_.data(),
                        static_cast<std::int64_t>(taps_.size()), static_cast<float*>(tile_.get()),
                        std::int64_t{loop_.nv} * loop_.lanes, r > 0});
    if (loop_.amx) amx_release();
    return rounds * flops_per_call_;
  }
  double tile_sum() const {
    double sum = 0;
    const auto* tile = static_cast<const float*>(tile_.get());
    for (std::int64_t i = 0; i < std::int64_t{loop_.m} * loop_.nv * loop_.lanes; ++i) sum += tile[i];
    return sum;
  }

 private:
  // 2^-20 in every element: fp32 0x35800000, bf16 (its top half) 0x3580.
  void fill(void* p, std::int64_t bytes) const {
    if (loop_.pairs) {
      std::fill_n(static_cast<std::uint16_t*>(p), bytes / 2, std::uint16_t{0x3580});
    } else {
      std::fill_n(static_cast<float*>(p), bytes / 4, 0x1p-20f);
    }
  }
  TileLoop loop_;
  AlignedPtr dy_, w_, tile_;
  std::vector<TapRef> taps_;
  std::int64_t flops_per_call_ = 0;
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
  std::vector<PeakRate> rates;
  for (const Candidate& c : kCandidates)
    if (cpu_supports(c.isa))
      measure(c.probe, threads, seconds, [&](int used, double gflops) {
        rates.push_back({c.instruction, c.isa, used, gflops});
      });
  return rates;
}

std::vector<TileLoopRate> measure_tile_loops(const CpuModel& cpu, int threads, double seconds) {
  std::vector<TileLoopRate> rates;
  for (const TileLoop& loop : tile_loops())
    for (const bool in_l1 : {true, false}) {
      // Each thread's own operands, made (and brought into its caches by the first call) in each run: a
      // small part of a run of about `seconds`.
      const Probe probe = [&](std::int64_t rounds, double*) {
        return TileLoopData(cpu, loop, in_l1).run(rounds);
      };
      measure(probe, threads, seconds, [&](int used, double gflops) {
        rates.push_back({loop.name, loop.isa, in_l1, used, gflops});
      });
    }
  return rates;
}

bool run_tile_loop(const CpuModel& cpu, std::size_t which, bool filter_in_l1, std::int64_t rounds,
                   std::int64_t* flops, double* accumulated) {
  const std::vector<TileLoop> loops = tile_loops();
  if (which >= loops.size()) return false;
  TileLoopData data(cpu, loops[which], filter_in_l1);
  *flops = data.run(rounds);
  if (accumulated != nullptr) *accumulated = data.tile_sum();
  return true;
}

}  // namespace conv3d_dx::cpu
