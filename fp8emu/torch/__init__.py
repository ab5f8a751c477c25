"""``fp8emu.torch``: the optional torch adapter (torch tensors in, torch tensors out).

Needs torch (``pip install fp8emu[torch]``).  See :mod:`fp8emu.torch.ops` for the rule and
:mod:`fp8emu.torch.tensors` for the conversions.
"""

from .tensors import TorchScaled, device_of, from_torch, scaled_to_torch, to_torch, torch_dtype
from .ops import (block_scaled_mm, decode, encode, quantize, quantize_axiswise, quantize_blockwise,
                  quantize_mx, quantize_nvfp4, quantize_tensorwise, scaled_mm)

__all__ = ["TorchScaled", "device_of", "from_torch", "scaled_to_torch", "to_torch", "torch_dtype",
           "encode", "decode", "quantize", "quantize_tensorwise", "quantize_axiswise", "quantize_blockwise",
           "quantize_mx", "quantize_nvfp4", "scaled_mm", "block_scaled_mm"]
