"""Fifteenth audit, part B (audit26): ``tools/record_cpu_order.py --starts --seed N`` names the survey asked for.

It said "--seed apply to --random N only (the grid survey probes the NN layout)", of a ``--starts`` survey (which
probes every layout): the refusal was right, its reason false.
"""

import sys

import pytest


def test_starts_refuses_a_seed_naming_its_own_survey(record_tool, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(record_tool.cpu_order, "reveal_here", lambda *a, **k: pytest.fail("surveyed"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["record_cpu_order.py", "--out", "r.json", "--starts", "--seed", "2"])
    with pytest.raises(SystemExit) as exc:
        record_tool.main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--seed apply to --random N only (--starts surveys fixed shapes" in err
    assert "grid survey" not in err and not (tmp_path / "r.json").exists()


def test_the_grid_surveys_reason_as_before(record_tool, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(record_tool.cpu_order, "reveal_here", lambda *a, **k: pytest.fail("surveyed"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["record_cpu_order.py", "--out", "r.json", "--seed", "2"])
    with pytest.raises(SystemExit):
        record_tool.main()
    assert "--seed apply to --random N only (the grid survey probes the NN layout)" in capsys.readouterr().err
