#include "cpu/stream_engine.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "common/parallel.hpp"
#include "cpu/geometry.hpp"
#include "cpu/kernels.hpp"
#include "cpu/support.hpp"
#include "problem/checked.hpp"

namespace conv3d_dx::cpu {
namespace {

// When the GEMM engine's packing and reuse of the filter pay instead (paired runs on the Xeon, no AMX,
// against the GEMM engine packing block by block in cache, as it does when the filter is not kept; 3x3x3
// kernels): streamed over 128 pixels a 1.1M-element filter took 1.03x the GEMM engine's time, 7M 0.69x, 28M
// 0.64x; over 32 pixels 3.5M 0.54x. Beyond 128 pixels (the kernels also multiply the zeros where a tap misses
// dy, here at most 1.43x the GEMM engine's multiplies): 256 pixels with 221K filter elements per pixel 0.87x,
// with 110K 1.05x; 512 pixels with 110K 1.05x, with 13.8K 1.38x. (Against the GEMM engine writing the
// whole packed filter, as it did before, 10.4K per pixel already gave 0.66-0.78x.)
constexpr std::int64_t kMaxPixels = 512;              // y pixels of all images (AVX-512: eight chunks of 64)
constexpr std::int64_t kMinFilterElements = 1 << 20;  // below, packing costs little
constexpr std::int64_t kSmallMap = 128;               // pixels beyond which the filter must be larger still
constexpr std::int64_t kElementsPerPixel = 1 << 17;   // ... per pixel
constexpr double kMaxExtraWork = 1.5;                 // and the multiplies no more than this x the GEMM's
constexpr std::int64_t kMaxTaps = 4096;               // per-chunk tap tables stay small
constexpr std::int64_t kDycolBlockBytes = 16 << 10;   // dy rows of one block of output channels: in L1
constexpr std::int64_t kPassBytes = 64 << 10;         // accumulators of one pass of tiles: in L2
constexpr std::int64_t kWidenedBytes = 256 << 10;     // a pass's block of widened filter values: in L2

// Pixels per chunk: up to four vectors of `lanes` (at least one, for an empty y).
std::int64_t chunk_width(std::int64_t pixels, std::int64_t lanes) {
  return lanes * std::min<std::int64_t>(kMaxStreamV, ceil_div(std::max<std::int64_t>(pixels, 1), lanes));
}

// The dy element offset (n, d, h, w; channel 0) that y pixel `pix` of image n takes through flat tap t, or
// -1 when the tap misses dy there.
std::int64_t tap_source(const Problem& p, const Axis (&ax)[3], std::int64_t n, std::int64_t pix,
                        std::int64_t t) {
  const std::int64_t i[3] = {pix / (p.y_size[1] * p.y_size[2]), pix / p.y_size[2] % p.y_size[1],
                             pix % p.y_size[2]};
  const std::int64_t k[3] = {t / (p.kernel[1] * p.kernel[2]), t / p.kernel[2] % p.kernel[1], t % p.kernel[2]};
  std::int64_t off = n * p.dy_strides[0];
  for (int a = 0; a < 3; ++a) {
    const std::int64_t o = ax[a].dy_index(i[a], k[a]);
    if (o < 0) return -1;
    off += o * p.dy_strides[2 + a];
  }
  return off;
}

// One chunk of y pixels (lanes): the taps that reach dy from at least one of its pixels, in kernel order,
// and for each of them the dy element each lane reads (-1: none) and the lanes that read one.
struct Chunk {
  std::int64_t first = 0, count = 0;  // pixels [first, first + count) of N x D x H x W
  std::vector<std::int32_t> taps;     // flat tap index (kd, kh, kw) = element offset in a (co, ci) filter run
  std::vector<std::int64_t> src;      // [tap][lane]: dy element (n, d, h, w) offset of channel 0
  std::vector<std::uint16_t> masks;   // [tap][vector]
};

// Where a call reads the filter: the caller's or the engine's fp32 copy. Element (co, ci, tap t) is at
// co * s0 + ci * s1 + t * st: taps contiguous (st = 1, NCDHW) or input channels contiguous (s1 = 1, NDHWC).
// The kernels read fp32 with contiguous taps in place; anything else is widened (and transposed) pass by
// pass into [co][ci][tap] blocks.
struct FilterSource {
  const void* base;
  bool in_place;
  std::int64_t s0, s1, st;
};

class StreamEngine final : public EngineImpl {
 public:
  StreamEngine(const EngineRequest& request, Isa isa, const KernelSet& ks)
      : name_(std::string("stream_") + to_string(isa)),
        p_(request.problem),
        threads_(request.threads),
        ks_(ks),
        taps_(p_.kernel[0] * p_.kernel[1] * p_.kernel[2]),
        pixels_(p_.y_size[0] * p_.y_size[1] * p_.y_size[2]),
        dy_reader_(p_.dy_dtype, p_.input_rounding),
        w_reader_(p_.filter_dtype, p_.input_rounding) {
    const Problem& p = p_;
    const std::int64_t total = p.N * pixels_;  // 0 when N is 0: no chunks, and run() returns at once
    width_ = chunk_width(total, ks_.lanes);
    v_ = static_cast<int>(width_ / ks_.lanes);
    rows_ = ks_.stream_rows[v_];
    tiles_ = ceil_div(p.Cin_g, rows_);
    co_block_ = std::clamp<std::int64_t>(kDycolBlockBytes / (taps_ * width_ * 4), 1, p.Cout_g);
    // A pass's accumulators and its block of widened filter values stay in L2.
    pass_tiles_ = std::max<std::int64_t>(
        1, std::min(kPassBytes / (rows_ * width_ * 4), kWidenedBytes / (co_block_ * rows_ * taps_ * 4)));
    const auto& s = p.filter_strides;
    taps_first_ = s[4] == 1;
    in_place_ = taps_first_ && p.filter_dtype == DType::f32 && p.input_rounding == InputRounding::none;
    source_ = FilterSource{nullptr, in_place_, s[0], s[1], s[4]};
    const std::int64_t copy = saturating_mul(saturating_mul(p.Cout(), p.Cin_g), taps_ * 4);
    const std::int64_t dycol = saturating_mul(p.Cout(), taps_ * width_ * 4);
    const std::int64_t tables = ceil_div(total, width_) * taps_ * width_ * 10;
    const std::int64_t per_thread =
        (pass_tiles_ * rows_ * width_ + (co_block_ + 1) * pass_tiles_ * rows_ * taps_ + width_ + 64) * 4;
    check_memory(request, name(), {saturating_add(copy, tables), saturating_add(dycol, 64), per_thread});
    const Axis ax[3] = {axis_of(p, 0), axis_of(p, 1), axis_of(p, 2)};
    for (std::int64_t first = 0; first < total; first += width_)
      chunks_.push_back(make_chunk(ax, first, total));
  }

