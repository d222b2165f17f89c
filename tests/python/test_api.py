"""conv3d_backprop_input_v2 and Plan on numpy arrays: results, `out`, zero copies, errors naming the parameter
(with nothing written), raw codes, the GIL, and importing without torch."""

import subprocess
import sys
import threading
import time

import ml_dtypes
import numpy as np
import pytest

import conv3d_dx
from conv3d_dx import _core
from support import Case, check, expected_pair, feature_from, feature_to, random_values

# A small NDHWC problem: N 2, Cin 6, Cout 4, groups 2, stride 2 in H, asymmetric pads.
CASE = Case(N=2, Cin=6, Cout=4, groups=2, size=[4, 7, 6], kernel=[3, 2, 3], stride=[1, 2, 1],
            dilation=[1, 1, 2], pads=[1, 0, 1, 1, 2, 1])
INPUT_SIZE = [2, 4, 7, 6, 6]
STRIDES = [1, 1, 2, 1, 1]
DILATIONS = [1, 1, 1, 2, 1]
CANARY = -7.25


def arrays(rng, dtype="fp32"):
    """(canonical dy, canonical w, NDHWC dy, NCDHW filter)."""
    dy = random_values(rng, CASE.dy_shape(), dtype)
    w = random_values(rng, CASE.w_shape(), dtype)
    return dy, w, np.ascontiguousarray(feature_to("NDHWC", dy)), w


def call(w, dy, **kwargs):
    kwargs.setdefault("groups", 2)
    return conv3d_dx.conv3d_backprop_input_v2(kwargs.pop("input_size", INPUT_SIZE), w, dy,
                                              kwargs.pop("strides", STRIDES), kwargs.pop("pads", CASE.pads),
                                              kwargs.pop("dilations", DILATIONS), **kwargs)


def canary_out(dtype=np.float32, shape=INPUT_SIZE):
    return np.full(shape, CANARY, dtype=dtype)


def test_result_and_out(rng):
    dy, w, dy_ndhwc, _ = arrays(rng)
    y = call(w, dy_ndhwc)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32 and list(y.shape) == INPUT_SIZE
    expected, abs_sum = expected_pair(CASE, dy, w)
    check(feature_from("NDHWC", y), "fp32", expected, abs_sum, CASE.terms())
    out = canary_out()
    assert call(w, dy_ndhwc, out=out) is out
    np.testing.assert_array_equal(out, y)
    # A strided out (every other element of a bigger buffer) is written where it lies.
    big = canary_out(shape=[2 * s for s in INPUT_SIZE])
    view = big[::2, ::2, ::2, ::2, ::2]
    assert call(w, dy_ndhwc, out=view) is view
    np.testing.assert_array_equal(view, y)
    untouched = np.ones(big.shape, bool)
    untouched[::2, ::2, ::2, ::2, ::2] = False
    assert np.all(big[untouched] == CANARY)


def test_threads_and_cached_plans_give_identical_results(rng):
    _, w, dy, _ = arrays(rng)
    first = call(w, dy, threads=1)
    np.testing.assert_array_equal(call(w, dy, threads=2).view(np.uint32), first.view(np.uint32))
    # A cached plan is only reused for the same strides: the same values in other layouts in memory.
    np.testing.assert_array_equal(call(np.asfortranarray(w), np.asfortranarray(dy), threads=1), first)
    previous = conv3d_dx.set_plan_cache_size(0)
    try:
        assert previous == 16 and conv3d_dx.set_plan_cache_size(0) == 0
        np.testing.assert_array_equal(call(w, dy, threads=1), first)
    finally:
        conv3d_dx.set_plan_cache_size(previous)
    with pytest.raises(ValueError, match="size is -1"):
        conv3d_dx.set_plan_cache_size(-1)


def test_no_copies(rng, monkeypatch):
    """The library is handed the caller's memory: contiguous and strided inputs and `out`, unchanged."""
    seen = []
    real = _core.backprop_input

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)
        seen.append(result[1])
        return result

    monkeypatch.setattr(_core, "backprop_input", spy)
    _, w, dy, _ = arrays(rng)
    out = canary_out()

    def address(a):
        return a.__array_interface__["data"][0]

    call(w, dy, out=out)
    assert seen[-1] == (address(dy), address(w), address(out))
    dy_view = np.asfortranarray(dy)  # other strides, same values
    w_view = np.ascontiguousarray(w.transpose(0, 2, 3, 4, 1)).transpose(0, 4, 1, 2, 3)
    y = call(w_view, dy_view)
    assert seen[-1][:2] == (address(dy_view), address(w_view)) and seen[-1][2] == address(y)
    np.testing.assert_array_equal(y, out)


