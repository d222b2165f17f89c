// conv3d_dx._core: the library as the Python package sees it.
//
// The Python layer (python/conv3d_dx) turns numpy arrays, torch tensors and DLPack producers into arrays of
// plain element types (float32, float16, bfloat16 or integer codes) and names the conv3d-dx dtype each one
// holds. This layer builds the ProblemSpec from their shapes and element strides as they are (no copies),
// lets the library validate it, and runs with the GIL released. conv3d_dx::Error becomes ValueError
// (MemoryError for out_of_memory, RuntimeError for internal errors) with a `parameter` attribute.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#if __has_include(<sys/mman.h>)
#include <sys/mman.h>  // madvise
#endif

#include "conv3d_dx/conv3d_dx.hpp"
#include "numeric/numeric.hpp"
#include "suite.hpp"

namespace nb = nanobind;

namespace conv3d_dx::python {
namespace {

using InArray = nb::ndarray<nb::ro, nb::device::cpu>;
using OutArray = nb::ndarray<nb::device::cpu>;

// The same error about `name`, the parameter's name in Python: "layout 'x' is ..." becomes
// "data_format 'x' is ...", "y strides ..." becomes "out strides ...".
Error renamed(const Error& e, const std::string& name) {
  const std::string message = e.what();
  const std::string& old = e.parameter();
  if (old == name) return e;
  if (!old.empty() && message.rfind(old + " ", 0) == 0)
    return Error(e.code(), name, name + message.substr(old.size()));
  return Error(e.code(), name, name + ": " + message);
}

void translate_error(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const Error& e) {
    PyObject* type = PyExc_ValueError;
    if (e.code() == ErrorCode::out_of_memory) type = PyExc_MemoryError;
    if (e.code() == ErrorCode::internal) type = PyExc_RuntimeError;
    PyObject* exc = PyObject_CallFunction(type, "s", e.what());
    if (exc == nullptr) return;  // the failure to build it is the error now
    PyObject* parameter = PyUnicode_FromString(e.parameter().c_str());
    if (parameter != nullptr) {
      PyObject_SetAttrString(exc, "parameter", parameter);
      Py_DECREF(parameter);
    }
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
  }
}

DType dtype_named(const std::string& parameter, const std::string& name) {
  try {
    return parse_dtype(name);
  } catch (const Error& e) {
    throw renamed(e, parameter);
  }
}

Layout layout_named(const std::string& parameter, const std::string& name) {
  try {
    return parse_layout(name);
  } catch (const Error& e) {
    throw renamed(e, parameter);
  }
}

template <typename Array>
void check_itemsize(const std::string& name, const Array& a, DType dtype) {
  if (a.itemsize() != dtype_size(dtype))
    throw nb::type_error((name + " has " + std::to_string(a.itemsize()) + "-byte elements but " +
                          to_string(dtype) + " needs " + std::to_string(dtype_size(dtype)))
                             .c_str());
}

// A view of `a` as it lies in memory: its shape and element strides, in the order of `layout`.
// A 4-D array with `insert_d` gets the D axis of size 1 (the operator's 4-value input_size).
template <typename Array>
TensorView view_of(const std::string& name, const Array& a, DType dtype, Layout layout,
                   bool insert_d = false) {
  check_itemsize(name, a, dtype);
  const std::size_t rank = insert_d ? 4 : 5;
  if (a.ndim() != rank)
    throw Error(ErrorCode::invalid_argument, name,
                name + " has " + std::to_string(a.ndim()) + " dimensions but must have " +
                    std::to_string(rank) + " (" + to_string(layout) +
                    (insert_d ? " without D, as input_size has 4 values)" : ")"));
  TensorView v;
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));
  v.dtype = dtype;
  v.layout = layout;
  const std::size_t d_position = layout == Layout::NDHWC ? 1 : 2;
  for (std::size_t i = 0, j = 0; i < 5; ++i) {
    if (insert_d && i == d_position) {
      v.shape[i] = 1;
      v.strides[i] = 0;
      continue;
    }
    v.shape[i] = static_cast<std::int64_t>(a.shape(j));
    v.strides[i] = a.stride(j);
    ++j;
  }
  return v;
}

// The operator's attributes as the Python layer passes them (strings parsed here, errors renamed).
struct Attrs {
  std::vector<std::int64_t> input_size;
  std::array<std::int64_t, 5> strides{1, 1, 1, 1, 1}, dilations{1, 1, 1, 1, 1};
  std::array<std::int64_t, 6> pads{};
  std::int64_t groups = 1;
  std::string data_format = "NDHWC", filter_format = "NCDHW", y_dtype = "fp32";
  bool enable_hf32 = false, saturate = false;
};

