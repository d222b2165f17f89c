// The gradient of a 3-D bf16 convolution with respect to its input, called the way the CANN documentation
// calls aclnnConvolutionBackward: init, device buffers, tensors, the two-phase call, synchronize, copy back.
// It builds unchanged against CANN; with conv3d-dx the "device" is the CPU.
//
//   input [2, 4, 5, 6, 7] (NCDHW), weight [6, 2, 3, 3, 3], groups 2, stride 2, padding 1, dilation 1
//   gradOutput [2, 6, 3, 3, 4]  ->  gradInput [2, 4, 5, 6, 7]
//
// Prints one line per (n, c, d, h): "gradInput[n][c][d][h] = v0 v1 ... v6".
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_convolution_backward.h"

#define CHECK_RET(cond, return_expr) \
  do {                               \
    if (!(cond)) {                   \
      return_expr;                   \
    }                                \
  } while (0)

#define LOG_PRINT(message, ...)          \
  do {                                   \
    std::printf(message, ##__VA_ARGS__); \
  } while (0)

namespace {

int64_t GetShapeSize(const std::vector<int64_t>& shape) {
  int64_t size = 1;
  for (auto d : shape) size *= d;
  return size;
}

// bf16 is the upper half of an fp32 (round to nearest even).
uint16_t FloatToBf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

float Bf16ToFloat(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

int Init(int32_t deviceId, aclrtStream* stream) {
  auto ret = aclInit(nullptr);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclInit failed. ERROR: %d\n", ret); return ret);
  ret = aclrtSetDevice(deviceId);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSetDevice failed. ERROR: %d\n", ret); return ret);
  ret = aclrtCreateStream(stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtCreateStream failed. ERROR: %d\n", ret); return ret);
  return 0;
}

template <typename T>
int CreateAclTensor(const std::vector<T>& hostData, const std::vector<int64_t>& shape, void** deviceAddr,
                    aclDataType dataType, aclTensor** tensor) {
  auto size = GetShapeSize(shape) * sizeof(T);
  auto ret = aclrtMalloc(deviceAddr, size, ACL_MEM_MALLOC_HUGE_FIRST);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMalloc failed. ERROR: %d\n", ret); return ret);
  ret = aclrtMemcpy(*deviceAddr, size, hostData.data(), size, ACL_MEMCPY_HOST_TO_DEVICE);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMemcpy failed. ERROR: %d\n", ret); return ret);

  // Strides of a contiguous tensor.
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; i--) {
    strides[i] = shape[i + 1] * strides[i + 1];
  }
  *tensor = aclCreateTensor(shape.data(), shape.size(), dataType, strides.data(), 0,
                            aclFormat::ACL_FORMAT_NCDHW, shape.data(), shape.size(), *deviceAddr);
  CHECK_RET(*tensor != nullptr, LOG_PRINT("aclCreateTensor failed: %s\n", aclGetRecentErrMsg()); return 1);
  return 0;
}

}  // namespace

int main() {
  int32_t deviceId = 0;
  aclrtStream stream;
  auto ret = Init(deviceId, &stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

  std::vector<int64_t> gradOutputShape = {2, 6, 3, 3, 4};
  std::vector<int64_t> inputShape = {2, 4, 5, 6, 7};
  std::vector<int64_t> weightShape = {6, 2, 3, 3, 3};
  std::vector<int64_t> gradInputShape = inputShape;
  void* gradOutputDeviceAddr = nullptr;
  void* inputDeviceAddr = nullptr;
  void* weightDeviceAddr = nullptr;
  void* gradInputDeviceAddr = nullptr;
  aclTensor* gradOutput = nullptr;
  aclTensor* input = nullptr;
  aclTensor* weight = nullptr;
  aclTensor* gradInput = nullptr;

  // Small multiples of 1/8 and 1/4: exact in bf16.
  std::vector<uint16_t> gradOutputHostData(GetShapeSize(gradOutputShape));
  for (size_t i = 0; i < gradOutputHostData.size(); ++i) {
    gradOutputHostData[i] = FloatToBf16(static_cast<float>(static_cast<int>((i * 37 + 11) % 19) - 9) / 8.0f);
  }
  std::vector<uint16_t> inputHostData(GetShapeSize(inputShape), 0);
  std::vector<uint16_t> weightHostData(GetShapeSize(weightShape));
  for (size_t i = 0; i < weightHostData.size(); ++i) {
    weightHostData[i] = FloatToBf16(static_cast<float>(static_cast<int>((i * 53 + 5) % 13) - 6) / 4.0f);
  }
  std::vector<uint16_t> gradInputHostData(GetShapeSize(gradInputShape), 0);

  ret = CreateAclTensor(gradOutputHostData, gradOutputShape, &gradOutputDeviceAddr, aclDataType::ACL_BF16,
                        &gradOutput);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(inputHostData, inputShape, &inputDeviceAddr, aclDataType::ACL_BF16, &input);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(weightHostData, weightShape, &weightDeviceAddr, aclDataType::ACL_BF16, &weight);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(gradInputHostData, gradInputShape, &gradInputDeviceAddr, aclDataType::ACL_BF16,
                        &gradInput);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  std::vector<int64_t> strideData = {2, 2, 2};
  std::vector<int64_t> paddingData = {1, 1, 1};
  std::vector<int64_t> dilationData = {1, 1, 1};
  std::vector<int64_t> outputPaddingData = {0, 0, 0};
  aclIntArray* stride = aclCreateIntArray(strideData.data(), strideData.size());
  aclIntArray* padding = aclCreateIntArray(paddingData.data(), paddingData.size());
  aclIntArray* dilation = aclCreateIntArray(dilationData.data(), dilationData.size());
  aclIntArray* outputPadding = aclCreateIntArray(outputPaddingData.data(), outputPaddingData.size());
  bool outputMaskData[3] = {true, false, false};  // gradInput only
  aclBoolArray* outputMask = aclCreateBoolArray(&(outputMaskData[0]), 3);
  bool transposed = false;
  int groups = 2;
  int8_t cubeMathType = 0;  // KEEP_DTYPE

  // Phase 1: workspace size and executor.
  uint64_t workspaceSize = 0;
  aclOpExecutor* executor;
  ret = aclnnConvolutionBackwardGetWorkspaceSize(
      gradOutput, input, weight, nullptr, stride, padding, dilation, transposed, outputPadding, groups,
      outputMask, cubeMathType, gradInput, nullptr, nullptr, &workspaceSize, &executor);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnConvolutionBackwardGetWorkspaceSize failed. ERROR: %d (%s)\n",
                                          ret, aclGetRecentErrMsg());
            return ret);
  void* workspaceAddr = nullptr;
  if (workspaceSize > 0) {
    ret = aclrtMalloc(&workspaceAddr, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret); return ret);
  }
  // Phase 2: run on the stream.
  ret = aclnnConvolutionBackward(workspaceAddr, workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnConvolutionBackward failed. ERROR: %d (%s)\n", ret, aclGetRecentErrMsg());
            return ret);
  ret = aclrtSynchronizeStream(stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);

  // Copy the result back and print it.
  auto size = GetShapeSize(gradInputShape);
  std::vector<uint16_t> resultData(size, 0);
  ret = aclrtMemcpy(resultData.data(), resultData.size() * sizeof(resultData[0]), gradInputDeviceAddr,
                    size * sizeof(resultData[0]), ACL_MEMCPY_DEVICE_TO_HOST);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("copy result from device to host failed. ERROR: %d\n", ret);
            return ret);
  const int64_t W = gradInputShape[4];
  for (int64_t row = 0; row < size / W; ++row) {
    const int64_t h = row % gradInputShape[3], d = row / gradInputShape[3] % gradInputShape[2];
    const int64_t c = row / (gradInputShape[3] * gradInputShape[2]) % gradInputShape[1];
    const int64_t n = row / (gradInputShape[3] * gradInputShape[2] * gradInputShape[1]);
    LOG_PRINT("gradInput[%lld][%lld][%lld][%lld] =", static_cast<long long>(n), static_cast<long long>(c),
              static_cast<long long>(d), static_cast<long long>(h));
    for (int64_t w = 0; w < W; ++w) LOG_PRINT(" %.9g", Bf16ToFloat(resultData[row * W + w]));
    LOG_PRINT("\n");
  }

  // Release everything.
  aclDestroyTensor(gradOutput);
  aclDestroyTensor(input);
  aclDestroyTensor(weight);
  aclDestroyTensor(gradInput);
  aclDestroyIntArray(stride);
  aclDestroyIntArray(padding);
  aclDestroyIntArray(dilation);
  aclDestroyIntArray(outputPadding);
  aclDestroyBoolArray(outputMask);
  aclrtFree(gradOutputDeviceAddr);
  aclrtFree(inputDeviceAddr);
  aclrtFree(weightDeviceAddr);
  aclrtFree(gradInputDeviceAddr);
  if (workspaceSize > 0) {
    aclrtFree(workspaceAddr);
  }
  aclrtDestroyStream(stream);
  aclrtResetDevice(deviceId);
  aclFinalize();
  return 0;
}
