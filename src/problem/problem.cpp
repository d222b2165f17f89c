#include <algorithm>
#include <sstream>

#include "problem/checked.hpp"

namespace conv3d_dx {

TensorView TensorView::contiguous(const void* data, DType dtype, Layout layout,
                                  std::array<std::int64_t, 5> shape) {
  TensorView v;
  v.data = const_cast<void*>(data);  // inputs are never written through a view
  v.dtype = dtype;
  v.layout = layout;
  v.shape = shape;
  std::int64_t stride = 1;
  for (int i = 4; i >= 0; --i) {
    v.strides[i] = stride;
    if (i > 0) stride = checked_mul(stride, shape[i] > 0 ? shape[i] : 1, "shape");
  }
  return v;
}

std::int64_t Problem::y_elements() const { return N * Cin() * y_size[0] * y_size[1] * y_size[2]; }

double Problem::flops() const {
  return 2.0 * static_cast<double>(N) * static_cast<double>(Cout()) * static_cast<double>(dy_size[0]) *
         static_cast<double>(dy_size[1]) * static_cast<double>(dy_size[2]) * static_cast<double>(Cin_g) *
         static_cast<double>(kernel[0]) * static_cast<double>(kernel[1]) * static_cast<double>(kernel[2]);
}

double Problem::flops_inside() const {
  double pairs = 1;  // (dy pixel, tap) pairs inside y, a product over the axes
  for (int a = 0; a < 3; ++a) {
    // Tap k of dy index o reaches y index o * stride + k * dilation - pad_front: the o in [lo, hi] with it
    // in [0, y_size), for each k.
    std::int64_t axis_pairs = 0;
    const std::int64_t s = stride[a];
    for (std::int64_t k = 0; k < kernel[a]; ++k) {
      const std::int64_t shift = k * dilation[a] - pad_front[a];
      const std::int64_t lo = shift >= 0 ? 0 : (-shift + s - 1) / s;  // o * s >= -shift
      const std::int64_t last = y_size[a] - 1 - shift;                // o * s <= last
      const std::int64_t hi = last < 0 ? -1 : std::min(dy_size[a] - 1, last / s);
      axis_pairs += std::max<std::int64_t>(0, hi - lo + 1);
    }
    pairs *= static_cast<double>(axis_pairs);
  }
  return 2.0 * static_cast<double>(N) * static_cast<double>(Cout()) * static_cast<double>(Cin_g) * pairs;
}

std::string Problem::describe() const {
  auto triple = [](const std::array<std::int64_t, 3>& a) {
    return std::to_string(a[0]) + "x" + std::to_string(a[1]) + "x" + std::to_string(a[2]);
  };
  std::ostringstream s;
  s << "N=" << N << " Cin=" << Cin() << " Cout=" << Cout() << " groups=" << G << " y=" << triple(y_size)
    << " dy=" << triple(dy_size) << " kernel=" << triple(kernel) << " stride=" << triple(stride)
    << " dilation=" << triple(dilation) << " pads=" << pad_front[0] << "," << pad_back[0] << ","
    << pad_front[1] << "," << pad_back[1] << "," << pad_front[2] << "," << pad_back[2]
    << " dtype=" << to_string(dy_dtype);
  if (filter_dtype != dy_dtype) s << " filter_dtype=" << to_string(filter_dtype);
  s << " y_dtype=" << to_string(y_dtype) << " data_format=" << to_string(data_format)
    << " filter_format=" << to_string(filter_format) << " input_rounding=" << to_string(input_rounding)
    << " overflow=" << to_string(overflow);
  return s.str();
}

}  // namespace conv3d_dx
