"""The library's own conversions between float32 and the storage types, on numpy arrays.

encode rounds float32 values to fp16 or bf16 (nearest even), hif8 (HiFloat8: nearest, ties away from zero)
or fp8_e4m3fn (nearest even) and returns their integer codes; overflow gives inf (fp8: NaN) or, with
saturate=True, the largest finite value. decode widens codes exactly to float32. round_hf32 keeps 10
mantissa bits, half away from zero, as enable_hf32 does to fp32 inputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _arrays, _core

_CODE_TYPES = {"fp16": np.uint16, "bf16": np.uint16, "hif8": np.uint8, "fp8_e4m3fn": np.uint8}


def _storage_dtype(dtype: str) -> str:
    name = _arrays.parse_dtype("dtype", dtype)
    if name not in _CODE_TYPES:
        raise _arrays.value_error("dtype", f"dtype {name} is not a storage type; use fp16, bf16, hif8 or "
                                  "fp8_e4m3fn")
    return name


def _float32(name: str, values: Any) -> np.ndarray:
    values = np.asarray(values)
    if values.dtype != np.float32:
        raise TypeError(f"{name} has dtype {values.dtype} but must be float32 (round wider values to float32 "
                        "first, explicitly)")
    return _c_contiguous(values)


def _c_contiguous(a: np.ndarray) -> np.ndarray:
    """`a`, copied when not C-contiguous (np.ascontiguousarray would make a 0-d array 1-d)."""
    return a if a.flags.c_contiguous else np.array(a, order="C")


def encode(values: Any, dtype: str, saturate: bool = False) -> np.ndarray:
    """Codes of float32 `values` rounded to `dtype`: uint16 for fp16/bf16, uint8 for hif8/fp8_e4m3fn."""
    name = _storage_dtype(dtype)
    values = _float32("values", values)
    codes = np.empty(values.shape, dtype=_CODE_TYPES[name])
    _core.encode(values.reshape(-1), codes.reshape(-1), name, bool(saturate))
    return codes


def decode(codes: Any, dtype: str) -> np.ndarray:
    """float32 values of `codes` of `dtype` (integer codes, or arrays of that dtype itself)."""
    name = _storage_dtype(dtype)
    codes = np.asarray(codes)
    if codes.dtype.kind in "ui" and codes.dtype.itemsize == np.dtype(_CODE_TYPES[name]).itemsize:
        plain = codes
    else:
        # A typed array (float16, ml_dtypes, en_dtypes): its codes, if it really holds `dtype`.
        held = _arrays.operand("codes", codes, None).dtype if codes.dtype.kind not in "ui" else None
        if held != name:
            raise TypeError(f"codes has dtype {codes.dtype} but {name} codes are "
                            f"{np.dtype(_CODE_TYPES[name]).name} (or {name} arrays)")
        plain = codes.view(_CODE_TYPES[name])
    plain = _c_contiguous(plain)
    values = np.empty(plain.shape, dtype=np.float32)
    _core.decode(plain.reshape(-1), values.reshape(-1), name)
    return values


def round_hf32(values: Any) -> np.ndarray:
    """float32 `values` rounded to HF32 (10 explicit mantissa bits, half away from zero; inf/NaN kept)."""
    values = _float32("values", values)
    rounded = np.empty_like(values)
    _core.round_hf32(values.reshape(-1), rounded.reshape(-1))
    return rounded
