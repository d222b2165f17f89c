#include "check.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "numeric/numeric.hpp"
#include "reference/accuracy.hpp"
#include "reference/reference.hpp"

namespace conv3d_dx::cli {

namespace {

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

void fill_random(DType dtype, void* data, std::int64_t n, std::uint64_t seed, float scale) {
  std::uint64_t state = seed;
  for (std::int64_t i = 0; i < n; ++i) {
    const double u = static_cast<double>(splitmix64(state) >> 11) * 0x1p-53;  // [0, 1)
    numeric::store_f32(dtype, data, i, static_cast<float>((2.0 * u - 1.0) * scale), OverflowMode::ieee);
  }
}

CheckResult check_against_reference(const Problem& p, const void* dy, const void* filter, const void* y,
                                    std::int64_t channel_limit) {
  Problem sub = p;
  if (channel_limit > 0) sub.Cin_g = std::min(p.Cin_g, channel_limit);
  std::vector<double> mag;  // sum |dy * w| per element: the scale of the fp32 accumulation error
  const std::vector<double> ref = reference::compute(sub, dy, filter, &mag);

  CheckResult result;
  const std::int64_t terms = p.Cout_g * p.kernel[0] * p.kernel[1] * p.kernel[2];  // at most, per element
  std::size_t i = 0;
  for (std::int64_t n = 0; n < p.N; ++n) {
    for (std::int64_t g = 0; g < p.G; ++g) {
      for (std::int64_t ci = 0; ci < sub.Cin_g; ++ci) {
        for (std::int64_t d = 0; d < p.y_size[0]; ++d) {
          for (std::int64_t h = 0; h < p.y_size[1]; ++h) {
            for (std::int64_t w = 0; w < p.y_size[2]; ++w, ++i) {
              const std::int64_t offset = n * p.y_strides[0] + (g * p.Cin_g + ci) * p.y_strides[1] +
                                          d * p.y_strides[2] + h * p.y_strides[3] + w * p.y_strides[4];
              const double v = numeric::load_f32(p.y_dtype, y, offset);
              const double r = ref[i];
              const double allowance = reference::fp32_allowance(mag[i], terms);
              const bool ok = reference::acceptable(p.y_dtype, p.overflow, r, allowance, v);
              const double unit = 0x1p-24 * mag[i];
              if (std::isfinite(v) && std::isfinite(r) && unit > 0 && p.y_dtype == DType::f32)
                result.worst = std::max(result.worst, std::fabs(v - r) / unit);
              ++result.checked;
              if (!ok && result.failures++ == 0) {
                std::ostringstream s;
                s.precision(9);
                s << "y[n=" << n << ", c=" << g * p.Cin_g + ci << ", d=" << d << ", h=" << h << ", w=" << w
                  << "] = " << v << " but the reference gives " << r << " (allowance " << allowance
                  << ", sum|dy*w| = " << mag[i] << ")";
                result.first_failure = s.str();
              }
            }
          }
        }
      }
    }
  }
  return result;
}

}  // namespace conv3d_dx::cli
