"""Transformer Engine's recipe objects (``transformer_engine.common.recipe``), as TE model code builds them.

The classes keep TE's names, fields and defaults (``common/recipe/__init__.py`` of NVIDIA/TransformerEngine
at d0067d0da6cb01811b8072a7d304f0e00344ce2b; TE reads some defaults from ``NVTE_*`` environment variables,
here they are the documented defaults).  :func:`to_training_recipe` maps one to the frozen
:mod:`fp8emu.training` dataclass that runs it; a field whose value would change the numerics in a
way fp8emu does not emulate is refused by name, a field that only matters across processes
(``reduce_amax``) is accepted and has no effect on one process.

Model code does ``from fp8emu.torch.te import recipe`` where it did
``from transformer_engine.common import recipe``.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Callable, Optional, Union

from ...training import (
    TEBlockScaling, TECurrentScaling, TEDelayedScaling, TEMXFP8BlockScaling, TENVFP4BlockScaling,
    TrainingRecipe, get_recipe,
)

__all__ = ["Format", "MMParams", "Recipe", "DelayedScaling", "Float8CurrentScaling", "MXFP8BlockScaling",
           "Float8BlockScaling", "NVFP4BlockScaling", "to_training_recipe"]


class Format(enum.Enum):
    """TE's ``Format``: the element formats of the forward and backward tensors.

    Examples
    --------
    >>> Format.HYBRID.name, Format.E4M3.value
    ('HYBRID', 'E4M3')
    """

    E4M3 = "E4M3"
    E5M2 = "E5M2"
    HYBRID = "HYBRID"
    E2M1 = "E2M1"


@dataclasses.dataclass
class MMParams:
    """TE's ``MMParams``: whether a GEMM uses the split accumulator (promotion to FP32 every 128 of K).

    Examples
    --------
    >>> MMParams().use_split_accumulator
    True
    """

    use_split_accumulator: bool = True


class Recipe:
    """Base of the recipes, with TE's type predicates (``recipe.delayed()``, ``recipe.mxfp8()``, ...).

    Examples
    --------
    >>> DelayedScaling().delayed(), DelayedScaling().mxfp8()
    (True, False)
    """

    _kind = ""

    def delayed(self):
        return self._kind == "delayed"

    def float8_current_scaling(self):
        return self._kind == "current"

    def float8_per_tensor_scaling(self):
        return self._kind in ("delayed", "current")

    def mxfp8(self):
        return self._kind == "mxfp8"

    def float8_block_scaling(self):
        return self._kind == "block"

    def nvfp4(self):
        return self._kind == "nvfp4"

    def custom(self):
        return False


def _fmt(recipe, f) -> str:
    name = f.name if isinstance(f, Format) else f
    if not isinstance(name, str) or name.upper() not in ("E4M3", "HYBRID"):
        raise ValueError(f"{type(recipe).__name__}: fp8_format must be Format.HYBRID or Format.E4M3 "
                         f"(TE refuses pure E5M2 training), got {f!r}")
    return name.upper()


def _only(recipe, field, value, accepted: Format):
    """TE's NVFP4 asserts its formats (``__post_init__``: "Only E2M1 is supported for NVFP4 scaling"); they were
    not read here, so ``fp4_format=Format.E4M3`` ran E2M1, silently."""
    name = value.name if isinstance(value, Format) else value
    if not isinstance(name, str) or name.upper() != accepted.name:
        raise ValueError(f"{type(recipe).__name__}: {field}={value!r} is not supported (TE asserts it); "
                         f"accepted: Format.{accepted.name}")


def _check_flags(recipe):
    """``fp8_dpa`` switches FP8 attention on where it is true: a string ``"False"`` is true, and switched it on,
    silently.  One error for anything but True or False."""
    v = getattr(recipe, "fp8_dpa", False)
    if not isinstance(v, bool):
        raise TypeError(f"{type(recipe).__name__}: fp8_dpa must be True or False, got {v!r}")


def _refuse(recipe, **nondefault):
    for field, (value, default, why) in nondefault.items():
        if value != default:
            raise ValueError(f"{type(recipe).__name__}: {field}={value!r} is not emulated ({why}); "
                             f"accepted: {default!r}")


@dataclasses.dataclass
class DelayedScaling(Recipe):
    """TE ``DelayedScaling``: per-tensor scales from the amax history of earlier steps
    (runs as :class:`fp8emu.training.TEDelayedScaling`).

    ``fp8_dpa=True`` makes :class:`fp8emu.torch.te.DotProductAttention` run FP8 attention
    (forward only, :func:`fp8emu.torch.fp8_sdpa`); ``fp8_mha`` is refused.

    Examples
    --------
    >>> r = DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=16, amax_compute_algo="max")
    >>> to_training_recipe(r).amax_history_len
    16
    """

    margin: int = 0
    fp8_format: Format = Format.HYBRID
    amax_history_len: int = 1024
    amax_compute_algo: Union[str, Callable] = "max"
    scaling_factor_compute_algo: Optional[Callable] = None
    reduce_amax: bool = True
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: Optional[str] = None
    _kind = "delayed"

    def training_recipe(self):
        if callable(self.amax_compute_algo):
            raise ValueError("DelayedScaling: a callable amax_compute_algo is not emulated; accepted: 'max', "
                             "'most_recent'")
        _refuse(self, scaling_factor_compute_algo=(self.scaling_factor_compute_algo, None, "a user function"),
                fp8_mha=(self.fp8_mha, False, "FP8 tensors between attention modules"),
                backward_override=(self.backward_override, None, "backward GEMMs in high precision"))
        return TEDelayedScaling(margin=self.margin, fp8_format=_fmt(self, self.fp8_format),
                                amax_history_len=self.amax_history_len,
                                amax_compute_algo=self.amax_compute_algo)


@dataclasses.dataclass
class Float8CurrentScaling(Recipe):
    """TE ``Float8CurrentScaling``: one scale per tensor from its own amax
    (runs as :class:`fp8emu.training.TECurrentScaling`; the GEMMs' split-accumulator choices
    must be TE's defaults: fprop fast, dgrad and wgrad split).

    Examples
    --------
    >>> to_training_recipe(Float8CurrentScaling()).name
    'te-current'
    """

    use_power_2_scales: bool = False
    fp8_format: Format = Format.HYBRID
    fp8_gemm_fprop: MMParams = dataclasses.field(default_factory=lambda: MMParams(False))
    fp8_gemm_dgrad: MMParams = dataclasses.field(default_factory=lambda: MMParams(True))
    fp8_gemm_wgrad: MMParams = dataclasses.field(default_factory=lambda: MMParams(True))
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: Optional[str] = None
    _kind = "current"

    def training_recipe(self):
        _refuse(self, fp8_gemm_fprop=(self.fp8_gemm_fprop, MMParams(False), "fprop's accumulator is TE's default"),
                fp8_gemm_dgrad=(self.fp8_gemm_dgrad, MMParams(True), "dgrad's accumulator is TE's default"),
                fp8_gemm_wgrad=(self.fp8_gemm_wgrad, MMParams(True), "wgrad's accumulator is TE's default"),
                fp8_mha=(self.fp8_mha, False, "FP8 tensors between attention modules"),
                backward_override=(self.backward_override, None, "backward GEMMs in high precision"))
        return TECurrentScaling(fp8_format=_fmt(self, self.fp8_format), use_power_2_scales=self.use_power_2_scales)


@dataclasses.dataclass
class MXFP8BlockScaling(Recipe):
    """TE ``MXFP8BlockScaling``: 32 elements share an E8M0 scale
    (runs as :class:`fp8emu.training.TEMXFP8BlockScaling`).

    Examples
    --------
    >>> to_training_recipe(MXFP8BlockScaling()).name
    'te-mxfp8'
    """

    margin: int = 0
    fp8_format: Format = Format.E4M3
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: Optional[str] = None
    enable_2d_quantization: bool = False
    _kind = "mxfp8"

    def training_recipe(self):
        _refuse(self, margin=(self.margin, 0, "MXFP8 scales have no margin in fp8emu"),
                enable_2d_quantization=(self.enable_2d_quantization, False, "32x32 weight blocks"),
                fp8_mha=(self.fp8_mha, False, "FP8 tensors between attention modules"),
                backward_override=(self.backward_override, None, "backward GEMMs in high precision"))
        return TEMXFP8BlockScaling(fp8_format=_fmt(self, self.fp8_format))


@dataclasses.dataclass
class Float8BlockScaling(Recipe):
    """TE ``Float8BlockScaling``: 1x128 activation / gradient blocks, 128x128 weight blocks
    (runs as :class:`fp8emu.training.TEBlockScaling`).

    Examples
    --------
    >>> to_training_recipe(Float8BlockScaling()).name
    'te-block'
    """

    use_f32_scales: bool = False
    fp8_format: Format = Format.E4M3
    x_block_scaling_dim: int = 1
    w_block_scaling_dim: int = 2
    grad_block_scaling_dim: int = 1
    fp8_gemm_fprop: MMParams = dataclasses.field(default_factory=MMParams)
    fp8_gemm_dgrad: MMParams = dataclasses.field(default_factory=MMParams)
    fp8_gemm_wgrad: MMParams = dataclasses.field(default_factory=MMParams)
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: Optional[str] = None
    _kind = "block"

    def training_recipe(self):
        _refuse(self, x_block_scaling_dim=(self.x_block_scaling_dim, 1, "other block shapes"),
                w_block_scaling_dim=(self.w_block_scaling_dim, 2, "other block shapes"),
                grad_block_scaling_dim=(self.grad_block_scaling_dim, 1, "other block shapes"),
                fp8_gemm_fprop=(self.fp8_gemm_fprop, MMParams(), "TE asserts the split accumulator"),
                fp8_gemm_dgrad=(self.fp8_gemm_dgrad, MMParams(), "TE asserts the split accumulator"),
                fp8_gemm_wgrad=(self.fp8_gemm_wgrad, MMParams(), "TE asserts the split accumulator"),
                fp8_mha=(self.fp8_mha, False, "FP8 tensors between attention modules"),
                backward_override=(self.backward_override, None, "backward GEMMs in high precision"))
        return TEBlockScaling(fp8_format=_fmt(self, self.fp8_format), use_f32_scales=self.use_f32_scales)


@dataclasses.dataclass
class NVFP4BlockScaling(Recipe):
    """TE ``NVFP4BlockScaling``: E2M1 with an E4M3 scale per 16 and a float32 tensor scale
    (runs as :class:`fp8emu.training.TENVFP4BlockScaling`).

    Examples
    --------
    >>> to_training_recipe(NVFP4BlockScaling(disable_rht=True)).disable_rht
    True
    """

    disable_rht: bool = False
    disable_stochastic_rounding: bool = False
    disable_2d_quantization: bool = False
    row_scaled_activation: bool = False
    nvfp4_4over6: str = "none"
    fp4_format: Format = Format.E2M1
    fp8_format: Format = Format.E4M3
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: Optional[str] = None
    _kind = "nvfp4"

    def training_recipe(self):
        _only(self, "fp4_format", self.fp4_format, Format.E2M1)
        _only(self, "fp8_format", self.fp8_format, Format.E4M3)
        _refuse(self, row_scaled_activation=(self.row_scaled_activation, False, "row-scaled NVFP4 activations"),
                nvfp4_4over6=(self.nvfp4_4over6, "none", "the 4-over-6 scale choice"),
                fp8_mha=(self.fp8_mha, False, "FP8 tensors between attention modules"),
                backward_override=(self.backward_override, None, "backward GEMMs in high precision"))
        return TENVFP4BlockScaling(disable_rht=self.disable_rht,
                                   disable_stochastic_rounding=self.disable_stochastic_rounding,
                                   disable_2d_quantization=self.disable_2d_quantization)


#: fp8emu recipe classes the TE modules run (torchao's recipes have their own GEMM and bias rules).
_TE_FAMILY = (TEDelayedScaling, TECurrentScaling, TEBlockScaling, TEMXFP8BlockScaling, TENVFP4BlockScaling)


def to_training_recipe(recipe) -> TrainingRecipe:
    """The :mod:`fp8emu.training` recipe that runs a TE recipe object, an fp8emu recipe name or object.

    Examples
    --------
    >>> to_training_recipe(DelayedScaling()).name, to_training_recipe("te-block").name
    ('te-delayed', 'te-block')
    >>> to_training_recipe("torchao-rowwise")
    Traceback (most recent call last):
    ...
    ValueError: the TE modules run Transformer Engine's recipes; got 'torchao-rowwise' (torchao's recipe: use fp8emu.torch.emulate)
    """
    if isinstance(recipe, Recipe):
        _check_flags(recipe)
        return recipe.training_recipe()
    if isinstance(recipe, (str, TrainingRecipe)):
        r = get_recipe(recipe)
        if not isinstance(r, _TE_FAMILY):
            raise ValueError(f"the TE modules run Transformer Engine's recipes; got {r.name!r} (torchao's recipe: "
                             "use fp8emu.torch.emulate)")
        return r
    raise TypeError(f"recipe must be a recipe object of fp8emu.torch.te.recipe (DelayedScaling, Float8CurrentScaling, "
                    f"MXFP8BlockScaling, Float8BlockScaling, NVFP4BlockScaling), an fp8emu.torch recipe or its "
                    f"name, got {type(recipe).__name__}")
