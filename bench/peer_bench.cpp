// conv3d_dx_peer_bench: conv3d-dx against oneDNN's convolution_backward_data on the benchmark suite, both
// given the user's plain tensors. For every shape, dtype and data format it times
//   conv3d-dx       Plan::execute(dy, filter, y): plain tensors in and out, the filter packed (or read in
//                   place) every call;
//   oneDNN plain    a primitive created on the plain layouts (ncdhw/ndhwc data, oidhw/goidhw weights);
//   oneDNN blocked  a primitive created with format_tag::any plus the reorders a caller with plain tensors
//                   pays every step: dy and the filter into the primitive's layouts, y back out;
//   blocked-only    that primitive alone on data already in its own layouts;
// and checks once that conv3d-dx's y agrees with oneDNN's.
#include <omp.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <new>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "conv3d_dx/conv3d_dx.hpp"
#include "tools/suite.hpp"

namespace {

using conv3d_dx::DType;
using conv3d_dx::Layout;
using conv3d_dx::suite::Shape;
using dnnl::memory;

struct Config {
  std::string suite = "default";
  std::vector<std::string> shapes;  // empty: the whole suite
  std::vector<DType> dtypes{DType::f32, DType::bf16};
  std::vector<Layout> layouts{Layout::NCDHW, Layout::NDHWC};
  int threads = 0;  // 0: every CPU this process may run on
  int repeat = 10;
  int warmup = 2;
  double max_seconds = 5;  // per route and problem: stop repeating (after one timed run) past this
  bool json = false;
};

[[noreturn]] void usage(int code) {
  std::fputs(
      "usage: conv3d_dx_peer_bench [options]\n"
      "  --suite NAME          default or extra (tools/suite.hpp; default: default)\n"
      "  --shapes a,b,...      suite shapes to run (default: all)\n"
      "  --dtypes fp32,bf16    input dtypes (default: both)\n"
      "  --layouts NCDHW,NDHWC data formats (default: both)\n"
      "  --threads T           threads for both libraries (default: all CPUs of this process)\n"
      "  --repeat R            timed runs per route (default 10)\n"
      "  --warmup W            untimed runs per route first (default 2)\n"
      "  --max-seconds S       stop a route's timed runs once they add up to S seconds (default 5)\n"
      "  --json                one JSON object per problem on stdout; the tables go to stderr\n"
      "exit status 1 when conv3d-dx fails or disagrees with oneDNN on some problem\n",
      code == 0 ? stdout : stderr);
  std::exit(code);
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

Config parse_args(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", arg.c_str());
        usage(2);
      }
      return argv[++i];
    };
    auto number = [&](double low) {
      const std::string v = value();
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(x >= low)) {
        std::fprintf(stderr, "%s is %s but must be a number >= %g\n", arg.c_str(), v.c_str(), low);
        usage(2);
      }
      return x;
    };
    if (arg == "--suite") {
      c.suite = value();
    } else if (arg == "--shapes") {
      c.shapes = split(value());
    } else if (arg == "--dtypes") {
      c.dtypes.clear();
      for (const auto& d : split(value())) c.dtypes.push_back(conv3d_dx::parse_dtype(d));
    } else if (arg == "--layouts") {
      c.layouts.clear();
      for (const auto& l : split(value())) c.layouts.push_back(conv3d_dx::parse_layout(l));
    } else if (arg == "--threads") {
      c.threads = static_cast<int>(number(0));
    } else if (arg == "--repeat") {
      c.repeat = static_cast<int>(number(1));
    } else if (arg == "--warmup") {
      c.warmup = static_cast<int>(number(0));
    } else if (arg == "--max-seconds") {
      c.max_seconds = number(0);
    } else if (arg == "--json") {
      c.json = true;
    } else if (arg == "--help" || arg == "-h") {
      usage(0);
    } else {
      std::fprintf(stderr, "unknown argument %s\n", arg.c_str());
      usage(2);
    }
  }
  for (DType d : c.dtypes)
    if (d != DType::f32 && d != DType::bf16) {
      std::fprintf(stderr, "--dtypes: oneDNN is compared in fp32 and bf16 only, not %s\n",
                   conv3d_dx::to_string(d));
      usage(2);
    }
  for (Layout l : c.layouts)
    if (l == Layout::DHWCN) {
      std::fputs("--layouts: NCDHW or NDHWC\n", stderr);
      usage(2);
    }
  return c;
}

