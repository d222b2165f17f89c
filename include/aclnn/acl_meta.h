/* conv3d-dx: the CANN-compatible aclnn objects: tensors, arrays, executors and status codes (docs/aclnn.md).
 * C and C++. Every object is checked on use: a destroyed or foreign pointer is an error, not a crash. */
#ifndef CONV3D_DX_ACLNN_ACL_META_H
#define CONV3D_DX_ACLNN_ACL_META_H

#ifndef __cplusplus
#include <stdbool.h>
#endif
#include <stdint.h>

#include "acl/acl_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t aclnnStatus;

#define ACLNN_SUCCESS 0
#define ACLNN_ERR_PARAM_NULLPTR 161001
#define ACLNN_ERR_PARAM_INVALID 161002
#define ACLNN_ERR_INNER_NULLPTR 561103

typedef struct aclTensor aclTensor;
typedef struct aclIntArray aclIntArray;
typedef struct aclBoolArray aclBoolArray;
typedef struct aclOpExecutor aclOpExecutor;

/* A view of viewDimsNum dims over a buffer of storageDims elements starting at tensorData. stride (in
 * elements, each >= 0; null means contiguous) and offset (in elements) must keep every element of the view
 * inside the storage. Returns null and sets aclGetRecentErrMsg() when the description is invalid. */
ACL_FUNC_VISIBILITY aclTensor* aclCreateTensor(const int64_t* viewDims, uint64_t viewDimsNum,
                                               aclDataType dataType, const int64_t* stride, int64_t offset,
                                               aclFormat format, const int64_t* storageDims,
                                               uint64_t storageDimsNum, void* tensorData);
ACL_FUNC_VISIBILITY aclIntArray* aclCreateIntArray(const int64_t* value, uint64_t size);
ACL_FUNC_VISIBILITY aclBoolArray* aclCreateBoolArray(const bool* value, uint64_t size);

/* Null is accepted (ACLNN_SUCCESS); a pointer that is not a live object gives ACLNN_ERR_PARAM_INVALID. */
ACL_FUNC_VISIBILITY aclnnStatus aclDestroyTensor(const aclTensor* tensor);
ACL_FUNC_VISIBILITY aclnnStatus aclDestroyIntArray(const aclIntArray* array);
ACL_FUNC_VISIBILITY aclnnStatus aclDestroyBoolArray(const aclBoolArray* array);
/* Releases an executor that will not be run (running an executor releases it). */
ACL_FUNC_VISIBILITY aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor* executor);

#ifdef __cplusplus
}
#endif

#endif /* CONV3D_DX_ACLNN_ACL_META_H */
