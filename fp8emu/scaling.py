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
  the spec, torchao and Transformer Engine ``MXFP8BlockScaling``;
* :func:`quantize_nvfp4` -- Transformer Engine NVFP4 (E2M1 elements, an E4M3
  scale per 16 elements and a float32 per-tensor scale).

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

import dataclasses
import math
import numbers

import numpy as np

from .codec import decode, encode
from .formats import Format, get_format

__all__ = [
    "ScaledTensor", "current_scale", "quantize_tensorwise", "DelayedScaling", "HYBRID",
    "recipe_formats", "quantize_axiswise", "quantize_blockwise", "quantize_mx",
    "MX_SCALE_RULES", "MX_ELEMENT_FORMATS", "quantize_nvfp4",
]

#: Transformer Engine's ``Format.HYBRID``: E4M3 in the forward pass, E5M2 for gradients.
HYBRID = {"forward": "e4m3fn", "backward": "e5m2"}

#: MX scale rules accepted by :func:`quantize_mx`.
MX_SCALE_RULES = ("floor", "ceil", "even", "rceil")

#: Element formats of OCP MX v1.0 (MXFP8, MXFP6, MXFP4).
MX_ELEMENT_FORMATS = ("e4m3fn", "e5m2", "e2m3fn", "e3m2fn", "e2m1fn")

_F32 = np.float32
_FLT_MAX = np.finfo(np.float32).max
_NVFP4_BLOCK = 16


# --------------------------------------------------------------------------- helpers

def _fmt(fmt) -> Format:
    if isinstance(fmt, Format):
        return fmt
    if not isinstance(fmt, str):
        raise TypeError(f"fmt must be a format name or a Format, got {type(fmt).__name__}")
    return get_format(fmt)


def _as_f32(x, what="x") -> np.ndarray:
    """x as a new float32 array (the GPU kernels' compute type)."""
    arr = np.asarray(x)
    if arr.dtype == object or arr.dtype.kind not in "biuf" and arr.dtype.kind != "V":
        raise TypeError(f"{what} must be a real numeric array, got dtype {arr.dtype}")
    if arr.dtype.kind == "V":  # ml_dtypes narrow floats are numpy 'V' kinds
        try:
            arr = arr.astype(np.float32)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{what} must be a real numeric array, got dtype {arr.dtype}") from exc
    return np.array(arr, dtype=np.float32, copy=True)


