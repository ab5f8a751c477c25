"""fp8emu.lab.drift: FP8 GEMM accumulation error vs K, its committed CSV and the guide's section on it."""

import re
import statistics
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import fp8emu
from fp8emu.lab import drift
from fp8emu.lab.analysis import Table
from fp8emu.training import TECurrentScaling, TEDelayedScaling, get_stack

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "docs" / "data" / "lm-study" / "k_drift.csv"
GUIDE = ROOT / "docs" / "guides" / "lm-study.md"
BEGIN, END = "<!-- k-drift:tables -->", "<!-- /k-drift:tables -->"
ML = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


@pytest.fixture(scope="module")
def committed():
    return drift.read_csv(CSV)


# ----------------------------------------------------------------------------- against exact rationals
def _fraction_stats(gemm, dist, k, model, m, n, seeds):
    """median / max / norm-wise relative error recomputed with Fractions (exact sums of exact products,
    the operands decoded by ml_dtypes), from the operands the docstring says k_drift draws."""
    fa, fb = drift.DRIFT_GEMMS[gemm]
    acc, out = drift.drift_models()[model]
    rels, num, den = [], Fraction(0), Fraction(0)
    for seed in seeds:
        g = np.random.default_rng([seed, k])
        a, b = g.standard_normal((m, k)), g.standard_normal((k, n))
        if dist == "positive":
            a, b = np.abs(a), np.abs(b)
        qa, qb = fp8emu.quantize_tensorwise(a, fa), fp8emu.quantize_tensorwise(b, fb)
        va = qa.codes.view(ML[fa]).astype(np.float64)
        vb = qb.codes.view(ML[fb]).astype(np.float64)
        y = np.asarray(fp8emu.scaled_mm(qa.codes, qb.codes, a_format=fa, b_format=fb, accumulator=acc,
                                        out_dtype=out), np.float64)
        for i in range(m):
            for j in range(n):
                s = sum((Fraction(float(x)) * Fraction(float(z)) for x, z in zip(va[i], vb[:, j])), Fraction(0))
                d = Fraction(float(y[i, j])) - s
                rels.append(abs(d) / abs(s))
                num += d * d
                den += s * s
    return float(statistics.median(rels)), float(max(rels)), float(num / den) ** 0.5


@pytest.mark.parametrize("gemm, dist", [("fprop", "positive"), ("dgrad/wgrad", "gaussian")])
def test_errors_are_those_of_exact_rational_sums(gemm, dist):
    t = drift.k_drift(ks=(64, 320), m=3, n=2, seeds=(4, 9), gemms=(gemm,), distributions=(dist,))
    assert len(t) == 2 * len(drift.DRIFT_MODELS)
    for r in t.rows():
        med, mx, norm = _fraction_stats(gemm, dist, r["k"], r["model"], 3, 2, (4, 9))
        assert r["outputs"] == 12
        assert r["median_rel_error"] == pytest.approx(med, rel=1e-12, abs=1e-300), r
        assert r["max_rel_error"] == pytest.approx(mx, rel=1e-12, abs=1e-300), r
        assert r["norm_rel_error"] == pytest.approx(norm, rel=1e-9, abs=1e-300), r


def test_fast_and_split_give_the_same_bits_up_to_k_128():
    g = np.random.default_rng(3)
    a = fp8emu.quantize_tensorwise(np.abs(g.standard_normal((8, 128))), "e4m3fn").codes
    b = fp8emu.quantize_tensorwise(np.abs(g.standard_normal((128, 8))), "e4m3fn").codes
    models = drift.drift_models()
    fast, split = (fp8emu.scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", accumulator=models[m][0])
                   for m in ("hopper-fast", "hopper"))
    assert np.array_equal(fast.view(np.uint32), split.view(np.uint32))
    fast2, split2 = (fp8emu.scaled_mm(np.hstack([a, a]), np.vstack([b, b]), a_format="e4m3fn", b_format="e4m3fn",
                                      accumulator=models[m][0]) for m in ("hopper-fast", "hopper"))
    assert not np.array_equal(fast2, split2)      # K = 256: one promotion apart


def test_the_models_are_the_documented_accumulators():
    models = drift.drift_models()
    assert models["hopper"][0].policy.promote == 4 and models["hopper-fast"][0].policy.promote is None  # 4 x k32
    assert (models["hopper"][0].policy.split_k is None
            and drift.drift_models("cublas")["hopper"][0].policy.split_k == "cublas")
    assert models["blackwell"] == ("blackwell-tcgen05-f8f6f4", "float32")
    assert models["bf16-output"] == ("exact", "bfloat16")


