"""``fp8emu grad-study --out`` of spaces only (tests/AUDIT.md, "Eleventh fresh audit, part A", #5): refused, as
``--out ''`` is, but the line quoted ``--out ''``, a value the user did not give."""

import pytest

pytest.importorskip("torch")
from fp8emu.cli import grad_study, main  # noqa: E402


@pytest.mark.parametrize("out", ["", "   ", "\t"])
def test_a_blank_out_is_quoted_as_given(out, capsys, monkeypatch):
    monkeypatch.setattr(grad_study, "execute", lambda *a, **k: pytest.fail("a cell ran"))
    assert main(["grad-study", "--quick", "--kinds", "bias", "--out", out, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--out {out!r} names no folder" in err[0]
