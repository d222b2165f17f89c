// All three gradients of a 3-D fp32 convolution (outputMask = {true, true, true}), called exactly the way the
// CANN documentation's example for aclnnConvolutionBackward calls it: init, device buffers, tensors, the
// two-phase call, synchronize, copy back, print. It builds unchanged against CANN; with conv3d-dx the
// "device" is the CPU.
//
//   input [2, 4, 4, 5, 6] (NCDHW), weight [6, 2, 3, 3, 3], groups 2, stride {1, 2, 2}, padding 1, dilation 1
//   gradOutput [2, 6, 4, 3, 3]  ->  gradInput [2, 4, 4, 5, 6], gradWeight [6, 2, 3, 3, 3], gradBias [6]
//
// The data are multiples of 1/8, so every result is a multiple of 1/64 and prints exactly with %f.
// Prints "gradInputResult[i] is: v", then gradWeightResult and gradBiasResult, in row-major order.
#include <iostream>
#include <memory>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_convolution_backward.h"

#define CHECK_RET(cond, return_expr) \
  do {                               \
    if (!(cond)) {                   \
      return_expr;                   \
    }                                \
  } while (0)

#define CHECK_FREE_RET(cond, return_expr) \
  do {                                    \
    if (!(cond)) {                        \
      Finalize(deviceId, stream);         \
      return_expr;                        \
    }                                     \
  } while (0)

