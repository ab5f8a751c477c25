"""Copies of a GemmOrder keep its checks (tests/AUDIT.md, "Sixteenth audit, part B", #2).

A GemmOrder's classes are read-only (checked, then frozen, when it is built: a class written later to name no
tree made its outputs sum nothing).  ``pickle`` (what a spawned process gets) and ``copy.deepcopy`` set the slots
directly, so the copy's classes came back writeable: ``classes[0, 0] = 5`` on a copy of a two-tree order, then
``evaluate_order`` gave 0.0 for an output whose sum of ones is 17, silently.  Sums here are worked by hand.
"""

import copy
import pickle

import numpy as np
import pytest

from fp8emu.gemm.sumtree import GemmOrder, SumTree, evaluate_order



def _order():
    # two trees over K = 17: a chain with FMA, and a chain without (the sum of ones is 17 either way)
    classes = np.zeros((3, 4), np.int16)
    classes[2:] = 1
    return GemmOrder([SumTree.blocks([0, 17]), SumTree.blocks([0, 17], fma=False)], classes)


@pytest.mark.parametrize("copier", [lambda o: pickle.loads(pickle.dumps(o)), copy.deepcopy, copy.copy],
                         ids=["pickle", "deepcopy", "copy"])
def test_a_copy_of_an_order_keeps_its_classes_read_only_and_equal(copier):
    order = _order()
    twin = copier(order)
    assert not twin.classes.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        twin.classes[0, 0] = 5                  # was taken: the output then summed nothing (0.0)
    assert np.array_equal(twin.classes, order.classes) and twin.trees == order.trees
    ones = evaluate_order(twin, np.ones((3, 17), np.float32), np.ones((17, 4), np.float32))
    assert ones.tolist() == [[17.0] * 4] * 3

