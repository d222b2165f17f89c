// The GEMM engine's configuration step on its own: the same problem on CPUs with different caches, the dy
// layout rules, W-tap fusion and the tuning overrides.
#include <random>

#include "common/cpu_model.hpp"
#include "cpu/gemm_engine.hpp"
#include "support/testing.hpp"

namespace conv3d_dx::testing {
namespace {

// This CPU with another L2, its fp32 blocks as wide as the kernel set prefers (not narrowed to share W taps,
// which NarrowBlocksShareWTapsWhereTheCpuPrefersIt tests).
CpuModel with_l2(std::int64_t l2_bytes) {
  CpuModel cpu = host_cpu_model();
  cpu.l2_bytes = l2_bytes;
  cpu.shared_w_over_wide = false;
  return cpu;
}

Problem problem_of(const Case& c) {
  std::mt19937_64 rng(1);
  return validate(instantiate(c, rng, Fill::small_integers).spec);
}

class GemmConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu_supports(Isa::avx512)) GTEST_SKIP() << "CPU lacks avx512 (its kernel set sizes the tiles)";
  }
};

TEST_F(GemmConfigTest, LargeFiltersGetPlaneTasksSizedByTheL2) {
  Case c;  // suite shape d, one image: a 3.5 MB filter, 22 x 40 planes
  c.Cin = c.Cout = 256;
  c.in = {3, 22, 40};
  const Problem p = problem_of(c);
  const auto zen = cpu::gemm_config(p, with_l2(1 << 20), Isa::avx512, 2);
  const auto intel = cpu::gemm_config(p, with_l2(2 << 20), Isa::avx512, 2);
  EXPECT_EQ(zen.nv * zen.lanes, 64);
  // One (kd, kh) of a 64-channel block: 3 kw x 256 co x 64 ci x 4 bytes = 192 KiB; 9 of them are 1.7 MiB.
  EXPECT_TRUE(zen.plane_mode) << zen.describe();
  EXPECT_EQ(zen.dh_group, (384 << 10) / (192 << 10));
  EXPECT_TRUE(intel.plane_mode) << intel.describe();
  EXPECT_EQ(intel.dh_group, (768 << 10) / (192 << 10));
  EXPECT_TRUE(intel.staged);
  // Plane groups: as many 22 x 40 x 64 fp32 planes (220 KiB) as the 512 KiB staging budget holds, with at
  // least two tasks per thread among the 4 channel blocks x 3 planes.
  EXPECT_EQ(intel.planes_per_task, 2);
  EXPECT_EQ(cpu::gemm_config(p, with_l2(2 << 20), Isa::avx512, 4).planes_per_task, 1);

  Case small = c;  // a filter that fits: row tasks
  small.Cin = small.Cout = 16;
  const auto rows = cpu::gemm_config(problem_of(small), with_l2(1 << 20), Isa::avx512, 2);
  EXPECT_FALSE(rows.plane_mode) << rows.describe();
  EXPECT_EQ(rows.dh_group, 9);
  EXPECT_EQ(rows.nv, 1);  // no wider than the channels
}

// Channel blocks of equal width where the channels allow, never wider than the kernel set's widest; a
// tuning that names the width keeps it.
TEST_F(GemmConfigTest, ChannelBlocksShareTheChannelsEvenly) {
  Case c;
  c.Cout = 32;
  c.in = {3, 8, 8};
  const std::pair<std::int64_t, int> expected[] = {{16, 1},  {48, 3},  {64, 4},  {80, 3},  {96, 3},
                                                   {112, 4}, {128, 4}, {144, 3}, {160, 4}, {192, 4}};
  for (const auto& [cin, nv] : expected) {
    c.Cin = cin;
    const auto config = cpu::gemm_config(problem_of(c), host_cpu_model(), Isa::avx512, 2);
    EXPECT_EQ(config.nv, nv) << cin << " input channels: " << config.describe();
  }
  c.Cin = 96;
  cpu::GemmTuning wide;
  wide.nv = 4;
  EXPECT_EQ(cpu::gemm_config(problem_of(c), host_cpu_model(), Isa::avx512, 2, wide).nv, 4);
  EXPECT_EQ(cpu::gemm_config(problem_of(with_dtype(c, DType::bf16)), host_cpu_model(), Isa::amx_bf16, 2).nv,
            2);
}

