// The implicit-GEMM engine: phase decomposition into stride-1 correlations (geometry.hpp), filter packed per
// channel block, register-blocked tiles (kernels.hpp) over (pixels of one row x input channels), reduction
// over (taps x output channels) in fp32, output rounding at the store. One factory per instruction set.
#pragma once

#include <memory>
#include <string>

#include "common/engine.hpp"
#include "cpu/kernels.hpp"

namespace conv3d_dx::cpu {

// Blocking overrides for tests and tuning; 0 keeps the engine's choice.
struct GemmTuning {
  int nv = 0;     // vectors of input channels per block
  int max_m = 0;  // largest tile width in pixels
  // 1: a task is a whole y plane, taps in groups of (kd, kh); 0: a task is one row; 2: flat planes (AMX)
  int plane = -1;
  int dh_group = 0;         // (kd, kh) pairs per tap group in plane mode
  bool fuse_w = true;       // fuse the W taps of a phase into one reduction where dy allows
  int planes_per_task = 0;  // in plane mode
  int uncached_y = -1;      // 1: y's tiles stored past the caches wherever allowed, 0: never, -1: by y's size
  int blocks_inner =
      -1;               // 1: a row's or plane's channel blocks in turn, 0: block after block, -1: by the CPU
  bool share_w = true;  // W taps share their dy loads (SharedWTile) where the kernel set offers it
  int dy_window = -1;   // 1: dy converted into a window per thread wherever allowed, 0: never, -1: by the CPU
  int pack_span = 0;    // channel blocks packed in one pass over a filter with contiguous input channels
};

// The most channel blocks packed in one pass (GemmConfig::pack_span).
inline constexpr int kMaxPackSpan = 8;

// Every choice the engine makes for a problem on a CPU, decided in one step from the problem, the CPU's
// model (cache sizes) and the kernel set, before anything is allocated; --verbose prints it.
struct GemmConfig {
  // Kernel set: amx_bf16 (AMX tiles over bf16 channel pairs), avx512_bf16 (vdpbf16ps over channel pairs),
  // avx512 or avx2 (FMA).
  Isa isa = Isa::avx512;
  bool bf16 = false;  // bf16 channel pairs (AMX tiles or vdpbf16ps); otherwise inputs widened to fp32
  // AMX tiles of up to kAmxMaxM pixels for channel blocks whose inputs are finite and not tiny; the other
  // blocks (and all, when dy holds a tiny value) run the AVX-512 exact bf16 kernels on the same data.
  bool amx = false;
  // AMX with fp16 or HF32 inputs (splits_into_bf16 but not all exact in bf16): every dy and filter value
  // split into bf16 hi + lo (split_parts), per chunk of 32 output channels their 32 his then 32 los; blocks
  // of one vector (AmxKernels::split). Inputs the split cannot take (tiny parts, inf, NaN) run the call on a
  // gemm_avx512 engine instead.
  bool split = false;
  // Reduction elements per tap: Cout_g, padded to even for pairs, to 32 for AMX (to even where amx_pairs <
  // 16); split, 64 per chunk of 32 output channels.
  std::int64_t kpad = 0;
  // AMX: channel pairs per tile product. 16 (32 channels), or, where few output channels make padding each
  // tap to 32 costly and a phase's W taps fuse, the most pairs (up to 16) that divide every phase's fused
  // reduction of taps padded to even only.
  int amx_pairs = 16;
  // AMX: zero dy pixels before and after each converted dy row, so every W tap covers all pixels of a tile.
  std::int64_t halo_lo = 0, halo_hi = 0;
  // AMX, flat planes: a task is one y plane of a channel block and AMX tiles run over each (H phase, W
  // phase) pair's pixels row after row, each row padded to the converted dy row's width (halo_lo + Wo +
  // halo_hi pixels; the padding pixels are computed and dropped), so short rows still fill the 16-row tiles.
  // dy planes get zero rows above and below (hhalo_lo, hhalo_hi) so every H tap covers every row too.
  bool flat = false;
  std::int64_t hhalo_lo = 0, hhalo_hi = 0;
  int lanes = 16;              // fp32 lanes per vector
  int nv = 1;                  // vectors of input channels per channel block (the last block may be narrower)
  int max_m[kMaxNv + 1] = {};  // widest tile, in pixels, per block width
  // dy read in place (already in the compute type with a usable layout) instead of converted channel-last
  // into the workspace.
  bool direct_dy = false;
  bool fuse_w = false;  // the W taps of a phase form one reduction (dy pixels and their taps line up)
  // fp32 FMA tiles take a (kd, kh) pair's W taps together, each dy value loaded once for the taps of
  // several pixels (SharedWTile, KernelSet::f32_shared_w by the phase's tap count): some W phase has more
  // than one tap, every phase's taps are one dy pixel apart, and the kernel set has tiles for them.
  bool share_w = false;
  // A task is a whole y plane with the taps walked in groups of up to dh_group (kd, kh) pairs of one (D
  // phase, H phase) class, so a channel block's filter too large for L2 is reused across the plane;
  // otherwise a task is one y row.
  bool plane_mode = false;
  std::int64_t dh_group = 1;
  // Plane mode: y planes (of all images) per task, so a tap group's filter is reused across them all while
  // it is in L2; as many as the staging budget holds, leaving tasks for every thread.
  std::int64_t planes_per_task = 1;
  // AMX: each thread's consecutive tasks take the channel blocks (of every group) of one y row or plane in
  // turn, so the dy tiles a block reads are in cache for the next; every block is packed before the tasks
  // run, so only where the whole packed filter fits in a core's L2.
  bool blocks_inner = false;
  // Row tasks run plane after plane for each row index (D inner): where the kernel is one row tall in H and
  // taller in D, consecutive tasks then read the same dy rows for different D taps, from cache. Not where
  // AMX row tasks take a dy window (dy_window), which needs plane order.
  bool d_inner = false;
  // AMX row tasks of one group, channel blocks in turn: each thread takes a share of the tasks and converts
  // the dy planes they reach into a window of its own (dy_window_planes planes, sliding along them) just
  // before it needs them, instead of all of dy into the workspace beforehand.
  bool dy_window = false;
  std::int64_t dy_window_planes = 0;
  bool staged = false;  // tiles go to a staging buffer (a row or a plane), stored afterwards
  // Row tiles of full channel blocks go straight into y (fp32 with contiguous channels, not staged), except
  // AMX tiles, which always go through the staging tile.
  bool y_direct = false;
  // Tiles written straight into an fp32 y with contiguous channels (in plane tasks, those written once), and
  // the 16-pixel runs of a channel-first fp32 y's staged rows, use non-temporal stores: y is too large
  // to stay in the caches, and plain stores would first read every line of it from memory. Channel-last:
  // set only where every tile's pixels are whole 64-byte lines once y itself is 64-byte aligned (checked
  // per call); channel-first: each run that is a whole aligned line.
  bool uncached_y = false;
  std::int64_t weight_budget = 0, plane_budget = 0;  // bytes of L2 for a block's filter, a staged plane
  // Consecutive channel blocks of a group packed together, in one pass over a filter whose input channels
  // are contiguous (NDHWC): for each pair of output channels the packers read the blocks' runs close
  // together, neighbouring lines of the filter row, where each block's own pass would read short runs a row
  // apart (whole 64-byte lines or less, which the hardware prefetchers do not follow). A call that packs as
  // it goes (no kept filter) packs that many blocks into a thread's buffers, then runs their tasks.
  int pack_span = 1;

