"""``fp8emu grad-study --out`` naming a folder that cannot be created (tests/AUDIT.md, "Tenth fresh audit, part A",
#6; the neighbour of the eighth audit's #12 for ``fp8emu study``)."""

import os

import pytest

pytest.importorskip("torch")
from fp8emu.cli import grad_study, main  # noqa: E402


def _refuse(tmp_path, monkeypatch, errno, text):
    real = type(tmp_path).mkdir

    def refuse(self, *a, **k):
        if self.name == "out":
            raise OSError(errno, text, str(self))
        return real(self, *a, **k)
    monkeypatch.setattr(type(tmp_path), "mkdir", refuse)


@pytest.mark.parametrize("errno, text", [(2, "No such file or directory"), (13, "Permission denied")])
def test_a_folder_that_cannot_be_created_is_named_as_the_option(tmp_path, monkeypatch, capsys, errno, text):
    # before: "fp8emu grad-study: error: [Errno 2] No such file or directory: '/proc/x'" (no option named)
    monkeypatch.setattr(grad_study, "execute", lambda *a, **k: pytest.fail("a cell ran"))
    _refuse(tmp_path, monkeypatch, errno, text)
    out = tmp_path / "out"
    assert main(["grad-study", "--quick", "--kinds", "bias", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--out {str(out)!r}: the folder cannot be created ({text})" in err[0]
    assert "Errno" not in err[0]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_proc_is_named_too(capsys, monkeypatch):
    monkeypatch.setattr(grad_study, "execute", lambda *a, **k: pytest.fail("a cell ran"))
    assert main(["grad-study", "--quick", "--kinds", "bias", "--out", "/proc/fp8emu-x", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fp8emu grad-study: error: --out '/proc/fp8emu-x': the folder cannot be created (")
