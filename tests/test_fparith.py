"""The error-free float64 helpers against exact rational arithmetic: ``round_hi_lo`` rounds ``hi + lo``
once, to nearest even, to float32, float16 and bfloat16 (ties, near-ties, subnormals, overflow)."""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from fp8emu.gemm.fparith import add_scaled_f32, round_hi_lo, two_sum

# (significand bits with the implicit one, lowest normal exponent, highest exponent): the IEEE 754 /
# bfloat16 constants, not read from NumPy or ml_dtypes
TYPES = {"float32": (np.float32, 24, -126, 127), "float16": (np.float16, 11, -14, 15),
         "bfloat16": (ml_dtypes.bfloat16, 8, -126, 127)}


def nearest_even(x: Fraction, p: int, emin: int, emax: int) -> float:
    """``x`` rounded once to nearest even in a binary type, as a Python float (``inf`` past the top)."""
    if x == 0:
        return 0.0
    a = abs(x)
    e = max(emin, math.floor(math.log2(a.numerator) - math.log2(a.denominator)))
    while Fraction(2) ** e > a and e > emin:     # log2 of a ratio can be off by one: settle it exactly
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    quantum = Fraction(2) ** (e - p + 1)
    n, rest = divmod(a, quantum)
    if rest * 2 > quantum or (rest * 2 == quantum and n % 2):
        n += 1
    v = n * quantum
    if v >= Fraction(2) ** (emax + 1):
        return math.copysign(math.inf, x)
    return math.copysign(float(v), x)


def _cases(dtype, p, emin, emax, n=4000, seed=0):
    """(hi, lo) pairs from two_sum: ties of ``dtype`` nudged by a tiny term, near-ties, subnormals,
    values at the overflow threshold and plain random sums."""
    rng = np.random.default_rng(seed)
    e = rng.integers(emin - p, emax + 1, n)
    sig = rng.integers(1 << (p - 1), 1 << p, n).astype(np.float64)
    tie = (sig + 0.5) * np.exp2((e - p + 1).astype(np.float64))       # halfway between two neighbours
    tiny = rng.choice([0.0, 1.0, -1.0], n) * np.exp2(rng.integers(-1074, -600, n).astype(np.float64))
    top = np.float64((2 - 2.0 ** (1 - p)) * 2.0 ** emax)              # the largest finite value
    over = top + 2.0 ** (emax - p) + np.array([-2.0 ** (emax - 60), 0.0, 2.0 ** (emax - 60)])  # its tie with Inf
    a = np.concatenate([tie, -tie, over, -over, rng.standard_normal(n) * 2.0 ** rng.integers(emin - p, emax, n)])
    b = np.concatenate([tiny, tiny, np.full(3, 2.0 ** -1000), np.full(3, -2.0 ** -1000),
                        rng.standard_normal(n) * 2.0 ** rng.integers(emin - 2 * p, emax, n)])
    with np.errstate(over="ignore", invalid="ignore"):
        return two_sum(a, b)


@pytest.mark.parametrize("name", TYPES)
def test_round_hi_lo_is_one_correct_rounding(name):
    dtype, p, emin, emax = TYPES[name]
    hi, lo = _cases(dtype, p, emin, emax)
    with np.errstate(over="ignore"):
        got = round_hi_lo(hi, lo, dtype).astype(np.float64)
    want = np.array([nearest_even(Fraction(h) + Fraction(lw), p, emin, emax) for h, lw in zip(hi, lo)])
    wrong = np.flatnonzero(got != want)
    assert wrong.size == 0, [(hi[i], lo[i], got[i], want[i]) for i in wrong[:5]]


def test_a_tie_nudged_by_a_tiny_term_goes_its_way():
    """The case a single cast gets wrong: hi is exactly a float32 tie and only lo decides."""
    hi = np.array([1.0 + 2.0 ** -24, 1.0 + 2.0 ** -24, 1.0 + 3 * 2.0 ** -24])
    lo = np.array([2.0 ** -90, -2.0 ** -90, -2.0 ** -90])
    assert round_hi_lo(hi, lo).tolist() == [1.0 + 2.0 ** -23, 1.0, 1.0 + 2.0 ** -23]
    assert hi.astype(np.float32).tolist() == [1.0, 1.0, 1.0 + 2.0 ** -22]        # what the cast alone gives


def test_zeros_and_infinities_keep_their_sign():
    hi = np.array([0.0, -0.0, np.inf, -np.inf, np.nan])
    lo = np.array([0.0, 0.0, np.nan, np.nan, np.nan])           # two_sum's remainder of an Inf is NaN
    got = round_hi_lo(hi, lo)
    assert got.dtype == np.float32
    assert np.signbit(got[:4]).tolist() == [False, True, False, True]
    assert got[:2].tolist() == [0.0, 0.0] and got[2:4].tolist() == [np.inf, -np.inf] and np.isnan(got[4])


def test_add_scaled_f32_rounds_the_fused_sum_once():
    rng = np.random.default_rng(3)
    total = rng.standard_normal(2000).astype(np.float32)
    part = rng.standard_normal(2000).astype(np.float32).astype(np.float64)
    factor = np.exp2(rng.integers(-30, 30, 2000).astype(np.float64))
    got = add_scaled_f32(total, part, factor)
    want = [nearest_even(Fraction(float(t)) + Fraction(p) * Fraction(f), 24, -126, 127)
            for t, p, f in zip(total, part, factor)]
    assert got.dtype == np.float32 and got.tolist() == want
