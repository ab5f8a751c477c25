"""The one input contract of :func:`fp8emu.attention.attention` and
:func:`fp8emu.attention.reference_attention`: Q, K, V shapes, dtypes and finiteness, the softmax
scale as the float32 it is used as, the causal flag and the padding length."""

from __future__ import annotations

import math

import numpy as np

from .recipes import F32, _WIDE, _f32_number


def _as_heads(x, what, dtype=F32):
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{what} must be a numeric array, got {type(x).__name__}")
    a = np.asarray(x)
    if a.dtype.kind not in "fiu" and a.dtype not in _WIDE.values():
        raise TypeError(f"{what} must be a real numeric array, got dtype {a.dtype}")
    if a.ndim == 2:
        a = a[None]
    if a.ndim != 3:
        raise ValueError(f"{what} must have shape (heads, tokens, dim) or (tokens, dim), got {a.shape}")
    with np.errstate(over="ignore"):
        a = a.astype(dtype)   # a copy: the caller's array is never modified
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{what} must be finite (NaN/Inf inputs are not modelled)")
    return a


def _validate(q, k, v, softmax_scale, causal, kv_len, dtype=F32):
    """The one contract of :func:`attention` and :func:`reference_attention` (inputs as ``dtype``)."""
    q, k, v = _as_heads(q, "q", dtype), _as_heads(k, "k", dtype), _as_heads(v, "v", dtype)
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
    _f32_number(softmax_scale, "softmax_scale", positive=True)   # the kernels fold it in float32
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    if kv_len is None:
        kv_len = Nk
    if isinstance(kv_len, bool) or not isinstance(kv_len, (int, np.integer)) or not 0 <= kv_len <= Nk:
        raise ValueError(f"kv_len must be an integer in [0, {Nk}], got {kv_len!r}")
    return q, k, v, float(softmax_scale), bool(causal), int(kv_len)
