"""The one lookup of GEMM models (fp8emu.gemm.models): named (row, policy) pairs, and the catalogue
engine under a policy against the reference steps and against the wide route's steps (rows of
unbounded exponents, from decoded operands)."""

from fractions import Fraction

import numpy as np
import pytest

import fp8emu
from fp8emu.gemm import datapaths, models
from fp8emu.gemm.catalogue import INSTRUCTIONS
from fp8emu.gemm.code_tables import values_and_exponents
from fp8emu.gemm.routes.wide import run_wide

RNG = np.random.default_rng(52)


def _codes(fmt, shape, kind):
    """Finite codes: all of them, only subnormals and the smallest normals, or only the largest."""
    f = fp8emu.get_format(fmt)
    fin = np.array([c for c in range(1 << f.bits) if np.isfinite(fp8emu.decode(np.uint8(c), f))], np.uint8)
    v = np.abs(fp8emu.decode(fin, f).astype(np.float64))
    pick = {"all": fin, "sub": fin[v <= 4 * f.min_normal], "big": fin[v >= v.max() / 4],
            "ties": fin[np.isin(np.frexp(v)[0], (0.5, 0.75))]}[kind]
    return RNG.choice(pick, shape)


def _wide(widths):
    """The row of unbounded exponents of step widths (group, fraction bits, result bits, rounding)."""
    row = models.step_row(*widths)
    return row if row.out == "float64" else models.wide_row(row)


def _promoted(va, ea, vb, eb, widths, promote, c=None):
    """The wide route's chain of steps, restarted every ``promote`` steps and the chains' float32
    results added in K order (round to nearest even): promotion written out apart."""
    row = _wide(widths)
    if promote is None:
        return run_wide(row, va, ea, vb, eb, c=c).astype(np.float32)     # the chain's float32 result
    total = np.zeros((va.shape[0], vb.shape[1]), np.float32)
    n = promote * row.step
    for k0 in range(0, va.shape[1], n):
        total = total + run_wide(row, va[:, k0:k0 + n], ea[:, k0:k0 + n], vb[k0:k0 + n],
                                 eb[k0:k0 + n]).astype(np.float32)
    return total


def test_named_models_are_rows_and_policies():
    assert models.get_model("hopper").instruction is INSTRUCTIONS["hopper-wgmma"]
    assert models.get_model("hopper").policy == models.Policy(promote=4, split_k="cublas")
    assert models.get_model("hopper-fast").policy == models.Policy(split_k="cublas")
    assert models.get_model("blackwell").instruction is INSTRUCTIONS["blackwell-mma"]
    assert models.get_model("blackwell").policy.scale_at == "product"
    assert models.get_model("exact").kind == "exact" and models.get_model("fp32").kind == "fp32"
    assert models.get_model("torch-cpu-onednn").kind == "torch-cpu"
    # every float32-output row by name: a plain chain with the row's own Inf/NaN rules
    m = models.get_model("ada-mma")
    assert m.instruction is INSTRUCTIONS["ada-mma"] and m.policy == models.Policy(specials="instruction")
    assert fp8emu.get_model is models.get_model and fp8emu.MODELS is models.MODELS


def test_step_widths_name_their_row_or_change_hoppers():
    assert models.step_row(32, 13, 14, "rtz").name == "hopper-wgmma"
    assert models.step_row(32, 31, 24, "rne").name == "blackwell-mma"
    assert models.step_row(16, 13, 14, "rtz").name == "ada-mma"
    # widths no preset has: Hopper's row with the step, fraction bits and result rounding changed
    odd = models.GemmModel("odd", "instruction", models.step_row(8, 20, 22, "rne", name="odd"),
                           models.Policy(promote=3, split_k=2))
    assert models.get_model(odd) is odd
    assert (odd.instruction.name, odd.instruction.step, odd.instruction.frac_bits) == ("odd", 8, 20)
    assert odd.instruction.rounding == "rne-e8m21" and odd.instruction.datapath == "fused"
    assert models.widths(odd.instruction) == (8, 20, 22, "rne")
    # results wider than float32's: the row's results held in float64 (exponents unbounded)
    wide = models.step_row(32, 30, 30, "rne")
    assert (wide.out, wide.rounding, wide.zero_exp) == ("float64", "rne-e8m29", -900)
    assert models.step_row(32, 30, 1, "rtz").rounding == "rz-e8m0"
    # block-scaled: the row's "scaled" form of unbounded exponents, a scale type and block per operand
    sr = models.scaled_row(models.step_row(32, 31, 24, "rne"))
    assert (sr.datapath, sr.out, sr.zero_exp, sr.scale_modes) == ("scaled", "float64", -900, tuple(
        (k, b) for k in ("ue8m0", "ue4m3", "ue5m3") for b in (16, 32)))
    for bad in ({"step": 0}, {"frac_bits": 41}, {"rounding": "rna"}):
        args = {"step": 32, "frac_bits": 13, "result_bits": 14, "rounding": "rtz", **bad}
        with pytest.raises(ValueError, match=list(bad)[0].replace("step", "step_row step")):
            models.step_row(**args)


