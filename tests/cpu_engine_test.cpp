// The fast CPU engines (src/cpu) against the float64 reference: every ISA level the CPU has (others skip),
// every dtype and layout, tile edges (tile - 1, tile, tile + 1 in pixels and channels), strides, dilations,
// asymmetric pads, groups; exact on small integers; bitwise equal for 1 and 2 threads.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include "common/engine.hpp"
#include "cpu/gemm_engine.hpp"
#include "cpu/geometry.hpp"
#include "cpu/kernels.hpp"
#include "cpu/peak.hpp"
#include "cpu/pixel_engine.hpp"
#include "cpu/pointwise_engine.hpp"
#include "cpu/stream_engine.hpp"
#include "cpu/support.hpp"
#include "numeric/numeric.hpp"
#include "reference/reference.hpp"
#include "support/testing.hpp"

namespace conv3d_dx::testing {
namespace {

constexpr Isa kFastIsas[] = {Isa::amx_bf16, Isa::avx512_bf16, Isa::avx512, Isa::avx2};

bool exact_in_bf16(DType t) { return t == DType::bf16 || t == DType::hif8 || t == DType::fp8_e4m3fn; }

// Whether the engine of `isa` takes problems of these input dtypes (vdpbf16ps only bf16-exact ones, AMX fp16
// too).
bool takes(Isa isa, const Problem& p) {
  if (isa == Isa::amx_bf16) return cpu::splits_into_bf16(p);  // fp16 values split into bf16 pairs
  return isa != Isa::avx512_bf16 || (exact_in_bf16(p.dy_dtype) && exact_in_bf16(p.filter_dtype) &&
                                     p.input_rounding != InputRounding::fp16);
}

// A request that names the ISA, as these tests do: its kernels run whatever the cost table prefers.
EngineRequest named_request(const Problem& p, int threads, Isa isa) {
  EngineRequest request{p, threads, isa};
  request.isa_named = true;
  return request;
}

// Runs an engine on the instance (as `p` describes it); y holds the result.
void run_engine(std::unique_ptr<EngineImpl> engine, const std::string& why, Instance& inst) {
  EXPECT_TRUE(engine) << why;
  if (!engine) return;
  std::vector<unsigned char> workspace(engine->workspace_bytes());
  engine->pack_filter(inst.filter.view.data);
  engine->execute(inst.dy.view.data, inst.y.view.data, workspace.data());
}

void run_gemm(const Problem& p, Instance& inst, Isa isa, const cpu::GemmTuning& tuning = {},
              int threads = 2) {
  std::string why;
  auto engine = cpu::make_gemm(named_request(p, threads, isa), isa, tuning, why);
  run_engine(std::move(engine), why, inst);
}

// The pixel engine on that ISA (avx512_bf16: over bf16 pairs).
void run_pixel(const Problem& p, Instance& inst, Isa isa, int threads = 2) {
  std::string why;
  auto engine = cpu::make_pixel(named_request(p, threads, isa), isa, why);
  run_engine(std::move(engine), why, inst);
}

// The pointwise engine on that ISA (avx512_bf16: over bf16 pairs), blocked for `cpu`.
void run_pointwise(const Problem& p, Instance& inst, Isa isa, int threads = 2,
                   const CpuModel& cpu = host_cpu_model()) {
  std::string why;
  EngineRequest request = named_request(p, threads, isa);
  request.cpu = cpu;
  auto engine = cpu::make_pointwise(request, isa, why);
  run_engine(std::move(engine), why, inst);
}

// The instance's channel-last dy relaid with `pixel_gap` elements after each pixel's channels and `row_gap`,
// `plane_gap` and `image_gap` after each row, plane and image, with the same values; the spec views the new
// dy.
void relay_dy(Instance& inst, std::int64_t pixel_gap, std::int64_t row_gap, std::int64_t plane_gap,
              std::int64_t image_gap) {
  const TensorView& dense = inst.dy.view;
  const std::int64_t C = dense.shape[4];
  Tensor apart;
  apart.view = dense;
  auto& st = apart.view.strides;  // N, D, H, W, C
  st[4] = 1;
  st[3] = C + pixel_gap;
  st[2] = dense.shape[3] * st[3] + row_gap;
  st[1] = dense.shape[2] * st[2] + plane_gap;
  st[0] = dense.shape[1] * st[1] + image_gap;
  apart.bytes.assign(static_cast<std::size_t>(dense.shape[0] * st[0]) * dtype_size(dense.dtype), 0);
  apart.view.data = apart.bytes.data();
  for (std::int64_t n = 0; n < dense.shape[0]; ++n)
    for (std::int64_t d = 0; d < dense.shape[1]; ++d)
      for (std::int64_t h = 0; h < dense.shape[2]; ++h)
        for (std::int64_t w = 0; w < dense.shape[3]; ++w)
          for (std::int64_t c = 0; c < C; ++c)
            numeric::store_f32(dense.dtype, apart.view.data,
                               n * st[0] + d * st[1] + h * st[2] + w * st[3] + c,
                               static_cast<float>(element(inst.dy, {n, c, d, h, w})), OverflowMode::ieee);
  inst.dy = std::move(apart);
  inst.spec.out_backprop = inst.dy.view;
}

// Pixels that follow one another, rows, planes and images apart (3, 5 and 7 elements after each).
void relay_dy_rows_apart(Instance& inst) { relay_dy(inst, 0, 3, 5, 7); }

// A case for the dy-rows-apart tests: 2 images of 3 x 4 x 9, pads of 1, `dtype` throughout (fp32 with HF32,
// so that its dy is converted rather than read in place).
Case rows_apart_case(DType dtype, std::int64_t cin, std::int64_t cout) {
  Case c = with_dtype({}, dtype);
  c.hf32 = dtype == DType::f32;
  c.N = 2;
  c.Cin = cin;
  c.Cout = cout;
  c.in = {3, 4, 9};
  c.pad_front = c.pad_back = {1, 1, 1};
  return c;
}

// The case with its dy relaid rows apart, run by run(p, inst, threads) where admit(p): against the reference
// on 2 threads, and the same bits on 1.
template <class Admit, class Run>
void check_rows_apart(const Case& c, std::mt19937_64& rng, Admit&& admit, Run&& run) {
  Instance inst = instantiate(c, rng, Fill::random);
  relay_dy_rows_apart(inst);
  const Problem p = validate(inst.spec);
  if (!admit(p)) return;
  run(p, inst, 2);
  EXPECT_TRUE(matches_reference(p, inst)) << c.name();
  const Tensor two_threads = inst.y;
  fill_canary(inst.y);
  run(p, inst, 1);
  EXPECT_TRUE(same_bits(two_threads, inst.y)) << c.name() << ", 1 thread";
}

class CpuIsa : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!cpu_supports(GetParam())) GTEST_SKIP() << "CPU lacks " << to_string(GetParam());
  }
  // Runs the case and checks it against the reference. A case whose inputs the engine does not take (the
  // bf16 engine takes only bf16-exact ones) is counted instead, and each test asserts how many were.
  void check(const Case& c, std::mt19937_64& rng, Fill fill, const cpu::GemmTuning& tuning = {}) {
    Instance inst = instantiate(c, rng, fill);
    const Problem p = validate(inst.spec);
    if (!admit(p)) return;
    run_gemm(p, inst, GetParam(), tuning);
    ASSERT_TRUE(matches_reference(p, inst)) << c.name();
    if (fill == Fill::small_integers && c.y_dtype == DType::f32) {
      ASSERT_TRUE(exactly_reference(p, inst)) << c.name();
    }
  }
  // Whether the engine takes the problem's inputs, counting the cases run and declined.
  bool admit(const Problem& p) {
    const bool taken = takes(GetParam(), p);
    ++(taken ? ran_ : declined_);
    return taken;
  }
  // The vdpbf16ps engine declines `bf16_declines` of the test's cases (those with fp32 or fp16 inputs), the
  // AMX one `amx_declines` (fp32 inputs rounded neither to fp16 nor to HF32); the others decline none.
  void expect_counts(int bf16_declines, int amx_declines) {
    const int want = GetParam() == Isa::avx512_bf16 ? bf16_declines
                     : GetParam() == Isa::amx_bf16  ? amx_declines
                                                    : 0;
    EXPECT_EQ(declined_, want) << "cases the engine declined";
    EXPECT_GT(ran_, 0) << "cases run";
    RecordProperty("declined", declined_);
    RecordProperty("ran", ran_);
  }
  int declined_ = 0, ran_ = 0;
};

// Random small problems of every dtype, data format and filter format (groups, depthwise, strides 1..4,
// dilations 1..3, asymmetric pads, stride > kernel), fp32 y, strided views, HF32 and saturation.
TEST_P(CpuIsa, RandomSweepAllDtypesAndLayouts) {
  std::mt19937_64 rng(11 + static_cast<int>(GetParam()));
  random_sweep(rng, 4, [&](const Case& c, Fill fill) { check(c, rng, fill); });
  // fp32 and fp16: 2 dtypes x 2 data formats x 3 filter formats x 4; AMX the fp32 half less its 6 HF32 cases
  expect_counts(48, 18);
}

// Tiles stored uncached into y (non-temporal stores of whole 64-byte lines) store the same bits as plain
// stores: into a 64-byte aligned y (where the config allows them, every tile of a full block then takes
// them; NCDHW, every staged row's 16-pixel runs), into the same y 16 bytes off (no tile or run may; plain
// stores for all) and with them off. Row and plane tasks (plane tasks channels_last: tiles that one tap
// group writes alone; groups of 2 (kd, kh) pairs, so others are summed by several), several and narrower
// last channel blocks, two groups, channels per group that are not whole lines (channels_last: the config
// then declines), strides 1 and 2, 1 and 2 threads, both layouts (NCDHW rows of 32 pixels: whole lines);
// nothing written outside y; exact against the reference.
TEST_P(CpuIsa, UncachedYStoresMatchPlainStoresBitwise) {
  std::mt19937_64 rng(29);
  const bool pairs = GetParam() == Isa::avx512_bf16 || GetParam() == Isa::amx_bf16;
  struct Channels {
    std::int64_t cin, groups;
  };
  for (const Channels ch : {Channels{64, 1}, Channels{80, 1}, Channels{31, 1}, Channels{64, 2}})
    for (const std::int64_t s : {1, 2})
      for (const int threads : {1, 2, 3})
        for (const Layout layout : {Layout::NDHWC, Layout::NCDHW})
          for (const int plane : {0, 1}) {
            Case c = with_dtype(Case{}, pairs ? DType::bf16 : DType::f32);
            c.data_format = layout;
            c.y_dtype = DType::f32;
            c.N = 2;
            c.Cin = ch.cin;
            c.groups = ch.groups;
            c.Cout = 6 * ch.groups;
            c.in = {3, 4, layout == Layout::NCDHW ? 32 : 17};
            c.stride = {1, s, s};
            c.pad_front = c.pad_back = {1, 1, 1};
            Instance inst = instantiate(c, rng, Fill::small_integers);
            const Problem p = validate(inst.spec);
            if (!admit(p)) continue;
            const std::size_t bytes = static_cast<std::size_t>(p.y_elements()) * 4;
            cpu::AlignedPtr buffer = cpu::alloc_zeroed64(bytes + 64, "test y");
            unsigned char* const aligned = static_cast<unsigned char*>(buffer.get());
            const std::string name =
                c.name() + ", threads " + std::to_string(threads) + (plane == 1 ? ", plane tasks" : "");
            std::vector<std::vector<unsigned char>> results;
            for (const auto& [uncached, offset] : {std::pair{1, 0}, std::pair{1, 16}, std::pair{0, 0}}) {
              cpu::GemmTuning tuning;
              tuning.uncached_y = uncached;
              tuning.plane = plane;
              tuning.dh_group = 2;
              std::string why;
              auto engine = cpu::make_gemm(named_request(p, threads, GetParam()), GetParam(), tuning, why);
              ASSERT_TRUE(engine) << why;
              // AMX tiles go through a staging tile, never straight into y; AVX2 transposes plainly.
              const bool allowed = uncached == 1 && GetParam() != Isa::amx_bf16 &&
                                   (layout == Layout::NCDHW ? GetParam() != Isa::avx2 : p.Cin_g % 16 == 0);
              EXPECT_EQ(engine->config().find("y stored uncached") != std::string::npos, allowed)
                  << name << ": " << engine->config();
              std::vector<unsigned char> workspace(engine->workspace_bytes());
              engine->pack_filter(inst.filter.view.data);
              std::fill(aligned, aligned + bytes + 64, 0xAB);  // stale values: every element must be written
              engine->execute(inst.dy.view.data, aligned + offset, workspace.data());
              results.emplace_back(aligned + offset, aligned + offset + bytes);
              ASSERT_TRUE(std::all_of(aligned, aligned + offset, [](unsigned char b) { return b == 0xAB; }))
                  << name;
              ASSERT_TRUE(std::all_of(aligned + offset + bytes, aligned + bytes + 64,
                                      [](unsigned char b) { return b == 0xAB; }))
                  << name << ": written past y";
            }
            ASSERT_TRUE(results[0] == results[1]) << name << ": uncached into aligned y vs 16 bytes off";
            ASSERT_TRUE(results[0] == results[2]) << name << ": uncached vs plain stores";
            std::copy(results[0].begin(), results[0].end(), static_cast<unsigned char*>(inst.y.view.data));
            ASSERT_TRUE(exactly_reference(p, inst)) << name;
          }
  expect_counts(0, 0);
}

// Channel blocks and pixel tiles at their edges: Cin_g = nv*lanes - 1, nv*lanes, nv*lanes + 1 and W phases
// of max_m - 1, max_m, max_m + 1 pixels (stride 1 and 2), for the default blocking (these reductions are
// short: on AVX2 its 3 x 4 tiles), 3 x 1 tiles and 2-vector tiles (on AVX2 its usual 6 x 2).
TEST_P(CpuIsa, TileEdges) {
  const bool avx2 = GetParam() == Isa::avx2;
  const int lanes = avx2 ? 8 : 16;
  std::mt19937_64 rng(23);
  struct Blocking {
    cpu::GemmTuning tuning;
    int nv, max_m;
  };
  const Blocking blockings[] = {{{1, 3}, 1, 3}, {{2, avx2 ? 6 : 4}, 2, avx2 ? 6 : 4}, {{}, 4, avx2 ? 3 : 6}};
  for (const Blocking& b : blockings)
    for (DType t : {DType::f32, DType::bf16, DType::f16})  // fp16: y stored through store_run
      for (Layout fmt : kDataFormats)
        for (int dc : {-1, 0, 1})
          for (int dm : {-1, 0, 1})
            for (std::int64_t s : {1, 2}) {
              Case c = with_dtype(Case{}, t);
              c.data_format = fmt;
              c.Cin = b.nv * lanes + dc;
              c.Cout = 3 + (dm + 1) % 2;  // odd and even (bf16 pairs)
              c.in = {2, 3, s * (b.max_m + dm)};
              c.stride = {1, s, s};
              c.pad_front = {1, 1, 1};
              c.pad_back = {0, 1, 2};
              check(c, rng, dm == 0 ? Fill::random : Fill::small_integers, b.tuning);
            }
  expect_counts(216, 108);  // the fp32 and fp16 two thirds of 324; AMX the fp32 third
}

// A y row's tap lists serve the later rows of the same filter block, tap group and (kd, kh) pairs inside
// dy, and slots of lists are shared by rows of other (D phase, H phase) classes and blocks: D and H strides
// 1 to 3 (up to 9 classes, more than there are slots), D and H pads 0 and 2 of a 5 x 5 kernel (rows near
// the borders have fewer pairs), five channel blocks taken block after block and in turn, row and plane
// tasks, W phases cut into tiles of 3 and 4 pixels that share one list, taps past the W borders, W taps
// fused, shared or apart, 1 and 2 threads. Exact against the reference on small integers.
TEST_P(CpuIsa, TapListsReusedAcrossRowsMatchTheReference) {
  const int lanes = GetParam() == Isa::avx2 ? 8 : 16;
  const bool pairs = GetParam() == Isa::avx512_bf16 || GetParam() == Isa::amx_bf16;
  std::mt19937_64 rng(47);
  for (const std::int64_t s : {1, 2, 3})
    for (const std::int64_t pad : {0, 2}) {
      Case c = with_dtype(Case{}, pairs ? DType::bf16 : DType::f32);
      c.y_dtype = DType::f32;
      c.Cin = 5 * lanes - 3;  // blocks 0 and 4 (narrower) of a class share a slot
      c.Cout = 3;
      c.in = {9, 10, 17};
      c.kernel = {5, 5, 3};
      c.stride = {s, s, 1};
      c.pad_front = c.pad_back = {pad, pad, 1};
      Instance inst = instantiate(c, rng, Fill::small_integers);
      const Problem p = validate(inst.spec);
      if (!admit(p)) continue;
      std::optional<Tensor> first;  // the first run's y, exact: the others must give its bits
      for (const int plane : {0, 1})
        for (const int inner : {0, 1})
          for (const bool share_w : {false, true})
            for (const int threads : {1, 2, 3}) {
              cpu::GemmTuning tuning{1, 4, plane};
              tuning.dh_group = 4;  // plane tasks: several groups per class
              tuning.blocks_inner = inner;
              tuning.share_w = share_w;
              tuning.fuse_w = !share_w;
              fill_canary(inst.y);
              run_gemm(p, inst, GetParam(), tuning, threads);
              const std::string name = c.name() + ", plane " + std::to_string(plane) + ", blocks in turn " +
                                       std::to_string(inner) + ", share_w " + std::to_string(share_w) +
                                       ", threads " + std::to_string(threads);
              if (!first) {
                ASSERT_TRUE(exactly_reference(p, inst)) << name;
                first = inst.y;
              }
              ASSERT_TRUE(same_bits(*first, inst.y)) << name;
            }
    }
  expect_counts(0, 0);
}

// W taps that reach 1 to 3 pixels past a border (5- and 7-wide kernels, dilation 1 and 2) cover parts
// [lo, hi) of tiles of 3 to 6 pixels at both ends of a row: prefixes and suffixes with symmetric pads, and
// with all the padding in front, rows of one tile whose dy is shorter than the tile (parts missing both
// ends). Each part runs by its own loop (AVX2) or pixel by pixel. Exact on small integers.
TEST_P(CpuIsa, TapsCoveringPartOfATile) {
  const int lanes = GetParam() == Isa::avx2 ? 8 : 16;
  std::mt19937_64 rng(43);
  for (int max_m : {3, 4, 5, 6})
    for (std::int64_t kw : {5, 7})
      for (std::int64_t dilation : {1, 2})
        for (std::int64_t w : {max_m, 2 * max_m + 1})
          for (bool front : {false, true}) {
            const std::int64_t reach = (kw - 1) * dilation;
            if (front && w + reach / 2 <= reach) continue;  // dy would be empty
            Case c = with_dtype(Case{}, DType::bf16);
            c.y_dtype = DType::f32;
            c.Cin = 2 * lanes;
            c.Cout = 3;
            c.in = {1, 2, w};
            c.kernel = {1, 1, kw};
            c.dilation = {1, 1, dilation};
            c.pad_front = {0, 0, reach / 2};
            c.pad_back = {0, 0, front ? 0 : reach / 2};
            check(c, rng, Fill::small_integers, cpu::GemmTuning{2, max_m});
          }
  expect_counts(0, 0);
}

// Kernels one pixel wide in H and W at stride 1 without pads there: the engine merges a plane's rows, k at
// a time, where both tensors' rows follow one another, and its tiles cross row ends; with a D kernel taller
// than 1 its row tasks run D inner, or on AMX take a window of dy planes per thread (which runs a plane's
// rows in turn) where they can. The sums are the same; 1, 2 and 3 threads give the same bits. The bf16
// pair kernels (AMX, vdpbf16ps) take bf16 and HiFloat8 inputs here, the FMA kernels fp32.
TEST_P(CpuIsa, RowsMergeWhereTheKernelIsOnePixelInHAndW) {
  using Dims = std::array<std::int64_t, 3>;
  struct Geometry {
    Dims in, kernel, stride, pad;
    bool strided;
    std::int64_t rows_merged;  // k
  };
  const Geometry geometries[] = {
      {{4, 5, 7}, {3, 1, 1}, {1, 1, 1}, {1, 0, 0}, false, 5},     // all 5 rows
      {{3, 6, 100}, {3, 1, 1}, {1, 1, 1}, {1, 0, 0}, false, 2},   // 2 rows of 200 pixels
      {{4, 5, 7}, {1, 1, 1}, {2, 1, 1}, {0, 0, 0}, false, 5},     // D stride 2
      {{4, 5, 7}, {3, 1, 1}, {1, 1, 1}, {1, 0, 0}, true, 1},      // rows apart in memory
      {{4, 5, 7}, {3, 1, 1}, {1, 1, 2}, {1, 0, 0}, false, 1},     // W stride 2
      {{4, 5, 7}, {3, 1, 1}, {1, 1, 1}, {1, 1, 0}, false, 1},     // H pads
      {{3, 7, 300}, {3, 1, 1}, {1, 1, 1}, {1, 0, 0}, false, 1}};  // rows too long to merge
  std::mt19937_64 rng(71);
  const bool amx = GetParam() == Isa::amx_bf16, pairs = amx || GetParam() == Isa::avx512_bf16;
  std::size_t k_case = 0;
  for (Layout fmt : kDataFormats)
    for (const Geometry& g : geometries) {
      Case c = pairs ? with_dtype(Case{}, k_case++ % 2 == 0 ? DType::bf16 : DType::hif8) : Case{};
      c.data_format = fmt;
      c.N = 2;
      c.Cin = 37;  // a full block and a narrow one
      c.Cout = 5;
      c.in = g.in;
      c.kernel = g.kernel;
      c.stride = g.stride;
      c.pad_front = c.pad_back = g.pad;
      c.strided_views = g.strided;
      Instance inst = instantiate(c, rng, Fill::random);
      const Problem p = validate(inst.spec);
      if (!admit(p)) continue;
      const Problem merged = cpu::rows_merged(p);
      const std::int64_t k = g.rows_merged;
      EXPECT_EQ(merged.y_size[2], p.y_size[2] * k) << c.name();
      EXPECT_EQ(merged.y_size[1] * k, p.y_size[1]) << c.name();
      EXPECT_EQ(merged.dy_size[2], p.dy_size[2] * k) << c.name();
      EXPECT_EQ(merged.dy_size[1] * k, p.dy_size[1]) << c.name();
      std::string why;
      auto engine = cpu::make_gemm(named_request(p, 2, GetParam()), GetParam(), {}, why);
      ASSERT_TRUE(engine) << why;
      const std::string config = engine->config();
      const bool d_inner = config.find("rows plane after plane") != std::string::npos,
                 window = config.find("window") != std::string::npos,
                 rows = config.find("flat planes") == std::string::npos;
      EXPECT_EQ(d_inner, rows && g.kernel[0] > 1 && !window) << config;
      if (!amx) {
        EXPECT_TRUE(rows && !window) << config;
      }
      fill_canary(inst.y);
      run_gemm(p, inst, GetParam(), {});
      EXPECT_TRUE(matches_reference(p, inst)) << c.name() << ", " << config;
      EXPECT_TRUE(padding_intact(inst.y)) << c.name();
      const Tensor two_threads = inst.y;
      for (int threads : {1, 3}) {
        fill_canary(inst.y);
        run_gemm(p, inst, GetParam(), {}, threads);
        EXPECT_TRUE(same_bits(two_threads, inst.y)) << c.name() << ", " << threads << " threads";
      }
    }
  expect_counts(0, 0);
}

// dy converted into the workspace a row at a time (channels contiguous, no padding channels) from a view
// whose pixels follow one another but whose rows, planes and images lie apart: every type that converts (HF32
// fp32, fp16, bf16 and the 8-bit ones), 3 output channels (padded to pairs on bf16 kernels, so converted a
// pixel at a time there) and 32 (whole rows everywhere, AMX included), against the reference and on 1 and 2
// threads bitwise.
TEST_P(CpuIsa, DyRowsApartWithContiguousPixels) {
  std::mt19937_64 rng(73);
  for (const DType dtype : kAllDtypes)
    for (const std::int64_t cout : {3, 32})
      check_rows_apart(
          rows_apart_case(dtype, 20, cout), rng, [&](const Problem& p) { return admit(p); },
          [&](const Problem& p, Instance& inst, int threads) { run_gemm(p, inst, GetParam(), {}, threads); });
  expect_counts(4, 0);  // fp32 (HF32, which AMX splits)
}

