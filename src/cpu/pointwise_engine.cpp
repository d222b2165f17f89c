#include "cpu/pointwise_engine.hpp"

#include <xmmintrin.h>

#include <algorithm>
#include <array>
#include <vector>

#include "common/parallel.hpp"
#include "cpu/kernels.hpp"
#include "cpu/support.hpp"
#include "problem/checked.hpp"

namespace conv3d_dx::cpu {
namespace {

constexpr int kUnit = kMaxPixCi;  // input channels per tile: the pixel kernels' widest
constexpr int kVectors = 2;       // 16-pixel vectors per tile (kUnit x kVectors accumulators, one row)
constexpr std::int64_t kWidth = 16 * kVectors;
constexpr std::int64_t kTasksPerThread = 4;  // runs of tiles per thread worth cutting images into
constexpr std::int64_t kMaxPanelSteps = std::int64_t{1} << 18;  // a 32 MiB panel per thread at most
constexpr std::int64_t kPrefetchRows = 16;                      // dy rows requested ahead of the panel copy

class PointwiseEngine final : public EngineImpl {
 public:
  PointwiseEngine(const EngineRequest& request, const KernelSet& ks, bool pairs)
      : p_(request.problem),
        threads_(request.threads),
        ks_(ks),
        pairs_(pairs),
        k_(pairs ? (p_.Cout_g + 1) / 2 : p_.Cout_g),
        units_(ceil_div(p_.Cin_g, kUnit)),
        pixels_(p_.y_size[0] * p_.y_size[1] * p_.y_size[2]),
        elem_(static_cast<std::int64_t>(dtype_size(p_.dy_dtype))),
        dy_reader_(p_.dy_dtype, p_.input_rounding),
        w_reader_(p_.filter_dtype, p_.input_rounding) {
    const Problem& p = p_;
    // The packed filter; per thread a dy panel and an output tile (see execute); no workspace.
    const std::int64_t packed = saturating_mul(saturating_mul(p.G * units_, k_), kUnit * 4);
    check_memory(request, name(), {packed, 0, (saturating_mul(k_, kWidth) + kUnit * kWidth + 32) * 4});
    wpack_ = alloc_zeroed64(static_cast<std::size_t>(packed), "the packed filter");
    // Each image's pixels are cut into runs of whole tiles, enough of them to share out. A pixel's sum does
    // not depend on which tile holds it, so neither does the result.
    const std::int64_t tiles = ceil_div(pixels_, kWidth), images = p.N * p.G;
    const std::int64_t cuts =
        std::min(tiles, std::max<std::int64_t>(1, ceil_div(kTasksPerThread * threads_, images)));
    run_tiles_ = ceil_div(tiles, cuts);
    runs_ = ceil_div(tiles, run_tiles_);
  }

  std::string name() const override { return pairs_ ? "pointwise_avx512_bf16" : "pointwise_avx512"; }

  // Per unit of kUnit input channels (group g, block b; the last block's padding stays zero):
  // [g][b][co][kUnit] fp32, or [g][b][co / 2][kUnit][2] bf16.
  void pack_filter(const void* filter) override {
    const auto& s = p_.filter_strides;
    // Per unit: whether it holds a bf16 value too small for vdpbf16ps (tiny_bf16).
    std::vector<unsigned char> tiny(static_cast<std::size_t>(p_.G * units_), 0);
    // fp32 runs with contiguous input channels (any 1 x 1 x 1 NCDHW filter) are widened by vector kernels.
    const bool widen = !pairs_ && s[1] == 1 && w_reader_.widens(ks_);
    w_reader_.visit(filter, [&](auto get) {
      parallel_for(threads_, p_.G * units_, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t unit = begin; unit < end; ++unit) {
          const std::int64_t g = unit / units_, ci0 = unit % units_ * kUnit;
          const std::int64_t valid = std::min<std::int64_t>(kUnit, p_.Cin_g - ci0);
          bool any = false;
          for (std::int64_t co = 0; co < p_.Cout_g; ++co) {
            const std::int64_t src = (g * p_.Cout_g + co) * s[0] + ci0 * s[1];
            if (pairs_) {  // one 32-byte run per pair of output channels
              auto* w =
                  static_cast<std::uint16_t*>(wpack_.get()) + ((unit * k_ + co / 2) * kUnit) * 2 + (co & 1);
              for (std::int64_t c = 0; c < valid; ++c) {
                put(w, 2 * c, get(src + c * s[1]));
                any |= tiny_bf16(w[2 * c]);
              }
            } else {
              float* w = static_cast<float*>(wpack_.get()) + (unit * k_ + co) * kUnit;
              if (widen) {
                w_reader_.widen(ks_, filter, src, valid, w);
                continue;
              }
              for (std::int64_t c = 0; c < valid; ++c) put(w, c, get(src + c * s[1]));
            }
          }
          tiny[static_cast<std::size_t>(unit)] = any;
        }
      });
    });
    tiny_filter_ = std::find(tiny.begin(), tiny.end(), 1) != tiny.end();
  }

