"""The instruction catalogue's rules, each at its boundary: the validation of an :class:`Instruction`,
the block-scale modes, the evidence sentences, the accumulator names, and the GEMM entry points'
refusals and empty sums.

Written before an exam sample of the ``instructions`` mutation group (tests/MUTATION.md), for
the options, boundaries and texts that no test pinned.  Expectations come from the documented rules
(the :class:`Instruction` docstring, PTX's ``kind::mxf4nvf4`` scale vectors, MMA-Sim 2.1.1's recorded
case count), written out here, never read back from the code under test.
"""

import dataclasses

import numpy as np
import pytest

import fp8emu
from fp8emu.gemm import instructions as ins_mod
from fp8emu.gemm.catalogue import EVIDENCE, INSTRUCTIONS, Instruction, get_instruction, presets
from fp8emu.gemm.models import get_model

BLOCK_SCALED = {"blackwell-tcgen05-mxf8f6f4", "blackwell-tcgen05-mxf4nvf4", "rtx-blackwell-mma-mxf8f6f4",
                "rtx-blackwell-mma-mxf4nvf4", "rubin-tcgen05-mxf4nvf4"}


def test_frac_bits_are_at_most_40():
    base = get_instruction("ada-mma")
    assert dataclasses.replace(base, frac_bits=40).frac_bits == 40
    with pytest.raises(ValueError, match="frac_bits must be at most 40"):
        dataclasses.replace(base, frac_bits=41)


@pytest.mark.parametrize("out", ["bfloat16", "float128", None])
def test_output_type_is_float32_or_float16(out):
    with pytest.raises(ValueError, match="out must be 'float32' or 'float16'"):
        dataclasses.replace(get_instruction("ada-mma-f16"), out=out)
    # rne and rz take a float16 output; rz-e8m13 needs float32 (its 13 bits are of a float32)
    assert dataclasses.replace(get_instruction("ada-mma-f16"), rounding="rz").out == "float16"


@pytest.mark.parametrize("rounding", ["rz-e8m-1", "rne-e8m40", "rz-e8m013", "rd-e8m13", "rz-e5m10", None])
def test_result_roundings_of_any_width(rounding):
    base = get_instruction("hopper-wgmma")
    assert dataclasses.replace(base, rounding="rne-e8m21").rounding == "rne-e8m21"
    assert dataclasses.replace(base, rounding="rz-e8m1").rounding == "rz-e8m1"
    assert dataclasses.replace(base, rounding="rz-e8m39", out="float64").out == "float64"
    with pytest.raises(ValueError, match=r"rounding must be one of .* or 'rz-e8mN' / 'rne-e8mN' \(N = 0..39\)"):
        dataclasses.replace(base, rounding=rounding)
    # an e8mN width is of a float32 result, or of a float64 one (wider than 23 bits)
    with pytest.raises(ValueError, match="'rne-e8m9' needs a float32 output \\(or a float64 one"):
        dataclasses.replace(get_instruction("ada-mma-f16"), rounding="rne-e8m9")
    with pytest.raises(ValueError, match="'rne-e8m24' keeps more fraction bits than its output float32"):
        dataclasses.replace(base, rounding="rne-e8m24")
    with pytest.raises(ValueError, match="a float64 output takes an 'rz-e8mN' / 'rne-e8mN' rounding, got 'rz'"):
        dataclasses.replace(base, rounding="rz", out="float64")


def test_block_rules_of_a_grouped_instruction():
    nv = get_instruction("blackwell-tcgen05-mxf4nvf4")
    with pytest.raises(ValueError, match="blocks must be multiples of its group"):
        dataclasses.replace(nv, blocks=(16, 24), modes=())
    assert dataclasses.replace(nv, group=8).group == 8                    # 16 and 32 are multiples of 8
    with pytest.raises(ValueError, match="multiples of its group"):
        dataclasses.replace(nv, group=32, modes=())                        # 16 is not
    # a 'scaled' instruction's blocks need not be multiples of anything
    assert dataclasses.replace(get_instruction("blackwell-tcgen05-mxf8f6f4"), blocks=(24,)).blocks == (24,)
    with pytest.raises(ValueError, match="block scales go with"):
        dataclasses.replace(nv, scales=(), modes=())


