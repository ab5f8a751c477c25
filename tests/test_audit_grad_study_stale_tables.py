"""The grad-study report of a folder whose cells of a kind are gone (deleted, as the cell messages advise for a damaged
file) holds no table of that kind.

``write_report`` wrote the tables of the kinds it was given and left the others: ``probes.csv`` of an earlier
invocation stayed beside ``cells/`` holding no probe cell, and the report (read back from the folder's CSV files), its
per-pair summary, ``findings.csv`` and the command's printed findings were made from it, where the guide says the
report is redrawn "from every cell in the folder".
"""

import csv
import shutil
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from fp8emu.lab import grad_study as gs  # noqa: E402

COMMITTED = Path(__file__).resolve().parents[1] / "docs" / "data" / "grad-study"


def _rows(name):
    with (COMMITTED / f"{name}.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def test_a_table_and_a_figure_of_no_cell_are_not_reported(tmp_path):
    out = tmp_path / "out"
    shutil.copytree(COMMITTED, out)                    # an earlier invocation's tables of every kind
    (out / "figures").mkdir()
    (out / "figures" / "bias_vs_n.png").write_bytes(b"old")
    gs.write_report({"spike": _rows("spike")}, out, {"command": "x"})
    assert sorted(p.name for p in out.glob("*.csv")) == ["findings.csv", "provenance.csv", "spike.csv"]
    assert sorted(p.name for p in (out / "figures").iterdir()) == ["spike.png"]
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "te-delayed@h100" not in md                 # no per-pair row, no probe row of the deleted cells
    verdicts = {r["finding"]: r["verdict"] for r in gs.findings(gs.read_tables(out))}
    # (e) from the spike table alone; (a) and (d), reproduced by the committed tables, now not run
    assert verdicts["e"] == "reproduced" and verdicts["a"] == verdicts["d"] == "not at this scale"
    with (out / "findings.csv").open(newline="") as f:
        assert [r["measured"] for r in csv.DictReader(f) if r["finding"] == "d"] == ["not run"]


def test_the_kinds_given_are_written_as_before(tmp_path):
    tables = {k: _rows(k) for k in gs.TABLES}
    gs.write_report(tables, tmp_path, {"command": "x"})
    for k in gs.TABLES:
        assert (tmp_path / f"{k}.csv").read_bytes() == (COMMITTED / f"{k}.csv").read_bytes(), k
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == ["bias_vs_n.png", "error_vs_k.png", "forks.png",
                                                                         "spike.png"]


def test_another_file_under_a_tables_name_is_still_refused_not_removed(tmp_path):
    (tmp_path / "probes.csv").write_text("state,recipe\n1,te-current\n")
    with pytest.raises(ValueError, match="probes.csv: not a grad-study probes table"):
        gs.write_report({"spike": _rows("spike")}, tmp_path, {"command": "x"})
    assert (tmp_path / "probes.csv").read_text() == "state,recipe\n1,te-current\n"
