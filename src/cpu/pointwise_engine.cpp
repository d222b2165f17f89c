#include "cpu/pointwise_engine.hpp"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <vector>

#include "common/parallel.hpp"
#include "cpu/kernels.hpp"
#include "cpu/support.hpp"
#include "problem/checked.hpp"

namespace conv3d_dx::cpu {

// Tiles of kMinWidth to kMaxWidth pixels of one image: wider tiles read each channel block's filter fewer
// times, but every thread should get two (where the images allow). A tile's dy is transposed into a panel
// in chunks of reduction steps, each reduced into accumulators for all of the tile's input channels before
// the next is transposed, so that a block's kernel calls find the panel, the block's filter for the chunk
// and its accumulators in L2 however long the reduction (one chunk where all of it fits). Ice Lake Xeon,
// fp32, in one process against the earlier tiles of at most 144 pixels with the whole reduction in the
// panel (Cout -> Cin over the pixels; 12-60 alternating calls, 2 or 3 runs; 2 threads, then 1): i (2730 ->
// 256, 4 images of 16 x 16, now 4 chunks of 683 over whole images) 0.92-0.95x the time, 1 thread
// 0.92-0.96x; 1024 -> 1024 over 4 x 16 x 16 0.88-0.93x (0.96-1.01x); 512 -> 64 over 8 x 32 x 32 0.89-0.90x
// (0.99x); 2048 -> 128 over 2 x 8 x 8 0.62-0.78x (0.97x); 256 -> 256 over 16 x 32 x 32 and 64 -> 512 over 2
// images of 8 x 32 x 32 unchanged (0.93-1.03x).
constexpr std::int64_t kMinWidth = 48, kMaxWidth = 256;

// AMX (channel-last tensors): tiles of kAmxWidth pixels, reduced in chunks of kAmxChunk channel pairs. Each
// chunk of the tile's dy is copied into a panel (a pixel's pairs on one 64-byte-aligned row, so the tiles
// load it as it lies) as it is reduced, where it stays in L1 for every block's tile products, the blocks'
// filter for the chunk streaming from L2; a separate pass converting all of dy first would write it out and
// read it back. The width is fixed (not shared out by threads): from a chunk whose panel holds a tiny value
// on, a tile runs the exact kernels, whose sums AMX's do not match bit for bit, so which other pixels share
// a pixel's tile must not depend on the thread count.
// The filter tiles are loaded with the streaming hint (tileloaddt1), leaving L1 to the panel. Only where a
// group's packed filter fits in 3/4 of L2 (make_pointwise): each tile reads all of it.
// Xeon with AMX (model 167), bf16 channels_last, 2 threads, medians of paired calls against the GEMM engine
// (which converts all of dy first): suite i (2730 -> 256 over 4 x 16 x 16) 0.86-0.93x the time, 512 -> 64
// over 2 x 8 x 32 x 32 0.61x, 64 -> 512 0.75x, 256 -> 256 over 16 x 32 x 32 0.88x, 2048 -> 128 over 2 x 2 x 8
// x 8 0.87x; HiFloat8 i 0.90x, FP8 i 0.93x (chunks of 128 pairs). On i, tiles of 64 pixels took the same,
// of 96 or 128 pixels 1.11x; 1024 -> 1024 over 4 x 16 x 16 (a 2 MiB filter) 1.05-1.19x, hence the bound.
// Chunks of 256 pairs (a 34 KiB panel) against 128, once the tile kernels kept the floating-point unit
// awake (kernels_amx.cpp), in runs of both orders: i 0.94-0.96x the time (one run 1.00x), 512 -> 64 over
// 2 x 8 x 32 x 32 0.89-0.93x, 1024 -> 256 over 4 x 16 x 16 0.86-0.98x; 8-bit i within noise (HiFloat8
// 0.94-0.97x, FP8 0.88x and 1.02x). Shapes whose reduction fits one chunk of 128, the same code in both,
// read 0.93-0.98x: the noise of these runs. 512 pairs took 1.08x on i, 192 about 256's time, 64
// 1.12-1.22x.
constexpr std::int64_t kAmxWidth = 32, kAmxChunk = 256;
constexpr bool kAmxStreamFilter = true;

// Channels as AMX tiles take them: input channels in blocks of 32, output channels in products of 16 pairs.
inline std::int64_t amx_padded(std::int64_t channels) { return ceil_div(channels, 32) * 32; }

// Filter values broadcast over pixel vectors (AVX2; AVX-512 below): y's rows are computed as they lie, (input
// channel, tap) rows x kBroadcastNv vectors of pixels per kernel call (the filter-streaming tiles, 6 x 2 on
// AVX2, 12 x 2 on AVX-512), so neither dy nor y is transposed. Per tile of up to kBroadcastWidth pixels and
// chunk of output channels, dy's rows are copied into a panel of [vector][channel][pixels] (within a quarter
// of L2; one vector's part stays in L1 across a block's rows); the chunk's filter is reduced against it a
// block of rows at a time (within half of L2, reused over the tile's vectors); the accumulators of all rows
// (within half of L2 unless one call's pixels exceed it) are carried from chunk to chunk. Only the lanes
// past a tile's pixels (zero in the panel) can sum a 0 x inf, and they are never stored. A kernel k <= stride
// (no padding) gives each y pixel at most one tap: the same product over dy's pixels with (input channel,
// tap) rows, each row stored to its phase of y (W taps 2: interleaved), the phases past the kernel zero. Zen
// 3, 2 threads, NCDHW, medians of 15 paired calls against the transposing tiles (pointwise) or the GEMM
// engine (k <= stride), Cout -> Cin: i (2730 -> 256 over 4 x 16 x 16) 0.91x the time, 1024 -> 1024 over 4 x
// 16 x 16 0.95x, 512 -> 64 over 8 x 32 x 32 0.95x, 256 -> 256 over 16 x 32 x 32 0.95x, 64 -> 512 over 2 x 8 x
// 32 x 32 0.94x, 32 -> 32 over 16 x 64 x 64 0.92x, 2048 -> 512 over 8 x 8 0.98x, but 2048 -> 128 over 2 x 8 x
// 8 1.07x (0.51 ms); k2 s2: unet_up (128 -> 64 onto 16 x 64 x 64) 0.79x, 256 -> 128 onto 16 x 32 x 32 0.76x,
// 64 -> 32 onto 2 x 16 x 64 x 64 0.72x, 512 -> 256 onto 8 x 16 x 16 0.85x; k1 s2 (21 calls): k1s2 (256 -> 128
// onto 2 x 8 x 32 x 32) 0.95x, 128 -> 64 onto 2 x 16 x 32 x 32 0.84x, 256 -> 128 onto 16 x 64 x 64 0.80x.
// bf16 (widened as copied): i 0.85x, unet_up 0.87x, 512 -> 64 0.70x; HiFloat8 i 0.96x, unet_up 0.78x. AVX-512
// (12 x 2 tiles of 16-pixel vectors) takes only kernels <= stride other than 1 x 1 x 1 at stride 1, with at
// most kAvx512BroadcastRows (input channel, tap) rows, and only on CPUs whose table says so
// (CpuModel::broadcast_one_tap_avx512). Xeon with AMX (model 167), fp32, NCDHW, 2 threads, medians of 15-21
// paired calls against the GEMM engine, Cout -> Cin: unet_up 0.76-0.78x the time, 256 -> 128 onto 16 x 32 x
// 32 0.93-0.97x, 384 -> 192 onto 8 x 32 x 32 0.95-0.98x, 192 -> 96 onto 16 x 32 x 32 0.88x, 64 -> 32 onto 2 x
// 16 x 64 x 64 0.62x, 32 -> 16 onto 32 x 64 x 64 0.58x, but 512 -> 256 onto 8 x 16 x 16 (2048 rows)
// 1.06-1.09x; k1 s2: k1s2 0.62-0.80x, 128 -> 64 onto 2 x 16 x 32 x 32 0.52-0.63x, 256 -> 128 onto 16 x 64 x
// 64 0.58-0.60x. Pointwise problems against the transposing tiles were mixed (32 -> 32 over 16 x 64 x 64
// 0.75-0.86x, 64 -> 512 0.84-0.94x; i 1.02-1.04x, 1024 -> 1024 1.08-1.12x, 64 -> 64 over 16 x 64 x 64
// 1.06-1.17x) and keep the transposes. On the one-tap shapes (each variant one run against the GEMM engine)
// 3 vectors of pixels (8-row tiles) or 1 (24 rows) took longer than 2: unet_up 0.84-0.94x, 512 -> 256
// 1.22-1.67x, k1s2 about the same (0.78-0.80x); tiles of 128 pixels read within 0.04 of 64's ratios except
// k1s2 (0.80x against 0.62x).
constexpr int kBroadcastNv = 2;
constexpr std::int64_t kBroadcastWidth = 64;
constexpr std::int64_t kAvx512BroadcastRows = 1536;

namespace {

// A 1 x 1 x 1 kernel at stride 1 without padding.
bool pointwise_kernel(const Problem& p) {
  const std::array<std::int64_t, 3> ones{1, 1, 1}, zeros{0, 0, 0};
  return p.kernel == ones && p.stride == ones && p.pad_front == zeros && p.pad_back == zeros;
}

// A kernel that gives each y pixel at most one tap: kernel <= stride, no padding, no dilation (where the
// kernel is wider than 1), y = stride x dy (nothing left over), stride at most 2 along W.
bool one_tap_kernel(const Problem& p) {
  const std::array<std::int64_t, 3> zeros{0, 0, 0};
  bool one_tap = p.pad_front == zeros && p.pad_back == zeros && p.stride[2] <= 2;
  for (int a = 0; a < 3; ++a)
    one_tap &= p.kernel[a] <= p.stride[a] && (p.kernel[a] == 1 || p.dilation[a] == 1) &&
               p.y_size[a] == p.stride[a] * p.dy_size[a];
  return one_tap;
}

std::int64_t broadcast_rows(const Problem& p) {
  return saturating_mul(p.Cin_g, p.kernel[0] * p.kernel[1] * p.kernel[2]);
}

// Whether `isa`'s broadcast mode takes one-tap kernels on `cpu`: AVX2 always, AVX-512 by the CPU's table.
bool takes_one_tap(const CpuModel& cpu, Isa isa) {
  return isa == Isa::avx2 || (isa == Isa::avx512 && cpu.broadcast_one_tap_avx512);
}

// Whether `isa`'s pointwise engine runs p in the broadcast mode (make_pointwise checks one_tap_kernel):
// everything on AVX2; on AVX-512 one-tap kernels other than 1 x 1 x 1 at stride 1, up to the row bound.
bool broadcasts(const Problem& p, const CpuModel& cpu, Isa isa) {
  if (isa == Isa::avx2) return true;
  return takes_one_tap(cpu, isa) && !pointwise_kernel(p) && broadcast_rows(p) <= kAvx512BroadcastRows;
}

}  // namespace

PointwiseBlocking broadcast_blocking(const Problem& p, const CpuModel& cpu, int threads,
                                     const KernelSet& ks) {
  PointwiseBlocking b;
  b.broadcast = true;
  b.nv = kBroadcastNv;
  b.rows = ks.stream_rows[b.nv];
  const std::int64_t vl = b.nv * ks.lanes, rows = p.Cin_g * p.kernel[0] * p.kernel[1] * p.kernel[2];
  const std::int64_t pixels = std::max<std::int64_t>(1, p.dy_size[0] * p.dy_size[1] * p.dy_size[2]),
                     images = std::max<std::int64_t>(1, p.N * p.G);
  const std::int64_t tiles_per_image =
      std::min(ceil_div(2 * std::int64_t{threads}, images), ceil_div(pixels, vl));
  b.width = std::min(ceil_div(ceil_div(pixels, tiles_per_image), vl), kBroadcastWidth / vl) * vl;
  while (b.width > vl && rows * b.width * 4 > cpu.l2_bytes / 2) b.width -= vl;
  // The panel within a quarter of L2, a block of the filter's rows for the chunk within half.
  const std::int64_t most = std::max<std::int64_t>(16, cpu.l2_bytes / 4 / (4 * b.width));
  b.chunk =
      std::max<std::int64_t>(1, ceil_div(p.Cout_g, std::max<std::int64_t>(1, ceil_div(p.Cout_g, most))));
  const std::int64_t block =
      std::max<std::int64_t>(b.rows, cpu.l2_bytes / 2 / (4 * b.chunk) / b.rows * b.rows);
  b.row_block = std::min(block, ceil_div(rows, b.rows) * b.rows);
  b.kp = 0;
  return b;
}

PointwiseBlocking pointwise_blocking(const Problem& p, const CpuModel& cpu, int threads, Isa isa) {
  const KernelSet& ks = kernels_for(isa);
  if (isa == Isa::amx_bf16) {
    PointwiseBlocking b;
    b.nv = 2;
    b.width = kAmxWidth;
    b.chunk = std::min(amx_padded(p.Cout_g) / 2, kAmxChunk);
    b.kp = (ceil_div(b.chunk, 16) | 1) * 16;
    return b;
  }
  if (broadcasts(p, cpu, isa)) return broadcast_blocking(p, cpu, threads, ks);
  const std::int64_t steps = isa == Isa::avx512_bf16 ? (p.Cout_g + 1) / 2 : p.Cout_g;
  PointwiseBlocking b;
  b.nv = static_cast<int>(std::min<std::int64_t>(ks.nv_for_reduction(steps), ceil_div(p.Cin_g, ks.lanes)));
  const std::int64_t unit = b.nv * ks.lanes, channels = ceil_div(p.Cin_g, unit) * unit;
  const std::int64_t pixels = p.y_size[0] * p.y_size[1] * p.y_size[2],
                     images = std::max<std::int64_t>(1, p.N * p.G);
  // Tiles enough for two per thread, as far as kMinWidth allows (then rather fewer, equal ones).
  const std::int64_t tiles_per_image =
      std::min(ceil_div(2 * std::int64_t{threads}, images), std::max<std::int64_t>(1, pixels / kMinWidth));
  b.width = std::min(
      {ceil_div(ceil_div(pixels, tiles_per_image), 6) * 6, kMaxWidth, std::max<std::int64_t>(pixels, 1)});
  // A block's kernel calls work on the panel, the block's filter for the chunk and its accumulators:
  // together within 3/4 of L2.
  const auto most_steps = [&] {
    const std::int64_t room = cpu.l2_bytes * 3 / 4 - b.width * unit * 4;
    return std::max<std::int64_t>(16, room / (4 * (b.width + unit)) / 16 * 16 - 16);
  };
  // With chunks, the accumulators of all blocks (streamed back in for each chunk) within twice L2.
  if (steps > most_steps())
    while (b.width > kMinWidth && channels * b.width * 4 > 2 * cpu.l2_bytes) b.width -= 6;
  b.chunk =
      std::max<std::int64_t>(1, ceil_div(steps, std::max<std::int64_t>(1, ceil_div(steps, most_steps()))));
  // A pixel's panel row spans an odd number of cache lines, so the rows of a kernel call's pixels do not
  // share L1 sets.
  b.kp = (ceil_div(b.chunk, 16) | 1) * 16;
  // y's lines are written once, whole, by the runs of its channels: past the caches where the transposing
  // store can and y outgrows L2, as in the GEMM engine.
  b.uncached_y = ks.transposes_uncached && y_outgrows_l2(p, cpu, threads);
  return b;
}

namespace {

constexpr std::int64_t kTasksPerThread = 4;  // runs of tiles per thread worth cutting images into
constexpr std::int64_t kRows = 32;  // dy rows per transposed block (16 channel pairs); also the prefetch lead
constexpr std::int64_t kRowsAhead = 8;  // broadcast mode: dy rows prefetched ahead of the copy

class PointwiseEngine final : public EngineImpl {
 public:
  // b: pointwise_blocking's for the request.
  PointwiseEngine(const EngineRequest& request, Isa isa, const KernelSet& ks, bool pairs,
                  const PointwiseBlocking& b)
      : name_(std::string("pointwise_") + to_string(isa)),
        p_(request.problem),
        threads_(request.threads),
        ks_(ks),
        amx_(isa == Isa::amx_bf16),
        pairs_(pairs),
        broadcast_(b.broadcast),
        k_(amx_    ? amx_padded(p_.Cout_g) / 2
           : pairs ? (p_.Cout_g + 1) / 2
                   : p_.Cout_g),
        nv_(b.nv),
        unit_(nv_ * ks.lanes),
        units_(ceil_div(p_.Cin_g, unit_)),
        taps_(p_.kernel[0] * p_.kernel[1] * p_.kernel[2]),
        rows_(p_.Cin_g * taps_),
        tile_rows_(b.rows),
        row_block_(b.row_block),
        pixels_(p_.dy_size[0] * p_.dy_size[1] * p_.dy_size[2]),
        elem_(static_cast<std::int64_t>(dtype_size(p_.dy_dtype))),
        width_(b.width),
        chunk_(b.chunk),
        chunks_(std::max<std::int64_t>(1, ceil_div(k_, chunk_))),
        kp_(b.kp),
        uncached_y_(b.uncached_y),
        dy_reader_(p_.dy_dtype, p_.input_rounding),
        w_reader_(p_.filter_dtype, p_.input_rounding),
        direct_(!pairs && dy_reader_.as_stored()) {
    const Problem& p = p_;
    const std::int64_t images = std::max<std::int64_t>(1, p.N * p.G);
    // The packed filter; per thread a dy panel, a block of rows and the accumulators (see execute).
    const std::int64_t packed = broadcast_ ? saturating_mul(saturating_mul(p.G, rows_), k_ * 4)
                                           : saturating_mul(saturating_mul(p.G * units_, k_), unit_ * 4);
    check_memory(request, name(), {packed, 0, saturating_mul(scratch_floats(), 4)});
    wpack_ = alloc_zeroed64(static_cast<std::size_t>(packed), "the packed filter");
    if (broadcast_) zeros_.assign(static_cast<std::size_t>(2 * width_), 0.0f);
    // Each image's pixels are cut into runs of whole tiles, enough of them to share out. A pixel's sum does
    // not depend on which tile holds it (the exact kernels a tile's tiny value calls for give vdpbf16ps's
    // bits where it flushes nothing; AMX tiles are of a fixed width), so neither does the result. (N = 0 or
    // an empty map: one empty run, so that nothing divides by zero.)
    const std::int64_t tiles = std::max<std::int64_t>(1, ceil_div(pixels_, width_));
    const std::int64_t cuts =
        std::min(tiles, std::max<std::int64_t>(1, ceil_div(kTasksPerThread * threads_, images)));
    run_tiles_ = ceil_div(tiles, cuts);
    runs_ = ceil_div(tiles, run_tiles_);
  }

