// Helpers for the aclnn tests: host tensors with arbitrary views, one convolution case run both through
// aclnnConvolutionBackward and through the C++ API (conv3d_dx) on contiguous copies.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_convolution_backward.h"
#include "conv3d_dx/conv3d_dx.hpp"
#include "numeric/numeric.hpp"

namespace acl_test {

inline conv3d_dx::DType to_dtype(aclDataType t) {
  switch (t) {
    case ACL_FLOAT16:
      return conv3d_dx::DType::f16;
    case ACL_BF16:
      return conv3d_dx::DType::bf16;
    case ACL_HIFLOAT8:
      return conv3d_dx::DType::hif8;
    case ACL_FLOAT8_E4M3FN:
      return conv3d_dx::DType::fp8_e4m3fn;
    default:
      return conv3d_dx::DType::f32;
  }
}

inline std::size_t element_size(aclDataType t) { return conv3d_dx::dtype_size(to_dtype(t)); }

inline std::int64_t product(const std::vector<std::int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), std::int64_t{1}, std::multiplies<>());
}

// How a tensor's elements sit in its storage: contiguous, or permuted with gaps after every axis and an
// offset (every element of the view is still distinct).
struct Placement {
  bool strided = false;
  std::int64_t offset = 0;
};

// A tensor whose storage is a host vector (device memory is host memory), created with aclCreateTensor.
class HostTensor {
 public:
  static constexpr unsigned char kCanary = 0x5A;

  HostTensor(std::vector<std::int64_t> dims, aclDataType dtype, Placement placement = {},
             aclFormat format = ACL_FORMAT_ND)
      : dims_(std::move(dims)), dtype_(dtype), offset_(placement.offset) {
    const std::size_t r = dims_.size();
    strides_.assign(r, 1);
    std::vector<std::size_t> order(r);  // innermost axis first
    std::iota(order.begin(), order.end(), 0);
    std::reverse(order.begin(), order.end());
    if (placement.strided && r >= 2) std::swap(order[0], order[r - 1]);  // e.g. N innermost, W outermost
    std::int64_t step = 1;
    for (std::size_t a : order) {
      strides_[a] = step;
      step *= std::max<std::int64_t>(dims_[a], 1) + (placement.strided ? 1 : 0);
    }
    storage_elements_ = offset_ + step;
    storage_.assign(static_cast<std::size_t>(storage_elements_) * element_size(dtype_), kCanary);
    tensor_ = aclCreateTensor(dims_.data(), r, dtype_, strides_.data(), offset_, format, &storage_elements_,
                              1, storage_.data());
    EXPECT_NE(tensor_, nullptr) << aclGetRecentErrMsg();
  }
  ~HostTensor() { EXPECT_EQ(aclDestroyTensor(tensor_), ACLNN_SUCCESS); }
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;

  aclTensor* get() const { return tensor_; }
  std::int64_t elements() const { return product(dims_); }
  aclDataType dtype() const { return dtype_; }

  // Storage index of the logical element with row-major index i.
  std::int64_t at(std::int64_t i) const {
    std::int64_t pos = offset_;
    for (std::size_t a = dims_.size(); a-- > 0;) {
      pos += i % dims_[a] * strides_[a];
      i /= dims_[a];
    }
    return pos;
  }
  // Element i as its raw code (1, 2 or 4 bytes).
  std::uint32_t code(std::int64_t i) const {
    std::uint32_t c = 0;
    std::memcpy(&c, storage_.data() + at(i) * static_cast<std::int64_t>(element_size(dtype_)),
                element_size(dtype_));
    return c;
  }
  void set_code(std::int64_t i, std::uint32_t c) {
    std::memcpy(storage_.data() + at(i) * static_cast<std::int64_t>(element_size(dtype_)), &c,
                element_size(dtype_));
  }
  float value(std::int64_t i) const {
    const std::uint32_t c = code(i);
    return conv3d_dx::numeric::load_f32(to_dtype(dtype_), &c, 0);
  }
  void set_value(std::int64_t i, float v) {
    std::uint32_t c = 0;
    conv3d_dx::numeric::store_f32(to_dtype(dtype_), &c, 0, v, conv3d_dx::OverflowMode::ieee);
    set_code(i, c);
  }
  // The view's elements in row-major order, as raw codes (contiguous, element_size bytes each).
  std::vector<unsigned char> contiguous() const {
    const std::size_t es = element_size(dtype_);
    std::vector<unsigned char> out(static_cast<std::size_t>(elements()) * es);
    for (std::int64_t i = 0; i < elements(); ++i) {
      const std::uint32_t c = code(i);
      std::memcpy(out.data() + i * static_cast<std::int64_t>(es), &c, es);
    }
    return out;
  }
  // Bytes of storage that no element of the view covers and that differ from the canary.
  std::int64_t touched_gaps() const {
    std::vector<bool> covered(static_cast<std::size_t>(storage_elements_), false);
    for (std::int64_t i = 0; i < elements(); ++i) covered[static_cast<std::size_t>(at(i))] = true;
    std::int64_t n = 0;
    const std::size_t es = element_size(dtype_);
    for (std::size_t e = 0; e < covered.size(); ++e)
      for (std::size_t b = 0; b < es && !covered[e]; ++b) n += storage_[e * es + b] != kCanary;
    return n;
  }

