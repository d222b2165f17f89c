// validate, bench, demo, help and version, through the executable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <variant>

#include "common/engine.hpp"
#include "support.hpp"

namespace conv3d_dx::cli::testing {
namespace {

// A flat JSON object of strings and numbers, as bench --json prints; fails the test on anything else.
using JsonValue = std::variant<std::string, double>;
std::map<std::string, JsonValue> parse_flat_json(const std::string& text) {
  std::map<std::string, JsonValue> out;
  std::size_t i = 0;
  const auto ws = [&] {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  };
  const auto str = [&]() -> std::string {
    std::string s;
    EXPECT_EQ(text.at(i), '"');
    for (++i; i < text.size() && text[i] != '"'; ++i) {
      if (text[i] == '\\') ++i;
      s += text.at(i);
    }
    ++i;
    return s;
  };
  ws();
  EXPECT_EQ(text.at(i++), '{') << text;
  while (true) {
    ws();
    const std::string key = str();
    ws();
    EXPECT_EQ(text.at(i++), ':') << text;
    ws();
    if (text.at(i) == '"') {
      out[key] = str();
    } else {
      std::size_t used = 0;
      out[key] = std::stod(text.substr(i), &used);
      i += used;
    }
    ws();
    if (text.at(i) == ',') {
      ++i;
      continue;
    }
    EXPECT_EQ(text.at(i++), '}') << text;
    break;
  }
  ws();
  EXPECT_EQ(i, text.size()) << "trailing text in " << text;
  return out;
}

const std::vector<std::string> kValidGrouped = {"validate",    "--out-backprop-shape",
                                                "1,4,8,8,6",   "--filter-shape",
                                                "6,2,3,3,3",   "--input-size",
                                                "1,4,8,8,4",   "--strides",
                                                "1,1,1,1,1",   "--pads",
                                                "1,1,1,1,1,1", "--groups",
                                                "2",           "--dtype",
                                                "bf16"};

TEST(Validate, ValidProblemPrintsItAndTheCompatibilityReport) {
  const ProcessResult r = run_cli(kValidGrouped);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* line : {"problem: ", "groups 2", "bf16", "valid: yes",
                           "Ascend compatibility:", "Atlas A2/A3 training and inference series: accepted",
                           "Ascend 950PR/950DT: not accepted", "groups 2 > 1 is not supported with NDHWC"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << "missing '" << line << "' in\n" << r.out;
  }
}

TEST(Validate, ReportsEachProductsViolations) {
  // Stride H 64 is beyond the A2/A3 limit of 63; NCDHW hif8 suits the 950.
  const ProcessResult r = run_cli({"validate", "--out-backprop-shape", "1,3,4,1,8", "--filter-shape",
                                   "3,2,3,3,3", "--input-size", "1,2,4,8,8", "--strides", "1,1,1,64,1",
                                   "--pads", "1,1,1,1,1,1", "--data-format", "NCDHW", "--dtype", "hif8"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Atlas A2/A3 training and inference series: not accepted"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("strides H is 64"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dtype hif8 is not supported"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Ascend 950PR/950DT: accepted"), std::string::npos) << r.out;
}

TEST(Validate, TwoDimensionalShapes) {
  const ProcessResult r =
      run_cli({"validate", "--out-backprop-shape", "2,8,5,3", "--filter-shape", "8,4,3,3", "--input-size",
               "2,4,10,6", "--strides", "1,1,2,2", "--pads", "1,0,1,0", "--data-format", "NCDHW"});
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("valid: yes"), std::string::npos);
}

TEST(Validate, InvalidProblemsExit2AndSayWhy) {
  struct Bad {
    std::string flag, value, needle;
  };
  for (const Bad& b : std::vector<Bad>{{"--strides", "1,0,1,1,1", "invalid strides"},
                                       {"--pads", "1,1,1,1,1,3", "invalid out_backprop"},
                                       {"--groups", "3", "invalid groups"},
                                       {"--dtype", "fp16", "invalid enable_hf32"},
                                       {"--filter-shape", "6,2,3,3", "--filter-shape"}}) {
    std::vector<std::string> args = kValidGrouped;
    for (std::size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == b.flag) args[i + 1] = b.value;
    }
    if (b.flag == "--dtype") args.push_back("--hf32");
    const ProcessResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << b.flag;
    EXPECT_NE(r.err.find(b.needle), std::string::npos) << r.err;
    if (b.flag != "--filter-shape") {
      EXPECT_NE(r.out.find("valid: no"), std::string::npos) << r.out;
      EXPECT_NE(r.out.find(b.needle), std::string::npos) << r.out;
    }
  }
}

const std::vector<std::string> kTinyBench = {"bench",
                                             "--out-backprop-shape",
                                             "1,2,3,3,4",
                                             "--filter-shape",
                                             "4,2,2,2,2",
                                             "--input-size",
                                             "1,3,4,4,2",
                                             "--strides",
                                             "1,1,1,1,1",
                                             "--pads",
                                             "0,0,0,0,0,0",
                                             "--repeat",
                                             "2",
                                             "--warmup",
                                             "1",
                                             "--threads",
                                             "1"};

TEST(Bench, JsonHasEveryFieldWithSensibleValues) {
  std::vector<std::string> args = kTinyBench;
  args.insert(args.end(), {"--json", "--name", "tiny", "--dtype", "bf16", "--filter-format", "DHWCN"});
  args[2] = "1,2,3,3,4";
  args[4] = "2,2,2,2,4";  // DHWCN filter [kD, kH, kW, Cin_g, Cout]
  const ProcessResult r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "one object per problem: " << r.out;
  const auto obj = parse_flat_json(r.out);
  const auto text = [&](const std::string& k) {
    EXPECT_TRUE(obj.count(k) && std::holds_alternative<std::string>(obj.at(k))) << k << " in " << r.out;
    return obj.count(k) && std::holds_alternative<std::string>(obj.at(k)) ? std::get<std::string>(obj.at(k))
                                                                          : "";
  };
  const auto number = [&](const std::string& k) {
    EXPECT_TRUE(obj.count(k) && std::holds_alternative<double>(obj.at(k))) << k << " in " << r.out;
    return obj.count(k) && std::holds_alternative<double>(obj.at(k)) ? std::get<double>(obj.at(k)) : -1.0;
  };
  EXPECT_EQ(text("name"), "tiny");
  EXPECT_EQ(text("dtype"), "bf16");
  EXPECT_EQ(text("data_format"), "NDHWC");
  EXPECT_EQ(text("filter_format"), "DHWCN");
  EXPECT_FALSE(text("isa").empty());
  EXPECT_FALSE(text("engine").empty());
  EXPECT_FALSE(text("cpu").empty());  // the processor's name, so figures can say where they were taken
  EXPECT_FALSE(text("uarch").empty());
  EXPECT_EQ(number("threads"), 1);
  for (const char* k : {"median_ms", "min_ms", "max_ms", "packed_median_ms", "gflops"})
    EXPECT_GT(number(k), 0) << k;
  EXPECT_LE(number("min_ms"), number("median_ms"));
  EXPECT_LE(number("median_ms"), number("max_ms"));
  // 2 * N * Cout * Do * Ho * Wo * Cin_g * kD * kH * kW
  EXPECT_EQ(number("flops"), 2.0 * 1 * 4 * 2 * 3 * 3 * 2 * 2 * 2 * 2);
  EXPECT_GE(number("workspace_bytes"), 0);
}

TEST(Bench, PeakSharesBesideEachCall) {
  std::vector<std::string> args = kTinyBench;
  args[6] = "1,2,4,4,2";     // y 2 x 4 x 4 ...
  args[10] = "1,0,0,0,0,0";  // ... and a front pad: of dy's 2 planes x 2 D taps, one pair falls on it
  args.insert(args.end(), {"--json", "--peak"});
  const ProcessResult r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto obj = parse_flat_json(r.out);
  const auto number = [&](const std::string& k) {
    EXPECT_TRUE(obj.count(k) && std::holds_alternative<double>(obj.at(k))) << k << " in " << r.out;
    return obj.count(k) && std::holds_alternative<double>(obj.at(k)) ? std::get<double>(obj.at(k)) : -1.0;
  };
  EXPECT_EQ(number("flops_inside"), number("flops") * 3 / 4);
  ASSERT_TRUE(obj.count("peak_instruction")) << r.out;
  const bool probed = std::get<std::string>(obj.at("peak_instruction")) != "none";
  if (!cpu_supports(Isa::avx2)) {
    EXPECT_FALSE(probed) << r.out;
    GTEST_SKIP() << "the CPU lacks AVX2: no multiply-add probe for the portable kernels";
  }
  ASSERT_TRUE(probed) << r.out;
  // fp32 runs FMA kernels whatever the CPU's highest level (on an AMX Xeon too): its probe is an FMA's.
  EXPECT_NE(std::get<std::string>(obj.at("peak_instruction")).find("vfmadd"), std::string::npos) << r.out;
  EXPECT_GT(number("peak_gflops"), 0);
  EXPECT_GT(number("of_peak"), 0);
  EXPECT_NEAR(number("inside_of_peak"), number("of_peak") * 3 / 4, 1e-5 * number("of_peak"));  // 6 digits

  // The portable kernels have no probe: the instruction says so and no share is made up.
  std::vector<std::string> portable_args = args;
  portable_args.insert(portable_args.end(), {"--isa", "portable"});
  const ProcessResult portable = run_cli(portable_args);
  ASSERT_EQ(portable.exit_code, 0) << portable.err;
  const auto none = parse_flat_json(portable.out);
  ASSERT_TRUE(none.count("peak_instruction")) << portable.out;
  EXPECT_EQ(std::get<std::string>(none.at("peak_instruction")), "none");
  EXPECT_EQ(none.count("of_peak"), 0u) << portable.out;

  std::vector<std::string> table_args = kTinyBench;
  table_args.push_back("--peak");
  const ProcessResult table = run_cli(table_args);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("of_peak"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find('%'), std::string::npos) << table.out;
}

TEST(Bench, TableAndErrors) {
  const ProcessResult table = run_cli(kTinyBench);
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("median_ms"), std::string::npos);
  EXPECT_EQ(table.out.rfind("cpu: ", 0), 0u) << table.out;
  EXPECT_NE(table.out.find("custom"), std::string::npos) << table.out;

