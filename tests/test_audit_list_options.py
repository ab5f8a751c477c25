"""``--list`` of ``grad-study`` and ``train-study`` refuses the options the listing would ignore.

The listing prints the plan and exits: it runs nothing and writes nothing, so ``--out``, ``--workers``,
``--scheduler`` and ``--quiet`` (and train-study's ``--report-only``) were ignored, silently (``--list --out
/proc/x`` printed the plan).  Each is one line naming the option, and nothing is written.
"""

import pytest

pytest.importorskip("torch")
from fp8emu.cli import main  # noqa: E402


@pytest.mark.parametrize("command", ["grad-study", "train-study"])
@pytest.mark.parametrize("opts", [["--workers", "2"], ["--scheduler", "tcp://127.0.0.1:8786"], ["--out", "OUT"],
                                  ["--quiet"]])
def test_list_refuses_what_it_would_ignore(command, opts, tmp_path, capsys):
    out = tmp_path / "o"
    opts = [str(out) if o == "OUT" else o for o in opts]
    assert main([command, "--quick", "--list", *opts]) == 2
    cap = capsys.readouterr()
    err = cap.err.strip().splitlines()
    assert len(err) == 1 and f"{opts[0]} would be ignored" in err[0] and "--list" in err[0], err
    assert cap.out == "" and not out.exists()


def test_train_study_list_refuses_report_only(capsys):
    assert main(["train-study", "--quick", "--list", "--report-only"]) == 2
    assert "--report-only would be ignored" in capsys.readouterr().err


@pytest.mark.parametrize("command, unit", [("grad-study", "cells"), ("train-study", "runs")])
def test_list_alone_still_lists(command, unit, capsys):
    assert main([command, "--quick", "--list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == f"{len(lines) - 1} {unit}" and len(lines) > 1
