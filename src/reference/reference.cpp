#include "reference/reference.hpp"

#include <cmath>
#include <cstring>

#include "common/engine.hpp"
#include "numeric/numeric.hpp"

namespace conv3d_dx::reference {

// Gathers, for every y element, the dy elements and taps with od*s + kd*d == id + pad_front (per axis).
std::vector<double> compute(const Problem& p, const void* dy, const void* filter,
                            std::vector<double>* abs_sum) {
  std::vector<double> y(static_cast<std::size_t>(p.y_elements()), 0.0);
  if (abs_sum) abs_sum->assign(y.size(), 0.0);
  const auto& ds = p.dy_strides;
  const auto& fs = p.filter_strides;
  std::size_t index = 0;
  for (std::int64_t n = 0; n < p.N; ++n)
    for (std::int64_t c = 0; c < p.Cin(); ++c) {
      const std::int64_t g = c / p.Cin_g, ci = c % p.Cin_g;
      for (std::int64_t id = 0; id < p.y_size[0]; ++id)
        for (std::int64_t ih = 0; ih < p.y_size[1]; ++ih)
          for (std::int64_t iw = 0; iw < p.y_size[2]; ++iw) {
            double sum = 0.0, magnitude = 0.0;
            for (std::int64_t co = g * p.Cout_g; co < (g + 1) * p.Cout_g; ++co)
              for (std::int64_t kd = 0; kd < p.kernel[0]; ++kd) {
                const std::int64_t td = id + p.pad_front[0] - kd * p.dilation[0];
                if (td < 0 || td % p.stride[0] != 0 || td / p.stride[0] >= p.dy_size[0]) continue;
                for (std::int64_t kh = 0; kh < p.kernel[1]; ++kh) {
                  const std::int64_t th = ih + p.pad_front[1] - kh * p.dilation[1];
                  if (th < 0 || th % p.stride[1] != 0 || th / p.stride[1] >= p.dy_size[1]) continue;
                  for (std::int64_t kw = 0; kw < p.kernel[2]; ++kw) {
                    const std::int64_t tw = iw + p.pad_front[2] - kw * p.dilation[2];
                    if (tw < 0 || tw % p.stride[2] != 0 || tw / p.stride[2] >= p.dy_size[2]) continue;
                    const std::int64_t dy_at = n * ds[0] + co * ds[1] + td / p.stride[0] * ds[2] +
                                               th / p.stride[1] * ds[3] + tw / p.stride[2] * ds[4];
                    const std::int64_t w_at = co * fs[0] + ci * fs[1] + kd * fs[2] + kh * fs[3] + kw * fs[4];
                    const double term =
                        static_cast<double>(numeric::load_rounded(p.dy_dtype, dy, dy_at, p.input_rounding)) *
                        static_cast<double>(
                            numeric::load_rounded(p.filter_dtype, filter, w_at, p.input_rounding));
                    sum += term;
                    magnitude += std::fabs(term);
                  }
                }
              }
            if (abs_sum) (*abs_sum)[index] = magnitude;
            y[index++] = sum;
          }
    }
  return y;
}

}  // namespace conv3d_dx::reference

namespace conv3d_dx {
namespace {

// The oracle behind the Plan API: float64 sums, rounded to fp32 and then to y's dtype.
class ReferenceEngine final : public EngineImpl {
 public:
  // The filter is kept as a contiguous canonical copy in its own dtype, so packing reads it only once.
  explicit ReferenceEngine(const Problem& p) : source_(p), p_(p) {
    const auto& k = p.kernel;
    p_.filter_strides = {p.Cin_g * k[0] * k[1] * k[2], k[0] * k[1] * k[2], k[1] * k[2], k[2], 1};
    filter_.resize(static_cast<std::size_t>(p.Cout() * p_.filter_strides[0]) * dtype_size(p.filter_dtype));
  }
  std::string name() const override { return "reference"; }
  void pack_filter(const void* filter) override {
    const std::size_t size = dtype_size(p_.filter_dtype);
    const auto& src = source_.filter_strides;
    const auto& dst = p_.filter_strides;
    for (std::int64_t co = 0; co < p_.Cout(); ++co)
      for (std::int64_t ci = 0; ci < p_.Cin_g; ++ci)
        for (std::int64_t kd = 0; kd < p_.kernel[0]; ++kd)
          for (std::int64_t kh = 0; kh < p_.kernel[1]; ++kh)
            for (std::int64_t kw = 0; kw < p_.kernel[2]; ++kw) {
              const std::int64_t from = co * src[0] + ci * src[1] + kd * src[2] + kh * src[3] + kw * src[4];
              const std::int64_t to = co * dst[0] + ci * dst[1] + kd * dst[2] + kh * dst[3] + kw * dst[4];
              std::memcpy(filter_.data() + static_cast<std::size_t>(to) * size,
                          static_cast<const unsigned char*>(filter) + static_cast<std::size_t>(from) * size,
                          size);
            }
  }
  void execute(const void* dy, void* y, void* /*workspace*/) const override {
    const std::vector<double> values = reference::compute(p_, dy, filter_.data());
    const auto& s = p_.y_strides;
    std::size_t index = 0;
    for (std::int64_t n = 0; n < p_.N; ++n)
      for (std::int64_t c = 0; c < p_.Cin(); ++c)
        for (std::int64_t d = 0; d < p_.y_size[0]; ++d)
          for (std::int64_t h = 0; h < p_.y_size[1]; ++h)
            for (std::int64_t w = 0; w < p_.y_size[2]; ++w)
              numeric::store_f32(p_.y_dtype, y, n * s[0] + c * s[1] + d * s[2] + h * s[3] + w * s[4],
                                 static_cast<float>(values[index++]), p_.overflow);
  }

 private:
  const Problem source_;  // the caller's filter strides
  Problem p_;             // the same problem over the packed filter
  std::vector<unsigned char> filter_;
};

}  // namespace

std::unique_ptr<EngineImpl> make_reference_engine(const Problem& p) {
  return std::make_unique<ReferenceEngine>(p);
}

}  // namespace conv3d_dx
