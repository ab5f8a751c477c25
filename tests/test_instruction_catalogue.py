"""The instruction catalogue's data against what it names: the PTX/ISA shapes, the recorded evidence.

Written for the survivors of the seed-41 mutation sample of the split instruction catalogue
(tests/MUTATION.md). The expectations come from outside fp8emu's code: the instruction names
of the PTX ISA and AMD's CDNA3 ISA (``m16n8k32`` is M = 16, N = 8, K = 32; ``16x16x32`` likewise),
and the recorded MMA-Sim files of tests/data/mmasim (their case count and MMA-Sim version were
written by tools/record_mmasim.py, not by fp8emu).
"""

import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pytest

from fp8emu.gemm.catalogue import EVIDENCE, INSTRUCTIONS, get_instruction
from fp8emu.gemm.instructions import dot, mma

MMASIM = Path(__file__).parent / "data" / "mmasim"


def _shape_in_name(ptx):
    """(M, N, K) as the instruction's own name spells them; N is None where the name leaves it open
    (``m64n{n}k32``: wgmma and tcgen05 take N in a range)."""
    m = re.search(r"\bm(\d+)n(\d+|\{n\})k(\d+)", ptx)
    if m:
        return int(m[1]), None if m[2] == "{n}" else int(m[2]), int(m[3])
    m = re.search(r"_(\d+)x(\d+)x(\d+)_", ptx)          # AMD: v_mfma_f32_16x16x32_fp8_fp8
    return int(m[1]), int(m[2]), int(m[3])


@pytest.mark.parametrize("name", sorted(INSTRUCTIONS))
def test_shape_is_the_one_the_instruction_name_spells(name):
    ins = INSTRUCTIONS[name]
    m, n, k = _shape_in_name(ins.ptx)
    assert (ins.shape[0], ins.shape[2]) == (m, k)
    if n is not None:
        assert ins.shape[1] == n
    else:
        assert ins.shape[1] == 8   # the smallest N the catalogue describes for an open-N instruction


def test_fp8_shapes_are_the_isa_ones():
    # written out from the PTX ISA (mma.sync m16n8k32 for FP8, k64 for FP4 with block scales,
    # wgmma m64nNk32, tcgen05 cta_group::1 M = 128) and AMD's CDNA3 ISA (v_mfma_f32_16x16x32_fp8)
    want = {"ada-mma": (16, 8, 32), "ada-mma-f16": (16, 8, 32), "hopper-mma": (16, 8, 32),
            "hopper-wgmma": (64, 8, 32), "blackwell-mma": (16, 8, 32), "blackwell-tcgen05-f8f6f4": (128, 8, 32),
            "blackwell-tcgen05-mxf4nvf4": (128, 8, 64), "rtx-blackwell-mma": (16, 8, 32),
            "rtx-blackwell-mma-mxf8f6f4": (16, 8, 32), "rtx-blackwell-mma-mxf4nvf4": (16, 8, 64),
            "volta-mma-f16in": (8, 8, 4), "ampere-mma-tf32in": (16, 8, 4), "cdna3-mfma-fp8": (16, 16, 32)}
    assert {n: INSTRUCTIONS[n].shape for n in want} == want


@pytest.mark.parametrize("name", sorted(n for n, ev in EVIDENCE.items() if any(e[0] == "mmasim" for e in ev)))
def test_mmasim_evidence_states_the_recorded_count_and_version(name):
    # the claim "equals MMA-Sim <version> on <n> random MMAs" must be the recorded file's n and version
    z = np.load(MMASIM / f"{name}.npz")
    (claim,) = [e for e in EVIDENCE[name] if e[0] == "mmasim"]
    assert claim[1:] == (str(z["mmasim_version"]), int(z["n"]))
    assert claim[2] == 200_000


@pytest.mark.parametrize("field", ["step", "frac_bits", "group", "pair_bits"])
def test_positive_integer_fields_accept_one_and_refuse_zero(field):
    # the documented rule is "a positive integer": 1 is the smallest accepted value (the K of the
    # shape, 32, is a multiple of a step of 1)
    base = get_instruction("ada-mma")
    assert getattr(dataclasses.replace(base, **{field: 1}), field) == 1
    with pytest.raises(ValueError, match=f"{field} must be a positive integer"):
        dataclasses.replace(base, **{field: 0})