// The spec without y's memory: y as a contiguous array of input_size in data_format order.
ProblemSpec make_spec(const Attrs& a, const InArray& filter, const std::string& filter_dtype,
                      const InArray& out_backprop, const std::string& dy_dtype) {
  ProblemSpec spec;
  spec.attrs.input_size = a.input_size;
  spec.attrs.strides = a.strides;
  spec.attrs.pads = a.pads;
  spec.attrs.dilations = a.dilations;
  spec.attrs.groups = a.groups;
  spec.attrs.data_format = layout_named("data_format", a.data_format);
  spec.attrs.enable_hf32 = a.enable_hf32;
  spec.overflow = a.saturate ? OverflowMode::saturate : OverflowMode::ieee;
  const Layout fmt = spec.attrs.data_format;
  spec.out_backprop = view_of("out_backprop", out_backprop, dtype_named("out_backprop", dy_dtype), fmt);
  spec.filter = view_of("filter", filter, dtype_named("filter", filter_dtype),
                        layout_named("filter_format", a.filter_format));
  std::array<std::int64_t, 5>
      shape{};  // input_size with D inserted; invalid sizes are validate()'s to report
  const auto& s = a.input_size;
  if (s.size() == 5) std::copy(s.begin(), s.end(), shape.begin());
  if (s.size() == 4)
    shape = fmt == Layout::NDHWC ? std::array<std::int64_t, 5>{s[0], 1, s[1], s[2], s[3]}
                                 : std::array<std::int64_t, 5>{s[0], s[1], 1, s[2], s[3]};
  for (auto& v : shape) v = std::max<std::int64_t>(v, 0);
  spec.y = TensorView::contiguous(nullptr, dtype_named("output_dtype", a.y_dtype), fmt, shape);
  return spec;
}

Problem validate_as(const ProblemSpec& spec, const std::string& y_name) {
  try {
    return validate(spec);
  } catch (const Error& e) {
    throw e.parameter() == "y" ? renamed(e, y_name) : e;
  }
}

std::uintptr_t address(const TensorView& v) { return reinterpret_cast<std::uintptr_t>(v.data); }

// Plans of the most recent problems, for conv3d_backprop_input_v2: making a Plan allocates (and first
// touches) its buffers, for most problems a packed copy of the filter, which can cost more than the
// computation itself, and a training step calls with the same problems again and again. A plan is taken
// out while it runs, so concurrent calls never share one. Each kept plan holds at most about a filter's
// worth of memory (less where a large filter is streamed, or packed a block at a time per thread).
class PlanCache {
 public:
  // Everything a plan depends on: the problem with its strides, the threads, and CONV3D_DX_ISA. Compared
  // field by field (a key built as text took about 1 us a call).
  struct Key {
    Problem problem;
    int threads;
    std::string isa;
    bool operator==(const Key&) const = default;
  };
  static Key key_of(const Problem& problem, int threads) {
    const char* isa = std::getenv("CONV3D_DX_ISA");
    return Key{problem, threads, isa ? isa : ""};
  }

  // A plan for the key: a cached one, else a new one.
  std::unique_ptr<Plan> take(const Key& key) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = plans_.begin(); it != plans_.end(); ++it) {
        if (it->key == key) {
          std::unique_ptr<Plan> plan = std::move(it->plan);
          plans_.erase(it);
          return plan;
        }
      }
    }
    Options options;
    options.threads = key.threads;
    options.keep_filter = false;  // every call brings its filter: an engine may read it in place
    return std::make_unique<Plan>(key.problem, options);
  }

  void put_back(Key key, std::unique_ptr<Plan> plan) {
    std::list<Entry> evicted;  // freed after the lock is released
    const std::lock_guard<std::mutex> lock(mutex_);
    plans_.push_front(Entry{std::move(key), std::move(plan)});
    while (plans_.size() > capacity_) evicted.splice(evicted.begin(), plans_, std::prev(plans_.end()));
  }

  // Keeps at most `capacity` plans (0: none); returns the previous capacity.
  std::size_t set_capacity(std::size_t capacity) {
    std::list<Entry> evicted;
    const std::lock_guard<std::mutex> lock(mutex_);
    const std::size_t previous = capacity_;
    capacity_ = capacity;
    while (plans_.size() > capacity_) evicted.splice(evicted.begin(), plans_, std::prev(plans_.end()));
    return previous;
  }

 private:
  struct Entry {
    Key key;
    std::unique_ptr<Plan> plan;
  };

  std::mutex mutex_;
  std::list<Entry> plans_;  // most recently used first
  std::size_t capacity_ = 16;
};