// W taps sharing their dy loads (SharedWTile, AVX-512 fp32 FMA kernels, blocks of 1 or 2 vectors): W
// kernels of 3 at stride 1 (phases of 3 taps), 3 at stride 2 (2 and 1), 2 at stride 1 and 4 at stride 2
// (2 each), 3 at stride 2 and dilation 2 (3 and none); row and plane tasks; rows of 1 pixel to over 2 tiles,
// W pads from 0 up to the kernel's width less one (up to 3 of a tile's first or last dy pixels outside dy,
// and rows shorter than a tile), a narrower last block, channels per block one short of whole vectors,
// channel-first dy read in place with its channel stride (the config says so), both data formats, D stride 2;
// exact on small integers, within the bound on random values, the same bits on 1 and 2 threads; infinities at
// the W borders of dy and in the first and last W taps of the filter (each reads outside dy at one border),
// against the reference. The config says where the kernels run: on AVX-512 only.
TEST_P(CpuIsa, SharedWTapsMatchReference) {
  if (GetParam() == Isa::avx512_bf16 || GetParam() == Isa::amx_bf16)
    GTEST_SKIP() << "fp32 inputs only: the engines over bf16 pairs do not share W taps";
  const bool offered = GetParam() == Isa::avx512;
  const int lanes = GetParam() == Isa::avx2 ? 8 : 16;
  std::mt19937_64 rng(61);
  struct Blocks {
    int nv;
    std::int64_t cin;
  };
  const Blocks blocks[] = {{1, lanes}, {1, lanes - 1}, {2, 2 * lanes - 1}, {2, 3 * lanes - 1}};
  struct Geometry {
    std::int64_t kw, sw, dw;
  };
  // The last: W phases of 3 taps and of none (dilation equal to the stride).
  const Geometry geometries[] = {{3, 1, 1}, {3, 2, 1}, {2, 1, 1}, {4, 2, 1}, {3, 2, 2}};
  int shared = 0;
  for (const Geometry g : geometries)
    for (const Blocks b : blocks)
      for (std::int64_t pad = 0; pad < g.kw; ++pad)
        for (const std::int64_t w : {1, 5, 16, 31})
          for (Layout fmt : kDataFormats) {
            if (w + 2 * pad < (g.kw - 1) * g.dw + 1) continue;  // dy would be empty
            Case c = with_dtype(Case{}, DType::f32);
            c.data_format = fmt;
            c.N = 2;
            c.Cin = b.cin;
            c.Cout = 17;  // enough per tap for channel-first dy read in place
            c.in = {3, 2, w};
            c.kernel = {3, 3, g.kw};
            c.stride = {2, 1, g.sw};
            c.dilation = {1, 1, g.dw};
            c.pad_front = {1, 1, pad};
            c.pad_back = {0, 1, pad};
            const Fill fill = (w + pad) % 2 ? Fill::small_integers : Fill::random;
            Instance inst = instantiate(c, rng, fill);
            const Problem p = validate(inst.spec);
            if (!admit(p)) continue;
            const cpu::GemmTuning tuning{b.nv};
            std::string why;
            auto engine = cpu::make_gemm(named_request(p, 2, GetParam()), GetParam(), tuning, why);
            ASSERT_TRUE(engine) << why;
            const bool shares = engine->config().find("sharing dy loads") != std::string::npos;
            EXPECT_EQ(shares, offered) << c.name() << ": " << engine->config();
            if (fmt == Layout::NCDHW) {
              EXPECT_NE(engine->config().find("dy in place"), std::string::npos) << engine->config();
            }
            shared += shares;
            run_gemm(p, inst, GetParam(), tuning, 1);
            ASSERT_TRUE(matches_reference(p, inst)) << c.name();
            if (fill == Fill::small_integers) {
              ASSERT_TRUE(exactly_reference(p, inst)) << c.name();
            }
            const Tensor one_thread = inst.y;
            fill_canary(inst.y);
            run_gemm(p, inst, GetParam(), tuning, 2);
            EXPECT_TRUE(same_bits(one_thread, inst.y)) << c.name();
            cpu::GemmTuning planes = tuning;  // plane tasks (W phases with no taps stay zero there too)
            planes.plane = 1;
            fill_canary(inst.y);
            run_gemm(p, inst, GetParam(), planes, 2);
            EXPECT_TRUE(same_bits(one_thread, inst.y)) << c.name() << ", plane tasks";
            // Infinities in dy's first and last pixel of a row (dy has one plane: D stride 2), and in the
            // filter's first and last W taps of one channel pair at kd = 1 (kd = 0 reaches no y plane;
            // in rows of one pixel at W stride 2 these W taps reach none either).
            const auto at = [](const std::array<std::int64_t, 5>& strides, std::array<std::int64_t, 5> i) {
              std::int64_t o = 0;
              for (std::size_t a = 0; a < 5; ++a) o += i[a] * strides[a];
              return o;
            };
            ASSERT_EQ(p.dy_size[0], 1);
            float* dy = static_cast<float*>(inst.dy.view.data);
            float* filter = static_cast<float*>(inst.filter.view.data);
            const float inf = std::numeric_limits<float>::infinity();
            dy[at(p.dy_strides, {1, 3, 0, 1, 0})] = inf;
            dy[at(p.dy_strides, {0, 5, 0, 0, p.dy_size[2] - 1})] = -inf;
            filter[at(p.filter_strides, {2, 0, 1, 1, 0})] = inf;
            filter[at(p.filter_strides, {4, b.cin - 1, 1, 2, g.kw - 1})] = -inf;
            fill_canary(inst.y);
            run_gemm(p, inst, GetParam(), tuning, 2);
            EXPECT_TRUE(matches_reference(p, inst)) << c.name() << ", with infinities";
          }
  EXPECT_EQ(shared > 0, offered);
  expect_counts(0, 0);
}

// A narrower last channel block of every width below the widest (4 + 1, 2 and 3 vectors of channels, the
// last lane unused), after 4-vector blocks forced (AMX caps them at 2) and with the default blocking (on
// AVX2 4-vector blocks for the short reduction, 2-vector ones for the long); fp32 and bf16, both layouts.
TEST_P(CpuIsa, NarrowerLastBlocks) {
  const int lanes = GetParam() == Isa::avx2 ? 8 : 16;
  std::mt19937_64 rng(41);
  for (DType t : {DType::f32, DType::bf16})
    for (const int last : {1, 2, 3})
      for (Layout fmt : kDataFormats)
        for (const std::int64_t cout : {std::int64_t{5}, std::int64_t{40}}) {  // 135, 1080 steps per tile
          Case c = with_dtype(Case{}, t);
          c.data_format = fmt;
          c.Cin = (4 + last) * lanes - 1;  // the last lane of the last block unused
          c.Cout = cout;
          c.in = {2, 3, 11};
          c.pad_front = c.pad_back = {1, 1, 1};
          check(c, rng, Fill::small_integers, cpu::GemmTuning{4});
          check(c, rng, Fill::small_integers);
        }
  expect_counts(24, 24);  // the fp32 half
}

TEST_P(CpuIsa, GroupsDilationsAndLargeStrides) {
  std::mt19937_64 rng(31);
  for (DType t : {DType::f32, DType::bf16, DType::fp8_e4m3fn})
    for (Layout fmt : kDataFormats) {
      Case c = with_dtype(Case{}, t);
      c.data_format = fmt;
      c.groups = 2;
      c.Cin = 2 * 67;  // two channel blocks per group (at every vector width)
      c.Cout = 2 * 5;
      c.in = {4, 7, 9};
      c.kernel = {2, 3, 3};
      c.dilation = {3, 2, 2};
      c.stride = {3, 2, 4};
      c.pad_front = {2, 0, 3};
      c.pad_back = {1, 2, 0};
      check(c, rng, Fill::random);
      c.groups = c.Cin = c.Cout = 20;  // depthwise
      check(c, rng, Fill::small_integers);
    }
  expect_counts(4, 4);  // fp32: 2 data formats x 2 cases
}

// NCDHW dy and y of every dtype (and HF32) across the blocks their conversions work in: dy rows of more
// than 256 pixels, 17 and 33 output channels (past 16 channels and 16 pairs, odd for the pair padding), y
// rows of more than 64 pixels, stride 1 and 2 (W phases stored from a staged row).
TEST_P(CpuIsa, NcdhwConversionsAcrossBlocks) {
  std::mt19937_64 rng(37);
  for (DType t : kAllDtypes)
    for (bool hf32 : {false, true})
      for (std::int64_t cout : {17, 33})
        for (std::int64_t s : {1, 2}) {
          if (hf32 && t != DType::f32) continue;
          Case c = with_dtype(Case{}, t);
          c.data_format = Layout::NCDHW;
          c.hf32 = hf32;
          c.Cin = 19;
          c.Cout = cout;
          c.in = {1, 2, s == 1 ? 262 : 140};
          c.kernel = {1, 2, 3};
          c.stride = {1, 1, s};
          c.pad_front = {0, 1, 1};
          c.pad_back = {0, 0, 2};
          check(c, rng, cout == 17 ? Fill::random : Fill::small_integers);
        }
  expect_counts(12, 4);  // fp32, HF32 and fp16: 3 x 2 x 2; AMX fp32 (it splits HF32)
}

// Inputs of different dtypes (the Problem allows them; the operator front end promotes): fp16 dy with a
// bf16 filter computes in fp32; bf16 dy with an fp8 filter can use bf16 pairs.
TEST_P(CpuIsa, MixedInputDtypes) {
  std::mt19937_64 rng(41);
  for (auto [dy_t, w_t] : {std::pair{DType::f16, DType::bf16}, std::pair{DType::bf16, DType::fp8_e4m3fn}}) {
    Case c = with_dtype(Case{}, dy_t);
    c.Cin = 19;
    c.Cout = 6;
    c.y_dtype = DType::f32;
    Instance inst = instantiate(c, rng, Fill::random);
    Problem p = validate(inst.spec);
    inst.filter = make_tensor(w_t, c.filter_format, {c.Cout, c.Cin, 3, 3, 3}, true, false);
    fill(inst.filter, rng, Fill::random);
    p.filter_dtype = w_t;
    if (!admit(p)) continue;
    run_gemm(p, inst, GetParam());
    EXPECT_TRUE(matches_reference(p, inst)) << to_string(dy_t) << " dy, " << to_string(w_t) << " filter";
  }
  expect_counts(1, 0);  // fp16 dy (AMX splits it)
}

// The same y bits for 1 and 2 threads (and for a re-run).
TEST_P(CpuIsa, BitwiseIdenticalAcrossThreadCounts) {
  std::mt19937_64 rng(53);
  for (DType t : {DType::f32, DType::bf16})
    for (Layout fmt : kDataFormats) {
      Case c = with_dtype(Case{}, t);
      c.data_format = fmt;
      c.Cin = 37;
      c.Cout = 21;
      c.in = {3, 9, 17};
      c.stride = {1, 2, 1};
      c.pad_front = {1, 1, 1};
      c.pad_back = {1, 0, 1};
      Instance inst = instantiate(c, rng, Fill::random);
      const Problem p = validate(inst.spec);
      if (!admit(p)) continue;
      run_gemm(p, inst, GetParam(), {}, 1);
      Tensor first = inst.y;
      for (int threads : {2, 2}) {
        fill_canary(inst.y);
        run_gemm(p, inst, GetParam(), {}, threads);
        EXPECT_TRUE(same_bits(first, inst.y)) << c.name() << ", " << threads << " threads";
      }
    }
  expect_counts(2, 2);  // fp32 in both data formats
}

// execute_with_filter packs each channel block in the thread that uses it, and the blocks left over when they
// do not share out evenly one per thread before all threads share their tasks; into the packed filter when
// it is kept, else into buffers the engine owns: the same bits as pack_filter + execute for any thread count
// either way (8 blocks here on AVX-512, 12 on AMX, 20 on AVX2: some thread counts leave blocks over, 25 is
// more threads than blocks everywhere), and a kept filter stays packed; with the tasks taking a row's or
// plane's blocks in turn after packing them all, too. (Its name puts it under
// ThreadSanitizer in CI, which sees the packers built without ISA flags; the vector packers are built
// without its instrumentation.)
TEST_P(CpuIsa, PackingInTaskThreadsMatchesPackThenExecute) {
  std::mt19937_64 rng(61);
  for (DType t : {DType::f32, DType::bf16, DType::hif8})
    for (Layout fmt : kDataFormats) {
      Case c = with_dtype(Case{}, t);
      c.data_format = fmt;
      c.groups = 4;
      c.Cin = 4 * 70;  // per group blocks of 64 + 6 channels (AVX-512), 32 (AMX) or 16 (AVX2)
      c.Cout = 4 * 5;
      c.N = 2;
      c.in = {3, 5, 9};
      c.stride = {1, 2, 1};
      c.pad_front = {1, 0, 1};
      c.pad_back = {0, 1, 1};
      Instance inst = instantiate(c, rng, Fill::random);
      const Problem p = validate(inst.spec);
      if (!admit(p)) continue;
      run_gemm(p, inst, GetParam());
      ASSERT_TRUE(matches_reference(p, inst)) << c.name();
      Tensor first = inst.y;
      for (int threads : {1, 2, 3, 5, 12, 25}) {
        std::string why;
        // Blocks in turn per row or plane (every block packed first) on odd thread counts.
        cpu::GemmTuning order;
        order.blocks_inner = threads % 2;
        auto engine = cpu::make_gemm(named_request(p, threads, GetParam()), GetParam(), order, why);
        ASSERT_TRUE(engine) << why;
        std::vector<unsigned char> workspace(engine->workspace_bytes());
        fill_canary(inst.y);
        engine->execute_with_filter(inst.dy.view.data, inst.filter.view.data, inst.y.view.data,
                                    workspace.data(), false);
        EXPECT_TRUE(same_bits(first, inst.y)) << c.name() << ", " << threads << " threads, not kept";
        fill_canary(inst.y);
        engine->execute_with_filter(inst.dy.view.data, inst.filter.view.data, inst.y.view.data,
                                    workspace.data(), true);
        EXPECT_TRUE(same_bits(first, inst.y)) << c.name() << ", " << threads << " threads";
        fill_canary(inst.y);
        engine->execute(inst.dy.view.data, inst.y.view.data, workspace.data());  // the filter stays packed
        EXPECT_TRUE(same_bits(first, inst.y)) << c.name() << ", " << threads << " threads, packed";
      }
    }
  expect_counts(2, 2);  // fp32 in both data formats
}

// Without keeping the filter, a thread packs the groups' full and narrower blocks in turn into buffers of its
// own, never cleared: infinite filter values of the full blocks must not reach the finite results of the
// narrower one. Only AMX tiles read channels no packer writes (Cout padded to 32), where a buffer shared by
// both shapes would carry a stale inf into a sum (inf x 0 = NaN); elsewhere a shared buffer is harmless and
// this test could not fail (checked by planting one), so it runs on AMX only.
TEST_P(CpuIsa, PackingIntoOwnBlocksLeavesNoStaleValues) {
  if (GetParam() != Isa::amx_bf16) GTEST_SKIP() << "only AMX tiles read channels no packer writes";
  std::mt19937_64 rng(67);
  for (DType t : {DType::f32, DType::bf16, DType::hif8}) {
    Case c = with_dtype(Case{}, t);
    c.data_format = Layout::NDHWC;
    c.groups = 2;
    c.Cin = 2 * 70;  // per group two blocks of 32 (AMX: two vectors) and one of 6 channels
    c.Cout = 2 * 5;  // 5 per group: AMX pads them to 32
    c.in = {2, 4, 5};
    c.pad_front = c.pad_back = {1, 1, 1};
    Instance inst = instantiate(c, rng, Fill::small_integers);
    const auto& s = inst.filter.view.strides;
    const auto& f = inst.filter.view.shape;  // NCDHW: [Cout, Cin / groups, kD, kH, kW]
    for (std::int64_t co = 0; co < f[0]; ++co)
      for (std::int64_t ci = 0; ci < 64; ++ci)
        for (std::int64_t tap = 0; tap < f[2] * f[3] * f[4]; ++tap)
          numeric::store_f32(t, inst.filter.view.data,
                             co * s[0] + ci * s[1] + tap / (f[3] * f[4]) * s[2] + tap / f[4] % f[3] * s[3] +
                                 tap % f[4] * s[4],
                             std::numeric_limits<float>::infinity(), OverflowMode::ieee);
    const Problem p = validate(inst.spec);
    if (!admit(p)) continue;
    run_gemm(p, inst, GetParam());
    Tensor first = inst.y;
    std::string why;
    cpu::GemmTuning own_blocks;  // block after block, each packed into the thread's own buffers
    own_blocks.blocks_inner = 0;
    auto engine = cpu::make_gemm(named_request(p, 1, GetParam()), GetParam(), own_blocks, why);
    ASSERT_TRUE(engine) << why;
    std::vector<unsigned char> workspace(engine->workspace_bytes());
    for (int call = 0; call < 2; ++call) {  // the second call starts from the first's last block
      fill_canary(inst.y);
      engine->execute_with_filter(inst.dy.view.data, inst.filter.view.data, inst.y.view.data,
                                  workspace.data(), false);
      EXPECT_TRUE(same_bits(first, inst.y)) << c.name() << ", call " << call;
    }
    EXPECT_TRUE(matches_reference(p, inst)) << c.name();
  }
  expect_counts(1, 1);  // fp32
}

// Channel blocks packed several in one pass over an NDHWC filter (GemmConfig::pack_span: spans of 2 and 3,
// the last one of a group shorter, with a narrow block) pack what block-by-block packing does: the same
// bits, one-shot (into the threads' own buffers; on 3 threads spans are left over, packed one per thread and
// their tasks shared) and from a filter packed whole, on 1, 2 and 3 threads; against the reference. A tiny
// value (bf16) or an infinity (HiFloat8, fp16) in the second block of a span sends that block to the exact
// kernels (split: the call to the fallback) with spans as without. bf16 pairs and split fp16 / HF32 spans;
// the fp32 kernels keep spans of one.
TEST_P(CpuIsa, PackingBlocksInSpansGivesTheSameBits) {
  std::mt19937_64 rng(73);
  struct Variant {
    DType dtype;
    bool hf32;
    float special;  // stored at (output channel 1, input channel 40, tap 0); 0: none
  };
  const float inf = std::numeric_limits<float>::infinity();
  for (const Variant v :
       {Variant{DType::bf16, false, 0}, Variant{DType::bf16, false, 1e-20f}, Variant{DType::hif8, false, 0},
        Variant{DType::hif8, false, inf}, Variant{DType::fp8_e4m3fn, false, 0}, Variant{DType::f16, false, 0},
        Variant{DType::f16, false, inf}, Variant{DType::f32, true, 0}}) {
    Case c = with_dtype(Case{}, v.dtype);
    c.hf32 = v.hf32;
    c.data_format = c.filter_format = Layout::NDHWC;
    c.groups = 2;
    c.Cin = 2 * 70;  // per group blocks of 32 (16 split) and a narrow one of 6
    c.Cout = 2 * 5;  // an odd count per group
    c.in = {2, 4, 5};
    c.pad_front = c.pad_back = {1, 1, 1};
    Instance inst = instantiate(c, rng, Fill::small_integers);
    if (v.special != 0) {  // the view is in NDHWC order: [Cout, kD, kH, kW, Cin / groups]
      const auto& s = inst.filter.view.strides;
      numeric::store_f32(v.dtype, inst.filter.view.data, s[0] + 40 * s[4], v.special, OverflowMode::ieee);
      const double placed = element(inst.filter, {1, 40, 0, 0, 0});
      ASSERT_TRUE(std::isinf(v.special) ? std::isinf(placed) : placed != 0 && std::fabs(placed) < 1e-10)
          << c.name() << ": the special value in place, read back " << placed;
    }
    const Problem p = validate(inst.spec);
    if (!admit(p)) continue;
    std::vector<Tensor> results;
    for (const int span : {1, 2, 3})
      for (const int threads : {1, 2, 3})
        for (const bool whole : {false, true}) {
          cpu::GemmTuning tuning;
          tuning.pack_span = span;
          tuning.blocks_inner = 0;
          std::string why;
          auto engine = cpu::make_gemm(named_request(p, threads, GetParam()), GetParam(), tuning, why);
          ASSERT_TRUE(engine) << why;
          const auto config = cpu::gemm_config(p, host_cpu_model(), GetParam(), threads, tuning);
          const std::int64_t blocks = (p.Cin_g + config.nv * config.lanes - 1) / (config.nv * config.lanes);
          EXPECT_EQ(config.pack_span, config.bf16 || config.split ? std::min<std::int64_t>(span, blocks) : 1)
              << c.name();
          std::vector<unsigned char> workspace(engine->workspace_bytes());
          fill_canary(inst.y);
          if (whole) {
            engine->pack_filter(inst.filter.view.data);
            engine->execute(inst.dy.view.data, inst.y.view.data, workspace.data());
          } else {
            engine->execute_with_filter(inst.dy.view.data, inst.filter.view.data, inst.y.view.data,
                                        workspace.data(), false);
          }
          if (!results.empty()) {
            EXPECT_TRUE(same_bits(results.front(), inst.y))
                << c.name() << ", span " << span << ", " << threads << " threads" << (whole ? ", whole" : "");
          }
          results.push_back(inst.y);
        }
    EXPECT_TRUE(matches_reference(p, inst)) << c.name();
  }
  expect_counts(3, 0);  // fp16 and HF32: the vdpbf16ps engine takes bf16-exact inputs only
}

// The memory a GEMM engine states: a plan that does not keep the filter adds a slot of packed blocks per
// thread, never more slots than blocks (and allocates them while planning); one that keeps it adds none.
TEST_P(CpuIsa, BlockSlotsCountOnlyWhenTheFilterIsNotKept) {
  std::mt19937_64 rng(71);
  Case c = Case{};
  c.groups = 2;
  c.Cin = 2 * 70;  // full blocks and a narrow one per group
  c.Cout = 2 * 5;
  const Problem p = validate(instantiate(c, rng, Fill::small_integers).spec);
  if (!admit(p)) return;
  const auto needed = [&](int threads, bool keep) -> std::int64_t {
    EngineRequest request = named_request(p, threads, GetParam());
    request.keep_filter = keep;
    request.max_memory_bytes = 1;
    std::string why;
    try {
      cpu::make_gemm(request, GetParam(), {}, why);
    } catch (const OutOfMemory& e) {
      return e.needed();
    }
    ADD_FAILURE() << "planned within 1 byte: " << why;
    return 0;
  };
  // Not keeping the filter: block slots in place of the packed filter (and the same tables and scratch).
  const auto slots = [&](int threads) { return needed(threads, false) - needed(threads, true); };
  const auto config = cpu::gemm_config(p, host_cpu_model(), GetParam(), 1);
  const std::int64_t width = std::int64_t{config.nv} * config.lanes;
  const int blocks = static_cast<int>(p.G * ((p.Cin_g + width - 1) / width));  // 4 AVX-512, 6 AMX, 10 AVX2
  const std::int64_t one = slots(2) - slots(1);
  EXPECT_GT(one, 0);
  EXPECT_LT(slots(1), 0) << "one slot is smaller than the packed filter of " << blocks << " blocks";
  EXPECT_EQ(slots(blocks - 1) - slots(1), (blocks - 2) * one);
  EXPECT_EQ(slots(blocks + 5) - slots(1), (blocks - 1) * one)
      << "more threads than blocks: one slot per block";
  expect_counts(0, 0);
}

