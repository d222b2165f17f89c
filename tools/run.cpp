// `conv3d-dx run` (files in, y.npy out) and `conv3d-dx validate` (shapes in, a report out).
#include <algorithm>
#include <chrono>
#include <iostream>
#include <sstream>

#include "commands.hpp"
#include "cpu/support.hpp"
#include "npy.hpp"
#include "problem_args.hpp"

namespace conv3d_dx::cli {

namespace {

const char* const kRunHelp =
    R"(usage: conv3d-dx run --out-backprop DY.npy --filter W.npy --input-size a,b,c,d,e --strides a,b,c,d,e
                     --pads f,b,t,b,l,r [options] -o Y.npy

Computes y = dL/dx of a 3-D convolution (Conv3DBackpropInputV2) from out_backprop (dy) and the filter and
writes it to Y.npy. input-size, strides and dilations are in data-format order, like the operator's
attributes; pads are [front, back, top, bottom, left, right].

.npy convention: '<f4' fp32, '<f2' fp16, '<u2' raw bf16 bits, '|u1' raw hifloat8 or float8_e4m3fn codes
(C order; format versions 1.0, 2.0 and 3.0 are read). Without --dtype the files' type decides ('<u2' needs
--dtype bf16, '|u1' needs --dtype hif8 or fp8_e4m3fn). y is written in the input dtype (or --output-dtype)
with the same convention, C order, 4-D when input-size has 4 values (then 4-D inputs are accepted too, with
D = 1 inserted). y is written to a temporary file next to Y.npy and renamed into place, so on failure
(including SIGINT, SIGTERM and SIGHUP) Y.npy is neither created nor changed and no temporary file is left;
an existing Y.npy keeps its mode and owner, a symbolic link is followed, and an output that is not a regular
file (a FIFO, a device, /dev/stdout on a pipe) is written in place.

Exit status: 0 success; 2 invalid parameters, including files whose dtype, rank or shape contradict the
parameters or each other; 1 other failures: a file that cannot be read or is not a usable .npy (missing,
bad magic, truncated, Fortran order, big-endian or unsupported dtype), an output that cannot be written,
out of memory.

options:
)";

const char* const kValidateHelp =
    R"(usage: conv3d-dx validate --out-backprop-shape a,b,c,d,e --filter-shape a,b,c,d,e --input-size a,b,c,d,e
                          --strides a,b,c,d,e --pads f,b,t,b,l,r [--dtype D] [options]

Checks a problem without data: prints the resolved problem, whether it is valid (and why not), and which
Ascend products would accept it (Ascend compatibility report). Shapes are in data-format order for
out_backprop and in filter-format order for the filter. --dtype defaults to fp32.

Exit status: 0 valid, 2 invalid (the reason is printed), 1 other failures.

options:
)";

std::vector<FlagSpec> run_flags() {
  std::vector<FlagSpec> flags = {
      {"--out-backprop", "DY.npy", "out_backprop (dy) in data-format order"},
      {"--filter", "W.npy", "the filter in filter-format order"},
      {"-o", "Y.npy", "where to write y (= dL/dx)"},
  };
  for (FlagSpec& f : attribute_flags()) flags.push_back(std::move(f));
  return flags;
}

std::vector<FlagSpec> validate_flags() {
  std::vector<FlagSpec> flags = {
      {"--out-backprop-shape", "a,b,c,d,e", "shape of out_backprop in data-format order"},
      {"--filter-shape", "a,b,c,d,e", "shape of the filter in filter-format order"},
  };
  for (FlagSpec& f : attribute_flags()) flags.push_back(std::move(f));
  return flags;
}

DType dtype_of_file(const npy::Array& a, const std::string& path) {
  if (a.descr == "<f4") return DType::f32;
  if (a.descr == "<f2") return DType::f16;
  if (a.descr == "<u2") {
    throw usage_error("--dtype", path + " holds '<u2' raw codes: pass --dtype bf16");
  }
  throw usage_error("--dtype", path + " holds '|u1' raw codes: pass --dtype hif8 or --dtype fp8_e4m3fn");
}

// The input dtype: --dtype when given (each file must then store it), else the out_backprop file's type.
DType resolve_dtype(const ParsedAttributes& pa, const npy::Array& dy, const std::string& dy_path,
                    const npy::Array& w, const std::string& w_path) {
  const DType dtype = pa.dtype ? *pa.dtype : dtype_of_file(dy, dy_path);
  const std::string want = npy::descr_for(dtype);
  if (dy.descr != want) {
    throw usage_error("--out-backprop", dy_path + " holds '" + dy.descr + "' but " + to_string(dtype) +
                                            " is stored as '" + want + "'");
  }
  if (w.descr != want) {
    throw usage_error("--filter", w_path + " holds '" + w.descr + "' but out_backprop is " +
                                      to_string(dtype) + ", stored as '" + want +
                                      "'; both must have the same dtype");
  }
  return dtype;
}

const void* data_or_dummy(const std::vector<std::byte>& v) {
  static const std::byte dummy[16] = {};
  return v.empty() ? dummy : v.data();
}

std::string dims(const std::array<std::int64_t, 3>& v, const char* sep = "x") {
  return std::to_string(v[0]) + sep + std::to_string(v[1]) + sep + std::to_string(v[2]);
}

