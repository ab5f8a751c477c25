"""``reveal`` of a GEMM whose outputs start their sums differently (tests/AUDIT.md, "Eleventh fresh audit, part A",
#6).

``_fit`` gave every output of one tree the start of the majority: a box summing every output in one fixed tree,
some from +0 and some from their first product (a -0 kept), was revealed as one tree that "explains 50.0% of
torch's outputs (not a fixed order of float32 additions)", a false line, and half the -0 outputs came out +0.
A :class:`GemmOrder` holds a tree per output, so each start is its own tree now (three: ``SumTree.start``).
The box's own bits are the reference (``check_order`` 0 is a bit-for-bit match on random products, on products
all -0, and on those whose spines' first products underflow).
"""

import numpy as np
import pytest

from fp8emu.gemm.order_probe import check_order, reveal
from fp8emu.gemm.sumtree import STARTS, GemmOrder, SumTree, evaluate_order


def _box(classes, fma=True):
    tree = SumTree.blocks([0, 4, 8], fma)
    order = GemmOrder([tree.starting(s) for s in STARTS], np.asarray(classes, np.int16))
    return order, (lambda a, b: evaluate_order(order, a, b))


@pytest.mark.parametrize("classes", [[[0, 1]], [[1, 0, 2], [2, 1, 1]], [[1], [2], [0]]])
@pytest.mark.parametrize("fma", [True, False])
@pytest.mark.parametrize("uniform", [True, False])
def test_each_outputs_start_is_revealed(classes, fma, uniform):
    truth, box = _box(classes, fma)
    M, N = np.shape(classes)
    order, facts = reveal(box, M, 8, N, uniform=uniform)
    assert facts["explained"] == 1.0
    assert check_order(order, box, M, 8, N) == 0
    x, y = np.zeros((M, 8), np.float32), -np.ones((8, N), np.float32)       # 0 x -1 = -0 in every product
    starts = np.array(STARTS)[np.asarray(classes)]
    assert np.array_equal(np.signbit(evaluate_order(order, x, y)), starts == "product")   # -0 kept
    x[:, [0, 4]], y[[0, 4], :] = -2.0 ** -100, 2.0 ** -100       # the two chains' first products underflow
    assert np.array_equal(np.signbit(evaluate_order(order, x, y)), starts != "add")


@pytest.mark.parametrize("start", STARTS)
def test_one_start_for_all_is_one_tree_as_before(start):
    tree = SumTree.blocks([0, 4, 8]).starting(start)
    order, facts = reveal(lambda a, b: evaluate_order(GemmOrder([tree], np.zeros((2, 3), np.int16)), a, b), 2, 8, 3)
    assert facts["explained"] == 1.0 and order.uniform and order.trees[0] == tree
