#include "cpu/geometry.hpp"

namespace conv3d_dx::cpu {

Axis::Axis(std::int64_t in_, std::int64_t out_, std::int64_t kernel, std::int64_t stride_,
           std::int64_t dilation, std::int64_t pad)
    : in(in_), out(out_), stride(stride_), phases(static_cast<std::size_t>(stride_)), pad_(pad) {
  for (std::int64_t r = 0; r < stride; ++r) {
    AxisPhase& ph = phases[static_cast<std::size_t>(r)];
    // Smallest i >= 0 with (i + pad) mod s == r.
    ph.first = ((r - pad) % stride + stride) % stride;
    ph.count = ph.first < in ? (in - ph.first + stride - 1) / stride : 0;
    for (std::int64_t k = 0; k < kernel; ++k) {
      const std::int64_t num = ph.first + pad - k * dilation;  // (first + pad - k*d) is a multiple of s
      if (((num % stride) + stride) % stride != 0) continue;
      // Exact division; num may be negative.
      ph.taps.push_back({k, num >= 0 ? num / stride : -((-num) / stride)});
    }
  }
}

}  // namespace conv3d_dx::cpu
