// libnnopbase: tensors, int/bool arrays and the executor registry. Every object is registered while it is
// alive, so the aclnn functions reject destroyed or foreign pointers instead of reading through them.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "internal.hpp"

namespace conv3d_dx::acl {
namespace {

enum class Kind { tensor, int_array, bool_array, executor };

struct Registry {
  std::mutex mutex;
  std::unordered_map<const void*, Kind> live;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: objects may be released during static destruction
  return *r;
}

bool live(const void* p, Kind kind) {
  std::lock_guard lock(registry().mutex);
  auto it = registry().live.find(p);
  return it != registry().live.end() && it->second == kind;
}

template <class T>
T* add(std::unique_ptr<T> object, Kind kind) {
  std::lock_guard lock(registry().mutex);
  registry().live.emplace(object.get(), kind);
  return object.release();
}

// Removes p from the registry; false when it is not a live object of that kind.
bool remove(const void* p, Kind kind) {
  std::lock_guard lock(registry().mutex);
  auto it = registry().live.find(p);
  if (it == registry().live.end() || it->second != kind) return false;
  registry().live.erase(it);
  return true;
}

bool known_format(aclFormat f) {
  switch (f) {
    case ACL_FORMAT_NCHW:
    case ACL_FORMAT_NHWC:
    case ACL_FORMAT_ND:
    case ACL_FORMAT_NC1HWC0:
    case ACL_FORMAT_FRACTAL_Z:
    case ACL_FORMAT_HWCN:
    case ACL_FORMAT_NDHWC:
    case ACL_FORMAT_FRACTAL_NZ:
    case ACL_FORMAT_NCDHW:
    case ACL_FORMAT_NDC1HWC0:
    case ACL_FRACTAL_Z_3D:
    case ACL_FORMAT_NC:
    case ACL_FORMAT_NCL:
      return true;
    case ACL_FORMAT_UNDEFINED:
      break;
  }
  return false;
}

constexpr std::uint64_t max_dims = 8;

aclTensor* tensor_error(const std::string& message) {
  set_error("aclCreateTensor: " + message);
  return nullptr;
}

// The tensor described by the arguments, or an error message.
aclTensor* create_tensor(const int64_t* viewDims, uint64_t viewDimsNum, aclDataType dataType,
                         const int64_t* stride, int64_t offset, aclFormat format, const int64_t* storageDims,
                         uint64_t storageDimsNum, void* tensorData) {
  if (viewDimsNum > max_dims) {
    return tensor_error("viewDimsNum is " + std::to_string(viewDimsNum) + "; at most " +
                        std::to_string(max_dims) + " dims are supported");
  }
  if (storageDimsNum > max_dims) {
    return tensor_error("storageDimsNum is " + std::to_string(storageDimsNum) + "; at most " +
                        std::to_string(max_dims) + " dims are supported");
  }
  if (viewDims == nullptr && viewDimsNum > 0)
    return tensor_error("viewDims is null but viewDimsNum is " + std::to_string(viewDimsNum));
  if (storageDims == nullptr && storageDimsNum > 0) {
    return tensor_error("storageDims is null but storageDimsNum is " + std::to_string(storageDimsNum));
  }
  if (dtype_name(dataType) == nullptr) {
    return tensor_error("dataType " + std::to_string(static_cast<int>(dataType)) +
                        " is not a supported aclDataType");
  }
  if (!known_format(format)) {
    return tensor_error("format " + std::to_string(static_cast<int>(format)) +
                        " is not a supported aclFormat");
  }
  if (offset < 0) return tensor_error("offset is " + std::to_string(offset) + "; it must be >= 0");
  auto t = std::make_unique<aclTensor>();
  t->dims.assign(viewDims, viewDims + viewDimsNum);
  t->storage_dims.assign(storageDims, storageDims + storageDimsNum);
  t->offset = offset;
  t->dtype = dataType;
  t->format = format;
  t->data = tensorData;
  std::int64_t storage_elements = 1, view_elements = 1;
  for (std::uint64_t i = 0; i < storageDimsNum; ++i) {
    if (storageDims[i] < 0) {
      return tensor_error("storageDims[" + std::to_string(i) + "] is " + std::to_string(storageDims[i]) +
                          "; dims must be >= 0");
    }
    if (__builtin_mul_overflow(storage_elements, storageDims[i], &storage_elements)) {
      return tensor_error("the product of storageDims overflows 64 bits");
    }
  }
  for (std::uint64_t i = 0; i < viewDimsNum; ++i) {
    if (viewDims[i] < 0) {
      return tensor_error("viewDims[" + std::to_string(i) + "] is " + std::to_string(viewDims[i]) +
                          "; dims must be >= 0");
    }
    if (__builtin_mul_overflow(view_elements, viewDims[i], &view_elements)) {
      return tensor_error("the product of viewDims overflows 64 bits");
    }
  }
  // Every byte offset into the storage, the view's included, must fit in 64 bits, and so must the address
  // of its last byte: checked once here, so byte offsets computed from a live tensor never overflow.
  const std::int64_t size = static_cast<std::int64_t>(element_size(dataType));
  std::int64_t storage_bytes = 0;
  if (__builtin_mul_overflow(storage_elements, size, &storage_bytes)) {
    return tensor_error("storageDims hold " + std::to_string(storage_elements) + " elements of " +
                        std::to_string(size) + " bytes, more than 64-bit byte offsets reach");
  }
  std::uintptr_t storage_end = 0;
  if (tensorData != nullptr &&
      __builtin_add_overflow(reinterpret_cast<std::uintptr_t>(tensorData),
                             static_cast<std::uint64_t>(storage_bytes), &storage_end)) {
    return tensor_error("storageDims hold " + std::to_string(storage_bytes) +
                        " bytes, more than fit after tensorData in the address space");
  }
  if (offset > storage_elements) {
    return tensor_error("offset is " + std::to_string(offset) + " but storageDims hold only " +
                        std::to_string(storage_elements) +
                        " elements; the view must start inside its storage");
  }
  // Strides: given (each >= 0) or contiguous.
  t->strides.assign(viewDimsNum, 1);
  for (std::uint64_t i = viewDimsNum; i-- > 0;) {
    if (stride != nullptr) {
      if (stride[i] < 0) {
        return tensor_error("stride[" + std::to_string(i) + "] is " + std::to_string(stride[i]) +
                            "; strides must be >= 0");
      }
      t->strides[i] = stride[i];
    } else if (i + 1 < viewDimsNum) {
      if (__builtin_mul_overflow(t->strides[i + 1], std::max<std::int64_t>(viewDims[i + 1], 1),
                                 &t->strides[i])) {
        return tensor_error("the contiguous strides of viewDims overflow 64 bits");
      }
    }
  }
  if (view_elements > 0) {
    // The last element the view reaches must lie inside the storage.
    std::int64_t last = offset;
    for (std::uint64_t i = 0; i < viewDimsNum; ++i) {
      std::int64_t step = 0;
      if (__builtin_mul_overflow(viewDims[i] - 1, t->strides[i], &step) ||
          __builtin_add_overflow(last, step, &last)) {
        return tensor_error("offset and strides reach beyond 64-bit element indices");
      }
    }
    if (last >= storage_elements) {
      return tensor_error("the view (offset " + std::to_string(offset) +
                          ", strides and dims) reaches element " + std::to_string(last) +
                          " but storageDims hold " + std::to_string(storage_elements) + " elements");
    }
  }
  return add(std::move(t), Kind::tensor);
}

}  // namespace

const char* dtype_name(aclDataType t) {
  switch (t) {
    case ACL_FLOAT:
      return "ACL_FLOAT";
    case ACL_FLOAT16:
      return "ACL_FLOAT16";
    case ACL_INT8:
      return "ACL_INT8";
    case ACL_INT32:
      return "ACL_INT32";
    case ACL_UINT8:
      return "ACL_UINT8";
    case ACL_INT16:
      return "ACL_INT16";
    case ACL_UINT16:
      return "ACL_UINT16";
    case ACL_UINT32:
      return "ACL_UINT32";
    case ACL_INT64:
      return "ACL_INT64";
    case ACL_UINT64:
      return "ACL_UINT64";
    case ACL_DOUBLE:
      return "ACL_DOUBLE";
    case ACL_BOOL:
      return "ACL_BOOL";
    case ACL_COMPLEX64:
      return "ACL_COMPLEX64";
    case ACL_COMPLEX128:
      return "ACL_COMPLEX128";
    case ACL_BF16:
      return "ACL_BF16";
    case ACL_HIFLOAT8:
      return "ACL_HIFLOAT8";
    case ACL_FLOAT8_E5M2:
      return "ACL_FLOAT8_E5M2";
    case ACL_FLOAT8_E4M3FN:
      return "ACL_FLOAT8_E4M3FN";
    case ACL_DT_UNDEFINED:
      break;
  }
  return nullptr;
}

std::optional<DType> dtype_of(aclDataType dtype) {
  switch (dtype) {
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
      return std::nullopt;
  }
}

std::size_t element_size(aclDataType dtype) {
  switch (dtype) {
    case ACL_INT8:
    case ACL_UINT8:
    case ACL_BOOL:
    case ACL_HIFLOAT8:
    case ACL_FLOAT8_E5M2:
    case ACL_FLOAT8_E4M3FN:
      return 1;
    case ACL_FLOAT16:
    case ACL_BF16:
    case ACL_INT16:
    case ACL_UINT16:
      return 2;
    case ACL_FLOAT:
    case ACL_INT32:
    case ACL_UINT32:
      return 4;
    case ACL_INT64:
    case ACL_UINT64:
    case ACL_DOUBLE:
    case ACL_COMPLEX64:
      return 8;
    case ACL_COMPLEX128:
      return 16;
    case ACL_DT_UNDEFINED:
      break;
  }
  return 0;
}

bool is_live(const aclTensor* p) { return live(p, Kind::tensor); }
bool is_live(const aclIntArray* p) { return live(p, Kind::int_array); }
bool is_live(const aclBoolArray* p) { return live(p, Kind::bool_array); }

aclOpExecutor* register_executor(std::unique_ptr<aclOpExecutor> executor) {
  return add(std::move(executor), Kind::executor);
}

std::unique_ptr<aclOpExecutor> take_executor(aclOpExecutor* p) {
  if (!remove(p, Kind::executor)) return nullptr;
  return std::unique_ptr<aclOpExecutor>(p);
}

}  // namespace conv3d_dx::acl