// AMX (decided without running it): the reduction padded to 32 channels, or where that is costly (40
// channels: 64, 1.6x) a phase's fused W taps side by side padded to even, in products of as many pairs as
// divide them (3 x 20 pairs: 4 products of 15, not 6 of 16); blocks of two vectors, dy always converted with
// zero pixels beside its rows as far as the taps reach, and flat planes where rows are short (suite shape
// e's 6 pixels) but not where they fill the 16-row tiles (32 pixels).
TEST_F(GemmConfigTest, AmxPadsTheReductionAndFlattensShortRows) {
  Case c = with_dtype(Case{}, DType::bf16);
  c.Cin = 384;
  c.Cout = 40;
  c.in = {3, 6, 6};
  c.pad_front = c.pad_back = {1, 1, 1};
  const auto short_rows = cpu::gemm_config(problem_of(c), host_cpu_model(), Isa::amx_bf16, 2);
  EXPECT_TRUE(short_rows.amx && short_rows.bf16);
  EXPECT_EQ(short_rows.kpad, 40);
  EXPECT_EQ(short_rows.amx_pairs, 15);
  cpu::GemmTuning unfused;
  unfused.fuse_w = false;
  const auto padded = cpu::gemm_config(problem_of(c), host_cpu_model(), Isa::amx_bf16, 2, unfused);
  EXPECT_EQ(padded.kpad, 64);
  EXPECT_EQ(padded.amx_pairs, 16);
  EXPECT_EQ(short_rows.nv, 2);
  EXPECT_FALSE(short_rows.direct_dy);
  // Kernel 3, pad 1: y pixel j reads dy pixels j - 1 to j + 1.
  EXPECT_EQ(short_rows.halo_lo, 1);
  EXPECT_EQ(short_rows.halo_hi, 1);
  EXPECT_TRUE(short_rows.flat) << short_rows.describe();
  EXPECT_EQ(short_rows.hhalo_lo, 1);
  EXPECT_EQ(short_rows.hhalo_hi, 1);
  // Forced either way by the tuning.
  EXPECT_FALSE(cpu::gemm_config(problem_of(c), host_cpu_model(), Isa::amx_bf16, 2, {0, 0, 0}).flat);

  c.in = {3, 6, 32};
  const auto full_rows = cpu::gemm_config(problem_of(c), host_cpu_model(), Isa::amx_bf16, 2);
  EXPECT_FALSE(full_rows.flat) << full_rows.describe();
  EXPECT_EQ(full_rows.hhalo_lo, 0);
  EXPECT_TRUE(cpu::gemm_config(problem_of(c), host_cpu_model(), Isa::amx_bf16, 2, {0, 0, 2}).flat);
}