@pytest.mark.parametrize("scales", [("ue8m1",), ("ue8m0", "e4m3fn")])
def test_scale_types_are_the_three_documented(scales):
    with pytest.raises(ValueError, match="scales must be among"):
        dataclasses.replace(get_instruction("blackwell-tcgen05-mxf8f6f4"), scales=scales)


@pytest.mark.parametrize("mode", [("ue5m3", 16), ("ue8m0", 64), ["ue8m0", 16], ("ue8m0", 16, 1), ("ue8m0",)])
def test_modes_must_be_pairs_of_the_instructions_scales_and_blocks(mode):
    with pytest.raises(ValueError, match=r"modes must be \(scale, block\) pairs"):
        dataclasses.replace(get_instruction("blackwell-tcgen05-mxf4nvf4"), modes=(mode,))


def test_scale_modes_are_the_modes_or_every_pairing():
    # PTX kind::mxf4nvf4: scale_vec::2X (UE8M0 per 32) and scale_vec::4X (UE8M0 or UE4M3 per 16)
    assert set(get_instruction("blackwell-tcgen05-mxf4nvf4").scale_modes) == {("ue8m0", 16), ("ue8m0", 32),
                                                                             ("ue4m3", 16)}
    assert set(get_instruction("rtx-blackwell-mma-mxf4nvf4").scale_modes) == {("ue8m0", 16), ("ue8m0", 32),
                                                                             ("ue4m3", 16)}
    # Rubin: every scale type with vectors of 16 and 32
    assert set(get_instruction("rubin-tcgen05-mxf4nvf4").scale_modes) == {
        (k, b) for k in ("ue5m3", "ue4m3", "ue8m0") for b in (16, 32)}
    assert len(get_instruction("rubin-tcgen05-mxf4nvf4").scale_modes) == 6
    # MX (block32, UE8M0): one mode, from the empty modes' every pairing
    for name in ("blackwell-tcgen05-mxf8f6f4", "rtx-blackwell-mma-mxf8f6f4"):
        assert get_instruction(name).modes == () and get_instruction(name).scale_modes == (("ue8m0", 32),)
    two = dataclasses.replace(get_instruction("blackwell-tcgen05-mxf4nvf4"), modes=())
    assert two.scale_modes == (("ue8m0", 16), ("ue8m0", 32), ("ue4m3", 16), ("ue4m3", 32))
    assert get_instruction("ada-mma").scale_modes == ()


def test_block_scaled_are_exactly_the_mx_and_nvf4_kinds():
    assert {n for n, i in INSTRUCTIONS.items() if i.block_scaled} == BLOCK_SCALED
    for n in BLOCK_SCALED:
        assert INSTRUCTIONS[n].datapath in ("scaled", "grouped")


def test_get_model_reads_catalogue_names_and_rows_as_instructions():
    ada = INSTRUCTIONS["ada-mma"]
    assert get_model(ada).instruction is ada and get_model("ada-mma").instruction is ada
    custom = dataclasses.replace(ada, name="mine")
    assert get_model(custom).instruction is custom
    assert [get_model(n).instruction for n in ("fp32", "exact")] == [None, None]    # models, no row
    for other in ("mine", None, 3):                                                   # unknown names
        with pytest.raises(ValueError, match="unknown accumulator"):
            get_model(other)
    with pytest.raises(ValueError, match="unknown instruction"):
        get_instruction("mine")


def test_evidence_sentences_of_each_kind():
    p = {q["name"]: q for q in presets()}
    assert p["hopper-mma"]["evidence"][0] == ("reproduces MATLAB-tensor-core model_validation h100_e4m3 (f32, C = 0): "
                                              "5000/5000 rows")
    assert p["hopper-mma-f16"]["evidence"][0] == ("reproduces MATLAB-tensor-core model_validation h100_e4m3 "
                                                  "(f16, rest unexplained): 3113/5000 rows")
    assert p["blackwell-tcgen05-f8f6f4"]["evidence"] == [
        "equals MMA-Sim 2.1.1 on 200,000 random MMAs",
        "disagrees with b200_e4m3 (f32, mma.sync recordings): reproduces 3207/5000 rows",
        "disagrees with b200_e5m2 (f32, mma.sync recordings): reproduces 3236/5000 rows"]
    (rubin,) = p["rubin-tcgen05-mxf4nvf4"]["evidence"]
    assert rubin.startswith("model only: scale types and vectors from CUDA Tile IR")
    for name, q in p.items():
        assert q["records"] == list(EVIDENCE[name]) and q["arch"] == INSTRUCTIONS[name].arch