  std::string name() const override { return name_; }
  std::string config() const override {
    return std::string("filter ") + (in_place_ ? "read in place" : "widened pass by pass") + " (" +
           (taps_first_ ? "taps" : "input channels") + " contiguous), " + std::to_string(chunks_.size()) +
           " chunk(s) of " + std::to_string(width_) + " pixels, tiles of " + std::to_string(rows_) +
           " input channels, " + std::to_string(co_block_) + " output channels per dy block";
  }
  std::size_t workspace_bytes() const override {
    return static_cast<std::size_t>(p_.Cout() * taps_ * width_ * 4 + 64);
  }

  // The packed form is the filter widened (and rounded) to fp32, dense [co][ci][tap], written as widened
  // blocks of one output channel and a pass's input channels.
  void pack_filter(const void* filter) override {
    allocate_copy();
    FilterSource f = source_;
    f.base = filter;
    const std::int64_t step = pass_tiles_ * rows_;
    parallel_for(threads_, p_.Cout(), [&](std::int64_t begin, std::int64_t end) {
      const Scratch scratch(*this);
      for (std::int64_t co = begin; co < end; ++co)
        for (std::int64_t ci0 = 0; ci0 < p_.Cin_g; ci0 += step)
          widen_block(f, co, 1, ci0, std::min(step, p_.Cin_g - ci0),
                      static_cast<float*>(copy_.get()) + (co * p_.Cin_g + ci0) * taps_, scratch.rows.get());
    });
  }

