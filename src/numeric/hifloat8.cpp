// HiFloat8 (docs/numerics.md): sign bit, then a prefix ("dot") that says how many bits the exponent takes.
//
//   after the sign | exponent bits n | |E|     | mantissa bits
//   11             | 4               | 8..15   | 1
//   10             | 3               | 4..7    | 2
//   01             | 2               | 2..3    | 3
//   001            | 1               | 1       | 3
//   0001           | 0               | 0       | 3
//   0000 kkk       | denormal 2^(k-23), k = 1..7; k = 0 is zero (0x00) or NaN (0x80)
//
// The n exponent bits are sign-magnitude with an implicit leading 1: the top bit is the sign of E and the
// other n-1 bits are |E| below its leading 1 (so n = bit_width(|E|)). 0x6F/0xEF (E = 15, mantissa 1) are
// ±inf.
#include <array>
#include <bit>
#include <cstdlib>

#include "numeric/numeric.hpp"

namespace conv3d_dx::numeric {
namespace {

// Indexed by the number of exponent bits n.
constexpr std::uint32_t kPrefix[5] = {0x08, 0x10, 0x20, 0x40, 0x60};
constexpr int kMantissaBits[5] = {3, 3, 3, 2, 1};

constexpr std::uint8_t kNan = 0x80;
constexpr std::uint8_t kInf = 0x6F;
constexpr std::uint8_t kMaxFinite = 0x6E;  // 32768

}  // namespace

float hif8_to_f32(std::uint8_t code) {
  const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x80u) << 24;
  const std::uint32_t b = code & 0x7Fu;
  if (code == kNan) return std::bit_cast<float>(0x7FC00000u);
  if (b == kInf) return std::bit_cast<float>(sign | 0x7F800000u);
  if (b < 0x08) {  // zero or a denormal 2^(k-23), i.e. fp32 exponent field k - 23 + 127
    return std::bit_cast<float>(b == 0 ? 0u : sign | ((b + 104u) << 23));
  }
  int n = 4;
  while (b < kPrefix[n]) --n;
  const int mbits = kMantissaBits[n];
  const std::uint32_t mantissa = b & ((1u << mbits) - 1u);
  int e = 0;
  if (n > 0) {
    const std::uint32_t field = (b >> mbits) & ((1u << n) - 1u);
    const int magnitude = static_cast<int>((1u << (n - 1)) | (field & ((1u << (n - 1)) - 1u)));
    e = (field >> (n - 1)) != 0 ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | (static_cast<std::uint32_t>(e + 127) << 23) |
                              (mantissa << (23 - mbits)));
}

int hif8_mantissa_bits(int exponent) {
  const int n = std::bit_width(static_cast<unsigned>(std::abs(exponent)));
  return n <= 4 ? kMantissaBits[n] : 0;
}

std::uint8_t f32_to_hif8(float v, bool saturate) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(v);
  const std::uint32_t a = u & 0x7FFFFFFFu;
  const auto sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  // Saturating mode maps NaN to 0x00 (hifloat8_encode_vectors.csv).
  if (a > 0x7F800000u) return saturate ? std::uint8_t{0} : kNan;
  // 40960 is the midpoint between 32768 and the next step 49152 and ties away, i.e. to inf.
  if (a >= 0x47200000u) return static_cast<std::uint8_t>(sign | (saturate ? kMaxFinite : kInf));
  if (a < 0x34000000u) return 0;  // below 2^-23, half the smallest denormal: zero, never -0
  if (a < 0x34800000u) return static_cast<std::uint8_t>(sign | 0x01u);  // [2^-23, 2^-22): ties away to 2^-22

  // From 2^-22 up, the neighbours of x in [2^E, 2^(E+1)) are spaced 2^(E - mbits(E)) apart, with
  // mbits = 0 in the denormal range (the powers of two, midpoint 1.5 * 2^E). Round half away in
  // magnitude on the bits below that; a carry gives 2^(E+1), which every range can represent.
  const int drop = 23 - hif8_mantissa_bits(static_cast<int>(a >> 23) - 127);
  const std::uint32_t r = (a + (1u << (drop - 1))) & ~((1u << drop) - 1u);

  const int e = static_cast<int>(r >> 23) - 127;
  if (e < -15) return static_cast<std::uint8_t>(sign | static_cast<std::uint32_t>(e + 23));  // denormal k
  const int n = std::bit_width(static_cast<unsigned>(std::abs(e)));
  const int mbits = kMantissaBits[n];
  const std::uint32_t mantissa = (r >> (23 - mbits)) & ((1u << mbits) - 1u);
  std::uint32_t field = 0;
  if (n > 0) {
    const std::uint32_t low =
        static_cast<std::uint32_t>(std::abs(e)) - (1u << (n - 1));  // drop the implicit 1
    field = (e < 0 ? 1u << (n - 1) : 0u) | low;
  }
  return static_cast<std::uint8_t>(sign | kPrefix[n] | (field << mbits) | mantissa);
}

const std::uint8_t* hif8_codes_by_top_bits() {
  static const auto table = [] {
    std::array<std::uint8_t, 4096 + 3> t{};
    for (std::uint32_t i = 0; i < 4096; ++i) t[i] = f32_to_hif8(std::bit_cast<float>(i << 19), false);
    return t;
  }();
  return table.data();
}

}  // namespace conv3d_dx::numeric