@pytest.mark.parametrize("gen, gpus", [("volta", ("v100",)), ("ampere", ("a100", "a2")), ("ada", ("ada", "l40s")),
                                       ("hopper", ("h100", "h200")), ("blackwell", ("b200",))])
def test_sixteen_bit_evidence_is_each_generations_recordings(gen, gpus):
    # the recorded files of tests/data/tc_recordings: fp16 on every generation, bf16 and tf32 from Ampere on
    kinds = [("f16", "fp16")] + ([] if gen == "volta" else [("bf16", "bf16"), ("tf32", "tf32")])
    for t, kind in kinds:
        assert EVIDENCE[f"{gen}-mma-{t}in"] == [("recordings", f"{g}_{kind}", "d_bits", 5000, 5000, "")
                                                for g in gpus] + [("mmasim", "2.1.1", 200000)]
    assert EVIDENCE[f"{gen}-mma-f16in-f16"] == [("recordings", f"{g}_fp16", "d16_bits", 5000, 5000, "")
                                               for g in gpus] + [("mmasim", "2.1.1", 200000)]
    assert f"{gen}-mma-bf16in-f16" not in INSTRUCTIONS and f"{gen}-mma-tf32in-f16" not in INSTRUCTIONS


def test_gemm_refuses_float16_and_block_scaled_instructions():
    a, b = np.zeros((2, 32), np.uint8), np.zeros((32, 2), np.uint8)
    with pytest.raises(ValueError, match="returns float16.*use 'ada-mma'"):
        ins_mod.gemm(a, b, instruction="ada-mma-f16", a_format="e4m3fn", b_format="e4m3fn")
    with pytest.raises(ValueError, match="is block-scaled"):
        ins_mod.gemm(a, b, instruction="blackwell-tcgen05-mxf8f6f4", a_format="e4m3fn", b_format="e4m3fn")
    one = np.ones((2, 1))
    with pytest.raises(ValueError, match="takes no block scales; use one of"):
        ins_mod.block_scaled_gemm(a, "e4m3fn", one, b, "e4m3fn", one.T, instruction="ada-mma", scale_format="ue8m0")
    with pytest.raises(ValueError, match=r"K = 48 must be a multiple of .*k = 32"):
        ins_mod.block_scaled_gemm(np.zeros((2, 48), np.uint8), "e4m3fn", np.ones((2, 1)), np.zeros((48, 2), np.uint8),
                                  "e4m3fn", np.ones((1, 2)), instruction="blackwell-tcgen05-mxf8f6f4",
                                  scale_format="ue8m0")


def test_gemm_pads_k_with_zero_codes_to_whole_steps():
    # K = 40: one step of 32 and a padded one; the sum of 40 products of 1 * 2**-3 is 5 (exact)
    a = fp8emu.encode(np.full((3, 40), 0.125), "e4m3fn")
    b = fp8emu.encode(np.ones((40, 2)), "e4m3fn")
    for name in ("hopper-wgmma", "ada-mma", "blackwell-mma", "rtx-blackwell-mma"):
        d = ins_mod.gemm(a, b, instruction=name, a_format="e4m3fn", b_format="e4m3fn")
        assert d.dtype == np.float32 and d.shape == (3, 2) and (d == 5.0).all()


