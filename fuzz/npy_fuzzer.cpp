// libFuzzer harness: the .npy reader (tools/npy.cpp) on arbitrary bytes. The input is read as a file through
// npy::read, the path the CLI takes; every outcome must be an Array consistent with its header or an
// NpyError. Anything else (a crash, a sanitizer report, another exception) is a bug.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace conv3d_dx;
  static const int fd = memfd_create("npy_fuzzer", MFD_CLOEXEC);
  if (fd < 0) std::abort();
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) std::abort();
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    const npy::Array a = npy::read(path);
    // A file read successfully: its data is exactly what its shape and dtype need, and written back as a
    // version 1.0 file it reads as the same array.
    const std::size_t bytes = static_cast<std::size_t>(a.elements()) * npy::item_size(a.descr);
    if (a.data.size() != bytes) std::abort();
    const std::vector<std::byte> again = npy::encode(a.descr, a.shape, a.data.data(), a.data.size());
    if (ftruncate(fd, 0) != 0 ||
        pwrite(fd, again.data(), again.size(), 0) != static_cast<ssize_t>(again.size()))
      std::abort();
    const npy::Array b = npy::read(path);
    if (b.descr != a.descr || b.shape != a.shape || b.data != a.data) std::abort();
  } catch (const npy::NpyError&) {
  }
  // The header parser alone, on the input as header text.
  try {
    std::string descr;
    std::vector<std::int64_t> shape;
    npy::parse_header(std::string(reinterpret_cast<const char*>(data), size), "input", descr, shape);
    if (npy::item_size(descr) == 0) std::abort();
  } catch (const npy::NpyError&) {
  }
  return 0;
}
