"""Thirteenth audit, part A: ``SumTree.describe`` names one tree per text.

Expectations: every binary tree over K <= 6 leaves with every allowed set of lone leaves, enumerated here (two
distinct trees must not share a text); values of the two trees found worked out by hand.
"""

from __future__ import annotations

import itertools
import numpy as np

from fp8emu.gemm.sumtree import SumTree, evaluate

from test_cpu_order_lone_product import _right_leaves   # the leaves a tree joins to a partial sum


def _shapes(leaves):
    """Every binary tree (nested pairs) over the leaves in this order."""
    if len(leaves) == 1:
        yield leaves[0]
        return
    for cut in range(1, len(leaves)):
        for left in _shapes(leaves[:cut]):
            for right in _shapes(leaves[cut:]):
                yield (left, right)


def _all_trees(K):
    # every leaf order too up to K = 4 (a tree's leaves need not be in K order), every subset of right-child
    # leaves lone; K = 5 and 6 in K order (kept fast)
    for perm in itertools.permutations(range(K)) if K <= 4 else [tuple(range(K))]:
        for t in _shapes(list(perm)):
            right = _right_leaves(t, [])
            for n in range(len(right) + 1):
                for lone in itertools.combinations(right, n):
                    yield SumTree.from_nested(t, lone=lone)


def test_no_two_trees_share_a_description():
    # a leaf continuing a chain after a sum was added to it was written as a run "[4:6]", the text of a sum of its
    # own added: ((((0,1),(2,3)),4),5) and (((0,1),(2,3)),(4,5)) both read "[0:2] + [2:4] + [4:6]", and with a
    # lone leaf ((((0,1),2),3),4) lone 2 and blocks([0, 2, 3, 5]) both "[0:2] + [2:3] + [3:5]"
    for K in range(1, 7):
        seen = {}
        for tree in _all_trees(K):
            text = tree.describe()
            other = seen.setdefault(text, tree)
            assert other == tree, f"{text!r} describes {other!r} and {tree!r}"


def test_the_two_trees_found_are_told_apart():
    a = SumTree.from_nested(((((0, 1), (2, 3)), 4), 5))
    b = SumTree.from_nested((((0, 1), (2, 3)), (4, 5)))
    assert a.describe() != b.describe()
    c = SumTree.from_nested(((((0, 1), 2), 3), 4), lone=[2])
    assert c.describe() != SumTree.blocks([0, 2, 3, 5]).describe()
    # and they evaluate otherwise: 1 + 2**-24 + 2**-24 fused one at a time stays 1 (each a tie to even, the
    # exact sum 1 + 2**-24 then rounds down), their own sum 2**-23 added is 1 + 2**-23
    x = np.array([[1.0, 0.0, 0.0, 2.0 ** -24, 2.0 ** -24]], np.float32)
    y = np.ones((5, 1), np.float32)
    assert float(evaluate(c, x, y)[0, 0]) == 1.0
    assert float(evaluate(SumTree.blocks([0, 2, 3, 5]), x, y)[0, 0]) == 1.0 + 2.0 ** -23


def test_the_common_descriptions_are_as_before():
    assert SumTree.blocks([0, 3, 6]).describe() == "[0:3] + [3:6]"
    assert SumTree.blocks([0, 384, 768, 769]).describe() == "[0:384] + [384:768] + [768:769]"
    assert SumTree.blocks([0, 2, 4, 6, 8], split=4).describe() == "[0:2] + [2:4] + ([4:6] + [6:8])"


def test_the_compatible_models_edge_chain_reads_as_one_chain():
    # mkl_cnr's edge tree: product 0, the last block's sum, then products 1 .. 223 one by one; it read
    # "0 + [224:300] + [1:224]", the text of the tree that adds [1:224] as a sum of its own
    from fp8emu.gemm import mkl_cnr

    def chain(lo, hi):
        t = lo
        for k in range(lo + 1, hi):
            t = (t, k)
        return t

    edge = mkl_cnr.edge_tree(300)
    own = SumTree.from_nested(((0, chain(224, 300)), chain(1, 224)), fma=edge.fma)
    assert edge.describe() == "0 + [224:300] then [1:224]"
    assert own.describe() == "0 + [224:300] + [1:224]"
