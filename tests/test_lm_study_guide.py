"""docs/guides/lm-study.md states the numbers of the committed study (docs/data/lm-study/*.csv)."""

import csv
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data" / "lm-study"
GUIDE = ROOT / "docs" / "guides" / "lm-study.md"
BEGIN, END = "<!-- lm-study:tables -->", "<!-- /lm-study:tables -->"


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
    block = _block()
    numbers = re.findall(r"(?<![\w.])[+-]?\d+\.\d+", findings)
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


def test_readme_findings_are_the_committed_csv():
    """The README's study bullets state only numbers the guide's tables (made from the CSV) show."""
    from fp8emu.lab import lm_study as report
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text[text.index("<!-- lm-study:readme -->"):text.index("<!-- /lm-study:readme -->")]
    numbers = re.findall(r"(?<![\w.])[+-]?\d+\.\d+", block)
    assert len(numbers) >= 8
    missing = [n for n in numbers if n not in _block()]
    assert not missing, f"numbers in the README's study bullets that the guide's tables do not show: {missing}"
    gaps = _csv("gaps.csv")
    emulated = [g for g in gaps if g["stack"]]
    assert f"all\n{len(emulated)} recipe x stack pairs" in text
    same = report.identical_results(report._read_csv(DATA / "runs.csv"), report._read_csv(DATA / "curves.csv"))
    twins = sum(len(g) - 1 for g in same)
    assert f"the {len(emulated)} pairs are {len(emulated) - twins} results" in re.sub(r"\s+", " ", block)
    j = report.joint_analysis(report._read_csv(DATA / "runs.csv"), report._read_csv(DATA / "curves.csv"))
    flat = re.sub(r"\s+", " ", block)
    assert f"F({j['df'][0]}, {j['df'][1]}) = {j['F']:.2f}, p {j['p_F']:.2f}" in flat
    assert f"common shift {j['shift']['mean']:+.4f}" in flat
    assert "2.4 would" not in block and "every recipe on every stack matches" not in block
    ratios = [float(r["ppl_ratio_to_bf16"]) for r in _csv("inference.csv")]
    assert f"perplexity {min(ratios):.4f}-{max(ratios):.4f} times bf16's" in flat
