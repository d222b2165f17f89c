"""conv3d-dx: the gradient of a 3D convolution with respect to its input (Conv3DBackpropInputV2) on the CPU.

    conv3d_backprop_input_v2(input_size, filter, out_backprop, strides, pads, ...)  # the operator
    Plan(...)                                      # one problem, filter packed once, many calls
    set_plan_cache_size(n)                         # how many recent problems' plans are kept (16)
    encode / decode / round_hf32                   # the library's fp16, bf16, HiFloat8, FP8, HF32 rounding
    conv3d_dx.torch                                # conv3d_input (torch.library op) and Conv3d for PyTorch

Errors the library reports are ValueError (MemoryError when out of memory) with a `parameter` attribute.
"""

from ._ops import Plan, conv3d_backprop_input_v2, set_plan_cache_size
from .numerics import decode, encode, round_hf32

__all__ = ["Plan", "conv3d_backprop_input_v2", "decode", "encode", "round_hf32", "set_plan_cache_size"]
__version__ = "0.1.0"
