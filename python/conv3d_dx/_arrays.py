"""Numpy arrays, torch tensors and DLPack producers as the arrays conv3d_dx._core reads and writes.

Each argument becomes an Operand: the same memory (never a copy) with a plain element type the core can
import, and the conv3d-dx dtype it holds. torch is looked up in sys.modules, never imported here.
"""

from __future__ import annotations

import math
import operator
import os
import sys
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from . import _core

# numpy dtypes by name (bfloat16 and float8_e4m3fn come from ml_dtypes, hifloat8 from en_dtypes).
_NUMPY_DTYPES = {
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float8_e4m3fn": "fp8_e4m3fn",
    "hifloat8": "hif8",
}
_ITEMSIZE = {"fp32": 4, "fp16": 2, "bf16": 2, "hif8": 1, "fp8_e4m3fn": 1}
# Integer arrays hold raw codes of these dtypes, named by the `dtype` argument.
_RAW_DTYPES = {1: ("hif8", "fp8_e4m3fn"), 2: ("fp16", "bf16")}


@dataclass
class Operand:
    array: Any  # numpy array or torch tensor on the CPU, over the caller's memory
    dtype: str  # the conv3d-dx dtype it holds
    kind: str  # "numpy" or "torch": what a result made for it is
    element_type: Any  # the caller's numpy dtype or torch dtype (integer for raw codes)
    memory: Any  # the caller's object after DLPack import: a result is allocated like it

    def core(self) -> Any:
        """The object the core imports for `array` (a torch tensor's DLPack capsule is used up by one import,
        so one per call)."""
        return as_core_array(self.array)


def value_error(parameter: str, message: str) -> ValueError:
    """A ValueError naming its parameter, as the library's errors do (the `parameter` attribute)."""
    error = ValueError(message)
    error.parameter = parameter
    return error


def _torch() -> Any:
    return sys.modules.get("torch")


