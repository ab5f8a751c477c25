"""Twelfth audit, part A (#1, #3): ``check_order`` of something that is no ``GemmOrder``, or of another shape.

Before the fix the per-set start probe read ``order.trees`` first: ``None`` or a ``SumTree`` (reveal's
``evaluate`` takes one, ``check_order`` does not) was Python's "'SumTree' object has no attribute 'trees'"
(the ninth audit had recorded one clear line, made by ``evaluate_order``)."""

from __future__ import annotations

import numpy as np
import pytest

from fp8emu.gemm.order_probe import check_order
from fp8emu.gemm.sumtree import GemmOrder, SumTree, evaluate

TREE = SumTree.blocks([0, 4, 8], start="fma")


def box(a, b):
    return evaluate(TREE, a, b)


@pytest.mark.parametrize("order", [None, TREE, "fma [0:4] + [4:8]", [TREE]])
def test_anything_but_a_gemm_order_is_one_line(order):
    with pytest.raises(TypeError, match=r"check_order takes a GemmOrder .*got (NoneType|SumTree|str|list)$"):
        check_order(order, box, 2, 8, 3)


def test_a_gemm_order_is_checked_as_before():
    right = GemmOrder([TREE], np.zeros((2, 3), np.int16))
    assert check_order(right, box, 2, 8, 3) == 0
    # the same tree started otherwise differs on the probe whose first products underflow (6 outputs)
    wrong = GemmOrder([TREE.starting("add")], np.zeros((2, 3), np.int16))
    assert check_order(wrong, box, 2, 8, 3) == 6


@pytest.mark.parametrize("shape", [(2, 2), (1, 1), (0, 0), (3, 2)])
def test_an_order_of_another_shape_is_one_line(shape):
    """#3: a uniform order of another shape reached the start probe's mask (its classes) and was NumPy's
    "operands could not be broadcast together with shapes (2,3) (2,2)"."""
    order = GemmOrder([TREE], np.zeros(shape, np.int16))
    with pytest.raises(ValueError, match=rf"the order is for {shape[0]} x {shape[1]} outputs, check_order was "
                                         r"asked 2 x 3$"):
        check_order(order, box, 2, 8, 3)
