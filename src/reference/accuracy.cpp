#include "reference/accuracy.hpp"

#include <cmath>

#include "numeric/numeric.hpp"

namespace conv3d_dx::reference {
namespace {

// The value of x after the engines' last steps: fp32, then y's dtype.
double stored(DType t, double x, OverflowMode mode) {
  unsigned char cell[4];
  numeric::store_f32(t, cell, 0, static_cast<float>(x), mode);
  return numeric::load_f32(t, cell, 0);
}

}  // namespace

double fp32_allowance(double abs_sum, std::int64_t terms) {
  const double n = static_cast<double>(terms > 1 ? terms : 1);
  const double nu = std::ldexp(n, -24);
  if (nu >= 1.0) return INFINITY;
  const double gamma = nu / (1.0 - nu);
  return (gamma * abs_sum + std::ldexp(n, -150)) * (1.0 + std::ldexp(1.0, -20));
}

bool acceptable(DType y_dtype, OverflowMode mode, double exact, double allowance, double got) {
  if (!std::isfinite(exact)) {
    const double want = stored(y_dtype, exact, mode);
    return std::isnan(want) ? std::isnan(got) : got == want;
  }
  if (y_dtype == DType::f32) return std::fabs(got - exact) <= allowance + std::ldexp(std::fabs(exact), -24);
  // Band edges beyond the format's range store as NaN (fp8) or inf: then anything out there is fine, but a
  // band wholly beyond the range (both edges NaN) must give NaN.
  double lo = stored(y_dtype, exact - allowance, mode), hi = stored(y_dtype, exact + allowance, mode);
  if (std::isnan(got)) return std::isnan(lo) || std::isnan(hi);
  if (std::isnan(lo) && std::isnan(hi)) return false;
  if (std::isnan(lo)) lo = -INFINITY;
  if (std::isnan(hi)) hi = INFINITY;
  return got >= lo && got <= hi;
}

}  // namespace conv3d_dx::reference