def is_torch_tensor(value: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(value, torch.Tensor)


def parse_dtype(parameter: str, name: Optional[str]) -> Optional[str]:
    """The canonical conv3d-dx dtype name ("fp32", "fp16", "bf16", "hif8", "fp8_e4m3fn"), or None."""
    if name is None:
        return None
    if not isinstance(name, str):
        raise TypeError(f"{parameter} must be a dtype name such as 'bf16', not {type(name).__name__}")
    return _core.parse_dtype(parameter, name)


def _typed_or_raw(name: str, typed: Optional[str], itemsize: int, is_integer: bool, shown: str,
                  dtype: Optional[str]) -> str:
    """The dtype an array holds: its element type's, else (integer codes) `dtype`, which must fit."""
    if typed is not None:
        return typed
    if is_integer and itemsize in _RAW_DTYPES:
        choices = _RAW_DTYPES[itemsize]
        if dtype in choices:
            return dtype
        if dtype is None:
            raise TypeError(f"{name} holds raw {shown} codes: pass dtype={choices[0]!r} or {choices[1]!r}")
        raise TypeError(f"{name} holds {shown} codes, which cannot be {dtype} (one of {', '.join(choices)})")
    raise TypeError(f"{name} has element type {shown}; conv3d-dx takes float32, float16, bfloat16, "
                    "float8_e4m3fn, hifloat8, or raw uint16/uint8 codes with dtype=")


# The conv3d-dx dtype of each numpy dtype seen (None: not a typed one), as computing it (dtype.name builds a
# string) took about a third of a small call's argument handling.
_NUMPY_TYPED: dict = {}


def _numpy_typed(dt: np.dtype) -> Optional[str]:
    typed = _NUMPY_TYPED.get(dt, "")
    if typed == "":
        typed = _NUMPY_DTYPES.get(dt.name) if dt.isnative else None
        if typed is not None and dt.itemsize != _ITEMSIZE[typed]:
            typed = None
        _NUMPY_TYPED[dt] = typed
    return typed


def _numpy_operand(name: str, a: np.ndarray, dtype: Optional[str]) -> Operand:
    dt = a.dtype
    typed = _numpy_typed(dt)
    cdt = typed or _typed_or_raw(name, typed, dt.itemsize, dt.kind in "ui", str(dt), dtype)
    # Extension dtypes reach the core as their integer codes (same memory, same strides).
    return Operand(as_core_array(a), cdt, "numpy", dt, a)


_TORCH_TYPED: dict = {}  # torch dtype -> conv3d-dx dtype, filled on first use (torch is never imported here)


def _torch_operand(name: str, t: Any, dtype: Optional[str]) -> Operand:
    # The cheapest attributes first (t.is_cpu, not t.device.type, which builds a device object; detach only
    # where grad is required, for DLPack's export): about 0.6 us an operand less.
    torch = _torch()
    if not t.is_cpu:
        raise value_error(name, f"{name} is on {t.device}; conv3d-dx runs on the CPU")
    if t.layout is not torch.strided:
        raise TypeError(f"{name} has layout {t.layout}; conv3d-dx takes strided tensors")
    if t.requires_grad:
        t = t.detach()
    if not _TORCH_TYPED:
        _TORCH_TYPED.update({torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
                             torch.float8_e4m3fn: "fp8_e4m3fn"})
    dt = t.dtype
    cdt = _TORCH_TYPED.get(dt)
    if cdt is None:
        is_integer = not dt.is_floating_point and not dt.is_complex and dt != torch.bool
        cdt = _typed_or_raw(name, None, t.element_size(), is_integer, str(dt), dtype)
    plain = t.view(torch.uint8) if dt == torch.float8_e4m3fn else t
    return Operand(plain, cdt, "torch", dt, t)


def operand(name: str, value: Any, dtype: Optional[str]) -> Operand:
    """`value` as an Operand; `dtype` names what raw integer codes hold (typed arrays hold their own)."""
    if isinstance(value, np.ndarray):
        return _numpy_operand(name, value, dtype)
    if is_torch_tensor(value):
        return _torch_operand(name, value, dtype)
    if hasattr(value, "__dlpack__"):
        try:
            array = np.from_dlpack(value)  # zero-copy view of the producer's memory
        except (BufferError, TypeError, RuntimeError) as e:
            raise TypeError(f"{name} ({type(value).__name__}) could not be read through DLPack: {e}") from e
        return _numpy_operand(name, array, dtype)
    raise TypeError(f"{name} must be a numpy array, a torch tensor or a DLPack producer, "
                    f"not {type(value).__name__}")


def output_operand(name: str, value: Any, dtype: str) -> Operand:
    """`out` as an Operand; it must be writable, and a torch tensor must not require grad (the write is
    outside autograd, as PyTorch's own out= arguments are)."""
    out = operand(name, value, dtype)
    if out.kind == "numpy" and not out.array.flags.writeable:
        raise value_error(name, f"{name} is read-only; the result needs a writable array")
    if is_torch_tensor(value) and value.requires_grad:
        raise value_error(name, f"{name} requires grad; conv3d-dx writes it outside autograd, so pass a tensor "
                                f"that does not (for gradients use conv3d_dx.torch.conv3d_input)")
    return out


def mark_written(out: Any) -> None:
    """Tells autograd that a torch tensor was written in place (its version counter, as in-place ops do), so
    a backward that saved it before refuses to use the changed values."""
    torch = _torch()
    if torch is not None and isinstance(out, torch.Tensor):
        torch.autograd.graph.increment_version(out)


# Torch results from this size on ask for transparent huge pages (_core.advise_huge_pages) where Linux gives
# advised memory a huge page only when one is free: its THP defrag setting is "defer" or "never". Under
# "always", "madvise" (a common default) or "defer+madvise", a fault in advised memory compacts memory
# first whenever no huge page is free, and the call waits for it: Xeon VM under "madvise", a new 16 MiB y
# took 37-98 ms in most of the first 8 calls advised against about 7 ms not (1.7 ms for both once the
# allocator reused its memory), and a 64 MiB y, mapped anew by every call, medians of 31.6 and 37.3 ms with
# calls from 18 to 71 ms advised against 32.8 and 33.1 ms, every call within 31-35, not.
# CONV3D_DX_MADVISE_HUGEPAGE=1 in the environment advises always, =0 never (numpy advises its own large
# arrays always, unless NUMPY_MADVISE_HUGEPAGE=0).
HUGE_PAGE_RESULT_BYTES = 4 << 20
THP_DEFRAG = "/sys/kernel/mm/transparent_hugepage/defrag"


def advice_pays(setting: Optional[str], defrag: Optional[str]) -> bool:
    """Whether results are advised, from CONV3D_DX_MADVISE_HUGEPAGE (None: unset) and the text of THP_DEFRAG
    (None: unreadable), whose chosen value is the one in brackets."""
    if setting is not None:
        return setting != "0"
    if defrag is None or "[" not in defrag or "]" not in defrag:
        return False
    chosen = defrag[defrag.index("[") + 1:defrag.index("]")]
    return chosen in ("defer", "never")


def _read_defrag() -> Optional[str]:
    try:
        with open(THP_DEFRAG) as f:
            return f.read()
    except OSError:
        return None


ADVISE_HUGE_PAGES = advice_pays(os.environ.get("CONV3D_DX_MADVISE_HUGEPAGE"), _read_defrag())


# numpy results start on a 64-byte line, as torch's do (numpy's own large arrays start 16 or 32 bytes into
# one): the engines store a channels_last y's whole lines past the caches only where they are aligned.
RESULT_ALIGNMENT = 64


def aligned_empty(shape: Sequence[int], dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a RESULT_ALIGNMENT-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + RESULT_ALIGNMENT, dtype=np.uint8)
    start = -raw.__array_interface__["data"][0] % RESULT_ALIGNMENT  # (ctypes.data costs twice as much)
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def allocate(like: Operand, y_dtype: str, shape: Sequence[int], data_format: str,
             keep_memory_format: bool) -> Any:
    """A new result of `like`'s kind: its element type when y has its dtype, else float32.

    With keep_memory_format, a torch result is channels_last_3d when `like` is (PyTorch's own rule for
    convolution gradients), else contiguous in data_format order.
    """
    same = y_dtype == like.dtype
    if like.kind == "numpy":
        return aligned_empty(shape, like.element_type if same else np.float32)
    torch = _torch()
    element_type = like.element_type if same else torch.float32
    t = like.memory
    if (keep_memory_format and data_format == "NCDHW" and len(shape) == 5 and not t.is_contiguous()
            and t.is_contiguous(memory_format=torch.channels_last_3d)):
        result = torch.empty(shape, dtype=element_type, memory_format=torch.channels_last_3d)
    else:
        result = torch.empty(shape, dtype=element_type)
    if ADVISE_HUGE_PAGES and result.numel() * result.element_size() >= HUGE_PAGE_RESULT_BYTES:
        _core.advise_huge_pages(as_core_array(result))
    return result


def as_core_array(value: Any) -> Any:
    """The object the core imports for an operand's array or a result made by allocate(): float8 tensors
    and extension-typed numpy arrays as their codes, and a torch tensor as its DLPack capsule
    (torch.utils.dlpack.to_dlpack takes about 0.2 us, where the core's import through Tensor.__dlpack__, a
    Python method, takes about 2: three a call)."""
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        return torch.utils.dlpack.to_dlpack(value.view(torch.uint8) if value.dtype == torch.float8_e4m3fn
                                            else value)
    if isinstance(value, np.ndarray) and value.dtype.kind not in "fui":
        return value.view(np.uint16 if value.dtype.itemsize == 2 else np.uint8)
    return value


_INT64 = (-(1 << 63), (1 << 63) - 1)


def ints(name: str, value: Any, count: Optional[int] = None) -> list:
    """A sequence of 64-bit integers as a list, with `count` values when given."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of integers, not {type(value).__name__}")
    try:
        result = [operator.index(v) for v in value]
    except TypeError:
        raise TypeError(f"{name} must be a sequence of integers, got {value!r}") from None
    if count is not None and len(result) != count:
        raise value_error(name, f"{name} has {len(result)} values {result} but must have {count}")
    for v in result:
        if not _INT64[0] <= v <= _INT64[1]:
            raise value_error(name, f"{name} holds {v}, outside the 64-bit integers")
    return result


def integer(name: str, value: Any, low: int = _INT64[0], high: int = _INT64[1]) -> int:
    """An integer in [low, high] (by default the 64-bit integers)."""
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}") from None
    if not low <= v <= high:
        raise value_error(name, f"{name} is {v} but must be in [{low}, {high}]")
    return v


def text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string such as 'NDHWC', not {type(value).__name__}")
    return value
