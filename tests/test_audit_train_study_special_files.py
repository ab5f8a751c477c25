"""``train-study --out`` and ``grad-study --out`` refuse a FIFO (or another non-regular file) where they
write a table or the report.

A folder at ``report.md`` was already refused before any run; a FIFO there (or at ``runs.csv``) was taken,
and the study then blocked for ever writing it, after every run had trained.  It is now one line before
anything runs (grad-study's cells likewise).
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


@pytest.mark.parametrize("name", ["report.md", "findings.csv"])
def test_grad_study_refuses_it_too(name, tmp_path, capsys, monkeypatch):
    from fp8emu.cli import grad_study

    def ran(*a, **k):
        raise AssertionError("the study ran")
    monkeypatch.setattr(grad_study, "execute", ran)
    out = tmp_path / "study"
    out.mkdir()
    os.mkfifo(out / name)
    assert main(["grad-study", "--quick", "--kinds", "probe", "--out", str(out), "--quiet"]) == 2
    assert f"holds {name} as a FIFO, device or socket (not a regular file)" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == [name]
