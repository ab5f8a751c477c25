"""Training recipes: how each operand of a linear layer's three GEMMs is quantized.

A linear layer ``Y = X W^T`` (X: M x K activations, W: N x K weights) runs three GEMMs:
fprop ``Y = X W^T`` (K = in_features), dgrad ``dX = dY W`` (K = out_features) and wgrad
``dW = dY^T X`` (K = tokens).  Each operand is quantized along its GEMM's K: X row-wise for
fprop and column-wise (along tokens) for wgrad, W row-wise for fprop and column-wise for
dgrad, dY row-wise for dgrad and column-wise for wgrad.  Per-tensor recipes give both copies
the same codes; block recipes quantize each copy from the high-precision tensor, as
Transformer Engine does ("both versions are computed from the high precision input").

Each recipe is a frozen dataclass named after the class it follows, with the defaults of
that class; its docstring cites the file and commit.  Transformer Engine sources are at
commit 000b637ede9c221d01067e5cdf4f0953da3ab7cd of NVIDIA/TransformerEngine; torchao's at
release 0.18.0 (``torchao/float8/config.py``, ``float8_utils.py``).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from ..codec import decode
from ..formats import get_format
from ..scaling import (
    DelayedScaling, NVFP4Quantizer, quantize_axiswise, quantize_blockwise, quantize_mx,
    quantize_nvfp4_te, quantize_tensorwise, recipe_formats,
)
from ..scaling.tensor import block_amax

__all__ = ["TrainingRecipe", "TEDelayedScaling", "TECurrentScaling", "TEBlockScaling", "DeepSeekV3",
           "TEMXFP8BlockScaling", "TENVFP4BlockScaling", "TorchaoFloat8", "Operand", "RECIPES",
           "recipe_names", "get_recipe", "PASSES", "ue8m0_block_scales"]

#: The three GEMMs of a linear layer, in the order they run.
PASSES = ("fprop", "dgrad", "wgrad")


class Operand(NamedTuple):
    """One quantized GEMM operand, laid out as the GEMM reads it (A: rows x K, B: K x cols).

    ``kind``: "fp8" (``codes``, ``fmt``, ``scale_inv`` shaped for ``scaled_mm``), "block"
    (``st``, a ScaledTensor for ``block_scaled_mm``) or "hp" (``hp``, float32 values).
    ``divisor``: torchao recipes only, the quantization scale torchao divides the codes by
    (``fp8_max / amax``, float32, shaped as ``scale_inv``), for the ``"torchao-emulate"`` GEMM.

    Examples
    --------
    >>> op = get_recipe("te-current").operand("input", np.ones((2, 32), np.float32), 1, "fprop")
    >>> op.kind, op.fmt.name, float(op.values().max())
    ('fp8', 'e4m3fn', 448.0)
    """

    kind: str
    codes: object = None
    fmt: object = None
    scale_inv: object = None
    st: object = None
    hp: object = None
    divisor: object = None

    def values(self) -> np.ndarray:
        """Element values before the scales (decoded codes), for diagnostics."""
        if self.kind == "hp":
            return self.hp
        if self.kind == "fp8":
            return decode(self.codes, self.fmt)
        return decode(self.st.codes, self.st.fmt)


@dataclasses.dataclass(frozen=True)
class TrainingRecipe:
    """Base of the training recipes (not used alone).

    ``family``: "fp8" (per-tensor or row-wise), "fp8-block" (1x128/128x128), "mx", "nvfp4".
    ``multiple``: what in_features, out_features and the token count must be a multiple of.

    Examples
    --------
    >>> r = get_recipe("te-current")
    >>> isinstance(r, TrainingRecipe), r.family, [r.split(p) for p in PASSES]
    (True, 'fp8', [False, True, True])
    """

    family = "fp8"
    multiple = 16

    def __post_init__(self):
        """Every field checked as it is used: a bool field is True or False (a truthy string such as
        ``"no"`` would switch its option on), ``fp8_format`` one the followed class accepts (each TE
        class with the field asserts "Pure E5M2 training is not supported"), ``name`` a non-empty string."""
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.type in ("bool", "bool | None") and not (isinstance(v, bool) or (v is None and "None" in f.type)):
                raise TypeError(f"{type(self).__name__}: {f.name} must be True or False"
                                f"{' (or None)' if 'None' in f.type else ''}, got {v!r}")
        if hasattr(self, "fp8_format"):
            recipe_formats(self.fp8_format)             # a string naming E4M3, E5M2 or HYBRID
            if self.fp8_format.upper() == "E5M2":
                raise ValueError(f"{type(self).__name__}: fp8_format must be 'HYBRID' or 'E4M3' (TE refuses "
                                 f"pure E5M2), got {self.fp8_format!r}")
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"{type(self).__name__}: name must be a non-empty string, got {self.name!r}")

    def formats(self) -> dict:
        """Element format of each tensor role ("input", "weight", "grad_output")."""
        raise NotImplementedError

    def split(self, pass_: str) -> bool:
        """Whether the pass's per-tensor FP8 GEMM uses the split accumulator (TE's
        ``_2X_ACC_FPROP/DGRAD/WGRAD`` in ``pytorch/module/base.py``: False, True, True)."""
        return pass_ != "fprop"

    def delayed(self) -> bool:
        """Whether the recipe keeps amax histories (state in the module's buffers)."""
        return False

    def shared_copies(self) -> bool:
        """Whether a tensor's row-wise and column-wise copies have the same codes (one scale
        per tensor: the backward GEMMs read the forward's FP8 data transposed)."""
        return False

    def gemm_family(self, pass_: str) -> str:
        """The family :meth:`fp8emu.training.Stack.accumulator` is asked for one pass's GEMM."""
        return "hp" if self.high_precision(pass_) else self.family

    def high_precision(self, pass_: str) -> bool:
        """Whether the pass runs unquantized."""
        return False

    def operand(self, role, arr, k_axis, pass_, *, scale=None, rng=None) -> Operand:
        """Quantize ``arr`` (in GEMM layout, K along ``k_axis``) as ``role`` in ``pass_``."""
        raise NotImplementedError

    def on(self, stack) -> "TrainingRecipe":
        """The recipe as it runs on ``stack`` (itself, unless the stack's kernels need other
        scales), or ValueError saying why the stack cannot run it."""
        return self

    def unbound(self) -> "TrainingRecipe":
        """The recipe without what :meth:`on` set for a stack (itself, unless a field follows the stack)."""
        return self

    def describe(self) -> str:
        f = self.formats()
        return f"{self.name}: input {f['input']}, weight {f['weight']}, grad_output {f['grad_output']}"


@dataclasses.dataclass(frozen=True)
class TEDelayedScaling(TrainingRecipe):
    """Transformer Engine ``DelayedScaling`` (``transformer_engine/common/recipe/__init__.py``
    at 000b637): per-tensor scales from an amax history of earlier steps.

    Per tensor (input, weight, grad_output of each layer) a step quantizes with the scale in
    force, records ``amax = max|x|`` (NaN ignored) and updates as TE's
    ``amax_and_scale_update``: see :class:`fp8emu.scaling.DelayedScaling`.  The first step
    uses scale 1.  fprop fast accumulation, dgrad/wgrad split (``module/base.py``).

    Examples
    --------
    >>> TEDelayedScaling().formats()["grad_output"], TEDelayedScaling().amax_history_len
    ('e5m2', 1024)
    """

    margin: int = 0
    fp8_format: str = "HYBRID"
    amax_history_len: int = 1024
    amax_compute_algo: str = "max"
    name: str = "te-delayed"

    def __post_init__(self):
        super().__post_init__()
        DelayedScaling("e4m3fn", amax_history_len=self.amax_history_len,
                       amax_compute_algo=self.amax_compute_algo, margin=self.margin)

    def formats(self):
        f = recipe_formats(self.fp8_format)
        return {"input": f["forward"], "weight": f["forward"], "grad_output": f["backward"]}

    def delayed(self):
        return True

    def shared_copies(self):
        return True

    def scaler(self, role) -> DelayedScaling:
        """A fresh :class:`fp8emu.scaling.DelayedScaling` for ``role`` (state is loaded into it)."""
        return DelayedScaling(self.formats()[role], amax_history_len=self.amax_history_len,
                              amax_compute_algo=self.amax_compute_algo, margin=self.margin)

    def operand(self, role, arr, k_axis, pass_, *, scale=None, rng=None):
        return Operand("fp8", *_tensorwise(arr, self.formats()[role], scale=scale))


def _tensorwise(arr, fmt, **kw):
    st = quantize_tensorwise(arr, fmt, **kw)
    return st.codes, st.fmt, np.float32(st.scale_inv)


@dataclasses.dataclass(frozen=True)
class TECurrentScaling(TrainingRecipe):
    """Transformer Engine ``Float8CurrentScaling`` (``common/recipe/__init__.py`` at 000b637):
    one scale per tensor from this tensor's amax (:func:`fp8emu.scaling.quantize_tensorwise`),
    HYBRID formats, ``fp8_gemm_fprop`` without split accumulator, dgrad/wgrad with it.

    Examples
    --------
    >>> TECurrentScaling().split("fprop"), TECurrentScaling().split("wgrad")
    (False, True)
    """

    fp8_format: str = "HYBRID"
    use_power_2_scales: bool = False
    name: str = "te-current"

    def formats(self):
        f = recipe_formats(self.fp8_format)
        return {"input": f["forward"], "weight": f["forward"], "grad_output": f["backward"]}

    def shared_copies(self):
        return True

    def operand(self, role, arr, k_axis, pass_, *, scale=None, rng=None):
        return Operand("fp8", *_tensorwise(arr, self.formats()[role], pow2=self.use_power_2_scales))


@dataclasses.dataclass(frozen=True)
class TEBlockScaling(TrainingRecipe):
    """Transformer Engine ``Float8BlockScaling`` (``common/recipe/__init__.py`` at 000b637):
    1x128 blocks for inputs and gradients (along each GEMM's K: 128x1 for the column-wise
    copies), 128x128 for weights, power-of-two scales unless ``use_f32_scales``, E4M3, split
    accumulator in every pass (TE asserts it); :func:`fp8emu.scaling.quantize_blockwise`.

    Examples
    --------
    >>> TEBlockScaling().formats()["grad_output"], TEBlockScaling().family
    ('e4m3fn', 'fp8-block')
    """

    fp8_format: str = "E4M3"
    use_f32_scales: bool = False
    name: str = "te-block"
    family = "fp8-block"

    def formats(self):
        f = recipe_formats(self.fp8_format)
        return {"input": f["forward"], "weight": f["forward"], "grad_output": f["backward"]}

    def split(self, pass_):
        return True

    def on(self, stack):
        if stack.block_fp8_mx and self.use_f32_scales:
            raise ValueError("Float8BlockScaling on Blackwell is emulated with MXFP8 and takes only "
                             "power-of-two scales (TE docs/features/low_precision_training/"
                             "fp8_blockwise_scaling/fp8_blockwise_scaling.rst at e087141); "
                             "use use_f32_scales=False or gpu='h100'")
        return self

    def operand(self, role, arr, k_axis, pass_, *, scale=None, rng=None):
        block = _block(role, k_axis)
        st = quantize_blockwise(arr, self.formats()[role], block=block, pow2=not self.use_f32_scales)
        return Operand("fp8", st.codes, st.fmt, np.asarray(st.scale_inv, np.float32))


def _block(role, k_axis):
    """1x128 along K for inputs and gradients (128x1 for column-wise copies), 128x128 weights."""
    if role == "weight":
        return (128, 128)
    return (1, 128) if k_axis == 1 else (128, 1)


def ue8m0_block_scales(arr, block) -> np.ndarray:
    """DeepGEMM's UE8M0 block scales for sm_100: ``sf = ceil_to_ue8m0(max(amax, 1e-4) / 448)``
    per block (``deep_gemm/utils/math.py``, ``per_token_cast_to_fp8`` / ``per_block_cast_to_fp8``
    with ``use_ue8m0=True``, deepseek-ai/DeepGEMM at ab02dd5810b29a127b5af09f9a7e06822f74697e),
    returned as the quantization multipliers ``1 / sf`` (exact: powers of two).

    ``ceil_to_ue8m0`` is taken as the power of two at or above its argument, computed on the
    float32 bits (exponent, plus one when any fraction bit is set), as DeepGEMM's later
    ``ceil_to_ue8m0_with_byte`` does; the ``pow(2, ceil(log2(x)))`` form of that commit can
    differ from it only where a float32 ``log2`` rounds to an integer.  amax ignores NaN (as
    :func:`fp8emu.scaling.quantize_blockwise`); an Inf amax gives ``sf = 2**127``.

    Examples
    --------
    >>> x = np.zeros((1, 256), np.float32); x[0, 0], x[0, 128] = 448.0, 449.0
    >>> (1 / ue8m0_block_scales(x, (1, 128))).tolist()
    [[1.0, 2.0]]
    """
    amax = block_amax(np.asarray(arr, np.float32), block)
    sf = (np.maximum(amax, np.float32(1e-4)) / np.float32(448)).astype(np.float32)
    bits = sf.view(np.uint32)
    e = ((bits >> 23) & 0xFF).astype(np.int64) + ((bits & 0x7FFFFF) != 0)
    e = np.clip(e, 1, 254)
    return np.ldexp(np.float32(1), 127 - e).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class DeepSeekV3(TEBlockScaling):
    """DeepSeek-V3's FP8 recipe (DeepSeek-V3 technical report, arXiv:2412.19437, section 3.3):
    1x128 activation / gradient tiles and 128x128 weight blocks with float32 scales
    ``amax / 448`` (not powers of two), E4M3 everywhere, and the GEMM's partial sums promoted
    to FP32 every 128 elements of K with the block scales (DeepGEMM's scheme, the
    ``"hopper"`` accumulator with block scales).

    On a stack whose block FP8 GEMM is Blackwell's MXFP8 instruction (``gpu="b200"``),
    :meth:`on` sets ``ue8m0_scales``: DeepGEMM's sm_100 kernels
    (``deep_gemm/include/deep_gemm/impls/sm100_fp8_gemm_1d1d.cuh`` at cfe29c4) take UE8M0
    scales, so the operands are quantized with :func:`ue8m0_block_scales` (the power of two
    at or above ``amax / 448``) instead of ``amax / 448``.  The field follows the stack: left
    unset (None) it is set by :meth:`on`; a value given that contradicts the stack is an error.

    Examples
    --------
    >>> DeepSeekV3().use_f32_scales
    True
    """

    fp8_format: str = "E4M3"
    use_f32_scales: bool = True
    ue8m0_scales: bool | None = None
    name: str = "deepseek-v3"

    def unbound(self):
        return dataclasses.replace(self, ue8m0_scales=None)

    def on(self, stack):
        want = bool(stack.block_fp8_mx)
        if self.ue8m0_scales is not None and bool(self.ue8m0_scales) != want:
            raise ValueError(f"deepseek-v3: ue8m0_scales={self.ue8m0_scales!r} contradicts gpu={stack.name!r}, "
                             f"whose block FP8 GEMM takes {'UE8M0' if want else 'float32'} scales; leave "
                             "ue8m0_scales unset (it follows the stack)")
        return dataclasses.replace(self, ue8m0_scales=want)

    def operand(self, role, arr, k_axis, pass_, *, scale=None, rng=None):
        if not self.ue8m0_scales:
            return super().operand(role, arr, k_axis, pass_)
        block = _block(role, k_axis)
        st = quantize_blockwise(arr, self.formats()[role], block=block, scale=ue8m0_block_scales(arr, block))
        return Operand("fp8", st.codes, st.fmt, np.asarray(st.scale_inv, np.float32))


@dataclasses.dataclass(frozen=True)
class TEMXFP8BlockScaling(TrainingRecipe):
    """Transformer Engine ``MXFP8BlockScaling`` (``common/recipe/__init__.py`` at 000b637): 32
    elements along K share an E8M0 scale (TE's ``float_to_e8m0``: the ``"rceil"`` rule of
    :func:`fp8emu.scaling.quantize_mx`); each copy (row-wise / column-wise) is quantized
    from the high-precision tensor; E4M3 by default.

    Examples
    --------
    >>> TEMXFP8BlockScaling().multiple
    32
    """

    fp8_format: str = "E4M3"
    name: str = "te-mxfp8"
    family = "mx"
    multiple = 32

    def formats(self):
        f = recipe_formats(self.fp8_format)
        return {"input": f["forward"], "weight": f["forward"], "grad_output": f["backward"]}

    def operand(self, role, arr, k_axis, pass_, *, scale=None, rng=None):
        return Operand("block", st=quantize_mx(arr, self.formats()[role], axis=k_axis, scale_rule="rceil"))


@dataclasses.dataclass(frozen=True)
class TENVFP4BlockScaling(TrainingRecipe):
    """Transformer Engine ``NVFP4BlockScaling`` (``common/recipe/__init__.py`` at 000b637):
    E2M1 elements, an E4M3 scale per 16 along K and a float32 per-tensor scale
    (:func:`fp8emu.scaling.quantize_nvfp4_te`).  TE's ``QParams``: weights 16x16 2-D
    scales; the random Hadamard transform only on the column-wise copies of the input and
    the gradient (the wgrad operands); stochastic rounding on the gradient; the three
    ``disable_*`` switches of the class turn them off.

    Examples
    --------
    >>> r = TENVFP4BlockScaling(disable_rht=True)
    >>> q = r.quantizer("grad_output", "wgrad")
    >>> q.stochastic_rounding, q.with_rht, r.quantizer("weight", "fprop").with_2d_quantization
    (True, False, True)
    """

    disable_rht: bool = False
    disable_stochastic_rounding: bool = False
    disable_2d_quantization: bool = False
    name: str = "te-nvfp4"
    family = "nvfp4"
    multiple = 16

    def formats(self):
        return {"input": "nvfp4", "weight": "nvfp4", "grad_output": "nvfp4"}

    def quantizer(self, role, pass_) -> NVFP4Quantizer:
        """TE's quantizer options for ``role`` as used in ``pass_``."""
        columnwise = (role == "input" and pass_ == "wgrad") or (role == "grad_output" and pass_ == "wgrad")
        return NVFP4Quantizer(
            with_2d_quantization=role == "weight" and not self.disable_2d_quantization,
            stochastic_rounding=role == "grad_output" and not self.disable_stochastic_rounding,
            with_rht=columnwise and not self.disable_rht)

    def operand(self, role, arr, k_axis, pass_, *, scale=None, rng=None):
        q = self.quantizer(role, pass_)
        return Operand("block", st=quantize_nvfp4_te(arr, q, axis=k_axis,
                                                     rng=rng if q.stochastic_rounding else None))


@dataclasses.dataclass(frozen=True)
class TorchaoFloat8(TrainingRecipe):
    """torchao ``Float8LinearConfig.from_recipe_name`` (``torchao/float8/config.py``, 0.18.0).

    ``"tensorwise"``: per-tensor scales, E4M3 input/weight, E5M2 grad_output.
    ``"rowwise"``: one scale per row along each GEMM's K, E4M3 everywhere, scales rounded
    down to powers of two.  ``"rowwise_with_gw_hp"``: as rowwise (power-of-two scales too), but dgrad's weight is
    scaled per tensor and wgrad runs in high precision.  GEMMs: ``use_fast_accum`` True for
    the output, False for grad_input and grad_weight.  Scales as torchao's
    ``amax_to_scale``: ``fl32(fp8_max / max(float64(amax), 1e-12))``; torchao's amax is
    ``torch.max(|x|)``, which a NaN makes NaN: such a tensor's (or row's) GEMM outputs are NaN.

    Examples
    --------
    >>> TorchaoFloat8("rowwise").formats()["grad_output"]
    'e4m3fn'
    """

    granularity: str = "tensorwise"
    name: str = ""

    def __post_init__(self):
        if self.granularity not in ("tensorwise", "rowwise", "rowwise_with_gw_hp"):
            raise ValueError(f"granularity must be 'tensorwise', 'rowwise' or 'rowwise_with_gw_hp', "
                             f"got {self.granularity!r}")
        if isinstance(self.name, str) and not self.name:
            object.__setattr__(self, "name", "torchao-" + self.granularity.replace("_with_", "-")
                               .replace("_", "-"))
        super().__post_init__()

    def formats(self):
        go = "e5m2" if self.granularity == "tensorwise" else "e4m3fn"
        return {"input": "e4m3fn", "weight": "e4m3fn", "grad_output": go}

    def high_precision(self, pass_):
        return self.granularity == "rowwise_with_gw_hp" and pass_ == "wgrad"

    def shared_copies(self):
        return self.granularity == "tensorwise"

    def gemm_family(self, pass_):
        return "torchao-hp" if self.high_precision(pass_) else "torchao"

    def operand(self, role, arr, k_axis, pass_, *, scale=None, rng=None):
        fmt = get_format(self.formats()[role])
        tensorwise = self.granularity == "tensorwise" or (
            self.granularity == "rowwise_with_gw_hp" and role == "weight" and pass_ == "dgrad")
        pow2 = self.granularity != "tensorwise"      # config.py: both rowwise recipes round scales to 2**k
        codes, fmt, sinv, div = _torchao_quantize(arr, fmt, None if tensorwise else k_axis, pow2)
        return Operand("fp8", codes, fmt, sinv, divisor=div)


def _torchao_quantize(arr, fmt, axis, pow2):
    """torchao's cast: scale from amax in float64, ``fl32(x * scale)``, saturate, RNE.

    Returns the codes, the format, ``1/scale`` (for ``scaled_mm``) and the scale itself (NaN
    where the amax is not finite)."""
    a = np.asarray(arr, np.float32)
    with np.errstate(invalid="ignore"):
        amax = np.max(np.abs(a)) if axis is None else np.max(np.abs(a), axis=axis, keepdims=True)
    amax = np.asarray(amax, np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        s = (float(fmt.max) / np.maximum(amax, 1e-12)).astype(np.float32)
        if pow2:
            s = np.exp2(np.floor(np.log2(s))).astype(np.float32)
    bad = ~np.isfinite(s) | (s == 0)
    good_s = np.where(bad, np.float32(1), s)
    if axis is None:
        st = quantize_tensorwise(a, fmt, scale=good_s[()])
    else:
        st = quantize_axiswise(a, fmt, axis=axis, scale=good_s)
    sinv = np.where(bad, np.float32(np.nan), np.asarray(st.scale_inv, np.float32)).astype(np.float32)
    div = np.where(bad, np.float32(np.nan), s).astype(np.float32)
    return st.codes, st.fmt, (sinv[()] if axis is None else sinv), (div[()] if axis is None else div)


#: The named recipes of ``recipe=``: name -> recipe object (each with its class's defaults, or the
#: named variant's options).
RECIPES = {
    "te-delayed": TEDelayedScaling(),
    "te-current": TECurrentScaling(),
    "te-block": TEBlockScaling(),
    "deepseek-v3": DeepSeekV3(),
    "te-mxfp8": TEMXFP8BlockScaling(),
    "te-nvfp4": TENVFP4BlockScaling(),
    "te-nvfp4-no-rht": TENVFP4BlockScaling(disable_rht=True, name="te-nvfp4-no-rht"),
    "te-nvfp4-no-sr": TENVFP4BlockScaling(disable_stochastic_rounding=True, name="te-nvfp4-no-sr"),
    "te-nvfp4-no-2d": TENVFP4BlockScaling(disable_2d_quantization=True, name="te-nvfp4-no-2d"),
    "torchao-tensorwise": TorchaoFloat8("tensorwise"),
    "torchao-rowwise": TorchaoFloat8("rowwise"),
    "torchao-rowwise-gw-hp": TorchaoFloat8("rowwise_with_gw_hp"),
}


def recipe_names() -> list:
    """Names accepted by ``recipe=``.

    Examples
    --------
    >>> recipe_names()[:3]
    ['te-delayed', 'te-current', 'te-block']
    """
    return list(RECIPES)


def get_recipe(recipe) -> TrainingRecipe:
    """A recipe from its name (a key of :data:`RECIPES`) or itself.

    Examples
    --------
    >>> get_recipe("te-mxfp8") is RECIPES["te-mxfp8"], get_recipe(TorchaoFloat8("rowwise")).name
    (True, 'torchao-rowwise')
    """
    if isinstance(recipe, TrainingRecipe):
        return recipe
    if isinstance(recipe, str) and recipe in RECIPES:
        return RECIPES[recipe]
    raise ValueError(f"unknown recipe {recipe!r}; accepted: {', '.join(RECIPES)} or an "
                     "fp8emu.training.TrainingRecipe")
