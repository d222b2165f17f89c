// libopapi: aclnnConvolutionBackward. It only translates: what is aclnn's own (ranks, formats, outputMask,
// transposed, cubeMathType, dtype promotion, gradWeight and gradBias, the padding and outputPadding forms) is
// checked here; everything else is mapped onto 5-D NCDHW conv3d_dx::ProblemSpecs (rank 4 and 3 insert D = 1
// and H = 1) that validate() judges under the aclnn names. gradInput runs through a conv3d_dx::Plan;
// gradWeight and gradBias through conv3d_dx::backward, on Problems from the same validate(). The executor
// holds all of it until it runs.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "aclnnop/aclnn_convolution_backward.h"
#include "backward/backward.hpp"
#include "conv3d_dx/conv3d_dx.hpp"
#include "internal.hpp"
#include "numeric/numeric.hpp"
#include "problem/overlap.hpp"
#include "problem/validate.hpp"

namespace conv3d_dx::acl {
namespace {

constexpr std::size_t kAlign = 64;

// A failure with its aclnn status; caught at the C boundary.
struct Failure {
  aclnnStatus status;
  std::string message;
};

[[noreturn]] void invalid(const std::string& message) { throw Failure{ACLNN_ERR_PARAM_INVALID, message}; }
[[noreturn]] void null(const std::string& name) { throw Failure{ACLNN_ERR_PARAM_NULLPTR, name + " is null"}; }

template <class T>
void require(const T* p, const char* name, const char* type) {
  if (p == nullptr) null(name);
  if (!is_live(p))
    invalid(std::string(name) + " is not a live " + type + " (never created or already destroyed)");
}

std::string join(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

DType to_dtype(const aclTensor& t, const char* name) {
  if (const std::optional<DType> d = dtype_of(t.dtype)) return *d;
  invalid(std::string(name) + " dtype " + std::to_string(static_cast<int>(t.dtype)) +
          " is not supported; use ACL_FLOAT, ACL_FLOAT16, ACL_BF16, ACL_HIFLOAT8 or ACL_FLOAT8_E4M3FN");
}

bool is_8bit(aclDataType t) { return t == ACL_HIFLOAT8 || t == ACL_FLOAT8_E4M3FN; }

// Axis names of a rank-r tensor, as the messages use them.
const char* axis_name(std::size_t rank, std::size_t i) {
  static constexpr const char* r5[] = {"N", "C", "D", "H", "W"};
  static constexpr const char* r4[] = {"N", "C", "H", "W"};
  static constexpr const char* r3[] = {"N", "C", "L"};
  return rank == 5 ? r5[i] : rank == 4 ? r4[i] : r3[i];
}

void check_format(const aclTensor& t, const char* name) {
  const std::size_t rank = t.dims.size();
  const aclFormat own = rank == 5 ? ACL_FORMAT_NCDHW : rank == 4 ? ACL_FORMAT_NCHW : ACL_FORMAT_NCL;
  const char* own_name = rank == 5 ? "ACL_FORMAT_NCDHW" : rank == 4 ? "ACL_FORMAT_NCHW" : "ACL_FORMAT_NCL";
  if (t.format != own && t.format != ACL_FORMAT_ND) {
    invalid(std::string(name) + " format is " + std::to_string(static_cast<int>(t.format)) + " but rank-" +
            std::to_string(rank) + " tensors must be " + own_name + " or ACL_FORMAT_ND");
  }
}

// The tensor as a 5-D NCDHW view: missing leading spatial axes get size 1 and the stride a contiguous
// tensor would have there (so contiguous stays contiguous).
TensorView view5(const aclTensor& t, DType dtype, void* data) {
  TensorView v;
  v.dtype = dtype;
  v.layout = Layout::NCDHW;
  v.shape = expand_to_5d(t.dims, Layout::NCDHW);
  v.strides = expand_to_5d(t.strides, Layout::NCDHW, 0);
  const std::size_t missing = 5 - t.dims.size();
  for (std::size_t i = 1 + missing; i >= 2; --i) {
    if (__builtin_mul_overflow(v.strides[i + 1], v.shape[i + 1], &v.strides[i])) v.strides[i] = 1;
  }
  v.data = data == nullptr
               ? nullptr
               : static_cast<char*>(data) + t.offset * static_cast<std::int64_t>(element_size(t.dtype));
  return v;
}

// The bytes a tensor's view spans in its storage (empty when it has no data or no elements). aclCreateTensor
// has checked that the view lies inside a storage whose byte offsets and addresses fit in 64 bits.
ByteExtent extent(const aclTensor* t, const char* name) {
  if (t == nullptr || t->data == nullptr) return {};
  const std::size_t size = element_size(t->dtype);
  return byte_extent(name, static_cast<const char*>(t->data) + t->offset * static_cast<std::int64_t>(size),
                     size, t->dims.data(), t->strides.data(), t->dims.size());
}

std::int64_t elements(const aclTensor& t) {
  std::int64_t n = 1;
  for (std::int64_t d : t.dims) n *= d;  // fits: checked by aclCreateTensor
  return n;
}

struct ConvBackwardExecutor final : aclOpExecutor {
  std::optional<Plan> plan;  // empty when outputMask[0] is false: nothing to compute
  const void* dy = nullptr;
  const void* filter = nullptr;
  void* y = nullptr;
  // When conv3d_dx cannot write gradInput directly (see prepare), y is computed as contiguous fp32 into the
  // workspace at f32_offset, then converted into gradInput (its 5-D view is final_y), through fp16 first
  // under USE_FP16.
  bool via_f32 = false, through_fp16 = false;
  std::size_t f32_offset = 0;
  TensorView final_y;
  std::uint64_t workspace_bytes = 0;
  // gradWeight (outputMask[1]): reads input as x and writes gradWeight as dw. gradBias (outputMask[2]):
  // element co at db + co * db_stride.
  std::optional<backward::GradientProblem> weight_problem, bias_problem;
  const void* x = nullptr;
  void* dw = nullptr;
  void* db = nullptr;
  DType db_dtype = DType::f32;
  std::int64_t db_stride = 1;
  backward::GradientOptions gradient_options;  // threads 0: all hardware threads, as the Plan
};

struct Arguments {
  const aclTensor *gradOutput, *input, *weight;
  const aclIntArray *biasSizes, *stride, *padding, *dilation;
  bool transposed;
  const aclIntArray* outputPadding;
  int groups;
  const aclBoolArray* outputMask;
  std::int8_t cubeMathType;
  aclTensor *gradInput, *gradWeight, *gradBias;
};

// An int array with one value per spatial axis (their ranges are validate()'s).
const std::vector<std::int64_t>& spatial_values(const aclIntArray& a, const char* name, std::size_t count) {
  if (a.values.size() != count) {
    invalid(std::string(name) + " has " + std::to_string(a.values.size()) + " values " + join(a.values) +
            " but rank-" + std::to_string(count + 2) + " tensors need " + std::to_string(count));
  }
  return a.values;
}

// validate()'s messages in aclnn's words: input is y's shape (input_size), weight the filter, gradInput y.
ParameterNames aclnn_names(std::size_t rank, const Arguments& a) {
  ParameterNames n;
  n.input_size = "input", n.out_backprop = "gradOutput", n.filter = "weight", n.y = "gradInput";
  n.strides = "stride", n.pads = "padding", n.dilations = "dilation";
  n.axes = {"N", "C", "D", "H", rank == 3 ? "L" : "W"};  // D (and H) of rank 4 (3) are inserted, always 1
  n.filter_axes = n.axes;
  n.strides_text = join(a.stride->values);
  n.pads_text = join(a.padding->values);
  n.dilations_text = join(a.dilation->values);
  return n;
}

// The overlap rule (problem/overlap.hpp) for the three outputs: each must not share a byte with a tensor it
// is computed from or with another output. gradInput is computed from gradOutput and weight, gradWeight from
// gradOutput and input, gradBias from gradOutput. An output may take the memory of an input it is not
// computed from (gradInput input's, gradWeight weight's, gradBias either): run() packs weight and computes
// gradWeight, the only reader of input, before it writes any output.
void check_overlaps(const Arguments& a, bool want_input, bool want_weight, bool want_bias) {
  const NamedExtent dy{"gradOutput", extent(a.gradOutput, "gradOutput")};
  const NamedExtent x{"input", extent(a.input, "input")};
  const NamedExtent w{"weight", extent(a.weight, "weight")};
  const NamedExtent gx{"gradInput", want_input ? extent(a.gradInput, "gradInput") : ByteExtent{}};
  const NamedExtent gw{"gradWeight", want_weight ? extent(a.gradWeight, "gradWeight") : ByteExtent{}};
  const NamedExtent gb{"gradBias", want_bias ? extent(a.gradBias, "gradBias") : ByteExtent{}};
  require_disjoint(gx, {dy, w, gw, gb});
  require_disjoint(gw, {dy, x, gb});
  require_disjoint(gb, {dy});
}

// gradBias: the sums need only the problem's dy and channels.
void set_bias(ConvBackwardExecutor& e, const Problem& p, const aclTensor& gb) {
  backward::require_distinct("gradBias", {gb.dims[0], 1, 1, 1, 1}, {gb.strides[0], 0, 0, 0, 0});
  e.bias_problem = backward::gradient_problem(p, {}, {});  // db reads only dy
  e.db = static_cast<char*>(gb.data) + gb.offset * static_cast<std::int64_t>(element_size(gb.dtype));
  e.db_dtype = to_dtype(gb, "gradBias");
  e.db_stride = gb.strides[0];
}

std::unique_ptr<ConvBackwardExecutor> prepare(const Arguments& a) {
  require(a.gradOutput, "gradOutput", "aclTensor");
  require(a.input, "input", "aclTensor");
  require(a.weight, "weight", "aclTensor");
  require(a.stride, "stride", "aclIntArray");
  require(a.padding, "padding", "aclIntArray");
  require(a.dilation, "dilation", "aclIntArray");
  require(a.outputPadding, "outputPadding", "aclIntArray");
  require(a.outputMask, "outputMask", "aclBoolArray");
  const std::vector<bool>& mask = a.outputMask->values;
  if (mask.size() != 3) {
    invalid("outputMask has " + std::to_string(mask.size()) +
            " entries but needs 3 (gradInput, gradWeight, gradBias)");
  }
  if (a.transposed)
    invalid("transposed is true: the gradients of a transposed convolution are not computed by this library");
  const bool want_input = mask[0], want_weight = mask[1], want_bias = mask[2];
  if (want_input) require(a.gradInput, "gradInput", "aclTensor");
  if (want_weight) require(a.gradWeight, "gradWeight", "aclTensor");
  if (want_bias) require(a.gradBias, "gradBias", "aclTensor");
  // biasSizes is only needed by CANN for empty tensors; it may be null, and is checked when given.
  if (want_bias && a.biasSizes != nullptr) require(a.biasSizes, "biasSizes", "aclIntArray");
  if (a.cubeMathType < 0 || a.cubeMathType > 3) {
    invalid("cubeMathType is " + std::to_string(a.cubeMathType) +
            " but must be 0 (KEEP_DTYPE), 1 (ALLOW_FP32_DOWN_PRECISION), 2 (USE_FP16) or 3 (USE_HF32)");
  }

  // Ranks and formats.
  const aclTensor &dy = *a.gradOutput, &x = *a.input, &w = *a.weight;
  const std::size_t rank = dy.dims.size();
  if (rank < 3 || rank > 5) {
    invalid("gradOutput has rank " + std::to_string(rank) +
            " but must have rank 5 (NCDHW), 4 (NCHW) or 3 (NCL)");
  }
  const std::pair<const aclTensor*, const char*> tensors[] = {
      {&dy, "gradOutput"},
      {&x, "input"},
      {&w, "weight"},
      {want_input ? a.gradInput : nullptr, "gradInput"},
      {want_weight ? a.gradWeight : nullptr, "gradWeight"}};
  for (auto [t, name] : tensors) {
    if (t == nullptr) continue;
    if (t->dims.size() != rank) {
      invalid(std::string(name) + " has rank " + std::to_string(t->dims.size()) +
              " but gradOutput has rank " + std::to_string(rank));
    }
    check_format(*t, name);
  }
  if (want_bias) {
    const aclTensor& gb = *a.gradBias;
    if (gb.dims.size() != 1)
      invalid("gradBias has rank " + std::to_string(gb.dims.size()) + " but must have rank 1 ([Cout])");
    if (gb.format != ACL_FORMAT_ND) {
      invalid("gradBias format is " + std::to_string(static_cast<int>(gb.format)) +
              " but must be ACL_FORMAT_ND");
    }
  }

  // Dtypes: promoted freely among fp32/fp16/bf16; the 8-bit types only with themselves.
  const DType dy_type = to_dtype(dy, "gradOutput"), w_type = to_dtype(w, "weight");
  const DType x_type = to_dtype(x, "input");
  for (auto [t, name] : tensors) {
    if (t == nullptr) continue;
    to_dtype(*t, name);
    // An 8-bit weight's gradient may be ACL_FLOAT, as the Ascend 950 requires for ACL_HIFLOAT8.
    const bool float_weight_gradient = t == a.gradWeight && is_8bit(w.dtype) && t->dtype == ACL_FLOAT;
    if ((is_8bit(t->dtype) || is_8bit(dy.dtype)) && t->dtype != dy.dtype && !float_weight_gradient) {
      invalid(std::string(name) + " dtype is " + dtype_name(t->dtype) + " but gradOutput is " +
              dtype_name(dy.dtype) + "; ACL_HIFLOAT8 and ACL_FLOAT8_E4M3FN need every tensor of that dtype" +
              (t == a.gradWeight ? " (gradWeight may also be ACL_FLOAT)" : ""));
    }
  }
  if (want_input && a.gradInput->dtype != x.dtype) {
    invalid(std::string("gradInput dtype is ") + dtype_name(a.gradInput->dtype) + " but input is " +
            dtype_name(x.dtype) + "; they must be equal");
  }
  if (want_weight && a.gradWeight->dtype != w.dtype &&
      !(is_8bit(w.dtype) && a.gradWeight->dtype == ACL_FLOAT)) {
    invalid(std::string("gradWeight dtype is ") + dtype_name(a.gradWeight->dtype) + " but weight is " +
            dtype_name(w.dtype) + "; they must be equal");
  }
  if (want_bias) {
    to_dtype(*a.gradBias, "gradBias");
    if (a.gradBias->dtype != dy.dtype) {
      invalid(std::string("gradBias dtype is ") + dtype_name(a.gradBias->dtype) + " but gradOutput is " +
              dtype_name(dy.dtype) + "; they must be equal");
    }
  }

  // Shapes and parameters: gradWeight and gradBias, and the counts of the int arrays, are aclnn's; every
  // other rule is validate()'s, on the problem below.
  if (want_weight) {
    for (std::size_t i = 0; i < rank; ++i) {
      if (a.gradWeight->dims[i] != w.dims[i]) {
        invalid(std::string("gradWeight ") + axis_name(rank, i) + " is " +
                std::to_string(a.gradWeight->dims[i]) + " but weight " + axis_name(rank, i) + " is " +
                std::to_string(w.dims[i]) + "; the shapes must be equal");
      }
    }
  }
  if (want_bias) {
    if (a.gradBias->dims[0] != w.dims[0]) {
      invalid("gradBias has " + std::to_string(a.gradBias->dims[0]) +
              " elements but weight N (output channels) is " + std::to_string(w.dims[0]) +
              "; its shape must be [" + std::to_string(w.dims[0]) + "]");
    }
    if (a.biasSizes != nullptr && (a.biasSizes->values.size() != 1 || a.biasSizes->values[0] != w.dims[0])) {
      invalid("biasSizes is " + join(a.biasSizes->values) + " but must be [" + std::to_string(w.dims[0]) +
              "] (weight N, the output channels)");
    }
  }
  const std::size_t ns = rank - 2;
  const auto& stride = spatial_values(*a.stride, "stride", ns);
  const auto& dilation = spatial_values(*a.dilation, "dilation", ns);
  std::vector<std::int64_t> pad_front, pad_back;
  if (rank == 4 && a.padding->values.size() == 4) {  // top, bottom, left, right
    pad_front = {a.padding->values[0], a.padding->values[2]};
    pad_back = {a.padding->values[1], a.padding->values[3]};
  } else {
    if (rank == 4 && a.padding->values.size() != 2) {
      invalid("padding has " + std::to_string(a.padding->values.size()) + " values " +
              join(a.padding->values) + " but rank-4 tensors need 2 (H, W) or 4 (top, bottom, left, right)");
    }
    pad_front = pad_back = spatial_values(*a.padding, "padding", ns);
  }
  const auto& output_padding = spatial_values(*a.outputPadding, "outputPadding", ns);
  for (std::size_t i = 0; i < ns; ++i) {
    if (output_padding[i] != 0) {
      invalid("outputPadding " + join(output_padding) + ": entry " + std::to_string(i) + " is " +
              std::to_string(output_padding[i]) + " but must be 0 when transposed is false");
    }
  }

  // The conv3d_dx problem. gradInput is y, unless conv3d_dx cannot write it directly: conv3d_dx writes y in
  // an input dtype or fp32 (docs/operator.md), rounding its fp32 sums once. When promotion gave input a third
  // dtype, or under USE_FP16 ("computed in fp16, the result cast back") unless gradInput is fp16 and so an
  // input dtype, y goes through fp32 in the workspace: the same sums, rounded once by the conversion. Without
  // gradInput, the rest is validated as if it were a contiguous fp32 tensor like input.
  ProblemSpec spec;
  spec.allow_mixed_dtypes = true;
  spec.attrs.data_format = Layout::NCDHW;
  const std::array<std::int64_t, 5> input_size = expand_to_5d(x.dims, Layout::NCDHW);
  spec.attrs.input_size.assign(input_size.begin(), input_size.end());
  for (std::size_t i = 0; i < ns; ++i) {
    const std::size_t axis = 3 - ns + i;  // 0 = D, 1 = H, 2 = W
    spec.attrs.strides[2 + axis] = stride[i];
    spec.attrs.dilations[2 + axis] = dilation[i];
    spec.attrs.pads[2 * axis] = pad_front[i];
    spec.attrs.pads[2 * axis + 1] = pad_back[i];
  }
  spec.attrs.groups = a.groups;
  spec.out_backprop = view5(dy, dy_type, dy.data);
  spec.filter = view5(w, w_type, w.data);
  spec.input_rounding = a.cubeMathType == 2                            ? InputRounding::fp16
                        : (a.cubeMathType == 1 || a.cubeMathType == 3) ? InputRounding::hf32
                                                                       : InputRounding::none;
  auto e = std::make_unique<ConvBackwardExecutor>();
  const TensorView x_view = view5(x, x_type, x.data);
  if (want_input) {
    e->final_y = view5(*a.gradInput, x_type, a.gradInput->data);
    e->through_fp16 = a.cubeMathType == 2 && x_type != DType::f16;
    e->via_f32 = e->through_fp16 || !(x_type == dy_type || x_type == w_type || x_type == DType::f32);
  }
  spec.y = want_input && !e->via_f32 ? e->final_y
                                     : TensorView::contiguous(nullptr, DType::f32, Layout::NCDHW,
                                                              want_input ? e->final_y.shape : x_view.shape);
  const ParameterNames names = aclnn_names(rank, a);
  const Problem problem = validate(spec, names);

  // Data: input's is only read for gradWeight; the others are needed whenever they hold elements.
  if (dy.data == nullptr && elements(dy) > 0) null("gradOutput data (tensorData)");
  if (w.data == nullptr) null("weight data (tensorData)");
  if (want_weight && x.data == nullptr && elements(x) > 0) null("input data (tensorData)");
  if (want_input && a.gradInput->data == nullptr && elements(*a.gradInput) > 0)
    null("gradInput data (tensorData)");
  if (want_weight && a.gradWeight->data == nullptr) null("gradWeight data (tensorData)");
  if (want_bias && a.gradBias->data == nullptr) null("gradBias data (tensorData)");

  check_overlaps(a, want_input, want_weight, want_bias);

  e->dy = spec.out_backprop.data;
  e->gradient_options.through_fp16 = a.cubeMathType == 2;
  if (want_weight) {
    // validate() sees gradWeight as the filter, with weight's dtype (gradWeight's own dtype rule is checked
    // above), and input as a contiguous fp32 y: input is only read, so its view may alias itself and y's
    // output dtype rule does not apply; aclCreateTensor has bounded its extent. The gradient problem then
    // reads x with input's strides and dtype and writes dw with gradWeight's.
    ProblemSpec ws = spec;
    ws.filter = view5(*a.gradWeight, w_type, a.gradWeight->data);
    ws.y = TensorView::contiguous(nullptr, DType::f32, Layout::NCDHW, x_view.shape);
    ParameterNames gradient_names = names;
    gradient_names.filter = "gradWeight";
    const Problem p = validate(ws, gradient_names);
    backward::require_distinct("gradWeight", ws.filter.shape, ws.filter.strides);
    e->weight_problem = backward::gradient_problem(
        p, {x_type, x_view.strides}, {to_dtype(*a.gradWeight, "gradWeight"), ws.filter.strides});
    e->x = x_view.data;
    e->dw = ws.filter.data;
  }
  if (want_bias) set_bias(*e, problem, *a.gradBias);
  if (!want_input) return e;
  e->plan.emplace(problem);
  e->filter = spec.filter.data;
  e->y = e->final_y.data;
  // Workspace: [slack to align the start to 64 bytes][the plan's scratch][the fp32 result, if any].
  e->f32_offset = (e->plan->workspace_bytes() + kAlign - 1) / kAlign * kAlign;
  std::uint64_t used = e->f32_offset, sums = 0;
  if ((e->via_f32 && __builtin_mul_overflow(static_cast<std::uint64_t>(e->plan->problem().y_elements()),
                                            std::uint64_t{4}, &sums)) ||
      __builtin_add_overflow(used, sums, &used) ||
      __builtin_add_overflow(used, std::uint64_t{kAlign}, &used)) {
    invalid("gradInput has " + std::to_string(e->plan->problem().y_elements()) +
            " elements: the workspace for them overflows 64 bits");
  }
  e->workspace_bytes = used > kAlign ? used : 0;
  return e;
}

// Order: weight is packed, then gradWeight and gradBias, then gradInput, so that in-place gradients
// (gradWeight over weight, gradInput over input) read their inputs before they are overwritten.
void run(ConvBackwardExecutor& e, void* workspace) {
  if (e.plan) e.plan->pack_filter(e.filter);
  if (e.weight_problem) backward::weight_gradient(*e.weight_problem, e.dy, e.x, e.dw, e.gradient_options);
  if (e.bias_problem)
    backward::bias_gradient(*e.bias_problem, e.dy, e.db, e.db_dtype, e.db_stride, e.gradient_options);
  if (!e.plan) return;
  const auto address = reinterpret_cast<std::uintptr_t>(workspace);
  char* ws = static_cast<char*>(workspace) + ((kAlign - address % kAlign) % kAlign);
  void* plan_ws = e.plan->workspace_bytes() > 0 ? ws : nullptr;
  if (!e.via_f32) {
    e.plan->execute_packed(e.dy, e.y, plan_ws);
    return;
  }
  void* sums = ws + e.f32_offset;
  e.plan->execute_packed(e.dy, sums, plan_ws);
  const TensorView& y = e.final_y;
  std::int64_t i = 0;
  for (std::int64_t n = 0; n < y.shape[0]; ++n)
    for (std::int64_t c = 0; c < y.shape[1]; ++c)
      for (std::int64_t d = 0; d < y.shape[2]; ++d)
        for (std::int64_t h = 0; h < y.shape[3]; ++h)
          for (std::int64_t x = 0; x < y.shape[4]; ++x, ++i) {
            const std::int64_t at =
                n * y.strides[0] + c * y.strides[1] + d * y.strides[2] + h * y.strides[3] + x * y.strides[4];
            float v = numeric::load_f32(DType::f32, sums, i);
            if (e.through_fp16) v = numeric::fp16_to_f32(numeric::f32_to_fp16(v, false));
            numeric::store_f32(y.dtype, y.data, at, v, OverflowMode::ieee);
          }
}

// Runs body, turning every failure into its status and the thread's error message.
template <class Body>
aclnnStatus guarded(const char* fn, Body&& body) {
  try {
    body();
    return ACLNN_SUCCESS;
  } catch (const Failure& f) {
    set_error(std::string(fn) + ": " + f.message);
    return f.status;
  } catch (const Error& err) {
    // validate() names the parameters as aclnn does; an error that does not open with its parameter gets it
    // in front, in aclnn's words.
    std::string p = err.parameter();
    p = p == "out_backprop" ? "gradOutput" : p == "filter" ? "weight" : p == "y" ? "gradInput" : p;
    const std::string what = err.what();
    set_error(std::string(fn) + ": " + (p.empty() || what.rfind(p + " ", 0) == 0 ? "" : p + ": ") + what);
    switch (err.code()) {
      case ErrorCode::null_pointer:
        return ACLNN_ERR_PARAM_NULLPTR;
      case ErrorCode::invalid_argument:
      case ErrorCode::size_overflow:
      case ErrorCode::unsupported:
        return ACLNN_ERR_PARAM_INVALID;
      default:
        return ACLNN_ERR_INNER_NULLPTR;
    }
  } catch (const std::bad_alloc&) {
    set_error(std::string(fn) + ": out of memory");
    return ACLNN_ERR_INNER_NULLPTR;
  } catch (const std::exception& ex) {
    set_error(std::string(fn) + ": internal error: " + ex.what());
    return ACLNN_ERR_INNER_NULLPTR;
  } catch (...) {
    set_error(std::string(fn) + ": internal error");
    return ACLNN_ERR_INNER_NULLPTR;
  }
}

}  // namespace
}  // namespace conv3d_dx::acl

extern "C" {

aclnnStatus aclnnConvolutionBackwardGetWorkspaceSize(
    const aclTensor* gradOutput, const aclTensor* input, const aclTensor* weight,
    const aclIntArray* biasSizes, const aclIntArray* stride, const aclIntArray* padding,
    const aclIntArray* dilation, bool transposed, const aclIntArray* outputPadding, int groups,
    const aclBoolArray* outputMask, int8_t cubeMathType, aclTensor* gradInput, aclTensor* gradWeight,
    aclTensor* gradBias, uint64_t* workspaceSize, aclOpExecutor** executor) {
  using namespace conv3d_dx::acl;
  return guarded("aclnnConvolutionBackwardGetWorkspaceSize", [&] {
    if (workspaceSize == nullptr) null("workspaceSize");
    if (executor == nullptr) null("executor");
    *executor = nullptr;
    *workspaceSize = 0;
    auto e =
        prepare(Arguments{gradOutput, input, weight, biasSizes, stride, padding, dilation, transposed,
                          outputPadding, groups, outputMask, cubeMathType, gradInput, gradWeight, gradBias});
    const std::uint64_t bytes = e->workspace_bytes;
    *executor = register_executor(std::move(e));
    *workspaceSize = bytes;
  });
}

aclnnStatus aclnnConvolutionBackward(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                     aclrtStream stream) {
  using namespace conv3d_dx::acl;
  return guarded("aclnnConvolutionBackward", [&] {
    if (executor == nullptr) null("executor");
    // The executor is consumed by this call, whatever its outcome.
    std::unique_ptr<aclOpExecutor> owned = take_executor(executor);
    auto* e = dynamic_cast<ConvBackwardExecutor*>(owned.get());
    if (e == nullptr) {
      invalid(
          "executor is not a live executor of aclnnConvolutionBackwardGetWorkspaceSize (already run, "
          "destroyed "
          "or never created)");
    }
    if (!stream_is_valid(stream))
      invalid("stream was not created by aclrtCreateStream or was already destroyed");
    if (workspaceSize < e->workspace_bytes) {
      invalid("workspaceSize is " + std::to_string(workspaceSize) + " but the executor needs " +
              std::to_string(e->workspace_bytes) + " bytes");
    }
    if (workspace == nullptr && e->workspace_bytes > 0) null("workspace");
    run(*e, workspace);  // the stream executes work as it is submitted
  });
}

}  // extern "C"