// AMX runs a row's or plane's channel blocks in turn where the whole packed filter fits in a core's L2: a
// 3.4 MiB filter (27 taps x 256 x 256 bf16) over 16 x 32 planes (rows of 32 pixels) or over 12 x 40 planes
// (flat planes of 480 pixels) only with a 4 MiB L2, not with 2 MiB or 1 MiB. The FMA kernels keep a block's
// tasks together; fp16 inputs are split into bf16 his and los, 64 elements per
// chunk of 32 output channels, in blocks of one vector.
TEST_F(GemmConfigTest, AmxBlocksInTurnWhereThePackedFilterFits) {
  Case c = with_dtype(Case{}, DType::bf16);
  c.Cin = c.Cout = 256;
  c.in = {3, 16, 32};
  const Problem rows = problem_of(c);
  const auto by_rows = cpu::gemm_config(rows, with_l2(2 << 20), Isa::amx_bf16, 2);
  ASSERT_FALSE(by_rows.flat || by_rows.plane_mode) << by_rows.describe();
  EXPECT_FALSE(by_rows.blocks_inner);
  EXPECT_TRUE(cpu::gemm_config(rows, with_l2(4 << 20), Isa::amx_bf16, 2).blocks_inner);
  c.in = {3, 12, 40};
  const Problem p = problem_of(c);
  const auto flat = cpu::gemm_config(p, with_l2(2 << 20), Isa::amx_bf16, 2);
  ASSERT_TRUE(flat.flat) << flat.describe();
  EXPECT_FALSE(flat.blocks_inner);
  EXPECT_TRUE(cpu::gemm_config(p, with_l2(4 << 20), Isa::amx_bf16, 2).blocks_inner);
  EXPECT_FALSE(cpu::gemm_config(p, with_l2(1 << 20), Isa::amx_bf16, 2).blocks_inner);
  EXPECT_FALSE(cpu::gemm_config(p, with_l2(4 << 20), Isa::avx512, 2).blocks_inner);
  cpu::GemmTuning forced;
  forced.blocks_inner = 1;
  const auto inner = cpu::gemm_config(p, with_l2(2 << 20), Isa::avx512, 2, forced);
  EXPECT_TRUE(inner.blocks_inner);
  EXPECT_NE(inner.describe().find("channel blocks in turn"), std::string::npos) << inner.describe();
  EXPECT_FALSE(cpu::gemm_config(p, with_l2(2 << 20), Isa::amx_bf16, 2).split);

  Case half = with_dtype(c, DType::f16);
  half.Cout = 20;
  const auto split = cpu::gemm_config(problem_of(half), with_l2(2 << 20), Isa::amx_bf16, 2);
  EXPECT_TRUE(split.split);
  EXPECT_EQ(split.kpad, 64);  // one chunk: 32 his, 32 los
  EXPECT_EQ(split.nv, 1);
  EXPECT_NE(split.describe().find("split into bf16"), std::string::npos) << split.describe();
}

// AMX row tasks convert dy into a window per thread (as many planes as a y plane's D taps reach) where the
// window and the packed filter fit in half the L2, with more than one thread, one group and the channel
// blocks in turn (split inputs too); never for flat planes or on one thread.
TEST_F(GemmConfigTest, AmxDyWindowsWhereTheyFitInHalfTheL2) {
  Case c = with_dtype(Case{}, DType::bf16);
  c.Cin = c.Cout = 32;
  c.in = {8, 24, 64};
  const Problem p = problem_of(c);  // planes of 24 x 66 pixels x 64 bytes, 99 KiB; filter 54 KiB
  const auto windows = cpu::gemm_config(p, with_l2(2 << 20), Isa::amx_bf16, 2);
  ASSERT_FALSE(windows.flat || windows.plane_mode) << windows.describe();
  EXPECT_TRUE(windows.dy_window) << windows.describe();
  EXPECT_EQ(windows.dy_window_planes, 3);
  EXPECT_NE(windows.describe().find("window of 3 planes"), std::string::npos) << windows.describe();
  EXPECT_FALSE(cpu::gemm_config(p, with_l2(2 << 20), Isa::amx_bf16, 1).dy_window);
  EXPECT_FALSE(cpu::gemm_config(p, with_l2(512 << 10), Isa::amx_bf16, 2).dy_window);  // 350 KiB > 256
  EXPECT_FALSE(cpu::gemm_config(p, with_l2(2 << 20), Isa::avx512_bf16, 2).dy_window);
  cpu::GemmTuning off, on;
  off.dy_window = 0;
  on.dy_window = 1;
  EXPECT_FALSE(cpu::gemm_config(p, with_l2(2 << 20), Isa::amx_bf16, 2, off).dy_window);
  EXPECT_TRUE(cpu::gemm_config(p, with_l2(2 << 20), Isa::amx_bf16, 1, on).dy_window);
  Case strided = c;
  strided.stride = {2, 2, 1};
  EXPECT_EQ(cpu::gemm_config(problem_of(strided), with_l2(2 << 20), Isa::amx_bf16, 2).dy_window_planes, 2);
  Case grouped = c;
  grouped.groups = 2;
  EXPECT_FALSE(cpu::gemm_config(problem_of(grouped), with_l2(2 << 20), Isa::amx_bf16, 2, on).dy_window);
  const auto split =
      cpu::gemm_config(problem_of(with_dtype(c, DType::f16)), with_l2(2 << 20), Isa::amx_bf16, 2);
  EXPECT_TRUE(split.split && split.dy_window) << split.describe();  // planes of 198 KiB, filter 108 KiB
  cpu::GemmTuning flat = on;
  flat.plane = 2;
  EXPECT_FALSE(cpu::gemm_config(p, with_l2(2 << 20), Isa::amx_bf16, 2, flat).dy_window);
}