@pytest.mark.parametrize("na,nb", [(2, 4), (4, 2), (3, 3)])
def test_scales_must_give_both_operands_one_block_length(na, nb):
    # K = 64: a_scales and b_scales must hold the same count of entries along K, and K must be a
    # multiple of it (2 entries: blocks of 32; 4: blocks of 16). Unequal counts would give A and B
    # blocks of different lengths, which no block-scaled instruction has; 3 does not divide 64.
    a, b = np.zeros((2, 64), np.uint8), np.zeros((64, 2), np.uint8)
    kw = dict(instruction="blackwell-tcgen05-mxf4nvf4", a_format="e2m1fn")
    msg = f"scales must hold K / block entries along K for both operands, got {na} and {nb} for K = 64"
    with pytest.raises(ValueError, match=re.escape(msg)):
        mma(a, b, a_scales=np.full((2, na), 127, np.uint8), b_scales=np.full((nb, 2), 127, np.uint8), **kw)
    with pytest.raises(ValueError, match=re.escape(msg)):
        dot(a, b.T, a_scales=np.full((2, na), 127, np.uint8), b_scales=np.full((2, nb), 127, np.uint8), **kw)


def _trunc13(x):
    """x (a float) truncated to 13 fraction bits at its own exponent (exact: float64 holds it)."""
    m, e = math.frexp(x)
    return math.ldexp(math.trunc(m * 2 ** 14), e - 14)


@pytest.mark.parametrize("instruction", ["ada-mma", "hopper-mma", "hopper-wgmma"])
@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2"])
def test_zero_products_leave_c_truncated_to_13_bits_at_its_own_exponent(instruction, fmt):
    # every product zero: the exact sum is C, and the "rz-e8m13" accumulator keeps its 13 leading
    # fraction bits, whatever C's exponent, also below the smallest non-zero product (2**-18 for
    # e4m3 x e4m3, 2**-32 for e5m2 x e5m2) and down to float32's normals
    c = np.array([[2.0 ** -20 * (1 + 2 ** -13 + 2 ** -15 + 2 ** -23), -(2.0 ** -30) * (1 + 2 ** -5 + 2 ** -17)],
                  [2.0 ** -100 * (1 + 2 ** -22), 3.0 * 2 ** -19], [-(2.0 ** -126) * (1 + 2 ** -12 + 2 ** -14), 0.0]],
                 np.float32)
    want = np.array([[_trunc13(float(v)) for v in r] for r in c], np.float32)
    a, b = np.zeros((3, 64), np.uint8), np.zeros((64, 2), np.uint8)
    # a tile (the code-pair tables), a batch of tiles (the operand path) and rows
    got = mma(a, b, c, instruction=instruction, a_format=fmt)
    assert (got.view(np.uint32) == want.view(np.uint32)).all()
    got = mma(np.stack([a, a]), np.stack([b, b]), np.stack([c, c[::-1]]), instruction=instruction, a_format=fmt)
    assert (got.view(np.uint32) == np.stack([want, want[::-1]]).view(np.uint32)).all()
    rows = dot(a, a, c[:, 0], instruction=instruction, a_format=fmt)
    assert (rows.view(np.uint32) == want[:, 0].view(np.uint32)).all()
    # a GEMM tile of 32 x 32 outputs (the exact route, or the operand path where it declines)
    big_c = np.resize(c, (32, 32))
    big_want = np.resize(want, (32, 32))
    got = mma(np.zeros((32, 64), np.uint8), np.zeros((64, 32), np.uint8), big_c, instruction=instruction, a_format=fmt)
    assert (got.view(np.uint32) == big_want.view(np.uint32)).all()


def test_the_catalogue_has_one_import_path():
    """The catalogue's names are imported from fp8emu.gemm or fp8emu.gemm.catalogue; the instructions
    module re-exports none of them (the old path, removed with a changelog line)."""
    import fp8emu
    from fp8emu.gemm import catalogue, instructions
    for name in ("Instruction", "INSTRUCTIONS", "EVIDENCE", "get_instruction", "presets"):
        assert not hasattr(instructions, name), name
        assert name in catalogue.__all__
    assert fp8emu.gemm.presets is catalogue.presets and fp8emu.gemm.Instruction is catalogue.Instruction
    assert instructions.__all__ == ["mma", "dot", "gemm", "block_scaled_gemm"]
