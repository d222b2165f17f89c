// dW: one float64 sum per filter element, over the batch and every output position whose tap lands in x.
#include "backward/detail.hpp"
#include "common/parallel.hpp"
#include "numeric/numeric.hpp"

namespace conv3d_dx::backward {

void weight_gradient(const GradientProblem& p, const void* dy, const void* x, void* dw,
                     const GradientOptions& options) {
  const auto& k = p.kernel;
  const auto& ds = p.dy.strides;
  const auto& xs = p.x.strides;
  const auto& ws = p.dw.strides;
  const std::int64_t taps = k[0] * k[1] * k[2];
  const std::int64_t per_co = p.Cin_g * taps;
  // Filter elements in canonical order [Cout, Cin_g, kD, kH, kW]; each thread takes whole elements.
  parallel_for(
      detail::resolve_threads(options.threads), p.Cout() * per_co, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t e = begin; e < end; ++e) {
          const std::int64_t co = e / per_co, ci = e / taps % p.Cin_g, tap = e % taps;
          const std::int64_t kd = tap / (k[1] * k[2]), kh = tap / k[2] % k[1], kw = tap % k[2];
          const std::int64_t c = co / p.Cout_g * p.Cin_g + ci;  // the channel of x this filter element sees
          double sum = 0.0;
          for (std::int64_t n = 0; n < p.N; ++n)
            for (std::int64_t od = 0; od < p.dy_size[0]; ++od) {
              const std::int64_t id = od * p.stride[0] + kd * p.dilation[0] - p.pad_front[0];
              if (id < 0 || id >= p.x_size[0]) continue;
              for (std::int64_t oh = 0; oh < p.dy_size[1]; ++oh) {
                const std::int64_t ih = oh * p.stride[1] + kh * p.dilation[1] - p.pad_front[1];
                if (ih < 0 || ih >= p.x_size[1]) continue;
                for (std::int64_t ow = 0; ow < p.dy_size[2]; ++ow) {
                  const std::int64_t iw = ow * p.stride[2] + kw * p.dilation[2] - p.pad_front[2];
                  if (iw < 0 || iw >= p.x_size[2]) continue;
                  const std::int64_t dy_at = n * ds[0] + co * ds[1] + od * ds[2] + oh * ds[3] + ow * ds[4];
                  const std::int64_t x_at = n * xs[0] + c * xs[1] + id * xs[2] + ih * xs[3] + iw * xs[4];
                  sum += static_cast<double>(numeric::load_rounded(p.dy.dtype, dy, dy_at, p.input_rounding)) *
                         static_cast<double>(numeric::load_rounded(p.x.dtype, x, x_at, p.input_rounding));
                }
              }
            }
          detail::store_sum(p.dw.dtype, dw, co * ws[0] + ci * ws[1] + kd * ws[2] + kh * ws[3] + kw * ws[4],
                            sum, p.overflow, options.through_fp16);
        }
      });
}

}  // namespace conv3d_dx::backward