TEST_F(GemmConfigTest, DyInPlaceOnlyInTheComputeType) {
  Case c;
  c.Cin = c.Cout = 32;
  const CpuModel cpu = host_cpu_model();
  EXPECT_TRUE(cpu::gemm_config(problem_of(c), cpu, Isa::avx512, 2).direct_dy);  // fp32 NDHWC
  Case few = c;
  few.data_format = Layout::NCDHW;
  few.Cout = 8;  // strided channels, too few per tap to read in place
  EXPECT_FALSE(cpu::gemm_config(problem_of(few), cpu, Isa::avx512, 2).direct_dy);
  Case wide = c;
  wide.data_format = Layout::NCDHW;  // 32 channels: strided reads pay, unless the planes alias in L1
  wide.kernel = {1, 1, 1};           // dy planes as large as y's
  wide.in = {5, 5, 5};               // 125 floats a channel
  EXPECT_TRUE(cpu::gemm_config(problem_of(wide), cpu, Isa::avx512, 2).direct_dy);
  wide.in = {4, 16, 16};  // 1024 floats: every channel 4 KiB apart, in one L1 set
  EXPECT_FALSE(cpu::gemm_config(problem_of(wide), cpu, Isa::avx512, 2).direct_dy);
  Case hf32 = c;
  hf32.hf32 = true;  // rounding on the way in
  EXPECT_FALSE(cpu::gemm_config(problem_of(hf32), cpu, Isa::avx512, 2).direct_dy);
  const Case bf16 = with_dtype(c, DType::bf16);
  EXPECT_FALSE(cpu::gemm_config(problem_of(bf16), cpu, Isa::avx512, 2).direct_dy);  // widened to fp32
  if (cpu_supports(Isa::avx512_bf16)) {
    const auto pairs = cpu::gemm_config(problem_of(bf16), cpu, Isa::avx512_bf16, 2);
    EXPECT_TRUE(pairs.bf16);
    EXPECT_TRUE(pairs.direct_dy) << pairs.describe();
  }
}

TEST_F(GemmConfigTest, WTapsFuseOnlyWhenTheirDyPixelsAreConsecutive) {
  Case c;
  c.Cin = c.Cout = 16;
  c.kernel = {1, 1, 3};
  const CpuModel cpu = host_cpu_model();
  EXPECT_TRUE(cpu::gemm_config(problem_of(c), cpu, Isa::avx512, 2).fuse_w);
  Case dilated = c;
  dilated.dilation = {1, 1, 2};  // stride 1: taps two dy pixels apart
  EXPECT_FALSE(cpu::gemm_config(problem_of(dilated), cpu, Isa::avx512, 2).fuse_w);
  Case strided = dilated;
  strided.stride = {1, 1, 2};  // dilation divides stride: each phase's taps are adjacent again
  EXPECT_TRUE(cpu::gemm_config(problem_of(strided), cpu, Isa::avx512, 2).fuse_w);
  cpu::GemmTuning off;
  off.fuse_w = false;
  EXPECT_FALSE(cpu::gemm_config(problem_of(c), cpu, Isa::avx512, 2, off).fuse_w);
}