// Plane mode (a task per group of y planes, taps in groups of (kd, kh) accumulated in a staging buffer) and
// unfused W taps sum in the same order as the default, so all give the same bits; and they match the
// reference.
TEST_P(CpuIsa, PlaneModeMatchesRowModeBitwise) {
  std::mt19937_64 rng(59);
  for (DType t : {DType::f32, DType::bf16})
    for (Layout fmt : kDataFormats)
      for (std::int64_t s : {1, 2, 3})  // 3: D strides past the kernel, leaving y planes no tap reaches
        for (std::int64_t cin : {21, 32, 70, 80}) {
          Case c = with_dtype(Case{}, t);
          c.data_format = fmt;
          c.N = 2;  // 10 planes: groups of 3 leave a remainder
          // 21: one narrow block; 32 (fp32 y): one full block of 2 vectors (AVX-512: tiles sharing W
          // taps, accumulated in place in a channel-last y); 70: full blocks too, which an fp32
          // channel-last y accumulates in place (padded views: at any alignment), also from bf16 inputs;
          // 80: a full block narrower than the others (AVX-512: 64 + 16), whose tiles are wider.
          c.Cin = cin;
          c.strided_views = cin == 70;
          if (cin == 70 || cin == 32) c.y_dtype = DType::f32;
          c.Cout = 4;  // short sums: random data stays within the reference tolerance
          c.in = {5, 6, 13};
          // Stride 2 in H too: H phases of 2 and 1 taps, so plane mode's tap groups follow (D phase, H phase)
          // classes, a group smaller than a class splitting a row's pairs.
          c.kernel = {2, s == 2 ? 3 : 2, 3};
          c.stride = {s, s == 2 ? 2 : 1, s};
          c.pad_front = {1, 0, 2};
          c.pad_back = {2, 1, 0};
          Instance inst = instantiate(c, rng, Fill::random);
          const Problem p = validate(inst.spec);
          if (!admit(p)) continue;
          run_gemm(p, inst, GetParam(), {0, 0, 0, 0});
          ASSERT_TRUE(matches_reference(p, inst)) << c.name();
          Tensor rows = inst.y;
          for (int dh_group : {1, 2, 5})
            for (int planes : {1, 3, 10}) {
              fill_canary(inst.y);  // its padding, to check it stays untouched
              fill(inst.y, rng, Fill::nan);
              cpu::GemmTuning tuning{0, 0, 1, dh_group};
              tuning.planes_per_task = planes;
              run_gemm(p, inst, GetParam(), tuning);
              EXPECT_TRUE(same_bits(rows, inst.y))
                  << c.name() << ", tap groups of " << dh_group << ", " << planes << " planes per task";
              EXPECT_TRUE(padding_intact(inst.y)) << c.name();
            }
          // Fused W taps sum in the same order as separate ones (single-tap tiles: not sharing W taps),
          // except in AMX products over fewer than 16 pairs, which take a phase's taps side by side.
          cpu::GemmTuning fused{0, 0, 0, 0};
          fused.share_w = false;
          fill_canary(inst.y);
          run_gemm(p, inst, GetParam(), fused);
          ASSERT_TRUE(matches_reference(p, inst)) << c.name() << ", single-tap tiles";
          if (cpu::gemm_config(p, host_cpu_model(), GetParam(), 2, fused).amx_pairs < 16) continue;
          const Tensor fused_y = inst.y;
          fill_canary(inst.y);
          cpu::GemmTuning separate = fused;
          separate.fuse_w = false;
          run_gemm(p, inst, GetParam(), separate);
          EXPECT_TRUE(same_bits(fused_y, inst.y)) << c.name() << ", W taps not fused";
        }
  expect_counts(24, 24);  // fp32: 2 data formats x 3 strides x 4 channel counts
}

INSTANTIATE_TEST_SUITE_P(Isas, CpuIsa, ::testing::ValuesIn(kFastIsas),
                         [](const auto& param_info) { return std::string(to_string(param_info.param)); });

// Plan picks the fast engine of the requested ISA, and each faster engine says why it declined.
TEST(CpuDispatch, ForcedIsaPicksItsEngineAndOthersSayWhy) {
  std::mt19937_64 rng(61);
  Case wide = with_dtype(Case{}, DType::bf16);
  wide.Cin = 20;  // more than the pixel engine takes
  Instance inst = instantiate(wide, rng, Fill::random);
  const Problem p = validate(inst.spec);
  const std::pair<Isa, const char*> expected[] = {{Isa::amx_bf16, "gemm_amx_bf16"},
                                                  {Isa::avx512_bf16, "gemm_avx512_bf16"},
                                                  {Isa::avx512, "gemm_avx512"},
                                                  {Isa::avx2, "gemm_avx2"},
                                                  {Isa::portable, "direct"}};
  for (auto [isa, name] : expected) {
    if (!cpu_supports(isa)) continue;
    Options o;
    o.isa = isa;
    Plan plan(p, o);
    EXPECT_EQ(plan.engine_name(), name);
    if (isa == Isa::avx2 && cpu_supports(Isa::avx512_bf16)) {  // (elsewhere "the CPU lacks ..." instead)
      ASSERT_GE(plan.declined().size(), 2u);
      const std::vector<std::string> declined(plan.declined().begin() + 2, plan.declined().end());
      EXPECT_EQ(plan.declined()[0].rfind("pointwise_amx_bf16: ", 0), 0u) << plan.declined()[0];
      EXPECT_EQ(plan.declined()[1].rfind("gemm_amx_bf16: ", 0), 0u) << plan.declined()[1];
      EXPECT_EQ(
          declined,
          (std::vector<std::string>{
              "stream_avx512: needs avx512, requested avx2",
              "pixel_avx512_bf16: needs avx512_bf16, requested avx2",
              "pixel_avx512: needs avx512, requested avx2",
              "pointwise_avx512_bf16: needs avx512_bf16, requested avx2",
              "pointwise_avx512: needs avx512, requested avx2",
              "gemm_avx512_bf16: needs avx512_bf16, requested avx2",
              "gemm_avx512: needs avx512, requested avx2",
              "stream_avx2: the filter has 2160 elements, fewer than 2^20: packing it costs little",
              "pixel_avx2: Cin/groups is 20, more than 8",
              "pointwise_avx2: not pointwise (kernel 1x1x1, stride 1, no padding) nor at most one tap per y "
              "pixel (kernel <= stride, stride at most 2 along W, no padding or dilation, y = stride x "
              "dy)"}));
    }
  }
  // fp32 inputs: the bf16 engine declines and says why.
  Case wide32 = Case{};
  wide32.Cin = 20;
  Instance f32 = instantiate(wide32, rng, Fill::random);
  if (cpu_supports(Isa::avx512_bf16)) {
    Options o;
    o.isa = Isa::avx512_bf16;
    Plan plan(validate(f32.spec), o);
    EXPECT_EQ(plan.engine_name(), "gemm_avx512");
    ASSERT_GE(plan.declined().size(), 8u);
    EXPECT_EQ(plan.declined()[0].rfind("pointwise_amx_bf16: ", 0), 0u) << plan.declined()[0];
    EXPECT_EQ(plan.declined()[1].rfind("gemm_amx_bf16: ", 0), 0u) << plan.declined()[1];
    EXPECT_EQ(plan.declined()[2],
              "stream_avx512: the filter has 2160 elements, fewer than 2^20: packing it costs little");
    EXPECT_NE(plan.declined()[3].find("pixel_avx512_bf16: inputs not exact in bf16"), std::string::npos)
        << plan.declined()[3];
    EXPECT_EQ(plan.declined()[4], "pixel_avx512: Cin/groups is 20, more than 8");
    EXPECT_NE(plan.declined()[5].find("pointwise_avx512_bf16: inputs not exact in bf16"), std::string::npos)
        << plan.declined()[5];
    // The refusal names one-tap kernels where the CPU's table sends them to AVX-512's broadcast mode.
    EXPECT_EQ(
        plan.declined()[6].rfind("pointwise_avx512: not pointwise (kernel 1x1x1, stride 1, no padding)", 0),
        0u)
        << plan.declined()[6];
    EXPECT_EQ(plan.declined()[6].find("one tap per y pixel") != std::string::npos,
              host_cpu_model().broadcast_one_tap_avx512)
        << plan.declined()[6];
    EXPECT_NE(plan.declined()[7].find("gemm_avx512_bf16: inputs not exact in bf16"), std::string::npos)
        << plan.declined()[7];
    EXPECT_EQ(plan.declined().size(), 8u) << "no AVX2 engine is tried once the AVX-512 GEMM takes it";
  }
  // Few input channels per group: the pixel engine, over bf16 pairs where the inputs allow.
  if (cpu_supports(Isa::avx512)) {
    Instance few = instantiate(Case{}, rng, Fill::random);
    Options o;
    o.isa = Isa::avx512;
    EXPECT_EQ(Plan(validate(few.spec), o).engine_name(), "pixel_avx512");
  }
  if (cpu_supports(Isa::avx512_bf16)) {
    Instance few = instantiate(with_dtype(Case{}, DType::hif8), rng, Fill::random);
    Options o;
    o.isa = Isa::avx512_bf16;
    EXPECT_EQ(Plan(validate(few.spec), o).engine_name(), "pixel_avx512_bf16");
  }
}

// The pixel-vectorised engine (few input channels per group, depthwise), in fp32 and over bf16 pairs.
class CpuPixel : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!cpu_supports(GetParam())) GTEST_SKIP() << "CPU lacks " << to_string(GetParam());
  }
  static bool pairs() { return GetParam() == Isa::avx512_bf16; }
  // Runs the case and checks it against the reference. A case whose inputs the bf16 variant does not take is
  // counted instead, and each test asserts how many were.
  void check(const Case& c, std::mt19937_64& rng, Fill fill) {
    Instance inst = instantiate(c, rng, fill);
    const Problem p = validate(inst.spec);
    if (!admit(p)) return;
    run_pixel(p, inst, GetParam());
    ASSERT_TRUE(matches_reference(p, inst)) << c.name();
    if (fill == Fill::small_integers && c.y_dtype == DType::f32) {
      ASSERT_TRUE(exactly_reference(p, inst)) << c.name();
    }
  }
  // Whether the variant takes the problem's inputs, counting the cases run and declined.
  bool admit(const Problem& p) {
    const bool taken = takes(GetParam(), p);
    ++(taken ? ran_ : declined_);
    return taken;
  }
  // The bf16 variant declines `bf16_declines` of the test's cases (fp32 or fp16 inputs); fp32 none.
  void expect_counts(int bf16_declines) {
    EXPECT_EQ(declined_, pairs() ? bf16_declines : 0) << "cases the engine declined";
    EXPECT_GT(ran_, 0) << "cases run";
    RecordProperty("declined", declined_);
    RecordProperty("ran", ran_);
  }
  int declined_ = 0, ran_ = 0;
};

TEST_P(CpuPixel, RandomSweepAllDtypesAndLayouts) {
  std::mt19937_64 rng(83);
  random_sweep(rng, 4, [&](const Case& c, Fill fill) { check(c, rng, fill); });
  expect_counts(48);  // fp32 and fp16: 2 dtypes x 2 data formats x 3 filter formats x 4
}

// Every channel count the engine takes; W phases of 7..9, 15..17, 31..33 and 63..65 pixels (vector edges,
// stride 1 and 2); row counts around the tile's rows; depthwise with a channel multiplier.
TEST_P(CpuPixel, TileEdges) {
  std::mt19937_64 rng(89);
  for (std::int64_t ci = 1; ci <= 8; ++ci)
    for (std::int64_t width : {8, 16, 32, 64})
      for (std::int64_t dw : {-1, 0, 1}) {
        const std::int64_t s = (ci + dw) % 2 + 1;
        Case c = with_dtype(Case{}, ci % 2 ? (pairs() ? DType::hif8 : DType::f32) : DType::bf16);
        c.data_format = dw == 0 ? Layout::NCDHW : Layout::NDHWC;
        c.Cin = ci;
        c.Cout = 3;
        c.in = {2, 5 + ci, s * (width + dw)};
        c.stride = {1, 1, s};
        c.kernel = {2, 3, 3};
        c.pad_front = {1, 2, 1};
        c.pad_back = {0, 0, 2};
        check(c, rng, dw == 0 ? Fill::random : Fill::small_integers);
      }
  for (std::int64_t rows : {6, 7, 8, 23, 24}) {
    Case c = with_dtype(Case{}, pairs() ? DType::bf16 : DType::f32);
    c.y_dtype = DType::f32;
    c.groups = c.Cin = 3;
    c.Cout = 6;
    c.in = {1, rows, 20};
    c.kernel = {1, 3, 3};
    c.pad_front = {0, 1, 1};
    c.pad_back = {0, 1, 1};
    check(c, rng, Fill::small_integers);
  }
  expect_counts(0);  // the bf16 variant gets hif8 and bf16 only
}

// Channel-last y is written in blocks of groups covering a vector's worth of channels (16, AVX2 8): full and
// partial blocks, Cin_g 1 and 2; channel-first y with W stride 2 through rows staged across the W phases (odd
// and even widths). Rows of channel-last dy (74 channels) longer than the 55 pixels its fp32 conversion
// transposes at a time.
TEST_P(CpuPixel, DepthwiseAndGroupedBlocks) {
  std::mt19937_64 rng(101);
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::hif8})
    for (std::int64_t cin_g : {1, 2})
      for (std::int64_t s : {1, 2}) {
        Case c = with_dtype(Case{}, t);
        const bool ndhwc = t == DType::f32 || t == DType::f16;
        c.data_format = ndhwc ? Layout::NDHWC : Layout::NCDHW;  // staged rows too
        c.groups = 37;
        c.Cin = 37 * cin_g;
        c.Cout = 37 * 2;
        c.in = {2, 7, (ndhwc ? 60 * s : 18) + cin_g};
        c.stride = {1, s, s};
        c.pad_front = {1, 1, 0};
        c.pad_back = {1, 0, 2};
        check(c, rng, s == 1 ? Fill::small_integers : Fill::random);
        c.y_dtype = DType::f32;
        check(c, rng, Fill::small_integers);
      }
  expect_counts(16);  // fp32 and fp16: 2 channel counts x 2 strides x 2 cases
}

// 8-bit channel-last y: a tile row's channels transposed and encoded by the transposing store, a pixel's
// channels at a time, in full and partial blocks of groups (37 groups of 1 or 2 channels), W phases of stride
// 1 and 2, short last tiles.
TEST_P(CpuPixel, EightBitChannelLastYByPixel) {
  std::mt19937_64 rng(131);
  for (DType t : {DType::hif8, DType::fp8_e4m3fn})
    for (std::int64_t cin_g : {1, 2})
      for (std::int64_t s : {1, 2}) {
        Case c = with_dtype(Case{}, t);
        c.data_format = Layout::NDHWC;
        c.groups = 37;
        c.Cin = 37 * cin_g;
        c.Cout = 37;
        c.in = {2, 5, 21 * s + cin_g};
        c.stride = {1, s, s};
        c.pad_front = {1, 1, 0};
        c.pad_back = {1, 0, 2};
        check(c, rng, Fill::random);
        check(c, rng, Fill::small_integers);
      }
  expect_counts(0);
}

// Channel-last dy widened a run of pixels at a time where they follow one another, from a view whose rows,
// planes and images lie apart: every type the reader widens (HF32 fp32, fp16, bf16, 8-bit), against the
// reference and on 1 and 2 threads bitwise. (The bf16-pair variant converts channel by channel.)
TEST_P(CpuPixel, DyRowsApartWithContiguousPixels) {
  std::mt19937_64 rng(74);
  for (const DType dtype : kAllDtypes)
    check_rows_apart(
        rows_apart_case(dtype, 4, 6), rng, [&](const Problem& p) { return admit(p); },
        [&](const Problem& p, Instance& inst, int threads) { run_pixel(p, inst, GetParam(), threads); });
  expect_counts(2);
}

TEST_P(CpuPixel, BitwiseIdenticalAcrossThreadCounts) {
  std::mt19937_64 rng(97);
  for (Layout fmt : kDataFormats) {
    Case c;
    c.data_format = fmt;
    c.Cin = 3;
    c.Cout = 10;
    c.in = {5, 19, 37};
    c.kernel = {3, 5, 5};
    c.stride = {2, 2, 2};
    if (pairs()) c = with_dtype(c, DType::bf16);
    Instance inst = instantiate(c, rng, Fill::random);
    const Problem p = validate(inst.spec);
    run_pixel(p, inst, GetParam(), 1);
    Tensor first = inst.y;
    fill_canary(inst.y);
    run_pixel(p, inst, GetParam(), 2);
    EXPECT_TRUE(same_bits(first, inst.y)) << c.name();
  }
}

// An infinity or NaN in a filter tap that misses dy at the borders (and at a vector's partial edge: W 13,
// 21) stays out of those pixels' sums: the masked loads and FMAs (AVX-512) or blends (AVX2) leave them.
TEST_P(CpuPixel, NonFiniteFilterAtBordersMatchesReference) {
  std::mt19937_64 rng(151);
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    for (Layout fmt : kDataFormats)
      for (std::int64_t w : {13, 21}) {
        Case c = with_dtype(Case{}, pairs() ? DType::bf16 : DType::f32);
        c.data_format = fmt;
        c.y_dtype = DType::f32;
        c.Cin = 3;
        c.Cout = 4;
        c.in = {2, 3, w};
        c.pad_front = c.pad_back = {1, 1, 1};
        Instance inst = instantiate(c, rng, Fill::small_integers);
        // Tap (kd 0, kh 1, kw 0) of (co 2, ci 1) misses dy for y pixels at d = 0 and w = 0.
        const auto& st = inst.filter.view.strides;
        numeric::store_f32(c.dtype, inst.filter.view.data, 2 * st[0] + st[1] + st[3], bad,
                           OverflowMode::ieee);
        const Problem p = validate(inst.spec);
        run_pixel(p, inst, GetParam());
        EXPECT_TRUE(matches_reference(p, inst)) << c.name() << ", filter value " << bad;
      }
}

// On AVX2 converted fp32 dy rows carry zero halos, and with a finite filter every tap reads whole vectors:
// its lanes outside dy must add nothing, whatever the workspace held before (here NaN bytes). A large
// kernel without padding (every tap misses part of each row; one image and group, or two of each) converts
// even fp32 NCDHW dy; a 3 x 3 depthwise one with few masked taps reads it in place, and so do rows of 3
// pixels, too short for halos (which would more than double them); on AVX-512 masks are free and nothing
// gets halos. Exact on small integers, in every layout and for dtypes taking each conversion path; dy's own
// infinities (fp32) stay where the reference puts them.
TEST_P(CpuPixel, HaloLanesAddNothingWhateverTheWorkspaceHeld) {
  std::mt19937_64 rng(173);
  for (int shape : {0, 1, 2, 3})
    for (Layout fmt : kDataFormats)
      for (DType t : {DType::f32, DType::f16, DType::hif8}) {
        if (pairs() && t != DType::f32) continue;  // bf16 pairs: one pass
        Case c = with_dtype(Case{}, pairs() ? DType::bf16 : t);
        c.data_format = fmt;
        c.y_dtype = DType::f32;
        if (shape == 0 || shape == 3) {  // large kernel; 3: two images, two groups
          c.N = shape == 3 ? 2 : 1;
          c.groups = shape == 3 ? 2 : 1;
          c.Cin = 3 * c.groups;
          c.Cout = 5 * c.groups;
          c.in = {5, 9, 41};
          c.kernel = {3, 5, 7};
          c.stride = {2, 2, 2};
        } else if (shape == 1) {  // depthwise
          c.groups = c.Cin = c.Cout = 8;
          c.in = {1, 12, 64};
          c.stride = {1, 2, 2};
          c.pad_front = c.pad_back = {1, 1, 1};
        } else {  // short rows
          c.Cin = 2;
          c.Cout = 3;
          c.in = {2, 4, 3};
          c.pad_front = c.pad_back = {1, 1, 1};
        }
        for (bool inf_in_dy : {false, true}) {
          if (inf_in_dy && c.dtype != DType::f32) continue;
          Instance inst = instantiate(c, rng, Fill::small_integers);
          if (inf_in_dy)
            numeric::store_f32(c.dtype, inst.dy.view.data, inst.dy.view.strides[4],  // the innermost's second
                               std::numeric_limits<float>::infinity(), OverflowMode::ieee);
          const Problem p = validate(inst.spec);
          std::string why;
          auto engine = cpu::make_pixel(named_request(p, 2, GetParam()), GetParam(), why);
          ASSERT_TRUE(engine) << why;
          // Halos on AVX2 (where masks cost a blend per FMA) wherever dy is converted, but for the short
          // rows; fp32 NCDHW dy read in place unless halos spare the large kernels' masks.
          const bool can_halo = GetParam() == Isa::avx2 && shape != 2;
          const bool in_place = !pairs() && fmt == Layout::NCDHW && t == DType::f32 &&
                                !(can_halo && (shape == 0 || shape == 3));
          const bool halos = can_halo && !in_place;
          EXPECT_EQ(engine->config().find("halos") != std::string::npos, halos)
              << c.name() << ": " << engine->config();
          EXPECT_EQ(engine->workspace_bytes() == 0, in_place) << c.name() << ": " << engine->config();
          std::vector<unsigned char> workspace(engine->workspace_bytes(), 0xFF);
          engine->pack_filter(inst.filter.view.data);
          engine->execute(inst.dy.view.data, inst.y.view.data, workspace.data());
          if (inf_in_dy)
            EXPECT_TRUE(matches_reference(p, inst)) << c.name() << ", an infinity in dy";
          else
            EXPECT_TRUE(exactly_reference(p, inst)) << c.name();
        }
      }
}

INSTANTIATE_TEST_SUITE_P(Isas, CpuPixel, ::testing::Values(Isa::avx2, Isa::avx512, Isa::avx512_bf16),
                         [](const auto& param_info) { return std::string(to_string(param_info.param)); });

// A pointwise case (1x1x1 kernel, stride 1, no padding): `dtype` in and out, tensors in `format`.
Case pointwise_case(DType dtype, Layout format, std::int64_t cin, std::int64_t cout,
                    std::array<std::int64_t, 3> in) {
  Case c = with_dtype(Case{}, dtype);
  c.data_format = format;
  c.kernel = {1, 1, 1};
  c.Cin = cin;
  c.Cout = cout;
  c.in = in;
  return c;
}

// The pointwise engine (1x1x1 kernel, stride 1, no padding, channel-first tensors), in fp32 on AVX2 and
// AVX-512 and over bf16 pairs: pixel counts around its tiles and its 3- to 14-pixel kernel calls, channel
// blocks of 16 to 64 (full and partial, one to three per group), dy rows transposed in blocks of 32 (odd and
// even Cout, partial blocks) straight from dy or widened first (other dtypes, HF32 and fp16 input rounding),
// groups, y in every output type; exact on small integers; 1, 2 and 3 threads give the same bits, and so
// does a CPU with a 16 KiB L2, whose blocking cuts the reduction into chunks of about 16 steps (an odd
// Cout's zero row in the last) and (AVX-512) stores a larger fp32 y past the caches; N = 0 plans and runs as
// an empty success. AVX2 broadcasts the filter instead (PointwiseBlocking::broadcast): rows of 6 input
// channels (full and partial), calls of 16 pixels (full and partial), and with the small L2 chunks of up
// to 64 output channels and blocks of rows.
class CpuPointwise : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!cpu_supports(GetParam())) GTEST_SKIP() << "CPU lacks " << to_string(GetParam());
  }
  static bool pairs() { return GetParam() == Isa::avx512_bf16; }
  // This CPU with AVX-512's broadcast mode for one-tap kernels on, whatever its table says, so the mode is
  // tested on every CPU with AVX-512.
  static CpuModel model() {
    CpuModel cpu = host_cpu_model();
    cpu.broadcast_one_tap_avx512 = true;
    return cpu;
  }
  // Whether the ISA's engine takes kernels that give each y pixel at most one tap (the broadcast mode).
  static bool one_tap() { return GetParam() == Isa::avx2 || GetParam() == Isa::avx512; }
  static CpuModel small_l2() {
    CpuModel cpu = model();
    cpu.l2_bytes = 16 << 10;
    return cpu;
  }
  Case pointwise(std::int64_t cin, std::int64_t cout, std::array<std::int64_t, 3> in) const {
    return pointwise_case(pairs() ? DType::bf16 : DType::f32, Layout::NCDHW, cin, cout, in);
  }
  // Runs the engine on inst and checks y: against the reference (exactly where `exact`), nothing written
  // outside y's view, the same bits with 1 and 3 threads and with a 16 KiB L2, whose blocking goes to
  // *small_blocking.
  static void check_runs(const Problem& p, Instance& inst, bool exact, const std::string& name,
                         cpu::PointwiseBlocking* small_blocking) {
    const Isa isa = GetParam();
    run_pointwise(p, inst, isa, 2, model());
    ASSERT_TRUE(matches_reference(p, inst)) << name;
    if (exact) {
      ASSERT_TRUE(exactly_reference(p, inst)) << name;
    }
    ASSERT_TRUE(padding_intact(inst.y)) << name;
    Tensor first = inst.y;
    for (int threads : {1, 3}) {
      fill_canary(inst.y);
      run_pointwise(p, inst, isa, threads, model());
      EXPECT_TRUE(same_bits(first, inst.y)) << name << ", " << threads << " threads";
    }
    const CpuModel small = small_l2();
    *small_blocking = cpu::pointwise_blocking(p, small, 2, isa);
    fill_canary(inst.y);
    run_pointwise(p, inst, isa, 2, small);
    EXPECT_TRUE(same_bits(first, inst.y)) << name << ", in chunks of " << small_blocking->chunk;
  }
};