def test_raw_codes_and_typed_arrays_agree(rng):
    dy, w, dy_ndhwc, _ = arrays(rng, "bf16")
    typed = call(w, dy_ndhwc)
    assert typed.dtype == ml_dtypes.bfloat16
    raw = call(w.view(np.uint16), dy_ndhwc.view(np.uint16), dtype="bf16")
    assert raw.dtype == np.uint16
    np.testing.assert_array_equal(raw, typed.view(np.uint16))
    wide = call(w, dy_ndhwc, output_dtype="fp32")
    assert wide.dtype == np.float32
    expected, abs_sum = expected_pair(CASE, dy, w)
    check(feature_from("NDHWC", typed), "bf16", expected, abs_sum, CASE.terms())
    check(feature_from("NDHWC", wide), "fp32", expected, abs_sum, CASE.terms())
    # out's dtype decides y's dtype; raw codes in out hold output_dtype.
    out = np.zeros(INPUT_SIZE, np.uint16)
    call(w, dy_ndhwc, out=out, output_dtype="bf16")
    np.testing.assert_array_equal(out, raw)


def test_hf32_saturate_and_four_value_input_size(rng):
    _, w, dy, _ = arrays(rng)
    rounded = call(conv3d_dx.round_hf32(w), conv3d_dx.round_hf32(dy))
    np.testing.assert_array_equal(call(w, dy, enable_hf32=True), rounded)
    big = np.full(CASE.dy_shape(), 300.0, np.float16).transpose(0, 2, 3, 4, 1)
    wf = np.full(CASE.w_shape(), 300.0, np.float16)
    assert np.isinf(call(wf, big)).any()
    saturated = call(wf, big, saturate=True)
    assert np.isfinite(saturated).all() and saturated.max() == np.float16(65504)
    # 4 values: a 2-D problem, D = 1 inserted; y has input_size's 4 dimensions.
    dy2 = rng.standard_normal([1, 3, 3, 4]).astype(np.float32)[:, None]  # [N, 1, H, W, C]
    w2 = rng.standard_normal([4, 2, 1, 2, 2]).astype(np.float32)
    y2 = conv3d_dx.conv3d_backprop_input_v2([1, 4, 4, 2], w2, dy2, [1, 1, 1, 1, 1], [0] * 6)
    assert y2.shape == (1, 4, 4, 2)
    np.testing.assert_array_equal(y2, conv3d_dx.conv3d_backprop_input_v2([1, 1, 4, 4, 2], w2, dy2, [1] * 5,
                                                                         [0] * 6)[:, 0])


def test_numpy_results_start_on_a_cache_line(rng):
    # So that the engines may store whole lines of y past the caches (numpy's own large arrays start 16 or
    # 32 bytes into a line). Small and large sizes, typed and raw dtypes; an empty one (its address is moot).
    for shape in ([1, 2, 3, 4, 5], [1, 8, 64, 64, 16], [2, 16, 64, 64, 32], [0, 3, 3, 3, 2]):
        for dtype in (np.float32, ml_dtypes.bfloat16, np.uint8):
            y = conv3d_dx._arrays.aligned_empty(shape, dtype)
            assert y.shape == tuple(shape) and y.dtype == dtype and y.flags.c_contiguous and y.flags.writeable
            assert y.size == 0 or y.ctypes.data % 64 == 0
    for dtype in ("fp32", "bf16"):
        _, w, dy, _ = arrays(rng, dtype)
        assert call(w, dy).ctypes.data % 64 == 0
        assert call(w, dy, output_dtype="fp32").ctypes.data % 64 == 0


def test_empty_batch():
    y = conv3d_dx.conv3d_backprop_input_v2([0, 3, 3, 3, 2], np.ones([4, 2, 1, 1, 1], np.float32),
                                           np.ones([0, 3, 3, 3, 4], np.float32), [1] * 5, [0] * 6)
    assert y.shape == (0, 3, 3, 3, 2)