// Row tasks run D inner where only D taps share dy rows: a kernel one row tall in H and taller in D. Not
// where AMX row tasks take a window of dy planes per thread, which needs a plane's rows in turn: a 3 x 1 x 1
// kernel over 128 channels on rows of 256 pixels (as merged rows are), on two threads; one thread takes no
// window, and D inner again.
TEST_F(GemmConfigTest, RowTasksRunDInnerWhereOnlyDTapsShareDyRows) {
  Case c;
  c.Cin = c.Cout = 16;
  c.kernel = {3, 1, 1};
  c.pad_front = c.pad_back = {1, 0, 0};
  const CpuModel cpu = host_cpu_model();
  EXPECT_TRUE(cpu::gemm_config(problem_of(c), cpu, Isa::avx512, 2).d_inner);
  Case rows = with_dtype(c, DType::bf16);
  rows.Cin = rows.Cout = 128;
  rows.in = {8, 4, 256};
  const auto amx = cpu::gemm_config(problem_of(rows), with_l2(2 << 20), Isa::amx_bf16, 2);
  ASSERT_FALSE(amx.flat || amx.plane_mode) << amx.describe();
  EXPECT_TRUE(amx.dy_window) << amx.describe();
  EXPECT_FALSE(amx.d_inner) << amx.describe();
  const auto one_thread = cpu::gemm_config(problem_of(rows), with_l2(2 << 20), Isa::amx_bf16, 1);
  EXPECT_FALSE(one_thread.dy_window) << one_thread.describe();
  EXPECT_TRUE(one_thread.d_inner) << one_thread.describe();
  for (const std::array<std::int64_t, 3>& kernel :
       {std::array<std::int64_t, 3>{3, 3, 1}, std::array<std::int64_t, 3>{1, 1, 3},
        std::array<std::int64_t, 3>{1, 1, 1}}) {
    Case other = c;
    other.kernel = kernel;
    other.pad_front = other.pad_back = {0, 0, 0};
    EXPECT_FALSE(cpu::gemm_config(problem_of(other), cpu, Isa::avx512, 2).d_inner)
        << kernel[0] << "x" << kernel[1] << "x" << kernel[2];
  }
  cpu::GemmTuning planes;
  planes.plane = 1;
  EXPECT_FALSE(cpu::gemm_config(problem_of(c), cpu, Isa::avx512, 2, planes).d_inner);
}

// fp32 AVX-512 tiles of 1- and 2-vector blocks share a (kd, kh) pair's W taps where some W phase has 2 or 3
// taps and every phase's taps are one dy pixel apart, with tiles as wide as the narrowest table allows; not
// with 4 taps in a phase, one tap everywhere, taps two pixels apart, 3-vector blocks, bf16 pairs, AVX2, or
// when tuned off.
TEST_F(GemmConfigTest, WTapsShareDyLoadsWhereTheTilesExist) {
  Case c;
  c.Cin = c.Cout = 32;
  c.kernel = {1, 1, 3};
  CpuModel cpu = host_cpu_model();
  cpu.shared_w_over_wide = false;  // blocks as wide as the kernel set prefers (the test below: narrowed)
  const auto config = [&](const Case& k, Isa isa = Isa::avx512, const cpu::GemmTuning& t = {}) {
    return cpu::gemm_config(problem_of(k), cpu, isa, 2, t);
  };
  const auto shared = config(c);
  EXPECT_TRUE(shared.share_w) << shared.describe();
  EXPECT_EQ(shared.nv, 2);
  EXPECT_EQ(shared.max_m[1], 14);
  EXPECT_EQ(shared.max_m[2], 10);
  EXPECT_NE(shared.describe().find("W taps sharing dy loads"), std::string::npos);
  const auto taps = [&](std::int64_t kw, std::int64_t sw, std::int64_t dw) {
    Case k = c;
    k.kernel = {1, 1, kw};
    k.stride = {1, 1, sw};
    k.dilation = {1, 1, dw};
    k.in = {5, 5, 15};
    return config(k).share_w;
  };
  EXPECT_TRUE(taps(2, 1, 1));   // one phase of 2
  EXPECT_TRUE(taps(3, 2, 1));   // phases of 2 and 1
  EXPECT_TRUE(taps(4, 2, 1));   // 2 and 2
  EXPECT_TRUE(taps(3, 2, 2));   // 3 and none: dilation equal to the stride
  EXPECT_FALSE(taps(7, 2, 1));  // 4 and 3
  EXPECT_FALSE(taps(5, 1, 1));  // 5
  EXPECT_FALSE(taps(3, 3, 1));  // 1 each: nothing to share
  EXPECT_FALSE(taps(1, 1, 1));
  EXPECT_FALSE(taps(3, 1, 2));  // two dy pixels apart
  Case wide = c;
  wide.Cin = 48;  // 3 vectors
  EXPECT_FALSE(config(wide).share_w);
  cpu::GemmTuning two;
  two.nv = 2;
  EXPECT_TRUE(config(wide, Isa::avx512, two).share_w);  // blocks of 2 + 1
  cpu::GemmTuning off;
  off.share_w = false;
  EXPECT_FALSE(config(c, Isa::avx512, off).share_w);
  EXPECT_EQ(config(c, Isa::avx512, off).max_m[2], 14);
  Case pairs = with_dtype(c, DType::bf16);
  if (cpu_supports(Isa::avx512_bf16)) {
    EXPECT_FALSE(config(pairs, Isa::avx512_bf16).share_w);
  }
  EXPECT_TRUE(config(pairs).share_w);  // bf16 widened to fp32
  if (cpu_supports(Isa::avx2)) {
    EXPECT_FALSE(config(c, Isa::avx2).share_w);
  }
}

