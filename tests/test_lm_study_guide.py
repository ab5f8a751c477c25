"""docs/guides/lm-study.md states the numbers of the committed study (docs/data/lm-study/*.csv)."""

import csv
import math
import re
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data" / "lm-study"
GUIDE = ROOT / "docs" / "guides" / "lm-study.md"
FORKS = ROOT / "docs" / "data" / "lm-forks"
BEGIN, END = "<!-- lm-study:tables -->", "<!-- /lm-study:tables -->"
FBEGIN, FEND = "<!-- lm-forks:tables -->", "<!-- /lm-forks:tables -->"


def _csv(name):
    with open(DATA / name, newline="") as f:
        return list(csv.DictReader(f))


def _block():
    text = GUIDE.read_text(encoding="utf-8")
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)]


def _row(block, *cells):
    head = "| " + " | ".join(cells) + " |"
    lines = [ln for ln in block.splitlines() if ln.startswith(head)]
    assert len(lines) == 1, f"no single table row starting {head!r}"
    return lines[0]


def test_gap_table_is_the_committed_csv():
    block = _block()
    for r in _csv("gaps.csv"):
        line = _row(block, r["recipe"], r["stack"] or "-", r["seeds"], r["diverged"])
        assert f"| {float(r['mean_final_val_loss']):.4f} |" in line
        if r["gap_to_bf16"] not in ("", "nan"):
            assert f"| {float(r['gap_to_bf16']):+.4f} |" in line
        if r["gap_ci95_low"] not in ("", "nan"):
            assert f"[{float(r['gap_ci95_low']):+.4f}, {float(r['gap_ci95_high']):+.4f}]" in line
        assert f"| {float(r['s_per_step']):.3f} |" in line


def test_inference_table_is_the_committed_csv():
    block = _block()
    for r in _csv("inference.csv"):
        line = _row(block, r["config"], r["weights"], r["activations"])
        assert f"| {float(r['perplexity']):.3f} | {float(r['ppl_ratio_to_bf16']):.4f} |" in line


def test_run_count_and_time_are_the_committed_csv():
    runs = _csv("runs.csv")
    fp8 = [r for r in runs if r["stack"]]
    total = sum(float(r["wall_s"]) for r in runs) / 60
    assert f"{len(runs)} runs ({len(runs) - len(fp8)} baseline, {len(fp8)} emulated)" in _block()
    assert f"add up to {total:.1f} min" in _block()


def test_every_number_in_the_findings_is_in_the_tables():
    text = GUIDE.read_text(encoding="utf-8")
    findings = text[text.index("## Findings"):]
    findings = findings[:findings.index("\n## ", 5)] if "\n## " in findings[5:] else findings
    block = _block() + _fork_block()
    numbers = re.findall(r"(?<![\w.])[+-]?\d+\.\d+(?:e[+-]\d+)?", findings)
    assert len(numbers) >= 5
    missing = [n for n in numbers if n not in block]
    assert not missing, f"numbers in the findings that the tables do not show: {missing}"


def test_guide_block_is_what_the_code_writes():
    from fp8emu.lab import lm_study as report
    assert _block().strip() == report.guide_tables(DATA).strip()


def test_corpus_sizes_in_the_guide_are_the_study_provenance():
    prov = {r["item"]: r["value"] for r in _csv("provenance.csv")}
    text = re.sub(r"\s+", " ", GUIDE.read_text(encoding="utf-8"))
    n, train = int(prov["corpus_bytes"]), int(prov["train_bytes"])
    assert f"{int(prov['n_params']):_} parameters".replace("_", " ") in text
    assert train == n * 9 // 10
    assert f"{n:_} bytes, {train:_} train".replace("_", " ") in text


def test_readme_block_is_what_the_code_writes():
    """The README's study bullets are lm_forks.readme_block of the committed CSV, word for word."""
    from fp8emu.lab import lm_forks
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text[text.index("<!-- lm-study:readme -->") + len("<!-- lm-study:readme -->"):
                 text.index("<!-- /lm-study:readme -->")]
    assert block.strip() == lm_forks.readme_block(FORKS, DATA).strip()
    assert "2.4 would" not in block and "no measurable loss" not in block
    emulated = [g for g in _csv("gaps.csv") if g["stack"]]
    assert f"all\n{len(emulated)} recipe x stack pairs" in text


def test_readme_numbers_are_in_the_guide_tables():
    """Every number the README's bullets state is in one of the guide's generated blocks (from the CSV)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text[text.index("<!-- lm-study:readme -->"):text.index("<!-- /lm-study:readme -->")]
    numbers = re.findall(r"(?<![\w.])[+-]?\d+\.\d+(?:e[+-]\d+)?", block)
    assert len(numbers) >= 12
    tables = _block() + _fork_block()
    missing = [n for n in numbers if n not in tables and n.lstrip("+") not in tables]
    assert not missing, f"numbers in the README's study bullets that the guide's tables do not show: {missing}"


def _fork_block():
    text = GUIDE.read_text(encoding="utf-8")
    return text[text.index(FBEGIN) + len(FBEGIN):text.index(FEND)]


def test_fork_block_is_what_the_code_writes():
    from fp8emu.lab import lm_forks
    assert _fork_block().strip() == lm_forks.guide_tables(FORKS, DATA).strip()


def test_fork_gaps_are_the_runs_paired_by_seed():
    """fork_gaps.csv against runs.csv: mean, sd and t half-width over seeds, with Python's statistics."""
    with open(FORKS / "runs.csv", newline="") as f:
        runs = list(csv.DictReader(f))
    with open(FORKS / "fork_gaps.csv", newline="") as f:
        gaps = list(csv.DictReader(f))
    assert {r["fork_at"] for r in runs} == {"112"} and len({r["trunk_sha256"] for r in runs}) == 1
    assert all(float(r["fp32_val_loss"]) > 0 and float(r["fp32_window_loss"]) > 0 for r in runs)
    loss = {}
    for r in runs:
        loss[("fp32_val_loss", r["recipe"], r["stack"], int(r["seed"]))] = float(r["fp32_val_loss"])
        loss[("final_val_loss", r["recipe"], r["stack"], int(r["seed"]))] = float(r["final_val_loss"])
    assert len(gaps) == 2 * len({(r["recipe"], r["stack"]) for r in runs})
    t975 = {3: 4.302652729749464, 2: 12.706204736174705}
    for g in gaps:
        d = [loss[(g["measure"], g["recipe"], g["stack"], k)] - loss[(g["measure"], "bf16", "", k)]
             for k in range(3) if (g["measure"], g["recipe"], g["stack"], k) in loss]
        assert float(g["gap"]) == pytest.approx(statistics.mean(d), abs=1e-12), g["label"]
        if g["recipe"] != "bf16":
            assert float(g["sd"]) == pytest.approx(statistics.stdev(d), rel=1e-9, abs=1e-15), g["label"]
            assert float(g["half"]) == pytest.approx(t975[len(d)] * statistics.stdev(d) / math.sqrt(len(d)),
                                                     rel=1e-9, abs=1e-15)
