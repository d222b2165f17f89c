// The simple engine: dy and the filter are widened to fp32 (with the input rounding) into channel-last
// scratch, then every y element gathers its taps in a fixed order. Correct for everything; not fast.
#include "cpu/direct.hpp"

#include <new>
#include <vector>

#include "common/parallel.hpp"
#include "numeric/numeric.hpp"
#include "problem/checked.hpp"

namespace conv3d_dx {
namespace {

// The (kernel index, dy index) pairs of one spatial axis that reach y index i, in kernel order: k with
// i + pad - k * dilation = o * stride for some 0 <= o < out. Found by walking the kernel, so no table grows
// with the tensor (a y axis of 2^31 positions needs nothing per position).
struct AxisTaps {
  std::int64_t out, kernel, stride, dilation, pad;

  template <class F>
  void for_each(std::int64_t i, F&& f) const {
    for (std::int64_t k = 0; k < kernel; ++k) {
      const std::int64_t pos = i + pad - k * dilation;
      if (pos < 0) break;  // pos only decreases with k
      if (pos % stride == 0 && pos / stride < out) f(k, pos / stride);
    }
  }
};

class DirectEngine final : public EngineImpl {
 public:
  explicit DirectEngine(const EngineRequest& request)
      : p_(request.problem),
        threads_(request.threads),
        taps_{AxisTaps{p_.dy_size[0], p_.kernel[0], p_.stride[0], p_.dilation[0], p_.pad_front[0]},
              AxisTaps{p_.dy_size[1], p_.kernel[1], p_.stride[1], p_.dilation[1], p_.pad_front[1]},
              AxisTaps{p_.dy_size[2], p_.kernel[2], p_.stride[2], p_.dilation[2], p_.pad_front[2]}} {
    const std::int64_t filter_floats =
        saturating_mul(saturating_mul(p_.G * p_.Cin_g, p_.Cout_g),
                       saturating_mul(p_.kernel[0] * p_.kernel[1], p_.kernel[2]));
    check_memory(request, name(),
                 {saturating_mul(filter_floats, 4), static_cast<std::int64_t>(workspace_bytes()), 0});
    try {
      filter_.resize(static_cast<std::size_t>(filter_floats));
    } catch (const std::bad_alloc&) {
      throw OutOfMemory("",
                        "out of memory: needs " + std::to_string(filter_floats * 4) + " bytes for the filter",
                        filter_floats * 4);
    }
  }

  std::string name() const override { return "direct"; }

  std::size_t workspace_bytes() const override {
    const std::int64_t dy =
        saturating_mul(p_.N * p_.Cout(), saturating_mul(p_.dy_size[0] * p_.dy_size[1], p_.dy_size[2]));
    return static_cast<std::size_t>(saturating_mul(dy, 4));
  }

  // Packed as [g][ci][kd][kh][kw][co] so the innermost loop of the gather is contiguous.
  void pack_filter(const void* filter) override {
    const auto& s = p_.filter_strides;
    const std::int64_t taps = p_.kernel[0] * p_.kernel[1] * p_.kernel[2];
    parallel_for(threads_, p_.G * p_.Cin_g, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t gc = begin; gc < end; ++gc) {
        const std::int64_t g = gc / p_.Cin_g, ci = gc % p_.Cin_g;
        float* out = filter_.data() + gc * taps * p_.Cout_g;
        for (std::int64_t kd = 0; kd < p_.kernel[0]; ++kd)
          for (std::int64_t kh = 0; kh < p_.kernel[1]; ++kh)
            for (std::int64_t kw = 0; kw < p_.kernel[2]; ++kw)
              for (std::int64_t co = 0; co < p_.Cout_g; ++co) {
                const std::int64_t src =
                    (g * p_.Cout_g + co) * s[0] + ci * s[1] + kd * s[2] + kh * s[3] + kw * s[4];
                *out++ = numeric::load_rounded(p_.filter_dtype, filter, src, p_.input_rounding);
              }
      }
    });
  }

