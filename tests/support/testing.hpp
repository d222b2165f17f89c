// Shared test helpers: problems described in canonical terms, tensors in any layout (optionally padded so
// views are non-contiguous), random or small-integer data, canaries, and the docs/numerics.md accuracy check.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "conv3d_dx/conv3d_dx.hpp"

namespace conv3d_dx::testing {

// Whether this build runs under AddressSanitizer or ThreadSanitizer: their runtimes reserve terabytes of
// address space and run threads of their own, so tests that limit memory or fork skip there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitizedBuild = true;
#else
constexpr bool kSanitizedBuild = false;
#endif
#else
constexpr bool kSanitizedBuild = false;
#endif

// A problem in canonical terms; layouts and dtypes say how its tensors are stored.
struct Case {
  std::int64_t N = 1, Cin = 4, Cout = 4, groups = 1;
  std::array<std::int64_t, 3> in{5, 5, 5}, kernel{3, 3, 3}, stride{1, 1, 1}, dilation{1, 1, 1};
  std::array<std::int64_t, 3> pad_front{}, pad_back{};
  DType dtype = DType::f32;
  DType y_dtype = DType::f32;
  Layout data_format = Layout::NDHWC, filter_format = Layout::NCDHW;
  bool hf32 = false;
  OverflowMode overflow = OverflowMode::ieee;
  bool strided_views = false;  // pad every dimension of every tensor so views are non-contiguous

  std::array<std::int64_t, 3> out() const;  // dy spatial sizes implied by the rest
  std::string name() const;                 // the whole configuration, replayable
};

// Same dtype for every tensor.
Case with_dtype(Case c, DType t);

// A small random valid case: groups (1, 2, depthwise), strides 1..4, dilations 1..3, asymmetric pads,
// kernels from 1 to 4, sometimes stride > kernel; dtype and layouts as given.
Case random_case(std::mt19937_64& rng, DType dtype, Layout data_format, Layout filter_format);

constexpr DType kAllDtypes[] = {DType::f32, DType::f16, DType::bf16, DType::hif8, DType::fp8_e4m3fn};
constexpr Layout kDataFormats[] = {Layout::NDHWC, Layout::NCDHW};
constexpr Layout kFilterFormats[] = {Layout::NCDHW, Layout::NDHWC, Layout::DHWCN};

// Memory of one tensor plus the view describing it.
struct Tensor {
  std::vector<unsigned char> bytes;
  TensorView view;  // view.data points into bytes (or is null)

  Tensor() = default;
  // A copy views its own bytes at the same offset, so it is a snapshot independent of the original.
  Tensor(const Tensor& o) : bytes(o.bytes), view(o.view) { view.data = rebased(o); }
  Tensor& operator=(const Tensor& o) {
    bytes = o.bytes;
    view = o.view;
    view.data = rebased(o);
    return *this;
  }
  Tensor(Tensor&&) noexcept = default;  // a moved vector keeps its buffer: view.data stays valid
  Tensor& operator=(Tensor&&) noexcept = default;

  std::int64_t elements() const;  // logical elements

 private:
  void* rebased(const Tensor& o) {
    if (o.view.data == nullptr) return nullptr;
    return bytes.data() + (static_cast<const unsigned char*>(o.view.data) - o.bytes.data());
  }
};

// Shape given in canonical order (N, C, D, H, W or Cout, Cin_g, kD, kH, kW), laid out as `layout`.
Tensor make_tensor(DType dtype, Layout layout, const std::array<std::int64_t, 5>& canonical, bool filter,
                   bool padded);

enum class Fill {
  small_integers,  // integers in [-3, 3]: every fp32 sum in the tests is exact
  random,          // values spread over magnitudes, representable in the dtype
  nan,             // every element NaN: an output whose sums did not start from +0 shows
};
void fill(Tensor& t, std::mt19937_64& rng, Fill kind);
// Every byte of the buffer (padding included) set to a pattern; canary_intact checks it is unchanged.
void fill_canary(Tensor& t);
bool canary_intact(const Tensor& t);
// Padding bytes (outside the view) still hold the canary.
bool padding_intact(const Tensor& t);

struct Instance {
  Tensor dy, filter, y;
  ProblemSpec spec;
};
Instance instantiate(const Case& c, std::mt19937_64& rng, Fill kind);

// Element (n, c, d, h, w) of a feature-map tensor, canonical index, decoded to double.
double element(const Tensor& t, const std::array<std::int64_t, 5>& canonical_index);

// y against the float64 reference: exact for fp32 sums that are exact; otherwise within docs/numerics.md
// (fp32 error of a few units of 2^-24 times sum |dy*w|, then one rounding to the output type).
::testing::AssertionResult matches_reference(const Problem& p, const Instance& inst);
// fp32 y on small-integer data: every sum is exact, so y must equal the reference exactly.
::testing::AssertionResult exactly_reference(const Problem& p, const Instance& inst);

// The engines' random sweep: for every dtype, data format and filter format, `reps` cases from random_case,
// varied by rep: 1 HF32 (fp32 inputs) or saturation (others), 2 and 4 fp32 y, 3 strided views; odd reps on
// random data, even ones on small integers. `check` runs and checks each; the sweep stops at a fatal failure.
void random_sweep(std::mt19937_64& rng, int reps, const std::function<void(const Case&, Fill)>& check);

// y in canonical contiguous order [N, Cin, Di, Hi, Wi] as float64 sums, computed independently of the
// library's reference: every dy element scattered through every tap it reaches (inputs decoded and
// HF32-rounded by code of its own). Exact on small integers, where it must equal reference::compute.
std::vector<double> brute_force_scatter(const Case& c, const Instance& inst);
// Bitwise equality of two y tensors over their logical elements.
::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b);

}  // namespace conv3d_dx::testing