def test_dlpack_producer(rng):
    """Any DLPack producer is read in place; the result is numpy."""

    class Producer:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kwargs):
            return self.a.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    _, w, dy, _ = arrays(rng)
    y = call(Producer(w), Producer(dy))
    assert isinstance(y, np.ndarray)
    np.testing.assert_array_equal(y, call(w, dy))


def expect_error(exc, parameter, match, w, dy, **kwargs):
    """The call raises `exc` naming `parameter` and leaves a canary-filled out untouched."""
    out = kwargs.pop("out", None)
    if out is None:
        out = canary_out()
    before = out.copy()
    with pytest.raises(exc, match=match) as info:
        call(w, dy, out=out, **kwargs)
    if exc is ValueError and parameter is not None:
        assert info.value.parameter == parameter
    np.testing.assert_array_equal(out.view(np.uint8), before.view(np.uint8))
    return info.value


def test_invalid_arguments_name_the_parameter(rng):
    _, w, dy, _ = arrays(rng)
    expect_error(ValueError, "out_backprop", r"out_backprop H is 4 but .* imply 3", w, dy, strides=[1, 1, 3, 1, 1])
    expect_error(ValueError, "strides", r"strides \[2,1,2,1,1\]: the N entry is 2 but must be 1", w, dy,
                 strides=[2, 1, 2, 1, 1])
    expect_error(ValueError, "strides", "strides has 4 values", w, dy, strides=[1, 2, 1, 1])
    expect_error(ValueError, "pads", "pads .* the H front entry is -1", w, dy, pads=[1, 0, -1, 1, 2, 1])
    expect_error(ValueError, "groups", r"groups is 4 but input_size C \(6\) is not divisible", w, dy, groups=4)
    expect_error(ValueError, "data_format", "data_format 'NCHW' is not recognised", w, dy, data_format="NCHW")
    expect_error(ValueError, "filter_format", "filter_format 'OIDHW' is not recognised", w, dy,
                 filter_format="OIDHW")
    expect_error(ValueError, "filter", "filter dtype is fp16 but out_backprop is fp32", w.astype(np.float16), dy)
    expect_error(ValueError, "out_backprop", "out_backprop has 4 dimensions but must have 5", w, dy[0])
    expect_error(ValueError, "enable_hf32", "HF32 applies to fp32 only", w.astype(np.float16),
                 dy.astype(np.float16), enable_hf32=True, out=canary_out(np.float16))
    expect_error(ValueError, "threads", "threads is -1", w, dy, threads=-1)
    expect_error(ValueError, "out", "out D is 3 but input_size says 4", w, dy,
                 out=canary_out(shape=[2, 3, 7, 6, 6]))
    expect_error(ValueError, "out", r"out dtype is fp16 but must be the input dtype \(fp32\) or fp32", w, dy,
                 out=canary_out(np.float16))
    # Without out, y errors are about output_dtype.
    with pytest.raises(ValueError, match="output_dtype dtype is bf16") as info:
        call(w, dy, output_dtype="bf16")
    assert info.value.parameter == "output_dtype"


def test_wrong_types_and_dtypes(rng):
    _, w, dy, _ = arrays(rng)
    expect_error(TypeError, None, "out_backprop has element type float64", w, dy.astype(np.float64))
    expect_error(TypeError, None, "filter must be a numpy array, a torch tensor or a DLPack producer, not list",
                 w.tolist(), dy)
    expect_error(TypeError, None, r"out_backprop holds raw uint16 codes: pass dtype='fp16' or 'bf16'",
                 w.view(np.uint16), np.zeros(dy.shape, np.uint16))
    expect_error(TypeError, None, "out holds fp32 but output_dtype is bf16", w, dy, output_dtype="bf16")
    expect_error(TypeError, None, "strides must be a sequence of integers", w, dy, strides=[1, 1, 2.0, 1, 1])
    expect_error(TypeError, None, "groups must be an integer", w, dy, groups="2")
    expect_error(TypeError, None, "out has element type int32", w, dy, out=np.zeros(INPUT_SIZE, np.int32))


