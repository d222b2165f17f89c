#include "cpu/pointwise_engine.hpp"

#include <algorithm>
#include <array>
#include <vector>

#include "common/parallel.hpp"
#include "cpu/kernels.hpp"
#include "cpu/support.hpp"
#include "problem/checked.hpp"

namespace conv3d_dx::cpu {
namespace {

// Pixels per tile: a multiple of 6 pixels (whole kernel calls of 6 or 3 pixels; 4-pixel ones leave a
// partial call) that keeps the panel within kPanelBytes (in L2 beside a block's filter), from kMinWidth to
// kMaxWidth. Each tile reads every filter block once: on i (2730 output channels, 90 pixels by this rule)
// tiles of 96 to 192 pixels measured ~5 % faster than 48.
constexpr std::int64_t kMinWidth = 48, kMaxWidth = 144, kPanelBytes = std::int64_t{1} << 20;
constexpr std::int64_t kTasksPerThread = 4;  // runs of tiles per thread worth cutting images into
constexpr std::int64_t kMaxPanelSteps = std::int64_t{1} << 18;  // a 48 MiB panel per thread at most
constexpr std::int64_t kRows = 32;  // dy rows per transposed block (16 channel pairs); also the prefetch lead

class PointwiseEngine final : public EngineImpl {
 public:
  PointwiseEngine(const EngineRequest& request, Isa isa, const KernelSet& ks, bool pairs)
      : name_(std::string("pointwise_") + to_string(isa)),
        p_(request.problem),
        threads_(request.threads),
        ks_(ks),
        pairs_(pairs),
        k_(pairs ? (p_.Cout_g + 1) / 2 : p_.Cout_g),
        // A pixel's panel row spans an odd number of cache lines, so the rows of a kernel call's pixels do
        // not share L1 sets.
        kp_((ceil_div(k_, 16) | 1) * 16),
        width_(std::clamp(kPanelBytes / (kp_ * 4) / 6 * 6, kMinWidth, kMaxWidth)),
        nv_(static_cast<int>(std::min<std::int64_t>(ks.nv_for_reduction(k_), ceil_div(p_.Cin_g, ks.lanes)))),
        unit_(nv_ * ks.lanes),
        units_(ceil_div(p_.Cin_g, unit_)),
        pixels_(p_.y_size[0] * p_.y_size[1] * p_.y_size[2]),
        elem_(static_cast<std::int64_t>(dtype_size(p_.dy_dtype))),
        dy_reader_(p_.dy_dtype, p_.input_rounding),
        w_reader_(p_.filter_dtype, p_.input_rounding),
        direct_(!pairs && dy_reader_.as_stored()) {
    const Problem& p = p_;
    // The packed filter; per thread a dy panel, a block of rows and an output tile (see execute).
    const std::int64_t packed = saturating_mul(saturating_mul(p.G * units_, k_), unit_ * 4);
    check_memory(request, name(),
                 {packed, 0, (saturating_mul(kp_, width_) + (kRows + unit_) * width_ + 48) * 4});
    wpack_ = alloc_zeroed64(static_cast<std::size_t>(packed), "the packed filter");
    // Each image's pixels are cut into runs of whole tiles, enough of them to share out. A pixel's sum does
    // not depend on which tile holds it, so neither does the result.
    // (N = 0 or an empty map: one empty run, so that nothing divides by zero.)
    const std::int64_t tiles = std::max<std::int64_t>(1, ceil_div(pixels_, width_)),
                       images = std::max<std::int64_t>(1, p.N * p.G);
    const std::int64_t cuts =
        std::min(tiles, std::max<std::int64_t>(1, ceil_div(kTasksPerThread * threads_, images)));
    run_tiles_ = ceil_div(tiles, cuts);
    runs_ = ceil_div(tiles, run_tiles_);
  }

  std::string name() const override { return name_; }

