"""PyTorch integration: conv3d_input, a torch.library operator (works under torch.compile), and Conv3d.

    from conv3d_dx.torch import Conv3d, conv3d_input, replace_conv3d
    dx = conv3d_input(x.shape, weight, grad_output, stride=2, padding=(1, 0, 1, 0, 1, 0))
    layer = Conv3d(64, 64, 3, padding=1)    # nn.Conv3d whose input gradient comes from conv3d-dx
    replace_conv3d(model)                   # the same for every nn.Conv3d in a model

conv3d_input has torch.nn.grad.conv3d_input's signature; padding may also be 6 values (front, back, top,
bottom, left, right) for asymmetric pads. Tensors are CPU float32, float16, bfloat16 (or float8_e4m3fn for
conv3d_input); channels_last_3d tensors are read as they are and give channels_last_3d results.
"""

from __future__ import annotations

from typing import Any, List, Sequence, Union

import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
from torch import Tensor, nn

from . import _arrays
from ._ops import conv3d_backprop_input_v2

__all__ = ["Conv3d", "conv3d_input", "replace_conv3d"]

_MODULE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _triple(name: str, value: Union[int, Sequence[int]]) -> List[int]:
    if isinstance(value, int):
        return [value] * 3
    return _arrays.ints(name, value, 3)


def _six_pads(padding: Union[int, Sequence[int]]) -> List[int]:
    """front, back, top, bottom, left, right from an int, (d, h, w) or the 6 values themselves."""
    if isinstance(padding, int):
        return [padding] * 6
    values = _arrays.ints("padding", padding)
    if len(values) == 3:
        return [values[0], values[0], values[1], values[1], values[2], values[2]]
    if len(values) == 6:
        return values
    raise _arrays.value_error("padding", f"padding has {len(values)} values {values} but must have 1, 3 "
                              "(d, h, w) or 6 (front, back, top, bottom, left, right)")


def _f_pad(pads: Sequence[int]) -> List[int]:
    """Our pad order as F.pad wants it: last axis first."""
    return [pads[4], pads[5], pads[2], pads[3], pads[0], pads[1]]


def _channels_last(t: Tensor) -> bool:
    return (t.dim() == 5 and not t.is_contiguous()
            and t.is_contiguous(memory_format=torch.channels_last_3d))


def _result_format(grad_output: Tensor) -> torch.memory_format:
    return torch.channels_last_3d if _channels_last(grad_output) else torch.contiguous_format


def _conv3d_input_impl(input_size: List[int], weight: Tensor, grad_output: Tensor, stride: List[int],
                       padding: List[int], dilation: List[int], groups: int) -> Tensor:
    """The operator's CPU implementation (_input_gradient calls it directly where the operator is not needed)."""
    filt, filter_format = _filter(weight)
    # NCDHW tensors stored channels-last are handed over as the NDHWC tensors they are in memory, and the
    # result, allocated after validation, is NDHWC in memory too.
    if _channels_last(grad_output):
        n, c, depth, height, width = input_size
        y = conv3d_backprop_input_v2([n, depth, height, width, c], filt, grad_output.permute(0, 2, 3, 4, 1),
                                     [1, *stride, 1], padding, [1, *dilation, 1], groups, data_format="NDHWC",
                                     filter_format=filter_format)
        return y.permute(0, 4, 1, 2, 3)
    return conv3d_backprop_input_v2(input_size, filt, grad_output, [1, 1, *stride], padding, [1, 1, *dilation],
                                    groups, data_format="NCDHW", filter_format=filter_format)


_conv3d_input = torch.library.custom_op("conv3d_dx::conv3d_input", mutates_args=())(_conv3d_input_impl)


