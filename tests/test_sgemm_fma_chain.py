"""A summation tree's float32 FMA chain (``fp8emu.gemm.sumtree``, as MKL's sgemm runs it) rounds once per step.

Expectations come from exact rational arithmetic (``fractions.Fraction``: ``c = RNE32(c + x_k y_k)``
with IEEE's rules for zeros, Inf and NaN) and, bit for bit including NaNs, from the chain as it was
before it was made fast (``_slow_chain`` below: a two-sum and one error-free rounding per step,
kept here as the reference).  The inputs are chosen to hit what a float64 sum rounded again to
float32 gets wrong: sums exactly at a float32 midpoint after the float64 rounding, at the overflow
threshold, in float32's subnormal range; plus cancellation, signed zeros, Inf and NaN.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from fp8emu.gemm import cpu_order, sumtree
from fp8emu.gemm.fparith import round_hi_lo, two_sum
from fp8emu.gemm.torch_cpu import _fma_chain, sgemm

_OVER = Fraction(2) ** 128 - Fraction(2) ** 103      # the least magnitude that rounds to Inf


def _slow_chain(x, y, k0, k1):
    """The chain before it was made fast (fp8emu at f957393), kept as a bit-exact reference."""
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    c = np.zeros((x.shape[0], y.shape[1]), np.float32)
    with np.errstate(all="ignore"):
        for k in range(k0, k1):
            hi, lo = two_sum(c.astype(np.float64), x64[:, k, None] * y64[None, k, :])
            c = round_hi_lo(hi, np.where(np.isfinite(hi), lo, 0.0))
    return c


def _naive_chain(x, y):
    """``fl32(fl64(c + x_k y_k))``: the double rounding the fast chain must correct."""
    c = np.zeros((x.shape[0], y.shape[1]), np.float32)
    with np.errstate(all="ignore"):
        for k in range(x.shape[1]):
            c = (c + x[:, k, None].astype(np.float64) * y[None, k, :]).astype(np.float32)
    return c


def _rne32(v: Fraction, sign_if_zero: float) -> float:
    """The float32 nearest to ``v`` (ties to even), as a Python float."""
    if v == 0:
        return math.copysign(0.0, sign_if_zero)
    a = abs(v)
    if a >= _OVER:
        return math.copysign(math.inf, v)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    q = Fraction(2) ** (max(e, -126) - 23)                 # float32's spacing at |v| (subnormals: 2**-149)
    n, rem = divmod(a / q, 1)
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2 == 1):
        n += 1
    return math.copysign(float(n * q), v)                   # exact: n * q is a float32


def _exact_chain(x, y):
    """``c = RNE32(c + x_k y_k)`` per output, exactly (IEEE zeros and specials)."""
    M, K = x.shape
    N = y.shape[1]
    out = np.zeros((M, N), np.float32)
    for m in range(M):
        for n in range(N):
            c = 0.0
            for k in range(K):
                p = float(x[m, k]) * float(y[k, n])          # exact: 48 bits, no float64 over/underflow
                if not (math.isfinite(c) and math.isfinite(p)):
                    c = c + p                                # Inf, NaN: IEEE
                    continue
                s = Fraction(c) + Fraction(p)
                # an exact zero sum is +0 unless both addends are -0 (round to nearest)
                zero_sign = -1.0 if (math.copysign(1, c) < 0 and math.copysign(1, p) < 0) else 1.0
                c = _rne32(s, zero_sign)
            out[m, n] = c
    return out


def _f32(v):
    return np.float32(v)


def _nasty(rng, shape, exps):
    """float32 values near powers of two (1 - 2**-24, 1, 1 + j 2**-23), random signs, exponents from ``exps``."""
    frac = rng.choice([1.0, 1 - 2.0 ** -24, 1 - 2.0 ** -23, 1 + 2.0 ** -23, 1 + 2 * 2.0 ** -23, 1 + 3 * 2.0 ** -23, 1.5,
                       1.5 + 2.0 ** -23, 1 + 2.0 ** -22 + 2.0 ** -23], size=shape)
    sign = rng.choice([-1.0, 1.0], size=shape)
    return (sign * np.ldexp(frac, rng.choice(exps, size=shape))).astype(np.float32)


def _same_bits(a, b):
    return np.array_equal(a.view(np.uint32), b.view(np.uint32))


def _same_values(a, b):
    """Equal bits, except that NaNs need only be NaN (the rational chain has no NaN payloads)."""
    nan = np.isnan(a)
    return np.array_equal(nan, np.isnan(b)) and _same_bits(np.where(nan, 0, a), np.where(nan, 0, b))


def test_a_tie_the_float64_sum_creates_is_rounded_by_the_exact_sum():
    # c = 1 + 2**-23 (odd); p = 2**-24 - 2**-70: the exact sum lies just below the midpoint
    # 1 + 2**-23 + 2**-24, its float64 rounding on it, and ties-to-even would go up to 1 + 2**-22
    x = np.array([[1 + 2.0 ** -23, 2.0 ** -24 * (1 + 2.0 ** -23)]] * 2, np.float32)
    y = np.array([[1.0, 1.0], [1 - 2.0 ** -23, 1 - 2.0 ** -23]], np.float32)
    assert _exact_chain(x, y)[0, 0] == _f32(1 + 2.0 ** -23)
    assert _naive_chain(x, y)[0, 0] == _f32(1 + 2.0 ** -22)           # the double rounding is real
    assert _same_bits(_fma_chain(x, y, 0, 2), _exact_chain(x, y))


def test_a_tie_at_the_overflow_threshold():
    # c = max float32; p = 2**103 - 2**57: the sum lies just below 2**128 - 2**103 (rounds to max),
    # its float64 rounding exactly on it (rounds to Inf)
    big = float(np.finfo(np.float32).max)
    x = np.array([[big, 2.0 ** 52 * (1 + 2.0 ** -23)]] * 2, np.float32)
    y = np.array([[1.0, 1.0], [2.0 ** 51 * (1 - 2.0 ** -23)] * 2], np.float32)
    assert _exact_chain(x, y)[0, 0] == _f32(big)
    assert np.isinf(_naive_chain(x, y)[0, 0])
    assert _same_bits(_fma_chain(x, y, 0, 2), _exact_chain(x, y))


def test_a_tie_in_the_subnormal_range():
    # c = 2**-140 + 2**-149 (a float32 subnormal); p = 2**-150 (1 - 2**-46): the float64 sum lands on
    # the subnormal midpoint c + 2**-150, the exact sum is below it
    x = np.array([[(2 ** 9 + 1) * 2.0 ** -80, 2.0 ** -75 * (1 + 2.0 ** -23)]] * 2, np.float32)
    y = np.array([[2.0 ** -69] * 2, [2.0 ** -75 * (1 - 2.0 ** -23)] * 2], np.float32)
    c = (2 ** 9 + 1) * 2.0 ** -149
    assert _exact_chain(x, y)[0, 0] == _f32(c)
    assert _naive_chain(x, y)[0, 0] == _f32(c + 2.0 ** -149)
    assert _same_bits(_fma_chain(x, y, 0, 2), _exact_chain(x, y))


def _traps(rng, M, K):
    """x (M, K), y (K,): every other product lands within 2**-46 of half an ulp of the running sum.

    Even k: a random addend (y_k = 1).  Odd k: ``y_k = 1 - 2**-23`` and ``x = ±h (1 + 2**-23)`` with
    ``h`` half the float32 spacing at the running sum, so ``p = ±h (1 - 2**-46)``: the float64 sum
    ``c + p`` rounds onto the float32 midpoint ``c ± h``, while the exact sum is just inside it.
    """
    y = np.where(np.arange(K) % 2, np.float32(1 - 2.0 ** -23), np.float32(1)).astype(np.float32)
    x = np.zeros((M, K), np.float32)
    for m in range(M):
        c = 0.0
        for k in range(K):
            if k % 2 == 0:
                x[m, k] = rng.standard_normal() * 2.0 ** int(rng.integers(-3, 4))
            else:
                h = float(np.spacing(np.float32(abs(c)))) / 2
                x[m, k] = rng.choice([-1, 1]) * h * (1 + 2.0 ** -23)
            c = _rne32(Fraction(c) + Fraction(float(x[m, k]) * float(y[k])), 1.0)
    return x, y


#: Column scales: the same traps in the normal range, near and in the subnormal range, near overflow.
_SCALES = [1.0, 2.0 ** -100, 2.0 ** -125, 2.0 ** -135, 2.0 ** -140, 2.0 ** 100, 2.0 ** 124]


@pytest.mark.parametrize("seed", range(3))
def test_the_chain_equals_exact_rational_fma_on_traps(seed):
    rng = np.random.default_rng(seed)
    x, y0 = _traps(rng, 6, 24)
    y = (y0[:, None] * np.array(_SCALES)[None, :]).astype(np.float32)
    want = _exact_chain(x, y)
    assert np.sum(_naive_chain(x, y) != want) >= 6        # the traps catch a float64 sum rounded again
    assert _same_values(_fma_chain(x, y, 0, 24), want)
    assert _same_bits(_fma_chain(x, y, 0, 24), _slow_chain(x, y, 0, 24))


@pytest.mark.parametrize("exps", [
    [0, -1, -23, -24, -25, -47, -48],               # ties and cancellation in the normal range
    [-60, -62, -63, -64, -70, -74, -75, -76],       # products and sums in float32's subnormal range
    [60, 62, 63, 64, 40, 0],                        # sums at and beyond the overflow threshold
])
@pytest.mark.parametrize("seed", range(3))
def test_the_chain_equals_exact_rational_fma(exps, seed):
    rng = np.random.default_rng(seed)
    x, y = _nasty(rng, (6, 24), exps), _nasty(rng, (24, 5), exps)
    x[rng.random(x.shape) < 0.1] = 0.0
    y[rng.random(y.shape) < 0.1] = -0.0
    want = _exact_chain(x, y)
    assert _same_values(_fma_chain(x, y, 0, 24), want)
    assert _same_bits(_fma_chain(x, y, 0, 24), _slow_chain(x, y, 0, 24))


def test_specials_and_signed_zeros():
    inf, nan = np.inf, np.nan
    x = np.array([[-0.0, -0.0, 1.0], [inf, 1.0, 1.0], [1.0, nan, 0.0], [inf, -inf, 1.0],
                  [1.0, -1.0, 0.0], [-0.0, 2.0 ** -100, 2.0 ** -100], [0.0, 0.0, inf]], np.float32)
    y = np.array([[1.0, 2.0], [1.0, 0.0], [-0.0, -(2.0 ** -60)]], np.float32)
    got = _fma_chain(x, y, 0, 3)
    assert _same_values(got, _exact_chain(x, y))
    assert _same_bits(got, _slow_chain(x, y, 0, 3))
    assert np.signbit(got[5, 1]) and got[5, 1] == 0          # -2**-160 rounds to -0
    assert np.isnan(got[3, 0]) and np.isnan(got[6, 0])         # Inf - Inf; Inf * -0
    assert got[1, 0] == np.inf and got[4, 0] == 0 and not np.signbit(got[4, 0])   # 1 - 1 is +0


@pytest.mark.parametrize("seed", range(4))
def test_the_chain_equals_the_slow_one_bit_for_bit_across_blocks(monkeypatch, seed):
    """Larger random shapes with every kind of input, cut into many small cache blocks."""
    monkeypatch.setattr(sumtree, "_CHAIN_ELEMS", 96)
    monkeypatch.setattr(sumtree, "_CHAIN_COLS", 16)
    rng = np.random.default_rng(100 + seed)
    M, K, N = 37, 50, 41
    exps = [[0, -24, -25, -48], [-63, -70, -75], [62, 63, 64, 0], list(range(-30, 31))][seed]
    x, y = _nasty(rng, (M, K), exps), _nasty(rng, (K, N), exps)
    wild = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-40, 3e38], np.float32)
    for v in (x, y):
        v.flat[rng.choice(v.size, v.size // 50, replace=False)] = rng.choice(wild, v.size // 50)
    assert _same_bits(_fma_chain(x, y, 3, 47), _slow_chain(x, y, 3, 47))


def test_sgemm_matches_the_slow_chain_on_gaussian_data():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((70, 500)).astype(np.float32)
    y = (rng.standard_normal((500, 9)) * 1e-3).astype(np.float32)
    want = _slow_chain(x, y, 0, 250) + _slow_chain(x, y, 250, 500)   # K = 500: two blocks of 250
    with cpu_order.use("mkl-2024.2-avx512"):          # the recorded model, not this machine's order
        assert _same_bits(sgemm(x, y), want)


def test_no_subnormal_check_where_no_sum_can_be_subnormal():
    from fp8emu.gemm.sumtree import may_reach_subnormals
    ones = np.ones((2, 2), np.float32)
    assert not may_reach_subnormals(ones * 2.0 ** -40, ones * 2.0 ** -40)    # spacing product 2**-126
    assert may_reach_subnormals(ones * 2.0 ** -40, ones * 2.0 ** -41)
    assert may_reach_subnormals(np.array([[1.0, 1e-45]], np.float32), ones)
    assert not may_reach_subnormals(np.zeros((2, 2), np.float32), ones)
