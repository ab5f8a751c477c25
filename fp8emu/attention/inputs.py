"""The one input contract of :func:`fp8emu.attention.attention` and
:func:`fp8emu.attention.reference_attention`: Q, K, V shapes, dtypes and finiteness, the softmax
scale as the float32 it is used as, the causal flag and the padding length; and the checks of a real
number as the float32 it is used as and of an operand format name, which the recipes make too."""

from __future__ import annotations

import math

import numpy as np

from ..formats import get_format
from ..gemm.wide_inputs import WIDE_INPUTS

F32 = np.float32
#: The 16-bit operand types attention's kernels take besides the 8-bit formats, by name: their dtypes.
WIDE = {n: WIDE_INPUTS[n].dtype for n in ("bfloat16", "float16")}


def f32_number(v, what, *, positive, reciprocal=False):
    """Check a real number as the float32 it is used as: finite, > 0 (``positive``) or >= 0, and
    (``reciprocal``) with a finite float32 ``fl32(1 / v)``.  A value that is fine in float64 but
    overflows or flushes to zero in float32 would otherwise give NaN/Inf outputs silently.

    Examples
    --------
    >>> f32_number(0.125, "p_scale", positive=True)
    >>> f32_number(1e-46, "p_scale", positive=True)
    Traceback (most recent call last):
    ...
    ValueError: p_scale must be a finite number > 0 as float32 (the type it is used in); got 1e-46, ...
    """
    want = "> 0" if positive else ">= 0"
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.floating, np.integer)):
        raise ValueError(f"{what} must be a finite real number {want}, got {v!r}")
    try:
        f = float(v)
    except OverflowError:        # a Python int past float64 (2**1100): Python's "int too large to convert"
        f = math.inf if v > 0 else -math.inf
    with np.errstate(over="ignore", divide="ignore"):
        v32 = F32(f)
        inv = F32(1.0 / f) if reciprocal and f != 0 and math.isfinite(f) else F32(1)
    if not np.isfinite(v32) or v32 < 0 or (positive and v32 == 0) or (v32 == 0) != (v == 0) \
            or not np.isfinite(inv):
        shown = repr(v) if len(repr(v)) <= 40 else f"{repr(v)[:12]}... (an integer of {len(str(abs(v)))} digits)"
        raise ValueError(f"{what} must be a finite number {want} as float32 (the type it is used in)"
                         + (", with a finite float32 reciprocal" if reciprocal else "")
                         + f"; got {shown}, which is {float(v32)!r} in float32")


def operand_format(name, what, allow_none=True):
    """The name of an operand type a recipe or :func:`~fp8emu.attention.quantize_qkv` names: a format of
    at most 8 bits, ``"bfloat16"`` or ``"float16"`` (:data:`WIDE`), or ``None`` where ``allow_none``.

    Examples
    --------
    >>> operand_format("e4m3", "q_format"), operand_format("bfloat16", "k_format"), operand_format(None, "x")
    ('e4m3', 'bfloat16', None)
    """
    if name is None:
        if allow_none:
            return None
        raise ValueError(f"{what} must be a format name")
    if isinstance(name, str) and name in WIDE:
        return name
    try:
        fmt = get_format(name)
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"{what} must be an 8-bit format name, 'bfloat16', 'float16' or None, "
                         f"got {name!r}") from None
    if fmt.bits > 8:
        raise ValueError(f"{what} must be a format of at most 8 bits, got {fmt.name}")
    return fmt.name


def as_heads(x, what, dtype=F32):
    """``x`` as a finite (heads, tokens, dim) copy of type ``dtype`` ((tokens, dim): one head).

    Examples
    --------
    >>> as_heads(np.ones((4, 8)), "q").shape, as_heads(np.ones((4, 8)), "q").dtype.name
    ((1, 4, 8), 'float32')
    """
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{what} must be a numeric array, got {type(x).__name__}")
    a = np.asarray(x)
    if a.dtype.kind not in "fiu" and a.dtype not in WIDE.values():
        raise TypeError(f"{what} must be a real numeric array, got dtype {a.dtype}")
    if a.ndim == 2:
        a = a[None]
    if a.ndim != 3:
        raise ValueError(f"{what} must have shape (heads, tokens, dim) or (tokens, dim), got {a.shape}")
    if not np.all(np.isfinite(a)):   # in the caller's own type: a NaN or Inf there is one
        raise ValueError(f"{what} must be finite (NaN/Inf inputs are not modelled)")
    with np.errstate(over="ignore"):
        out = a.astype(dtype)   # a copy: the caller's array is never modified
    _no_overflow(a, out, what)
    return out


