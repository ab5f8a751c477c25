"""Thirteenth audit, part A: ``reveal`` asks which leaves are rounded first (summed apart, lone, or every leaf:
no FMA) instead of leaving it to its random checks, at every output where outputs answer differently.

A fused and a rounded leaf differ on few random products where K or M x N is small, so a box whose outputs had a
lone leaf passed for the fused tree (or, half of it mul+add, for one tree), with "explained" 1.0: no warning, and
other products came out wrong.  Expectations: the boxes are sum trees written by hand, evaluated by an exact
rational evaluator here (``fractions``, one rounding per node as the tree says), never by ``sumtree.evaluate``.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from fp8emu.gemm.order_probe import reveal
from fp8emu.gemm.sumtree import evaluate_order

from oracle import round_f32


def _value(t, x, y, lone, fma):
    """One output over nested pairs ``t``: a leaf starting a sum, a lone leaf or any leaf without FMA is its
    product rounded; a leaf joined to a sum in an FMA tree is fused (one rounding); sums are float32 additions.
    (The operands make no zero, so the sign of a zero does not arise.)"""
    def prod(k):
        return Fraction(float(x[k])) * Fraction(float(y[k]))
    if not isinstance(t, tuple):
        return Fraction(round_f32(prod(t)))
    left = _value(t[0], x, y, lone, fma)
    if isinstance(t[1], tuple) or t[1] in lone or not fma:
        right = _value(t[1], x, y, lone, fma)
    else:
        right = prod(t[1])
    return Fraction(round_f32(left + right))


def _box(kinds):
    """A GEMM whose output (m, n) sums as ``kinds[m][n]`` = (nested pairs, lone leaves, fma) says."""
    def mm(a, b):
        M, N = a.shape[0], b.shape[1]
        out = np.empty((M, N), np.float32)
        for m in range(M):
            for n in range(N):
                t, lone, fma = kinds[m][n]
                out[m, n] = float(_value(t, a[m], b[:, n], set(lone), fma))
        return out
    return mm


def _random_products(M, K, N, n, seed):
    rng = np.random.default_rng(seed)
    for t in range(n):
        a = rng.standard_normal((M, K)).astype(np.float32)
        if t % 2:
            a *= np.exp2(rng.integers(-12, 13, (M, K))).astype(np.float32)
        yield a, rng.standard_normal((K, N)).astype(np.float32)


def _wrong(order, mm, M, K, N):
    """Outputs of 20 fresh random products (nonzero sums) the order does not reproduce."""
    bad = 0
    for a, b in _random_products(M, K, N, 20, 1234):
        got, want = evaluate_order(order, a, b), mm(a, b)
        bad += int(np.sum(got.view(np.int32) != want.view(np.int32)))
    return bad


def test_a_lone_leaf_of_a_small_uniform_product_is_asked():
    # 1x10x2: leaf 9 summed apart; the 6 checks of 2 outputs did not tell it from fused, so the fused tree was
    # taken ("explained" 1.0) and differed from the box on other products
    t = (((0, 1), 3), ((((2, 6), 5), (((4, 7), 9), 8))))
    kinds = [[(t, [9], True)] * 2]
    mm = _box(kinds)
    order, facts = reveal(mm, 1, 10, 2)
    assert facts["explained"] == 1.0
    assert all(tree.lone == (9,) for tree in order.trees)
    assert _wrong(order, mm, 1, 10, 2) == 0


def test_outputs_half_fused_with_a_lone_leaf_half_mul_add_are_each_their_own():
    # 4x3x4: outputs in class 1 are ((0, 1), 2) fused with leaf 2 lone, the rest the same tree without FMA: the
    # two differ only in leaf 1 (fused or rounded), which random products of K = 3 seldom tell apart; the order
    # came out one tree or the wrong tree at some outputs with "explained" 1.0
    t = ((0, 1), 2)
    rng = np.random.default_rng(5)
    for _ in range(2):
        classes = rng.random((4, 4)) < 0.5
        kinds = [[(t, [2], True) if classes[m, n] else (t, [], False) for n in range(4)] for m in range(4)]
        mm = _box(kinds)
        order, facts = reveal(mm, 4, 3, 4)
        if facts["explained"] == 1.0:        # where it says it explains every output, it must
            assert _wrong(order, mm, 4, 3, 4) == 0
        for m in range(4):
            for n in range(4):
                tree = order.trees[order.classes[m, n]]
                assert (tree.fma, tree.lone) == ((True, (2,)) if classes[m, n] else (False, ()))


def test_a_mul_add_box_with_some_fused_leaves():
    # mul+add but leaves 2 and 5 fused: an FMA tree whose other joined leaves are lone
    t = (((((0, 1), 2), 3), 4), 5)
    mm = _box([[(t, [1, 3, 4], True)] * 3] * 2)
    order, facts = reveal(mm, 2, 6, 3)
    assert facts["explained"] == 1.0 and order.uniform
    assert order.trees[0].fma and order.trees[0].lone == (1, 3, 4)
    assert _wrong(order, mm, 2, 6, 3) == 0
