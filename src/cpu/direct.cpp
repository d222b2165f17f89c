// The simple engine: dy and the filter are widened to fp32 (with the input rounding) into channel-last
// scratch, then every y element gathers its taps in a fixed order. Correct for everything; not fast.
#include "cpu/direct.hpp"

#include <vector>

#include "common/parallel.hpp"
#include "numeric/numeric.hpp"

namespace conv3d_dx {
namespace {

// For one spatial axis, the (kernel index, dy index) pairs that reach each y index, in kernel order.
struct AxisTaps {
  std::vector<std::int64_t> begin;  // size in + 1: taps of y index i are [begin[i], begin[i+1])
  std::vector<std::int64_t> k, o;

  AxisTaps(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride, std::int64_t dilation,
           std::int64_t pad) {
    begin.push_back(0);
    for (std::int64_t i = 0; i < in; ++i) {
      for (std::int64_t kk = 0; kk < kernel; ++kk) {
        const std::int64_t pos = i + pad - kk * dilation;
        if (pos < 0 || pos % stride != 0 || pos / stride >= out) continue;
        k.push_back(kk);
        o.push_back(pos / stride);
      }
      begin.push_back(static_cast<std::int64_t>(k.size()));
    }
  }
};

class DirectEngine final : public EngineImpl {
 public:
  DirectEngine(const Problem& p, int threads)
      : p_(p),
        threads_(threads),
        taps_{AxisTaps(p.in[0], p.out[0], p.kernel[0], p.stride[0], p.dilation[0], p.pad_front[0]),
              AxisTaps(p.in[1], p.out[1], p.kernel[1], p.stride[1], p.dilation[1], p.pad_front[1]),
              AxisTaps(p.in[2], p.out[2], p.kernel[2], p.stride[2], p.dilation[2], p.pad_front[2])},
        filter_(
            static_cast<std::size_t>(p.G * p.Cin_g * p.Cout_g * p.kernel[0] * p.kernel[1] * p.kernel[2])) {}

  std::string name() const override { return "direct"; }

  std::size_t workspace_bytes() const override {
    return static_cast<std::size_t>(p_.N * p_.Cout() * p_.out[0] * p_.out[1] * p_.out[2]) * sizeof(float);
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
    const std::int64_t rows = p_.N * p_.G * p_.in[0] * p_.in[1];
    parallel_for(threads_, rows, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) gather_row(r, dyf, y);
    });
  }

 private:
  // dy as fp32 in [n][g][od][oh][ow][co] order.
  void widen_dy(const void* dy, float* dyf) const {
    const auto& s = p_.dy_strides;
    parallel_for(threads_, p_.N * p_.G * p_.out[0], [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {
        const std::int64_t od = r % p_.out[0], g = r / p_.out[0] % p_.G, n = r / p_.out[0] / p_.G;
        float* out = dyf + r * p_.out[1] * p_.out[2] * p_.Cout_g;
        for (std::int64_t oh = 0; oh < p_.out[1]; ++oh)
          for (std::int64_t ow = 0; ow < p_.out[2]; ++ow)
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
    const std::int64_t ih = r % p_.in[1], id = r / p_.in[1] % p_.in[0];
    const std::int64_t g = r / (p_.in[1] * p_.in[0]) % p_.G, n = r / (p_.in[1] * p_.in[0] * p_.G);
    const std::int64_t Co = p_.Cout_g, taps = p_.kernel[0] * p_.kernel[1] * p_.kernel[2];
    const float* dy_group = dyf + (n * p_.G + g) * p_.out[0] * p_.out[1] * p_.out[2] * Co;
    const auto& D = taps_[0];
    const auto& H = taps_[1];
    const auto& W = taps_[2];
    const auto& ys = p_.y_strides;
    for (std::int64_t iw = 0; iw < p_.in[2]; ++iw) {
      for (std::int64_t ci = 0; ci < p_.Cin_g; ++ci) {
        const float* w_ci = filter_.data() + (g * p_.Cin_g + ci) * taps * Co;
        float acc = 0.0f;
        for (std::int64_t td = D.begin[id]; td < D.begin[id + 1]; ++td)
          for (std::int64_t th = H.begin[ih]; th < H.begin[ih + 1]; ++th)
            for (std::int64_t tw = W.begin[iw]; tw < W.begin[iw + 1]; ++tw) {
              const float* w = w_ci + ((D.k[td] * p_.kernel[1] + H.k[th]) * p_.kernel[2] + W.k[tw]) * Co;
              const float* d = dy_group + ((D.o[td] * p_.out[1] + H.o[th]) * p_.out[2] + W.o[tw]) * Co;
              for (std::int64_t co = 0; co < Co; ++co) acc += d[co] * w[co];
            }
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
  return std::make_unique<DirectEngine>(request.problem, request.threads);
}

}  // namespace conv3d_dx
