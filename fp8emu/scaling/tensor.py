"""ScaledTensor and the block geometry and argument checks shared by the scaling recipes."""

from __future__ import annotations

import dataclasses
import math
import numbers

import numpy as np

from ..codec import decode, encode
from ..formats import Format, get_format
from ..tables import DECODE_DTYPES, as_array

__all__ = ["ScaledTensor"]

F32 = np.float32
#: float32's largest finite value (Transformer Engine's fallback scale).
FLT_MAX = np.finfo(np.float32).max


def as_format(fmt) -> Format:
    """The element Format of a recipe: a signed format (an unsigned one such as
    e8m0fnu is a scale format and would turn every negative value into NaN)."""
    if not isinstance(fmt, (Format, str)):
        raise TypeError(f"fmt must be a format name or a Format, got {type(fmt).__name__}")
    fmt = get_format(fmt)
    if not fmt.signed:
        raise ValueError(f"{fmt.name} is unsigned (a scale format) and cannot be an element format; "
                         "use a signed format such as e4m3fn, e5m2 or e2m1fn")
    return fmt


def bool_arg(value, what) -> bool:
    """A real bool (a string such as "no" is truthy and would silently mean True)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what} must be a bool (True or False), got {value!r}")
    return bool(value)


def as_f32(x, what="x") -> np.ndarray:
    """x as a new float32 array (the GPU kernels' compute type).

    Anything :func:`fp8emu.tables.as_array` takes is accepted: NumPy and ml_dtypes arrays, torch
    tensors on any device, JAX arrays, objects with ``__array__`` or ``__dlpack__``.
    """
    arr = as_array(x, what)
    return np.array(arr, dtype=np.float32, copy=True)


def int_arg(value, what, *, minimum=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{what} must be an int, got {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {value}")
    return value


def eps_arg(eps):
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps must be a real number, got {eps!r}")
    e = F32(eps)
    if not np.isfinite(e) or e < 0:
        raise ValueError(f"eps must be finite and >= 0, got {eps!r}")
    return e


def axis_arg(axis, ndim):
    axis = int_arg(axis, "axis")
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for an array with {ndim} dimension(s)")
    return axis % ndim


def margin_range(fmt: Format) -> tuple[int, int]:
    """Margins for which ``fmt.max * 2**-margin`` is exact, finite and > 0 in float32."""
    e = int(np.frexp(fmt.max)[1]) - 1                 # fmt.max in [2**e, 2**(e+1))
    # below: the product stays under 2**128; above: its last significant bit (fmt.max
    # has at most mbits + 1 of them) stays at or above float32's 2**-149, and so does 2**-margin
    return max(e - 127, -127), min(e + 149 - fmt.mbits, 149)


def scaled_max(fmt: Format, margin: int) -> np.float32:
    """fp8_max * 2**-margin in float32 (Transformer Engine's ``scaled_max``).

    Raises ValueError when the margin makes it 0 or Inf (every scale would be 0 or Inf).
    """
    lo, hi = margin_range(fmt)
    if not lo <= margin <= hi:
        raise ValueError(f"margin must be in {lo}..{hi} for {fmt.name} (fmt.max * 2**-margin finite and "
                         f"> 0 in float32), got {margin}")
    return F32(F32(fmt.max) * F32(np.ldexp(1.0, -margin)))


def amax_nan_ignoring(xp: np.ndarray, axes) -> np.ndarray:
    """max |x| over ``axes``, NaN ignored like CUDA's fmaxf (0 if all NaN)."""
    a = np.abs(xp)
    a = np.where(np.isnan(a), F32(0), a)
    return np.max(a, axis=axes, initial=F32(0)).astype(np.float32)


def blocks_shape(shape, block):
    return tuple(-(-s // b) for s, b in zip(shape, block))


def effective_block(shape, block):
    """Block sizes capped at the axis lengths: a block larger than its axis is one block of the axis.

    The scale shape ``ceil(shape / block)`` is the same either way; capping keeps the
    padding (and memory) proportional to the input rather than to the block.
    """
    return tuple(max(1, min(b, s)) for s, b in zip(shape, block))


def pad_to_blocks(x: np.ndarray, block) -> np.ndarray:
    """Zero-pad every dimension up to a multiple of its (effective) block size."""
    block = effective_block(x.shape, block)
    pad = [(0, (-s) % b) for s, b in zip(x.shape, block)]
    if any(p for _, p in pad):
        x = np.pad(x, pad)
    return x


def blocked_view(xp: np.ndarray, block):
    """(n0, b0, n1, b1, ...) view of a padded array and the block axes."""
    block = effective_block(xp.shape, block)
    split = []
    for s, b in zip(xp.shape, block):
        split += [s // b, b]
    return xp.reshape(split), tuple(range(1, 2 * len(block), 2))


def block_amax(x: np.ndarray, block) -> np.ndarray:
    xp = pad_to_blocks(x, block)
    view, axes = blocked_view(xp, block)
    return amax_nan_ignoring(view, axes)


def expand(per_block: np.ndarray, block, shape) -> np.ndarray:
    """Repeat one value per block back to the (unpadded) element shape."""
    out = per_block
    for d, b in enumerate(effective_block(shape, block)):
        if b > 1:
            out = np.repeat(out, b, axis=d)
    return out[tuple(slice(0, s) for s in shape)]


def block_arg(block, ndim):
    """Normalise a block tuple to one positive entry per dimension (aligned right)."""
    if isinstance(block, numbers.Integral) and not isinstance(block, bool):
        block = (block,)
    if (not isinstance(block, (tuple, list)) or not block
            or any(isinstance(b, bool) or not isinstance(b, numbers.Integral) for b in block)):
        raise TypeError(f"block must be an int or a non-empty tuple of ints, e.g. (1, 128), got {block!r}")
    block = tuple(int(b) for b in block)
    if any(b <= 0 for b in block):
        raise ValueError(f"block sizes must be >= 1, got {block}")
    if len(block) > ndim:
        extra, block = block[:len(block) - ndim], block[len(block) - ndim:]
        if any(b != 1 for b in extra):
            raise ValueError(f"block {extra + block} has more non-unit dimensions than the "
                             f"{ndim}-dimensional input")
    return (1,) * (ndim - len(block)) + block


def reciprocal(scale: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", over="ignore"):
        return np.asarray(F32(1) / np.asarray(scale, dtype=np.float32), dtype=np.float32)


def cast(y: np.ndarray, fmt: Format, **encode_options) -> np.ndarray:
    return encode(y, fmt, saturate=True, **encode_options)


def scale_times(x: np.ndarray, scale_full: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        return np.multiply(x, scale_full, dtype=np.float32)


def given_scale(scale, expected_shape, what="scale") -> np.ndarray:
    """Validate a caller-supplied scale: finite, > 0, the right shape."""
    s = np.asarray(scale)
    if s.dtype.kind not in "iuf":
        raise TypeError(f"{what} must be a real numeric array, got dtype {s.dtype}")
    with np.errstate(over="ignore"):     # overflow to Inf is reported below
        s = s.astype(np.float32)
    if s.shape != tuple(expected_shape):
        if s.size == 1 and math.prod(expected_shape) == 1:
            s = s.reshape(expected_shape)
        else:
            raise ValueError(f"{what} has shape {s.shape}, expected {tuple(expected_shape)} "
                             "(one entry per block)")
    if not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise ValueError(f"{what} must be finite and > 0 everywhere (in float32)")
    if not np.all(np.isfinite(reciprocal(s))):
        # e.g. 1e-45: a float32 subnormal whose reciprocal (scale_inv) overflows to Inf
        raise ValueError(f"{what} must have a finite float32 reciprocal: it must be > 2**-128 "
                         "(about 2.9e-39) everywhere")
    return s


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
    global_amax : numpy.float32 or None
        NVFP4 only: the tensor amax ``S_enc`` came from (a GEMM's alpha uses it).
    scale_max : numpy.float32 or None
        NVFP4 only: the E4M3 block-scale target of ``S_enc`` (448 or 256).
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
    global_amax: np.float32 | None = None
    scale_max: np.float32 | None = None

    def __post_init__(self):
        self.fmt = as_format(self.fmt)
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
            expected = blocks_shape(self.shape, self.block)
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
        dtype : {float16, bfloat16, float32, float64}, optional
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
        try:
            dt = np.dtype(dtype)
        except TypeError:
            dt = None
        if dt not in DECODE_DTYPES:
            raise TypeError(f"unsupported dequantize dtype {dtype!r}; accepted: float16, bfloat16, "
                            "float32, float64")
        values = decode(self.codes, self.fmt, dtype=np.float32)
        if self.block:
            inv = expand(self.scale_inv, self.block, self.shape)
        else:
            inv = self.scale_inv
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            out = np.multiply(values, inv, dtype=np.float32)
        return np.asarray(out).astype(dt)


def prepare(x, fmt, recipe: str):
    """(Format, float32 copy of x) for a recipe that needs at least one dimension."""
    fmt = as_format(fmt)
    xf = as_f32(x)
    if xf.ndim == 0:
        raise ValueError(f"{recipe} needs an array with at least one dimension")
    return fmt, xf


def axis_block(ndim: int, axis, size: int):
    """(normalised axis, block tuple) for blocks of ``size`` elements running along ``axis``."""
    ax = axis_arg(axis, ndim)
    return ax, tuple(size if d == ax else 1 for d in range(ndim))


def scaled_quantize(x, fmt, block, scale, *, axis=None, recipe="", **encode_options):
    """Cast with one scale per block (block () -> per tensor)."""
    full = expand(scale, block, x.shape) if block else scale
    codes = cast(scale_times(x, full), fmt, **encode_options)
    return ScaledTensor(codes=codes, fmt=fmt, scale=scale, scale_inv=reciprocal(scale),
                        block=block, axis=axis, shape=x.shape, recipe=recipe)
