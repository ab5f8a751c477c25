"""Training recipes and GPU stacks, apart from any framework.

How each operand of a linear layer's three GEMMs (fprop, dgrad, wgrad) is quantized
(:mod:`fp8emu.training.recipes`: Transformer Engine's, DeepSeek-V3's and torchao's recipes as
frozen dataclasses) and which tensor-core model runs each GEMM, in which dtype
(:mod:`fp8emu.training.stacks`).  Both are plain data over NumPy and :mod:`fp8emu.scaling`: no
framework is imported, so NumPy code, Dask studies and the lab use them as the torch adapter does
(:mod:`fp8emu.torch` re-exports them and runs them in a model's training step).

Examples
--------
>>> from fp8emu.training import get_recipe, get_stack
>>> get_recipe("te-current").describe()
'te-current: input e4m3fn, weight e4m3fn, grad_output e5m2'
>>> get_stack("h100").accumulator("fp8", split=True)
'hopper'
"""

from .recipes import (
    PASSES, RECIPES, DeepSeekV3, Operand, TEBlockScaling, TECurrentScaling, TEDelayedScaling,
    TEMXFP8BlockScaling, TENVFP4BlockScaling, TorchaoFloat8, TrainingRecipe, get_recipe, recipe_names,
    ue8m0_block_scales,
)
from .stacks import CPU_ACCUMULATOR, STACKS, Stack, get_stack, stack_names

__all__ = ["TrainingRecipe", "TEDelayedScaling", "TECurrentScaling", "TEBlockScaling", "DeepSeekV3",
           "TEMXFP8BlockScaling", "TENVFP4BlockScaling", "TorchaoFloat8", "Operand", "RECIPES",
           "recipe_names", "get_recipe", "PASSES", "ue8m0_block_scales",
           "Stack", "STACKS", "stack_names", "get_stack", "CPU_ACCUMULATOR"]
