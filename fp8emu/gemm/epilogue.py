"""The GEMM epilogue shared by ``scaled_mm`` and ``block_scaled_mm``: scales as torch passes them,
IEEE specials, bias with one rounding and narrow outputs."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np

from ..codec import decode, encode
from ..formats import format_of_dtype, get_format
from ..interop import TORCH_NARROW_NAMES, real_values, to_numpy
from ..tables import SOURCE_DTYPES
from .code_tables import any_nonfinite
from .fparith import round_hi_lo, two_sum

__all__ = ["as_scale", "bias_values", "bias_in", "output_type", "result_scale", "special_masks", "ieee_specials",
           "to_output", "OUT_DTYPES"]

OUT_DTYPES = {n: SOURCE_DTYPES[n] for n in ("float32", "bfloat16", "float16")}


def bias_values(bias):
    """A bias as a NumPy array of its values: torch / ml_dtypes bfloat16 widened exactly to float32.

    Examples
    --------
    >>> import ml_dtypes
    >>> bias_values(np.array([1.5], ml_dtypes.bfloat16)).dtype.name
    'float32'
    """
    if bias is None:
        return None
    arr = to_numpy(bias, what="bias")
    if arr.dtype.kind not in "iuf":
        if arr.dtype.name != "bfloat16":
            raise TypeError(f"bias must be float32, float16 or bfloat16 values, got dtype {arr.dtype}")
        arr = arr.astype(np.float32)
    return arr


def bias_in(bias, target):
    """The bias as ``target`` values, the type it is added in; a finite value that overflows it is an
    error (a float64 1e39 became Inf there, and so did its column of the output, silently).

    Examples
    --------
    >>> bias_in(np.array([1.0, 65519.0]), np.float16).tolist()
    [1.0, 65504.0]
    >>> bias_in(np.array([1.0, 65520.0]), np.float16)
    Traceback (most recent call last):
    ...
    ValueError: bias overflows float16, the type it is added in: 1 finite value(s) round to Inf there (largest magnitude 65520)
    """
    wide = np.asarray(bias, np.float64)
    with np.errstate(over="ignore"):
        cast = wide.astype(target)
    over = np.isfinite(wide) & ~np.isfinite(cast.astype(np.float64))
    if over.any():
        raise ValueError(f"bias overflows {np.dtype(target).name}, the type it is added in: {int(over.sum())} finite "
                         f"value(s) round to Inf there (largest magnitude {float(np.abs(wide[over]).max()):.6g})")
    return cast


def as_scale(s, what, *, finite=True, stacklevel=3,
             specials="the result is multiplied by them in IEEE float32, as cuBLAS's epilogue, giving Inf or NaN"):
    """A scale as float32, as torch passes them.

    A finite value that overflows float32 (a float64 1e39) is always an error: torch could not pass it.
    ``finite=True``: an Inf or NaN is an error too.  ``finite=False`` (the dequantisation scales of
    ``scaled_mm``, which cuBLAS's epilogue multiplies in IEEE float32 whatever they hold: torchao's
    ``1 / scale`` of a tensor holding Inf is Inf): Inf and NaN are kept, with one RuntimeWarning saying
    the result follows IEEE arithmetic there (``specials``: what the warning says the kernel makes of them).
    """
    src = real_values(s, what)
    with np.errstate(over="ignore"):
        arr = src.astype(np.float32)
    bad = ~np.isfinite(arr)
    if bad.any():
        limit = float(np.finfo(np.float32).max)
        over = bad & np.isfinite(src)
        if over.any():      # a finite 1e39 was said to be "non-finite"
            big = float(np.max(np.abs(src[over].astype(np.float64))))
            raise ValueError(f"{what} overflows float32, the type torch passes scales in: its largest magnitude "
                             f"{big:.6g} is beyond {limit:g} (a scale must be finite in float32)")
        if finite:
            raise ValueError(f"{what} must be finite in float32 (|scale| <= {limit:g}), got non-finite values")
        warnings.warn(f"{what} holds {int(bad.sum())} Inf or NaN value(s): {specials}", RuntimeWarning,
                      stacklevel=stacklevel)
    return arr


def _dtype_name(out_dtype):
    """A torch dtype (``torch.bfloat16``, ``torch.float8_e4m3fn``) as fp8emu's name for it: a narrow
    one through the ml_dtypes type of the same name and the one map between formats and dtypes
    (:func:`fp8emu.formats.format_of_dtype`)."""
    if type(out_dtype).__module__ == "torch" and type(out_dtype).__name__ == "dtype":
        name = str(out_dtype).removeprefix("torch.")
        fmt = format_of_dtype(getattr(ml_dtypes, name)) if name in TORCH_NARROW_NAMES else None
        return name if fmt is None else fmt.name
    return out_dtype


def output_type(out_dtype):
    """``(numpy dtype, None)`` for float32 / bfloat16 / float16, ``(None, Format)`` for a narrow output.

    Examples
    --------
    >>> output_type("bfloat16")[0].name, output_type("e5m2")[1].name
    ('bfloat16', 'e5m2')
    """
    out_dtype = _dtype_name(out_dtype)
    if isinstance(out_dtype, str) and out_dtype in OUT_DTYPES:
        return OUT_DTYPES[out_dtype], None
    try:
        dt = np.dtype(out_dtype)
        if dt in OUT_DTYPES.values():
            return dt, None
    except TypeError:
        pass
    try:
        return None, get_format(out_dtype)
    except (ValueError, TypeError, KeyError):
        raise ValueError(f"unknown out_dtype {out_dtype!r}; use 'float32', 'bfloat16', 'float16', "
                         "an FP8 format name, or the matching torch dtype") from None


def result_scale(scale_result, ofmt):
    if scale_result is None:
        return None
    if ofmt is None:
        raise ValueError("scale_result applies only to a narrow (FP8) out_dtype")
    s = as_scale(scale_result, "scale_result")
    if s.size != 1:
        raise ValueError("scale_result must be a scalar")
    return s


def special_masks(da, db):
    """(+Inf, -Inf, NaN) masks of the (M, N) results of ``da @ db`` under IEEE rules for Inf/NaN
    operands, from the operands' decoded values (M, K) and (K, N)."""
    da, db = np.asarray(da, np.float64), np.asarray(db, np.float64)
    f = np.float64
    ia_p, ia_n = (da == np.inf).astype(f), (da == -np.inf).astype(f)
    ib_p, ib_n = (db == np.inf).astype(f), (db == -np.inf).astype(f)
    pa, na_ = ((da > 0) & ~np.isnan(da)).astype(f), ((da < 0) & ~np.isnan(da)).astype(f)
    pb, nb_ = ((db > 0) & ~np.isnan(db)).astype(f), ((db < 0) & ~np.isnan(db)).astype(f)
    pos = ia_p @ pb + ia_n @ nb_ + pa @ ib_p + na_ @ ib_n
    neg = ia_p @ nb_ + ia_n @ pb + pa @ ib_n + na_ @ ib_p
    nan = (np.isnan(da).astype(f).sum(1)[:, None] + np.isnan(db).astype(f).sum(0)[None, :]
           + (ia_p + ia_n) @ (db == 0).astype(f) + (da == 0).astype(f) @ (ib_p + ib_n))
    return pos > 0, neg > 0, (nan > 0) | ((pos > 0) & (neg > 0))


