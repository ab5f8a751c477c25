"""train-study into a folder of another tool names it as that, not as another train-study.

``train-study --out`` a grad-study's folder (whose ``study.json`` holds the grad-study's ``config``) said
"holds a study with another model, schedule or corpus; use another --out or delete the folder": false, and
advice to delete another tool's results.  It is "is not a train-study's ...; use another --out", before
anything is written; a train-study of other settings keeps its line.
"""

import json

import pytest

pytest.importorskip("torch")
from fp8emu.cli import main  # noqa: E402
from fp8emu.cli import train_study  # noqa: E402


@pytest.fixture
def no_training(monkeypatch):
    def checked_only(out, cfg, specs, **kw):      # the folder checks of execute, then no run
        train_study.runs.check_study_file(out, cfg)
        raise AssertionError("a run would train")
    monkeypatch.setattr(train_study.runs, "execute", checked_only)


@pytest.mark.parametrize("report_only", [False, True])
def test_a_grad_study_folder_is_named_as_not_a_train_studys(tmp_path, capsys, no_training, report_only):
    out = tmp_path / "gs"
    out.mkdir()
    study = {"config": {"pairs": ["te-current@h100"]}, "config_sha256": "0" * 64}
    (out / "study.json").write_text(json.dumps(study))
    args = ["train-study", "--quick", "--out", str(out), "--quiet"] + (["--report-only"] if report_only else [])
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "is not a train-study's" in err and "another model" not in err and "delete" not in err
    assert json.loads((out / "study.json").read_text()) == study


def test_a_train_study_of_other_settings_keeps_its_line(tmp_path, capsys, no_training):
    out = tmp_path / "ts"
    out.mkdir()
    (out / "study.json").write_text(json.dumps({"model": {"d_model": 1}, "train": {"steps": 1}, "corpus": None}))
    assert main(["train-study", "--quick", "--out", str(out), "--quiet", "--report-only"]) == 2
    assert "holds a study with another model, schedule or corpus" in capsys.readouterr().err