  void execute(const void* dy, void* y, void* workspace) const override {
    run(dy, FilterSource{copy_.get(), true, p_.Cin_g * taps_, taps_, 1}, nullptr, y, workspace);
  }

  // Streams the caller's filter; when it is to stay packed, each block of it a pass uses is also stored to
  // the copy (past the caches) while it is in cache.
  void execute_with_filter(const void* dy, const void* filter, void* y, void* workspace, bool keep) override {
    if (keep) allocate_copy();
    FilterSource f = source_;
    f.base = filter;
    run(dy, f, keep ? static_cast<float*>(copy_.get()) : nullptr, y, workspace);
  }

 private:
  Chunk make_chunk(const Axis (&ax)[3], std::int64_t first, std::int64_t total) const {
    Chunk c;
    c.first = first;
    c.count = std::min(width_, total - first);
    std::vector<std::int64_t> src(static_cast<std::size_t>(width_));
    for (std::int64_t t = 0; t < taps_; ++t) {
      bool any = false;
      for (std::int64_t lane = 0; lane < width_; ++lane) {
        const std::int64_t q = first + lane;
        src[static_cast<std::size_t>(lane)] =
            lane < c.count ? tap_source(p_, ax, q / pixels_, q % pixels_, t) : -1;
        any |= src[static_cast<std::size_t>(lane)] >= 0;
      }
      if (!any) continue;
      c.taps.push_back(static_cast<std::int32_t>(t));
      c.src.insert(c.src.end(), src.begin(), src.end());
      for (int v = 0; v < v_; ++v) {
        std::uint16_t m = 0;
        for (int l = 0; l < ks_.lanes; ++l)
          m |= static_cast<std::uint16_t>((src[static_cast<std::size_t>(ks_.lanes * v + l)] >= 0) << l);
        c.masks.push_back(m);
      }
    }
    return c;
  }

  void allocate_copy() {
    if (!copy_)
      copy_ = alloc_zeroed64(static_cast<std::size_t>(p_.Cout() * p_.Cin_g * taps_ * 4), "the filter copy");
  }

  // Per-thread buffers: a pass of tiles' accumulators, a pass's block of widened filter values, one output
  // channel's widened rows before their transpose, one row of sums.
  struct Scratch {
    explicit Scratch(const StreamEngine& e)
        : acc(buffer(e.pass_tiles_ * e.rows_ * e.width_ + 16)),
          w(buffer(e.in_place_ ? 0 : e.co_block_ * e.pass_tiles_ * e.rows_ * e.taps_)),
          rows(buffer(e.taps_first_ ? 0 : e.pass_tiles_ * e.rows_ * e.taps_)),
          row(buffer(e.width_ + 16)) {}
    // Not zeroed: every value is written before it is read (an unused one is never touched).
    static std::unique_ptr<float[]> buffer(std::int64_t n) {
      return std::unique_ptr<float[]>(new float[static_cast<std::size_t>(n)]);
    }
    std::unique_ptr<float[]> acc, w, rows, row;
  };

  void run(const void* dy, const FilterSource& f, float* copy, void* y, void* workspace) const {
    if (p_.N == 0) return;
    float* dycol = static_cast<float*>(align64(workspace));
    for (std::size_t chunk = 0; chunk < chunks_.size(); ++chunk) {
      const Chunk& c = chunks_[chunk];
      gather_dy(c, dy, dycol);
      parallel_for(threads_, p_.G * tiles_, [&](std::int64_t begin, std::int64_t end) {
        Scratch scratch(*this);
        for (std::int64_t t = begin; t < end;) {
          const std::int64_t g = t / tiles_, stop = std::min({end, (g + 1) * tiles_, t + pass_tiles_});
          run_pass(c, g, t % tiles_, stop - t, dycol, f, chunk == 0 ? copy : nullptr, y, scratch);
          t = stop;
        }
        if (copy != nullptr) _mm_sfence();  // the copy's streaming stores, before the threads join
      });
    }
  }

