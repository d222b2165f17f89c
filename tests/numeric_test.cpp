// Exact numerics (docs/numerics.md): every row of the decode/encode tables in tests/data, every fp16 and bf16
// code, and encoding checked against an independent model that searches the table of representable values.
#include "numeric/numeric.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace conv3d_dx;
using namespace conv3d_dx::numeric;

std::uint32_t bits(float v) { return std::bit_cast<std::uint32_t>(v); }
float from_bits(std::uint32_t u) { return std::bit_cast<float>(u); }
std::uint32_t hex(const std::string& s) { return static_cast<std::uint32_t>(std::stoul(s, nullptr, 16)); }

// Rows of a CSV file from tests/data, header dropped, fields split on commas.
std::vector<std::vector<std::string>> read_csv(const std::string& name) {
  const std::string path = std::string(CONV3D_DX_TEST_DATA) + "/" + name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<std::vector<std::string>> rows;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> fields;
    std::stringstream ss(line);
    std::string field;
    while (std::getline(ss, field, ',')) fields.push_back(field);
    if (line.back() == ',') fields.emplace_back();  // an empty last column (the notes)
    rows.push_back(fields);
  }
  return rows;
}

// ---------------------------------------------------------------------------------------------------------
// Decode tables

void check_decode_csv(const std::string& file, float (*decode)(std::uint8_t)) {
  const auto rows = read_csv(file);
  ASSERT_EQ(rows.size(), 256u);
  std::vector<bool> seen(256, false);
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 3u);
    const auto code = static_cast<std::uint8_t>(hex(row[0]));
    seen[code] = true;
    const float got = decode(code);
    SCOPED_TRACE(file + " code " + row[0]);
    if (row[2] == "nan") {
      EXPECT_TRUE(std::isnan(got));
    } else if (row[2] != "inf" && row[2] != "-inf") {
      // The value column agrees with the bits column (guards against a misread table).
      EXPECT_EQ(std::stod(row[2]), static_cast<double>(from_bits(hex(row[1]))));
    }
    EXPECT_EQ(bits(got), hex(row[1]));
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), true), 256);
}

TEST(Numeric, HiFloat8DecodesEveryCodeAsTheTable) { check_decode_csv("hifloat8_decode.csv", hif8_to_f32); }

TEST(Numeric, Fp8E4m3fnDecodesEveryCodeAsTheTable) {
  check_decode_csv("float8_e4m3fn_decode.csv", fp8_e4m3fn_to_f32);
}

// ---------------------------------------------------------------------------------------------------------
// Encode vectors

void check_encode_csv(const std::string& file, std::uint8_t (*encode)(float, bool)) {
  const auto rows = read_csv(file);
  ASSERT_GE(rows.size(), 20u);
  for (const auto& row : rows) {
    ASSERT_GE(row.size(), 4u);
    const float x = from_bits(hex(row[0]));
    const std::string note = row.size() > 4 ? row[4] : "";
    SCOPED_TRACE(file + " input " + row[0] + " (" + row[1] + ") " + note);
    EXPECT_EQ(encode(x, false), hex(row[2])) << "IEEE mode";
    EXPECT_EQ(encode(x, true), hex(row[3])) << "saturating mode";
  }
}

TEST(Numeric, HiFloat8EncodesTheVectors) { check_encode_csv("hifloat8_encode_vectors.csv", f32_to_hif8); }

TEST(Numeric, Fp8E4m3fnEncodesTheVectors) {
  check_encode_csv("float8_e4m3fn_encode_vectors.csv", f32_to_fp8_e4m3fn);
}

// ---------------------------------------------------------------------------------------------------------
// fp16 and bf16: every code against a decoder written from the format's definition in double.

double model_fp16(std::uint16_t c) {
  const int e = (c >> 10) & 31;
  const int m = c & 1023;
  const double sign = (c & 0x8000) ? -1.0 : 1.0;
  if (e == 31) return m == 0 ? sign * std::numeric_limits<double>::infinity() : std::nan("");
  if (e == 0) return sign * std::ldexp(m, -24);
  return sign * std::ldexp(1024 + m, e - 25);
}

double model_bf16(std::uint16_t c) {
  const int e = (c >> 7) & 255;
  const int m = c & 127;
  const double sign = (c & 0x8000) ? -1.0 : 1.0;
  if (e == 255) return m == 0 ? sign * std::numeric_limits<double>::infinity() : std::nan("");
  if (e == 0) return sign * std::ldexp(m, -133);
  return sign * std::ldexp(128 + m, e - 134);
}

