// libFuzzer harness: aclCreateTensor and aclnnConvolutionBackward on fuzzed descriptors and tiny problems.
//
// The input chooses a problem (rank 3 to 5, N 0 to 2, groups, channels, sizes up to 6, kernel, stride,
// dilation, padding, each sometimes off by one), every tensor's dtype, format and placement (contiguous,
// permuted with gaps, small arbitrary strides, an element offset into its own or another tensor's buffer,
// or a hostile descriptor of arbitrary 64-bit dims, strides, offset and storage without data), the
// outputMask, cubeMathType and the data. Required of every outcome:
//   - a status of 0, 161001 or 161002 with a message, and nothing written when it is not 0;
//   - on success, gradInput, gradWeight and gradBias within reference::acceptable of float64 sums of the
//     inputs as they were before the call, and no byte outside the outputs' views changed.
// USE_FP16 (cubeMathType 2) results are not compared (their fp16 step is tested in tests/acl).
#include <fuzzer/FuzzedDataProvider.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "acl/internal.hpp"
#include "aclnnop/aclnn_convolution_backward.h"
#include "conv3d_dx/conv3d_dx.hpp"
#include "numeric/numeric.hpp"
#include "reference/accuracy.hpp"

namespace {

using conv3d_dx::DType;
using conv3d_dx::InputRounding;
using conv3d_dx::OverflowMode;
namespace numeric = conv3d_dx::numeric;
namespace reference = conv3d_dx::reference;

enum Slot { kDy, kX, kW, kGx, kGw, kGb, kSlots };

constexpr aclDataType kDtypes[] = {ACL_FLOAT,         ACL_FLOAT16, ACL_BF16,  ACL_HIFLOAT8,
                                   ACL_FLOAT8_E4M3FN, ACL_INT32,   ACL_DOUBLE};

// The library's own mapping (src/acl): the dtypes it computes with, and their sizes.
bool is_float(aclDataType t) { return conv3d_dx::acl::dtype_of(t).has_value(); }
DType to_dtype(aclDataType t) { return conv3d_dx::acl::dtype_of(t).value_or(DType::f32); }
std::size_t size_of(aclDataType t) { return conv3d_dx::acl::element_size(t); }

std::string g_case;  // the case being run, for reports

// Outcomes so far, printed at exit when ACLNN_FUZZER_STATS is set (to see what a corpus reaches).
struct Stats {
  long refused = 0, succeeded = 0, compared = 0;
  ~Stats() {
    if (std::getenv("ACLNN_FUZZER_STATS") != nullptr)
      std::fprintf(stderr,
                   "aclnn_fuzzer: %ld refused, %ld succeeded, %ld of them compared with float64 sums\n",
                   refused, succeeded, compared);
  }
} g_stats;

[[noreturn]] void bug(const std::string& what) {
  std::fprintf(stderr, "aclnn_fuzzer: %s\n  case: %s\n  last message: %s\n", what.c_str(), g_case.c_str(),
               aclGetRecentErrMsg());
  std::abort();
}

std::string list(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// One tensor as the harness places it.
struct Placed {
  std::vector<std::int64_t> dims, strides;
  std::int64_t offset = 0;  // elements
  aclDataType dtype = ACL_FLOAT;
  aclFormat format = ACL_FORMAT_ND;
  int buffer = 0;
  bool hostile = false;       // arbitrary descriptor, no data
  bool null_strides = false;  // contiguous, passed as strides = nullptr
  std::vector<std::int64_t> hostile_storage;
  aclTensor* tensor = nullptr;

  std::int64_t elements() const {
    std::int64_t n = 1;
    for (std::int64_t d : dims) n *= d;
    return n;
  }
  // Elements from the view's start to its last element, plus one (0 when empty).
  std::int64_t extent() const {
    if (elements() == 0) return 0;
    std::int64_t last = 0;
    for (std::size_t i = 0; i < dims.size(); ++i) last += (dims[i] - 1) * strides[i];
    return last + 1;
  }
  std::int64_t at(const std::vector<std::int64_t>& index) const {
    std::int64_t e = offset;
    for (std::size_t i = 0; i < dims.size(); ++i) e += index[i] * strides[i];
    return e;
  }
};

struct Buffer {
  std::vector<unsigned char> bytes;
  unsigned char* base() {
    return bytes.data() + (64 - reinterpret_cast<std::uintptr_t>(bytes.data()) % 64) % 64;
  }
};

// Calls f(index) for every index of `dims`.
template <class F>
void for_each(const std::vector<std::int64_t>& dims, F&& f) {
  for (std::int64_t d : dims)
    if (d == 0) return;
  std::vector<std::int64_t> i(dims.size(), 0);
  while (true) {
    f(i);
    std::size_t a = dims.size();
    while (a > 0) {
      --a;
      if (++i[a] < dims[a]) break;
      i[a] = 0;
      if (a == 0) return;
    }
    if (dims.empty()) return;
  }
}

void choose_placement(FuzzedDataProvider& fdp, Placed& t, int own_buffer) {
  const int mode = fdp.ConsumeIntegralInRange<int>(0, 15);
  const std::size_t r = t.dims.size();
  t.strides.assign(r, 1);
  if (mode == 15) {  // hostile: arbitrary 64-bit values, no data
    t.hostile = true;
    for (auto& d : t.dims)
      if (fdp.ConsumeBool()) d = fdp.ConsumeIntegral<std::int64_t>();
    for (auto& s : t.strides) s = fdp.ConsumeIntegral<std::int64_t>();
    t.offset = fdp.ConsumeIntegral<std::int64_t>();
    t.hostile_storage = {fdp.ConsumeIntegral<std::int64_t>()};
    if (fdp.ConsumeBool()) t.hostile_storage.push_back(fdp.ConsumeIntegral<std::int64_t>());
    return;
  }
  if (mode <= 9) {  // contiguous
    for (std::size_t i = r; i-- > 1;) t.strides[i - 1] = t.strides[i] * std::max<std::int64_t>(t.dims[i], 1);
    t.null_strides = fdp.ConsumeBool();
  } else if (mode <= 12) {  // permuted, one spare element after every axis
    std::int64_t step = 1;
    for (std::size_t k = 0; k < r; ++k) {
      const std::size_t a = k == 0 ? 0 : r - k;  // N innermost, then the last axis outward
      t.strides[a] = step;
      step *= std::max<std::int64_t>(t.dims[a], 1) + 1;
    }
  } else {  // small arbitrary strides: may overlap itself
    for (auto& s : t.strides) s = fdp.ConsumeIntegralInRange<std::int64_t>(0, 9);
  }
  t.offset = fdp.ConsumeIntegralInRange<std::int64_t>(0, 7);
  t.buffer =
      fdp.ConsumeIntegralInRange<int>(0, 9) < 8 ? own_buffer : fdp.ConsumeIntegralInRange<int>(0, kSlots - 1);
}

// A value of moderate size (so no fp32 sum overflows), now and then zero, inf or NaN.
float value(FuzzedDataProvider& fdp, bool specials) {
  const std::int8_t v = fdp.ConsumeIntegral<std::int8_t>();
  if (specials && v == 127) return INFINITY;
  if (specials && v == -128) return NAN;
  if (specials && v == -127) return -INFINITY;
  return static_cast<float>(v) / 16.0f;
}

// The arguments of the call besides the tensors.
struct Call {
  int rank = 5, groups = 1;
  std::int8_t cube = 0;
  std::vector<std::int64_t> stride, padding, dilation;
  bool want[3] = {false, false, false};
};

std::vector<std::int64_t> cat(std::vector<std::int64_t> a, const std::vector<std::int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// After a successful call: nothing outside the outputs' views changed, and the outputs match float64 sums
// of the inputs as they were before the call (`before`), with the geometry the call was given.
void check_success(const std::array<Placed, kSlots>& t, std::array<Buffer, kSlots>& buffers,
                   const std::vector<std::vector<unsigned char>>& before, const Call& call) {
  const bool* want = call.want;
  const std::size_t ns = static_cast<std::size_t>(call.rank - 2);
  const std::vector<std::int64_t>&stride = call.stride, &dilation = call.dilation, &padding = call.padding;
  const int rank = call.rank, groups_arg = call.groups;
  const std::int8_t cube = call.cube;
  // Bytes the call may write: the views of the outputs it was asked for.
  std::array<std::vector<bool>, kSlots> writable;
  for (std::size_t b = 0; b < buffers.size(); ++b) writable[b].assign(buffers[b].bytes.size(), false);
  for (int s : {kGx, kGw, kGb}) {
    const Placed& p = t[s];
    if (!want[s - kGx]) continue;
    const std::size_t offset0 =
        static_cast<std::size_t>(buffers[static_cast<std::size_t>(p.buffer)].base() -
                                 buffers[static_cast<std::size_t>(p.buffer)].bytes.data());
    for_each(p.dims, [&](const std::vector<std::int64_t>& i) {
      for (std::size_t k = 0; k < size_of(p.dtype); ++k)
        writable[static_cast<std::size_t>(p.buffer)]
                [offset0 + static_cast<std::size_t>(p.at(i)) * size_of(p.dtype) + k] = true;
    });
  }
  for (std::size_t b = 0; b < buffers.size(); ++b)
    for (std::size_t k = 0; k < buffers[b].bytes.size(); ++k)
      if (!writable[b][k] && buffers[b].bytes[k] != before[b][k]) bug("a byte outside the outputs changed");

  // The results against float64 sums of the inputs as they were (the snapshot `before`), with the
  // geometry the call was given (a perturbed dim the library accepted is part of it).
  if (cube != 2) {
    ++g_stats.compared;
    const std::int64_t N = t[kX].dims[0], cin_g = t[kW].dims[1], cout = t[kW].dims[0];
    const std::int64_t cout_g = cout / groups_arg;
    std::vector<std::int64_t> in(ns), kernel(ns), out(ns), pad_f(ns), pad_b(ns);
    for (std::size_t a = 0; a < ns; ++a) {
      in[a] = t[kX].dims[2 + a];
      kernel[a] = t[kW].dims[2 + a];
      out[a] = t[kDy].dims[2 + a];
      pad_f[a] = padding.size() == 2 * ns && rank == 4 ? padding[2 * a] : padding[a];
      pad_b[a] = padding.size() == 2 * ns && rank == 4 ? padding[2 * a + 1] : padding[a];
    }
    const InputRounding rounding = cube == 1 || cube == 3 ? InputRounding::hf32 : InputRounding::none;
    auto input = [&](int s, const std::vector<std::int64_t>& i, InputRounding r) {
      const Placed& p = t[s];
      const auto& bytes = before[static_cast<std::size_t>(p.buffer)];
      const std::size_t offset0 =
          static_cast<std::size_t>(buffers[static_cast<std::size_t>(p.buffer)].base() -
                                   buffers[static_cast<std::size_t>(p.buffer)].bytes.data());
      return static_cast<double>(
          numeric::load_rounded(to_dtype(p.dtype), bytes.data() + offset0, p.at(i), r));
    };
    auto output = [&](int s, const std::vector<std::int64_t>& i) {
      const Placed& p = t[s];
      return static_cast<double>(
          numeric::load_f32(to_dtype(p.dtype), buffers[static_cast<std::size_t>(p.buffer)].base(), p.at(i)));
    };
    // Canonical positions: spatial axis a of `ns` is axis 2 + a of the tensors.
    const std::int64_t kvol = [&] {
      std::int64_t v = 1;
      for (std::int64_t k : kernel) v *= k;
      return v;
    }();
    if (want[0]) {
      for_each(t[kGx].dims, [&](const std::vector<std::int64_t>& i) {
        const std::int64_t n = i[0], c = i[1], g = c / cin_g, ci = c % cin_g;
        double sum = 0, mag = 0;
        for (std::int64_t co = g * cout_g; co < (g + 1) * cout_g; ++co)
          for_each(kernel, [&](const std::vector<std::int64_t>& k) {
            std::vector<std::int64_t> dyi = {n, co}, wi = {co, ci};
            for (std::size_t a = 0; a < ns; ++a) {
              const std::int64_t pos = i[2 + a] + pad_f[a] - k[a] * dilation[a];
              if (pos < 0 || pos % stride[a] != 0 || pos / stride[a] >= out[a]) return;
              dyi.push_back(pos / stride[a]);
              wi.push_back(k[a]);
            }
            const double term = input(kDy, dyi, rounding) * input(kW, wi, rounding);
            sum += term;
            mag += std::fabs(term);
          });
        if (!reference::acceptable(to_dtype(t[kGx].dtype), OverflowMode::ieee, sum,
                                   reference::fp32_allowance(mag, cout_g * kvol), output(kGx, i)))
          bug("gradInput" + list(i) + " is " + std::to_string(output(kGx, i)) + ", float64 sum " +
              std::to_string(sum));
      });
    }
    const double f64 = std::ldexp(1.0, -52);  // gradWeight and gradBias: float64 sums, one rounding
    if (want[1]) {
      for_each(t[kGw].dims, [&](const std::vector<std::int64_t>& i) {
        const std::int64_t co = i[0], ci = i[1], c = co / cout_g * cin_g + ci;
        double sum = 0, mag = 0;
        std::int64_t terms = 0;
        std::vector<std::int64_t> od = out;
        for_each(cat({N}, od), [&](const std::vector<std::int64_t>& o) {
          std::vector<std::int64_t> dyi = {o[0], co}, xi = {o[0], c};
          for (std::size_t a = 0; a < ns; ++a) {
            const std::int64_t pos = o[1 + a] * stride[a] + i[2 + a] * dilation[a] - pad_f[a];
            if (pos < 0 || pos >= in[a]) return;
            dyi.push_back(o[1 + a]);
            xi.push_back(pos);
          }
          const double term = input(kDy, dyi, rounding) * input(kX, xi, rounding);
          sum += term;
          mag += std::fabs(term);
          ++terms;
        });
        if (!reference::acceptable(to_dtype(t[kGw].dtype), OverflowMode::ieee, sum,
                                   static_cast<double>(terms + 1) * f64 * mag, output(kGw, i)))
          bug("gradWeight" + list(i) + " is " + std::to_string(output(kGw, i)) + ", float64 sum " +
              std::to_string(sum));
      });
    }
    if (want[2]) {
      for (std::int64_t co = 0; co < cout; ++co) {
        double sum = 0, mag = 0;
        std::int64_t terms = 0;
        for_each(cat({N}, out), [&](const std::vector<std::int64_t>& o) {
          std::vector<std::int64_t> dyi = {o[0], co};
          dyi.insert(dyi.end(), o.begin() + 1, o.end());
          const double v = input(kDy, dyi, InputRounding::none);
          sum += v;
          mag += std::fabs(v);
          ++terms;
        });
        if (!reference::acceptable(to_dtype(t[kGb].dtype), OverflowMode::ieee, sum,
                                   static_cast<double>(terms + 1) * f64 * mag, output(kGb, {co})))
          bug("gradBias[" + std::to_string(co) + "] is " + std::to_string(output(kGb, {co})) +
              ", float64 sum " + std::to_string(sum));
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider fdp(data, size);
  const int rank = fdp.ConsumeIntegralInRange<int>(0, 15) == 0 ? fdp.ConsumeIntegralInRange<int>(2, 6)
                                                               : fdp.ConsumeIntegralInRange<int>(3, 5);
  const std::size_t ns = static_cast<std::size_t>(std::max(rank - 2, 0));
  const std::int64_t N = fdp.ConsumeIntegralInRange<std::int64_t>(0, 2);
  const int groups = fdp.ConsumeIntegralInRange<int>(1, 3);
  const std::int64_t cin_g = fdp.ConsumeIntegralInRange<std::int64_t>(1, 3);
  const std::int64_t cout_g = fdp.ConsumeIntegralInRange<std::int64_t>(1, 3);
  std::vector<std::int64_t> in(ns), kernel(ns), stride(ns), dilation(ns), pad_f(ns), pad_b(ns), out(ns);
  for (std::size_t i = 0; i < ns; ++i) {
    in[i] = fdp.ConsumeIntegralInRange<std::int64_t>(1, 6);
    kernel[i] = fdp.ConsumeIntegralInRange<std::int64_t>(1, 3);
    stride[i] = fdp.ConsumeIntegralInRange<std::int64_t>(1, 3);
    dilation[i] = fdp.ConsumeIntegralInRange<std::int64_t>(1, 2);
    pad_f[i] = fdp.ConsumeIntegralInRange<std::int64_t>(0, 2);
    pad_b[i] = rank == 4 && fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<std::int64_t>(0, 2) : pad_f[i];
    const std::int64_t dilated = (kernel[i] - 1) * dilation[i] + 1, padded = in[i] + pad_f[i] + pad_b[i];
    out[i] = padded >= dilated ? (padded - dilated) / stride[i] + 1 : 1;
  }
  std::array<Placed, kSlots> t;
  if (rank >= 2) {
    t[kDy].dims = cat({N, groups * cout_g}, out);
    t[kX].dims = cat({N, groups * cin_g}, in);
    t[kW].dims = cat({groups * cout_g, cin_g}, kernel);
  } else {
    t[kDy].dims = t[kX].dims = t[kW].dims = {N};
  }
  t[kGx].dims = t[kX].dims;
  t[kGw].dims = t[kW].dims;
  t[kGb].dims = {groups * cout_g};
  if (fdp.ConsumeIntegralInRange<int>(0, 7) == 0) {  // one dim off by one
    Placed& p = t[fdp.ConsumeIntegralInRange<int>(0, kSlots - 1)];
    if (!p.dims.empty())
      p.dims[fdp.ConsumeIntegralInRange<std::size_t>(0, p.dims.size() - 1)] += fdp.ConsumeBool() ? 1 : -1;
  }
  const bool same_dtype = fdp.ConsumeBool();
  const aclDataType common = kDtypes[fdp.ConsumeIntegralInRange<int>(0, 4)];
  for (int s = 0; s < kSlots; ++s) {
    Placed& p = t[s];
    p.dtype = same_dtype ? common : kDtypes[fdp.ConsumeIntegralInRange<int>(0, 6)];
    const aclFormat own = p.dims.size() == 5   ? ACL_FORMAT_NCDHW
                          : p.dims.size() == 4 ? ACL_FORMAT_NCHW
                                               : ACL_FORMAT_NCL;
    const int f = fdp.ConsumeIntegralInRange<int>(0, 9);
    p.format = s == kGb ? ACL_FORMAT_ND : f < 6 ? own : f < 9 ? ACL_FORMAT_ND : ACL_FORMAT_NHWC;
    choose_placement(fdp, p, s);
  }
  if (t[kGx].dtype == t[kX].dtype && fdp.ConsumeIntegralInRange<int>(0, 7) == 0) {
    // gradInput exactly over input: allowed, and must give the out-of-place results.
    t[kGx].strides = t[kX].strides;
    t[kGx].offset = t[kX].offset;
    t[kGx].buffer = t[kX].buffer;
    t[kGx].hostile = t[kX].hostile;
    t[kGx].null_strides = t[kX].null_strides;
    t[kGx].dims = t[kX].dims;
  }

  // Buffers sized for the tensors placed in them; inputs filled with values, everything else a pattern.
  std::array<Buffer, kSlots> buffers;
  for (int s = 0; s < kSlots; ++s) {
    const Placed& p = t[s];
    if (p.hostile) continue;
    for (std::int64_t d : p.dims)
      if (d < 0) return 0;
    const std::size_t need = static_cast<std::size_t>(p.offset + p.extent()) * size_of(p.dtype) + 64;
    Buffer& b = buffers[static_cast<std::size_t>(p.buffer)];
    if (b.bytes.size() < need + 64) b.bytes.assign(need + 64, 0);
  }
  for (Buffer& b : buffers)
    if (!b.bytes.empty()) std::memset(b.bytes.data(), 0xA5, b.bytes.size());
  const bool specials = fdp.ConsumeIntegralInRange<int>(0, 3) == 0;
  for (int s : {kDy, kX, kW}) {
    Placed& p = t[s];
    if (p.hostile || !is_float(p.dtype)) continue;
    unsigned char* base = buffers[static_cast<std::size_t>(p.buffer)].base();
    for_each(p.dims, [&](const std::vector<std::int64_t>& i) {
      numeric::store_f32(to_dtype(p.dtype), base, p.at(i), value(fdp, specials), OverflowMode::ieee);
    });
  }
  for (int s = 0; s < kSlots; ++s) {
    Placed& p = t[s];
    if (p.hostile) {
      p.tensor = aclCreateTensor(p.dims.data(), p.dims.size(), p.dtype, p.strides.data(), p.offset, p.format,
                                 p.hostile_storage.data(), p.hostile_storage.size(), nullptr);
      continue;
    }
    Buffer& b = buffers[static_cast<std::size_t>(p.buffer)];
    const std::int64_t storage =
        static_cast<std::int64_t>((b.bytes.size() - 64) / size_of(p.dtype));  // elements after base()
    p.tensor =
        aclCreateTensor(p.dims.data(), p.dims.size(), p.dtype, p.null_strides ? nullptr : p.strides.data(),
                        p.offset, p.format, &storage, 1, b.base());
    if (p.tensor == nullptr && aclGetRecentErrMsg()[0] == '\0')
      bug("aclCreateTensor failed without a message");
  }

  // The arrays and flags.
  std::vector<std::int64_t> padding;
  const int pad_kind = fdp.ConsumeIntegralInRange<int>(0, 9);
  if (rank == 4 && pad_kind < 5) {
    padding = {pad_f[0], pad_b[0], pad_f[1], pad_b[1]};
  } else {
    padding = pad_f;
    if (pad_kind == 9) padding.push_back(1);
  }
  std::vector<std::int64_t> output_padding(ns, 0);
  if (fdp.ConsumeIntegralInRange<int>(0, 15) == 0 && !output_padding.empty()) output_padding[0] = 1;
  bool mask_values[4] = {fdp.ConsumeBool(), fdp.ConsumeBool(), fdp.ConsumeBool(), false};
  const std::size_t mask_size = fdp.ConsumeIntegralInRange<int>(0, 15) == 0 ? 2 : 3;
  const std::int8_t cube = static_cast<std::int8_t>(fdp.ConsumeIntegralInRange<int>(-1, 4));
  const bool transposed = fdp.ConsumeIntegralInRange<int>(0, 31) == 0;
  const int groups_arg = fdp.ConsumeIntegralInRange<int>(0, 15) == 0 ? fdp.ConsumeIntegral<int>() : groups;
  const std::int64_t cout = groups * cout_g;
  aclIntArray* a_stride = aclCreateIntArray(stride.data(), stride.size());
  aclIntArray* a_padding = aclCreateIntArray(padding.data(), padding.size());
  aclIntArray* a_dilation = aclCreateIntArray(dilation.data(), dilation.size());
  aclIntArray* a_output_padding = aclCreateIntArray(output_padding.data(), output_padding.size());
  aclIntArray* a_bias = fdp.ConsumeBool() ? aclCreateIntArray(&cout, 1) : nullptr;
  aclBoolArray* a_mask = aclCreateBoolArray(mask_values, mask_size);

  g_case = "rank " + std::to_string(rank) + " stride " + list(stride) + " padding " + list(padding) +
           " dilation " + list(dilation) + " groups " + std::to_string(groups_arg) + " cube " +
           std::to_string(cube) + " mask " + std::to_string(mask_values[0]) + std::to_string(mask_values[1]) +
           std::to_string(mask_values[2]);
  for (int s = 0; s < kSlots; ++s) {
    const Placed& p = t[s];
    g_case += "\n    tensor " + std::to_string(s) + ": dims " + list(p.dims) + " strides " + list(p.strides) +
              " offset " + std::to_string(p.offset) + " dtype " + std::to_string(p.dtype) + " buffer " +
              std::to_string(p.buffer) + (p.hostile ? " hostile" : "") + (p.tensor ? "" : " (not created)");
  }
  std::vector<std::vector<unsigned char>> before;
  for (Buffer& b : buffers) before.push_back(b.bytes);
  std::uint64_t ws = 0;
  aclOpExecutor* executor = nullptr;
  aclnnStatus status = aclnnConvolutionBackwardGetWorkspaceSize(
      t[kDy].tensor, t[kX].tensor, t[kW].tensor, a_bias, a_stride, a_padding, a_dilation, transposed,
      a_output_padding, groups_arg, a_mask, cube, t[kGx].tensor, t[kGw].tensor, t[kGb].tensor, &ws,
      &executor);
  if (status == ACLNN_SUCCESS) {
    if (executor == nullptr) bug("success without an executor");
    if (ws > (std::uint64_t{1} << 30)) bug("a tiny problem asks for more than 1 GiB of workspace");
    std::vector<unsigned char> workspace(static_cast<std::size_t>(ws) + 1);
    status = aclnnConvolutionBackward(workspace.data(), ws, executor, nullptr);
    if (status != ACLNN_SUCCESS) bug("the executor of a successful GetWorkspaceSize failed");
    ++g_stats.succeeded;
  } else {
    if (status != ACLNN_ERR_PARAM_NULLPTR && status != ACLNN_ERR_PARAM_INVALID) bug("unexpected status");
    ++g_stats.refused;
    if (aclGetRecentErrMsg()[0] == '\0') bug("an error without a message");
    for (std::size_t b = 0; b < buffers.size(); ++b)
      if (buffers[b].bytes != before[b]) bug("memory written by a failed call");
  }

  bool hostile = false;  // a hostile descriptor in the call: it can only have succeeded without elements
  for (const Placed& p : t) hostile = hostile || p.hostile;
  if (status == ACLNN_SUCCESS && !hostile) {
    Call call;
    call.rank = rank;
    call.groups = groups_arg;
    call.cube = cube;
    call.stride = stride;
    call.padding = padding;
    call.dilation = dilation;
    for (int i = 0; i < 3; ++i) call.want[i] = mask_values[i];
    check_success(t, buffers, before, call);
  }

  for (Placed& p : t) aclDestroyTensor(p.tensor);
  aclDestroyIntArray(a_stride);
  aclDestroyIntArray(a_padding);
  aclDestroyIntArray(a_dilation);
  aclDestroyIntArray(a_output_padding);
  aclDestroyIntArray(a_bias);
  aclDestroyBoolArray(a_mask);
  return 0;
}