  std::string describe() const;
};

GemmConfig gemm_config(const Problem&, const CpuModel&, Isa isa, int threads, const GemmTuning& = {});

std::unique_ptr<EngineImpl> make_gemm_amx_bf16(const EngineRequest&, std::string& why_not);
std::unique_ptr<EngineImpl> make_gemm_avx512_bf16(const EngineRequest&, std::string& why_not);
std::unique_ptr<EngineImpl> make_gemm_avx512(const EngineRequest&, std::string& why_not);
std::unique_ptr<EngineImpl> make_gemm_avx2(const EngineRequest&, std::string& why_not);

// The problem the engine computes: where the kernel is one pixel wide in H and W, at stride 1 and without
// pads there (y pixel (h, w) then takes dy pixel (h, w) alone), and both tensors' rows follow one another in
// memory, y rows merged k at a time (k dividing H, rows of up to 256 pixels); otherwise p. Tiles then cross
// row ends, so (3, 1, 1) and 1 x 1 x 1 kernels on short rows keep to the widest tiles, and rows stay short
// enough for many tasks each reading little dy. Each pixel's sum is the same, so are the bits.
Problem rows_merged(const Problem& p);

// The same engines with explicit blocking; `isa` picks the kernel set (amx_bf16, avx512_bf16, avx512, avx2).
std::unique_ptr<EngineImpl> make_gemm(const EngineRequest&, Isa isa, const GemmTuning&, std::string& why_not);

}  // namespace conv3d_dx::cpu
