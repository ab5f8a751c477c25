"""Twelfth audit, part A (#2): ``fparith.round_hi_lo``'s ``dtype`` argument.

Before the fix any dtype was cast to after the rounding to odd, which holds only for types of at most 51
significand bits: float64 (and ``None``, which NumPy reads as float64) returned hi moved to its odd
neighbour, one ulp off the nearest value of hi + lo; an integer type truncated (2.9999... gave 2); bool and
complex took anything.  Expectations are exact rationals (``fractions``), not the code under test."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from fp8emu.gemm.fparith import round_hi_lo, two_sum


@pytest.mark.parametrize("dtype", [np.float64, None, np.longdouble, np.int32, np.uint8, bool, np.complex64,
                                   "garbage", ml_dtypes.int4])
def test_types_it_cannot_round_to_are_one_line(dtype):
    hi, lo = two_sum(np.array([1.0, 3.0]), np.array([2.0 ** -60, -2.0 ** -70]))
    with pytest.raises(TypeError, match=r"round_hi_lo rounds to float32, float16, bfloat16 or an ml_dtypes type"):
        round_hi_lo(hi, lo, dtype)


@pytest.mark.parametrize("dtype", [np.float32, "float32", np.dtype(np.float16), ml_dtypes.bfloat16,
                                   ml_dtypes.float8_e4m3fn, "float8_e5m2", ml_dtypes.float4_e2m1fn])
def test_the_types_it_rounds_to_round_as_exact_arithmetic_says(dtype):
    # 1 + 2**-4 + 2**-3 * tiny: just above a tie of every type of at most 3 fraction bits but none of more;
    # 3 - tiny: just below 3 (a value of every type listed)
    hi, lo = two_sum(np.array([1.0 + 2.0 ** -4, 3.0]), np.array([2.0 ** -70, -2.0 ** -70]))
    got = round_hi_lo(hi, lo, dtype).astype(np.float64)
    exact = [Fraction(1) + Fraction(1, 16) + Fraction(1, 2 ** 70), Fraction(3) - Fraction(1, 2 ** 70)]
    vals = np.unique(np.arange(256, dtype=np.uint8).view(np.dtype(dtype)).astype(np.float64)) \
        if np.dtype(dtype).itemsize == 1 else None
    for g, x in zip(got, exact):
        if vals is None:                          # float32 / float16 / bfloat16: 1.0625 is a value, 3 too
            assert Fraction(float(g)) == (Fraction(17, 16) if x < 2 else Fraction(3))
        else:                                     # the nearest value of the narrow type (no tie here)
            finite = vals[np.isfinite(vals)]
            assert float(g) == float(min(finite, key=lambda v: abs(Fraction(float(v)) - x)))
