"""Chained tensor-core steps at the bottom of float32's range: rounding direction and the sign of zero.

Expected values come from exact rational arithmetic on the decoded inputs (fractions), not
from the code under test.
"""

from fractions import Fraction

import numpy as np
import pytest

import fp8emu
from fp8emu.gemm import GemmModel, Policy, block_scaled_mm, step_row


def _model(group=32, frac_bits=31, sum_bits=24, sum_rounding="rne", scale_at="product"):
    """A block-scaled model of these step widths: a catalogue row and where the scales apply."""
    return GemmModel("widths", "instruction", step_row(group, frac_bits, sum_bits, sum_rounding), Policy(scale_at=scale_at))

TINY = 2.0 ** -149          # float32's smallest subnormal


def _mm(a_vals, b_vals, acc, scale_exp=-70):
    """1 x 1 block-scaled product with both E8M0 scales 2**scale_exp: products land near 2**-140."""
    k = 32
    x = np.zeros((1, k)); x[0, :len(a_vals)] = a_vals
    y = np.zeros((k, 1)); y[:len(b_vals), 0] = b_vals
    a = fp8emu.encode(x, "e4m3fn")
    b = fp8emu.encode(y, "e4m3fn")
    s = np.array([[127 + scale_exp]], np.uint8)
    return block_scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", a_scales=s, b_scales=s,
                           accumulator=acc)[0, 0]


def _exact(a_vals, b_vals, scale_exp=-70):
    return sum(Fraction(x) * Fraction(y) for x, y in zip(a_vals, b_vals)) * Fraction(2) ** (2 * scale_exp)


A, B = [1.0, 0.75], [1.0, 2.0 ** -9]    # 2**-140 + 0.75 * 2**-149: between two subnormals


def test_rtz_step_truncates_in_the_subnormal_range():
    v = _exact(A, B)
    below = int(v / Fraction(TINY)) * TINY           # toward zero onto the subnormal grid
    got = _mm(A, B, _model(32, 31, 24, "rtz"))
    assert float(got) == below == 2.0 ** -140
    neg = _mm([-x for x in A], B, _model(32, 31, 24, "rtz"))
    assert float(neg) == -below


def test_rne_step_rounds_once_in_the_subnormal_range():
    v = _exact(A, B)
    q = v / Fraction(TINY)
    nearest = (int(q) + (1 if q - int(q) > Fraction(1, 2) else 0)) * TINY
    assert float(_mm(A, B, _model(32, 31, 24, "rne"))) == nearest == 2.0 ** -140 + TINY


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_result_truncated_to_zero_is_plus_zero(sign):
    # 14 significant bits with float32's exponent range: the grid there is 2**-139, and
    # |2**-140 + ...| < 2**-139 truncates to zero; the zero is +0 for either sign
    got = _mm([sign * x for x in A], B, _model(32, 31, 14, "rtz"))
    assert np.float32(got).view(np.uint32) == 0


def test_exact_cancellation_gives_plus_zero():
    got = _mm([1.0, -1.0], [0.5, 0.5], _model(32, 13, 14, "rtz"), scale_exp=0)
    assert np.float32(got).view(np.uint32) == 0