// A channel-first tensor relaid with `channel_gap` elements after each channel's planes and `image_gap`
// after each image (the planes stay contiguous), the same values; the gaps hold the canary.
Tensor channels_apart(const Tensor& dense, std::int64_t channel_gap, std::int64_t image_gap) {
  const auto& sh = dense.view.shape;  // N, C, D, H, W
  Tensor apart;
  apart.view = dense.view;
  auto& st = apart.view.strides;
  st = {0, sh[2] * sh[3] * sh[4] + channel_gap, sh[3] * sh[4], sh[4], 1};
  st[0] = sh[1] * st[1] + image_gap;
  const std::size_t size = dtype_size(dense.view.dtype);
  apart.bytes.resize(static_cast<std::size_t>(std::max<std::int64_t>(1, sh[0]) * st[0]) * size);
  fill_canary(apart);
  apart.view.data = apart.bytes.data();
  const auto& ds = dense.view.strides;
  const auto* from = static_cast<const unsigned char*>(dense.view.data);
  const auto bytes = static_cast<std::int64_t>(size);
  for (std::int64_t n = 0; n < sh[0]; ++n)
    for (std::int64_t c = 0; c < sh[1]; ++c)
      for (std::int64_t d = 0; d < sh[2]; ++d)
        for (std::int64_t h = 0; h < sh[3]; ++h)
          for (std::int64_t w = 0; w < sh[4]; ++w)
            std::memcpy(apart.bytes.data() + (n * st[0] + c * st[1] + d * st[2] + h * st[3] + w) * bytes,
                        from + (n * ds[0] + c * ds[1] + d * ds[2] + h * ds[3] + w * ds[4]) * bytes, size);
  return apart;
}

// The instance's dy and y relaid with channel and image gaps (channels_apart); the spec views them.
void relay_channels_apart(Instance& inst) {
  inst.dy = channels_apart(inst.dy, 3, 7);
  inst.y = channels_apart(inst.y, 5, 11);
  inst.spec.out_backprop = inst.dy.view;
  inst.spec.y = inst.y.view;
}

TEST_P(CpuPointwise, MatchesReferenceAtTileAndBlockEdges) {
  std::mt19937_64 rng(131);
  const std::vector<std::array<std::int64_t, 3>> sizes = {{1, 1, 31}, {1, 4, 8},   {1, 1, 33}, {2, 3, 11},
                                                          {3, 5, 7},  {1, 1, 143}, {1, 5, 29}, {2, 2, 37}};
  const std::vector<std::array<std::int64_t, 3>> wide_k_sizes = {{1, 1, 140}, {1, 1, 132}};
  int k = 0, chunked = 0, uncached = 0, row_blocked = 0;
  for (std::int64_t cin : {9, 17, 40, 80, 130})
    for (std::int64_t cout : {1, 2, 3, 16, 33, 70, 1900})
      for (int i = 0; i < 2; ++i) {             // two sizes per pair of channel counts, in turn
        if (cout == 1900 && cin > 9) continue;  // a narrower tile (132 pixels): one case is enough
        const auto& in = cout == 1900 ? wide_k_sizes[static_cast<std::size_t>(i)]
                                      : sizes[static_cast<std::size_t>(k % 4 + 4 * i)];
        Case c = pointwise(cin, cout, in);
        if (!pairs()) c = with_dtype(c, kAllDtypes[k % 5]);  // widened to fp32 tile by tile
        c.hf32 = !pairs() && k % 10 == 5 && c.dtype == DType::f32;
        c.N = 1 + k % 2;
        c.groups = k % 3 == 0 ? 2 : 1;
        c.Cin *= c.groups;
        c.Cout *= c.groups;
        c.dilation = {1 + k % 2, 1, 2};  // no effect with a 1x1x1 kernel
        c.y_dtype = k % 2 == 1 ? DType::f32 : c.dtype;
        c.filter_format = kFilterFormats[k % 3];
        // aclnn's fp16 compute: fp32 or bf16 inputs rounded to fp16 first (not transposed straight from dy).
        const bool fp16_rounding =
            !pairs() && !c.hf32 && (c.dtype == DType::f32 || c.dtype == DType::bf16) && k % 4 == 2;
        const bool gaps = k % 7 == 3;
        ++k;
        for (Fill fill : {Fill::small_integers, Fill::random}) {
          Instance inst = instantiate(c, rng, fill);
          if (gaps) relay_channels_apart(inst);
          if (fp16_rounding) {
            inst.spec.input_rounding = InputRounding::fp16;
            // Pixel 0 of every dy plane not exact in fp16 (bf16: 1.0078125 x 2^-20, an fp16 subnormal that
            // rounds to 2^-20), so a panel taken straight from dy shows in y.
            const std::int64_t pixels = in[0] * in[1] * in[2];
            for (std::int64_t plane = 0; plane < c.N * c.Cout; ++plane) {
              if (c.dtype == DType::bf16)
                static_cast<std::uint16_t*>(inst.dy.view.data)[plane * pixels] = 0x3581;
              else
                static_cast<float*>(inst.dy.view.data)[plane * pixels] = 1.0f + 0x1p-12f;
            }
          }
          const Problem p = validate(inst.spec);
          cpu::PointwiseBlocking b;
          ASSERT_NO_FATAL_FAILURE(check_runs(
              p, inst, fill == Fill::small_integers && c.y_dtype == DType::f32,
              c.name() + (fp16_rounding ? " fp16-rounding" : "") + (gaps ? " channels apart" : ""), &b));
          const std::int64_t steps = pairs() ? (p.Cout_g + 1) / 2 : p.Cout_g;
          chunked += b.chunk < steps;
          uncached += b.uncached_y;
          row_blocked += b.broadcast && b.row_block < p.Cin_g;
        }
      }
  // fp32 y over 32 KiB (2 threads' L2 twice): 28 runs, non-temporal stores of AVX-512 only.
  if (GetParam() == Isa::avx2) {
    EXPECT_GE(chunked, 28) << row_blocked;  // of 124 runs: Cout 70 and 1900
    EXPECT_GE(row_blocked, 20);             // Cin 80 and 130 over Cout 16 to 70
    EXPECT_EQ(uncached, 0);
  } else {
    EXPECT_GE(chunked, 40);  // Cout 33, 70 and 1900
    EXPECT_GE(uncached, 20);
  }
}

// It takes only what it is built for, says why otherwise, and Plan prefers it for such problems.
TEST_P(CpuPointwise, TakesOnlyPointwiseChannelFirstProblems) {
  std::mt19937_64 rng(137);
  Case ok = pointwise(24, 5, {2, 3, 4});
  {
    Instance inst = instantiate(ok, rng, Fill::random);
    Options o;
    o.isa = GetParam();
    EXPECT_EQ(Plan(validate(inst.spec), o).engine_name(), std::string("pointwise_") + to_string(GetParam()));
  }
  {  // any reduction length: in chunks whose panel, block filter and accumulators fit in 3/4 of L2
    Problem huge = validate(instantiate(ok, rng, Fill::random).spec);
    huge.Cout_g = std::int64_t{1} << 20;
    for (const std::int64_t l2 : {std::int64_t{512} << 10, std::int64_t{2} << 20}) {
      CpuModel cpu = host_cpu_model();
      cpu.l2_bytes = l2;
      const cpu::PointwiseBlocking b = cpu::pointwise_blocking(huge, cpu, 2, GetParam());
      const std::int64_t unit = b.nv * cpu::kernels_for(GetParam()).lanes;
      EXPECT_LT(b.chunk, huge.Cout_g);
      if (b.broadcast) {  // the panel within 1/4 of L2, a block of filter rows within 1/2, whole vectors
        EXPECT_EQ(GetParam(), Isa::avx2);
        EXPECT_LE(b.chunk * b.width * 4, l2 / 4) << l2;
        EXPECT_LE(b.row_block * b.chunk * 4, l2 / 2) << l2;
        EXPECT_EQ(b.width % unit, 0);
        EXPECT_EQ(b.row_block % b.rows, 0);
      } else {
        EXPECT_GE(b.kp, b.chunk);
        EXPECT_LE((b.width * b.kp + b.chunk * unit + b.width * unit) * 4, l2 * 3 / 4) << l2;
      }
    }
  }
  Case kernel = ok, strided = ok, padded = ok, last = ok, views = ok;
  kernel.kernel = {1, 1, 2};
  strided.stride = {1, 2, 1};
  padded.pad_front = {0, 1, 0};
  padded.pad_back = {0, 1, 0};
  last.data_format = Layout::NDHWC;
  views.strided_views = true;
  std::vector<std::pair<Case, std::string>> refused{{kernel, "pointwise"},
                                                    {strided, "pointwise"},
                                                    {padded, "pointwise"},
                                                    {last, "contiguous"},
                                                    {views, "planes"}};
  if (pairs()) refused.push_back({with_dtype(ok, DType::hif8), "dy is"});  // pairs need bf16 dy
  for (const auto& [c, needle] : refused) {
    Instance inst = instantiate(c, rng, Fill::random);
    const Problem p = validate(inst.spec);
    std::string why;
    const Isa isa = GetParam();
    auto engine = cpu::make_pointwise(named_request(p, 2, isa), isa, why);
    EXPECT_FALSE(engine) << c.name();
    EXPECT_NE(why.find(needle), std::string::npos) << c.name() << ": " << why;
  }
}

// The broadcast mode (AVX2; AVX-512 where the CPU's table says so) also takes kernels that give each y pixel
// at most one tap (kernel <= stride, no padding or dilation, y = stride x dy, stride at most 2 along W; on
// AVX-512 at most 1536 (input channel, tap) rows): (input channel, tap) rows, each stored
// to its phase of y, the two W taps interleaved, the phases past the kernel zero. Kernels of 1 to 3 taps
// along D and H, 1 or 2 along W, equal to the stride or smaller (1 x 1 x 1 at stride 2 among them); dy rows
// of 1 to 20 pixels (calls of 16 or, AVX-512, 32 pixels across rows, partial ones), every dtype and filter
// layout, groups, y in the input type or fp32, dy and y channels apart; exact on small integers; 1, 2 and 3
// threads and a 16 KiB L2 (chunks, row blocks) give the same bits. Plan takes it for such a problem where the
// CPU's table allows, and the cases it cannot take are declined.
TEST_P(CpuPointwise, OneTapPerPixelKernels) {
  if (!one_tap()) GTEST_SKIP() << "the broadcast mode is AVX2's and AVX-512's";
  const Isa isa = GetParam();
  std::mt19937_64 rng(141);
  using Axes = std::array<std::int64_t, 3>;
  const std::vector<std::pair<Axes, Axes>> kernels = {
      // (kernel, stride)
      {{2, 2, 2}, {2, 2, 2}}, {{1, 2, 2}, {1, 2, 2}}, {{2, 2, 1}, {2, 2, 1}}, {{3, 1, 2}, {3, 1, 2}},
      {{1, 1, 2}, {1, 1, 2}}, {{2, 3, 1}, {2, 3, 1}}, {{1, 1, 1}, {2, 2, 2}}, {{1, 2, 1}, {2, 2, 2}},
      {{2, 1, 2}, {3, 2, 2}}, {{1, 1, 1}, {1, 1, 2}}, {{1, 1, 1}, {2, 1, 1}}, {{2, 2, 1}, {2, 3, 2}}};
  const std::vector<std::array<std::int64_t, 3>> dys = {
      {1, 1, 20}, {2, 3, 1}, {1, 2, 17}, {2, 2, 8}, {1, 3, 5}};
  int k = 0, chunked = 0, row_blocked = 0;
  for (const auto& [kernel, stride] : kernels)
    for (std::int64_t cin : {3, 9, 40})
      for (std::int64_t cout : {1, 5, 70}) {
        // Case k: dy sizes in turn, each with every dtype over the cases; filter layouts each with every
        // Cout; N 1 and 2 each with both y types.
        Case c = with_dtype(Case{}, kAllDtypes[k / 5 % 5]);
        c.data_format = Layout::NCDHW;
        c.filter_format = kFilterFormats[k / 4 % 3];
        c.kernel = kernel;
        c.stride = stride;
        const auto& dy = dys[static_cast<std::size_t>(k % 5)];
        for (int a = 0; a < 3; ++a) c.in[a] = dy[a] * stride[a];
        c.N = 1 + k / 3 % 2;
        c.groups = k % 4 == 1 ? 2 : 1;
        c.Cin = cin * c.groups;
        c.Cout = cout * c.groups;
        c.y_dtype = k % 2 == 0 ? DType::f32 : c.dtype;
        const bool gaps = k % 7 == 3;
        ++k;
        for (Fill fill : {Fill::small_integers, Fill::random}) {
          Instance inst = instantiate(c, rng, fill);
          if (gaps) relay_channels_apart(inst);
          const Problem p = validate(inst.spec);
          cpu::PointwiseBlocking b;
          ASSERT_NO_FATAL_FAILURE(check_runs(p, inst, fill == Fill::small_integers && c.y_dtype == DType::f32,
                                             c.name() + (gaps ? " channels apart" : ""), &b));
          EXPECT_TRUE(b.broadcast) << c.name();
          chunked += b.chunk < p.Cout_g;
          row_blocked += b.row_block < p.Cin_g * kernel[0] * kernel[1] * kernel[2];
        }
      }
  EXPECT_GE(chunked, 20) << row_blocked;  // Cout 70
  EXPECT_GE(row_blocked, 14);             // Cout 70 with the most (input channel, tap) rows

  Case ok = pointwise(24, 5, {4, 6, 8});
  ok.kernel = ok.stride = {2, 2, 2};
  Case k1s2 = ok;
  k1s2.kernel = {1, 1, 1};
  const bool planned = isa == Isa::avx2 || host_cpu_model().broadcast_one_tap_avx512;
  for (const Case& c : {ok, k1s2}) {
    Instance inst = instantiate(c, rng, Fill::random);
    Options o;
    o.isa = isa;
    EXPECT_EQ(Plan(validate(inst.spec), o).engine_name() == std::string("pointwise_") + to_string(isa),
              planned)
        << c.name();
  }
  Case wide = ok, narrow_wide = ok, padded = ok, dilated = ok, left_over = ok, k1_left_over = k1s2,
       overlapping = ok;
  wide.kernel = wide.stride = {1, 1, 3};
  narrow_wide.kernel = {1, 1, 1};
  narrow_wide.stride = {1, 1, 3};
  k1_left_over.in = {5, 6, 8};  // y 5 along D, 2 x 3 = 6 at stride 2
  padded.pad_front = {0, 1, 0};
  padded.pad_back = {0, 1, 0};
  dilated.dilation = {2, 1, 1};
  dilated.in = {8, 6, 8};
  left_over.in = {5, 6, 8};
  overlapping.stride = {1, 2, 2};
  std::vector<std::pair<Case, std::string>> refused;
  for (const Case& c : {wide, narrow_wide, padded, dilated, left_over, k1_left_over, overlapping})
    refused.emplace_back(c, "nor at most one tap per y pixel");
  if (isa == Isa::avx512) {  // AVX2 takes any number of rows
    Case many_rows = ok;     // 200 input channels x 8 taps: 1600 rows, AVX-512's GEMM engine's
    many_rows.Cin = 200;
    refused.emplace_back(many_rows, "1600 (input channel, tap) rows");
  }
  // Whether the engine takes case c on `cpu` (why: its refusal).
  const auto takes = [&](const Case& c, const CpuModel& cpu, std::string& why) {
    Instance inst = instantiate(c, rng, Fill::random);
    const Problem p = validate(inst.spec);  // the request refers to it
    EngineRequest request = named_request(p, 2, isa);
    request.cpu = cpu;
    return cpu::make_pointwise(request, isa, why) != nullptr;
  };
  Case at_bound = ok;  // 192 x 8 = 1536 rows: the most AVX-512 takes
  at_bound.Cin = 192;
  std::string why;
  EXPECT_TRUE(takes(at_bound, model(), why)) << why;
  for (const auto& [c, needle] : refused) {
    EXPECT_FALSE(takes(c, model(), why)) << c.name();
    EXPECT_NE(why.find(needle), std::string::npos) << c.name() << ": " << why;
  }
  if (isa == Isa::avx512) {  // a CPU whose table keeps AVX-512's one-tap kernels on the GEMM engine
    CpuModel gemm_table = model();
    gemm_table.broadcast_one_tap_avx512 = false;
    EXPECT_FALSE(takes(ok, gemm_table, why));
    EXPECT_EQ(why, "not pointwise (kernel 1x1x1, stride 1, no padding)");
  }
}

// Infinities and a NaN in dy and the filter match the reference: fp32 (the pairs engine: bf16) over 1 x 2 x 5
// pixels (a call of 16 on AVX2, of which the 6 past the tile's pixels sum 0 x inf but are never stored),
// pointwise and, in the broadcast mode (AVX2, AVX-512), k2 s2.
TEST_P(CpuPointwise, NonFiniteInputsMatchReference) {
  std::mt19937_64 rng(143);
  std::vector<std::array<std::int64_t, 3>> kernels = {{1, 1, 1}};
  if (one_tap()) kernels.push_back({2, 2, 2});
  for (const auto& kernel : kernels) {
    Case c = pointwise(7, 9, {1, 2, 5});
    c.kernel = c.stride = kernel;
    for (int a = 0; a < 3; ++a) c.in[a] *= kernel[a];
    Instance inst = instantiate(c, rng, Fill::small_integers);
    const double inf = std::numeric_limits<double>::infinity();
    const auto put = [](Tensor& t, const std::array<std::int64_t, 5>& at, double v) {
      std::int64_t i = 0;
      for (int d = 0; d < 5; ++d) i += at[d] * t.view.strides[d];
      numeric::store_f32(t.view.dtype, t.view.data, i, static_cast<float>(v), OverflowMode::ieee);
    };
    put(inst.dy, {0, 2, 0, 0, 3}, inf);
    put(inst.dy, {0, 5, 0, 1, 4}, std::numeric_limits<double>::quiet_NaN());
    put(inst.dy, {0, 8, 0, 1, 0}, -inf);
    put(inst.filter, {1, 6, 0, 0, 0}, inf);
    const Problem p = validate(inst.spec);
    run_pointwise(p, inst, GetParam(), 2, model());
    EXPECT_TRUE(matches_reference(p, inst)) << c.name();
  }
}

TEST_P(CpuPointwise, EmptyBatchRunsAsAnEmptySuccess) {
  std::mt19937_64 rng(139);
  Case c = pointwise(40, 33, {2, 3, 4});
  c.N = 0;
  Instance inst = instantiate(c, rng, Fill::random);
  const Problem p = validate(inst.spec);
  const Isa isa = GetParam();
  std::string why;
  auto engine = cpu::make_pointwise(named_request(p, 2, isa), isa, why);
  ASSERT_TRUE(engine) << why;
  engine->pack_filter(inst.filter.view.data);
  engine->execute(inst.dy.view.data, inst.y.view.data, nullptr);
  engine->execute_with_filter(inst.dy.view.data, inst.filter.view.data, inst.y.view.data, nullptr, false);
}

INSTANTIATE_TEST_SUITE_P(Isas, CpuPointwise, ::testing::Values(Isa::avx2, Isa::avx512, Isa::avx512_bf16),
                         [](const auto& param_info) { return std::string(to_string(param_info.param)); });

// The pointwise engine on AMX tiles (channel-last tensors, inputs exact in bf16): pixel counts around its
// 32-pixel tiles and their 16-row halves, input channels around its 32-channel blocks (where it takes them:
// not so few that padding would multiply the work by more than 16), output channels around its 16-pair
// tile products and 256-pair chunks (odd counts: a zero channel in the last pair), bf16, HiFloat8 and FP8
// E4M3FN inputs, y in the input type or fp32, groups, every filter layout (NCDHW and NDHWC paired by
// kernels, DHWCN value by value), dy pixels spaced wider than their channels; exact on small integers into
// fp32; 1, 2 and 3 threads give the same bits.
TEST(CpuPointwiseAmx, MatchesReferenceAtTileAndChunkEdges) {
  if (!cpu_supports(Isa::amx_bf16)) GTEST_SKIP() << "CPU lacks amx_bf16";
  std::mt19937_64 rng(151);
  const std::vector<std::array<std::int64_t, 3>> sizes = {{1, 1, 1},  {1, 1, 15}, {1, 2, 8},
                                                          {1, 1, 17}, {1, 1, 31}, {1, 4, 8},
                                                          {1, 3, 11}, {2, 3, 11}, {1, 5, 13}};
  const DType dtypes[] = {DType::bf16, DType::hif8, DType::fp8_e4m3fn};
  std::size_t k = 0;
  int declined = 0;
  for (std::int64_t cin : {2, 16, 17, 32, 33, 80})
    for (std::int64_t cout : {2, 31, 32, 33, 511, 512, 513, 600}) {
      Case c = pointwise_case(dtypes[k % 3], Layout::NDHWC, cin, cout, sizes[k % sizes.size()]);
      c.N = 1 + static_cast<std::int64_t>(k % 2);
      c.groups = k % 4 == 1 ? 2 : 1;
      c.Cin = cin * c.groups;
      c.Cout = cout * c.groups;
      c.y_dtype = k % 2 == 1 ? DType::f32 : c.dtype;
      c.filter_format = kFilterFormats[k % 3];
      const bool pixels_apart = k % 5 == 0;
      ++k;
      for (Fill fill : {Fill::small_integers, Fill::random}) {
        Instance inst = instantiate(c, rng, fill);
        if (pixels_apart) relay_dy(inst, 3, 0, 0, 0);
        const std::string what = c.name() + (pixels_apart ? ", dy pixels apart" : "");
        const Problem p = validate(inst.spec);
        std::string why;
        if (!cpu::make_pointwise(named_request(p, 2, Isa::amx_bf16), Isa::amx_bf16, why)) {
          EXPECT_NE(why.find("more than 16"), std::string::npos) << what << ": " << why;
          declined += fill == Fill::random;
          continue;
        }
        run_pointwise(p, inst, Isa::amx_bf16);
        ASSERT_TRUE(matches_reference(p, inst)) << what;
        if (fill == Fill::small_integers && c.y_dtype == DType::f32) {
          ASSERT_TRUE(exactly_reference(p, inst)) << what;
        }
        ASSERT_TRUE(padding_intact(inst.y)) << what;
        const Tensor first = inst.y;
        for (int threads : {1, 3}) {
          fill_canary(inst.y);
          run_pointwise(p, inst, Isa::amx_bf16, threads);
          EXPECT_TRUE(same_bits(first, inst.y)) << what << ", " << threads << " threads";
        }
      }
    }
  // 2 input channels with other than 32 or 512 output channels, and 2 output channels with other than 2 or
  // 32 input channels: padding to 32 would multiply the work by more than 16.
  EXPECT_EQ(declined, 10);
}

// Infinities and NaNs in dy and the filter reach y as the reference has them, and nowhere else: the padding
// channels of a panel row (past the last of 513 output channels, in the second chunk) are zeroed, not left
// holding the first chunk's values, which the zero padding of the filter would turn into 0 x inf = NaN.
TEST(CpuPointwiseAmx, NonFiniteInputsMatchReference) {
  if (!cpu_supports(Isa::amx_bf16)) GTEST_SKIP() << "CPU lacks amx_bf16";
  std::mt19937_64 rng(163);
  Case c = pointwise_case(DType::bf16, Layout::NDHWC, 40, 513, {1, 2, 20});
  c.y_dtype = DType::f32;
  Instance inst = instantiate(c, rng, Fill::small_integers);
  auto* dy = static_cast<std::uint16_t*>(inst.dy.view.data);
  const auto& ds = inst.dy.view.strides;  // N, D, H, W, C
  dy[3 * ds[3] + 5] = 0x7F80;             // +inf in the first chunk
  dy[35 * ds[3]] = 0x7FC0;                // NaN, in the second tile
  dy[7 * ds[3] + 512] = 0xFF80;           // -inf, the second chunk's only channel
  const TensorView& w = inst.filter.view;
  static_cast<std::uint16_t*>(w.data)[100 * w.strides[0] + 7 * w.strides[1]] = 0x7F80;
  const Problem p = validate(inst.spec);
  run_pointwise(p, inst, Isa::amx_bf16);
  EXPECT_TRUE(matches_reference(p, inst)) << c.name();
}

