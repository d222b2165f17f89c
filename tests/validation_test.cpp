// One bad input per validation rule: each must throw an Error naming the parameter and the offending
// value, and leave y untouched (canary-filled).
#include <functional>

#include "support/testing.hpp"

namespace conv3d_dx::testing {
namespace {

struct BadInput {
  const char* label;
  std::function<void(ProblemSpec&)> mutate;
  const char* parameter;  // Error::parameter()
  const char* mentions;   // a piece of the message: the value or the rule
  ErrorCode code = ErrorCode::invalid_argument;
};

// A valid NDHWC problem: N 2, Cin 4, Cout 6, groups 2, y 5x6x7, kernel 3x2x3, stride 2x1x2, pads 1,0,0,1,1,1.
Case base_case() {
  Case c;
  c.N = 2;
  c.Cin = 4;
  c.Cout = 6;
  c.groups = 2;
  c.in = {5, 6, 7};
  c.kernel = {3, 2, 3};
  c.stride = {2, 1, 2};
  c.pad_front = {1, 0, 1};
  c.pad_back = {0, 1, 1};
  return c;
}

const std::vector<BadInput>& bad_inputs() {
  static const std::vector<BadInput> cases = {
      {"data_format DHWCN", [](ProblemSpec& s) { s.attrs.data_format = Layout::DHWCN; }, "data_format",
       "DHWCN"},
      {"input_size 3 values", [](ProblemSpec& s) { s.attrs.input_size.resize(3); }, "input_size", "3 values"},
      {"input_size 6 values", [](ProblemSpec& s) { s.attrs.input_size.push_back(1); }, "input_size",
       "6 values"},
      {"input_size negative N", [](ProblemSpec& s) { s.attrs.input_size[0] = -1; }, "input_size", "-1"},
      {"input_size C zero", [](ProblemSpec& s) { s.attrs.input_size[4] = 0; }, "input_size", "C is 0"},
      {"input_size D zero", [](ProblemSpec& s) { s.attrs.input_size[1] = 0; }, "input_size", "D is 0"},
      {"input_size W above 2^31-1", [](ProblemSpec& s) { s.attrs.input_size[3] = 2147483648; }, "input_size",
       "2147483648"},
      {"strides N not 1", [](ProblemSpec& s) { s.attrs.strides[0] = 2; }, "strides", "N entry is 2"},
      {"strides C not 1", [](ProblemSpec& s) { s.attrs.strides[4] = 3; }, "strides", "C entry is 3"},
      {"strides D zero", [](ProblemSpec& s) { s.attrs.strides[1] = 0; }, "strides", "D entry is 0"},
      {"strides H negative", [](ProblemSpec& s) { s.attrs.strides[2] = -1; }, "strides", "H entry is -1"},
      {"dilations N not 1", [](ProblemSpec& s) { s.attrs.dilations[0] = 2; }, "dilations", "N entry is 2"},
      {"dilations C not 1", [](ProblemSpec& s) { s.attrs.dilations[4] = 0; }, "dilations", "C entry is 0"},
      {"dilations W zero", [](ProblemSpec& s) { s.attrs.dilations[3] = 0; }, "dilations", "W entry is 0"},
      {"pads negative", [](ProblemSpec& s) { s.attrs.pads[3] = -2; }, "pads", "-2"},
      {"pads above 2^31-1", [](ProblemSpec& s) { s.attrs.pads[0] = 1LL << 40; }, "pads", "1099511627776"},
      {"groups zero", [](ProblemSpec& s) { s.attrs.groups = 0; }, "groups", "is 0"},
      {"groups above 65535", [](ProblemSpec& s) { s.attrs.groups = 65536; }, "groups", "65536"},
      {"groups not dividing Cin", [](ProblemSpec& s) { s.attrs.groups = 3; }, "groups", "not divisible"},
      {"filter Cin_g times groups not Cin", [](ProblemSpec& s) { s.attrs.groups = 1; }, "filter",
       "Cin_g is 2"},
      {"groups not dividing Cout",
       [](ProblemSpec& s) {
         s.attrs.groups = 4;
         s.attrs.input_size[4] = 8;
         s.y.shape[4] = 8;
       },
       "groups", "filter Cout (6)"},
      {"out_backprop C not filter Cout", [](ProblemSpec& s) { s.out_backprop.shape[4] = 5; }, "out_backprop",
       "C is 5"},
      {"out_backprop N not input_size N", [](ProblemSpec& s) { s.out_backprop.shape[0] = 3; }, "out_backprop",
       "N is 3"},
      {"out_backprop D wrong", [](ProblemSpec& s) { s.out_backprop.shape[1] += 1; }, "out_backprop",
       "D is 3 but input_size, filter, strides, pads and dilations imply 2"},
      {"out_backprop H wrong", [](ProblemSpec& s) { s.out_backprop.shape[2] -= 1; }, "out_backprop",
       "imply 6"},
      {"out_backprop W wrong", [](ProblemSpec& s) { s.out_backprop.shape[3] = 1; }, "out_backprop",
       "imply 4"},
      {"out_backprop zero H", [](ProblemSpec& s) { s.out_backprop.shape[2] = 0; }, "out_backprop", "H is 0"},
      {"out_backprop layout differs", [](ProblemSpec& s) { s.out_backprop.layout = Layout::NCDHW; },
       "out_backprop", "data_format NDHWC"},
      {"y layout differs", [](ProblemSpec& s) { s.y.layout = Layout::NCDHW; }, "y", "data_format NDHWC"},
      {"y shape not input_size", [](ProblemSpec& s) { s.y.shape[2] = 7; }, "y", "input_size says 6"},
      {"filter layout unknown", [](ProblemSpec& s) { s.filter.layout = static_cast<Layout>(7); }, "filter",
       "7"},
      {"filter kD zero", [](ProblemSpec& s) { s.filter.shape[2] = 0; }, "filter", "kD is 0"},
      {"filter Cout negative", [](ProblemSpec& s) { s.filter.shape[0] = -6; }, "filter", "Cout is -6"},
      {"filter larger than padded input",
       [](ProblemSpec& s) {
         s.filter.shape[3] = 9;  // kH 9 > 6 + 0 + 1
       },
       "input_size", "dilated filter H (9)"},
      {"dilation makes filter too large", [](ProblemSpec& s) { s.attrs.dilations[3] = 5; }, "input_size",
       "dilated filter W (11)"},
      {"dtype mismatch", [](ProblemSpec& s) { s.filter.dtype = DType::bf16; }, "filter", "same dtype"},
      {"hif8 mixed even when mixing allowed",
       [](ProblemSpec& s) {
         s.allow_mixed_dtypes = true;
         s.filter.dtype = DType::hif8;
       },
       "filter", "cannot be mixed"},
      {"unknown dtype", [](ProblemSpec& s) { s.y.dtype = static_cast<DType>(9); }, "y", "dtype 9"},
      {"y dtype neither input nor fp32", [](ProblemSpec& s) { s.y.dtype = DType::f16; }, "y",
       "must be the input dtype (fp32) or fp32"},
      {"y dtype neither input nor fp32 when mixing",
       [](ProblemSpec& s) {
         s.allow_mixed_dtypes = true;
         s.out_backprop.dtype = DType::f16;
         s.filter.dtype = DType::bf16;
         s.y.dtype = DType::hif8;  // promotion casts the result to any 16/32-bit type, never to 8 bits
       },
       "y", "(fp16 or bf16) or fp32"},
      {"hf32 with bf16",
       [](ProblemSpec& s) {
         s.out_backprop.dtype = s.filter.dtype = DType::bf16;
         s.attrs.enable_hf32 = true;
       },
       "enable_hf32", "bf16"},
      {"hf32 with fp16 rounding",
       [](ProblemSpec& s) {
         s.attrs.enable_hf32 = true;
         s.input_rounding = InputRounding::fp16;
       },
       "enable_hf32", "fp16"},
      {"unknown overflow mode", [](ProblemSpec& s) { s.overflow = static_cast<OverflowMode>(5); }, "overflow",
       "5"},
      {"negative view stride", [](ProblemSpec& s) { s.out_backprop.strides[2] = -4; }, "out_backprop", "-4"},
      {"y overlapping itself", [](ProblemSpec& s) { s.y.strides[3] = 1; }, "y", "overlap"},
      {"y offsets overflow 64 bits", [](ProblemSpec& s) { s.y.strides[0] = 1LL << 61; }, "y", "64 bits",
       ErrorCode::size_overflow},
      {"filter offsets overflow 64 bits", [](ProblemSpec& s) { s.filter.strides[0] = 1LL << 62; }, "filter",
       "64 bits", ErrorCode::size_overflow},
      {"y element count overflows",
       [](ProblemSpec& s) {
         // Every dim within [1, 2^31-1], but N*C*D*H*W exceeds 2^63.
         s.attrs.input_size = {2147483647, 2147483647, 2147483647, 7, 4};
         s.y.shape = {2147483647, 2147483647, 2147483647, 7, 4};
         s.out_backprop.shape = {2147483647, 1073741823, 2147483647, 4, 6};
         s.attrs.pads = {1, 0, 0, 1, 1, 1};
       },
       "", "64 bits", ErrorCode::size_overflow},
  };
  return cases;
}

class Validation : public ::testing::TestWithParam<std::size_t> {};

TEST_P(Validation, RejectsWithParameterAndLeavesYUntouched) {
  const BadInput& bad = bad_inputs()[GetParam()];
  std::mt19937_64 rng(1);
  Instance inst = instantiate(base_case(), rng, Fill::small_integers);
  ASSERT_NO_THROW(validate(inst.spec)) << "the base case must be valid";
  ProblemSpec spec = inst.spec;
  bad.mutate(spec);
  try {
    conv3d_backprop_input(spec);
    FAIL() << bad.label << ": accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), bad.code) << bad.label << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(bad.mentions), std::string::npos)
        << bad.label << ": message \"" << e.what() << "\" lacks \"" << bad.mentions << "\"";
    if (*bad.parameter) {
      EXPECT_EQ(e.parameter(), bad.parameter) << bad.label << ": " << e.what();
      EXPECT_EQ(std::string(e.what()).rfind(bad.parameter, 0), 0u) << "the message starts with the parameter";
    }
  }
  EXPECT_TRUE(canary_intact(inst.y)) << bad.label << ": y was written";
}

INSTANTIATE_TEST_SUITE_P(EveryRule, Validation, ::testing::Range<std::size_t>(0, bad_inputs().size()),
                         [](const auto& test) {
                           std::string name = bad_inputs()[test.param].label;
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

TEST(Validation, ContiguousViewsOfHugeShapesReportOverflow) {
  try {
    TensorView::contiguous(nullptr, DType::f32, Layout::NCDHW, {1, 2147483647, 2147483647, 2147483647, 3});
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::size_overflow);
    EXPECT_EQ(e.parameter(), "shape");
    EXPECT_NE(std::string(e.what()).find("2147483647"), std::string::npos) << e.what();
  }
}

TEST(Validation, AtLeastFortyRules) { EXPECT_GE(bad_inputs().size(), 40u); }

TEST(Validation, NullPointersAreErrorsAndWriteNothing) {
  std::mt19937_64 rng(2);
  Instance inst = instantiate(base_case(), rng, Fill::small_integers);
  for (const char* which : {"out_backprop", "filter", "y"}) {
    ProblemSpec spec = inst.spec;
    if (std::string(which) == "out_backprop") spec.out_backprop.data = nullptr;
    if (std::string(which) == "filter") spec.filter.data = nullptr;
    if (std::string(which) == "y") spec.y.data = nullptr;
    try {
      conv3d_backprop_input(spec);
      FAIL() << which << " null accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::null_pointer);
      EXPECT_EQ(e.parameter(), which);
    }
    EXPECT_TRUE(canary_intact(inst.y));
  }
}

TEST(Validation, FourValueInputSizeInsertsDepthOne) {
  Case c = base_case();
  c.in = {1, 6, 7};
  c.kernel = {1, 2, 3};
  c.stride = {1, 1, 2};
  c.pad_front = {0, 0, 1};
  c.pad_back = {0, 1, 1};
  std::mt19937_64 rng(3);
  Instance inst = instantiate(c, rng, Fill::small_integers);
  inst.spec.attrs.input_size = {2, 6, 7, 4};  // N, H, W, C
  const Problem p = validate(inst.spec);
  EXPECT_EQ(p.y_size, (std::array<std::int64_t, 3>{1, 6, 7}));
  inst.spec.attrs.data_format = Layout::NCDHW;
  inst.spec.attrs.input_size = {2, 4, 6, 7};
  EXPECT_THROW(validate(inst.spec), Error);  // the views are still NDHWC
}

TEST(Validation, ZeroBatchIsAnEmptySuccess) {
  Case c = base_case();
  c.N = 0;
  std::mt19937_64 rng(4);
  Instance inst = instantiate(c, rng, Fill::small_integers);
  const Problem p = validate(inst.spec);
  EXPECT_EQ(p.y_elements(), 0);
  EXPECT_NO_THROW(conv3d_backprop_input(inst.spec));
  EXPECT_TRUE(canary_intact(inst.y));
  // An empty y may have any strides, zeros included (as DLPack describes empty arrays): nothing can overlap.
  inst.spec.y.strides = {0, 0, 0, 0, 0};
  EXPECT_NO_THROW(validate(inst.spec));
  EXPECT_NO_THROW(conv3d_backprop_input(inst.spec));
}

TEST(Compatibility, ReportsEachProductsLimits) {
  std::mt19937_64 rng(5);
  Case c = base_case();
  c.groups = 1;
  Instance inst = instantiate(c, rng, Fill::small_integers);
  auto verdicts = ascend_compatibility(validate(inst.spec));
  ASSERT_EQ(verdicts.size(), 2u);
  EXPECT_TRUE(verdicts[0].accepted);
  EXPECT_TRUE(verdicts[1].accepted);

  inst.spec.attrs.strides[2] = 64;  // H stride beyond A2/A3's 63; shapes follow
  inst.spec.attrs.pads = {1, 0, 300, 0, 1, 1};
  inst.spec.out_backprop.shape[2] = (6 + 300 - 2) / 64 + 1;
  verdicts = ascend_compatibility(validate(inst.spec));
  EXPECT_FALSE(verdicts[0].accepted);
  ASSERT_EQ(verdicts[0].violations.size(), 2u);
  EXPECT_NE(verdicts[0].violations[0].find("strides H is 64"), std::string::npos)
      << verdicts[0].violations[0];
  EXPECT_NE(verdicts[0].violations[1].find("pads H front is 300"), std::string::npos)
      << verdicts[0].violations[1];
  EXPECT_TRUE(verdicts[1].accepted);
}

// The Ascend 950 rows of the operator page's dtype/format table (docs/operator.md, "Ascend products"),
// written out row by row: every combination listed is accepted, every other one rejected.
struct Ascend950Row {
  bool grouped;
  bool eight_bit;
  Layout data_format;
  Layout filter_format;
};
constexpr Ascend950Row kAscend950Table[] = {
    {false, true, Layout::NCDHW, Layout::NCDHW},  {false, true, Layout::NDHWC, Layout::NCDHW},
    {false, false, Layout::NCDHW, Layout::NCDHW}, {false, false, Layout::NCDHW, Layout::NDHWC},
    {false, false, Layout::NCDHW, Layout::DHWCN}, {false, false, Layout::NDHWC, Layout::NDHWC},
    {false, false, Layout::NDHWC, Layout::NCDHW}, {false, false, Layout::NDHWC, Layout::DHWCN},
    {true, true, Layout::NCDHW, Layout::NCDHW},   {true, false, Layout::NCDHW, Layout::NCDHW},
    {true, false, Layout::NCDHW, Layout::NDHWC},  {true, false, Layout::NCDHW, Layout::DHWCN},
};

TEST(Compatibility, Ascend950FollowsTheOperatorTableRowByRow) {
  std::mt19937_64 rng(6);
  int accepted_rows = 0;
  for (const std::int64_t groups : {1, 2})
    for (const DType dtype : kAllDtypes)
      for (const Layout data_format : kDataFormats)
        for (const Layout filter_format : kFilterFormats) {
          Case c = with_dtype(base_case(), dtype);
          c.groups = groups;
          c.data_format = data_format;
          c.filter_format = filter_format;
          const Ascend950Row combination{groups > 1, dtype == DType::hif8 || dtype == DType::fp8_e4m3fn,
                                         data_format, filter_format};
          bool listed = false;
          for (const Ascend950Row& row : kAscend950Table)
            listed |= row.grouped == combination.grouped && row.eight_bit == combination.eight_bit &&
                      row.data_format == combination.data_format &&
                      row.filter_format == combination.filter_format;
          Instance inst = instantiate(c, rng, Fill::small_integers);
          const auto verdicts = ascend_compatibility(validate(inst.spec));
          ASSERT_EQ(verdicts.size(), 2u);
          EXPECT_EQ(verdicts[1].accepted, listed) << c.name();
          // Each broken rule is named once: groups with NDHWC feature maps, an 8-bit filter not in NCDHW.
          std::vector<std::string> expected;
          if (groups > 1 && data_format == Layout::NDHWC) expected.push_back("groups 2 > 1");
          if (combination.eight_bit && filter_format != Layout::NCDHW) expected.push_back("filter format");
          ASSERT_EQ(verdicts[1].violations.size(), expected.size()) << c.name();
          for (std::size_t i = 0; i < expected.size(); ++i)
            EXPECT_NE(verdicts[1].violations[i].find(expected[i]), std::string::npos)
                << verdicts[1].violations[i];
          accepted_rows += listed;
          // A2/A3 have no 8-bit types and no format restrictions.
          EXPECT_EQ(verdicts[0].accepted, !combination.eight_bit) << c.name();
        }
  EXPECT_EQ(accepted_rows, 3 * 6 + 2 * 2 + 3 * 3 + 2 * 1);  // the rows times their dtypes
}

TEST(Compatibility, FilterHeightAndWidthLimitApplyEverywhere) {
  Case c;
  c.in = {1, 2, 600};
  c.kernel = {1, 1, 600};
  std::mt19937_64 rng(7);
  Instance inst = instantiate(c, rng, Fill::small_integers);
  for (const auto& v : ascend_compatibility(validate(inst.spec))) {
    EXPECT_FALSE(v.accepted) << v.product;
    EXPECT_NE(v.violations.at(0).find("filter W is 600"), std::string::npos);
  }
}

// Problems compare field by field: the same spec gives equal problems, and a change of any one field (a
// stride of a tensor, an attribute, a dtype, the overflow mode) makes them differ.
TEST(Problem, EqualityComparesEveryField) {
  std::mt19937_64 rng(13);
  const Case c = base_case();
  const Instance inst = instantiate(c, rng, Fill::small_integers);
  const Problem p = validate(inst.spec);
  EXPECT_EQ(p, validate(inst.spec));
  std::vector<Problem> changed(6, p);
  changed[0].dy_strides[0] += 1;
  changed[1].y_strides[4] += 1;
  changed[2].pad_back[2] += 1;
  changed[3].y_dtype = DType::bf16;
  changed[4].overflow = OverflowMode::saturate;
  changed[5].input_rounding = InputRounding::hf32;
  for (const Problem& q : changed) EXPECT_NE(p, q) << q.describe();
}

// flops_inside against a count of every (dy pixel, tap) pair whose y pixel lies inside y.
TEST(Problem, FlopsInsideCountsTheProductsThatReachY) {
  const auto brute = [](const Problem& p) {
    double pairs = 1;
    for (int a = 0; a < 3; ++a) {
      std::int64_t n = 0;
      for (std::int64_t o = 0; o < p.dy_size[a]; ++o)
        for (std::int64_t k = 0; k < p.kernel[a]; ++k) {
          const std::int64_t at = o * p.stride[a] + k * p.dilation[a] - p.pad_front[a];
          n += at >= 0 && at < p.y_size[a];
        }
      pairs *= static_cast<double>(n);
    }
    return 2.0 * static_cast<double>(p.N * p.Cout() * p.Cin_g) * pairs;
  };
  std::mt19937_64 rng(11);
  int padded = 0;
  for (int i = 0; i < 300; ++i) {
    const Case c = random_case(rng, DType::f32, Layout::NDHWC, Layout::NCDHW);
    const Problem p = validate(instantiate(c, rng, Fill::small_integers).spec);
    EXPECT_EQ(p.flops_inside(), brute(p)) << c.name();
    EXPECT_LE(p.flops_inside(), p.flops()) << c.name();
    padded += p.flops_inside() < p.flops();
  }
  EXPECT_GT(padded, 30);  // the random cases do put taps on the pads
  // The suite's e: D 3, H and W 6, 3 x 3 x 3 taps, pads 1: 7 of 9 D pairs and 16 of 18 H and W pairs.
  Case e = base_case();
  e.in = {3, 6, 6};
  e.kernel = {3, 3, 3};
  e.stride = {1, 1, 1};
  e.pad_front = e.pad_back = {1, 1, 1};
  const Problem pe = validate(instantiate(e, rng, Fill::small_integers).spec);
  EXPECT_DOUBLE_EQ(pe.flops_inside() / pe.flops(), 7.0 / 9 * (16.0 / 18) * (16.0 / 18));
}

}  // namespace
}  // namespace conv3d_dx::testing