def _largest(a) -> str:
    big = np.max(np.abs(a))
    return repr(float(big)) if np.isfinite(float(big)) else np.format_float_scientific(big, trim="-")


def _no_overflow(src, cast, what):
    """A finite ``src`` whose conversion ``cast`` holds an Inf overflowed the kernel's type: say so,
    with that type's largest finite value (a finite input is not "not finite")."""
    bad = ~np.isfinite(cast)
    if np.any(bad):
        t = cast.dtype.name
        raise ValueError(f"{what} overflows {t}, the type the kernel computes in: {int(bad.sum())} finite "
                         f"value(s) exceed the largest finite {t}, {float(np.finfo(cast.dtype).max)!r}, in "
                         f"magnitude (the largest is {_largest(src[bad])}); scale it down first")


def positive_f32(values, what, *, reciprocal):
    """``values`` (float64) as float32 > 0, with (``reciprocal``) a finite float32 ``1 / v``: refused as
    not finite or not > 0 where that is so, otherwise as overflowing or flushing to zero in float32."""
    d = np.asarray(values, np.float64)
    if not (np.all(np.isfinite(d)) and np.all(d > 0)):
        raise ValueError(f"{what} must be finite and positive, got {d.tolist()!r}")
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        d32 = d.astype(F32)
        inv = np.divide(F32(1), d32, dtype=F32)
    _no_overflow(d, d32, what)
    if np.any(d32 == 0):
        tiny = float(np.finfo(F32).smallest_subnormal)
        raise ValueError(f"{what} underflows to 0 in float32, the type the kernel uses: "
                         f"{d[d32 == 0].tolist()!r} (the smallest float32 > 0 is {tiny!r})")
    if reciprocal and not np.all(np.isfinite(inv)):
        raise ValueError(f"{what} has a float32 reciprocal that overflows (the kernel uses 1/{what} too): "
                         f"{d[~np.isfinite(inv)].tolist()!r}; each must be at least 2**-128 (about 2.9e-39)")
    return d32, inv


def validate(q, k, v, softmax_scale, causal, kv_len, dtype=F32):
    """The one contract of :func:`attention` and :func:`reference_attention` (inputs as ``dtype``)."""
    q, k, v = as_heads(q, "q", dtype), as_heads(k, "k", dtype), as_heads(v, "v", dtype)
    H, Nq, d = q.shape
    Hk, Nk, dk = k.shape
    if H == 0 or Nq == 0 or d == 0 or v.shape[2] == 0:
        # an empty query or head dim has nothing to attend with (an empty key/value set is allowed:
        # it gives zeros, as the kernels' empty rows do)
        raise ValueError(f"q needs at least one head, token and head-dim element, and v at least one "
                         f"head-dim element; got q {q.shape}, v {v.shape}")
    if dk != d:
        raise ValueError(f"q and k must have the same head dim, got {d} and {dk}")
    if v.shape[:2] != (Hk, Nk):
        raise ValueError(f"v must have shape ({Hk}, {Nk}, dv) like k, got {v.shape}")
    if Hk == 0 or H % Hk:
        raise ValueError(f"the number of query heads ({H}) must be a multiple of the KV heads ({Hk})")
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(d) if d else 1.0
    if isinstance(softmax_scale, (bool, np.bool_)) or not isinstance(softmax_scale, (int, float, np.floating,
                                                                                     np.integer)):
        raise ValueError(f"softmax_scale must be a finite positive number, got {softmax_scale!r}")
    f32_number(softmax_scale, "softmax_scale", positive=True)   # the kernels fold it in float32
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    if kv_len is None:
        kv_len = Nk
    if isinstance(kv_len, bool) or not isinstance(kv_len, (int, np.integer)) or not 0 <= kv_len <= Nk:
        raise ValueError(f"kv_len must be an integer in [0, {Nk}], got {kv_len!r}")
    return q, k, v, float(softmax_scale), bool(causal), int(kv_len)
