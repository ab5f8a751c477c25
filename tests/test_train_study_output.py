"""fp8emu train-study's defaults, --help and report; clipping apart from block maxima."""

import argparse
import contextlib
import csv
import io
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fp8emu.torch as ft  # noqa: E402
from fp8emu.cli import main, train_study  # noqa: E402
from fp8emu.lab import lm_study  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "docs" / "data" / "lm-study"


def _csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _provenance():
    return {r["item"]: r["value"] for r in _csv(COMMITTED / "provenance.csv")}


def _parser():
    p = argparse.ArgumentParser(prog="fp8emu")
    train_study.register(p.add_subparsers(dest="command"), "train-study", "")
    return p


def test_the_defaults_are_the_committed_study():
    prov = _provenance()
    cfg = train_study.study_config(_parser().parse_args(["train-study"]))
    for part, obj in (("model", cfg.model), ("train", cfg.train)):
        for k, v in prov.items():
            if k.startswith(part + "."):
                assert str(getattr(obj, k.split(".", 1)[1])) == v, k
    committed = _csv(COMMITTED / "runs.csv")
    seeds = {}
    for r in committed:
        seeds.setdefault(r["stack"] == "", set()).add(int(r["seed"]))
    assert set(cfg.seeds) == seeds[False] and set(cfg.baseline_seeds) == seeds[True]
    words = shlex.split(prov["command"])
    infer = int(words[words.index("--infer-windows") + 1])
    assert train_study.infer_windows(_parser().parse_args(["train-study"])) == infer
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["train-study", "--list"]) == 0
    assert out.getvalue().splitlines()[-1] == f"{len(committed)} runs"


def test_help_shows_the_committed_defaults():
    prov = _provenance()
    text = " ".join(_parser().parse_args.__self__._subparsers._group_actions[0].choices["train-study"]
                    .format_help().split())
    for opt, key in (("--steps", "train.steps"), ("--seq-len", "model.seq_len"), ("--batch", "model.batch"),
                     ("--n-layer", "model.n_layer"), ("--d-model", "model.d_model"), ("--n-head", "model.n_head"),
                     ("--eval-every", "train.eval_every"), ("--lr", "train.lr")):
        m = re.search(re.escape(opt) + r" [A-Z_]+ [^(]*\(default ([0-9.]+),", text)
        assert m and m.group(1) == prov[key], opt


@pytest.fixture(scope="module")
def small_study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study") / "s"
    argv = ["train-study", "--quick", "--pairs", "te-nvfp4@b200", "--steps", "4", "--eval-every", "2",
            "--seeds", "2", "--seq-len", "16", "--batch", "4", "--infer-windows", "4", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    return out


def test_timing_columns_leave_the_diagnostics_seed_out_and_show_it_apart(small_study):
    runs = {r["run_id"]: r for r in _csv(small_study / "runs.csv")}
    gaps = {r["label"]: r for r in _csv(small_study / "gaps.csv")}
    row = gaps["te-nvfp4@b200"]
    fp32 = np.mean([float(runs[k]["s_per_step"]) for k in runs if k.startswith("fp32")])
    plain = [k for k in runs if k.startswith("te-nvfp4") and k.endswith("s1")]
    diag = [k for k in runs if k.startswith("te-nvfp4") and k.endswith("s0")]
    assert len(plain) == len(diag) == 1                      # seed 0 records diagnostics, seed 1 does not
    assert float(row["s_per_step"]) == float(runs[plain[0]]["s_per_step"])
    assert float(row["s_per_step_diagnostics"]) == float(runs[diag[0]]["s_per_step"])
    assert float(row["slowdown_vs_fp32"]) == pytest.approx(float(runs[plain[0]]["s_per_step"]) / fp32, rel=1e-12)
    assert row["timed_seeds"] == "1"


def test_every_report_says_how_to_read_it(small_study):
    for name in ("report.md", "report.html"):
        text = (small_study / name).read_text(encoding="utf-8")
        assert "How to read this report" in text
        assert text.count("How to read:") == 2                # the gap table and the inference table
        assert "over 8 validation windows" in text            # --quick's final windows
        assert "on 4 validation windows (--infer-windows)" in text
        assert "s/step with diagnostics" in text
        assert "fraction clipped" in text and "by design" in text
    cols = _csv(small_study / "diagnostics.csv")[0]
    assert "frac_clipped" in cols and "frac_saturated" in cols


def test_block_maxima_at_the_format_max_are_not_clipping():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 128))
    ft.emulate(model, "te-nvfp4", "b200", diagnostics=True)
    model(torch.randn(64, 128)).square().mean().backward()
    rows = {(r["pass"], r["tensor"]): r for r in ft.diagnostics(model)}
    fin = rows[("fprop", "input")]
    # NVFP4 scales each 16-element block so that its largest element lands at (or next to) 6.0: many codes sit at
    # the maximum, none was clipped
    assert fin["frac_saturated"] > 0.05 and fin["frac_clipped"] == 0.0
    # the wgrad copies are quantized after the random Hadamard transform: their clipping is not measured
    assert np.isnan(rows[("wgrad", "input")]["frac_clipped"])


def test_clipping_counts_only_inputs_beyond_max_plus_half_an_ulp():
    # delayed scaling's first step quantizes with the initial scale 1: E4M3's max is 448 and its ulp there 32, so
    # inputs up to 464 round to 448 (saturated, not clipped) and those beyond are clipped
    values = np.array([500.0, -470.0, 464.0, 460.0, 448.0, 1.0] + [0.5] * 10, np.float32)
    x = torch.from_numpy(np.tile(values, (16, 1)))
    model = torch.nn.Sequential(torch.nn.Linear(16, 16))
    ft.emulate(model, "te-delayed", "exact", diagnostics=True)
    with torch.no_grad():
        model(x)
    row = ft.diagnostics(model)[0]
    assert (row["pass"], row["tensor"]) == ("fprop", "input")
    assert row["frac_clipped"] == 2 / 16                        # 500 and -470
    assert row["frac_saturated"] == 5 / 16                      # and 464, 460, 448
