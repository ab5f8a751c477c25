"""Draw counts and sizes in the grad-study tables (``probes.csv``'s ``draws``, ``bias.csv``'s ``n``, ``K``) below 1.

An edited ``draws`` of 0 ended the report in Python's "float division by zero" (the probe table's ``rel_err/sqrt(N)``),
-1 in "math domain error"; an ``n`` of 0 in ``fit_floor``'s "ns are draw counts" naming no file; a ``K`` of 0 was
taken.  They are refused as the reader refuses text in a number column: file, line, column.
"""

import csv
import re
import shutil
from pathlib import Path

import pytest

from fp8emu.lab import grad_study as gs

COMMITTED = Path(__file__).resolve().parents[1] / "docs" / "data" / "grad-study"


def _edit(folder, table, column, value):
    shutil.copytree(COMMITTED, folder)
    with (folder / f"{table}.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    rows[0][column] = value
    with (folder / f"{table}.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


@pytest.mark.parametrize("table, column, value", [("probes", "draws", "0"), ("probes", "draws", "-1"),
                                                  ("bias", "n", "0"), ("ksweep", "K", "0"), ("widths", "K", "-256")])
def test_a_count_below_one_names_file_line_and_column(tmp_path, table, column, value):
    _edit(tmp_path / "s", table, column, value)
    with pytest.raises(ValueError, match=re.escape(f"{table}.csv, line 2: column '{column}' holds '{value}', not an "
                                                   "integer >= 1")):
        gs.write_report(gs.read_tables(tmp_path / "s"), tmp_path / "out", {})


def test_a_fractional_draw_count_is_no_integer(tmp_path):
    _edit(tmp_path / "s", "probes", "draws", "2.5")
    with pytest.raises(ValueError, match=re.escape("probes.csv, line 2: column 'draws' holds '2.5', not an integer")):
        gs.read_tables(tmp_path / "s")


def test_the_committed_tables_pass_and_step_zero_is_a_step():
    t = gs.read_tables(COMMITTED)
    assert {r["draws"] for r in t["probes"]} == {"4"} and min(int(r["state"]) for r in t["probes"]) == 0
    assert min(int(r["step"]) for r in t["spike"]) == 0