// Row tiles store y uncached only where they write it directly (fp32, contiguous channels) and its pixels
// are whole 64-byte lines, or where a channel-first fp32 y is stored from staged rows by AVX-512; and y is
// over twice the threads' L2 together.
TEST_F(GemmConfigTest, TilesStoreUncachedIntoAnFp32YLargerThanTheL2s) {
  Case c;
  c.Cin = 64;
  c.Cout = 16;         // a small filter: row tasks, not planes
  c.in = {8, 32, 32};  // 2 MiB of fp32 y
  const Problem p = problem_of(c);
  EXPECT_FALSE(cpu::gemm_config(p, with_l2(1 << 20), Isa::avx512, 2).uncached_y);  // 4 MiB of L2
  EXPECT_TRUE(cpu::gemm_config(p, with_l2(512 << 10), Isa::avx512, 1).uncached_y);
  EXPECT_TRUE(cpu::gemm_config(p, with_l2(256 << 10), Isa::avx512, 2).uncached_y);
  cpu::GemmTuning planes;  // plane tasks write channel-last y in place too
  planes.plane = 1;
  EXPECT_TRUE(cpu::gemm_config(p, with_l2(256 << 10), Isa::avx512, 2, planes).uncached_y);
  cpu::GemmTuning never;
  never.uncached_y = 0;
  EXPECT_FALSE(cpu::gemm_config(p, with_l2(256 << 10), Isa::avx512, 2, never).uncached_y);
  Case ncdhw = c;  // y staged a row at a time, stored per channel in runs of 16 pixels: those that are lines
  ncdhw.data_format = Layout::NCDHW;
  EXPECT_TRUE(cpu::gemm_config(problem_of(ncdhw), with_l2(256 << 10), Isa::avx512, 2).uncached_y);
  EXPECT_FALSE(cpu::gemm_config(problem_of(ncdhw), with_l2(1 << 20), Isa::avx512, 2).uncached_y);
  if (cpu_supports(Isa::avx2)) {  // AVX2 would store 32-byte halves of lines: plainly there
    EXPECT_FALSE(cpu::gemm_config(problem_of(ncdhw), with_l2(256 << 10), Isa::avx2, 2).uncached_y);
  }
  ncdhw.Cin = 72;  // channels need not be whole lines there
  EXPECT_TRUE(cpu::gemm_config(problem_of(ncdhw), with_l2(256 << 10), Isa::avx512, 2).uncached_y);
  const Case bf16_y = with_dtype(c, DType::bf16);
  EXPECT_FALSE(cpu::gemm_config(problem_of(bf16_y), with_l2(256 << 10), Isa::avx512, 2).uncached_y);
  cpu::GemmTuning always;
  always.uncached_y = 1;
  EXPECT_NE(
      cpu::gemm_config(p, with_l2(1 << 20), Isa::avx512, 2, always).describe().find("y stored uncached"),
      std::string::npos);
  Case partial_lines = c;  // 72 channels: pixels 288 bytes apart, not whole lines
  partial_lines.Cin = 72;
  EXPECT_FALSE(
      cpu::gemm_config(problem_of(partial_lines), with_l2(256 << 10), Isa::avx512, 2, always).uncached_y);
}

