// The register-blocked tile kernel, written once over a vector type and included by each instruction-set
// file (kernels_avx512.cpp, kernels_avx2.cpp) inside its own namespace, so every ISA gets its own copy
// compiled with its own flags and no inline function is shared between them.
//
// acc[M][NV] lives in registers for the whole reduction; for each tap and reduction step the kernel loads NV
// filter vectors and broadcasts one dy value (or bf16 pair) per pixel. Pixels whose tap falls outside dy
// (W borders) are skipped: the common shapes of such ranges get compile-time variants (on AVX2 every range
// of a tile of up to 6 pixels: run_part), the rest go pixel by pixel. The order of the reduction (taps in
// list order, then channels ascending) never depends on the blocking of other tiles or on threads.
// SharedWTile does the same over groups of W taps that share their dy loads (its own fixed order).
//
// Include it inside a namespace, after <immintrin.h>, <cstdint>, <cstring>, <type_traits> and
// "cpu/kernels.hpp". It also holds what else the ISA files share (static_for, prefetch_lines, and the
// filter-streaming tile over the same vector type, whose V also gives a mask type M, mask() and
// masked_fma()).
#pragma once

#define CONV3D_DX_INLINE inline __attribute__((always_inline))

template <int B, int E, class F>
CONV3D_DX_INLINE void static_for(F&& f) {
  if constexpr (B < E) {
    f(std::integral_constant<int, B>{});
    static_for<B + 1, E>(f);
  }
}

// Requests the lines of [at, at + bytes) into L1. An address, not a pointer: the lines may lie past the
// buffer they belong to (prefetches never fault).
CONV3D_DX_INLINE void prefetch_lines(std::uintptr_t at, std::int64_t bytes) {
  for (std::int64_t b = 0; b < bytes; b += 64)
    _mm_prefetch(reinterpret_cast<const char*>(at + static_cast<std::uintptr_t>(b)), _MM_HINT_T0);
}

// The peak probes' loop (kernels.hpp): `rounds` rounds of acc = step(acc, x, w) into kAcc accumulators of V
// held in registers. x and w are made opaque each round so no product is hoisted out of the loop, and the
// accumulators are handed to an empty asm at the end so nothing is optimised away. When `accumulated` is not
// null it receives the sum of every accumulator lane, in double.
template <class V, int kAcc, class Step>
CONV3D_DX_INLINE void peak_loop(std::int64_t rounds, typename V::R x, typename V::R w, Step step,
                                double* accumulated) {
  typename V::R acc[kAcc];
  for (auto& a : acc) a = V::zero();
  for (std::int64_t r = 0; r < rounds; ++r) {
#pragma GCC unroll 16
    for (int i = 0; i < kAcc; ++i) acc[i] = step(acc[i], x, w);
    __asm__ volatile("" : "+v"(x), "+v"(w));
  }
  for (const auto& a : acc) __asm__ volatile("" : : "v"(a));
  if (accumulated == nullptr) return;
  *accumulated = 0;
  for (const auto& a : acc) {
    float lanes[V::kLanes];
    V::store(lanes, a);
    for (const float v : lanes) *accumulated += v;
  }
}

// The dy addresses of N pixels ps bytes apart, advanced cs bytes per reduction step (next()). For N > 8 the
// compiler would keep a pointer per pixel and spill some, moving them back on every step: pixel q is then
// bases[q / 5] + (q % 5) * ps instead, ps scaled by 1, 2 or 4 or 3 ps, all x86 address forms, so N pixels
// take ceil(N / 5) bases and two strides in registers; the bases are made opaque each step so that no
// pointer per pixel is hoisted out of the loop again (Ice Lake Xeon, fp32 single-tap 14 x 2 tiles from L1:
// 137 -> 152-154 GFLOP/s). Up to 8 pixels, a pointer each (AVX2 6 x 2 tiles ran at 0.75x the speed with the
// bases).
template <int N>
struct PixelAddresses {
  static constexpr int kGroup = N > 8 ? 5 : 1;
  static constexpr int kBases = N > 0 ? (N + kGroup - 1) / kGroup : 1;
  const char* bases[kBases];
  std::int64_t ps, ps3, cs, step = 0;

