"""Error-free float64 helpers: two-sum, one correct rounding of hi + lo, rounding to n bits."""

from __future__ import annotations

import numpy as np

__all__ = ["two_sum", "round_hi_lo", "add_scaled_f32", "round_bits"]


def two_sum(a, b):
    """``(s, e)`` with ``s = fl(a + b)`` and ``a + b = s + e`` exactly (Knuth's two-sum)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def round_hi_lo(hi, lo, dtype=np.float32):
    """Nearest-even rounding to ``dtype`` of the exact value ``hi + lo`` (``|lo| <= ulp64(hi)/2``)."""
    dtype = np.dtype(dtype)
    r = hi.astype(dtype)
    back = r.astype(np.float64)
    diff = hi - back
    big = np.array(np.inf, dtype)
    other = np.nextafter(r, np.where(diff > 0, big, -big)).astype(np.float64)
    # hi exactly halfway between two neighbours: the tail decides the direction
    mid = (diff != 0) & (np.abs(diff) * 2 == np.abs(other - back)) & (lo != 0) & np.isfinite(hi)
    if np.any(mid):
        nudged = np.nextafter(hi, np.where(lo > 0, np.inf, -np.inf))
        r = np.where(mid, nudged.astype(dtype), r)
    return r


def add_scaled_f32(total, part, factor):
    """``fl32(total + part * factor)`` with one rounding (as an FMA into a float32 accumulator).

    ``part * factor`` must be exact in float64 (a tensor-core partial sum times a product of two
    scales is); the sum is then split error-free and rounded once to nearest even.
    """
    hi, lo = two_sum(np.asarray(total, np.float64), part * factor)
    return round_hi_lo(hi, lo)


def round_bits(x, bits, rounding):
    """Round float64 x to ``bits`` significant bits (toward zero or nearest even)."""
    _, e = np.frexp(x)
    s = np.ldexp(1.0, bits - e)
    y = x * s
    y = np.trunc(y) if rounding == "rtz" else np.rint(y)
    return y / s
