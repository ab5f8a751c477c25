"""``fp8emu study --out`` (and ``plan_study`` / ``run_study``): what in the output folder the study could
not write, refused in one line before any tensor is studied; and an empty ``--include`` / ``--exclude``.

The neighbours of the checks ``grad-study`` and ``train-study`` make of their ``--out``: before the fix
a folder at ``report.md`` was "[Errno 21] Is a directory" after every tensor had run, a FIFO at
``report.html`` blocked for ever after them, a dangling link was "[Errno 17] File exists", an
uncreatable folder Python's "[Errno 2]", and ``--out ''`` with ``--demo`` studied into the demo's
default folder.  The study's work is patched to fail (``_pipeline``), so a check that comes after it
shows as that failure.  ``--include ''`` kept every tensor (every name contains the empty string) and
``--exclude ''`` dropped them all with "no floating-point tensor selected", the pattern unnamed.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from fp8emu.cli import main
from fp8emu.lab import study


@pytest.fixture()
def checkpoint(tmp_path):
    p = tmp_path / "w.npy"
    np.save(p, np.linspace(-3, 3, 64, dtype=np.float32).reshape(4, 16))
    return p


@pytest.fixture()
def no_work(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("the study ran before its --out was checked")
    monkeypatch.setattr(study, "_pipeline", fail)


def _run(capsys, checkpoint, out, *extra):
    rc = main(["study", str(checkpoint), "--recipes", "cast-e4m3fn-ocp", "--quiet", "--out", str(out), *extra])
    return rc, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("name, make, kind", [
    ("report.md", os.mkdir, "a folder"),
    ("report.html", os.mkfifo, "a FIFO, device or socket"),
    ("figures", lambda p: p.write_text("x"), "a file"),
    ("figures/sqnr_heatmap.png", os.makedirs, "a folder"),
])
def test_a_report_path_of_the_wrong_kind_is_refused_before_the_study(tmp_path, capsys, checkpoint, no_work,
                                                                     name, make, kind):
    out = tmp_path / "out"
    (out / name).parent.mkdir(parents=True, exist_ok=True)
    make(out / name)
    rc, err = _run(capsys, checkpoint, out)
    assert rc == 2 and len(err) == 1 and f"holds {name} as {kind}" in err[0] and "use another --out" in err[0]


def test_with_no_report_the_report_paths_are_not_in_the_way(tmp_path, capsys, checkpoint):
    out = tmp_path / "out"
    (out / "report.md").mkdir(parents=True)
    rc, err = _run(capsys, checkpoint, out, "--no-report")
    assert rc == 0 and err == [] and (out / "results.csv").is_file()


def test_a_dangling_link_is_named(tmp_path, capsys, checkpoint, no_work):
    link = tmp_path / "dang"
    link.symlink_to(tmp_path / "missing" / "x")
    rc, err = _run(capsys, checkpoint, link)
    assert rc == 2 and len(err) == 1 and "symbolic link to nothing" in err[0] and "Errno" not in err[0]
    rc, err = _run(capsys, checkpoint, link / "sub")
    assert rc == 2 and len(err) == 1 and "symbolic link to nothing" in err[0]


def test_a_file_above_out_is_named(tmp_path, capsys, checkpoint, no_work):
    (tmp_path / "f").write_text("x")
    rc, err = _run(capsys, checkpoint, tmp_path / "f" / "sub")
    assert rc == 2 and len(err) == 1 and "is a file; give a folder" in err[0] and "Errno" not in err[0]


def test_a_folder_that_cannot_be_created_is_named(tmp_path, capsys, checkpoint, no_work, monkeypatch):
    real = type(tmp_path).mkdir

    def refuse(self, *a, **k):
        if self.name == "out":
            raise FileNotFoundError(2, "No such file or directory", str(self))
        return real(self, *a, **k)
    monkeypatch.setattr(type(tmp_path), "mkdir", refuse)
    rc, err = _run(capsys, checkpoint, tmp_path / "out")
    assert rc == 2 and len(err) == 1 and "the folder cannot be created (No such file or directory)" in err[0]
    assert "Errno" not in err[0]


def test_an_empty_out_is_refused_not_read_as_the_demo_folder(tmp_path, capsys, monkeypatch, no_work):
    monkeypatch.chdir(tmp_path)
    assert main(["study", "--demo", "--quiet", "--out", ""]) == 2
    assert "--out '' names no folder" in capsys.readouterr().err
    assert not (tmp_path / "fp8emu-study-demo").exists()


def test_a_good_folder_is_studied_as_before(tmp_path, capsys, checkpoint):
    out = tmp_path / "a" / "b"
    rc, err = _run(capsys, checkpoint, out)
    assert rc == 0 and err == []
    assert {p.name for p in out.iterdir()} == {"results.csv", "report.md", "report.html", "figures"}


@pytest.mark.parametrize("flag", ["--include", "--exclude"])
def test_an_empty_name_pattern_is_refused_naming_the_option(tmp_path, capsys, checkpoint, no_work, flag):
    # '' is a substring of every name: --include '' kept every tensor, --exclude '' dropped them all
    rc, err = _run(capsys, checkpoint, tmp_path / "out", flag, "")
    assert rc == 2 and len(err) == 1 and f"{flag} '' is an empty pattern" in err[0]


def test_a_pattern_selects_as_before(tmp_path, capsys, checkpoint):
    rc, err = _run(capsys, checkpoint, tmp_path / "out", "--include", "w")
    assert rc == 0 and err == []
    rc, err = _run(capsys, checkpoint, tmp_path / "out2", "--exclude", "w")
    assert rc == 2 and "no floating-point tensor selected" in err[0]
