"""Thirteenth audit, part A: ``SumTree.blocks(split=)`` sums a second part of one product apart (a thread's
partial sum, rounded and then added), as it says a second part is summed "on its own".

Expectations: exact rational arithmetic (``fractions``) over nested pairs written by hand.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from fp8emu.gemm.sumtree import SumTree, evaluate

from oracle import round_f32


def _exact(t, x, y, lone):
    """One output by rational arithmetic: a leaf starting a sum or a lone leaf is its product rounded, any other
    leaf joined to a sum is fused (one rounding), a subtree or a lone leaf is added (float32 addition)."""
    def prod(k):
        return Fraction(float(x[k])) * Fraction(float(y[k]))
    if not isinstance(t, tuple):
        return Fraction(round_f32(prod(t)))
    left = _exact(t[0], x, y, lone)
    right = _exact(t[1], x, y, lone) if isinstance(t[1], tuple) or t[1] in lone else prod(t[1])
    return Fraction(round_f32(left + right))


def test_a_second_part_of_one_product_is_summed_apart():
    # split=2 of [0, 2, 3]: the second thread's part is the one product 2, its own partial sum; it was left a bare
    # right child, so fused into the first part's sum, where blocks([0, 2, 3]) (no split) marks it lone
    tree = SumTree.blocks([0, 2, 3], split=2)
    assert tree.lone == (2,)
    x = np.array([1.0, 0.0, 1 + 2.0 ** -12 + 2.0 ** -23], np.float32)      # product 2 just over 2**-24
    y = np.array([1.0, 0.0, 2.0 ** -24 - 2.0 ** -36], np.float32)
    want = _exact(((0, 1), 2), x, y, lone={2})
    assert want == 1                                                       # rounded 2**-24, a tie to even
    got = evaluate(tree, x[None, :], y[:, None])[0, 0]
    assert Fraction(float(got)) == want
    # a longer split whose second part is one product: the same, checked against the exact evaluator
    tree = SumTree.blocks([0, 3, 5, 6], split=5)
    assert tree.lone == (5,)
    rng = np.random.default_rng(3)
    for _ in range(20):
        x = (rng.standard_normal(6) * np.exp2(rng.integers(-12, 13, 6))).astype(np.float32)
        y = rng.standard_normal(6).astype(np.float32)
        got = evaluate(tree, x[None, :], y[:, None])[0, 0]
        assert Fraction(float(got)) == _exact(((((0, 1), 2), (3, 4)), 5), x, y, {5})


def test_a_second_part_of_more_products_starts_its_own_sum_as_before():
    tree = SumTree.blocks([0, 2, 3, 5], split=2)
    assert tree.lone == ()
    assert tree.describe() == "[0:2] + (2 + [3:5])"
