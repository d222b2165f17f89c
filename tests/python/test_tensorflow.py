"""Against TensorFlow's own tf.raw_ops.Conv3DBackpropInputV2 (NDHWC, DHWIO filters = our DHWCN, SAME and
VALID padding; TF's CPU kernel has no groups or dilations), computed in float64 from the same values."""

import math
import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

import conv3d_dx  # noqa: E402
from support import check, random_values  # noqa: E402


def tf_pads(size, kernel, stride, padding):
    """(dy sizes, our pads front, back, ...) for TF's SAME/VALID rule."""
    out, pads = [], []
    for x, k, s in zip(size, kernel, stride):
        o = math.ceil(x / s) if padding == "SAME" else (x - k) // s + 1
        total = max((o - 1) * s + k - x, 0) if padding == "SAME" else 0
        out.append(o)
        pads += [total // 2, total - total // 2]
    return out, pads


def tf_dgrad(input_size, w, dy, stride, padding):
    return tf.raw_ops.Conv3DBackpropInputV2(
        input_sizes=tf.constant(input_size, tf.int64), filter=tf.constant(w), out_backprop=tf.constant(dy),
        strides=[1, *stride, 1], padding=padding, data_format="NDHWC").numpy()


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_against_tensorflow(rng, dtype, padding):
    for _ in range(6):
        n, cin, cout = (int(v) for v in rng.integers(1, 6, 3))
        kernel = [int(v) for v in rng.integers(1, 4, 3)]
        size = [int(k + v) for k, v in zip(kernel, rng.integers(0, 6, 3))]
        stride = [int(v) for v in rng.integers(1, 4, 3)]
        out, pads = tf_pads(size, kernel, stride, padding)
        dy = random_values(rng, [n, *out, cout], dtype)
        w = random_values(rng, [*kernel, cin, cout], dtype)  # DHWIO
        input_size = [n, *size, cin]
        y = conv3d_dx.conv3d_backprop_input_v2(input_size, w, dy, [1, *stride, 1], pads, filter_format="DHWCN",
                                               output_dtype="fp32")
        dy64, w64 = dy.astype(np.float64), w.astype(np.float64)
        expected = tf_dgrad(input_size, w64, dy64, stride, padding)
        abs_sum = tf_dgrad(input_size, np.abs(w64), np.abs(dy64), stride, padding)
        check(y, "fp32", expected, abs_sum, cout * math.prod(kernel))
