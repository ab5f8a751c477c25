"""ScaledTensor and the block geometry and argument checks shared by the scaling recipes."""

from __future__ import annotations

import dataclasses
import math
import numbers

import numpy as np

from .. import parallel
from ..codec import decode, encode, encode_into
from ..formats import Format, get_format
from ..interop import code_array, real_values, source_array
from ..rounding import DETERMINISTIC_MODES, check_rounding
from ..tables import decode_dtype

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
    """x as a C-contiguous float32 array (the GPU kernels' compute type).

    Anything :func:`fp8emu.interop.source_array` takes is accepted: NumPy and ml_dtypes arrays, torch
    tensors on any device, JAX arrays, objects with ``__array__`` or ``__dlpack__``.  A C-contiguous
    float32 ndarray is returned as it is (no copy: the recipes only read it).
    """
    # np.asarray with order="C", not np.ascontiguousarray: that one turns a 0-d array into 1-d,
    # which would slip past the recipes' "at least one dimension" checks with a changed shape
    src = source_array(x, what)
    with np.errstate(over="ignore"):
        out = np.asarray(src, dtype=np.float32, order="C")
    src_dtype = getattr(src, "dtype", None)
    if src_dtype is not None and src_dtype.kind == "f" and src_dtype.itemsize > 4:
        # a finite float64 beyond float32's range became Inf here, and a recipe's Inf rule (a NaN MX block,
        # a saturated or zeroed tensor) was applied to a value the caller gave finite
        inf = np.isinf(out)
        over = inf & np.isfinite(src) if inf.any() else inf      # the float64 pass only where an Inf appeared
        if over.any():
            big = float(np.max(np.abs(np.asarray(src, np.float64)[over])))
            raise ValueError(f"{what} overflows float32, the type the recipe computes in: {int(over.sum())} finite "
                             f"value(s) round to Inf in float32 (largest magnitude {big:.6g}; float32's largest "
                             f"finite value is {float(np.finfo(np.float32).max):.6g})")
    return out


def size_arg(value, what, *, minimum=0) -> int:
    """A size or count: an integer (not a bool, not 3.7) >= ``minimum``."""
    return int_arg(value, what, minimum=minimum)


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


def given_amax_f32(g, given) -> np.ndarray:
    """A caller's amax ``g`` (a real NumPy array; ``given`` as it was passed) in float32, the type the NVFP4
    recipes compute in, or one ValueError: a NaN or a negative value; a finite value beyond float32 (read as Inf,
    with NumPy's cast warning) or a positive one below it (read as 0, the "no amax" rule).  An Inf or a 0 given
    keeps its rule.

    Examples
    --------
    >>> given_amax_f32(np.array(448.0), 448.0).tolist()
    448.0
    """
    g = np.asarray(g)
    with np.errstate(over="ignore", under="ignore"):
        amax = g.astype(np.float32)
    if np.any(np.isnan(amax)) or np.any(amax < 0):
        raise ValueError(f"global_amax must be >= 0 and not NaN, got {given!r}")
    g64 = g.astype(np.float64)
    if np.any(np.isfinite(g64) & ~np.isfinite(amax)):
        raise ValueError("global_amax overflows float32, the type the recipe computes in: "
                         f"{float(np.max(g64[np.isfinite(g64)]))!r} is beyond {float(FLT_MAX)!r}")
    if np.any((g64 > 0) & (amax == 0)):
        raise ValueError("global_amax underflows to 0 in float32, the type the recipe computes in: "
                         f"{float(np.min(g64[g64 > 0]))!r} is below 2**-149 (about 1.4e-45)")
    return amax


