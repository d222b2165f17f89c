#include "cpu/pixel_engine.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "common/parallel.hpp"
#include "cpu/geometry.hpp"
#include "cpu/kernels.hpp"
#include "cpu/support.hpp"
#include "problem/checked.hpp"

namespace conv3d_dx::cpu {
namespace {

class PixelEngine final : public EngineImpl {
 public:
  PixelEngine(const EngineRequest& request, Isa isa, const KernelSet& ks, bool pairs)
      : name_(std::string("pixel_") + to_string(isa)),
        lanes_(ks.lanes),
        p_(request.problem),
        threads_(request.threads),
        ks_(ks),
        pairs_(pairs),
        k_(pairs ? (p_.Cout_g + 1) / 2 : p_.Cout_g),
        ax_{axis_of(p_, 0), axis_of(p_, 1), axis_of(p_, 2)},
        ci_(static_cast<int>(p_.Cin_g)),
        dy_reader_(p_.dy_dtype, p_.input_rounding),
        w_reader_(p_.filter_dtype, p_.input_rounding) {
    const Problem& p = p_;
    // Vectors per row: enough for the widest W phase, within what the kernel set offers for ci_.
    std::int64_t widest = 1;
    for (const AxisPhase& ph : ax_[2].phases) widest = std::max(widest, ph.count);
    p_vec_ = static_cast<int>(std::min<std::int64_t>(ceil_div(widest, lanes_), kMaxPixP));
    while (ks.pix[ci_][p_vec_] == nullptr) --p_vec_;
    rows_ = pix_rows(ci_, p_vec_, ks.pix_budget);

    for (std::int64_t kd = 0; kd < p.kernel[0]; ++kd)
      for (std::int64_t kh = 0; kh < p.kernel[1]; ++kh)
        for (std::int64_t kw = 0; kw < p.kernel[2]; ++kw)
          tap_src_.push_back(kd * p.filter_strides[2] + kh * p.filter_strides[3] + kw * p.filter_strides[4]);

    // dy channel-first, converted into the workspace: fp32 rows, where masks cost a blend per FMA (AVX2)
    // with zero pixels on both sides as far as any tile's whole vectors reach, so that where the filter is
    // finite a tap reads whole vectors instead, its lanes outside dy adding w x 0 = +-0 (no value changes;
    // docs/numerics.md on a zero's sign); or bf16 pairs of channels interleaved per pixel (the odd channel
    // of an odd Cout_g zero), without halos (vdpbf16ps may flush a sum a zero product is added to). Halos
    // at most double a row (short rows keep the masks). fp32 dy with contiguous W is read in place instead
    // unless halos would spare more masked vector FMAs than it has values, what converting it costs (Zen 3,
    // 2 threads, paired: suite f converted 0.44x the time; h, 0.4 masked FMAs per value, converted 1.3x).
    const auto& s = p.dy_strides;
    const std::int64_t width = p_vec_ * lanes_;
    std::int64_t lo = 0, hi = 0;
    for (const AxisPhase& pw : ax_[2].phases)
      for (const AxisTap& tw : pw.taps) {
        if (pw.count == 0) continue;
        lo = std::max(lo, -tw.off);
        hi = std::max(hi, (pw.count - 1) / width * width + tw.off + width - p.dy_size[2]);
      }
    const bool halos = !pairs && ks.pix_masks_cost && lo + hi <= p.dy_size[2];
    direct_dy_ = !pairs && p.dy_dtype == DType::f32 && p.input_rounding == InputRounding::none && s[4] == 1 &&
                 (!halos || masked_fmas() <= static_cast<double>(p.N * p.G * p.Cout_g * p.dy_size[0] *
                                                                 p.dy_size[1] * p.dy_size[2]));
    if (direct_dy_) {
      dy_n_ = s[0], dy_g_ = p.Cout_g * s[1], dy_c_ = s[1], dy_d_ = s[2], dy_h_ = s[3];
    } else {
      halos_ = halos;
      if (halos_) halo_lo_ = lo, halo_hi_ = hi;
      dy_h_ = halo_lo_ + p.dy_size[2] + halo_hi_;
      dy_d_ = p.dy_size[1] * dy_h_;
      dy_c_ = p.dy_size[0] * dy_d_;
      dy_g_ = k_ * dy_c_;
      dy_n_ = p.G * dy_g_;
    }
    // y with strided channels and W phases (stride > 1): the phases' tiles are gathered into whole rows,
    // stored as runs of consecutive pixels rather than pixel by pixel.
    stage_w_ = p.y_strides[1] != 1 && p.stride[2] > 1;
    // With W stride 2 the two phases (first pixel 0 and 1) fill the two halves of a staged row contiguously,
    // interleaved when the row is stored.
    halves_ = stage_w_ && p.stride[2] == 2 && p.y_size[2] >= 2 && ks.interleave_f32 != nullptr;
    stage_row_ = halves_ ? 2 * ceil_div(p.y_size[2], 2) : p.y_size[2];
    // Channel-last y: blocks of groups covering a vector's worth of channels (see run_task).
    gblock_ = p.y_strides[1] == 1 ? std::max<std::int64_t>(1, lanes_ / ci_) : 1;
    check_memory(request, name(), memory());
    wpack_ = alloc_zeroed64(static_cast<std::size_t>(packed_floats()) * 4, "the packed filter");
    // Row groups: up to rows_ consecutive rows of one H phase in one D plane.
    for (std::int64_t id = 0; id < p.y_size[0]; ++id)
      for (std::int64_t ph = 0; ph < p.stride[1]; ++ph)
        for (std::int64_t j = 0; j < ax_[1].phases[static_cast<std::size_t>(ph)].count; j += rows_)
          groups_.push_back({id, ph, j});
  }

