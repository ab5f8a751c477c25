"""The grad-study report of measurements that are all NaN (every cell of a kind gave NaN) is written.

The findings say "no verdict" of NaN measurements, but the bias and K-sweep figures set log y axes on lines
of NaN only, and matplotlib's "Data cannot be log-scaled because all values are <= 0" ended ``write_report``
after every cell had run: no report.  Such an axis stays linear.  Findings (b), (f) and (g) said "not run; 8
NaN measurement(s)" of measurements they had made (the first audit fixed the same claim for (c) only).
"""

import csv
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from fp8emu.lab import grad_study as gs  # noqa: E402

COMMITTED = Path(__file__).resolve().parents[1] / "docs" / "data" / "grad-study"
_KEEP = {"recipe", "stack", "layer", "gemm", "case", "level", "finding", "metric", "label", "variant", "spiked", "K", "n",
         "step", "state", "history", "draws", "draw", "tokens", "width"}


def _all_nan(folder):
    for t in gs.TABLES:
        rows = list(csv.reader((COMMITTED / f"{t}.csv").open()))
        for r in rows[1:]:
            for i, c in enumerate(rows[0]):
                if c not in _KEEP:
                    r[i] = "nan"
        with (folder / f"{t}.csv").open("w", newline="") as f:
            csv.writer(f).writerows(rows)


def test_a_study_of_nan_measurements_gets_its_report(tmp_path):
    _all_nan(tmp_path)
    tables = gs.read_tables(tmp_path)
    paths = gs.write_report(tables, tmp_path / "out", {"torch": "x"})
    assert (tmp_path / "out" / "report.md").exists() and all(p.exists() for p in paths)
    assert {a.get_yscale() for a in gs.figure_bias(tables).axes} == {"linear"}
    assert {a.get_yscale() for a in gs.figure_ksweep(tables).axes} == {"linear"}
    assert all("no verdict" in r["measured"] or "nan" in r["measured"] for r in gs.findings(tables))


def test_the_committed_studys_figures_keep_their_log_axes():
    tables = gs.read_tables(COMMITTED)
    assert [a.get_yscale() for a in gs.figure_bias(tables).axes] == ["log", "log"]
    assert [a.get_yscale() for a in gs.figure_ksweep(tables).axes] == ["log", "log"]


def test_a_finding_of_nan_measurements_says_it_ran(tmp_path):
    _all_nan(tmp_path)
    rows = {r["finding"]: r for r in gs.findings(gs.read_tables(tmp_path))}
    for key in "abcdefg":
        assert "not run" not in rows[key]["measured"] and "NaN measurement(s): no verdict" in rows[key]["measured"]
        assert rows[key]["verdict"] == "not at this scale"
    assert rows["b"]["measured"].startswith("ran; ")
    # a finding whose tables are missing is still "not run"
    assert {r["finding"]: r["measured"] for r in gs.findings({})}["b"] == "not run"
