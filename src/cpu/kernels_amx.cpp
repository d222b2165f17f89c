// AMX tile kernels (amx_tile + amx_bf16): the implicit-GEMM tile of gemm_engine.cpp on the tile matrix
// unit. Entered only after cpu_supports(Isa::amx_bf16), which includes Linux's permission to use the tiles.
//
// A tile is M <= 32 y pixels (one or two row tiles of 16) times NV <= 2 vectors of 16 input channels: up
// to four fp32 accumulator tiles C[r][v], two dy tiles A[r] (16 pixels x 16 channel pairs, rows one dy
// pixel apart) and two filter tiles B[v] (16 channel pairs x 16 input channels, the packed filter's
// [pair][channel][2] layout as it is). tdpbf16ps adds A[r] . B[v] into C[r][v]; each chunk of 16 pairs
// (TileArgs::amx_pairs: fewer for few output channels, A tiles then narrower and B tiles shorter) loads two
// A and two B tiles for four products. The engine pads each tap's reduction to a multiple of the chunk and
// gives every tap its whole pixel range (zero pixels beside each dy row), so a kernel needs no masks; taps
// in list order, then chunks, keep the sum order fixed. Split fp16 and HF32 values take their own tiles
// (split_tile_kernel): 32 pixels x one vector, dy's and the filter's his and los as separate operands.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "cpu/kernels.hpp"

