// The overlap rule on aclnnConvolutionBackward: an output sharing a byte with a tensor it is computed from
// (gradInput: gradOutput, weight; gradWeight: gradOutput, input; gradBias: gradOutput) or with another
// output is 161002 naming both tensors, with nothing written. An output over an input it is not computed
// from (gradInput over input, gradWeight over weight, gradBias over input) gives the out-of-place results.
#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "acl_test_util.hpp"

namespace {

using namespace acl_test;

enum Slot { kDy, kX, kW, kGx, kGw, kGb, kSlots };
constexpr const char* kNames[kSlots] = {"gradOutput", "input",      "weight",
                                        "gradInput",  "gradWeight", "gradBias"};

// The default case's six fp32 tensors as contiguous views into one storage, at element offsets `at`.
struct SharedCall {
  Case c;
  std::array<std::vector<std::int64_t>, kSlots> dims;
  std::vector<float> storage;
  std::array<aclTensor*, kSlots> t{};

  explicit SharedCall(const std::array<std::int64_t, kSlots>& at) {
    dims = {c.dy_dims(), c.x_dims(), c.w_dims(), c.x_dims(), c.w_dims(), std::vector<std::int64_t>{c.Cout}};
    std::int64_t total = 0;
    for (int s = 0; s < kSlots; ++s) total = std::max(total, at[s] + product(dims[s]));
    storage.assign(static_cast<std::size_t>(total + 16), -99.0f);
    // Inputs: multiples of 1/8, so every sum is exact; written where they are (later slots win overlaps).
    std::mt19937 rng(3);
    std::uniform_int_distribution<int> v(-8, 8);
    for (int s : {kDy, kX, kW})
      for (std::int64_t i = 0; i < product(dims[s]); ++i)
        storage[static_cast<std::size_t>(at[s] + i)] = static_cast<float>(v(rng)) / 8.0f;
    const std::int64_t n = static_cast<std::int64_t>(storage.size());
    for (int s = 0; s < kSlots; ++s) {
      const std::vector<std::int64_t>& d = dims[s];
      t[s] = aclCreateTensor(d.data(), d.size(), ACL_FLOAT, nullptr, at[s], ACL_FORMAT_ND, &n, 1,
                             storage.data());
      EXPECT_NE(t[s], nullptr) << aclGetRecentErrMsg();
    }
  }
  ~SharedCall() {
    for (aclTensor* p : t) EXPECT_EQ(aclDestroyTensor(p), ACLNN_SUCCESS);
  }
  SharedCall(const SharedCall&) = delete;
  SharedCall& operator=(const SharedCall&) = delete;

  // Both phases with outputMask `mask`; the status of the first that fails.
  aclnnStatus run(std::vector<bool> mask = {true, true, true}) {
    IntArray stride(c.stride), padding(c.pad), dilation(c.dilation), output_padding({0, 0, 0});
    BoolArray m(std::move(mask));
    std::uint64_t ws = 0;
    aclOpExecutor* ex = nullptr;
    const aclnnStatus status = aclnnConvolutionBackwardGetWorkspaceSize(
        t[kDy], t[kX], t[kW], nullptr, stride.get(), padding.get(), dilation.get(), false,
        output_padding.get(), static_cast<int>(c.groups), m.get(), 0, t[kGx], t[kGw], t[kGb], &ws, &ex);
    if (status != ACLNN_SUCCESS) {
      EXPECT_EQ(ex, nullptr);
      return status;
    }
    return run_executor(ex, ws);
  }
  // The view's elements, in order.
  std::vector<float> values(Slot s, std::int64_t at) const {
    return {storage.begin() + at, storage.begin() + at + product(dims[s])};
  }
};

// Element offsets that keep every tensor apart, with gaps between them.
std::array<std::int64_t, kSlots> apart() {
  const Case c;
  const std::int64_t sizes[kSlots] = {product(c.dy_dims()), product(c.x_dims()), product(c.w_dims()),
                                      product(c.x_dims()),  product(c.w_dims()), c.Cout};
  std::array<std::int64_t, kSlots> at{};
  std::int64_t next = 5;
  for (int s = 0; s < kSlots; ++s) {
    at[s] = next;
    next += sizes[s] + 7;
  }
  return at;
}

TEST(AclnnOverlap, AnOutputOverWhatItIsComputedFromOrAnotherOutputIs161002) {
  const std::pair<Slot, Slot> refused[] = {{kGx, kDy}, {kGx, kW}, {kGx, kGw}, {kGx, kGb},
                                           {kGw, kDy}, {kGw, kX}, {kGw, kGb}, {kGb, kDy}};
  for (auto [written, other] : refused)
    for (std::int64_t shift : {std::int64_t{0}, std::int64_t{3}}) {
      SCOPED_TRACE(std::string(kNames[written]) + " over " + kNames[other] + ", shifted by " +
                   std::to_string(shift));
      std::array<std::int64_t, kSlots> at = apart();
      at[written] = at[other] + shift;
      SharedCall k(at);
      const std::vector<float> before = k.storage;
      EXPECT_EQ(k.run(), ACLNN_ERR_PARAM_INVALID);
      const std::string message = aclGetRecentErrMsg();
      EXPECT_NE(message.find(std::string("aclnnConvolutionBackwardGetWorkspaceSize: ") + kNames[written] +
                             " (bytes 0x"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find(std::string("overlaps ") + kNames[other] + " (bytes 0x"), std::string::npos)
          << message;
      EXPECT_TRUE(k.storage == before) << "memory changed although the call was refused";
    }
}

// Only the outputs outputMask asks for are written, so only they are checked.
TEST(AclnnOverlap, OutputsNotAskedForAreNotChecked) {
  std::array<std::int64_t, kSlots> at = apart();
  at[kGw] = at[kDy];
  at[kGb] = at[kDy] + 1;
  SharedCall k(at);
  EXPECT_EQ(k.run({true, false, false}), ACLNN_SUCCESS) << aclGetRecentErrMsg();
}

// Touching tensors share no byte.
TEST(AclnnOverlap, AdjacentTensorsAreAccepted) {
  std::array<std::int64_t, kSlots> at = apart();
  const Case c;
  at[kGx] = at[kDy] + product(c.dy_dims());  // right after gradOutput
  at[kGb] = at[kGx] + product(c.x_dims());   // right after gradInput
  SharedCall k(at);
  EXPECT_EQ(k.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
}

// gradInput over input, gradWeight over weight and gradBias over input's start: the same results as with
// every tensor apart, in one call asking for all three.
TEST(AclnnOverlap, OutputsOverInputsTheyAreNotComputedFromMatchOutOfPlace) {
  const std::array<std::int64_t, kSlots> out_of_place = apart();
  SharedCall apart_call(out_of_place);
  ASSERT_EQ(apart_call.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  const std::pair<Slot, Slot> in_place[] = {{kGx, kX}, {kGw, kW}, {kGb, kX}, {kGb, kW}};
  for (auto [written, over] : in_place) {
    SCOPED_TRACE(std::string(kNames[written]) + " over " + kNames[over]);
    std::array<std::int64_t, kSlots> at = out_of_place;
    at[written] = at[over];
    SharedCall k(at);
    ASSERT_EQ(k.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    for (Slot s : {kGx, kGw, kGb})
      EXPECT_EQ(k.values(s, at[s]), apart_call.values(s, out_of_place[s])) << kNames[s];
  }
}

}  // namespace