void check_all_16bit_codes(float (*decode)(std::uint16_t), double (*model)(std::uint16_t),
                           std::uint16_t (*encode)(float, bool), std::uint16_t max_finite) {
  for (std::uint32_t c = 0; c < 65536; ++c) {
    const auto code = static_cast<std::uint16_t>(c);
    const float got = decode(code);
    const double want = model(code);
    const bool negative = (code & 0x8000) != 0;
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << c;
      ASSERT_EQ(std::signbit(got), negative) << c;
      for (bool sat : {false, true}) {
        const std::uint16_t back = encode(got, sat);
        ASSERT_TRUE(std::isnan(decode(back))) << c;
        ASSERT_EQ((back & 0x8000) != 0, negative) << c;
      }
      continue;
    }
    // Exact: same value and same sign (so -0 decodes to -0).
    ASSERT_EQ(static_cast<double>(got), want) << c;
    ASSERT_EQ(std::signbit(got), negative) << c;
    ASSERT_EQ(encode(got, false), code) << c;
    const bool inf = std::isinf(want);
    ASSERT_EQ(encode(got, true), inf ? (code & 0x8000) | max_finite : code) << c;
  }
}

TEST(Numeric, Fp16EveryCodeDecodesExactlyAndRoundTrips) {
  check_all_16bit_codes(fp16_to_f32, model_fp16, f32_to_fp16, 0x7BFF);
}

TEST(Numeric, Bf16EveryCodeDecodesExactlyAndRoundTrips) {
  check_all_16bit_codes(bf16_to_f32, model_bf16, f32_to_bf16, 0x7F7F);
}

// ---------------------------------------------------------------------------------------------------------
// Encoding against an independent model: the sorted table of non-negative representable values (from the
// definition or the decode table, never from the code under test), searched for the nearest neighbours of
// |x| in double precision. One virtual entry beyond the largest finite value stands for overflow, carrying
// the code IEEE mode writes (fp16/bf16 inf, fp8 NaN, hifloat8 inf); it makes the overflow threshold just
// another midpoint with the format's tie rule.

struct Format {
  std::string name;
  std::vector<std::pair<double, std::uint32_t>> table;  // ascending value, code
  bool ties_away = false;                               // else ties to the even code
  std::uint32_t sign_bit = 0;
  bool negative_zero = true;
  std::uint32_t (*encode)(float, bool) = nullptr;
};

std::uint32_t model_encode(const Format& f, float x, bool saturate) {
  const double ax = std::fabs(static_cast<double>(x));
  const auto hi = std::lower_bound(f.table.begin(), f.table.end(), ax,
                                   [](const auto& entry, double v) { return entry.first < v; });
  std::size_t pick;
  if (hi == f.table.end()) {
    pick = f.table.size() - 1;  // inf
  } else if (hi == f.table.begin()) {
    pick = 0;  // exactly zero
  } else {
    const std::size_t i = static_cast<std::size_t>(hi - f.table.begin());
    const double below = ax - f.table[i - 1].first;
    const double above = f.table[i].first - ax;
    if (below != above) {
      pick = below < above ? i - 1 : i;
    } else if (f.ties_away) {
      pick = i;
    } else {
      pick = (f.table[i].second & 1u) == 0 ? i : i - 1;
    }
  }
  if (saturate && pick == f.table.size() - 1) --pick;
  const std::uint32_t code = f.table[pick].second;
  if (!std::signbit(x) || (code == 0 && !f.negative_zero)) return code;
  return code | f.sign_bit;
}

Format fp16_format() {
  Format f{"fp16", {},   false,
           0x8000, true, [](float v, bool s) -> std::uint32_t { return f32_to_fp16(v, s); }};
  for (std::uint16_t c = 0; c < 0x7C00; ++c) f.table.emplace_back(model_fp16(c), c);
  f.table.emplace_back(65536.0, 0x7C00);
  return f;
}

Format bf16_format() {
  Format f{"bf16", {},   false,
           0x8000, true, [](float v, bool s) -> std::uint32_t { return f32_to_bf16(v, s); }};
  for (std::uint16_t c = 0; c < 0x7F80; ++c) f.table.emplace_back(model_bf16(c), c);
  f.table.emplace_back(std::ldexp(1.0, 128), 0x7F80);
  return f;
}