# ----------------------------------------------------------------------------- properties that could fail
def test_fast_accumulation_drifts_on_positive_data_and_split_does_not(committed):
    for gemm in drift.DRIFT_GEMMS:
        pos = committed.where(gemm=gemm, distribution="positive")
        fast, split = pos.where(model="hopper-fast"), pos.where(model="hopper")
        ks = fast["k"]
        # identical until the first promotion (K = 128), then always worse, and growing with K
        same = ks <= 128
        assert np.array_equal(fast["median_rel_error"][same], split["median_rel_error"][same])
        assert np.all(fast["median_rel_error"][~same] > split["median_rel_error"][~same])
        assert np.all(fast["max_rel_error"][~same] > split["max_rel_error"][~same])
        assert np.all(np.diff(fast["median_rel_error"]) > 0)
        # truncation toward zero on a sum that grows as K: more than 10 % lost at K = 16384,
        # while the split accumulator's error stays below bf16's output rounding at every K
        assert fast["median_rel_error"][-1] > 0.1
        bf16 = pos.where(model="bf16-output")["median_rel_error"]
        assert np.all(split["median_rel_error"] < bf16)


@pytest.mark.parametrize("dist", ["gaussian", "mixed"])
def test_mixed_sign_products_drift_less_than_positive_ones(committed, dist):
    for gemm in drift.DRIFT_GEMMS:
        g = committed.where(gemm=gemm, model="hopper-fast", distribution=dist)
        p = committed.where(gemm=gemm, model="hopper-fast", distribution="positive")
        big = g["k"] >= 512
        assert np.all(g["norm_rel_error"][big] < p["norm_rel_error"][big] / 10)


def test_exact_model_is_one_float32_rounding(committed):
    ex = committed.where(model="exact")
    assert np.all(ex["max_rel_error"] <= 2.0 ** -24)
    bw = committed.where(model="blackwell")
    assert np.all(bw["median_rel_error"] >= ex["median_rel_error"])


def test_committed_csv_is_what_the_code_computes(committed):
    t = drift.k_drift(ks=(64, 1024), gemms=("fprop",), distributions=("positive",))
    t2 = drift.k_drift(ks=(2048,), gemms=("dgrad/wgrad",), distributions=("mixed",))
    for r in t.rows() + t2.rows():
        row = committed.where(gemm=r["gemm"], distribution=r["distribution"], k=r["k"], model=r["model"]).rows()
        assert row == [r]
    full = drift.k_drift.__kwdefaults__
    assert sorted(set(committed["k"].tolist())) == list(drift.DEFAULT_KS)
    assert set(committed["outputs"].tolist()) == {full["m"] * full["n"] * len(full["seeds"])}
    assert len(committed) == len(drift.DEFAULT_KS) * len(drift.DRIFT_MODELS) * len(drift.DRIFT_GEMMS) * 3


# ----------------------------------------------------------------------------- the study's stacks
def test_stack_models_are_the_training_stacks():
    names = {m: acc for m, (acc, _) in drift.DRIFT_MODELS.items()}
    for recipe in (TEDelayedScaling(), TECurrentScaling()):
        assert recipe.formats() == {"input": "e4m3fn", "weight": "e4m3fn", "grad_output": "e5m2"}
        for stack, passes in drift.STACK_MODELS.items():
            for pass_, model in passes.items():
                assert get_stack(stack).accumulator("fp8", recipe.split(pass_)) == names[model], (stack, pass_)


# ----------------------------------------------------------------------------- the guide
def _block():
    text = GUIDE.read_text(encoding="utf-8")
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)]


def _section():
    text = GUIDE.read_text(encoding="utf-8")
    sec = text[text.index("## Fast accumulation and K"):]
    return sec[:sec.index("\n## ", 5)] if "\n## " in sec[5:] else sec


def test_guide_block_is_what_the_code_writes(committed):
    assert _block().strip() == drift.guide_block(committed).strip()


def test_every_number_in_the_section_is_in_the_block_or_the_csv(committed):
    prose = _section().replace(_block(), "")
    block = _block()
    numbers = re.findall(r"(?<![\w.^-])\d+(?:\.\d+)?(?:e-\d+)?(?![\w^])", prose)
    assert len(numbers) >= 8
    allowed = {str(k) for k in committed["k"].tolist()} | {str(v) for v in committed["outputs"].tolist()}
    allowed |= {"0", "1", "32", "14", "25"}   # N(0, 1), 1 %, M = N = 32, and the model constants below
    missing = [x for x in numbers if x not in block and x not in allowed]
    assert not missing, f"numbers in the section that the block does not show: {missing}"
    # the model constants the prose names are the models'
    prose = re.sub(r"\s+", " ", prose)
    hop = drift.drift_models()["hopper"][0]
    from fp8emu.gemm.models import widths
    assert f"{widths(hop.instruction)[2]} significant bits" in prose
    assert hop.policy.promote * hop.instruction.step == 128 and "every 128 of K" in prose
    from fp8emu.gemm import INSTRUCTIONS
    assert f"{INSTRUCTIONS[drift.DRIFT_MODELS['blackwell'][0]].frac_bits} fraction bits" in prose
    assert "three seeds" in prose and len(drift.k_drift.__kwdefaults__["seeds"]) == 3
    assert "M = N = 32" in prose and drift.k_drift.__kwdefaults__["m"] == drift.k_drift.__kwdefaults__["n"] == 32


