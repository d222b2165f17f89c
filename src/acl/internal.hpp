// Internals shared by the three aclnn-compatible libraries:
//   libascendcl  (runtime.cpp): aclInit, devices, streams, memory, the per-thread error message;
//   libnnopbase  (meta.cpp):    tensors, arrays, the executor registry;
//   libopapi     (convolution_backward.cpp): aclnnConvolutionBackward on top of conv3d_dx::Plan.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "aclnn/acl_meta.h"
#include "conv3d_dx/conv3d_dx.hpp"

struct aclTensor {
  std::vector<std::int64_t> dims, strides;  // the view, strides in elements
  std::int64_t offset = 0;                  // elements from data to the view's first element
  aclDataType dtype = ACL_FLOAT;
  aclFormat format = ACL_FORMAT_ND;
  std::vector<std::int64_t> storage_dims;
  void* data = nullptr;
};

struct aclIntArray {
  std::vector<std::int64_t> values;
};

struct aclBoolArray {
  std::vector<bool> values;
};

// Each operator derives its executor from this; the registry owns live executors.
struct aclOpExecutor {
  virtual ~aclOpExecutor() = default;
};

namespace conv3d_dx::acl {

// libascendcl: sets the calling thread's aclGetRecentErrMsg().
void set_error(const std::string& message);
// libascendcl: null (the default stream) or a stream created and not yet destroyed.
bool stream_is_valid(aclrtStream stream);

// libnnopbase: whether p is a live object of that kind (created here and not destroyed).
bool is_live(const aclTensor* p);
bool is_live(const aclIntArray* p);
bool is_live(const aclBoolArray* p);
// libnnopbase: hands an executor to the registry and returns the handle callers see.
aclOpExecutor* register_executor(std::unique_ptr<aclOpExecutor> executor);
// libnnopbase: takes a live executor out of the registry (nullptr when p is not one).
std::unique_ptr<aclOpExecutor> take_executor(aclOpExecutor* p);

// The enumerator's name ("ACL_FLOAT", ...) of every aclDataType; nullptr for a value that is none.
const char* dtype_name(aclDataType dtype);
// Bytes per element of the dtypes tensors may have; 0 for an unknown dtype.
std::size_t element_size(aclDataType dtype);
// The conv3d_dx dtype of the aclDataTypes the operator computes with (ACL_FLOAT, ACL_FLOAT16, ACL_BF16,
// ACL_HIFLOAT8, ACL_FLOAT8_E4M3FN); nullopt for every other.
std::optional<DType> dtype_of(aclDataType dtype);

}  // namespace conv3d_dx::acl