using conv3d_dx::acl::Kind;
using conv3d_dx::acl::set_error;

namespace {

template <class T>
aclnnStatus destroy(const T* p, Kind kind, const char* fn, const char* what) {
  if (p == nullptr) return ACLNN_SUCCESS;
  if (!conv3d_dx::acl::remove(p, kind)) {
    set_error(std::string(fn) + ": the pointer is not a live " + what +
              " (never created or already destroyed)");
    return ACLNN_ERR_PARAM_INVALID;
  }
  delete p;
  return ACLNN_SUCCESS;
}

}  // namespace

extern "C" {

aclTensor* aclCreateTensor(const int64_t* viewDims, uint64_t viewDimsNum, aclDataType dataType,
                           const int64_t* stride, int64_t offset, aclFormat format,
                           const int64_t* storageDims, uint64_t storageDimsNum, void* tensorData) {
  try {
    return conv3d_dx::acl::create_tensor(viewDims, viewDimsNum, dataType, stride, offset, format, storageDims,
                                         storageDimsNum, tensorData);
  } catch (...) {
    set_error("aclCreateTensor: out of memory");
    return nullptr;
  }
}

aclIntArray* aclCreateIntArray(const int64_t* value, uint64_t size) {
  if (value == nullptr && size > 0) {
    set_error("aclCreateIntArray: value is null but size is " + std::to_string(size));
    return nullptr;
  }
  try {
    auto a = std::make_unique<aclIntArray>();
    a->values.assign(value, value + size);
    return conv3d_dx::acl::add(std::move(a), Kind::int_array);
  } catch (...) {
    set_error("aclCreateIntArray: out of memory");
    return nullptr;
  }
}

aclBoolArray* aclCreateBoolArray(const bool* value, uint64_t size) {
  if (value == nullptr && size > 0) {
    set_error("aclCreateBoolArray: value is null but size is " + std::to_string(size));
    return nullptr;
  }
  try {
    auto a = std::make_unique<aclBoolArray>();
    a->values.assign(value, value + size);
    return conv3d_dx::acl::add(std::move(a), Kind::bool_array);
  } catch (...) {
    set_error("aclCreateBoolArray: out of memory");
    return nullptr;
  }
}

aclnnStatus aclDestroyTensor(const aclTensor* tensor) {
  return destroy(tensor, Kind::tensor, "aclDestroyTensor", "aclTensor");
}
aclnnStatus aclDestroyIntArray(const aclIntArray* array) {
  return destroy(array, Kind::int_array, "aclDestroyIntArray", "aclIntArray");
}
aclnnStatus aclDestroyBoolArray(const aclBoolArray* array) {
  return destroy(array, Kind::bool_array, "aclDestroyBoolArray", "aclBoolArray");
}
aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor* executor) {
  return destroy(executor, Kind::executor, "aclDestroyAclOpExecutor", "aclOpExecutor");
}

}  // extern "C"