// Plan prefers it for channel-last pointwise problems; it declines, saying why, channels so few per group
// that padding them to 32 would multiply the work by more than 16 (depthwise), channel-first tensors, pixels
// not equally spaced, inputs not exact in bf16, a group's packed filter beyond 3/4 of L2, and other kernels.
TEST(CpuPointwiseAmx, TakesChannelLastPointwiseProblemsWithinL2) {
  if (!cpu_supports(Isa::amx_bf16)) GTEST_SKIP() << "CPU lacks amx_bf16";
  std::mt19937_64 rng(157);
  const Case ok = pointwise_case(DType::bf16, Layout::NDHWC, 64, 64, {2, 3, 4});
  {
    Instance inst = instantiate(ok, rng, Fill::random);
    Options o;
    o.isa = Isa::amx_bf16;
    EXPECT_EQ(Plan(validate(inst.spec), o).engine_name(), "pointwise_amx_bf16");
  }
  // A 16 KiB L2: 64 x 64 channels pack to 8 KiB, 64 x 128 to 16 KiB (over 12).
  CpuModel small = host_cpu_model();
  small.l2_bytes = 16 << 10;
  Case wide = ok, first = ok, kernel = ok, fp16 = with_dtype(ok, DType::f16);
  wide.Cout = 128;
  first.data_format = Layout::NCDHW;
  kernel.kernel = {1, 1, 2};
  // (case, dy rows apart, what the refusal says: nothing where it is taken)
  Case depthwise = ok;
  depthwise.groups = 64;
  const std::tuple<Case, bool, std::string> cases[] = {{ok, false, ""},
                                                       {depthwise, false, "more than 16"},
                                                       {wide, false, "3/4 of L2"},
                                                       {first, false, "not contiguous"},
                                                       {ok, true, "equally spaced"},
                                                       {fp16, false, "not exact in bf16"},
                                                       {kernel, false, "not pointwise"}};
  for (const auto& [c, apart, needle] : cases) {
    Instance inst = instantiate(c, rng, Fill::random);
    if (apart) relay_dy_rows_apart(inst);
    const Problem p = validate(inst.spec);
    EngineRequest request = named_request(p, 2, Isa::amx_bf16);
    request.cpu = small;
    std::string why;
    auto engine = cpu::make_pointwise(request, Isa::amx_bf16, why);
    EXPECT_EQ(engine == nullptr, !needle.empty()) << c.name() << ": " << why;
    EXPECT_NE(why.find(needle), std::string::npos) << c.name() << ": " << why;
  }
}

// The filter-streaming engine (small maps, large NCDHW filters), with its filter-size threshold lifted so
// small filters run it: y pixels of all images around its vectors and chunks (AVX-512 16 and 64 pixels, AVX2
// 8 and 32; 1 to 512 pixels), input channels around its tiles (AVX-512 24, 12, 8 or 6 rows; AVX2 14, 6, 4
// or 2), output channels around its dy blocks, strides,
// dilations, asymmetric pads, groups, every dtype, HF32 and fp16 input rounding, every y type, both data
// layouts, NCDHW and NDHWC filters, dy and y with gaps.
class CpuStream : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!cpu_supports(GetParam())) GTEST_SKIP() << "CPU lacks " << to_string(GetParam());
  }
  static std::unique_ptr<EngineImpl> make(const Problem& p, int threads) {
    std::string why;
    auto engine = cpu::make_stream(named_request(p, threads, GetParam()), GetParam(), true, why);
    EXPECT_TRUE(engine) << why;
    return engine;
  }
  // Runs the engine every way a Plan can (pack then execute; execute_with_filter keeping the filter or not,
  // then execute on what was kept) with 1, 2 and 3 threads: all must give the same bits, left in inst.y.
  static void run_every_way(const Problem& p, Instance& inst, const std::string& name) {
    Tensor first;
    for (int threads : {2, 1, 3}) {
      auto engine = make(p, threads);
      if (!engine) return;
      std::vector<unsigned char> workspace(engine->workspace_bytes());
      const auto check = [&](const char* way) {
        if (first.view.data == nullptr) {
          first = inst.y;
          return;
        }
        EXPECT_TRUE(same_bits(first, inst.y)) << name << ", " << threads << " threads, " << way;
      };
      for (bool keep : {false, true}) {
        fill_canary(inst.y);
        engine->execute_with_filter(inst.dy.view.data, inst.filter.view.data, inst.y.view.data,
                                    workspace.data(), keep);
        check(keep ? "streamed and kept" : "streamed");
      }
      fill_canary(inst.y);
      engine->execute(inst.dy.view.data, inst.y.view.data, workspace.data());
      check("the kept copy");
      fill_canary(inst.y);
      engine->pack_filter(inst.filter.view.data);
      engine->execute(inst.dy.view.data, inst.y.view.data, workspace.data());
      check("packed");
    }
    inst.y = first;
  }
  // A dense filter in place of the instance's (strided views pad every tensor; the engine takes only filters
  // whose taps or input channels are contiguous).
  static void dense_filter(const Case& c, Instance& inst, std::mt19937_64& rng, Fill fill_kind) {
    inst.filter = make_tensor(c.dtype, c.filter_format,
                              {c.Cout, c.Cin / c.groups, c.kernel[0], c.kernel[1], c.kernel[2]}, true, false);
    fill(inst.filter, rng, fill_kind);
    inst.spec.filter = inst.filter.view;
  }
};

TEST_P(CpuStream, MatchesReferenceAcrossChunksTilesAndBlocks) {
  std::mt19937_64 rng(151);
  struct Map {
    std::int64_t n;
    std::array<std::int64_t, 3> in;
  };
  // 1, 15, 16, 17, 30, 32, 45, 64, 65, 128, 189 and 512 pixels: one to four vectors, one to eight chunks.
  const Map maps[] = {{1, {1, 1, 1}},  {1, {1, 3, 5}}, {1, {1, 4, 4}}, {1, {1, 1, 17}},
                      {1, {1, 5, 6}},  {2, {1, 4, 4}}, {1, {3, 3, 5}}, {1, {2, 4, 8}},
                      {1, {5, 13, 1}}, {2, {2, 4, 8}}, {1, {3, 7, 9}}, {2, {4, 8, 8}}};
  // 5 x 5 x 3 = 75 taps: one output channel per dy block at 64 pixels.
  const std::array<std::int64_t, 3> kernels[] = {{3, 3, 3}, {1, 1, 1}, {2, 3, 1}, {5, 5, 3}};
  int k = 0;
  for (const Map& m : maps)
    for (std::int64_t extra : {0, 7})
      for (std::int64_t cout : {1, 5, 9}) {
        const std::int64_t pixels = m.n * m.in[0] * m.in[1] * m.in[2];
        const std::int64_t lanes = GetParam() == Isa::avx2 ? 8 : 16;  // the chunk is up to 4 vectors
        const std::int64_t width = lanes * std::min<std::int64_t>(4, (pixels + lanes - 1) / lanes);
        Case c = with_dtype(Case{}, kAllDtypes[k % 5]);
        c.N = m.n;
        c.in = m.in;
        c.groups = k % 4 == 3 ? 2 : 1;
        c.Cin = (width + extra) * c.groups;
        c.Cout = cout * c.groups;
        c.kernel = kernels[k % 4];
        c.stride = k % 5 == 1 ? std::array<std::int64_t, 3>{2, 1, 2} : std::array<std::int64_t, 3>{1, 1, 1};
        c.dilation = k % 7 == 2 ? std::array<std::int64_t, 3>{1, 2, 1} : std::array<std::int64_t, 3>{1, 1, 1};
        for (int a = 0; a < 3; ++a) {  // enough padding for the kernel, front and back differing
          const std::int64_t need =
              std::max<std::int64_t>(0, (c.kernel[a] - 1) * c.dilation[a] + 1 - c.in[a]);
          c.pad_front[a] = need / 2 + (k + a) % 2;
          c.pad_back[a] = need - need / 2 + (c.kernel[a] > 1 ? 1 : 0);
        }
        c.hf32 = c.dtype == DType::f32 && k % 4 == 1;
        c.y_dtype = k % 3 == 1 ? DType::f32 : c.dtype;
        c.data_format = kDataFormats[k % 2];
        c.filter_format = k % 3 == 2 ? Layout::NDHWC : Layout::NCDHW;
        c.strided_views = k % 6 == 5;
        // aclnn's fp16 compute (cubeMathType 2): bf16 or fp32 inputs rounded to fp16 first.
        const bool fp16_rounding = (c.dtype == DType::bf16 && k / 5 % 2 == 1) ||
                                   (c.dtype == DType::f32 && !c.hf32 && k / 5 % 3 == 2);
        ++k;
        for (Fill fill_kind : {Fill::small_integers, Fill::random}) {
          Instance inst = instantiate(c, rng, fill_kind);
          dense_filter(c, inst, rng, fill_kind);
          if (fp16_rounding) inst.spec.input_rounding = InputRounding::fp16;
          const Problem p = validate(inst.spec);
          const std::string name = c.name() + (fp16_rounding ? " fp16-rounding" : "");
          run_every_way(p, inst, name);
          ASSERT_TRUE(matches_reference(p, inst)) << name;
          if (fill_kind == Fill::small_integers && c.y_dtype == DType::f32) {
            ASSERT_TRUE(exactly_reference(p, inst)) << name;
          }
          ASSERT_TRUE(padding_intact(inst.y)) << name;
        }
      }
}

// Threads share dy's gathered rows and write the copy of the filter side by side (streaming stores, fenced
// before they join): 1 to 4 threads, every way of running, both filter orders, two chunks, give the same
// bits. Also run under ThreadSanitizer (CI runs the tests named *Thread*).
TEST_P(CpuStream, SameBitsForEveryThreadCount) {
  std::mt19937_64 rng(167);
  for (Layout fmt : kDataFormats) {
    Case c = with_dtype(Case{}, fmt == Layout::NCDHW ? DType::f32 : DType::bf16);
    c.data_format = fmt;
    c.filter_format = fmt;
    c.N = 2;
    c.Cin = 70;
    c.Cout = 9;
    c.in = {2, 4, 5};  // 80 pixels: a chunk of 64 and one of 16
    c.pad_front = c.pad_back = {1, 1, 1};
    Instance inst = instantiate(c, rng, Fill::random);
    const Problem p = validate(inst.spec);
    run_every_way(p, inst, c.name());  // 1, 2 and 3 threads
    Tensor first = inst.y;
    auto engine = make(p, 4);
    ASSERT_TRUE(engine);
    std::vector<unsigned char> workspace(engine->workspace_bytes());
    fill_canary(inst.y);
    engine->execute_with_filter(inst.dy.view.data, inst.filter.view.data, inst.y.view.data, workspace.data(),
                                true);
    EXPECT_TRUE(same_bits(first, inst.y)) << c.name() << ", 4 threads";
    EXPECT_TRUE(matches_reference(p, inst)) << c.name();
  }
}

// dycol holds zeros where a tap misses dy and the fast kernels multiply them: a filter value that is an
// infinity or a NaN there would make 0 x inf = NaN. Such rows are summed again with the masked kernels, so y
// matches the reference element for element (inf, NaN and finite), in every dtype that has them.
TEST_P(CpuStream, NonFiniteFilterAtBordersMatchesReference) {
  std::mt19937_64 rng(157);
  for (DType dtype : kAllDtypes)
    for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN()})
      for (Layout fmt : kDataFormats) {
        Case c = with_dtype(Case{}, dtype);
        c.data_format = fmt;
        c.filter_format = fmt;  // taps contiguous (NCDHW) or input channels (NDHWC)
        c.y_dtype = DType::f32;
        c.Cin = 40;
        c.Cout = 6;
        c.in = {2, 3, 5};
        c.pad_front = c.pad_back = {1, 1, 1};
        Instance inst = instantiate(c, rng, Fill::small_integers);
        // Tap (kd 0, kh 1, kw 0) of (co 3, ci 5) misses dy for y pixels at d = 0 and w = 0.
        const auto& s = inst.filter.view.strides;
        numeric::store_f32(dtype, inst.filter.view.data, 3 * s[0] + 5 * s[1] + s[3], bad, OverflowMode::ieee);
        const Problem p = validate(inst.spec);
        run_every_way(p, inst, c.name());
        EXPECT_TRUE(matches_reference(p, inst)) << c.name() << ", filter value " << bad;
      }
}

