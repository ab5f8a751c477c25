"""Error-free float64 helpers: two-sum, one correct rounding of hi + lo, integers kept by a cast."""

from __future__ import annotations

import numpy as np

__all__ = ["two_sum", "round_hi_lo", "add_scaled_f32", "integers_kept"]


def two_sum(a, b):
    """``(s, e)`` with ``s = fl(a + b)`` and ``a + b = s + e`` exactly (Knuth's two-sum)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def round_hi_lo(hi, lo, dtype=np.float32):
    """Nearest-even rounding to ``dtype`` of the exact value ``hi + lo`` (``|lo| <= ulp64(hi)/2``)."""
    dtype = np.dtype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):   # beyond dtype is its Inf; Inf - Inf a NaN unused
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


def integers_kept(arr, cast) -> bool:
    """Whether ``cast`` (float32 or float64) holds every integer of ``arr`` exactly, where ``arr`` is
    an integer array (True for any other): a comparison in float64 cannot tell, as an int64 2**53 + 1
    rounds there too.

    Examples
    --------
    >>> a = np.array([2**53 + 1, 3]); integers_kept(a, a.astype(np.float64)), integers_kept(a[1:], a[1:] * 1.0)
    (False, True)
    """
    if arr.dtype.kind not in "iu":
        return True
    back = np.asarray(cast, np.float64)
    info = np.iinfo(arr.dtype)
    if not ((back >= float(info.min)) & (back < float(info.max) + 1.0)).all():   # float(2**63 - 1) is 2**63
        return False
    return bool(np.array_equal(back.astype(arr.dtype), arr))
