// The GEMM engine's configuration step: every blocking and layout decision for a problem on a CPU.
#include <algorithm>
#include <numeric>

#include "cpu/gemm_engine.hpp"
#include "cpu/geometry.hpp"
#include "cpu/support.hpp"
#include "problem/checked.hpp"

namespace conv3d_dx::cpu {

std::string GemmConfig::describe() const {
  std::string s = std::string(to_string(isa)) +
                  (amx ? " AMX tiles of up to " + std::to_string(kAmxMaxM) + " pixels" +
                             (split ? " (fp16 or HF32 values split into bf16 hi + lo, 4 products)" : "") +
                             (amx_pairs < 16 ? " (products over " + std::to_string(amx_pairs) +
                                                   " channel pairs, W taps side by side)"
                                             : "")
                   : bf16 ? " vdpbf16ps pairs"
                          : " fp32 FMA") +
                  ", channel blocks of " + std::to_string(nv * lanes) + ", tiles up to " +
                  std::to_string(max_m[nv]) + " pixels, dy " + (direct_dy ? "in place" : "converted") +
                  (share_w  ? ", W taps sharing dy loads"
                   : fuse_w ? ", W taps fused"
                            : "");
  if (plane_mode)
    s += ", tasks of " + std::to_string(planes_per_task) + " planes with tap groups of up to " +
         std::to_string(dh_group) + " (kd, kh) of one (D, H) phase class";
  if (flat) s += ", flat planes (rows padded to " + std::to_string(halo_lo + halo_hi) + " more pixels)";
  if (staged && !plane_mode && !flat) s += ", rows staged";
  if (uncached_y) s += ", y stored uncached (when 64-byte aligned)";
  if (blocks_inner) s += ", channel blocks in turn per row or plane";
  if (dy_window)
    s += ", dy converted into a window of " + std::to_string(dy_window_planes) + " planes per thread";
  if (d_inner) s += ", rows plane after plane (D taps share dy rows)";
  if (pack_span > 1) s += ", filter packed " + std::to_string(pack_span) + " channel blocks at a time";
  return s + "; L2 budgets " + std::to_string(weight_budget >> 10) + " KiB filter, " +
         std::to_string(plane_budget >> 10) + " KiB plane";
}

GemmConfig gemm_config(const Problem& p, const CpuModel& cpu, Isa isa, int threads,
                       const GemmTuning& tuning) {
  const KernelSet& ks = kernels_for(isa);
  GemmConfig c;
  c.isa = isa;
  c.amx = isa == Isa::amx_bf16;
  c.bf16 = c.amx || isa == Isa::avx512_bf16;
  c.lanes = ks.lanes;
  // An AMX tile reduces over 16 channel pairs at a time: padding channels are zero in dy and the filter.
  c.split = c.amx && !(exact_in_bf16(p.dy_dtype) && exact_in_bf16(p.filter_dtype) &&
                       p.input_rounding != InputRounding::fp16);
  c.kpad = c.split  ? ceil_div(p.Cout_g, 32) * 64
           : c.amx  ? ceil_div(p.Cout_g, 32) * 32
           : c.bf16 ? (p.Cout_g + 1) / 2 * 2
                    : p.Cout_g;
  const std::int64_t kpad = c.kpad;

  // Channel blocks: as wide as the kernel set prefers for the longest reduction a tile runs (the most taps
  // of any phase, per axis, times the channels) — 4 vectors of 16 on AVX-512, 2 of 8 on AVX2 unless that is
  // short — and 2 with AMX (2 x 2 tiles of 16 x 16 take the 8 tile registers with the two dy and two filter
  // tiles; 1 when split, whose two row tiles take two dy tiles each); no wider than the channels.
  Axis axes[3];  // D, H, W: each axis's phases and their taps
  std::int64_t phase_taps[3] = {}, tile_steps = kpad;
  for (int a = 0; a < 3; ++a) {
    axes[a] = Axis(p.y_size[a], p.dy_size[a], p.kernel[a], p.stride[a], p.dilation[a], p.pad_front[a]);
    for (const AxisPhase& ph : axes[a].phases)
      phase_taps[a] = std::max(phase_taps[a], static_cast<std::int64_t>(ph.taps.size()));
    tile_steps = saturating_mul(tile_steps, phase_taps[a]);
  }
  const Axis &h_axis = axes[1], &w_axis = axes[2];
  // The W taps of a phase, in packed order (decreasing k), read consecutive dy pixels when consecutive taps
  // are one dy pixel apart (dilation divides stride).
  bool w_taps_adjacent = true;
  std::size_t most_w_taps = 0;
  for (const AxisPhase& ph : w_axis.phases) {
    most_w_taps = std::max(most_w_taps, ph.taps.size());
    for (std::size_t t = 1; t < ph.taps.size(); ++t)
      if (ph.taps[t - 1].off != ph.taps[t].off + 1) w_taps_adjacent = false;
  }
  // fp32 tiles that share a (kd, kh) pair's W taps' dy loads (SharedWTile), per block width: as wide as the
  // kernel set's shared tiles for the tap count of every phase with more than one allow (0: none); and the
  // widest blocks that have them (0 where the taps cannot share).
  int shared_m[kMaxNv + 1] = {}, shared_nv = 0;
  if (tuning.share_w && !c.bf16 && w_taps_adjacent && most_w_taps > 1 &&
      most_w_taps <= static_cast<std::size_t>(kMaxSharedWTaps))
    for (int v = 1; v <= kMaxNv; ++v) {
      shared_m[v] = kMaxM;
      for (const AxisPhase& ph : w_axis.phases)
        if (ph.taps.size() > 1) shared_m[v] = std::min(shared_m[v], ks.shared_w_max_m[ph.taps.size()][v]);
      if (shared_m[v] == 0) break;
      shared_nv = v;
    }
  const int widest_nv = c.split ? 1 : c.amx ? 2 : ks.widest_nv();
  int nv = std::min(tuning.nv > 0 ? tuning.nv : ks.nv_for_reduction(tile_steps), widest_nv);
  // Where the CPU's table prefers them, blocks narrow to the widest with shared tiles, which load less per
  // FMA (10 x 2 tiles sharing three taps: 18 loads per 60 FMAs, 0.30 each, 6 x 4 single-tap tiles 10 per 24,
  // 0.42) and use each filter vector, streamed from L2, for 10 FMAs rather than 6.
  // Xeon with AMX (model 167), fp32, 2 threads, medians of paired calls against 4-vector blocks (two runs
  // unless one figure): channels_last a 0.95-0.98x the time, vae 0.94-0.95x, d 0.95-0.99x, k4s2 0.95-0.98x,
  // deep256 0.98x; NCDHW a 0.86-0.87x, k4s2 0.91x, deep256 0.95x, d 0.96x, vae 0.97-0.98x; b, n2c96,
  // down_s2, k133 within noise. Not where a tile's fixed costs weigh more: W phases shorter than the shared
  // tiles (e, rows of 6: 1.04-1.10x the time) or fewer than 16 output channels per tap (c, 3: 1.10-1.12x
  // channels_last).
  // Nor where a W phase has a single tap (k3 s2: phases of 2 and 1), whose narrow single-tap tiles load
  // 10 values per 16 FMAs against the wide ones' 10 per 24: paired against the narrowed blocks, same Xeon,
  // channels_last b 0.92-0.93x the time (three runs), down_s2 0.94-0.95x, d 0.96-1.01x; NCDHW b 0.99x, d
  // 1.02x, down_s2 1.02x (one run); d had read 0.95-0.99x the other way, so d is within noise. k4 s2 (every
  // phase 2 taps) stays narrowed: wide 1.04x.
  std::int64_t shortest_phase = p.y_size[2];
  bool single_tap_phase = false;
  for (const AxisPhase& ph : w_axis.phases)
    if (ph.count > 0) {
      shortest_phase = std::min(shortest_phase, ph.count);
      single_tap_phase |= ph.taps.size() == 1;
    }
  if (tuning.nv <= 0 && cpu.shared_w_over_wide && shared_nv > 0 && p.Cout_g >= 16 &&
      shortest_phase >= shared_m[shared_nv] && !single_tap_phase)
    nv = std::min(nv, shared_nv);
  // Unless tuned, blocks as equal as the channels allow (6 vectors as 3 + 3 rather than 4 + 2, 9 as 3 + 3 +
  // 3 rather than 4 + 4 + 1), so every block's tasks cost about the same and threads that take whole blocks
  // finish together. Xeon without AMX (Ice Lake), fp32, n2c96 (96 channels, its 2 blocks on 2 threads),
  // 10 paired calls per run: 2 threads 0.77-0.82x the time in 5 of 6 runs (1.07x in one), NCDHW and
  // channels_last; 1 thread 0.96x (one run).
  const std::int64_t vectors = ceil_div(p.Cin_g, c.lanes), at_most = std::min<std::int64_t>(nv, vectors);
  c.nv = static_cast<int>(tuning.nv > 0 ? at_most : ceil_div(vectors, ceil_div(vectors, at_most)));
  for (int v = 1; v <= kMaxNv; ++v)
    c.max_m[v] = tuning.max_m > 0 ? std::min(tuning.max_m, ks.max_m[v]) : ks.max_m[v];

  // dy is read in place when it is already in the compute type: fp32 with contiguous channels, or with
  // strided ones (NCDHW) when each tap has enough channels to pay for the strided reads, the channel stride
  // is not a multiple of 4 KiB and the lines a tile reads fit in L1; bf16 with contiguous channel pairs.
  // Otherwise it is converted to channel-last (which also lets W taps fuse). With a 4 KiB multiple every
  // channel's pixels fall in the same L1 set (index bits 6-11 on the Intel and AMD cores), and the reduction
  // over channels misses L1 at every step (Xeon, fp32 NCDHW, 2 threads: vae 70 -> 46 ms, unet_up 7.6 ->
  // 4.5, g 0.88 -> 0.32 converted; b, 6.8 -> 9.1, is the exception measured). A tile of strided dy reads a
  // line per channel of every dy row its taps reach (the most taps of a phase in D and H): beyond L1 they
  // are fetched again for each tile (Zen 3, 32 KiB L1, 2 threads, paired, converted over in place: a, 36 KiB,
  // 0.84x; d, 64 KiB, 0.90x; e, 216 KiB, 0.94x). b's 32 KiB fit the Xeon's 48 KiB L1.
  const auto& s = p.dy_strides;
  const bool aliased_channels = s[1] % 1024 == 0;  // 4 KiB of fp32
  const bool strided_fit_l1 = saturating_mul(saturating_mul(phase_taps[0], phase_taps[1]),
                                             saturating_mul(p.Cout_g, 64)) <= cpu.l1d_bytes;
  c.direct_dy = c.amx    ? false
                : c.bf16 ? p.dy_dtype == DType::bf16 && p.Cout_g % 2 == 0 && s[1] == 1 &&
                               p.input_rounding != InputRounding::fp16
                         : p.dy_dtype == DType::f32 && p.input_rounding == InputRounding::none &&
                               (s[1] == 1 || (p.Cout_g >= 16 && !aliased_channels && strided_fit_l1));

  // A phase's W taps fuse into one reduction when they read consecutive dy pixels (w_taps_adjacent) and a
  // pixel's reduction channels are followed by the next pixel's.
  const bool pixels_follow = !c.direct_dy || (s[4] == kpad && (c.bf16 || s[1] == 1));
  c.fuse_w = tuning.fuse_w && pixels_follow && w_taps_adjacent;
  // The fp32 FMA tiles share dy loads between a (kd, kh) pair's W taps where the taps are one dy pixel apart
  // and the kernel set has shared tiles for the blocks' widths (shared_m; a pair's taps need not fuse: each
  // tap's channels are read with their own stride); phases of one tap keep the single-tap tiles. Tiles are
  // then as wide as the narrowest of those allows.
  c.share_w = shared_nv > 0 && c.nv <= shared_nv;
  if (c.share_w)
    for (int v = 1; v <= c.nv; ++v) c.max_m[v] = std::min(c.max_m[v], shared_m[v]);
  // AMX with few output channels: each tap padded to 32 reduction elements multiplies the work by up to
  // 32 / Cout_g. Where a phase's W taps fuse, taps padded only to even lie side by side in one reduction
  // (3 taps of 3 channels: 12 elements, not 3 x 32) and tile products take fewer than 16 pairs, as many as
  // divide every phase's reduction; chosen where that takes fewer products per pixel.
  if (c.amx && !c.split && c.fuse_w) {
    const std::int64_t even = (p.Cout_g + 1) / 2 * 2;
    std::int64_t fused = 0;  // the gcd of the phases' fused reductions, in pairs
    for (const AxisPhase& ph : w_axis.phases)
      if (ph.count > 0 && !ph.taps.empty()) fused = std::gcd(fused, even / 2 * std::ssize(ph.taps));
    std::int64_t pairs = 16, padded = 0, compact = 0;
    while (pairs > 1 && fused % pairs != 0) --pairs;
    for (const AxisPhase& ph : w_axis.phases)
      if (ph.count > 0 && !ph.taps.empty()) {
        padded += std::ssize(ph.taps) * kpad / 32;
        compact += even / 2 * std::ssize(ph.taps) / pairs;
      }
    if (fused > 0 && compact < padded) {
      c.kpad = even;
      c.amx_pairs = static_cast<int>(pairs);
    }
  }
  // AMX tiles read every tap's dy pixels for the whole tile, in or out of dy: the converted rows get zero
  // pixels on both sides as far as any phase's taps reach (taps run from the largest offset, front, to the
  // smallest, back).
  if (c.amx)
    for (const AxisPhase& ph : w_axis.phases) {
      if (ph.count == 0 || ph.taps.empty()) continue;
      c.halo_lo = std::max(c.halo_lo, -ph.taps.back().off);
      c.halo_hi = std::max(c.halo_hi, ph.count - 1 + ph.taps.front().off - (p.dy_size[2] - 1));
    }

  // A channel block's filter that does not fit in its share of L2 would stream from L3 for every tile.
  // Then a task takes a whole y plane (accumulated in a staging buffer) and walks the taps in groups that
  // fit, so each group is reused across the plane. The sum order (taps by kd, kh, kw; channels) is the
  // same either way. Budgets: 3/8 of a core's L2 for the filter, 1/4 for the plane.
  c.weight_budget = cpu.l2_bytes * 3 / 8;
  c.plane_budget = cpu.l2_bytes / 4;
  const std::int64_t block_width = static_cast<std::int64_t>(c.nv) * c.lanes;
  const std::int64_t elem = c.bf16 ? 2 : 4;
  const std::int64_t dh_bytes = p.kernel[2] * c.kpad * block_width * elem;  // the taps of one (kd, kh)
  const std::int64_t dh_taps = p.kernel[0] * p.kernel[1];
  c.plane_mode = tuning.plane >= 0 ? tuning.plane == 1
                                   : dh_bytes * dh_taps > c.weight_budget &&
                                         p.y_size[1] * p.y_size[2] * block_width * 4 <= c.plane_budget;
  c.dh_group = !c.plane_mode ? dh_taps
                             : (tuning.dh_group > 0 ? tuning.dh_group
                                                    : std::max<std::int64_t>(1, c.weight_budget / dh_bytes));
  if (c.plane_mode) {
    const std::int64_t plane_bytes = p.y_size[1] * p.y_size[2] * block_width * 4, planes = p.N * p.y_size[0];
    const std::int64_t blocks = p.G * ceil_div(p.Cin_g, block_width);  // tasks per plane group
    const std::int64_t for_threads = std::max<std::int64_t>(1, blocks * planes / (2 * std::int64_t{threads}));
    c.planes_per_task = tuning.planes_per_task > 0 ? std::min<std::int64_t>(tuning.planes_per_task, planes)
                                                   : std::clamp<std::int64_t>(c.plane_budget / plane_bytes, 1,
                                                                              std::min(planes, for_threads));
  }
  // AMX tiles cost the same for 1 to 16 pixels per row tile: when a phase's rows are short, tiles running
  // over whole planes (rows padded to the dy row width) need fewer of them. Cost per chunk of 32 channels:
  // a tdpbf16ps per (row tile, vector) and as much per tile load (a dy tile per row tile, a filter tile per
  // vector; loads from L2 cost about that in a microbenchmark of the tile loop), for 2 vectors. Xeon with
  // AMX, bf16 channels_last, 2 threads, flat planes against rows of 16-pixel tiles (where half a tdpbf16ps
  // per load chose rows): k4s2 0.91x the time, b 0.93x.
  if (c.amx && !c.plane_mode && tuning.plane != 0) {
    std::int64_t padded_width = c.halo_lo + p.dy_size[2] + c.halo_hi, widest = 0;
    for (const AxisPhase& pw : w_axis.phases) widest = std::max(widest, pw.count);
    if (widest > padded_width) {  // every W phase's row must fit in a padded row
      c.halo_hi += widest - padded_width;
      padded_width = widest;
    }
    const auto row_tiles = [](std::int64_t pixels) {
      const std::int64_t tiles = ceil_div(pixels, kAmxMaxM), rows = ceil_div(ceil_div(pixels, tiles), 16);
      return tiles * (2 * rows + rows + 2);  // in tdpbf16ps
    };
    std::int64_t by_rows = 0, flat = 0;
    for (const AxisPhase& ph : h_axis.phases)
      for (const AxisPhase& pw : w_axis.phases) {
        if (ph.count == 0 || pw.count == 0) continue;
        by_rows += ph.count * row_tiles(pw.count);
        flat += row_tiles(ph.count * padded_width);
      }
    // A flat task reads the dy planes its D taps reach whole, once per channel block: beyond half of L2
    // with the staging plane, the next block rereads them from L3, where row tasks, the blocks in turn,
    // find a row's dy in L1 or L2. Xeon with AMX, bf16 channels_last, 2 threads: a (1.3 MiB of dy planes)
    // 0.93x the time in rows.
    const std::int64_t staging = p.y_size[1] * p.stride[2] * padded_width * block_width * 4;
    const std::int64_t dy_rows = p.dy_size[1] + (p.kernel[1] - 1) * p.dilation[1];
    const std::int64_t dy_planes =
        saturating_mul(saturating_mul(phase_taps[0], dy_rows), saturating_mul(padded_width, c.kpad * elem));
    c.flat = tuning.plane == 2 || (flat * 20 < by_rows * 19 && staging <= c.plane_budget &&
                                   saturating_add(dy_planes, staging) <= cpu.l2_bytes / 2);
    if (c.flat)
      for (const AxisPhase& ph : h_axis.phases) {
        if (ph.count == 0 || ph.taps.empty()) continue;
        c.hhalo_lo = std::max(c.hhalo_lo, -ph.taps.back().off);
        c.hhalo_hi = std::max(c.hhalo_hi, ph.count - 1 + ph.taps.front().off - (p.dy_size[1] - 1));
      }
  }
  // AMX tiles reread a tile's dy for every channel block, from L2 or beyond when the blocks' tasks are far
  // apart: with the blocks of a row or plane run one after another, from L1 or L2. But each task then reads
  // every block's filter, which stays in L2 only up to its size. Xeon, bf16, 2 threads, packed filter,
  // against block-major order: channels_last unet_up 0.43x the time, k1s2 0.53x, b 0.69x, i 0.74x, vae 0.83x,
  // a 0.88x, NCDHW a 0.85x, b 0.67x (filters within L2); deep256 (3.4 MiB, rows of 16 pixels) 1.9x and e
  // (16 MiB, planes of 36) 1.5x. Tasks of 128 pixels or more (flat planes, plane tasks, long rows) with a
  // filter up to twice L2 took the blocks in turn too (d, 3.4 MiB over flat planes of 880 pixels: 0.78x)
  // until the tiles kept the floating-point unit awake; since then, block-major order, paired against that
  // (flat planes measured, the others not): deep256 (flat planes of 256 pixels) 0.81-0.88x the time in both
  // layouts, HiFloat8 0.90x; d within 0.97-1.03x, NCDHW 0.92x. The FMA kernels measured worse with blocks in
  // turn (i 1.45x, d 1.12x) and keep block-major order.
  const std::int64_t taps = p.kernel[0] * p.kernel[1] * p.kernel[2];
  const std::int64_t packed = saturating_mul(
      saturating_mul(saturating_mul(p.G, taps), saturating_mul(c.kpad, ceil_div(p.Cin_g, c.lanes) * c.lanes)),
      elem);
  c.blocks_inner = tuning.blocks_inner >= 0 ? tuning.blocks_inner == 1 : c.amx && packed <= cpu.l2_bytes;
  // Row tasks D inner where only D taps share dy rows (kernel one row tall in H): Ice Lake Xeon, fp32
  // channels_last, k311 (3 x 1 x 1, rows merged to 256 pixels), 6 alternating runs: 0.97x the time on 1 and
  // 2 threads against plane order (a plane's rows, then the next plane's). Except where AMX row tasks take
  // the dy window below, which needs plane order (decided after it): Xeon with AMX (model 167), 2 threads,
  // paired against D inner without the window, k311 channels_last 0.77-0.79x the time, HiFloat8 0.79x,
  // NCDHW 0.83x.
  const bool d_taps_share_rows = !c.plane_mode && !c.flat && p.kernel[1] == 1 && p.kernel[0] > 1;
  // With more than one thread, a window of converted dy planes per thread where it and the packed filter fit
  // in half a core's L2: dy converted beforehand, by all threads in turn, is then read from the other core's
  // cache or from L3 (written back on the way) by tasks that either thread may run, and the pass itself is
  // one more join. The window holds the most dy planes one y plane's D taps reach. Xeon with AMX (2 MiB L2),
  // bf16, 2 threads, paired against converting beforehand, channels_last, four runs: unet16 0.85-0.91x the
  // time, unet32 0.90-0.95x, k133 0.92-0.97x, down_s2 0.95-0.99x, down16_s2 0.82-0.84x, g 0.79-0.82x, unet_up
  // 0.89-0.93x; b, c, k1s2, n2c96 within noise. One run each: NCDHW c 0.88x, g 0.80x, unet16 0.89x, k133
  // 0.90x, down_s2 0.92x; HiFloat8 and FP8 channels_last unet16 0.90-0.92x, k133 0.94x; split fp16 (planes
  // twice as large: windows for unet_up and g only) 0.92-0.97x. On one thread (one run) unet_up 0.90x but
  // unet16, c and g 1.06x, the rest 0.98-1.03x; flat planes (suite f) 1.03x.
  std::int64_t window_planes = 1;
  for (const AxisPhase& ph : axes[0].phases)
    if (!ph.taps.empty())
      window_planes = std::max(window_planes, ph.taps.front().off - ph.taps.back().off + 1);
  const std::int64_t dy_plane_bytes = saturating_mul(
      saturating_mul(c.hhalo_lo + p.dy_size[1] + c.hhalo_hi, c.halo_lo + p.dy_size[2] + c.halo_hi),
      saturating_mul(c.kpad, elem));
  // The threads take each other's window tasks through one word per share (two 32-bit task counts).
  const std::int64_t row_tasks = saturating_mul(saturating_mul(p.N, p.y_size[0]),
                                                saturating_mul(p.y_size[1], ceil_div(p.Cin_g, block_width)));
  const bool window_allowed =
      c.amx && p.G == 1 && c.blocks_inner && !c.plane_mode && !c.flat && row_tasks < (std::int64_t{1} << 32);
  c.dy_window = window_allowed &&
                (tuning.dy_window >= 0
                     ? tuning.dy_window == 1
                     : threads > 1 && saturating_add(saturating_mul(window_planes, dy_plane_bytes), packed) <=
                                          cpu.l2_bytes / 2);
  c.dy_window_planes = c.dy_window ? std::min(window_planes, p.dy_size[0]) : 0;
  c.d_inner = d_taps_share_rows && !c.dy_window;  // the window runs a plane's rows in turn
  // y with strided channels (NCDHW) is staged a whole row at a time, channel-last, then stored per channel
  // as one run of Wi pixels; otherwise (or for very long rows) tile by tile.
  c.staged = c.plane_mode || (p.y_strides[1] != 1 && p.y_size[2] * block_width <= (std::int64_t{1} << 20));
  // Row tiles stored straight into y (fp32, contiguous channels, not staged, not AMX) skip the caches when y
  // is over twice the threads' L2 together: each of its lines is written once, whole, and would otherwise be
  // read from L3 or memory first and later written back. Zen 4, 2 threads, channels_last, y allocated per
  // call, medians of paired minimum-time ratios: unet_up (16 MiB of y, one tap per pixel) 0.87x; a, b, d
  // 0.97-0.99x and k1s2 0.99-1.11x (within noise). The cost, unmeasured: a caller that reads y at once finds
  // it in memory even where it would have fit in L3. Only where every tile's pixels are whole lines in a
  // 64-byte aligned y: channels per group and y's strides (a W phase's pixels included) in multiples of 16
  // floats, so every channel block (the kernels' blocks are 16 floats wide or more) and every tile starts on
  // a line.
  const auto& ys = p.y_strides;
  const bool whole_lines = p.Cin_g % 16 == 0 && ys[0] % 16 == 0 && ys[2] % 16 == 0 && ys[3] % 16 == 0 &&
                           p.stride[2] * ys[4] % 16 == 0 && c.nv * c.lanes % 16 == 0;
  c.y_direct = !c.staged && p.y_dtype == DType::f32 && ys[1] == 1;
  // An fp32 channel-first y (NCDHW: contiguous pixels) gets its staged rows' transposed 16-pixel runs the
  // same way wherever a run is a whole, aligned line (the AVX-512 kernels; AVX2's 32-byte halves would leave
  // partial lines; runs start on lines whatever the row's alignment, store_channel_first). Ice Lake Xeon,
  // NCDHW, 64-byte aligned y, in one process against plain stores (16 alternating calls, 2 threads):
  // unet_up 0.79x the time, b 0.89x, k311 0.89x, d 0.92x, a and vae 0.99x; 1 thread b 0.89x, k311 0.95x.
  const bool channel_first =
      c.staged && p.y_dtype == DType::f32 && ys[1] != 1 && ys[4] == 1 && ks.transposes_uncached;
  // Plane tasks write an fp32 channel-last y in place too, each tile summed by its class's tap groups in
  // turn: a tile that one group writes alone skips the caches (GemmEngine::run_task). Ice Lake Xeon, 64-byte
  // aligned y, in one process against plain stores, 2 threads: b 0.95-0.96x the time (1 thread 0.93x),
  // down_s2 0.95x, d 0.98x, n2c96 0.99x, vae (most tiles summed by two groups) 1.00-1.05x.
  const bool plane_direct = c.plane_mode && p.y_dtype == DType::f32 && ys[1] == 1;
  c.uncached_y = (((c.y_direct || plane_direct) && whole_lines) || channel_first) && !c.amx &&
                 (tuning.uncached_y >= 0 ? tuning.uncached_y == 1 : y_outgrows_l2(p, cpu, threads));
  // Packing channel blocks together (pack_span) where a block's run of input channels is under 128 bytes of
  // the filter, up to 128 bytes, with the span's packed blocks within 3/4 of L2 (their tasks read them from
  // there), and at least four spans per thread so that the threads still share the work out evenly. AMX
  // Xeon (model 167), 2 threads: a stand-alone loop reading e's bf16 filter (15.2 MiB) in runs of a span's
  // width and writing them out took 1.06 ms for 64-byte runs, 0.74 for 128, 0.94-0.96 for 192 and 256 (the
  // span's blocks outgrow L2); one-shot calls, paired against one block at a time, HiFloat8 e 0.95x the
  // time, fp16 d 0.93x, bf16 e 0.99x; k1s2 with one span per thread (fp16) 1.04-1.09x.
  const std::int64_t width = std::int64_t{c.nv} * c.lanes, blocks = ceil_div(p.Cin_g, width);
  const std::int64_t run_bytes = saturating_mul(width, static_cast<std::int64_t>(dtype_size(p.filter_dtype)));
  const std::int64_t block_bytes = saturating_mul(saturating_mul(taps, c.kpad), saturating_mul(width, elem));
  std::int64_t span = 1;
  if ((c.bf16 || c.split) && p.filter_strides[1] == 1 && p.filter_strides[0] != 1 && blocks > 1)
    span = tuning.pack_span > 0 ? tuning.pack_span
                                : std::min(ceil_div(128, run_bytes),
                                           std::max<std::int64_t>(1, cpu.l2_bytes * 3 / 4 / block_bytes));
  span = std::min({span, blocks, std::int64_t{kMaxPackSpan}});
  while (span > 1 && tuning.pack_span <= 0 && p.G * ceil_div(blocks, span) < 4 * threads) --span;
  c.pack_span = static_cast<int>(span);
  return c;
}

}  // namespace conv3d_dx::cpu
