// The overlap rule (src/problem/overlap.hpp) on the C++ API: y sharing a byte with out_backprop or the filter
// is refused by validate(spec), conv3d_backprop_input, Plan::execute and Plan::execute_packed on every
// engine, with an Error naming y, the other tensor and both byte ranges, and nothing is written. Tensors
// that only touch are fine, and so is y over a filter that execute_packed no longer reads.
#include "problem/overlap.hpp"

#include <algorithm>
#include <cstring>

#include "common/engine.hpp"
#include "support/testing.hpp"

namespace conv3d_dx::testing {
namespace {

constexpr Isa kEveryIsa[] = {Isa::avx512_bf16, Isa::avx512, Isa::avx2, Isa::portable, Isa::reference};

// One buffer holding dy, the filter and y as contiguous views (in data_format / NCDHW) at element offsets
// chosen by the test; every byte starts as a pattern so writes are visible.
struct Shared {
  Case c;
  std::vector<unsigned char> bytes;
  ProblemSpec spec;

  Shared(const Case& cs, std::int64_t dy_at, std::int64_t w_at, std::int64_t y_at) : c(cs) {
    std::mt19937_64 rng(5);
    Instance inst = instantiate(c, rng, Fill::small_integers);  // the spec's shapes and attributes
    spec = inst.spec;
    const std::size_t size = dtype_size(c.dtype);
    const std::int64_t total =
        std::max({dy_at + inst.dy.elements(), w_at + inst.filter.elements(), y_at + inst.y.elements()});
    bytes.assign(static_cast<std::size_t>(total) * size, 0x11);
    spec.out_backprop = TensorView::contiguous(bytes.data() + dy_at * static_cast<std::int64_t>(size),
                                               c.dtype, inst.dy.view.layout, inst.dy.view.shape);
    spec.filter = TensorView::contiguous(bytes.data() + w_at * static_cast<std::int64_t>(size), c.dtype,
                                         inst.filter.view.layout, inst.filter.view.shape);
    spec.y = TensorView::contiguous(bytes.data() + y_at * static_cast<std::int64_t>(size), c.dtype,
                                    inst.y.view.layout, inst.y.view.shape);
    // dy and the filter hold small integers: copy them in (where they overlap, the later one wins).
    std::memcpy(spec.out_backprop.data, inst.dy.view.data,
                static_cast<std::size_t>(inst.dy.elements()) * size);
    std::memcpy(spec.filter.data, inst.filter.view.data,
                static_cast<std::size_t>(inst.filter.elements()) * size);
  }
};

std::int64_t dy_elements(const Case& c) { return c.N * c.Cout * c.out()[0] * c.out()[1] * c.out()[2]; }
std::int64_t w_elements(const Case& c) {
  return c.Cout * (c.Cin / c.groups) * c.kernel[0] * c.kernel[1] * c.kernel[2];
}
std::int64_t y_elements(const Case& c) { return c.N * c.Cin * c.in[0] * c.in[1] * c.in[2]; }

Case small_case(DType t) {
  Case c = with_dtype(Case{}, t);
  c.Cin = 4;
  c.Cout = 6;
  c.in = {3, 4, 5};
  c.kernel = {2, 2, 2};
  c.pad_front = {1, 0, 1};
  return c;
}

// Expects `call` to throw an invalid_argument Error about y overlapping `other`, with nothing written.
template <class F>
void expect_refused(Shared& s, const char* other, F&& call) {
  const std::vector<unsigned char> before = s.bytes;
  try {
    call();
    ADD_FAILURE() << "accepted y overlapping " << other;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_EQ(e.parameter(), "y");
    const std::string what = e.what();
    EXPECT_NE(what.find("y (bytes 0x"), std::string::npos) << what;
    EXPECT_NE(what.find(std::string("overlaps ") + other + " (bytes 0x"), std::string::npos) << what;
    EXPECT_NE(what.find("must not share memory"), std::string::npos) << what;
  }
  EXPECT_TRUE(s.bytes == before) << "memory changed although the call was refused";
}

// y starting inside dy, ending inside dy, and covering all of it; and the same against the filter.
TEST(Overlap, YOverlappingAnInputIsRefusedByEveryFrontEndAndEngine) {
  for (DType t : {DType::f32, DType::bf16, DType::hif8}) {
    const Case c = small_case(t);
    const std::int64_t dy_n = dy_elements(c), w_n = w_elements(c);
    struct Layout3 {
      const char* other;
      std::int64_t dy_at, w_at, y_at;
    };
    const std::int64_t far = 4 * (dy_n + w_n) + 1000;
    const Layout3 layouts[] = {
        {"out_backprop", 0, far, dy_n - 1},           // y's first element on dy's last
        {"out_backprop", far / 2, far, far / 2 - 5},  // y's end inside dy
        {"out_backprop", 10, far, 0},                 // y starts before dy
        {"filter", far, 0, w_n / 2},                  // y starts in the middle of the filter
        {"filter", far, 3, 0},                        // y covers all of the filter
    };
    for (const Layout3& l : layouts) {
      SCOPED_TRACE(std::string(to_string(t)) + ", y over " + l.other + " at " + std::to_string(l.y_at));
      Shared s(c, l.dy_at, l.w_at, l.y_at);
      expect_refused(s, l.other, [&] { validate(s.spec); });
      expect_refused(s, l.other, [&] { conv3d_backprop_input(s.spec); });
      // A Problem (validated without data) planned for each engine, then given the overlapping pointers.
      ProblemSpec no_data = s.spec;
      no_data.out_backprop.data = no_data.filter.data = no_data.y.data = nullptr;
      const Problem p = validate(no_data);
      for (Isa isa : kEveryIsa) {
        if (isa != Isa::reference && !cpu_supports(isa)) continue;
        Options o;
        o.isa = isa;
        Plan plan(p, o);
        SCOPED_TRACE(plan.engine_name());
        expect_refused(s, l.other,
                       [&] { plan.execute(s.spec.out_backprop.data, s.spec.filter.data, s.spec.y.data); });
        if (std::string(l.other) == "out_backprop") {
          plan.pack_filter(s.spec.filter.data);
          expect_refused(s, l.other, [&] { plan.execute_packed(s.spec.out_backprop.data, s.spec.y.data); });
        }
      }
    }
  }
}

// Tensors that touch (y right after dy, the filter right after y) share no byte: accepted and exact.
TEST(Overlap, AdjacentTensorsAreAccepted) {
  for (DType t : {DType::f32, DType::bf16}) {
    const Case c = small_case(t);
    const std::int64_t dy_n = dy_elements(c), y_n = y_elements(c);
    for (Isa isa : kEveryIsa) {
      if (isa != Isa::reference && !cpu_supports(isa)) continue;
      Shared s(c, 0, dy_n + y_n, dy_n);
      std::mt19937_64 rng(5);
      Instance separate = instantiate(c, rng, Fill::small_integers);  // the same data in its own buffers
      Options o;
      o.isa = isa;
      ASSERT_NO_THROW(conv3d_backprop_input(s.spec, o)) << to_string(isa);
      conv3d_backprop_input(separate.spec, o);
      EXPECT_EQ(
          std::memcmp(s.spec.y.data, separate.y.view.data, static_cast<std::size_t>(y_n) * dtype_size(t)), 0)
          << to_string(isa);
    }
  }
}

// execute_packed reads only the packed copy of the filter, so y may then take the filter's memory.
TEST(Overlap, ExecutePackedMayWriteOverTheCallersFilter) {
  const Case c = small_case(DType::f32);
  const std::int64_t dy_n = dy_elements(c);
  Shared s(c, 0, dy_n, dy_n);  // y and the filter start at the same byte
  std::mt19937_64 rng(5);
  Instance separate = instantiate(c, rng, Fill::small_integers);
  conv3d_backprop_input(separate.spec);
  ProblemSpec no_data = s.spec;
  no_data.out_backprop.data = no_data.filter.data = no_data.y.data = nullptr;
  Plan plan(validate(no_data));
  plan.pack_filter(s.spec.filter.data);
  plan.execute_packed(s.spec.out_backprop.data, s.spec.y.data);
  EXPECT_EQ(
      std::memcmp(s.spec.y.data, separate.y.view.data, static_cast<std::size_t>(separate.y.elements()) * 4),
      0);
}

// Byte extents: first byte of the first element to the last byte of the last, gaps included; empty for no
// data or no elements; beyond the address space is an overflow error.
TEST(Overlap, ByteExtentsAndTheRule) {
  alignas(8) unsigned char buffer[64] = {};
  const std::int64_t shape[] = {2, 3}, strides[] = {10, 2};
  const ByteExtent e = byte_extent("t", buffer, 2, shape, strides, 2);
  EXPECT_EQ(e.end - e.begin, (1 * 10 + 2 * 2 + 1) * 2u);
  EXPECT_TRUE(byte_extent("t", nullptr, 2, shape, strides, 2).empty());
  const std::int64_t none[] = {2, 0};
  EXPECT_TRUE(byte_extent("t", buffer, 2, none, strides, 2).empty());
  const std::int64_t huge[] = {INT64_MAX / 4};
  const std::int64_t one[] = {1};
  EXPECT_THROW(byte_extent("t", buffer, 8, huge, one, 1), Error);
  // Touching is fine, one shared byte is not; the written tensor is the one named.
  const ByteExtent a{100, 200}, b{200, 300}, c{199, 201};
  EXPECT_NO_THROW(require_disjoint({"a", a}, {{"b", b}}));
  EXPECT_NO_THROW(require_disjoint({"a", a}, {{"empty", ByteExtent{150, 150}}}));
  try {
    require_disjoint({"out", c}, {{"b", b}, {"a", a}});
    ADD_FAILURE() << "accepted";
  } catch (const Error& err) {
    EXPECT_EQ(err.parameter(), "out");
    EXPECT_NE(std::string(err.what()).find("out (bytes 0xc7 to 0xc8) overlaps b (bytes 0xc8 to 0x12b)"),
              std::string::npos)
        << err.what();
  }
}

}  // namespace
}  // namespace conv3d_dx::testing
