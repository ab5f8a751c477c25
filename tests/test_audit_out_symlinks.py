"""Fourth fresh audit: ``grad-study --out`` and ``train-study --out`` name a symbolic link to nothing."""

import os

import pytest

from fp8emu.cli import main

STUDIES = {"grad-study": ["grad-study", "--quick", "--kinds", "bias"],
           "train-study": ["train-study", "--quick", "--steps", "2", "--recipes", "none", "--baselines", "bf16",
                           "--seeds", "1"]}


@pytest.mark.parametrize("study", sorted(STUDIES))
@pytest.mark.parametrize("out, link", [("dang", "dang"), ("dang/sub", "dang"), ("l1", "l1")])
def test_a_dangling_or_looping_link_is_named(tmp_path, monkeypatch, capsys, study, out, link):
    # before: "[Errno 17] File exists: 'dang'" (mkdir of a path whose link points nowhere; exists() is False)
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    os.symlink(tmp_path / "nowhere", "dang")
    os.symlink("l2", "l1")
    os.symlink("l1", "l2")
    assert main([*STUDIES[study], "--out", out]) == 2
    err = capsys.readouterr().err
    assert f"--out '{out}': '{link}' is a symbolic link to nothing (dangling, or a loop)" in err
    assert sorted(os.listdir(tmp_path)) == ["dang", "l1", "l2"]
