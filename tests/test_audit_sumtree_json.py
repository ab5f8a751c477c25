"""The summation orders' JSON (``SumTree.from_json``, ``GemmOrder.from_json``: what the order cache and
a user's saved orders are read back with) refuses what is not its structure in one ValueError.

A list, a string or ``None`` where an object belongs, a missing key, and a key the format does not have
(``"clases"``, a typo: the classes then read as absent) were ``KeyError``, ``TypeError`` or
``AttributeError`` tracebacks, or read silently.
"""

import numpy as np
import pytest

from fp8emu.gemm.sumtree import GemmOrder, SumTree

TREE = SumTree.blocks([0, 2, 4]).to_json()
ORDER = GemmOrder([SumTree.blocks([0, 4]), SumTree.blocks([0, 2, 4])], [[0, 1]]).to_json()


@pytest.mark.parametrize("d", [[1, 2], "x", None, 3, {}, {"K": 4, "fma": True}, {**TREE, "extra": 1},
                               {"K": 4, "fma": True, "childs": TREE["children"]}], ids=repr)
def test_a_sum_tree_json_of_another_structure_is_one_error(d):
    with pytest.raises(ValueError, match=r"a sum tree's JSON is an object of the keys K, fma, children"):
        SumTree.from_json(d)


@pytest.mark.parametrize("d", [[1, 2], "x", None, {}, {"shape": [1, 2]}, {**ORDER, "extra": 1},
                               {"trees": ORDER["trees"], "clases": [[0, 1]], "shape": [1, 2]}], ids=repr)
def test_a_gemm_order_json_of_another_structure_is_one_error(d):
    with pytest.raises(ValueError, match=r"a GemmOrder's JSON is an object of the keys trees, classes, shape"):
        GemmOrder.from_json(d)


@pytest.mark.parametrize("trees", ["ab", None, 3, {"K": 4}], ids=repr)
def test_a_gemm_order_json_whose_trees_are_no_list_is_one_error(trees):
    with pytest.raises(ValueError, match=r"a GemmOrder's JSON trees are a list of sum trees"):
        GemmOrder.from_json({**ORDER, "trees": trees})


def test_what_to_json_writes_reads_back():
    t = SumTree.from_json(TREE)
    assert t.describe() == "[0:2] + [2:4]" and t.to_json() == TREE
    o = GemmOrder.from_json(ORDER)
    assert o.to_json() == ORDER and o.classes.tolist() == [[0, 1]]
    assert GemmOrder.from_json(GemmOrder([t], np.zeros((3, 2), int)).to_json()).classes.shape == (3, 2)