def test_block_scaled_gemm_reads_scale_values_of_each_type():
    """Decoded scale values go back to codes: UE8M0 powers of two, UE4M3 values (e4m3fn codes) and UE5M3
    (e5m3fnu): D = sum of K products of 1 times the two scales, exact."""
    a, b = fp8emu.encode(np.ones((2, 64)), "e2m1fn"), fp8emu.encode(np.ones((64, 2)), "e2m1fn")
    for kind, sa, sb in (("ue8m0", 0.25, 8.0), ("ue4m3", 1.5, 0.75), ("ue5m3", 1.25, 3.0)):
        for ins in ("blackwell-tcgen05-mxf4nvf4", "rubin-tcgen05-mxf4nvf4"):
            if (kind, 16) not in get_instruction(ins).scale_modes:
                continue
            d = ins_mod.block_scaled_gemm(a, "e2m1fn", np.full((2, 4), sa), b, "e2m1fn", np.full((4, 2), sb),
                                          instruction=ins, scale_format=kind)
            assert d.dtype == np.float32 and (d == 64 * sa * sb).all(), (kind, ins)
    c = np.full((2, 2), 3.0, np.float32)
    d = ins_mod.block_scaled_gemm(np.zeros((2, 0), np.uint8), "e2m1fn", np.ones((2, 0)), np.zeros((0, 2), np.uint8),
                                  "e2m1fn", np.ones((0, 2)), instruction="blackwell-tcgen05-mxf4nvf4",
                                  scale_format="ue8m0", c=c)
    assert (d == 3.0).all() and d is not c and d.dtype == np.float32


def test_accumulator_input_rules():
    a, b = np.zeros((2, 32), np.uint8), np.zeros((32, 2), np.uint8)
    kw = dict(instruction="ada-mma", a_format="e4m3fn")
    with pytest.raises(TypeError, match="c must be a real array"):
        ins_mod.mma(a, b, np.zeros((2, 2), bool), **kw)
    with pytest.raises(ValueError, match="does not broadcast to"):
        ins_mod.mma(a, b, np.zeros((3, 2), np.float32), **kw)
    with pytest.raises(ValueError, match="float32 values"):
        ins_mod.mma(a, b, np.full((2, 2), 0.1), **kw)                 # 0.1 is not a float32
    d = ins_mod.mma(a, b, np.array([[np.nan, 2.0], [-1.5, 0.0]]), **kw)   # float64 holding float32 values
    assert d.dtype == np.float32 and np.isnan(d[0, 0]) and d[0, 1] == 2.0 and d[1, 0] == -1.5
    d = ins_mod.mma(a, b, 7, **kw)                                     # an int broadcast
    assert (d == 7).all() and d.dtype == np.float32


def test_mma_batch_rules():
    a = np.zeros((2, 4, 32), np.uint8)
    with pytest.raises(ValueError, match="do not broadcast"):
        ins_mod.mma(a, np.zeros((3, 32, 8), np.uint8), instruction="ada-mma", a_format="e4m3fn")
    mx = dict(instruction="blackwell-tcgen05-mxf8f6f4", a_format="e4m3fn")
    b = np.zeros((2, 32, 8), np.uint8)
    with pytest.raises(ValueError, match="the batch dimensions of a_scales"):
        ins_mod.mma(a, b, a_scales=np.full((3, 4, 1), 127, np.uint8), b_scales=np.full((2, 1, 8), 127, np.uint8), **mx)
    with pytest.raises(ValueError, match="the batch dimensions of b_scales"):
        ins_mod.mma(a, b, a_scales=np.full((2, 4, 1), 127, np.uint8), b_scales=np.full((5, 1, 8), 127, np.uint8), **mx)
    # scales that broadcast over the batch are every tile's
    one = fp8emu.encode(np.ones((2, 4, 32)), "e4m3fn")
    ones_b = fp8emu.encode(np.ones((2, 32, 8)), "e4m3fn")
    d = ins_mod.mma(one, ones_b, a_scales=np.full((4, 1), 128, np.uint8), b_scales=np.full((1, 8), 126, np.uint8), **mx)
    assert d.shape == (2, 4, 8) and (d == 32.0).all()           # 32 * 2**1 * 2**-1