  void execute(const void* dy, void* y, void* workspace) const override {
    float* dyf = static_cast<float*>(workspace);
    widen_dy(dy, dyf);
    const std::int64_t rows = p_.N * p_.G * p_.y_size[0] * p_.y_size[1];
    parallel_for(threads_, rows, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) gather_row(r, dyf, y);
    });
  }

 private:
  // dy as fp32 in [n][g][od][oh][ow][co] order.
  void widen_dy(const void* dy, float* dyf) const {
    const auto& s = p_.dy_strides;
    parallel_for(threads_, p_.N * p_.G * p_.dy_size[0], [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {
        const std::int64_t od = r % p_.dy_size[0], g = r / p_.dy_size[0] % p_.G, n = r / p_.dy_size[0] / p_.G;
        float* out = dyf + r * p_.dy_size[1] * p_.dy_size[2] * p_.Cout_g;
        for (std::int64_t oh = 0; oh < p_.dy_size[1]; ++oh)
          for (std::int64_t ow = 0; ow < p_.dy_size[2]; ++ow)
            for (std::int64_t co = 0; co < p_.Cout_g; ++co) {
              const std::int64_t src =
                  n * s[0] + (g * p_.Cout_g + co) * s[1] + od * s[2] + oh * s[3] + ow * s[4];
              *out++ = numeric::load_rounded(p_.dy_dtype, dy, src, p_.input_rounding);
            }
      }
    });
  }

  // All y elements of one (n, g, id, ih) row.
  void gather_row(std::int64_t r, const float* dyf, void* y) const {
    const std::int64_t ih = r % p_.y_size[1], id = r / p_.y_size[1] % p_.y_size[0];
    const std::int64_t g = r / (p_.y_size[1] * p_.y_size[0]) % p_.G,
                       n = r / (p_.y_size[1] * p_.y_size[0] * p_.G);
    const std::int64_t Co = p_.Cout_g, taps = p_.kernel[0] * p_.kernel[1] * p_.kernel[2];
    const float* dy_group = dyf + (n * p_.G + g) * p_.dy_size[0] * p_.dy_size[1] * p_.dy_size[2] * Co;
    const auto& D = taps_[0];
    const auto& H = taps_[1];
    const auto& W = taps_[2];
    const auto& ys = p_.y_strides;
    for (std::int64_t iw = 0; iw < p_.y_size[2]; ++iw) {
      for (std::int64_t ci = 0; ci < p_.Cin_g; ++ci) {
        const float* w_ci = filter_.data() + (g * p_.Cin_g + ci) * taps * Co;
        float acc = 0.0f;
        D.for_each(id, [&](std::int64_t kd, std::int64_t od) {
          H.for_each(ih, [&](std::int64_t kh, std::int64_t oh) {
            W.for_each(iw, [&](std::int64_t kw, std::int64_t ow) {
              const float* w = w_ci + ((kd * p_.kernel[1] + kh) * p_.kernel[2] + kw) * Co;
              const float* d = dy_group + ((od * p_.dy_size[1] + oh) * p_.dy_size[2] + ow) * Co;
              for (std::int64_t co = 0; co < Co; ++co) acc += d[co] * w[co];
            });
          });
        });
        const std::int64_t dst =
            n * ys[0] + (g * p_.Cin_g + ci) * ys[1] + id * ys[2] + ih * ys[3] + iw * ys[4];
        numeric::store_f32(p_.y_dtype, y, dst, acc, p_.overflow);
      }
    }
  }

  Problem p_;
  int threads_;
  AxisTaps taps_[3];
  std::vector<float> filter_;
};

}  // namespace

std::unique_ptr<EngineImpl> make_direct_engine(const EngineRequest& request, std::string&) {
  return std::make_unique<DirectEngine>(request);
}

}  // namespace conv3d_dx
