"""The studies' own files (a grad-study cell, a train-study run, ``study.json``, a trained model) at a path
that is not a regular file, or holding JSON of another kind: one line naming the file, not a blocked read."""

import os

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")


def test_a_fifo_at_a_cell_or_run_file_is_refused_without_reading(tmp_path):
    pytest.importorskip("torch")
    from fp8emu.cli import grad_study as cli
    from fp8emu.torch.study import runs
    cell, run = tmp_path / "cell.json", tmp_path / "run.json"
    os.mkfifo(cell)
    os.mkfifo(run)
    # before: open() of a FIFO with no writer waited for ever
    with pytest.raises(ValueError, match="cell file .* is unreadable"):
        cli.read_cell(cell, "a", {})
    with pytest.raises(ValueError, match="result file .* is unreadable"):
        runs.read_result(run)


def test_study_json_that_is_a_fifo_or_not_an_object_is_named(tmp_path):
    pytest.importorskip("torch")
    from fp8emu.torch.study import runs
    cfg = runs.StudyConfig()
    (tmp_path / "a").mkdir()
    os.mkfifo(tmp_path / "a" / "study.json")
    with pytest.raises(ValueError, match=r"study.json: is not a regular file; use another --out"):
        runs.check_study_file(tmp_path / "a", cfg)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "study.json").write_text("[1, 2]")
    # before: AttributeError: 'list' object has no attribute 'get'
    with pytest.raises(ValueError, match=r"study.json holds a JSON list, not a study's settings"):
        runs.check_study_file(tmp_path / "b", cfg)


def test_a_fifo_at_a_grad_study_csv_is_named(tmp_path):
    from fp8emu.lab import grad_study
    os.mkfifo(tmp_path / "bias.csv")
    with pytest.raises(ValueError, match=r"bias.csv: is not a regular file"):
        grad_study.read_tables(tmp_path)
