// libopapi: aclnnConvolutionBackward, the input-gradient path. It only translates: the aclnn arguments are
// checked under their aclnn names, mapped onto a 5-D NCDHW conv3d_dx::ProblemSpec (rank 4 and 3 insert
// D = 1 and H = 1), and the executor holds the resulting conv3d_dx::Plan until it runs.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "aclnnop/aclnn_convolution_backward.h"
#include "conv3d_dx/conv3d_dx.hpp"
#include "internal.hpp"
#include "numeric/numeric.hpp"

namespace conv3d_dx::acl {
namespace {

constexpr std::int64_t kMaxDim = 2147483647;  // 2^31 - 1
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

const char* dtype_name(aclDataType t) {
  switch (t) {
    case ACL_FLOAT:
      return "ACL_FLOAT";
    case ACL_FLOAT16:
      return "ACL_FLOAT16";
    case ACL_BF16:
      return "ACL_BF16";
    case ACL_HIFLOAT8:
      return "ACL_HIFLOAT8";
    case ACL_FLOAT8_E4M3FN:
      return "ACL_FLOAT8_E4M3FN";
    default:
      return nullptr;
  }
}

DType to_dtype(const aclTensor& t, const char* name) {
  switch (t.dtype) {
    case ACL_FLOAT:
      return DType::f32;
    case ACL_FLOAT16:
      return DType::f16;
    case ACL_BF16:
      return DType::bf16;
    case ACL_HIFLOAT8:
      return DType::hif8;
    case ACL_FLOAT8_E4M3FN:
      return DType::fp8_e4m3fn;
    default:
      invalid(std::string(name) + " dtype " + std::to_string(static_cast<int>(t.dtype)) +
              " is not supported; use ACL_FLOAT, ACL_FLOAT16, ACL_BF16, ACL_HIFLOAT8 or ACL_FLOAT8_E4M3FN");
  }
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

void check_dims(const aclTensor& t, const char* name, bool batch_may_be_zero) {
  for (std::size_t i = 0; i < t.dims.size(); ++i) {
    const std::int64_t lo = (batch_may_be_zero && i == 0) ? 0 : 1;
    if (t.dims[i] < lo || t.dims[i] > kMaxDim) {
      invalid(std::string(name) + " " + axis_name(t.dims.size(), i) + " is " + std::to_string(t.dims[i]) +
              " but must be in [" + std::to_string(lo) + ", 2147483647]");
    }
  }
}

// The tensor as a 5-D NCDHW view: missing leading spatial axes get size 1 and the stride a contiguous
// tensor would have there (so contiguous stays contiguous).
TensorView view5(const aclTensor& t, DType dtype, void* data) {
  TensorView v;
  v.dtype = dtype;
  v.layout = Layout::NCDHW;
  const std::size_t missing = 5 - t.dims.size();
  for (std::size_t i = 0; i < 5; ++i) {
    const std::size_t src = i < 2 ? i : (i < 2 + missing ? SIZE_MAX : i - missing);
    v.shape[i] = src == SIZE_MAX ? 1 : t.dims[src];
    v.strides[i] = src == SIZE_MAX ? 0 : t.strides[src];
  }
  for (std::size_t i = 1 + missing; i >= 2; --i) {
    if (__builtin_mul_overflow(v.strides[i + 1], v.shape[i + 1], &v.strides[i])) v.strides[i] = 1;
  }
  v.data = data == nullptr
               ? nullptr
               : static_cast<char*>(data) + t.offset * static_cast<std::int64_t>(element_size(t.dtype));
  return v;
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
  // USE_FP16 with a gradInput that is not fp16: y is computed as contiguous fp16 into the workspace at
  // fp16_offset, then converted into gradInput (its 5-D view is final_y).
  bool via_fp16 = false;
  std::size_t fp16_offset = 0;
  TensorView final_y;
  std::uint64_t workspace_bytes = 0;
};

struct Arguments {
  const aclTensor *gradOutput, *input, *weight;
  const aclIntArray *stride, *padding, *dilation;
  bool transposed;
  const aclIntArray* outputPadding;
  int groups;
  const aclBoolArray* outputMask;
  std::int8_t cubeMathType;
  aclTensor* gradInput;
};

// Checks a rank-2 int array of stride-like values.
std::vector<std::int64_t> spatial_values(const aclIntArray& a, const char* name, std::size_t count,
                                         std::int64_t lo, const char* rule) {
  if (a.values.size() != count) {
    invalid(std::string(name) + " has " + std::to_string(a.values.size()) + " values " + join(a.values) +
            " but rank-" + std::to_string(count + 2) + " tensors need " + std::to_string(count));
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (a.values[i] < lo || a.values[i] > kMaxDim) {
      invalid(std::string(name) + " " + join(a.values) + ": entry " + std::to_string(i) + " is " +
              std::to_string(a.values[i]) + " but must be " + rule);
    }
  }
  return a.values;
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
  if (mask[1]) invalid("outputMask[1] is true: gradWeight is not computed by this library (only gradInput)");
  if (mask[2]) invalid("outputMask[2] is true: gradBias is not computed by this library (only gradInput)");
  const bool want_input = mask[0];
  if (want_input) require(a.gradInput, "gradInput", "aclTensor");
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
      {&dy, "gradOutput"}, {&x, "input"}, {&w, "weight"}, {want_input ? a.gradInput : nullptr, "gradInput"}};
  for (auto [t, name] : tensors) {
    if (t == nullptr) continue;
    if (t->dims.size() != rank) {
      invalid(std::string(name) + " has rank " + std::to_string(t->dims.size()) +
              " but gradOutput has rank " + std::to_string(rank));
    }
    check_format(*t, name);
  }

  // Dtypes: promoted freely among fp32/fp16/bf16; the 8-bit types only with themselves.
  const DType dy_type = to_dtype(dy, "gradOutput"), w_type = to_dtype(w, "weight");
  const DType x_type = to_dtype(x, "input");
  for (auto [t, name] : tensors) {
    if (t == nullptr) continue;
    to_dtype(*t, name);
    if ((is_8bit(t->dtype) || is_8bit(dy.dtype)) && t->dtype != dy.dtype) {
      invalid(std::string(name) + " dtype is " + dtype_name(t->dtype) + " but gradOutput is " +
              dtype_name(dy.dtype) + "; ACL_HIFLOAT8 and ACL_FLOAT8_E4M3FN need every tensor of that dtype");
    }
  }
  if (want_input && a.gradInput->dtype != x.dtype) {
    invalid(std::string("gradInput dtype is ") + dtype_name(a.gradInput->dtype) + " but input is " +
            dtype_name(x.dtype) + "; they must be equal");
  }

  // Shapes and parameters.
  check_dims(x, "input", true);
  check_dims(w, "weight", false);
  check_dims(dy, "gradOutput", true);
  if (want_input) {
    for (std::size_t i = 0; i < rank; ++i) {
      if (a.gradInput->dims[i] != x.dims[i]) {
        invalid(std::string("gradInput ") + axis_name(rank, i) + " is " +
                std::to_string(a.gradInput->dims[i]) + " but input " + axis_name(rank, i) + " is " +
                std::to_string(x.dims[i]) + "; the shapes must be equal");
      }
    }
  }
  const std::size_t ns = rank - 2;
  const auto stride = spatial_values(*a.stride, "stride", ns, 1, "in [1, 2147483647]");
  const auto dilation = spatial_values(*a.dilation, "dilation", ns, 1, "in [1, 2147483647]");
  std::vector<std::int64_t> pad_front, pad_back;
  if (rank == 4 && a.padding->values.size() == 4) {  // top, bottom, left, right
    spatial_values(*a.padding, "padding", 4, 0, "in [0, 2147483647]");
    pad_front = {a.padding->values[0], a.padding->values[2]};
    pad_back = {a.padding->values[1], a.padding->values[3]};
  } else {
    if (rank == 4 && a.padding->values.size() != 2) {
      invalid("padding has " + std::to_string(a.padding->values.size()) + " values " +
              join(a.padding->values) + " but rank-4 tensors need 2 (H, W) or 4 (top, bottom, left, right)");
    }
    pad_front = pad_back = spatial_values(*a.padding, "padding", ns, 0, "in [0, 2147483647]");
  }
  spatial_values(*a.outputPadding, "outputPadding", ns, 0, "0 when transposed is false");
  for (std::size_t i = 0; i < ns; ++i) {
    if (a.outputPadding->values[i] != 0) {
      invalid("outputPadding " + join(a.outputPadding->values) + ": entry " + std::to_string(i) + " is " +
              std::to_string(a.outputPadding->values[i]) + " but must be 0 when transposed is false");
    }
  }
  if (a.groups < 1 || a.groups > 65535)
    invalid("groups is " + std::to_string(a.groups) + " but must be in [1, 65535]");
  if (w.dims[0] % a.groups != 0) {
    invalid("groups is " + std::to_string(a.groups) + " but weight N (output channels, " +
            std::to_string(w.dims[0]) + ") is not divisible by it");
  }
  if (x.dims[1] != w.dims[1] * a.groups) {
    invalid("input C is " + std::to_string(x.dims[1]) + " but weight C (" + std::to_string(w.dims[1]) +
            ") * groups (" + std::to_string(a.groups) + ") is " + std::to_string(w.dims[1] * a.groups));
  }
  if (dy.dims[1] != w.dims[0]) {
    invalid("gradOutput C is " + std::to_string(dy.dims[1]) + " but weight N (output channels) is " +
            std::to_string(w.dims[0]));
  }
  if (dy.dims[0] != x.dims[0]) {
    invalid("gradOutput N is " + std::to_string(dy.dims[0]) + " but input N is " + std::to_string(x.dims[0]));
  }
  for (std::size_t i = 0; i < ns; ++i) {
    const char* axis = axis_name(rank, i + 2);
    // Every term is below 2^31 except the dilated kernel (below 2^62): no overflow.
    const std::int64_t padded = x.dims[i + 2] + pad_front[i] + pad_back[i];
    const std::int64_t dilated = (w.dims[i + 2] - 1) * dilation[i] + 1;
    if (padded < dilated) {
      invalid(std::string("input ") + axis + " plus padding (" + std::to_string(padded) +
              ") is smaller than the dilated weight " + axis + " (" + std::to_string(dilated) + ")");
    }
    const std::int64_t expected = (padded - dilated) / stride[i] + 1;
    if (dy.dims[i + 2] != expected) {
      invalid(std::string("gradOutput ") + axis + " is " + std::to_string(dy.dims[i + 2]) +
              " but input, weight, stride, padding and dilation imply " + std::to_string(expected));
    }
  }

  // Data: input's is never read; the others are needed whenever they hold elements.
  if (dy.data == nullptr && elements(dy) > 0) null("gradOutput data (tensorData)");
  if (w.data == nullptr) null("weight data (tensorData)");
  if (want_input && a.gradInput->data == nullptr && elements(*a.gradInput) > 0)
    null("gradInput data (tensorData)");

  // The conv3d_dx problem.
  ProblemSpec spec;
  spec.allow_mixed_dtypes = true;
  spec.attrs.data_format = Layout::NCDHW;
  spec.attrs.input_size = {x.dims[0], x.dims[1], 1, 1, 1};
  for (std::size_t i = 0; i < ns; ++i) {
    const std::size_t axis = 3 - ns + i;  // 0 = D, 1 = H, 2 = W
    spec.attrs.input_size[2 + axis] = x.dims[2 + i];
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
  if (!want_input) {  // validate the rest as if gradInput were a contiguous tensor like input
    spec.y = TensorView::contiguous(nullptr, x_type, Layout::NCDHW, view5(x, x_type, nullptr).shape);
    validate(spec);
    return e;
  }
  const aclTensor& gx = *a.gradInput;
  e->final_y = view5(gx, x_type, gx.data);
  spec.y = e->final_y;
  e->via_fp16 = a.cubeMathType == 2 && x_type != DType::f16;
  if (e->via_fp16) {  // "the result cast back": computed as fp16 into the workspace first
    spec.y = TensorView::contiguous(nullptr, DType::f16, Layout::NCDHW, e->final_y.shape);
  }
  e->plan.emplace(validate(spec));
  e->dy = spec.out_backprop.data;
  e->filter = spec.filter.data;
  e->y = e->final_y.data;
  // Workspace: [slack to align the start to 64 bytes][the plan's scratch][the fp16 result, if any].
  e->fp16_offset = (e->plan->workspace_bytes() + kAlign - 1) / kAlign * kAlign;
  const std::uint64_t used =
      e->fp16_offset + (e->via_fp16 ? static_cast<std::uint64_t>(e->plan->problem().y_elements()) * 2 : 0);
  e->workspace_bytes = used > 0 ? used + kAlign : 0;
  return e;
}

void run(ConvBackwardExecutor& e, void* workspace) {
  if (!e.plan) return;
  const auto address = reinterpret_cast<std::uintptr_t>(workspace);
  char* ws = static_cast<char*>(workspace) + ((kAlign - address % kAlign) % kAlign);
  void* plan_ws = e.plan->workspace_bytes() > 0 ? ws : nullptr;
  if (!e.via_fp16) {
    e.plan->execute(e.dy, e.filter, e.y, plan_ws);
    return;
  }
  void* half = ws + e.fp16_offset;
  e.plan->execute(e.dy, e.filter, half, plan_ws);
  const TensorView& y = e.final_y;
  std::int64_t i = 0;
  for (std::int64_t n = 0; n < y.shape[0]; ++n)
    for (std::int64_t c = 0; c < y.shape[1]; ++c)
      for (std::int64_t d = 0; d < y.shape[2]; ++d)
        for (std::int64_t h = 0; h < y.shape[3]; ++h)
          for (std::int64_t x = 0; x < y.shape[4]; ++x, ++i) {
            const std::int64_t at =
                n * y.strides[0] + c * y.strides[1] + d * y.strides[2] + h * y.strides[3] + x * y.strides[4];
            numeric::store_f32(y.dtype, y.data, at, numeric::load_f32(DType::f16, half, i),
                               OverflowMode::ieee);
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
    // The aclnn checks above leave nothing for validate() to reject except the extent and aliasing rules
    // of the views; name the tensors as aclnn does.
    std::string p = err.parameter();
    p = p == "out_backprop" ? "gradOutput" : p == "filter" ? "weight" : p == "y" ? "gradInput" : p;
    set_error(std::string(fn) + ": " + (p.empty() ? "" : p + ": ") + err.what());
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
    const aclIntArray* /*biasSizes*/, const aclIntArray* stride, const aclIntArray* padding,
    const aclIntArray* dilation, bool transposed, const aclIntArray* outputPadding, int groups,
    const aclBoolArray* outputMask, int8_t cubeMathType, aclTensor* gradInput, aclTensor* /*gradWeight*/,
    aclTensor* /*gradBias*/, uint64_t* workspaceSize, aclOpExecutor** executor) {
  using namespace conv3d_dx::acl;
  return guarded("aclnnConvolutionBackwardGetWorkspaceSize", [&] {
    if (workspaceSize == nullptr) null("workspaceSize");
    if (executor == nullptr) null("executor");
    *executor = nullptr;
    *workspaceSize = 0;
    auto e = prepare(Arguments{gradOutput, input, weight, stride, padding, dilation, transposed,
                               outputPadding, groups, outputMask, cubeMathType, gradInput});
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
