// conv3d-dx: the gradient of a 3D convolution with respect to its input (Conv3DBackpropInputV2).
//
// Data flow: a front end (operator call, aclnn, CLI) builds a validated Problem, a Plan chooses an engine
// and packs the filter, execute() writes y. Errors are thrown as conv3d_dx::Error.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace conv3d_dx {

enum class DType { f32, f16, bf16, hif8, fp8_e4m3fn };
// Feature maps use NCDHW or NDHWC; filters also DHWCN ([kD, kH, kW, Cin_g, Cout]).
enum class Layout { NCDHW, NDHWC, DHWCN };
// What happens to finite values beyond an output type's range (docs/numerics.md).
enum class OverflowMode { ieee, saturate };
// Rounding applied to every input element before multiplication.
enum class InputRounding { none, hf32, fp16 };
// Instruction-set level of the fast engine; `best` picks the best the CPU has.
// amx_bf16: AMX tiles (tdpbf16ps) for inputs exact in bf16 (bf16, HiFloat8, FP8 E4M3FN), AVX-512 for the
// rest.
enum class Isa { best, amx_bf16, avx512_bf16, avx512, avx2, portable, reference };

enum class ErrorCode {
  invalid_argument = 1,
  null_pointer,
  size_overflow,
  out_of_memory,
  unsupported,
  internal
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string parameter, const std::string& message)
      : std::runtime_error(message), code_(code), parameter_(std::move(parameter)) {}
  ErrorCode code() const noexcept { return code_; }
  // The parameter the error is about, e.g. "strides" or "out_backprop"; empty when none applies.
  const std::string& parameter() const noexcept { return parameter_; }

 private:
  ErrorCode code_;
  std::string parameter_;
};

const char* to_string(DType);
const char* to_string(Layout);
const char* to_string(Isa);
const char* to_string(OverflowMode);   // "ieee", "saturate"
const char* to_string(InputRounding);  // "none", "hf32", "fp16"
std::size_t dtype_size(DType);
// Parse "fp32"/"float32", "fp16", "bf16", "hif8"/"hifloat8", "fp8_e4m3fn"/"float8_e4m3fn"; "NCDHW" etc.
DType parse_dtype(const std::string&);
Layout parse_layout(const std::string&);
Isa parse_isa(const std::string&);

// A 5-D tensor in memory: shape and element strides are given in the order of `layout`
// (NDHWC: N, D, H, W, C). Strides may be arbitrary (non-contiguous views); see contiguous().
// Views of inputs are never written through; data is non-const only so one type serves y too.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Layout layout = Layout::NCDHW;
  std::array<std::int64_t, 5> shape{};
  std::array<std::int64_t, 5> strides{};

  static TensorView contiguous(const void* data, DType dtype, Layout layout,
                               std::array<std::int64_t, 5> shape);
};

// The operator's attributes, exactly as Conv3DBackpropInputV2 takes them (docs/operator.md).
struct Attributes {
  std::vector<std::int64_t> input_size;  // 5 values in data_format order, or 4 (D = 1 inserted)
  std::array<std::int64_t, 5> strides{1, 1, 1, 1, 1};
  std::array<std::int64_t, 6> pads{};  // front, back, top, bottom, left, right
  std::array<std::int64_t, 5> dilations{1, 1, 1, 1, 1};
  std::int64_t groups = 1;
  Layout data_format = Layout::NDHWC;
  bool enable_hf32 = false;
};

// The canonical, validated description every engine works from. All sizes are int64.
// Element strides are in canonical order: dy and y [N, C, D, H, W]; filter [Cout, Cin_g, kD, kH, kW].
struct Problem {
  std::int64_t N = 0, G = 1, Cin_g = 0, Cout_g = 0;
  std::array<std::int64_t, 3> y_size{};   // spatial sizes of y: Di, Hi, Wi
  std::array<std::int64_t, 3> dy_size{};  // spatial sizes of dy (out_backprop): Do, Ho, Wo
  std::array<std::int64_t, 3> kernel{}, stride{1, 1, 1}, dilation{1, 1, 1}, pad_front{}, pad_back{};
  DType dy_dtype = DType::f32, filter_dtype = DType::f32, y_dtype = DType::f32;
  Layout data_format = Layout::NCDHW, filter_format = Layout::NCDHW;  // as the caller gave them
  InputRounding input_rounding = InputRounding::none;
  OverflowMode overflow = OverflowMode::ieee;
  std::array<std::int64_t, 5> dy_strides{}, filter_strides{}, y_strides{};

