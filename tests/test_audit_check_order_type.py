"""Twelfth audit, part A (#1): ``check_order`` of something that is no ``GemmOrder``.

Before the fix the per-set start probe read ``order.trees`` first: ``None`` or a ``SumTree`` (reveal's
``evaluate`` takes one, ``check_order`` does not) was Python's "'SumTree' object has no attribute 'trees'"
(the ninth audit had recorded one clear line, made by ``evaluate_order``)."""

from __future__ import annotations

import numpy as np
import pytest

from fp8emu.gemm.sumtree import GemmOrder, SumTree, check_order, evaluate

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
