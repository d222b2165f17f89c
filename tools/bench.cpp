// `conv3d-dx bench`: times Plan::execute on random data, for one problem given by shapes or for the suite.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>

#include "check.hpp"
#include "commands.hpp"
#include "common/cpu_model.hpp"
#include "cpu/peak.hpp"
#include "cpu/support.hpp"
#include "problem_args.hpp"
#include "suite.hpp"

namespace conv3d_dx::cli {

namespace {

const char* const kBenchHelp =
    R"(usage: conv3d-dx bench --out-backprop-shape a,b,c,d,e --filter-shape a,b,c,d,e --input-size a,b,c,d,e
                       --strides a,b,c,d,e --pads f,b,t,b,l,r [options]
       conv3d-dx bench --suite default|extra [--dtype D] [--data-format F] [--filter-format F] [options]

Times the operator on random data. The timed region is Plan::execute(dy, filter, y) with the filter not kept
(Options::keep_filter false): plain tensors in, plain y out, the filter packed anew, or read in place, on
each call (what a training step pays). packed_median_ms is the median with the filter packed once
(Plan::pack_filter, then Plan::execute_packed). GFLOP/s counts
2*N*Cout*Do*Ho*Wo*Cin/G*kD*kH*kW per call, with the median time; flops_inside (JSON) leaves out the
products that fall on the pads. --peak runs the engine's multiply-add peak probe (as `conv3d-dx peak`) on
as many threads, for about as long, before each timed call, and reports the median of the calls' shares of
it: of_peak counting every product, inside_of_peak only those inside y. --suite default runs the benchmark
suite (a-i and our own shapes), --suite extra more layer types of 3D networks (tools/suite.hpp), in the
selected dtype (default fp32) and layouts (default NDHWC data, NCDHW filter).

Exit status: 0 success, 2 invalid parameters, 1 other failures.

options:
)";

std::vector<FlagSpec> bench_flags() {
  std::vector<FlagSpec> flags = {
      {"--out-backprop-shape", "a,b,c,d,e", "shape of out_backprop in data-format order"},
      {"--filter-shape", "a,b,c,d,e", "shape of the filter in filter-format order"},
      {"--suite", "NAME", "run a benchmark suite (default or extra) instead of one problem"},
      {"--shapes", "a,b,...", "with --suite: only these of its problems, in suite order (default: all)"},
      {"--name", "NAME", "name of the problem in the output (default: custom)"},
      {"--repeat", "R", "timed calls per problem (default 10)"},
      {"--warmup", "W", "untimed calls before timing (default 2)"},
      {"--json", "", "print one JSON object per problem instead of a table"},
      {"--peak", "", "also time the engine's multiply-add peak beside each call and report shares of it"},
  };
  for (FlagSpec& f : attribute_flags()) flags.push_back(std::move(f));
  return flags;
}

struct Job {
  std::string name;
  ProblemSpec spec;
};

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0;
};

Timing summarise(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  const std::size_t n = ms.size();
  return {n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2, ms.front(), ms.back()};
}

double median(std::vector<double> v) { return v.empty() ? 0 : summarise(std::move(v)).median_ms; }