@pytest.mark.parametrize("bad, match", [("volta", "unknown accumulator 'volta'"), (3, "unknown accumulator 3")])
def test_unknown_models_are_named(bad, match):
    with pytest.raises(ValueError, match=match):
        models.get_model(bad)


@pytest.mark.parametrize("field, value", [("promote", 0), ("promote", True), ("split_k", "auto"),
                                          ("scale_at", "row"), ("specials", "gpu")])
def test_policy_rejects_bad_fields(field, value):
    with pytest.raises(ValueError, match=f"Policy {field} must be"):
        models.Policy(**{field: value})


def test_hopper_promotion_by_exact_arithmetic():
    # products 1 and 255 x 2**-15: every 128 of K restarts the chain, whose 13 fraction bits below
    # 2**0 drop 2**-15 only while the 1 is in the same chain
    a = fp8emu.encode(np.array([[1.0] + [2.0 ** -9] * 255]), "e4m3fn")
    b = fp8emu.encode(np.array([[1.0]] + [[2.0 ** -6]] * 255), "e4m3fn")
    fast = fp8emu.scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", accumulator="hopper-fast")
    slow = fp8emu.scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", accumulator="hopper")
    assert Fraction(float(fast[0, 0])) == 1
    assert Fraction(float(slow[0, 0])) == 1 + 128 * Fraction(1, 2 ** 15)


@pytest.mark.parametrize("promote", [None, 2, 4])
def test_run_steps_is_the_reference_chain_per_interval(promote):
    # the reference steps (datapaths.reference, one K step at a time), restarted from zero per interval
    # and summed in float32 in K order
    ins = INSTRUCTIONS["hopper-wgmma"]
    model = models.GemmModel("t", "instruction", ins, models.Policy(promote=promote))
    ca, cb = _codes("e4m3fn", (9, 320), "all"), _codes("e5m2", (320, 7), "all")
    got = models.run_steps(model, ca, "e4m3fn", cb, "e5m2")
    step = 320 if promote is None else promote * ins.step
    want = np.zeros((9, 7), np.float32)
    for k0 in range(0, 320, step):
        a, b = ca[:, k0:k0 + step], cb[k0:k0 + step]
        pad = (-a.shape[1]) % ins.step
        a, b = np.pad(a, ((0, 0), (0, pad))), np.pad(b, ((0, pad), (0, 0)))
        part = datapaths.reference(ins, a[:, None, :], b.T[None, :, :], np.zeros((9, 7), np.float32),
                                   "e4m3fn", "e5m2")
        want = (want + part).astype(np.float32)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_run_steps_sums_exact_and_fp32_models_and_refuses_torch_cpu():
    # "exact": the exact sum (fractions) rounded once to float32; "fp32": float32 additions in K order;
    # with a block factor, each 128 of K joins the float32 total with one rounding
    ca, cb = _codes("e4m3fn", (3, 200), "all"), _codes("e5m2", (200, 2), "all")
    va = fp8emu.decode(ca, "e4m3fn", dtype=np.float64)
    vb = fp8emu.decode(cb, "e5m2", dtype=np.float64)
    va[~np.isfinite(va)], vb[~np.isfinite(vb)] = 0, 0
    fr = lambda x: [Fraction(float(v)) for v in x]
    exact = [[np.float32(float(sum(p * q for p, q in zip(fr(va[i]), fr(vb[:, j]))))) for j in range(2)]
             for i in range(3)]
    got = models.run_steps(models.get_model("exact"), ca, "e4m3fn", cb, "e5m2")
    assert got.tolist() == np.array(exact, np.float32).tolist()
    seq = np.zeros((3, 2), np.float32)
    for k in range(200):
        seq = (seq + (va[:, k, None] * vb[k]).astype(np.float32)).astype(np.float32)
    fp32 = models.run_steps(models.get_model("fp32"), ca, "e4m3fn", cb, "e5m2")
    assert fp32.view(np.uint32).tolist() == seq.view(np.uint32).tolist()
    twice = models.run_steps(models.get_model("exact"), ca, "e4m3fn", cb, "e5m2", kscale=lambda kb: np.full((3, 2), 2.0))
    halves = [models.run_steps(models.get_model("exact"), ca[:, k0:k0 + 128], "e4m3fn", cb[k0:k0 + 128], "e5m2")
              for k0 in (0, 128)]
    assert twice.tolist() == np.float32(np.float32(2 * halves[0].astype(np.float64)) + 2 * halves[1]).tolist()
    with pytest.raises(ValueError, match="torch's CPU _scaled_mm, not a sum along K"):
        models.run_steps(models.get_model("torch-cpu-onednn"), ca, "e4m3fn", cb, "e5m2")