  // dycol[co][i][lane] = dy at c.src[i][lane] of channel co, or 0, for the chunk's taps i.
  void gather_dy(const Chunk& c, const void* dy, float* dycol) const {
    const std::int64_t ntaps = static_cast<std::int64_t>(c.taps.size()), row = ntaps * width_;
    dy_reader_.visit(dy, [&](auto get) {
      parallel_for(threads_, p_.Cout(), [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t co = begin; co < end; ++co) {
          const std::int64_t channel = co * p_.dy_strides[1];
          float* out = dycol + co * row;
          for (std::int64_t i = 0; i < row; ++i) {
            const std::int64_t at = c.src[static_cast<std::size_t>(i)];
            out[i] = at >= 0 ? get(channel + at) : 0.0f;
          }
        }
      });
    });
  }

  // The filter values of output channels [gco0, gco0 + nco) and input channels [ci0, ci0 + nci) for the
  // kernels, taps contiguous: the source itself (read in place) or the scratch block, widened.
  struct Block {
    const float* w;       // at (gco0, ci0)
    std::int64_t cs, rs;  // output and input channel strides
  };
  Block block(const FilterSource& f, std::int64_t gco0, std::int64_t nco, std::int64_t ci0, std::int64_t nci,
              Scratch& scratch) const {
    if (f.in_place) return {static_cast<const float*>(f.base) + gco0 * f.s0 + ci0 * f.s1, f.s0, f.s1};
    widen_block(f, gco0, nco, ci0, nci, scratch.w.get(), scratch.rows.get());
    return {scratch.w.get(), nci * taps_, taps_};
  }

  // The kernel arguments shared by the fast and the masked kernels: the chunk's taps over block b's output
  // channels, from gco0.
  StreamArgs args(const Chunk& c, const float* dycol, const Block& b, std::int64_t gco0, std::int64_t nco,
                  float* acc, bool accumulate) const {
    StreamArgs a{};
    a.dycol = dycol + gco0 * static_cast<std::int64_t>(c.taps.size()) * width_;
    a.w = b.w;
    a.w_cs = b.cs;
    a.w_rs = b.rs;
    a.taps = c.taps.data();
    a.ntaps = static_cast<std::int64_t>(c.taps.size());
    a.nco = nco;
    a.acc = acc;
    a.acc_rs = width_;
    a.accumulate = accumulate;
    return a;
  }

  // Tiles [t0, t0 + nt) of group g over the chunk's pixels, reduced block of output channels by block (each
  // block's dy rows stay in L1 across the tiles), then checked, then stored.
  void run_pass(const Chunk& c, std::int64_t g, std::int64_t t0, std::int64_t nt, const float* dycol,
                const FilterSource& f, float* copy, void* y, Scratch& scratch) const {
    const std::int64_t ci_first = t0 * rows_, nci = std::min(p_.Cin_g, (t0 + nt) * rows_) - ci_first;
    float* acc = static_cast<float*>(align64(scratch.acc.get()));
    for (std::int64_t co0 = 0; co0 < p_.Cout_g; co0 += co_block_) {
      const std::int64_t nco = std::min(co_block_, p_.Cout_g - co0), gco0 = g * p_.Cout_g + co0;
      const Block b = block(f, gco0, nco, ci_first, nci, scratch);
      if (copy != nullptr) store_copy(b, gco0, nco, ci_first, nci, copy);
      for (std::int64_t k = 0; k < nt; ++k) {
        const std::int64_t ci0 = (t0 + k) * rows_, r = std::min<std::int64_t>(rows_, p_.Cin_g - ci0);
        StreamArgs a = args(c, dycol, b, gco0, nco, acc + k * rows_ * width_, co0 > 0);
        a.w += (ci0 - ci_first) * b.rs;
        if (f.in_place && b.rs == taps_) {  // the next tile's rows follow on
          a.prefetch = r * taps_;
          a.prefetch_bytes = rows_ * taps_ * 4;
        }
        ks_.stream[v_][r](a);
      }
    }
    for (std::int64_t k = 0; k < nt; ++k) {
      const std::int64_t ci0 = (t0 + k) * rows_, r = std::min<std::int64_t>(rows_, p_.Cin_g - ci0);
      float* tile = acc + k * rows_ * width_;
      for (std::int64_t i = 0; i < r; ++i)
        if (!std::all_of(tile + i * width_, tile + (i + 1) * width_,
                         [](float v) { return std::isfinite(v); }))
          rerun_masked(c, g, ci0 + i, dycol, f, scratch, tile + i * width_);
      store(c, g * p_.Cin_g + ci0, r, tile, y);
    }
  }