#define LOG_PRINT(message, ...)     \
  do {                              \
    printf(message, ##__VA_ARGS__); \
  } while (0)

int64_t GetShapeSize(const std::vector<int64_t>& shape) {
  int64_t shapeSize = 1;
  for (auto i : shape) {
    shapeSize *= i;
  }
  return shapeSize;
}

int Init(int32_t deviceId, aclrtStream* stream) {
  // Resource initialisation (fixed pattern).
  auto ret = aclInit(nullptr);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclInit failed. ERROR: %d\n", ret); return ret);
  ret = aclrtSetDevice(deviceId);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSetDevice failed. ERROR: %d\n", ret); return ret);
  ret = aclrtCreateStream(stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtCreateStream failed. ERROR: %d\n", ret); return ret);
  return 0;
}

template <typename T>
int CreateAclTensor(const std::vector<T>& hostData, const std::vector<int64_t>& shape, void** DeviceAddr,
                    aclDataType dataType, aclTensor** tensor) {
  auto size = GetShapeSize(shape) * sizeof(T);
  // Device memory from aclrtMalloc.
  auto ret = aclrtMalloc(DeviceAddr, size, ACL_MEM_MALLOC_HUGE_FIRST);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMalloc failed. ERROR: %d\n", ret); return ret);
  // Copy the host data to the device with aclrtMemcpy.
  ret = aclrtMemcpy(*DeviceAddr, size, hostData.data(), size, ACL_MEMCPY_HOST_TO_DEVICE);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMemcpy failed. ERROR: %d\n", ret); return ret);

  // Strides of a contiguous tensor.
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = shape.size() - 2; i >= 0; i--) {
    strides[i] = shape[i + 1] * strides[i + 1];
  }

  // aclCreateTensor: 5-D tensors are NCDHW, the 1-D bias gradient is ND.
  if (shape.size() == 5) {
    *tensor = aclCreateTensor(shape.data(), shape.size(), dataType, strides.data(), 0,
                              aclFormat::ACL_FORMAT_NCDHW, shape.data(), shape.size(), *DeviceAddr);
  } else {
    *tensor = aclCreateTensor(shape.data(), shape.size(), dataType, strides.data(), 0,
                              aclFormat::ACL_FORMAT_ND, shape.data(), shape.size(), *DeviceAddr);
  }

  return 0;
}

void Finalize(int32_t deviceId, aclrtStream stream) {
  aclrtDestroyStream(stream);
  aclrtResetDevice(deviceId);
  aclFinalize();
}

// Small multiples of 1/8 in [-1, 1], different for each tensor.
std::vector<float> MakeData(int64_t size, int64_t a, int64_t b) {
  std::vector<float> data(size);
  for (int64_t i = 0; i < size; i++) {
    data[i] = static_cast<float>((i * a + b) % 17 - 8) / 8.0f;
  }
  return data;
}

int aclnnConvolutionBackwardTest(int32_t deviceId, aclrtStream& stream) {
  // 1. Initialise.
  auto ret = Init(deviceId, &stream);
  CHECK_FREE_RET(ret == ACL_SUCCESS, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);
  // 2. Inputs and outputs.
  std::vector<int64_t> gradOutputShape = {2, 6, 4, 3, 3};
  std::vector<int64_t> inputShape = {2, 4, 4, 5, 6};
  std::vector<int64_t> weightShape = {6, 2, 3, 3, 3};
  std::vector<int64_t> biasSize = {6};
  std::vector<int64_t> stride = {1, 2, 2};
  std::vector<int64_t> padding = {1, 1, 1};
  std::vector<int64_t> dilation = {1, 1, 1};
  bool transposed = false;
  std::vector<int64_t> outputPadding = {0, 0, 0};
  int groups = 2;
  bool outputMask[3] = {true, true, true};
  int8_t cubeMathType = 1;

  std::vector<int64_t> gradInputShape = {2, 4, 4, 5, 6};
  std::vector<int64_t> gradWeightShape = {6, 2, 3, 3, 3};
  std::vector<int64_t> gradBiasShape = {6};

  // gradOutput aclTensor
  std::vector<float> gradOutputData = MakeData(GetShapeSize(gradOutputShape), 37, 11);
  aclTensor* gradOutput = nullptr;
  void* gradOutputDeviceAddr = nullptr;
  ret = CreateAclTensor(gradOutputData, gradOutputShape, &gradOutputDeviceAddr, aclDataType::ACL_FLOAT,
                        &gradOutput);
  std::unique_ptr<aclTensor, aclnnStatus (*)(const aclTensor*)> gradOutputTensorPtr(gradOutput,
                                                                                    aclDestroyTensor);
  std::unique_ptr<void, aclError (*)(void*)> gradOutputDeviceAddrPtr(gradOutputDeviceAddr, aclrtFree);
  CHECK_FREE_RET(ret == ACL_SUCCESS, return ret);

  // input aclTensor
  std::vector<float> inputData = MakeData(GetShapeSize(inputShape), 53, 5);
  aclTensor* input = nullptr;
  void* inputDeviceAddr = nullptr;
  ret = CreateAclTensor(inputData, inputShape, &inputDeviceAddr, aclDataType::ACL_FLOAT, &input);
  std::unique_ptr<aclTensor, aclnnStatus (*)(const aclTensor*)> inputTensorPtr(input, aclDestroyTensor);
  std::unique_ptr<void, aclError (*)(void*)> inputDeviceAddrPtr(inputDeviceAddr, aclrtFree);
  CHECK_FREE_RET(ret == ACL_SUCCESS, return ret);

  // weight aclTensor
  std::vector<float> weightData = MakeData(GetShapeSize(weightShape), 29, 3);
  aclTensor* weight = nullptr;
  void* weightDeviceAddr = nullptr;
  ret = CreateAclTensor(weightData, weightShape, &weightDeviceAddr, aclDataType::ACL_FLOAT, &weight);
  std::unique_ptr<aclTensor, aclnnStatus (*)(const aclTensor*)> weightTensorPtr(weight, aclDestroyTensor);
  std::unique_ptr<void, aclError (*)(void*)> weightDeviceAddrPtr(weightDeviceAddr, aclrtFree);
  CHECK_FREE_RET(ret == ACL_SUCCESS, return ret);

  // gradInput aclTensor
  std::vector<float> gradInputData(GetShapeSize(inputShape), 1);
  aclTensor* gradInput = nullptr;
  void* gradInputDeviceAddr = nullptr;
  ret = CreateAclTensor(gradInputData, inputShape, &gradInputDeviceAddr, aclDataType::ACL_FLOAT, &gradInput);
  std::unique_ptr<aclTensor, aclnnStatus (*)(const aclTensor*)> gradInputTensorPtr(gradInput,
                                                                                   aclDestroyTensor);
  std::unique_ptr<void, aclError (*)(void*)> gradInputDeviceAddrPtr(gradInputDeviceAddr, aclrtFree);
  CHECK_FREE_RET(ret == ACL_SUCCESS, return ret);

  // gradWeight aclTensor
  std::vector<float> gradWeightData(GetShapeSize(weightShape), 1);
  aclTensor* gradWeight = nullptr;
  void* gradWeightDeviceAddr = nullptr;
  ret = CreateAclTensor(gradWeightData, weightShape, &gradWeightDeviceAddr, aclDataType::ACL_FLOAT,
                        &gradWeight);
  std::unique_ptr<aclTensor, aclnnStatus (*)(const aclTensor*)> gradWeightTensorPtr(gradWeight,
                                                                                    aclDestroyTensor);
  std::unique_ptr<void, aclError (*)(void*)> gradWeightDeviceAddrPtr(gradWeightDeviceAddr, aclrtFree);
  CHECK_FREE_RET(ret == ACL_SUCCESS, return ret);

  // gradBias aclTensor
  std::vector<float> gradBiasData(GetShapeSize(biasSize), 1);
  aclTensor* gradBias = nullptr;
  void* gradBiasDeviceAddr = nullptr;
  ret = CreateAclTensor(gradBiasData, biasSize, &gradBiasDeviceAddr, aclDataType::ACL_FLOAT, &gradBias);
  std::unique_ptr<aclTensor, aclnnStatus (*)(const aclTensor*)> gradBiasTensorPtr(gradBias, aclDestroyTensor);
  std::unique_ptr<void, aclError (*)(void*)> gradBiasDeviceAddrPtr(gradBiasDeviceAddr, aclrtFree);
  CHECK_FREE_RET(ret == ACL_SUCCESS, return ret);

  // biasSizes aclIntArray
  aclIntArray* biasSizes = aclCreateIntArray(biasSize.data(), 1);
  std::unique_ptr<aclIntArray, aclnnStatus (*)(const aclIntArray*)> biasSizesPtr(biasSizes,
                                                                                 aclDestroyIntArray);
  CHECK_FREE_RET(biasSizes != nullptr, return ACL_ERROR_INTERNAL_ERROR);

  // strides aclIntArray
  aclIntArray* strides = aclCreateIntArray(stride.data(), 3);
  std::unique_ptr<aclIntArray, aclnnStatus (*)(const aclIntArray*)> stridesPtr(strides, aclDestroyIntArray);
  CHECK_FREE_RET(strides != nullptr, return ACL_ERROR_INTERNAL_ERROR);

  // pads aclIntArray
  aclIntArray* pads = aclCreateIntArray(padding.data(), 3);
  std::unique_ptr<aclIntArray, aclnnStatus (*)(const aclIntArray*)> padsPtr(pads, aclDestroyIntArray);
  CHECK_FREE_RET(pads != nullptr, return ACL_ERROR_INTERNAL_ERROR);

  // dilations aclIntArray
  aclIntArray* dilations = aclCreateIntArray(dilation.data(), 3);
  std::unique_ptr<aclIntArray, aclnnStatus (*)(const aclIntArray*)> dilationsPtr(dilations,
                                                                                 aclDestroyIntArray);
  CHECK_FREE_RET(dilations != nullptr, return ACL_ERROR_INTERNAL_ERROR);

  // outputPads aclIntArray
  aclIntArray* outputPads = aclCreateIntArray(outputPadding.data(), 3);
  std::unique_ptr<aclIntArray, aclnnStatus (*)(const aclIntArray*)> outputPadsPtr(outputPads,
                                                                                  aclDestroyIntArray);
  CHECK_FREE_RET(outputPads != nullptr, return ACL_ERROR_INTERNAL_ERROR);

  // outMask aclBoolArray
  aclBoolArray* outMask = aclCreateBoolArray(outputMask, 3);
  std::unique_ptr<aclBoolArray, aclnnStatus (*)(const aclBoolArray*)> outMaskPtr(outMask,
                                                                                 aclDestroyBoolArray);
  CHECK_FREE_RET(outMask != nullptr, return ACL_ERROR_INTERNAL_ERROR);

  // 3. Call the operator.
  uint64_t workspaceSize = 0;
  aclOpExecutor* executor;
  // Phase 1: aclnnConvolutionBackwardGetWorkspaceSize.
  ret = aclnnConvolutionBackwardGetWorkspaceSize(
      gradOutput, input, weight, biasSizes, strides, pads, dilations, transposed, outputPads, groups, outMask,
      cubeMathType, gradInput, gradWeight, gradBias, &workspaceSize, &executor);
  CHECK_FREE_RET(ret == ACL_SUCCESS,
                 LOG_PRINT("aclnnConvolutionBackwardGetWorkspaceSize failed. ERROR: %d\n", ret);
                 return ret);
  // Device memory of workspaceSize bytes.
  void* workspaceAddr = nullptr;
  std::unique_ptr<void, aclError (*)(void*)> workspaceAddrPtr(nullptr, aclrtFree);
  if (workspaceSize > 0) {
    ret = aclrtMalloc(&workspaceAddr, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST);
    CHECK_FREE_RET(ret == ACL_SUCCESS, LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret); return ret);
    workspaceAddrPtr.reset(workspaceAddr);
  }
  // Phase 2: aclnnConvolutionBackward.
  ret = aclnnConvolutionBackward(workspaceAddr, workspaceSize, executor, stream);
  CHECK_FREE_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnConvolutionBackward failed. ERROR: %d\n", ret);
                 return ret);
  // 4. Wait for the stream (fixed pattern).
  ret = aclrtSynchronizeStream(stream);
  CHECK_FREE_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret);
                 return ret);
  // 5. Copy the results from the device to the host and print them.
  auto size = GetShapeSize(gradInputShape);
  std::vector<float> gradInputResult(size, 0);
  ret = aclrtMemcpy(gradInputResult.data(), gradInputResult.size() * sizeof(gradInputResult[0]),
                    gradInputDeviceAddr, size * sizeof(gradInputResult[0]), ACL_MEMCPY_DEVICE_TO_HOST);
  CHECK_FREE_RET(ret == ACL_SUCCESS, LOG_PRINT("copy result from device to host failed. ERROR: %d\n", ret);
                 return ret);
  for (int64_t i = 0; i < size; i++) {
    LOG_PRINT("gradInputResult[%ld] is: %f\n", i, gradInputResult[i]);
  }

  size = GetShapeSize(gradWeightShape);
  std::vector<float> gradWeightResult(size, 0);
  ret = aclrtMemcpy(gradWeightResult.data(), gradWeightResult.size() * sizeof(gradWeightResult[0]),
                    gradWeightDeviceAddr, size * sizeof(gradWeightResult[0]), ACL_MEMCPY_DEVICE_TO_HOST);
  CHECK_FREE_RET(ret == ACL_SUCCESS, LOG_PRINT("copy result from device to host failed. ERROR: %d\n", ret);
                 return ret);
  for (int64_t i = 0; i < size; i++) {
    LOG_PRINT("gradWeightResult[%ld] is: %f\n", i, gradWeightResult[i]);
  }

  size = GetShapeSize(gradBiasShape);
  std::vector<float> gradBiasResult(size, 0);
  ret = aclrtMemcpy(gradBiasResult.data(), gradBiasResult.size() * sizeof(gradBiasResult[0]),
                    gradBiasDeviceAddr, size * sizeof(gradBiasResult[0]), ACL_MEMCPY_DEVICE_TO_HOST);
  CHECK_FREE_RET(ret == ACL_SUCCESS, LOG_PRINT("copy result from device to host failed. ERROR: %d\n", ret);
                 return ret);
  for (int64_t i = 0; i < size; i++) {
    LOG_PRINT("gradBiasResult[%ld] is: %f\n", i, gradBiasResult[i]);
  }
  return ACL_SUCCESS;
}

int main() {
  // 1. Device and stream (fixed pattern); use your own deviceId.
  int32_t deviceId = 0;
  aclrtStream stream;
  auto ret = aclnnConvolutionBackwardTest(deviceId, stream);
  CHECK_FREE_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnConvolutionBackwardTest failed. ERROR: %d\n", ret);
                 return ret);

  Finalize(deviceId, stream);
  return 0;
}
