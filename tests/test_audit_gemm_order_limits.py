"""A GemmOrder's classes at their limits: more trees than int16 indexes, huge and ragged classes.

``GemmOrder([tree] * 40000, [[39999, 0]])`` was built: class 39999 wrapped to a negative int16, and
``evaluate_order`` left its output 0 (the sum of four ones).  A class of 1e300 was refused with its 301
digits printed; a JSON order whose classes are rows of other lengths was NumPy's "inhomogeneous shape".
"""
import numpy as np
import pytest

from fp8emu.gemm.sumtree import GemmOrder, SumTree, evaluate_order


def test_more_trees_than_int16_indexes_are_refused():
    t = SumTree.blocks([0, 4])
    with pytest.raises(ValueError, match="at most 32768 trees .*got 40000"):
        GemmOrder([t] * 40000, np.array([[39999, 0]]))


def test_the_last_int16_class_still_sums():
    t = SumTree.blocks([0, 4])
    order = GemmOrder([t] * 32768, np.array([[32767, 0]]))
    x, y = np.ones((1, 4), np.float32), np.ones((4, 2), np.float32)
    np.testing.assert_array_equal(evaluate_order(order, x, y), [[4.0, 4.0]])


def test_a_huge_class_is_named_in_one_short_line():
    with pytest.raises(ValueError) as e:
        GemmOrder([SumTree.blocks([0, 4])], np.array([[1e300]]))
    assert len(str(e.value)) < 150 and "1e+300" in str(e.value)


@pytest.mark.parametrize("classes", [[[1], [0, 1]], [[0, 1], 1]])
def test_ragged_json_classes_are_one_error_naming_them(classes):
    t1, t2 = SumTree.blocks([0, 4]), SumTree.blocks([0, 2, 4])
    with pytest.raises(ValueError, match="JSON classes are an M x N array"):
        GemmOrder.from_json({"trees": [t1.to_json(), t2.to_json()], "classes": classes, "shape": [2, 2]})
