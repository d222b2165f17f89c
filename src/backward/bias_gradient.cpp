// db: one float64 sum per output channel over the batch and every output position.
#include "backward/detail.hpp"
#include "common/parallel.hpp"
#include "numeric/numeric.hpp"

namespace conv3d_dx::backward {

void bias_gradient(const GradientProblem& p, const void* dy, void* db, DType dtype, std::int64_t stride,
                   const GradientOptions& options) {
  const auto& ds = p.dy.strides;
  parallel_for(detail::resolve_threads(options.threads), p.Cout(), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t co = begin; co < end; ++co) {
      double sum = 0.0;
      for (std::int64_t n = 0; n < p.N; ++n)
        for (std::int64_t od = 0; od < p.dy_size[0]; ++od)
          for (std::int64_t oh = 0; oh < p.dy_size[1]; ++oh)
            for (std::int64_t ow = 0; ow < p.dy_size[2]; ++ow)
              sum += static_cast<double>(numeric::load_f32(
                  p.dy.dtype, dy, n * ds[0] + co * ds[1] + od * ds[2] + oh * ds[3] + ow * ds[4]));
      detail::store_sum(dtype, db, co * stride, sum, p.overflow, false);
    }
  });
}

}  // namespace conv3d_dx::backward