  // Block b (output channels from gco0, input channels [ci0, ci0 + nci)) into the dense fp32 copy.
  void store_copy(const Block& b, std::int64_t gco0, std::int64_t nco, std::int64_t ci0, std::int64_t nci,
                  float* copy) const {
    for (std::int64_t co = 0; co < nco; ++co) {
      float* to = copy + ((gco0 + co) * p_.Cin_g + ci0) * taps_;
      const float* from = b.w + co * b.cs;
      if (b.rs == taps_) {
        ks_.copy_uncached(from, to, nci * taps_);
        continue;
      }
      for (std::int64_t i = 0; i < nci; ++i) ks_.copy_uncached(from + i * b.rs, to + i * taps_, taps_);
    }
  }

  // Output channels [gco0, gco0 + nco) and input channels [ci0, ci0 + nci) of the filter as fp32 (with the
  // input rounding), [co][ci][tap]. With input channels contiguous, [tap][ci] is transposed: straight from
  // an fp32 or bf16 filter the rounding leaves alone, else after widening each tap's channels into `rows`.
  void widen_block(const FilterSource& f, std::int64_t gco0, std::int64_t nco, std::int64_t ci0,
                   std::int64_t nci, float* out, float* rows) const {
    const bool f32 = p_.filter_dtype == DType::f32 && p_.input_rounding == InputRounding::none,
               bf16 = p_.filter_dtype == DType::bf16 && p_.input_rounding != InputRounding::fp16;
    if (!taps_first_ && (f32 || bf16)) {
      for (std::int64_t co = 0; co < nco; ++co)
        ks_.store_transposed(static_cast<const char*>(f.base) + ((gco0 + co) * f.s0 + ci0) * (bf16 ? 2 : 4),
                             bf16, f.st, taps_, nci, out + co * nci * taps_, StoreType::f32, taps_, false);
      return;
    }
    const bool vector = w_reader_.widens(ks_);
    // Runs of contiguous values: a whole block, a channel's taps, or a tap's channels.
    const std::int64_t runs = taps_first_ ? (f.s1 == taps_ ? 1 : nci) : taps_;
    const std::int64_t len = taps_first_ ? (f.s1 == taps_ ? nci * taps_ : taps_) : nci;
    const std::int64_t step = taps_first_ ? f.s1 : f.st;
    for (std::int64_t co = 0; co < nco; ++co) {
      const std::int64_t at = (gco0 + co) * f.s0 + ci0 * f.s1;
      float* to = out + co * nci * taps_;
      float* run = taps_first_ ? to : rows;
      for (std::int64_t i = 0; i < runs; ++i) {
        if (vector) {
          w_reader_.widen(ks_, f.base, at + i * step, len, run + i * len);
          continue;
        }
        w_reader_.visit(f.base, [&](auto get) {
          for (std::int64_t j = 0; j < len; ++j) run[i * len + j] = get(at + i * step + j);
        });
      }
      if (!taps_first_) ks_.store_transposed(rows, false, nci, taps_, nci, to, StoreType::f32, taps_, false);
    }
  }