// Non-negative finite codes from the decode table; the tables' codes do not sort like values.
std::vector<std::pair<double, std::uint32_t>> csv_table(const std::string& file) {
  std::vector<std::pair<double, std::uint32_t>> table;
  for (const auto& row : read_csv(file)) {
    const float v = from_bits(hex(row[1]));
    const std::uint32_t code = hex(row[0]);
    if (code < 0x80 && std::isfinite(v)) table.emplace_back(v, code);
  }
  std::sort(table.begin(), table.end());
  return table;
}

Format hif8_format() {
  Format f{"hif8", csv_table("hifloat8_decode.csv"),
           true,   0x80,
           false,  [](float v, bool s) -> std::uint32_t { return f32_to_hif8(v, s); }};
  f.table.emplace_back(49152.0, 0x6F);  // 1.5 * 2^15, the step after 32768, is where inf sits
  return f;
}

Format fp8_format() {
  Format f{"fp8_e4m3fn", csv_table("float8_e4m3fn_decode.csv"),
           false,        0x80,
           true,         [](float v, bool s) -> std::uint32_t { return f32_to_fp8_e4m3fn(v, s); }};
  f.table.emplace_back(480.0, 0x7F);  // the NaN code sits where 1.875 * 2^8 would be
  return f;
}

// fp32 inputs around every representable value and every midpoint (±2 ulp), random bit patterns,
// and special values; both signs.
std::vector<float> probe_inputs(const Format& f) {
  std::vector<std::uint32_t> centres;
  for (std::size_t i = 0; i < f.table.size(); ++i) {
    const double v = f.table[i].first;
    centres.push_back(v > std::numeric_limits<float>::max() ? 0x7F800000u : bits(static_cast<float>(v)));
    if (i + 1 < f.table.size()) {
      const double mid = (v + f.table[i + 1].first) / 2;  // exact: a few significant bits
      EXPECT_EQ(static_cast<double>(static_cast<float>(mid)), mid);
      centres.push_back(bits(static_cast<float>(mid)));
    }
  }
  std::vector<float> inputs;
  for (std::uint32_t c : centres) {
    for (int d = -2; d <= 2; ++d) {
      const auto u = static_cast<std::uint32_t>(static_cast<std::int64_t>(c) + d);
      if (static_cast<std::int64_t>(c) + d < 0 || u > 0x7F800000u) continue;
      inputs.push_back(from_bits(u));
      inputs.push_back(from_bits(u | 0x80000000u));
    }
  }
  std::mt19937 rng(12345);
  for (int i = 0; i < 50000; ++i) {
    const float x = from_bits(static_cast<std::uint32_t>(rng()));
    if (!std::isnan(x)) inputs.push_back(x);
  }
  for (std::uint32_t u : {0x00000001u, 0x007FFFFFu, 0x00800000u, 0x7F7FFFFFu, 0x7F800000u, 0x3F800000u}) {
    inputs.push_back(from_bits(u));
    inputs.push_back(from_bits(u | 0x80000000u));
  }
  inputs.push_back(0.0f);
  inputs.push_back(-0.0f);
  return inputs;
}

void check_against_model(const Format& f) {
  int failures = 0;
  const auto inputs = probe_inputs(f);
  for (float x : inputs) {
    for (bool sat : {false, true}) {
      const std::uint32_t want = model_encode(f, x, sat);
      const std::uint32_t got = f.encode(x, sat);
      if (got != want && ++failures <= 10) {
        ADD_FAILURE() << f.name << (sat ? " saturating" : " IEEE") << " encode of " << x << " (0x" << std::hex
                      << bits(x) << "): got 0x" << got << ", model 0x" << want;
      }
    }
  }
  EXPECT_EQ(failures, 0) << "of " << 2 * inputs.size() << " encodings";
}

TEST(Numeric, Fp16EncodingMatchesTheModel) { check_against_model(fp16_format()); }
TEST(Numeric, Bf16EncodingMatchesTheModel) { check_against_model(bf16_format()); }
TEST(Numeric, HiFloat8EncodingMatchesTheModel) { check_against_model(hif8_format()); }
TEST(Numeric, Fp8E4m3fnEncodingMatchesTheModel) { check_against_model(fp8_format()); }

