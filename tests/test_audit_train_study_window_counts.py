"""train-study's window counts are the windows its losses average over.

Every evaluation takes whole batches of distinct windows of the validation split
(``train.evaluate``): the report said "the validation loss over 8 validation windows" (``train.final_windows``)
of a ``--batch 16`` study that averaged 16, and ``--infer-windows 5`` with ``--batch 4`` evaluated 4 while
``provenance.csv`` said 5.  A split holding fewer windows than ``--batch`` made the first evaluation Python's
bare "float division by zero".  Now: the report and provenance give the count evaluated
(``train.evaluated_windows``, checked here against the windows ``evaluate`` reads), an ``--infer-windows`` it
would change is refused, and so is a split too small for one batch, before anything runs.
"""

import csv

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from fp8emu.cli import main  # noqa: E402
from fp8emu.cli import train_study  # noqa: E402
from fp8emu.torch.study import corpus, train  # noqa: E402


@pytest.mark.parametrize("n, batch, available", [(64, 4, 1000), (64, 5, 1000), (8, 16, 1000), (5, 4, 1000),
                                                  (64, 4, 10), (64, 16, 17), (3, 1, 2)])
def test_evaluated_windows_counts_what_evaluate_reads(n, batch, available, monkeypatch):
    seq_len = 8
    data = np.arange(available + seq_len, dtype=np.uint8)
    seen = []

    class Model:
        def loss(self, xb, yb):
            seen.append(xb.shape[0])
            return torch.tensor(1.0)
    train.evaluate(Model(), "fp32", data, n, seq_len, batch)
    assert sum(seen) == train.evaluated_windows(n, batch, available)


def _runs_fail(monkeypatch):
    def trained(*a, **k):
        raise AssertionError("the study ran")
    monkeypatch.setattr(train_study.runs, "execute", trained)


BASE = ["train-study", "--quick", "--recipes", "none", "--baselines", "bf16", "--seeds", "1", "--steps", "2",
        "--eval-every", "1", "--quiet"]


def test_infer_windows_not_a_multiple_of_the_batch_is_refused(tmp_path, capsys, monkeypatch):
    _runs_fail(monkeypatch)
    out = tmp_path / "o"
    assert main([*BASE, "--batch", "4", "--infer-windows", "5", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--infer-windows 5" in err and "whole batches of --batch 4" in err and "a multiple of 4" in err
    assert not out.exists()


def test_a_validation_split_smaller_than_a_batch_is_refused(tmp_path, capsys, monkeypatch):
    _runs_fail(monkeypatch)
    text = tmp_path / "small.txt"
    text.write_text("".join(f"line {i}: some words\n" for i in range(25)), encoding="utf-8")
    val = corpus.load_corpus(str(text)).val
    out = tmp_path / "o"
    assert main([*BASE, "--corpus", str(text), "--seq-len", "40", "--batch", "16", "--no-inference", "--out",
                 str(out)]) == 2
    err = capsys.readouterr().err
    assert f"holds {val.size - 40} window(s)" in err and "fewer than the batch (16)" in err and not out.exists()


def test_the_report_gives_the_windows_evaluated(tmp_path):
    out = tmp_path / "o"
    argv = [*BASE, "--seq-len", "16", "--batch", "16", "--infer-windows", "16", "--out", str(out)]
    assert main(argv) == 0
    with open(out / "provenance.csv", newline="", encoding="utf-8") as f:
        prov = {r["item"]: r["value"] for r in csv.DictReader(f)}
    assert prov["train.final_windows"] == "8" and prov["final_windows_evaluated"] == "16"
    assert prov["infer_windows"] == "16"
    text = (out / "report.md").read_text(encoding="utf-8")
    assert "over 16 validation windows" in text and "over 8 validation windows" not in text
