"""Fresh audits (tests/AUDIT.md): ``fp8emu grad-study --out`` holding a folder where the study writes a file."""

import pytest

pytest.importorskip("torch")
from fp8emu.cli import main  # noqa: E402
from fp8emu.cli import grad_study  # noqa: E402


# the report's files (second audit) and the files inside its folders (third audit): before, every cell ran
# (the full study: hours), then "[Errno 21] Is a directory"
@pytest.mark.parametrize("name", ["report.md", "report.html", "findings.csv", "provenance.csv", "bias.csv",
                                  "figures/bias_vs_n.png", "cells/bias_case=plain.json"])
def test_a_folder_where_the_study_writes_a_file_is_refused_before_any_cell(tmp_path, monkeypatch, capsys, name):
    monkeypatch.setattr(grad_study, "execute", lambda *a, **k: pytest.fail("a cell ran"))
    out = tmp_path / "o"
    (out / name).mkdir(parents=True)
    assert main(["grad-study", "--quick", "--kinds", "bias", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"holds {name} as a folder, where the study writes a file" in err[0]
    assert sorted(p.name for p in out.iterdir()) == [name.split("/")[0]]
