#include "cpu/gemm_engine.hpp"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "common/parallel.hpp"
#include "cpu/geometry.hpp"
#include "cpu/kernels.hpp"
#include "cpu/support.hpp"
#include "numeric/numeric.hpp"
#include "problem/checked.hpp"

namespace conv3d_dx::cpu {
namespace {

// AMX row tasks load the filter with the streaming hint: each tile streams its block's whole filter once
// while rereading its dy rows chunk after chunk and tap after tap, which then stay in L1. Xeon with AMX,
// bf16 channels_last, 2 threads, paired calls against plain loads: extra-suite k133 0.89-0.94x the time,
// down_s2 0.90-0.93x, unet32 0.96-1.00x, unet_up 0.96-0.97x, a 0.97-0.99x. Flat and plane tasks, which reuse
// a filter chunk across many tiles from L2, keep plain loads (with the hint d measured 0.99-1.05x, e
// 0.99-1.04x).
constexpr bool kStreamRowFilter = true;

class GemmEngine final : public EngineImpl {
 public:
  // problem: the request's as the engine computes it (rows_merged).
  GemmEngine(const EngineRequest& request, const Problem& problem, const KernelSet& ks,
             const GemmConfig& config)
      : p_(problem),
        threads_(request.threads),
        ks_(ks),
        config_(config),
        bf16_(config.bf16),
        ax_{axis_of(p_, 0), axis_of(p_, 1), axis_of(p_, 2)},
        lanes_(config.lanes),
        elem_(bf16_ ? 2 : 4),
        kpad_(config.kpad),
        keep_filter_(request.keep_filter),
        max_memory_(request.max_memory_bytes),
        dy_reader_(p_.dy_dtype, p_.input_rounding),
        w_reader_(p_.filter_dtype, p_.input_rounding) {
    const Problem& p = p_;
    taps_ = p.kernel[0] * p.kernel[1] * p.kernel[2];
    const std::int64_t cbw_max = static_cast<std::int64_t>(config.nv) * lanes_;
    // Flat planes: each (H phase, W phase) pair's rows of flat_width_ pixels, one region after another.
    flat_width_ = config.halo_lo + p.dy_size[2] + config.halo_hi;
    if (config.flat)
      for (const AxisPhase& ph : ax_[1].phases)
        for (const AxisPhase& pw : ax_[2].phases) {
          flat_regions_.push_back(flat_pixels_);
          if (pw.count > 0) flat_pixels_ += ph.count * flat_width_;
        }
    tile_floats_ = config.plane_mode ? config.planes_per_task * p.y_size[1] * p.y_size[2] * cbw_max
                   : config.flat     ? (flat_pixels_ + p.y_size[2]) * cbw_max
                   : config.staged   ? p.y_size[2] * cbw_max
                                     : std::max(kMaxM, config.amx ? kAmxMaxM : 0) * cbw_max;
    // Row tasks' and plane tasks' tiles for every block width the config offers, and the most tiles and
    // list entries a y row takes in any of them.
    if (!config.flat) {
      for (int v = 1; v <= config.nv; ++v)
        if (config.max_m[v] > 0) tilings_[static_cast<std::size_t>(v)] = row_tiling(config.max_m[v], false);
      if (config.amx) amx_tiling_ = row_tiling(kAmxMaxM, true);
      const auto room_for = [&](const RowTiling& t) {
        row_tiles_ = std::max(row_tiles_, static_cast<std::int64_t>(t.tiles.size()));
        row_list_taps_ = std::max(row_list_taps_, t.list_taps);
      };
      for (const RowTiling& t : tilings_) room_for(t);
      room_for(amx_tiling_);
    }
    check_memory(request, name(), memory());
    // Channel blocks of config.nv vectors; the last one may be narrower.
    std::int64_t w_off = 0;
    for (std::int64_t ci0 = 0; ci0 < p.Cin_g;) {
      const int nv = static_cast<int>(std::min<std::int64_t>(config.nv, ceil_div(p.Cin_g - ci0, lanes_)));
      blocks_.push_back({ci0, nv, w_off});
      w_off += block_elements(nv);
      ci0 += nv * lanes_;
    }
    group_w_ = w_off;
    for (std::int64_t kd = 0; kd < p.kernel[0]; ++kd)
      for (std::int64_t kh = 0; kh < p.kernel[1]; ++kh)
        for (std::int64_t kw = 0; kw < p.kernel[2]; ++kw)
          tap_src_.push_back(kd * p.filter_strides[2] + kh * p.filter_strides[3] + kw * p.filter_strides[4]);

    const auto& s = p.dy_strides;
    if (config.direct_dy) {
      dy_n_ = s[0], dy_g_ = p.Cout_g * s[1], dy_c_ = bf16_ ? 2 : s[1], dy_d_ = s[2], dy_h_ = s[3],
      dy_w_ = s[4];
    } else {
      dy_c_ = bf16_ ? 2 : 1;
      dy_w_ = kpad_;
      dy_h_ = flat_width_ * dy_w_;
      dy_origin_ = config.hhalo_lo * dy_h_ + config.halo_lo * dy_w_;
      dy_d_ = converted_plane_elements();
      dy_g_ = p.dy_size[0] * dy_d_;
      dy_n_ = p.G * dy_g_;
    }
    // Packed W order: per W phase (in phase order) its taps by decreasing k, so that the taps of a phase
    // read consecutive dy pixels in packed order (and may fuse, config.fuse_w, or share dy loads, share_w).
    tap_pos_w_.assign(static_cast<std::size_t>(p.kernel[2]), 0);
    std::int64_t pos = 0;
    for (const AxisPhase& ph : ax_[2].phases)
      for (auto it = ph.taps.rbegin(); it != ph.taps.rend(); ++it)
        tap_pos_w_[static_cast<std::size_t>(it->k)] = pos++;
    // The (kd, kh) pairs ranked by (D phase, H phase) class, then (kd, kh): a y row's pairs are all of one
    // class, so whatever the grouping its sums run over them in (kd, kh) order. Plane mode's tap groups take
    // each class in turn, config.dh_group pairs at a time, and visit only the rows of their class, so a
    // row's pairs come in as few tile calls as the L2 budget allows (with stride 2, ranges of kd * kH + kh
    // would mix classes and split a row's pairs over more calls: longer calls pay their start-up less often).
    const std::int64_t dh_taps = p.kernel[0] * p.kernel[1];
    dh_rank_.assign(static_cast<std::size_t>(dh_taps), -1);
    std::int64_t rank = 0;
    for (std::size_t rd = 0; rd < ax_[0].phases.size(); ++rd)
      for (std::size_t rh = 0; rh < ax_[1].phases.size(); ++rh) {
        const std::int64_t first = rank;
        for (const AxisTap& td : ax_[0].phases[rd].taps)
          for (const AxisTap& th : ax_[1].phases[rh].taps)
            dh_rank_[static_cast<std::size_t>(td.k * p.kernel[1] + th.k)] = rank++;
        if (config.plane_mode)
          for (std::int64_t r = first; r < rank; r += config.dh_group)
            tap_groups_.push_back({r, std::min(r + config.dh_group, rank), static_cast<int>(rd),
                                   static_cast<int>(rh), r + config.dh_group >= rank});
      }
    if (!config.plane_mode)
      tap_groups_.push_back({0, rank, -1, -1, true});  // a row task writes its tiles once
    tiny_blocks_.assign(static_cast<std::size_t>(p.G) * blocks_.size(), 0);
    // A task is a group of y planes (plane mode), one y plane (flat) or one y row, of one channel block.
    const std::int64_t planes = p.N * p.y_size[0];
    tasks_per_block_ = config.plane_mode ? ceil_div(planes, config.planes_per_task)
                       : config.flat     ? planes
                                         : planes * p.y_size[1];
    if (config.dy_window) split_by_cost();
    // Allocated now, so that an allocator's refusal declines the engine: what the plan's calls will use.
    if (!whole_packed())
      allocate_own_blocks();
    else
      allocate_packed();
  }

  std::string name() const override { return std::string("gemm_") + to_string(config_.isa); }
  std::string config() const override {
    return config_.describe() + (exact_fallback_
                                     ? "; a call whose inputs hold an inf, a NaN or a value with a tiny "
                                       "bf16 part (HF32, below about 2^-45) runs " +
                                           exact_fallback_->name() + " on unsplit values"
                                     : "");
  }

  // Split inputs (fp16, HF32): the engine a call runs instead when its inputs hold a value the split cannot
  // take (a tiny part, an inf or a NaN): the FMA kernels on unsplit values, what the call computes without
  // AMX. Its memory is counted in this engine's (both filters kept, the larger workspace).
  void set_exact_fallback(std::unique_ptr<GemmEngine> fallback, const EngineRequest& request) {
    exact_fallback_ = std::move(fallback);
    check_memory(request, name(), memory());
  }

  std::size_t workspace_bytes() const override { return static_cast<std::size_t>(memory().workspace); }

  // Elements of a converted dy plane: its rows (with the flat planes' halo rows) of flat_width_ pixels.
  std::int64_t converted_plane_elements() const {
    return saturating_mul(saturating_mul(config_.hhalo_lo + p_.dy_size[1] + config_.hhalo_hi, flat_width_),
                          kpad_);
  }
  // A thread's window of converted dy planes (GemmConfig::dy_window), 64-byte aligned within the workspace.
  std::int64_t window_bytes() const {
    return saturating_add(
               saturating_mul(saturating_mul(config_.dy_window_planes, converted_plane_elements()), elem_),
               128) /
           64 * 64;
  }

  // From the problem and the configuration alone, before anything is allocated.
  EngineMemory memory() const {
    const Problem& p = p_;
    const std::int64_t padded_cin = saturating_mul(ceil_div(p.Cin_g, lanes_), lanes_);
    // Tap offsets and positions, channel blocks, per-block flags, the three axes' phase tables.
    std::int64_t tables =
        saturating_add(saturating_mul(taps_, 16), saturating_mul(p.G, padded_cin / lanes_ * 33));
    for (int a = 0; a < 3; ++a)
      tables = saturating_add(
          tables, saturating_add(saturating_mul(p.stride[a], 64), saturating_mul(p.kernel[a], 24)));
    // Flat tiles of the last plane read up to a padded row (plus the taps' reach) past its end.
    const std::int64_t dy_elements =
        saturating_add(saturating_mul(saturating_mul(p.N * p.G, p.dy_size[0]), converted_plane_elements()),
                       config_.flat ? saturating_mul(2 * flat_width_ + 2 * kAmxMaxM, kpad_) : 0);
    const std::int64_t workspace = config_.direct_dy ? 0
                                   : config_.dy_window
                                       ? saturating_mul(threads_, window_bytes())
                                       : saturating_add(saturating_mul(dy_elements, elem_), 64);
    // Per thread: tap lists, the tile and the plane-mode tiles' flags.
    const std::int64_t lists =
        config_.flat
            ? saturating_mul(taps_, static_cast<std::int64_t>(sizeof(TapRef)))
            : saturating_mul(static_cast<std::int64_t>(kRowSlots),
                             saturating_add(saturating_mul(row_list_taps_, std::int64_t{sizeof(TapRef)}),
                                            saturating_mul(row_tiles_, std::int64_t{sizeof(TileList)})));
    const std::int64_t scratch = saturating_add(
        saturating_add(lists, saturating_mul(saturating_add(tile_floats_, 16), 4)), written_flags());
    // The packed filter when it is kept, else the block slots (allocate_packed checks the packed filter
    // against the limit if a plan that does not keep it is asked to pack it whole).
    const EngineMemory own{saturating_add(whole_packed() ? packed_bytes() : own_blocks_bytes(), tables),
                           workspace, scratch};
    if (!exact_fallback_) return own;
    const EngineMemory other = exact_fallback_->memory();
    return {saturating_add(own.packed, other.packed), std::max(own.workspace, other.workspace),
            std::max(own.per_thread, other.per_thread)};
  }

  void pack_filter(const void* filter) override {
    allocate_packed();
    parallel_for(threads_, span_count(), [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t u = begin; u < end; ++u) {
        const auto [gb0, count] = span_blocks(u);
        std::array<void*, kMaxPackSpan> dsts{};
        for (std::int64_t j = 0; j < count; ++j) dsts[static_cast<std::size_t>(j)] = block_of(gb0 + j);
        pack_group_blocks(filter, gb0, count, dsts.data());
      }
    });
    if (exact_fallback_) exact_fallback_->pack_filter(filter);  // for a later dy the split cannot take
  }

  void execute(const void* dy, void* y, void* workspace) const override {
    if (p_.N == 0) return;
    if (config_.dy_window) {
      if (exact_fallback_ && any_exact_block()) return exact_fallback_->execute(dy, y, workspace);
      // A tiny (or, split, special) dy value found on the way: the call again, on the exact kernels or the
      // fallback.
      if (!run_windowed(dy, y, workspace, false)) return;
      if (exact_fallback_) return exact_fallback_->execute(dy, y, workspace);
      run_windowed(dy, y, workspace, true);
      return;
    }
    const auto [src, tiny_dy] = prepare_dy(dy, workspace);
    if (exact_fallback_ && (tiny_dy || any_exact_block())) {
      exact_fallback_->execute(dy, y, workspace);
      return;
    }
    run_tasks(static_cast<std::int64_t>(tiny_blocks_.size()) * tasks_per_block_,
              [&](std::int64_t i, TaskScratch& scratch) {
                const std::int64_t t = task_of(i);
                run_task(t, DyPlanes{src}, y, tiny_dy, scratch, block_of(t / tasks_per_block_));
              });
  }

  // Window mode's shares of the row tasks (window_split_): one per thread, of about equal work. A task's work
  // is taken as one plus the (kd, kh) pairs that reach its y row: at D and H borders fewer do (suite shape f,
  // k7 and stride 2, split by task count, left one thread a fifth more work).
  void split_by_cost() {
    const Axis &D = ax_[0], &H = ax_[1];
    const auto reaching = [](const Axis& a, std::int64_t i) {
      const auto [first, end] = a.valid_taps(a.phases[static_cast<std::size_t>(a.phase_of(i))], a.j_of(i));
      return end - first;
    };
    const std::int64_t ntasks = static_cast<std::int64_t>(tiny_blocks_.size()) * tasks_per_block_;
    const auto cost = [&](std::int64_t i) {
      const std::int64_t r = task_of(i) % tasks_per_block_;
      return 1 + reaching(D, r / H.in % D.in) * reaching(H, r % H.in);
    };
    std::int64_t total = 0;
    for (std::int64_t i = 0; i < ntasks; ++i) total += cost(i);
    window_split_.assign(static_cast<std::size_t>(threads_) + 1, ntasks);
    window_split_[0] = 0;
    std::int64_t done = 0;
    for (std::int64_t i = 0, th = 1; i < ntasks && th < threads_; ++i) {
      done += cost(i);
      while (th < threads_ && done * threads_ >= total * th)
        window_split_[static_cast<std::size_t>(th++)] = i + 1;
    }
  }