def amax_nan_ignoring(xp: np.ndarray, axes) -> np.ndarray:
    """max |x| over ``axes``, NaN ignored like CUDA's fmaxf (0 if all NaN).

    ``axes=None`` on a float32 array reduces in chunks (no full-size temporaries).
    """
    if axes is None and xp.dtype == np.float32 and xp.size > CHUNK_ELEMS:
        flat = np.ascontiguousarray(xp).reshape(-1)
        parts = np.zeros(-(-flat.size // CHUNK_ELEMS), np.float32)

        def work(c0, c1):
            for c in range(c0, c1):
                parts[c] = _amax_chunk(flat[c * CHUNK_ELEMS:(c + 1) * CHUNK_ELEMS], None)

        _over(parts.size, work, flat.size)
        return np.max(parts).astype(np.float32)
    return _amax_chunk(xp, axes)


def _amax_chunk(a, axes):
    a = np.abs(a)
    m = np.max(a, axis=axes, initial=F32(0))      # NaN propagates: such results are redone below
    if np.isnan(m).any():
        m = np.fmax.reduce(a, axis=axes, initial=F32(0))   # fmax ignores NaN, like CUDA's fmaxf
    return np.asarray(m, dtype=np.float32)


#: Elements per chunk of the recipes' fused passes (a few hundred kB of float32).
CHUNK_ELEMS = 1 << 17


def _over(n_chunks, fn, size):
    """``fn(c0, c1)`` over chunk-index ranges, spread over threads for large inputs."""
    nt = parallel.resolve_threads(None, size)
    parallel.run(fn, parallel.split(0, n_chunks, nt, 1), nt)


def _row_ranges(shape, b0):
    """Ranges of axis-0 indices, whole blocks of ``b0`` rows, of about CHUNK_ELEMS elements each."""
    per_row = max(1, math.prod(shape[1:]))
    rows = max(1, CHUNK_ELEMS // (per_row * b0)) * b0
    return [(r, min(shape[0], r + rows)) for r in range(0, shape[0], rows)]


def _block_abs_max(xs, block):
    """(max |x| per block with NaN propagating, |x| laid out for a redo, its block axes).

    ``xs`` holds whole block rows.  Blocks along the last axis alone are
    reduced from a transposed copy (one row per block position), as NumPy
    reduces across rows far faster than along a short contiguous axis.
    """
    b = block[-1]
    if b > 1 and all(v == 1 for v in block[:-1]) and xs.shape[-1] % b == 0:
        v = xs.reshape(-1, b)
        a = np.empty((b, v.shape[0]), np.float32)
        np.abs(v.T, out=a)
        m = np.max(a, axis=0)
        return m.reshape(blocks_shape(xs.shape, block)), a, 0
    view, axes = blocked_view(pad_to_blocks(xs, block), block)
    a = np.abs(view)
    return np.max(a, axis=axes, initial=F32(0)), a, axes


def block_amax_finite(x: np.ndarray, block):
    """(max |x| over the finite elements of each block, whether the block holds Inf or NaN).

    Computed in chunks of whole blocks of rows, so no full-size temporary is made.
    """
    nb = blocks_shape(x.shape, block)
    amax = np.empty(nb, np.float32)
    nonfinite = np.empty(nb, bool)
    ranges = _row_ranges(x.shape, block[0])

    def work(c0, c1):
        for r0, r1 in ranges[c0:c1]:
            m, a, axes = _block_abs_max(x[r0:r1], block)
            bad = ~np.isfinite(m)
            if bad.any():
                m = np.max(np.where(np.isfinite(a), a, F32(0)), axis=axes, initial=F32(0)).reshape(m.shape)
            b = slice(r0 // block[0], -(-r1 // block[0]))
            amax[b], nonfinite[b] = m, bad

    _over(len(ranges), work, x.size)
    return amax, nonfinite


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
    """max |x| of each block, NaN ignored (see :func:`amax_nan_ignoring`), in chunks of block rows."""
    amax = np.empty(blocks_shape(x.shape, block), np.float32)
    ranges = _row_ranges(x.shape, block[0])

    def work(c0, c1):
        for r0, r1 in ranges[c0:c1]:
            m, a, axes = _block_abs_max(x[r0:r1], block)
            if np.isnan(m).any():
                m = np.fmax.reduce(a, axis=axes, initial=F32(0)).reshape(m.shape)   # fmax ignores NaN
            amax[r0 // block[0]:-(-r1 // block[0])] = m

    _over(len(ranges), work, x.size)
    return amax


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
    src = real_values(scale, what, "a positive number or an array of them")
    with np.errstate(over="ignore", under="ignore"):     # overflow to Inf is reported below
        s = src.astype(np.float32)
    if np.all(np.isfinite(src)) and np.all(src > 0) and not (np.all(np.isfinite(s)) and np.all(s > 0)):
        # finite and positive as given, but not as the float32 it is used as: say which limit
        flo = float(np.finfo(np.float32).max)
        why = (f"overflows float32 (above {flo!r}, the largest finite float32)" if not np.all(np.isfinite(s))
               else "underflows to 0 in float32 (below 2**-149, about 1.4e-45, the smallest float32 > 0)")
        raise ValueError(f"{what} {why}, the type it is used in")
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
        NVFP4 only: the e4m3fn codes of the per-16-element scales (UE4M3:
        positive, so below 0x80; checked by :func:`code_array`).
    global_scale : numpy.float32 or None
        NVFP4 only: the per-tensor encode multiplier ``S_enc``.
    global_amax : numpy.float32 or None
        NVFP4 only: the tensor amax ``S_enc`` came from (a GEMM's alpha uses it).
    scale_max : numpy.float32 or None
        NVFP4 only: the block-scale target of ``S_enc`` (448 or 256 for E4M3).
    scale_format : Format or None
        The type of ``scale_format_codes`` (UE5M3, ``e5m3fnu``), for FP4 block
        scales of a type neither ``scale_codes`` (E8M0) nor ``block_scale_codes``
        (UE4M3) holds.
    scale_format_codes : numpy.ndarray of uint8 or None
        The block-scale codes in ``scale_format``.  ``block_scaled_mm`` and
        ``dequantize()`` take them; the kernel buffers of :mod:`fp8emu.layouts`
        do not (they refuse such a tensor as "not block-scaled").
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
    scale_format: Format | None = None
    scale_format_codes: np.ndarray | None = None

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
        if self.scale_codes is not None:
            self.scale_codes = code_array(self.scale_codes, 256, "scale_codes")
        if self.block_scale_codes is not None:
            self.block_scale_codes = code_array(self.block_scale_codes, 0x80, "block_scale_codes",
                                                held="UE4M3 block scales are positive: sign bit 0")
        if (self.scale_format is None) != (self.scale_format_codes is None):
            raise ValueError("scale_format and scale_format_codes come together (both or neither)")
        if self.scale_format is not None:
            self.scale_format = get_format(self.scale_format)
            self.scale_format_codes = code_array(self.scale_format_codes, 1 << self.scale_format.bits,
                                                 "scale_format_codes")

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
        dt = decode_dtype(dtype, "dequantize")
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


def scaled_cast(x, scale, block, fmt, **encode_options) -> np.ndarray:
    """``cast(fl32(x * scale), fmt)`` with one scale per block (``block == ()``: one scale).

    Fused in chunks of whole block rows (the multiply, the cast and the
    expansion of the scales never make a full-size temporary), spread over
    threads for large inputs.  The stochastic modes draw their random bits
    over the whole array in C order, so they take the unchunked path.
    """
    if (encode_options.get("rounding", "rne") not in DETERMINISTIC_MODES or "rng" in encode_options
            or "random_bits" in encode_options or x.size <= CHUNK_ELEMS):
        full = expand(scale, block, x.shape) if block else scale
        return cast(scale_times(x, full), fmt, **encode_options)
    if not block:
        out = np.empty(x.size, np.uint8)
        flat = np.ascontiguousarray(x).reshape(-1)
        s = np.asarray(scale, np.float32)

        def work(c0, c1):
            for c in range(c0, c1):
                sl = slice(c * CHUNK_ELEMS, (c + 1) * CHUNK_ELEMS)
                out[sl] = cast(scale_times(flat[sl], s), fmt, **encode_options)

        _over(-(-flat.size // CHUNK_ELEMS), work, x.size)
        return out.reshape(x.shape)
    out = np.empty(x.shape, np.uint8)
    ranges = _row_ranges(x.shape, block[0])
    # plain options: each chunk is encoded straight into its rows of ``out``
    direct = set(encode_options) <= {"rounding"} and fmt.bits <= 8

    def work(c0, c1):
        for r0, r1 in ranges[c0:c1]:
            xs = x[r0:r1]
            # a chunk of repeated scales multiplies far faster than a broadcast over short blocks
            full = expand(scale[r0 // block[0]:-(-r1 // block[0])], block, xs.shape)
            y = scale_times(xs, full)
            if direct:
                encode_into(y.reshape(-1), out[r0:r1].reshape(-1), fmt,
                             check_rounding(encode_options.get("rounding", "rne")), True)
            else:
                out[r0:r1] = cast(y, fmt, **encode_options)

    _over(len(ranges), work, x.size)
    return out


def scaled_quantize(x, fmt, block, scale, *, axis=None, recipe="", **encode_options):
    """Cast with one scale per block (block () -> per tensor)."""
    codes = scaled_cast(x, scale, block, fmt, **encode_options)
    return ScaledTensor(codes=codes, fmt=fmt, scale=scale, scale_inv=reciprocal(scale),
                        block=block, axis=axis, shape=x.shape, recipe=recipe)