 private:
  std::vector<std::int64_t> dims_, strides_;
  aclDataType dtype_;
  std::int64_t offset_ = 0, storage_elements_ = 0;
  std::vector<unsigned char> storage_;
  aclTensor* tensor_ = nullptr;
};

class IntArray {
 public:
  explicit IntArray(std::vector<std::int64_t> v)
      : v_(std::move(v)), a_(aclCreateIntArray(v_.data(), v_.size())) {}
  ~IntArray() { aclDestroyIntArray(a_); }
  IntArray(const IntArray&) = delete;
  IntArray& operator=(const IntArray&) = delete;
  aclIntArray* get() const { return a_; }

 private:
  std::vector<std::int64_t> v_;
  aclIntArray* a_;
};

class BoolArray {
 public:
  explicit BoolArray(std::vector<bool> v) {
    std::unique_ptr<bool[]> raw(new bool[v.size() + 1]);
    for (std::size_t i = 0; i < v.size(); ++i) raw[i] = v[i];
    a_ = aclCreateBoolArray(raw.get(), v.size());
  }
  ~BoolArray() { aclDestroyBoolArray(a_); }
  BoolArray(const BoolArray&) = delete;
  BoolArray& operator=(const BoolArray&) = delete;
  aclBoolArray* get() const { return a_; }

 private:
  aclBoolArray* a_ = nullptr;
};

// Random values a dtype represents exactly: multiples of 1/8 in [-1, 1] (`exact`), or any finite value of
// moderate size rounded to the dtype.
inline void fill(HostTensor& t, std::mt19937& rng, bool exact) {
  std::uniform_int_distribution<int> small(-8, 8);
  std::uniform_real_distribution<float> real(-2.0f, 2.0f);
  for (std::int64_t i = 0; i < t.elements(); ++i)
    t.set_value(i, exact ? static_cast<float>(small(rng)) / 8.0f : real(rng));
}

// One convolution in aclnn terms. Spatial vectors have rank - 2 entries.
struct Case {
  int rank = 5;
  std::int64_t N = 2, Cin = 4, Cout = 6, groups = 2;
  std::vector<std::int64_t> in{5, 6, 7}, kernel{3, 3, 3}, stride{2, 2, 2}, pad{1, 1, 1}, dilation{1, 1, 1};
  std::vector<std::int64_t> padding_arg;  // what is passed as padding; empty: `pad`
  std::vector<std::int64_t> pad_back;     // empty: symmetric
  aclDataType dy_type = ACL_FLOAT, x_type = ACL_FLOAT, w_type = ACL_FLOAT;
  std::int8_t cube = 0;
  Placement dy_place, x_place, w_place, gx_place;
  unsigned seed = 1;
  bool exact = false;