// Plan takes it for a large filter on a small map, and it says why it declines everything else.
TEST_P(CpuStream, TakesSmallMapsWithLargeFiltersOnly) {
  std::mt19937_64 rng(163);
  Case big = Case{};
  big.data_format = Layout::NCDHW;
  big.Cin = 256;
  big.Cout = 160;
  big.in = {2, 4, 4};
  big.pad_front = big.pad_back = {1, 1, 1};  // 256 x 160 x 27 = 1105920 filter elements
  {
    Instance inst = instantiate(big, rng, Fill::random);
    Options o;
    o.isa = GetParam();
    const Problem p = validate(inst.spec);
    Plan plan(p, o);
    EXPECT_EQ(plan.engine_name(), std::string("stream_") + to_string(GetParam()));
    plan.execute(inst.dy.view.data, inst.filter.view.data, inst.y.view.data);
    EXPECT_TRUE(matches_reference(p, inst));
  }
  // The rules below are the same code on both ISAs; their figures (chunks of 64 pixels) are AVX-512's.
  if (GetParam() != Isa::avx512) return;
  {  // 48 pixels and 40 input channels: fewer than AVX-512's 48-pixel chunk, not than AVX2's 32. On a CPU
     // with AVX-512 the AVX-512 GEMM, tried before any AVX2 engine, takes it.
    Case c = big;
    c.in = {3, 4, 4};
    c.N = 1;
    c.Cin = 40;
    c.Cout = 1024;
    const Problem p = validate(instantiate(c, rng, Fill::random).spec);
    std::string why;
    EXPECT_FALSE(cpu::make_stream(named_request(p, 2, Isa::avx512), Isa::avx512, why));
    EXPECT_NE(why.find("40, fewer than the 48 pixels"), std::string::npos) << why;
    EXPECT_TRUE(cpu::make_stream(EngineRequest{p, 2, Isa::avx2}, Isa::avx2, why)) << why;
    const std::string chosen = Plan(p, Options{}).engine_name();
    EXPECT_EQ(chosen.rfind("gemm_avx512", 0), 0u) << chosen;
  }
  {  // 129 pixels (1 x 3 x 43), 1 x 1 x 1: 132K filter elements per pixel, 1.49x the multiplies (three
     // chunks of 64 lanes): taken. 8-bit, to keep the 17M-element filter small.
    Case larger = with_dtype(big, DType::hif8);
    larger.in = {1, 3, 43};
    larger.kernel = {1, 1, 1};
    larger.pad_front = larger.pad_back = {0, 0, 0};
    larger.Cin = 4160;
    larger.Cout = 4096;
    const Problem p = validate(instantiate(larger, rng, Fill::small_integers).spec);
    std::string why;
    EXPECT_TRUE(cpu::make_stream(named_request(p, 2, Isa::avx512), Isa::avx512, why)) << why;
  }
  {  // N = 0: planned, packed and run as an empty success
    Case empty = big;
    empty.N = 0;
    Instance inst = instantiate(empty, rng, Fill::random);
    const Problem p = validate(inst.spec);
    auto engine = make(p, 2);
    ASSERT_TRUE(engine);
    std::vector<unsigned char> workspace(engine->workspace_bytes());
    engine->pack_filter(inst.filter.view.data);
    engine->execute(inst.dy.view.data, inst.y.view.data, workspace.data());
    engine->execute_with_filter(inst.dy.view.data, inst.filter.view.data, inst.y.view.data, workspace.data(),
                                false);
  }
  Case dhwcn = big, wide = big, small = big, narrow = big;
  dhwcn.filter_format = Layout::DHWCN;
  wide.in = {2, 8, 9};  // 144 pixels: 7680 filter elements per pixel
  small.Cout = 150;     // 1036800 elements
  Case huge_map = wide;
  huge_map.in = {2, 16, 17};  // 544 pixels
  // 192 pixels of 4 x 4 x 4 maps, 131K filter elements per pixel (8-bit, to keep it small), but a 3 x 3 x 3
  // tap misses dy from 42 % of the (pixel, tap) pairs: 1.72x the multiplies.
  Case bordered = with_dtype(big, DType::hif8);
  bordered.N = 3;
  bordered.in = {4, 4, 4};
  bordered.Cin = 1024;
  bordered.Cout = 912;
  narrow.Cin = 48;  // a 2 x 32-pixel image is one chunk of 64 pixels
  narrow.N = 2;
  narrow.Cout = 1000;
  const std::pair<Case, std::string> refused[] = {{dhwcn, "nor its input channels are contiguous"},
                                                  {wide, "fewer than 131072 per pixel beyond 128"},
                                                  {huge_map, "544 pixels (N x D x H x W), more than 512"},
                                                  {bordered, "1.72x the multiplies inside dy, more than 1.5"},
                                                  {small, "fewer than 2^20"},
                                                  {narrow, "48, fewer"}};
  for (const auto& [c, needle] : refused) {
    Instance inst = instantiate(c, rng, Fill::random);
    const Problem p = validate(inst.spec);
    std::string why;
    EXPECT_FALSE(cpu::make_stream(named_request(p, 2, Isa::avx512), Isa::avx512, why)) << c.name();
    EXPECT_NE(why.find(needle), std::string::npos) << c.name() << ": " << why;
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, CpuStream, ::testing::Values(Isa::avx512, Isa::avx2),
                         [](const auto& param_info) { return std::string(to_string(param_info.param)); });

// Multiplies every element of a bf16 tensor view by 2^e (exact for the small integers scaled here).
void scale_bf16(Tensor& t, int e) {
  const TensorView& v = t.view;
  ASSERT_EQ(v.dtype, DType::bf16);
  auto* base = static_cast<std::uint16_t*>(v.data);
  for (std::int64_t a = 0; a < v.shape[0]; ++a)
    for (std::int64_t b = 0; b < v.shape[1]; ++b)
      for (std::int64_t c = 0; c < v.shape[2]; ++c)
        for (std::int64_t d = 0; d < v.shape[3]; ++d)
          for (std::int64_t f = 0; f < v.shape[4]; ++f) {
            std::uint16_t& cell = base[a * v.strides[0] + b * v.strides[1] + c * v.strides[2] +
                                       d * v.strides[3] + f * v.strides[4]];
            const float x = std::ldexp(std::bit_cast<float>(static_cast<std::uint32_t>(cell) << 16), e);
            const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
            ASSERT_EQ(bits & 0xFFFFu, 0u) << "not exact in bf16 after scaling by 2^" << e;
            cell = static_cast<std::uint16_t>(bits >> 16);
          }
}

// vdpbf16ps treats denormal inputs as zero and flushes denormal products and partial sums. On small
// integers scaled to tiny magnitudes (bf16 subnormal inputs; products down to 2^-149; sums whose partial
// values pass through the denormal range) every fp32 sum is still exact, so y must equal the exact sums:
// the bf16 engines (GEMM with NCDHW and DHWCN filters, pixel and pointwise (channel-last on AMX), both
// layouts, even and odd Cout for in-place and converted dy) switch to exact kernels; and 1 and 2 threads give
// the same bits.
TEST(CpuBf16, TinyInputsAreExact) {
  if (!cpu_supports(Isa::avx512_bf16)) GTEST_SKIP() << "CPU lacks avx512_bf16";
  std::mt19937_64 rng(113);
  const bool amx = cpu_supports(Isa::amx_bf16);
  // (dy exponent, filter exponent): both tiny; dy subnormal only; filter subnormal only; products 2^-149.
  const std::pair<int, int> scales[] = {{-64, -64}, {-130, 0}, {0, -130}, {-70, -79}};
  // GEMM, pixel, pointwise, GEMM on AMX tiles over flat planes and along rows, dy converted into windows
  // per thread (kind 4) or beforehand (kind 7), pointwise on AMX (kind 8) (where the CPU has AMX)
  for (int kind : {0, 1, 2, 3, 4, 5, 6, 7, 8})
    for (Layout fmt : kDataFormats)
      for (std::int64_t cout : {4, 5})
        for (auto [dy_e, w_e] : scales) {
          // kinds 5 and 6: GEMM with a DHWCN filter (packed by a transpose of channel pairs), 6 on AMX
          const bool pixel = kind == 1, pointwise = kind == 2 || kind == 8,
                     on_amx = kind == 3 || kind == 4 || kind == 6 || kind == 7 || kind == 8;
          if ((pointwise && fmt != (kind == 8 ? Layout::NDHWC : Layout::NCDHW)) || (on_amx && !amx)) continue;
          Case c = with_dtype(Case{}, DType::bf16);
          c.y_dtype = DType::f32;
          c.data_format = fmt;
          if (kind >= 5) c.filter_format = Layout::DHWCN;
          c.Cin = pixel ? 3 : 19;
          c.Cout = cout;
          c.strided_views = dy_e == -130 && !pointwise;  // dy scanned in place with gaps between pixels
          c.in = {3, 6, 18};
          c.stride = {1, 2, 1};
          c.pad_front = {1, 1, 1};
          c.pad_back = {1, 0, 1};
          if (pointwise) {
            c.kernel = {1, 1, 1};
            c.stride = {1, 1, 1};
            c.pad_front = c.pad_back = {0, 0, 0};
          }
          Instance inst = instantiate(c, rng, Fill::small_integers);
          scale_bf16(inst.dy, dy_e);
          scale_bf16(inst.filter, w_e);
          const Problem p = validate(inst.spec);
          const std::string what = c.name() + ", dy 2^" + std::to_string(dy_e) + ", filter 2^" +
                                   std::to_string(w_e) +
                                   (pixel       ? ", pixel"
                                    : pointwise ? (kind == 8 ? ", pointwise on AMX" : ", pointwise")
                                    : on_amx ? ", gemm on AMX" + std::string(kind == 4 ? ", dy windows" : "")
                                             : ", gemm");
          const auto run = [&](const Problem& q, Instance& i, int threads) {
            if (pixel)
              run_pixel(q, i, Isa::avx512_bf16, threads);
            else if (pointwise)
              run_pointwise(q, i, kind == 8 ? Isa::amx_bf16 : Isa::avx512_bf16, threads);
            else {
              cpu::GemmTuning tuning{0, 0, kind == 3 ? 2 : kind == 4 || kind == 7 ? 0 : -1};
              tuning.dy_window = kind == 4 ? 1 : kind == 7 ? 0 : -1;
              run_gemm(q, i, on_amx ? Isa::amx_bf16 : Isa::avx512_bf16, tuning, threads);
            }
          };
          Tensor first = inst.y;
          for (int threads : {1, 2}) {
            fill_canary(inst.y);
            run(p, inst, threads);
            ASSERT_TRUE(exactly_reference(p, inst)) << what << ", " << threads << " threads";
            ASSERT_TRUE(padding_intact(inst.y)) << what;
            if (threads == 1)
              first = inst.y;
            else
              EXPECT_TRUE(same_bits(first, inst.y)) << what;
          }
          // bf16 y: the exact sums are representable, so within one rounding means equal.
          c.y_dtype = DType::bf16;
          Instance low = instantiate(c, rng, Fill::small_integers);
          scale_bf16(low.dy, dy_e);
          scale_bf16(low.filter, w_e);
          const Problem pl = validate(low.spec);
          run(pl, low, 2);
          EXPECT_TRUE(matches_reference(pl, low)) << what << ", bf16 y";
        }
}

// From a chunk of the reduction that holds a tiny value on, a tile's chunks run the exact kernels, so the
// denormal partial sum that chunk may leave is not flushed by AMX or vdpbf16ps in the next. dy holds 2^-100
// in output channel 0 only (the first chunk) and the filter 2^-40 times small integers, so y holds exact
// multiples of 2^-140 (fp32 denormals): the AMX pointwise engine (channel-last, 513 output channels: two
// chunks) and the vdpbf16ps one (channel-first, a 16 KiB L2: chunks of about 16 pairs), 1 and 2 threads.
TEST(CpuBf16, TinyValuesCarryAcrossReductionChunks) {
  if (!cpu_supports(Isa::avx512_bf16)) GTEST_SKIP() << "CPU lacks avx512_bf16";
  std::mt19937_64 rng(167);
  int ran = 0;
  for (const Isa isa : {Isa::amx_bf16, Isa::avx512_bf16}) {
    if (!cpu_supports(isa)) continue;  // (AMX: the vdpbf16ps case still runs)
    const bool amx = isa == Isa::amx_bf16;
    Case c = pointwise_case(DType::bf16, amx ? Layout::NDHWC : Layout::NCDHW, 40, amx ? 513 : 70, {1, 2, 20});
    c.y_dtype = DType::f32;
    Instance inst = instantiate(c, rng, Fill::small_integers);
    scale_bf16(inst.filter, -40);
    const TensorView& v = inst.dy.view;
    const int channel_dim = amx ? 4 : 1;
    std::array<std::int64_t, 5> i{};
    for (i[0] = 0; i[0] < v.shape[0]; ++i[0])
      for (i[1] = 0; i[1] < v.shape[1]; ++i[1])
        for (i[2] = 0; i[2] < v.shape[2]; ++i[2])
          for (i[3] = 0; i[3] < v.shape[3]; ++i[3])
            for (i[4] = 0; i[4] < v.shape[4]; ++i[4]) {
              std::int64_t at = 0;
              for (int d = 0; d < 5; ++d)
                at += i[static_cast<std::size_t>(d)] * v.strides[static_cast<std::size_t>(d)];
              static_cast<std::uint16_t*>(v.data)[at] =
                  i[static_cast<std::size_t>(channel_dim)] == 0 ? 0x0D80 : 0;
            }
    const Problem p = validate(inst.spec);
    const CpuModel cpu = amx ? host_cpu_model() : [] {
      CpuModel small = host_cpu_model();
      small.l2_bytes = 16 << 10;
      return small;
    }();
    ASSERT_LT(cpu::pointwise_blocking(p, cpu, 2, isa).chunk,
              amx ? (p.Cout_g + 31) / 32 * 16 : (p.Cout_g + 1) / 2);
    for (int threads : {1, 2}) {
      fill_canary(inst.y);
      run_pointwise(p, inst, isa, threads, cpu);
      EXPECT_TRUE(exactly_reference(p, inst)) << c.name() << ", " << threads << " threads";
    }
    ++ran;
  }
  EXPECT_GE(ran, 1);
}

// The exact bf16 kernels add a pair's products as two fp32 FMAs, odd channel then even: vdpbf16ps's order
// (Intel's definition), so where nothing is flushed both give the same bits and a tile's choice between them
// (by whether its data holds a tiny value) changes no result. Every tile and block width, random normal
// values: the exact kernels against that order computed one value at a time, and the vdpbf16ps kernels too
// where the CPU's vdpbf16ps rounds that way (reported as skipped where it does not).
TEST(CpuBf16, ExactKernelsGiveVdpbf16psBitsWhereNothingIsFlushed) {
  if (!cpu_supports(Isa::avx512_bf16)) GTEST_SKIP() << "CPU lacks avx512_bf16";
  const cpu::KernelSet& ks = cpu::avx512_kernels();
  std::mt19937_64 rng(173);
  std::uniform_int_distribution<int> mantissa(0, 127), exponent(120, 134), sign(0, 1);
  const auto normal = [&] {
    return static_cast<std::uint16_t>(sign(rng) << 15 | exponent(rng) << 7 | mantissa(rng));
  };
  const auto value = [](std::uint16_t bits) {
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
  };
  constexpr std::int64_t kSteps = 37;  // channel pairs
  // 64-byte aligned, as the engines' packed filters and tiles are.
  alignas(64) std::uint16_t dy[cpu::kMaxM * kSteps * 2];
  alignas(64) std::uint16_t w[kSteps * cpu::kMaxNv * 16 * 2];
  alignas(64) float a[cpu::kMaxM * cpu::kMaxNv * 16], b[cpu::kMaxM * cpu::kMaxNv * 16];
  int compared = 0;
  std::int64_t sums = 0, vdp_differs = 0;
  for (int nv = 1; nv <= cpu::kMaxNv; ++nv)
    for (int m = 1; m <= cpu::kMaxM; ++m) {
      if (ks.bf16[nv][m] == nullptr || ks.bf16_exact[nv][m] == nullptr) continue;
      for (auto& x : dy) x = normal();
      for (auto& x : w) x = normal();
      const cpu::TapRef tap{0, w, kSteps, 0, m};
      ks.bf16[nv][m](cpu::TileArgs{dy, kSteps * 2, 2, &tap, 1, a, nv * 16, false});
      ks.bf16_exact[nv][m](cpu::TileArgs{dy, kSteps * 2, 2, &tap, 1, b, nv * 16, false});
      for (std::int64_t p = 0; p < m; ++p)
        for (std::int64_t c = 0; c < nv * 16; ++c) {
          float want = 0;
          for (std::int64_t s = 0; s < kSteps; ++s) {
            const std::uint16_t* x = dy + p * kSteps * 2 + s * 2;
            const std::uint16_t* f = w + (s * nv * 16 + c) * 2;
            want = std::fma(value(x[1]), value(f[1]), want);
            want = std::fma(value(x[0]), value(f[0]), want);
          }
          const std::int64_t i = p * nv * 16 + c;
          ASSERT_EQ(std::bit_cast<std::uint32_t>(b[i]), std::bit_cast<std::uint32_t>(want))
              << nv << " vectors, " << m << " pixels, pixel " << p << " channel " << c;
          vdp_differs += std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(want);
          ++sums;
        }
      ++compared;
    }
  EXPECT_GE(compared, 20);
  if (vdp_differs > 0)
    GTEST_SKIP() << "this CPU's vdpbf16ps does not round as two fp32 FMAs, odd channel then even ("
                 << vdp_differs << " of " << sums
                 << " sums differ): the exact kernels were checked against that order only";
}

// The AMX engine on one thread against the reference (exactly, for small integers into fp32), then tiles
// along rows (dy converted beforehand, and into windows per thread where the problem allows them) and over
// flat planes on 1, 2 and 3 threads: the same bits, y's padding untouched.
void check_amx_rows_and_planes(const Case& c, const Problem& p, Instance& inst, Fill fill) {
  run_gemm(p, inst, Isa::amx_bf16, {}, 1);
  ASSERT_TRUE(matches_reference(p, inst)) << c.name();
  if (fill == Fill::small_integers && c.y_dtype == DType::f32) {
    ASSERT_TRUE(exactly_reference(p, inst)) << c.name();
  }
  const Tensor first = inst.y;
  for (int plane : {0, 2})  // rows, flat planes
    for (int window : {0, 1}) {
      if (plane == 2 && window == 1) continue;  // flat planes convert dy beforehand
      for (int threads : {1, 2, 3}) {
        fill_canary(inst.y);
        cpu::GemmTuning tuning{0, 0, plane};
        tuning.dy_window = window;
        run_gemm(p, inst, Isa::amx_bf16, tuning, threads);
        EXPECT_TRUE(same_bits(first, inst.y))
            << c.name() << ", plane " << plane << ", dy window " << window << ", " << threads << " threads";
        EXPECT_TRUE(padding_intact(inst.y)) << c.name();
      }
    }
}

// AMX tiles (kernels_amx.cpp: up to 32 pixels as two row tiles of 16, two vectors of 16 input channels, the
// reduction in chunks of 32 channels) at their edges: Cin, Cout and W phase lengths of 15, 16, 17, 31, 32,
// 33 and 47 to 49 (three tiles); here bf16, HiFloat8 and FP8 E4M3FN inputs widened to bf16; both data
// formats; strides 1 and 2; tiles along rows and over flat planes (rows padded to the dy row width), which
// sum in the same order: the same bits for both and for 1 and 2 threads. The dtypes take turns case by case.
void check_amx_tile_edges(std::initializer_list<DType> dtypes, bool hf32, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::int64_t edges[] = {15, 16, 17, 31, 32, 33};
  const std::size_t ntypes = dtypes.size();
  int k = 0;
  for (std::int64_t cin : edges)
    for (std::int64_t cout : edges)
      for (std::int64_t s : {1, 2}) {
        Case c = with_dtype(Case{}, dtypes.begin()[static_cast<std::size_t>(k) % ntypes]);
        c.hf32 = hf32;
        c.data_format = kDataFormats[k % 2];
        c.filter_format = kFilterFormats[k % 3];
        c.Cin = cin;
        c.Cout = cout;
        const std::int64_t w = k % 4 == 3 ? 47 + k % 3 : edges[k / 2 % 6];  // pixels per W phase
        c.in = {2, 3, s * w};
        c.stride = {1, s, s};
        c.pad_front = {1, 1, 1};
        c.pad_back = {0, 1, 2};
        const Fill fill = k % 5 == 0 ? Fill::small_integers : Fill::random;
        ++k;
        Instance inst = instantiate(c, rng, fill);
        check_amx_rows_and_planes(c, validate(inst.spec), inst, fill);
        if (::testing::Test::HasFatalFailure()) return;
      }
}

// dy converted into a window per thread (GemmConfig::dy_window) against dy converted beforehand: two images
// (the windows start over), strides 1 and 2, dilation 2 (wider windows), D kernels of 1 to 5, bf16, HiFloat8,
// FP8, and split fp16 and HF32 inputs (one HF32 dy value with a tiny part, which sends the call to the
// fallback once found), both data formats; 1 to 4 threads, whose shares of the tasks and whose taking from
// each other's ends change the windows' order and reach: the same bits, and the reference's values.
TEST(CpuAmx, DyWindowsMatchConvertingBeforehand) {
  if (!cpu_supports(Isa::amx_bf16)) GTEST_SKIP() << "no AMX: " << amx_unavailable();
  std::mt19937_64 rng(167);
  const DType dtypes[] = {DType::bf16, DType::hif8, DType::fp8_e4m3fn, DType::f16, DType::f32};
  int k = 0;
  for (std::int64_t kd : {1, 2, 3, 5})
    for (std::int64_t s : {1, 2})
      for (std::int64_t d : {1, 2}) {
        Case c = with_dtype(Case{}, dtypes[k % 5]);
        c.hf32 = c.dtype == DType::f32;
        c.data_format = kDataFormats[k % 2];
        c.N = 2;
        c.Cin = 17 + 8 * (k % 3);
        c.Cout = 33 + 15 * (k % 2);
        c.kernel = {kd, 3, 2};
        c.stride = {s, s, 1};
        c.dilation = {d, 1, 1};
        c.in = {9, 5, 20};
        c.pad_front = {kd / 2 * d, 1, 0};
        c.pad_back = {0, 1, 1};
        const bool special = c.hf32 && s == 2;  // random values: AMX would sum them in another order
        const Fill fill = k % 2 == 0 && !special ? Fill::small_integers : Fill::random;
        ++k;
        Instance inst = instantiate(c, rng, fill);
        if (special) static_cast<float*>(inst.dy.view.data)[29] = 0x1p-50f + 0x1p-60f;
        const Problem p = validate(inst.spec);
        cpu::GemmTuning before{0, 0, 0}, windows{0, 0, 0};
        before.dy_window = 0;
        windows.dy_window = 1;
        ASSERT_TRUE(cpu::gemm_config(p, host_cpu_model(), Isa::amx_bf16, 2, windows).dy_window) << c.name();
        run_gemm(p, inst, Isa::amx_bf16, before, 2);
        ASSERT_TRUE(matches_reference(p, inst)) << c.name();
        const Tensor first = inst.y;
        for (int threads : {1, 2, 3, 4}) {
          fill_canary(inst.y);
          run_gemm(p, inst, Isa::amx_bf16, windows, threads);
          EXPECT_TRUE(same_bits(first, inst.y)) << c.name() << ", " << threads << " threads";
          EXPECT_TRUE(padding_intact(inst.y)) << c.name();
        }
      }
}

TEST(CpuAmx, TileEdges) {
  if (!cpu_supports(Isa::amx_bf16)) GTEST_SKIP() << "no AMX: " << amx_unavailable();
  check_amx_tile_edges({DType::bf16, DType::hif8, DType::fp8_e4m3fn}, false, 131);
}

// The split tiles (32 pixels x 16 channels, chunks of 32 output channels as his then los) at the same
// edges: fp16 and HF32 inputs.
TEST(CpuAmx, SplitTileEdges) {
  if (!cpu_supports(Isa::amx_bf16)) GTEST_SKIP() << "no AMX: " << amx_unavailable();
  check_amx_tile_edges({DType::f16}, false, 157);
  check_amx_tile_edges({DType::f32}, true, 163);
}

// Few output channels on AMX: each phase's fused W taps side by side in one reduction, tap by tap padded to
// even only, in products over fewer than 16 pairs (GemmConfig::amx_pairs): 1 to 12 output channels, W
// kernels of 2 to 5 taps at strides 1 and 2 (phases of unequal tap counts), groups, dilation 2, 1 to 40
// input channels; bf16, HiFloat8 and FP8 inputs; both data formats; rows and flat planes on 1 and 2
// threads, the same bits, against the reference (exactly for small integers into fp32 y).
TEST(CpuAmx, FewOutputChannelsSideBySide) {
  if (!cpu_supports(Isa::amx_bf16)) GTEST_SKIP() << "no AMX: " << amx_unavailable();
  std::mt19937_64 rng(151);
  const DType dtypes[] = {DType::bf16, DType::hif8, DType::fp8_e4m3fn};
  int k = 0, side_by_side = 0;
  for (std::int64_t cout : {1, 2, 3, 4, 5, 6, 8, 12})
    for (std::int64_t kw : {2, 3, 5})
      for (std::int64_t s : {1, 2}) {
        Case c = with_dtype(Case{}, dtypes[k % 3]);
        c.data_format = kDataFormats[k % 2];
        c.filter_format = kFilterFormats[k % 3];
        c.y_dtype = k % 4 == 0 ? DType::f32 : c.dtype;
        c.groups = k % 5 == 4 ? 2 : 1;
        c.Cin = c.groups * (k % 3 == 0 ? 1 + k % 40 : 16 * (1 + k % 3) + k % 7);
        c.Cout = c.groups * cout;
        c.kernel = {2, 3, kw};
        c.stride = {1, s, s};
        c.dilation = {1, 1, k % 7 == 6 ? 2 : 1};
        c.in = {3, 4, s * (17 + k % 19)};
        c.pad_front = {1, 1, 1};
        c.pad_back = {0, 1, kw - 1};
        const Fill fill = k % 2 == 0 ? Fill::small_integers : Fill::random;
        ++k;
        Instance inst = instantiate(c, rng, fill);
        const Problem p = validate(inst.spec);
        side_by_side += cpu::gemm_config(p, host_cpu_model(), Isa::amx_bf16, 2).amx_pairs < 16;
        check_amx_rows_and_planes(c, p, inst, fill);
        if (::testing::Test::HasFatalFailure()) return;
      }
  EXPECT_GE(side_by_side, 20) << "of " << k << " cases";
}

// Two AMX channel blocks (40 input channels) over 20 output channels, padded by one on every side: the
// case the non-finite tests plant values in.
Case border_case(DType dtype, Layout fmt) {
  Case c = with_dtype(Case{}, dtype);
  c.data_format = fmt;
  c.y_dtype = DType::f32;
  c.Cin = 40;
  c.Cout = 20;
  c.in = {2, 4, 20};
  c.pad_front = c.pad_back = {1, 1, 1};
  return c;
}

// AMX tiles multiply the zero pixels beside each dy row too. A filter holding an infinity or a NaN must not
// turn those into 0 x inf = NaN where the tap lies outside dy (the W borders): its channel blocks run the
// exact kernels, and y matches the reference element for element (inf, NaN and finite alike).
TEST(CpuAmx, NonFiniteFilterAtBordersMatchesReference) {
  if (!cpu_supports(Isa::amx_bf16)) GTEST_SKIP() << "no AMX: " << amx_unavailable();
  std::mt19937_64 rng(137);
  for (Layout fmt : kDataFormats)
    for (std::uint16_t bad : {std::uint16_t{0x7F80}, std::uint16_t{0xFF80}, std::uint16_t{0x7FC0}}) {
      const Case c = border_case(DType::bf16, fmt);
      Instance inst = instantiate(c, rng, Fill::small_integers);
      // Tap kw = 0 of (co 3, ci 5, kd 1, kh 1) reads dy one pixel right of y's: outside dy at the right
      // border.
      const TensorView& w = inst.filter.view;
      static_cast<std::uint16_t*>(w.data)[3 * w.strides[0] + 5 * w.strides[1] + w.strides[2] + w.strides[3]] =
          bad;
      const Problem p = validate(inst.spec);
      for (int plane : {0, 2}) {  // rows, flat planes
        fill_canary(inst.y);
        run_gemm(p, inst, Isa::amx_bf16, {0, 0, plane});
        EXPECT_TRUE(matches_reference(p, inst)) << c.name() << ", filter element 0x" << std::hex << bad;
      }
    }
}

// Flat planes leave the regions no tap reaches uncomputed and write their y pixels as zeros, one channel
// block per row zeroing every channel of the group: strides above the kernel (whole W phases, H phases and
// D planes unreached), several and narrower blocks, groups, both data formats, fp32 and bf16 y (canary-filled
// first, so a pixel left unwritten shows), 1 and 2 threads, against the reference and bitwise equal to tiles
// along rows.
TEST(CpuAmx, UnreachedFlatRegionsAreZero) {
  if (!cpu_supports(Isa::amx_bf16)) GTEST_SKIP() << "no AMX: " << amx_unavailable();
  std::mt19937_64 rng(149);
  int k = 0;
  for (Layout fmt : kDataFormats)
    for (std::int64_t groups : {1, 2})
      for (DType y_dtype : {DType::f32, DType::bf16}) {
        Case c = with_dtype(Case{}, DType::bf16);
        c.data_format = fmt;
        c.y_dtype = y_dtype;
        c.groups = groups;
        c.Cin = groups * (k % 2 == 0 ? 70 : 32);
        c.Cout = groups * 20;
        c.kernel = {1, k % 2 == 0 ? 2 : 1, 1};
        c.stride = {2, 3, 2};
        c.in = {5, 7, 2 * 17 + 1};
        ++k;
        Instance inst = instantiate(c, rng, Fill::small_integers);
        const Problem p = validate(inst.spec);
        fill_canary(inst.y);
        run_gemm(p, inst, Isa::amx_bf16, {0, 0, 0}, 2);
        ASSERT_TRUE(matches_reference(p, inst)) << c.name();
        const Tensor rows = inst.y;
        for (int threads : {1, 2}) {
          fill_canary(inst.y);
          run_gemm(p, inst, Isa::amx_bf16, {0, 0, 2}, threads);
          EXPECT_TRUE(same_bits(rows, inst.y)) << c.name() << ", " << threads << " threads";
          EXPECT_TRUE(padding_intact(inst.y)) << c.name();
        }
      }
}

// fp16 and HF32 inputs on AMX tiles, each value split into bf16 hi + lo (four exact products per
// multiply-add): fp16 inputs, fp32 and bf16 inputs rounded to fp16 and fp32 inputs rounded to HF32 (values
// the rounding changes planted); both data formats and every filter format; strides 1 and 2; one 32-channel
// chunk part-filled or two; tiles along rows and over flat planes, 1 and 2 threads, the same bits; then an
// infinity or a NaN in dy or in the filter beside the W borders (where AMX tiles multiply zero halo pixels),
// element for element against the reference.
TEST(CpuAmx, SplitMatchesReference) {
  if (!cpu_supports(Isa::amx_bf16)) GTEST_SKIP() << "no AMX: " << amx_unavailable();
  std::mt19937_64 rng(139);
  int k = 0;
  const std::pair<DType, InputRounding> inputs[] = {{DType::f16, InputRounding::none},
                                                    {DType::f32, InputRounding::fp16},
                                                    {DType::bf16, InputRounding::fp16},
                                                    {DType::f32, InputRounding::hf32}};
  for (Layout fmt : kDataFormats)
    for (const auto& [dtype, rounding] : inputs)
      for (std::int64_t s : {1, 2}) {
        Case c = with_dtype(Case{}, dtype);
        c.hf32 = rounding == InputRounding::hf32;
        c.data_format = fmt;
        c.filter_format = kFilterFormats[k % 3];
        c.y_dtype = k % 2 == 0 || c.hf32 ? DType::f32 : dtype;
        c.Cin = k % 3 == 0 ? 17 : 40;
        c.Cout = k % 2 == 0 ? 7 : 40;
        c.in = {2, 4, s * 19};
        c.stride = {1, s, s};
        c.pad_front = {1, 1, 1};
        c.pad_back = {0, 1, 2};
        ++k;
        for (Fill fill : {Fill::small_integers, Fill::random}) {
          Instance inst = instantiate(c, rng, fill);
          if (rounding == InputRounding::fp16) inst.spec.input_rounding = InputRounding::fp16;
          if (rounding != InputRounding::none && fill == Fill::random) {
            if (dtype == DType::bf16)
              static_cast<std::uint16_t*>(inst.dy.view.data)[0] = 0x3581;  // rounds to 2^-20 in fp16
            else if (c.hf32)
              static_cast<float*>(inst.dy.view.data)[0] = 1.0f + 0x1p-11f;  // rounds up in HF32
            else
              static_cast<float*>(inst.dy.view.data)[0] = 1.0f + 0x1p-12f;  // rounds to 1 in fp16
          }
          check_amx_rows_and_planes(c, validate(inst.spec), inst, fill);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
  // Non-finite values: fp16 +inf, -inf and NaN.
  for (Layout fmt : kDataFormats)
    for (bool in_dy : {false, true})
      for (std::uint16_t bad : {std::uint16_t{0x7C00}, std::uint16_t{0xFC00}, std::uint16_t{0x7E01}}) {
        const Case c = border_case(DType::f16, fmt);
        Instance inst = instantiate(c, rng, Fill::small_integers);
        auto* w = static_cast<std::uint16_t*>(inst.filter.view.data);
        auto* d = static_cast<std::uint16_t*>(inst.dy.view.data);
        const auto& ws = inst.filter.view.strides;
        const auto& ds = inst.dy.view.strides;
        if (in_dy) {  // dy's last pixel of a row (co 3, od 1, oh 2): the W taps beside it reach the halo
          // The view's shape and strides follow its layout: [N, D, H, W, C] for NDHWC.
          const bool cl = fmt == Layout::NDHWC;
          d[3 * ds[cl ? 4 : 1] + ds[cl ? 1 : 2] + 2 * ds[cl ? 2 : 3] + 19 * ds[cl ? 3 : 4]] = bad;
        } else {
          // tap kw = 0 of (co 3, ci 5, kd 1, kh 1), outside dy at the right border (NCDHW filter)
          w[3 * ws[0] + 5 * ws[1] + ws[2] + ws[3]] = bad;
        }
        // A zero filter value where dy is infinite: its product is NaN, not inf x lo = 0.
        w[3 * ws[0] + 6 * ws[1] + ws[2] + ws[3] + ws[4]] = 0;
        const Problem p = validate(inst.spec);
        for (int plane : {0, 2}) {
          fill_canary(inst.y);
          run_gemm(p, inst, Isa::amx_bf16, {0, 0, plane});
          EXPECT_TRUE(matches_reference(p, inst))
              << c.name() << (in_dy ? ", dy" : ", filter") << " element 0x" << std::hex << bad;
        }
      }
}

// Where split fp16 and HF32 run on AMX unless amx_bf16 is named: 16 input channels per group or more, output
// channels filling at least two thirds of their 32-channel chunks (24 of 32, not 16 or 3), a filter at most
// 16x dy's values and more than a pointwise kernel (1x1x1 at stride 2 does run).
TEST(CpuAmx, SplitRunsWhereItPays) {
  if (!cpu_supports(Isa::amx_bf16)) GTEST_SKIP() << "no AMX: " << amx_unavailable();
  const auto runs = [](Case c, bool hf32) {
    c = with_dtype(c, hf32 ? DType::f32 : DType::f16);
    c.hf32 = hf32;
    std::mt19937_64 rng(1);
    const Problem p = validate(instantiate(c, rng, Fill::small_integers).spec);
    std::string why;
    const bool made = cpu::make_gemm(EngineRequest{p, 2, Isa::amx_bf16}, Isa::amx_bf16, {}, why) != nullptr;
    const bool named = cpu::make_gemm(named_request(p, 2, Isa::amx_bf16), Isa::amx_bf16, {}, why) != nullptr;
    EXPECT_TRUE(named) << c.name() << ": " << why;
    return made;
  };
  Case c;
  c.Cin = c.Cout = 32;
  c.in = {4, 8, 8};
  c.pad_front = c.pad_back = {1, 1, 1};
  for (bool hf32 : {false, true}) {
    EXPECT_TRUE(runs(c, hf32)) << hf32;  // a filter 3.4x dy
    Case narrow = c;
    narrow.Cin = 8;
    EXPECT_FALSE(runs(narrow, hf32)) << hf32;
    for (const auto& [cout, pays] : {std::pair{24, true}, {16, false}, {3, false}}) {
      Case k = c;
      k.Cout = cout;
      EXPECT_EQ(runs(k, hf32), pays) << cout << " output channels, " << hf32;
    }
    Case big_filter = c;
    big_filter.Cin = big_filter.Cout = 64;
    big_filter.in = {2, 3, 3};  // a filter 96x dy
    EXPECT_FALSE(runs(big_filter, hf32)) << hf32;
    Case pointwise = c;
    pointwise.kernel = {1, 1, 1};
    pointwise.pad_front = pointwise.pad_back = {0, 0, 0};
    EXPECT_FALSE(runs(pointwise, hf32)) << hf32;
    pointwise.stride = {2, 2, 2};
    EXPECT_TRUE(runs(pointwise, hf32)) << hf32;
  }
}

// HF32 values AMX cannot take as bf16 parts — one with a tiny part (2^-50 + 2^-60, 2^-60, 2^-130 and 2^-136,
// the last below bf16's smallest denormal) in dy or in the filter, or an infinity or a NaN in the filter —
// send the call to gemm_avx512 on unsplit values: y has its bits, and the reference's values. Per call for
// dy, per pack for the filter, with the filter packed once or per call (not kept); an ordinary call after
// them has AMX's bits again.
TEST(CpuAmx, Hf32InputsTheSplitCannotTakeRunUnsplit) {
  if (!cpu_supports(Isa::amx_bf16)) GTEST_SKIP() << "no AMX: " << amx_unavailable();
  std::mt19937_64 rng(151);
  for (Layout fmt : kDataFormats)
    for (bool in_dy : {true, false})
      for (float bad : {0x1p-50f + 0x1p-60f, -0x1p-60f, 0x1p-130f, -0x1p-136f, INFINITY, NAN}) {
        if (in_dy && !std::isfinite(bad)) continue;  // inf and NaN in dy: the split takes them
        Case c = border_case(DType::f32, fmt);
        c.hf32 = true;
        std::ostringstream what_os;
        what_os << c.name() << (in_dy ? ", dy " : ", filter ") << std::hexfloat << bad;
        const std::string what = what_os.str();
        std::mt19937_64 same = rng;  // the same data twice, then one value changed
        Instance ordinary = instantiate(c, rng, Fill::random), special = instantiate(c, same, Fill::random);
        static_cast<float*>((in_dy ? special.dy : special.filter).view.data)[29] = bad;
        const Problem p = validate(ordinary.spec);
        const auto run = [&](Isa isa, Instance& inst) {
          fill_canary(inst.y);
          run_gemm(p, inst, isa);
          return inst.y;
        };
        const Tensor unsplit = run(Isa::avx512, special), amx_ordinary = run(Isa::amx_bf16, ordinary);
        EXPECT_TRUE(matches_reference(p, special)) << what;
        std::string why;
        auto engine = cpu::make_gemm(named_request(p, 2, Isa::amx_bf16), Isa::amx_bf16, {}, why);
        ASSERT_TRUE(engine) << why;
        EXPECT_EQ(engine->name(), "gemm_amx_bf16");
        std::vector<unsigned char> workspace(engine->workspace_bytes());
        const auto expect_bits = [&](Instance& inst, const Tensor& want, bool packed, const char* call) {
          fill_canary(inst.y);
          if (packed)
            engine->execute(inst.dy.view.data, inst.y.view.data, workspace.data());
          else
            engine->execute_with_filter(inst.dy.view.data, inst.filter.view.data, inst.y.view.data,
                                        workspace.data(), false);
          EXPECT_TRUE(same_bits(want, inst.y))
              << what << ", " << call << (packed ? ", packed" : ", per call");
        };
        for (bool packed : {true, false}) {
          if (packed) engine->pack_filter(special.filter.view.data);
          expect_bits(special, unsplit, packed, "special");
          if (packed) engine->pack_filter(ordinary.filter.view.data);
          expect_bits(ordinary, amx_ordinary, packed, "ordinary after");
        }
      }
}

// Detection is per pack (filter) and per call (dy): a subnormal filter is handled in every call that uses
// its pack, a subnormal dy in the call that passes it, and ordinary data after both is still exact.
TEST(CpuBf16, TinyDetectionIsPerPackAndPerCall) {
  if (!cpu_supports(Isa::avx512_bf16)) GTEST_SKIP() << "CPU lacks avx512_bf16";
  std::mt19937_64 rng(127);
  for (bool pixel : {false, true})
    for (Layout fmt : kDataFormats) {
      Case c = with_dtype(Case{}, DType::bf16);
      c.y_dtype = DType::f32;
      c.data_format = fmt;
      c.Cin = pixel ? 2 : 17;
      c.Cout = 6;
      c.in = {2, 5, 9};
      c.pad_front = {1, 1, 1};
      c.pad_back = {1, 1, 1};
      // a: subnormal filter; b: subnormal dy; o1, o2: ordinary (their filter views are repointed).
      Instance a = instantiate(c, rng, Fill::small_integers), b = instantiate(c, rng, Fill::small_integers);
      Instance o1 = instantiate(c, rng, Fill::small_integers), o2 = instantiate(c, rng, Fill::small_integers);
      scale_bf16(a.filter, -130);
      scale_bf16(b.dy, -130);
      const Problem p = validate(a.spec);
      std::string why;
      auto engine = pixel ? cpu::make_pixel(named_request(p, 2, Isa::avx512_bf16), Isa::avx512_bf16, why)
                          : cpu::make_gemm(named_request(p, 2, Isa::avx512_bf16), Isa::avx512_bf16, {}, why);
      ASSERT_TRUE(engine) << why;
      std::vector<unsigned char> workspace(engine->workspace_bytes());
      const auto run = [&](const Instance& inst, const char* what) {
        engine->execute(inst.dy.view.data, inst.y.view.data, workspace.data());
        EXPECT_TRUE(exactly_reference(p, inst)) << c.name() << (pixel ? ", pixel, " : ", gemm, ") << what;
      };
      engine->pack_filter(a.filter.view.data);
      o1.filter = a.filter;
      o2.filter = a.filter;
      run(o1, "subnormal filter, ordinary dy");
      run(o2, "the same pack, another call");
      engine->pack_filter(b.filter.view.data);
      run(b, "ordinary filter, subnormal dy");
      o1.filter = b.filter;
      run(o1, "ordinary filter and dy");
    }
}

// The vector output encoders agree bit for bit with numeric's scalar ones (ties, subnormals, overflow, inf,
// NaN, both overflow modes, every tail length), and the transposing store moves every element once (fp32
// through non-temporal stores too), encoding as they do (16-bit and 8-bit y).
TEST(CpuKernels, VectorEncodersMatchNumeric) {
  std::mt19937_64 rng(107);
  std::vector<float> values;
  for (std::uint32_t bits : {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00001u,
                             0x477FE000u, 0x477FEFFFu, 0x477FF000u, 0x477FF001u, 0x7F7F8000u, 0x7F7F7FFFu,
                             0x33800000u, 0x33000000u, 0x00000001u, 0x807FFFFFu, 0x38800000u, 0x387FE000u})
    values.push_back(std::bit_cast<float>(bits));
  std::uniform_int_distribution<std::uint32_t> any;
  for (int i = 0; i < 20000; ++i) values.push_back(std::bit_cast<float>(any(rng)));
  // Values near fp16 and bf16 rounding boundaries.
  for (int i = 0; i < 20000; ++i)
    values.push_back(std::bit_cast<float>((any(rng) & 0x8FFFFFFFu) | 0x30000000u | (any(rng) & 0x0FFF0000u)));
  const std::int64_t n = static_cast<std::int64_t>(values.size());
  for (Isa isa : {Isa::avx512, Isa::avx2}) {
    if (!cpu_supports(isa)) continue;
    const cpu::KernelSet& ks = isa == Isa::avx512 ? cpu::avx512_kernels() : cpu::avx2_kernels();
    for (bool saturate : {false, true})
      for (std::int64_t len : {n, std::int64_t{1}, std::int64_t{15}, std::int64_t{17}}) {
        std::vector<std::uint16_t> b(static_cast<std::size_t>(len)), h(static_cast<std::size_t>(len));
        ks.to_bf16(values.data(), b.data(), len, saturate);
        ks.to_fp16(values.data(), h.data(), len, saturate);
        for (std::int64_t i = 0; i < len; ++i) {
          const float v = values[static_cast<std::size_t>(i)];
          ASSERT_EQ(b[static_cast<std::size_t>(i)], numeric::f32_to_bf16(v, saturate))
              << std::hex << std::bit_cast<std::uint32_t>(v);
          ASSERT_EQ(h[static_cast<std::size_t>(i)], numeric::f32_to_fp16(v, saturate))
              << std::hex << std::bit_cast<std::uint32_t>(v);
        }
      }
    // The row stores against numeric's encoders: bf16 (on CPUs with avx512_bf16, by vcvtne2ps2bf16) and fp16.
    using StoreRows = decltype(ks.store_rows_bf16);
    using Encode = std::uint16_t (*)(float, bool);
    for (const auto& [store_rows, encode, rounds_to_inf] :
         {std::tuple<StoreRows, Encode, std::uint32_t>{ks.store_rows_bf16, numeric::f32_to_bf16, 0x7F7F8000u},
          std::tuple<StoreRows, Encode, std::uint32_t>{ks.store_rows_fp16, numeric::f32_to_fp16,
                                                       0x477FF000u}}) {
      if (store_rows == nullptr) continue;
      for (bool saturate : {false, true})
        for (std::int64_t nc : {1, 16, 32, 33, 64, 95}) {
          const std::int64_t nr = 7, a_rs = 100, y_rs = nc + 5;
          std::vector<float> a(static_cast<std::size_t>(nr * a_rs));
          for (auto& v : a) v = values[static_cast<std::size_t>(any(rng) % static_cast<std::uint32_t>(n))];
          // Rows 1-3 without NaN or subnormal values (where vcvtne2ps2bf16 stores them); row 0 with a NaN,
          // row 4 with a subnormal last value (where it would flush it).
          for (std::int64_t i = a_rs; i < 4 * a_rs; ++i)
            if (float& v = a[static_cast<std::size_t>(i)];
                std::isnan(v) || std::fpclassify(v) == FP_SUBNORMAL)
              v = std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) ^ 0x40000000u);
          a[std::min<std::size_t>(3, static_cast<std::size_t>(nc - 1))] = std::bit_cast<float>(0x7FC00001u);
          a[static_cast<std::size_t>(4 * a_rs + nc - 1)] = std::bit_cast<float>(0x807F4000u);
          // In row 2, values that overflow (saturate clamps them): -inf, and one that rounds up to inf.
          a[static_cast<std::size_t>(2 * a_rs)] = -std::numeric_limits<float>::infinity();
          a[static_cast<std::size_t>(2 * a_rs + nc - 1)] = std::bit_cast<float>(rounds_to_inf);
          std::vector<std::uint16_t> yb(static_cast<std::size_t>(nr * y_rs), 0xAAAA);
          store_rows(a.data(), a_rs, nr, nc, yb.data(), y_rs, saturate);
          for (std::int64_t r = 0; r < nr; ++r)
            for (std::int64_t c = 0; c < y_rs; ++c)
              ASSERT_EQ(yb[static_cast<std::size_t>(r * y_rs + c)],
                        c < nc ? encode(a[static_cast<std::size_t>(r * a_rs + c)], saturate) : 0xAAAA)
                  << "row " << r << " column " << c << " of " << nc
                  << (encode == numeric::f32_to_fp16 ? " (fp16)" : " (bf16)");
        }
    }
    if (ks.transpose_bf16_pairs)
      for (std::int64_t nr : {2, 30, 32, 34, 66})
        for (std::int64_t nc : {1, 15, 16, 17, 40}) {
          const std::int64_t a_rs = nc + 3, y_ps = nr + 4;
          std::vector<std::uint16_t> a(static_cast<std::size_t>(nr * a_rs));
          // Random bits, or values that are not tiny (tiny_bf16) but for at most one tiny element.
          const bool plain = nc % 2 == 1;
          for (auto& v : a) v = static_cast<std::uint16_t>(plain ? (any(rng) & 0x80FF) | 0x3F00 : any(rng));
          bool want_tiny = false;
          if (plain && nr > 30) a[static_cast<std::size_t>((nr - 1) * a_rs + nc - 1)] = 0x8001;
          for (std::int64_t r = 0; r < nr; ++r)
            for (std::int64_t c = 0; c < nc; ++c)
              want_tiny |= cpu::tiny_bf16(a[static_cast<std::size_t>(r * a_rs + c)]);
          std::vector<std::uint16_t> yb(static_cast<std::size_t>(nc * y_ps), 0xAAAA);
          ASSERT_EQ(ks.transpose_bf16_pairs(a.data(), a_rs, nr, nc, yb.data(), y_ps), want_tiny)
              << nr << " x " << nc;
          for (std::int64_t c = 0; c < nc; ++c)
            for (std::int64_t r = 0; r < y_ps; ++r)
              ASSERT_EQ(yb[static_cast<std::size_t>(c * y_ps + r)],
                        r < nr ? a[static_cast<std::size_t>(r * a_rs + c)] : 0xAAAA)
                  << nr << " x " << nc << " at " << r << ", " << c;
        }
    if (ks.interleave_f32)
      for (std::int64_t len : {1, 2, 15, 16, 17, 31, 32, 33, 65}) {
        std::vector<float> a(static_cast<std::size_t>((len + 1) / 2)), b(a.size());
        for (std::size_t i = 0; i < a.size(); ++i) {
          a[i] = values[static_cast<std::size_t>(any(rng) % static_cast<std::uint32_t>(n))];
          b[i] = values[static_cast<std::size_t>(any(rng) % static_cast<std::uint32_t>(n))];
        }
        std::vector<float> out(static_cast<std::size_t>(len + 3), -1.0f);
        ks.interleave_f32(a.data(), b.data(), out.data(), len);
        for (std::int64_t i = 0; i < len + 3; ++i) {
          const float want = i >= len     ? -1.0f
                             : i % 2 == 0 ? a[static_cast<std::size_t>(i / 2)]
                                          : b[static_cast<std::size_t>(i / 2)];
          ASSERT_EQ(std::bit_cast<std::uint32_t>(out[static_cast<std::size_t>(i)]),
                    std::bit_cast<std::uint32_t>(want))
              << len << " at " << i;
        }
      }
    if (ks.interleave_bf16)
      for (std::int64_t len : {1, 15, 16, 17, 31, 32, 33, 40, 64, 65})
        for (bool with_b : {true, false}) {
          // Values that are neither tiny nor special (exponent fields 100-163), and past the runs a tiny
          // value and an infinity the kernel must not read.
          std::vector<std::uint16_t> a(static_cast<std::size_t>(len + 2)), b(a.size());
          for (std::size_t i = 0; i < a.size(); ++i) {
            a[i] = static_cast<std::uint16_t>((100 + any(rng) % 64) << 7 | (any(rng) & 0x807F));
            b[i] = static_cast<std::uint16_t>((100 + any(rng) % 64) << 7 | (any(rng) & 0x807F));
          }
          for (auto* run : {&a, &b}) {
            (*run)[static_cast<std::size_t>(len)] = 0x0001;
            (*run)[static_cast<std::size_t>(len + 1)] = 0x7F80;
          }
          std::vector<std::uint16_t> out(static_cast<std::size_t>(2 * len + 3), 0xAAAA);
          for (bool nonfinite : {false, true})
            ASSERT_FALSE(
                ks.interleave_bf16(a.data(), with_b ? b.data() : nullptr, out.data(), len, nonfinite))
                << len;
          for (std::size_t i = 0; i < out.size(); ++i) {
            const std::uint16_t want = i >= static_cast<std::size_t>(2 * len) ? 0xAAAA
                                       : i % 2 == 0                           ? a[i / 2]
                                       : with_b                               ? b[i / 2]
                                                                              : std::uint16_t{0};
            ASSERT_EQ(out[i], want) << len << " at " << i;
          }
          // One tiny value, infinity or NaN at each place of either run: reported as tiny always, as not
          // finite only when asked (and never from b when there is none).
          for (std::int64_t at = 0; at < len; ++at)
            for (bool in_b : {false, true})
              for (std::uint16_t special :
                   {std::uint16_t{0x8001}, std::uint16_t{0x7F80}, std::uint16_t{0xFFC1}})
                for (bool nonfinite : {false, true}) {
                  auto& run = in_b ? b : a;
                  const std::uint16_t kept = run[static_cast<std::size_t>(at)];
                  run[static_cast<std::size_t>(at)] = special;
                  const bool seen = !in_b || with_b;
                  EXPECT_EQ(
                      ks.interleave_bf16(a.data(), with_b ? b.data() : nullptr, out.data(), len, nonfinite),
                      seen && (special == 0x8001 || nonfinite))
                      << len << " at " << at << (in_b ? " in b" : " in a") << ", value " << special;
                  run[static_cast<std::size_t>(at)] = kept;
                }
        }
    if (!ks.store_transposed) continue;
    for (std::int64_t nr : {1, 15, 16, 17, 40})
      for (std::int64_t nc : {1, 16, 33}) {
        std::vector<float> a(static_cast<std::size_t>(nr * (nc + 3)));
        for (auto& v : a) v = values[static_cast<std::size_t>(any(rng) % static_cast<std::uint32_t>(n))];
        std::vector<float> yf(static_cast<std::size_t>(nc * (nr + 2)), -1.0f);
        std::vector<std::uint16_t> yb(yf.size(), 0xAAAA), yh(yf.size(), 0xAAAA), yh_sat(yf.size(), 0xAAAA);
        ks.store_transposed(a.data(), false, nc + 3, nr, nc, yf.data(), cpu::StoreType::f32, nr + 2, false);
        ks.store_transposed(a.data(), false, nc + 3, nr, nc, yb.data(), cpu::StoreType::bf16, nr + 2, true);
        ks.store_transposed(a.data(), false, nc + 3, nr, nc, yh.data(), cpu::StoreType::fp16, nr + 2, false);
        ks.store_transposed(a.data(), false, nc + 3, nr, nc, yh_sat.data(), cpu::StoreType::fp16, nr + 2,
                            true);
        // 8-bit y: [HiFloat8, FP8][plain, saturating].
        std::vector<std::uint8_t> y8[2][2];
        for (int f = 0; f < 2; ++f)
          for (int sat = 0; sat < 2; ++sat) {
            y8[f][sat].assign(yf.size(), 0xAA);
            ks.store_transposed(a.data(), false, nc + 3, nr, nc, y8[f][sat].data(),
                                f == 0 ? cpu::StoreType::hif8 : cpu::StoreType::fp8_e4m3fn, nr + 2, sat == 1);
          }
        for (std::int64_t c = 0; c < nc; ++c)
          for (std::int64_t r = 0; r < nr + 2; ++r) {
            const auto at = static_cast<std::size_t>(c * (nr + 2) + r);
            const float want = r < nr ? a[static_cast<std::size_t>(r * (nc + 3) + c)] : -1.0f;
            ASSERT_EQ(std::bit_cast<std::uint32_t>(yf[at]), std::bit_cast<std::uint32_t>(want));
            ASSERT_EQ(yb[at], r < nr ? numeric::f32_to_bf16(want, true) : 0xAAAA);
            ASSERT_EQ(yh[at], r < nr ? numeric::f32_to_fp16(want, false) : 0xAAAA) << want;
            ASSERT_EQ(yh_sat[at], r < nr ? numeric::f32_to_fp16(want, true) : 0xAAAA) << want;
            for (bool sat : {false, true}) {
              ASSERT_EQ(y8[0][sat][at], r < nr ? numeric::f32_to_hif8(want, sat) : 0xAA)
                  << want << " " << sat;
              ASSERT_EQ(y8[1][sat][at], r < nr ? numeric::f32_to_fp8_e4m3fn(want, sat) : 0xAA)
                  << want << " " << sat;
            }
          }
        // bf16 input (the top halves of the same values), widened exactly on the way.
        std::vector<std::uint16_t> ab(a.size());
        for (std::size_t i = 0; i < a.size(); ++i)
          ab[i] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(a[i]) >> 16);
        std::fill(yf.begin(), yf.end(), -1.0f);
        ks.store_transposed(ab.data(), true, nc + 3, nr, nc, yf.data(), cpu::StoreType::f32, nr + 2, false);
        for (std::int64_t c = 0; c < nc; ++c)
          for (std::int64_t r = 0; r < nr + 2; ++r) {
            const auto at = static_cast<std::size_t>(c * (nr + 2) + r);
            const std::uint32_t want = r < nr ? std::uint32_t{ab[static_cast<std::size_t>(r * (nc + 3) + c)]}
                                                    << 16
                                              : std::bit_cast<std::uint32_t>(-1.0f);
            ASSERT_EQ(std::bit_cast<std::uint32_t>(yf[at]), want)
                << "bf16 input, row " << r << " column " << c;
          }
        // Uncached fp32 (non-temporal stores for whole aligned lines): into a 64-byte aligned y whose
        // channels lie whole lines apart, and 4 floats past it (no run is a line); the same values, nothing
        // written outside them.
        constexpr std::int64_t kCs = 48;
        cpu::AlignedPtr buffer = cpu::alloc_zeroed64(static_cast<std::size_t>((nc * kCs + 4) * 4), "test y");
        for (const std::int64_t offset : {0, 4}) {
          float* const out = static_cast<float*>(buffer.get());
          std::fill(out, out + nc * kCs + 4, -1.0f);
          ks.store_transposed(a.data(), false, nc + 3, nr, nc, out + offset, cpu::StoreType::f32_uncached,
                              kCs, false);
          _mm_sfence();
          for (std::int64_t i = 0; i < nc * kCs + 4; ++i) {
            const std::int64_t c = (i - offset) / kCs, r = (i - offset) % kCs;
            const bool written = i >= offset && c < nc && r < nr;
            const float want = written ? a[static_cast<std::size_t>(r * (nc + 3) + c)] : -1.0f;
            ASSERT_EQ(std::bit_cast<std::uint32_t>(out[i]), std::bit_cast<std::uint32_t>(want))
                << "uncached, offset " << offset << ", element " << i;
          }
        }
      }
  }
}