// Confines the process to `requested` of its CPUs (0: all); returns the thread count to use.
int confine_affinity(int requested) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return requested > 0 ? requested : 1;
  const int available = CPU_COUNT(&allowed);
  if (requested <= 0 || requested >= available) {
    if (requested > available)
      std::fprintf(stderr, "warning: --threads %d but only %d CPUs; oneDNN will use %d\n", requested,
                   available, available);
    return requested > 0 ? requested : available;
  }
  cpu_set_t chosen;
  CPU_ZERO(&chosen);
  for (int cpu = 0, taken = 0; cpu < CPU_SETSIZE && taken < requested; ++cpu)
    if (CPU_ISSET(cpu, &allowed)) {
      CPU_SET(cpu, &chosen);
      ++taken;
    }
  if (sched_setaffinity(0, sizeof chosen, &chosen) != 0) std::perror("sched_setaffinity");
  return requested;
}

// Both libraries use the same CPUs and thread count: the process is confined to T CPUs before oneDNN starts
// its thread pool (TBB sizes it from the affinity mask then; OpenMP read the mask at load time, so it is told
// T), and conv3d-dx is asked for T threads.
int confine_threads(int requested) {
  const int threads = confine_affinity(requested);
  omp_set_num_threads(threads);
  return threads;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

// Tensor memory, aligned like a framework's tensors.
struct Buffer {
  explicit Buffer(std::size_t bytes)
      : size(bytes),
        data(static_cast<unsigned char*>(::operator new(std::max<std::size_t>(bytes, 1), kAlign))) {}
  ~Buffer() { ::operator delete(data, kAlign); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  static constexpr std::align_val_t kAlign{64};
  std::size_t size;
  unsigned char* data;
};

std::uint16_t to_bf16(float f) {
  const auto u = std::bit_cast<std::uint32_t>(f);
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(std::uint16_t h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }

// Uniform random values in [-1, 1), rounded to bf16 (nearest even) for bf16.
void fill_random(Buffer& b, DType dtype, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  if (dtype == DType::f32) {
    auto* p = reinterpret_cast<float*>(b.data);
    for (std::size_t i = 0; i < b.size / 4; ++i) p[i] = dist(rng);
  } else {
    auto* p = reinterpret_cast<std::uint16_t*>(b.data);
    for (std::size_t i = 0; i < b.size / 2; ++i) p[i] = to_bf16(dist(rng));
  }
}

std::vector<float> to_float(const void* data, DType dtype, std::size_t n) {
  std::vector<float> out(n);
  if (dtype == DType::f32) {
    std::memcpy(out.data(), data, n * 4);
  } else {
    const auto* p = static_cast<const std::uint16_t*>(data);
    for (std::size_t i = 0; i < n; ++i) out[i] = from_bf16(p[i]);
  }
  return out;
}

struct Timing {
  double median_ms = NAN, min_ms = NAN;
  int runs = 0;
  bool ok() const { return runs > 0; }
};

Timing time_runs(const std::function<void()>& run, const Config& c) {
  using clock = std::chrono::steady_clock;
  // A pause first, so the threads of the route before (libgomp's, conv3d-dx's) stop spinning on the cores
  // this one is about to use. AMD EPYC Zen 3, 2 threads, fp32 NCDHW a: conv3d-dx 29.8-33.4 ms (medians of 7
  // runs) without it, 26.9-27.1 with 100 ms (its own CLI bench: 27-28); oneDNN's routes within noise. After
  // oneDNN's reference route (seconds per call) 100 ms was not enough: NDHWC vae after a's routes 99-113 ms,
  // with 1 s 78 (the CLI bench 78.7, and 78.4 with OMP_WAIT_POLICY=passive, which slowed oneDNN instead).
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  double total = 0;  // warmup runs stop early too once they pass the time limit
  for (int i = 0; i < c.warmup && total < c.max_seconds * 1e3; ++i) {
    const auto t0 = clock::now();
    run();
    total += std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  }
  std::vector<double> ms;
  total = 0;
  for (int i = 0; i < c.repeat && (i == 0 || total < c.max_seconds * 1e3); ++i) {
    const auto t0 = clock::now();
    run();
    ms.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
    total += ms.back();
  }
  std::sort(ms.begin(), ms.end());
  const std::size_t n = ms.size();
  return {n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]), ms.front(), static_cast<int>(n)};
}

// One benchmark case: a suite shape in a dtype and data format.
struct Case {
  Shape shape;
  DType dtype;
  Layout layout;
  conv3d_dx::suite::CanonicalShapes dims;
  std::array<std::int64_t, 3> pad_back{};  // the smallest back pads >= 0 consistent with the shapes
  double flops = 0;

  std::string name() const { return shape.name; }
  std::int64_t count(const std::array<std::int64_t, 5>& d) const { return d[0] * d[1] * d[2] * d[3] * d[4]; }
};

Case make_case(const Shape& s, DType dtype, Layout layout) {
  Case p{s, dtype, layout, conv3d_dx::suite::canonical_shapes(s), {}, 0};
  for (int a = 0; a < 3; ++a) {
    const std::int64_t reach = (p.dims.dy[2 + a] - 1) * s.stride[a] + (s.kernel[a] - 1) * s.dilation[a] + 1;
    p.pad_back[a] = std::max<std::int64_t>(0, reach - s.x[a] - s.pad[a]);
  }
  p.flops = 2.0 * static_cast<double>(p.count(p.dims.dy)) * static_cast<double>(s.Cin / s.groups) *
            static_cast<double>(s.kernel[0] * s.kernel[1] * s.kernel[2]);
  return p;
}

// Canonical NCDHW dims reordered to the data format's order (what conv3d-dx's API takes).
std::array<std::int64_t, 5> in_layout(const std::array<std::int64_t, 5>& ncdhw, Layout layout) {
  if (layout == Layout::NCDHW) return ncdhw;
  return {ncdhw[0], ncdhw[2], ncdhw[3], ncdhw[4], ncdhw[1]};
}

struct Inputs {
  Buffer dy, filter;
  std::size_t y_bytes;
};

struct C3dxResult {
  Timing time;
  std::string engine;
  std::size_t workspace = 0;
  std::vector<float> y;
};

// The case as conv3d-dx's operator-level description (filter NCDHW = [Cout, Cin/G, kD, kH, kW]).
conv3d_dx::ProblemSpec to_spec(const Case& p, const void* dy, const void* filter, void* y) {
  const Shape& s = p.shape;
  conv3d_dx::ProblemSpec spec;
  spec.attrs.data_format = p.layout;
  const auto y_shape = in_layout(p.dims.y, p.layout);
  spec.attrs.input_size.assign(y_shape.begin(), y_shape.end());
  const int first_spatial = p.layout == Layout::NCDHW ? 2 : 1;
  for (int a = 0; a < 3; ++a) {
    spec.attrs.strides[static_cast<std::size_t>(first_spatial + a)] = s.stride[a];
    spec.attrs.dilations[static_cast<std::size_t>(first_spatial + a)] = s.dilation[a];
    spec.attrs.pads[static_cast<std::size_t>(2 * a)] = s.pad[a];
    spec.attrs.pads[static_cast<std::size_t>(2 * a + 1)] = p.pad_back[a];
  }
  spec.attrs.groups = s.groups;
  spec.out_backprop =
      conv3d_dx::TensorView::contiguous(dy, p.dtype, p.layout, in_layout(p.dims.dy, p.layout));
  spec.filter = conv3d_dx::TensorView::contiguous(filter, p.dtype, Layout::NCDHW, p.dims.filter);
  spec.y = conv3d_dx::TensorView::contiguous(y, p.dtype, p.layout, y_shape);
  return spec;
}

// The instruction-set level conv3d-dx runs at here (CONV3D_DX_ISA, else the best the CPU has).
std::string conv3d_dx_isa(const Case& p) {
  const conv3d_dx::Plan plan(conv3d_dx::validate(to_spec(p, nullptr, nullptr, nullptr)));
  return conv3d_dx::to_string(plan.isa());
}

C3dxResult run_conv3d_dx(const Case& p, const Inputs& in, int threads, const Config& c) {
  Buffer y(in.y_bytes);
  const conv3d_dx::ProblemSpec spec = to_spec(p, in.dy.data, in.filter.data, y.data);

  conv3d_dx::Options options;
  options.threads = threads;
  options.keep_filter = false;  // the filter is given with every call, as in training
  conv3d_dx::Plan plan(conv3d_dx::validate(spec), options);
  Buffer workspace(plan.workspace_bytes());
  C3dxResult r;
  r.engine = plan.engine_name();
  r.workspace = plan.workspace_bytes();
  r.time = time_runs([&] { plan.execute(in.dy.data, in.filter.data, y.data, workspace.data); }, c);
  r.y = to_float(y.data, p.dtype, static_cast<std::size_t>(p.count(p.dims.y)));
  return r;
}

struct OnednnRoute {
  Timing time;
  std::string impl;
  std::string error;
  std::vector<float> y;  // the plain y it produced (routes a and b)
};

struct OnednnResult {
  OnednnRoute plain, blocked, blocked_only;
  std::string blocked_layouts;  // what format_tag::any chose, for the report
};

memory::dims dims_of(const std::array<std::int64_t, 5>& a) { return memory::dims(a.begin(), a.end()); }

std::string describe_layouts(const memory::desc& y, const memory::desc& w, const memory::desc& dy,
                             const memory::desc& y_plain, const memory::desc& w_plain,
                             const memory::desc& dy_plain) {
  auto one = [](const memory::desc& chosen, const memory::desc& plain) {
    if (chosen == plain) return std::string("plain");
#if DNNL_VERSION_MAJOR >= 3
    const memory::dims inner = chosen.get_inner_blks();
#else
    const auto& blocking = chosen.data.format_desc.blocking;
    const memory::dims inner(blocking.inner_blks, blocking.inner_blks + blocking.inner_nblks);
#endif
    std::string text = inner.empty() ? "permuted" : "blocked";
    for (std::size_t i = 0; i < inner.size(); ++i) text += (i ? "x" : ":") + std::to_string(inner[i]);
    return text;
  };
  return "diff_src " + one(y, y_plain) + ", weights " + one(w, w_plain) + ", diff_dst " + one(dy, dy_plain);
}

OnednnResult run_onednn(const Case& p, const Inputs& in, dnnl::engine& eng, dnnl::stream& strm,
                        const Config& c) {
  const Shape& s = p.shape;
  const auto dt = p.dtype == DType::f32 ? memory::data_type::f32 : memory::data_type::bf16;
  const auto data_tag = p.layout == Layout::NCDHW ? memory::format_tag::ncdhw : memory::format_tag::ndhwc;
  memory::dims w_dims = dims_of(p.dims.filter);
  auto w_tag = memory::format_tag::oidhw;
  if (s.groups > 1) {  // oneDNN's grouped weights (g, oc/g, ic/g, kd, kh, kw): the same bytes as ours
    w_dims = {s.groups, s.Cout / s.groups, s.Cin / s.groups, s.kernel[0], s.kernel[1], s.kernel[2]};
    w_tag = memory::format_tag::goidhw;
  }
  const memory::dims strides(s.stride.begin(), s.stride.end()), pad_l(s.pad.begin(), s.pad.end()),
      pad_r(p.pad_back.begin(), p.pad_back.end());
  memory::dims dilates;  // oneDNN counts dilation from 0
  for (auto d : s.dilation) dilates.push_back(d - 1);

  const memory::desc y_md(dims_of(p.dims.y), dt, data_tag), dy_md(dims_of(p.dims.dy), dt, data_tag),
      w_md(w_dims, dt, w_tag);
  // backward_data needs a forward primitive descriptor as a hint.
  auto make_pd = [&](const memory::desc& y, const memory::desc& w, const memory::desc& dy) {
    const auto prop = dnnl::prop_kind::forward_training;
    const auto alg = dnnl::algorithm::convolution_direct;
#if DNNL_VERSION_MAJOR >= 3
    const dnnl::convolution_forward::primitive_desc hint(eng, prop, alg, y, w, dy, strides, dilates, pad_l,
                                                         pad_r);
    return dnnl::convolution_backward_data::primitive_desc(eng, alg, y, w, dy, strides, dilates, pad_l, pad_r,
                                                           hint);
#else  // oneDNN 2.x (Debian's libdnnl-dev) builds primitive descriptors from operation descriptors
    const dnnl::convolution_forward::primitive_desc hint(
        dnnl::convolution_forward::desc(prop, alg, y, w, dy, strides, dilates, pad_l, pad_r), eng);
    return dnnl::convolution_backward_data::primitive_desc(
        dnnl::convolution_backward_data::desc(alg, y, w, dy, strides, dilates, pad_l, pad_r), eng, hint);
#endif
  };
  // The user's tensors, in memory oneDNN allocates, filled with our data.
  auto user_memory = [&](const memory::desc& md, const void* data) {
    memory m(md, eng);
    if (data != nullptr) {
      void* dst = m.map_data();
      std::memcpy(dst, data, md.get_size());
      m.unmap_data(dst);
    }
    return m;
  };
  auto read_y = [&](memory& m) {
    void* src = m.map_data();
    auto y = to_float(src, p.dtype, static_cast<std::size_t>(p.count(p.dims.y)));
    m.unmap_data(src);
    return y;
  };
  memory dy_mem = user_memory(dy_md, in.dy.data), w_mem = user_memory(w_md, in.filter.data);
  OnednnResult r;

  // (a) the primitive on the plain layouts.
  try {
    const auto pd = make_pd(y_md, w_md, dy_md);
    r.plain.impl = pd.impl_info_str();
    memory y_mem = user_memory(y_md, nullptr);
    const dnnl::convolution_backward_data prim(pd);
    const std::unordered_map<int, memory> args{
        {DNNL_ARG_DIFF_DST, dy_mem}, {DNNL_ARG_WEIGHTS, w_mem}, {DNNL_ARG_DIFF_SRC, y_mem}};
    r.plain.time = time_runs(
        [&] {
          prim.execute(strm, args);
          strm.wait();
        },
        c);
    r.plain.y = read_y(y_mem);
  } catch (const dnnl::error& e) {
    r.plain.error = e.what();
  }

  // (b) and (c): the primitive in the layouts it prefers, with and without the reorders.
  try {
    const auto any = memory::format_tag::any;
    const auto pd = make_pd(memory::desc(dims_of(p.dims.y), dt, any), memory::desc(w_dims, dt, any),
                            memory::desc(dims_of(p.dims.dy), dt, any));
    r.blocked.impl = r.blocked_only.impl = pd.impl_info_str();
    r.blocked_layouts =
        describe_layouts(pd.diff_src_desc(), pd.weights_desc(), pd.diff_dst_desc(), y_md, w_md, dy_md);
    memory y_mem = user_memory(y_md, nullptr);
    // Reorders only where the chosen layout differs from the user's, as a framework would do.
    struct Reorder {
      dnnl::reorder prim;
      std::unordered_map<int, memory> args;
    };
    std::vector<Reorder> before, after;
    auto staged = [&](memory& user, const memory::desc& want, std::vector<Reorder>& list, bool into) {
      if (want == user.get_desc()) return user;
      memory inner(want, eng);
      memory &from = into ? user : inner, &to = into ? inner : user;
      list.push_back({dnnl::reorder(from, to), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}});
      return inner;
    };
    memory dy_in = staged(dy_mem, pd.diff_dst_desc(), before, true);
    memory w_in = staged(w_mem, pd.weights_desc(), before, true);
    memory y_out = staged(y_mem, pd.diff_src_desc(), after, false);
    const dnnl::convolution_backward_data prim(pd);
    const std::unordered_map<int, memory> args{
        {DNNL_ARG_DIFF_DST, dy_in}, {DNNL_ARG_WEIGHTS, w_in}, {DNNL_ARG_DIFF_SRC, y_out}};
    r.blocked.time = time_runs(
        [&] {
          for (const Reorder& re : before) re.prim.execute(strm, re.args);
          prim.execute(strm, args);
          for (const Reorder& re : after) re.prim.execute(strm, re.args);
          strm.wait();
        },
        c);
    r.blocked.y = read_y(y_mem);
    r.blocked_only.time = time_runs(
        [&] {
          prim.execute(strm, args);
          strm.wait();
        },
        c);
  } catch (const dnnl::error& e) {
    r.blocked.error = r.blocked_only.error = e.what();
  }
  return r;
}