  // One input channel's sums again with the masked kernel, which skips lanes whose tap misses dy: the
  // unmasked sums were not all finite, so a 0 x inf or 0 x NaN may have entered them. The same terms in the
  // same order otherwise, so a finite row would come out with the same values (a zero's sign aside: +0 x w
  // added to a sum that underflowed to -0 makes it +0).
  void rerun_masked(const Chunk& c, std::int64_t g, std::int64_t ci, const float* dycol,
                    const FilterSource& f, Scratch& scratch, float* out) const {
    float* row = static_cast<float*>(align64(scratch.row.get()));
    for (std::int64_t co0 = 0; co0 < p_.Cout_g; co0 += co_block_) {
      const std::int64_t nco = std::min(co_block_, p_.Cout_g - co0), gco0 = g * p_.Cout_g + co0;
      StreamArgs a = args(c, dycol, block(f, gco0, nco, ci, 1, scratch), gco0, nco, row, co0 > 0);
      a.masks = c.masks.data();
      ks_.stream_masked[v_](a);
    }
    std::copy(row, row + width_, out);
  }

  // Rows [0, r) of the tile (input channels c0, c0 + 1, ...) to y at the chunk's pixels, image by image.
  void store(const Chunk& c, std::int64_t c0, std::int64_t r, const float* tile, void* y) const {
    const auto& s = p_.y_strides;
    // Whether an image's pixels are evenly spaced in y (dense NCDHW or NDHWC): then one run per image.
    const bool even = s[3] == p_.y_size[2] * s[4] && s[2] == p_.y_size[1] * s[3];
    const bool transposed = s[1] == 1 && ks_.store_transposed;
    const std::int64_t es = static_cast<std::int64_t>(dtype_size(p_.y_dtype));
    for (std::int64_t lane = 0; lane < c.count;) {
      const std::int64_t q = c.first + lane, n = q / pixels_, pix = q % pixels_;
      // A run of pixels evenly spaced in y: the rest of the image, or of a W row.
      const std::int64_t w = pix % p_.y_size[2];
      const std::int64_t run = std::min(c.count - lane, even ? pixels_ - pix : p_.y_size[2] - w);
      const std::int64_t at = n * s[0] + c0 * s[1] + pix / (p_.y_size[1] * p_.y_size[2]) * s[2] +
                              pix / p_.y_size[2] % p_.y_size[1] * s[3] + w * s[4];
      if (transposed) {
        ks_.store_transposed(tile + lane, false, width_, r, run, static_cast<char*>(y) + at * es,
                             transposed_store_type(p_.y_dtype), s[4], p_.overflow == OverflowMode::saturate);
      } else {
        for (std::int64_t i = 0; i < r; ++i)
          store_run(p_, ks_, tile + i * width_ + lane, 1, y, at + i * s[1], s[4], run);
      }
      lane += run;
    }
  }

  std::string name_;
  Problem p_;
  int threads_;
  const KernelSet& ks_;
  std::int64_t taps_, pixels_;
  int v_ = 1;                    // vectors of pixels per chunk
  std::int64_t width_ = 16;      // pixels per chunk
  int rows_ = 1;                 // input channels per tile
  std::int64_t tiles_ = 1;       // tiles per group
  std::int64_t co_block_ = 1;    // output channels per block of dy rows
  std::int64_t pass_tiles_ = 1;  // tiles whose accumulators stay in L2 together
  bool in_place_ = false;        // the caller's filter is read as it is (fp32, no input rounding)
  bool taps_first_ = true;  // the caller's filter has contiguous taps (NCDHW), else input channels (NDHWC)
  FilterSource source_{};   // the caller's filter, but for its address
  std::vector<Chunk> chunks_;
  Reader dy_reader_, w_reader_;
  AlignedPtr copy_;  // the packed filter: fp32 [co][ci][tap], allocated at the first pack
};

// The multiply-adds per (input, output) channel pair: the kernels' (every lane of a chunk for each tap that
// reaches dy from one of its pixels) over the terms inside dy. Where the map is large enough for several
// chunks, a tap that misses every pixel of one chunk but not another's is counted for both (an upper bound).
double extra_work(const Problem& p, std::int64_t pixels, std::int64_t width) {
  const Axis ax[3] = {axis_of(p, 0), axis_of(p, 1), axis_of(p, 2)};
  std::int64_t dense_taps = 0, terms = 0;
  for (std::int64_t t = 0; t < p.kernel[0] * p.kernel[1] * p.kernel[2]; ++t) {
    std::int64_t reached = 0;  // y pixels of an image this tap takes a dy value to
    for (std::int64_t pix = 0; pix < p.y_size[0] * p.y_size[1] * p.y_size[2]; ++pix)
      reached += tap_source(p, ax, 0, pix, t) >= 0;
    dense_taps += reached > 0;
    terms += p.N * reached;
  }
  return terms == 0
             ? 0.0
             : static_cast<double>(ceil_div(pixels, width) * width * dense_taps) / static_cast<double>(terms);
}

}  // namespace