def ieee_specials(v, ca, fa, cb, fb):
    """IEEE semantics for NaN/Inf operands (the kernels work on finite values)."""
    if not (any_nonfinite(ca, fa) or any_nonfinite(cb, fb)):
        return v
    pos, neg, nan = special_masks(decode(ca, fa, dtype=np.float64), decode(cb, fb, dtype=np.float64))
    return np.where(nan, np.float32(np.nan), np.where(pos, np.float32(np.inf),
                                                      np.where(neg, np.float32(-np.inf), v)))


def to_output(v, bias, odt, ofmt, scale_result):
    """Add the bias with one rounding to the output type; narrow outputs are scaled and cast."""
    target = odt if odt is not None else np.dtype(np.float32)
    N = v.shape[1]
    if bias is not None:
        bias = real_values(bias_values(bias), "bias", "an array of floats").astype(np.float64)
        if bias.shape not in ((N,), (1, N)):
            raise ValueError(f"bias must have shape ({N},), got {bias.shape}")
        bias = bias_in(bias.reshape(1, N), target).astype(np.float64)
        with np.errstate(invalid="ignore"):
            hi, lo = two_sum(v.astype(np.float64), bias)
            lo = np.where(np.isfinite(hi), lo, 0.0)
        out = round_hi_lo(hi, lo, target)
    else:
        out = v.astype(target)
    if ofmt is None:
        return out
    if scale_result is not None:
        out = (out * scale_result).astype(np.float32)
    return encode(out, ofmt, saturate=True)
