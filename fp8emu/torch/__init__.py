"""``fp8emu.torch``: the optional torch adapter.  Needs torch (``pip install 'fp8emu[torch]'``); the rest
of fp8emu never imports it.

Two things live here:

* **Torch in, torch out** (:mod:`fp8emu.torch.ops`, conversions in :mod:`fp8emu.torch.tensors`): the
  codec, the quantizers and the GEMMs taking torch tensors and returning torch tensors of the natural
  dtype (``torch.float8_*`` codes, ``float4_e2m1fn_x2``, float32 / ``float8_e8m0fnu`` scales).
* **A model's FP8/FP4 training step, emulated** (:func:`emulate`): the model's ``nn.Linear`` layers are
  swapped for ones whose fprop, dgrad and wgrad GEMMs run through :mod:`fp8emu.scaling` and
  :mod:`fp8emu.gemm` as a named GPU stack computes them.  The recipes and stacks are framework-free
  (:mod:`fp8emu.training`); this package re-exports them.
"""

from .tensors import TorchScaled, device_of, from_torch, scaled_to_torch, to_torch, torch_dtype
from .ops import (block_scaled_mm, decode, encode, quantize, quantize_axiswise, quantize_blockwise,
                  quantize_mx, quantize_nvfp4, quantize_tensorwise, scaled_mm)
from .attention import fp8_sdpa
from .linear import EmulatedLinear
from ..training import (
    DeepSeekV3, Stack, TEBlockScaling, TECurrentScaling, TEDelayedScaling, TEMXFP8BlockScaling,
    TENVFP4BlockScaling, TorchaoFloat8, TrainingRecipe, get_recipe, get_stack, recipe_names, stack_names,
)
from .swap import EmulationReport, HighPrecisionWarning, diagnostics, emulate, reset_diagnostics
from .autocast import autocast
from . import compiled  # noqa: F401  (registers the torch.compile path of emulated layers)
from . import te

__all__ = ["TorchScaled", "device_of", "from_torch", "scaled_to_torch", "to_torch", "torch_dtype",
           "encode", "decode", "quantize", "quantize_tensorwise", "quantize_axiswise", "quantize_blockwise",
           "quantize_mx", "quantize_nvfp4", "scaled_mm", "block_scaled_mm",
           "emulate", "EmulationReport", "HighPrecisionWarning", "diagnostics", "reset_diagnostics",
           "recipe_names", "stack_names",
           "get_recipe", "get_stack", "Stack", "EmulatedLinear", "TrainingRecipe", "TEDelayedScaling",
           "TECurrentScaling", "TEBlockScaling", "DeepSeekV3", "TEMXFP8BlockScaling", "TENVFP4BlockScaling",
           "TorchaoFloat8", "fp8_sdpa", "autocast"]
