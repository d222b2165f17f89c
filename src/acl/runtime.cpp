// libascendcl: the host "runtime". Device 0 is the host: device memory is aligned host memory, and a stream
// runs work as it is submitted (so it is trivially in order). Allocations and streams are registered, so a
// foreign, freed or overrun pointer is reported instead of corrupting memory.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <string>

#include "acl/acl.h"
#include "internal.hpp"

namespace conv3d_dx::acl {
namespace {

thread_local std::string last_error;

struct Runtime {
  std::mutex mutex;
  bool initialized = false;
  std::set<const void*> streams;
  std::map<std::uintptr_t, std::size_t> device_blocks, host_blocks;  // start -> size
};

Runtime& runtime() {
  static Runtime* r = new Runtime;  // never destroyed: callable from other libraries' static destructors
  return *r;
}

aclError fail(aclError code, const std::string& message) {
  set_error(message);
  return code;
}

// Whether [p, p + count) lies inside one block of `blocks`. The caller holds the mutex.
bool inside(const std::map<std::uintptr_t, std::size_t>& blocks, const void* p, std::size_t count) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = blocks.upper_bound(a);
  if (it == blocks.begin()) return false;
  --it;
  const std::size_t used = a - it->first;
  return used < it->second && count <= it->second - used;
}

aclError allocate(std::map<std::uintptr_t, std::size_t> Runtime::*blocks, void** ptr, std::size_t size,
                  const char* fn) {
  if (ptr == nullptr) return fail(ACL_ERROR_INVALID_PARAM, std::string(fn) + ": the output pointer is null");
  *ptr = nullptr;
  if (size == 0) return fail(ACL_ERROR_INVALID_PARAM, std::string(fn) + ": size is 0; it must be > 0");
  constexpr std::size_t align = 64;
  if (size > SIZE_MAX - align) return fail(ACL_ERROR_BAD_ALLOC, std::string(fn) + ": size is too large");
  void* p = std::aligned_alloc(align, (size + align - 1) / align * align);
  if (p == nullptr) {
    return fail(ACL_ERROR_BAD_ALLOC,
                std::string(fn) + ": out of memory allocating " + std::to_string(size) + " bytes");
  }
  try {
    std::lock_guard lock(runtime().mutex);
    (runtime().*blocks)[reinterpret_cast<std::uintptr_t>(p)] = size;
  } catch (...) {
    std::free(p);
    return fail(ACL_ERROR_BAD_ALLOC, std::string(fn) + ": out of memory");
  }
  *ptr = p;
  return ACL_SUCCESS;
}

aclError release(std::map<std::uintptr_t, std::size_t> Runtime::*blocks, void* p, const char* fn,
                 const char* allocator) {
  if (p == nullptr) return fail(ACL_ERROR_INVALID_PARAM, std::string(fn) + ": the pointer is null");
  {
    std::lock_guard lock(runtime().mutex);
    if ((runtime().*blocks).erase(reinterpret_cast<std::uintptr_t>(p)) == 0) {
      return fail(ACL_ERROR_INVALID_PARAM, std::string(fn) + ": the pointer was not returned by " +
                                               allocator + " or was already freed");
    }
  }
  std::free(p);
  return ACL_SUCCESS;
}

aclError check_device(int32_t id, const char* fn) {
  if (id != 0) {
    return fail(ACL_ERROR_RT_INVALID_DEVICEID,
                std::string(fn) + ": deviceId is " + std::to_string(id) + " but the only device is 0");
  }
  return ACL_SUCCESS;
}

}  // namespace

void set_error(const std::string& message) {
  try {
    last_error = message;
  } catch (...) {
    last_error.clear();
  }
}

bool stream_is_valid(aclrtStream stream) {
  if (stream == nullptr) return true;
  std::lock_guard lock(runtime().mutex);
  return runtime().streams.count(stream) != 0;
}

}  // namespace conv3d_dx::acl

using conv3d_dx::acl::fail;
using conv3d_dx::acl::runtime;

