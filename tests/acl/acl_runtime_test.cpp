// The host runtime and the aclnn objects (docs/aclnn.md): init, devices, streams, memory, copies, tensors,
// arrays.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "acl/acl.h"
#include "aclnn/acl_meta.h"

namespace {

bool message_has(const std::string& fragment) {
  return std::string(aclGetRecentErrMsg()).find(fragment) != std::string::npos;
}

TEST(AclRuntime, InitAndFinalize) {
  ASSERT_EQ(aclInit(nullptr), ACL_SUCCESS);
  EXPECT_EQ(aclInit(nullptr), ACL_ERROR_REPEAT_INITIALIZE);
  EXPECT_TRUE(message_has("aclInit: already initialized"));
  ASSERT_EQ(aclFinalize(), ACL_SUCCESS);
  EXPECT_EQ(aclFinalize(), ACL_ERROR_REPEAT_FINALIZE);
  EXPECT_TRUE(message_has("aclFinalize: not initialized"));
  ASSERT_EQ(aclInit(""), ACL_SUCCESS);
  ASSERT_EQ(aclFinalize(), ACL_SUCCESS);
  EXPECT_EQ(aclInit("/nonexistent/acl.json"), ACL_ERROR_INVALID_FILE);
  EXPECT_TRUE(message_has("/nonexistent/acl.json"));
  const std::string config = ::testing::TempDir() + "acl_runtime_test.json";
  std::FILE* f = std::fopen(config.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("{}\n", f);
  std::fclose(f);
  EXPECT_EQ(aclInit(config.c_str()), ACL_SUCCESS);
  EXPECT_EQ(aclFinalize(), ACL_SUCCESS);
  std::remove(config.c_str());
}

TEST(AclRuntime, OneDevice) {
  EXPECT_EQ(aclrtSetDevice(0), ACL_SUCCESS);
  EXPECT_EQ(aclrtResetDevice(0), ACL_SUCCESS);
  EXPECT_EQ(aclrtSetDevice(1), ACL_ERROR_RT_INVALID_DEVICEID);
  EXPECT_TRUE(message_has("deviceId is 1 but the only device is 0"));
  EXPECT_EQ(aclrtResetDevice(-1), ACL_ERROR_RT_INVALID_DEVICEID);
  std::uint32_t count = 0;
  EXPECT_EQ(aclrtGetDeviceCount(&count), ACL_SUCCESS);
  EXPECT_EQ(count, 1u);
  EXPECT_EQ(aclrtGetDeviceCount(nullptr), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtSynchronizeDevice(), ACL_SUCCESS);
}

TEST(AclRuntime, Streams) {
  aclrtStream a = nullptr, b = nullptr;
  ASSERT_EQ(aclrtCreateStream(&a), ACL_SUCCESS);
  ASSERT_EQ(aclrtCreateStream(&b), ACL_SUCCESS);
  EXPECT_NE(a, b);
  EXPECT_EQ(aclrtSynchronizeStream(a), ACL_SUCCESS);
  EXPECT_EQ(aclrtSynchronizeStream(nullptr), ACL_SUCCESS);  // the default stream
  EXPECT_EQ(aclrtDestroyStream(a), ACL_SUCCESS);
  EXPECT_EQ(aclrtSynchronizeStream(a), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtDestroyStream(a), ACL_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("already destroyed"));
  EXPECT_EQ(aclrtDestroyStream(nullptr), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtCreateStream(nullptr), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtDestroyStream(b), ACL_SUCCESS);
}

TEST(AclRuntime, MallocAndFree) {
  void* p = nullptr;
  ASSERT_EQ(aclrtMalloc(&p, 100, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u);
  EXPECT_EQ(aclrtFree(static_cast<char*>(p) + 1), ACL_ERROR_INVALID_PARAM);  // not the start of a block
  EXPECT_EQ(aclrtFree(p), ACL_SUCCESS);
  EXPECT_EQ(aclrtFree(p), ACL_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("aclrtFree: the pointer was not returned by aclrtMalloc or was already freed"));
  EXPECT_EQ(aclrtFree(nullptr), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtMalloc(&p, 0, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(p, nullptr);
  EXPECT_TRUE(message_has("size is 0"));
  EXPECT_EQ(aclrtMalloc(nullptr, 8, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtMalloc(&p, SIZE_MAX, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_ERROR_BAD_ALLOC);
  // Host memory is a separate kind.
  void* h = nullptr;
  ASSERT_EQ(aclrtMallocHost(&h, 16), ACL_SUCCESS);
  EXPECT_EQ(aclrtFree(h), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtFreeHost(h), ACL_SUCCESS);
  EXPECT_EQ(aclrtFreeHost(h), ACL_ERROR_INVALID_PARAM);
}

TEST(AclRuntime, MemcpyEveryKind) {
  void *d1 = nullptr, *d2 = nullptr;
  ASSERT_EQ(aclrtMalloc(&d1, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  ASSERT_EQ(aclrtMalloc(&d2, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  std::vector<int> a(16), b(16, -1), c(16, -2);
  for (int i = 0; i < 16; ++i) a[static_cast<std::size_t>(i)] = i * i;
  EXPECT_EQ(aclrtMemcpy(d1, 64, a.data(), 64, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
  EXPECT_EQ(aclrtMemcpy(d2, 64, d1, 64, ACL_MEMCPY_DEVICE_TO_DEVICE), ACL_SUCCESS);
  EXPECT_EQ(aclrtMemcpy(b.data(), 64, d2, 64, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
  EXPECT_EQ(b, a);
  EXPECT_EQ(aclrtMemcpy(c.data(), 64, b.data(), 64, ACL_MEMCPY_HOST_TO_HOST), ACL_SUCCESS);
  EXPECT_EQ(c, a);
  std::vector<int> e(16);
  EXPECT_EQ(aclrtMemcpy(e.data(), 64, d1, 64, ACL_MEMCPY_DEFAULT), ACL_SUCCESS);
  EXPECT_EQ(e, a);
  // A copy into the middle of a block, up to its end.
  EXPECT_EQ(aclrtMemcpy(static_cast<char*>(d1) + 60, 4, a.data(), 4, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
  EXPECT_EQ(aclrtMemcpy(d1, 64, a.data(), 0, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);  // nothing to copy
  EXPECT_EQ(aclrtFree(d1), ACL_SUCCESS);
  EXPECT_EQ(aclrtFree(d2), ACL_SUCCESS);
}

TEST(AclRuntime, MemcpyChecks) {
  void* d = nullptr;
  ASSERT_EQ(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  std::vector<char> host(128, 7), before = host;
  // destMax: count may not exceed it, whatever the memory.
  EXPECT_EQ(aclrtMemcpy(host.data(), 16, d, 17, ACL_MEMCPY_DEVICE_TO_HOST), ACL_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("aclrtMemcpy: count 17 exceeds destMax 16"));
  EXPECT_EQ(host, before);
  EXPECT_EQ(aclrtMemcpy(host.data(), 0, host.data() + 64, 1, ACL_MEMCPY_HOST_TO_HOST),
            ACL_ERROR_INVALID_PARAM);
  // The device side must lie inside one aclrtMalloc block.
  EXPECT_EQ(aclrtMemcpy(d, 128, host.data(), 65, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("dst with 65 bytes is not inside memory from aclrtMalloc"));
  EXPECT_EQ(aclrtMemcpy(host.data(), 128, d, 65, ACL_MEMCPY_DEVICE_TO_HOST), ACL_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("src with 65 bytes"));
  EXPECT_EQ(aclrtMemcpy(host.data(), 128, host.data() + 64, 8, ACL_MEMCPY_DEVICE_TO_HOST),
            ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtMemcpy(host.data(), 128, d, 8, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtMemcpy(nullptr, 8, host.data(), 8, ACL_MEMCPY_HOST_TO_HOST), ACL_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("dst is null"));
  EXPECT_EQ(aclrtMemcpy(host.data(), 8, nullptr, 8, ACL_MEMCPY_HOST_TO_HOST), ACL_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("src is null"));
  EXPECT_EQ(aclrtMemcpy(host.data(), 8, d, 8, static_cast<aclrtMemcpyKind>(7)), ACL_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("kind 7 is not an aclrtMemcpyKind"));
  EXPECT_EQ(host, before);
  EXPECT_EQ(aclrtFree(d), ACL_SUCCESS);
  // Freed memory is no longer device memory.
  EXPECT_EQ(aclrtMemcpy(host.data(), 128, d, 8, ACL_MEMCPY_DEVICE_TO_HOST), ACL_ERROR_INVALID_PARAM);
}

TEST(AclRuntime, Memset) {
  void* d = nullptr;
  ASSERT_EQ(aclrtMalloc(&d, 32, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  EXPECT_EQ(aclrtMemset(d, 32, 0xAB, 32), ACL_SUCCESS);
  std::vector<unsigned char> host(32);
  EXPECT_EQ(aclrtMemcpy(host.data(), 32, d, 32, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
  EXPECT_EQ(host, std::vector<unsigned char>(32, 0xAB));
  EXPECT_EQ(aclrtMemset(d, 16, 0, 17), ACL_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("count 17 exceeds maxCount 16"));
  EXPECT_EQ(aclrtMemset(d, 64, 0, 33), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtMemset(host.data(), 32, 0, 32), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtMemset(nullptr, 32, 0, 32), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtFree(d), ACL_SUCCESS);
}

TEST(AclRuntime, ErrorMessageIsPerThreadAndEmptyInitially) {
  std::string fresh = "unset";
  std::thread([&] { fresh = aclGetRecentErrMsg(); }).join();
  EXPECT_EQ(fresh, "");
  std::string other;
  std::thread([&] {
    aclrtSetDevice(5);
    other = aclGetRecentErrMsg();
  }).join();
  EXPECT_NE(other.find("deviceId is 5"), std::string::npos);
  aclrtSetDevice(3);
  EXPECT_TRUE(message_has("deviceId is 3"));
}

// ---- tensors and arrays ----

TEST(AclMeta, CreateTensor) {
  float data[64] = {};
  const std::int64_t dims[] = {2, 3, 4}, storage[] = {64};
  aclTensor* t =
      aclCreateTensor(dims, 3, ACL_FLOAT, nullptr, 0, ACL_FORMAT_NCL, dims, 3, data);  // contiguous
  ASSERT_NE(t, nullptr) << aclGetRecentErrMsg();
  EXPECT_EQ(aclDestroyTensor(t), ACLNN_SUCCESS);
  const std::int64_t strides[] = {1, 2, 6};  // reaches element 1 + 4 + 18 + 40 = 63 with offset 40
  t = aclCreateTensor(dims, 3, ACL_BF16, strides, 40, ACL_FORMAT_ND, storage, 1, data);
  ASSERT_NE(t, nullptr) << aclGetRecentErrMsg();
  EXPECT_EQ(aclDestroyTensor(t), ACLNN_SUCCESS);
  t = aclCreateTensor(nullptr, 0, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, nullptr, 0, data);  // a scalar
  ASSERT_NE(t, nullptr) << aclGetRecentErrMsg();
  EXPECT_EQ(aclDestroyTensor(t), ACLNN_SUCCESS);
  const std::int64_t empty[] = {0, 5};  // no elements: nothing to reach
  t = aclCreateTensor(empty, 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, empty, 2, nullptr);
  ASSERT_NE(t, nullptr) << aclGetRecentErrMsg();
  EXPECT_EQ(aclDestroyTensor(t), ACLNN_SUCCESS);
}

TEST(AclMeta, CreateTensorRejectsInvalidDescriptions) {
  float data[64] = {};
  const std::int64_t dims[] = {2, 3, 4}, strides[] = {12, 4, 1}, storage[] = {24};
  struct Bad {
    const char* fragment;
    aclTensor* (*make)(float*);
  };
  const Bad bads[] = {
      {"viewDims is null but viewDimsNum is 3",
       [](float* d) {
         return aclCreateTensor(nullptr, 3, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, nullptr, 0, d);
       }},
      {"storageDims is null but storageDimsNum is 1",
       [](float* d) {
         const std::int64_t v[] = {2};
         return aclCreateTensor(v, 1, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, nullptr, 1, d);
       }},
      {"viewDims[1] is -3; dims must be >= 0",
       [](float* d) {
         const std::int64_t v[] = {2, -3}, s[] = {64};
         return aclCreateTensor(v, 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, s, 1, d);
       }},
      {"storageDims[0] is -1",
       [](float* d) {
         const std::int64_t v[] = {2}, s[] = {-1};
         return aclCreateTensor(v, 1, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, s, 1, d);
       }},
      {"stride[0] is -1; strides must be >= 0",
       [](float* d) {
         const std::int64_t v[] = {2}, st[] = {-1}, s[] = {64};
         return aclCreateTensor(v, 1, ACL_FLOAT, st, 1, ACL_FORMAT_ND, s, 1, d);
       }},
      {"offset is -1; it must be >= 0",
       [](float* d) {
         const std::int64_t v[] = {2}, s[] = {64};
         return aclCreateTensor(v, 1, ACL_FLOAT, nullptr, -1, ACL_FORMAT_ND, s, 1, d);
       }},
      {"reaches element 24 but storageDims hold 24 elements",  // offset pushes the last element out
       [](float* d) {
         const std::int64_t v[] = {2, 3, 4}, s[] = {24};
         return aclCreateTensor(v, 3, ACL_FLOAT, nullptr, 1, ACL_FORMAT_ND, s, 1, d);
       }},
      {"reaches element 26 but storageDims hold 24 elements",  // strides too large
       [](float* d) {
         const std::int64_t v[] = {2, 3, 4}, st[] = {15, 4, 1}, s[] = {2, 3, 4};
         return aclCreateTensor(v, 3, ACL_FLOAT, st, 0, ACL_FORMAT_ND, s, 3, d);
       }},
      {"offset and strides reach beyond 64-bit element indices",
       [](float* d) {
         const std::int64_t v[] = {3}, st[] = {INT64_MAX / 2 + 1}, s[] = {64};
         return aclCreateTensor(v, 1, ACL_FLOAT, st, 0, ACL_FORMAT_ND, s, 1, d);
       }},
      {"the product of storageDims overflows 64 bits",
       [](float* d) {
         const std::int64_t v[] = {1}, s[] = {INT64_MAX, 2};
         return aclCreateTensor(v, 1, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, s, 2, d);
       }},
      {"the product of viewDims overflows 64 bits",
       [](float* d) {
         const std::int64_t v[] = {INT64_MAX, 2}, s[] = {64};
         return aclCreateTensor(v, 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, s, 1, d);
       }},
      // Byte offsets must fit in 64 bits: 2^62 fp32 elements are 2^64 bytes, so element 2^61 is out of reach.
      {"storageDims hold 4611686018427387904 elements of 4 bytes, more than 64-bit byte offsets reach",
       [](float* d) {
         const std::int64_t v[] = {1}, s[] = {std::int64_t{1} << 62};
         return aclCreateTensor(v, 1, ACL_FLOAT, nullptr, std::int64_t{1} << 61, ACL_FORMAT_ND, s, 1, d);
       }},
      {"storageDims hold 2305843009213693952 elements of 8 bytes, more than 64-bit byte offsets reach",
       [](float* d) {
         const std::int64_t v[] = {1}, s[] = {std::int64_t{1} << 61};
         return aclCreateTensor(v, 1, ACL_DOUBLE, nullptr, 0, ACL_FORMAT_ND, s, 1, d);
       }},
      {"offset is 1000 but storageDims hold only 64 elements",  // an empty view must start inside too
       [](float* d) {
         const std::int64_t v[] = {0}, s[] = {64};
         return aclCreateTensor(v, 1, ACL_FLOAT, nullptr, 1000, ACL_FORMAT_ND, s, 1, d);
       }},
      {"storageDims hold 256 bytes, more than fit after tensorData in the address space",
       [](float*) {
         const std::int64_t v[] = {2}, s[] = {64};
         void* top = reinterpret_cast<void*>(~std::uintptr_t{0} - 100);  // never dereferenced
         return aclCreateTensor(v, 1, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, s, 1, top);
       }},
      {"dataType 50 is not a supported aclDataType",
       [](float* d) {
         const std::int64_t v[] = {2}, s[] = {64};
         return aclCreateTensor(v, 1, static_cast<aclDataType>(50), nullptr, 0, ACL_FORMAT_ND, s, 1, d);
       }},
      {"format 60 is not a supported aclFormat",
       [](float* d) {
         const std::int64_t v[] = {2}, s[] = {64};
         return aclCreateTensor(v, 1, ACL_FLOAT, nullptr, 0, static_cast<aclFormat>(60), s, 1, d);
       }},
      {"viewDimsNum is 9; at most 8 dims",
       [](float* d) {
         const std::int64_t v[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, s[] = {64};
         return aclCreateTensor(v, 9, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, s, 1, d);
       }},
  };
  for (const Bad& bad : bads) {
    SCOPED_TRACE(bad.fragment);
    EXPECT_EQ(bad.make(data), nullptr);
    EXPECT_TRUE(message_has("aclCreateTensor: ")) << aclGetRecentErrMsg();
    EXPECT_TRUE(message_has(bad.fragment)) << aclGetRecentErrMsg();
  }
  // The valid neighbour of the stride case.
  aclTensor* t = aclCreateTensor(dims, 3, ACL_FLOAT, strides, 0, ACL_FORMAT_ND, storage, 1, data);
  EXPECT_NE(t, nullptr);
  EXPECT_EQ(aclDestroyTensor(t), ACLNN_SUCCESS);
}

TEST(AclMeta, Arrays) {
  const std::int64_t v[] = {1, 2, 3};
  const bool b[] = {true, false};
  aclIntArray* ia = aclCreateIntArray(v, 3);
  aclBoolArray* ba = aclCreateBoolArray(b, 2);
  ASSERT_NE(ia, nullptr);
  ASSERT_NE(ba, nullptr);
  aclIntArray* empty = aclCreateIntArray(nullptr, 0);
  EXPECT_NE(empty, nullptr);
  EXPECT_EQ(aclCreateIntArray(nullptr, 2), nullptr);
  EXPECT_TRUE(message_has("aclCreateIntArray: value is null but size is 2"));
  EXPECT_EQ(aclCreateBoolArray(nullptr, 1), nullptr);
  EXPECT_TRUE(message_has("aclCreateBoolArray: value is null but size is 1"));
  EXPECT_EQ(aclDestroyIntArray(ia), ACLNN_SUCCESS);
  EXPECT_EQ(aclDestroyIntArray(empty), ACLNN_SUCCESS);
  EXPECT_EQ(aclDestroyBoolArray(ba), ACLNN_SUCCESS);
}

TEST(AclMeta, DestroyAcceptsNullAndRejectsWhatIsNotLive) {
  EXPECT_EQ(aclDestroyTensor(nullptr), ACLNN_SUCCESS);
  EXPECT_EQ(aclDestroyIntArray(nullptr), ACLNN_SUCCESS);
  EXPECT_EQ(aclDestroyBoolArray(nullptr), ACLNN_SUCCESS);
  EXPECT_EQ(aclDestroyAclOpExecutor(nullptr), ACLNN_SUCCESS);
  const std::int64_t v[] = {4};
  aclIntArray* ia = aclCreateIntArray(v, 1);
  ASSERT_NE(ia, nullptr);
  // An int array is not a bool array or a tensor.
  EXPECT_EQ(aclDestroyBoolArray(reinterpret_cast<aclBoolArray*>(ia)), ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(aclDestroyTensor(reinterpret_cast<aclTensor*>(ia)), ACLNN_ERR_PARAM_INVALID);
  EXPECT_TRUE(message_has("aclDestroyTensor: the pointer is not a live aclTensor"));
  EXPECT_EQ(aclDestroyIntArray(ia), ACLNN_SUCCESS);
  EXPECT_EQ(aclDestroyIntArray(ia), ACLNN_ERR_PARAM_INVALID);  // twice
  EXPECT_TRUE(message_has("already destroyed"));
  int local = 0;
  EXPECT_EQ(aclDestroyIntArray(reinterpret_cast<aclIntArray*>(&local)), ACLNN_ERR_PARAM_INVALID);
}

}  // namespace