  // execute in window mode (GemmConfig::dy_window): each thread runs its share of the row tasks in execute's
  // order (every channel block of a row in turn; window_split_), then takes tasks from the end
  // of another's share while there are any, so a core slowed by other work holds up none. A thread converts
  // the dy planes its tasks' D taps reach into its own window, which slides along them: the planes it holds
  // already move, the others are converted. Returns whether a converted plane holds a tiny bf16 value.
  bool run_windowed(const void* dy, void* y, void* workspace, bool tiny_dy) const {
    // A share's tasks not yet taken, [base + front, base + back), as front << 32 | back in one word that the
    // owner and the others update by compare-and-swap: a lock here would put a thread that finds it taken to
    // sleep in the kernel, tens of microseconds on a VM, at every call's end where they meet (GemmConfig
    // allows window mode only where a share's task count fits 32 bits). On a line of its own.
    struct alignas(64) Share {
      std::int64_t base = 0;
      std::atomic<std::uint64_t> range{0};
    };
    std::vector<Share> shares(static_cast<std::size_t>(threads_));
    for (std::size_t th = 0; th < shares.size(); ++th) {
      shares[th].base = window_split_[th];
      shares[th].range.store(static_cast<std::uint64_t>(window_split_[th + 1] - window_split_[th]),
                             std::memory_order_relaxed);
    }
    // The owner takes a few tasks from the front at a time (fewer as its share runs out), others one from
    // the back.
    const auto take = [](Share& share, bool owner, std::int64_t& begin, std::int64_t& end) {
      std::uint64_t range = share.range.load(std::memory_order_relaxed), taken;
      do {
        const std::int64_t front = static_cast<std::int64_t>(range >> 32),
                           back = static_cast<std::int64_t>(range & 0xffffffffu), left = back - front;
        if (left <= 0) return false;
        begin = owner ? front : back - 1;
        end = owner ? front + std::max<std::int64_t>(1, left / 16) : back;
        taken = owner ? static_cast<std::uint64_t>(end) << 32 | static_cast<std::uint64_t>(back)
                      : static_cast<std::uint64_t>(front) << 32 | static_cast<std::uint64_t>(begin);
      } while (!share.range.compare_exchange_weak(range, taken, std::memory_order_relaxed));
      begin += share.base;
      end += share.base;
      return true;
    };
    const Axis& D = ax_[0];
    const std::int64_t span = config_.dy_window_planes;
    std::vector<unsigned char> tiny(static_cast<std::size_t>(threads_), 0);
    parallel_for(threads_, threads_, [&](std::int64_t first, std::int64_t last) {
      for (std::int64_t th = first; th < last; ++th) {
        TaskScratch scratch(*this);
        auto* const window =
            static_cast<std::uint16_t*>(align64(static_cast<char*>(workspace) + th * window_bytes()));
        std::int64_t image = -1, lo = 0, hi = -1;  // the window holds planes [lo, hi] of `image`
        bool any = false;
        const auto run = [&](std::int64_t i) {
          const std::int64_t t = task_of(i), r = t % tasks_per_block_;
          const std::int64_t q = r / ax_[1].in, n = q / D.in, id = q % D.in, jd = D.j_of(id);
          const AxisPhase& PD = D.phases[static_cast<std::size_t>(D.phase_of(id))];
          std::int64_t need_lo = D.out, need_hi = -1;  // the dy planes its D taps reach
          for (const AxisTap& td : PD.taps)
            if (D.valid(td, jd)) {
              need_lo = std::min(need_lo, jd + td.off);
              need_hi = std::max(need_hi, jd + td.off);
            }
          if (need_lo <= need_hi && (n != image || need_lo < lo || need_hi > hi)) {
            // Forward, the window starts at the first plane needed; backward (taken from another's share), it
            // ends at the last (either way it holds the planes needed: at most span of them).
            const bool back = n == image && need_lo < lo;
            const std::int64_t new_lo = back ? std::max<std::int64_t>(0, need_hi - span + 1) : need_lo,
                               new_hi = back ? need_hi : std::min(need_lo + span, D.out) - 1;
            // The planes held already (none of another image) move to their new places.
            const std::int64_t keep_lo = std::max(lo, new_lo),
                               keep_hi = n == image ? std::min(hi, new_hi) : -1;
            if (keep_lo <= keep_hi)
              std::memmove(window + (keep_lo - new_lo) * dy_d_, window + (keep_lo - lo) * dy_d_,
                           static_cast<std::size_t>((keep_hi - keep_lo + 1) * dy_d_ * elem_));
            for (std::int64_t od = new_lo; od <= new_hi; ++od)
              if (od < keep_lo || od > keep_hi)
                any |= convert_dy_plane(dy, n * D.out + od, window + (od - new_lo) * dy_d_);
            image = n, lo = new_lo, hi = new_hi;
          }
          run_task(t, DyPlanes{window, lo, true}, y, tiny_dy, scratch, block_of(t / tasks_per_block_));
        };
        for (std::int64_t begin, end; take(shares[static_cast<std::size_t>(th)], true, begin, end);)
          for (std::int64_t i = begin; i < end; ++i) run(i);
        for (std::int64_t k = 1; k < threads_; ++k)
          for (std::int64_t begin, end;
               take(shares[static_cast<std::size_t>((th + k) % threads_)], false, begin, end);)
            run(begin);
        tiny[static_cast<std::size_t>(th)] = any;
        amx_release();  // window mode is AMX only
      }
    });
    return std::find(tiny.begin(), tiny.end(), 1) != tiny.end();
  }