template <class F>
double time_ms(F&& call) {
  const auto start = std::chrono::steady_clock::now();
  call();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// With --peak: the probe's median rate (GFLOP/s) and the median of the calls' shares of it, counting every
// product (a share counting only those inside y is this times flops_inside / flops).
struct PeakShare {
  double gflops = 0, of_peak = 0;
};

// `repeat` timed calls after `warmup` untimed ones. With `probe` (and `share`), each timed call follows a
// probe run, and the call's rate of `flops` over the probe's goes into the median.
template <class F>
Timing time_calls(int warmup, int repeat, F&& call, const cpu::PeakProbe* probe = nullptr, double flops = 0,
                  PeakShare* share = nullptr) {
  for (int i = 0; i < warmup; ++i) call();
  std::vector<double> ms, rates, shares;
  for (int i = 0; i < repeat; ++i) {
    const double rate = probe ? probe->run() : 0;
    ms.push_back(time_ms(call));
    if (rate > 0 && ms.back() > 0) {
      rates.push_back(rate);
      shares.push_back(flops / (ms.back() * 1e6) / rate);
    }
  }
  if (share) *share = {median(rates), median(shares)};
  return summarise(std::move(ms));
}

// The instruction set of the kernels an engine runs, from its name (gemm_amx_bf16, pixel_avx512, ...); none
// for the portable ones. The plan's level can be higher: fp32 on an AMX Xeon runs gemm_avx512's FMAs.
std::optional<Isa> engine_isa(const std::string& engine) {
  for (const Isa isa : {Isa::amx_bf16, Isa::avx512_bf16, Isa::avx512, Isa::avx2}) {
    const std::string suffix = std::string("_") + to_string(isa);
    if (engine.size() > suffix.size() && engine.ends_with(suffix)) return isa;
  }
  return std::nullopt;
}

// A 5-D shape from canonical [N, C, D, H, W] order into `layout` order (filters: [Cout, Cin_g, kD, kH, kW]).
Shape5 from_canonical(const Shape5& c, Layout layout) {
  switch (layout) {
    case Layout::NCDHW:
      return c;
    case Layout::NDHWC:
      return {c[0], c[2], c[3], c[4], c[1]};
    case Layout::DHWCN:
      return {c[2], c[3], c[4], c[1], c[0]};
  }
  return c;
}

// The suite's problems named in `only` (all when it is empty).
std::vector<Job> suite_jobs(const std::vector<suite::Shape>& shapes, const ParsedAttributes& base,
                            const std::vector<std::string>& only) {
  std::vector<Job> jobs;
  const bool ncdhw = base.attrs.data_format == Layout::NCDHW;
  for (const std::string& name : only)
    if (std::none_of(shapes.begin(), shapes.end(), [&](const suite::Shape& s) { return s.name == name; }))
      throw usage_error("--shapes", "'" + name + "' is not a problem of the suite");
  for (const suite::Shape& s : shapes) {
    if (!only.empty() && std::find(only.begin(), only.end(), s.name) == only.end()) continue;
    const suite::CanonicalShapes c = suite::canonical_shapes(s);
    ParsedAttributes pa = base;
    const Shape5 y = from_canonical(c.y, base.attrs.data_format);
    pa.attrs.input_size.assign(y.begin(), y.end());
    pa.attrs.strides = ncdhw ? Shape5{1, 1, s.stride[0], s.stride[1], s.stride[2]}
                             : Shape5{1, s.stride[0], s.stride[1], s.stride[2], 1};
    pa.attrs.dilations = ncdhw ? Shape5{1, 1, s.dilation[0], s.dilation[1], s.dilation[2]}
                               : Shape5{1, s.dilation[0], s.dilation[1], s.dilation[2], 1};
    pa.attrs.pads = {s.pad[0], s.pad[0], s.pad[1], s.pad[1], s.pad[2], s.pad[2]};
    pa.attrs.groups = s.groups;
    jobs.push_back(
        {s.name, make_spec(pa, from_canonical(c.dy, base.attrs.data_format),
                           from_canonical(c.filter, base.filter_format), base.dtype.value_or(DType::f32))});
  }
  return jobs;
}

}  // namespace