// The table encoders give the scalar encoders' codes: for every top-16-bit key with low bits 0, 1, 0x7FFF,
// 0x8000 and 0xFFFF (a rounding boundary strictly inside a key's range would make 1 and 0xFFFF differ from
// one code, so these cover every boundary), and for 10^6 random fp32 bit patterns, in both overflow modes.
TEST(Numeric, Encoder8TablesMatchTheScalarEncoders) {
  std::mt19937_64 rng(17);
  for (DType dtype : {DType::hif8, DType::fp8_e4m3fn})
    for (bool saturate : {false, true}) {
      const auto scalar = dtype == DType::hif8 ? &f32_to_hif8 : &f32_to_fp8_e4m3fn;
      const Encoder8& table = encoder8(dtype, saturate);
      std::int64_t bad = 0;
      const auto check = [&](std::uint32_t u) {
        const float v = std::bit_cast<float>(u);
        if (table(v) != scalar(v, saturate) && bad++ < 5)
          ADD_FAILURE() << to_string(dtype) << (saturate ? " saturate" : "") << ": 0x" << std::hex << u;
      };
      for (std::uint32_t key = 0; key < (1u << 16); ++key)
        for (std::uint32_t low : {0u, 1u, 0x7FFFu, 0x8000u, 0xFFFFu}) check((key << 16) | low);
      for (int i = 0; i < 1000000; ++i) check(static_cast<std::uint32_t>(rng()));
      EXPECT_EQ(bad, 0) << to_string(dtype);
    }
}

