// validate() as the front ends call it: with the names their callers know the parameters by, so every
// message (and Error::parameter()) says what the caller wrote; and the one expansion of 4-D shapes to 5-D.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "conv3d_dx/conv3d_dx.hpp"

namespace conv3d_dx {

// The largest size, stride, dilation and pad: 2^31 - 1.
constexpr std::int64_t kMaxDim = 2147483647;

// What validate()'s messages call each parameter and axis. The defaults are the operator's own names.
struct ParameterNames {
  std::string input_size = "input_size", out_backprop = "out_backprop", filter = "filter", y = "y",
              strides = "strides", pads = "pads", dilations = "dilations", groups = "groups";
  std::array<std::string, 5> axes{"N", "C", "D", "H", "W"};                   // dy, y, input_size
  std::array<std::string, 5> filter_axes{"Cout", "Cin_g", "kD", "kH", "kW"};  // the filter
  // strides, pads and dilations as the caller wrote them, quoted in messages instead of the 5 or 6 values
  // validate() judges (empty: those values).
  std::string strides_text, pads_text, dilations_text;
};

Problem validate(const ProblemSpec&, const ParameterNames&);

// A shape or attribute list of 3, 4 or 5 values in `layout` order as 5 values: the missing leading spatial
// axes (D; D and H) are inserted with `fill` where the layout keeps D.
std::array<std::int64_t, 5> expand_to_5d(const std::vector<std::int64_t>& values, Layout layout,
                                         std::int64_t fill = 1);

}  // namespace conv3d_dx
