"""The exposed conversions against ml_dtypes (bf16, FP8 E4M3FN), numpy (fp16) and en_dtypes (HiFloat8): every
code, every tie between neighbours, and 10^7 random fp32 inputs per format and overflow mode (random bit
patterns, so subnormals, inf and NaN included, plus values spread over the format's range)."""

import en_dtypes
import ml_dtypes
import numpy as np
import pytest

import conv3d_dx

FORMATS = {  # dtype: (numpy type, code type, largest finite)
    "fp16": (np.float16, np.uint16, 65504.0),
    "bf16": (ml_dtypes.bfloat16, np.uint16, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)),
    "fp8_e4m3fn": (ml_dtypes.float8_e4m3fn, np.uint8, 448.0),
    "hif8": (en_dtypes.hifloat8, np.uint8, 32768.0),
}
EIGHT_BIT = ("fp8_e4m3fn", "hif8")
# The peers' casts of out-of-range values are the point of several tests.
pytestmark = pytest.mark.filterwarnings("ignore:.*encountered in cast:RuntimeWarning")


def all_codes(dtype):
    code_type = FORMATS[dtype][1]
    return np.arange(np.iinfo(code_type).max + 1, dtype=np.int64).astype(code_type)


def expected_codes(values, dtype, saturate):
    """The peer's rounding of float32 values; saturation clamps first (monotone, so the same as clamping
    after), and the library's documented NaN rule for saturating 8-bit formats: NaN gives +0."""
    t, code_type, largest = FORMATS[dtype]
    v = np.clip(values, -largest, largest) if saturate else values
    codes = v.astype(t).view(code_type)
    if saturate and dtype in EIGHT_BIT:
        codes = np.where(np.isnan(values), code_type(0), codes)
    return codes


def assert_same_codes(got, want, values, dtype):
    t = FORMATS[dtype][0]
    g, w = got.view(t).astype(np.float32), want.view(t).astype(np.float32)
    # NaN codes may differ in payload; every other code must be the same value and sign.
    same = (got == want) | (np.isnan(g) & np.isnan(w))
    if dtype == "hif8":  # no -0: both encoders give the one zero code
        same |= (g == 0) & (w == 0) & (got == want)
    bad = np.flatnonzero(~same)
    assert bad.size == 0, (f"{bad.size} codes differ; first: {values.reshape(-1)[bad[0]]!r} -> "
                           f"{got.reshape(-1)[bad[0]]:#x}, peer {want.reshape(-1)[bad[0]]:#x}")


