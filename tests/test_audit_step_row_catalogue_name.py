"""``fp8emu.step_row(..., name=)`` of widths a catalogue row states (16, 13, 14 is Ada's; 32, 31, 24 "rne"
Blackwell's): the row is the catalogue's, under the name given.

Before the fix the name was dropped: ``step_row(16, 13, 14, name="mine").name`` was ``"ada-mma"``, so
every message about the caller's row (operand formats, K not a multiple of the step) named another.
The GEMM is the catalogue row's, bit for bit, whatever its name.
"""

from __future__ import annotations

import numpy as np
import pytest

import fp8emu
from fp8emu import GemmModel, scaled_mm, step_row
from fp8emu.gemm.catalogue import INSTRUCTIONS


@pytest.mark.parametrize("widths, catalogue", [((16, 13, 14), "ada-mma"), ((32, 31, 24, "rne"), "blackwell-mma")])
def test_the_name_given_is_kept(widths, catalogue):
    row = step_row(*widths, name="mine")
    assert row.name == "mine"
    assert step_row(*widths).name == catalogue          # no name: the catalogue row itself
    assert step_row(*widths) is INSTRUCTIONS[catalogue]


def test_the_renamed_row_computes_as_the_catalogue_row():
    rng = np.random.default_rng(3)
    a = fp8emu.encode(rng.standard_normal((8, 64)) * 8, "e4m3fn")
    b = fp8emu.encode(rng.standard_normal((64, 5)) * 8, "e4m3fn")

    def mm(row):
        return scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn",
                         accumulator=GemmModel("m", "instruction", row))
    np.testing.assert_array_equal(mm(step_row(16, 13, 14, name="mine")), mm(INSTRUCTIONS["ada-mma"]))


def test_messages_name_the_callers_row():
    from fp8emu.gemm.instruction_inputs import check_inputs
    with pytest.raises(ValueError, match="mine's step of 16"):
        check_inputs(step_row(16, 13, 14, name="mine"), 24, "e4m3fn", "e4m3fn", None, None, None)