def test_section_names_the_committed_figure_and_tool():
    sec = _section()
    assert "../../figures/lm_study_k_drift.png" in sec and "tools/make_k_drift.py" in sec
    assert (ROOT / "figures" / "lm_study_k_drift.png").stat().st_size > 10_000


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kw, err, words", [
    (dict(ks=(100,)), ValueError, "multiples of 32"),
    (dict(ks=()), ValueError, "non-empty"),
    (dict(ks="64"), TypeError, "sequence of integers"),
    (dict(models=("h100",)), ValueError, "accepted: hopper, hopper-fast"),
    (dict(models="exact"), TypeError, "sequence of names"),
    (dict(gemms=("wgrad",)), ValueError, "accepted: fprop, dgrad/wgrad"),
    (dict(distributions=("uniform",)), ValueError, "accepted: gaussian, positive"),
    (dict(m=0), ValueError, "m must be a positive integer, got 0"),
    (dict(n=2.0), ValueError, "n must be a positive integer, got 2.0"),
    (dict(seeds=(-1,)), ValueError, "seeds must be"),
])
def test_bad_input_is_one_clear_error(kw, err, words):
    with pytest.raises(err, match=re.escape(words)):
        drift.k_drift(**kw)


def test_read_csv_refuses_another_file(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a k_drift CSV"):
        drift.read_csv(p)
    bad = CSV.read_text().splitlines()
    bad[3] = bad[3].rsplit(",", 1)[0] + ",oops"
    p.write_text("\n".join(bad) + "\n")
    with pytest.raises(ValueError, match=r"x.csv: line 4: norm_rel_error = 'oops' is not float"):
        drift.read_csv(p)
    with pytest.raises(ValueError, match="not a k_drift table"):
        drift.write_csv(Table({"k": [1]}), p)


def test_figure_has_one_line_per_model_and_distribution(committed):
    fig = drift.figure_k_drift(committed)
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert len(ax.lines) == len(drift.DRIFT_MODELS) * len(drift.DRIFT_DISTRIBUTIONS)
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"


def test_the_findings_sentences_are_the_committed_csv(committed):
    prose = re.sub(r"\s+", " ", _section().replace(_block(), ""))
    g = drift._g

    def med(gemm, dist, model, k):
        return committed.where(gemm=gemm, distribution=dist, model=model, k=k)["median_rel_error"][0]

    def above(gemm, dist, threshold):
        return drift.first_k_above(committed, gemm, dist, "hopper-fast", threshold)
    kmax = max(drift.DEFAULT_KS)
    fast = committed.where(gemm="fprop", distribution="positive", model="hopper-fast", k=kmax)
    assert above("fprop", "positive", 0.01) == above("dgrad/wgrad", "positive", 0.01)
    assert (f"above bf16's output rounding from K = {above('fprop', 'positive', 'bf16-output')} in fprop "
            f"({above('dgrad/wgrad', 'positive', 'bf16-output')} in dgrad/wgrad), above 1 % from "
            f"K = {above('fprop', 'positive', 0.01)}, and {g(fast['median_rel_error'][0])} at K = {kmax} "
            f"(largest {g(fast['max_rel_error'][0])})") in prose
    assert fast["median_rel_error"][0] > 0.2 and "more than a fifth" in prose
    for gemm, words in (("fprop", "(fprop)"), ("dgrad/wgrad", "(dgrad/wgrad)")):
        split = committed.where(gemm=gemm, distribution="positive", model="hopper")["norm_rel_error"].max()
        assert f"{g(split)} {words}" in prose
    for dist in ("gaussian", "mixed"):
        assert above("fprop", dist, "bf16-output") == 8192 and above("dgrad/wgrad", dist, "bf16-output") == kmax
        assert above("fprop", dist, 0.01) is None and above("dgrad/wgrad", dist, 0.01) is None
    assert "only from K = 8192 in fprop (16384 in dgrad/wgrad) and stays under 1 % up to K = 16384" in prose
    assert (f"(fprop medians {g(med('fprop', 'gaussian', 'hopper-fast', kmax))} Gaussian, "
            f"{g(med('fprop', 'mixed', 'hopper-fast', kmax))} mixed)") in prose
    bw = med("fprop", "positive", "blackwell", kmax)
    assert f"median error is {g(bw)} at K = {kmax}" in prose
    assert bw * 100 < med("fprop", "positive", "bf16-output", kmax) and "two orders of magnitude" in prose
    assert f"largest error is {g(committed.where(model='exact')['max_rel_error'].max())}, one float32" in prose
    assert (f"operands is {g(med('fprop', 'gaussian', 'hopper-fast', 512))} against bf16's output rounding "
            f"of {g(med('fprop', 'gaussian', 'bf16-output', 512))}") in prose