  std::size_t ns() const { return static_cast<std::size_t>(rank - 2); }
  std::int64_t back(std::size_t i) const { return pad_back.empty() ? pad[i] : pad_back[i]; }
  std::vector<std::int64_t> out() const {
    std::vector<std::int64_t> o;
    for (std::size_t i = 0; i < ns(); ++i)
      o.push_back((in[i] + pad[i] + back(i) - (kernel[i] - 1) * dilation[i] - 1) / stride[i] + 1);
    return o;
  }
  std::vector<std::int64_t> x_dims() const { return cat({N, Cin}, in); }
  std::vector<std::int64_t> dy_dims() const { return cat({N, Cout}, out()); }
  std::vector<std::int64_t> w_dims() const { return cat({Cout, Cin / groups}, kernel); }
  std::string describe() const;

  static std::vector<std::int64_t> cat(std::vector<std::int64_t> a, const std::vector<std::int64_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }
};

inline std::string Case::describe() const {
  auto s = [](const std::vector<std::int64_t>& v) {
    std::string r;
    for (auto x : v) r += (r.empty() ? "" : ",") + std::to_string(x);
    return "[" + r + "]";
  };
  return "rank " + std::to_string(rank) + " N " + std::to_string(N) + " Cin " + std::to_string(Cin) +
         " Cout " + std::to_string(Cout) + " G " + std::to_string(groups) + " in " + s(in) + " k " +
         s(kernel) + " s " + s(stride) + " p " + s(pad) + "/" + s(pad_back) + " d " + s(dilation) +
         " dtypes " + std::to_string(dy_type) + "," + std::to_string(x_type) + "," + std::to_string(w_type) +
         " cube " + std::to_string(cube) + " seed " + std::to_string(seed);
}

// The case's tensors with data; gradInput starts as canaries.
struct Tensors {
  HostTensor dy, x, w, gx;
  explicit Tensors(const Case& c)
      : dy(c.dy_dims(), c.dy_type, c.dy_place),
        x(c.x_dims(), c.x_type, c.x_place),
        w(c.w_dims(), c.w_type, c.w_place),
        gx(c.x_dims(), c.x_type, c.gx_place) {
    std::mt19937 rng(c.seed);
    fill(dy, rng, c.exact);
    fill(w, rng, c.exact);
  }
};

struct AclResult {
  aclnnStatus status = ACLNN_SUCCESS;
  std::string message;
  std::uint64_t workspace = 0;
};

// Runs an executor with a workspace of the size it asked for.
inline aclnnStatus run_executor(aclOpExecutor* executor, std::uint64_t workspace_size,
                                aclrtStream stream = nullptr) {
  std::vector<unsigned char> workspace(workspace_size);
  return aclnnConvolutionBackward(workspace.data(), workspace_size, executor, stream);
}

