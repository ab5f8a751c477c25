"""``fp8emu train-study --out`` through a file, or a folder that cannot be created: one line naming the option, as
``study`` and ``grad-study`` say it (one check, ``fp8emu.lab.store.check_out`` / ``make_out``).  Before, a file
above --out and an uncreatable folder were "[Errno 20] Not a directory" / "[Errno 2] No such file or directory"."""

import os

import pytest

pytest.importorskip("torch")
from fp8emu.cli import main  # noqa: E402
from fp8emu.torch.study import train  # noqa: E402

ARGS = ["--recipes", "none", "--seeds", "1", "--steps", "1", "--quiet"]


@pytest.fixture()
def no_training(monkeypatch):
    monkeypatch.setattr(train, "train_run", lambda *a, **k: pytest.fail("a run trained"))


def test_a_file_above_out_is_named(tmp_path, capsys, no_training):
    (tmp_path / "f").write_text("keep me")
    out = tmp_path / "f" / "sub"
    assert main(["train-study", "--quick", "--out", str(out), *ARGS]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--out {str(out)!r}: {str(tmp_path / 'f')!r} is a file; give a folder" in err[0]
    assert (tmp_path / "f").read_text() == "keep me"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_a_folder_that_cannot_be_created_is_named(capsys, no_training):
    assert main(["train-study", "--quick", "--out", "/proc/fp8emu-x", *ARGS]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fp8emu train-study: error: --out '/proc/fp8emu-x': the folder "
                                               "cannot be created (")
