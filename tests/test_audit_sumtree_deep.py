"""Thirteenth audit, part A: a sum tree as deep as it is long (x_0 + (x_1 + (... + x_{K-1}))), the canonical form
of a sum taken from its last term, is described and evaluated without Python's recursion limit.

Expectation: the sum from the last term by exact rational arithmetic (``fractions``), rounded to float32 after
each addition (``oracle.round_f32``).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from fp8emu.gemm.sumtree import SumTree, evaluate

from oracle import round_f32

K = 3000


def _from_the_end(K, fma):
    # node K + r adds leaf K - 2 - r to the node before it (the first adds leaves K - 2 and K - 1)
    children, prev = [], K - 1
    for r, k in enumerate(range(K - 2, -1, -1)):
        children.append((k, prev))
        prev = K + r
    return SumTree(K, np.array(children), fma)


def test_a_tree_thousands_of_spines_deep_is_described():
    # describe, spine_starts and evaluate were Python's RecursionError past about a thousand terms
    t = _from_the_end(K, False)
    text = t.describe()
    assert text.startswith("0 + (1 + (2 + (3 + ") and text.endswith(f"({K - 3} + [{K - 2}:{K}])" + ")" * (K - 4))
    assert t.spine_starts() == list(range(K - 1))


def test_a_tree_thousands_of_spines_deep_is_evaluated():
    x = np.full((1, K), 2.0 ** -24, np.float32)
    x[0, 0] = 1.0
    y = np.ones((K, 1), np.float32)
    want = Fraction(0)
    for k in range(K - 1, -1, -1):          # from the last term: the small ones add up before 1 is met
        want = Fraction(round_f32(want + Fraction(float(x[0, k]))))
    assert want == 1 + Fraction(1500, 2 ** 23)       # 1 + 2999 * 2**-24, the tie to even
    for fma in (False, True):
        assert Fraction(float(evaluate(_from_the_end(K, fma), x, y)[0, 0])) == want
