"""``train-study --out`` refuses a FIFO (or another non-regular file) where it writes a table or the report.

A folder at ``report.md`` was already refused before any run; a FIFO there (or at ``runs.csv``) was taken,
and the study then blocked for ever writing it, after every run had trained.  It is now one line before
anything runs.
"""

import os

import pytest

pytest.importorskip("torch")
from fp8emu.cli import main  # noqa: E402
from fp8emu.cli import train_study  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")


@pytest.mark.parametrize("name", ["report.md", "runs.csv"])
def test_a_fifo_where_the_study_writes_is_refused_before_any_run(name, tmp_path, capsys, monkeypatch):
    def trained(*a, **k):
        raise AssertionError("the study ran")
    monkeypatch.setattr(train_study.runs, "execute", trained)
    out = tmp_path / "study"
    out.mkdir()
    os.mkfifo(out / name)
    assert main(["train-study", "--quick", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"holds {name} as a FIFO, device or socket (not a regular file)" in err
    assert sorted(p.name for p in out.iterdir()) == [name]