  CONV3D_DX_INLINE PixelAddresses(const char* first, std::int64_t ps_bytes, std::int64_t cs_bytes)
      : ps(ps_bytes), ps3(3 * ps_bytes), cs(cs_bytes) {
    static_for<0, kBases>([&](auto i) __attribute__((always_inline)) { bases[i] = first + i * kGroup * ps; });
  }
  // At the start of each reduction step.
  CONV3D_DX_INLINE void hide() {
    if constexpr (kGroup > 1)
      static_for<0, kBases>([&](auto i) __attribute__((always_inline)) { __asm__("" : "+r"(bases[i])); });
  }
  template <int Q>
  CONV3D_DX_INLINE const char* at() const {
    if constexpr (kGroup == 1) {
      return bases[Q] + step;
    } else {
      constexpr int r = Q % kGroup;
      const char* const b = bases[Q / kGroup];
      return r == 0 ? b : r == 3 ? b + ps3 : b + r * ps;
    }
  }
  CONV3D_DX_INLINE void next() {
    if constexpr (kGroup == 1)
      step += cs;
    else
      static_for<0, kBases>([&](auto i) __attribute__((always_inline)) { bases[i] += cs; });
  }
};

// Step policies: S::In is the dy element type.
template <class V>
struct F32Step {
  using In = float;
  static CONV3D_DX_INLINE typename V::R bcast(const float* d) { return V::bcast(*d); }
  static CONV3D_DX_INLINE typename V::R fma(typename V::R acc, typename V::R b, typename V::R w) {
    return V::fma(b, w, acc);
  }
};

// A row tile's accumulators from its TileArgs: the tile's values when accumulating, else zero; and back.
template <class V, int M, int NV>
CONV3D_DX_INLINE void load_accumulators(typename V::R (&acc)[M][NV], const TileArgs& a) {
  static_for<0, M>([&](auto p) __attribute__((always_inline)) {
    static_for<0, NV>([&](auto v) __attribute__((always_inline)) {
      acc[p][v] = a.accumulate ? V::loadu(a.tile + p * a.tile_ps + v * V::kLanes) : V::zero();
    });
  });
}

template <class V, int M, int NV>
CONV3D_DX_INLINE void store_accumulators(const typename V::R (&acc)[M][NV], const TileArgs& a) {
  static_for<0, M>([&](auto p) __attribute__((always_inline)) {
    static_for<0, NV>([&](auto v) __attribute__((always_inline)) {
      float* const at = a.tile + p * a.tile_ps + v * V::kLanes;
      if (a.uncached)
        V::store_uncached(at, acc[p][v]);
      else
        V::store(at, acc[p][v]);
    });
  });
}

template <class V, class S, int M, int NV>
struct Tile {
  using R = typename V::R;
  using In = typename S::In;
  static constexpr std::int64_t kWStep = static_cast<std::int64_t>(NV * sizeof(R));  // bytes per step

  // Pixels [LO, HI) of the tile; d points at pixel LO's dy for this tap.
  template <int LO, int HI>
  static CONV3D_DX_INLINE void run(R (&acc)[M][NV], const In* d, std::int64_t ps, std::int64_t cs,
                                   const char* w, std::int64_t k) {
    PixelAddresses<HI - LO> px(reinterpret_cast<const char*>(d), ps * static_cast<std::int64_t>(sizeof(In)),
                               cs * static_cast<std::int64_t>(sizeof(In)));
    for (std::int64_t s = 0; s < k; ++s, px.next()) {
      px.hide();
      R wv[NV];
      static_for<0, NV>([&](auto v) __attribute__((always_inline)) {
        wv[v] = V::load(w + s * kWStep + v * static_cast<std::int64_t>(sizeof(R)));
      });
      static_for<LO, HI>([&](auto p) __attribute__((always_inline)) {
        const R b = S::bcast(reinterpret_cast<const In*>(px.template at<decltype(p)::value - LO>()));
        static_for<0, NV>([&](auto v)
                              __attribute__((always_inline)) { acc[p][v] = S::fma(acc[p][v], b, wv[v]); });
      });
    }
  }

  // The tap's pixels [lo, hi) of a tile that it does not cover whole: where V::kEveryRange asks, every such
  // range of a tile of up to 6 pixels has a loop of its own; otherwise the tile one pixel short at either
  // end has, and other ranges go pixel by pixel, each step loading the filter vectors for one pixel's FMAs
  // (taps reaching 2 or more pixels past a border: 5 x 5 x 5 kernels).
  static CONV3D_DX_INLINE void run_part(R (&acc)[M][NV], int lo, int hi, const In* d, std::int64_t ps,
                                        std::int64_t cs, const char* w, std::int64_t k) {
    if constexpr (V::kEveryRange && M <= 6) {
      static_for<0, M>([&](auto l) __attribute__((always_inline)) {
        static_for<decltype(l)::value + 1, M + 1>([&](auto h) __attribute__((always_inline)) {
          if constexpr (l != 0 || h != M)
            if (lo == l && hi == h) run<l, h>(acc, d + l * ps, ps, cs, w, k);
        });
      });
    } else if (lo == 1 && hi == M) {
      run<1, M>(acc, d + ps, ps, cs, w, k);
    } else if (lo == 0 && hi == M - 1) {
      run<0, M - 1>(acc, d, ps, cs, w, k);
    } else {
      static_for<0, M>([&](auto p) __attribute__((always_inline)) {
        if (p >= lo && p < hi) run<p, p + 1>(acc, d + p * ps, ps, cs, w, k);
      });
    }
  }