PlanCache& plan_cache() {
  static PlanCache cache;
  return cache;
}

OutArray writable_array(const std::string& name, nb::handle h) {
  OutArray a;
  if (!nb::try_cast(h, a, false))
    throw nb::type_error((name + " must be a writable array in CPU memory").c_str());
  return a;
}

// conv3d_backprop_input_v2: validates everything, then (when `out` is None) calls allocate() for the
// result, then runs with the GIL released, on a cached plan. Returns the result and the addresses the library
// was handed for out_backprop, filter and y, so tests can see that nothing was copied.
nb::tuple backprop_input(const Attrs& attrs, InArray filter, const std::string& filter_dtype,
                         InArray out_backprop, const std::string& dy_dtype, nb::object out,
                         const std::string& y_name, nb::callable allocate, int threads) {
  ProblemSpec spec = make_spec(attrs, filter, filter_dtype, out_backprop, dy_dtype);
  const Layout fmt = spec.attrs.data_format;
  const bool insert_d = attrs.input_size.size() == 4;
  if (!out.is_none()) {
    spec.y = view_of(y_name, writable_array(y_name, out), spec.y.dtype, fmt, insert_d);
  } else {
    validate_as(spec, y_name);  // before allocating: a bad input_size is reported, not allocated
    out = allocate();
    spec.y = view_of(y_name, writable_array(y_name, out), spec.y.dtype, fmt, insert_d);
  }
  const Problem problem = validate_as(spec, y_name);  // y must not overlap an input either
  if (problem.y_elements() > 0) {
    nb::gil_scoped_release released;
    PlanCache::Key key = PlanCache::key_of(problem, threads);
    std::unique_ptr<Plan> plan = plan_cache().take(key);
    plan->execute(spec.out_backprop.data, spec.filter.data, spec.y.data);
    plan_cache().put_back(std::move(key), std::move(plan));
  }
  return nb::make_tuple(out,
                        nb::make_tuple(address(spec.out_backprop), address(spec.filter), address(spec.y)));
}

// A Plan for one problem: out_backprop, filter and y keep the dtypes, shapes and strides it was made with
// (y: contiguous in data_format order); the filter it was made with is packed at once.
class BoundPlan {
 public:
  BoundPlan(const Attrs& attrs, InArray filter, const std::string& filter_dtype, InArray out_backprop,
            const std::string& dy_dtype, int threads, bool keep_filter)
      : spec_(make_spec(attrs, filter, filter_dtype, out_backprop, dy_dtype)),
        insert_d_(attrs.input_size.size() == 4),
        plan_(validate_as(spec_, "output_dtype"), Options{threads, Isa::best, false, 0, keep_filter}) {
    pack_filter(filter);
  }

  void pack_filter(InArray filter) {
    const TensorView w = same_as("filter", spec_.filter, filter, false);
    nb::gil_scoped_release released;
    plan_.pack_filter(w.data);
  }

  void execute(InArray out_backprop, InArray filter, OutArray y) {
    const TensorView dy = same_as("out_backprop", spec_.out_backprop, out_backprop, false);
    const TensorView w = same_as("filter", spec_.filter, filter, false);
    const TensorView out = same_as("out", spec_.y, y, insert_d_);
    try {
      nb::gil_scoped_release released;
      plan_.execute(dy.data, w.data, out.data);
    } catch (const Error& e) {  // y overlapping an input
      throw e.parameter() == "y" ? renamed(e, "out") : e;
    }
  }

  void execute_packed(InArray out_backprop, OutArray y) {
    const TensorView dy = same_as("out_backprop", spec_.out_backprop, out_backprop, false);
    const TensorView out = same_as("out", spec_.y, y, insert_d_);
    try {
      nb::gil_scoped_release released;
      plan_.execute_packed(dy.data, out.data);
    } catch (const Error& e) {  // y overlapping out_backprop
      throw e.parameter() == "y" ? renamed(e, "out") : e;
    }
  }

  std::string engine() const { return plan_.engine_name(); }
  int threads() const { return plan_.threads(); }
  std::string isa() const { return to_string(plan_.isa()); }

