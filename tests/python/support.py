"""Shared helpers: random problems in canonical terms, layouts, a float64 reference and the accuracy check."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Tuple

import en_dtypes
import ml_dtypes
import numpy as np
import torch

NUMPY_DTYPES = {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16,
                "hif8": en_dtypes.hifloat8, "fp8_e4m3fn": ml_dtypes.float8_e4m3fn}
ALL_DTYPES = list(NUMPY_DTYPES)


@dataclass
class Case:
    """A problem in canonical (NCDHW) terms; pads are front, back, top, bottom, left, right."""

    N: int = 1
    Cin: int = 4
    Cout: int = 4
    groups: int = 1
    size: List[int] = field(default_factory=lambda: [5, 5, 5])
    kernel: List[int] = field(default_factory=lambda: [3, 3, 3])
    stride: List[int] = field(default_factory=lambda: [1, 1, 1])
    dilation: List[int] = field(default_factory=lambda: [1, 1, 1])
    pads: List[int] = field(default_factory=lambda: [0] * 6)

    def out(self) -> List[int]:
        return [(self.size[a] + self.pads[2 * a] + self.pads[2 * a + 1] - (self.kernel[a] - 1) * self.dilation[a]
                 - 1) // self.stride[a] + 1 for a in range(3)]

    def y_shape(self) -> List[int]:
        return [self.N, self.Cin, *self.size]

    def dy_shape(self) -> List[int]:
        return [self.N, self.Cout, *self.out()]

    def w_shape(self) -> List[int]:
        return [self.Cout, self.Cin // self.groups, *self.kernel]

    def terms(self) -> int:
        return (self.Cout // self.groups) * math.prod(self.kernel)


def random_case(rng: np.random.Generator) -> Case:
    """Groups (1, 2, 3), strides 1..3 (sometimes above the kernel), dilations 1..2, asymmetric pads."""
    while True:
        groups = int(rng.choice([1, 1, 2, 3]))
        c = Case(N=int(rng.integers(1, 3)), Cin=groups * int(rng.integers(1, 5)),
                 Cout=groups * int(rng.integers(1, 5)), groups=groups,
                 size=[int(v) for v in rng.integers(1, 8, 3)], kernel=[int(v) for v in rng.integers(1, 4, 3)],
                 stride=[int(v) for v in rng.integers(1, 4, 3)], dilation=[int(v) for v in rng.integers(1, 3, 3)],
                 pads=[int(v) for v in rng.integers(0, 3, 6)])
        if all(c.size[a] + c.pads[2 * a] + c.pads[2 * a + 1] >= (c.kernel[a] - 1) * c.dilation[a] + 1
               for a in range(3)):
            return c


def random_values(rng: np.random.Generator, shape: List[int], dtype: str) -> np.ndarray:
    """Random values of `dtype` (a typed numpy array), well inside its range."""
    return (rng.standard_normal(shape).astype(np.float32) * 2).astype(NUMPY_DTYPES[dtype])


def feature_to(layout: str, a):
    """A canonical NCDHW array as `layout` (a transposed view)."""
    return a if layout == "NCDHW" else a.transpose(0, 2, 3, 4, 1)


def filter_to(layout: str, w):
    """A canonical [Cout, Cin_g, kD, kH, kW] filter as NCDHW, NDHWC or DHWCN (a transposed view)."""
    return {"NCDHW": w, "NDHWC": w.transpose(0, 2, 3, 4, 1), "DHWCN": w.transpose(2, 3, 4, 1, 0)}[layout]


def feature_from(layout: str, a):
    return a if layout == "NCDHW" else a.transpose(0, 4, 1, 2, 3)


def in_data_format(layout: str, v: List[int]) -> List[int]:
    """Canonical N, C, D, H, W values in data_format order."""
    return list(v) if layout == "NCDHW" else [v[0], v[2], v[3], v[4], v[1]]


def strided(a: np.ndarray) -> np.ndarray:
    """The same values in a non-contiguous view (every dimension padded by one, offset by one)."""
    big = np.full([s + 1 for s in a.shape], np.nan, dtype=np.float32).astype(a.dtype)
    view = big[tuple(slice(1, None) for _ in a.shape)]
    view[...] = a
    return view


def reference(case: Case, dy: np.ndarray, w: np.ndarray) -> np.ndarray:
    """float64 dL/dx in NCDHW from canonical dy and w (any dtype, widened exactly), by PyTorch."""
    padded = [case.N, case.Cin] + [case.size[a] + case.pads[2 * a] + case.pads[2 * a + 1] for a in range(3)]
    full = torch.nn.grad.conv3d_input(padded, torch.from_numpy(np.asarray(w, np.float64)),
                                      torch.from_numpy(np.asarray(dy, np.float64)), case.stride, 0,
                                      case.dilation, case.groups)
    d, h, w_ = (slice(case.pads[2 * a], case.pads[2 * a] + case.size[a]) for a in range(3))
    return full[:, :, d, h, w_].numpy()


def bound(terms: int, abs_sum: np.ndarray) -> np.ndarray:
    """The library's accuracy rule for a sum of n = `terms` fp32 products in any order (as the C++ tests
    use it): gamma(n) * sum |dy * w|, gamma(n) = n u / (1 - n u), u = 2^-24, plus underflow slack."""
    nu = max(terms, 1) * 2.0 ** -24
    return (nu / (1 - nu) * abs_sum + max(terms, 1) * 2.0 ** -150) * (1 + 2.0 ** -20)


def check(y: np.ndarray, y_dtype: str, expected: np.ndarray, abs_sum: np.ndarray, terms: int) -> None:
    """y (canonical, typed) within the fp32 bound of the exact value, plus one rounding to y_dtype: with
    monotone rounding, y lies between the roundings of expected -/+ bound."""
    b = bound(terms, abs_sum)
    got = np.asarray(y).astype(np.float64)
    if y_dtype == "fp32":
        bad = ~(np.abs(got - expected) <= b + 2.0 ** -24 * np.abs(expected))
    else:
        t = NUMPY_DTYPES[y_dtype]
        lo = (expected - b).astype(np.float32).astype(t).astype(np.float64)
        hi = (expected + b).astype(np.float32).astype(t).astype(np.float64)
        bad = ~((lo <= got) & (got <= hi))
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{bad.sum()} of {bad.size} values off; first at {i}: got {got[i]!r}, "
                             f"expected {expected[i]!r} (bound {b[i]!r})")


def expected_pair(case: Case, dy: np.ndarray, w: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(exact dL/dx, sum of |dy * w| per element), both float64 NCDHW."""
    dy64, w64 = np.asarray(dy, np.float64), np.asarray(w, np.float64)
    return reference(case, dy64, w64), reference(case, np.abs(dy64), np.abs(w64))