def _input_gradient(input_size: List[int], weight: Tensor, grad_output: Tensor, stride: List[int],
                    padding: List[int], dilation: List[int], groups: int) -> Tensor:
    """The input gradient through the registered operator where it is needed: under torch.compile or export,
    for tensor subclasses (fake tensors among them) and where autograd records the call. Plain eager calls
    that need no graph (a backward pass's own, or inference) run the implementation directly: the operator's
    dispatch costs about 20 us a call (a 3.5 MFLOP problem: 86 us against 66, Xeon), and its first call in a
    process about 1 s, where torch.library imports torch._dynamo."""
    args = (input_size, weight, grad_output, stride, padding, dilation, groups)
    compiling = torch.compiler.is_compiling()
    if not compiling:
        # Forward-mode AD (which the operator does not carry): dx is bilinear in (weight, grad_output), so its
        # tangent is dx(weight', grad_output) + dx(weight, grad_output').
        (w, w_tangent), (g, g_tangent) = fwAD.unpack_dual(weight), fwAD.unpack_dual(grad_output)
        if w_tangent is not None or g_tangent is not None:
            rest = (stride, padding, dilation, groups)
            tangent = sum(_input_gradient(input_size, a, b, *rest)
                          for a, b in ((w_tangent, g), (w, g_tangent)) if a is not None and b is not None)
            return fwAD.make_dual(_input_gradient(input_size, w, g, *rest), tangent)
    plain = all(type(t) in (torch.Tensor, nn.Parameter) for t in (weight, grad_output))
    recorded = torch.is_grad_enabled() and (weight.requires_grad or grad_output.requires_grad)
    if plain and not recorded and not compiling:
        return _conv3d_input_impl(*args)
    return _conv3d_input(*args)


def _filter(weight: Tensor) -> tuple:
    """(filter, filter_format) for a [Cout, Cin/groups, kD, kH, kW] weight, channels-last ones as NDHWC."""
    if _channels_last(weight):
        return weight.permute(0, 2, 3, 4, 1), "NDHWC"
    return weight, "NCDHW"


@_conv3d_input.register_fake
def _conv3d_input_fake(input_size: List[int], weight: Tensor, grad_output: Tensor, stride: List[int],
                       padding: List[int], dilation: List[int], groups: int) -> Tensor:
    return torch.empty(input_size, dtype=grad_output.dtype, device=grad_output.device,
                       memory_format=_result_format(grad_output))


def _conv3d_input_setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
    input_size, weight, grad_output, stride, padding, dilation, groups = inputs
    ctx.save_for_backward(weight, grad_output)
    ctx.conv = (stride, padding, dilation, groups)


def _conv3d_input_backward(ctx: Any, grad: Tensor) -> tuple:
    # dx = D(dy, w) is linear in dy and in w: its adjoint in dy is the forward convolution of the (padded)
    # gradient, its adjoint in w that convolution's weight gradient.
    weight, grad_output = ctx.saved_tensors
    stride, padding, dilation, groups = ctx.conv
    padded = F.pad(grad, _f_pad(padding))
    grad_weight = grad_grad_output = None
    if ctx.needs_input_grad[2]:
        grad_grad_output = F.conv3d(padded, weight, None, stride, 0, dilation, groups)
    if ctx.needs_input_grad[1]:
        grad_weight = torch.ops.aten.convolution_backward(grad_output, padded, weight, None, stride, [0, 0, 0],
                                                          dilation, False, [0, 0, 0], groups,
                                                          [False, True, False])[1]
    return None, grad_weight, grad_grad_output, None, None, None, None


_conv3d_input.register_autograd(_conv3d_input_backward, setup_context=_conv3d_input_setup_context)


def conv3d_input(input_size: Sequence[int], weight: Tensor, grad_output: Tensor,
                 stride: Union[int, Sequence[int]] = 1, padding: Union[int, Sequence[int]] = 0,
                 dilation: Union[int, Sequence[int]] = 1, groups: int = 1) -> Tensor:
    """The gradient of conv3d with respect to its input, computed by conv3d-dx.

    torch.nn.grad.conv3d_input's signature: input_size is the input's NCDHW shape, weight
    [Cout, Cin/groups, kD, kH, kW], grad_output [N, Cout, Do, Ho, Wo]; padding is 1, 3 (d, h, w) or 6 values
    (front, back, top, bottom, left, right). Differentiable in weight and grad_output.
    """
    return _input_gradient(_arrays.ints("input_size", input_size, 5), weight, grad_output,
                           _triple("stride", stride), _six_pads(padding), _triple("dilation", dilation),
                           _arrays.integer("groups", groups))


