// gradWeight (outputMask[1]) and gradBias (outputMask[2]) of aclnnConvolutionBackward. Results are checked
// against a scatter formulation written here: every dy element is pushed through every tap it reaches, in
// float64, the opposite loop order to the library's per-element gathers. The data keep every sum exact in
// fp32 (checked), so the only rounding is the final one and results must match bitwise.
#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "acl_test_util.hpp"
#include "backward/backward.hpp"

namespace {

using namespace acl_test;

// A 1-D tensor whose elements lie `stride` apart after `offset` elements; everything else holds canaries.
class Vector1D {
 public:
  Vector1D(std::int64_t n, aclDataType dtype, std::int64_t stride = 1, std::int64_t offset = 0,
           aclFormat format = ACL_FORMAT_ND)
      : n_(n), stride_(stride), offset_(offset), dtype_(dtype) {
    storage_elements_ = offset_ + (n_ > 0 ? (n_ - 1) * stride_ + 1 : 0) + 1;  // one canary after the end
    storage_.assign(static_cast<std::size_t>(storage_elements_) * element_size(dtype_), HostTensor::kCanary);
    tensor_ =
        aclCreateTensor(&n_, 1, dtype_, &stride_, offset_, format, &storage_elements_, 1, storage_.data());
    EXPECT_NE(tensor_, nullptr) << aclGetRecentErrMsg();
  }
  ~Vector1D() { EXPECT_EQ(aclDestroyTensor(tensor_), ACLNN_SUCCESS); }
  Vector1D(const Vector1D&) = delete;
  Vector1D& operator=(const Vector1D&) = delete;

  aclTensor* get() const { return tensor_; }
  std::int64_t elements() const { return n_; }
  std::uint32_t code(std::int64_t i) const {
    std::uint32_t c = 0;
    std::memcpy(&c,
                storage_.data() + (offset_ + i * stride_) * static_cast<std::int64_t>(element_size(dtype_)),
                element_size(dtype_));
    return c;
  }
  // Bytes outside the view that differ from the canary.
  std::int64_t touched_gaps() const {
    std::int64_t n = 0;
    const std::size_t es = element_size(dtype_);
    for (std::int64_t e = 0; e < storage_elements_; ++e) {
      const std::int64_t rel = e - offset_;
      if (rel >= 0 && (stride_ == 0 ? rel == 0 : rel % stride_ == 0 && rel / stride_ < n_)) continue;
      for (std::size_t b = 0; b < es; ++b)
        n += storage_[static_cast<std::size_t>(e) * es + b] != HostTensor::kCanary;
    }
    return n;
  }
  bool untouched() const {
    for (unsigned char b : storage_)
      if (b != HostTensor::kCanary) return false;
    return true;
  }

 private:
  std::int64_t n_, stride_, offset_;
  aclDataType dtype_;
  std::int64_t storage_elements_ = 0;
  std::vector<unsigned char> storage_;
  aclTensor* tensor_ = nullptr;
};

bool untouched(const HostTensor& t) {
  for (std::int64_t i = 0; i < t.elements(); ++i) {
    const std::uint32_t all = 0x5A5A5A5Au;
    const std::uint32_t mask =
        element_size(t.dtype()) == 4 ? 0xFFFFFFFFu : (1u << (8 * element_size(t.dtype()))) - 1;
    if (t.code(i) != (all & mask)) return false;
  }
  return t.touched_gaps() == 0;
}

// Which input carries bits that input rounding (HF32, fp16) changes; the other holds small integers.
enum class Fraction { none, x, dy };

struct GradCase {
  Case c;
  std::array<bool, 3> mask{true, true, true};
  aclDataType gw_type = ACL_DT_UNDEFINED;  // default: weight's dtype
  Placement gw_place;
  std::int64_t gb_stride = 1, gb_offset = 0;
  Fraction fraction = Fraction::none;

