"""train-study refuses ``--infer-windows`` where no inference table is made.

With ``--no-inference`` or ``--no-report`` the inference table is not computed, and ``--infer-windows`` was
ignored, silently (the study then ran to the end).  It is one line, before anything runs or is written.
"""

import pytest

pytest.importorskip("torch")
from fp8emu.cli import main  # noqa: E402
from fp8emu.cli import train_study  # noqa: E402


@pytest.mark.parametrize("flag", ["--no-inference", "--no-report"])
def test_infer_windows_without_an_inference_table_is_refused_before_anything_is_written(flag, tmp_path, capsys,
                                                                                         monkeypatch):
    def trained(*a, **k):          # what the study did before the refusal: it ran (minutes), ignoring the option
        raise AssertionError("the study ran")
    monkeypatch.setattr(train_study.runs, "execute", trained)
    out = tmp_path / "study"
    assert main(["train-study", "--quick", flag, "--infer-windows", "5", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"--infer-windows sizes the inference table, which {flag} leaves out" in err
    assert not out.exists()
