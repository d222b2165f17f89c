#include "problem_args.hpp"

#include <cctype>
#include <limits>

#include "problem/validate.hpp"

namespace conv3d_dx::cli {

std::vector<FlagSpec> attribute_flags() {
  return {
      {"--input-size", "a,b,c,d,e", "shape of y in data-format order; 4 values mean a 2-D problem (D = 1)"},
      {"--strides", "a,b,c,d,e", "strides in data-format order (N and C must be 1); 4 values for 2-D"},
      {"--pads", "f,b,t,b,l,r", "pads [front, back, top, bottom, left, right]; 4 values (t,b,l,r) for 2-D"},
      {"--dilations", "a,b,c,d,e", "dilations in data-format order (default all 1); 4 values for 2-D"},
      {"--groups", "G", "number of groups (default 1)"},
      {"--data-format", "NDHWC|NCDHW", "layout of out_backprop and y (default NDHWC)"},
      {"--filter-format", "NCDHW|NDHWC|DHWCN", "layout of the filter (default NCDHW)"},
      {"--dtype", "fp32|fp16|bf16|hif8|fp8_e4m3fn", "element type of out_backprop and the filter"},
      {"--output-dtype", "D", "element type of y (default: the input type; fp32 is allowed for any)"},
      {"--hf32", "", "fp32 only: round inputs to HF32 before multiplying (enable_hf32)"},
      {"--saturate", "", "clamp overflowing outputs to the largest finite value instead of inf/NaN"},
      {"--threads", "T", "worker threads (default 0: all hardware threads; at most 4 x that)"},
      {"--isa", "best|amx_bf16|avx512_bf16|avx512|avx2|portable|reference",
       "engine instruction set (default best)"},
      {"--verbose", "", "print the resolved problem, the engine chosen and why others declined"},
      {"--max-memory", "BYTES",
       "most memory the plan may allocate beyond the tensors; K, M, G suffixes (default: no limit)"},
  };
}

namespace {

DType parse_dtype_flag(const std::string& flag, const std::string& text) {
  try {
    return parse_dtype(text);
  } catch (const Error&) {
    throw usage_error(flag, "'" + text + "' is not a dtype (fp32, fp16, bf16, hif8 or fp8_e4m3fn)");
  }
}

Layout parse_layout_flag(const std::string& flag, const std::string& text, bool filter) {
  const char* allowed = filter ? "NCDHW, NDHWC or DHWCN" : "NDHWC or NCDHW";
  Layout l{};
  try {
    l = parse_layout(text);
  } catch (const Error&) {
    throw usage_error(flag, "'" + text + "' is not one of " + allowed);
  }
  if (!filter && l == Layout::DHWCN) throw usage_error(flag, "'" + text + "' is not one of " + allowed);
  return l;
}

}  // namespace

std::vector<std::size_t> value_counts(bool two_d) {
  return two_d ? std::vector<std::size_t>{5, 4} : std::vector<std::size_t>{5};
}

ParsedAttributes parse_attributes(const Args& args, bool geometry_optional) {
  ParsedAttributes pa;
  Attributes& a = pa.attrs;
  if (const auto v = args.get("--data-format")) a.data_format = parse_layout_flag("--data-format", *v, false);
  if (const auto v = args.get("--filter-format"))
    pa.filter_format = parse_layout_flag("--filter-format", *v, true);

  if (!geometry_optional || args.has("--input-size")) {
    a.input_size = parse_int_list("--input-size", args.required("--input-size"), value_counts(true));
  }
  const bool two_d = pa.two_d();
  const std::vector<std::size_t> counts = value_counts(two_d);
  if (!geometry_optional || args.has("--strides")) {
    a.strides = expand_to_5d(parse_int_list("--strides", args.required("--strides"), counts), a.data_format);
  }
  if (!geometry_optional || args.has("--pads")) {
    std::vector<std::int64_t> p =
        parse_int_list("--pads", args.required("--pads"),
                       two_d ? std::vector<std::size_t>{6, 4} : std::vector<std::size_t>{6});
    if (p.size() == 4) p.insert(p.begin(), {0, 0});
    a.pads = {p[0], p[1], p[2], p[3], p[4], p[5]};
  }
  if (const auto v = args.get("--dilations")) {
    a.dilations = expand_to_5d(parse_int_list("--dilations", *v, counts), a.data_format);
  }
  if (const auto v = args.get("--groups")) {
    a.groups = parse_int("--groups", *v, std::numeric_limits<std::int64_t>::min(),
                         std::numeric_limits<std::int64_t>::max());
  }
  a.enable_hf32 = args.has("--hf32");
  if (const auto v = args.get("--dtype")) pa.dtype = parse_dtype_flag("--dtype", *v);
  if (const auto v = args.get("--output-dtype")) pa.output_dtype = parse_dtype_flag("--output-dtype", *v);
  if (args.has("--saturate")) pa.overflow = OverflowMode::saturate;
  if (const auto v = args.get("--threads")) {
    // The upper limit depends on the machine; Plan checks it.
    pa.options.threads = static_cast<int>(parse_int("--threads", *v, 0, std::numeric_limits<int>::max()));
  }
  if (const auto v = args.get("--isa")) {
    try {
      pa.options.isa = parse_isa(*v);
    } catch (const Error&) {
      throw usage_error(
          "--isa",
          "'" + *v + "' is not an ISA (best, amx_bf16, avx512_bf16, avx512, avx2, portable, reference)");
    }
  }
  pa.options.verbose = args.has("--verbose");
  if (const auto v = args.get("--max-memory")) pa.options.max_memory_bytes = parse_bytes("--max-memory", *v);
  return pa;
}

Shape5 to_5d(const std::vector<std::int64_t>& shape, Layout layout, bool two_d, const std::string& flag) {
  if (shape.size() == 5 || (shape.size() == 4 && two_d)) return expand_to_5d(shape, layout);
  throw CliError(2, "invalid " + flag + ": the array has " + std::to_string(shape.size()) +
                        " dimensions; expected 5" + (two_d ? " or 4 (a 2-D problem)" : "") + " in " +
                        to_string(layout) + " order");
}

Shape5 parse_shape(const Args& args, const std::string& flag, Layout layout, bool two_d) {
  return to_5d(parse_int_list(flag, args.required(flag), value_counts(two_d)), layout, two_d, flag);
}

ProblemSpec make_spec(const ParsedAttributes& pa, const Shape5& dy_shape, const Shape5& filter_shape,
                      DType dtype) {
  ProblemSpec spec;
  spec.attrs = pa.attrs;
  spec.overflow = pa.overflow;
  spec.out_backprop = TensorView::contiguous(nullptr, dtype, pa.attrs.data_format, dy_shape);
  spec.filter = TensorView::contiguous(nullptr, dtype, pa.filter_format, filter_shape);
  Shape5 y_shape{};  // zeros when input_size has a wrong count, which validate() reports
  const std::vector<std::int64_t>& in = pa.attrs.input_size;
  if (in.size() == 5 || in.size() == 4) y_shape = expand_to_5d(in, pa.attrs.data_format);
  spec.y = TensorView::contiguous(nullptr, pa.output_dtype.value_or(dtype), pa.attrs.data_format, y_shape);
  return spec;
}

std::vector<std::int64_t> y_file_shape(const ParsedAttributes& pa) { return pa.attrs.input_size; }

CliError from_library_error(const Error& e) {
  const bool invalid = e.code() == ErrorCode::invalid_argument || e.code() == ErrorCode::null_pointer ||
                       e.code() == ErrorCode::size_overflow || e.code() == ErrorCode::unsupported;
  // Only invalid parameters are named as such; "out of memory: ..." and the like speak for themselves.
  const std::string what = invalid && !e.parameter().empty() ? "invalid " + e.parameter() + ": " + e.what()
                                                             : std::string(e.what());
  return CliError(invalid ? 2 : 1, what);
}

std::int64_t parse_bytes(const std::string& flag, const std::string& text) {
  static constexpr std::pair<char, int> kSuffixes[] = {{'K', 10}, {'M', 20}, {'G', 30}, {'T', 40}};
  int shift = 0;
  std::string digits = text;
  const char last =
      digits.empty() ? '\0' : static_cast<char>(std::toupper(static_cast<unsigned char>(digits.back())));
  for (const auto& [suffix, bits] : kSuffixes)
    if (last == suffix) shift = bits;
  if (shift > 0) digits.pop_back();
  const std::int64_t max = std::numeric_limits<std::int64_t>::max() >> shift;
  return parse_int(flag, digits, 0, max) << shift;
}

std::int64_t element_count(const Shape5& shape) {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  return n;
}

}  // namespace conv3d_dx::cli
