// Phase (sub-pixel) decomposition of one spatial axis of dgrad into stride-1 correlations.
//
// Along an axis, y index i receives the tap k from dy index o when o*s + k*d == i + pad. Group the y indices
// by phase r = (i + pad) mod s: within a phase, i = first + s*j and every tap of the phase (k*d ≡ r mod s)
// reads o = j + off with one fixed offset, so each phase is a stride-1 correlation along j. A phase without
// taps contributes zeros. Dilation needs nothing special: it only changes which taps fall in which phase.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "conv3d_dx/conv3d_dx.hpp"

namespace conv3d_dx::cpu {

struct AxisTap {
  std::int64_t k;    // kernel index
  std::int64_t off;  // dy index = j + off
};

struct AxisPhase {
  std::int64_t first = 0;     // first y index of the phase
  std::int64_t count = 0;     // y indices in the phase: first, first + s, ...
  std::vector<AxisTap> taps;  // in increasing k
};

struct Axis {
  std::int64_t in = 0, out = 0, stride = 1;
  std::vector<AxisPhase> phases;  // indexed by r = (i + pad) mod s

  Axis() = default;
  Axis(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride, std::int64_t dilation,
       std::int64_t pad);

  // The phase and position j of y index i.
  std::int64_t phase_of(std::int64_t i) const { return (i + pad_) % stride; }
  std::int64_t j_of(std::int64_t i) const {
    return (i - phases[static_cast<std::size_t>(phase_of(i))].first) / stride;
  }

  // Taps of `phase` that land inside dy at position j.
  bool valid(const AxisTap& t, std::int64_t j) const { return j + t.off >= 0 && j + t.off < out; }
  // The positions j0 + [lo, hi) of j0 + [0, m) at which tap t lands inside dy, as {lo, hi} (lo >= hi: none).
  std::pair<std::int64_t, std::int64_t> inside(const AxisTap& t, std::int64_t j0, std::int64_t m) const {
    return {std::clamp<std::int64_t>(-t.off - j0, 0, m), std::clamp<std::int64_t>(out - t.off - j0, 0, m)};
  }
  // Whether every tap of `phase` lands inside dy at all positions j0 + [0, m) (none if it has no taps).
  bool covers(const AxisPhase& phase, std::int64_t j0, std::int64_t m) const {
    return !phase.taps.empty() && j0 + phase.taps.back().off >= 0 &&
           j0 + m - 1 + phase.taps.front().off < out;
  }
  // The taps of `phase` that land inside dy at position j, as indices [first, end) into phase.taps: they are
  // consecutive, offsets falling along the list.
  std::pair<std::int64_t, std::int64_t> valid_taps(const AxisPhase& phase, std::int64_t j) const {
    const std::int64_t n = static_cast<std::int64_t>(phase.taps.size());
    std::int64_t first = 0, end = n;
    while (first < n && !valid(phase.taps[static_cast<std::size_t>(first)], j)) ++first;
    while (end > first && !valid(phase.taps[static_cast<std::size_t>(end - 1)], j)) --end;
    return {first, end};
  }
  // Whether any tap of `phase` lands inside dy at position j (if none, y there is zero).
  bool reaches(const AxisPhase& phase, std::int64_t j) const {
    for (const AxisTap& t : phase.taps)
      if (valid(t, j)) return true;
    return false;
  }
  // The dy index y index i takes through kernel index k, or -1 (k is not a tap of i's phase, or lands
  // outside dy).
  std::int64_t dy_index(std::int64_t i, std::int64_t k) const {
    const std::int64_t j = j_of(i);
    for (const AxisTap& t : phases[static_cast<std::size_t>(phase_of(i))].taps)
      if (t.k == k) return valid(t, j) ? j + t.off : -1;
    return -1;
  }

 private:
  std::int64_t pad_ = 0;
};

// Spatial axis a (0: D, 1: H, 2: W) of a problem.
inline Axis axis_of(const Problem& p, int a) {
  return Axis(p.y_size[a], p.dy_size[a], p.kernel[a], p.stride[a], p.dilation[a], p.pad_front[a]);
}

}  // namespace conv3d_dx::cpu
