/* The aclnn headers compile as C (C11, warnings as errors) and the libraries work from C: a 1-D
 * convolution's input gradient, checked against values worked out by hand. */
#include <stdio.h>
#include <string.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_convolution_backward.h"

int main(void) {
  /* input [1, 1, 4], weight [1, 1, 2], stride 1, no padding: gradOutput [1, 1, 3].
   * gradInput[i] = sum over t of dy[t] * w[i - t]: dy = 1 2 3, w = 10 100 -> 10 120 230 300. */
  float dy[3] = {1, 2, 3}, w[2] = {10, 100}, x[4] = {0}, gx[4] = {0};
  const float expected[4] = {10, 120, 230, 300};
  const int64_t dy_dims[3] = {1, 1, 3}, w_dims[3] = {1, 1, 2}, x_dims[3] = {1, 1, 4};
  const int64_t one[1] = {1}, zero[1] = {0};
  const bool mask[3] = {true, false, false};
  aclrtStream stream = NULL;
  aclOpExecutor* executor = NULL;
  uint64_t workspace = 0;
  void* workspace_addr = NULL;
  int failures = 0;
  aclTensor *t_dy, *t_w, *t_x, *t_gx;
  aclIntArray *stride, *padding, *dilation, *output_padding;
  aclBoolArray* output_mask;
  aclnnStatus status;
  int i;

  if (aclInit(NULL) != ACL_SUCCESS || aclrtSetDevice(0) != ACL_SUCCESS ||
      aclrtCreateStream(&stream) != ACL_SUCCESS) {
    printf("runtime setup failed: %s\n", aclGetRecentErrMsg());
    return 1;
  }
  t_dy = aclCreateTensor(dy_dims, 3, ACL_FLOAT, NULL, 0, ACL_FORMAT_NCL, dy_dims, 3, dy);
  t_w = aclCreateTensor(w_dims, 3, ACL_FLOAT, NULL, 0, ACL_FORMAT_NCL, w_dims, 3, w);
  t_x = aclCreateTensor(x_dims, 3, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, x_dims, 3, x);
  t_gx = aclCreateTensor(x_dims, 3, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, x_dims, 3, gx);
  stride = aclCreateIntArray(one, 1);
  padding = aclCreateIntArray(zero, 1);
  dilation = aclCreateIntArray(one, 1);
  output_padding = aclCreateIntArray(zero, 1);
  output_mask = aclCreateBoolArray(mask, 3);

  status = aclnnConvolutionBackwardGetWorkspaceSize(t_dy, t_x, t_w, NULL, stride, padding, dilation, false,
                                                    output_padding, 1, output_mask, 0, t_gx, NULL, NULL,
                                                    &workspace, &executor);
  if (status != ACLNN_SUCCESS) {
    printf("GetWorkspaceSize: %d %s\n", (int)status, aclGetRecentErrMsg());
    return 1;
  }
  if (workspace > 0 && aclrtMalloc(&workspace_addr, workspace, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS) {
    printf("aclrtMalloc: %s\n", aclGetRecentErrMsg());
    return 1;
  }
  status = aclnnConvolutionBackward(workspace_addr, workspace, executor, stream);
  if (status != ACLNN_SUCCESS || aclrtSynchronizeStream(stream) != ACL_SUCCESS) {
    printf("run: %d %s\n", (int)status, aclGetRecentErrMsg());
    return 1;
  }
  for (i = 0; i < 4; ++i) {
    if (memcmp(&gx[i], &expected[i], sizeof(float)) != 0) {
      printf("gradInput[%d] is %g, expected %g\n", i, (double)gx[i], (double)expected[i]);
      ++failures;
    }
  }
  /* A null required pointer from C. */
  if (aclnnConvolutionBackwardGetWorkspaceSize(NULL, t_x, t_w, NULL, stride, padding, dilation, false,
                                               output_padding, 1, output_mask, 0, t_gx, NULL, NULL,
                                               &workspace, &executor) != ACLNN_ERR_PARAM_NULLPTR) {
    printf("a null gradOutput was not reported\n");
    ++failures;
  }
  aclDestroyTensor(t_dy);
  aclDestroyTensor(t_w);
  aclDestroyTensor(t_x);
  aclDestroyTensor(t_gx);
  aclDestroyIntArray(stride);
  aclDestroyIntArray(padding);
  aclDestroyIntArray(dilation);
  aclDestroyIntArray(output_padding);
  aclDestroyBoolArray(output_mask);
  if (workspace_addr != NULL) aclrtFree(workspace_addr);
  aclrtDestroyStream(stream);
  aclrtResetDevice(0);
  aclFinalize();
  if (failures == 0) printf("ok\n");
  return failures == 0 ? 0 : 1;
}
