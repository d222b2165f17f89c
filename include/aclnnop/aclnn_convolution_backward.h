/* conv3d-dx: aclnnConvolutionBackward (docs/aclnn.md). C and C++.
 *
 * Computes gradInput, gradWeight and gradBias (outputMask[0], [1], [2]) of a convolution with NCDHW, NCHW or
 * NCL/ND tensors: gradWeight has weight's shape and dtype (ACL_FLOAT is also accepted for an 8-bit weight),
 * gradBias is 1-D [Cout], ACL_FORMAT_ND, with gradOutput's dtype; biasSizes may be null, and when given must
 * be [Cout]. An output whose mask is false may be null and is not written; all three false computes nothing.
 * transposed = true is rejected with ACLNN_ERR_PARAM_INVALID.
 * Two phases: GetWorkspaceSize validates, plans and returns an executor; aclnnConvolutionBackward runs it on
 * the stream and releases it. Tensor data is read when the executor runs. */
#ifndef CONV3D_DX_ACLNNOP_ACLNN_CONVOLUTION_BACKWARD_H
#define CONV3D_DX_ACLNNOP_ACLNN_CONVOLUTION_BACKWARD_H

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnConvolutionBackwardGetWorkspaceSize(
    const aclTensor* gradOutput, const aclTensor* input, const aclTensor* weight,
    const aclIntArray* biasSizes, const aclIntArray* stride, const aclIntArray* padding,
    const aclIntArray* dilation, bool transposed, const aclIntArray* outputPadding, int groups,
    const aclBoolArray* outputMask, int8_t cubeMathType, aclTensor* gradInput, aclTensor* gradWeight,
    aclTensor* gradBias, uint64_t* workspaceSize, aclOpExecutor** executor);

ACL_FUNC_VISIBILITY aclnnStatus aclnnConvolutionBackward(void* workspace, uint64_t workspaceSize,
                                                         aclOpExecutor* executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* CONV3D_DX_ACLNNOP_ACLNN_CONVOLUTION_BACKWARD_H */