  std::string name() const override { return name_; }
  std::string config() const override {
    return std::to_string(ci_) + " input channels x " + std::to_string(rows_) + " rows x " +
           std::to_string(p_vec_ * lanes_) + " pixels per tile, dy " +
           (direct_dy_ ? "read in place"
            : halos_   ? "converted with halos of " + std::to_string(halo_lo_) + " and " +
                           std::to_string(halo_hi_) + " pixels (whole vectors where the filter is finite)"
                     : "converted");
  }

  std::size_t workspace_bytes() const override { return static_cast<std::size_t>(memory().workspace); }

  // Once the blocking is chosen, before the packed filter and the row groups are allocated.
  EngineMemory memory() const {
    const std::int64_t taps = static_cast<std::int64_t>(tap_src_.size());
    const std::int64_t groups =
        saturating_mul(p_.y_size[0], p_.y_size[1]);  // row groups: at most one per y row
    const std::int64_t tables = saturating_add(
        saturating_mul(taps, 8), saturating_mul(groups, static_cast<std::int64_t>(sizeof(Group))));
    const std::int64_t dy_units =
        saturating_mul(saturating_mul(p_.N * p_.G, k_), saturating_mul(p_.dy_size[0] * p_.dy_size[1], dy_h_));
    const std::int64_t per_thread =
        saturating_add(saturating_mul(taps, static_cast<std::int64_t>(sizeof(PixTap))),
                       saturating_mul(saturating_add(tile_floats(), stage_floats()), 4));
    return {saturating_add(saturating_mul(packed_floats(), 4), tables),
            direct_dy_ ? 0 : saturating_add(saturating_mul(dy_units, 4), 64), per_thread};
  }