std::unique_ptr<EngineImpl> make_stream(const EngineRequest& request, Isa isa, std::string& why_not) {
  return make_stream(request, isa, false, why_not);
}

std::unique_ptr<EngineImpl> make_stream(const EngineRequest& request, Isa isa, bool any_filter_size,
                                        std::string& why_not) {
  const Problem& p = request.problem;
  why_not = fast_engine_refusal(isa, request, false);
  if (!why_not.empty()) return nullptr;
  const KernelSet& ks = kernels_for(isa);
  const auto& s = p.filter_strides;
  const std::int64_t taps = p.kernel[0] * p.kernel[1] * p.kernel[2];
  const std::int64_t pixels = p.N * p.y_size[0] * p.y_size[1] * p.y_size[2];
  const std::int64_t elements = saturating_mul(p.Cout(), saturating_mul(p.Cin_g, taps));
  const std::int64_t width = chunk_width(pixels, ks.lanes);
  if (s[3] != p.kernel[2] * s[4] || s[2] != p.kernel[1] * s[3] || (s[4] != 1 && s[1] != 1))
    why_not = "neither the filter's taps nor its input channels are contiguous (NCDHW or NDHWC filter)";
  else if (taps > kMaxTaps)
    why_not = "kernel has more than " + std::to_string(kMaxTaps) + " taps";
  else if (pixels > kMaxPixels)
    why_not = "y has " + std::to_string(pixels) + " pixels (N x D x H x W), more than " +
              std::to_string(kMaxPixels) + ": the filter is reused enough to pack";
  else if (!any_filter_size && elements < kMinFilterElements)
    why_not =
        "the filter has " + std::to_string(elements) + " elements, fewer than 2^20: packing it costs little";
  else if (!any_filter_size && pixels > kSmallMap && elements < kElementsPerPixel * pixels)
    why_not = "the filter has " + std::to_string(elements) + " elements for " + std::to_string(pixels) +
              " pixels (N x D x H x W), fewer than " + std::to_string(kElementsPerPixel) +
              " per pixel beyond " + std::to_string(kSmallMap) + ": packing it is reused enough";
  else if (p.Cin_g < width)
    why_not = "Cin/groups is " + std::to_string(p.Cin_g) + ", fewer than the " + std::to_string(width) +
              " pixels of a chunk: dy gathered per tap would outweigh the filter";
  if (why_not.empty() && !any_filter_size && pixels > kSmallMap) {
    const double extra = extra_work(p, pixels, width);
    if (extra > kMaxExtraWork)
      why_not = "beyond " + std::to_string(kSmallMap) +
                " pixels, multiplying the zeros where taps miss dy would cost " +
                std::to_string(extra).substr(0, 4) + "x the multiplies inside dy, more than " +
                std::to_string(kMaxExtraWork).substr(0, 3);
  }
  if (!why_not.empty()) return nullptr;
  return std::make_unique<StreamEngine>(request, isa, ks);
}

}  // namespace conv3d_dx::cpu
