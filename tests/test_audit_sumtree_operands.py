"""Fourth fresh audit: the operands a sum tree evaluates are float32 (or exactly float32), never cast silently."""

import ml_dtypes
import numpy as np
import pytest

from fp8emu.gemm import order_probe
from fp8emu.gemm.sumtree import GemmOrder, SumTree, evaluate, evaluate_order

TREE = SumTree.blocks([0, 2])
ONES = np.ones((2, 1), np.float32)


@pytest.mark.parametrize("x", [
    np.array([[1e39, -1e39]]),                  # float64 past float32: the cast made Inf - Inf = NaN (exact: 0)
    np.array([[2.0**24 + 1, 1.0]]),             # float64 rounded to 2**24 by the cast: 2**24 + 1 came back
    np.array([[1 + 1j, 1.0]]),                  # the imaginary part dropped with NumPy's ComplexWarning
    np.array([[3, 4]], np.int64),
    [["1", "2"]],                               # strings parsed
    [[1.0, 2.0]],                               # a list of Python floats is float64
])
def test_evaluate_refuses_an_operand_that_is_not_float32(x):
    # before: np.asarray(x, np.float32) cast each of these silently and summed what the cast made
    with pytest.raises(TypeError, match=r"x must be float32 \(float16 and bfloat16 are taken exactly\), got"):
        evaluate(TREE, x, ONES)
    with pytest.raises(TypeError, match=r"y must be float32"):
        evaluate(TREE, ONES.T, np.asarray(x).T)
    order = GemmOrder([TREE, SumTree.from_nested((1, 0))], np.array([[0]]))
    with pytest.raises(TypeError, match=r"x must be float32"):
        evaluate_order(order, x, ONES)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32])
def test_evaluate_takes_float16_and_bfloat16_exactly(dtype):
    x = np.array([[1.5, -0.25]], dtype)         # exact in each type: the sum 1.25 exactly
    got = evaluate(TREE, x, ONES)
    assert got.dtype == np.float32 and got[0, 0] == 1.25


def _box(kind):
    def mm(a, b):
        exact = a.astype(np.float64) @ b.astype(np.float64)
        return {"complex": exact.astype(np.float32) + 1j, "strings": exact.astype(np.float32).astype(str),
                "float64": exact, "ints": exact.astype(np.int64),
                "float64 of float32 values": evaluate(TREE, a, b).astype(np.float64)}[kind]
    return mm


@pytest.mark.parametrize("kind, error, message", [
    ("complex", TypeError, "returned complex"), ("strings", TypeError, "returned <U"),
    ("ints", TypeError, "returned int64"), ("float64", ValueError, "float64 values that are not float32 values"),
])
def test_check_order_refuses_answers_that_are_not_float32_values(kind, error, message):
    # before: cast to float32 (the imaginary part dropped with NumPy's ComplexWarning, strings parsed, float64
    # sums rounded): a box answering the order's float32 sums plus 1j "held" (0 outputs differ)
    order = GemmOrder([TREE], np.zeros((3, 4), np.int16))
    with pytest.raises(error, match=message):
        order_probe.check_order(order, _box(kind), 3, 2, 4)


def test_check_order_takes_float64_answers_that_hold_float32_values():
    order = GemmOrder([TREE], np.zeros((3, 4), np.int16))
    assert order_probe.check_order(order, _box("float64 of float32 values"), 3, 2, 4) == 0


def test_evaluate_and_evaluate_order_name_the_object_they_take():
    # None, or a tree where an order is taken, was Python's AttributeError
    import numpy as np
    from fp8emu.gemm.sumtree import GemmOrder, SumTree, evaluate, evaluate_order
    x, y = np.ones((2, 4), np.float32), np.ones((4, 3), np.float32)
    tree = SumTree.sequential(4) if hasattr(SumTree, "sequential") else SumTree.from_nested(((0, 1), (2, 3)))
    order = GemmOrder([tree], np.zeros((2, 3), np.int16))
    for fn, bad, want in ((evaluate, None, "takes a SumTree"), (evaluate, order, "takes a SumTree"),
                          (evaluate_order, None, "takes a GemmOrder"), (evaluate_order, tree, "takes a GemmOrder")):
        with pytest.raises(TypeError, match=want):
            fn(bad, x, y)
    np.testing.assert_array_equal(evaluate(tree, x, y), evaluate_order(order, x, y))
