// Mapping in a large output's pages before the engines write it (common/output_pages.hpp): absent pages
// are mapped in, no byte changes, pages already in memory are left alone, and a strided y's gaps are not
// touched.
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

#if defined(__linux__) && defined(MADV_POPULATE_WRITE)

// Anonymous memory of `pages` pages, none of them touched.
struct Mapping {
  explicit Mapping(std::size_t pages) : bytes(pages * page()) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    data = p == MAP_FAILED ? nullptr : static_cast<unsigned char*>(p);
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

// Whether this kernel takes MADV_POPULATE_WRITE (Linux 5.14 on).
bool kernel_populates() {
  Mapping m(1);
  return m.data != nullptr && madvise(m.data, m.bytes, MADV_POPULATE_WRITE) == 0;
}

TEST(OutputPages, MapsInAbsentPagesOnlyAndKeepsEveryByte) {
  if (!kernel_populates()) GTEST_SKIP() << "the kernel refuses MADV_POPULATE_WRITE (before Linux 5.14)";
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
  if (!kernel_populates()) GTEST_SKIP() << "the kernel refuses MADV_POPULATE_WRITE (before Linux 5.14)";
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

// fp32 NCDHW y, 1 x 1 x 1 kernel, 2 images of 4 MiB each (y at least kMapInMinBytes).
ProblemSpec pointwise_spec(const std::vector<float>& dy, const std::vector<float>& w, float* y,
                           std::int64_t image_stride) {
  constexpr std::int64_t C = 16, S = 256 * 256;
  ProblemSpec spec;
  spec.attrs.input_size = {2, C, 1, 256, 256};
  spec.attrs.data_format = Layout::NCDHW;
  spec.out_backprop = TensorView::contiguous(dy.data(), DType::f32, Layout::NCDHW, {2, C, 1, 256, 256});
  spec.filter = TensorView::contiguous(w.data(), DType::f32, Layout::NCDHW, {C, C, 1, 1, 1});
  spec.y = TensorView::contiguous(y, DType::f32, Layout::NCDHW, {2, C, 1, 256, 256});
  spec.y.strides = {image_stride, S, S, 256, 1};
  return spec;
}

TEST(OutputPages, PlanMapsInADenseYAndLeavesAStridedYsGapsAlone) {
  if (!kernel_populates()) GTEST_SKIP() << "the kernel refuses MADV_POPULATE_WRITE (before Linux 5.14)";
  constexpr std::int64_t C = 16, S = 256 * 256, image = C * S;
  static_assert(image * 4 >= static_cast<std::int64_t>(kMapInMinBytes));
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> dy(2 * image), w(C * C);
  for (float& v : dy) v = normal(rng);
  for (float& v : w) v = normal(rng);
  std::vector<float> expected(2 * image);
  conv3d_backprop_input(pointwise_spec(dy, w, expected.data(), image));

  const std::size_t page = Mapping::page(), image_bytes = image * 4;
  // Dense: into untouched memory, the same bits.
  Mapping dense(2 * image_bytes / page);
  ASSERT_NE(dense.data, nullptr);
  conv3d_backprop_input(pointwise_spec(dy, w, reinterpret_cast<float*>(dense.data), image));
  EXPECT_EQ(std::memcmp(dense.data, expected.data(), 2 * image_bytes), 0);
  // Strided: the images 8 pages apart; the pages between them are never written, so stay absent.
  const std::size_t gap_pages = 8, gap_floats = gap_pages * page / 4;
  Mapping strided((2 * image_bytes) / page + gap_pages);
  ASSERT_NE(strided.data, nullptr);
  float* y = reinterpret_cast<float*>(strided.data);
  conv3d_backprop_input(pointwise_spec(dy, w, y, image + static_cast<std::int64_t>(gap_floats)));
  const std::vector<bool> resident = strided.resident();
  for (std::size_t p = image_bytes / page; p < image_bytes / page + gap_pages; ++p)
    EXPECT_FALSE(resident[p]) << "gap page " << p;
  EXPECT_EQ(std::memcmp(y, expected.data(), image_bytes), 0);
  EXPECT_EQ(std::memcmp(y + image + gap_floats, expected.data() + image, image_bytes), 0);
}

#else

TEST(OutputPages, MapsInAbsentPagesOnlyAndKeepsEveryByte) {
  GTEST_SKIP() << "mapping pages in needs Linux's MADV_POPULATE_WRITE";
}

#endif

}  // namespace
}  // namespace conv3d_dx
