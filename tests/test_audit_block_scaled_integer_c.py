"""``block_scaled_mm``'s accumulator input ``c`` given as integers past float64's 53 bits.

"c must hold float32 values; round it first" was checked by comparing both sides in float64, where an
int64 2**53 + 1 (or 2**62 + 1, or a uint64 2**64 - 1) had already rounded: ``c`` was taken as another
value, silently.  A Python integer 2**64 + 1 (read as float64 since Python integers past int64 are
taken) is refused the same way.
"""
import numpy as np
import pytest

import fp8emu
from fp8emu.gemm.instructions import gemm as instruction_gemm


def _ab():
    a = fp8emu.quantize_mx(np.zeros((1, 32)), "e4m3fn", axis=-1)
    b = fp8emu.quantize_mx(np.zeros((32, 1)), "e4m3fn", axis=0)
    return a, b


@pytest.mark.parametrize("c", [np.array([[2**53 + 1]]), np.array([[2**62 + 1]]), np.array([[2**63 - 1]]),
                               np.array([[2**64 - 1]], np.uint64), 2**53 + 1, np.array([[16777217]])])
def test_an_integer_c_float32_does_not_hold_is_refused(c):
    a, b = _ab()
    with pytest.raises(ValueError, match="c must hold float32 values"):
        fp8emu.block_scaled_mm(a, b, c=c, accumulator="exact")


def test_a_python_integer_float64_does_not_hold_is_refused():
    a, b = _ab()
    with pytest.raises(ValueError, match="c holds an integer that float64 does not hold exactly"):
        fp8emu.block_scaled_mm(a, b, c=2**64 + 1, accumulator="exact")


@pytest.mark.parametrize("c,want", [(np.array([[2**62]]), 2.0**62), (np.array([[-(2**63)]]), -(2.0**63)),
                                    (np.array([[2**63]], np.uint64), 2.0**63), (2**64, 2.0**64),
                                    ([[3]], 3.0), (np.array([[255]], np.uint8), 255.0)])
def test_an_integer_c_float32_holds_is_taken(c, want):
    a, b = _ab()
    for acc in ("exact", "blackwell"):
        assert fp8emu.block_scaled_mm(a, b, c=c, accumulator=acc)[0, 0] == np.float32(want)


@pytest.mark.parametrize("ins", ["hopper-wgmma", "blackwell-mma"])
@pytest.mark.parametrize("c", [np.array([[2**53 + 1]]), np.array([[2**64 - 1]], np.uint64), np.array([[2**25 + 1]])])
def test_an_instructions_integer_c_it_does_not_hold_is_refused(ins, c):
    a = fp8emu.encode(np.zeros((1, 32)), "e4m3fn")
    b = fp8emu.encode(np.zeros((32, 1)), "e4m3fn")
    with pytest.raises(ValueError, match="c must hold float32 values"):
        instruction_gemm(a, b, instruction=ins, a_format="e4m3fn", b_format="e4m3fn", c=c)


def test_an_instructions_integer_c_it_holds_is_taken():
    a = fp8emu.encode(np.zeros((1, 32)), "e4m3fn")
    b = fp8emu.encode(np.zeros((32, 1)), "e4m3fn")
    for c, want in ((np.array([[2**62]]), 2.0**62), (np.array([[-(2**63)]]), -(2.0**63)), (np.array([[7]]), 7.0)):
        got = instruction_gemm(a, b, instruction="hopper-wgmma", a_format="e4m3fn", b_format="e4m3fn", c=c)
        assert got[0, 0] == np.float32(want)
