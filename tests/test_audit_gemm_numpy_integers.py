"""NumPy integers as the GEMM models' counts (``Policy(promote=, split_k=)``, ``step_row``'s widths), and step_row's name.

A NumPy integer kept its width through the model's arithmetic: ``Policy(promote=np.uint8(16))`` on a
step of 16 products wrapped to a promotion interval of 0 ("range() arg 3 must not be zero"), and
``step_row(np.uint8(255), ...)`` failed padding K ("Python integer -255 out of bounds for uint8").
Each is now the GEMM of the same Python integer.
"""
import numpy as np
import pytest

import fp8emu
from fp8emu import GemmModel, Policy, scaled_mm, step_row
from fp8emu.gemm.catalogue import get_instruction

K = 1024


def _operands():
    rng = np.random.default_rng(1)
    a = fp8emu.encode(rng.standard_normal((3, K)), "e4m3fn")
    b = fp8emu.encode(rng.standard_normal((K, 2)), "e4m3fn")
    return a, b


def _mm(model):
    a, b = _operands()
    return scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", accumulator=model)


@pytest.mark.parametrize("promote", [np.uint8(16), np.int8(16), np.uint16(4096), np.int16(2048)])
def test_a_numpy_integer_promote_is_the_gemm_of_the_same_python_integer(promote):
    ada = get_instruction("ada-mma")
    got = _mm(GemmModel("x", "instruction", ada, Policy(promote=promote)))
    want = _mm(GemmModel("x", "instruction", ada, Policy(promote=int(promote))))
    np.testing.assert_array_equal(got, want)
    assert type(Policy(promote=promote).promote) is int


@pytest.mark.parametrize("split", [np.uint8(2), np.int8(8)])
def test_a_numpy_integer_split_k_is_kept_as_a_python_integer(split):
    assert type(Policy(split_k=split).split_k) is int
    hop = get_instruction("hopper-wgmma")
    np.testing.assert_array_equal(_mm(GemmModel("x", "instruction", hop, Policy(split_k=split))),
                                  _mm(GemmModel("x", "instruction", hop, Policy(split_k=int(split)))))


@pytest.mark.parametrize("step", [np.uint8(255), np.uint8(200), np.int8(100)])
def test_a_numpy_integer_step_is_the_gemm_of_the_same_python_integer(step):
    got = _mm(GemmModel("x", "instruction", step_row(step, np.uint8(13), np.uint8(14)), Policy(promote=1)))
    want = _mm(GemmModel("x", "instruction", step_row(int(step), 13, 14), Policy(promote=1)))
    np.testing.assert_array_equal(got, want)
    assert type(step_row(step, 13, 14).step) is int


@pytest.mark.parametrize("name", [None, 3, "", ["x"]])
def test_step_row_names_a_name_that_is_no_string(name):
    # it was taken, and the GEMM said "GemmModel name must be a non-empty string", of a model not made
    with pytest.raises(TypeError, match="step_row name must be a non-empty string"):
        step_row(8, 20, 22, "rne", name=name)


def test_a_named_step_row_is_the_accumulator_as_before():
    a, b = _operands()
    row = step_row(8, 20, 22, "rne", name="odd")
    assert row.name == "odd"
    np.testing.assert_array_equal(_mm(row), _mm(GemmModel("odd", "instruction", row)))