def _int_arg(value, what, *, minimum=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{what} must be an int, got {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {value}")
    return value


def _eps_arg(eps):
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps must be a real number, got {eps!r}")
    e = _F32(eps)
    if not np.isfinite(e) or e < 0:
        raise ValueError(f"eps must be finite and >= 0, got {eps!r}")
    return e


def _axis_arg(axis, ndim):
    axis = _int_arg(axis, "axis")
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for an array with {ndim} dimension(s)")
    return axis % ndim


def _scaled_max(fmt: Format, margin: int) -> np.float32:
    """fp8_max * 2**-margin in float32 (Transformer Engine's ``scaled_max``)."""
    return _F32(_F32(fmt.max) * _F32(2.0 ** -margin))


def _amax_nan_ignoring(xp: np.ndarray, axes) -> np.ndarray:
    """max |x| over ``axes``, NaN ignored like CUDA's fmaxf (0 if all NaN)."""
    a = np.abs(xp)
    a = np.where(np.isnan(a), _F32(0), a)
    return np.max(a, axis=axes, initial=_F32(0)).astype(np.float32)


def _blocks_shape(shape, block):
    return tuple(-(-s // b) for s, b in zip(shape, block))


def _pad_to_blocks(x: np.ndarray, block) -> np.ndarray:
    """Zero-pad every dimension up to a multiple of its block size."""
    pad = [(0, (-s) % b) for s, b in zip(x.shape, block)]
    if any(p for _, p in pad):
        x = np.pad(x, pad)
    return x


def _blocked_view(xp: np.ndarray, block):
    """(n0, b0, n1, b1, ...) view of a padded array and the block axes."""
    split = []
    for s, b in zip(xp.shape, block):
        split += [s // b, b]
    return xp.reshape(split), tuple(range(1, 2 * len(block), 2))


def _block_amax(x: np.ndarray, block) -> np.ndarray:
    xp = _pad_to_blocks(x, block)
    view, axes = _blocked_view(xp, block)
    return _amax_nan_ignoring(view, axes)


def _expand(per_block: np.ndarray, block, shape) -> np.ndarray:
    """Repeat one value per block back to the (unpadded) element shape."""
    out = per_block
    for d, b in enumerate(block):
        if b > 1:
            out = np.repeat(out, b, axis=d)
    return out[tuple(slice(0, s) for s in shape)]


def _block_arg(block, ndim):
    """Normalise a block tuple to one positive entry per dimension (aligned right)."""
    if isinstance(block, numbers.Integral) and not isinstance(block, bool):
        block = (block,)
    if not isinstance(block, (tuple, list)) or not block:
        raise TypeError(f"block must be a non-empty tuple of ints, got {block!r}")
    block = tuple(_int_arg(b, "block size") for b in block)
    if any(b <= 0 for b in block):
        raise ValueError(f"block sizes must be >= 1, got {block}")
    if len(block) > ndim:
        extra, block = block[:len(block) - ndim], block[len(block) - ndim:]
        if any(b != 1 for b in extra):
            raise ValueError(f"block {extra + block} has more non-unit dimensions than the "
                             f"{ndim}-dimensional input")
    return (1,) * (ndim - len(block)) + block


def _reciprocal(scale: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", over="ignore"):
        return np.asarray(_F32(1) / np.asarray(scale, dtype=np.float32), dtype=np.float32)


def _cast(y: np.ndarray, fmt: Format, **encode_options) -> np.ndarray:
    return encode(y, fmt, saturate=True, **encode_options)


def _scale_times(x: np.ndarray, scale_full: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        return np.multiply(x, scale_full, dtype=np.float32)


def _given_scale(scale, expected_shape, what="scale") -> np.ndarray:
    """Validate a caller-supplied scale: finite, > 0, the right shape."""
    s = np.asarray(scale)
    if s.dtype.kind not in "iuf":
        raise TypeError(f"{what} must be a real numeric array, got dtype {s.dtype}")
    s = s.astype(np.float32)
    if s.shape != tuple(expected_shape):
        if s.size == 1 and math.prod(expected_shape) == 1:
            s = s.reshape(expected_shape)
        else:
            raise ValueError(f"{what} has shape {s.shape}, expected {tuple(expected_shape)} "
                             "(one entry per block)")
    if not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise ValueError(f"{what} must be finite and > 0 everywhere")
    return s


# --------------------------------------------------------------------------- ScaledTensor

@dataclasses.dataclass(eq=False)
class ScaledTensor:
    """Narrow-float codes together with their scales.

    Attributes
    ----------
    codes : numpy.ndarray of uint8
        The codes, in the original shape.
    fmt : Format
        Element format.
    scale : numpy.ndarray of float32
        Multiplier applied before the cast, one entry per block
        (``ceil(shape / block)`` per dimension; shape ``()`` per tensor).
    scale_inv : numpy.ndarray of float32
        Dequantisation multiplier per block (``fl32(1/scale)``; an exact power
        of two for MX).
    block : tuple of int
        Block shape per dimension (``()`` for one scale per tensor).
    axis : int or None
        Axis along which blocks run (MX, NVFP4, row/column-wise), else None.
    shape : tuple of int
        Original shape.
    scale_codes : numpy.ndarray of uint8 or None
        MX only: the E8M0 codes of the scales.
    block_scale_codes : numpy.ndarray of uint8 or None
        NVFP4 only: the e4m3fn codes of the per-16-element scales.
    global_scale : numpy.float32 or None
        NVFP4 only: the per-tensor encode multiplier ``S_enc``.
    recipe : str
        Name of the quantizer that built it.

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> t = fp8emu.quantize_tensorwise(np.array([1.0, -2.0, 4.0]), "e4m3fn")
    >>> float(t.scale), t.dequantize().tolist()
    (112.0, [1.0, -2.0, 4.0])
    """

    codes: np.ndarray
    fmt: Format
    scale: np.ndarray
    scale_inv: np.ndarray
    block: tuple = ()
    axis: int | None = None
    shape: tuple = ()
    scale_codes: np.ndarray | None = None
    block_scale_codes: np.ndarray | None = None
    global_scale: np.float32 | None = None
    recipe: str = ""

    def __post_init__(self):
        self.fmt = _fmt(self.fmt)
        self.codes = np.asarray(self.codes)
        if self.codes.dtype != np.uint8:
            raise TypeError(f"codes must be uint8, got {self.codes.dtype}")
        self.shape = tuple(self.shape) if self.shape else self.codes.shape
        if self.codes.shape != self.shape:
            raise ValueError(f"codes have shape {self.codes.shape}, expected {self.shape}")
        self.block = tuple(self.block)
        if self.block:
            if len(self.block) != len(self.shape) or any(b <= 0 for b in self.block):
                raise ValueError(f"block {self.block} does not fit shape {self.shape}")
            expected = _blocks_shape(self.shape, self.block)
        else:
            expected = ()
        for name in ("scale", "scale_inv"):
            arr = np.asarray(getattr(self, name), dtype=np.float32)
            if arr.shape != expected:
                raise ValueError(f"{name} has shape {arr.shape}, expected {expected} "
                                 f"for shape {self.shape} and block {self.block}")
            setattr(self, name, arr)

    def dequantize(self, dtype=np.float32) -> np.ndarray:
        """Decoded values times ``scale_inv``, computed in float32.

        Parameters
        ----------
        dtype : numpy dtype, optional
            Type of the result (the float32 product is converted to it).

        Returns
        -------
        numpy.ndarray
            Array of the original shape.

        Examples
        --------
        >>> import numpy as np, fp8emu
        >>> fp8emu.quantize_mx(np.array([1.0, 3.0, -0.5]), "e4m3fn").dequantize().tolist()
        [1.0, 3.0, -0.5]
        """
        values = decode(self.codes, self.fmt, dtype=np.float32)
        if self.block:
            inv = _expand(self.scale_inv, self.block, self.shape)
        else:
            inv = self.scale_inv
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            out = np.multiply(values, inv, dtype=np.float32)
        return np.asarray(out).astype(dtype)


# --------------------------------------------------------------------------- current scaling

def _compute_scale(amax, scaled_max, pow2, eps) -> np.ndarray:
    """Transformer Engine ``compute_scale_from_amax``, vectorised, in float32."""
    amax = np.asarray(amax, dtype=np.float32)
    amax = np.where(amax < eps, eps, amax).astype(np.float32)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        scale = np.divide(_F32(scaled_max), amax, dtype=np.float32)
    scale = np.where(np.isinf(scale), _FLT_MAX, scale)
    scale = np.where(np.isnan(scale) | np.isinf(amax) | (amax == 0), _F32(1), scale)
    scale = np.asarray(scale, dtype=np.float32)
    if pow2:
        scale = (scale.view(np.uint32) & np.uint32(0xFF800000)).view(np.float32)
    return scale


def current_scale(amax, fmt, *, margin=0, pow2=False, eps=0.0) -> np.float32:
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
    """
    fmt = _fmt(fmt)
    margin = _int_arg(margin, "margin")
    eps = _eps_arg(eps)
    a = np.asarray(amax)
    if a.shape != () or a.dtype.kind not in "iuf":
        raise TypeError(f"amax must be a real scalar, got {amax!r}")
    return _F32(_compute_scale(np.abs(a.astype(np.float32)), _scaled_max(fmt, margin),
                               bool(pow2), eps)[()])


def _block_scales(xf, fmt, block, scale, margin, pow2, eps) -> np.ndarray:
    """Per-block scales: the given ones (validated), else current scaling of each block's amax."""
    if scale is not None:
        return _given_scale(scale, _blocks_shape(xf.shape, block))
    amax = _block_amax(xf, block)
    return _compute_scale(amax, _scaled_max(fmt, _int_arg(margin, "margin")), bool(pow2), _eps_arg(eps))


def _scaled_quantize(x, fmt, block, scale, *, axis=None, recipe="", **encode_options):
    """Cast with one scale per block (block () -> per tensor)."""
    full = _expand(scale, block, x.shape) if block else scale
    codes = _cast(_scale_times(x, full), fmt, **encode_options)
    return ScaledTensor(codes=codes, fmt=fmt, scale=scale, scale_inv=_reciprocal(scale),
                        block=block, axis=axis, shape=x.shape, recipe=recipe)


def quantize_tensorwise(x, fmt, *, margin=0, pow2=False, eps=0.0, scale=None) -> ScaledTensor:
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

    Returns
    -------
    ScaledTensor
        ``block == ()``, ``scale`` and ``scale_inv`` of shape ``()``.

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> t = fp8emu.quantize_tensorwise(np.array([0.5, -3.0, 0.01]), "e4m3fn")
    >>> t.codes.tolist(), float(t.scale_inv)
    ([105, 254, 60], 0.0066964286379516125)
    """
    fmt = _fmt(fmt)
    xf = _as_f32(x)
    if scale is None:
        amax = _amax_nan_ignoring(xf, None)
        s = _compute_scale(amax, _scaled_max(fmt, _int_arg(margin, "margin")), bool(pow2),
                           _eps_arg(eps))
    else:
        s = _given_scale(scale, ())
    return _scaled_quantize(xf, fmt, (), np.asarray(s, dtype=np.float32),
                            recipe="tensorwise")


# --------------------------------------------------------------------------- delayed scaling

def recipe_formats(fp8_format="HYBRID") -> dict:
    """Formats of Transformer Engine's ``Format`` choices.

    Parameters
    ----------
    fp8_format : {"E4M3", "E5M2", "HYBRID"}
        ``"HYBRID"``: E4M3 forward (activations, weights), E5M2 backward
        (gradients).

    Returns
    -------
    dict
        ``{"forward": name, "backward": name}``.

    Examples
    --------
    >>> import fp8emu
    >>> fp8emu.recipe_formats("HYBRID")
    {'forward': 'e4m3fn', 'backward': 'e5m2'}
    >>> fp8emu.recipe_formats("E4M3")["backward"]
    'e4m3fn'
    """
    if not isinstance(fp8_format, str):
        raise TypeError(f"fp8_format must be a string, got {fp8_format!r}")
    key = fp8_format.upper()
    table = {"E4M3": {"forward": "e4m3fn", "backward": "e4m3fn"},
             "E5M2": {"forward": "e5m2", "backward": "e5m2"},
             "HYBRID": dict(HYBRID)}
    if key not in table:
        raise ValueError(f"unknown fp8_format {fp8_format!r}; accepted: E4M3, E5M2, HYBRID")
    return dict(table[key])


class DelayedScaling:
    """Per-tensor delayed scaling (Transformer Engine ``DelayedScaling``).

    One object per tensor.  Each :meth:`quantize` call

    1. casts ``x`` with the current ``scale`` (``fl32(x * scale)``, saturating
       RNE cast; ``scale_inv = fl32(1/scale)``);
    2. records ``amax = max|x|`` (NaN ignored) in ``amax_history[0]``;
    3. updates the scale as Transformer Engine's ``amax_and_scale_update``
       kernel: ``amax_r = max(history)`` (NaN ignored) for ``"max"``, or
       ``history[0]`` for ``"most_recent"``; the history is rolled one step
       toward the front (``new[i] = old[i+1]``, ``new[-1] = old[0]``) and
       ``new[0] = 0``; ``scale = fl32(fl32(fp8_max * 2**-margin) / amax_r)``
       if ``amax_r`` is finite and > 0, otherwise the previous scale is
       kept; an infinite scale becomes ``FLT_MAX``.

    The first call uses scale 1 (the initial state).

    Parameters
    ----------
    fmt : str or Format
        Element format (see :func:`recipe_formats` for E4M3/E5M2/HYBRID).
    amax_history_len : int, keyword-only
        Length of the history (>= 1).
    amax_compute_algo : {"max", "most_recent"}, keyword-only
    margin : int, keyword-only

    Attributes
    ----------
    scale, scale_inv : numpy.float32
    amax_history : numpy.ndarray of float32, shape (amax_history_len,)

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> ds = fp8emu.DelayedScaling("e4m3fn", amax_history_len=4)
    >>> float(ds.quantize(np.array([2.0, -7.0])).scale)     # first step: scale 1
    1.0
    >>> float(ds.scale), ds.amax_history.tolist()           # 448 / 7, history rolled
    (64.0, [0.0, 0.0, 0.0, 7.0])
    >>> ds.quantize(np.array([3.5])).dequantize().tolist()
    [3.5]
    """

    def __init__(self, fmt, *, amax_history_len=1024, amax_compute_algo="max", margin=0):
        self.fmt = _fmt(fmt)
        self.amax_history_len = _int_arg(amax_history_len, "amax_history_len", minimum=1)
        if amax_compute_algo not in ("max", "most_recent"):
            raise ValueError(f"unknown amax_compute_algo {amax_compute_algo!r}; "
                             "accepted: 'max', 'most_recent'")
        self.amax_compute_algo = amax_compute_algo
        self.margin = _int_arg(margin, "margin")
        self.amax_history = np.zeros(self.amax_history_len, dtype=np.float32)
        self.scale = _F32(1)
        self.scale_inv = _F32(1)

    def quantize(self, x) -> ScaledTensor:
        """Cast ``x`` with the current scale, then record its amax and update.

        Parameters
        ----------
        x : array_like

        Returns
        -------
        ScaledTensor
            Per-tensor, with the scale in force before this call's update.
        """
        xf = _as_f32(x)
        out = _scaled_quantize(xf, self.fmt, (), np.asarray(self.scale, dtype=np.float32),
                               recipe="delayed")
        self.amax_history[0] = np.fmax(self.amax_history[0], _amax_nan_ignoring(xf, None))
        self._update()
        return out

    def _update(self):
        h = self.amax_history
        if self.amax_compute_algo == "max":
            amax = _F32(np.fmax.reduce(h))
        else:
            amax = h[0]
        self.amax_history = np.concatenate([[_F32(0)], h[2:], h[:1]]).astype(np.float32) \
            if len(h) > 1 else np.zeros(1, dtype=np.float32)
        if np.isfinite(amax) and amax > 0:
            with np.errstate(over="ignore"):
                s = _F32(_scaled_max(self.fmt, self.margin) / amax)
            self.scale = _FLT_MAX if np.isinf(s) else s
        self.scale_inv = _F32(_reciprocal(self.scale)[()])

    def __repr__(self):
        return (f"DelayedScaling({self.fmt.name!r}, amax_history_len={self.amax_history_len}, "
                f"amax_compute_algo={self.amax_compute_algo!r}, margin={self.margin}, "
                f"scale={float(self.scale)!r})")


# --------------------------------------------------------------------------- axis / block wise

def quantize_axiswise(x, fmt, *, axis=-1, margin=0, pow2=False, eps=0.0,
                      scale=None) -> ScaledTensor:
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

    Returns
    -------
    ScaledTensor

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> t = fp8emu.quantize_axiswise(np.array([[1.0, -2.0], [0.25, 0.5]]), "e4m3fn")
    >>> t.scale.tolist(), t.block
    ([[224.0], [896.0]], (1, 2))
    """
    fmt = _fmt(fmt)
    xf = _as_f32(x)
    if xf.ndim == 0:
        raise ValueError("quantize_axiswise needs an array with at least one dimension")
    ax = _axis_arg(axis, xf.ndim)
    block = tuple(max(s, 1) if d == ax else 1 for d, s in enumerate(xf.shape))
    s = _block_scales(xf, fmt, block, scale, margin, pow2, eps)
    return _scaled_quantize(xf, fmt, block, s, axis=ax, recipe="axiswise")


def quantize_blockwise(x, fmt, *, block=(1, 128), pow2=True, margin=0, eps=0.0,
                       scale=None) -> ScaledTensor:
    """Block-wise current scaling (Transformer Engine ``Float8BlockScaling``).

    The DeepSeek-V3 recipe: 1x128 blocks (activations, gradients) or 128x128
    blocks (weights), one scale per block from the block's amax with
    Transformer Engine's ``compute_scale_from_amax`` (see
    :func:`current_scale`; power-of-two scales by default, ``eps = 0``),
    then ``cast(fl32(x * scale))`` and ``scale_inv = 1 / scale``.  The block
    applies to the trailing dimensions (leading dimensions get block size
    1).  Partial blocks at the end are padded with zeros; an all-zero block
    gets scale 1.

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

    Returns
    -------
    ScaledTensor
        ``scale`` of shape ``ceil(shape / block)``.

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> x = np.arange(1.0, 4.0).reshape(1, 3)
    >>> t = fp8emu.quantize_blockwise(x, "e4m3fn", block=(1, 2))
    >>> t.scale.tolist(), t.dequantize().tolist()
    ([[128.0, 128.0]], [[1.0, 2.0, 3.0]])
    """
    fmt = _fmt(fmt)
    xf = _as_f32(x)
    if xf.ndim == 0:
        raise ValueError("quantize_blockwise needs an array with at least one dimension")
    blk = _block_arg(block, xf.ndim)
    s = _block_scales(xf, fmt, blk, scale, margin, pow2, eps)
    return _scaled_quantize(xf, fmt, blk, s, recipe="blockwise")


# --------------------------------------------------------------------------- MX

def _floor_log2_f32(a: np.ndarray) -> np.ndarray:
    """floor(log2 a) for positive finite float32 a (subnormals included), exactly."""
    _, e = np.frexp(a.astype(np.float64))
    return e.astype(np.int64) - 1


def _mx_exponent(amax: np.ndarray, fmt: Format, rule: str) -> np.ndarray:
    """Unbiased shared exponent (before clamping) for positive finite amax."""
    emax = int(math.floor(math.log2(fmt.max)))
    if rule == "floor":
        return _floor_log2_f32(amax) - emax
    if rule == "ceil":
        fl = _floor_log2_f32(amax)
        exact_pow2 = np.ldexp(np.float64(1), fl) == amax.astype(np.float64)
        return fl + (~exact_pow2) - emax
    if rule == "even":
        # torchao EVEN: round amax to the element's mantissa width (ties away),
        # keep the resulting binade: add half an element ulp to the float32 bits.
        bits = amax.view(np.uint32).astype(np.uint64) + np.uint64(1 << (22 - fmt.mbits))
        biased = (bits >> np.uint64(23)).astype(np.int64)
        # A carry into exponent 255 means the rounded amax is 2**128.
        e = np.where(biased == 0, -127, biased - 127)
        return e - emax
    # rceil (Transformer Engine / torchao RCEIL): ceil to a power of two of
    # fl32(amax * fl32(1 / max_elem)).
    rcp = _F32(_F32(1) / _F32(fmt.max))
    with np.errstate(over="ignore", under="ignore"):
        v = np.multiply(amax, rcp, dtype=np.float32)
    fl = _floor_log2_f32(np.where(v > 0, v, _F32(1)))
    exact_pow2 = np.ldexp(np.float64(1), fl) == v.astype(np.float64)
    e = fl + (~exact_pow2)
    return np.where(v > 0, e, -127)


def quantize_mx(x, elem_format, *, block=32, axis=-1, scale_rule="floor") -> ScaledTensor:
    """OCP Microscaling (MX v1.0): an E8M0 scale shared by ``block`` elements.

    The blocks run along ``axis``.  For each block, with ``amax = max|x|``
    and ``emax_elem = floor(log2(elem max))`` (8 for E4M3, 15 for E5M2, 2 for
    E2M3 and E2M1, 4 for E3M2), the shared exponent ``E`` is

    * ``"floor"`` (OCP MX v1.0 section 6.3): ``floor(log2 amax) - emax_elem``;
    * ``"ceil"``: ``ceil(log2 amax) - emax_elem`` (never saturates);
    * ``"even"`` (torchao ``EVEN``): amax first rounded to the element's
      mantissa width (half-ulp added to its float32 bits), then as floor;
    * ``"rceil"`` (Transformer Engine ``MXFP8BlockScaling`` /
      ``float_to_e8m0``, torchao ``RCEIL``):
      ``ceil(log2(fl32(amax * fl32(1/elem_max))))``.

    ``E`` is clamped to [-127, 127]; the scale code is ``E + 127`` and
    ``scale_inv = 2**E``.  Elements are ``cast(fl32(x * 2**-E))`` with
    round-to-nearest-even and saturation to +-max (the spec's clamping).

    Edge cases: an all-zero block gets ``E = -127`` (code 0) and zero
    elements; a subnormal amax clamps to ``E = -127``; a block holding Inf or
    NaN gets the NaN scale code 0xFF (``scale_inv`` NaN: the whole block
    dequantizes to NaN), its finite elements are cast with multiplier 1.
    Transformer Engine's kernel differs for blocks whose amax is below
    ``2**-127 * elem_max`` (it multiplies by 1 instead of ``2**127``) and for
    Inf (code 0xFE); those are not reproduced.  Partial blocks are padded
    with zeros.

    Parameters
    ----------
    x : array_like
    elem_format : {"e4m3fn", "e5m2", "e2m3fn", "e3m2fn", "e2m1fn"}
    block : int, keyword-only
        Elements per scale (32 in the spec).
    axis : int, keyword-only
    scale_rule : {"floor", "ceil", "even", "rceil"}, keyword-only

    Returns
    -------
    ScaledTensor
        With ``scale_codes`` (uint8 E8M0), ``scale = 2**-E``,
        ``scale_inv = 2**E``.

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> x = np.array([448.0, 1.0, -3.0, 0.0])
    >>> t = fp8emu.quantize_mx(x, "e4m3fn")           # floor(log2 448) - 8 = 0
    >>> t.scale_codes.tolist(), t.dequantize().tolist()
    ([127], [448.0, 1.0, -3.0, 0.0])
    >>> fp8emu.quantize_mx(x, "e4m3fn", scale_rule="ceil").scale_codes.tolist()
    [128]
    >>> fp8emu.quantize_mx(np.array([7.0]), "e2m1fn").dequantize().tolist()   # 7 -> E=0, saturates
    [6.0]
    """
    fmt = _fmt(elem_format)
    if fmt.name not in MX_ELEMENT_FORMATS:
        raise ValueError(f"unsupported MX element format {fmt.name!r}; accepted: "
                         + ", ".join(MX_ELEMENT_FORMATS))
    if scale_rule not in MX_SCALE_RULES:
        raise ValueError(f"unknown scale_rule {scale_rule!r}; accepted: "
                         + ", ".join(MX_SCALE_RULES))
    block = _int_arg(block, "block", minimum=1)
    xf = _as_f32(x)
    if xf.ndim == 0:
        raise ValueError("quantize_mx needs an array with at least one dimension")
    ax = _axis_arg(axis, xf.ndim)
    blk = tuple(block if d == ax else 1 for d in range(xf.ndim))

    xp = _pad_to_blocks(xf, blk)
    view, axes = _blocked_view(xp, blk)
    absv = np.abs(view)
    nonfinite = np.any(~np.isfinite(absv), axis=axes)
    amax = np.max(np.where(np.isfinite(absv), absv, _F32(0)), axis=axes,
                  initial=_F32(0)).astype(np.float32)
    pos = amax > 0
    e = _mx_exponent(np.where(pos, amax, _F32(1)), fmt, scale_rule)
    e = np.clip(np.where(pos, e, -127), -127, 127)
    codes_scale = np.where(nonfinite, 255, e + 127).astype(np.uint8)
    mult = np.where(nonfinite, _F32(1), np.ldexp(_F32(1), -e).astype(np.float32))
    inv = np.where(nonfinite, _F32(np.nan), np.ldexp(_F32(1), e).astype(np.float32))
    mult = mult.astype(np.float32)
    inv = inv.astype(np.float32)
    codes = _cast(_scale_times(xf, _expand(mult, blk, xf.shape)), fmt)
    return ScaledTensor(codes=codes, fmt=fmt, scale=mult, scale_inv=inv, block=blk, axis=ax,
                        shape=xf.shape, scale_codes=codes_scale, recipe=f"mx-{scale_rule}")


# --------------------------------------------------------------------------- NVFP4

def quantize_nvfp4(x, *, axis=-1, rounding="rne", rng=None, global_amax=None) -> ScaledTensor:
    """NVFP4 (Transformer Engine): E2M1 elements, an E4M3 scale per 16, a float32 tensor scale.

    In float32, following Transformer Engine's NVFP4 kernels
    (``compute_global_encode_scaling_factor_FP4``,
    ``compute_decoding_scaling_factor``, ``compute_scaling_coefficient``):

    1. ``S_enc = min(fl32(fl32(448 * 6) / global_amax), FLT_MAX)``; 1 if
       ``global_amax`` is 0 or the result is 0 (Inf amax);
    2. per block of 16 along ``axis``: ``s_b = e4m3fn(fl32(block_amax *
       fl32(S_enc * fl32(1/6))))`` (saturating RNE cast);
    3. ``scale_inv = fl32(float(s_b) * fl32(1 / S_enc))`` and
       ``scale = min(fl32(1 / scale_inv), FLT_MAX)`` (so a zero block scale
       gives ``scale = FLT_MAX``);
    4. elements ``e2m1fn(fl32(x * scale))``, saturating, with ``rounding``
       ``"rne"`` or ``"stochastic"`` (uses ``rng``).

    ``dequantize()`` returns ``element * scale_inv``.  The amax ignores NaN
    (CUDA ``fmaxf``); NaN elements become +6 (E2M1 has no NaN, as CUDA's
    ``__nv_cvt_float_to_fp4``) and +-Inf saturate to +-6.  Partial blocks are
    padded with zeros.

    Parameters
    ----------
    x : array_like
    axis : int, keyword-only
        Axis along which the 16-element blocks run.
    rounding : {"rne", "stochastic"}, keyword-only
    rng : numpy.random.Generator or int, optional, keyword-only
        Randomness for ``rounding="stochastic"``.
    global_amax : float, optional, keyword-only
        Per-tensor amax to use (default: ``max|x|``).

    Returns
    -------
    ScaledTensor
        ``fmt`` e2m1fn, ``block_scale_codes`` (e4m3fn codes),
        ``global_scale = S_enc``.

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> t = fp8emu.quantize_nvfp4(np.array([6.0, 1.0, -2.0, 0.5]))
    >>> float(t.global_scale), t.block_scale_codes.tolist(), t.dequantize().tolist()
    (448.0, [126], [6.0, 1.0, -2.0, 0.5])
    """
    if rounding not in ("rne", "stochastic"):
        raise ValueError(f"unknown rounding {rounding!r} for NVFP4; accepted: 'rne', 'stochastic'")
    if rounding != "stochastic" and rng is not None:
        raise ValueError("rng applies only to rounding='stochastic'")
    fmt = get_format("e2m1fn")
    e4m3 = get_format("e4m3fn")
    xf = _as_f32(x)
    if xf.ndim == 0:
        raise ValueError("quantize_nvfp4 needs an array with at least one dimension")
    ax = _axis_arg(axis, xf.ndim)
    blk = tuple(_NVFP4_BLOCK if d == ax else 1 for d in range(xf.ndim))

    if global_amax is None:
        gamax = _F32(_amax_nan_ignoring(xf, None))
    else:
        g = np.asarray(global_amax)
        if g.shape != () or g.dtype.kind not in "iuf":
            raise TypeError(f"global_amax must be a real scalar, got {global_amax!r}")
        gamax = _F32(g)
        if np.isnan(gamax) or gamax < 0:
            raise ValueError(f"global_amax must be >= 0 and not NaN, got {global_amax!r}")
    with np.errstate(divide="ignore", over="ignore"):
        s_enc = _F32(np.fmin(_F32(_F32(448) * _F32(6)) / gamax, _FLT_MAX))
    if gamax == 0 or s_enc == 0:
        s_enc = _F32(1)

    amax = _block_amax(xf, blk)
    factor = _F32(s_enc * _F32(_F32(1) / _F32(6)))
    with np.errstate(over="ignore"):
        s_dec = np.multiply(amax, factor, dtype=np.float32)
    bcodes = encode(s_dec, e4m3, saturate=True)
    s_dec_q = decode(bcodes, e4m3, dtype=np.float32)
    inv = np.multiply(s_dec_q, _F32(_F32(1) / s_enc), dtype=np.float32)
    scale = np.fmin(_reciprocal(inv), _FLT_MAX).astype(np.float32)

    options = {"rounding": rounding}
    if rounding == "stochastic":
        options["rng"] = rng
    codes = _cast(_scale_times(xf, _expand(scale, blk, xf.shape)), fmt, **options)
    return ScaledTensor(codes=codes, fmt=fmt, scale=scale, scale_inv=inv, block=blk, axis=ax,
                        shape=xf.shape, block_scale_codes=bcodes, global_scale=s_enc,
                        recipe="nvfp4")
