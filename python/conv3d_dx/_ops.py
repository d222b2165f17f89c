"""conv3d_backprop_input_v2 and Plan: the operator on numpy arrays, torch tensors and DLPack producers."""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

from . import _arrays, _core


def _prepare(input_size: Sequence[int], filter: Any, out_backprop: Any, strides: Sequence[int],
             pads: Sequence[int], dilations: Sequence[int], groups: int, data_format: str,
             filter_format: str, enable_hf32: bool, output_dtype: Optional[str], saturate: bool,
             out: Any, dtype: Optional[str]) -> Tuple[Any, _arrays.Operand, _arrays.Operand,
                                                      Optional[_arrays.Operand]]:
    """Python types checked and converted; the library judges every rule of the operator itself."""
    dtype = _arrays.parse_dtype("dtype", dtype)
    output_dtype = _arrays.parse_dtype("output_dtype", output_dtype)
    dy = _arrays.operand("out_backprop", out_backprop, dtype)
    w = _arrays.operand("filter", filter, dtype)
    for name, operand in (("out_backprop", dy), ("filter", w)):
        if dtype is not None and operand.dtype != dtype:
            raise TypeError(f"{name} holds {operand.dtype} ({operand.element_type}) but dtype is {dtype}")
    y = None
    if out is not None:
        # Raw codes in `out` hold output_dtype, else the input dtype.
        y = _arrays.output_operand("out", out, output_dtype or dy.dtype)
        if output_dtype is not None and y.dtype != output_dtype:
            raise TypeError(f"out holds {y.dtype} but output_dtype is {output_dtype}")
    attrs = _core.Attrs()
    attrs.input_size = _arrays.ints("input_size", input_size)
    attrs.strides = _arrays.ints("strides", strides, 5)
    attrs.pads = _arrays.ints("pads", pads, 6)
    attrs.dilations = _arrays.ints("dilations", dilations, 5)
    attrs.groups = _arrays.integer("groups", groups)
    attrs.data_format = _arrays.text("data_format", data_format)
    attrs.filter_format = _arrays.text("filter_format", filter_format)
    attrs.enable_hf32 = bool(enable_hf32)
    attrs.saturate = bool(saturate)
    attrs.y_dtype = y.dtype if y is not None else output_dtype or dy.dtype
    return attrs, dy, w, y


def _threads(threads: Optional[int]) -> int:
    return 0 if threads is None else _arrays.integer("threads", threads, -(1 << 31), (1 << 31) - 1)


def conv3d_backprop_input_v2(input_size: Sequence[int], filter: Any, out_backprop: Any,
                             strides: Sequence[int], pads: Sequence[int],
                             dilations: Sequence[int] = (1, 1, 1, 1, 1), groups: int = 1,
                             data_format: str = "NDHWC", filter_format: str = "NCDHW",
                             enable_hf32: bool = False, output_dtype: Optional[str] = None,
                             saturate: bool = False, threads: Optional[int] = None, out: Any = None, *,
                             dtype: Optional[str] = None) -> Any:
    """y = dL/dx of a 3D convolution, as Conv3DBackpropInputV2 computes it.

    input_size: y's shape in data_format order (4 values: D = 1 inserted). filter: NCDHW
    [Cout, Cin/groups, kD, kH, kW], NDHWC [Cout, kD, kH, kW, Cin/groups] or DHWCN [kD, kH, kW, Cin/groups,
    Cout] (filter_format). out_backprop: dy in data_format. strides and dilations: 5 values in data_format
    order (N and C entries 1). pads: front, back, top, bottom, left, right.

    Arrays: numpy (float32, float16, ml_dtypes bfloat16 and float8_e4m3fn, en_dtypes hifloat8, or raw
    uint16/uint8 codes with dtype="fp16"/"bf16"/"hif8"/"fp8_e4m3fn"), torch CPU tensors, or any DLPack
    producer; views are read where they lie, with their strides. y has the input dtype, or output_dtype
    ("fp32"), or out's dtype; it is written into `out` when given, else returned as a new array of
    out_backprop's kind (numpy, or torch; other DLPack producers give numpy). saturate: overflow gives the
    largest finite value instead of inf/NaN. threads: None for the library's default (all cores).

    Raises ValueError naming the parameter when the library rejects the call (nothing is written to `out`
    then), TypeError for arguments of the wrong Python type or element type. The GIL is released while the
    gradient is computed. Plans of recent problems are reused (see set_plan_cache_size).
    """
    attrs, dy, w, y = _prepare(input_size, filter, out_backprop, strides, pads, dilations, groups,
                               data_format, filter_format, enable_hf32, output_dtype, saturate, out, dtype)
    allocated = []

    def allocate() -> Any:
        allocated.append(_arrays.allocate(dy, attrs.y_dtype, attrs.input_size, attrs.data_format.upper(),
                                          keep_memory_format=True))
        return _arrays.as_core_array(allocated[0])

    _core.backprop_input(attrs, w.core(), w.dtype, dy.core(), dy.dtype, None if y is None else y.core(),
                         "out" if y is not None else "output_dtype", allocate, _threads(threads))
    if out is None:
        return allocated[0]
    _arrays.mark_written(out)
    return out


