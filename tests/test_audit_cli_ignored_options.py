"""Command-line options that a command took and then ignored, or ran twice: ``fp8emu conformance``
(``--workers`` / ``--scheduler`` with ``--live``, ``--quiet`` without it, an engine named twice),
``fp8emu presets --names --json``, and the output-file check's message (``--json``, ``--csv``,
``--figure``, ``golden --out``) for a path under a file or through a link into nowhere.

Before the fixes ``--live --workers 2`` ran the live check and never the sweep it asked for, ``--quiet``
without ``--live`` changed nothing, ``--engines torch-cpu,torch-cpu`` ran and counted each setting twice
("all 10 engine settings" of 5), ``--names --json`` printed the JSON, and ``afile/x.json`` was "the folder
of 'afile/x.json' does not exist" of a folder that exists as a file.  ``validate-gpu --tc-questions --quiet``
and ``train-demo --dataset digits --train-size N`` took an option they ignore.
"""

from __future__ import annotations

import argparse

import pytest

from fp8emu import engines
from fp8emu.cli import main, output_file


@pytest.mark.parametrize("extra, option", [(["--workers", "2"], "--workers"),
                                           (["--scheduler", "tcp://127.0.0.1:1"], "--scheduler")])
def test_the_live_check_refuses_the_sweep_options(capsys, monkeypatch, extra, option):
    monkeypatch.setattr(engines, "live_report", lambda *a, **k: pytest.fail("ran the live check"))
    assert main(["conformance", "--live", "--quiet", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{option} sweeps the recorded float32 tables" in err[0]


def test_quiet_without_live_is_refused(capsys):
    assert main(["conformance", "--quiet"]) == 2
    assert "--quiet applies to --live" in capsys.readouterr().err


def test_an_engine_named_twice_runs_once(capsys, monkeypatch):
    have = engines.installed_engines()
    if not have:
        pytest.skip("no engine installed")
    name = next(iter(have))
    seen = []

    def report(names, progress=None):
        seen.append(list(names))
        return []
    monkeypatch.setattr(engines, "live_report", report)
    main(["conformance", "--live", "--quiet", "--engines", f"{name},{name}, {name}"])
    assert seen == [[name]]


def test_presets_names_and_json_are_one_output(capsys):
    assert main(["presets", "--names", "--json"]) == 2
    assert "not allowed with argument --names" in capsys.readouterr().err
    assert main(["presets", "--names"]) == 0 and "hopper-wgmma" in capsys.readouterr().out.split()


def test_an_output_file_under_a_file_says_so(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(argparse.ArgumentTypeError, match="is a file, not a folder"):
        output_file()(str(tmp_path / "afile" / "x.json"))


def test_an_output_file_through_a_link_names_the_folder_that_is_missing(tmp_path):
    link = tmp_path / "dang"
    link.symlink_to(tmp_path / "missing" / "x.json")
    with pytest.raises(argparse.ArgumentTypeError, match="does not exist") as e:
        output_file()(str(link))
    assert str(tmp_path / "missing") in str(e.value)


def test_the_command_line_carries_the_message(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    assert main(["validate-gpu", "--json", str(tmp_path / "afile" / "v.json")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_good_output_files_are_taken_as_before(tmp_path):
    assert output_file(".json")(str(tmp_path / "v.json")) == str(tmp_path / "v.json")
    with pytest.raises(argparse.ArgumentTypeError, match="does not exist"):
        output_file()(str(tmp_path / "missing" / "v.json"))


def test_tc_questions_refuses_quiet_as_it_refuses_the_other_sweep_options(capsys):
    # the questions print no progress on stderr: --quiet was taken and ignored, --limit and --no-scaled-mm refused
    assert main(["validate-gpu", "--tc-questions", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "it takes no --quiet" in err[0]


def test_train_demo_refuses_a_train_size_the_digits_split_ignores(capsys, monkeypatch):
    from fp8emu.lab import train
    monkeypatch.setattr(train, "compare", lambda **k: pytest.fail("trained with --train-size ignored"))
    assert main(["train-demo", "--dataset", "digits", "--train-size", "100", "--quiet"]) == 2
    assert "--train-size sizes the synthetic task" in capsys.readouterr().err


def test_train_demo_sizes_the_synthetic_task_as_before(capsys, monkeypatch):
    from fp8emu.lab import train
    seen = []
    monkeypatch.setattr(train, "compare", lambda **k: seen.append((k["n_train"], k["n_test"])) or {})
    monkeypatch.setattr(train, "summary", lambda res: "")
    assert main(["train-demo", "--quiet"]) == 0 and main(["train-demo", "--train-size", "64", "--quiet"]) == 0
    assert seen == [(8192, 2048), (64, 256)]
