// The CANN-style example with outputMask {true, true, true} (examples/aclnn_conv_backward_all_outputs.cpp) is
// run as a program; its printed gradInput, gradWeight and gradBias must equal the same problem computed by
// the library directly: the C++ API for gradInput, conv3d_dx::backward for gradWeight and gradBias.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "backward/backward.hpp"
#include "conv3d_dx/conv3d_dx.hpp"

namespace {

// The example's problem and data, restated.
constexpr std::array<std::int64_t, 5> kDy{2, 6, 4, 3, 3}, kX{2, 4, 4, 5, 6}, kW{6, 2, 3, 3, 3};

std::int64_t size(const std::array<std::int64_t, 5>& s) { return s[0] * s[1] * s[2] * s[3] * s[4]; }

std::vector<float> make_data(std::int64_t n, std::int64_t a, std::int64_t b) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] = static_cast<float>((i * a + b) % 17 - 8) / 8.0f;
  return v;
}

struct Expected {
  std::vector<float> dx, dw, db;
};

Expected expected() {
  using namespace conv3d_dx;
  const std::vector<float> dy = make_data(size(kDy), 37, 11), x = make_data(size(kX), 53, 5),
                           w = make_data(size(kW), 29, 3);
  Expected e;
  e.dx.resize(static_cast<std::size_t>(size(kX)));
  e.dw.resize(static_cast<std::size_t>(size(kW)));
  e.db.resize(6);
  ProblemSpec spec;
  spec.attrs.data_format = Layout::NCDHW;
  spec.attrs.input_size.assign(kX.begin(), kX.end());
  spec.attrs.strides = {1, 1, 1, 2, 2};
  spec.attrs.pads = {1, 1, 1, 1, 1, 1};
  spec.attrs.groups = 2;
  spec.input_rounding = InputRounding::hf32;  // cubeMathType 1 with fp32
  spec.out_backprop = TensorView::contiguous(dy.data(), DType::f32, Layout::NCDHW, kDy);
  spec.filter = TensorView::contiguous(w.data(), DType::f32, Layout::NCDHW, kW);
  spec.y = TensorView::contiguous(e.dx.data(), DType::f32, Layout::NCDHW, kX);
  conv3d_backprop_input(spec);
  // The same problem's other gradients: x has y's shape, gradWeight the filter's (both contiguous fp32).
  const Problem problem = validate(spec);
  const backward::GradientProblem p = backward::gradient_problem(problem, {DType::f32, problem.y_strides},
                                                                 {DType::f32, problem.filter_strides});
  backward::weight_gradient(p, dy.data(), x.data(), e.dw.data());
  backward::bias_gradient(p, dy.data(), e.db.data(), DType::f32, 1);
  return e;
}

TEST(AclnnExample, AllOutputsPrintTheLibrarysGradients) {
  std::FILE* pipe = popen(CONV3D_DX_ACL_EXAMPLE_ALL_OUTPUTS, "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  while (std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  ASSERT_EQ(pclose(pipe), 0) << output;

  const Expected e = expected();
  const std::map<std::string, const std::vector<float>*> results{
      {"gradInputResult", &e.dx}, {"gradWeightResult", &e.dw}, {"gradBiasResult", &e.db}};
  std::map<std::string, std::size_t> seen;
  std::size_t nonzero = 0;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    char name[32];
    long long index = 0;
    double value = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "%31[A-Za-z][%lld] is: %lf", name, &index, &value), 3) << line;
    const auto it = results.find(name);
    ASSERT_NE(it, results.end()) << line;
    ASSERT_EQ(static_cast<std::size_t>(index), seen[name]++) << line;  // every element, in order
    ASSERT_LT(static_cast<std::size_t>(index), it->second->size()) << line;
    // Every result is a multiple of 1/64, which %f prints exactly.
    EXPECT_EQ(value, static_cast<double>((*it->second)[static_cast<std::size_t>(index)])) << line;
    nonzero += value != 0.0;
  }
  for (const auto& [name, values] : results) EXPECT_EQ(seen[name], values->size()) << name;
  EXPECT_GT(nonzero, (e.dx.size() + e.dw.size() + e.db.size()) / 2);
}

}  // namespace