  // [g][tap][co][ci] fp32, or [g][tap][co / 2][ci][2] bf16.
  void pack_filter(const void* filter) override {
    const auto& s = p_.filter_strides;
    const std::int64_t taps = static_cast<std::int64_t>(tap_src_.size());
    // Per (group, output channel): whether it holds a bf16 value too small for vdpbf16ps (tiny_bf16), or an
    // infinity or NaN.
    std::vector<unsigned char> tiny(static_cast<std::size_t>(p_.G * p_.Cout_g), 0),
        nonfinite(static_cast<std::size_t>(p_.G * p_.Cout_g), 0);
    w_reader_.visit(filter, [&](auto get) {
      parallel_for(threads_, p_.G * p_.Cout_g, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t gc = begin; gc < end; ++gc) {
          const std::int64_t g = gc / p_.Cout_g, co = gc % p_.Cout_g;
          bool any = false, special = false;
          for (std::int64_t t = 0; t < taps; ++t)
            for (std::int64_t ci = 0; ci < ci_; ++ci) {
              const float v =
                  get((g * p_.Cout_g + co) * s[0] + ci * s[1] + tap_src_[static_cast<std::size_t>(t)]);
              special |= !(std::fabs(v) <= std::numeric_limits<float>::max());
              if (pairs_) {
                auto* w = static_cast<std::uint16_t*>(wpack_.get());
                const std::int64_t at = (((g * taps + t) * k_ + co / 2) * ci_ + ci) * 2 + (co & 1);
                put(w, at, v);
                any |= tiny_bf16(w[at]);
              } else {
                put(static_cast<float*>(wpack_.get()), ((g * taps + t) * k_ + co) * ci_ + ci, v);
              }
            }
          tiny[static_cast<std::size_t>(gc)] = any;
          nonfinite[static_cast<std::size_t>(gc)] = special;
        }
      });
    });
    tiny_filter_ = std::find(tiny.begin(), tiny.end(), 1) != tiny.end();
    finite_filter_ = std::find(nonfinite.begin(), nonfinite.end(), 1) == nonfinite.end();
  }

  void execute(const void* dy, void* y, void* workspace) const override {
    if (p_.N == 0) return;
    const void* src = dy;
    bool tiny_dy = false;
    if (!direct_dy_) {
      void* ws = align64(workspace);
      if (pairs_)
        tiny_dy = convert_dy(dy, static_cast<std::uint16_t*>(ws));
      else
        convert_dy(dy, static_cast<float*>(ws));
      src = static_cast<const float*>(ws) + halo_lo_;  // pixel 0 of the first row
    }
    // bf16 pairs go through vdpbf16ps unless an input is small enough for it to flush something.
    const PixFn fn = !pairs_                   ? ks_.pix[ci_][p_vec_]
                     : tiny_filter_ || tiny_dy ? ks_.pix_bf16_exact[ci_][p_vec_]
                                               : ks_.pix_bf16[ci_][p_vec_];
    const std::int64_t tasks = p_.N * ceil_div(p_.G, gblock_) * static_cast<std::int64_t>(groups_.size());
    parallel_for(threads_, tasks, [&](std::int64_t begin, std::int64_t end) {
      std::vector<PixTap> taps(tap_src_.size());
      std::vector<float> tile(static_cast<std::size_t>(tile_floats()));
      std::vector<float> stage(static_cast<std::size_t>(stage_floats()));
      for (std::int64_t t = begin; t < end; ++t)
        run_task(t, src, y, fn, taps.data(), static_cast<float*>(align64(tile.data())), stage.data());
    });
  }

 private:
  std::int64_t packed_floats() const {
    return saturating_mul(saturating_mul(p_.G, static_cast<std::int64_t>(tap_src_.size())), k_ * ci_);
  }
  std::int64_t tile_floats() const { return gblock_ * ci_ * rows_ * p_vec_ * lanes_ + 16; }
  std::int64_t stage_floats() const {
    return stage_w_ ? saturating_add(saturating_mul(gblock_ * ci_ * rows_, stage_row_), p_.y_size[2]) : 0;
  }
  struct Group {
    std::int64_t id, ph, j0;  // D index, H phase, first row (j) of the phase
  };