@pytest.mark.parametrize("dtype", FORMATS)
def test_decode_every_code(dtype):
    codes = all_codes(dtype)
    got = conv3d_dx.decode(codes, dtype)
    want = codes.view(FORMATS[dtype][0]).astype(np.float32)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32)[~np.isnan(want)], want.view(np.uint32)[~np.isnan(want)])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    # The typed array decodes the same as its codes.
    np.testing.assert_array_equal(conv3d_dx.decode(codes.view(FORMATS[dtype][0]), dtype).view(np.uint32),
                                  got.view(np.uint32))


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("dtype", FORMATS)
def test_encode_every_code_and_every_tie(dtype, saturate):
    """Each finite value, the midpoints between neighbouring values (ties) and the points just beside them."""
    values = conv3d_dx.decode(all_codes(dtype), dtype)
    finite = np.unique(values[np.isfinite(values)].astype(np.float64))
    mids = (finite[:-1] + finite[1:]) / 2  # exact in float32 for formats this narrow
    mids32 = mids.astype(np.float32)
    assert np.array_equal(mids32.astype(np.float64), mids)
    beside = np.concatenate([np.nextafter(mids32, np.float32(-np.inf)), np.nextafter(mids32, np.float32(np.inf))])
    # Beyond the largest finite value: the overflow threshold and its neighbours.
    largest = finite[-1]
    above = np.array([largest * 1.0625, largest * 1.125, largest * 1.25, largest * 1.5, largest * 2, 1e30],
                     np.float32)
    specials = np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0, 1e-45, -1e-45], np.float32)
    inputs = np.concatenate([values, mids32, beside, above, -above, specials]).astype(np.float32)
    assert_same_codes(conv3d_dx.encode(inputs, dtype, saturate), expected_codes(inputs, dtype, saturate), inputs,
                      dtype)


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("dtype", FORMATS)
def test_encode_ten_million_random_inputs(dtype, saturate):
    rng = np.random.default_rng(12345 + len(dtype) + saturate)
    bits = rng.integers(0, 2**32, 5_000_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    largest = FORMATS[dtype][2]
    spread = (rng.choice([-1.0, 1.0], 5_000_000) *
              np.exp2(rng.uniform(-30, np.log2(largest) + 2, 5_000_000))).astype(np.float32)
    for values in (bits, spread):
        assert_same_codes(conv3d_dx.encode(values, dtype, saturate), expected_codes(values, dtype, saturate),
                          values, dtype)


@pytest.mark.parametrize("dtype, saturate, values, codes", [
    ("hif8", False, [40960, 40959.996, np.nan, -1e-9], [0x6F, 0x6E, 0x80, 0x00]),  # inf, max, NaN, no -0
    ("hif8", True, [1e6, -1e6, np.nan], [0x6E, 0xEE, 0x00]),
    ("fp8_e4m3fn", False, [465, -np.inf, 464], [0x7F, 0xFF, 0x7E]),
    ("fp8_e4m3fn", True, [465, -np.inf, np.nan], [0x7E, 0xFE, 0x00]),
    ("fp16", False, [65520, 65519.996], [0x7C00, 0x7BFF]),
    ("fp16", True, [65520, -np.inf], [0x7BFF, 0xFBFF]),
])
def test_documented_special_values(dtype, saturate, values, codes):
    assert conv3d_dx.encode(np.array(values, np.float32), dtype, saturate).tolist() == codes


def test_hf32_rounding(rng):
    """10 explicit mantissa bits, half away from zero in magnitude: u' = (u + 0x1000) & ~0x1FFF."""
    u = rng.integers(0, 2**32, 1_000_000, dtype=np.uint64).astype(np.uint32)
    u[:4] = [0x3F801000, 0xBF801000, 0x3F800FFF, 0x7F7FFFFF]  # ties up and down in magnitude; FLT_MAX -> inf
    values = u.view(np.float32)
    finite = np.isfinite(values)
    want = np.where(finite, (u + np.uint32(0x1000)) & np.uint32(0xFFFFE000), u)
    got = conv3d_dx.round_hf32(values)
    np.testing.assert_array_equal(got.view(np.uint32)[finite], want[finite])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(values))
    assert got[:4].tolist() == [1.0009765625, -1.0009765625, 1.0, np.inf]


def test_shapes_and_bad_arguments():
    values = np.ones((2, 3), np.float32)
    assert conv3d_dx.encode(values, "bf16").shape == (2, 3)
    assert conv3d_dx.encode(values, "bf16").dtype == np.uint16
    assert conv3d_dx.decode(conv3d_dx.encode(values, "hif8"), "hif8").tolist() == values.tolist()
    with pytest.raises(TypeError, match="values .*float64"):
        conv3d_dx.encode(np.ones(3), "bf16")
    with pytest.raises(ValueError, match="dtype 'fp64' is not recognised"):
        conv3d_dx.encode(values, "fp64")
    with pytest.raises(ValueError, match="dtype fp32 is not a storage type"):
        conv3d_dx.encode(values, "fp32")
    with pytest.raises(TypeError, match="codes has dtype uint8"):
        conv3d_dx.decode(np.zeros(3, np.uint8), "bf16")
    with pytest.raises(TypeError, match="codes has dtype float16"):
        conv3d_dx.decode(np.zeros(3, np.float16), "bf16")


def test_zero_dimensional_arrays_keep_their_shape():
    value = np.float32(1.5)
    assert conv3d_dx.encode(value, "bf16").shape == ()
    assert conv3d_dx.encode(value, "bf16") == 0x3FC0
    assert conv3d_dx.decode(np.uint16(0x3FC0), "bf16").shape == ()
    assert conv3d_dx.decode(np.uint16(0x3FC0), "bf16") == np.float32(1.5)
    assert conv3d_dx.round_hf32(value).shape == ()
