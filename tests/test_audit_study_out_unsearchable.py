"""``--out`` through a folder that cannot be searched (tests/AUDIT.md, "Eleventh fresh audit, part A", #7; the
neighbour of the tenth audit's #6): ``store.check_out`` asked ``Path.exists``, which raises PermissionError
(EACCES is not among the errors pathlib reads as "absent"), so grad-study (and study, train-study: the same check)
said "[Errno 13] Permission denied: 'locked/sub'", naming no option.  The test process may be root, whom
permissions do not stop, so the refusal is simulated where pathlib asks the system.
"""

import errno
import os
import pathlib

import pytest

from fp8emu.lab.store import check_out


@pytest.fixture
def locked(tmp_path, monkeypatch):
    root = tmp_path / "locked"
    root.mkdir()
    for meth in ("stat", "lstat"):
        real = getattr(pathlib.Path, meth)

        def refuse(self, *a, _real=real, **k):
            if str(self).startswith(str(root) + os.sep):
                raise PermissionError(errno.EACCES, "Permission denied", str(self))
            return _real(self, *a, **k)
        monkeypatch.setattr(pathlib.Path, meth, refuse)
    return root


def test_a_folder_that_cannot_be_searched_is_named_as_the_option(locked):
    out = locked / "sub" / "out"
    with pytest.raises(ValueError) as e:
        check_out(out, [("report.md", False)], (("cells", ".json"),))
    assert str(e.value) == (f"--out {str(out)!r}: {str(locked / 'sub')!r} cannot be examined (Permission denied); "
                            "give a folder (created if missing)")


def test_the_command_line_names_it(locked, capsys, monkeypatch):
    pytest.importorskip("torch")
    from fp8emu.cli import grad_study, main
    monkeypatch.setattr(grad_study, "execute", lambda *a, **k: pytest.fail("a cell ran"))
    assert main(["grad-study", "--quick", "--kinds", "bias", "--out", str(locked / "x" / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--out " in err[0] and "cannot be examined (Permission denied)" in err[0]
    assert "Errno" not in err[0]


def test_a_searchable_out_as_before(tmp_path):
    assert check_out(tmp_path / "a" / "b", [("report.md", False)]) == tmp_path / "a" / "b"
