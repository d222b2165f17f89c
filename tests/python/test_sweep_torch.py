"""Random problems against PyTorch in float64: every dtype, data format, filter format, strided views,
groups, dilations, strides and asymmetric pads (through a padded input and a crop)."""

import numpy as np
import pytest
import torch

import conv3d_dx
from conv3d_dx.torch import conv3d_input
from support import (ALL_DTYPES, check, expected_pair, feature_from, feature_to, filter_to, in_data_format,
                     random_case, random_values, strided)


@pytest.mark.parametrize("filter_format", ["NCDHW", "NDHWC", "DHWCN"])
@pytest.mark.parametrize("data_format", ["NDHWC", "NCDHW"])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_numpy_sweep(rng, dtype, data_format, filter_format):
    for i in range(4):
        case = random_case(rng)
        dy = random_values(rng, case.dy_shape(), dtype)
        w = random_values(rng, case.w_shape(), dtype)
        dy_in, w_in = feature_to(data_format, dy), filter_to(filter_format, w)
        if i % 2:  # non-contiguous views, read where they lie
            dy_in, w_in = strided(dy_in), strided(w_in)
        y_dtype = "fp32" if i == 3 else dtype
        y = conv3d_dx.conv3d_backprop_input_v2(
            in_data_format(data_format, case.y_shape()), w_in, dy_in,
            in_data_format(data_format, [1, 1, *case.stride]), case.pads, in_data_format(data_format, [1, 1, *case.dilation]), case.groups, data_format=data_format,
            filter_format=filter_format, output_dtype=None if i < 3 else "fp32")
        assert y.dtype == (np.float32 if y_dtype == "fp32" else dy.dtype)
        expected, abs_sum = expected_pair(case, dy, w)
        check(feature_from(data_format, y), y_dtype, expected, abs_sum, case.terms())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_torch_tensors_contiguous_and_channels_last(rng, dtype):
    for i in range(6):
        case = random_case(rng)
        dy = torch.randn(case.dy_shape(), dtype=torch.float32).to(dtype)
        w = torch.randn(case.w_shape(), dtype=torch.float32).to(dtype)
        if i % 2:
            dy = dy.contiguous(memory_format=torch.channels_last_3d)
            w = w.contiguous(memory_format=torch.channels_last_3d)
        y = conv3d_input(case.y_shape(), w, dy, case.stride, case.pads, case.dilation, case.groups)
        assert y.dtype == dtype and list(y.shape) == case.y_shape()
        # PyTorch's rule: the result is channels-last when grad_output is (and is not also contiguous).
        assert y.is_contiguous(memory_format=torch.contiguous_format if dy.is_contiguous() else
                               torch.channels_last_3d)
        name = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
        expected, abs_sum = expected_pair(case, dy.double().numpy(), w.double().numpy())
        check(y.float().numpy(), name, expected, abs_sum, case.terms())


def test_torch_strided_views_and_operator(rng):
    """Slices and permutations of torch tensors go to the operator as they are."""
    case = random_case(rng)
    dy_big = torch.randn([2 * s for s in case.dy_shape()])
    w_big = torch.randn([s + 2 for s in case.w_shape()])
    dy = dy_big[tuple(slice(None, None, 2) for _ in range(5))]
    w = w_big[tuple(slice(1, s + 1) for s in case.w_shape())]
    y = conv3d_dx.conv3d_backprop_input_v2(case.y_shape(), w, dy, [1, 1, *case.stride], case.pads,
                                           [1, 1, *case.dilation], case.groups, data_format="NCDHW")
    assert isinstance(y, torch.Tensor)
    expected, abs_sum = expected_pair(case, dy.double().numpy(), w.double().numpy())
    check(y.numpy(), "fp32", expected, abs_sum, case.terms())