// Agreement of conv3d-dx's y with oneDNN's: max |difference|, and that relative to max |y|.
struct Agreement {
  double max_abs = 0, rel = 0;
  bool ok = true;
  bool checked = false;
};

Agreement compare(const std::vector<float>& ours, const OnednnResult& peer, DType dtype) {
  Agreement a;
  // fp32: the order of accumulation differs. bf16: both round y once, 2^-8 relative; allow a few ulps.
  const double tolerance = dtype == DType::f32 ? 1e-4 : 1.6e-2;
  for (const auto* y : {&peer.plain.y, &peer.blocked.y}) {
    if (y->empty()) continue;
    double scale = 0, diff = 0;
    bool finite = true;
    for (std::size_t i = 0; i < y->size(); ++i) {
      scale = std::max(scale, static_cast<double>(std::fabs((*y)[i])));
      const double d = std::fabs(static_cast<double>(ours[i]) - static_cast<double>((*y)[i]));
      if (!std::isfinite(d)) finite = false;
      diff = std::max(diff, d);
    }
    a.checked = true;
    a.max_abs = std::max(a.max_abs, diff);
    a.rel = std::max(a.rel, scale > 0 ? diff / scale : diff);
    a.ok = a.ok && finite && a.rel <= tolerance;
  }
  return a;
}