// Runs the case through both phases of aclnnConvolutionBackward (workspace from aclrtMalloc).
inline AclResult run_aclnn(const Case& c, Tensors& t) {
  IntArray stride(c.stride), padding(c.padding_arg.empty() ? c.pad : c.padding_arg), dilation(c.dilation),
      output_padding(std::vector<std::int64_t>(c.ns(), 0));
  BoolArray mask({true, false, false});
  AclResult r;
  aclOpExecutor* executor = nullptr;
  r.status = aclnnConvolutionBackwardGetWorkspaceSize(
      t.dy.get(), t.x.get(), t.w.get(), nullptr, stride.get(), padding.get(), dilation.get(), false,
      output_padding.get(), static_cast<int>(c.groups), mask.get(), c.cube, t.gx.get(), nullptr, nullptr,
      &r.workspace, &executor);
  if (r.status != ACLNN_SUCCESS) {
    r.message = aclGetRecentErrMsg();
    return r;
  }
  void* ws = nullptr;
  if (r.workspace > 0) {
    EXPECT_EQ(aclrtMalloc(&ws, r.workspace, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  }
  aclrtStream stream = nullptr;
  EXPECT_EQ(aclrtCreateStream(&stream), ACL_SUCCESS);
  r.status = aclnnConvolutionBackward(ws, r.workspace, executor, stream);
  if (r.status != ACLNN_SUCCESS) r.message = aclGetRecentErrMsg();
  EXPECT_EQ(aclrtSynchronizeStream(stream), ACL_SUCCESS);
  EXPECT_EQ(aclrtDestroyStream(stream), ACL_SUCCESS);
  if (ws != nullptr) {
    EXPECT_EQ(aclrtFree(ws), ACL_SUCCESS);
  }
  return r;
}

// The same case through the C++ API on contiguous copies of the inputs: gradInput's elements in row-major
// order as raw codes. USE_FP16 (cube 2) is fp16 input rounding, an fp16 result, then gradInput's dtype. The
// C++ API writes y in an input dtype or fp32; other gradInput dtypes are computed in fp32 and rounded once.
inline std::vector<unsigned char> run_cpp(const Case& c, const Tensors& t) {
  using namespace conv3d_dx;
  const std::vector<unsigned char> dy = t.dy.contiguous(), w = t.w.contiguous();
  auto to5 = [&](const std::vector<std::int64_t>& d) {
    std::array<std::int64_t, 5> s{d[0], d[1], 1, 1, 1};
    for (std::size_t i = 0; i < c.ns(); ++i) s[5 - c.ns() + i] = d[2 + i];
    return s;
  };
  ProblemSpec spec;
  spec.allow_mixed_dtypes = true;
  spec.attrs.data_format = Layout::NCDHW;
  const auto y_shape = to5(c.x_dims());
  spec.attrs.input_size.assign(y_shape.begin(), y_shape.end());
  for (std::size_t i = 0; i < c.ns(); ++i) {
    const std::size_t axis = 3 - c.ns() + i;
    spec.attrs.strides[2 + axis] = c.stride[i];
    spec.attrs.dilations[2 + axis] = c.dilation[i];
    spec.attrs.pads[2 * axis] = c.pad[i];
    spec.attrs.pads[2 * axis + 1] = c.back(i);
  }
  spec.attrs.groups = c.groups;
  spec.input_rounding = c.cube == 2                    ? InputRounding::fp16
                        : (c.cube == 1 || c.cube == 3) ? InputRounding::hf32
                                                       : InputRounding::none;
  const bool through_fp16 = c.cube == 2 && c.x_type != ACL_FLOAT16;
  const bool via_f32 =
      through_fp16 || !(c.x_type == c.dy_type || c.x_type == c.w_type || c.x_type == ACL_FLOAT);
  const DType y_type = via_f32 ? DType::f32 : to_dtype(c.x_type);
  std::vector<unsigned char> y(static_cast<std::size_t>(product(c.x_dims())) * dtype_size(y_type));
  spec.out_backprop = TensorView::contiguous(dy.data(), to_dtype(c.dy_type), Layout::NCDHW, to5(c.dy_dims()));
  spec.filter = TensorView::contiguous(w.data(), to_dtype(c.w_type), Layout::NCDHW, to5(c.w_dims()));
  spec.y = TensorView::contiguous(y.data(), y_type, Layout::NCDHW, y_shape);
  conv3d_backprop_input(spec);
  if (!via_f32) return y;
  std::vector<unsigned char> out(static_cast<std::size_t>(product(c.x_dims())) * element_size(c.x_type));
  for (std::int64_t i = 0; i < product(c.x_dims()); ++i) {
    float v = numeric::load_f32(DType::f32, y.data(), i);
    if (through_fp16) v = numeric::fp16_to_f32(numeric::f32_to_fp16(v, false));
    numeric::store_f32(to_dtype(c.x_type), out.data(), i, v, OverflowMode::ieee);
  }
  return out;
}

// aclnn and the C++ API agree bitwise on the case; gradInput's gaps stay untouched.
inline void expect_same_as_cpp(const Case& c) {
  SCOPED_TRACE(c.describe());
  Tensors t(c);
  const AclResult r = run_aclnn(c, t);
  ASSERT_EQ(r.status, ACLNN_SUCCESS) << r.message;
  const std::vector<unsigned char> expected = run_cpp(c, t);
  const std::vector<unsigned char> got = t.gx.contiguous();
  ASSERT_EQ(got.size(), expected.size());
  std::size_t mismatches = 0, first = got.size();
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != expected[i] && mismatches++ == 0) first = i;
  EXPECT_EQ(mismatches, 0u) << "first differing byte " << first;
  EXPECT_EQ(t.gx.touched_gaps(), 0);
}

}  // namespace acl_test
