"""The aligned sum of a tensor-core step: terms truncated onto the grid of the largest exponent and
added exactly.

A fused step (:mod:`fp8emu.gemm.datapaths`) truncates every term toward zero to a multiple of
``2**(E - F)`` (``E`` the step's largest exponent, ``F`` its fraction bits) and adds the truncated
terms exactly.  The reference steps and the fast routes (:mod:`fp8emu.gemm.routes`) share this
arithmetic: :func:`pow2` builds the aligning powers of two, :func:`trunc_sum` is the truncated sum
along K, :func:`fused_step` the whole step.
"""

from __future__ import annotations

import numpy as np

__all__ = ["pow2", "trunc_sum", "fused_step"]

#: Per float type: the integer type of its bits, its exponent bias, and its fraction bits.
_POW2 = {np.float64: (np.int64, 1023, 52), np.float32: (np.int32, 127, 23)}


def pow2(e, k=0, sign=1, dtype=np.float64):
    """``2.0 ** (k + sign * e)`` for integer arrays ``e`` (results normal in ``dtype``), built in the
    exponent field (no ``ldexp``: one add and one shift).

    Examples
    --------
    >>> pow2(np.array([3, -2]), 1).tolist(), pow2(np.array([3]), 13, -1, np.float32).tolist()
    ([16.0, 0.5], [1024.0])
    """
    it, bias, frac = _POW2[dtype]
    t = np.add(e, bias + k, dtype=it) if sign > 0 else np.subtract(bias + k, e, dtype=it)
    return np.left_shift(t, frac, out=t).view(dtype)


def trunc_sum(ps, f, dtype=np.float64):
    """``sum(trunc(ps * f))`` over axis 0, in ``dtype``, ``ps`` overwritten (the sum is exact: integers
    below 2**53, or 2**24 where the caller sums in float32).

    Examples
    --------
    >>> float(trunc_sum(np.array([1.75, 2.5, -0.75]), 2.0))     # 3 + 5 - 1
    7.0
    """
    np.multiply(ps, f, out=ps)
    np.trunc(ps, out=ps)
    return np.add.reduce(ps, axis=0, dtype=dtype)


def fused_step(terms, exps, c, ec, F, in32=False):
    """Exact sum of ``terms`` (L, ...; overwritten), with exponents ``exps``, and ``c`` (...), with
    exponents ``ec``, each truncated to ``2**(E - F)``, ``E`` the largest exponent of each output.
    ``in32``: ``terms`` are float32, every ``2**(F - E)`` is a normal float32 and every sum of the
    truncated terms lies below 2**24 (the caller checks): they are scaled and summed in float32,
    exactly, in half the memory traffic.

    Examples
    --------
    >>> t = np.array([[1.0], [2.0 ** -14]])                   # E = 0: the grid is 2**-13 for F = 13
    >>> fused_step(t, np.array([[0], [-14]]), np.array([0.0]), np.array([-127]), 13).tolist()
    [1.0]
    """
    E = np.maximum(exps.max(axis=0), ec)
    sc = pow2(E, F, -1)
    with np.errstate(invalid="ignore", over="ignore"):
        t = trunc_sum(terms, sc.astype(np.float32), np.float32).astype(np.float64) if in32 else trunc_sum(terms, sc)
        t += np.trunc(c * sc)
        t /= sc
        return t
