#include "problem/overlap.hpp"

#include <array>
#include <cstdio>

#include "problem/checked.hpp"

namespace conv3d_dx {
namespace {

std::string hex(std::uintptr_t v) {
  char buf[2 + 2 * sizeof v + 1];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string describe(const NamedExtent& e) {
  return e.name + " (bytes " + hex(e.bytes.begin) + " to " + hex(e.bytes.end - 1) + ")";
}

}  // namespace

ByteExtent byte_extent(const std::string& name, const void* data, std::size_t element_size,
                       const std::int64_t* shape, const std::int64_t* strides, std::size_t rank) {
  if (data == nullptr) return {};
  std::int64_t last = 0;  // element offset of the last element
  for (std::size_t i = 0; i < rank; ++i) {
    if (shape[i] == 0) return {};
    if (shape[i] < 0 || strides[i] < 0)
      throw Error(ErrorCode::invalid_argument, name,
                  name + " axis " + std::to_string(i) + " has size " + std::to_string(shape[i]) +
                      " and stride " + std::to_string(strides[i]) + "; both must be >= 0");
    last = checked_add(last, checked_mul(shape[i] - 1, strides[i], name), name);
  }
  const std::int64_t size = static_cast<std::int64_t>(element_size);
  const std::int64_t bytes = checked_mul(checked_add(last, 1, name), size, name);
  ByteExtent e;
  e.begin = reinterpret_cast<std::uintptr_t>(data);
  if (__builtin_add_overflow(e.begin, static_cast<std::uint64_t>(bytes), &e.end))
    throw Error(ErrorCode::size_overflow, name,
                name + " at " + hex(e.begin) + " spans " + std::to_string(bytes) +
                    " bytes, beyond the end of the address space");
  return e;
}

ByteExtent byte_extent(const std::string& name, const TensorView& view) {
  return byte_extent(name, view.data, dtype_size(view.dtype), view.shape.data(), view.strides.data(), 5);
}

void require_disjoint(const NamedExtent& written, const std::vector<NamedExtent>& others) {
  if (written.bytes.empty()) return;
  for (const NamedExtent& other : others) {
    if (other.bytes.empty()) continue;
    if (written.bytes.begin < other.bytes.end && other.bytes.begin < written.bytes.end)
      throw Error(ErrorCode::invalid_argument, written.name,
                  describe(written) + " overlaps " + describe(other) +
                      ": an output must not share memory with a tensor it is computed from or with another "
                      "output (in-place computation is not supported)");
  }
}

ByteExtent require_y_disjoint(const Problem& p, const void* out_backprop, const void* filter, const void* y,
                              const ParameterNames& names) {
  const std::array<std::int64_t, 5> y_shape{p.N, p.Cin(), p.y_size[0], p.y_size[1], p.y_size[2]};
  const std::array<std::int64_t, 5> dy_shape{p.N, p.Cout(), p.dy_size[0], p.dy_size[1], p.dy_size[2]};
  const std::array<std::int64_t, 5> w_shape{p.Cout(), p.Cin_g, p.kernel[0], p.kernel[1], p.kernel[2]};
  const ByteExtent y_extent =
      byte_extent(names.y, y, dtype_size(p.y_dtype), y_shape.data(), p.y_strides.data(), 5);
  require_disjoint({names.y, y_extent},
                   {{names.out_backprop, byte_extent(names.out_backprop, out_backprop, dtype_size(p.dy_dtype),
                                                     dy_shape.data(), p.dy_strides.data(), 5)},
                    {names.filter, byte_extent(names.filter, filter, dtype_size(p.filter_dtype),
                                               w_shape.data(), p.filter_strides.data(), 5)}});
  return y_extent;
}

}  // namespace conv3d_dx