struct Row {
  Case problem;
  C3dxResult ours;
  OnednnResult peer;
  Agreement agreement;
  double best_plain_ms() const {
    double best = INFINITY;
    for (const auto* t : {&peer.plain.time, &peer.blocked.time})
      if (t->ok()) best = std::min(best, t->median_ms);
    return best;
  }
  double ratio() const { return best_plain_ms() / ours.time.median_ms; }
};

std::string ms_text(const Timing& t) {
  if (!t.ok()) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", t.median_ms);
  return buf;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) out += ch;
  }
  return out;
}

std::string json_timing(const Timing& t) {
  if (!t.ok()) return "null";
  std::ostringstream o;
  o.precision(6);
  o << "{\"median_ms\":" << t.median_ms << ",\"min_ms\":" << t.min_ms << ",\"runs\":" << t.runs << "}";
  return o.str();
}

// One line per case: {"name", "dtype", "data_format", "threads", "isa", "gflop", "conv3d_dx": {...},
// "onednn": {"plain", "blocked_reorders", "blocked_only", "best_plain_ms"}, "ratio", "max_abs_diff", ...}.
void print_json(const Row& r, int threads, const std::string& isa) {
  const Case& p = r.problem;
  auto str = [](const std::string& text) { return "\"" + json_escape(text) + "\""; };
  auto number = [](double x) {
    std::ostringstream text;
    text.precision(6);
    if (std::isfinite(x))
      text << x;
    else
      text << "null";
    return text.str();
  };
  auto route = [&](const OnednnRoute& x) {
    return "{\"impl\":" + str(x.impl) + ",\"error\":" + str(x.error) + ",\"timing\":" + json_timing(x.time) +
           "}";
  };
  std::ostringstream o;
  o.precision(6);
  o << "{\"name\":" << str(p.name()) << ",\"dtype\":" << str(conv3d_dx::to_string(p.dtype))
    << ",\"data_format\":" << str(conv3d_dx::to_string(p.layout)) << ",\"threads\":" << threads
    << ",\"isa\":" << str(isa) << ",\"gflop\":" << p.flops * 1e-9
    << ",\"conv3d_dx\":{\"engine\":" << str(r.ours.engine) << ",\"workspace_bytes\":" << r.ours.workspace
    << ",\"timing\":" << json_timing(r.ours.time) << ",\"gflops\":" << p.flops / (r.ours.time.median_ms * 1e6)
    << "},\"onednn\":{\"plain\":" << route(r.peer.plain) << ",\"blocked_reorders\":" << route(r.peer.blocked)
    << ",\"blocked_only\":" << route(r.peer.blocked_only)
    << ",\"blocked_layouts\":" << str(r.peer.blocked_layouts)
    << ",\"best_plain_ms\":" << number(r.best_plain_ms()) << "},\"ratio\":" << number(r.ratio())
    << ",\"max_abs_diff\":" << r.agreement.max_abs << ",\"rel_diff\":" << r.agreement.rel
    << ",\"agree\":" << (r.agreement.checked && r.agreement.ok ? "true" : "false") << "}\n";
  std::fputs(o.str().c_str(), stdout);
  std::fflush(stdout);
}