TEST(Numeric, NanEncodesPerFormatAndMode) {
  for (std::uint32_t u : {0x7FC00000u, 0x7F800001u, 0x7FFFFFFFu, 0x7FA5A5A5u}) {
    for (std::uint32_t sign : {0u, 0x80000000u}) {
      const float nan = from_bits(u | sign);
      const bool negative = sign != 0;
      for (bool sat : {false, true}) {
        const std::uint16_t h = f32_to_fp16(nan, sat);
        EXPECT_TRUE(std::isnan(fp16_to_f32(h)));
        EXPECT_EQ((h & 0x8000) != 0, negative);
        EXPECT_NE(h & 0x0200, 0) << "quiet";
        const std::uint16_t b = f32_to_bf16(nan, sat);
        EXPECT_TRUE(std::isnan(bf16_to_f32(b)));
        EXPECT_EQ((b & 0x8000) != 0, negative);
        EXPECT_NE(b & 0x0040, 0) << "quiet";
      }
      EXPECT_EQ(f32_to_hif8(nan, false), 0x80);
      EXPECT_EQ(f32_to_hif8(nan, true), 0x00);
      EXPECT_EQ(f32_to_fp8_e4m3fn(nan, false), negative ? 0xFF : 0x7F);
      EXPECT_EQ(f32_to_fp8_e4m3fn(nan, true), 0x00);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// HF32

float hf32(std::uint32_t u) { return round_to_hf32(from_bits(u)); }

TEST(Numeric, Hf32RoundsHalfAwayFromZero) {
  EXPECT_EQ(bits(hf32(0x3F800000u)), 0x3F800000u);  // 1.0 unchanged
  EXPECT_EQ(bits(hf32(0x3F801000u)), 0x3F802000u);  // 1 + 2^-11: tie goes away (even would stay)
  EXPECT_EQ(bits(hf32(0x3F803000u)), 0x3F804000u);  // tie above an odd mantissa
  EXPECT_EQ(bits(hf32(0x3F800FFFu)), 0x3F800000u);  // just below the tie
  EXPECT_EQ(bits(hf32(0xBF801000u)), 0xBF802000u);  // negative tie: away in magnitude
  EXPECT_EQ(bits(hf32(0xBF800FFFu)), 0xBF800000u);
  EXPECT_EQ(bits(hf32(0x3FFFF000u)), 0x40000000u);  // carry into the exponent
  EXPECT_EQ(bits(hf32(0xBFFFF000u)), 0xC0000000u);
  EXPECT_EQ(bits(hf32(0x00001000u)), 0x00002000u);  // subnormal tie
  EXPECT_EQ(bits(hf32(0x80000FFFu)), 0x80000000u);  // rounds to -0
  EXPECT_EQ(bits(hf32(0x7F7FFFFFu)), 0x7F800000u);  // FLT_MAX: the formula carries into inf
  EXPECT_EQ(bits(hf32(0x7F7FEFFFu)), 0x7F7FE000u);
  EXPECT_EQ(bits(hf32(0x7F800000u)), 0x7F800000u);  // inf unchanged
  EXPECT_EQ(bits(hf32(0xFF800000u)), 0xFF800000u);
  EXPECT_EQ(bits(hf32(0x7FC01FFFu)), 0x7FC01FFFu);  // NaN unchanged, payload too
  EXPECT_EQ(bits(hf32(0xFFC01234u)), 0xFFC01234u);
}

TEST(Numeric, Hf32MatchesNearestTenBitValueTiesAway) {
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) {
    std::uint32_t u = static_cast<std::uint32_t>(rng());
    if (i % 2 == 0) u = (u & ~0x1FFFu) | 0x1000u;  // half the samples sit exactly on a tie
    const float x = from_bits(u);
    if (!std::isfinite(x)) continue;
    int e;
    std::frexp(static_cast<double>(x), &e);  // |x| in [2^(e-1), 2^e)
    const double ulp =
        std::ldexp(1.0, std::max(e - 1, -126) - 10);  // 10 explicit bits; fp32 subnormals share 2^-136
    const double want = std::round(static_cast<double>(x) / ulp) * ulp;  // std::round: half away from zero
    const float got = round_to_hf32(x);
    if (std::fabs(want) >= std::ldexp(1.0, 128)) {
      ASSERT_TRUE(std::isinf(got)) << x;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << std::hexfloat << x;
    }
    ASSERT_EQ(std::signbit(got), std::signbit(x));
  }
}

// ---------------------------------------------------------------------------------------------------------
// Element access

TEST(Numeric, LoadStoreRoundTripEveryDtypeAtNonZeroIndices) {
  // Values exactly representable in every dtype (hifloat8 has 3 mantissa bits near 1, 1 bit near 2^8..2^15).
  const float values[] = {1.5f, -0.25f, 96.0f, -3.0f, 0.0f};
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::hif8, DType::fp8_e4m3fn}) {
    SCOPED_TRACE(to_string(d));
    const std::size_t size = dtype_size(d);
    std::vector<unsigned char> buf(16 * size, 0xA5);
    const std::int64_t indices[] = {1, 3, 7, 8, 15};
    for (int i = 0; i < 5; ++i) store_f32(d, buf.data(), indices[i], values[i], OverflowMode::ieee);
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(load_f32(d, buf.data(), indices[i]), values[i]);
      EXPECT_EQ(load_rounded(d, buf.data(), indices[i], InputRounding::none), values[i]);
    }
    // Untouched elements keep the canary; the written bytes are the dtype's own encoding.
    for (std::int64_t i : {0, 2, 4, 5, 6, 9, 14}) {
      for (std::size_t b = 0; b < size; ++b) EXPECT_EQ(buf[static_cast<std::size_t>(i) * size + b], 0xA5);
    }
    std::uint32_t raw = 0;
    std::memcpy(&raw, buf.data() + 3 * size, size);
    switch (d) {
      case DType::f32:
        EXPECT_EQ(raw, bits(-0.25f));
        break;
      case DType::f16:
        EXPECT_EQ(raw, 0xB400u);
        break;
      case DType::bf16:
        EXPECT_EQ(raw, 0xBE80u);
        break;
      case DType::hif8:
        EXPECT_EQ(raw, 0xB0u);
        break;
      case DType::fp8_e4m3fn:
        EXPECT_EQ(raw, 0xA8u);
        break;
    }
  }
}

TEST(Numeric, StoreRoundsOnceAndHonoursTheOverflowMode) {
  std::uint16_t h[3] = {};
  store_f32(DType::f16, h, 2, 1e6f, OverflowMode::ieee);
  EXPECT_EQ(h[2], 0x7C00);
  store_f32(DType::f16, h, 1, -1e6f, OverflowMode::saturate);
  EXPECT_EQ(h[1], 0xFBFF);
  std::uint16_t b[2] = {};
  store_f32(DType::bf16, b, 1, std::numeric_limits<float>::infinity(), OverflowMode::saturate);
  EXPECT_EQ(b[1], 0x7F7F);
  std::uint8_t q[4] = {};
  store_f32(DType::hif8, q, 3, 50000.0f, OverflowMode::ieee);
  EXPECT_EQ(q[3], 0x6F);
  store_f32(DType::hif8, q, 2, 50000.0f, OverflowMode::saturate);
  EXPECT_EQ(q[2], 0x6E);
  store_f32(DType::fp8_e4m3fn, q, 1, -500.0f, OverflowMode::ieee);
  EXPECT_EQ(q[1], 0xFF);
  store_f32(DType::fp8_e4m3fn, q, 1, -500.0f, OverflowMode::saturate);
  EXPECT_EQ(q[1], 0xFE);
  float f[2] = {};
  store_f32(DType::f32, f, 1, 0.1f, OverflowMode::saturate);  // fp32 stores the value as is
  EXPECT_EQ(f[1], 0.1f);
}