// AVX2 (decided from its kernel table, without running it): 2-vector blocks of 6 x 2 tiles, 4-vector blocks
// of 3 x 4 tiles only where a tile's longest reduction (the most taps of a phase x output channels) is at
// most 256 steps.
TEST(GemmConfigAvx2, WideBlocksOnlyForShortReductions) {
  if (!cpu_supports(Isa::avx2)) GTEST_SKIP() << "CPU lacks avx2 (its kernel table is built with it)";
  Case c;  // suite shape c: 3 output channels, 3 x 3 x 3 taps: 81 steps
  c.Cin = 64;
  c.Cout = 3;
  c.in = {3, 8, 8};
  const auto blocks = [&](const Case& k) {
    const auto config = cpu::gemm_config(problem_of(k), host_cpu_model(), Isa::avx2, 2);
    return std::pair{config.nv * config.lanes, config.max_m[config.nv]};
  };
  EXPECT_EQ(blocks(c), (std::pair{32, 3}));
  c.Cout = 10;  // 270 steps
  EXPECT_EQ(blocks(c), (std::pair{16, 6}));
  Case up = c;  // a U-Net up-sampling: kernel 2, stride 2, one tap per phase: steps = output channels
  up.kernel = {2, 2, 2};
  up.stride = {2, 2, 2};
  up.Cout = 256;
  EXPECT_EQ(blocks(up), (std::pair{32, 3}));
  up.Cout = 257;
  EXPECT_EQ(blocks(up), (std::pair{16, 6}));
  Case dilated = c;  // stride 2, dilation 2: every tap of an axis falls in one phase, 27 taps
  dilated.in = {9, 9, 9};
  dilated.stride = dilated.dilation = {2, 2, 2};
  dilated.Cout = 10;  // 270 steps, though kernel / stride would say 80
  EXPECT_EQ(blocks(dilated), (std::pair{16, 6}));
  dilated.Cout = 9;  // 243
  EXPECT_EQ(blocks(dilated), (std::pair{32, 3}));
  up.Cin = 20;  // no wider than the channels
  up.Cout = 8;
  EXPECT_EQ(blocks(up), (std::pair{24, 4}));
  cpu::GemmTuning narrow;  // tuning still picks any width the kernels offer
  narrow.nv = 1;
  EXPECT_EQ(cpu::gemm_config(problem_of(up), host_cpu_model(), Isa::avx2, 2, narrow).nv, 1);
}

// Strided (NCDHW) fp32 dy is read in place only where the lines a tile reads, one per channel of each dy row
// its taps reach, fit in L1: 3 x 3 (kd, kh) taps x 64 channels x 64 bytes = 36 KiB.
TEST(GemmConfigAvx2, StridedDyInPlaceOnlyWhereATilesLinesFitL1) {
  if (!cpu_supports(Isa::avx2)) GTEST_SKIP() << "CPU lacks avx2 (its kernel table is built with it)";
  Case c;
  c.data_format = Layout::NCDHW;
  c.Cin = 16;
  c.Cout = 64;
  c.in = {5, 9, 11};  // dy channels 3 x 7 x 9 floats apart: no 4 KiB aliasing
  const auto in_place = [&](const Case& k, std::int64_t l1) {
    CpuModel cpu = host_cpu_model();
    cpu.l1d_bytes = l1;
    return cpu::gemm_config(problem_of(k), cpu, Isa::avx2, 2).direct_dy;
  };
  EXPECT_FALSE(in_place(c, 32 << 10));
  EXPECT_TRUE(in_place(c, 48 << 10));
  Case strided = c;  // stride 2: at most 2 x 2 (kd, kh) taps per phase, 16 KiB
  strided.stride = {2, 2, 2};
  EXPECT_TRUE(in_place(strided, 32 << 10));
  EXPECT_FALSE(in_place(strided, 8 << 10));
}