int bench_command(const std::vector<std::string>& argv) {
  const std::vector<FlagSpec> flags = bench_flags();
  if (wants_help(argv)) {
    std::cout << kBenchHelp << format_flags(flags);
    return 0;
  }
  const Args args(argv, flags, "bench");
  const auto suite_name = args.get("--suite");
  std::optional<std::vector<suite::Shape>> suite_shapes;
  if (suite_name) {
    suite_shapes = suite::suite_named(*suite_name);
    if (!suite_shapes)
      throw usage_error("--suite", "'" + *suite_name + "' is not a suite (" + suite::kSuiteNames + ")");
    for (const char* f : {"--out-backprop-shape", "--filter-shape", "--input-size", "--strides", "--pads",
                          "--dilations", "--groups", "--name"}) {
      if (args.has(f)) throw usage_error("--suite", std::string("cannot be combined with ") + f);
    }
  }
  if (args.has("--shapes") && !suite_name) throw usage_error("--shapes", "needs --suite");
  const ParsedAttributes pa = parse_attributes(args, suite_name.has_value());
  const int repeat = static_cast<int>(parse_int("--repeat", args.get("--repeat").value_or("10"), 1, 1000000));
  const int warmup = static_cast<int>(parse_int("--warmup", args.get("--warmup").value_or("2"), 0, 1000000));
  const bool json = args.has("--json"), peak = args.has("--peak");

  std::vector<Job> jobs;
  if (suite_name) {
    std::vector<std::string> only;
    if (const auto list = args.get("--shapes")) {
      std::stringstream in(*list);
      for (std::string name; std::getline(in, name, ',');) only.push_back(name);
    }
    jobs = suite_jobs(*suite_shapes, pa, only);
  } else {
    const Shape5 dy5 = parse_shape(args, "--out-backprop-shape", pa.attrs.data_format, pa.two_d());
    const Shape5 w5 = parse_shape(args, "--filter-shape", pa.filter_format, pa.two_d());
    jobs.push_back(
        {args.get("--name").value_or("custom"), make_spec(pa, dy5, w5, pa.dtype.value_or(DType::f32))});
  }
  // Validate everything before timing anything.
  std::vector<Problem> problems;
  for (const Job& job : jobs) problems.push_back(validate(job.spec));

  const bool progress = jobs.size() > 1 && ::isatty(STDERR_FILENO);
  const CpuModel& cpu = host_cpu_model();
  if (!json) {
    std::printf("cpu: %s\n", cpu.describe().c_str());
    std::printf("%-10s %-10s %-5s %-5s %3s %-11s %-24s %10s %10s %10s %10s %9s %12s", "name", "dtype", "data",
                "filt", "thr", "isa", "engine", "median_ms", "min_ms", "max_ms", "packed_ms", "GFLOP/s",
                "workspace");
    if (peak) std::printf(" %9s %8s %9s", "peak", "of_peak", "inside");
    std::printf("\n");
  }
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    const Problem& p = problems[j];
    if (progress) std::fprintf(stderr, "[%zu/%zu] %s ...\n", j + 1, jobs.size(), jobs[j].name.c_str());
    Options options = pa.options;
    options.keep_filter = false;  // a training step's filter is new each call
    Plan plan(p, options);
    const ProblemSpec& spec = jobs[j].spec;
    const std::int64_t dy_n = element_count(spec.out_backprop.shape), w_n = element_count(spec.filter.shape);
    // 64-byte aligned, as PyTorch's tensors are: the engines store a channels_last y's whole lines past the
    // caches only where they are aligned, so the timing is what those callers get.
    const cpu::AlignedPtr dy =
        cpu::alloc_zeroed64(static_cast<std::size_t>(dy_n) * dtype_size(p.dy_dtype), "dy");
    const cpu::AlignedPtr w =
        cpu::alloc_zeroed64(static_cast<std::size_t>(w_n) * dtype_size(p.filter_dtype), "w");
    const cpu::AlignedPtr y =
        cpu::alloc_zeroed64(static_cast<std::size_t>(p.y_elements()) * dtype_size(p.y_dtype), "y");
    const cpu::AlignedPtr workspace = cpu::alloc_zeroed64(plan.workspace_bytes(), "the workspace");
    fill_random(p.dy_dtype, dy.get(), dy_n, 1 + j);
    fill_random(p.filter_dtype, w.get(), w_n, 1001 + j);

    const auto call = [&] { plan.execute(dy.get(), w.get(), y.get(), workspace.get()); };
    // The probe runs about as long as a call (at least a millisecond), on the plan's threads.
    std::optional<cpu::PeakProbe> probe;
    if (peak) {
      call();
      if (const auto isa = engine_isa(plan.engine_name()))
        probe = cpu::PeakProbe::for_isa(*isa, plan.threads(), std::max(1e-3, time_ms(call) / 1e3));
    }
    PeakShare share;
    const Timing t = time_calls(warmup, repeat, call, probe ? &*probe : nullptr, p.flops(), &share);
    const double inside_of_peak = p.flops() > 0 ? share.of_peak * p.flops_inside() / p.flops() : 0;
    plan.pack_filter(w.get());
    const Timing packed =
        time_calls(warmup, repeat, [&] { plan.execute_packed(dy.get(), y.get(), workspace.get()); });
    const double gflops = t.median_ms > 0 ? p.flops() / (t.median_ms * 1e6) : 0;

    if (json) {
      std::printf(
          "{\"name\": %s, \"dtype\": \"%s\", \"data_format\": \"%s\", \"filter_format\": \"%s\", "
          "\"threads\": %d, "
          "\"isa\": \"%s\", \"engine\": %s, \"median_ms\": %.6g, \"min_ms\": %.6g, \"max_ms\": %.6g, "
          "\"packed_median_ms\": %.6g, \"gflops\": %.6g, \"flops\": %.17g, \"workspace_bytes\": %zu, "
          "\"flops_inside\": %.17g, \"repeat\": %d, \"problem\": %s, \"cpu\": %s, \"uarch\": \"%s\"",
          json_string(jobs[j].name).c_str(), to_string(p.dy_dtype), to_string(p.data_format),
          to_string(p.filter_format), plan.threads(), to_string(plan.isa()),
          json_string(plan.engine_name()).c_str(), t.median_ms, t.min_ms, t.max_ms, packed.median_ms, gflops,
          p.flops(), plan.workspace_bytes(), p.flops_inside(), repeat, json_string(p.describe()).c_str(),
          json_string(cpu.name).c_str(), to_string(cpu.uarch));
      if (peak) {
        std::printf(", \"peak_instruction\": %s", json_string(probe ? probe->instruction() : "none").c_str());
        if (probe)
          std::printf(", \"peak_gflops\": %.6g, \"of_peak\": %.6g, \"inside_of_peak\": %.6g", share.gflops,
                      share.of_peak, inside_of_peak);
      }
      std::printf("}\n");
    } else {
      std::printf("%-10s %-10s %-5s %-5s %3d %-11s %-24s %10.3f %10.3f %10.3f %10.3f %9.1f %12zu",
                  jobs[j].name.c_str(), to_string(p.dy_dtype), to_string(p.data_format),
                  to_string(p.filter_format), plan.threads(), to_string(plan.isa()),
                  plan.engine_name().c_str(), t.median_ms, t.min_ms, t.max_ms, packed.median_ms, gflops,
                  plan.workspace_bytes());
      if (peak && probe)
        std::printf(" %9.1f %7.1f%% %8.1f%%", share.gflops, 100 * share.of_peak, 100 * inside_of_peak);
      else if (peak)
        std::printf(" %9s %8s %9s", "-", "-", "-");
      std::printf("\n");
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace conv3d_dx::cli