 private:
  // A view of `a`, which must address its elements as the plan's view does: the plan was made for those
  // strides. Strides of axes of extent 1 never move an address, and an empty tensor has none, so those may
  // differ (numpy gives empty arrays zero strides; a 2-D call's inserted D axis has stride 0); the plan's
  // view is returned with a's data.
  template <typename Array>
  TensorView same_as(const std::string& name, const TensorView& planned, const Array& a,
                     bool insert_d) const {
    TensorView v = view_of(name, a, planned.dtype, planned.layout, insert_d);
    auto text = [](const std::array<std::int64_t, 5>& x) {
      std::string s = "[";
      for (std::size_t i = 0; i < 5; ++i) s += (i ? "," : "") + std::to_string(x[i]);
      return s + "]";
    };
    if (v.shape != planned.shape)
      throw Error(ErrorCode::invalid_argument, name,
                  name + " shape is " + text(v.shape) + " but the plan was made for " + text(planned.shape));
    const bool empty = std::find(v.shape.begin(), v.shape.end(), 0) != v.shape.end();
    for (std::size_t i = 0; i < 5 && !empty; ++i)
      if (v.shape[i] > 1 && v.strides[i] != planned.strides[i])
        throw Error(ErrorCode::invalid_argument, name,
                    name + " strides are " + text(v.strides) + " but the plan was made for " +
                        text(planned.strides) + " (elements)");
    v.strides = planned.strides;
    return v;
  }

  ProblemSpec spec_;
  bool insert_d_;
  Plan plan_;
};

using Flat = nb::ndarray<nb::ro, nb::device::cpu, nb::c_contig>;
using FlatOut = nb::ndarray<nb::device::cpu, nb::c_contig>;

// Element-wise conversion between contiguous arrays of equal size (the Python layer allocates `out`).
template <typename To, typename From, typename F>
void convert(const Flat& in, FlatOut& out, F f) {
  if (in.size() != out.size()) throw nb::value_error("input and output sizes differ");
  const auto* src = static_cast<const From*>(in.data());
  auto* dst = static_cast<To*>(out.data());
  const std::size_t n = in.size();
  nb::gil_scoped_release released;
  for (std::size_t i = 0; i < n; ++i) dst[i] = f(src[i]);
}

void encode(Flat values, FlatOut codes, const std::string& dtype_name, bool saturate) {
  const DType dtype = dtype_named("dtype", dtype_name);
  check_itemsize("values", values, DType::f32);
  check_itemsize("codes", codes, dtype);
  switch (dtype) {
    case DType::f16:
      return convert<std::uint16_t, float>(values, codes,
                                           [=](float v) { return numeric::f32_to_fp16(v, saturate); });
    case DType::bf16:
      return convert<std::uint16_t, float>(values, codes,
                                           [=](float v) { return numeric::f32_to_bf16(v, saturate); });
    case DType::hif8:
      return convert<std::uint8_t, float>(values, codes,
                                          [=](float v) { return numeric::f32_to_hif8(v, saturate); });
    case DType::fp8_e4m3fn:
      return convert<std::uint8_t, float>(values, codes,
                                          [=](float v) { return numeric::f32_to_fp8_e4m3fn(v, saturate); });
    case DType::f32:
      break;
  }
  throw Error(ErrorCode::invalid_argument, "dtype", "dtype fp32 is not a storage type to encode to");
}

void decode(Flat codes, FlatOut values, const std::string& dtype_name) {
  const DType dtype = dtype_named("dtype", dtype_name);
  check_itemsize("codes", codes, dtype);
  check_itemsize("values", values, DType::f32);
  switch (dtype) {
    case DType::f16:
      return convert<float, std::uint16_t>(codes, values, numeric::fp16_to_f32);
    case DType::bf16:
      return convert<float, std::uint16_t>(codes, values, numeric::bf16_to_f32);
    case DType::hif8:
      return convert<float, std::uint8_t>(codes, values, numeric::hif8_to_f32);
    case DType::fp8_e4m3fn:
      return convert<float, std::uint8_t>(codes, values, numeric::fp8_e4m3fn_to_f32);
    case DType::f32:
      break;
  }
  throw Error(ErrorCode::invalid_argument, "dtype", "dtype fp32 is not a storage type to decode from");
}

void round_hf32(Flat values, FlatOut rounded) {
  check_itemsize("values", values, DType::f32);
  check_itemsize("values", rounded, DType::f32);
  convert<float, float>(values, rounded, numeric::round_to_hf32);
}