  aclDataType weight_gradient_type() const { return gw_type == ACL_DT_UNDEFINED ? c.w_type : gw_type; }
};

// All tensors of a case with data: small integers in [-2, 2], or for Fraction multiples of 1/1024 up to 4.
struct GradTensors {
  Tensors t;
  HostTensor gw;
  Vector1D gb;
  explicit GradTensors(const GradCase& g)
      : t(g.c),
        gw(g.c.w_dims(), g.weight_gradient_type(), g.gw_place),
        gb(g.c.Cout, g.c.dy_type, g.gb_stride, g.gb_offset) {
    std::mt19937 rng(g.c.seed);
    std::uniform_int_distribution<int> small(-2, 2), fine(-4096, 4096);
    auto fill_with = [&](HostTensor& h, bool fraction) {
      for (std::int64_t i = 0; i < h.elements(); ++i)
        h.set_value(i, fraction ? static_cast<float>(fine(rng)) / 1024.0f : static_cast<float>(small(rng)));
    };
    fill_with(t.dy, g.fraction == Fraction::dy);
    fill_with(t.x, g.fraction == Fraction::x);
    fill_with(t.w, false);
  }
};

// The case on three spatial axes (rank 4 and 3 put size-1 axes first).
struct Geometry {
  std::array<std::int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, k{1, 1, 1}, s{1, 1, 1}, d{1, 1, 1}, p{0, 0, 0};
};
Geometry geometry(const Case& c) {
  Geometry q;
  const std::vector<std::int64_t> out = c.out();
  for (std::size_t i = 0; i < c.ns(); ++i) {
    const std::size_t a = 3 - c.ns() + i;
    q.in[a] = c.in[i];
    q.out[a] = out[i];
    q.k[a] = c.kernel[i];
    q.s[a] = c.stride[i];
    q.d[a] = c.dilation[i];
    q.p[a] = c.pad[i];
  }
  return q;
}

// An input element as the computation sees it: cubeMathType 1/3 round fp32 to HF32 (10 explicit mantissa
// bits, half away from zero), 2 rounds everything to fp16.
double as_computed(float v, aclDataType dtype, std::int8_t cube) {
  if (cube == 2) return conv3d_dx::numeric::fp16_to_f32(conv3d_dx::numeric::f32_to_fp16(v, false));
  if ((cube == 1 || cube == 3) && dtype == ACL_FLOAT) {
    std::uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    u = (u + 0x1000u) & ~0x1FFFu;
    std::memcpy(&v, &u, sizeof v);
  }
  return v;
}

struct Sums {
  std::vector<double> dw, db;  // dW in [Cout, Cin_g, kD, kH, kW] order, db per output channel
};

// dW and db by scattering each dy element through every tap of its receptive field.
Sums scatter(const GradCase& g, const HostTensor& dy, const HostTensor& x, bool round_inputs = true) {
  const Case& c = g.c;
  const Geometry q = geometry(c);
  const std::int64_t cin_g = c.Cin / c.groups, cout_g = c.Cout / c.groups;
  const std::int8_t cube = round_inputs ? c.cube : std::int8_t{0};
  Sums r;
  r.dw.assign(static_cast<std::size_t>(c.Cout * cin_g * q.k[0] * q.k[1] * q.k[2]), 0.0);
  r.db.assign(static_cast<std::size_t>(c.Cout), 0.0);
  std::int64_t dy_index = 0;
  for (std::int64_t n = 0; n < c.N; ++n)
    for (std::int64_t co = 0; co < c.Cout; ++co)
      for (std::int64_t od = 0; od < q.out[0]; ++od)
        for (std::int64_t oh = 0; oh < q.out[1]; ++oh)
          for (std::int64_t ow = 0; ow < q.out[2]; ++ow, ++dy_index) {
            const float raw = dy.value(dy_index);
            r.db[static_cast<std::size_t>(co)] += raw;
            const double gv = as_computed(raw, dy.dtype(), cube);
            const std::int64_t first_channel = co / cout_g * cin_g;
            std::size_t w_index = static_cast<std::size_t>(co * cin_g * q.k[0] * q.k[1] * q.k[2]);
            for (std::int64_t ci = 0; ci < cin_g; ++ci)
              for (std::int64_t kd = 0; kd < q.k[0]; ++kd)
                for (std::int64_t kh = 0; kh < q.k[1]; ++kh)
                  for (std::int64_t kw = 0; kw < q.k[2]; ++kw, ++w_index) {
                    const std::int64_t id = od * q.s[0] - q.p[0] + kd * q.d[0];
                    const std::int64_t ih = oh * q.s[1] - q.p[1] + kh * q.d[1];
                    const std::int64_t iw = ow * q.s[2] - q.p[2] + kw * q.d[2];
                    if (id < 0 || ih < 0 || iw < 0 || id >= q.in[0] || ih >= q.in[1] || iw >= q.in[2])
                      continue;
                    const std::int64_t x_index =
                        (((n * c.Cin + first_channel + ci) * q.in[0] + id) * q.in[1] + ih) * q.in[2] + iw;
                    r.dw[w_index] += gv * as_computed(x.value(x_index), x.dtype(), cube);
                  }
          }
  return r;
}

// The code an exact sum must have in `dtype` after the one final rounding (USE_FP16: fp16 first).
std::uint32_t expected_code(double sum, aclDataType dtype, bool through_fp16) {
  float v = static_cast<float>(sum);
  EXPECT_EQ(static_cast<double>(v), sum) << "test data must keep every sum exact in fp32";
  if (through_fp16 && dtype != ACL_FLOAT16)
    v = conv3d_dx::numeric::fp16_to_f32(conv3d_dx::numeric::f32_to_fp16(v, false));
  std::uint32_t code = 0;
  conv3d_dx::numeric::store_f32(to_dtype(dtype), &code, 0, v, conv3d_dx::OverflowMode::ieee);
  return code;
}

// Phase 1 and 2; outputs whose mask is false are passed as null when `null_unmasked`.
AclResult run_grads(const GradCase& g, GradTensors& gt, bool null_unmasked = false) {
  const Case& c = g.c;
  IntArray stride(c.stride), padding(c.padding_arg.empty() ? c.pad : c.padding_arg), dilation(c.dilation),
      output_padding(std::vector<std::int64_t>(c.ns(), 0)), bias_sizes({c.Cout});
  BoolArray mask({g.mask[0], g.mask[1], g.mask[2]});
  auto pick = [&](bool wanted, aclTensor* t) { return wanted || !null_unmasked ? t : nullptr; };
  AclResult r;
  aclOpExecutor* executor = nullptr;
  r.status = aclnnConvolutionBackwardGetWorkspaceSize(
      gt.t.dy.get(), gt.t.x.get(), gt.t.w.get(), bias_sizes.get(), stride.get(), padding.get(),
      dilation.get(), false, output_padding.get(), static_cast<int>(c.groups), mask.get(), c.cube,
      pick(g.mask[0], gt.t.gx.get()), pick(g.mask[1], gt.gw.get()), pick(g.mask[2], gt.gb.get()),
      &r.workspace, &executor);
  if (r.status != ACLNN_SUCCESS) {
    r.message = aclGetRecentErrMsg();
    return r;
  }
  r.status = run_executor(executor, r.workspace);
  if (r.status != ACLNN_SUCCESS) r.message = aclGetRecentErrMsg();
  return r;
}

// Runs the case and checks every output: wanted ones against the oracle (gradInput against the C++ API),
// the others untouched; gaps of every view untouched.
void expect_correct(const GradCase& g, bool null_unmasked = false) {
  SCOPED_TRACE(g.c.describe() + " mask " + std::to_string(g.mask[0]) + std::to_string(g.mask[1]) +
               std::to_string(g.mask[2]));
  GradTensors gt(g);
  const AclResult r = run_grads(g, gt, null_unmasked);
  ASSERT_EQ(r.status, ACLNN_SUCCESS) << r.message;
  const Sums sums = scatter(g, gt.t.dy, gt.t.x);
  if (g.fraction != Fraction::none) {  // the data must exercise the input rounding
    EXPECT_NE(scatter(g, gt.t.dy, gt.t.x, false).dw, sums.dw);
  }
  if (g.mask[1]) {
    const bool through_fp16 = g.c.cube == 2;
    std::int64_t mismatches = 0;
    for (std::int64_t i = 0; i < gt.gw.elements(); ++i) {
      const std::uint32_t want =
          expected_code(sums.dw[static_cast<std::size_t>(i)], gt.gw.dtype(), through_fp16);
      if (gt.gw.code(i) != want && mismatches++ < 5) {
        ADD_FAILURE() << "gradWeight element " << i << ": code " << gt.gw.code(i) << " value "
                      << gt.gw.value(i) << ", expected " << sums.dw[static_cast<std::size_t>(i)] << " (code "
                      << want << ")";
      }
    }
    EXPECT_EQ(mismatches, 0);
    EXPECT_EQ(gt.gw.touched_gaps(), 0);
  } else {
    EXPECT_TRUE(untouched(gt.gw));
  }
  if (g.mask[2]) {
    for (std::int64_t co = 0; co < g.c.Cout; ++co)
      EXPECT_EQ(gt.gb.code(co), expected_code(sums.db[static_cast<std::size_t>(co)], g.c.dy_type, false))
          << "gradBias element " << co << " expected " << sums.db[static_cast<std::size_t>(co)];
    EXPECT_EQ(gt.gb.touched_gaps(), 0);
  } else {
    EXPECT_TRUE(gt.gb.untouched());
  }
  if (g.mask[0]) {
    EXPECT_EQ(gt.t.gx.contiguous(), run_cpp(g.c, gt.t));
    EXPECT_EQ(gt.t.gx.touched_gaps(), 0);
  } else {
    EXPECT_TRUE(untouched(gt.t.gx));
  }
}

Placement strided(std::int64_t offset) { return Placement{true, offset}; }

// ---- results ----

TEST(AclnnGradWeightBias, EveryDtype) {
  struct Types {
    aclDataType dy, x, w, gw;
  };
  const Types types[] = {
      {ACL_FLOAT, ACL_FLOAT, ACL_FLOAT, ACL_DT_UNDEFINED},
      {ACL_FLOAT16, ACL_FLOAT16, ACL_FLOAT16, ACL_DT_UNDEFINED},
      {ACL_BF16, ACL_BF16, ACL_BF16, ACL_DT_UNDEFINED},
      {ACL_HIFLOAT8, ACL_HIFLOAT8, ACL_HIFLOAT8, ACL_DT_UNDEFINED},
      {ACL_HIFLOAT8, ACL_HIFLOAT8, ACL_HIFLOAT8, ACL_FLOAT},  // as the Ascend 950 requires
      {ACL_FLOAT8_E4M3FN, ACL_FLOAT8_E4M3FN, ACL_FLOAT8_E4M3FN, ACL_DT_UNDEFINED},
      {ACL_FLOAT8_E4M3FN, ACL_FLOAT8_E4M3FN, ACL_FLOAT8_E4M3FN, ACL_FLOAT},
      // Promotion: gradWeight takes weight's dtype, gradBias gradOutput's, gradInput input's.
      {ACL_FLOAT16, ACL_BF16, ACL_FLOAT, ACL_DT_UNDEFINED},
      {ACL_BF16, ACL_FLOAT, ACL_FLOAT16, ACL_DT_UNDEFINED},
  };
  for (const Types& t : types) {
    GradCase g;
    g.c.dy_type = t.dy;
    g.c.x_type = t.x;
    g.c.w_type = t.w;
    g.gw_type = t.gw;
    expect_correct(g);
  }
}

TEST(AclnnGradWeightBias, GroupsStridesDilationsPadding) {
  std::vector<GradCase> cases;
  {
    GradCase g;  // no groups, dilation 2, no padding
    g.c.Cin = 3;
    g.c.Cout = 5;
    g.c.groups = 1;
    g.c.in = {6, 7, 8};
    g.c.kernel = {2, 3, 2};
    g.c.stride = {1, 1, 1};
    g.c.pad = {0, 0, 0};
    g.c.dilation = {2, 2, 2};
    cases.push_back(g);
  }
  {
    GradCase g;  // depthwise with channel multiplier 2, mixed strides/pads/dilations
    g.c.Cin = 4;
    g.c.Cout = 8;
    g.c.groups = 4;
    g.c.stride = {1, 2, 3};
    g.c.pad = {2, 0, 1};
    g.c.dilation = {1, 2, 1};
    g.c.dy_type = g.c.x_type = g.c.w_type = ACL_FLOAT16;
    cases.push_back(g);
  }
  {
    GradCase g;  // depthwise, Cout == Cin == groups
    g.c.Cin = g.c.Cout = g.c.groups = 3;
    g.c.dy_type = g.c.x_type = g.c.w_type = ACL_BF16;
    cases.push_back(g);
  }
  {
    GradCase g;  // stride larger than the kernel: some input positions meet no tap
    g.c.N = 1;
    g.c.in = {9, 9, 9};
    g.c.kernel = {2, 2, 2};
    g.c.stride = {4, 3, 4};
    g.c.pad = {0, 1, 0};
    cases.push_back(g);
  }
  {
    GradCase g;  // padding larger than the kernel: some output positions see only padding
    g.c.in = {4, 3, 4};
    g.c.kernel = {2, 2, 2};
    g.c.stride = {1, 1, 2};
    g.c.pad = {3, 2, 3};
    cases.push_back(g);
  }
  for (const GradCase& g : cases) expect_correct(g);
}

TEST(AclnnGradWeightBias, Rank4AndRank3) {
  GradCase r4;
  r4.c.rank = 4;
  r4.c.in = {7, 9};
  r4.c.kernel = {3, 2};
  r4.c.stride = {2, 1};
  r4.c.pad = {1, 2};  // front pads; padding is [top, bottom, left, right]
  r4.c.pad_back = {0, 1};
  r4.c.padding_arg = {1, 0, 2, 1};
  r4.c.dilation = {1, 2};
  expect_correct(r4);
  r4.c.padding_arg.clear();
  r4.c.pad_back.clear();
  r4.c.dy_type = r4.c.x_type = r4.c.w_type = ACL_FLOAT16;
  expect_correct(r4);

  GradCase r3;
  r3.c.rank = 3;
  r3.c.Cin = 3;
  r3.c.Cout = 2;
  r3.c.groups = 1;
  r3.c.in = {11};
  r3.c.kernel = {3};
  r3.c.stride = {2};
  r3.c.pad = {2};
  r3.c.dilation = {3};
  expect_correct(r3);
  r3.c.groups = 1;
  r3.c.Cin = r3.c.Cout = 4;
  r3.c.groups = 4;
  r3.c.dy_type = r3.c.x_type = r3.c.w_type = ACL_BF16;
  expect_correct(r3);
}

TEST(AclnnGradWeightBias, NonContiguousViewsWithOffsets) {
  GradCase g;
  g.c.dy_place = strided(3);
  g.c.x_place = strided(7);
  g.c.w_place = strided(1);
  g.c.gx_place = strided(2);
  g.gw_place = strided(5);
  g.gb_stride = 3;
  g.gb_offset = 4;
  for (aclDataType t : {ACL_FLOAT, ACL_FLOAT16, ACL_HIFLOAT8}) {
    g.c.dy_type = g.c.x_type = g.c.w_type = t;
    expect_correct(g);
  }
  g.c.rank = 4;
  g.c.in = {6, 7};
  g.c.kernel = {3, 3};
  g.c.stride = {2, 1};
  g.c.pad = {1, 0};
  g.c.dilation = {1, 2};
  g.c.dy_type = g.c.x_type = g.c.w_type = ACL_BF16;
  expect_correct(g);
}

TEST(AclnnGradWeightBias, CubeMathTypesRoundTheInputs) {
  // fp32 with HF32 (1, 3) and USE_FP16 (2, computed as fp16 then cast back); the fractional input changes.
  for (std::int8_t cube : {std::int8_t{1}, std::int8_t{2}, std::int8_t{3}}) {
    for (Fraction f : {Fraction::x, Fraction::dy}) {
      GradCase g;
      g.c.cube = cube;
      g.fraction = f;
      expect_correct(g);
    }
  }
  // USE_FP16 with bf16 tensors: the result passes through fp16 on its way to bf16.
  GradCase g;
  g.c.cube = 2;
  g.c.dy_type = g.c.x_type = g.c.w_type = ACL_BF16;
  expect_correct(g);
  // HF32 leaves fp16 alone.
  g.c.cube = 1;
  g.c.dy_type = g.c.x_type = g.c.w_type = ACL_FLOAT16;
  expect_correct(g);
}

TEST(AclnnGradWeightBias, EveryOutputMask) {
  for (int bits = 0; bits < 8; ++bits) {
    GradCase g;
    g.mask = {(bits & 1) != 0, (bits & 2) != 0, (bits & 4) != 0};
    g.c.gx_place = strided(1);
    g.gw_place = strided(2);
    g.gb_stride = 2;
    expect_correct(g, false);  // unwanted outputs given but not written
    expect_correct(g, true);   // unwanted outputs null
  }
}

TEST(AclnnGradWeightBias, OnlyGradInputNeedsAWorkspace) {
  GradCase g;
  g.mask = {false, true, true};
  g.c.cube = 2;  // would need an fp16 buffer for gradInput
  GradTensors gt(g);
  const AclResult r = run_grads(g, gt);
  ASSERT_EQ(r.status, ACLNN_SUCCESS) << r.message;
  EXPECT_EQ(r.workspace, 0u);
}

TEST(AclnnGradWeightBias, EmptyBatchGivesZeros) {
  for (aclDataType t : {ACL_FLOAT, ACL_BF16, ACL_HIFLOAT8}) {
    GradCase g;
    g.c.N = 0;
    g.c.dy_type = g.c.x_type = g.c.w_type = t;
    GradTensors gt(g);
    const AclResult r = run_grads(g, gt);
    ASSERT_EQ(r.status, ACLNN_SUCCESS) << r.message;
    for (std::int64_t i = 0; i < gt.gw.elements(); ++i) ASSERT_EQ(gt.gw.code(i), 0u) << i;
    for (std::int64_t i = 0; i < gt.gb.elements(); ++i) ASSERT_EQ(gt.gb.code(i), 0u) << i;
  }
}

// A float64 sum just above a rounding tie of fp16 / bf16 whose excess fp32 cannot hold: rounding through
// fp32 first would land on the tie and round to even (down); the single rounding goes up.
TEST(AclnnGradWeightBias, SumsAreRoundedOnce) {
  for (aclDataType t : {ACL_FLOAT16, ACL_BF16}) {
    const float tie = t == ACL_FLOAT16 ? 0x1p-11f : 0x1p-8f;  // half an ulp of 1
    const float up = 2 * tie;
    // 1x1x1 kernel over two positions: dW = (1 + tie) * 1 + 2^-15 * 2^-15 = 1 + tie + 2^-30.
    HostTensor dy({1, 1, 1, 1, 2}, ACL_FLOAT), x({1, 1, 1, 1, 2}, ACL_FLOAT), w({1, 1, 1, 1, 1}, t),
        gw({1, 1, 1, 1, 1}, t);
    dy.set_value(0, 1.0f + tie);
    dy.set_value(1, 0x1p-15f);
    x.set_value(0, 1.0f);
    x.set_value(1, 0x1p-15f);
    w.set_value(0, 1.0f);
    IntArray one({1, 1, 1}), zero({0, 0, 0});
    BoolArray mask({false, true, false});
    std::uint64_t ws = 0;
    aclOpExecutor* ex = nullptr;
    ASSERT_EQ(aclnnConvolutionBackwardGetWorkspaceSize(dy.get(), x.get(), w.get(), nullptr, one.get(),
                                                       zero.get(), one.get(), false, zero.get(), 1,
                                                       mask.get(), 0, nullptr, gw.get(), nullptr, &ws, &ex),
              ACLNN_SUCCESS)
        << aclGetRecentErrMsg();
    ASSERT_EQ(run_executor(ex, ws), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    EXPECT_EQ(gw.value(0), 1.0f + up) << t;
  }
}

// ---- determinism ----

// The core functions directly: any thread count gives the same bits, on data whose sums round. Then aclnn
// (all hardware threads) against one thread.
TEST(AclnnGradWeightBias, BitwiseIdenticalForAnyThreadCount) {
  using namespace conv3d_dx;
  const std::vector<std::int64_t> x_shape{3, 4, 6, 7, 8}, w_shape{6, 2, 3, 3, 3}, dy_shape{3, 6, 6, 4, 8};
  HostTensor x(x_shape, ACL_FLOAT), dy(dy_shape, ACL_FLOAT), w(w_shape, ACL_FLOAT), gw(w_shape, ACL_FLOAT);
  Vector1D gb(6, ACL_FLOAT);
  std::mt19937 rng(7);
  fill(x, rng, false);
  fill(dy, rng, false);
  fill(w, rng, false);
  const std::vector<unsigned char> xs = x.contiguous(), dys = dy.contiguous();
  auto shape5 = [](const std::vector<std::int64_t>& v) {
    return std::array<std::int64_t, 5>{v[0], v[1], v[2], v[3], v[4]};
  };
  ProblemSpec spec;
  spec.attrs.data_format = Layout::NCDHW;
  spec.attrs.input_size = x_shape;
  spec.attrs.strides = {1, 1, 1, 2, 1};
  spec.attrs.pads = {1, 1, 1, 1, 1, 1};
  spec.attrs.groups = 2;
  spec.out_backprop = TensorView::contiguous(dys.data(), DType::f32, Layout::NCDHW, shape5(dy_shape));
  spec.filter = TensorView::contiguous(nullptr, DType::f32, Layout::NCDHW, shape5(w_shape));
  spec.y = TensorView::contiguous(xs.data(), DType::f32, Layout::NCDHW, shape5(x_shape));
  const Problem problem = validate(spec);
  const backward::GradientProblem p = backward::gradient_problem(problem, {DType::f32, problem.y_strides},
                                                                 {DType::f32, problem.filter_strides});
  auto grads = [&](int threads) {
    std::vector<float> dw(6 * 2 * 27), db(6);
    backward::weight_gradient(p, dys.data(), xs.data(), dw.data(), {threads, false});
    backward::bias_gradient(p, dys.data(), db.data(), DType::f32, 1, {threads, false});
    dw.insert(dw.end(), db.begin(), db.end());
    return dw;
  };
  const std::vector<float> one = grads(1);
  for (int threads : {2, 3, 8}) {
    const std::vector<float> many = grads(threads);
    EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)), 0) << threads << " threads";
  }

  IntArray stride({1, 2, 1}), padding({1, 1, 1}), dilation({1, 1, 1}), output_padding({0, 0, 0}),
      bias_sizes({6});
  BoolArray mask({false, true, true});
  std::uint64_t ws = 0;
  aclOpExecutor* ex = nullptr;
  ASSERT_EQ(aclnnConvolutionBackwardGetWorkspaceSize(
                dy.get(), x.get(), w.get(), bias_sizes.get(), stride.get(), padding.get(), dilation.get(),
                false, output_padding.get(), 2, mask.get(), 0, nullptr, gw.get(), gb.get(), &ws, &ex),
            ACLNN_SUCCESS)
      << aclGetRecentErrMsg();
  ASSERT_EQ(run_executor(ex, ws), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  std::vector<float> got(one.size());
  for (std::int64_t i = 0; i < gw.elements(); ++i) got[static_cast<std::size_t>(i)] = gw.value(i);
  for (std::int64_t i = 0; i < 6; ++i) {
    const std::uint32_t c = gb.code(i);
    std::memcpy(&got[static_cast<std::size_t>(gw.elements() + i)], &c, sizeof c);
  }
  EXPECT_EQ(std::memcmp(one.data(), got.data(), one.size() * sizeof(float)), 0);
}