  static void kernel(const TileArgs& a) {
    R acc[M][NV];
    load_accumulators<V>(acc, a);
    const In* dy = static_cast<const In*>(a.dy);
    const std::int64_t ps = a.dy_ps, cs = a.dy_cs;
    for (std::int64_t t = 0; t < a.ntaps; ++t) {
      const TapRef& tap = a.taps[t];
      const char* w = static_cast<const char*>(tap.w);
      const int lo = tap.lo, hi = std::min(tap.hi, M);
      const std::int64_t k = tap.k;
      if (lo == 0 && hi == M)
        run<0, M>(acc, dy + tap.dy_off, ps, cs, w, k);
      else
        run_part(acc, lo, hi, dy + tap.dy_off, ps, cs, w, k);
    }
    store_accumulators<V>(acc, a);
  }
};

// A row tile whose tap list holds (kd, kh) pairs of NT W taps one dy pixel apart (fp32 FMA, config share_w):
// pixel p's tap t reads dy pixel q = p + t, so each dy value broadcast serves the FMAs of up to NT pixels
// (NT filter vectors per channel block vector held in registers). The single-tap kernel above loads a dy
// value per FMA when NV = 1, and a core that loads one vector per cycle (the Ice Lake Xeon measured) then
// does half its FMAs. TapRef: dy_off is dy pixel q = 0 of the tile, w the first tap's [k][NV x lanes]
// values with the next taps' following, k the channels per tap, [lo, hi) the dy pixels q inside dy (only
// those are read; the others' terms are left out). A pixel's sum runs over the pairs in list order, then
// the channels ascending, then the NT taps in order, whatever the tile's position or width.
template <class V, int M, int NV, int NT>
struct SharedWTile {
  using R = typename V::R;
  static constexpr int kQ = M + NT - 1;  // dy pixels the tile reads per tap pair

  template <bool Checked>
  static CONV3D_DX_INLINE void run(R (&acc)[M][NV], const char* at, std::int64_t ps, std::int64_t cs,
                                   const char* w, std::int64_t k, int lo, int hi) {
    const std::int64_t tap_bytes = k * NV * static_cast<std::int64_t>(sizeof(R));
    PixelAddresses<kQ> px(at, ps, cs);
    for (std::int64_t c = 0; c < k; ++c, px.next()) {
      px.hide();
      R wv[NT][NV];
      static_for<0, NT>([&](auto t) __attribute__((always_inline)) {
        static_for<0, NV>([&](auto v) __attribute__((always_inline)) {
          wv[t][v] = V::load(w + t * tap_bytes + (c * NV + v) * static_cast<std::int64_t>(sizeof(R)));
        });
      });
      static_for<0, kQ>([&](auto q) __attribute__((always_inline)) {
        if (Checked && (q < lo || q >= hi)) return;
        const R x = V::bcast(*reinterpret_cast<const float*>(px.template at<decltype(q)::value>()));
        static_for<0, NT>([&](auto t) __attribute__((always_inline)) {
          constexpr int p = decltype(q)::value - decltype(t)::value;
          if constexpr (p >= 0 && p < M)
            static_for<0, NV>([&](auto v) __attribute__((always_inline)) {
              acc[p][v] = V::fma(x, wv[t][v], acc[p][v]);
            });
        });
      });
    }
  }

  static void kernel(const TileArgs& a) {
    R acc[M][NV];
    load_accumulators<V>(acc, a);
    // Byte addresses from dy's (the first of a tile's dy pixels may lie before dy).
    const std::uintptr_t dy = reinterpret_cast<std::uintptr_t>(a.dy);
    constexpr std::int64_t kBytes = sizeof(float);
    const std::int64_t ps = a.dy_ps * kBytes, cs = a.dy_cs * kBytes;
    for (std::int64_t t = 0; t < a.ntaps; ++t) {
      const TapRef& tap = a.taps[t];
      const char* at = reinterpret_cast<const char*>(dy + static_cast<std::uintptr_t>(tap.dy_off * kBytes));
      const char* w = static_cast<const char*>(tap.w);
      const int hi = std::min(tap.hi, kQ);
      if (tap.lo == 0 && hi == kQ)
        run<false>(acc, at, ps, cs, w, tap.k, 0, kQ);
      else
        run<true>(acc, at, ps, cs, w, tap.k, tap.lo, hi);
    }
    store_accumulators<V>(acc, a);
  }
};