  // Each thread packs a channel block and at once runs every task that uses it, so the packed block is read
  // from cache rather than memory (a large filter otherwise makes a round trip through memory between packing
  // and use). The blocks left over when they do not share out evenly are packed next, one per thread, and
  // their tasks shared by all threads. When the filter is not kept, blocks go to buffers the engine owns
  // (own_slots), reused block after block, so the packed filter is never written to memory (nor allocated)
  // at all. Tasks and packed data are those of pack_filter + execute: the same bits.
  void execute_with_filter(const void* dy, const void* filter, void* y, void* workspace, bool keep) override {
    if (p_.N == 0) {  // nothing to compute: the filter is packed only to be kept
      if (keep) pack_filter(filter);
      return;
    }
    // Every block packed before the tasks, which take them in turn; with an exact fallback, a kept filter is
    // packed for both engines first (either may run this call or a later one).
    if (config_.blocks_inner || (exact_fallback_ && keep)) {
      pack_filter(filter);
      execute(dy, y, workspace);
      return;
    }
    if (keep)
      allocate_packed();
    else
      allocate_own_blocks();
    // Where span u's blocks go: in the packed filter, or in the buffers of `slot`.
    const auto destinations = [&](std::int64_t u, std::int64_t slot) {
      const auto [gb0, count] = span_blocks(u);
      std::array<void*, kMaxPackSpan> dsts{};
      for (std::int64_t j = 0; j < count; ++j)
        dsts[static_cast<std::size_t>(j)] =
            keep ? block_of(gb0 + j)
                 : own_blocks_[static_cast<std::size_t>(slot * (config_.pack_span + 1) +
                                                        (narrow(gb0 + j) ? config_.pack_span : j))]
                       .get();
      return dsts;
    };
    const auto [src, tiny_dy] = prepare_dy(dy, workspace);
    if (exact_fallback_ && tiny_dy) {
      exact_fallback_->execute_with_filter(dy, filter, y, workspace, false);
      return;
    }
    const std::int64_t nspans = span_count();
    const std::int64_t shared = nspans % threads_, whole = nspans - shared;
    std::atomic<std::int64_t> next_slot{0};  // which thread takes which buffers does not matter
    ChunkQueue whole_spans(whole, 1);
    parallel_chunks(threads_, whole_spans, [&](ChunkQueue& q) {
      TaskScratch scratch(*this);
      const std::int64_t slot = next_slot++;
      for (std::int64_t u, end; q.next(u, end);) {
        const auto [gb0, count] = span_blocks(u);
        const auto dsts = destinations(u, slot);
        pack_group_blocks(filter, gb0, count, dsts.data());
        for (std::int64_t j = 0; j < count; ++j)
          for (std::int64_t t = (gb0 + j) * tasks_per_block_; t < (gb0 + j + 1) * tasks_per_block_; ++t)
            run_task(t, DyPlanes{src}, y, tiny_dy, scratch,
                     static_cast<const char*>(dsts[static_cast<std::size_t>(j)]));
      }
      if (config_.amx) amx_release();
    });
    if (shared > 0) {
      // The leftover spans (fewer than the threads): span whole + i in slot i, then their blocks' tasks
      // shared by all threads.
      const std::int64_t first = span_blocks(whole).first;
      std::vector<const char*> left(tiny_blocks_.size() - static_cast<std::size_t>(first));  // their buffers
      parallel_for(threads_, shared, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) {
          const auto [gb0, count] = span_blocks(whole + i);
          const auto dsts = destinations(whole + i, i);
          pack_group_blocks(filter, gb0, count, dsts.data());
          for (std::int64_t j = 0; j < count; ++j)
            left[static_cast<std::size_t>(gb0 + j - first)] =
                static_cast<const char*>(dsts[static_cast<std::size_t>(j)]);
        }
      });
      run_tasks(static_cast<std::int64_t>(left.size()) * tasks_per_block_,
                [&](std::int64_t t, TaskScratch& scratch) {
                  run_task(first * tasks_per_block_ + t, DyPlanes{src}, y, tiny_dy, scratch,
                           left[static_cast<std::size_t>(t / tasks_per_block_)]);
                });
    }
    // A filter block the split could not take skipped its tasks: the whole call runs unsplit.
    if (exact_fallback_ && any_exact_block())
      exact_fallback_->execute_with_filter(dy, filter, y, workspace, false);
  }

 private:
  // Converted dy as the tasks read it: every plane of the workspace (one image and group after another), or
  // a thread's window (GemmConfig::dy_window) of one image's planes from first_plane on (one group).
  struct DyPlanes {
    const void* base;
    std::int64_t first_plane = 0;
    bool window = false;
  };
  struct Block {
    std::int64_t ci0;    // first input channel (within the group)
    int nv;              // vectors of lanes_ channels
    std::int64_t w_off;  // packed-filter elements before this block within its group
  };

  // dy in the compute type (in place, or converted into the workspace) and whether it holds a bf16 value
  // too small for vdpbf16ps (tiny_bf16).
  std::pair<const void*, bool> prepare_dy(const void* dy, void* workspace) const {
    if (config_.direct_dy) return {dy, bf16_ && scan_dy_in_place(dy)};
    void* ws = align64(workspace);
    if (bf16_) return {ws, convert_dy(dy, static_cast<std::uint16_t*>(ws))};
    convert_dy(dy, static_cast<float*>(ws));
    return {ws, false};
  }

  // Packs channel blocks gb0 .. gb0 + count - 1 (one group's, consecutive: a span, GemmConfig::pack_span)
  // into dsts and notes which need the exact kernels (tiny_blocks_): in one pass over the filter where the
  // packer reads runs of contiguous input channels (split, bf16 pairs), else block after block.
  void pack_group_blocks(const void* filter, std::int64_t gb0, std::int64_t count, void* const* dsts) {
    const std::int64_t nb = static_cast<std::int64_t>(blocks_.size()), g = gb0 / nb;
    const std::span<const Block> blocks(blocks_.data() + gb0 % nb, static_cast<std::size_t>(count));
    // The flags gathered here and stored once: tiny_blocks_ neighbours other threads' blocks.
    std::array<unsigned char, kMaxPackSpan> special{};
    const bool runs = p_.filter_strides[1] == 1;
    if (config_.split) {
      w_reader_.visit(filter, [&](auto get) {
        if (runs) {
          pack_split_blocks(get, filter, g, blocks, dsts, special.data());
          return;
        }
        for (std::size_t j = 0; j < blocks.size(); ++j)
          pack_split_blocks(get, filter, g, blocks.subspan(j, 1), dsts + j, special.data() + j);
      });
    } else if (runs && count > 1 && bf16_pairs_packer()) {
      if (p_.filter_dtype == DType::bf16)
        pack_bf16_runs(static_cast<const std::uint16_t*>(filter), g, blocks, dsts, special.data());
      else
        pack_bf16_runs(static_cast<const std::uint8_t*>(filter), g, blocks, dsts, special.data());
    } else {
      for (std::size_t j = 0; j < blocks.size(); ++j)
        special[j] = pack_one_block(filter, g, blocks[j], dsts[j]);
    }
    std::copy_n(special.begin(), count, tiny_blocks_.begin() + gb0);
  }

  // Whether bf16 pairs are packed by vector kernels (pack_bf16_block): a bf16 or 8-bit filter.
  bool bf16_pairs_packer() const {
    return bf16_ && ks_.interleave_bf16 && ks_.any_nonfinite_bf16 &&
           (p_.filter_dtype == DType::bf16 ||
            (w_reader_.bf16_lut() != nullptr && ks_.widen8 != nullptr && ks_.widen8_pairs != nullptr));
  }

  // Packs block b of group g into dst (inputs not split); whether it needs the exact kernels.
  bool pack_one_block(const void* filter, std::int64_t g, const Block& b, void* dst) const {
    if (bf16_pairs_packer()) {
      auto* wpack = static_cast<std::uint16_t*>(dst);
      return p_.filter_dtype == DType::bf16
                 ? pack_bf16_block(static_cast<const std::uint16_t*>(filter), g, b, wpack)
                 : pack_bf16_block(static_cast<const std::uint8_t*>(filter), g, b, wpack);
    }
    if (!bf16_ && w_reader_.widens(ks_) && pack_f32_block(filter, g, b, static_cast<float*>(dst)))
      return false;
    bool special = false;
    w_reader_.visit(filter, [&](auto get) {
      special = bf16_ ? pack_block(get, g, b, static_cast<std::uint16_t*>(dst))
                      : pack_block(get, g, b, static_cast<float*>(dst));
    });
    return special;
  }

  // Whether the whole packed filter is allocated (a plan that keeps it, or blocks taken in turn by each
  // thread's tasks), rather than buffer slots for a block at a time.
  bool whole_packed() const { return keep_filter_ || config_.blocks_inner; }
  // Task i of execute's order: with blocks_inner, consecutive i run the channel blocks (of every group) of
  // one row or plane in turn; otherwise a block's tasks are consecutive.
  std::int64_t task_of(std::int64_t i) const {
    if (!config_.blocks_inner) return i;
    const std::int64_t nblocks = static_cast<std::int64_t>(tiny_blocks_.size());
    return i % nblocks * tasks_per_block_ + i / nblocks;
  }

  // task(i, scratch) for i in [0, n), in chunks handed to whichever thread asks next, each thread with its
  // own scratch: about 16 chunks per thread, so a slowed core gives its share to the others, yet runs of
  // consecutive rows or planes long enough to reuse their dy from cache; with blocks_inner, whole rows or
  // planes (every block's task). Xeon without AMX (Ice Lake), fp32, 2 threads, 30 paired runs against the
  // static split over a, b, c, d, e, i, k1s2, unet_up, vae: median 0.99x the time, 0.88-1.08x, the gains
  // (0.88-0.95x) in minutes when the VM's two cores ran at different speeds.
  template <class Task>
  void run_tasks(std::int64_t n, const Task& task) const {
    const std::int64_t unit = config_.blocks_inner ? static_cast<std::int64_t>(tiny_blocks_.size()) : 1;
    ChunkQueue queue(n, unit * std::max<std::int64_t>(1, n / unit / (16 * std::int64_t{threads_})));
    parallel_chunks(threads_, queue, [&](ChunkQueue& q) {
      TaskScratch scratch(*this);
      for (std::int64_t begin, end; q.next(begin, end);)
        for (std::int64_t i = begin; i < end; ++i) task(i, scratch);
      if (config_.amx) amx_release();
    });
  }

  // Bytes of the packed filter (all groups, channels padded to whole vectors).
  std::int64_t packed_bytes() const {
    const std::int64_t padded_cin = saturating_mul(ceil_div(p_.Cin_g, lanes_), lanes_);
    return saturating_mul(saturating_mul(saturating_mul(p_.G, taps_), saturating_mul(kpad_, padded_cin)),
                          elem_);
  }
  // The packed filter, zeroed (padding stays zero): allocated while planning when the plan keeps the filter,
  // else only if it is ever packed whole (pack_filter), within the memory limit on top of the rest.
  void allocate_packed() {
    if (wpack_) return;
    if (!whole_packed()) {
      const EngineMemory memory = this->memory();
      const std::int64_t needed = saturating_add(memory.total(threads_), packed_bytes());
      if (max_memory_ > 0 && needed > max_memory_)
        throw OutOfMemory("max_memory",
                          "out of memory: packing the whole filter (the plan does not keep it) needs " +
                              std::to_string(packed_bytes()) + " bytes on top of " +
                              memory.describe(threads_) + " but max_memory is " + std::to_string(max_memory_),
                          needed);
    }
    wpack_ = alloc_zeroed64(static_cast<std::size_t>(packed_bytes()), "the packed filter");
  }
  char* block_of(std::int64_t gb) const {
    const std::int64_t nb = static_cast<std::int64_t>(blocks_.size());
    return static_cast<char*>(wpack_.get()) +
           (gb / nb * group_w_ + blocks_[static_cast<std::size_t>(gb % nb)].w_off) * elem_;
  }

  // Packed elements of a channel block of nv vectors.
  std::int64_t block_elements(int nv) const {
    return saturating_mul(saturating_mul(taps_, kpad_), nv * lanes_);
  }

  // When the filter is not kept, blocks are packed into buffer slots the engine owns, one per block being
  // worked on at a time (one per thread, never more than there are blocks), each reused block after block.
  // A slot has one buffer for the full-width blocks and one for a group's narrower last block: a buffer only
  // ever holds blocks of one shape, so whatever the packers leave unwritten (padding channels and lanes)
  // stays zero, as in the packed filter, and a block packs to the same values and flags in both.
  // A slot holds a span of blocks (GemmConfig::pack_span): pack_span full-width buffers, one per place in
  // the span, then the narrow one.
  std::int64_t own_slots() const { return std::min<std::int64_t>(threads_, span_count()); }
  std::int64_t own_blocks_bytes() const {
    return saturating_mul(
        own_slots(),
        saturating_add(saturating_mul(config_.pack_span, own_block_bytes(false)), own_block_bytes(true)));
  }
  // Spans of pack_span consecutive blocks of one group (the group's last span may be shorter): span u
  // covers blocks [first, first + count).
  std::int64_t spans_per_group() const {
    return ceil_div(ceil_div(p_.Cin_g, std::int64_t{config_.nv} * lanes_), std::int64_t{config_.pack_span});
  }
  std::int64_t span_count() const { return saturating_mul(p_.G, spans_per_group()); }
  std::pair<std::int64_t, std::int64_t> span_blocks(std::int64_t u) const {
    const std::int64_t nb = static_cast<std::int64_t>(blocks_.size()), k = u % spans_per_group();
    return {u / spans_per_group() * nb + k * config_.pack_span,
            std::min<std::int64_t>(config_.pack_span, nb - k * config_.pack_span)};
  }
  bool narrow(std::int64_t gb) const {
    const std::int64_t nb = static_cast<std::int64_t>(blocks_.size());
    return gb % nb == nb - 1 && p_.Cin_g % (config_.nv * lanes_) != 0;
  }
  std::int64_t own_block_bytes(bool narrow) const {
    const std::int64_t width = config_.nv * lanes_;
    // A group's blocks: Cin_g / width full ones, then a narrow one for the rest (each buffer only if used).
    const int nv = static_cast<int>(narrow              ? ceil_div(p_.Cin_g % width, lanes_)
                                    : p_.Cin_g >= width ? config_.nv
                                                        : 0);
    return saturating_mul(block_elements(nv), elem_);
  }
  void allocate_own_blocks() {
    if (!own_blocks_.empty()) return;
    const auto per_slot = static_cast<std::size_t>(config_.pack_span) + 1;
    std::vector<AlignedPtr> blocks(per_slot * static_cast<std::size_t>(own_slots()));
    for (std::size_t i = 0; i < blocks.size(); ++i)
      if (const std::int64_t bytes = own_block_bytes(i % per_slot == per_slot - 1); bytes > 0)
        blocks[i] = alloc_zeroed64(static_cast<std::size_t>(bytes), "a packed channel block");
    own_blocks_ = std::move(blocks);  // only once all are allocated: a refusal leaves none
  }

  // The tiles of a y row, all W phases in order, for one tile width limit: W phase pw's are tiles
  // [begin[pw], begin[pw + 1]), each the phase's pixels [j0, j0 + m), inside when every W tap of the phase
  // reaches dy for all of them (with AMX every tile: the halo stands in for pixels outside dy).
  struct RowTile {
    std::int64_t j0;
    int m;
    bool inside;
  };
  struct RowTiling {
    std::vector<RowTile> tiles;
    std::vector<std::size_t> begin;
    std::int64_t list_taps = 0;  // the most TapRefs a y row's lists take (RowTaps)
  };
  // Plane mode's (kd, kh) pairs in groups whose filter fits in L2 (one group in row mode).
  struct TapGroup {
    std::int64_t begin, end;  // ranks
    int d_phase, h_phase;     // the class of its pairs (-1: any, row mode)
    bool last;                // no later group of its class: a tile it writes first it writes once
  };
  // The row tiling for tiles of up to max_m pixels: the FMA kernels share a phase's pixels out evenly; AMX
  // tiles are of one width (the last may be narrower), as few as max_m allows: a tile costs the same for any
  // number of pixels up to 16 per row tile, and a change of width reloads the tile configuration (~300
  // cycles).
  RowTiling row_tiling(int max_m, bool amx) const {
    const Axis& W = ax_[2];
    RowTiling tiling;
    for (const AxisPhase& PW : W.phases) {
      tiling.begin.push_back(tiling.tiles.size());
      const std::int64_t nblk = ceil_div(PW.count, max_m), amx_m = nblk > 0 ? ceil_div(PW.count, nblk) : 0;
      // The phase's tiles with a list of their own: those not inside, and one inside.
      std::int64_t lists = 0;
      bool any_inside = false;
      for (std::int64_t k = 0; k < nblk; ++k) {
        const auto [j0, m] =
            amx ? std::pair{k * amx_m, std::min(amx_m, PW.count - k * amx_m)} : even_part(PW.count, nblk, k);
        const bool inside = amx || W.covers(PW, j0, m);
        tiling.tiles.push_back({j0, static_cast<int>(m), inside});
        lists += inside && any_inside ? 0 : 1;
        any_inside = any_inside || inside;
      }
      // A list holds at most a TapRef per W tap of each (kd, kh) pair.
      const std::int64_t per_list = saturating_mul(
          p_.kernel[0] * p_.kernel[1], std::max<std::int64_t>(1, static_cast<std::int64_t>(PW.taps.size())));
      tiling.list_taps = saturating_add(tiling.list_taps, saturating_mul(lists, per_list));
    }
    tiling.begin.push_back(tiling.tiles.size());
    return tiling;
  }

  // Plane mode summing in an fp32 channel-last y: a flag per tile of a task's y rows (see run_task).
  std::int64_t written_flags() const {
    const bool in_y = config_.plane_mode && p_.y_dtype == DType::f32 && p_.y_strides[1] == 1;
    return in_y ? saturating_mul(config_.planes_per_task * p_.y_size[1], row_tiles_) : 0;
  }

  // The tap lists of one y row's tiles for one tap group (row_taps): each tile's own, but a W phase's inside
  // tiles share one. Their dy offsets count from each tile's first dy pixel and their widths to the tile's
  // end (kToTileEnd), so the lists of one row serve every row of the same key: the same filter block,
  // tiling and group, and the same (kd, kh) pairs inside dy.
  struct RowKey {
    const char* wblock;
    const RowTiling* tiling;
    const TapGroup* group;
    std::int64_t rd, d_first, d_end, rh, h_first, h_end;
    bool operator==(const RowKey&) const = default;
  };
  struct TileList {
    std::int64_t first, count;  // of RowTaps::taps
  };
  struct RowTaps {
    std::optional<RowKey> key;  // of the lists held, if any
    std::unique_ptr<TapRef[]> taps;
    std::vector<TileList> lists;  // per tile of the tiling
  };
  // Rows of different (D phase, H phase) classes or blocks take turns (stride 2, blocks_inner): each keeps
  // its lists in a slot of its own where there are enough.
  static constexpr std::size_t kRowSlots = 4;

  // Per-thread buffers of run_task.
  struct TaskScratch {
    explicit TaskScratch(const GemmEngine& e)
        : taps(e.config_.flat ? static_cast<std::size_t>(e.taps_) : 0),
          tile(static_cast<std::size_t>(e.tile_floats_ + 16)),
          written(static_cast<std::size_t>(e.written_flags())),
          reached(e.flat_regions_.size()) {
      if (e.config_.flat) return;
      for (RowTaps& r : rows) {
        r.taps.reset(new TapRef[static_cast<std::size_t>(e.row_list_taps_)]);
        r.lists.resize(static_cast<std::size_t>(e.row_tiles_));
      }
    }
    std::vector<TapRef> taps;  // flat planes' list
    std::vector<float> tile;
    std::vector<unsigned char> written;  // plane mode, in y: per tile, whether a tap group has written it
    std::vector<unsigned char> reached;  // flat planes: per region, whether any tap reaches it
    std::array<RowTaps, kRowSlots> rows;
  };

  // Block layout: fp32 [tap][kpad][nv*lanes]; bf16 [tap][kpad/2][nv*lanes][2]. Padding stays zero (the
  // buffer is zeroed once); only real channels are written.
  // Returns whether a packed bf16 value is tiny (tiny_bf16) or, for AMX, not finite (AMX tiles multiply
  // the zero pixels beside dy rows too, and 0 x inf must not enter a sum).
  template <class Get, class T>
  bool pack_block(const Get& get, std::int64_t g, const Block& b, T* dst) const {
    const auto& s = p_.filter_strides;
    const std::int64_t cbw = b.nv * lanes_, valid = std::min(cbw, p_.Cin_g - b.ci0);
    const std::int64_t tap_step = kpad_ * cbw;  // elements per tap in both layouts
    // Each (co, tap) writes one contiguous run of channels; the source of one co stays in L1 meanwhile.
    const std::int64_t lane_step = bf16_ ? 2 : 1;
    bool tiny = false, nonfinite = false;
    for (std::int64_t co = 0; co < p_.Cout_g; ++co) {
      T* dst_co = dst + (bf16_ ? (co / 2 * cbw) * 2 + (co & 1) : co * cbw);
      const std::int64_t base = (g * p_.Cout_g + co) * s[0] + b.ci0 * s[1];
      for (std::size_t t = 0; t < tap_src_.size(); ++t) {
        T* out = dst_co + tap_pos(static_cast<std::int64_t>(t)) * tap_step;
        const std::int64_t src = base + tap_src_[t];
        for (std::int64_t c = 0; c < valid; ++c) {
          const float v = get(src + c * s[1]);
          nonfinite |= !(std::fabs(v) <= std::numeric_limits<float>::max());
          put(out, c * lane_step, v);
        }
      }
      // The pairs of (co & ~1, co | 1) just written, while they are in L1: zero padding is not tiny.
      if constexpr (std::is_same_v<T, std::uint16_t>)
        if ((co & 1) || co + 1 == p_.Cout_g)
          for (std::int64_t t = 0; t < taps_; ++t)
            tiny |= ks_.any_tiny_bf16(dst + (co / 2 * cbw) * 2 + t * tap_step, 2 * cbw);
    }
    return tiny || (config_.amx && nonfinite);
  }

  // pack_block for split inputs (GemmConfig::split), for consecutive blocks of group g (one, or a span of
  // them where input channels are contiguous: GemmConfig::pack_span) into dsts: per tap and chunk of 32
  // output channels, the pairs (2 p, 2 p + 1) of the chunk's his for each of the block's channels, then those
  // of its los. special[j]: whether a value of block j is tiny or not finite (the call then runs the exact
  // fallback). Values are widened by vector kernels where the reader allows: per tap's run of contiguous
  // input channels (the span's blocks' runs one after another), or per output channel its dense NCDHW
  // [ci][tap] slab; otherwise read one by one.
  template <class Get>
  void pack_split_blocks(const Get& get, const void* filter, std::int64_t g, std::span<const Block> blocks,
                         void* const* dsts, unsigned char* special) const {
    const auto& s = p_.filter_strides;
    const Block& first = blocks.front();
    const std::int64_t width = std::int64_t{config_.nv} * lanes_,
                       first_valid = std::min<std::int64_t>(first.nv * lanes_, p_.Cin_g - first.ci0),
                       span_valid =
                           std::min(blocks.back().ci0 + blocks.back().nv * lanes_, p_.Cin_g) - first.ci0;
    const bool widens = w_reader_.widens(ks_), by_run = widens && s[1] == 1,
               by_slab = widens && !by_run && blocks.size() == 1 && dense_ncdhw_filter(first_valid);
    std::vector<float> slabs(static_cast<std::size_t>(by_slab ? 2 * first_valid * taps_ : 0));
    // Runs of the pair's two output channels, width apart (zero past a block's valid channels and for a
    // missing odd one), then their his and los.
    std::vector<float> runs(static_cast<std::size_t>(2 * width), 0.0f);
    std::vector<std::uint16_t> parts(static_cast<std::size_t>(4 * width));
    std::uint16_t* const hi = parts.data();
    std::uint16_t* const lo = hi + 2 * width;
    const bool prefetch = by_run || by_slab;  // runs prefetch_channel knows
    for (std::int64_t co = 0; co < kPrefetchChannels && prefetch; ++co)
      prefetch_channel(filter, g, first, co, span_valid);
    for (std::int64_t co = 0; co < p_.Cout_g; co += 2) {
      for (std::int64_t c = co + kPrefetchChannels; c < co + kPrefetchChannels + 2 && prefetch; ++c)
        prefetch_channel(filter, g, first, c, span_valid);
      const std::int64_t channels = std::min<std::int64_t>(2, p_.Cout_g - co);
      if (channels == 1) std::fill(runs.begin() + width, runs.end(), 0.0f);  // an odd Cout_g's missing one
      if (by_slab)
        for (std::int64_t e = 0; e < channels; ++e)
          w_reader_.widen(ks_, filter, (g * p_.Cout_g + co + e) * s[0] + first.ci0 * s[1],
                          first_valid * taps_, slabs.data() + e * first_valid * taps_);
      for (std::int64_t t = 0; t < taps_; ++t) {
        for (std::size_t j = 0; j < blocks.size(); ++j) {
          const Block& b = blocks[j];
          const std::int64_t cbw = b.nv * lanes_, valid = std::min(cbw, p_.Cin_g - b.ci0);
          for (std::int64_t e = 0; e < channels; ++e) {
            float* run = runs.data() + e * width;
            if (valid < width) std::fill(run + valid, run + width, 0.0f);  // after a wider block's values
            const std::int64_t src =
                (g * p_.Cout_g + co + e) * s[0] + b.ci0 * s[1] + tap_src_[static_cast<std::size_t>(t)];
            if (by_run) {
              w_reader_.widen(ks_, filter, src, valid, run);
            } else if (by_slab) {
              const float* slab = slabs.data() + e * valid * taps_ + t;
              for (std::int64_t c = 0; c < valid; ++c) run[c] = slab[c * taps_];
            } else {
              for (std::int64_t c = 0; c < valid; ++c) run[c] = get(src + c * s[1]);
            }
          }
          special[j] |= ks_.split_bf16(runs.data(), 2 * width, hi, lo);
          std::uint16_t* out = static_cast<std::uint16_t*>(dsts[j]) + tap_pos(t) * kpad_ * cbw +
                               (co / 32 * 64 + co % 32) * cbw;   // the pair's row of his
          ks_.interleave_bf16(hi, hi + width, out, cbw, false);  // split_bf16 judged the values
          ks_.interleave_bf16(lo, lo + width, out + 32 * cbw, cbw, false);
        }
      }
    }
  }

  // pack_block for the fp32 kernels with a filter the reader widens run by run (Reader::widens: fp32, bf16,
  // fp16, 8-bit): per tap a widened run when input channels are contiguous; for a dense NCDHW filter, per
  // output channel its [ci][tap] run (widened first unless fp32) transposed to [tap][ci] by a vector kernel,
  // then copied to the taps' packed places; a filter with contiguous output channels transposed tap by tap
  // (fp32 and bf16 in place, other types widened row by row first). Returns false, packing nothing, for other
  // layouts.
  bool pack_f32_block(const void* filter, std::int64_t g, const Block& b, float* dst) const {
    const auto& s = p_.filter_strides;
    const std::int64_t cbw = b.nv * lanes_, valid = std::min(cbw, p_.Cin_g - b.ci0), tap_step = kpad_ * cbw;
    const bool ncdhw = dense_ncdhw_filter(valid) && ks_.store_transposed;
    // fp32 read in place only without HF32 rounding (bf16 values are unchanged by it).
    const bool f32 = p_.filter_dtype == DType::f32 && p_.input_rounding == InputRounding::none,
               bf16 = p_.filter_dtype == DType::bf16;
    // Output channels contiguous (DHWCN): per tap, the [ci][co] matrix is the packed [co][ci] transposed.
    const bool cout_contiguous = s[0] == 1 && ks_.store_transposed;
    if (s[1] != 1 && !ncdhw && !cout_contiguous) return false;
    if (s[1] != 1 && !ncdhw) {
      const bool in_place = f32 || bf16;
      std::vector<float> rows(in_place ? 0 : static_cast<std::size_t>(valid * p_.Cout_g));
      for (std::int64_t t = 0; t < taps_; ++t) {
        const std::int64_t src = g * p_.Cout_g + b.ci0 * s[1] + tap_src_[static_cast<std::size_t>(t)];
        float* to = dst + tap_pos(t) * tap_step;
        if (in_place) {
          ks_.store_transposed(static_cast<const char*>(filter) + src * (bf16 ? 2 : 4), bf16, s[1], valid,
                               p_.Cout_g, to, StoreType::f32, cbw, false);
          continue;
        }
        for (std::int64_t c = 0; c < valid; ++c)
          w_reader_.widen(ks_, filter, src + c * s[1], p_.Cout_g, rows.data() + c * p_.Cout_g);
        ks_.store_transposed(rows.data(), false, p_.Cout_g, valid, p_.Cout_g, to, StoreType::f32, cbw, false);
      }
      return true;
    }
    std::vector<float> units(ncdhw && s[1] != 1 && !f32 ? static_cast<std::size_t>(valid * taps_) : 0);
    std::vector<float> transposed(ncdhw && s[1] != 1 ? static_cast<std::size_t>(taps_ * cbw) : 0);
    for (std::int64_t co = 0; co < kPrefetchChannels; ++co) prefetch_channel(filter, g, b, co, valid);
    for (std::int64_t co = 0; co < p_.Cout_g; ++co) {
      prefetch_channel(filter, g, b, co + kPrefetchChannels, valid);
      const std::int64_t src = (g * p_.Cout_g + co) * s[0] + b.ci0 * s[1];
      float* dst_co = dst + co * cbw;
      if (s[1] == 1) {
        for (std::int64_t t = 0; t < taps_; ++t)
          w_reader_.widen(ks_, filter, src + tap_src_[static_cast<std::size_t>(t)], valid,
                          dst_co + tap_pos(t) * tap_step);
        continue;
      }
      const float* run = static_cast<const float*>(filter) + src;
      if (!f32) {
        w_reader_.widen(ks_, filter, src, valid * taps_, units.data());
        run = units.data();
      }
      ks_.store_transposed(run, false, taps_, valid, taps_, transposed.data(), StoreType::f32, cbw, false);
      for (std::int64_t t = 0; t < taps_; ++t)
        std::memcpy(dst_co + tap_pos(t) * tap_step, transposed.data() + t * cbw,
                    static_cast<std::size_t>(valid) * 4);
    }
    return true;
  }

  // Requests output channel co's values of block b (group g) for the packers, which move them channel by
  // channel: one run of `valid` input channels per tap where they are contiguous, else (a dense NCDHW
  // filter) the block's [ci][tap] run. Channels lie a filter row apart, too far for the hardware
  // prefetchers, so the packers request the one kPrefetchChannels on while they move one. Always inlined:
  // GCC deems a function of prefetches alone free of effects and drops its calls.
  static constexpr std::int64_t kPrefetchChannels = 4;
  __attribute__((always_inline)) void prefetch_channel(const void* filter, std::int64_t g, const Block& b,
                                                       std::int64_t co, std::int64_t valid) const {
    if (co >= p_.Cout_g) return;
    const auto& s = p_.filter_strides;
    const auto esize = static_cast<std::int64_t>(dtype_size(p_.filter_dtype));
    const char* at = static_cast<const char*>(filter) + ((g * p_.Cout_g + co) * s[0] + b.ci0 * s[1]) * esize;
    if (s[1] != 1) {
      prefetch_bytes(at, valid * taps_ * esize);
      return;
    }
    for (std::int64_t t = 0; t < taps_; ++t)
      prefetch_bytes(at + tap_src_[static_cast<std::size_t>(t)] * esize, valid * esize);
  }

  // Whether the filter is dense NCDHW (taps contiguous, input channels one kernel volume apart) with a
  // block's [ci][tap] run small enough for the transposing packers' buffers.
  bool dense_ncdhw_filter(std::int64_t valid) const {
    const auto& s = p_.filter_strides;
    return s[4] == 1 && s[3] == p_.kernel[2] && s[2] == p_.kernel[1] * p_.kernel[2] && s[1] == taps_ &&
           valid * taps_ <= (std::int64_t{1} << 16);
  }

  // Whether n packed bf16 values hold one the block's kernels cannot take: tiny (tiny_bf16) or, for AMX,
  // not finite.
  bool special_bf16(const std::uint16_t* p, std::int64_t n) const {
    return ks_.any_tiny_bf16(p, n) || (config_.amx && ks_.any_nonfinite_bf16(p, n));
  }

  // Two runs of n from p0 and p1 (p1 null: zeros) as bf16 channel pairs into out; whether a value is special
  // (special_bf16). One kernel pairs and judges them, 8-bit codes widened on the way; scanning each tap's
  // pairs after them took 4 % of HiFloat8 e's time.
  template <class Src>
  bool pair_runs(const Src* p0, const Src* p1, std::int64_t n, std::uint16_t* out) const {
    if constexpr (std::is_same_v<Src, std::uint16_t>)
      return ks_.interleave_bf16(p0, p1, out, n, config_.amx);
    else
      return ks_.widen8_pairs(p0, p1, *w_reader_.bf16_lut(), out, n, config_.amx);
  }

  // pack_bf16_block for a filter with contiguous input channels, for consecutive blocks of group g (one, or
  // a span: GemmConfig::pack_span) into dsts: per pair of output channels, each block's runs of every tap
  // paired into its places, block after block, so a pair's reads stay within the span's runs of its row.
  // special[j]: whether block j holds a special value.
  template <class Src>
  void pack_bf16_runs(const Src* filter, std::int64_t g, std::span<const Block> blocks, void* const* dsts,
                      unsigned char* special) const {
    const auto& s = p_.filter_strides;
    const Block& last = blocks.back();
    const std::int64_t span_valid = std::min(last.ci0 + last.nv * lanes_, p_.Cin_g) - blocks.front().ci0;
    for (std::int64_t co = 0; co < kPrefetchChannels; ++co)
      prefetch_channel(filter, g, blocks.front(), co, span_valid);
    for (std::int64_t co = 0; co < p_.Cout_g; co += 2) {
      for (std::int64_t c = co + kPrefetchChannels; c < co + kPrefetchChannels + 2; ++c)
        prefetch_channel(filter, g, blocks.front(), c, span_valid);
      const Src* src0 = filter + (g * p_.Cout_g + co) * s[0];
      const Src* src1 = co + 1 < p_.Cout_g ? src0 + s[0] : nullptr;
      for (std::size_t j = 0; j < blocks.size(); ++j) {
        const Block& b = blocks[j];
        const std::int64_t cbw = b.nv * lanes_, valid = std::min(cbw, p_.Cin_g - b.ci0);
        std::uint16_t* const dst_co = static_cast<std::uint16_t*>(dsts[j]) + co * cbw;
        for (std::int64_t t = 0; t < taps_; ++t) {
          const std::int64_t at = tap_src_[static_cast<std::size_t>(t)] + b.ci0;
          special[j] |=
              pair_runs(src0 + at, src1 ? src1 + at : nullptr, valid, dst_co + tap_pos(t) * kpad_ * cbw);
        }
      }
    }
  }

  // pack_block for a bf16 or 8-bit filter, moving bits with vector kernels: channel pairs interleaved
  // straight from the filter when its input channels are contiguous; otherwise, for an NCDHW filter (taps
  // dense, input channels T taps apart), each pair of output channels is interleaved into [ci][tap] units,
  // transposed to [tap][ci] and copied to the taps' packed places; for a DHWCN filter (output channels
  // contiguous) each tap's [ci][co] block is transposed in 32-bit units (pairs). 8-bit codes are first
  // widened to bf16 by table (exact), run by run. Same layout and result as pack_block.
  template <class Src>
  bool pack_bf16_block(const Src* filter, std::int64_t g, const Block& b, std::uint16_t* dst) const {
    const auto& s = p_.filter_strides;
    const std::int64_t cbw = b.nv * lanes_, valid = std::min(cbw, p_.Cin_g - b.ci0), tap_step = kpad_ * cbw;
    // Output channels contiguous (DHWCN): per tap, in the [ci][co] block (8-bit codes widened to bf16 first,
    // rows padded to an even length) each pair of output channels is one 32-bit unit, and the packed
    // [pair][ci] units are its transpose.
    if (s[0] == 1 && ks_.store_transposed) {
      const std::int64_t pairs = (p_.Cout_g + 1) / 2;
      std::vector<std::uint16_t> block(static_cast<std::size_t>(valid * pairs * 2), 0);
      for (std::int64_t t = 0; t < taps_; ++t) {
        const Src* src = filter + g * p_.Cout_g + b.ci0 * s[1] + tap_src_[static_cast<std::size_t>(t)];
        for (std::int64_t c = 0; c < valid; ++c) {
          std::uint16_t* row = block.data() + c * pairs * 2;
          if constexpr (std::is_same_v<Src, std::uint16_t>)
            std::memcpy(row, src + c * s[1], static_cast<std::size_t>(p_.Cout_g) * 2);
          else
            ks_.widen8(src + c * s[1], *w_reader_.bf16_lut(), row, p_.Cout_g);
        }
        ks_.store_transposed(block.data(), false, pairs, valid, pairs, dst + tap_pos(t) * tap_step,
                             StoreType::f32, cbw, false);
      }
      return special_bf16(dst, taps_ * tap_step);
    }
    const bool ncdhw = dense_ncdhw_filter(valid);
    // An NDHWC filter whose block holds all its input channels, taps dense: each output channel's taps
    // are one run, paired (and checked) in one call, then spread to the taps' packed places, rather than a
    // call per tap (suite f, 3 channels a tap, Xeon with AMX: bf16 0.96x the time, HiFloat8 0.98x).
    const bool one_run = s[1] == 1 && valid == p_.Cin_g && s[4] == valid && s[3] == p_.kernel[2] * s[4] &&
                         s[2] == p_.kernel[1] * s[3];
    if (s[1] == 1 && !one_run) {
      unsigned char special = 0;
      void* const out = dst;
      pack_bf16_runs(filter, g, {&b, 1}, &out, &special);
      return special != 0;
    }
    std::vector<float> units, transposed;
    if ((s[1] != 1 && ncdhw) || one_run) units.resize(static_cast<std::size_t>(valid * taps_));
    if (s[1] != 1 && ncdhw) transposed.resize(static_cast<std::size_t>(taps_ * cbw));
    bool special = false;
    const auto pairs = [&](const Src* p0, const Src* p1, std::int64_t n, std::uint16_t* out) {
      special |= pair_runs(p0, p1, n, out);
    };
    const bool prefetch = s[1] == 1 || ncdhw;  // runs prefetch_channel knows
    for (std::int64_t co = 0; co < kPrefetchChannels && prefetch; ++co)
      prefetch_channel(filter, g, b, co, valid);
    for (std::int64_t co = 0; co < p_.Cout_g; co += 2) {
      for (std::int64_t c = co + kPrefetchChannels; c < co + kPrefetchChannels + 2 && prefetch; ++c)
        prefetch_channel(filter, g, b, c, valid);
      const Src* src0 = filter + (g * p_.Cout_g + co) * s[0] + b.ci0 * s[1];
      const Src* src1 = co + 1 < p_.Cout_g ? src0 + s[0] : nullptr;
      std::uint16_t* dst_co = dst + co * cbw;  // pair co / 2: cbw units of two bf16
      if (one_run) {
        auto* const run = reinterpret_cast<std::uint16_t*>(units.data());
        pairs(src0, src1, valid * taps_, run);
        for (std::int64_t t = 0; t < taps_; ++t)
          std::memcpy(dst_co + tap_pos(t) * tap_step, run + 2 * t * valid,
                      static_cast<std::size_t>(valid) * 4);
      } else if (ncdhw) {
        pairs(src0, src1, valid * taps_, reinterpret_cast<std::uint16_t*>(units.data()));
        ks_.store_transposed(units.data(), false, taps_, valid, taps_, transposed.data(), StoreType::f32, cbw,
                             false);
        for (std::int64_t t = 0; t < taps_; ++t)
          std::memcpy(dst_co + tap_pos(t) * tap_step, transposed.data() + t * cbw,
                      static_cast<std::size_t>(valid) * 4);
      } else {
        const auto bits = [&](Src v) -> std::uint16_t {
          if constexpr (std::is_same_v<Src, std::uint16_t>)
            return v;
          else
            return w_reader_.bf16_lut()->values[v];
        };
        for (std::int64_t t = 0; t < taps_; ++t) {
          std::uint16_t* out = dst_co + tap_pos(t) * tap_step;
          const Src* at0 = src0 + tap_src_[static_cast<std::size_t>(t)];
          for (std::int64_t c = 0; c < valid; ++c) {
            out[2 * c] = bits(at0[c * s[1]]);
            out[2 * c + 1] = src1 ? bits(at0[s[0] + c * s[1]]) : 0;
          }
          special |= special_bf16(out, 2 * valid);
        }
      }
    }
    return special;
  }

  // Whether bf16 dy, read in place (channels contiguous), holds a tiny value (tiny_bf16).
  bool scan_dy_in_place(const void* dy) const {
    if (p_.dy_dtype != DType::bf16) return false;
    const auto& s = p_.dy_strides;
    const std::int64_t C = p_.G * p_.Cout_g, rows = p_.N * p_.dy_size[0] * p_.dy_size[1];
    std::vector<unsigned char> tiny(static_cast<std::size_t>(rows), 0);
    parallel_for(threads_, rows, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {
        const std::int64_t oh = r % p_.dy_size[1], od = r / p_.dy_size[1] % p_.dy_size[0],
                           n = r / p_.dy_size[1] / p_.dy_size[0];
        const auto* row = static_cast<const std::uint16_t*>(dy) + n * s[0] + od * s[2] + oh * s[3];
        bool any = false;
        if (s[4] == C) {
          any = ks_.any_tiny_bf16(row, p_.dy_size[2] * C);
        } else {
          for (std::int64_t ow = 0; ow < p_.dy_size[2] && !any; ++ow)
            any = ks_.any_tiny_bf16(row + ow * s[4], C);
        }
        tiny[static_cast<std::size_t>(r)] = any;
      }
    });
    return std::find(tiny.begin(), tiny.end(), 1) != tiny.end();
  }

  // Zeroes the halo pixels (AMX) of the converted dy row whose pixel 0 is at `row`.
  template <class T>
  void zero_halo(T* row) const {
    std::fill(row - config_.halo_lo * dy_w_, row, T{0});
    std::fill(row + p_.dy_size[2] * dy_w_, row + (p_.dy_size[2] + config_.halo_hi) * dy_w_, T{0});
  }
  // Zeroes the halo rows (flat planes) of the converted dy plane starting at `plane`.
  template <class T>
  void zero_halo_rows(T* plane) const {
    std::fill(plane, plane + config_.hhalo_lo * dy_h_, T{0});
    std::fill(plane + (config_.hhalo_lo + p_.dy_size[1]) * dy_h_, plane + dy_d_, T{0});
  }

  // dy into the workspace as [n][g][od][oh][ow][kpad] in the compute type, padding channels with zero (and,
  // for AMX, each row with halo pixels), a plane per task (convert_dy_plane). Returns whether bf16 dy holds a
  // tiny value (tiny_bf16), or a split value is special (convert_dy_split_plane).
  template <class T>
  bool convert_dy(const void* dy, T* out) const {
    std::vector<unsigned char> tiny(static_cast<std::size_t>(p_.N * p_.G * p_.dy_size[0]), 0);
    parallel_for(threads_, p_.N * p_.G * p_.dy_size[0], [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r)
        tiny[static_cast<std::size_t>(r)] = convert_dy_plane(dy, r, out + r * dy_d_);
    });
    return std::find(tiny.begin(), tiny.end(), 1) != tiny.end();
  }

  // dy plane r (r = (n * G + g) * Do + od) into `plane` (dy_d_ elements), as convert_dy lays it out. Returns
  // whether it holds a tiny bf16 value (scanned as it is written).
  template <class T>
  bool convert_dy_plane(const void* dy, std::int64_t r, T* plane) const {
    if constexpr (std::is_same_v<T, std::uint16_t>)
      if (config_.split) return convert_dy_split_plane(dy, r, plane);
    const auto& s = p_.dy_strides;
    const bool scan = std::is_same_v<T, std::uint16_t> && p_.dy_dtype == DType::bf16;
    const auto scan_plane = [&] {
      if constexpr (std::is_same_v<T, std::uint16_t>)
        if (scan) return ks_.any_tiny_bf16(plane, dy_d_);
      return false;
    };
    const std::int64_t od = r % p_.dy_size[0], g = r / p_.dy_size[0] % p_.G, n = r / p_.dy_size[0] / p_.G;
    zero_halo_rows(plane);
    // dy with contiguous channels, per pixel (or per row where its pixels follow one another unpadded): bf16
    // or 8-bit into bf16 pairs (a copy or table lookup), or anything the reader widens into fp32; padding
    // channels zeroed.
    const bool dy_8bit = dy_reader_.bf16_lut() != nullptr && ks_.widen8 != nullptr;
    const bool to_pairs = std::is_same_v<T, std::uint16_t> && (p_.dy_dtype == DType::bf16 || dy_8bit) &&
                          p_.input_rounding != InputRounding::fp16;
    const bool to_f32 = std::is_same_v<T, float> && dy_reader_.widens(ks_);
    if (s[1] == 1 && (to_pairs || to_f32)) {
      // bf16 copied by a kernel that reports tiny values on the way, so the plane is not read again to scan
      // it (5 % of suite shape i's time, 5.6 MiB of dy, went to scanning).
      const bool copy_scans = scan && ks_.copy_bf16 != nullptr;
      // count elements of dy from `at` on, into dst; whether a copied bf16 value is tiny.
      const auto convert_run = [&](std::int64_t at, std::int64_t count, T* dst) {
        if constexpr (std::is_same_v<T, float>) {
          dy_reader_.widen(ks_, dy, at, count, dst);
        } else if (dy_8bit) {
          ks_.widen8(static_cast<const std::uint8_t*>(dy) + at, *dy_reader_.bf16_lut(), dst, count);
        } else if (copy_scans) {
          return ks_.copy_bf16(static_cast<const std::uint16_t*>(dy) + at, count, dst);
        } else {
          std::memcpy(dst, static_cast<const std::uint16_t*>(dy) + at, static_cast<std::size_t>(count) * 2);
        }
        return false;
      };
      // A row whose pixels follow one another in dy converts as one run (with few channels, a call per pixel
      // cost more than the conversion): into place without padding channels; with them, for fewer than 16
      // channels, into a buffer whose pixels are then spread out (Xeon with AMX, channels_last c, 3 channels
      // padded to 4: HiFloat8 and FP8 0.90x the time, bf16 0.96x).
      const bool rows_follow = s[4] == p_.Cout_g;
      const bool whole_rows = rows_follow && kpad_ == p_.Cout_g;
      const bool spread_rows = rows_follow && kpad_ > p_.Cout_g && p_.Cout_g < 16;
      std::vector<T> converted(static_cast<std::size_t>(spread_rows ? p_.dy_size[2] * p_.Cout_g : 0));
      bool any = false;
      for (std::int64_t oh = 0; oh < p_.dy_size[1]; ++oh) {
        const std::int64_t at = n * s[0] + g * p_.Cout_g + od * s[2] + oh * s[3];
        T* row = plane + oh * dy_h_ + dy_origin_;
        if (whole_rows) {
          any |= convert_run(at, p_.dy_size[2] * p_.Cout_g, row);
        } else if (spread_rows) {
          any |= convert_run(at, p_.dy_size[2] * p_.Cout_g, converted.data());
          for (std::int64_t ow = 0; ow < p_.dy_size[2]; ++ow) {
            T* pixel = row + ow * kpad_;
            std::copy_n(converted.data() + ow * p_.Cout_g, p_.Cout_g, pixel);
            std::fill(pixel + p_.Cout_g, pixel + kpad_, T{0});
          }
        } else {
          for (std::int64_t ow = 0; ow < p_.dy_size[2]; ++ow) {
            T* pixel = row + ow * kpad_;
            any |= convert_run(at + ow * s[4], p_.Cout_g, pixel);
            std::fill(pixel + p_.Cout_g, pixel + kpad_, T{0});
          }
        }
        zero_halo(row);
      }
      return copy_scans ? any : scan_plane();
    }
    // dy with contiguous W (NCDHW), row by row (Cout_g x Wo) into channel-last form. Exact fp32 or bf16 with
    // unpadded channels is transposed in place, in 16 x 16 blocks (bf16 into bf16 by channel pairs, which
    // reports tiny values on the way). Other types the vector kernels bring to the compute type (fp16,
    // 8-bit, fp32 rounded to HF32; bf16 whose pairs are padded) are converted in blocks of channels (16, or
    // 16 pairs) x 256 pixels into a buffer, the pairs' padding channels as zero rows, and transposed from it.
    const bool in_place = ks_.store_transposed && dy_reader_.as_stored() && kpad_ == p_.Cout_g;
    const bool src_bf16 = p_.dy_dtype == DType::bf16;
    // Rows moved by bf16 channel pairs (transpose_bf16_pairs), whose tiny values it reports.
    const bool pairs =
        std::is_same_v<T, std::uint16_t> && ks_.transpose_bf16_pairs && (!in_place || src_bf16);
    const bool blocks =
        std::is_same_v<T, float> ? ks_.store_transposed && to_f32 : ks_.transpose_bf16_pairs && to_pairs;
    if (s[4] == 1 && (in_place || blocks)) {
      constexpr std::int64_t kRows = std::is_same_v<T, float> ? 16 : 32, kPixels = 256;
      alignas(64) T buf[kRows * kPixels];
      bool any = false;
      for (std::int64_t oh = 0; oh < p_.dy_size[1]; ++oh) {
        const std::int64_t at = n * s[0] + g * p_.Cout_g * s[1] + od * s[2] + oh * s[3];
        T* row = plane + oh * dy_h_ + dy_origin_;
        zero_halo(row);
        if (in_place) {
          if constexpr (std::is_same_v<T, std::uint16_t>) {
            if (pairs) {
              any |= ks_.transpose_bf16_pairs(static_cast<const std::uint16_t*>(dy) + at, s[1], p_.Cout_g,
                                              p_.dy_size[2], row, kpad_);
              continue;
            }
          }
          ks_.store_transposed(static_cast<const char*>(dy) + at * (src_bf16 ? 2 : 4), src_bf16, s[1],
                               p_.Cout_g, p_.dy_size[2], row, bf16_ ? StoreType::bf16 : StoreType::f32, kpad_,
                               false);
          continue;
        }
        for (std::int64_t w0 = 0; w0 < p_.dy_size[2]; w0 += kPixels) {
          const std::int64_t nw = std::min(kPixels, p_.dy_size[2] - w0);
          for (std::int64_t c0 = 0; c0 < kpad_; c0 += kRows) {
            const std::int64_t nc = std::min(kRows, kpad_ - c0);
            for (std::int64_t c = 0; c < nc; ++c) {
              T* dst = buf + c * kPixels;
              const std::int64_t co = c0 + c, src = at + co * s[1] + w0;
              if (co >= p_.Cout_g) {
                std::fill(dst, dst + nw, T{0});
              } else if constexpr (std::is_same_v<T, float>) {
                dy_reader_.widen(ks_, dy, src, nw, dst);
              } else if (dy_8bit) {
                ks_.widen8(static_cast<const std::uint8_t*>(dy) + src, *dy_reader_.bf16_lut(), dst, nw);
              } else {
                std::memcpy(dst, static_cast<const std::uint16_t*>(dy) + src,
                            static_cast<std::size_t>(nw) * 2);
              }
            }
            T* at_row = row + w0 * kpad_ + c0;
            if constexpr (std::is_same_v<T, float>)
              ks_.store_transposed(buf, false, kPixels, nc, nw, at_row, StoreType::f32, kpad_, false);
            else
              any |= ks_.transpose_bf16_pairs(buf, kPixels, nc, nw, at_row, kpad_);
          }
        }
      }
      return pairs && scan ? any : scan_plane();
    }
    dy_reader_.visit(dy, [&](auto get) {
      for (std::int64_t oh = 0; oh < p_.dy_size[1]; ++oh) {
        T* row = plane + oh * dy_h_ + dy_origin_;
        zero_halo(row);
        for (std::int64_t co = 0; co < kpad_; ++co) {
          if (co >= p_.Cout_g) {
            for (std::int64_t ow = 0; ow < p_.dy_size[2]; ++ow) put(row, ow * kpad_ + co, 0.0f);
            continue;
          }
          const std::int64_t base = n * s[0] + (g * p_.Cout_g + co) * s[1] + od * s[2] + oh * s[3];
          for (std::int64_t ow = 0; ow < p_.dy_size[2]; ++ow)
            put(row, ow * kpad_ + co, get(base + ow * s[4]));
        }
      }
    });
    return scan_plane();
  }

  // convert_dy_plane for split inputs (GemmConfig::split): per pixel and chunk of 32 output channels, their
  // his then their los (split_parts), from values widened per pixel (contiguous channels), per block of 16
  // channels x 256 pixels transposed to channel-last (contiguous W), or read one by one. Returns whether a
  // part is tiny or not finite (the call then runs the exact fallback).
  bool convert_dy_split_plane(const void* dy, std::int64_t r, std::uint16_t* plane) const {
    const auto& s = p_.dy_strides;
    const bool widens = dy_reader_.widens(ks_);
    const bool by_pixel = widens && s[1] == 1, by_block = widens && s[4] == 1 && ks_.store_transposed;
    constexpr std::int64_t kRows = 16, kPixels = 256;
    // Blocks of rows and their transposes, or one pixel's channels (a plane at a time: a window slides by
    // planes, so only what the plane's path uses).
    const bool blockwise = by_block && !by_pixel;
    std::vector<float> buf(static_cast<std::size_t>(blockwise ? 2 * kRows * kPixels : p_.Cout_g));
    float* const transposed = buf.data() + (blockwise ? kRows * kPixels : 0);
    const std::int64_t od = r % p_.dy_size[0], g = r / p_.dy_size[0] % p_.G, n = r / p_.dy_size[0] / p_.G;
    bool special = false;  // a value not finite or with a tiny part
    zero_halo_rows(plane);
    dy_reader_.visit(dy, [&](auto get) {
      for (std::int64_t oh = 0; oh < p_.dy_size[1]; ++oh) {
        const std::int64_t at = n * s[0] + g * p_.Cout_g * s[1] + od * s[2] + oh * s[3];
        std::uint16_t* row = plane + oh * dy_h_ + dy_origin_;
        zero_halo(row);
        if (p_.Cout_g % 32 != 0)  // the last chunk's padding channels
          for (std::int64_t ow = 0; ow < p_.dy_size[2]; ++ow)
            std::fill(row + ow * kpad_ + (kpad_ - 64), row + (ow + 1) * kpad_, std::uint16_t{0});
        if (blockwise) {
          for (std::int64_t w0 = 0; w0 < p_.dy_size[2]; w0 += kPixels) {
            const std::int64_t nw = std::min(kPixels, p_.dy_size[2] - w0);
            for (std::int64_t c0 = 0; c0 < p_.Cout_g; c0 += kRows) {
              const std::int64_t nc = std::min(kRows, p_.Cout_g - c0);
              for (std::int64_t c = 0; c < nc; ++c)
                dy_reader_.widen(ks_, dy, at + (c0 + c) * s[1] + w0, nw, buf.data() + c * kPixels);
              ks_.store_transposed(buf.data(), false, kPixels, nc, nw, transposed, StoreType::f32, kRows,
                                   false);
              for (std::int64_t w = 0; w < nw; ++w)
                special |= split_dy_run(transposed + w * kRows, c0, nc, row + (w0 + w) * kpad_);
            }
          }
          continue;
        }
        for (std::int64_t ow = 0; ow < p_.dy_size[2]; ++ow) {
          const std::int64_t px = at + ow * s[4];
          if (by_pixel)
            dy_reader_.widen(ks_, dy, px, p_.Cout_g, buf.data());
          else
            for (std::int64_t co = 0; co < p_.Cout_g; ++co)
              buf[static_cast<std::size_t>(co)] = get(px + co * s[1]);
          special |= split_dy_run(buf.data(), 0, p_.Cout_g, row + ow * kpad_);
        }
      }
    });
    return special;
  }

  // Channels [c0, c0 + n) of one converted dy pixel (split): hi and lo parts into their chunks' halves.
  // Whether a value is not finite or has a tiny part.
  bool split_dy_run(const float* values, std::int64_t c0, std::int64_t n, std::uint16_t* pixel) const {
    bool special = false;
    for (std::int64_t c = c0, end = c0 + n; c < end;) {
      const std::int64_t take = std::min(end - c, 32 - c % 32);
      std::uint16_t* const chunk = pixel + c / 32 * 64 + c % 32;
      special |= ks_.split_bf16(values + (c - c0), take, chunk, chunk + 32);
      c += take;
    }
    return special;
  }

  // One task, for one channel block: y planes [q0, q1) (q = n * Di + id) in plane mode, else row ih of plane
  // q0, every W phase. Tasks are numbered block by block (group, channel block), then by plane and row, so
  // a block's tasks are consecutive. tiny_dy: dy holds a bf16 value too small for vdpbf16ps. wblock: the
  // block's packed filter values.
  void run_task(std::int64_t t, const DyPlanes& dy, void* y, bool tiny_dy, TaskScratch& scratch,
                const char* wblock) const {
    if (config_.flat) {
      run_flat_task(t, dy, y, tiny_dy, scratch, wblock);
      return;
    }
    const std::int64_t nb = static_cast<std::int64_t>(blocks_.size()), gb = t / tasks_per_block_,
                       r = t % tasks_per_block_, g = gb / nb;
    const Axis &D = ax_[0], &H = ax_[1], &W = ax_[2];
    const std::int64_t ppt = config_.planes_per_task;
    const std::int64_t planes = p_.N * D.in;
    const std::int64_t q0 = config_.plane_mode ? r * ppt
                            : config_.d_inner  ? r % planes
                                               : r / H.in,
                       q1 = config_.plane_mode ? std::min(q0 + ppt, planes) : q0 + 1;
    const std::int64_t ih0 = config_.plane_mode ? 0
                             : config_.d_inner  ? r / planes
                                                : r % H.in,
                       ih1 = config_.plane_mode ? H.in : ih0 + 1;
    const Block& b = blocks_[static_cast<std::size_t>(gb % nb)];
    // bf16 pairs go through AMX or vdpbf16ps unless an input is small enough for them to flush something
    // (or, for AMX, the filter block is not finite).
    const bool exact = tiny_blocks_[static_cast<std::size_t>(gb)] || tiny_dy;
    if (exact && exact_fallback_) return;  // the fallback computes the call
    const bool amx = config_.amx && !exact;
    const TileFn(*fns_nv)[kMaxM + 1] = !bf16_ ? ks_.f32 : exact ? ks_.bf16_exact : ks_.bf16;
    float* tile = static_cast<float*>(align64(scratch.tile.data()));
    const std::int64_t cbw = b.nv * lanes_, tap_bytes = kpad_ * cbw * elem_,
                       steps = bf16_ ? kpad_ / 2 : kpad_;
    const TileFn* const fns = amx ? amx_tiles(b.nv) : fns_nv[b.nv];
    const RowTiling& tiling = amx ? amx_tiling_ : tilings_[static_cast<std::size_t>(b.nv)];
    const int valid = static_cast<int>(std::min<std::int64_t>(cbw, p_.Cin_g - b.ci0));
    const std::int64_t row_floats = W.in * cbw, plane_floats = (ih1 - ih0) * row_floats;
    const std::int64_t c0 = g * p_.Cin_g + b.ci0;  // the block's first channel of y
    // Row tiles of a full block write straight into an fp32 y with contiguous channels (the same values
    // store_tile would copy there).
    const bool y_direct = config_.y_direct && !amx && valid == cbw;
    // Non-temporal stores where the config allows them and a tile starts on a 64-byte line of y (then, by
    // the config's rule, every pixel of it does).
    const std::int64_t y_step = W.stride * p_.y_strides[4];
    // In plane mode such a block's tap groups accumulate in y itself rather than in a staging plane that is
    // then copied there: y starts as +0 and takes the same fp32 sums in the same order, so the same bits.
    const bool plane_direct =
        !amx && config_.plane_mode && p_.y_dtype == DType::f32 && p_.y_strides[1] == 1 && valid == cbw;
    // Whether any tap reaches y row ih of plane q; a row none reaches (a phase of a stride above the
    // kernel, or a border) is zero.
    const auto row_reached = [&](std::int64_t q, std::int64_t ih) {
      const std::int64_t id = q % D.in;
      return D.reaches(D.phases[static_cast<std::size_t>(D.phase_of(id))], D.j_of(id)) &&
             H.reaches(H.phases[static_cast<std::size_t>(H.phase_of(ih))], H.j_of(ih));
    };
    // In y, the first tap group that reaches a tile writes it (its sums start from +0, as in a zeroed plane)
    // and later ones add to it; tiles no tap reaches are zeroed at the end.
    unsigned char* written = scratch.written.data();
    if (plane_direct)
      std::fill(written, written + (q1 - q0) * H.in * row_tiles_, 0);
    else if (config_.plane_mode)
      std::fill(tile, tile + (q1 - q0) * plane_floats, 0.0f);

    // In plane mode the taps come in groups whose filter fits in L2, each reused across all planes.
    for (const TapGroup& group : tap_groups_) {
      for (std::int64_t q = q0; q < q1; ++q) {
        const std::int64_t n = q / D.in, id = q % D.in, jd = D.j_of(id), rd = D.phase_of(id);
        if (group.d_phase >= 0 && rd != group.d_phase) continue;
        const AxisPhase& PD = D.phases[static_cast<std::size_t>(rd)];
        const void* dy_ng = image_origin(dy, n, g);
        const auto [d_first, d_end] = D.valid_taps(PD, jd);
        for (std::int64_t ih = ih0; ih < ih1; ++ih) {
          const std::int64_t jh = H.j_of(ih), rh = H.phase_of(ih);
          if (group.h_phase >= 0 && rh != group.h_phase) continue;
          const AxisPhase& PH = H.phases[static_cast<std::size_t>(rh)];
          float* row = tile + (q - q0) * plane_floats + (ih - ih0) * row_floats;
          // Rows (and W phases) no tap reaches are written as zeros directly, here or (staged) at the store
          // below; in plane mode the tile is zeroed already. Here one channel block's task (taking turns row
          // by row, so that threads share the work) zeroes them for all the group's channels (longer runs
          // with contiguous channels: a row is one) and the other blocks' tasks skip them.
          const bool zeroes = !config_.plane_mode && !config_.staged && gb % nb == (q * H.in + ih) % nb;
          if (!config_.plane_mode && !row_reached(q, ih)) {
            if (zeroes) zero_y(W.in, p_.Cin_g, n, g * p_.Cin_g, id, ih, 0, 1, y);
            continue;
          }
          // plane_direct: the row's flags (none otherwise: written is empty)
          unsigned char* const row_written =
              plane_direct ? written + ((q - q0) * H.in + ih) * row_tiles_ : nullptr;
          const auto [h_first, h_end] = H.valid_taps(PH, jh);
          const std::size_t slot = static_cast<std::size_t>((rd * H.stride + rh) * nb + gb % nb) % kRowSlots;
          const RowTaps& lists =
              row_taps(scratch.rows[slot], {wblock, &tiling, &group, rd, d_first, d_end, rh, h_first, h_end},
                       jd, jh, amx, tap_bytes, steps);
          for (std::size_t pw = 0; pw < W.phases.size(); ++pw) {
            const AxisPhase& PW = W.phases[pw];
            if (PW.taps.empty() && !config_.plane_mode && !config_.staged) {
              if (zeroes && PW.count > 0)
                zero_y(PW.count, p_.Cin_g, n, g * p_.Cin_g, id, ih, PW.first, W.stride, y);
              continue;
            }
            // Shared W taps (phases of more than one): the phase's tiles by its tap count.
            const std::int64_t nt = static_cast<std::int64_t>(PW.taps.size());
            const TileFn* const phase_fns = config_.share_w && nt > 1 ? ks_.f32_shared_w[nt][b.nv] : fns;
            for (std::size_t i = tiling.begin[pw]; i < tiling.begin[pw + 1]; ++i) {
              const int m = tiling.tiles[i].m;
              const std::int64_t j0 = tiling.tiles[i].j0, iw0 = PW.first + W.stride * j0;
              const auto [first_tap, ntaps] = lists.lists[i];
              const TapRef* const taps = lists.taps.get() + first_tap;
              const void* const dy_tile = tile_dy(dy_ng, jd - dy.first_plane, jh, j0);
              if (plane_direct) {
                float* const at = static_cast<float*>(y) + y_at(n, c0, id, ih, iw0);
                unsigned char& written_tile = row_written[i];
                const bool first = written_tile == 0;
                // The tile's only write (no sum to read back) skips the caches as row tiles do.
                const bool uncached = config_.uncached_y && first && group.last &&
                                      reinterpret_cast<std::uintptr_t>(at) % 64 == 0;
                if (ntaps > 0)
                  phase_fns[m](TileArgs{dy_tile, dy_w_, dy_c_, taps, ntaps, at, y_step, !first, uncached});
                written_tile |= static_cast<unsigned char>(ntaps > 0);
              } else if (config_.plane_mode) {
                if (ntaps > 0)
                  phase_fns[m](TileArgs{dy_tile, dy_w_, dy_c_, taps, ntaps, row + iw0 * cbw, W.stride * cbw,
                                        true, false, config_.amx_pairs});
              } else if (config_.staged) {
                phase_fns[m](TileArgs{dy_tile, dy_w_, dy_c_, taps, ntaps, row + iw0 * cbw, W.stride * cbw,
                                      false, false, config_.amx_pairs, kStreamRowFilter});
              } else if (y_direct) {
                float* const at = static_cast<float*>(y) + y_at(n, c0, id, ih, iw0);
                const bool uncached = config_.uncached_y && reinterpret_cast<std::uintptr_t>(at) % 64 == 0;
                phase_fns[m](TileArgs{dy_tile, dy_w_, dy_c_, taps, ntaps, at, y_step, false, uncached});
              } else {
                phase_fns[m](TileArgs{dy_tile, dy_w_, dy_c_, taps, ntaps, tile, cbw, false, false,
                                      config_.amx_pairs, kStreamRowFilter});
                store_tile(tile, m, cbw, valid, n, c0, id, ih, iw0, W.stride, y);
              }
            }
          }
        }
      }
    }
    if (plane_direct)
      for (std::int64_t q = q0; q < q1; ++q)
        for (std::int64_t ih = ih0; ih < ih1; ++ih) {
          const unsigned char* const row_written = written + ((q - q0) * H.in + ih) * row_tiles_;
          for (std::size_t pw = 0; pw < W.phases.size(); ++pw)
            for (std::size_t i = tiling.begin[pw]; i < tiling.begin[pw + 1]; ++i)
              if (!row_written[i]) {
                const RowTile& rt = tiling.tiles[i];
                zero_y(rt.m, cbw, q / D.in, c0, q % D.in, ih, W.phases[pw].first + W.stride * rt.j0, W.stride,
                       y);
              }
        }
    if (config_.staged && !plane_direct)
      for (std::int64_t q = q0; q < q1; ++q)
        for (std::int64_t ih = ih0; ih < ih1; ++ih) {
          if (config_.plane_mode || row_reached(q, ih))
            store_tile(tile + (q - q0) * plane_floats + (ih - ih0) * row_floats, W.in, cbw, valid, q / D.in,
                       c0, q % D.in, ih, 0, 1, y);
          else
            zero_y(W.in, valid, q / D.in, c0, q % D.in, ih, 0, 1, y);
        }
    // This thread's non-temporal stores (whichever path made them), before the threads join.
    if (config_.uncached_y) _mm_sfence();
  }

  // One flat task: y plane q = t % tasks_per_block_ of one channel block. Each (H phase, W phase) pair's
  // pixels (jh, jw), jw < flat_width_, form region pixel jh * flat_width_ + jw, which reads dy at that many
  // converted pixels past the tap's offset: one tap list serves the whole region, and AMX tiles run over it
  // in steps of up to kAmxMaxM pixels. Blocks that need the exact kernels run them row by row (W borders
  // by lo/hi) into the same places. The region pixels with jw < the phase's count are stored: into a y
  // with contiguous channels after each tile, else row by row after the plane.
  void run_flat_task(std::int64_t t, const DyPlanes& dy, void* y, bool tiny_dy, TaskScratch& scratch,
                     const char* wblock) const {
    const std::int64_t nb = static_cast<std::int64_t>(blocks_.size()), gb = t / tasks_per_block_,
                       q = t % tasks_per_block_, g = gb / nb;
    const Axis &D = ax_[0], &H = ax_[1], &W = ax_[2];
    const Block& b = blocks_[static_cast<std::size_t>(gb % nb)];
    const bool exact = tiny_blocks_[static_cast<std::size_t>(gb)] || tiny_dy;
    if (exact && exact_fallback_) return;  // the fallback computes the call
    TapRef* taps = scratch.taps.data();
    float* staging = static_cast<float*>(align64(scratch.tile.data()));
    const std::int64_t cbw = b.nv * lanes_, tap_bytes = kpad_ * cbw * elem_, steps = kpad_ / 2;
    const int valid = static_cast<int>(std::min<std::int64_t>(cbw, p_.Cin_g - b.ci0));
    const std::int64_t n = q / D.in, id = q % D.in, jd = D.j_of(id);
    const AxisPhase& PD = D.phases[static_cast<std::size_t>(D.phase_of(id))];
    const void* dy_ng = image_origin(dy, n, g);
    const std::int64_t dh_taps = p_.kernel[0] * p_.kernel[1];
    const std::int64_t c0 = g * p_.Cin_g + b.ci0;  // the block's first channel of y
    const bool tile_stores = p_.y_strides[1] == 1 && !exact;
    // Regions no tap reaches (a phase of a stride above the kernel, or a plane beyond dy's reach) are not
    // computed: their y pixels are written as zeros.
    unsigned char* reached = scratch.reached.data();
    const bool d_reached =
        std::any_of(PD.taps.begin(), PD.taps.end(), [&](const AxisTap& td) { return D.valid(td, jd); });
    std::size_t region = 0;
    for (const AxisPhase& PH : H.phases)
      for (const AxisPhase& PW : W.phases) {
        float* reg = staging + flat_regions_[region] * cbw;
        reached[region++] = d_reached && PH.count > 0 && PW.count > 0 && !PH.taps.empty() && !PW.taps.empty();
        if (!reached[region - 1]) continue;
        if (exact) {
          const TileFn* fns = ks_.bf16_exact[b.nv];
          const int max_m = config_.max_m[b.nv];
          const std::int64_t nblk = ceil_div(PW.count, max_m);
          for (std::int64_t jh = 0; jh < PH.count; ++jh)
            for (std::int64_t k = 0; k < nblk; ++k) {
              const auto [j0, m] = even_part(PW.count, nblk, k);
              const std::int64_t ntaps =
                  build_taps(PD, PH, PW, jd, jh, 0, dh_taps, j0, m, false, wblock, tap_bytes, steps, taps);
              fns[m](TileArgs{tile_dy(dy_ng, jd - dy.first_plane, jh, j0), dy_w_, dy_c_, taps, ntaps,
                              reg + (jh * flat_width_ + j0) * cbw, cbw, false});
            }
          continue;
        }
        // Every (kd, kh) inside dy for this plane, every kh (halo rows), the W taps as build_taps orders
        // them.
        std::int64_t ntaps = 0;
        for (const AxisTap& td : PD.taps) {
          if (!D.valid(td, jd)) continue;
          for (const AxisTap& th : PH.taps) {
            const std::int64_t tap_dh = (td.k * p_.kernel[1] + th.k) * p_.kernel[2];
            const std::int64_t off_dh = (jd - dy.first_plane + td.off) * dy_d_ + th.off * dy_h_;
            const auto& wt = PW.taps;
            if (wt.size() > 1 && config_.fuse_w) {
              taps[ntaps++] = {
                  off_dh + wt.back().off * dy_w_,
                  wblock + (tap_dh + tap_pos_w_[static_cast<std::size_t>(wt.back().k)]) * tap_bytes,
                  static_cast<std::int64_t>(wt.size()) * steps, 0, 0};
              continue;
            }
            for (auto it = wt.rbegin(); it != wt.rend(); ++it)
              taps[ntaps++] = {off_dh + it->off * dy_w_,
                               wblock + (tap_dh + tap_pos_w_[static_cast<std::size_t>(it->k)]) * tap_bytes,
                               steps, 0, 0};
          }
        }
        const TileFn* fns = amx_tiles(b.nv);
        const std::int64_t pixels = PH.count * flat_width_,
                           width = ceil_div(pixels, ceil_div(pixels, kAmxMaxM));
        for (std::int64_t v0 = 0; v0 < pixels; v0 += width) {
          const std::int64_t m = std::min(width, pixels - v0);
          if (v0 > 0)
            for (std::int64_t i = 0; i < ntaps; ++i) taps[i].dy_off += width * dy_w_;
          float* const out = tile_stores ? staging : reg + v0 * cbw;
          fns[m](TileArgs{dy_ng, dy_w_, dy_c_, taps, ntaps, out, cbw, false, false, config_.amx_pairs});
          // Into a y with contiguous channels, the tile's y pixels are stored at once, from L1 (row by row
          // after the plane, the staging plane comes back from L2).
          if (tile_stores)
            for (std::int64_t jh = v0 / flat_width_; jh * flat_width_ < v0 + m; ++jh) {
              const std::int64_t j0 = std::max(v0 - jh * flat_width_, std::int64_t{0}),
                                 j1 = std::min(v0 + m - jh * flat_width_, PW.count);
              if (j0 < j1)
                store_tile(out + (jh * flat_width_ + j0 - v0) * cbw, j1 - j0, cbw, valid, n, c0, id,
                           PH.first + H.stride * jh, PW.first + W.stride * j0, W.stride, y);
            }
        }
      }
    // Store y row by row: each W phase's pixels (every sw-th of the row) straight from its region into y
    // with channels contiguous; into a channel-first y the row is first gathered from the regions, so it is
    // stored channel by channel in runs of whole rows.
    float* row = staging + flat_pixels_ * cbw;
    const std::int64_t sw = W.stride;
    for (std::int64_t ih = 0; ih < H.in; ++ih) {
      const std::int64_t ph = H.phase_of(ih), jh = H.j_of(ih);
      const auto at = [&](std::int64_t pw) {
        return staging + (flat_regions_[static_cast<std::size_t>(ph * sw + pw)] + jh * flat_width_) * cbw;
      };
      const bool gather = sw > 1 && p_.y_strides[1] != 1;
      for (std::int64_t pw = 0; pw < sw; ++pw) {
        const AxisPhase& PW = W.phases[static_cast<std::size_t>(pw)];
        const bool zero = !reached[static_cast<std::size_t>(ph * sw + pw)];
        if (!gather) {
          // One of the group's blocks (taking turns by row, so every thread gets a share) zeroes the pixels
          // for all the group's channels, in longer runs; the others skip them.
          if (zero && (q * H.in + ih) % nb == gb % nb)
            zero_y(PW.count, p_.Cin_g, n, g * p_.Cin_g, id, ih, PW.first, sw, y);
          else if (!zero && !tile_stores)
            store_tile(at(pw), PW.count, cbw, valid, n, c0, id, ih, PW.first, sw, y);
          continue;
        }
        const float* src = at(pw);
        for (std::int64_t jw = 0; jw < PW.count; ++jw) {
          float* to = row + (PW.first + sw * jw) * cbw;
          if (zero)
            std::fill(to, to + cbw, 0.0f);
          else
            std::memcpy(to, src + jw * cbw, static_cast<std::size_t>(cbw) * 4);
        }
      }
      if (gather) store_tile(row, W.in, cbw, valid, n, c0, id, ih, 0, 1, y);
    }
  }

  // The tap lists of the tiles of y row (jd, jh) of the key's classes for its group: those the slot holds
  // when they are the key's, else built there.
  const RowTaps& row_taps(RowTaps& slot, const RowKey& key, std::int64_t jd, std::int64_t jh, bool halo,
                          std::int64_t tap_bytes, std::int64_t steps) const {
    if (slot.key == key) return slot;
    slot.key = key;
    const AxisPhase &PD = ax_[0].phases[static_cast<std::size_t>(key.rd)],
                    &PH = ax_[1].phases[static_cast<std::size_t>(key.rh)];
    const RowTiling& tiling = *key.tiling;
    std::int64_t used = 0;
    for (std::size_t pw = 0; pw < ax_[2].phases.size(); ++pw) {
      std::optional<TileList> inside;  // the list the phase's inside tiles share, once built
      for (std::size_t i = tiling.begin[pw]; i < tiling.begin[pw + 1]; ++i) {
        const RowTile& rt = tiling.tiles[i];
        if (rt.inside && inside) {
          slot.lists[i] = *inside;
          continue;
        }
        const std::int64_t n =
            build_taps(PD, PH, ax_[2].phases[pw], jd, jh, key.group->begin, key.group->end, rt.j0, rt.m, halo,
                       key.wblock, tap_bytes, steps, slot.taps.get() + used);
        slot.lists[i] = {used, n};
        used += n;
        if (rt.inside) inside = slot.lists[i];
      }
    }
    return slot;
  }

  // The taps of the tile of m pixels from j0 of W phase PW in y row (jd of PD, jh of PH), for the (kd, kh)
  // pairs ranked in [dh_begin, dh_end) (dh_rank_): (kd, kh) in order, then W taps in packed order. Returns
  // their number. Their dy offsets are from the tile's first dy pixel, tile_dy(jd, jh, j0), and a tap that
  // reaches the tile's last pixel reaches to kToTileEnd.
  // halo: dy rows have zero pixels beside them (AMX), so every W tap covers all m pixels.
  std::int64_t build_taps(const AxisPhase& PD, const AxisPhase& PH, const AxisPhase& PW, std::int64_t jd,
                          std::int64_t jh, std::int64_t dh_begin, std::int64_t dh_end, std::int64_t j0,
                          std::int64_t m, bool halo, const char* wblock, std::int64_t tap_bytes,
                          std::int64_t steps, TapRef* taps) const {
    const Axis &D = ax_[0], &H = ax_[1], &W = ax_[2];
    std::int64_t ntaps = 0;
    for (const AxisTap& td : PD.taps) {
      if (!D.valid(td, jd)) continue;
      for (const AxisTap& th : PH.taps) {
        const std::int64_t rank = dh_rank_[static_cast<std::size_t>(td.k * p_.kernel[1] + th.k)];
        if (rank < dh_begin || rank >= dh_end || !H.valid(th, jh)) continue;
        const std::int64_t tap_dh = (td.k * p_.kernel[1] + th.k) * p_.kernel[2];
        const std::int64_t off_dh = td.off * dy_d_ + th.off * dy_h_;
        // W taps in packed order (decreasing k = increasing dy offset). Shared (SharedWTile, more than one
        // tap): one entry for them all from the tile's first dy pixel, with the range of its dy pixels inside
        // dy's row.
        const auto& wt = PW.taps;
        const std::int64_t nw = static_cast<std::int64_t>(wt.size());
        if (config_.share_w && nw > 1) {
          const std::int64_t q0 = j0 + wt.back().off, nq = m + nw - 1;
          const std::int64_t lo = std::clamp<std::int64_t>(-q0, 0, nq), hi = std::clamp(W.out - q0, lo, nq);
          if (lo < hi)
            taps[ntaps++] = {
                off_dh + wt.back().off * dy_w_,
                wblock + (tap_dh + tap_pos_w_[static_cast<std::size_t>(wt.back().k)]) * tap_bytes, steps,
                static_cast<std::int32_t>(lo), reach(hi, nq)};
          continue;
        }
        // When the tile is inside dy for all of them and their dy values are contiguous, they form one
        // reduction: same order.
        if (nw > 1 && config_.fuse_w && (halo || W.covers(PW, j0, m))) {
          taps[ntaps++] = {off_dh + wt.back().off * dy_w_,
                           wblock + (tap_dh + tap_pos_w_[static_cast<std::size_t>(wt.back().k)]) * tap_bytes,
                           nw * steps, 0, kToTileEnd};
          continue;
        }
        for (auto it = wt.rbegin(); it != wt.rend(); ++it) {
          const AxisTap& tw = *it;
          const auto [lo, hi] = halo ? std::pair<std::int64_t, std::int64_t>{0, m} : W.inside(tw, j0, m);
          if (lo >= hi) continue;
          taps[ntaps++] = {off_dh + tw.off * dy_w_,
                           wblock + (tap_dh + tap_pos_w_[static_cast<std::size_t>(tw.k)]) * tap_bytes, steps,
                           static_cast<std::int32_t>(lo), reach(hi, m)};
        }
      }
    }
    return ntaps;
  }
  // The end of a tap's pixels [lo, hi) of a tile of `last` pixels (or dy pixels, shared W taps).
  static std::int32_t reach(std::int64_t hi, std::int64_t last) {
    return hi == last ? kToTileEnd : static_cast<std::int32_t>(hi);
  }
  // Where image n, group g's dy pixel (0, 0, 0) lies, planes counted from dy.first_plane.
  const void* image_origin(const DyPlanes& dy, std::int64_t n, std::int64_t g) const {
    return static_cast<const char*>(dy.base) + ((dy.window ? 0 : n * dy_n_ + g * dy_g_) + dy_origin_) * elem_;
  }
  // The tile's first dy pixel (of y row (jd, jh), phase pixel j0) in dy_ng, the image and group's dy.
  const void* tile_dy(const void* dy_ng, std::int64_t jd, std::int64_t jh, std::int64_t j0) const {
    return static_cast<const char*>(dy_ng) + (jd * dy_d_ + jh * dy_h_ + j0 * dy_w_) * elem_;
  }

  // The element offset of y[n][c][id][ih][iw].
  std::int64_t y_at(std::int64_t n, std::int64_t c, std::int64_t id, std::int64_t ih, std::int64_t iw) const {
    const auto& s = p_.y_strides;
    return n * s[0] + c * s[1] + id * s[2] + ih * s[3] + iw * s[4];
  }

  // Writes tile [m][cbw] (valid channels from c0) to y pixels iw0, iw0 + step, ... of row (n, id, ih).
  void store_tile(const float* tile, std::int64_t m, std::int64_t cbw, int valid, std::int64_t n,
                  std::int64_t c0, std::int64_t id, std::int64_t ih, std::int64_t iw0, std::int64_t step,
                  void* y) const {
    const auto& s = p_.y_strides;
    const std::int64_t base = y_at(n, c0, id, ih, iw0), ps = step * s[4];
    if (s[1] == 1) {
      store_channel_last(p_, ks_, tile, cbw, m, valid, y, base, ps);
    } else if (ps == 1) {
      store_channel_first(p_, ks_, tile, cbw, m, valid, y, base, s[1], config_.uncached_y);
    } else {  // one run per channel across the pixels
      for (std::int64_t c = 0; c < valid; ++c) store_run(p_, ks_, tile + c, cbw, y, base + c * s[1], ps, m);
    }
  }

  // y = +0 at m pixels from iw0 (every step-th) of row (n, id, ih), channels [c0, c0 + valid): all-zero bits
  // in every y dtype, so a memset per contiguous run.
  void zero_y(std::int64_t m, std::int64_t valid, std::int64_t n, std::int64_t c0, std::int64_t id,
              std::int64_t ih, std::int64_t iw0, std::int64_t step, void* y) const {
    const auto& s = p_.y_strides;
    const std::int64_t es = static_cast<std::int64_t>(dtype_size(p_.y_dtype)), ps = step * s[4];
    char* base = static_cast<char*>(y) + y_at(n, c0, id, ih, iw0) * es;
    const auto zero = [&](std::int64_t at, std::int64_t count) {
      std::memset(base + at * es, 0, static_cast<std::size_t>(count * es));
    };
    if (s[1] == 1 && ps == valid) {
      zero(0, m * valid);
    } else if (s[1] == 1) {
      for (std::int64_t p = 0; p < m; ++p) zero(p * ps, valid);
    } else if (ps == 1) {
      for (std::int64_t c = 0; c < valid; ++c) zero(c * s[1], m);
    } else {
      for (std::int64_t c = 0; c < valid; ++c)
        for (std::int64_t p = 0; p < m; ++p) zero(c * s[1] + p * ps, 1);
    }
  }

  Problem p_;
  int threads_;
  const KernelSet& ks_;
  GemmConfig config_;
  bool bf16_;  // config_.bf16: compute type bf16 pairs, else fp32
  Axis ax_[3];
  int lanes_;
  std::int64_t elem_;        // bytes per compute-type element
  std::int64_t kpad_;        // output channels per tap, padded to even for bf16 pairs
  bool keep_filter_;         // EngineRequest::keep_filter
  std::int64_t max_memory_;  // EngineRequest::max_memory_bytes
  std::int64_t taps_ = 0;
  std::vector<std::int64_t> tap_src_;    // filter element offset of each tap (kd, kh, kw order)
  std::vector<std::int64_t> tap_pos_w_;  // packed position of each kw within its (kd, kh)

  // Packed position of tap t (kd, kh, kw order).
  std::int64_t tap_pos(std::int64_t t) const {
    return t / p_.kernel[2] * p_.kernel[2] + tap_pos_w_[static_cast<std::size_t>(t % p_.kernel[2])];
  }
  std::vector<Block> blocks_;
  std::int64_t group_w_ = 0;  // packed elements per group
  AlignedPtr wpack_;
  std::vector<AlignedPtr> own_blocks_;  // per slot: full-width and narrow packed blocks (see own_slots)
  // Per (group, channel block): it needs the exact kernels (a tiny bf16 value; for AMX, a non-finite one) or,
  // split, the exact fallback.
  std::vector<unsigned char> tiny_blocks_;
  // The AMX tile kernels of a block of nv vectors, by pixels.
  const TileFn* amx_tiles(int nv) const {
    return config_.split ? amx_kernels().split : amx_kernels().tile[nv];
  }
  bool any_exact_block() const {
    return std::find(tiny_blocks_.begin(), tiny_blocks_.end(), 1) != tiny_blocks_.end();
  }
  std::unique_ptr<GemmEngine> exact_fallback_;  // set_exact_fallback
  std::int64_t tasks_per_block_ = 0;            // plane groups or rows
  std::vector<std::int64_t> window_split_;      // window mode: thread i runs tasks [split[i], split[i + 1])
  std::int64_t tile_floats_ = 0;  // per-thread output staging: a tile, a y row or a group of y planes
  std::array<RowTiling, kMaxNv + 1> tilings_;  // per block width nv: the FMA (or exact) kernels' tiles
  RowTiling amx_tiling_;
  std::int64_t row_tiles_ = 0;      // the most tiles a y row is cut into in any tiling
  std::int64_t row_list_taps_ = 0;  // the most TapRefs a y row's lists take in any tiling
  std::int64_t dy_n_ = 0, dy_g_ = 0, dy_c_ = 1, dy_d_ = 0, dy_h_ = 0,
               dy_w_ = 0;  // compute-type element strides
  // Elements from a converted dy plane's start to its row 0, pixel 0 (the AMX halo rows and pixels).
  std::int64_t dy_origin_ = 0;
  std::int64_t flat_width_ = 0;             // pixels per converted dy row (and per flat row)
  std::vector<std::int64_t> flat_regions_;  // flat planes: first pixel of each (H, W) phase pair's region
  std::int64_t flat_pixels_ = 0;            // flat planes: pixels of all regions
  std::vector<std::int64_t> dh_rank_;       // per kd * kH + kh: its rank (see the constructor)
  std::vector<TapGroup> tap_groups_;
  Reader dy_reader_, w_reader_;
};

}  // namespace

