"""``order_probe.check_order`` checks the shape and the black box as ``reveal`` does.

Its sizes went unchecked: ``M=2.5`` and ``True`` raised Python's "cannot be interpreted as an integer" /
"an integer is required", ``-1`` NumPy's "negative dimensions are not allowed", ``"2"`` Python's again, and
``mm=None`` "'NoneType' object is not callable".  The expectations: one line naming ``check_order`` and
what it takes; NumPy integers are integers; an order still holds (0) against its own box.
"""

import numpy as np
import pytest

from fp8emu.gemm.order_probe import check_order, reveal
from fp8emu.gemm.sumtree import SumTree, evaluate

TREE = SumTree.blocks([0, 4, 8])


def box(a, b):
    return evaluate(TREE, a, b)


ORDER = reveal(box, 2, 8, 2)[0]


@pytest.mark.parametrize("shape", [(2.5, 8, 2), (True, 8, 2), ("2", 8, 2), (2, 8.0, 2), (2, 8, None)])
def test_sizes_that_are_no_integers_are_named(shape):
    with pytest.raises(TypeError, match=r"^check_order needs integers M, K, N, got "):
        check_order(ORDER, box, *shape)


@pytest.mark.parametrize("shape", [(-1, 8, 2), (2, 0, 2), (2, 8, -3)])
def test_sizes_below_one_are_named(shape):
    with pytest.raises(ValueError, match=r"^check_order needs M, K, N >= 1, got "):
        check_order(ORDER, box, *shape)


def test_a_box_that_is_not_callable_is_named():
    with pytest.raises(TypeError, match=r"^check_order needs a callable mm\(a, b\), got NoneType"):
        check_order(ORDER, None, 2, 8, 2)


def test_the_order_holds_against_its_own_box_and_not_another():
    assert check_order(ORDER, box, 2, 8, 2) == 0
    assert check_order(ORDER, box, np.uint8(2), np.int64(8), np.uint16(2)) == 0
    other = SumTree.blocks([0, 1, 2, 3, 4, 5, 6, 7, 8])          # another order of the same 8 terms
    assert check_order(ORDER, lambda a, b: evaluate(other, a, b), 2, 8, 2, trials=4) > 0