TEST_F(GemmConfigTest, TuningOverridesAndDescription) {
  Case c;
  c.Cin = c.Cout = 64;
  cpu::GemmTuning t;
  t.nv = 2;
  t.max_m = 3;
  t.plane = 1;
  t.dh_group = 2;
  const auto config = cpu::gemm_config(problem_of(c), host_cpu_model(), Isa::avx512, 2, t);
  EXPECT_EQ(config.nv, 2);
  EXPECT_EQ(config.max_m[2], 3);
  EXPECT_TRUE(config.plane_mode);
  EXPECT_EQ(config.dh_group, 2);
  const std::string d = config.describe();
  for (const char* part :
       {"channel blocks of 32", "tiles up to 3 pixels", "tap groups of up to 2", "L2 budgets"})
    EXPECT_NE(d.find(part), std::string::npos) << d;
}

}  // namespace
}  // namespace conv3d_dx::testing

namespace conv3d_dx::testing {
namespace {

// On CPUs whose table prefers shared W tiles (Intel's), fp32 blocks narrow to 2 vectors where a phase's W
// taps can share their dy loads, unless the W phases are shorter than the shared tiles, a W phase has a
// single tap or the output channels are fewer than 16; never for bf16 pairs, when the blocks are tuned, or on
// CPUs that do not prefer it.
TEST_F(GemmConfigTest, NarrowBlocksShareWTapsWhereTheCpuPrefersIt) {
  Case a;  // suite a's kind: 64 channels, 3 x 3 x 3, stride 1
  a.Cin = a.Cout = 64;
  a.in = {3, 6, 24};
  a.pad_front = a.pad_back = {1, 1, 1};
  CpuModel intel = host_cpu_model(), other = intel;
  intel.shared_w_over_wide = true;
  other.shared_w_over_wide = false;
  const auto config = [](const Case& k, const CpuModel& cpu, Isa isa = Isa::avx512,
                         const cpu::GemmTuning& t = {}) {
    return cpu::gemm_config(problem_of(k), cpu, isa, 2, t);
  };
  const auto narrowed = config(a, intel);
  EXPECT_EQ(narrowed.nv, 2) << narrowed.describe();
  EXPECT_TRUE(narrowed.share_w) << narrowed.describe();
  const auto wide = config(a, other);
  EXPECT_EQ(wide.nv, 4) << wide.describe();
  EXPECT_FALSE(wide.share_w) << wide.describe();
  Case stride2 = a;  // phases of 2 and 1 taps, 12 pixels each: the single-tap phase keeps wide blocks
  stride2.stride = {2, 2, 2};
  EXPECT_EQ(config(stride2, intel).nv, 4);
  Case k4s2 = stride2;  // every phase 2 taps
  k4s2.kernel = {4, 4, 4};
  EXPECT_EQ(config(k4s2, intel).nv, 2);
  Case short_rows = a;  // W phases of 6 pixels: narrower than the shared tiles
  short_rows.in = {3, 6, 6};
  EXPECT_EQ(config(short_rows, intel).nv, 4);
  Case few = a;  // 8 output channels per tap
  few.Cout = 8;
  EXPECT_EQ(config(few, intel).nv, 4);
  Case one_tap = a;  // no phase with more than one W tap: nothing to share
  one_tap.kernel = {3, 3, 1};
  one_tap.pad_front = one_tap.pad_back = {1, 1, 0};
  EXPECT_EQ(config(one_tap, intel).nv, 4);
  cpu::GemmTuning four;
  four.nv = 4;
  EXPECT_EQ(config(a, intel, Isa::avx512, four).nv, 4);
  cpu::GemmTuning off;
  off.share_w = false;
  EXPECT_EQ(config(a, intel, Isa::avx512, off).nv, 4);
  if (cpu_supports(Isa::avx512_bf16)) {
    const auto pairs = config(with_dtype(a, DType::bf16), intel, Isa::avx512_bf16);
    EXPECT_EQ(pairs.nv, 4);
    EXPECT_FALSE(pairs.share_w);
  }
  EXPECT_EQ(config(with_dtype(a, DType::bf16), intel).nv, 2);  // bf16 widened to fp32
  if (cpu_supports(Isa::avx2)) {
    EXPECT_FALSE(config(a, intel, Isa::avx2).share_w);
  }
}

}  // namespace
}  // namespace conv3d_dx::testing