TEST(Numeric, LoadRoundedAppliesTheInputRounding) {
  const float f[] = {0.0f, from_bits(0x3F801000u), 70000.0f, from_bits(0x3F800FFFu)};
  EXPECT_EQ(bits(load_rounded(DType::f32, f, 1, InputRounding::hf32)), 0x3F802000u);
  EXPECT_EQ(bits(load_rounded(DType::f32, f, 3, InputRounding::hf32)), 0x3F800000u);
  EXPECT_EQ(bits(load_rounded(DType::f32, f, 1, InputRounding::none)), 0x3F801000u);
  EXPECT_EQ(load_rounded(DType::f32, f, 1, InputRounding::fp16), 1.0f);          // tie to even in fp16
  EXPECT_TRUE(std::isinf(load_rounded(DType::f32, f, 2, InputRounding::fp16)));  // IEEE overflow
  EXPECT_EQ(load_rounded(DType::f32, f, 3, InputRounding::fp16), 1.0f);

  // bf16 1e6 (0x4974) does not fit fp16; bf16 1 + 2^-7 does and is kept under both roundings.
  const std::uint16_t b[] = {0x3F81, 0x4974};
  EXPECT_EQ(load_rounded(DType::bf16, b, 0, InputRounding::hf32), 1.0078125f);
  EXPECT_EQ(load_rounded(DType::bf16, b, 0, InputRounding::fp16), 1.0078125f);
  EXPECT_TRUE(std::isinf(load_rounded(DType::bf16, b, 1, InputRounding::fp16)));
  // hifloat8's extremes (2^-22 and 32768) are fp16 values.
  const std::uint8_t q[] = {0x01, 0x6E};
  EXPECT_EQ(load_rounded(DType::hif8, q, 0, InputRounding::fp16), 0x1p-22f);
  EXPECT_EQ(load_rounded(DType::hif8, q, 1, InputRounding::fp16), 32768.0f);
}

// ---------------------------------------------------------------------------------------------------------
// Names

TEST(Numeric, NamesRoundTripAndParseAlternatives) {
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::hif8, DType::fp8_e4m3fn}) {
    EXPECT_EQ(parse_dtype(to_string(d)), d);
  }
  for (Layout l : {Layout::NCDHW, Layout::NDHWC, Layout::DHWCN}) EXPECT_EQ(parse_layout(to_string(l)), l);
  for (Isa i : {Isa::best, Isa::avx512_bf16, Isa::avx512, Isa::avx2, Isa::portable, Isa::reference}) {
    EXPECT_EQ(parse_isa(to_string(i)), i);
  }
  EXPECT_STREQ(to_string(DType::fp8_e4m3fn), "fp8_e4m3fn");
  EXPECT_STREQ(to_string(Layout::NDHWC), "NDHWC");
  EXPECT_EQ(parse_dtype("Float32"), DType::f32);
  EXPECT_EQ(parse_dtype("FLOAT16"), DType::f16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("HiFloat8"), DType::hif8);
  EXPECT_EQ(parse_dtype("float8_e4m3fn"), DType::fp8_e4m3fn);
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::hif8), 1u);
  EXPECT_EQ(dtype_size(DType::fp8_e4m3fn), 1u);
}

template <typename F>
void expect_parse_error(F parse, const std::string& value, const std::string& parameter,
                        const std::string& accepted) {
  try {
    parse(value);
    ADD_FAILURE() << value << " was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_EQ(e.parameter(), parameter);
    const std::string message = e.what();
    EXPECT_NE(message.find("'" + value + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(accepted), std::string::npos) << message;
  }
}

TEST(Numeric, ParseRejectsUnknownNamesNamingTheParameter) {
  expect_parse_error(parse_dtype, "fp64", "dtype", "fp8_e4m3fn");
  expect_parse_error(parse_dtype, "", "dtype", "bf16");
  expect_parse_error(parse_dtype, "fp16 ", "dtype", "hif8");
  expect_parse_error(parse_layout, "NCHW", "layout", "DHWCN");
  expect_parse_error(parse_isa, "sse", "isa", "avx512_bf16");
}

}  // namespace
