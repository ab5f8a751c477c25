"""Scaling recipes: how GPU libraries choose the scales of FP8/FP4 tensors.

Every quantizer here reproduces one recipe of a GPU library, step by step
and in float32, so that its codes match the GPU's bit for bit:

* :func:`quantize_tensorwise` / :func:`current_scale` -- Transformer Engine
  ``Float8CurrentScaling`` (one scale per tensor, from this tensor's amax);
* :class:`DelayedScaling` -- Transformer Engine ``DelayedScaling`` (the scale
  comes from an amax history of earlier steps);
* :func:`quantize_axiswise` -- row-wise / column-wise scaling (one scale per
  row or column, as for cuBLASLt/``torch._scaled_mm`` row-wise scales);
* :func:`quantize_blockwise` -- Transformer Engine ``Float8BlockScaling``
  (1x128 and 128x128 blocks, the DeepSeek-V3 recipe);
* :func:`quantize_mx` -- OCP Microscaling (MX) v1.0, with the scale rules of
  the spec, torchao and Transformer Engine ``MXFP8BlockScaling`` (``variant="torchao"``: torchao's own steps);
* :func:`quantize_nvfp4` -- Transformer Engine NVFP4 (E2M1 elements, an E4M3
  scale per 16 elements and a float32 per-tensor scale);
* :func:`quantize_nvfp4_te` with :class:`NVFP4Quantizer` -- Transformer
  Engine's ``NVFP4Quantizer`` options (Four Over Six, row-scaled NVFP4, RHT
  in the input dtype) in the exact float32 order of TE's reference.

Common conventions
------------------
* Inputs are first converted to float32, as GPU kernels do with their
  bf16/fp16/fp32 inputs (float64 is rounded to the nearest float32).
* The scaled value is ``fl32(x * scale)``, then cast once with
  :func:`fp8emu.encode` (round to nearest even, ``saturate=True``: overflow
  and +-Inf become +-max, NaN stays NaN where the format has NaN).
* ``scale_inv`` is ``fl32(1 / scale)``, correctly rounded.
* Blocks: the block axis need not be a multiple of the block size; the last
  block is padded with zeros (which never change a block's amax) and the
  result keeps the original shape.  Scale arrays have one entry per block,
  ``ceil(shape / block)`` per dimension.
* The amax of the per-tensor, axis-wise and block-wise recipes ignores NaN
  (Transformer Engine reduces with ``fmaxf``); MX and NVFP4 blocks holding
  Inf or NaN are described in their functions.
"""

from __future__ import annotations

from .current import CURRENT_VARIANTS, current_scale, quantize_axiswise, quantize_blockwise, quantize_tensorwise
from .delayed import HYBRID, DelayedScaling, recipe_formats
from .hadamard import inverse_rht, rht
from .mx import MX_ALL_SCALE_RULES, MX_ELEMENT_FORMATS, MX_SCALE_RULES, MX_VARIANTS, MXINT8, mx_from_codes, quantize_mx
from .nvfp4 import NVFP4_VARIANTS, nvfp4_from_codes, quantize_nvfp4
from .nvfp4_te import NVFP4Quantizer, quantize_nvfp4_te
from .tensor import ScaledTensor

__all__ = [
    "ScaledTensor", "current_scale", "quantize_tensorwise", "DelayedScaling", "HYBRID",
    "recipe_formats", "quantize_axiswise", "quantize_blockwise", "quantize_mx",
    "MX_SCALE_RULES", "MX_ELEMENT_FORMATS", "MXINT8", "mx_from_codes", "quantize_nvfp4",
    "nvfp4_from_codes", "rht", "inverse_rht",
    "NVFP4Quantizer", "quantize_nvfp4_te",
    "MX_ALL_SCALE_RULES", "MX_VARIANTS", "NVFP4_VARIANTS", "CURRENT_VARIANTS",
]
