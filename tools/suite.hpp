// The benchmark suites in forward-convolution terms, shared by `conv3d-dx bench --suite`, the Python bench
// and the oneDNN peer benchmark so all time exactly the same problems: `default` (shapes a-i plus U-Net,
// k1-stride-2, wide-tiny and video-VAE shapes; the README's tables) and `extra` (more layer types of 3D
// networks, for finding where conv3d-dx trails).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "conv3d_dx/conv3d_dx.hpp"

namespace conv3d_dx::suite {

struct Shape {
  std::string name;
  std::int64_t N, Cin;
  std::array<std::int64_t, 3> x;  // D, H, W of the forward input (= y of dgrad)
  std::int64_t Cout;
  std::array<std::int64_t, 3> kernel, stride, pad, dilation;  // pad is symmetric per axis
  std::int64_t groups;
};

inline std::array<std::int64_t, 3> cube(std::int64_t v) { return {v, v, v}; }

inline std::vector<Shape> default_suite() {
  return {
      {"a", 1, 64, {8, 56, 56}, 64, cube(3), cube(1), cube(1), cube(1), 1},
      {"b", 1, 128, {16, 32, 32}, 128, cube(3), cube(2), cube(1), cube(1), 1},
      {"c", 2, 64, {5, 66, 66}, 3, cube(3), cube(1), cube(0), cube(1), 1},
      {"d", 1, 256, {9, 22, 40}, 256, cube(3), cube(2), cube(0), cube(1), 1},
      {"e", 4, 768, {3, 6, 6}, 384, cube(3), cube(1), cube(1), cube(1), 1},
      {"f", 1, 3, {17, 39, 39}, 64, cube(7), cube(2), cube(0), cube(1), 1},
      {"g", 1, 64, {2, 32, 32}, 64, cube(2), cube(1), cube(1), cube(2), 1},
      {"h", 1, 128, {1, 64, 64}, 128, cube(3), cube(2), cube(1), cube(1), 128},
      {"i", 4, 256, {1, 16, 16}, 2730, cube(1), cube(1), cube(0), cube(1), 1},
      // Our own: a U-Net k2 s2 up-convolution, k1 stride 2, large Cin on a tiny map, a video-VAE block.
      {"unet_up", 1, 64, {16, 64, 64}, 128, cube(2), cube(2), cube(0), cube(1), 1},
      {"k1s2", 2, 128, {8, 32, 32}, 256, cube(1), cube(2), cube(0), cube(1), 1},
      {"wide_tiny", 1, 2048, {2, 4, 4}, 1024, cube(3), cube(1), cube(1), cube(1), 1},
      {"vae", 1, 128, {17, 32, 32}, 128, cube(3), cube(1), cube(1), cube(1), 1},
  };
}

// Layers of 3D U-Nets, video models and 3D CNNs that the default suite lacks: U-Net levels of 16 and 32
// channels at 32 x 64 x 64, a deep level of 256, spatial-only and temporal-only kernels (video blocks),
// depthwise, dilation 2, a k4 stride-2 layer (a transposed convolution's input gradient), stride-2
// down-sampling at a U-Net's first level, and two images of 96 channels.
inline std::vector<Shape> extra_suite() {
  return {
      {"unet16", 1, 16, {32, 64, 64}, 16, cube(3), cube(1), cube(1), cube(1), 1},
      {"unet32", 1, 32, {32, 64, 64}, 32, cube(3), cube(1), cube(1), cube(1), 1},
      {"deep256", 1, 256, {8, 16, 16}, 256, cube(3), cube(1), cube(1), cube(1), 1},
      {"k133", 1, 128, {8, 32, 32}, 128, {1, 3, 3}, cube(1), {0, 1, 1}, cube(1), 1},
      {"k311", 1, 128, {8, 32, 32}, 128, {3, 1, 1}, cube(1), {1, 0, 0}, cube(1), 1},
      {"depthwise", 1, 64, {16, 32, 32}, 64, cube(3), cube(1), cube(1), cube(1), 64},
      {"dilated2", 1, 64, {8, 32, 32}, 64, cube(3), cube(1), cube(2), cube(2), 1},
      {"k4s2", 1, 64, {16, 32, 32}, 128, cube(4), cube(2), cube(1), cube(1), 1},
      {"down_s2", 1, 64, {32, 64, 64}, 128, cube(3), cube(2), cube(1), cube(1), 1},
      {"down16_s2", 1, 16, {32, 64, 64}, 32, cube(3), cube(2), cube(1), cube(1), 1},
      {"n2c96", 2, 96, {8, 24, 24}, 96, cube(3), cube(1), cube(1), cube(1), 1},
  };
}

// The suites by name, for --suite options.
inline constexpr const char* kSuiteNames = "default, extra";
inline std::optional<std::vector<Shape>> suite_named(const std::string& name) {
  if (name == "default") return default_suite();
  if (name == "extra") return extra_suite();
  return std::nullopt;
}

// Forward output size along one axis (the dgrad's dy size).
inline std::int64_t forward_out(std::int64_t x, std::int64_t k, std::int64_t s, std::int64_t p,
                                std::int64_t d) {
  return (x + 2 * p - ((k - 1) * d + 1)) / s + 1;
}

// Shapes of dy, filter (NCDHW, [Cout, Cin/G, k...]) and y in canonical NCDHW order.
struct CanonicalShapes {
  std::array<std::int64_t, 5> dy, filter, y;
};
inline CanonicalShapes canonical_shapes(const Shape& s) {
  CanonicalShapes c{};
  c.y = {s.N, s.Cin, s.x[0], s.x[1], s.x[2]};
  c.dy = {s.N, s.Cout, 0, 0, 0};
  for (int a = 0; a < 3; ++a)
    c.dy[2 + a] = forward_out(s.x[a], s.kernel[a], s.stride[a], s.pad[a], s.dilation[a]);
  c.filter = {s.Cout, s.Cin / s.groups, s.kernel[0], s.kernel[1], s.kernel[2]};
  return c;
}

}  // namespace conv3d_dx::suite