// ---- the rules, each with its status and message ----

// A valid call with all three outputs, whose arguments a test replaces one at a time.
struct GradCall {
  explicit GradCall(GradCase gc = {}) : g(std::move(gc)) {}
  GradCase g;
  GradTensors gt{g};
  IntArray s{g.c.stride}, p{g.c.pad}, d{g.c.dilation}, op{{0, 0, 0}}, bs{{g.c.Cout}};
  BoolArray m{{true, true, true}};
  const aclTensor *dy = gt.t.dy.get(), *x = gt.t.x.get(), *w = gt.t.w.get();
  const aclIntArray* bias_sizes = bs.get();
  const aclBoolArray* mask = m.get();
  aclTensor *gx = gt.t.gx.get(), *gw = gt.gw.get(), *gb = gt.gb.get();
  std::uint64_t ws = 0;
  aclOpExecutor* ex = nullptr;

  aclnnStatus get() {
    return aclnnConvolutionBackwardGetWorkspaceSize(dy, x, w, bias_sizes, s.get(), p.get(), d.get(), false,
                                                    op.get(), static_cast<int>(g.c.groups), mask, g.c.cube,
                                                    gx, gw, gb, &ws, &ex);
  }
  // Expects `status` with a message containing `fragment`; nothing is written.
  void expect(aclnnStatus status, const std::string& fragment) {
    EXPECT_EQ(get(), status);
    const std::string message = aclGetRecentErrMsg();
    EXPECT_NE(message.find(fragment), std::string::npos) << "message: " << message;
    EXPECT_EQ(ex, nullptr);
    EXPECT_TRUE(untouched(gt.t.gx));
    EXPECT_TRUE(untouched(gt.gw));
    EXPECT_TRUE(gt.gb.untouched());
  }
  void expect_success() {
    ASSERT_EQ(get(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    EXPECT_EQ(run_executor(ex, ws), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  }
};

TEST(AclnnGradWeightBiasRules, TheValidCallSucceeds) {
  GradCall k;
  k.expect_success();
  GradCall no_bias_sizes;  // biasSizes may be null
  no_bias_sizes.bias_sizes = nullptr;
  no_bias_sizes.expect_success();
}

TEST(AclnnGradWeightBiasRules, NullOutputsAre161001WhenWanted) {
  {
    GradCall k;
    k.gw = nullptr;
    k.expect(ACLNN_ERR_PARAM_NULLPTR, "gradWeight is null");
  }
  {
    GradCall k;
    k.gb = nullptr;
    k.expect(ACLNN_ERR_PARAM_NULLPTR, "gradBias is null");
  }
  auto make = [](const std::vector<std::int64_t>& dims, aclFormat format) {
    std::vector<std::int64_t> storage{product(dims)};
    return aclCreateTensor(dims.data(), dims.size(), ACL_FLOAT, nullptr, 0, format, storage.data(), 1,
                           nullptr);
  };
  const Case c;
  aclTensor* gw = make(c.w_dims(), ACL_FORMAT_NCDHW);
  aclTensor* gb = make({c.Cout}, ACL_FORMAT_ND);
  aclTensor* x = make(c.x_dims(), ACL_FORMAT_NCDHW);
  {
    GradCall k;
    k.gw = gw;
    k.expect(ACLNN_ERR_PARAM_NULLPTR, "gradWeight data");
  }
  {
    GradCall k;
    k.gb = gb;
    k.expect(ACLNN_ERR_PARAM_NULLPTR, "gradBias data");
  }
  {
    GradCall k;  // gradWeight reads input
    k.x = x;
    k.expect(ACLNN_ERR_PARAM_NULLPTR, "input data");
  }
  {
    GradCall k;  // without gradWeight, input's data is not needed
    BoolArray m({true, false, true});
    k.mask = m.get();
    k.x = x;
    k.expect_success();
  }
  for (aclTensor* t : {gw, gb, x}) EXPECT_EQ(aclDestroyTensor(t), ACLNN_SUCCESS);
}

TEST(AclnnGradWeightBiasRules, ShapesRanksAndFormatsAre161002) {
  const Case c;
  {
    GradCall k;
    HostTensor t({6, 2, 3, 2, 3}, ACL_FLOAT);
    k.gw = t.get();
    k.expect(ACLNN_ERR_PARAM_INVALID, "gradWeight H is 2 but weight H is 3; the shapes must be equal");
  }
  {
    GradCall k;
    HostTensor t({6, 2, 3, 9}, ACL_FLOAT);
    k.gw = t.get();
    k.expect(ACLNN_ERR_PARAM_INVALID, "gradWeight has rank 4 but gradOutput has rank 5");
  }
  {
    GradCall k;
    HostTensor t(c.w_dims(), ACL_FLOAT, {}, ACL_FORMAT_NCHW);
    k.gw = t.get();
    k.expect(ACLNN_ERR_PARAM_INVALID, "gradWeight format is 0 but rank-5 tensors must be ACL_FORMAT_NCDHW");
  }
  {
    GradCall k;
    HostTensor t({6, 1}, ACL_FLOAT);
    k.gb = t.get();
    k.expect(ACLNN_ERR_PARAM_INVALID, "gradBias has rank 2 but must have rank 1");
  }
  {
    GradCall k;
    Vector1D t(5, ACL_FLOAT);
    k.gb = t.get();
    k.expect(ACLNN_ERR_PARAM_INVALID, "gradBias has 5 elements but weight N (output channels) is 6");
  }
  {
    GradCall k;
    Vector1D t(6, ACL_FLOAT, 1, 0, ACL_FORMAT_NCL);
    k.gb = t.get();
    k.expect(ACLNN_ERR_PARAM_INVALID, "gradBias format is 47 but must be ACL_FORMAT_ND");
  }
  for (const std::vector<std::int64_t>& v : {std::vector<std::int64_t>{5}, std::vector<std::int64_t>{6, 1}}) {
    GradCall k;
    IntArray bs(v);
    k.bias_sizes = bs.get();
    k.expect(ACLNN_ERR_PARAM_INVALID,
             "biasSizes is " + std::string(v.size() == 1 ? "[5]" : "[6,1]") + " but must be [6]");
  }
  {
    GradCall k;  // outputs that are not wanted are not checked
    BoolArray m({true, false, false});
    HostTensor t({6, 2, 3, 2, 3}, ACL_FLOAT16);
    Vector1D b(5, ACL_BF16);
    k.mask = m.get();
    k.gw = t.get();
    k.gb = b.get();
    k.expect_success();
  }
}

TEST(AclnnGradWeightBiasRules, DtypesAre161002) {
  {
    GradCall k;
    HostTensor t(Case().w_dims(), ACL_FLOAT16);
    k.gw = t.get();
    k.expect(ACLNN_ERR_PARAM_INVALID,
             "gradWeight dtype is ACL_FLOAT16 but weight is ACL_FLOAT; they must be equal");
  }
  {
    GradCall k;
    Vector1D t(6, ACL_BF16);
    k.gb = t.get();
    k.expect(ACLNN_ERR_PARAM_INVALID,
             "gradBias dtype is ACL_BF16 but gradOutput is ACL_FLOAT; they must be equal");
  }
  GradCase hif8;
  hif8.c.dy_type = hif8.c.x_type = hif8.c.w_type = ACL_HIFLOAT8;
  {
    GradCall k(hif8);
    HostTensor gw(Case().w_dims(), ACL_FLOAT16);
    k.gw = gw.get();
    k.expect(
        ACLNN_ERR_PARAM_INVALID,
        "gradWeight dtype is ACL_FLOAT16 but gradOutput is ACL_HIFLOAT8; ACL_HIFLOAT8 and ACL_FLOAT8_E4M3FN "
        "need every tensor of that dtype (gradWeight may also be ACL_FLOAT)");
  }
  {
    GradCall k(hif8);
    Vector1D gb(6, ACL_FLOAT);
    k.gb = gb.get();
    k.expect(ACLNN_ERR_PARAM_INVALID, "gradBias dtype is ACL_FLOAT but gradOutput is ACL_HIFLOAT8");
  }
  {
    GradCall k(hif8);  // an fp32 gradWeight for 8-bit inputs is accepted
    HostTensor gw(Case().w_dims(), ACL_FLOAT);
    k.gw = gw.get();
    k.expect_success();
  }
}

TEST(AclnnGradWeightBiasRules, OverlappingOutputsAre161002) {
  const Case c;
  {
    GradCall k;  // W stride 0: three elements share one address
    const std::vector<std::int64_t> dims = c.w_dims(), strides{18, 9, 3, 1, 0};
    std::vector<float> storage(6 * 18, 0.0f);
    const std::int64_t n = static_cast<std::int64_t>(storage.size());
    aclTensor* t = aclCreateTensor(dims.data(), 5, ACL_FLOAT, strides.data(), 0, ACL_FORMAT_NCDHW, &n, 1,
                                   storage.data());
    k.gw = t;
    k.expect(ACLNN_ERR_PARAM_INVALID, "gradWeight has overlapping elements");
    EXPECT_EQ(aclDestroyTensor(t), ACLNN_SUCCESS);
  }
  {
    GradCall k;
    Vector1D t(6, ACL_FLOAT, 0);
    k.gb = t.get();
    k.expect(ACLNN_ERR_PARAM_INVALID, "gradBias has overlapping elements");
  }
}

TEST(AclnnGradWeightBiasRules, DestroyedOrForeignOutputsAre161002) {
  {
    GradCall k;
    const std::int64_t dims[1] = {6};
    std::vector<float> data(6);
    aclTensor* t = aclCreateTensor(dims, 1, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, dims, 1, data.data());
    ASSERT_EQ(aclDestroyTensor(t), ACLNN_SUCCESS);
    k.gb = t;  // dangling
    k.expect(ACLNN_ERR_PARAM_INVALID, "gradBias is not a live aclTensor");
  }
  {
    GradCall k;
    k.gw = reinterpret_cast<aclTensor*>(k.bs.get());  // an int array where a tensor belongs
    k.expect(ACLNN_ERR_PARAM_INVALID, "gradWeight is not a live aclTensor");
  }
  {
    GradCall k;
    k.bias_sizes = reinterpret_cast<const aclIntArray*>(k.m.get());
    k.expect(ACLNN_ERR_PARAM_INVALID, "biasSizes is not a live aclIntArray");
  }
}

}  // namespace