Problem rows_merged(const Problem& p) {
  const bool one_pixel = p.kernel[1] == 1 && p.kernel[2] == 1 && p.stride[1] == 1 && p.stride[2] == 1 &&
                         p.pad_front[1] == 0 && p.pad_back[1] == 0 && p.pad_front[2] == 0 &&
                         p.pad_back[2] == 0;
  if (!one_pixel || p.dy_strides[3] != p.dy_size[2] * p.dy_strides[4] ||
      p.y_strides[3] != p.y_size[2] * p.y_strides[4] || p.y_size[1] == 1)
    return p;
  // k rows into one: the most (dividing H) that keep a row within kMergedRowPixels, or H's own width.
  constexpr std::int64_t kMergedRowPixels = 256;
  std::int64_t k = 1;
  for (std::int64_t d = 2; d <= p.y_size[1]; ++d)
    if (p.y_size[1] % d == 0 && d * p.y_size[2] <= kMergedRowPixels) k = d;
  if (k == 1) return p;
  Problem m = p;
  for (auto* size : {&m.y_size, &m.dy_size}) {
    (*size)[2] *= k;
    (*size)[1] /= k;
  }
  m.y_strides[3] *= k;
  m.dy_strides[3] *= k;
  m.dilation[1] = m.dilation[2] = 1;
  return m;
}

