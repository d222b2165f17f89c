// aclnnConvolutionBackward (docs/aclnn.md): results bitwise equal to the C++ API, the promotion and
// cubeMathType semantics against the float64 reference, views, executors, and every rule with its status and
// message.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "acl_test_util.hpp"
#include "reference/reference.hpp"

namespace acl_test {
namespace {

using conv3d_dx::DType;

const aclDataType kAllTypes[] = {ACL_FLOAT, ACL_FLOAT16, ACL_BF16, ACL_HIFLOAT8, ACL_FLOAT8_E4M3FN};

Case with_types(Case c, aclDataType t) {
  c.dy_type = c.x_type = c.w_type = t;
  return c;
}

Case rank4(Case c) {
  c.rank = 4;
  c.in = {6, 7};
  c.kernel = {3, 2};
  c.stride = {2, 1};
  c.pad = {1, 0};
  c.dilation = {1, 2};
  return c;
}

Case rank3(Case c) {
  c.rank = 3;
  c.in = {9};
  c.kernel = {3};
  c.stride = {2};
  c.pad = {2};
  c.dilation = {2};
  return c;
}

// ---- results equal to the C++ API ----

TEST(AclnnConvBackward, EveryDtypeAndRankMatchesCppApi) {
  unsigned seed = 1;
  for (aclDataType t : kAllTypes)
    for (Case c : {Case{}, rank4(Case{}), rank3(Case{})}) {
      c = with_types(c, t);
      c.seed = seed++;
      expect_same_as_cpp(c);
    }
}

TEST(AclnnConvBackward, ShapesAndParametersMatchCppApi) {
  Case depthwise;  // groups == channels, stride 3 > kernel 2 (positions no tap reaches), dilation 2
  depthwise.N = 1, depthwise.Cin = 3, depthwise.Cout = 3, depthwise.groups = 3;
  depthwise.in = {4, 7, 8}, depthwise.kernel = {1, 2, 2}, depthwise.stride = {1, 3, 3},
  depthwise.pad = {0, 1, 0};
  depthwise.dilation = {1, 1, 2};
  Case one_group;  // groups 1, kernel 1, stride 1, no padding
  one_group.groups = 1, one_group.Cin = 3, one_group.Cout = 5, one_group.kernel = {1, 1, 1};
  one_group.stride = {1, 1, 1}, one_group.pad = {0, 0, 0};
  Case big_pad;  // padding larger than the dilated kernel
  big_pad.N = 1, big_pad.in = {2, 3, 3}, big_pad.kernel = {2, 2, 2}, big_pad.pad = {3, 2, 1};
  Case empty;  // N = 0: an empty gradInput
  empty.N = 0;
  int seed = 100;
  for (Case c : {depthwise, one_group, big_pad, empty, rank3(depthwise), rank4(one_group)}) {
    c.seed = static_cast<unsigned>(seed++);
    expect_same_as_cpp(c);
  }
}

TEST(AclnnConvBackward, Rank4AcceptsAsymmetricTopBottomLeftRightPadding) {
  Case c = rank4(Case{});
  c.padding_arg = {2, 0, 1, 3};  // top, bottom, left, right
  c.pad = {2, 1};
  c.pad_back = {0, 3};
  expect_same_as_cpp(c);
}

// ---- views ----

TEST(AclnnConvBackward, ViewsWithOffsetsAndStridesForEveryTensor) {
  const Placement odd{true, 13};
  for (aclDataType t : {ACL_FLOAT, ACL_BF16, ACL_HIFLOAT8}) {
    for (Case c : {Case{}, rank4(Case{}), rank3(Case{})}) {
      c = with_types(c, t);
      c.dy_place = c.w_place = c.gx_place = odd;
      c.x_place = Placement{true, 3};
      expect_same_as_cpp(c);
      c.dy_place = c.w_place = c.x_place = {};
      c.gx_place = Placement{false, 7};  // an offset alone
      expect_same_as_cpp(c);
    }
  }
}

TEST(AclnnConvBackward, Fp16ViaWorkspaceIntoStridedGradInput) {
  Case c;
  c.cube = 2;
  c.gx_place = Placement{true, 5};
  expect_same_as_cpp(c);
}

TEST(AclnnConvBackward, BroadcastInputViewWithZeroStrides) {
  // A weight that repeats one [kD, kH, kW] block over all channels (strides 0 on N and C).
  Case c;
  Tensors t(c);
  std::vector<std::int64_t> dims = c.w_dims(), strides{0, 0, 9, 3, 1}, storage{27};
  std::vector<float> block(27);
  for (int i = 0; i < 27; ++i) block[static_cast<std::size_t>(i)] = static_cast<float>(i % 5 - 2) / 4.0f;
  aclTensor* w = aclCreateTensor(dims.data(), 5, ACL_FLOAT, strides.data(), 0, ACL_FORMAT_NCDHW,
                                 storage.data(), 1, block.data());
  ASSERT_NE(w, nullptr) << aclGetRecentErrMsg();
  for (std::int64_t i = 0; i < t.w.elements(); ++i) t.w.set_value(i, block[static_cast<std::size_t>(i % 27)]);
  IntArray s(c.stride), p(c.pad), d(c.dilation), op({0, 0, 0});
  BoolArray mask({true, false, false});
  std::uint64_t ws = 0;
  aclOpExecutor* ex = nullptr;
  ASSERT_EQ(aclnnConvolutionBackwardGetWorkspaceSize(t.dy.get(), t.x.get(), w, nullptr, s.get(), p.get(),
                                                     d.get(), false, op.get(), 2, mask.get(), 0, t.gx.get(),
                                                     nullptr, nullptr, &ws, &ex),
            ACLNN_SUCCESS)
      << aclGetRecentErrMsg();
  ASSERT_EQ(run_executor(ex, ws), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  EXPECT_EQ(t.gx.contiguous(), run_cpp(c, t));
  EXPECT_EQ(aclDestroyTensor(w), ACLNN_SUCCESS);
}

// ---- dtype promotion, against the float64 reference on exact data ----

// The reference for a case with exact data: float64 sums (exact here), rounded once to gradInput's dtype.
std::vector<unsigned char> reference_bytes(const Case& c, const Tensors& t,
                                           conv3d_dx::InputRounding rounding) {
  using namespace conv3d_dx;
  const std::vector<unsigned char> dy = t.dy.contiguous(), w = t.w.contiguous();
  Problem p;
  p.N = c.N, p.G = c.groups, p.Cin_g = c.Cin / c.groups, p.Cout_g = c.Cout / c.groups;
  const auto out = c.out();
  for (std::size_t i = 0; i < c.ns(); ++i) {
    const std::size_t a = 3 - c.ns() + i;
    p.y_size[a] = c.in[i], p.dy_size[a] = out[i], p.kernel[a] = c.kernel[i], p.stride[a] = c.stride[i];
    p.dilation[a] = c.dilation[i], p.pad_front[a] = c.pad[i], p.pad_back[a] = c.back(i);
  }
  for (std::size_t a = 0; a < 3 - c.ns(); ++a) p.y_size[a] = p.dy_size[a] = p.kernel[a] = 1;
  p.dy_dtype = to_dtype(c.dy_type), p.filter_dtype = to_dtype(c.w_type), p.y_dtype = to_dtype(c.x_type);
  p.input_rounding = rounding;
  p.dy_strides = TensorView::contiguous(nullptr, p.dy_dtype, Layout::NCDHW,
                                        {p.N, p.Cout(), p.dy_size[0], p.dy_size[1], p.dy_size[2]})
                     .strides;
  p.filter_strides = TensorView::contiguous(nullptr, p.filter_dtype, Layout::NCDHW,
                                            {p.Cout(), p.Cin_g, p.kernel[0], p.kernel[1], p.kernel[2]})
                         .strides;
  const std::vector<double> y = reference::compute(p, dy.data(), w.data());
  std::vector<unsigned char> bytes(y.size() * dtype_size(p.y_dtype));
  for (std::size_t i = 0; i < y.size(); ++i)
    numeric::store_f32(p.y_dtype, bytes.data(), static_cast<std::int64_t>(i), static_cast<float>(y[i]),
                       OverflowMode::ieee);
  return bytes;
}

TEST(AclnnConvBackward, PromotionMatchesReference) {
  struct Types {
    aclDataType dy, x, w;
  };
  const Types cases[] = {
      {ACL_FLOAT16, ACL_FLOAT, ACL_BF16},  {ACL_FLOAT16, ACL_FLOAT16, ACL_BF16},
      {ACL_BF16, ACL_BF16, ACL_FLOAT16},   {ACL_FLOAT, ACL_BF16, ACL_BF16},
      {ACL_BF16, ACL_FLOAT16, ACL_FLOAT},  {ACL_FLOAT16, ACL_FLOAT, ACL_FLOAT16},
      {ACL_FLOAT, ACL_FLOAT16, ACL_FLOAT},
  };
  unsigned seed = 200;
  for (const Types& ty : cases)
    for (Case c : {Case{}, rank3(Case{})}) {
      c.dy_type = ty.dy, c.x_type = ty.x, c.w_type = ty.w;
      c.exact = true;
      c.seed = seed++;
      SCOPED_TRACE(c.describe());
      Tensors t(c);
      ASSERT_EQ(run_aclnn(c, t).status, ACLNN_SUCCESS);
      EXPECT_EQ(t.gx.contiguous(), reference_bytes(c, t, conv3d_dx::InputRounding::none));
      expect_same_as_cpp(c);
    }
}

TEST(AclnnConvBackward, EightBitTypesMatchReferenceOnExactData) {
  for (aclDataType type : {ACL_HIFLOAT8, ACL_FLOAT8_E4M3FN}) {
    Case c = with_types(Case{}, type);
    c.exact = true;
    // Exact products and sums: fp32 and float64 agree, so both round once to the same code.
    SCOPED_TRACE(c.describe());
    Tensors t(c);
    ASSERT_EQ(run_aclnn(c, t).status, ACLNN_SUCCESS);
    EXPECT_EQ(t.gx.contiguous(), reference_bytes(c, t, conv3d_dx::InputRounding::none));
  }
}

// ---- cubeMathType ----

// fp32 data whose low mantissa bits HF32 and fp16 drop: 1 + 2^-20 and 1 + 2^-12 per element.
void low_bit_data(Tensors& t) {
  for (std::int64_t i = 0; i < t.dy.elements(); ++i) t.dy.set_value(i, 1.0f + (i % 2 ? 0x1p-20f : 0x1p-12f));
  for (std::int64_t i = 0; i < t.w.elements(); ++i)
    t.w.set_value(i, 1.0f + 0x1p-20f * static_cast<float>(i % 3));
}

TEST(AclnnConvBackward, CubeMathTypeHf32RoundsFp32Inputs) {
  Case c;
  Tensors keep(c);
  low_bit_data(keep);
  ASSERT_EQ(run_aclnn(c, keep).status, ACLNN_SUCCESS);
  EXPECT_EQ(keep.gx.contiguous(), run_cpp(c, keep));
  for (std::int8_t cube : {std::int8_t{1}, std::int8_t{3}}) {
    c.cube = cube;
    Tensors t(c);
    low_bit_data(t);
    ASSERT_EQ(run_aclnn(c, t).status, ACLNN_SUCCESS);
    EXPECT_EQ(t.gx.contiguous(), run_cpp(c, t));
    // HF32 keeps 10 mantissa bits: every input becomes 1.0, so gradInput counts the contributing terms.
    EXPECT_EQ(t.gx.contiguous(), reference_bytes(c, t, conv3d_dx::InputRounding::hf32));
    EXPECT_NE(t.gx.contiguous(), keep.gx.contiguous());
    for (std::int64_t i = 0; i < t.gx.elements(); ++i) EXPECT_EQ(t.gx.value(i), std::round(t.gx.value(i)));
  }
}

TEST(AclnnConvBackward, CubeMathTypeHf32LeavesHalfTypesAlone) {
  for (aclDataType type : {ACL_FLOAT16, ACL_BF16}) {
    Case c = with_types(Case{}, type);
    Tensors a(c);
    ASSERT_EQ(run_aclnn(c, a).status, ACLNN_SUCCESS);
    c.cube = 3;
    Tensors b(c);
    ASSERT_EQ(run_aclnn(c, b).status, ACLNN_SUCCESS);
    EXPECT_EQ(a.gx.contiguous(), b.gx.contiguous());
  }
}

TEST(AclnnConvBackward, CubeMathTypeUseFp16CastsInputsAndResult) {
  Case c;
  c.cube = 2;
  c.groups = 1, c.Cin = 2, c.Cout = 4, c.kernel = {1, 1, 1}, c.stride = {1, 1, 1}, c.pad = {0, 0, 0};
  // Kernel 1, stride 1: gradInput[n, ci, pos] = sum over 4 co of dy[n, co, pos] * w[co, ci]; the spatial
  // size (210) is even, so dy's and gradInput's element parities agree.
  auto data = [](Tensors& t) {
    for (std::int64_t i = 0; i < t.dy.elements(); ++i)
      t.dy.set_value(i, i % 2 ? 1.0f + 0x1p-12f : 1.0f + 0x1p-10f);
    for (std::int64_t i = 0; i < t.w.elements(); ++i) t.w.set_value(i, 1.0f + 0x1p-10f);
  };
  Tensors t(c);
  data(t);
  AclResult r = run_aclnn(c, t);
  ASSERT_EQ(r.status, ACLNN_SUCCESS) << r.message;
  EXPECT_GT(r.workspace, 0u);  // the result lives in the workspace (as fp32) before the cast back
  EXPECT_EQ(t.gx.contiguous(), run_cpp(c, t));
  for (std::int64_t i = 0; i < t.gx.elements(); ++i) {
    // odd: 1 + 2^-12 becomes 1 in fp16: 4 * (1 + 2^-10) = 4 + 2^-8, an fp16 value.
    // even: 4 * (1 + 2^-10)^2 = 4 + 2^-7 + 2^-18 in fp32, which the fp16 result rounds to 4 + 2^-7.
    EXPECT_EQ(t.gx.value(i), i % 2 ? 4.0f + 0x1p-8f : 4.0f + 0x1p-7f) << i;
  }
  c.cube = 0;
  Tensors keep(c);
  data(keep);
  ASSERT_EQ(run_aclnn(c, keep).status, ACLNN_SUCCESS);
  EXPECT_EQ(keep.gx.value(0), 4.0f + 0x1p-7f + 0x1p-18f);
  EXPECT_EQ(keep.gx.value(1), 4.0f * (1.0f + 0x1p-12f) * (1.0f + 0x1p-10f));
}

TEST(AclnnConvBackward, CubeMathTypeUseFp16ForEveryDtype) {
  unsigned seed = 300;
  for (aclDataType type : kAllTypes)
    for (Case c : {Case{}, rank4(Case{})}) {
      c = with_types(c, type);
      c.cube = 2;
      c.seed = seed++;
      expect_same_as_cpp(c);
    }
}

// ---- executors ----

TEST(AclnnConvBackward, ManyExecutorsAliveAtOnce) {
  constexpr int kCount = 12;
  std::vector<Case> cases;
  std::vector<std::unique_ptr<Tensors>> tensors;
  std::vector<aclOpExecutor*> executors;
  std::vector<std::uint64_t> workspaces;
  std::vector<std::unique_ptr<IntArray>> arrays;
  BoolArray mask({true, false, false});
  for (int i = 0; i < kCount; ++i) {
    Case c = i % 3 == 0 ? Case{} : i % 3 == 1 ? rank4(Case{}) : rank3(Case{});
    c = with_types(c, kAllTypes[i % 5]);
    c.N = 1 + i % 2;
    c.seed = static_cast<unsigned>(400 + i);
    cases.push_back(c);
    tensors.push_back(std::make_unique<Tensors>(c));
    for (const auto& v : {c.stride, c.pad, c.dilation, std::vector<std::int64_t>(c.ns(), 0)})
      arrays.push_back(std::make_unique<IntArray>(v));
    const std::size_t a = arrays.size() - 4;
    std::uint64_t ws = 0;
    aclOpExecutor* ex = nullptr;
    ASSERT_EQ(
        aclnnConvolutionBackwardGetWorkspaceSize(
            tensors.back()->dy.get(), tensors.back()->x.get(), tensors.back()->w.get(), nullptr,
            arrays[a]->get(), arrays[a + 1]->get(), arrays[a + 2]->get(), false, arrays[a + 3]->get(),
            static_cast<int>(c.groups), mask.get(), 0, tensors.back()->gx.get(), nullptr, nullptr, &ws, &ex),
        ACLNN_SUCCESS)
        << aclGetRecentErrMsg();
    executors.push_back(ex);
    workspaces.push_back(ws);
  }
  arrays.clear();  // the executors do not need the argument objects any more
  // Run them in reverse order, from two threads.
  std::thread other([&] {
    for (int i = kCount - 1; i >= 0; i -= 2)
      EXPECT_EQ(run_executor(executors[i], workspaces[i]), ACLNN_SUCCESS);
  });
  for (int i = kCount - 2; i >= 0; i -= 2)
    EXPECT_EQ(run_executor(executors[i], workspaces[i]), ACLNN_SUCCESS);
  other.join();
  for (int i = 0; i < kCount; ++i)
    EXPECT_EQ(tensors[i]->gx.contiguous(), run_cpp(cases[i], *tensors[i])) << i;
}

TEST(AclnnConvBackward, DataIsReadWhenTheExecutorRuns) {
  Case c;
  Tensors t(c);
  IntArray s(c.stride), p(c.pad), d(c.dilation), op({0, 0, 0});
  BoolArray mask({true, false, false});
  std::uint64_t ws = 0;
  aclOpExecutor* ex = nullptr;
  ASSERT_EQ(aclnnConvolutionBackwardGetWorkspaceSize(t.dy.get(), t.x.get(), t.w.get(), nullptr, s.get(),
                                                     p.get(), d.get(), false, op.get(), 2, mask.get(), 0,
                                                     t.gx.get(), nullptr, nullptr, &ws, &ex),
            ACLNN_SUCCESS);
  std::mt19937 rng(77);
  fill(t.dy, rng, false);  // new data after planning
  fill(t.w, rng, false);
  ASSERT_EQ(run_executor(ex, ws), ACLNN_SUCCESS);
  EXPECT_EQ(t.gx.contiguous(), run_cpp(c, t));
}

// ---- the rules, each with its status and message ----

// A valid call whose arguments a test replaces one at a time.
struct Call {
  Case c;
  Tensors t{c};
  IntArray s{c.stride}, p{c.pad}, d{c.dilation}, op{{0, 0, 0}};
  BoolArray m{{true, false, false}};
  const aclTensor *dy = t.dy.get(), *x = t.x.get(), *w = t.w.get();
  const aclIntArray *stride = s.get(), *padding = p.get(), *dilation = d.get(), *output_padding = op.get();
  bool transposed = false;
  int groups = 2;
  const aclBoolArray* mask = m.get();
  std::int8_t cube = 0;
  aclTensor *gx = t.gx.get(), *gw = nullptr, *gb = nullptr;
  std::uint64_t ws = 0;
  std::uint64_t* ws_out = &ws;
  aclOpExecutor* ex = nullptr;
  aclOpExecutor** ex_out = &ex;

  aclnnStatus get() {
    return aclnnConvolutionBackwardGetWorkspaceSize(dy, x, w, nullptr, stride, padding, dilation, transposed,
                                                    output_padding, groups, mask, cube, gx, gw, gb, ws_out,
                                                    ex_out);
  }
  // Expects the call to fail with `status` and a message containing `fragment`; gradInput stays untouched.
  void expect(aclnnStatus status, const std::string& fragment) {
    const aclnnStatus got = get();
    EXPECT_EQ(got, status);
    const std::string message = aclGetRecentErrMsg();
    EXPECT_NE(message.find(fragment), std::string::npos) << "message: " << message;
    EXPECT_NE(message.find("aclnnConvolutionBackwardGetWorkspaceSize"), std::string::npos) << message;
    if (ex_out != nullptr) {
      EXPECT_EQ(ex, nullptr);
    }
    if (got == ACLNN_SUCCESS) aclDestroyAclOpExecutor(ex);
    for (std::int64_t i = 0; i < t.gx.elements(); ++i) ASSERT_EQ(t.gx.code(i), 0x5A5A5A5Au) << i;
  }
};

TEST(AclnnConvBackwardRules, TheValidCallSucceeds) {
  Call call;
  ASSERT_EQ(call.get(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  EXPECT_NE(call.ex, nullptr);
  EXPECT_EQ(aclDestroyAclOpExecutor(call.ex), ACLNN_SUCCESS);
}

TEST(AclnnConvBackwardRules, NullRequiredPointersAre161001) {
  struct Null {
    const char* name;
    void (*apply)(Call&);
  };
  const Null nulls[] = {
      {"gradOutput is null", [](Call& c) { c.dy = nullptr; }},
      {"input is null", [](Call& c) { c.x = nullptr; }},
      {"weight is null", [](Call& c) { c.w = nullptr; }},
      {"stride is null", [](Call& c) { c.stride = nullptr; }},
      {"padding is null", [](Call& c) { c.padding = nullptr; }},
      {"dilation is null", [](Call& c) { c.dilation = nullptr; }},
      {"outputPadding is null", [](Call& c) { c.output_padding = nullptr; }},
      {"outputMask is null", [](Call& c) { c.mask = nullptr; }},
      {"gradInput is null", [](Call& c) { c.gx = nullptr; }},
      {"workspaceSize is null", [](Call& c) { c.ws_out = nullptr; }},
      {"executor is null", [](Call& c) { c.ex_out = nullptr; }},
  };
  for (const Null& n : nulls) {
    SCOPED_TRACE(n.name);
    Call call;
    n.apply(call);
    call.expect(ACLNN_ERR_PARAM_NULLPTR, n.name);
  }
}

TEST(AclnnConvBackwardRules, NullTensorDataIs161001) {
  Case c;
  Call call;
  auto make = [&](const std::vector<std::int64_t>& dims, void* data) {
    std::vector<std::int64_t> storage{product(dims)};
    return aclCreateTensor(dims.data(), dims.size(), ACL_FLOAT, nullptr, 0, ACL_FORMAT_NCDHW, storage.data(),
                           1, data);
  };
  aclTensor* dy = make(c.dy_dims(), nullptr);
  aclTensor* w = make(c.w_dims(), nullptr);
  aclTensor* gx = make(c.x_dims(), nullptr);
  aclTensor* x = make(c.x_dims(), nullptr);
  {
    Call k;
    k.dy = dy;
    k.expect(ACLNN_ERR_PARAM_NULLPTR, "gradOutput data");
  }
  {
    Call k;
    k.w = w;
    k.expect(ACLNN_ERR_PARAM_NULLPTR, "weight data");
  }
  {
    Call k;
    k.gx = gx;
    k.expect(ACLNN_ERR_PARAM_NULLPTR, "gradInput data");
  }
  {
    Call k;  // input's data is never read
    k.x = x;
    ASSERT_EQ(k.get(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    EXPECT_EQ(aclDestroyAclOpExecutor(k.ex), ACLNN_SUCCESS);
  }
  for (aclTensor* t : {dy, w, gx, x}) EXPECT_EQ(aclDestroyTensor(t), ACLNN_SUCCESS);
}

// gradWeight and gradBias are computed: see aclnn_grad_weight_bias_test.cpp.
TEST(AclnnConvBackwardRules, UnsupportedModesAre161002) {
  {
    Call k;
    k.transposed = true;
    k.expect(ACLNN_ERR_PARAM_INVALID, "transposed is true");
  }
  {
    Call k;
    BoolArray m({true, false});
    k.mask = m.get();
    k.expect(ACLNN_ERR_PARAM_INVALID, "outputMask has 2 entries");
  }
  for (std::int8_t cube : {std::int8_t{-1}, std::int8_t{4}}) {
    Call k;
    k.cube = cube;
    k.expect(ACLNN_ERR_PARAM_INVALID, "cubeMathType is " + std::to_string(cube));
  }
}

TEST(AclnnConvBackwardRules, OutputMaskWithoutGradInputComputesNothing) {
  Call k;
  BoolArray m({false, false, false});
  k.mask = m.get();
  k.gx = nullptr;
  ASSERT_EQ(k.get(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  EXPECT_EQ(k.ws, 0u);
  ASSERT_EQ(aclnnConvolutionBackward(nullptr, 0, k.ex, nullptr), ACLNN_SUCCESS);
  for (std::int64_t i = 0; i < k.t.gx.elements(); ++i) ASSERT_EQ(k.t.gx.code(i), 0x5A5A5A5Au);
  // The other arguments are still checked.
  Call bad;
  bad.mask = m.get();
  bad.groups = 4;
  bad.expect(ACLNN_ERR_PARAM_INVALID, "groups is 4");
}

TEST(AclnnConvBackwardRules, RanksAndFormats) {
  Case c;
  {
    Call k;
    HostTensor t({2, 6, 27}, ACL_FLOAT);  // rank 3 while the others are rank 5
    k.dy = t.get();
    k.expect(ACLNN_ERR_PARAM_INVALID, "input has rank 5 but gradOutput has rank 3");
  }
  {
    Call k;
    HostTensor t({2, 6}, ACL_FLOAT);
    k.dy = t.get();
    k.expect(ACLNN_ERR_PARAM_INVALID, "gradOutput has rank 2 but must have rank 5");
  }
  {
    Call k;
    HostTensor t({6, 2, 3, 9}, ACL_FLOAT);
    k.w = t.get();
    k.expect(ACLNN_ERR_PARAM_INVALID, "weight has rank 4 but gradOutput has rank 5");
  }
  {
    Call k;
    HostTensor t(c.x_dims(), ACL_FLOAT, {}, ACL_FORMAT_NDHWC);
    k.gx = t.get();
    k.expect(ACLNN_ERR_PARAM_INVALID,
             "gradInput format is 27 but rank-5 tensors must be ACL_FORMAT_NCDHW or ACL_FORMAT_ND");
  }
  {
    Call k;
    HostTensor t(c.w_dims(), ACL_FLOAT, {}, ACL_FORMAT_NCHW);
    k.w = t.get();
    k.expect(ACLNN_ERR_PARAM_INVALID, "weight format is 0");
  }
  {
    Case r4 = rank4(Case{});
    Tensors t(r4);
    HostTensor nhwc(r4.dy_dims(), ACL_FLOAT, {}, ACL_FORMAT_NHWC);
    IntArray s(r4.stride), p(r4.pad), d(r4.dilation), op({0, 0});
    Call k;
    k.dy = nhwc.get(), k.x = t.x.get(), k.w = t.w.get(), k.gx = t.gx.get();
    k.stride = s.get(), k.padding = p.get(), k.dilation = d.get(), k.output_padding = op.get();
    k.expect(ACLNN_ERR_PARAM_INVALID, "rank-4 tensors must be ACL_FORMAT_NCHW or ACL_FORMAT_ND");
  }
}

TEST(AclnnConvBackwardRules, Dtypes) {
  Case c;
  {
    Call k;
    HostTensor t(c.dy_dims(), ACL_INT32);
    k.dy = t.get();
    k.expect(ACLNN_ERR_PARAM_INVALID, "gradOutput dtype 3 is not supported");
  }
  {
    Call k;
    HostTensor t(c.w_dims(), ACL_DOUBLE);
    k.w = t.get();
    k.expect(ACLNN_ERR_PARAM_INVALID, "weight dtype 11 is not supported");
  }
  {
    Call k;  // an 8-bit type mixed with fp32
    HostTensor t(c.w_dims(), ACL_HIFLOAT8);
    k.w = t.get();
    k.expect(ACLNN_ERR_PARAM_INVALID, "weight dtype is ACL_HIFLOAT8 but gradOutput is ACL_FLOAT");
  }
  {
    Call k;  // two different 8-bit types
    Case e = with_types(c, ACL_FLOAT8_E4M3FN);
    Tensors t(e);
    HostTensor w(c.w_dims(), ACL_HIFLOAT8);
    k.dy = t.dy.get(), k.x = t.x.get(), k.gx = t.gx.get(), k.w = w.get();
    k.expect(ACLNN_ERR_PARAM_INVALID, "ACL_HIFLOAT8 and ACL_FLOAT8_E4M3FN need every tensor of that dtype");
  }
  {
    Call k;  // 8-bit gradOutput with fp32 input and gradInput
    HostTensor t(c.dy_dims(), ACL_FLOAT8_E4M3FN);
    k.dy = t.get();
    k.expect(ACLNN_ERR_PARAM_INVALID, "input dtype is ACL_FLOAT but gradOutput is ACL_FLOAT8_E4M3FN");
  }
  {
    Call k;
    HostTensor t(c.x_dims(), ACL_FLOAT16);
    k.gx = t.get();
    k.expect(ACLNN_ERR_PARAM_INVALID, "gradInput dtype is ACL_FLOAT16 but input is ACL_FLOAT");
  }
}

TEST(AclnnConvBackwardRules, Shapes) {
  Case c;
  auto with_tensor = [&](const std::vector<std::int64_t>& dims, int which, const std::string& fragment) {
    SCOPED_TRACE(fragment);
    Call k;
    HostTensor t(dims, ACL_FLOAT);
    switch (which) {
      case 0:
        k.dy = t.get();
        break;
      case 1:
        k.x = t.get();
        break;
      case 2:
        k.w = t.get();
        break;
      default:
        k.gx = t.get();
        break;
    }
    k.expect(ACLNN_ERR_PARAM_INVALID, fragment);
  };
  with_tensor({2, 0, 5, 6, 7}, 1, "input C is 0 but must be in [1, 2147483647]");
  with_tensor({2, 4, 5, 0, 7}, 1, "input H is 0");
  with_tensor({6, 2, 0, 3, 3}, 2, "weight D is 0");
  with_tensor({2, 4, 5, 6, 8}, 3, "gradInput W is 8 but input says 7");
  with_tensor({3, 4, 5, 6, 7}, 3, "gradInput N is 3 but input says 2");
  with_tensor({6, 3, 3, 3, 3}, 2, "weight C is 3 but input C (4) / groups (2) is 2");
  with_tensor({2, 5, 3, 3, 4}, 0, "gradOutput C is 5 but weight N is 6");
  with_tensor({1, 6, 3, 3, 4}, 0, "gradOutput N is 1 but input N is 2");
  with_tensor({2, 6, 3, 4, 4}, 0,
              "gradOutput H is 4 but input, weight, stride, padding and dilation imply 3");
  with_tensor({2, 6, 3, 3, 3}, 0,
              "gradOutput W is 3 but input, weight, stride, padding and dilation imply 4");
  with_tensor({6, 2, 8, 3, 3}, 2, "input D + padding (7) is smaller than the dilated weight D (8)");
  {
    Call k;  // a huge view over one element (stride 0)
    std::vector<std::int64_t> dims{2, 2147483648, 1, 1, 1}, strides{0, 0, 0, 0, 0}, storage{1};
    float one = 1.0f;
    aclTensor* x = aclCreateTensor(dims.data(), 5, ACL_FLOAT, strides.data(), 0, ACL_FORMAT_NCDHW,
                                   storage.data(), 1, &one);
    ASSERT_NE(x, nullptr) << aclGetRecentErrMsg();
    k.x = x;
    k.expect(ACLNN_ERR_PARAM_INVALID, "input C is 2147483648 but must be in [1, 2147483647]");
    EXPECT_EQ(aclDestroyTensor(x), ACLNN_SUCCESS);
  }
}

TEST(AclnnConvBackwardRules, Parameters) {
  struct Rule {
    std::vector<std::int64_t> value;
    int which;  // 0 stride, 1 padding, 2 dilation, 3 outputPadding
    std::string fragment;
  };
  const Rule rules[] = {
      {{2, 2}, 0, "stride has 2 values [2,2] but rank-5 tensors need 3"},
      {{2, 0, 2}, 0, "stride [2,0,2]: the H entry is 0 but must be in [1, 2147483647]"},
      {{2, 2, 2147483648}, 0, "stride [2,2,2147483648]: the W entry is 2147483648"},
      {{1, 1, 1, 1}, 1, "padding has 4 values [1,1,1,1] but rank-5 tensors need 3"},
      {{1, -1, 1}, 1, "padding [1,-1,1]: the H front entry is -1 but must be in [0, 2147483647]"},
      {{1, 0, 1}, 2, "dilation [1,0,1]: the H entry is 0"},
      {{1}, 2, "dilation has 1 values [1] but rank-5 tensors need 3"},
      {{0, 1, 0}, 3, "outputPadding [0,1,0]: entry 1 is 1 but must be 0 when transposed is false"},
      {{0, 0}, 3, "outputPadding has 2 values"},
  };
  for (const Rule& r : rules) {
    SCOPED_TRACE(r.fragment);
    Call k;
    IntArray a(r.value);
    (r.which == 0   ? k.stride
     : r.which == 1 ? k.padding
     : r.which == 2 ? k.dilation
                    : k.output_padding) = a.get();
    k.expect(ACLNN_ERR_PARAM_INVALID, r.fragment);
  }
  for (int groups : {0, -2, 65536}) {
    Call k;
    k.groups = groups;
    k.expect(ACLNN_ERR_PARAM_INVALID, "groups is " + std::to_string(groups) + " but must be in [1, 65535]");
  }
  {
    Call k;
    k.groups = 4;
    k.expect(ACLNN_ERR_PARAM_INVALID, "groups is 4 but weight N (6) is not divisible by it");
  }
  {
    Case r4 = rank4(Case{});
    Tensors t(r4);
    IntArray s(r4.stride), p({1, 1, 1}), d(r4.dilation), op({0, 0});
    Call k;
    k.dy = t.dy.get(), k.x = t.x.get(), k.w = t.w.get(), k.gx = t.gx.get();
    k.stride = s.get(), k.padding = p.get(), k.dilation = d.get(), k.output_padding = op.get();
    k.expect(ACLNN_ERR_PARAM_INVALID, "padding has 3 values [1,1,1] but rank-4 tensors need 2 (H, W) or 4");
  }
}

TEST(AclnnConvBackwardRules, OverlappingGradInputViewIs161002) {
  Case c;
  Call k;
  std::vector<std::int64_t> dims = c.x_dims(), strides{210, 0, 42, 7, 1},
                            storage{420};  // every C shares memory
  std::vector<float> data(420);
  aclTensor* gx = aclCreateTensor(dims.data(), 5, ACL_FLOAT, strides.data(), 0, ACL_FORMAT_NCDHW,
                                  storage.data(), 1, data.data());
  ASSERT_NE(gx, nullptr) << aclGetRecentErrMsg();
  k.gx = gx;
  k.expect(ACLNN_ERR_PARAM_INVALID, "gradInput");
  EXPECT_NE(std::string(aclGetRecentErrMsg()).find("overlap"), std::string::npos) << aclGetRecentErrMsg();
  EXPECT_EQ(aclDestroyTensor(gx), ACLNN_SUCCESS);
}

TEST(AclnnConvBackwardRules, DestroyedOrForeignObjectsAre161002) {
  Case c;
  {
    Call k;
    std::vector<std::int64_t> dims = c.dy_dims();
    std::vector<float> data(static_cast<std::size_t>(product(dims)));
    aclTensor* t =
        aclCreateTensor(dims.data(), 5, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, dims.data(), 5, data.data());
    ASSERT_EQ(aclDestroyTensor(t), ACLNN_SUCCESS);
    k.dy = t;  // dangling: the registry knows it is gone
    k.expect(ACLNN_ERR_PARAM_INVALID, "gradOutput is not a live aclTensor");
  }
  {
    Call k;
    k.stride = reinterpret_cast<const aclIntArray*>(k.t.dy.get());  // a tensor where an int array belongs
    k.expect(ACLNN_ERR_PARAM_INVALID, "stride is not a live aclIntArray");
  }
  {
    Call k;
    k.mask = reinterpret_cast<const aclBoolArray*>(k.s.get());
    k.expect(ACLNN_ERR_PARAM_INVALID, "outputMask is not a live aclBoolArray");
  }
}

// ---- the second phase ----

TEST(AclnnConvBackwardRun, ExecutorIsConsumedByTheRun) {
  Call k;
  ASSERT_EQ(k.get(), ACLNN_SUCCESS);
  ASSERT_EQ(run_executor(k.ex, k.ws), ACLNN_SUCCESS);
  EXPECT_EQ(run_executor(k.ex, k.ws), ACLNN_ERR_PARAM_INVALID);
  EXPECT_NE(std::string(aclGetRecentErrMsg()).find("executor is not a live executor"), std::string::npos);
  EXPECT_EQ(aclDestroyAclOpExecutor(k.ex), ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(aclnnConvolutionBackward(nullptr, 0, nullptr, nullptr), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_NE(std::string(aclGetRecentErrMsg()).find("aclnnConvolutionBackward: executor is null"),
            std::string::npos);
}

TEST(AclnnConvBackwardRun, DestroyedExecutorCannotRun) {
  Call k;
  ASSERT_EQ(k.get(), ACLNN_SUCCESS);
  EXPECT_EQ(aclDestroyAclOpExecutor(k.ex), ACLNN_SUCCESS);
  EXPECT_EQ(run_executor(k.ex, k.ws), ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(aclDestroyAclOpExecutor(nullptr), ACLNN_SUCCESS);
}

TEST(AclnnConvBackwardRun, StreamAndWorkspaceAreChecked) {
  {
    Call k;
    ASSERT_EQ(k.get(), ACLNN_SUCCESS);
    aclrtStream s = nullptr;
    ASSERT_EQ(aclrtCreateStream(&s), ACL_SUCCESS);
    ASSERT_EQ(aclrtDestroyStream(s), ACL_SUCCESS);
    EXPECT_EQ(run_executor(k.ex, k.ws, s), ACLNN_ERR_PARAM_INVALID);
    EXPECT_NE(std::string(aclGetRecentErrMsg()).find("stream was not created"), std::string::npos);
  }
  Call k;
  k.cube = 2;  // fp32 with USE_FP16 needs a workspace for the result before the cast back
  ASSERT_EQ(k.get(), ACLNN_SUCCESS);
  ASSERT_GE(k.ws, static_cast<std::uint64_t>(k.t.gx.elements()) * 2);
  EXPECT_EQ(aclnnConvolutionBackward(nullptr, k.ws, k.ex, nullptr), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_NE(std::string(aclGetRecentErrMsg()).find("workspace is null"), std::string::npos);
  ASSERT_EQ(k.get(), ACLNN_SUCCESS);
  std::vector<unsigned char> ws(k.ws);
  EXPECT_EQ(aclnnConvolutionBackward(ws.data(), k.ws - 1, k.ex, nullptr), ACLNN_ERR_PARAM_INVALID);
  EXPECT_NE(std::string(aclGetRecentErrMsg()).find("workspaceSize is"), std::string::npos);
  for (std::int64_t i = 0; i < k.t.gx.elements(); ++i) ASSERT_EQ(k.t.gx.code(i), 0x5A5A5A5Au);
}

TEST(AclnnConvBackwardRun, ErrorMessagesArePerThread) {
  Call k;
  k.groups = 0;
  EXPECT_EQ(k.get(), ACLNN_ERR_PARAM_INVALID);
  std::string other;
  std::thread([&] { other = aclGetRecentErrMsg(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_NE(std::string(aclGetRecentErrMsg()).find("groups is 0"), std::string::npos);
}

}  // namespace
}  // namespace acl_test
