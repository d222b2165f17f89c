#include "check.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "numeric/numeric.hpp"
#include "reference/reference.hpp"

namespace conv3d_dx::cli {

namespace {

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Decoded value of v rounded to `dtype`.
double round_to(DType dtype, float v, OverflowMode mode) {
  std::uint16_t bits = 0;  // large enough for every storage type
  numeric::store_f32(dtype, &bits, 0, v, mode);
  return numeric::load_f32(dtype, &bits, 0);
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
                                    std::int64_t channel_limit, double units) {
  Problem sub = p;
  if (channel_limit > 0) sub.Cin_g = std::min(p.Cin_g, channel_limit);
  std::vector<double> mag;  // sum |dy * w| per element: the scale of the fp32 accumulation error
  const std::vector<double> ref = reference::compute(sub, dy, filter, &mag);

  CheckResult result;
  const bool saturate = p.overflow == OverflowMode::saturate;
  std::size_t i = 0;
  for (std::int64_t n = 0; n < p.N; ++n) {
    for (std::int64_t g = 0; g < p.G; ++g) {
      for (std::int64_t ci = 0; ci < sub.Cin_g; ++ci) {
        for (std::int64_t d = 0; d < p.in[0]; ++d) {
          for (std::int64_t h = 0; h < p.in[1]; ++h) {
            for (std::int64_t w = 0; w < p.in[2]; ++w, ++i) {
              const std::int64_t offset = n * p.y_strides[0] + (g * p.Cin_g + ci) * p.y_strides[1] +
                                          d * p.y_strides[2] + h * p.y_strides[3] + w * p.y_strides[4];
              const double v = numeric::load_f32(p.y_dtype, y, offset);
              const double r = ref[i];
              // fp32 accumulation error, plus fp32's own rounding when y is fp32.
              const double allowance =
                  units * 0x1p-24 * mag[i] + (p.y_dtype == DType::f32 ? 0x1p-24 * std::fabs(r) : 0.0);
              bool ok = false;
              double lo = r - allowance, hi = r + allowance;
              if (p.y_dtype != DType::f32) {
                const OverflowMode mode = saturate ? OverflowMode::saturate : OverflowMode::ieee;
                // Widen by one fp32 step so double -> float -> dtype cannot round past a boundary.
                lo = round_to(p.y_dtype, std::nextafter(static_cast<float>(lo), -INFINITY), mode);
                hi = round_to(p.y_dtype, std::nextafter(static_cast<float>(hi), INFINITY), mode);
              }
              if (std::isnan(r)) {
                ok = std::isnan(v);
              } else if (std::isnan(v)) {
                ok = std::isnan(lo) || std::isnan(hi);  // float8_e4m3fn overflow gives NaN
              } else {
                ok = (!std::isnan(lo) || !std::isnan(hi)) && (std::isnan(lo) || lo <= v) &&
                     (std::isnan(hi) || v <= hi);
              }
              if (std::isfinite(v) && std::isfinite(r)) {
                const double err = std::fabs(v - r);
                const double unit = 0x1p-24 * mag[i];
                if (unit > 0 && p.y_dtype == DType::f32) result.worst = std::max(result.worst, err / unit);
              }
              ++result.checked;
              if (!ok && result.failures++ == 0) {
                std::ostringstream s;
                s.precision(9);
                s << "y[n=" << n << ", c=" << g * p.Cin_g + ci << ", d=" << d << ", h=" << h << ", w=" << w
                  << "] = " << v << " but the reference gives " << r << " (accepted range [" << lo << ", "
                  << hi << "], sum|dy*w| = " << mag[i] << ")";
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