  // Vector FMAs of the kernels' masked taps (those that do not cover a tile's whole vectors) when dy has no
  // halos: per W phase tile and tap, its vectors for each y row and plane the tap reaches and each step.
  double masked_fmas() const {
    const Axis &D = ax_[0], &H = ax_[1], &W = ax_[2];
    const std::int64_t width = p_vec_ * lanes_;
    // Pairs (y index, tap) of an axis whose dy index lies inside dy.
    const auto reached = [](const Axis& a) {
      double n = 0;
      for (const AxisPhase& ph : a.phases)
        for (const AxisTap& t : ph.taps) {
          const auto [lo, hi] = a.inside(t, 0, ph.count);
          n += static_cast<double>(std::max<std::int64_t>(0, hi - lo));
        }
      return n;
    };
    double masked = 0;
    for (const AxisPhase& pw : W.phases)
      for (std::int64_t j0 = 0; j0 < pw.count; j0 += width)
        for (const AxisTap& tw : pw.taps) {
          const std::int64_t m = std::min(width, pw.count - j0);
          const auto [lo, hi] = W.inside(tw, j0, m);
          if (lo < hi && !(lo == 0 && hi == width)) masked += 1;
        }
    return masked * p_vec_ * ci_ * reached(H) * reached(D) * static_cast<double>(k_) *
           static_cast<double>(p_.N * p_.G);
  }

  // Zeroes the halo pixels of the converted fp32 dy row whose pixel 0 is at `row`.
  void zero_halo(float* row) const {
    std::fill(row - halo_lo_, row, 0.0f);
    std::fill(row + p_.dy_size[2], row + p_.dy_size[2] + halo_hi_, 0.0f);
  }