namespace {

std::unique_ptr<GemmEngine> make_gemm_engine(const EngineRequest& request, Isa isa, const GemmTuning& tuning,
                                             std::string& why_not) {
  const Problem p = rows_merged(request.problem);
  // AMX takes fp16 values too, split into two bf16 each (GemmConfig::split).
  why_not = fast_engine_refusal(isa, request,
                                isa == Isa::avx512_bf16 || (isa == Isa::amx_bf16 && !splits_into_bf16(p)));
  if (!why_not.empty()) return nullptr;
  GemmConfig config = gemm_config(p, request.cpu, isa, request.threads, tuning);
  if (config.amx) {
    // Padding the reduction multiplies the work by kpad / Cout_g, and products over fewer than 16 pairs by
    // 16 / amx_pairs more; beyond 4x the AVX-512 kernels are as fast (unless the caller named amx_bf16). A
    // halo wider than dy itself (y reaching far past dy) would mostly multiply zeros.
    if (p.Cout_g * (config.split ? 2 : 1) * 4 * config.amx_pairs < config.kpad * 16 &&
        !(request.isa_named && request.isa == Isa::amx_bf16)) {
      why_not = "out_backprop has " + std::to_string(p.Cout_g) +
                " channels per group: AMX tiles reduce over 32 at a time";
      return nullptr;
    }
    // Split fp16 and HF32 values take four tdpbf16ps products per multiply-add (eight products on six tile
    // loads), so AMX beats the FMA kernels where the chunks of 32 output channels are mostly full, there are
    // 16 input channels or more per group, and packing the split filter is small beside the work. Xeon with
    // AMX (model 167), 2 threads, fp16, against gemm_avx512 (both layouts): suite a, vae and 3x3x3 extra
    // shapes 0.34-0.57x the time, stride 2 (b, d, k4s2, down_s2) 0.52-0.66x, unet_up and k1s2 (one tap per
    // pixel) 0.63-0.91x; e (a filter 48x dy) 0.82-1.06x, i (pointwise, 2730 output channels) 1.05-1.07x,
    // unet16 (16 output channels: a half-empty chunk) 1.04-1.05x, c (3) 3.5-4.3x, 3 input channels 1.2-1.4x
    // and depthwise 14-48x the time of the pixel engine.
    if (config.split && !(request.isa_named && request.isa == Isa::amx_bf16)) {
      const std::int64_t taps = p.kernel[0] * p.kernel[1] * p.kernel[2],
                         phases = p.stride[0] * p.stride[1] * p.stride[2],
                         filter = saturating_mul(saturating_mul(p.G * p.Cin_g, p.Cout_g), taps),
                         dy = saturating_mul(saturating_mul(p.N * p.Cout(), p.dy_size[0]),
                                             saturating_mul(p.dy_size[1], p.dy_size[2]));
      if (p.Cin_g < 16 || config.kpad > 3 * p.Cout_g || filter > saturating_mul(dy, 16) ||
          (taps == 1 && phases == 1)) {
        why_not =
            "fp16 and HF32 on AMX tiles take 4 products per multiply-add: they pay only with 16 input "
            "channels per group or more, output channels filling at least two thirds of their 32-channel "
            "chunks, a filter at most 16x out_backprop and more than a pointwise kernel (here " +
            std::to_string(p.Cin_g) + " and " + std::to_string(p.Cout_g) + " channels, " +
            std::to_string(filter) + " filter and " + std::to_string(dy) + " out_backprop values, " +
            std::to_string(taps) + " taps, stride product " + std::to_string(phases) + ")";
        return nullptr;
      }
    }
    if (p.Cin_g < 3 && !(request.isa_named && request.isa == Isa::amx_bf16)) {
      why_not = "y has " + std::to_string(p.Cin_g) +
                " channels per group: AMX tiles compute 16 at a time (the pixel engine is faster)";
      return nullptr;
    }
    if (config.halo_lo + config.halo_hi > p.dy_size[2] + 2 * p.kernel[2] * p.dilation[2]) {
      why_not = "y rows reach far beyond out_backprop's: AMX tiles would mostly read zero pixels";
      return nullptr;
    }
  }
  auto engine = std::make_unique<GemmEngine>(request, p, kernels_for(isa), config);
  if (config.split) {
    std::string why;
    auto fallback = make_gemm_engine(request, Isa::avx512, {}, why);
    if (!fallback) {
      why_not =
          "split inputs that are tiny or not finite need gemm_avx512 beside AMX, which declines: " + why;
      return nullptr;
    }
    engine->set_exact_fallback(std::move(fallback), request);
  }
  return engine;
}

}  // namespace

std::unique_ptr<EngineImpl> make_gemm(const EngineRequest& request, Isa isa, const GemmTuning& tuning,
                                      std::string& why_not) {
  return make_gemm_engine(request, isa, tuning, why_not);
}

std::unique_ptr<EngineImpl> make_gemm_amx_bf16(const EngineRequest& r, std::string& why_not) {
  return make_gemm(r, Isa::amx_bf16, {}, why_not);
}
std::unique_ptr<EngineImpl> make_gemm_avx512_bf16(const EngineRequest& r, std::string& why_not) {
  return make_gemm(r, Isa::avx512_bf16, {}, why_not);
}
std::unique_ptr<EngineImpl> make_gemm_avx512(const EngineRequest& r, std::string& why_not) {
  return make_gemm(r, Isa::avx512, {}, why_not);
}
std::unique_ptr<EngineImpl> make_gemm_avx2(const EngineRequest& r, std::string& why_not) {
  return make_gemm(r, Isa::avx2, {}, why_not);
}

}  // namespace conv3d_dx::cpu