def test_scale_code_values_of_each_type():
    """The one rule for a scale code (instruction_inputs.scale_values): UE8M0 ``2**(code - 127)`` with 0xFF NaN (OCP MX
    spec); UE4M3 an E4M3 code read without its sign bit (PTX: the scale is unsigned); UE5M3 as ml_dtypes'
    float8_e5m3fnu reads it.  Exponents: floor(log2 v), at least the format's smallest normal exponent."""
    import ml_dtypes
    from fp8emu.gemm.instruction_inputs import scale_values
    codes = np.arange(256, dtype=np.uint8)
    v, e = scale_values(codes, "ue8m0")
    assert v[0] == 2.0 ** -127 and v[127] == 1.0 and v[254] == 2.0 ** 127 and np.isnan(v[255])
    assert np.isnan(v).sum() == 1 and e[:255].tolist() == list(range(-127, 128))
    v, e = scale_values(codes, "ue4m3")
    e4 = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    assert np.array_equal(v[:128], e4[:128], equal_nan=True) and np.array_equal(v[128:], e4[:128], equal_nan=True)
    assert v[0xB8] == 1.0 and e[0x01] == -6 and e[0x08] == -6 and e[0x38] == 0 and e[0x7E] == 8
    if hasattr(ml_dtypes, "float8_e5m3fnu"):
        v, e = scale_values(codes, "ue5m3")
        assert np.array_equal(v, codes.view(ml_dtypes.float8_e5m3fnu).astype(np.float64), equal_nan=True)
        assert e[1] == -14 and e[0x78] == 0


def test_block_scale_argument_rules():
    a, b = np.zeros((2, 32), np.uint8), np.zeros((32, 2), np.uint8)
    one = np.full((2, 1), 127, np.uint8)
    mx = dict(instruction="blackwell-tcgen05-mxf8f6f4", a_format="e4m3fn")
    with pytest.raises(ValueError, match="give a_scales and b_scales"):
        ins_mod.mma(a, b, a_scales=one, **mx)
    with pytest.raises(ValueError, match="takes ue8m0 scales, not 'ue4m3'"):
        ins_mod.mma(a, b, a_scales=one, b_scales=one.T, scale_format="ue4m3", **mx)
    with pytest.raises(TypeError, match="a_scales must be uint8 scale codes"):
        ins_mod.mma(a, b, a_scales=one.astype(np.int16), b_scales=one.T, **mx)
    with pytest.raises(ValueError, match="takes no block scales"):
        ins_mod.mma(a, b, scale_format="ue8m0", instruction="ada-mma", a_format="e4m3fn")
    with pytest.raises(ValueError, match="takes e4m3fn, e5m2 operands, not b_format='e2m1fn'"):
        ins_mod.mma(a, b, instruction="ada-mma", a_format="e4m3fn", b_format="e2m1fn")
    # default scale type: the instruction's first (UE8M0 code 128 = 2)
    d = ins_mod.mma(fp8emu.encode(np.ones((2, 32)), "e4m3fn"), fp8emu.encode(np.ones((32, 2)), "e4m3fn"),
                    a_scales=one + 1, b_scales=one.T, **mx)
    assert (d == 64.0).all()


def test_sixteen_bit_operand_patterns():
    """16/19-bit inputs are bit patterns of their dtype; tf32 reads a float32 word without its low 13 bits."""
    x = np.array([[1.0 + 2.0 ** -10] * 4 + [0.0] * 4], np.float32)          # exact in tf32 (10 fraction bits)
    noisy = x.view(np.uint32) | np.uint32(0x1FFF) * (x != 0)                   # low 13 bits set
    ones = np.ones((8, 1), np.float32).view(np.uint32)
    kw = dict(instruction="ampere-mma-tf32in", a_format="tf32")
    clean = ins_mod.mma(x.view(np.uint32), ones, **kw)
    assert clean[0, 0] == 4 * (1 + 2.0 ** -10)
    assert ins_mod.mma(noisy, ones, **kw)[0, 0] == clean[0, 0]
    with pytest.raises(TypeError, match="as tf32 must be uint32 bit patterns"):
        ins_mod.mma(x, ones, **kw)
    h = np.full((1, 8), 1.5, np.float16).view(np.uint16)
    hb = np.full((8, 1), 2.0, np.float16).view(np.uint16)
    assert ins_mod.mma(h, hb, instruction="ampere-mma-f16in", a_format="float16")[0, 0] == 24.0
    bf = (np.full((1, 8), 1.5, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    bfb = (np.full((8, 1), -0.5, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    assert ins_mod.mma(bf, bfb, instruction="ampere-mma-bf16in", a_format="bfloat16")[0, 0] == -6.0
