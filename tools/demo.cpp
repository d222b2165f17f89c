// `conv3d-dx demo`: the built-in main job. A video-VAE-like 3-D block on random data, stride 1 and 2, fp32
// and bf16, timed and checked against the float64 reference.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "check.hpp"
#include "commands.hpp"
#include "cpu/support.hpp"
#include "problem_args.hpp"
#include "reference/accuracy.hpp"
#include "suite.hpp"

namespace conv3d_dx::cli {

namespace {

const char* const kDemoHelp =
    R"(usage: conv3d-dx demo [--quick] [--threads T] [--isa I]

Runs the gradient of a video-VAE-like 3-D convolution block (N=1, Cin=Cout=64, y 8x32x32, kernel 3x3x3,
NDHWC data, NCDHW filter) with stride 1 and with stride 2, in fp32 and bf16, on random data. Prints the engine,
the time and GFLOP/s of Plan::execute, and checks the result against the float64 reference within the tolerance of
docs/numerics.md (the reference is slow, so only the first input channels are checked; the output says
which). --quick runs a smaller block and checks every output.

Exit status: 0 when every check passes, 1 when one fails, 2 for invalid flags.

options:
)";

struct DemoCase {
  std::int64_t stride;
  DType dtype;
};

}  // namespace

int demo_command(const std::vector<std::string>& argv) {
  const std::vector<FlagSpec> flags = {
      {"--quick", "", "a smaller block (16 channels, 4x8x8), every output checked"},
      {"--threads", "T", "worker threads (default 0: all hardware threads; at most 4 x that)"},
      {"--isa", "best|amx_bf16|avx512_bf16|avx512|avx2|portable|reference",
       "engine instruction set (default best)"},
  };
  if (wants_help(argv)) {
    std::cout << kDemoHelp << format_flags(flags);
    return 0;
  }
  const Args args(argv, flags, "demo");
  const ParsedAttributes options = parse_attributes(args, true);
  const bool quick = args.has("--quick");
  const std::int64_t C = quick ? 16 : 64, k = 3, pad = 1;
  const std::array<std::int64_t, 3> x =
      quick ? std::array<std::int64_t, 3>{4, 8, 8} : std::array<std::int64_t, 3>{8, 32, 32};
  const std::int64_t checked_channels = quick ? 0 : 4;

  std::printf(
      "conv3d-dx demo: dL/dx of a 3-D convolution block, N=1, Cin=Cout=%lld, y %lldx%lldx%lld, kernel "
      "%lldx%lldx%lld, "
      "pad %lld, NDHWC data, NCDHW filter, random data in [-1, 1]\n",
      static_cast<long long>(C), static_cast<long long>(x[0]), static_cast<long long>(x[1]),
      static_cast<long long>(x[2]), static_cast<long long>(k), static_cast<long long>(k),
      static_cast<long long>(k), static_cast<long long>(pad));
  bool all_ok = true;
  const DemoCase cases[] = {{1, DType::f32}, {1, DType::bf16}, {2, DType::f32}, {2, DType::bf16}};
  for (const DemoCase& c : cases) {
    ProblemSpec spec;
    spec.attrs.input_size = {1, x[0], x[1], x[2], C};
    spec.attrs.strides = {1, c.stride, c.stride, c.stride, 1};
    spec.attrs.pads = {pad, pad, pad, pad, pad, pad};
    spec.attrs.data_format = Layout::NDHWC;
    Shape5 dy_shape{1, 0, 0, 0, C};
    for (int a = 0; a < 3; ++a) dy_shape[1 + a] = suite::forward_out(x[a], k, c.stride, pad, 1);
    spec.out_backprop = TensorView::contiguous(nullptr, c.dtype, Layout::NDHWC, dy_shape);
    spec.filter = TensorView::contiguous(nullptr, c.dtype, Layout::NCDHW, {C, C, k, k, k});
    spec.y = TensorView::contiguous(nullptr, c.dtype, Layout::NDHWC, {1, x[0], x[1], x[2], C});
    const Problem p = validate(spec);
    Options plan_options = options.options;
    plan_options.keep_filter = false;  // timed as a training step: the filter is not reused
    Plan plan(p, plan_options);

    const std::int64_t dy_n = element_count(dy_shape), w_n = C * C * k * k * k;
    // 64-byte aligned, as PyTorch's tensors are (bench says why).
    const cpu::AlignedPtr dy =
        cpu::alloc_zeroed64(static_cast<std::size_t>(dy_n) * dtype_size(c.dtype), "dy");
    const cpu::AlignedPtr w = cpu::alloc_zeroed64(static_cast<std::size_t>(w_n) * dtype_size(c.dtype), "w");
    const cpu::AlignedPtr y =
        cpu::alloc_zeroed64(static_cast<std::size_t>(p.y_elements()) * dtype_size(c.dtype), "y");
    fill_random(c.dtype, dy.get(), dy_n, 11 + static_cast<std::uint64_t>(c.stride));
    fill_random(c.dtype, w.get(), w_n, 23 + static_cast<std::uint64_t>(c.stride));

    // Time until 0.5 s have passed or 9 calls have run (a slow engine gets one call); report the median.
    std::vector<double> ms;
    for (double total = 0; ms.size() < 9 && total < 500;) {
      const auto start = std::chrono::steady_clock::now();
      plan.execute(dy.get(), w.get(), y.get());
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      total += ms.back();
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];

    const CheckResult r = check_against_reference(p, dy.get(), w.get(), y.get(), checked_channels);
    all_ok = all_ok && r.ok();
    std::printf(
        "  stride %lld, %-4s: dy %lldx%lldx%lld, %.3f GFLOP, engine %s, %d threads, median %.3f ms of %zu "
        "calls, "
        "%.1f GFLOP/s\n",
        static_cast<long long>(c.stride), to_string(c.dtype), static_cast<long long>(dy_shape[1]),
        static_cast<long long>(dy_shape[2]), static_cast<long long>(dy_shape[3]), p.flops() / 1e9,
        plan.engine_name().c_str(), plan.threads(), median, ms.size(), p.flops() / (median * 1e6));
    std::printf("    check vs float64 reference: %s%lld of %lld outputs",
                checked_channels ? "input channels 0-3 only, " : "", static_cast<long long>(r.checked),
                static_cast<long long>(p.y_elements()));
    if (r.ok()) {
      if (c.dtype == DType::f32) {
        const std::int64_t terms = p.Cout_g * p.kernel[0] * p.kernel[1] * p.kernel[2];
        std::printf(", max error %.2f x 2^-24 x sum|dy*w| (allowed %.1f): ok\n", r.worst,
                    reference::fp32_allowance(1.0, terms) * 0x1p24);
      } else {
        std::printf(" within one %s rounding: ok\n", to_string(c.dtype));
      }
    } else {
      std::printf(": FAILED, %lld outside the tolerance; first: %s\n", static_cast<long long>(r.failures),
                  r.first_failure.c_str());
    }
  }
  std::printf(all_ok ? "demo passed\n" : "demo FAILED\n");
  return all_ok ? 0 : 1;
}

}  // namespace conv3d_dx::cli