  // Per unit of unit_ input channels (group g, block b; the last block's padding stays zero):
  // [g][b][co][unit_] fp32, or [g][b][co / 2][unit_][2] bf16.
  void pack_filter(const void* filter) override {
    const auto& s = p_.filter_strides;
    // Per unit: whether it holds a bf16 value too small for vdpbf16ps (tiny_bf16).
    std::vector<unsigned char> tiny(static_cast<std::size_t>(p_.G * units_), 0);
    // fp32 runs with contiguous input channels (any 1 x 1 x 1 NCDHW filter) are widened by vector kernels.
    const bool widen = !pairs_ && s[1] == 1 && w_reader_.widens(ks_);
    w_reader_.visit(filter, [&](auto get) {
      parallel_for(threads_, p_.G * units_, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t unit = begin; unit < end; ++unit) {
          const std::int64_t g = unit / units_, ci0 = unit % units_ * unit_;
          const std::int64_t valid = std::min<std::int64_t>(unit_, p_.Cin_g - ci0);
          bool any = false;
          for (std::int64_t co = 0; co < p_.Cout_g; ++co) {
            const std::int64_t src = (g * p_.Cout_g + co) * s[0] + ci0 * s[1];
            if (pairs_) {  // one 32-byte run per pair of output channels
              auto* w =
                  static_cast<std::uint16_t*>(wpack_.get()) + ((unit * k_ + co / 2) * unit_) * 2 + (co & 1);
              for (std::int64_t c = 0; c < valid; ++c) {
                put(w, 2 * c, get(src + c * s[1]));
                any |= tiny_bf16(w[2 * c]);
              }
            } else {
              float* w = static_cast<float*>(wpack_.get()) + (unit * k_ + co) * unit_;
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
      std::vector<float> panel(static_cast<std::size_t>(kp_ * width_ + 16));  // 4-byte units
      std::vector<float> rows(static_cast<std::size_t>(kRows * width_ + 16));
      std::vector<float> tile(static_cast<std::size_t>(unit_ * width_ + 16));
      for (std::int64_t t = begin; t < end; ++t)
        run_task(t, dy, y, static_cast<float*>(align64(panel.data())),
                 static_cast<float*>(align64(rows.data())), static_cast<float*>(align64(tile.data())));
    });
  }

 private:
  // One task: a run of tiles of image (n, g). Per tile, the tile's pixels of dy are transposed into `panel`
  // (fill_panel), then each block of unit_ input channels is reduced against it into `tile`
  // ([pixel][unit_]) by the GEMM engine's tile kernels and stored.
  void run_task(std::int64_t t, const void* dy, void* y, float* panel, float* rows, float* tile) const {
    const std::int64_t run = t % runs_, g = t / runs_ % p_.G, n = t / runs_ / p_.G;
    const auto &ds = p_.dy_strides, &ys = p_.y_strides;
    const std::int64_t p_end = std::min(pixels_, (run + 1) * run_tiles_ * width_);
    const std::int64_t unit_elems = pairs_ ? 2 : 1;  // dy elements per panel unit (an fp32 value or a pair)
    for (std::int64_t p0 = run * run_tiles_ * width_; p0 < p_end; p0 += width_) {
      const std::int64_t m = std::min(width_, p_end - p0);
      const bool tiny = fill_panel(dy, n * ds[0] + g * p_.Cout_g * ds[1] + p0, m, panel, rows);
      // bf16 pairs go through vdpbf16ps unless an input is small enough for it to flush something.
      const auto& table = !pairs_ ? ks_.f32[nv_] : tiny_filter_ || tiny ? ks_.bf16_exact[nv_] : ks_.bf16[nv_];
      const std::int64_t calls = ceil_div(m, ks_.max_m[nv_]);
      for (std::int64_t u = 0; u < units_; ++u) {
        TapRef tap{0, static_cast<const char*>(wpack_.get()) + (g * units_ + u) * k_ * unit_ * 4, k_, 0, 0};
        for (std::int64_t j = 0; j < calls; ++j) {  // the tile's pixels in near-equal kernel calls
          const auto [j0, mj] = even_part(m, calls, j);
          tap.dy_off = j0 * kp_ * unit_elems;
          tap.hi = static_cast<std::int32_t>(mj);
          table[mj](TileArgs{panel, kp_ * unit_elems, unit_elems, &tap, 1, tile + j0 * unit_, unit_, false});
        }
        const std::int64_t c0 = u * unit_, valid = std::min<std::int64_t>(unit_, p_.Cin_g - c0);
        store_channel_first(p_, ks_, tile, unit_, m, valid, y, n * ys[0] + (g * p_.Cin_g + c0) * ys[1] + p0,
                            ys[1]);
      }
    }
  }

  // panel[i][q] = the tile's pixel i in dy row q (fp32), or rows 2q and 2q + 1 as a bf16 pair (the pair of
  // an odd Cout_g's last row holds +0), for m pixels from dy element `at`: blocks of kRows rows transposed
  // straight from dy when they are exact fp32 or bf16, otherwise first widened into `rows`. Returns whether
  // a bf16 pair holds a tiny value (tiny_bf16).
  bool fill_panel(const void* dy, std::int64_t at, std::int64_t m, float* panel, float* rows) const {
    const std::int64_t cs = p_.dy_strides[1], row_bytes = m * elem_;
    // Rows lie a plane apart in dy: too far for the hardware prefetchers, so each block's rows are
    // requested while the block before is transposed.
    const auto* dy_bytes = static_cast<const char*>(dy);
    const auto prefetch = [&](std::int64_t r0) __attribute__((always_inline)) {
      for (std::int64_t r = r0; r < std::min(r0 + kRows, p_.Cout_g); ++r)
        prefetch_bytes(dy_bytes + (at + r * cs) * elem_, row_bytes);
    };
    prefetch(0);
    bool tiny = false;
    for (std::int64_t r0 = 0; r0 < p_.Cout_g; r0 += kRows) {
      prefetch(r0 + kRows);
      const std::int64_t nr = std::min(kRows, p_.Cout_g - r0), src = at + r0 * cs;
      if (pairs_) {
        auto* out = reinterpret_cast<std::uint16_t*>(panel) + r0;
        const auto* in = static_cast<const std::uint16_t*>(dy) + src;
        if (nr % 2 == 0) {
          tiny |= ks_.transpose_bf16_pairs(in, cs, nr, m, out, 2 * kp_);
          continue;
        }
        auto* block = reinterpret_cast<std::uint16_t*>(rows);  // the rows and a zero row
        for (std::int64_t r = 0; r < nr; ++r)
          std::memcpy(block + r * width_, in + r * cs, static_cast<std::size_t>(m) * 2);
        std::fill(block + nr * width_, block + (nr + 1) * width_, std::uint16_t{0});
        tiny |= ks_.transpose_bf16_pairs(block, width_, nr + 1, m, out, 2 * kp_);
      } else if (direct_) {
        ks_.store_transposed(dy_bytes + src * elem_, p_.dy_dtype == DType::bf16, cs, nr, m, panel + r0,
                             StoreType::f32, kp_, false);
      } else {
        if (dy_reader_.widens(ks_)) {  // widened exactly (with the input rounding), run by run
          for (std::int64_t r = 0; r < nr; ++r) dy_reader_.widen(ks_, dy, src + r * cs, m, rows + r * width_);
        } else {
          dy_reader_.visit(dy, [&](auto get) {
            for (std::int64_t r = 0; r < nr; ++r)
              for (std::int64_t i = 0; i < m; ++i) rows[r * width_ + i] = get(src + r * cs + i);
          });
        }
        ks_.store_transposed(rows, false, width_, nr, m, panel + r0, StoreType::f32, kp_, false);
      }
    }
    return tiny;
  }

  std::string name_;
  Problem p_;
  int threads_;
  const KernelSet& ks_;
  bool pairs_;                             // bf16 channel pairs through vdpbf16ps
  std::int64_t k_;                         // reduction steps: Cout_g, or channel pairs
  std::int64_t kp_;                        // 4-byte units per pixel of the panel, k_ and padding
  std::int64_t width_;                     // pixels per tile
  int nv_;                                 // vectors of input channels per kernel call
  std::int64_t unit_;                      // input channels per block: nv_ vectors
  std::int64_t units_;                     // blocks of unit_ input channels per group
  std::int64_t pixels_;                    // per image: D x H x W, one contiguous row in both tensors
  std::int64_t elem_;                      // bytes per dy element
  std::int64_t run_tiles_ = 1, runs_ = 1;  // tiles per task, tasks per image
  AlignedPtr wpack_;
  bool tiny_filter_ = false;  // the packed bf16 filter holds a tiny value (tiny_bf16)
  Reader dy_reader_, w_reader_;
  bool direct_;  // fp32 panels transposed straight from dy: exact fp32 or bf16 values
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
  return std::make_unique<PointwiseEngine>(request, isa, kernels_for(isa), pairs);
}

}  // namespace conv3d_dx::cpu
