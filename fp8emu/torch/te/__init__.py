"""``fp8emu.torch.te``: Transformer Engine's PyTorch API on a CPU, its GEMMs emulated.

Model code written for TE runs with one line changed::

    import fp8emu.torch.te as te                 # was: import transformer_engine.pytorch as te
    from fp8emu.torch.te import recipe           # was: from transformer_engine.common import recipe

The modules (:class:`Linear`, :class:`LayerNormLinear`, :class:`LayerNormMLP`, :class:`LayerNorm`,
:class:`RMSNorm`, :class:`DotProductAttention`, :class:`MultiheadAttention`, :class:`TransformerLayer`)
take TE's constructor and forward arguments (TE at d0067d0da6cb01811b8072a7d304f0e00344ce2b); inside
:class:`autocast` (or the deprecated :func:`fp8_autocast`) their GEMMs run a TE recipe on a GPU stack
(``gpu=``, default :data:`~fp8emu.torch.te.quantization.DEFAULT_GPU`), quantized where TE's fused
kernels quantize (:mod:`fp8emu.torch.te.modules`); outside they compute in high precision.  Inside
:func:`quantized_model_init` (or :func:`fp8_model_init`) the weights are FP8 / FP4 primary weights.
:func:`checkpoint` (TE's ``te.checkpoint``, activation checkpointing) recomputes a segment in the backward
with the forward's autocast block, RNG and module state: the numerics of the same model without it
(:mod:`fp8emu.torch.te.distributed`).
"""

from . import recipe
from .attention import DotProductAttention, MultiheadAttention, TransformerLayer
from .distributed import checkpoint
from .gemm import QuantGemm
from .modules import ACTIVATIONS, LayerNorm, LayerNormLinear, LayerNormMLP, Linear, RMSNorm, refresh_primary_weights
from .quantization import (
    autocast, current_autocast, fp8_autocast, fp8_model_init, get_default_recipe, quantized_model_init,
)

__all__ = ["Linear", "LayerNormLinear", "LayerNormMLP", "LayerNorm", "RMSNorm", "DotProductAttention",
           "MultiheadAttention", "TransformerLayer", "autocast", "fp8_autocast", "quantized_model_init",
           "fp8_model_init", "get_default_recipe", "current_autocast", "refresh_primary_weights", "ACTIVATIONS",
           "QuantGemm", "checkpoint"]