// Fills s.f32_shared_w[NT][NV][M] for M in 1..MaxM with SharedWTile<V, M, NV, NT>::kernel.
template <class V, int NT, int NV, int MaxM>
void fill_shared_w_tiles(KernelSet& s) {
  s.shared_w_max_m[NT][NV] = MaxM;
  static_for<1, MaxM + 1>([&](auto m) { s.f32_shared_w[NT][NV][m] = &SharedWTile<V, m, NV, NT>::kernel; });
}

// Fills table[NV][M] for M in 1..MaxM with Tile<V, S, M, NV>::kernel.
template <class V, class S, int NV, int MaxM>
void fill_tiles(TileFn (&table)[kMaxNv + 1][kMaxM + 1]) {
  static_for<1, MaxM + 1>([&](auto m) { table[NV][m] = &Tile<V, S, m, NV>::kernel; });
}

// R rows x NV vectors of pixels of one filter-streaming tile (StreamArgs). Each filter value is broadcast
// once and multiplies NV pixel vectors; the unmasked form relies on dycol's zeros (the stream engine re-runs
// a row with the masked form when its sums are not all finite, which a 0 x inf or 0 x NaN would make them).
// V::masked_fma leaves the lanes outside V::mask(bits) as they were.
template <class V, int R, int NV, bool Masked>
struct StreamTile {
  static void kernel(const StreamArgs& a) {
    constexpr int L = V::kLanes;
    typename V::R acc[R][NV];
    static_for<0, R>([&](auto r) __attribute__((always_inline)) {
      static_for<0, NV>([&](auto v) __attribute__((always_inline)) {
        acc[r][v] =
            a.accumulate ? V::load(reinterpret_cast<const char*>(a.acc + r * a.acc_rs + v * L)) : V::zero();
      });
    });
    const float* d = a.dycol;
    if (!Masked && a.ntaps == 1 && a.prefetch_bytes == 0) {  // one tap, nothing to prefetch: the short loop
      const float* w = a.w + a.taps[0];
      for (std::int64_t co = 0; co < a.nco; ++co, d += NV * L, w += a.w_cs) {
        typename V::R x[NV];
        static_for<0, NV>([&](auto v) __attribute__((always_inline)) {
          x[v] = V::load(reinterpret_cast<const char*>(d + v * L));
        });
        static_for<0, R>([&](auto r) __attribute__((always_inline)) {
          const typename V::R b = V::bcast(w[r * a.w_rs]);
          static_for<0, NV>([&](auto v)
                                __attribute__((always_inline)) { acc[r][v] = V::fma(x[v], b, acc[r][v]); });
        });
      }
    } else {
      for (std::int64_t co = 0; co < a.nco; ++co) {
        const float* w = a.w + co * a.w_cs;
        // The next tile's lines (they may lie past the filter).
        prefetch_lines(reinterpret_cast<std::uintptr_t>(w) + static_cast<std::uintptr_t>(a.prefetch * 4),
                       a.prefetch_bytes);
        for (std::int64_t i = 0; i < a.ntaps; ++i, d += NV * L) {
          typename V::R x[NV];
          typename V::M m[NV];
          static_for<0, NV>([&](auto v) __attribute__((always_inline)) {
            x[v] = V::load(reinterpret_cast<const char*>(d + v * L));
            if constexpr (Masked) m[v] = V::mask(a.masks[i * NV + v]);
          });
          const float* wt = w + a.taps[i];
          static_for<0, R>([&](auto r) __attribute__((always_inline)) {
            const typename V::R b = V::bcast(wt[r * a.w_rs]);
            static_for<0, NV>([&](auto v) __attribute__((always_inline)) {
              if constexpr (Masked)
                acc[r][v] = V::masked_fma(x[v], b, acc[r][v], m[v]);
              else
                acc[r][v] = V::fma(x[v], b, acc[r][v]);
            });
          });
        }
      }
    }
    static_for<0, R>([&](auto r) __attribute__((always_inline)) {
      static_for<0, NV>([&](auto v) __attribute__((always_inline)) {
        V::store(a.acc + r * a.acc_rs + v * L, acc[r][v]);
      });
    });
  }
};