  // convert_dy into fp32 by vector kernels where the reader has them: rows of contiguous W widened as runs;
  // channel-last dy widened pixel by pixel (as one run where the pixels follow one another) and transposed
  // into the channel planes, up to 4096 values at a time. Returns false, writing nothing, for other inputs.
  bool widen_dy(const void* dy, float* out) const {
    const auto& s = p_.dy_strides;
    if (!dy_reader_.widens(ks_)) return false;
    if (s[4] == 1) {
      parallel_for(threads_, p_.N * p_.G * k_, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t r = begin; r < end; ++r) {
          const std::int64_t n = r / (p_.G * k_), c = r % (p_.G * k_);
          for (std::int64_t od = 0; od < p_.dy_size[0]; ++od)
            for (std::int64_t oh = 0; oh < p_.dy_size[1]; ++oh) {
              float* row = out + r * dy_c_ + od * dy_d_ + oh * dy_h_ + halo_lo_;
              zero_halo(row);
              dy_reader_.widen(ks_, dy, n * s[0] + c * s[1] + od * s[2] + oh * s[3], p_.dy_size[2], row);
            }
        }
      });
      return true;
    }
    if (s[1] != 1 || !ks_.store_transposed) return false;
    const std::int64_t C = p_.G * p_.Cout_g, chunk = std::max<std::int64_t>(1, 4096 / C);
    parallel_for(threads_, p_.N * p_.dy_size[0] * p_.dy_size[1], [&](std::int64_t begin, std::int64_t end) {
      std::vector<float> pixels(static_cast<std::size_t>(chunk * C));
      for (std::int64_t r = begin; r < end; ++r) {
        const std::int64_t oh = r % p_.dy_size[1], od = r / p_.dy_size[1] % p_.dy_size[0],
                           n = r / p_.dy_size[1] / p_.dy_size[0];
        float* const row0 = out + n * dy_n_ + od * dy_d_ + oh * dy_h_ + halo_lo_;  // channel 0's row
        for (std::int64_t c = 0; c < C; ++c) zero_halo(row0 + c * dy_c_);
        for (std::int64_t w0 = 0; w0 < p_.dy_size[2]; w0 += chunk) {
          const std::int64_t m = std::min(chunk, p_.dy_size[2] - w0),
                             at = n * s[0] + od * s[2] + oh * s[3] + w0 * s[4];
          if (s[4] == C)  // the pixels follow one another: one run
            dy_reader_.widen(ks_, dy, at, m * C, pixels.data());
          else
            for (std::int64_t w = 0; w < m; ++w)
              dy_reader_.widen(ks_, dy, at + w * s[4], C, pixels.data() + w * C);
          ks_.store_transposed(pixels.data(), false, C, m, C, row0 + w0, StoreType::f32, dy_c_, false);
        }
      }
    });
    return true;
  }

  // dy as [n][g][co][od][oh][halo_lo_ + ow + halo_hi_] fp32 (the halos zero), or [n][g][co /
  // 2][od][oh][ow][2] bf16. Returns whether bf16 dy holds a tiny value (tiny_bf16), scanned channel pair by
  // pair as it is written.
  template <class T>
  bool convert_dy(const void* dy, T* out) const {
    const auto& s = p_.dy_strides;
    constexpr std::int64_t lanes = sizeof(T) == 2 ? 2 : 1;  // channels per 4-byte unit
    const bool scan = lanes == 2 && p_.dy_dtype == DType::bf16;
    std::vector<unsigned char> tiny(static_cast<std::size_t>(scan ? p_.N * p_.G * k_ : 0), 0);
    const bool interleave = scan && s[4] == 1 && ks_.interleave_bf16 != nullptr;
    if constexpr (lanes == 1)
      if (widen_dy(dy, out)) return false;
    dy_reader_.visit(dy, [&](auto get) {
      parallel_for(threads_, p_.N * p_.G * k_, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t r = begin; r < end; ++r) {
          const std::int64_t n = r / (p_.G * k_), g = r / k_ % p_.G, step = r % k_;
          T* plane = out + r * dy_c_ * lanes;
          if constexpr (lanes == 2) {
            if (interleave) {  // bf16 rows with contiguous W: interleave the pair's two rows
              const std::int64_t co = step * 2;
              bool any = false;
              for (std::int64_t od = 0; od < p_.dy_size[0]; ++od)
                for (std::int64_t oh = 0; oh < p_.dy_size[1]; ++oh) {
                  const auto* a = static_cast<const std::uint16_t*>(dy) + n * s[0] +
                                  (g * p_.Cout_g + co) * s[1] + od * s[2] + oh * s[3];
                  any |= ks_.interleave_bf16(a, co + 1 < p_.Cout_g ? a + s[1] : nullptr,
                                             plane + (od * dy_d_ + oh * dy_h_) * 2, p_.dy_size[2], false);
                }
              tiny[static_cast<std::size_t>(r)] = any;
              continue;
            }
          }
          for (std::int64_t e = 0; e < lanes; ++e) {
            const std::int64_t co = step * lanes + e;
            for (std::int64_t od = 0; od < p_.dy_size[0]; ++od)
              for (std::int64_t oh = 0; oh < p_.dy_size[1]; ++oh) {
                const std::int64_t base = n * s[0] + (g * p_.Cout_g + co) * s[1] + od * s[2] + oh * s[3];
                T* row = plane + (od * dy_d_ + oh * dy_h_ + halo_lo_) * lanes + e;
                if constexpr (lanes == 1) zero_halo(row);
                for (std::int64_t ow = 0; ow < p_.dy_size[2]; ++ow)
                  put(row, ow * lanes, co < p_.Cout_g ? get(base + ow * s[4]) : 0.0f);
              }
          }
          if constexpr (lanes == 2)
            if (scan)
              tiny[static_cast<std::size_t>(r)] =
                  ks_.any_tiny_bf16(reinterpret_cast<const std::uint16_t*>(plane), dy_c_ * lanes);
        }
      });
    });
    return std::find(tiny.begin(), tiny.end(), 1) != tiny.end();
  }

  // One task: a row group of one D plane for a block of groups, every W phase. Tasks are numbered row group
  // first, so threads split the work by channels rather than taking alternate rows of every plane (whose
  // shared cache lines they would then fight over). With channel-last y the block spans a vector's worth
  // of channels, so each pixel's channels are stored as one run (transposed from the tiles).
  // stage: gblock_ * ci_ * rows_ staged y rows of stage_row_ floats, then Wi more, when stage_w_.
  void run_task(std::int64_t t, const void* dy, void* y, PixFn fn, PixTap* taps, float* tile,
                float* stage) const {
    const std::int64_t ngroups = static_cast<std::int64_t>(groups_.size()), nblocks = ceil_div(p_.G, gblock_);
    const std::int64_t g0 = t / ngroups % nblocks * gblock_, g1 = std::min(p_.G, g0 + gblock_),
                       n = t / ngroups / nblocks;
    const Group& grp = groups_[static_cast<std::size_t>(t % ngroups)];
    const Axis &D = ax_[0], &H = ax_[1], &W = ax_[2];
    const AxisPhase& PD = D.phases[static_cast<std::size_t>(D.phase_of(grp.id))];
    const AxisPhase& PH = H.phases[static_cast<std::size_t>(grp.ph)];
    const std::int64_t jd = D.j_of(grp.id), nrows = std::min<std::int64_t>(rows_, PH.count - grp.j0);
    const std::int64_t width = p_vec_ * lanes_, taps_total = static_cast<std::int64_t>(tap_src_.size());
    const std::int64_t w_group = taps_total * k_ * ci_ * 4,
                       tile_group = ci_ * rows_ * width;  // bytes, floats
    const char* w_g0 = static_cast<const char*>(wpack_.get()) + g0 * w_group;
    const auto& s = p_.y_strides;
    const std::int64_t nch = (g1 - g0) * ci_;
    // With contiguous channels in y, each pixel's are stored as one run, transposed from the tile: for a
    // block of groups, and for the channels of one in 8-bit y (channel by channel, each byte went to another
    // line of y: suite h channels_last, Zen 3, 1 thread: HiFloat8 y took 3.9x the time of fp32 y).
    const bool transpose =
        s[1] == 1 && ks_.store_transposed && (g1 - g0 > 1 || (dtype_size(p_.y_dtype) == 1 && nch > 1));
    // With a finite filter, fp32 taps read whole vectors: the lanes outside dy read its zero halos and add
    // w x 0 (those from m on are never stored).
    const bool whole = halos_ && finite_filter_;

    for (const AxisPhase& PW : W.phases) {
      for (std::int64_t j0 = 0; j0 < PW.count; j0 += width) {
        const std::int64_t m = std::min(width, PW.count - j0);
        std::int64_t ntaps = 0;
        for (const AxisTap& td : PD.taps) {
          if (!D.valid(td, jd)) continue;
          for (const AxisTap& th : PH.taps) {
            std::uint32_t rows = 0;
            for (std::int64_t r = 0; r < nrows; ++r)
              if (H.valid(th, grp.j0 + r)) rows |= 1u << r;
            if (rows == 0) continue;
            const std::int64_t tap_dh = (td.k * p_.kernel[1] + th.k) * p_.kernel[2];
            const std::int64_t off_dh = (jd + td.off) * dy_d_ + (grp.j0 + th.off) * dy_h_;
            for (const AxisTap& tw : PW.taps) {
              auto [lo, hi] = W.inside(tw, j0, m);
              if (lo >= hi) continue;
              if (whole) lo = 0, hi = width;
              taps[ntaps++] = {off_dh + j0 + tw.off, w_g0 + (tap_dh + tw.k) * k_ * ci_ * 4, rows,
                               static_cast<std::int32_t>(lo), static_cast<std::int32_t>(hi)};
            }
          }
        }
        for (std::int64_t g = g0; g < g1; ++g) {
          if (g > g0)
            for (std::int64_t i = 0; i < ntaps; ++i)
              taps[i].w = static_cast<const char*>(taps[i].w) + w_group;
          fn(PixArgs{static_cast<const char*>(dy) + (n * dy_n_ + g * dy_g_) * 4, dy_c_, dy_h_, k_, taps,
                     ntaps, tile + (g - g0) * tile_group});
        }
        // tile [channel of the block][r][width] -> y (n, g0*Cin_g + channel, id, PH row j0 + r, PW pixel j0 +
        // x).
        const std::int64_t iw = PW.first + W.stride * j0, ps = W.stride * s[4];
        for (std::int64_t r = 0; r < nrows; ++r) {
          const std::int64_t ih = PH.first + H.stride * (grp.j0 + r);
          const std::int64_t at = n * s[0] + g0 * ci_ * s[1] + grp.id * s[2] + ih * s[3] + iw * s[4];
          if (stage_w_) {
            for (std::int64_t c = 0; c < nch; ++c) {
              const float* from = tile + (c * rows_ + r) * width;
              float* to = stage + (c * rows_ + r) * stage_row_;
              if (halves_)  // phase PW.first's half, pixel j at j
                std::memcpy(to + PW.first * (stage_row_ / 2) + j0, from, static_cast<std::size_t>(m) * 4);
              else
                for (std::int64_t x = 0; x < m; ++x) to[iw + x * W.stride] = from[x];
            }
          } else if (transpose) {
            ks_.store_transposed(
                tile + r * width, false, rows_ * width, nch, m,
                static_cast<char*>(y) + at * static_cast<std::int64_t>(dtype_size(p_.y_dtype)),
                transposed_store_type(p_.y_dtype), ps, p_.overflow == OverflowMode::saturate);
          } else {
            for (std::int64_t c = 0; c < nch; ++c)
              store_run(p_, ks_, tile + (c * rows_ + r) * width, 1, y, at + c * s[1], ps, m);
          }
        }
      }
    }
    // Staged rows: every W phase has filled its pixels; store each channel's row as one run.
    if (stage_w_)
      for (std::int64_t r = 0; r < nrows; ++r) {
        const std::int64_t ih = PH.first + H.stride * (grp.j0 + r);
        const std::int64_t at = n * s[0] + g0 * ci_ * s[1] + grp.id * s[2] + ih * s[3];
        for (std::int64_t c = 0; c < nch; ++c) {
          const float* row = stage + (c * rows_ + r) * stage_row_;
          if (halves_) {  // even pixels from the first half, odd ones from the second
            float* merged = stage + gblock_ * ci_ * rows_ * stage_row_;
            ks_.interleave_f32(row, row + stage_row_ / 2, merged, W.in);
            row = merged;
          }
          store_run(p_, ks_, row, 1, y, at + c * s[1], s[4], W.in);
        }
      }
  }

  std::string name_;
  std::int64_t lanes_;  // fp32 lanes per vector of the kernel set
  Problem p_;
  int threads_;
  const KernelSet& ks_;
  bool pairs_;      // bf16 channel pairs through vdpbf16ps
  std::int64_t k_;  // reduction steps per tap: Cout_g, or channel pairs
  Axis ax_[3];
  int ci_;
  int p_vec_ = 1, rows_ = 1;
  std::vector<std::int64_t> tap_src_;  // filter element offset of each tap (kd, kh, kw order)
  AlignedPtr wpack_;
  bool direct_dy_ = false;                  // fp32 dy read in place (no halos)
  bool halos_ = false;                      // converted fp32 dy rows with halos
  std::int64_t halo_lo_ = 0, halo_hi_ = 0;  // zero pixels before and after each converted fp32 dy row
  bool finite_filter_ = false;              // the packed filter holds no infinity or NaN
  bool tiny_filter_ = false;                // the packed bf16 filter holds a tiny value (tiny_bf16)
  std::int64_t dy_n_ = 0, dy_g_ = 0, dy_c_ = 0, dy_d_ = 0, dy_h_ = 0;  // strides in 4-byte units
  std::vector<Group> groups_;
  std::int64_t gblock_ = 1;     // groups per task
  bool stage_w_ = false;        // y rows staged across W phases (see the constructor)
  bool halves_ = false;         // staged rows as two halves, one per W phase
  std::int64_t stage_row_ = 0;  // floats per staged row
  Reader dy_reader_, w_reader_;
};

}  // namespace

std::unique_ptr<EngineImpl> make_pixel(const EngineRequest& request, Isa isa, std::string& why_not) {
  const Problem& p = request.problem;
  const bool pairs = isa == Isa::avx512_bf16;
  why_not = fast_engine_refusal(isa, request, pairs);
  if (!why_not.empty()) return nullptr;
  if (p.Cin_g > kMaxPixCi) {
    why_not = "Cin/groups is " + std::to_string(p.Cin_g) + ", more than " + std::to_string(kMaxPixCi);
    return nullptr;
  }
  return std::make_unique<PixelEngine>(request, isa, kernels_for(isa), pairs);
}

}  // namespace conv3d_dx::cpu