  struct Bad {
    std::vector<std::string> extra;
    std::string needle;
  };
  for (const Bad& b : std::vector<Bad>{{{"--suite", "default"}, "--suite"},
                                       {{"--suite", "huge"}, "--suite"},
                                       {{"--repeat", "0"}, "--repeat"},
                                       {{"--warmup", "-1"}, "--warmup"},
                                       {{"--json=yes"}, "--json"}}) {
    std::vector<std::string> args = kTinyBench;
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (args[i] == b.extra[0])
        args.erase(args.begin() + static_cast<std::ptrdiff_t>(i),
                   args.begin() + static_cast<std::ptrdiff_t>(i) + 2);
    }
    args.insert(args.end(), b.extra.begin(), b.extra.end());
    const ProcessResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << b.needle << ": " << r.err;
    EXPECT_NE(r.err.find(b.needle), std::string::npos) << r.err;
  }
  const ProcessResult bad_suite = run_cli({"bench", "--suite", "default", "--groups", "2"});
  EXPECT_EQ(bad_suite.exit_code, 2);
  EXPECT_NE(bad_suite.err.find("--groups"), std::string::npos) << bad_suite.err;
  for (const std::vector<std::string>& bad_shapes : std::vector<std::vector<std::string>>{
           {"bench", "--suite", "default", "--shapes", "g,zz"}, {"bench", "--shapes", "g"}}) {
    const ProcessResult r = run_cli(bad_shapes);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("--shapes"), std::string::npos) << r.err;
  }
}