class _Conv3dFunction(torch.autograd.Function):
    """conv3d with pads (front, back, ...): forward, weight and bias gradients by PyTorch, input gradient
    by conv3d-dx."""

    @staticmethod
    def forward(x: Tensor, weight: Tensor, bias: Any, stride: List[int], pads: List[int],
                dilation: List[int], groups: int) -> Tensor:
        x, padding = _padded(x, pads)
        return F.conv3d(x, weight, bias, stride, padding, dilation, groups)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
        x, weight, bias, stride, pads, dilation, groups = inputs
        ctx.save_for_backward(x, weight)
        ctx.conv = (stride, pads, dilation, groups, None if bias is None else bias.dtype)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple:
        x, weight = ctx.saved_tensors
        stride, pads, dilation, groups, bias_dtype = ctx.conv
        # Under autocast the forward convolved x and weight cast to its dtype, which grad has: the gradients
        # are taken the same way and returned in each input's own dtype. An unbatched input ([C, D, H, W], as
        # nn.Conv3d takes) gets a batch axis for them.
        unbatched = x.dim() == 4
        batched = x.unsqueeze(0) if unbatched else x
        grad = grad.unsqueeze(0) if unbatched else grad
        wc = weight.to(grad.dtype)
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:  # (x's shape only)
            grad_x = _input_gradient(list(batched.shape), wc, grad, stride, pads, dilation, groups).to(x.dtype)
            if unbatched:
                grad_x = grad_x.squeeze(0)
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            padded, padding = _padded(batched.to(grad.dtype), pads)
            _, grad_weight, grad_bias = torch.ops.aten.convolution_backward(
                grad, padded, wc, None if bias_dtype is None else [weight.shape[0]], stride, padding, dilation,
                False, [0, 0, 0], groups, [False, ctx.needs_input_grad[1], ctx.needs_input_grad[2]])
            grad_weight = None if grad_weight is None else grad_weight.to(weight.dtype)
            grad_bias = None if grad_bias is None else grad_bias.to(bias_dtype)
        return grad_x, grad_weight, grad_bias, None, None, None, None


def _padded(x: Tensor, pads: List[int]) -> tuple:
    """(x, symmetric padding) for F.conv3d; asymmetric pads are applied to x."""
    if pads[0::2] == pads[1::2]:
        return x, pads[0::2]
    return F.pad(x, _f_pad(pads)), [0, 0, 0]


class Conv3d(nn.Conv3d):
    """nn.Conv3d whose input gradient is computed by conv3d-dx; the forward pass and the weight and bias
    gradients are PyTorch's. Same constructor, parameters and state dict: a one-line swap.

    Input gradients need CPU float32, float16 or bfloat16 tensors (conv3d-dx has no float64).
    """

    def _conv_forward(self, input: Tensor, weight: Tensor, bias: Any) -> Tensor:
        if input.requires_grad and (input.device.type != "cpu" or input.dtype not in _MODULE_DTYPES):
            raise TypeError(f"conv3d_dx.torch.Conv3d computes input gradients of CPU float32, float16 and "
                            f"bfloat16 tensors; input is {input.dtype} on {input.device}")
        reversed_pads = self._reversed_padding_repeated_twice  # last axis first, also for "same"
        if self.padding_mode != "zeros":
            input = F.pad(input, reversed_pads, mode=self.padding_mode)
            pads = [0] * 6
        else:
            pads = [reversed_pads[4], reversed_pads[5], reversed_pads[2], reversed_pads[3], reversed_pads[0],
                    reversed_pads[1]]
        return _Conv3dFunction.apply(input, weight, bias, list(self.stride), pads, list(self.dilation),
                                     self.groups)


def replace_conv3d(module: nn.Module) -> nn.Module:
    """Makes every nn.Conv3d in `module` a conv3d_dx Conv3d, in place (parameters, buffers and hooks kept)."""
    for m in module.modules():
        if type(m) is nn.Conv3d:
            m.__class__ = Conv3d
    return module