extern "C" {

const char* aclGetRecentErrMsg(void) { return conv3d_dx::acl::last_error.c_str(); }

aclError aclInit(const char* configPath) {
  if (configPath != nullptr && configPath[0] != '\0' && !std::ifstream(configPath).good()) {
    return fail(ACL_ERROR_INVALID_FILE, std::string("aclInit: configPath '") + configPath +
                                            "' cannot be read (pass null or \"\" for none)");
  }
  std::lock_guard lock(runtime().mutex);
  if (runtime().initialized) return fail(ACL_ERROR_REPEAT_INITIALIZE, "aclInit: already initialized");
  runtime().initialized = true;
  return ACL_SUCCESS;
}

aclError aclFinalize(void) {
  std::lock_guard lock(runtime().mutex);
  if (!runtime().initialized) return fail(ACL_ERROR_REPEAT_FINALIZE, "aclFinalize: not initialized");
  runtime().initialized = false;
  return ACL_SUCCESS;
}

aclError aclrtSetDevice(int32_t deviceId) { return conv3d_dx::acl::check_device(deviceId, "aclrtSetDevice"); }
aclError aclrtResetDevice(int32_t deviceId) {
  return conv3d_dx::acl::check_device(deviceId, "aclrtResetDevice");
}

aclError aclrtGetDeviceCount(uint32_t* count) {
  if (count == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDeviceCount: count is null");
  *count = 1;
  return ACL_SUCCESS;
}

aclError aclrtSynchronizeDevice(void) { return ACL_SUCCESS; }

aclError aclrtCreateStream(aclrtStream* stream) {
  if (stream == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtCreateStream: stream is null");
  *stream = nullptr;
  try {
    auto* s = new char{};  // a unique address; streams hold no state because work runs on submission
    std::lock_guard lock(runtime().mutex);
    runtime().streams.insert(s);
    *stream = s;
  } catch (...) {
    return fail(ACL_ERROR_BAD_ALLOC, "aclrtCreateStream: out of memory");
  }
  return ACL_SUCCESS;
}

aclError aclrtDestroyStream(aclrtStream stream) {
  if (stream == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtDestroyStream: stream is null");
  {
    std::lock_guard lock(runtime().mutex);
    if (runtime().streams.erase(stream) == 0) {
      return fail(ACL_ERROR_INVALID_PARAM,
                  "aclrtDestroyStream: stream was not created by aclrtCreateStream or was already destroyed");
    }
  }
  delete static_cast<char*>(stream);
  return ACL_SUCCESS;
}

aclError aclrtSynchronizeStream(aclrtStream stream) {
  if (!conv3d_dx::acl::stream_is_valid(stream)) {
    return fail(
        ACL_ERROR_INVALID_PARAM,
        "aclrtSynchronizeStream: stream was not created by aclrtCreateStream or was already destroyed");
  }
  return ACL_SUCCESS;  // work ran when it was submitted
}

aclError aclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy) {
  return conv3d_dx::acl::allocate(&conv3d_dx::acl::Runtime::device_blocks, devPtr, size, "aclrtMalloc");
}
aclError aclrtFree(void* devPtr) {
  return conv3d_dx::acl::release(&conv3d_dx::acl::Runtime::device_blocks, devPtr, "aclrtFree", "aclrtMalloc");
}
aclError aclrtMallocHost(void** hostPtr, size_t size) {
  return conv3d_dx::acl::allocate(&conv3d_dx::acl::Runtime::host_blocks, hostPtr, size, "aclrtMallocHost");
}
aclError aclrtFreeHost(void* hostPtr) {
  return conv3d_dx::acl::release(&conv3d_dx::acl::Runtime::host_blocks, hostPtr, "aclrtFreeHost",
                                 "aclrtMallocHost");
}

aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind) {
  if (dst == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemcpy: dst is null");
  if (src == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemcpy: src is null");
  if (count > destMax) {
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemcpy: count " + std::to_string(count) + " exceeds destMax " +
                                             std::to_string(destMax));
  }
  if (kind < ACL_MEMCPY_HOST_TO_HOST || kind > ACL_MEMCPY_DEFAULT) {
    return fail(ACL_ERROR_INVALID_PARAM,
                "aclrtMemcpy: kind " + std::to_string(static_cast<int>(kind)) + " is not an aclrtMemcpyKind");
  }
  const bool dst_device = kind == ACL_MEMCPY_HOST_TO_DEVICE || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
  const bool src_device = kind == ACL_MEMCPY_DEVICE_TO_HOST || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
  {
    std::lock_guard lock(runtime().mutex);
    const auto& blocks = runtime().device_blocks;
    if (dst_device && !conv3d_dx::acl::inside(blocks, dst, count)) {
      return fail(ACL_ERROR_INVALID_PARAM,
                  "aclrtMemcpy: dst with " + std::to_string(count) +
                      " bytes is not inside memory from aclrtMalloc, as kind requires");
    }
    if (src_device && !conv3d_dx::acl::inside(blocks, src, count)) {
      return fail(ACL_ERROR_INVALID_PARAM,
                  "aclrtMemcpy: src with " + std::to_string(count) +
                      " bytes is not inside memory from aclrtMalloc, as kind requires");
    }
  }
  if (count > 0) std::memmove(dst, src, count);
  return ACL_SUCCESS;
}

aclError aclrtMemset(void* devPtr, size_t maxCount, int32_t value, size_t count) {
  if (devPtr == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemset: devPtr is null");
  if (count > maxCount) {
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemset: count " + std::to_string(count) +
                                             " exceeds maxCount " + std::to_string(maxCount));
  }
  {
    std::lock_guard lock(runtime().mutex);
    if (!conv3d_dx::acl::inside(runtime().device_blocks, devPtr, count)) {
      return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemset: devPtr with " + std::to_string(count) +
                                               " bytes is not inside memory from aclrtMalloc");
    }
  }
  if (count > 0) std::memset(devPtr, value, count);
  return ACL_SUCCESS;
}

}  // extern "C"