double geomean(const std::vector<double>& v) {
  double sum = 0;
  int n = 0;
  for (double x : v)
    if (std::isfinite(x) && x > 0) {
      sum += std::log(x);
      ++n;
    }
  return n ? std::exp(sum / n) : NAN;
}

void print_table(std::FILE* out, const std::vector<Row>& rows, DType dtype, Layout layout) {
  std::fprintf(out, "\n== %s %s (ms: median of timed runs; ratio = oneDNN best plain route / conv3d-dx) ==\n",
               conv3d_dx::to_string(dtype), conv3d_dx::to_string(layout));
  std::fprintf(out, "%-10s %10s %10s %8s %11s %11s %11s %7s %10s %-5s %s\n", "shape", "conv3d-dx", "min",
               "GFLOP/s", "dnnl-plain", "dnnl-blk+r", "dnnl-blk", "ratio", "max|diff|", "check", "engine");
  std::vector<double> ours, plain, blocked, blocked_only, best, ratio;
  for (const Row& r : rows) {
    char min_text[32];
    std::snprintf(min_text, sizeof min_text, "%.3f", r.ours.time.min_ms);
    std::fprintf(out, "%-10s %10s %10s %8.1f %11s %11s %11s %7.2f %10.2e %-5s %s\n", r.problem.name().c_str(),
                 ms_text(r.ours.time).c_str(), min_text, r.problem.flops / (r.ours.time.median_ms * 1e6),
                 ms_text(r.peer.plain.time).c_str(), ms_text(r.peer.blocked.time).c_str(),
                 ms_text(r.peer.blocked_only.time).c_str(), r.ratio(), r.agreement.max_abs,
                 !r.agreement.checked ? "n/a"
                 : r.agreement.ok     ? "ok"
                                      : "DIFF!",
                 r.ours.engine.c_str());
    ours.push_back(r.ours.time.median_ms);
    plain.push_back(r.peer.plain.time.median_ms);
    blocked.push_back(r.peer.blocked.time.median_ms);
    blocked_only.push_back(r.peer.blocked_only.time.median_ms);
    best.push_back(r.best_plain_ms());
    ratio.push_back(r.ratio());
  }
  std::fprintf(
      out, "%-10s %10.3f %10s %8s %11.3f %11.3f %11.3f %7.2f   (oneDNN best plain route geomean %.3f ms)\n",
      "geomean", geomean(ours), "", "", geomean(plain), geomean(blocked), geomean(blocked_only),
      geomean(ratio), geomean(best));
  std::fprintf(out, "oneDNN implementations (plain | any + reorders, layouts chosen):\n");
  for (const Row& r : rows) {
    std::fprintf(
        out, "  %-10s %s | %s, %s\n", r.problem.name().c_str(),
        r.peer.plain.error.empty() ? r.peer.plain.impl.c_str() : ("error: " + r.peer.plain.error).c_str(),
        r.peer.blocked.error.empty() ? r.peer.blocked.impl.c_str()
                                     : ("error: " + r.peer.blocked.error).c_str(),
        r.peer.blocked_layouts.c_str());
  }
  std::fflush(out);
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  try {
    config = parse_args(argc, argv);
  } catch (const conv3d_dx::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  const int threads = confine_threads(config.threads);

  const std::optional<std::vector<Shape>> suite = conv3d_dx::suite::suite_named(config.suite);
  if (!suite) {
    std::fprintf(stderr, "--suite is %s but must be one of %s\n", config.suite.c_str(),
                 conv3d_dx::suite::kSuiteNames);
    return 2;
  }
  std::vector<Shape> shapes;
  for (const Shape& s : *suite)
    if (config.shapes.empty() ||
        std::find(config.shapes.begin(), config.shapes.end(), s.name) != config.shapes.end())
      shapes.push_back(s);
  for (const std::string& name : config.shapes)
    if (std::none_of(shapes.begin(), shapes.end(), [&](const Shape& s) { return s.name == name; })) {
      std::fprintf(stderr, "--shapes: no suite shape named %s\n", name.c_str());
      return 2;
    }

  std::FILE* out = config.json ? stderr : stdout;
  const dnnl_version_t* v = dnnl_version();
  const char* forced_isa = std::getenv("CONV3D_DX_ISA");
  const std::string isa = conv3d_dx_isa(make_case(shapes.front(), DType::f32, Layout::NCDHW));
  std::fprintf(out, "machine: %s, %u CPUs online, %d threads used; conv3d-dx ISA %s (%s)\n",
               cpu_model().c_str(), std::thread::hardware_concurrency(), threads, isa.c_str(),
               forced_isa != nullptr && *forced_isa ? "forced by CONV3D_DX_ISA" : "detected");
  std::fprintf(out, "oneDNN %d.%d.%d (%s), cpu runtime %s\n", v->major, v->minor, v->patch, v->hash,
               v->cpu_runtime == DNNL_RUNTIME_SYCL  ? "SYCL+TBB"
               : v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP"
               : v->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB"
                                                    : "other");
  std::fprintf(out, "runs: %d warmup, up to %d timed (fewer once a route passes %g s)\n", config.warmup,
               config.repeat, config.max_seconds);

  dnnl::engine eng;
  try {
    eng = dnnl::engine(dnnl::engine::kind::cpu, 0);
  } catch (const dnnl::error& e) {
    std::fprintf(stderr, "oneDNN has no CPU engine (%s); see scripts/install-onednn.sh\n", e.what());
    return 1;
  }
  dnnl::stream strm(eng);

  const bool progress = isatty(STDERR_FILENO) != 0;
  std::mt19937 rng(20240531);
  bool all_agree = true;
  for (DType dtype : config.dtypes)
    for (Layout layout : config.layouts) {
      std::vector<Row> rows;
      for (const Shape& s : shapes) {
        const Case p = make_case(s, dtype, layout);
        if (progress)
          std::fprintf(stderr, "\r\033[K[%s %s %s] ...", conv3d_dx::to_string(dtype),
                       conv3d_dx::to_string(layout), s.name.c_str());
        const std::size_t es = conv3d_dx::dtype_size(dtype);
        Inputs in{Buffer(static_cast<std::size_t>(p.count(p.dims.dy)) * es),
                  Buffer(static_cast<std::size_t>(p.count(p.dims.filter)) * es),
                  static_cast<std::size_t>(p.count(p.dims.y)) * es};
        fill_random(in.dy, dtype, rng);
        fill_random(in.filter, dtype, rng);
        Row row{p, {}, {}, {}};
        try {
          row.ours = run_conv3d_dx(p, in, threads, config);
        } catch (const conv3d_dx::Error& e) {
          std::fprintf(stderr, "conv3d-dx fails on %s %s %s: %s\n", s.name.c_str(),
                       conv3d_dx::to_string(dtype), conv3d_dx::to_string(layout), e.what());
          all_agree = false;
          continue;
        }
        row.peer = run_onednn(p, in, eng, strm, config);
        row.agreement = compare(row.ours.y, row.peer, dtype);
        all_agree = all_agree && row.agreement.ok;
        row.ours.y.clear();
        row.peer.plain.y.clear();
        row.peer.blocked.y.clear();
        if (config.json) print_json(row, threads, isa);
        rows.push_back(std::move(row));
      }
      if (progress) std::fputs("\r\033[K", stderr);
      print_table(out, rows, dtype, layout);
    }

  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::fprintf(out, "\npeak RSS: %.1f MiB\n", static_cast<double>(ru.ru_maxrss) / 1024.0);
  if (!all_agree) std::fprintf(out, "WARNING: conv3d-dx failed or disagreed with oneDNN on some problems\n");
  return all_agree ? 0 : 1;
}
