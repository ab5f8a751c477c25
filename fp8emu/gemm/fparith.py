"""Error-free float64 helpers: two-sum, one correct rounding of hi + lo, integers kept by a cast."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..interop import ML_NARROW_DTYPES

__all__ = ["two_sum", "round_hi_lo", "add_scaled_f32", "integers_kept"]

#: The wider types round_hi_lo rounds to (besides ml_dtypes' narrow ones).
_TARGETS = frozenset(map(np.dtype, (np.float32, np.float16, ml_dtypes.bfloat16)))


def two_sum(a, b):
    """``(s, e)`` with ``s = fl(a + b)`` and ``a + b = s + e`` exactly (Knuth's two-sum)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def round_hi_lo(hi, lo, dtype=np.float32):
    """Nearest-even rounding to ``dtype`` of the exact value ``hi + lo`` (float64 arrays with
    ``|lo| <= ulp64(hi)/2``, as :func:`two_sum` gives them; ``lo`` is 0 where ``hi`` is 0).
    ``dtype``: float32, float16, bfloat16 or an ml_dtypes type of 8 bits or fewer (a type, dtype or name;
    E8M0 rounds as its cast does).

    ``hi`` is first rounded to odd: where the sum is inexact and ``hi``'s last bit is even, it moves to
    its neighbour on ``lo``'s side.  That value is never a tie of a type with at most 51 significand
    bits, and lies on the same side of each of its ties as the exact sum, so the one cast that
    follows rounds as the exact sum would (a 16-bit type goes through odd float32 as well: ml_dtypes
    before 0.7 casts float64 to bfloat16 through float32, a second rounding).

    Examples
    --------
    >>> hi, lo = two_sum(np.array([1.0 + 2.0**-24]), np.array([2.0**-80]))   # just above a float32 tie
    >>> round_hi_lo(hi, lo).tolist(), hi.astype(np.float32).tolist()      # a cast of hi alone goes down
    ([1.0000001192092896], [1.0])
    """
    # the rounding to odd holds for types of at most 51 significand bits: float64 (and None, read as float64)
    # moved hi off its own nearest value by one ulp, an integer type truncated (2.9999 gave 2), bool and
    # complex took anything
    try:
        dt = None if dtype is None else np.dtype(dtype)
    except TypeError:                                    # a name NumPy does not know
        dt = None
    if dt not in _TARGETS and dt not in ML_NARROW_DTYPES:
        raise TypeError(f"round_hi_lo rounds to float32, float16, bfloat16 or an ml_dtypes type of 8 bits or "
                        f"fewer, got {dtype!r:.60} (in float64, two_sum's hi is hi + lo rounded already)")
    dtype = dt
    odd = _to_odd(np.asarray(hi, np.float64), np.asarray(lo, np.float64), np.int64)
    with np.errstate(over="ignore"):                     # beyond dtype is its Inf, as a cast
        if dtype.itemsize >= 4 or dtype == np.float16:   # NumPy's own casts round float64 once
            return odd.astype(dtype)
        f = odd.astype(np.float32)
        back = f.astype(np.float64)
        return _to_odd(f, np.where(np.isfinite(f), odd - back, 0.0), np.int32).astype(dtype)


def _to_odd(hi, lo, ints):
    """``hi`` rounded to odd given the sign of the exact remainder ``lo`` (NaN: none)."""
    bits = hi.view(ints)
    flip = -(np.signbit(hi) != np.signbit(lo)).astype(ints)      # -1 where hi and lo differ in sign
    move = ((np.abs(lo) > 0) & ((bits & 1) == 0)).astype(ints)
    return (bits + ((move ^ flip) - flip)).view(hi.dtype)


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
