"""Numbers in the study CSVs (``lab.store.numbers_except``, ``lab.drift.read_csv``): as a writer wrote them.

Python's ``int`` and ``float`` take " 3", "1_000" and Arabic-Indic digits: a study CSV cell edited to
"1_0" was read as 10, "٣" as 3, " 12 " as 12.  No study writes such a cell; each is now refused with the
file, line and column, as "abc" already was.
"""
import os

import pytest

from fp8emu.lab import drift
from fp8emu.lab.store import numbers_except, read_rows, write_rows

ODD = ["1_0", " 12", "12 ", "\u0663", "1_0.5", "\u0661.5", "1\t"]


@pytest.mark.parametrize("cell", ODD)
def test_numbers_except_refuses_what_no_writer_wrote(tmp_path, cell):
    f = os.path.join(tmp_path, "runs.csv")
    with open(f, "w", encoding="utf-8") as fh:
        fh.write(f"recipe,loss\nx,{cell}\n")
    with pytest.raises(ValueError, match=r"line 2: column 'loss' holds .*not a number"):
        read_rows(f, convert=numbers_except({"recipe"}))


def test_numbers_as_written_are_read_as_before(tmp_path):
    f = os.path.join(tmp_path, "runs.csv")
    write_rows(f, [{"recipe": "1_0", "seed": 3, "loss": 1.5e-05, "gap": float("nan"), "big": float("inf"),
                    "neg": -2}], ["recipe", "seed", "loss", "gap", "big", "neg"])
    (row,) = read_rows(f, convert=numbers_except({"recipe"}))
    assert row["recipe"] == "1_0" and row["seed"] == 3 and row["loss"] == 1.5e-05 and row["neg"] == -2
    assert row["gap"] != row["gap"] and row["big"] == float("inf")


@pytest.mark.parametrize("column,cell", [("k", "6_4"), ("k", "\u0666\u0664"), ("median_rel_error", " 0.5")])
def test_the_k_drift_csv_refuses_them_too(tmp_path, column, cell):
    t = drift.k_drift(ks=(64,), m=2, n=2, seeds=(0,), models=("exact",), gemms=("fprop",),
                      distributions=("gaussian",))
    f = os.path.join(tmp_path, "k.csv")
    drift.write_csv(t, f)
    assert drift.read_csv(f).rows() == t.rows()
    lines = open(f, encoding="utf-8").read().splitlines()
    header = lines[0].split(",")
    cells = lines[1].split(",")
    cells[header.index(column)] = cell
    with open(f, "w", encoding="utf-8") as fh:
        fh.write("\n".join([lines[0], ",".join(cells)]) + "\n")
    with pytest.raises(ValueError, match=f"line 2: {column} = .* is not"):
        drift.read_csv(f)
