"""Hostile input: ``fp8emu train-study --forks / --fork-at`` against ``--steps``, and ``--out``.
Nothing trains."""

import pytest

pytest.importorskip("torch")
from fp8emu.cli import main  # noqa: E402
from fp8emu.torch.study import runs  # noqa: E402


@pytest.mark.parametrize("fork, steps", [(["--fork-at", "5"], "5"), (["--fork-at", "9"], "3"), (["--forks", "--fork-at", "2"], "2")])
def test_a_fork_at_or_past_the_last_step_names_the_options(tmp_path, capsys, fork, steps):
    # before: "fork_at must be an integer from 0 (no fork) to steps - 1 = 4": a field, and a 0 --fork-at refuses
    out = tmp_path / "o"
    assert main(["train-study", "--quick", *fork, "--steps", steps, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    s = int(steps)
    assert len(err) == 1 and f"{fork[-1]} needs --steps above {fork[-1]}, got --steps {steps};" in err[0]
    assert f"give --fork-at S from 1 to {s - 1}" in err[0] and "fork_at must" not in err[0] and not out.exists()


def test_forks_with_one_step_ask_for_more_steps_not_an_impossible_fork(tmp_path, capsys):
    # before: "give --fork-at S below 1", a value --fork-at (1 or more) refuses
    out = tmp_path / "o"
    assert main(["train-study", "--quick", "--forks", "--steps", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--forks needs --steps 2 or more" in err[0] and "below 1" not in err[0]
    assert not out.exists()


def test_a_fork_before_the_last_step_is_listed(capsys):
    assert main(["train-study", "--quick", "--fork-at", "4", "--steps", "5", "--list"]) == 0
    assert "runs" in capsys.readouterr().out


@pytest.mark.parametrize("name, make", [("report.md", "mkdir"), ("fork_gaps.csv", "mkdir"), ("runs", "file")])
def test_a_train_study_out_holding_the_wrong_kind_of_entry_is_refused_before_training(tmp_path, monkeypatch, capsys,
                                                                                         name, make):
    # before: every run trained, then "[Errno 21] Is a directory: 'o/report.md'"
    monkeypatch.setattr(runs, "execute", lambda *a, **k: pytest.fail("a run trained"))
    out = tmp_path / "o"
    out.mkdir()
    (out / name).mkdir() if make == "mkdir" else (out / name).write_text("")
    argv = ["train-study", "--quick", "--forks", "--recipes", "none", "--seeds", "1", "--steps", "3", "--fork-at", "2",
            "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    kind = "folder" if make == "mkdir" else "file"
    assert len(err) == 1 and f"holds {name} as a {kind}, where the study writes a" in err[0]


@pytest.mark.parametrize("name", ["figures/val_loss_curves.png", "runs/fp32-s0.json", "models/fp32-s0.pt"])
def test_a_folder_where_train_study_writes_a_file_inside_its_folders_is_refused_before_training(
        tmp_path, monkeypatch, capsys, name):
    # third fresh audit: a folder at figures/<name>.png was "[Errno 21] Is a directory" after every run trained
    monkeypatch.setattr(runs, "execute", lambda *a, **k: pytest.fail("a run trained"))
    out = tmp_path / "o"
    (out / name).mkdir(parents=True)
    argv = ["train-study", "--quick", "--forks", "--recipes", "none", "--seeds", "1", "--steps", "3", "--fork-at", "2",
            "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"holds {name} as a folder, where the study writes a file" in err[0]