def set_plan_cache_size(size: int) -> int:
    """Sets how many plans conv3d_backprop_input_v2 keeps (default 16; 0 keeps none and frees them all);
    returns the previous size.

    Making a plan allocates its buffers (for most problems a packed copy of the filter; a large filter is
    streamed, or packed a block at a time per thread, instead), which can cost more than computing the
    problem, so the plans of the most recent distinct problems (shapes, strides, dtypes, attributes,
    threads) are kept for calls that repeat them, as training steps do. Each holds at most about a
    filter's worth of memory.
    """
    size = _arrays.integer("size", size)
    if size < 0:
        raise _arrays.value_error("size", f"size is {size} but must be >= 0")
    return _core.set_plan_cache_size(size)


class Plan:
    """One problem planned once, for repeated calls: the filter is packed once and reused.

    Takes the arguments of conv3d_backprop_input_v2 (without out); `filter` and `out_backprop` fix the
    dtypes, shapes and strides the plan runs on, and `filter` is packed at once. Results are contiguous
    in data_format order (and `out` must be).

        plan = conv3d_dx.Plan(input_size, w, dy, strides, pads)
        dx = plan.execute_packed(dy)        # the filter packed when the plan was made
        dx = plan.execute(dy, w2)           # packs w2 (kept for execute_packed), then runs

    With keep_filter=False, execute() need not keep the filter it is given, so an engine may read it in
    place without packing it (a large filter on a small feature map: about 2-3x faster); execute_packed() then
    needs a pack_filter() first.
    """

    def __init__(self, input_size: Sequence[int], filter: Any, out_backprop: Any, strides: Sequence[int],
                 pads: Sequence[int], dilations: Sequence[int] = (1, 1, 1, 1, 1), groups: int = 1,
                 data_format: str = "NDHWC", filter_format: str = "NCDHW", enable_hf32: bool = False,
                 output_dtype: Optional[str] = None, saturate: bool = False, threads: Optional[int] = None,
                 *, dtype: Optional[str] = None, keep_filter: bool = True) -> None:
        attrs, dy, w, _ = _prepare(input_size, filter, out_backprop, strides, pads, dilations, groups,
                                   data_format, filter_format, enable_hf32, output_dtype, saturate, None,
                                   dtype)
        self._plan = _core.Plan(attrs, w.core(), w.dtype, dy.core(), dy.dtype, _threads(threads), keep_filter)
        self._attrs = attrs
        self._dy = dy
        self._filter_dtype = w.dtype
        self._raw_dtype = dtype

    @property
    def engine(self) -> str:
        """The engine that runs the problem."""
        return self._plan.engine

    @property
    def threads(self) -> int:
        return self._plan.threads

    @property
    def isa(self) -> str:
        """The instruction-set level in force (CONV3D_DX_ISA, else the best the CPU has)."""
        return self._plan.isa

    def _input(self, name: str, value: Any, expected: str) -> _arrays.Operand:
        o = _arrays.operand(name, value, self._raw_dtype)
        if o.dtype != expected:
            raise TypeError(f"{name} holds {o.dtype} but the plan was made for {expected}")
        return o

    def _output(self, out: Any) -> Tuple[Any, Any]:
        """(the result to return, the array the core writes)."""
        if out is None:
            y = _arrays.allocate(self._dy, self._attrs.y_dtype, self._attrs.input_size,
                                 self._attrs.data_format.upper(), keep_memory_format=False)
            return y, _arrays.as_core_array(y)
        o = _arrays.output_operand("out", out, self._attrs.y_dtype)
        if o.dtype != self._attrs.y_dtype:
            raise TypeError(f"out holds {o.dtype} but the plan was made for {self._attrs.y_dtype}")
        return out, o.core()

    def pack_filter(self, filter: Any) -> None:
        """Packs `filter` for execute_packed()."""
        self._plan.pack_filter(self._input("filter", filter, self._filter_dtype).core())

    def execute(self, out_backprop: Any, filter: Any, out: Any = None) -> Any:
        """Packs `filter` (kept for execute_packed unless keep_filter=False) and computes y from
        `out_backprop`."""
        dy = self._input("out_backprop", out_backprop, self._dy.dtype)
        w = self._input("filter", filter, self._filter_dtype)
        result, y = self._output(out)
        self._plan.execute(dy.core(), w.core(), y)
        if out is not None:
            _arrays.mark_written(out)
        return result

    def execute_packed(self, out_backprop: Any, out: Any = None) -> Any:
        """Computes y from `out_backprop` with the filter packed last."""
        dy = self._input("out_backprop", out_backprop, self._dy.dtype)
        result, y = self._output(out)
        self._plan.execute_packed(dy.core(), y)
        if out is not None:
            _arrays.mark_written(out)
        return result