// --shapes picks a suite's problems by name, in suite order, in each suite; an unknown suite names the
// ones there are.
TEST(Bench, SuiteShapesSelectProblems) {
  struct Pick {
    std::string suite, first, second;  // `second,first` asked for; the suite lists `first` first
  };
  for (const Pick& pick : {Pick{"default", "g", "h"}, Pick{"extra", "k311", "depthwise"}}) {
    const ProcessResult r =
        run_cli({"bench", "--suite", pick.suite, "--shapes", pick.second + "," + pick.first, "--repeat", "1",
                 "--warmup", "0", "--threads", "1", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::size_t first = r.out.find("\"name\": \"" + pick.first + "\""),
                      second = r.out.find("\"name\": \"" + pick.second + "\"");
    EXPECT_NE(first, std::string::npos) << r.out;
    EXPECT_NE(second, std::string::npos) << r.out;
    EXPECT_LT(first, second) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
  }
  const ProcessResult bad = run_cli({"bench", "--suite", "huge"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("'huge' is not a suite (default, extra)"), std::string::npos) << bad.err;
  const ProcessResult not_there = run_cli({"bench", "--suite", "extra", "--shapes", "a"});
  EXPECT_EQ(not_there.exit_code, 2);
  EXPECT_NE(not_there.err.find("--shapes"), std::string::npos) << not_there.err;
}

// One row per instruction the CPU allows and thread count, and none for the others; rates positive and
// within what any CPU does (a wrong flop count per instruction would be off by orders of magnitude).
TEST(Peak, JsonRowsForEachInstructionTheCpuAllows) {
  const ProcessResult r = run_cli({"peak", "--threads", "2", "--seconds", "0.01", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, std::vector<double>> threads_by_isa;
  std::size_t start = 0;
  for (std::size_t end; (end = r.out.find('\n', start)) != std::string::npos; start = end + 1) {
    const auto obj = parse_flat_json(r.out.substr(start, end - start));
    ASSERT_TRUE(obj.count("isa") && obj.count("threads") && obj.count("gflops") && obj.count("instruction"))
        << r.out;
    const std::string isa = std::get<std::string>(obj.at("isa"));
    threads_by_isa[isa].push_back(std::get<double>(obj.at("threads")));
    const double gflops = std::get<double>(obj.at("gflops"));
    EXPECT_TRUE(std::isfinite(gflops) && gflops > 0) << isa << ": " << gflops;
    EXPECT_FALSE(std::get<std::string>(obj.at("instruction")).empty());
    EXPECT_FALSE(std::get<std::string>(obj.at("cpu")).empty());
  }
  EXPECT_EQ(start, r.out.size()) << "unterminated line in " << r.out;
  for (const Isa isa : {Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::amx_bf16}) {
    const auto rows = threads_by_isa.find(to_string(isa));
    if (!cpu_supports(isa)) {
      EXPECT_EQ(rows, threads_by_isa.end()) << to_string(isa) << " measured on a CPU without it";
      continue;
    }
    ASSERT_NE(rows, threads_by_isa.end()) << to_string(isa) << " missing from " << r.out;
    EXPECT_EQ(rows->second, (std::vector<double>{1, 2})) << to_string(isa);
  }
  for (const auto& [isa, rows] : threads_by_isa)
    EXPECT_TRUE(isa == "avx2" || isa == "avx512" || isa == "avx512_bf16" || isa == "amx_bf16") << isa;

  // --threads 0: all hardware threads, as without the flag.
  const ProcessResult table = run_cli({"peak", "--threads", "0", "--seconds", "0.01"});
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_EQ(table.out.rfind("cpu: ", 0), 0u) << table.out;
  EXPECT_NE(table.out.find("GFLOP/s"), std::string::npos) << table.out;

  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{{"--threads", "-1"},
                                                                                    {"--seconds", "0"},
                                                                                    {"--seconds", ""},
                                                                                    {"--seconds", " 0.5"},
                                                                                    {"--seconds", "nan"},
                                                                                    {"--seconds", "fast"},
                                                                                    {"--seconds", "0.1s"}}) {
    const ProcessResult bad = run_cli({"peak", flag, value});
    EXPECT_EQ(bad.exit_code, 2) << flag << " " << value;
    EXPECT_NE(bad.err.find(flag), std::string::npos) << bad.err;
  }
}

// --tile-loops: after the peaks, a row per tile loop (a kernel set the CPU allows), filter in L1 and from L2,
// on 1 and 2 threads, each with its share of the same instruction's peak on as many threads; without the
// flag, none. The share is checked as arithmetic on the printed rates, never against a bound on timing:
// with 10 ms probes on a busy machine a tile loop can outrun its peak's measurement twofold.
TEST(Peak, TileLoopRowsFollowThePeaksWithTheirShares) {
  const ProcessResult r = run_cli({"peak", "--threads", "2", "--seconds", "0.01", "--tile-loops", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, int> loops_by_isa;
  std::map<std::pair<std::string, double>, double> peak_by_isa_threads;
  std::size_t peaks = 0, loops = 0, start = 0;
  for (std::size_t end; (end = r.out.find('\n', start)) != std::string::npos; start = end + 1) {
    const auto obj = parse_flat_json(r.out.substr(start, end - start));
    const std::string isa = std::get<std::string>(obj.at("isa"));
    const double threads = std::get<double>(obj.at("threads"));
    const double gflops = std::get<double>(obj.at("gflops"));
    EXPECT_TRUE(std::isfinite(gflops) && gflops > 0) << r.out;
    if (obj.count("instruction")) {
      EXPECT_EQ(loops, 0u) << "a peak after the tile loops in " << r.out;
      ++peaks;
      peak_by_isa_threads[{isa, threads}] = gflops;
      continue;
    }
    ASSERT_TRUE(obj.count("tile") && obj.count("filter") && obj.count("of_peak") && obj.count("threads"))
        << r.out;
    ++loops;
    ++loops_by_isa[isa];
    const std::string filter = std::get<std::string>(obj.at("filter"));
    EXPECT_TRUE(filter == "L1" || filter == "L2") << filter;
    // of_peak is printed to 4 digits, the rates to 6.
    const auto peak = peak_by_isa_threads.find({isa, threads});
    ASSERT_NE(peak, peak_by_isa_threads.end()) << "no " << isa << " peak on " << threads << " threads";
    const double share = std::get<double>(obj.at("of_peak"));
    EXPECT_NEAR(share, gflops / peak->second, 1e-3 * share) << std::get<std::string>(obj.at("tile"));
  }
  EXPECT_EQ(start, r.out.size()) << "unterminated line in " << r.out;
  // Each tile: filter in L1 and from L2, on 1 and 2 threads (AVX-512 has two tiles: single-tap and shared).
  for (const Isa isa : {Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::amx_bf16})
    EXPECT_EQ(loops_by_isa[to_string(isa)], !cpu_supports(isa)   ? 0
                                            : isa == Isa::avx512 ? 8
                                                                 : 4)
        << to_string(isa) << " in " << r.out;
  if (peaks == 0) GTEST_SKIP() << "no instruction set with a peak probe on this CPU";
  const ProcessResult plain = run_cli({"peak", "--threads", "2", "--seconds", "0.01", "--json"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out.find("\"tile\""), std::string::npos) << plain.out;
}

TEST(Demo, QuickDemoPassesItsCheck) {
  const ProcessResult r = run_cli({"demo", "--quick", "--threads", "2"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("demo passed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GFLOP/s"), std::string::npos);
  EXPECT_EQ(r.out.find("FAILED"), std::string::npos);
}

TEST(Help, EveryCommandHasHelpAndVersionWorks) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{{"--help"},
                                                                                    {"run", "--help"},
                                                                                    {"validate", "--help"},
                                                                                    {"demo", "--help"},
                                                                                    {"bench", "--help"},
                                                                                    {"peak", "--help"}}) {
    const ProcessResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 0) << args[0];
    EXPECT_NE(r.out.find("usage: conv3d-dx"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("Exit status"), std::string::npos) << r.out;
  }
  EXPECT_NE(run_cli({"run", "--help"}).out.find("--out-backprop DY.npy"), std::string::npos);
  const ProcessResult v = run_cli({"--version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.out.rfind("conv3d-dx ", 0), 0u) << v.out;

  const ProcessResult none = run_cli({});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("usage"), std::string::npos);
  const ProcessResult unknown = run_cli({"frobnicate"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("frobnicate"), std::string::npos);
}

}  // namespace
}  // namespace conv3d_dx::cli::testing
