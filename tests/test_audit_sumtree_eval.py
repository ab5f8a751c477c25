"""Hostile input: evaluating and checking a summation order (``fp8emu.gemm.sumtree``)."""

import numpy as np
import pytest

from fp8emu.gemm import order_probe
from fp8emu.gemm import sumtree as st
from fp8emu.gemm.mkl_cnr import MODEL


@pytest.mark.parametrize("xs, ys", [((1, 2), (3, 1)), ((1, 2), (1, 1)), ((2,), (2, 1))])
def test_evaluate_checks_the_operands_inner_size(xs, ys):
    # before: y's third row was left out of the sum silently (2.0 for ones), one row fewer NumPy's IndexError,
    # a 1-D x "not enough values to unpack"
    with pytest.raises(ValueError, match="x @ y needs x \\(M, K\\) and y \\(K, N\\) of one K"):
        st.evaluate(st.SumTree.blocks([0, 2]), np.ones(xs, np.float32), np.ones(ys, np.float32))


@pytest.mark.parametrize("M, N", [(20, 9), (16, 12), (4, 9)])
def test_evaluate_order_checks_the_orders_shape(M, N):
    # before: outputs past the order's 16 x 9 were left 0.0 (silently), fewer rows NumPy's IndexError
    order = MODEL.order(16, 400, 9, 1)
    assert not order.uniform
    with pytest.raises(ValueError, match=f"the order is for 16 x 9 outputs, the operands make {M} x {N}"):
        st.evaluate_order(order, np.ones((M, 400), np.float32), np.ones((400, N), np.float32))
    ones = st.evaluate_order(order, np.ones((16, 400), np.float32), np.ones((400, 9), np.float32))
    assert np.array_equal(ones, np.full((16, 9), 400.0, np.float32))     # every order sums 400 ones exactly


@pytest.mark.parametrize("kw", [{"trials": 0}, {"trials": -1}, {"trials": 1.5}, {"trials": True}, {"seed": -1}])
def test_check_order_checks_at_least_one_product(kw):
    # before: trials 0 or -1 checked nothing and answered 0 ("the order holds") for a box answering zeros
    order = MODEL.order(16, 400, 9, 1)
    with pytest.raises(ValueError, match="trials must be a positive integer|seed must be a non-negative integer"):
        order_probe.check_order(order, lambda a, b: np.zeros((16, 9), np.float32), 16, 400, 9, **kw)
    assert order_probe.check_order(order, lambda a, b: np.zeros((16, 9), np.float32), 16, 400, 9, trials=1) == 144


def test_check_order_names_a_box_of_another_shape():
    # before: NumPy's "operands could not be broadcast together with shapes (16,9) (3,)"
    with pytest.raises(ValueError, match=r"the checked GEMM returned shape \(3,\), expected \(16, 9\)"):
        order_probe.check_order(MODEL.order(16, 400, 9, 1), lambda a, b: np.zeros(3, np.float32), 16, 400, 9)
