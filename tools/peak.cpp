// `conv3d-dx peak`: this CPU's measured multiply-add peaks, the rates shares of peak are taken against.
#include "cpu/peak.hpp"

#include <charconv>
#include <cstdio>
#include <iostream>
#include <thread>

#include "args.hpp"
#include "commands.hpp"
#include "common/cpu_model.hpp"

namespace conv3d_dx::cli {

namespace {

const char* const kPeakHelp = R"(usage: conv3d-dx peak [--threads T] [--seconds S] [--tile-loops] [--json]

Measures this CPU's peak multiply-add rates: long runs of independent multiply-adds held in registers, for
each instruction the CPU (and, for AMX, Linux) allows (fp32 FMA on AVX2 and AVX-512 vectors, vdpbf16ps,
AMX tdpbf16ps) on one thread and on T threads at once. GFLOP/s is the best of three runs (noise only slows
a run down). Benchmark shares of peak are taken against these; they move with the clock, so measure them
next to the benchmark they are compared with.

--tile-loops also times the engines' own widest tile of each of those instruction sets (on AVX-512 also
the widest tile sharing three W taps' dy loads, which Intel cores take for such kernels) in a loop, dy in L1
and the filter either in L1 or streaming from L2 (a quarter of L2, at most 512 KiB and at least 4 x L1, of
filter, each tap its own slice),
with its share of the instruction's peak on as many threads: the most a tile reaches on this CPU with its
operands that close (loads compete with the multiply-adds), against which an engine's share of peak is
read. JSON objects of tile loops have "tile" and "filter" ("L1" or "L2") where the peaks have
"instruction".

Exit status: 0 success, 2 invalid parameters, 1 other failures.

options:
)";

std::vector<FlagSpec> peak_flags() {
  return {
      {"--threads", "T", "threads for the second measurement, 0 for all hardware threads (the default)"},
      {"--seconds", "S",
       "length of a measurement on one thread, 0.01 to 10 (default 0.1); on T, same work each"},
      {"--tile-loops", "", "also time the engines' widest tiles in a loop (see above)"},
      {"--json", "", "print one JSON object per measurement instead of a table"},
  };
}

}  // namespace

int peak_command(const std::vector<std::string>& argv) {
  const std::vector<FlagSpec> flags = peak_flags();
  if (wants_help(argv)) {
    std::cout << kPeakHelp << format_flags(flags);
    return 0;
  }
  const Args args(argv, flags, "peak");
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  const std::int64_t asked =
      args.has("--threads") ? parse_int("--threads", *args.get("--threads"), 0, 4 * hardware) : 0;
  const int threads = asked == 0 ? static_cast<int>(hardware) : static_cast<int>(asked);
  double seconds = 0.1;
  if (const auto s = args.get("--seconds")) {
    const char* const end = s->data() + s->size();
    const auto [ptr, ec] = std::from_chars(s->data(), end, seconds);
    if (s->empty() || ec != std::errc() || ptr != end || !(seconds >= 0.01 && seconds <= 10))
      throw usage_error("--seconds", "'" + *s + "' is not a number of seconds in [0.01, 10]");
  }
  const bool json = args.has("--json");

  const CpuModel& cpu = host_cpu_model();
  if (!json) {
    std::printf("cpu: %s\n", cpu.describe().c_str());
    std::printf("%-32s %-12s %7s %10s\n", "instruction", "isa", "threads", "GFLOP/s");
  }
  const std::vector<cpu::PeakRate> peaks = cpu::measure_peaks(threads, seconds);
  for (const cpu::PeakRate& r : peaks) {
    if (json)
      std::printf(
          "{\"instruction\": %s, \"isa\": \"%s\", \"threads\": %d, \"gflops\": %.6g, \"cpu\": %s, "
          "\"uarch\": \"%s\"}\n",
          json_string(r.instruction).c_str(), to_string(r.isa), r.threads, r.gflops,
          json_string(cpu.name).c_str(), to_string(cpu.uarch));
    else
      std::printf("%-32s %-12s %7d %10.1f\n", r.instruction.c_str(), to_string(r.isa), r.threads, r.gflops);
    std::fflush(stdout);
  }
  if (!args.has("--tile-loops")) return 0;
  if (!json)
    std::printf("\n%-52s %-12s %6s %7s %10s %8s\n", "tile loop", "isa", "filter", "threads", "GFLOP/s",
                "of_peak");
  for (const cpu::TileLoopRate& r : cpu::measure_tile_loops(cpu, threads, seconds)) {
    // The peak of the tile's instruction on as many threads, measured above.
    double peak = 0;
    for (const cpu::PeakRate& p : peaks)
      if (p.isa == r.isa && p.threads == r.threads) peak = p.gflops;
    const char* const filter = r.filter_in_l1 ? "L1" : "L2";
    if (json)
      std::printf(
          "{\"tile\": %s, \"isa\": \"%s\", \"filter\": \"%s\", \"threads\": %d, \"gflops\": %.6g, "
          "\"of_peak\": %.4g, \"cpu\": %s, \"uarch\": \"%s\"}\n",
          json_string(r.tile).c_str(), to_string(r.isa), filter, r.threads, r.gflops,
          peak > 0 ? r.gflops / peak : 0.0, json_string(cpu.name).c_str(), to_string(cpu.uarch));
    else
      std::printf("%-52s %-12s %6s %7d %10.1f %8.2f\n", r.tile.c_str(), to_string(r.isa), filter, r.threads,
                  r.gflops, peak > 0 ? r.gflops / peak : 0.0);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace conv3d_dx::cli