  void execute(const void* dy, void* y, void* /*workspace*/) const override {
    if (p_.N == 0) return;
    parallel_for(threads_, p_.N * p_.G * runs_, [&](std::int64_t begin, std::int64_t end) {
      std::vector<float> panel(static_cast<std::size_t>(k_ * kWidth + 16));  // 4-byte units
      std::vector<float> tile(static_cast<std::size_t>(kUnit * kWidth + 16));
      for (std::int64_t t = begin; t < end; ++t)
        run_task(t, dy, y, static_cast<float*>(align64(panel.data())),
                 static_cast<float*>(align64(tile.data())));
    });
  }

 private:
  // One task: a run of tiles of image (n, g). Per tile, dy's rows of the tile's pixels for every output
  // channel are copied into `panel` ([co][kWidth] fp32, or [co / 2][kWidth][2] bf16), then every unit of
  // input channels is reduced against it into `tile` ([kUnit][kWidth]) and stored.
  void run_task(std::int64_t t, const void* dy, void* y, float* panel, float* tile) const {
    const std::int64_t run = t % runs_, g = t / runs_ % p_.G, n = t / runs_ / p_.G;
    const auto &ds = p_.dy_strides, &ys = p_.y_strides;
    const std::int64_t p_end = std::min(pixels_, (run + 1) * run_tiles_ * kWidth);
    for (std::int64_t p0 = run * run_tiles_ * kWidth; p0 < p_end; p0 += kWidth) {
      const std::int64_t m = std::min(kWidth, p_end - p0), at = n * ds[0] + g * p_.Cout_g * ds[1] + p0;
      // The panel's rows lie a plane apart in dy: too far for the hardware prefetchers, so each copy would
      // wait for memory. Rows kPrefetchRows ahead are requested while earlier ones are copied.
      const auto* dy_bytes = static_cast<const char*>(dy);
      const std::int64_t row_bytes = m * elem_;
      // (Inlined: GCC deems a separate function of prefetches alone free of effects and drops its calls.)
      const auto prefetch = [&](std::int64_t co) __attribute__((always_inline)) {  // at most 3 lines a row
        if (co >= p_.Cout_g) return;
        const char* row = dy_bytes + (at + co * ds[1]) * elem_;
        _mm_prefetch(row, _MM_HINT_T0);
        if (row_bytes > 64) _mm_prefetch(row + 64, _MM_HINT_T0);
        _mm_prefetch(row + row_bytes - 1, _MM_HINT_T0);
      };
      for (std::int64_t co = 0; co < kPrefetchRows; ++co) prefetch(co);
      bool tiny = false;
      if (pairs_) {
        const auto* src = static_cast<const std::uint16_t*>(dy) + at;
        auto* pairs = reinterpret_cast<std::uint16_t*>(panel);
        for (std::int64_t q = 0; q < k_; ++q) {
          const std::int64_t co = 2 * q;
          prefetch(co + kPrefetchRows);
          prefetch(co + 1 + kPrefetchRows);
          ks_.interleave_bf16(src + co * ds[1], co + 1 < p_.Cout_g ? src + (co + 1) * ds[1] : nullptr,
                              pairs + q * 2 * kWidth, m);
          tiny |= ks_.any_tiny_bf16(pairs + q * 2 * kWidth, 2 * m);
        }
      } else if (dy_reader_.widens(ks_)) {  // a copy, or widened exactly by vector kernels
        for (std::int64_t co = 0; co < k_; ++co) {
          prefetch(co + kPrefetchRows);
          dy_reader_.widen(ks_, dy, at + co * ds[1], m, panel + co * kWidth);
        }
      } else {  // widened exactly (with the input rounding) to fp32
        dy_reader_.visit(dy, [&](auto get) {
          for (std::int64_t co = 0; co < k_; ++co) {
            prefetch(co + kPrefetchRows);
            for (std::int64_t i = 0; i < m; ++i) panel[co * kWidth + i] = get(at + co * ds[1] + i);
          }
        });
      }
      // bf16 pairs go through vdpbf16ps unless an input is small enough for it to flush something.
      const PixFn fn = !pairs_                ? ks_.pix[kUnit][kVectors]
                       : tiny_filter_ || tiny ? ks_.pix_bf16_exact[kUnit][kVectors]
                                              : ks_.pix_bf16[kUnit][kVectors];
      PixTap tap{0, nullptr, 1u, 0, static_cast<std::int32_t>(m)};
      for (std::int64_t u = 0; u < units_; ++u) {
        tap.w = static_cast<const char*>(wpack_.get()) + (g * units_ + u) * k_ * kUnit * 4;
        fn(PixArgs{panel, kWidth, 0, k_, &tap, 1, tile});
        const std::int64_t c0 = g * p_.Cin_g + u * kUnit,
                           valid = std::min<std::int64_t>(kUnit, p_.Cin_g - u * kUnit);
        for (std::int64_t c = 0; c < valid; ++c)
          store_run(p_, ks_, tile + c * kWidth, 1, y, n * ys[0] + (c0 + c) * ys[1] + p0, 1, m);
      }
    }
  }