// A staged fp32 row stored channel-first with non-temporal stores (store_channel_first, uncached) starts
// its 16-pixel runs on lines whatever the row's alignment: y 0 to 15 floats past a line, rows of 1 to 70
// pixels, 1 to 64 channels lying whole lines apart or not; the values of the plain store, nothing written
// outside them.
TEST(CpuKernels, ChannelFirstStoreOfAnyAlignment) {
  std::mt19937_64 rng(53);
  Case c = with_dtype(Case{}, DType::f32);
  c.y_dtype = DType::f32;
  const Problem p = validate(instantiate(c, rng, Fill::random).spec);
  for (const Isa isa : {Isa::avx512, Isa::avx2}) {
    if (!cpu_supports(isa)) continue;
    const cpu::KernelSet& ks = isa == Isa::avx512 ? cpu::avx512_kernels() : cpu::avx2_kernels();
    for (const std::int64_t m : {1, 7, 16, 17, 40, 56, 70})
      for (const std::int64_t valid : {1, 16, 33, 64})
        for (const std::int64_t c_stride : {96, 99}) {
          std::vector<float> tile(static_cast<std::size_t>(m * 64));
          std::uniform_real_distribution<float> value(-1.0f, 1.0f);
          for (float& v : tile) v = value(rng);
          const std::int64_t floats = 16 + valid * c_stride + 16;
          cpu::AlignedPtr plain = cpu::alloc_zeroed64(static_cast<std::size_t>(floats * 4), "test y");
          cpu::AlignedPtr uncached = cpu::alloc_zeroed64(static_cast<std::size_t>(floats * 4), "test y");
          float* const want = static_cast<float*>(plain.get());
          float* const got = static_cast<float*>(uncached.get());
          for (std::int64_t offset = 0; offset < 16; ++offset) {
            std::fill(want, want + floats, -1.0f);
            std::fill(got, got + floats, -1.0f);
            cpu::store_channel_first(p, ks, tile.data(), 64, m, valid, want, offset, c_stride, false);
            cpu::store_channel_first(p, ks, tile.data(), 64, m, valid, got, offset, c_stride, true);
            _mm_sfence();
            for (std::int64_t i = 0; i < floats; ++i) {
              const std::int64_t ch = (i - offset) / c_stride, px = (i - offset) % c_stride;
              const bool written = i >= offset && ch < valid && px < m;
              const float expected = written ? tile[static_cast<std::size_t>(px * 64 + ch)] : -1.0f;
              ASSERT_EQ(std::bit_cast<std::uint32_t>(want[i]), std::bit_cast<std::uint32_t>(expected))
                  << "plain, " << to_string(isa) << ", offset " << offset << ", element " << i;
              ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(expected))
                  << "uncached, " << to_string(isa) << ", m " << m << ", channels " << valid << ", offset "
                  << offset << ", element " << i;
            }
          }
        }
  }
}

// The AVX-512 split kernel writes split_parts' parts for runs of `values` of every length up to 40, and
// nothing past them, and says whether a value of the run is not finite or has a tiny part.
void expect_split_kernel_matches(const std::vector<float>& values) {
  if (!cpu_supports(Isa::avx512)) GTEST_SKIP() << "CPU lacks avx512";
  const cpu::KernelSet& ks = cpu::avx512_kernels();
  for (std::int64_t len : {1, 7, 15, 16, 17, 31, 33, 40}) {
    for (std::size_t start = 0; start < values.size(); start += values.size() / 97 + 1) {
      const float* src = values.data() + std::min(start, values.size() - static_cast<std::size_t>(len));
      std::vector<std::uint16_t> hi(static_cast<std::size_t>(len + 4), 0xAAAA), lo(hi);
      const bool special = ks.split_bf16(src, len, hi.data(), lo.data());
      bool want_special = false;
      for (std::int64_t i = 0; i < len; ++i) {
        const auto [h, l] = cpu::split_parts(src[i]);
        want_special |= !std::isfinite(src[i]) || cpu::tiny_bf16(h) || cpu::tiny_bf16(l);
        ASSERT_EQ(hi[static_cast<std::size_t>(i)], h) << len << " at " << i << ": " << src[i];
        ASSERT_EQ(lo[static_cast<std::size_t>(i)], l) << len << " at " << i << ": " << src[i];
      }
      ASSERT_EQ(special, want_special) << len << " from " << start;
      for (std::size_t i = static_cast<std::size_t>(len); i < hi.size(); ++i) {
        ASSERT_EQ(hi[i], 0xAAAA);
        ASSERT_EQ(lo[i], 0xAAAA);
      }
    }
  }
}