  std::int64_t Cin() const { return G * Cin_g; }
  std::int64_t Cout() const { return G * Cout_g; }
  std::int64_t y_elements() const;
  // 2 * N * Cout * Do * Ho * Wo * Cin_g * kD * kH * kW
  double flops() const;
  // The part of flops() whose products reach a y pixel inside y: a (dy pixel, tap) pair that falls on the
  // pads adds nothing to y and is left out (the work an engine that skips such pairs does).
  double flops_inside() const;
  std::string describe() const;                     // one line, replayable
  bool operator==(const Problem&) const = default;  // every field, strides included
};

// Shapes and strides of the three tensors plus the attributes; `validate` turns them into a Problem or
// throws an Error naming the parameter, the value and the rule. Data pointers are looked at for one rule
// only, when y's and an input's are both non-null: y must not share a byte with out_backprop or the filter
// (each taken from the first byte of its first element to the last byte of its last; computing in place is
// not supported). Plan::execute and execute_packed check the same rule on the pointers they are given.
struct ProblemSpec {
  Attributes attrs;
  TensorView out_backprop;  // in data_format
  TensorView filter;        // NCDHW, NDHWC or DHWCN
  TensorView y;             // in data_format; its shape must equal input_size
  OverflowMode overflow = OverflowMode::ieee;
  InputRounding input_rounding = InputRounding::none;  // enable_hf32 implies hf32
  // The operator requires out_backprop and filter to share a dtype; aclnn promotes mixed 16/32-bit types
  // instead (exact, since every product of two of them is exact in fp32). hif8/fp8 never mix.
  bool allow_mixed_dtypes = false;
};
Problem validate(const ProblemSpec&);
// Checks a Problem built or edited by hand by the same rules (Plan does this); returns it if valid.
Problem validate(const Problem&);

// Which Ascend products would accept the problem, and which documented limit each violates.
struct ProductVerdict {
  std::string product;
  bool accepted = true;
  std::vector<std::string> violations;
};
std::vector<ProductVerdict> ascend_compatibility(const Problem&);

struct Options {
  // 0: all hardware threads; at most 4 x the hardware threads. When the system refuses to start that many,
  // the plan runs with as many as it could start (Plan::threads() says how many), never fewer than one.
  int threads = 0;
  Isa isa = Isa::best;
  bool verbose = false;  // log to stderr which engine runs and why others declined
  // Most bytes a Plan may allocate (packed filter, tables, workspace, per-thread scratch; not the caller's
  // tensors); 0: no limit. Engines that would need more decline; when all do, Plan throws out_of_memory.
  // With keep_filter false only what execute allocates counts; a pack_filter that would then go past the
  // limit throws out_of_memory (naming max_memory) and leaves the plan as it was.
  std::int64_t max_memory_bytes = 0;
  // Plan::execute leaves the filter packed, for execute_packed. false: it need not, so an engine may read
  // the filter in place and skip writing a packed copy (one-shot calls and plans given a new filter on
  // every call); execute_packed then needs a pack_filter first.
  bool keep_filter = true;
};

class EngineImpl;

// Plan once, execute many times. Threads may share a Plan: execute_packed calls run concurrently (each with
// the caller's workspace, the plan's own, or one of its own while another call holds that); pack_filter and
// execute, which repack the filter, wait for the calls in progress and run alone. A Plan's problem, engine
// and threads never change after construction.
class Plan {
 public:
  explicit Plan(const Problem&, const Options& = {});
  ~Plan();
  Plan(Plan&&) noexcept;
  Plan& operator=(Plan&&) noexcept;

  const Problem& problem() const;
  std::string engine_name() const;
  // Engines that declined the problem, with their reasons.
  const std::vector<std::string>& declined() const;
  // Scratch memory execute() needs when the caller passes it in (may be 0).
  std::size_t workspace_bytes() const;
  int threads() const;
  // The instruction-set level in force: Options::isa, else CONV3D_DX_ISA, else the best the CPU has.
  Isa isa() const;

  // Pack the filter once; execute_packed() then reuses it (y may then share memory with the caller's filter,
  // never with out_backprop).
  void pack_filter(const void* filter);
  void execute_packed(const void* out_backprop, void* y, void* workspace = nullptr);
  // Pack and run: what a training step pays when the filter changes each step; the filter stays packed
  // unless Options::keep_filter is false. y must not share a byte with out_backprop or the filter (Error
  // invalid_argument naming y, nothing written).
  void execute(const void* out_backprop, const void* filter, void* y, void* workspace = nullptr);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The operator-level call: validate, plan and run in one go; writes spec.y.data.
// Nothing is written to y when an Error is thrown.
void conv3d_backprop_input(const ProblemSpec& spec, const Options& = {});

}  // namespace conv3d_dx