// A benchmark suite (tools/suite.hpp) as dicts of forward-convolution terms.
nb::list suite(const std::string& name) {
  const std::optional<std::vector<suite::Shape>> named = suite::suite_named(name);
  if (!named)
    throw Error(ErrorCode::invalid_argument, "suite",
                "suite is '" + name + "' but must be one of " + suite::kSuiteNames);
  nb::list shapes;
  for (const suite::Shape& s : *named) {
    nb::dict d;
    d["name"] = s.name;
    d["N"] = s.N;
    d["Cin"] = s.Cin;
    d["x"] = s.x;
    d["Cout"] = s.Cout;
    d["kernel"] = s.kernel;
    d["stride"] = s.stride;
    d["pad"] = s.pad;
    d["dilation"] = s.dilation;
    d["groups"] = s.groups;
    shapes.append(d);
  }
  return shapes;
}

// Advises Linux to back a new result's whole 2 MiB units (x86-64's huge pages) with transparent huge pages,
// as numpy advises its own arrays of 4 MiB or more (all their pages; torch.empty advises none). The call
// that fills the result touches its pages first; with 4 KiB pages each one is a page fault, and on a
// virtual machine those can take a large share of the call (Ice Lake Xeon VM, fp32 channels_last, 2
// threads, a 32 MiB y: 33.5 ms against 26.6 advised, 23 ms into an already touched y).
// Advice only: its failure changes nothing.
void advise_huge_pages(OutArray result) {
#ifdef MADV_HUGEPAGE
  constexpr std::uintptr_t kHuge = std::uintptr_t{2} << 20;
  const auto begin = reinterpret_cast<std::uintptr_t>(result.data());
  const std::uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1);
  const std::uintptr_t last = (begin + result.nbytes()) & ~(kHuge - 1);
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#else
  static_cast<void>(result);
#endif
}

}  // namespace
}  // namespace conv3d_dx::python

NB_MODULE(_core, m) {
  using namespace conv3d_dx::python;
  m.doc() = "conv3d-dx bindings; use the conv3d_dx package, which checks Python types before calling these.";
  nb::register_exception_translator(translate_error);

  nb::class_<Attrs>(m, "Attrs")
      .def(nb::init<>())
      .def_rw("input_size", &Attrs::input_size)
      .def_rw("strides", &Attrs::strides)
      .def_rw("pads", &Attrs::pads)
      .def_rw("dilations", &Attrs::dilations)
      .def_rw("groups", &Attrs::groups)
      .def_rw("data_format", &Attrs::data_format)
      .def_rw("filter_format", &Attrs::filter_format)
      .def_rw("y_dtype", &Attrs::y_dtype)
      .def_rw("enable_hf32", &Attrs::enable_hf32)
      .def_rw("saturate", &Attrs::saturate);

  m.def("backprop_input", &backprop_input, nb::arg("attrs"), nb::arg("filter"), nb::arg("filter_dtype"),
        nb::arg("out_backprop"), nb::arg("dy_dtype"), nb::arg("out").none(), nb::arg("y_name"),
        nb::arg("allocate"), nb::arg("threads"));

  nb::class_<BoundPlan>(m, "Plan")
      .def(nb::init<const Attrs&, InArray, const std::string&, InArray, const std::string&, int, bool>(),
           nb::arg("attrs"), nb::arg("filter"), nb::arg("filter_dtype"), nb::arg("out_backprop"),
           nb::arg("dy_dtype"), nb::arg("threads"), nb::arg("keep_filter"))
      .def("pack_filter", &BoundPlan::pack_filter, nb::arg("filter"))
      .def("execute", &BoundPlan::execute, nb::arg("out_backprop"), nb::arg("filter"), nb::arg("out"))
      .def("execute_packed", &BoundPlan::execute_packed, nb::arg("out_backprop"), nb::arg("out"))
      .def_prop_ro("engine", &BoundPlan::engine)
      .def_prop_ro("threads", &BoundPlan::threads)
      .def_prop_ro("isa", &BoundPlan::isa);

  m.def("parse_dtype", [](const std::string& parameter, const std::string& name) {
    return std::string(conv3d_dx::to_string(dtype_named(parameter, name)));
  });
  m.def("encode", &encode, nb::arg("values"), nb::arg("codes"), nb::arg("dtype"), nb::arg("saturate"));
  m.def("decode", &decode, nb::arg("codes"), nb::arg("values"), nb::arg("dtype"));
  m.def("round_hf32", &round_hf32, nb::arg("values"), nb::arg("rounded"));
  m.def("suite", &suite, nb::arg("name") = "default");
  m.def("advise_huge_pages", &advise_huge_pages, nb::arg("result"));
  m.def(
      "set_plan_cache_size", [](std::size_t size) { return plan_cache().set_capacity(size); },
      nb::arg("size"));
}
