"""``train-study --report-only`` of a folder whose bf16 runs are gone says so.

The report's gaps are to bf16: with the bf16 run files deleted, ``--report-only`` of a fork study ended in
"paired_gaps: the runs have no bf16 baseline" (a function's name, no folder, no way out).  It is one line
naming the runs folder and the rerun that trains them; nothing in the folder is rewritten.
"""

import shutil

import pytest

pytest.importorskip("torch")
from fp8emu.cli import main  # noqa: E402

_TINY = ["train-study", "--quick", "--pairs", "te-current@h100", "--baselines", "bf16", "--seeds", "1", "--steps",
         "4", "--eval-every", "2", "--fork-at", "2", "--no-inference", "--quiet"]


def test_report_only_without_the_bf16_runs_names_them(tmp_path, capsys):
    out = tmp_path / "study"
    assert main([*_TINY, "--out", str(out)]) == 0
    (out / "runs" / "bf16-s0.json").unlink()
    before = (out / "report.md").read_bytes()
    capsys.readouterr()
    assert main([*_TINY, "--out", str(out), "--report-only"]) == 2
    err = capsys.readouterr().err
    assert "holds no finished bf16 run" in err and "rerun without --report-only" in err
    assert "paired_gaps" not in err
    assert (out / "report.md").read_bytes() == before
