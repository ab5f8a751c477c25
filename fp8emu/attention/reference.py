"""Float64 attention of exact inputs: the reference the emulated kernels are measured against."""

from __future__ import annotations

import numpy as np

from .inputs import validate

__all__ = ["reference_attention"]


def reference_attention(q, k, v, *, causal=False, kv_len=None, softmax_scale=None, block_n=1024):
    """Exact-input float64 attention (blocked over keys; memory O(Nq x block_n)).

    Returns ``(out, lse)`` as float64 arrays of shapes (H, Nq, dv) and (H, Nq);
    fully masked rows give 0 and -inf.

    Examples
    --------
    >>> import math
    >>> o, l = reference_attention(np.zeros((1, 2, 4)), np.zeros((1, 3, 4)), np.ones((1, 3, 4)))
    >>> o[0, 0].tolist(), round(float(l[0, 0]), 12) == round(math.log(3), 12)
    ([1.0, 1.0, 1.0, 1.0], True)
    """
    q, k, v, scale, causal, kv_len = validate(q, k, v, softmax_scale, causal, kv_len, np.float64)
    if isinstance(block_n, (bool, np.bool_)) or not isinstance(block_n, (int, np.integer)) or block_n < 1:
        raise ValueError(f"block_n must be a positive integer, got {block_n!r}")
    H, Nq, d = q.shape
    Hk, Nk, dv = v.shape
    group = H // Hk
    out = np.zeros((H, Nq, dv))
    lse = np.full((H, Nq), -np.inf)
    qpos = np.arange(Nq)[:, None] + (Nk - Nq)
    for h in range(H):
        m = np.full(Nq, -np.inf)
        l = np.zeros(Nq)
        o = np.zeros((Nq, dv))
        for b0 in range(0, Nk, block_n):
            b1 = min(Nk, b0 + block_n)
            s = (q[h] @ k[h // group, b0:b1].T) * scale
            keys = np.arange(b0, b1)[None, :]
            mask = (keys >= kv_len) | ((keys > qpos) if causal else False)
            s = np.where(mask, -np.inf, s)
            m_new = np.maximum(m, s.max(axis=1))
            safe = np.where(np.isinf(m_new), 0.0, m_new)
            a = np.exp(np.where(np.isinf(m), -np.inf, m - safe))
            p = np.exp(s - safe[:, None])
            l = l * a + p.sum(1)
            o = o * a[:, None] + p @ v[h // group, b0:b1]
            m = m_new
        ok = l > 0
        out[h][ok] = o[ok] / l[ok, None]
        lse[h][ok] = m[ok] + np.log(l[ok])
    return out, lse