  Problem p_;
  int threads_;
  const KernelSet& ks_;
  bool pairs_;                             // bf16 channel pairs through vdpbf16ps
  std::int64_t k_;                         // reduction steps: Cout_g, or channel pairs
  std::int64_t units_;                     // blocks of kUnit input channels per group
  std::int64_t pixels_;                    // per image: D x H x W, one contiguous row in both tensors
  std::int64_t elem_;                      // bytes per dy element
  std::int64_t run_tiles_ = 1, runs_ = 1;  // tiles per task, tasks per image
  AlignedPtr wpack_;
  bool tiny_filter_ = false;  // the packed bf16 filter holds a tiny value (tiny_bf16)
  Reader dy_reader_, w_reader_;
};

// The planes of a channel-first tensor (C, D, H, W) are contiguous rows of D x H x W elements.
bool contiguous_planes(const std::array<std::int64_t, 5>& s, const std::array<std::int64_t, 3>& extent) {
  return s[4] == 1 && s[3] == extent[2] && s[2] == extent[1] * extent[2];
}

}  // namespace

std::unique_ptr<EngineImpl> make_pointwise(const EngineRequest& request, Isa isa, std::string& why_not) {
  const Problem& p = request.problem;
  const bool pairs = isa == Isa::avx512_bf16;
  why_not = fast_engine_refusal(isa, request, pairs);
  if (!why_not.empty()) return nullptr;
  const std::array<std::int64_t, 3> ones{1, 1, 1}, zeros{0, 0, 0};
  if (p.kernel != ones || p.stride != ones || p.pad_front != zeros || p.pad_back != zeros)
    why_not = "not pointwise (kernel 1x1x1, stride 1, no padding)";
  else if (p.dy_strides[1] == 1 || p.y_strides[1] == 1)
    why_not = "channels are contiguous (the GEMM engine's layout)";
  else if (!contiguous_planes(p.dy_strides, p.dy_size) || !contiguous_planes(p.y_strides, p.y_size))
    why_not = "feature-map planes are not contiguous";
  else if (p.Cout_g > kMaxPanelSteps * (pairs ? 2 : 1))
    why_not = "Cout/groups is " + std::to_string(p.Cout_g) + ": its per-thread dy panel would be too large";
  else if (pairs && p.dy_dtype != DType::bf16)
    why_not = std::string("dy is ") + to_string(p.dy_dtype) + ", not bf16";
  if (!why_not.empty()) return nullptr;
  return std::make_unique<PointwiseEngine>(request, avx512_kernels(), pairs);
}

}  // namespace conv3d_dx::cpu