void print_problem(std::ostream& out, const Problem& p) {
  out << "problem: " << p.describe() << "\n"
      << "  y (= dL/dx):        N=" << p.N << " C=" << p.Cin() << " D=" << p.y_size[0] << " H=" << p.y_size[1]
      << " W=" << p.y_size[2] << "  " << to_string(p.data_format) << "  " << to_string(p.y_dtype) << "\n"
      << "  out_backprop (dy):  N=" << p.N << " C=" << p.Cout() << " D=" << p.dy_size[0]
      << " H=" << p.dy_size[1] << " W=" << p.dy_size[2] << "  " << to_string(p.data_format) << "  "
      << to_string(p.dy_dtype) << "\n"
      << "  filter:             Cout=" << p.Cout() << " Cin/G=" << p.Cin_g << " kD=" << p.kernel[0]
      << " kH=" << p.kernel[1] << " kW=" << p.kernel[2] << "  " << to_string(p.filter_format) << "  "
      << to_string(p.filter_dtype) << "\n"
      << "  groups " << p.G << ", stride " << dims(p.stride) << ", dilation " << dims(p.dilation)
      << ", pads front/back " << p.pad_front[0] << "/" << p.pad_back[0] << ", top/bottom " << p.pad_front[1]
      << "/" << p.pad_back[1] << ", left/right " << p.pad_front[2] << "/" << p.pad_back[2] << "\n"
      << "  input rounding: " << to_string(p.input_rounding) << ", output overflow: " << to_string(p.overflow)
      << (p.overflow == OverflowMode::ieee ? " (inf/NaN)" : "") << "\n"
      << "  work: " << p.flops() / 1e9 << " GFLOP (2*N*Cout*Do*Ho*Wo*Cin/G*kD*kH*kW)\n";
}

}  // namespace

int run_command(const std::vector<std::string>& argv) {
  const std::vector<FlagSpec> flags = run_flags();
  if (wants_help(argv)) {
    std::cout << kRunHelp << format_flags(flags);
    return 0;
  }
  const Args args(argv, flags, "run");
  const std::string dy_path = args.required("--out-backprop");
  const std::string w_path = args.required("--filter");
  const std::string y_path = args.required("-o");
  const ParsedAttributes pa = parse_attributes(args);

  const npy::Array dy = npy::read(dy_path);
  const npy::Array w = npy::read(w_path);
  const DType dtype = resolve_dtype(pa, dy, dy_path, w, w_path);
  const Shape5 dy_shape = to_5d(dy.shape, pa.attrs.data_format, pa.two_d(), "--out-backprop");
  const Shape5 w_shape = to_5d(w.shape, pa.filter_format, pa.two_d(), "--filter");
  const Problem problem = validate(make_spec(pa, dy_shape, w_shape, dtype));
  Options options = pa.options;
  options.keep_filter = false;  // one call
  Plan plan(problem, options);

  const std::size_t y_bytes = static_cast<std::size_t>(problem.y_elements()) * dtype_size(problem.y_dtype);
  const cpu::AlignedPtr y = cpu::alloc_zeroed64(y_bytes, "y");  // 64-byte aligned (bench says why)
  npy::AtomicWriter out(y_path);  // fails here, before the work, when the directory is not writable
  const auto start = std::chrono::steady_clock::now();
  plan.execute(data_or_dummy(dy.data), data_or_dummy(w.data), y.get());
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  out.commit(npy::descr_for(problem.y_dtype), y_file_shape(pa), y.get(), y_bytes);

  if (pa.options.verbose) {
    print_problem(std::cerr, problem);
    std::cerr << "engine: " << plan.engine_name() << " (" << plan.threads() << " threads)\n";
    for (const std::string& why : plan.declined()) std::cerr << "  declined: " << why << "\n";
    std::cerr << "time: " << ms << " ms, " << problem.flops() / (ms * 1e6) << " GFLOP/s\nwrote " << y_path
              << "\n";
  }
  return 0;
}

int validate_command(const std::vector<std::string>& argv) {
  const std::vector<FlagSpec> flags = validate_flags();
  if (wants_help(argv)) {
    std::cout << kValidateHelp << format_flags(flags);
    return 0;
  }
  const Args args(argv, flags, "validate");
  const ParsedAttributes pa = parse_attributes(args);
  const Shape5 dy5 = parse_shape(args, "--out-backprop-shape", pa.attrs.data_format, pa.two_d());
  const Shape5 w5 = parse_shape(args, "--filter-shape", pa.filter_format, pa.two_d());
  const ProblemSpec spec = make_spec(pa, dy5, w5, pa.dtype.value_or(DType::f32));

  Problem problem;
  try {
    problem = validate(spec);
  } catch (const Error& e) {
    const CliError err = from_library_error(e);
    std::cout << "valid: no\n  " << err.what() << "\n";
    throw err;
  }
  print_problem(std::cout, problem);
  std::cout << "valid: yes\nAscend compatibility:\n";
  for (const ProductVerdict& v : ascend_compatibility(problem)) {
    std::cout << "  " << v.product << ": " << (v.accepted ? "accepted" : "not accepted") << "\n";
    for (const std::string& why : v.violations) std::cout << "    - " << why << "\n";
  }
  return 0;
}

}  // namespace conv3d_dx::cli