namespace conv3d_dx::cpu {
namespace {

template <int B, int E, class F>
inline __attribute__((always_inline)) void static_for(F&& f) {
  if constexpr (B < E) {
    f(std::integral_constant<int, B>{});
    static_for<B + 1, E>(f);
  }
}

// The tile configuration memory operand of ldtilecfg (palette 1).
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Tile registers: C[r][v] = 2 r + v, A[r] = 4 + r, B[v] = 6 + v. GCC's tile intrinsics take the register
// number as a literal (it is pasted into the instruction), hence one branch per register.
constexpr int c_tile(int r, int v) { return 2 * r + v; }
constexpr int a_tile(int r) { return 4 + r; }
constexpr int b_tile(int v) { return 6 + v; }

#define CONV3D_DX_EACH_TILE(OP)  \
  if constexpr (T == 0) {        \
    OP(0);                       \
  } else if constexpr (T == 1) { \
    OP(1);                       \
  } else if constexpr (T == 2) { \
    OP(2);                       \
  } else if constexpr (T == 3) { \
    OP(3);                       \
  } else if constexpr (T == 4) { \
    OP(4);                       \
  } else if constexpr (T == 5) { \
    OP(5);                       \
  } else if constexpr (T == 6) { \
    OP(6);                       \
  } else {                       \
    static_assert(T == 7);       \
    OP(7);                       \
  }

template <int T>
inline __attribute__((always_inline)) void tile_load(const void* p, std::int64_t stride) {
#define CONV3D_DX_LOAD(t) _tile_loadd(t, p, stride)
  CONV3D_DX_EACH_TILE(CONV3D_DX_LOAD)
#undef CONV3D_DX_LOAD
}

template <int T>
inline __attribute__((always_inline)) void tile_stream_load(const void* p, std::int64_t stride) {
#define CONV3D_DX_STREAM_LOAD(t) _tile_stream_loadd(t, p, stride)
  CONV3D_DX_EACH_TILE(CONV3D_DX_STREAM_LOAD)
#undef CONV3D_DX_STREAM_LOAD
}

template <int T>
inline __attribute__((always_inline)) void tile_store(void* p, std::int64_t stride) {
#define CONV3D_DX_STORE(t) _tile_stored(t, p, stride)
  CONV3D_DX_EACH_TILE(CONV3D_DX_STORE)
#undef CONV3D_DX_STORE
}

template <int T>
inline __attribute__((always_inline)) void tile_zero() {
#define CONV3D_DX_ZERO(t) _tile_zero(t)
  CONV3D_DX_EACH_TILE(CONV3D_DX_ZERO)
#undef CONV3D_DX_ZERO
}
#undef CONV3D_DX_EACH_TILE

// Tile C += tile A . tile B (tdpbf16ps). The tile numbers are fields of the instruction, hence template
// arguments printed into it as constants (%c).
template <int C, int A, int B>
inline __attribute__((always_inline)) void tile_dot() {
  static_assert(C >= 0 && C < 8 && A >= 0 && A < 8 && B >= 0 && B < 8);
  __asm__ volatile("{tdpbf16ps\t%%tmm%c2, %%tmm%c1, %%tmm%c0|tdpbf16ps\ttmm%c0, tmm%c1, tmm%c2}" ::"i"(C),
                   "i"(A), "i"(B));
}

// Keeps the core's floating-point vector unit awake through a tile's products, which use none of it. On the
// Xeon with AMX measured (model 167), a unit idle for some 1500-3000 cycles powers down, and the tile
// stores that end the tile then waited for it to power up: 250-300 ns a tile in a stand-alone loop of 32
// chunks (9.0 ns a product against 6.7-7.0). A floating-point add 4 or more chunks before the stores hid the
// wait, one 0-2 chunks before them did not, integer vector adds did not at all. Per chunk that is a register
// copy and the add beside at least one 16-row product (16 cycles; four in 2 x 2 tiles). Engine, bf16
// channels_last, 2 threads, paired: a, b, d, f, i 0.85-0.93x the time, vae 0.94x (suite geomean 0.95x);
// NCDHW and the split fp16 kernel alike.
inline __attribute__((always_inline)) void keep_fp_unit_awake() {
  __m128 x = _mm_setzero_ps();
  __asm__ volatile("vaddps %0, %0, %0" : "+x"(x));
}

// The shape loaded in this thread's tile registers (0: none), so consecutive tiles of one shape configure
// once.
thread_local int loaded_shape = 0;

// Tiles of M pixels, NV vectors and chunks of `pairs` channel pairs (1 to 16).
template <int M, int NV>
inline __attribute__((always_inline)) void configure(int pairs) {
  const int shape = (M * 4 + NV) * 32 + pairs;
  if (loaded_shape == shape) return;
  TileConfig cfg;
  for (int r = 0; r * 16 < M; ++r) {
    const auto rows = static_cast<std::uint8_t>(M - 16 * r < 16 ? M - 16 * r : 16);
    cfg.rows[a_tile(r)] = rows;
    cfg.colsb[a_tile(r)] = static_cast<std::uint16_t>(4 * pairs);
    for (int v = 0; v < NV; ++v) {
      cfg.rows[c_tile(r, v)] = rows;
      cfg.colsb[c_tile(r, v)] = 64;
    }
  }
  for (int v = 0; v < NV; ++v) {
    cfg.rows[b_tile(v)] = static_cast<std::uint8_t>(pairs);
    cfg.colsb[b_tile(v)] = 64;
  }
  _tile_loadconfig(&cfg);
  loaded_shape = shape;
}

template <int M, int NV>
void tile_kernel(const TileArgs& a) {
  constexpr int R = (M + 15) / 16;
  const int pairs = a.amx_pairs;
  const bool stream_filter = a.amx_stream_filter;
  configure<M, NV>(pairs);
  const std::int64_t tile_row_bytes = a.tile_ps * 4;
  static_for<0, R>([&](auto rc) {
    constexpr int r = decltype(rc)::value;
    static_for<0, NV>([&](auto vc) {
      constexpr int v = decltype(vc)::value;
      if (a.accumulate)
        tile_load<c_tile(r, v)>(a.tile + r * 16 * a.tile_ps + v * 16, tile_row_bytes);
      else
        tile_zero<c_tile(r, v)>();
    });
  });
  const auto* dy = static_cast<const char*>(a.dy);
  const std::int64_t dy_row_bytes = a.dy_ps * 2;
  constexpr std::int64_t w_row_bytes = NV * 64;  // one channel pair of the block's input channels
  for (std::int64_t t = 0; t < a.ntaps; ++t) {
    const TapRef& tap = a.taps[t];
    const char* d = dy + tap.dy_off * 2;
    const char* w = static_cast<const char*>(tap.w);
    for (std::int64_t s = 0; s < tap.k; s += pairs, d += 4 * pairs, w += pairs * w_row_bytes) {
      keep_fp_unit_awake();
      // Streamed filter tiles: each operand loaded just before its first product (B0, A0, C00, A1, C10, B1,
      // C01, C11), so the products start while later tiles load. Xeon with AMX, bf16 channels_last, 2
      // threads, paired against loading all four first: a 0.97-0.99x the time, vae 0.94-0.99x (once 1.04x),
      // i 0.94-0.99x; plain loads (flat and plane tasks) measured slower that way (b, d, e 1.01-1.06x).
      if (stream_filter) {
        static_for<0, NV>([&](auto vc) {
          constexpr int v = decltype(vc)::value;
          tile_stream_load<b_tile(v)>(w + v * 64, w_row_bytes);
          static_for<0, R>([&](auto rc) {
            constexpr int r = decltype(rc)::value;
            if constexpr (v == 0) tile_load<a_tile(r)>(d + r * 16 * dy_row_bytes, dy_row_bytes);
            tile_dot<c_tile(r, v), a_tile(r), b_tile(v)>();
          });
        });
        continue;
      }
      static_for<0, R>([&](auto rc) {
        constexpr int r = decltype(rc)::value;
        tile_load<a_tile(r)>(d + r * 16 * dy_row_bytes, dy_row_bytes);
      });
      static_for<0, NV>([&](auto vc) {
        constexpr int v = decltype(vc)::value;
        tile_load<b_tile(v)>(w + v * 64, w_row_bytes);
      });
      static_for<0, R>([&](auto rc) {
        constexpr int r = decltype(rc)::value;
        static_for<0, NV>([&](auto vc) {
          constexpr int v = decltype(vc)::value;
          tile_dot<c_tile(r, v), a_tile(r), b_tile(v)>();
        });
      });
    }
  }
  static_for<0, R>([&](auto rc) {
    constexpr int r = decltype(rc)::value;
    static_for<0, NV>([&](auto vc) {
      constexpr int v = decltype(vc)::value;
      tile_store<c_tile(r, v)>(a.tile + r * 16 * a.tile_ps + v * 16, tile_row_bytes);
    });
  });
}

// Split tiles (GemmConfig::split): M <= 32 pixels x 16 input channels over chunks of 32 output channels,
// each chunk dy's 32 his then 32 los (A tiles hi[r] = 2 + 2 r and lo[r] = 3 + 2 r, rows one dy pixel
// apart) and the filter's 16 pairs of his then 16 of los (B tiles 6 and 7, 64-byte rows). C[r] (tile r)
// takes hi hi', hi lo', lo hi', lo lo' in that order: eight products on six loads, where 2 x 2 tiles of
// unsplit pairs take four on four.
template <int M>
void split_tile_kernel(const TileArgs& a) {
  constexpr int R = (M + 15) / 16;
  constexpr int shape = (M * 4 + 3) * 32;  // apart from configure's shapes
  if (loaded_shape != shape) {
    TileConfig cfg;
    for (int r = 0; r < R; ++r) {
      const auto rows = static_cast<std::uint8_t>(M - 16 * r < 16 ? M - 16 * r : 16);
      for (int t : {r, 2 + 2 * r, 3 + 2 * r}) {
        cfg.rows[t] = rows;
        cfg.colsb[t] = 64;
      }
    }
    for (int t : {6, 7}) {
      cfg.rows[t] = 16;
      cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    loaded_shape = shape;
  }
  const std::int64_t tile_row_bytes = a.tile_ps * 4;
  static_for<0, R>([&](auto rc) {
    constexpr int r = decltype(rc)::value;
    if (a.accumulate)
      tile_load<r>(a.tile + r * 16 * a.tile_ps, tile_row_bytes);
    else
      tile_zero<r>();
  });
  const auto* dy = static_cast<const char*>(a.dy);
  const std::int64_t dy_row_bytes = a.dy_ps * 2;
  for (std::int64_t t = 0; t < a.ntaps; ++t) {
    const TapRef& tap = a.taps[t];
    const char* d = dy + tap.dy_off * 2;
    const char* w = static_cast<const char*>(tap.w);
    for (std::int64_t s = 0; s < tap.k; s += 32, d += 128, w += 2048) {
      keep_fp_unit_awake();
      static_for<0, R>([&](auto rc) {
        constexpr int r = decltype(rc)::value;
        tile_load<2 + 2 * r>(d + r * 16 * dy_row_bytes, dy_row_bytes);
        tile_load<3 + 2 * r>(d + 64 + r * 16 * dy_row_bytes, dy_row_bytes);
      });
      tile_load<6>(w, 64);
      tile_load<7>(w + 1024, 64);
      static_for<0, R>([&](auto rc) {
        constexpr int r = decltype(rc)::value;
        tile_dot<r, 2 + 2 * r, 6>();
        tile_dot<r, 2 + 2 * r, 7>();
        tile_dot<r, 3 + 2 * r, 6>();
        tile_dot<r, 3 + 2 * r, 7>();
      });
    }
  }
  static_for<0, R>([&](auto rc) {
    constexpr int r = decltype(rc)::value;
    tile_store<r>(a.tile + r * 16 * a.tile_ps, tile_row_bytes);
  });
}

AmxKernels make_kernels() {
  AmxKernels k;
  static_for<1, kAmxMaxM + 1>([&](auto m) {
    k.tile[1][m] = &tile_kernel<m, 1>;
    k.tile[2][m] = &tile_kernel<m, 2>;
    k.split[m] = &split_tile_kernel<m>;
  });
  return k;
}

}  // namespace

const AmxKernels& amx_kernels() {
  static const AmxKernels kernels = make_kernels();
  return kernels;
}

void amx_release() {
  if (loaded_shape == 0) return;
  _tile_release();
  loaded_shape = 0;
}

// Four independent 16 x 16 x 32 products per round (C0..C3 from A4, A5 and B6, B7) on operands loaded once:
// each tdpbf16ps waits only for its own accumulator. The bf16 operands are 2^-20, so nothing is flushed.
// Configures the tiles itself and releases them (the engine's next tile configures again).
std::int64_t peak_tdpbf16_amx(std::int64_t rounds, double* accumulated) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  alignas(64) std::uint16_t operand[16 * 32];
  for (std::uint16_t& v : operand) v = 0x3580;
  // The tile loads below read operand through a pointer the compiler may not see into.
  __asm__ volatile("" : : "m"(operand));
  alignas(64) float result[4][16 * 16];
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  for (std::int64_t r = 0; r < rounds; ++r) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, result[0], 64);
  _tile_stored(1, result[1], 64);
  _tile_stored(2, result[2], 64);
  _tile_stored(3, result[3], 64);
  _tile_release();
  loaded_shape = 0;
  __asm__ volatile("" : : "m"(result));
  if (accumulated != nullptr) {
    *accumulated = 0;
    for (const auto& tile : result)
      for (const float v : tile) *accumulated += v;
  }
  return rounds * 4 * 16 * 16 * 32 * 2;
}

}  // namespace conv3d_dx::cpu