@pytest.mark.parametrize("kind", ["all", "sub", "big", "ties"])
@pytest.mark.parametrize("fa, fb", [("e4m3fn", "e4m3fn"), ("e5m2", "e4m3fn"), ("e5m2", "e5m2")])
@pytest.mark.parametrize("widths, row, promote", [((32, 13, 14, "rtz"), "hopper-wgmma", None),
                                                  ((32, 13, 14, "rtz"), "hopper-wgmma", 4),
                                                  ((32, 31, 24, "rne"), "blackwell-mma", None),
                                                  ((32, 25, 24, "rtz"), "blackwell-tcgen05-f8f6f4", None),
                                                  ((16, 13, 14, "rtz"), "ada-mma", None),
                                                  ((8, 20, 22, "rne"), None, 3),
                                                  ((64, 6, 12, "rtz"), None, None),
                                                  ((16, 40, 2, "rne"), None, None),
                                                  ((32, 30, 30, "rtz"), None, 2),
                                                  ((64, 40, 40, "rne"), None, None)])
def test_rows_equal_the_kernels_steps(kind, fa, fb, widths, row, promote):
    # two implementations of one step: the wide route's and the catalogue row's (run_steps)
    M, N, K = 21, 13, 512
    ca, cb = _codes(fa, (M, K), kind), _codes(fb, (K, N), kind)
    c = None
    if promote is None:
        c = (RNG.standard_normal((M, N)) * np.exp2(RNG.integers(-20, 20, (M, N)))).astype(np.float32)
        c[0] = 0
    va, ea = values_and_exponents(ca, fp8emu.get_format(fa))
    vb, eb = values_and_exponents(cb, fp8emu.get_format(fb))
    old = _promoted(va, ea, vb, eb, widths, promote, c)
    model = models.GemmModel("widths", "instruction", models.step_row(*widths), models.Policy(promote=promote))
    assert row is None or model.instruction is INSTRUCTIONS[row]
    new = models.run_steps(model, ca, fa, cb, fb, c=c)
    np.testing.assert_array_equal(new.view(np.uint32), old.view(np.uint32))


def test_formats_beyond_the_row():
    # a named model takes any format of at most 8 bits: the row with the formats added where its
    # float32 steps are the model's, the kernels' widths where products leave float32's normal range
    e2m1, e8m0, e4m3 = (fp8emu.get_format(n) for n in ("e2m1fn", "e8m0fnu", "e4m3fn"))
    assert models.row_for_formats(models.get_model("hopper"), e2m1, e2m1, 256).formats == ("e2m1fn",)
    wide = models.row_for_formats(models.get_model("hopper"), e8m0, e4m3, 256)
    assert wide == models.wide_row(INSTRUCTIONS["hopper-wgmma"], formats=("e8m0fnu", "e4m3fn"))
    for fa, fb in (("e2m1fn", "e2m1fn"), ("e8m0fnu", "e4m3fn"), ("e8m0fnu", "e8m0fnu")):
        ca, cb = _codes(fa, (8, 96), "all"), _codes(fb, (96, 6), "all")
        va, ea = values_and_exponents(ca, fp8emu.get_format(fa))
        vb, eb = values_and_exponents(cb, fp8emu.get_format(fb))
        old = _promoted(va, ea, vb, eb, (32, 13, 14, "rtz"), 4)
        new = fp8emu.scaled_mm(ca, cb, a_format=fa, b_format=fb, accumulator="hopper")
        np.testing.assert_array_equal(new.view(np.uint32), old.view(np.uint32), err_msg=f"{fa} x {fb}")


def test_block_scaled_models_are_refused_by_scaled_mm():
    a = fp8emu.encode(np.ones((2, 32)), "e4m3fn")
    with pytest.raises(ValueError, match="'blackwell' is a block-scaled model"):
        fp8emu.scaled_mm(a, a.T.copy(), a_format="e4m3fn", b_format="e4m3fn", accumulator="blackwell")


def test_run_steps_refuses_values_an_instruction_would_ignore():
    a = fp8emu.encode(np.ones((2, 32)), "e4m3fn")
    b = fp8emu.encode(np.ones((32, 2)), "e4m3fn")
    with pytest.raises(ValueError, match="'hopper' chains its instruction on the codes"):
        models.run_steps(models.get_model("hopper"), a, "e4m3fn", b, "e4m3fn", values=((None, None), (None, None)))
