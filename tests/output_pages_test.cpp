// Mapping in a large output's pages before the engines write it (common/output_pages.hpp): absent pages
// are mapped in, no byte changes, pages already in memory are left alone, and only a dense y of 4 MiB or
// more is looked at.
#include "common/output_pages.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "conv3d_dx/conv3d_dx.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace conv3d_dx {
namespace {

#if defined(__linux__)

// Anonymous memory of `pages` pages, none of them touched. Without transparent huge pages of any size, so a
// write maps in its own page only (under THP "always" one write would map in a whole huge page).
struct Mapping {
  explicit Mapping(std::size_t pages) : bytes(pages * page()) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    data = p == MAP_FAILED ? nullptr : static_cast<unsigned char*>(p);
    if (data != nullptr) madvise(data, bytes, MADV_NOHUGEPAGE);
  }
  ~Mapping() {
    if (data != nullptr) munmap(data, bytes);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  static std::size_t page() { return static_cast<std::size_t>(sysconf(_SC_PAGESIZE)); }
  // Whether each page is in memory.
  std::vector<bool> resident() const {
    std::vector<unsigned char> v(bytes / page());
    EXPECT_EQ(mincore(data, bytes, v.data()), 0);
    std::vector<bool> r;
    for (unsigned char c : v) r.push_back((c & 1) != 0);
    return r;
  }
  std::size_t bytes;
  unsigned char* data;
};

// Whether the kernel maps pages in on request and mincore tells untouched pages from written ones (a
// sandbox kernel may report every page in memory).
bool kernel_populates() {
  if (!kernel_maps_in_pages()) return false;
  Mapping m(2);
  if (m.data == nullptr) return false;
  m.data[0] = 1;
  return m.resident() == std::vector<bool>{true, false};
}
constexpr const char* kNoPopulate =
    "the kernel does not map pages in on request (MADV_POPULATE_WRITE, Linux 5.14) or mincore does not tell "
    "untouched pages";

// On 1 to 3 threads (the name makes the ThreadSanitizer run take it).
TEST(OutputPages, MapsInAbsentPagesOnlyAndKeepsEveryByteOnOneToThreeThreads) {
  if (!kernel_populates()) GTEST_SKIP() << kNoPopulate;
  const std::size_t page = Mapping::page();
  for (int threads : {1, 2, 3}) {
    Mapping m(64);
    ASSERT_NE(m.data, nullptr);
    // Pages 3, 4, 10 and 40-63 written (a pattern); the rest, in runs 0-2, 5-9 and 11-39, absent.
    std::vector<bool> written(64, false);
    for (std::size_t p : {3, 4, 10}) written[p] = true;
    for (std::size_t p = 40; p < 64; ++p) written[p] = true;
    for (std::size_t p = 0; p < 64; ++p)
      if (written[p])
        for (std::size_t i = 0; i < page; ++i) m.data[p * page + i] = static_cast<unsigned char>(p * 7 + i);
    ASSERT_EQ(m.resident(), written);
    // A range that starts and ends inside pages takes those pages whole.
    const MapInCounts counts = map_in_pages(m.data + 100, m.bytes - 200, threads);
    EXPECT_EQ(counts.pages, 64);
    EXPECT_EQ(counts.absent, 3 + 5 + 29);
    if (threads == 1) {
      EXPECT_EQ(counts.requests, 3);
    }
    EXPECT_GE(counts.requests, 3);
    EXPECT_EQ(m.resident(), std::vector<bool>(64, true)) << threads << " threads";
    for (std::size_t p = 0; p < 64; ++p)
      for (std::size_t i = 0; i < page; ++i)
        ASSERT_EQ(m.data[p * page + i], written[p] ? static_cast<unsigned char>(p * 7 + i) : 0)
            << "page " << p << " byte " << i;
    // Nothing is absent any more: no request.
    const MapInCounts again = map_in_pages(m.data, m.bytes, threads);
    EXPECT_EQ(again.pages, 64);
    EXPECT_EQ(again.absent, 0);
    EXPECT_EQ(again.requests, 0);
  }
}

// A range longer than one mincore slice (4096 pages), its first page in memory and the rest absent: all of
// it mapped in, on 1 and 2 threads.
TEST(OutputPages, MapsInRangesLongerThanOneLook) {
  if (!kernel_populates()) GTEST_SKIP() << kNoPopulate;
  for (int threads : {1, 2}) {
    Mapping m(10000);
    ASSERT_NE(m.data, nullptr);
    m.data[0] = 1;
    const MapInCounts counts = map_in_pages(m.data, m.bytes, threads);
    EXPECT_EQ(counts.pages, 10000);
    EXPECT_EQ(counts.absent, 9999);
    EXPECT_EQ(m.resident(), std::vector<bool>(10000, true)) << threads << " threads";
  }
}

// fp32 NCDHW, 1 x 1 x 1 kernel, 16 channels, 2 images of 256 x 256 pixels (4 MiB each), the images
// `image_stride` elements apart.
constexpr std::int64_t kC = 16, kPixels = 256 * 256, kImage = kC * kPixels;
ProblemSpec pointwise_spec(const float* dy, const float* w, float* y, std::int64_t image_stride,
                           std::int64_t images = 2) {
  ProblemSpec spec;
  spec.attrs.input_size = {images, kC, 1, 256, 256};
  spec.attrs.data_format = Layout::NCDHW;
  spec.out_backprop = TensorView::contiguous(dy, DType::f32, Layout::NCDHW, {images, kC, 1, 256, 256});
  spec.filter = TensorView::contiguous(w, DType::f32, Layout::NCDHW, {kC, kC, 1, 1, 1});
  spec.y = TensorView::contiguous(y, DType::f32, Layout::NCDHW, {images, kC, 1, 256, 256});
  spec.y.strides = {image_stride, kPixels, kPixels, 256, 1};
  return spec;
}

// map_in_y for a spec's y, as Plan calls it.
MapInCounts map_in_spec(const ProblemSpec& spec) {
  return map_in_y(validate(spec), byte_extent("y", spec.y), 2);
}

// Which y map_in_y looks at: dense ones of 4 MiB or more (every page, the absent ones mapped in), not a
// smaller one nor a strided view.
TEST(OutputPages, MapsInDenseOutputsOfFourMebibytesOrMoreOnly) {
  if (!kernel_populates()) GTEST_SKIP() << kNoPopulate;
  static_assert(kImage * 4 == static_cast<std::int64_t>(kMapInMinBytes));
  const std::size_t page = Mapping::page(), image_pages = kImage * 4 / page;
  std::vector<float> dy(2 * kImage), w(kC * kC);
  Mapping memory(2 * image_pages + 8);
  ASSERT_NE(memory.data, nullptr);
  float* y = reinterpret_cast<float*>(memory.data);
  // One image, 4 MiB: looked at, every page absent.
  MapInCounts c = map_in_spec(pointwise_spec(dy.data(), w.data(), y, kImage, 1));
  EXPECT_EQ(c.pages, static_cast<std::int64_t>(image_pages));
  EXPECT_EQ(c.absent, static_cast<std::int64_t>(image_pages));
  // Two images 8 pages apart: strided, not looked at (the gap stays absent).
  const std::int64_t gap = static_cast<std::int64_t>(8 * page / 4);
  c = map_in_spec(pointwise_spec(dy.data(), w.data(), y, kImage + gap));
  EXPECT_EQ(c.pages, 0);
  EXPECT_FALSE(memory.resident()[image_pages + 4]);
  // Smaller than 4 MiB: a 255-row image, not looked at.
  ProblemSpec small = pointwise_spec(dy.data(), w.data(), y + kImage + gap, kImage, 1);
  small.attrs.input_size[3] = 255;
  small.out_backprop.shape[3] = 255;
  small.y.shape[3] = 255;
  small.y.strides = {kC * 255 * 256, 255 * 256, 255 * 256, 256, 1};
  small.out_backprop.strides = small.y.strides;
  c = map_in_spec(small);
  EXPECT_EQ(c.pages, 0);
  EXPECT_FALSE(memory.resident()[image_pages + 8]);
}

// Through Plan: into untouched memory the same bits as into memory in use, dense or strided, and a strided
// y's gap pages are never written, so stay absent.
TEST(OutputPages, PlanWritesTheSameBitsIntoUntouchedMemory) {
  if (!kernel_populates()) GTEST_SKIP() << kNoPopulate;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> dy(2 * kImage), w(kC * kC);
  for (float& v : dy) v = normal(rng);
  for (float& v : w) v = normal(rng);
  std::vector<float> expected(2 * kImage);
  conv3d_backprop_input(pointwise_spec(dy.data(), w.data(), expected.data(), kImage));

  const std::size_t page = Mapping::page(), image_bytes = kImage * 4;
  Mapping dense(2 * image_bytes / page);
  ASSERT_NE(dense.data, nullptr);
  conv3d_backprop_input(pointwise_spec(dy.data(), w.data(), reinterpret_cast<float*>(dense.data), kImage));
  EXPECT_EQ(std::memcmp(dense.data, expected.data(), 2 * image_bytes), 0);
  const std::size_t gap_pages = 8, gap_floats = gap_pages * page / 4;
  Mapping strided(2 * image_bytes / page + gap_pages);
  ASSERT_NE(strided.data, nullptr);
  float* y = reinterpret_cast<float*>(strided.data);
  conv3d_backprop_input(
      pointwise_spec(dy.data(), w.data(), y, kImage + static_cast<std::int64_t>(gap_floats)));
  const std::vector<bool> resident = strided.resident();
  for (std::size_t p = image_bytes / page; p < image_bytes / page + gap_pages; ++p)
    EXPECT_FALSE(resident[p]) << "gap page " << p;
  EXPECT_EQ(std::memcmp(y, expected.data(), image_bytes), 0);
  EXPECT_EQ(std::memcmp(y + kImage + gap_floats, expected.data() + kImage, image_bytes), 0);
}

#else

TEST(OutputPages, MapsInNothingOffLinux) {
  EXPECT_FALSE(kernel_maps_in_pages());
  int x = 0;
  EXPECT_EQ(map_in_pages(&x, sizeof x, 2).pages, 0);
}

#endif

}  // namespace
}  // namespace conv3d_dx