  std::string name() const override { return name_; }
  std::string config() const override {
    if (broadcast_)
      return "filter broadcast over " + std::to_string(unit_) + " pixels per call, " +
             std::to_string(tile_rows_) + " (input channel, tap) rows per call, tiles of up to " +
             std::to_string(width_) + " pixels, reduction in " + std::to_string(chunks_) +
             (chunks_ > 1 ? " chunks of " : " chunk of ") + std::to_string(chunk_) + " channels";
    return std::string(amx_ ? "AMX tiles, channel-last, " : "") + "tiles of up to " + std::to_string(width_) +
           " pixels, channel blocks of " + std::to_string(unit_) + ", reduction in " +
           std::to_string(chunks_) + (chunks_ > 1 ? " chunks of " : " chunk of ") + std::to_string(chunk_) +
           (pairs_ ? " channel pairs" : " channels") + (uncached_y_ ? ", y stored uncached" : "");
  }

  // Per unit of unit_ input channels (group g, block b; the last block's padding stays zero):
  // [g][b][co][unit_] fp32, or [g][b][co / 2][unit_][2] bf16.
  void pack_filter(const void* filter) override {
    if (broadcast_) {
      pack_filter_rows(filter);
      return;
    }
    const auto& s = p_.filter_strides;
    // Per unit: whether it holds a bf16 value too small for vdpbf16ps (tiny_bf16).
    std::vector<unsigned char> tiny(static_cast<std::size_t>(p_.G * units_), 0);
    // fp32 runs with contiguous input channels (any 1 x 1 x 1 NCDHW filter) are widened by vector kernels.
    const bool widen = !pairs_ && s[1] == 1 && w_reader_.widens(ks_);
    // bf16 pairs from bf16 or 8-bit runs of contiguous input channels (any 1 x 1 x 1 NCDHW or NDHWC filter):
    // each pair of output channels' runs interleaved (8-bit codes widened by table on the way) by a kernel.
    const Lut8* lut = w_reader_.bf16_lut();
    const bool pair_runs = pairs_ && s[1] == 1 &&
                           (lut != nullptr ? ks_.widen8_pairs != nullptr
                                           : p_.filter_dtype == DType::bf16 && ks_.interleave_bf16);
    w_reader_.visit(filter, [&](auto get) {
      parallel_for(threads_, p_.G * units_, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t unit = begin; unit < end; ++unit) {
          const std::int64_t g = unit / units_, ci0 = unit % units_ * unit_;
          const std::int64_t valid = std::min<std::int64_t>(unit_, p_.Cin_g - ci0);
          bool any = false;
          if (pair_runs) {  // a pair of output channels' runs interleaved by a kernel
            auto* w = static_cast<std::uint16_t*>(wpack_.get()) + unit * k_ * unit_ * 2;
            for (std::int64_t co = 0; co < p_.Cout_g; co += 2, w += unit_ * 2) {
              const std::int64_t src = (g * p_.Cout_g + co) * s[0] + ci0;
              const bool second = co + 1 < p_.Cout_g;
              if (lut != nullptr) {
                const auto* codes = static_cast<const std::uint8_t*>(filter);
                any |= ks_.widen8_pairs(codes + src, second ? codes + src + s[0] : nullptr, *lut, w, valid,
                                        false);
              } else {
                const auto* bits = static_cast<const std::uint16_t*>(filter);
                any |= ks_.interleave_bf16(bits + src, second ? bits + src + s[0] : nullptr, w, valid, false);
              }
            }
            tiny[static_cast<std::size_t>(unit)] = any;
            continue;
          }
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
      const Scratch scratch = scratch_sizes();
      std::vector<float> panel(static_cast<std::size_t>(scratch.panel + 16));  // 4-byte units
      std::vector<float> rows(static_cast<std::size_t>(scratch.rows + 16));    // fill_panel's
      std::vector<float> acc(static_cast<std::size_t>(scratch.acc + 16));
      auto* const panel64 = static_cast<float*>(align64(panel.data()));
      auto* const rows64 = static_cast<float*>(align64(rows.data()));
      auto* const acc64 = static_cast<float*>(align64(acc.data()));
      for (std::int64_t t = begin; t < end; ++t) {
        if (broadcast_)
          run_task_broadcast(t, dy, y, panel64, rows64, acc64);
        else
          run_task(t, dy, y, panel64, rows64, acc64);
      }
      if (uncached_y_) _mm_sfence();  // this thread's non-temporal stores, before the threads join
      if (amx_) amx_release();
    });
  }

 private:
  // Per thread, in floats: the dy panel, rows widened or staged on the way into it, the accumulators.
  struct Scratch {
    std::int64_t panel, rows, acc;
  };
  Scratch scratch_sizes() const {
    if (broadcast_) return {chunk_ * width_, width_, rows_ * width_};
    return {kp_ * width_, amx_ ? 0 : kRows * width_, acc_units() * unit_ * width_};
  }
  std::int64_t scratch_floats() const {
    const Scratch s = scratch_sizes();
    return s.panel + s.rows + s.acc + 48;
  }

  // Blocks of unit_ input channels whose accumulators are kept at once: all of them when the reduction
  // comes in chunks, otherwise one, stored before the next is computed.
  std::int64_t acc_units() const { return chunks_ > 1 ? units_ : 1; }

  // One task: a run of tiles of image (n, g). Per tile and chunk of reduction steps, the tile's pixels of
  // that chunk of dy are moved into `panel` (fill_panel: transposed; fill_panel_channel_last: copied), then
  // each block of unit_ input channels is reduced against it into its accumulators ([pixel][unit_],
  // continuing the sums of the chunks before) by the GEMM engine's tile kernels or AMX tiles, and stored
  // after the last chunk. Each pixel's sum runs over the output channels in order, as one reduction would:
  // the chunking changes no bit, except that from a chunk holding a tiny value on the tile's chunks run the
  // exact kernels (AMX and vdpbf16ps would flush the denormal sums they may leave).
  void run_task(std::int64_t t, const void* dy, void* y, float* panel, float* rows, float* acc) const {
    const std::int64_t run = t % runs_, g = t / runs_ % p_.G, n = t / runs_ / p_.G;
    const auto &ds = p_.dy_strides, &ys = p_.y_strides;
    const std::int64_t p_end = std::min(pixels_, (run + 1) * run_tiles_ * width_);
    const std::int64_t unit_elems = pairs_ ? 2 : 1;  // dy elements per panel unit (an fp32 value or a pair)
    for (std::int64_t p0 = run * run_tiles_ * width_; p0 < p_end; p0 += width_) {
      const std::int64_t m = std::min(width_, p_end - p0), calls = ceil_div(m, ks_.max_m[nv_]);
      bool exact = pairs_ && tiny_filter_;
      for (std::int64_t c = 0; c < chunks_; ++c) {
        const std::int64_t q0 = c * chunk_, q1 = std::min(k_, q0 + chunk_);
        const bool tiny =
            amx_ ? fill_panel_channel_last(dy, n * ds[0] + g * p_.Cout_g + p0 * ds[4], q0, q1, m,
                                           reinterpret_cast<std::uint16_t*>(panel))
                 : fill_panel(dy, n * ds[0] + g * p_.Cout_g * ds[1] + p0, q0, q1, m, panel, rows);
        // bf16 pairs go through AMX or vdpbf16ps unless an input is small enough for them to flush something.
        exact |= pairs_ && tiny;
        const auto& table = !pairs_ ? ks_.f32[nv_] : exact ? ks_.bf16_exact[nv_] : ks_.bf16[nv_];
        for (std::int64_t u = 0; u < units_; ++u) {
          float* const tile = acc + (chunks_ > 1 ? u : 0) * width_ * unit_;
          TapRef tap{0, static_cast<const char*>(wpack_.get()) + ((g * units_ + u) * k_ + q0) * unit_ * 4,
                     q1 - q0, 0, 0};
          if (amx_ && !exact) {  // tiles of up to kAmxMaxM pixels, all but the last of that many
            for (std::int64_t j0 = 0; j0 < m; j0 += kAmxMaxM) {
              const std::int64_t mj = std::min<std::int64_t>(kAmxMaxM, m - j0);
              tap.dy_off = j0 * kp_ * 2;
              amx_kernels().tile[nv_][mj](TileArgs{panel, kp_ * 2, 2, &tap, 1, tile + j0 * unit_, unit_,
                                                   c > 0, false, 16, kAmxStreamFilter});
            }
          } else {
            for (std::int64_t j = 0; j < calls; ++j) {  // the tile's pixels in near-equal kernel calls
              const auto [j0, mj] = even_part(m, calls, j);
              tap.dy_off = j0 * kp_ * unit_elems;
              tap.hi = static_cast<std::int32_t>(mj);
              table[mj](
                  TileArgs{panel, kp_ * unit_elems, unit_elems, &tap, 1, tile + j0 * unit_, unit_, c > 0});
            }
          }
          if (c + 1 < chunks_) continue;
          const std::int64_t c0 = u * unit_, valid = std::min<std::int64_t>(unit_, p_.Cin_g - c0);
          if (amx_)
            store_channel_last(p_, ks_, tile, unit_, m, valid, y, n * ys[0] + g * p_.Cin_g + c0 + p0 * ys[4],
                               ys[4]);
          else
            store_channel_first(p_, ks_, tile, unit_, m, valid, y,
                                n * ys[0] + (g * p_.Cin_g + c0) * ys[1] + p0, ys[1], uncached_y_);
        }
      }
    }
  }

  // Broadcast mode: per group, (input channel, tap) row r = ci * taps_ + tap (kernel order), in tiles of
  // tile_rows_ rows (the last may be shorter), each tile [co][its rows] fp32, so a kernel call reads its
  // filter values in order: [g][tile][co][rows of the tile].
  void pack_filter_rows(const void* filter) {
    const auto& s = p_.filter_strides;
    const std::int64_t kw = p_.kernel[2], khw = p_.kernel[1] * kw;
    // An output channel's rows in one run (input channels contiguous, each with its taps contiguous):
    // widened by a vector kernel.
    const bool run = (taps_ == 1 ? s[1] == 1 : s[4] == 1 && s[3] == kw && s[2] == khw && s[1] == taps_) &&
                     w_reader_.widens(ks_);
    w_reader_.visit(filter, [&](auto get) {
      parallel_for(threads_, p_.G * p_.Cout_g, [&](std::int64_t begin, std::int64_t end) {
        std::vector<float> values(static_cast<std::size_t>(rows_));
        for (std::int64_t gco = begin; gco < end; ++gco) {
          const std::int64_t g = gco / p_.Cout_g, co = gco % p_.Cout_g, at = gco * s[0];
          if (run) {
            w_reader_.widen(ks_, filter, at, rows_, values.data());
          } else {
            for (std::int64_t r = 0; r < rows_; ++r) {
              const std::int64_t ci = r / taps_, t = r % taps_;
              values[static_cast<std::size_t>(r)] =
                  get(at + ci * s[1] + t / khw * s[2] + t / kw % p_.kernel[1] * s[3] + t % kw * s[4]);
            }
          }
          for (std::int64_t r0 = 0; r0 < rows_; r0 += tile_rows_) {
            const std::int64_t n = std::min<std::int64_t>(tile_rows_, rows_ - r0);
            std::memcpy(static_cast<float*>(wpack_.get()) + (g * rows_ + r0) * k_ + co * n,
                        values.data() + r0, static_cast<std::size_t>(n) * sizeof(float));
          }
        }
      });
    });
  }

  // Broadcast mode, one task: a run of tiles of image (n, g). Per tile and chunk of output channels, the
  // tile's dy is copied into `panel` ([vector][channel][unit_ pixels]), then for each vector of pixels each
  // tile of rows is reduced against it into its accumulators (`acc`, [row][width_]), continuing the sums of
  // the chunks before; after the last chunk the rows are stored to y. Each pixel's sum runs over the output
  // channels in order, so neither the tiling nor the chunking changes a bit.
  void run_task_broadcast(std::int64_t t, const void* dy, void* y, float* panel, float* rows,
                          float* acc) const {
    const std::int64_t run = t % runs_, g = t / runs_ % p_.G, n = t / runs_ / p_.G;
    const std::int64_t p_end = std::min(pixels_, (run + 1) * run_tiles_ * width_);
    static constexpr std::int32_t kOneTap = 0;
    for (std::int64_t p0 = run * run_tiles_ * width_; p0 < p_end; p0 += width_) {
      const std::int64_t m = std::min(width_, p_end - p0), vectors = ceil_div(m, unit_);
      for (std::int64_t c = 0; c < chunks_; ++c) {
        const std::int64_t q0 = c * chunk_, q1 = std::min(k_, q0 + chunk_), nq = q1 - q0;
        fill_panel_rows(dy, n * p_.dy_strides[0] + g * p_.Cout_g * p_.dy_strides[1] + p0, q0, q1, m, panel,
                        rows);
        for (std::int64_t rb = 0; rb < rows_; rb += row_block_)
          for (std::int64_t v = 0; v < vectors; ++v)
            for (std::int64_t r0 = rb; r0 < std::min(rows_, rb + row_block_); r0 += tile_rows_) {
              const std::int64_t nr = std::min<std::int64_t>(tile_rows_, rows_ - r0);
              StreamArgs a{};
              a.dycol = panel + v * nq * unit_;
              a.w = static_cast<const float*>(wpack_.get()) + (g * rows_ + r0) * k_ + q0 * nr;
              a.w_cs = nr;
              a.w_rs = 1;
              a.taps = &kOneTap;
              a.ntaps = 1;
              a.nco = nq;
              a.acc = acc + r0 * width_ + v * unit_;
              a.acc_rs = width_;
              a.accumulate = c > 0;
              ks_.stream[nv_][nr](a);
            }
      }
      store_rows(acc, n, g, p0, m, y);
    }
  }

  // Broadcast mode: panel[v][q - q0][i] = dy row q's pixel v * unit_ + i of the tile (fp32, zero past its m
  // pixels), for output channels [q0, q1) and m pixels from dy element `at`; values other than exact fp32
  // widened first (with the input rounding) into `rows`.
  void fill_panel_rows(const void* dy, std::int64_t at, std::int64_t q0, std::int64_t q1, std::int64_t m,
                       float* panel, float* rows) const {
    const std::int64_t cs = p_.dy_strides[1], nq = q1 - q0, vectors = ceil_div(m, unit_);
    const bool in_place = p_.dy_dtype == DType::f32 && dy_reader_.as_stored();
    const auto* dy_bytes = static_cast<const char*>(dy);
    for (std::int64_t q = q0; q < q1; ++q) {
      // Rows lie a plane apart: each is requested a few rows ahead. (Requesting the first rows before the
      // loop too measured 1.03-1.05x the time on Zen 3.)
      if (q + kRowsAhead < q1) prefetch_bytes(dy_bytes + (at + (q + kRowsAhead) * cs) * elem_, m * elem_);
      const float* src;
      if (in_place) {
        src = static_cast<const float*>(dy) + at + q * cs;
      } else {
        if (dy_reader_.widens(ks_))
          dy_reader_.widen(ks_, dy, at + q * cs, m, rows);
        else
          dy_reader_.visit(dy, [&](auto get) {
            for (std::int64_t i = 0; i < m; ++i) rows[i] = get(at + q * cs + i);
          });
        src = rows;
      }
      for (std::int64_t v = 0; v < vectors; ++v) {
        float* const dst = panel + (v * nq + q - q0) * unit_;
        const std::int64_t count = std::min(unit_, m - v * unit_);
        std::memcpy(dst, src + v * unit_, static_cast<std::size_t>(count) * sizeof(float));
        std::fill(dst + count, dst + unit_, 0.0f);
      }
    }
  }

  // Broadcast mode: the tile's accumulator rows (m pixels of dy from p0 in image n, group g) to y. Row
  // ci * taps_ + tap holds y's phase (tap) of channel ci: pointwise one run of y's plane; otherwise, per dy
  // row, the y rows of its stride x stride pixels (D, H), each with y's pixels stride apart from the tap,
  // W taps 2 interleaved (row tap + 1 holds kw = 1), one W tap at W stride 2 interleaved with zeros; y
  // pixels no tap reaches (a phase past the kernel) are zero.
  void store_rows(const float* acc, std::int64_t n, std::int64_t g, std::int64_t p0, std::int64_t m,
                  void* y) const {
    const auto& ys = p_.y_strides;
    const std::int64_t kd = p_.kernel[0], kh = p_.kernel[1], kw = p_.kernel[2];
    const std::int64_t sd = p_.stride[0], sh = p_.stride[1], sw = p_.stride[2];
    const std::int64_t dw = p_.dy_size[2], dh = p_.dy_size[1];
    const float* const zeros = zeros_.data();
    for (std::int64_t ci = 0; ci < p_.Cin_g; ++ci) {
      const std::int64_t base = n * ys[0] + (g * p_.Cin_g + ci) * ys[1];
      if (sd * sh * sw == 1) {  // pointwise
        store_run(p_, ks_, acc + ci * width_, 1, y, base + p0, 1, m);
        continue;
      }
      for (std::int64_t td = 0; td < sd; ++td)
        for (std::int64_t th = 0; th < sh; ++th) {
          const bool taps = td < kd && th < kh;  // whether the row's phase has taps
          const float* const row = taps ? acc + (ci * taps_ + (td * kh + th) * kw) * width_ : nullptr;
          for (std::int64_t o = p0; o < p0 + m;) {  // runs along one dy row
            const std::int64_t w = o % dw, len = std::min(p0 + m - o, dw - w);
            const std::int64_t at =
                base + (sd * (o / dw / dh) + td) * ys[2] + (sh * (o / dw % dh) + th) * ys[3] + sw * w;
            if (!taps)
              store_run(p_, ks_, zeros, 1, y, at, 1, sw * len);
            else if (sw == 1)
              store_run(p_, ks_, row + (o - p0), 1, y, at, 1, len);
            else
              store_interleaved(row + (o - p0), kw == 2 ? row + width_ + (o - p0) : zeros, len, y, at);
            o += len;
          }
        }
    }
  }

  // y[at + 2 i] = a[i], y[at + 2 i + 1] = b[i] for i < n, in y's dtype.
  void store_interleaved(const float* a, const float* b, std::int64_t n, void* y, std::int64_t at) const {
    if (p_.y_dtype == DType::f32) {
      ks_.interleave_f32(a, b, static_cast<float*>(y) + at, 2 * n);
      return;
    }
    constexpr std::int64_t kPart = 256;
    alignas(64) float line[2 * kPart];
    for (std::int64_t i = 0; i < n; i += kPart) {
      const std::int64_t len = std::min(kPart, n - i);
      ks_.interleave_f32(a + i, b + i, line, 2 * len);
      store_run(p_, ks_, line, 1, y, at + 2 * i, 1, 2 * len);
    }
  }

  // AMX: panel row i (kp_ pairs, 4 kp_ bytes) = the tile's pixel i's dy channels [2 q0, 2 q1) as bf16, the
  // channels past Cout_g zero, for m pixels from dy element `at` (channel-last: pixels ds[4] apart). bf16
  // is copied by a kernel that notes tiny values (tiny_bf16) on the way; 8-bit codes are widened through
  // their bf16 table (never tiny). Returns whether a value is tiny.
  bool fill_panel_channel_last(const void* dy, std::int64_t at, std::int64_t q0, std::int64_t q1,
                               std::int64_t m, std::uint16_t* panel) const {
    const std::int64_t ps = p_.dy_strides[4], count = std::min(p_.Cout_g, 2 * q1) - 2 * q0,
                       row = 2 * (q1 - q0);
    const Lut8* lut = dy_reader_.bf16_lut();
    bool tiny = false;
    for (std::int64_t i = 0; i < m; ++i) {
      std::uint16_t* const dst = panel + i * kp_ * 2;
      const std::int64_t src = at + i * ps + 2 * q0;
      if (lut != nullptr)
        ks_.widen8(static_cast<const std::uint8_t*>(dy) + src, *lut, dst, count);
      else
        tiny |= ks_.copy_bf16(static_cast<const std::uint16_t*>(dy) + src, count, dst);
      std::fill(dst + count, dst + row, std::uint16_t{0});
    }
    return tiny;
  }

  // panel[i][q - q0] = the tile's pixel i in dy row q (fp32), or rows 2q and 2q + 1 as a bf16 pair (the
  // pair of an odd Cout_g's last row holds +0), for reduction steps [q0, q1) and m pixels from dy element
  // `at`: blocks of kRows rows transposed straight from dy when they are exact fp32 or bf16, otherwise first
  // widened into `rows`. Returns whether a bf16 pair holds a tiny value (tiny_bf16).
  bool fill_panel(const void* dy, std::int64_t at, std::int64_t q0, std::int64_t q1, std::int64_t m,
                  float* panel, float* rows) const {
    const std::int64_t cs = p_.dy_strides[1], row_bytes = m * elem_;
    const std::int64_t first = pairs_ ? 2 * q0 : q0, last = std::min(p_.Cout_g, pairs_ ? 2 * q1 : q1);
    // Rows lie a plane apart in dy: too far for the hardware prefetchers, so each block's rows are
    // requested while the block before is transposed.
    const auto* dy_bytes = static_cast<const char*>(dy);
    const auto prefetch = [&](std::int64_t r0) __attribute__((always_inline)) {
      for (std::int64_t r = r0; r < std::min(r0 + kRows, last); ++r)
        prefetch_bytes(dy_bytes + (at + r * cs) * elem_, row_bytes);
    };
    prefetch(first);
    bool tiny = false;
    for (std::int64_t r0 = first; r0 < last; r0 += kRows) {
      prefetch(r0 + kRows);
      const std::int64_t nr = std::min(kRows, last - r0), src = at + r0 * cs;
      if (pairs_) {
        auto* out = reinterpret_cast<std::uint16_t*>(panel) + (r0 - first);
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
        ks_.store_transposed(dy_bytes + src * elem_, p_.dy_dtype == DType::bf16, cs, nr, m,
                             panel + (r0 - first), StoreType::f32, kp_, false);
      } else {
        if (dy_reader_.widens(ks_)) {  // widened exactly (with the input rounding), run by run
          for (std::int64_t r = 0; r < nr; ++r) dy_reader_.widen(ks_, dy, src + r * cs, m, rows + r * width_);
        } else {
          dy_reader_.visit(dy, [&](auto get) {
            for (std::int64_t r = 0; r < nr; ++r)
              for (std::int64_t i = 0; i < m; ++i) rows[r * width_ + i] = get(src + r * cs + i);
          });
        }
        ks_.store_transposed(rows, false, width_, nr, m, panel + (r0 - first), StoreType::f32, kp_, false);
      }
    }
    return tiny;
  }

  std::string name_;
  Problem p_;
  int threads_;
  const KernelSet& ks_;
  bool amx_;                               // channel-last tensors, bf16 channel pairs on AMX tiles
  bool pairs_;                             // bf16 channel pairs through vdpbf16ps (or AMX)
  bool broadcast_;                         // PointwiseBlocking::broadcast
  std::int64_t k_;                         // reduction steps: Cout_g, or channel pairs
  int nv_;                                 // vectors of input channels (broadcast mode: pixels) per call
  std::int64_t unit_;                      // input channels per block (broadcast: pixels per call)
  std::int64_t units_;                     // blocks of unit_ input channels per group (not broadcast)
  std::int64_t taps_;                      // kernel taps (broadcast mode: kernel <= stride)
  std::int64_t rows_;                      // broadcast mode: (input channel, tap) rows per group
  std::int64_t tile_rows_;                 // broadcast mode: rows per kernel call
  std::int64_t row_block_;                 // broadcast mode: rows per block of the filter (a multiple)
  std::int64_t pixels_;                    // dy's per image: D x H x W, one contiguous row
  std::int64_t elem_;                      // bytes per dy element
  std::int64_t width_;                     // pixels per tile
  std::int64_t chunk_, chunks_;            // reduction steps per panel, panels per tile
  std::int64_t kp_;                        // 4-byte units per pixel of the panel (not broadcast)
  bool uncached_y_;                        // PointwiseBlocking::uncached_y
  std::int64_t run_tiles_ = 1, runs_ = 1;  // tiles per task, tasks per image
  AlignedPtr wpack_;
  std::vector<float> zeros_;  // broadcast mode: zeros for a run of y (2 width_), phases past the kernel
  bool tiny_filter_ = false;  // the packed bf16 filter holds a tiny value (tiny_bf16)
  Reader dy_reader_, w_reader_;
  bool direct_;  // fp32 panels transposed straight from dy: exact fp32 or bf16 values
};

// The planes of a channel-first tensor (C, D, H, W) are contiguous rows of D x H x W elements.
bool contiguous_planes(const std::array<std::int64_t, 5>& s, const std::array<std::int64_t, 3>& extent) {
  return s[4] == 1 && s[3] == extent[2] && s[2] == extent[1] * extent[2];
}

// The pixels of each image of a channel-last tensor lie equally spaced: (D, H, W) merge into one axis.
bool equally_spaced_pixels(const std::array<std::int64_t, 5>& s, const std::array<std::int64_t, 3>& extent) {
  return s[1] == 1 && s[3] == extent[2] * s[4] && s[2] == extent[1] * s[3];
}

}  // namespace

std::unique_ptr<EngineImpl> make_pointwise(const EngineRequest& request, Isa isa, std::string& why_not) {
  const Problem& p = request.problem;
  const bool amx = isa == Isa::amx_bf16;
  const bool pairs = amx || isa == Isa::avx512_bf16;
  // AMX: a group's packed filter values, its channels padded to the tiles.
  const std::int64_t padded_products = saturating_mul(amx_padded(p.Cin_g), amx_padded(p.Cout_g));
  why_not = fast_engine_refusal(isa, request, pairs);
  if (!why_not.empty()) return nullptr;
  const bool pointwise = pointwise_kernel(p);
  // The broadcast mode also takes kernels that give each y pixel at most one tap: on AVX2, and on AVX-512
  // where the CPU's table says so, up to kAvx512BroadcastRows rows.
  const bool any_one_tap = takes_one_tap(request.cpu, isa);
  if (!pointwise && !(any_one_tap && one_tap_kernel(p)))
    why_not = any_one_tap
                  ? "not pointwise (kernel 1x1x1, stride 1, no padding) nor at most one tap per y pixel "
                    "(kernel <= stride, stride at most 2 along W, no padding or dilation, y = stride x dy)"
                  : "not pointwise (kernel 1x1x1, stride 1, no padding)";
  else if (!pointwise && !broadcasts(p, request.cpu, isa))
    why_not = "at most one tap per y pixel, but " + std::to_string(broadcast_rows(p)) +
              " (input channel, tap) rows, more than " + std::to_string(kAvx512BroadcastRows) +
              " (AVX-512: the GEMM engine measured faster)";
  else if (amx && (p.dy_strides[1] != 1 || p.y_strides[1] != 1))
    why_not = "channels are not contiguous (AMX: channel-last tensors)";
  else if (amx &&
           (!equally_spaced_pixels(p.dy_strides, p.dy_size) || !equally_spaced_pixels(p.y_strides, p.y_size)))
    why_not = "an image's pixels are not equally spaced";
  else if (!amx && (p.dy_strides[1] == 1 || p.y_strides[1] == 1))
    why_not = "channels are contiguous (the GEMM engine's layout)";
  else if (!amx && (!contiguous_planes(p.dy_strides, p.dy_size) || !contiguous_planes(p.y_strides, p.y_size)))
    why_not = "feature-map planes are not contiguous";
  else if (amx && padded_products > saturating_mul(16, saturating_mul(p.Cin_g, p.Cout_g)))
    why_not =
        "channels padded to 32 would multiply the work by more than 16 (the pixel and GEMM engines' "
        "tiles fit few channels)";
  else if (amx && saturating_mul(padded_products, 2) > request.cpu.l2_bytes * 3 / 4)  // bf16 values
    why_not =
        "a group's packed filter exceeds 3/4 of L2 (the GEMM engine's blocks reuse it over more pixels)";
  else if (isa == Isa::avx512_bf16 && p.dy_dtype != DType::bf16)
    why_not = std::string("dy is ") + to_string(p.dy_dtype) + ", not bf16";
  if (!why_not.empty()) return nullptr;
  return std::make_unique<PointwiseEngine>(request, isa, kernels_for(isa), pairs,
                                           pointwise_blocking(p, request.cpu, request.threads, isa));
}

}  // namespace conv3d_dx::cpu
