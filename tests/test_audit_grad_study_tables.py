"""The grad-study report reads every table in ``--out``, including those an earlier run wrote and a user edited.

A table of other columns (an edited ``probes.csv``, or another file saved under a table's name) was a raw
``KeyError`` inside a finding rule when the report was rebuilt, and text in a number column was Python's
"invalid literal for int() with base 10" of no file; each is one line naming the file (and line, column).
"""

import shutil
from pathlib import Path

import pytest

from fp8emu.lab import grad_study as gs

COMMITTED = Path(__file__).resolve().parents[1] / "docs" / "data" / "grad-study"


@pytest.mark.parametrize("table", gs.TABLES)
def test_a_table_of_other_columns_is_named_not_a_keyerror(tmp_path, table):
    shutil.copy(COMMITTED / "bias.csv", tmp_path / "bias.csv")
    (tmp_path / f"{table}.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match=rf"{table}\.csv: not a grad-study {table} table \(it lacks the column"):
        gs.findings(gs.read_tables(tmp_path))


def test_the_committed_tables_have_their_columns_and_an_empty_table_is_no_table(tmp_path):
    tables = gs.read_tables(COMMITTED)
    assert set(tables) == set(gs.TABLES)
    for name, rows in tables.items():
        assert set(gs.COLUMNS[name]) <= set(rows[0])
    (tmp_path / "probes.csv").write_text("")
    assert gs.read_tables(tmp_path) == {"probes": []}


def test_the_command_names_an_edited_table_in_one_line(tmp_path, capsys):
    pytest.importorskip("torch")
    from fp8emu.cli import main
    out = tmp_path / "o"
    assert main(["grad-study", "--quick", "--kinds", "spike", "--out", str(out), "--quiet"]) == 0
    (out / "probes.csv").write_text("state,recipe\n1,te-current\n")
    assert main(["grad-study", "--quick", "--kinds", "spike", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "probes.csv: not a grad-study probes table" in err and "Traceback" not in err


@pytest.mark.parametrize("table,column,kind", [("spike", "step", "an integer"), ("ksweep", "K", "an integer"),
                                               ("bias", "n", "an integer"), ("probes", "state", "an integer"),
                                               ("draws", "rel_err", "a number"),
                                               ("spike", "fprop_rel_err", "a number")])
def test_text_in_a_number_column_names_file_line_and_column(tmp_path, table, column, kind):
    lines = (COMMITTED / f"{table}.csv").read_text().splitlines()
    header = lines[0].split(",")
    row = lines[1].split(",")
    row[header.index(column)] = "abc"
    (tmp_path / f"{table}.csv").write_text("\n".join([lines[0], lines[1], ",".join(row)]) + "\n")
    with pytest.raises(ValueError, match=rf"{table}\.csv, line 3: column '{column}' holds 'abc', not {kind}"):
        gs.findings(gs.read_tables(tmp_path))
