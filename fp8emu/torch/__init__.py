"""Emulate a PyTorch model's FP8/FP4 training step on the CPU as a named GPU stack computes it.

``fp8emu.torch.emulate(model, recipe, gpu)`` swaps the model's ``nn.Linear`` layers for ones
whose fprop, dgrad and wgrad GEMMs run through :mod:`fp8emu.scaling` and :mod:`fp8emu.gemm`
(see :mod:`fp8emu.torch.recipes` and :mod:`fp8emu.torch.stacks`).  Needs ``torch``
(``pip install 'fp8emu[torch]'``); the rest of fp8emu never imports it.
"""

from .attention import fp8_sdpa
from .linear import EmulatedLinear
from .recipes import (
    DeepSeekV3, TEBlockScaling, TECurrentScaling, TEDelayedScaling, TEMXFP8BlockScaling,
    TENVFP4BlockScaling, TorchaoFloat8, TrainingRecipe, get_recipe, recipe_names,
)
from .stacks import Stack, get_stack, stack_names
from .swap import EmulationReport, diagnostics, emulate, reset_diagnostics

__all__ = ["emulate", "EmulationReport", "diagnostics", "reset_diagnostics", "recipe_names", "stack_names",
           "get_recipe", "get_stack", "Stack", "EmulatedLinear", "TrainingRecipe", "TEDelayedScaling",
           "TECurrentScaling", "TEBlockScaling", "DeepSeekV3", "TEMXFP8BlockScaling", "TENVFP4BlockScaling",
           "TorchaoFloat8", "fp8_sdpa"]