float bf16_value(std::uint16_t bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

// fp16 values split into bf16 hi + lo for AMX (split_parts): for every fp16 code, hi + lo is the value
// exactly with both parts bf16, neither tiny; infinities and NaNs keep themselves (NaN quiet, sign kept)
// with a zero lo. The AVX-512 kernel agrees with split_parts.
TEST(CpuKernels, Fp16SplitIntoBf16IsExact) {
  std::vector<float> values;
  for (std::uint32_t code = 0; code < 0x10000; ++code) {
    const float x = numeric::fp16_to_f32(static_cast<std::uint16_t>(code));
    values.push_back(x);
    const auto [hi, lo] = cpu::split_parts(x);
    if (std::isfinite(x)) {
      ASSERT_EQ(bf16_value(hi) + bf16_value(lo), x) << code;
      ASSERT_FALSE(cpu::tiny_bf16(hi)) << code;
      ASSERT_FALSE(cpu::tiny_bf16(lo)) << code;
    } else {
      ASSERT_EQ(lo, 0u) << code;
      ASSERT_EQ(std::isnan(bf16_value(hi)), std::isnan(x)) << code;
      ASSERT_EQ(std::signbit(bf16_value(hi)), std::signbit(x)) << code;
      ASSERT_TRUE(!std::isnan(x) || (hi & 0x40u) != 0) << code;  // quiet
    }
  }
  values.push_back(std::bit_cast<float>(0x7F800001u));  // a NaN whose top 16 bits read as infinity
  values.push_back(std::bit_cast<float>(0xFF800100u));
  ASSERT_TRUE(std::isnan(bf16_value(cpu::split_parts(values.back()).first)));
  expect_split_kernel_matches(values);
}

// HF32 values (every exponent and 10-bit mantissa of both signs) split the same way: either hi + lo is the
// value exactly with neither part tiny, or a part is tiny (the engine then computes on unsplit values); a
// part is always tiny below 2^-56, never from 2^-45 up, and a nonzero value never has a zero hi. The AVX-512
// kernel agrees with split_parts on them.
TEST(CpuKernels, Hf32SplitIntoBf16IsExactOrTiny) {
  std::vector<float> values;
  for (std::uint32_t sign : {0u, 0x80000000u})
    for (std::uint32_t exponent = 0; exponent < 255; ++exponent)
      for (std::uint32_t mantissa = 0; mantissa < 1024; ++mantissa) {
        const float x = std::bit_cast<float>(sign | exponent << 23 | mantissa << 13);
        ASSERT_EQ(std::bit_cast<std::uint32_t>(numeric::round_to_hf32(x)), std::bit_cast<std::uint32_t>(x));
        values.push_back(x);
        const auto [hi, lo] = cpu::split_parts(x);
        const bool tiny = cpu::tiny_bf16(hi) || cpu::tiny_bf16(lo);
        const std::string what = (std::ostringstream{} << std::hexfloat << x).str();
        ASSERT_TRUE(tiny || bf16_value(hi) + bf16_value(lo) == x) << what;
        ASSERT_TRUE(x == 0 || (hi & 0x7FFF) != 0) << what;
        ASSERT_TRUE(x == 0 || std::fabs(x) >= 0x1p-56f || tiny) << what;
        ASSERT_TRUE(std::fabs(x) < 0x1p-45f || !tiny) << what;
      }
  expect_split_kernel_matches(values);
}

// The vector 8-bit encoders against numeric's scalar ones: every bf16-like pattern (the top 16 bits) with low
// halves at and around the half-way points, where ties-away (HiFloat8) and ties-to-even (FP8) differ, and
// where a low half alone makes a NaN; both overflow modes; lengths that end inside a vector (of 16, 32 or 64
// values) and after whole ones; the AVX-512 kernels with VBMI and without. And the table widening of 8-bit
// codes on every code, in runs that end inside a vector and after whole ones.
TEST(CpuKernels, VectorEightBitKernelsMatchNumeric) {
  std::vector<float> values;
  for (std::uint32_t hi = 0; hi < 0x10000u; ++hi)
    for (std::uint32_t lo : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu})
      values.push_back(std::bit_cast<float>(hi << 16 | lo));
  std::mt19937_64 rng(108);
  std::uniform_int_distribution<std::uint32_t> any;
  for (int i = 0; i < 50000; ++i) values.push_back(std::bit_cast<float>(any(rng)));
  const std::int64_t n = static_cast<std::int64_t>(values.size());
  using Encode = void (*)(const float*, std::uint8_t*, std::int64_t, bool);
  using Scalar = std::uint8_t (*)(float, bool);
  int sets_checked = 0;
  for (Isa isa : {Isa::avx512, Isa::avx2}) {
    if (!cpu_supports(isa)) continue;
    const cpu::KernelSet& ks = isa == Isa::avx512 ? cpu::avx512_kernels() : cpu::avx2_kernels();
    // The set's kernels; for AVX-512 both forms, with VBMI (which the set takes where the CPU has it) and
    // without.
    std::vector<cpu::EightBitKernels> variants = {{ks.to_hif8, ks.to_fp8_e4m3fn, ks.widen8, ks.widen8_pairs}};
    if (isa == Isa::avx512) {
      const cpu::EightBitKernels taken = cpu::avx512_eight_bit_kernels(cpu_has_avx512_vbmi());
      EXPECT_TRUE(ks.to_hif8 == taken.to_hif8 && ks.to_fp8_e4m3fn == taken.to_fp8_e4m3fn &&
                  ks.widen8 == taken.widen8 && ks.widen8_pairs == taken.widen8_pairs);
      variants = {cpu::avx512_eight_bit_kernels(false)};
      if (cpu_has_avx512_vbmi()) variants.push_back(cpu::avx512_eight_bit_kernels(true));
    }
    std::vector<std::pair<Encode, Scalar>> encoders;
    for (const cpu::EightBitKernels& v : variants)
      encoders.insert(encoders.end(),
                      {{v.to_hif8, numeric::f32_to_hif8}, {v.to_fp8_e4m3fn, numeric::f32_to_fp8_e4m3fn}});
    for (std::size_t e = 0; e < encoders.size(); ++e) {
      const auto& [vector, scalar] = encoders[e];
      if (vector == nullptr) continue;
      SCOPED_TRACE("encoder " + std::to_string(e) + " (HiFloat8, FP8 of each form in turn)");
      ++sets_checked;
      for (bool saturate : {false, true})
        for (std::int64_t len : {n, n - 1, std::int64_t{1}, std::int64_t{15}, std::int64_t{16},
                                 std::int64_t{17}, std::int64_t{31}, std::int64_t{32}, std::int64_t{33},
                                 std::int64_t{63}, std::int64_t{64}, std::int64_t{65}, std::int64_t{127}}) {
          std::vector<std::uint8_t> codes(static_cast<std::size_t>(len + 5), 0xAA);
          vector(values.data(), codes.data(), len, saturate);
          for (std::int64_t i = 0; i < len + 5; ++i) {
            const std::size_t k = static_cast<std::size_t>(i);
            if (i >= len) {
              ASSERT_EQ(codes[k], 0xAA) << "written past " << len;
              continue;
            }
            ASSERT_EQ(codes[k], scalar(values[k], saturate))
                << std::hex << std::bit_cast<std::uint32_t>(values[k]) << " saturate " << saturate;
          }
        }
    }
    if (ks.widen8 == nullptr) continue;
    ++sets_checked;
    // A set that widens 8-bit codes pairs them too, in every form (the packers take both or neither).
    for (const cpu::EightBitKernels& v : variants) ASSERT_NE(v.widen8_pairs, nullptr);
    std::vector<std::uint16_t> lut(256);
    for (std::size_t c = 0; c < lut.size(); ++c) lut[c] = static_cast<std::uint16_t>(any(rng));
    const cpu::Lut8 split(lut.data());
    std::vector<std::uint8_t> src(600);
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>(i < 256 ? i : any(rng));
    for (std::int64_t len : {1, 15, 31, 32, 33, 65, 127, 128, 129, 191, 256, 300, 600}) {
      for (std::size_t f = 0; f < variants.size(); ++f) {
        std::vector<std::uint16_t> out(static_cast<std::size_t>(len + 3), 0xAAAA);
        variants[f].widen8(src.data(), split, out.data(), len);
        for (std::int64_t i = 0; i < len + 3; ++i) {
          const std::size_t k = static_cast<std::size_t>(i);
          ASSERT_EQ(out[k], i < len ? lut[src[k]] : 0xAAAA) << "form " << f << ", " << len << " at " << i;
        }
      }
      if (len > 300) continue;
      // Pairs from two runs (the second 300 codes on), or from one with zeros beside it; the special values
      // reported as the scans would find them.
      for (const cpu::EightBitKernels& v : variants)
        for (bool second : {true, false}) {
          std::vector<std::uint16_t> pairs(static_cast<std::size_t>(2 * len + 3), 0xAAAA);
          const bool special =
              v.widen8_pairs(src.data(), second ? src.data() + 300 : nullptr, split, pairs.data(), len, true);
          for (std::int64_t i = 0; i < 2 * len + 3; ++i) {
            const std::size_t k = static_cast<std::size_t>(i / 2);
            const std::uint16_t want = i >= 2 * len ? 0xAAAA
                                       : i % 2 == 0 ? lut[src[k]]
                                       : second     ? lut[src[k + 300]]
                                                    : 0;
            ASSERT_EQ(pairs[static_cast<std::size_t>(i)], want) << len << " pairs at " << i << ", " << second;
          }
          const auto n2 = static_cast<std::int64_t>(2 * len);
          EXPECT_EQ(special, ks.any_tiny_bf16(pairs.data(), n2) || ks.any_nonfinite_bf16(pairs.data(), n2));
        }
    }
    // The report alone: a table of ordinary values but for one tiny (code 7) and one infinite (code 9), and
    // runs of ordinary codes with one of those planted at each end of either run.
    if (ks.widen8_pairs == nullptr) continue;
    std::vector<std::uint16_t> clean(256);
    for (std::size_t c = 0; c < clean.size(); ++c) clean[c] = static_cast<std::uint16_t>(0x3F80 + c);
    clean[7] = 0x0001;
    clean[9] = 0xFF80;
    const cpu::Lut8 clean_split(clean.data());
    for (std::size_t f = 0; f < variants.size(); ++f)
      for (std::int64_t len : {1, 16, 17, 40}) {
        const auto widen_pairs = variants[f].widen8_pairs;
        std::vector<std::uint8_t> a(static_cast<std::size_t>(len), 3), b(a);
        std::vector<std::uint16_t> pairs(static_cast<std::size_t>(2 * len));
        for (bool nonfinite : {false, true})
          EXPECT_FALSE(widen_pairs(a.data(), b.data(), clean_split, pairs.data(), len, nonfinite));
        for (std::uint8_t code : {std::uint8_t{7}, std::uint8_t{9}})
          for (auto* run : {&a, &b})
            for (std::int64_t at : {std::int64_t{0}, len - 1}) {
              std::vector<std::uint8_t> planted = *run;
              planted[static_cast<std::size_t>(at)] = code;
              const std::uint8_t* pa = run == &a ? planted.data() : a.data();
              const std::uint8_t* pb = run == &b ? planted.data() : b.data();
              for (bool nonfinite : {false, true})
                EXPECT_EQ(widen_pairs(pa, pb, clean_split, pairs.data(), len, nonfinite),
                          code == 7 || nonfinite)
                    << "code " << int{code} << " at " << at << " of " << len << ", nonfinite " << nonfinite
                    << ", form " << f;
            }
      }
  }
  if (sets_checked == 0) GTEST_SKIP() << "no instruction set on this CPU has vector 8-bit kernels";
}

// Widening bf16 and fp16 codes to fp32 by vector kernels: every code, against numeric's scalar decoders
// bit for bit (fp16 NaNs only as NaNs: vcvtph2ps quiets a signalling one), lengths that end inside a vector,
// nothing written past; and HF32 rounding against numeric's, bit for bit.
TEST(CpuKernels, VectorWideningMatchesNumeric) {
  std::vector<std::uint16_t> codes(65536);
  for (std::size_t c = 0; c < codes.size(); ++c) codes[c] = static_cast<std::uint16_t>(c);
  using Widen = void (*)(const std::uint16_t*, float*, std::int64_t);
  int sets_checked = 0;
  for (Isa isa : {Isa::avx512, Isa::avx2}) {
    if (!cpu_supports(isa)) continue;
    const cpu::KernelSet& ks = isa == Isa::avx512 ? cpu::avx512_kernels() : cpu::avx2_kernels();
    const std::pair<Widen, float (*)(std::uint16_t)> widenings[] = {{ks.bf16_to_f32, numeric::bf16_to_f32},
                                                                    {ks.fp16_to_f32, numeric::fp16_to_f32}};
    for (const auto& [vector, scalar] : widenings) {
      if (vector == nullptr) continue;
      const bool quiets_nan = scalar == &numeric::fp16_to_f32;  // bf16 widening moves the bits unchanged
      ++sets_checked;
      for (std::int64_t len : {std::int64_t{65536}, std::int64_t{1}, std::int64_t{7}, std::int64_t{17}}) {
        std::vector<float> out(static_cast<std::size_t>(len + 3), -1.0f);
        vector(codes.data(), out.data(), len);
        for (std::int64_t i = 0; i < len + 3; ++i) {
          const std::size_t k = static_cast<std::size_t>(i);
          const float want = i < len ? scalar(codes[k]) : -1.0f;
          if (quiets_nan && std::isnan(want)) {
            ASSERT_TRUE(std::isnan(out[k])) << std::hex << codes[k];
            continue;
          }
          ASSERT_EQ(std::bit_cast<std::uint32_t>(out[k]), std::bit_cast<std::uint32_t>(want))
              << std::hex << "code " << codes[k] << " of " << std::dec << len;
        }
      }
    }
  }
  // HF32 rounding: every top-16-bit pattern with low bits around the half-way point of the dropped 13.
  std::vector<float> values;
  for (std::uint32_t hi = 0; hi < 0x10000u; ++hi)
    for (std::uint32_t lo : {0x0000u, 0x0FFFu, 0x1000u, 0x1001u, 0x1FFFu, 0x3000u, 0xF000u, 0xFFFFu})
      values.push_back(std::bit_cast<float>(hi << 16 | lo));
  for (Isa isa : {Isa::avx512, Isa::avx2}) {
    if (!cpu_supports(isa)) continue;
    const cpu::KernelSet& ks = isa == Isa::avx512 ? cpu::avx512_kernels() : cpu::avx2_kernels();
    if (ks.round_hf32 == nullptr) continue;
    ++sets_checked;
    for (std::int64_t len : {static_cast<std::int64_t>(values.size()), std::int64_t{1}, std::int64_t{9}}) {
      std::vector<float> out(static_cast<std::size_t>(len + 3), -1.0f);
      ks.round_hf32(values.data(), out.data(), len);
      for (std::int64_t i = 0; i < len + 3; ++i) {
        const std::size_t k = static_cast<std::size_t>(i);
        const float want = i < len ? numeric::round_to_hf32(values[k]) : -1.0f;
        ASSERT_EQ(std::bit_cast<std::uint32_t>(out[k]), std::bit_cast<std::uint32_t>(want))
            << std::hex << std::bit_cast<std::uint32_t>(values[k]) << " of " << std::dec << len;
      }
    }
  }
  if (sets_checked == 0) GTEST_SKIP() << "no instruction set on this CPU has vector widening kernels";
}

// Reader::widen on 8-bit codes: every code, with each input rounding, equals numeric's decoding (the value
// get() gives), on every kernel set the CPU runs, with or without table kernels (AVX2 has none: a run
// through the fp32 table); the run's neighbours untouched.
TEST(CpuKernels, ReaderWidensEveryEightBitCode) {
  std::vector<std::uint8_t> codes(256 * 3 + 5);
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::uint8_t>(i * 7 + i / 256);
  int sets_checked = 0;
  for (Isa isa : {Isa::avx512, Isa::avx2}) {
    if (!cpu_supports(isa)) continue;
    const cpu::KernelSet& ks = isa == Isa::avx512 ? cpu::avx512_kernels() : cpu::avx2_kernels();
    ++sets_checked;
    for (DType dtype : {DType::hif8, DType::fp8_e4m3fn})
      for (InputRounding rounding : {InputRounding::none, InputRounding::hf32, InputRounding::fp16}) {
        const cpu::Reader reader(dtype, rounding);
        ASSERT_TRUE(reader.widens(ks)) << to_string(dtype) << " on " << to_string(isa);
        for (std::int64_t at : {0, 3})
          for (std::int64_t len : {std::int64_t{1}, std::int64_t{31}, std::int64_t{256}, std::int64_t{769}}) {
            std::vector<float> out(static_cast<std::size_t>(len + 2), -1.0f);
            reader.widen(ks, codes.data(), at, len, out.data() + 1);
            for (std::int64_t i = -1; i <= len; ++i) {
              const float want =
                  i < 0 || i == len ? -1.0f : numeric::load_rounded(dtype, codes.data(), at + i, rounding);
              ASSERT_EQ(std::bit_cast<std::uint32_t>(out[static_cast<std::size_t>(i + 1)]),
                        std::bit_cast<std::uint32_t>(want))
                  << to_string(dtype) << " on " << to_string(isa) << ", code "
                  << int{codes[static_cast<std::size_t>(at + std::max<std::int64_t>(i, 0))]} << " of " << len;
            }
          }
      }
  }
  if (sets_checked == 0) GTEST_SKIP() << "the CPU has neither AVX2 nor AVX-512";
}

// copy_uncached: plain stores up to dst's first vector boundary, streaming stores, plain stores after; every
// split of a run (start offsets across a 64-byte line, lengths around the vector widths) copies exactly
// [0, n) and touches nothing either side.
TEST(CpuKernels, UncachedCopyMatchesAtEveryAlignmentAndLength) {
  std::vector<float> src(1200);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) + 0.25f;
  const float guard = -7.5f;
  int sets_checked = 0;
  for (Isa isa : {Isa::avx512, Isa::avx2}) {
    if (!cpu_supports(isa)) continue;
    const cpu::KernelSet& ks = isa == Isa::avx512 ? cpu::avx512_kernels() : cpu::avx2_kernels();
    if (ks.copy_uncached == nullptr) continue;
    ++sets_checked;
    // 16 floats of guard before base, so a store before dst at offset 0 is caught too.
    cpu::AlignedPtr buffer = cpu::alloc_zeroed64(4 * 1132, "test buffer");
    float* const lead = static_cast<float*>(buffer.get());
    float* const base = lead + 16;
    for (std::int64_t at = 0; at < 18; ++at)
      for (std::int64_t n : {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 1000}) {
        std::fill(lead, lead + 1132, guard);
        const float* from = src.data() + at % 5;
        ks.copy_uncached(from, base + at, n);
        _mm_sfence();  // the kernel's contract: the caller fences its streaming stores before reading dst
        for (std::int64_t i = -16; i < 1116; ++i) {
          const bool inside = i >= at && i < at + n;
          ASSERT_EQ(base[i], inside ? from[i - at] : guard)
              << to_string(isa) << ": dst offset " << at << ", n " << n << ", element " << i - at;
        }
      }
  }
  if (sets_checked == 0) GTEST_SKIP() << "no instruction set on this CPU has an uncached copy";
}

// The peak probes' flop counts are the work they did: every product is 2^-40, so the sum of all their
// accumulator lanes is (multiply-adds done) x 2^-40, exactly at these round counts; flops are twice that.
TEST(CpuKernels, PeakProbesCountTheMultiplyAddsTheyDo) {
  const std::pair<Isa, std::int64_t (*)(std::int64_t, double*)> probes[] = {
      {Isa::avx2, &cpu::peak_fma_avx2},
      {Isa::avx512, &cpu::peak_fma_avx512},
      {Isa::avx512_bf16, &cpu::peak_dpbf16_avx512},
      {Isa::amx_bf16, &cpu::peak_tdpbf16_amx},
  };
  int probes_checked = 0;
  for (const auto& [isa, probe] : probes) {
    if (!cpu_supports(isa)) continue;
    ++probes_checked;
    for (const std::int64_t rounds : {1, 3, 1000}) {
      double accumulated = -1;
      const std::int64_t flops = probe(rounds, &accumulated);
      EXPECT_GT(flops, 0) << to_string(isa);
      EXPECT_EQ(static_cast<double>(flops), 2 * accumulated * 0x1p40)
          << to_string(isa) << ", " << rounds << " rounds";
      EXPECT_EQ(probe(2 * rounds, nullptr), 2 * flops) << to_string(isa);
    }
  }
  if (probes_checked == 0) GTEST_SKIP() << "this CPU has none of the probed instruction sets";
}

// The tile loops run the kernels over the reductions they count: every product is 2^-40 and the calls
// accumulate into one tile, so its values sum to (products) x 2^-40 exactly; flops are twice the products.
// The filter in L1 or streaming from L2 does the same work.
TEST(CpuKernels, TileLoopsCountTheMultiplyAddsTheyDo) {
  const CpuModel& cpu = host_cpu_model();
  std::size_t loops = 0;
  for (std::int64_t flops = 0; cpu::run_tile_loop(cpu, loops, true, 1, &flops, nullptr); ++loops) {
    for (const bool in_l1 : {true, false})
      for (const std::int64_t rounds : {1, 3, 1000}) {
        double accumulated = -1;
        ASSERT_TRUE(cpu::run_tile_loop(cpu, loops, in_l1, rounds, &flops, &accumulated));
        EXPECT_GT(flops, 0) << "loop " << loops;
        EXPECT_EQ(static_cast<double>(flops), 2 * accumulated * 0x1p40)
            << "loop " << loops << (in_l1 ? ", filter in L1, " : ", filter from L2, ") << rounds << " rounds";
        std::int64_t twice = 0;
        ASSERT_TRUE(cpu::run_tile_loop(cpu, loops, in_l1, 2 * rounds, &twice, nullptr));
        EXPECT_EQ(twice, 2 * flops) << "loop " << loops;
      }
  }
  if (loops == 0) GTEST_SKIP() << "this CPU has none of the instruction sets with tile loops";
}

// The phase decomposition reaches exactly the (kernel index, dy index) pairs of the definition.
TEST(CpuGeometry, PhasesMatchBruteForce) {
  std::mt19937_64 rng(71);
  auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  for (int rep = 0; rep < 300; ++rep) {
    const std::int64_t k = pick(1, 5), s = pick(1, 5), d = pick(1, 4), pad = pick(0, 4);
    const std::int64_t dil = (k - 1) * d + 1, in = std::max<std::int64_t>(1, dil - pad) + pick(0, 9);
    const std::int64_t out = (in + pad + pick(0, 3) - dil) / s + 1;
    if (out < 1) continue;
    const cpu::Axis axis(in, out, k, s, d, pad);
    std::int64_t covered = 0;
    for (const auto& ph : axis.phases) covered += ph.count;
    ASSERT_EQ(covered, in);
    for (std::int64_t i = 0; i < in; ++i) {
      std::set<std::pair<std::int64_t, std::int64_t>> want, got;
      for (std::int64_t kk = 0; kk < k; ++kk) {
        const std::int64_t pos = i + pad - kk * d;
        const bool inside = pos >= 0 && pos % s == 0 && pos / s < out;
        if (inside) want.insert({kk, pos / s});
        ASSERT_EQ(axis.dy_index(i, kk), inside ? pos / s : -1) << "i " << i << " k " << kk;
      }
      const auto& ph = axis.phases[static_cast<std::size_t>(axis.phase_of(i))];
      const std::int64_t j = axis.j_of(i);
      ASSERT_EQ(ph.first + s * j, i);
      for (const auto& t : ph.taps)
        if (axis.valid(t, j)) got.insert({t.k, j + t.off});
      ASSERT_EQ(want, got) << "in " << in << " out " << out << " k " << k << " s " << s << " d " << d
                           << " pad " << pad << " i " << i;
    }
  }
}

}  // namespace
}  // namespace conv3d_dx::testing
