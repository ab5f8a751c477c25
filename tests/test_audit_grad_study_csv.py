"""Fourth fresh audit: the grad-study's CSV tables are read with one column per name and one field per column."""

import shutil
from pathlib import Path

import pytest

from fp8emu.lab import grad_study

DATA = Path(__file__).resolve().parents[1] / "docs" / "data" / "grad-study"


def _copy(tmp_path):
    for p in DATA.glob("*.csv"):
        shutil.copy(p, tmp_path)
    return tmp_path / "ksweep.csv"


def test_a_column_named_twice_is_refused_not_read_last_wins(tmp_path):
    # before: csv.DictReader kept the second 'accum_err' (zeros here): finding (d) turned from "reproduced"
    # to "contradicted" with a fast-accumulation error of 0, silently
    p = _copy(tmp_path)
    lines = p.read_text().splitlines()
    assert lines[0].split(",")[1] == "accum_err"
    p.write_text("\n".join([lines[0] + ",accum_err"] + [ln + ",0" for ln in lines[1:]]) + "\n")
    with pytest.raises(ValueError, match=r"ksweep\.csv: the header names column 'accum_err' more than once"):
        grad_study.read_tables(tmp_path)


@pytest.mark.parametrize("cut", [-2, 1])
def test_a_row_of_another_field_count_is_refused_with_its_line(tmp_path, cut):
    # before: a short row was filled with None, a long one kept its extra fields under the key None
    p = _copy(tmp_path)
    lines = p.read_text().splitlines()
    fields = lines[3].split(",")
    lines[3] = ",".join(fields[:cut] if cut < 0 else fields + ["1"] * cut)
    p.write_text("\n".join(lines) + "\n")
    n = len(fields) + cut
    with pytest.raises(ValueError, match=rf"ksweep\.csv, line 4: {n} fields where the header names {len(fields)}"):
        grad_study.read_tables(tmp_path)


def test_the_committed_tables_read_as_before(tmp_path):
    # the same rows as csv.DictReader gives for well-formed files (blank lines skipped, quoted commas kept)
    import csv
    for p in sorted(DATA.glob("*.csv")):
        with open(p, newline="", encoding="utf-8") as f:
            assert grad_study.read_csv(p) == list(csv.DictReader(f)), p.name
    q = tmp_path / "q.csv"
    q.write_text('a,b\n"x, y",1\n\n2,3\n')
    assert grad_study.read_csv(q) == [{"a": "x, y", "b": "1"}, {"a": "2", "b": "3"}]
    (tmp_path / "e.csv").write_text("")
    assert grad_study.read_csv(tmp_path / "e.csv") == []
