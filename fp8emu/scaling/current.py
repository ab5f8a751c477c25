"""Current scaling (Transformer Engine ``Float8CurrentScaling`` / ``Float8BlockScaling``).

One scale per tensor, per row or column, or per 1x128 / 128x128 block, computed from
the amax of the values it scales with Transformer Engine's ``compute_scale_from_amax``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..interop import source_array
from . import torchao_variants as torchao
from .tensor import (
    F32, FLT_MAX, ScaledTensor, amax_nan_ignoring, as_f32, as_format, axis_arg, block_amax, block_arg,
    blocks_shape,
    bool_arg, eps_arg, given_scale, int_arg, prepare, reciprocal, scaled_max, scaled_quantize,
)

#: bfloat16's largest finite value as float32 (0x7F7F0000), TE's overflow scale for bf16 inputs.
BF16_MAX = np.float32(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
BF16 = np.dtype(ml_dtypes.bfloat16)

__all__ = ["current_scale", "compute_scale", "quantize_tensorwise", "quantize_axiswise", "quantize_blockwise",
           "CURRENT_VARIANTS"]

#: Float32 steps of :func:`quantize_tensorwise` / :func:`quantize_axiswise`: Transformer Engine's and torchao's.
CURRENT_VARIANTS = ("te", "torchao")



def _variant_arg(variant, fmt, margin, eps):
    if not isinstance(variant, str) or variant not in CURRENT_VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; accepted: " + ", ".join(CURRENT_VARIANTS))
    if variant == "torchao":
        if fmt.name not in torchao.FLOAT8_FORMATS:
            raise ValueError(f"variant='torchao' quantizes to {', '.join(torchao.FLOAT8_FORMATS)}; got {fmt.name}")
        if int_arg(margin, "margin") != 0 or eps_arg(eps) != 0:
            raise ValueError("variant='torchao' has no margin or eps (its amax floor is 1e-12): leave margin=0, eps=0")
    return variant


def compute_scale(amax, scaled_max, pow2, eps, value_for_inf=FLT_MAX) -> np.ndarray:
    """Transformer Engine ``compute_scale_from_amax``, vectorised, in float32 (an infinite
    scale becomes ``value_for_inf``)."""
    amax = np.asarray(amax, dtype=np.float32)
    amax = np.where(amax < eps, eps, amax).astype(np.float32)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        scale = np.divide(F32(scaled_max), amax, dtype=np.float32)
    scale = np.where(np.isinf(scale), F32(value_for_inf), scale)
    scale = np.where(np.isnan(scale) | np.isinf(amax) | (amax == 0), F32(1), scale)
    scale = np.asarray(scale, dtype=np.float32)
    if pow2:
        scale = (scale.view(np.uint32) & np.uint32(0xFF800000)).view(np.float32)
    return scale


def current_scale(amax, fmt, *, margin=0, pow2=False, eps=0.0, variant="te") -> np.float32:
    """The current-scaling factor for one amax (Transformer Engine recipe).

    Reproduces ``compute_scale_from_amax`` of Transformer Engine
    (``Float8CurrentScaling``, ``Float8BlockScaling``), in float32:

    1. ``amax < eps`` -> ``amax = eps``;
    2. amax of 0, +-Inf or NaN -> scale 1;
    3. ``scale = fl32(fl32(fmt.max * 2**-margin) / amax)`` (round-to-nearest
       division); an infinite scale becomes ``FLT_MAX``;
    4. ``pow2=True``: the mantissa bits are cleared (the scale is rounded
       down to a power of two).

    Parameters
    ----------
    amax : float
        Largest magnitude of the tensor (or block); converted to float32.
    fmt : str or Format
        Target format (its ``max`` is ``fp8_max``).
    margin : int, keyword-only
        Headroom in binades: the target maximum is ``fp8_max * 2**-margin``.
    pow2 : bool, keyword-only
        Round the scale down to a power of two.
    eps : float, keyword-only
        Lower bound on amax (Transformer Engine's ``amax_epsilon``).
    variant : {"te", "torchao"}, keyword-only
        ``"torchao"``: torchao.float8's ``amax_to_scale`` instead
        (``fl32(fmax / max(amax, 1e-12))`` in float64; ``pow2`` as its
        ``round_scales_to_power_of_2``; see :func:`quantize_tensorwise`).

    Returns
    -------
    numpy.float32

    Examples
    --------
    >>> import fp8emu
    >>> float(fp8emu.current_scale(3.0, "e4m3fn"))           # 448/3 rounded to float32
    149.3333282470703
    >>> float(fp8emu.current_scale(3.0, "e4m3fn", pow2=True))
    128.0
    >>> float(fp8emu.current_scale(0.0, "e4m3fn")), float(fp8emu.current_scale(1e-45, "e5m2"))
    (1.0, 3.4028234663852886e+38)
    >>> float(fp8emu.current_scale(448 / 16383.999, "e4m3fn", pow2=True, variant="torchao"))
    16384.0
    """
    fmt = as_format(fmt)
    a = np.asarray(amax)
    if a.shape != () or a.dtype.kind not in "iuf":
        raise TypeError(f"amax must be a real scalar, got {amax!r}")
    if _variant_arg(variant, fmt, margin, eps) == "torchao":
        # torchao.float8 amax_to_scale (see quantize_tensorwise); a NaN amax gives a NaN scale
        return F32(torchao.float8_scale(np.abs(a.astype(np.float32)), fmt, bool_arg(pow2, "pow2"))[()])
    margin = int_arg(margin, "margin")
    eps = eps_arg(eps)
    return F32(compute_scale(np.abs(a.astype(np.float32)), scaled_max(fmt, margin),
                               bool_arg(pow2, "pow2"), eps)[()])


def block_scales(xf, fmt, block, scale, margin, pow2, eps, value_for_inf=FLT_MAX) -> np.ndarray:
    """Per-block scales: the given ones (validated), else current scaling of each block's amax."""
    # the options are checked even when a given scale makes them unused
    smax, pow2, eps = scaled_max(fmt, int_arg(margin, "margin")), bool_arg(pow2, "pow2"), eps_arg(eps)
    if scale is not None:
        return given_scale(scale, blocks_shape(xf.shape, block))
    return compute_scale(block_amax(xf, block), smax, pow2, eps, value_for_inf)


def quantize_tensorwise(x, fmt, *, margin=0, pow2=False, eps=0.0, scale=None, variant="te") -> ScaledTensor:
    """Per-tensor current scaling (Transformer Engine ``Float8CurrentScaling``).

    ``amax = max|x|`` (NaN ignored), ``scale = current_scale(amax, fmt, ...)``,
    ``codes = cast(fl32(x * scale))`` with a saturating round-to-nearest-even
    cast, ``scale_inv = fl32(1 / scale)``.  An Inf in ``x`` makes amax Inf, so
    the scale is 1 and the Inf saturates to +-max; NaNs stay NaN.

    Parameters
    ----------
    x : array_like
        Values (converted to float32 first).
    fmt : str or Format
        Target format.
    margin, pow2, eps
        As in :func:`current_scale`.
    scale : float, optional, keyword-only
        Use this scale (finite, > 0) instead of computing one.
    variant : {"te", "torchao"}, keyword-only
        Transformer Engine's steps (default) or torchao's (see below).

    Returns
    -------
    ScaledTensor
        ``block == ()``, ``scale`` and ``scale_inv`` of shape ``()``.

    ``variant="torchao"`` is torchao.float8's ``Float8Linear`` cast
    (``hp_tensor_to_float8_dynamic``, eager CPU) bit for bit, proven on torchao
    :data:`fp8emu.scaling.torchao_variants.TORCHAO_PROVEN`: ``amax`` with NaN
    propagating (a NaN anywhere makes the scale NaN and every code NaN),
    ``scale = fl32(fmax / max(amax, 1e-12))`` computed in float64 (a zero
    amax gives ``fmax * 1e12``, not 1; an Inf amax gives 0, so finite values
    become 0 and Inf NaN), ``pow2`` as torchao's
    ``round_scales_to_power_of_2``: ``exp2(floor(log2 scale))`` with log2
    rounded to float32 (a scale just below ``2**k`` becomes ``2**k``, where
    TE's bit mask gives ``2**(k-1)``); codes ``cast(clamp(fl32(x * scale)))``.
    ``margin`` and ``eps`` are TE's and refused with it; formats e4m3fn, e5m2.
    (torchao's ``emulate=True`` GEMM then divides each operand by its scale
    in float32 and runs an fp32 ``torch.mm``; fp8emu's GEMMs multiply the
    accumulator by ``fl32(1 / scale)`` instead.)

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> t = fp8emu.quantize_tensorwise(np.array([0.5, -3.0, 0.01]), "e4m3fn")
    >>> t.codes.tolist(), float(t.scale_inv)
    ([105, 254, 60], 0.0066964286379516125)
    >>> x = np.array([448 / 16383.999])                 # scale 16383.999: TE's pow2 8192, torchao's 16384
    >>> [float(fp8emu.quantize_tensorwise(x, "e4m3fn", pow2=True, variant=v).scale) for v in CURRENT_VARIANTS]
    [8192.0, 16384.0]
    """
    fmt = as_format(fmt)
    xf = as_f32(x)
    if _variant_arg(variant, fmt, margin, eps) == "torchao":
        pow2 = bool_arg(pow2, "pow2")
        given = None if scale is None else given_scale(scale, ())
        amax = None
        if given is None:
            amax = F32(np.max(np.abs(xf))) if xf.size else F32(0)
            if np.isnan(amax):
                amax = torchao.nan_bits(0xFFFFFFFF)          # torch.max's NaN
        codes, s = torchao.float8_quantize(xf, fmt, (), amax, pow2, given)
        return ScaledTensor(codes=codes, fmt=fmt, scale=s, scale_inv=reciprocal(s), shape=xf.shape,
                            recipe="tensorwise-torchao")
    smax, pow2, eps = scaled_max(fmt, int_arg(margin, "margin")), bool_arg(pow2, "pow2"), eps_arg(eps)
    if scale is None:
        s = compute_scale(amax_nan_ignoring(xf, None), smax, pow2, eps)
    else:
        s = given_scale(scale, ())
    return scaled_quantize(xf, fmt, (), np.asarray(s, dtype=np.float32),
                           recipe="tensorwise")


def quantize_axiswise(x, fmt, *, axis=-1, margin=0, pow2=False, eps=0.0,
                      scale=None, variant="te") -> ScaledTensor:
    """One current-scaling factor per slice (row-wise / column-wise scaling).

    For each slice along ``axis``: ``amax`` over the slice (NaN ignored),
    ``scale = current_scale(amax, fmt, margin=..., pow2=..., eps=...)``, then
    ``cast(fl32(x * scale))``.  On an (M, K) tensor ``axis=-1`` gives row-wise
    scales of shape (M, 1) (block ``(1, K)``), ``axis=0`` column-wise scales
    of shape (1, K) (block ``(M, 1)``), the layout of ``torch._scaled_mm``'s
    row-wise scales.

    Parameters
    ----------
    x : array_like
    fmt : str or Format
    axis : int, keyword-only
        The axis reduced to one scale.
    margin, pow2, eps
        As in :func:`current_scale`.
    scale : array_like, optional, keyword-only
        Use these scales (shape with ``axis`` reduced to 1) instead.
    variant : {"te", "torchao"}, keyword-only
        Transformer Engine's steps (default) or torchao's rowwise
        ``Float8Linear`` cast (``axiswise_dim``; see below).

    Returns
    -------
    ScaledTensor
        ``scale`` and ``scale_inv`` with ``axis`` reduced to 1; ``axis`` set.

    ``variant="torchao"`` is torchao.float8's rowwise ``Float8Linear`` cast: the rules of
    :func:`quantize_tensorwise`'s ``variant="torchao"`` with one amax and scale per slice along
    ``axis`` (torchao's ``axiswise_dim``), proven on the same torchao versions.

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> t = fp8emu.quantize_axiswise(np.array([[1.0, -2.0], [0.25, 0.5]]), "e4m3fn")
    >>> t.scale.tolist(), t.block
    ([[224.0], [896.0]], (1, 2))
    >>> z = np.zeros((1, 2))                             # zero amax: TE scale 1, torchao fl32(448 / 1e-12)
    >>> [float(fp8emu.quantize_axiswise(z, "e4m3fn", variant=v).scale[0, 0]) for v in CURRENT_VARIANTS]
    [1.0, 447999985582080.0]
    """
    fmt, xf = prepare(x, fmt, "quantize_axiswise")
    ax = axis_arg(axis, xf.ndim)
    block = tuple(max(s, 1) if d == ax else 1 for d, s in enumerate(xf.shape))
    if _variant_arg(variant, fmt, margin, eps) == "torchao":
        pow2 = bool_arg(pow2, "pow2")
        given = None if scale is None else given_scale(scale, blocks_shape(xf.shape, block))
        amax = None
        if given is None:
            with np.errstate(invalid="ignore"):
                amax = np.max(np.abs(xf), axis=ax, keepdims=True, initial=F32(0))   # NaN propagates (torch.amax)
            if ax != xf.ndim - 1:
                # torch.amax across rows gives its NaN as 0xFFFFFFFF (along the last axis: the element's NaN)
                amax = np.where(np.isnan(amax), torchao.nan_bits(0xFFFFFFFF), amax)
        codes, s = torchao.float8_quantize(xf, fmt, block, amax, pow2, given)
        return ScaledTensor(codes=codes, fmt=fmt, scale=s, scale_inv=reciprocal(s), block=block, axis=ax,
                            shape=xf.shape, recipe="axiswise-torchao")
    s = block_scales(xf, fmt, block, scale, margin, pow2, eps)
    return scaled_quantize(xf, fmt, block, s, axis=ax, recipe="axiswise")


def quantize_blockwise(x, fmt, *, block=(1, 128), pow2=True, margin=0, eps=0.0,
                       scale=None, input_dtype=None) -> ScaledTensor:
    """Block-wise current scaling (Transformer Engine ``Float8BlockScaling``).

    The DeepSeek-V3 recipe: 1x128 blocks (activations, gradients) or 128x128
    blocks (weights), one scale per block from the block's amax with
    Transformer Engine's ``compute_scale_from_amax`` (see
    :func:`current_scale`; power-of-two scales by default, ``eps = 0``),
    then ``cast(fl32(x * scale))`` and ``scale_inv = 1 / scale``.  The block
    applies to the trailing dimensions (leading dimensions get block size
    1).  Partial blocks at the end are padded with zeros; an all-zero block
    gets scale 1.  A block whose scale overflows float32 gets FLT_MAX, or
    bfloat16's largest value 3.3895314e38 when the input is bfloat16
    (``ml_dtypes.bfloat16`` array, or ``input_dtype="bfloat16"``) and
    ``pow2=False``, as Transformer Engine's block-scaling kernels clamp for
    bf16 inputs.

    Parameters
    ----------
    x : array_like
    fmt : str or Format
    block : tuple of int, keyword-only
        Block shape, e.g. ``(1, 128)`` or ``(128, 128)``.
    pow2, margin, eps
        As in :func:`current_scale`.
    scale : array_like, optional, keyword-only
        Use these per-block scales instead.
    input_dtype : {None, "bfloat16"}, keyword-only
        Type the values came in as (default: taken from ``x``).

    Returns
    -------
    ScaledTensor
        ``scale`` of shape ``ceil(shape / block)``.

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> tiny = np.full((1, 128), 1e-38)
    >>> float(fp8emu.quantize_blockwise(tiny, "e4m3fn", pow2=False, input_dtype="bfloat16").scale[0, 0])
    3.3895313892515355e+38
    >>> x = np.arange(1.0, 4.0).reshape(1, 3)
    >>> t = fp8emu.quantize_blockwise(x, "e4m3fn", block=(1, 2))
    >>> t.scale.tolist(), t.dequantize().tolist()
    ([[128.0, 128.0]], [[1.0, 2.0, 3.0]])
    """
    if input_dtype not in (None, "bfloat16"):
        raise ValueError(f"input_dtype must be None or 'bfloat16', got {input_dtype!r}")
    x = source_array(x)   # a framework tensor once, so its dtype can be read
    bf16 = input_dtype == "bfloat16" or x.dtype == BF16
    fmt, xf = prepare(x, fmt, "quantize_blockwise")
    blk = block_arg(block, xf.ndim)
    s = block_scales(xf, fmt, blk, scale, margin, pow2, eps,
                     BF16_MAX if bf16 and not pow2 else FLT_MAX)
    return scaled_quantize(xf, fmt, blk, s, recipe="blockwise")