def test_out_must_be_writable_and_not_overlap_the_inputs(rng):
    _, w, dy, _ = arrays(rng)
    readonly = canary_out()
    readonly.flags.writeable = False
    expect_error(ValueError, None, "out is read-only", w, dy, out=readonly)
    # out and dy in one buffer, overlapping.
    buffer = np.full(np.prod(INPUT_SIZE) + dy.size, CANARY, np.float32)
    shared_dy = buffer[: dy.size].reshape(dy.shape)
    shared_dy[...] = dy
    overlapping = buffer[dy.size // 2: dy.size // 2 + np.prod(INPUT_SIZE)].reshape(INPUT_SIZE)
    before = buffer.copy()
    with pytest.raises(ValueError, match="out .*overlaps .*out_backprop") as info:
        call(w, shared_dy, out=overlapping)
    assert info.value.parameter == "out"
    np.testing.assert_array_equal(buffer, before)
    plan = conv3d_dx.Plan(INPUT_SIZE, w, shared_dy, STRIDES, CASE.pads, DILATIONS, groups=2)
    with pytest.raises(ValueError, match="out .*overlaps .*out_backprop") as info:
        plan.execute_packed(shared_dy, out=overlapping)
    assert info.value.parameter == "out"
    np.testing.assert_array_equal(buffer, before)


def test_plan(rng):
    dy, w, dy_ndhwc, _ = arrays(rng)
    plan = conv3d_dx.Plan(INPUT_SIZE, w, dy_ndhwc, STRIDES, CASE.pads, DILATIONS, groups=2)
    assert plan.engine and plan.threads >= 1 and plan.isa
    expected = call(w, dy_ndhwc)
    np.testing.assert_array_equal(plan.execute_packed(dy_ndhwc), expected)
    w2 = random_values(rng, CASE.w_shape(), "fp32")
    out = canary_out()
    assert plan.execute(dy_ndhwc, w2, out=out) is out
    np.testing.assert_array_equal(out, call(w2, dy_ndhwc))
    np.testing.assert_array_equal(plan.execute_packed(dy_ndhwc), out)  # w2 stays packed
    plan.pack_filter(w)
    np.testing.assert_array_equal(plan.execute_packed(dy_ndhwc), expected)
    with pytest.raises(ValueError, match=r"out_backprop strides are .* but the plan was made for") as info:
        plan.execute_packed(np.asfortranarray(dy_ndhwc))
    assert info.value.parameter == "out_backprop"
    with pytest.raises(ValueError, match="out shape is"):
        plan.execute_packed(dy_ndhwc, out=canary_out(shape=[2, 4, 7, 6, 3]))
    with pytest.raises(TypeError, match="out_backprop holds fp16 but the plan was made for fp32"):
        plan.execute_packed(dy_ndhwc.astype(np.float16))
    with pytest.raises(ValueError, match="out_backprop W is 5 but .* imply 3"):
        conv3d_dx.Plan(INPUT_SIZE, w, dy_ndhwc, [1, 1, 2, 2, 1], CASE.pads, DILATIONS, groups=2)


def test_plan_ignores_strides_that_address_nothing(rng):
    """A Plan compares the strides it addresses with: not those of extent-1 axes (a 2-D call's inserted D,
    a view with another stride there) nor any of an empty array (numpy gives those zero strides)."""
    dy = rng.standard_normal([1, 4, 5, 3]).astype(np.float32)  # N, H, W, C
    w = rng.standard_normal([3, 2, 1, 2, 2]).astype(np.float32)
    two_d = conv3d_dx.Plan([1, 5, 6, 2], w, dy[:, None], [1] * 5, [0] * 6)
    expected = conv3d_dx.conv3d_backprop_input_v2([1, 5, 6, 2], w, dy[:, None], [1] * 5, [0] * 6)
    assert expected.shape == (1, 5, 6, 2)
    np.testing.assert_array_equal(two_d.execute_packed(dy[:, None]), expected)
    out = np.full(expected.shape, CANARY, np.float32)
    assert two_d.execute(dy[:, None], w, out=out) is out
    np.testing.assert_array_equal(out, expected)
    # Planned with D stride 0 (a view), called with a reshaped copy (D stride 60): the same addresses.
    three_d = conv3d_dx.Plan([1, 1, 5, 6, 2], w, dy[:, None], [1] * 5, [0] * 6)
    np.testing.assert_array_equal(three_d.execute_packed(dy.reshape(1, 1, 4, 5, 3))[:, 0], expected)
    with pytest.raises(ValueError, match=r"out_backprop strides are .* but the plan was made for"):
        three_d.execute_packed(np.ascontiguousarray(dy.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)[:, None])
    empty = np.ones([0, 5, 4, 5, 3], np.float32)
    plan = conv3d_dx.Plan([0, 5, 5, 6, 2], w, empty, [1] * 5, [0] * 6)
    assert plan.execute_packed(empty).shape == (0, 5, 5, 6, 2)
    assert plan.execute(empty, w, out=np.empty([0, 5, 5, 6, 2], np.float32)).shape == (0, 5, 5, 6, 2)


def test_integers_beyond_64_bits_name_the_parameter(rng):
    _, w, dy, _ = arrays(rng)
    expect_error(ValueError, "threads", r"threads is 2147483648 but must be in \[-2147483648, 2147483647\]", w,
                 dy, threads=2**31)
    expect_error(ValueError, "groups", "groups is 9223372036854775808 but must be in", w, dy, groups=2**63)
    expect_error(ValueError, "strides", "strides holds 18446744073709551616, outside the 64-bit integers", w, dy,
                 strides=[1, 1, 2**64, 1, 1])


def test_plan_without_keeping_the_filter(rng):
    """keep_filter=False: execute() gives the same result but leaves nothing for execute_packed(), which asks
    for pack_filter() first."""
    dy, w, dy_ndhwc, _ = arrays(rng)
    plan = conv3d_dx.Plan(INPUT_SIZE, w, dy_ndhwc, STRIDES, CASE.pads, DILATIONS, groups=2, keep_filter=False)
    expected = call(w, dy_ndhwc)
    np.testing.assert_array_equal(plan.execute_packed(dy_ndhwc), expected)  # packed when the plan was made
    w2 = random_values(rng, CASE.w_shape(), "fp32")
    np.testing.assert_array_equal(plan.execute(dy_ndhwc, w2), call(w2, dy_ndhwc))
    with pytest.raises(ValueError, match="filter has not been packed") as info:
        plan.execute_packed(dy_ndhwc)
    assert info.value.parameter == "filter"
    plan.pack_filter(w)
    np.testing.assert_array_equal(plan.execute_packed(dy_ndhwc), expected)


def test_gil_is_released_while_computing(rng):
    """Another Python thread keeps running during a long call (one engine thread, so a core stays free)."""
    case = Case(N=1, Cin=64, Cout=64, size=[12, 40, 40])
    dy = rng.standard_normal([1, 12, 40, 40, 64]).astype(np.float32)
    w = rng.standard_normal(case.w_shape()).astype(np.float32)
    args = ([1, 14, 42, 42, 64], w, dy, [1] * 5, [0] * 6)
    conv3d_dx.conv3d_backprop_input_v2(*args, threads=1)  # plans once, so the timed call only computes
    worker = threading.Thread(target=conv3d_dx.conv3d_backprop_input_v2, args=args, kwargs={"threads": 1})
    ticks, longest_gap = 0, 0.0
    start = time.perf_counter()
    worker.start()
    last = start
    while worker.is_alive():
        ticks += 1
        now = time.perf_counter()
        longest_gap, last = max(longest_gap, now - last), now
    worker.join()
    call = time.perf_counter() - start
    # Holding the GIL would stall this loop for the whole call; with the GIL released it only waits when the
    # scheduler gives its core away (a few time slices, even on a busy machine), a fraction of the call.
    assert ticks > 1 and longest_gap < 0.75 * call, f"the loop stalled {longest_gap:.3f} s of a {call:.3f} s call"


def test_import_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"  # makes `import torch` fail
            "import numpy as np, conv3d_dx\n"
            "y = conv3d_dx.conv3d_backprop_input_v2([1, 2, 2, 2, 1], np.ones([1, 1, 1, 1, 1], np.float32),\n"
            "    np.ones([1, 2, 2, 2, 1], np.float32), [1] * 5, [0] * 6)\n"
            "assert y.sum() == 8\n"
            "try:\n    import conv3d_dx.torch\nexcept ImportError:\n    print('no torch')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "no torch"
