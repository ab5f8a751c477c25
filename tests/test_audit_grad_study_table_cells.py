"""A grad-study table's edited number cells (tests/AUDIT.md, "Eleventh fresh audit, part A", #2).

``read_tables`` checked a number cell with Python's ``int`` / ``float``, which take "6_0" (60), " 3" and
Arabic-Indic digits: a hand-edited ``spike.csv`` step "6_0" was read as step 60 by finding (e)'s rule, silently.
No writer of a study CSV writes such text (``csv_value``: ``repr`` of a float, ``str`` of an int), so they are
refused as every other study CSV refuses them (:func:`fp8emu.lab.store.plain_number`), naming file, line and column.
"""

import pytest

from fp8emu.lab import grad_study as g
from fp8emu.lab.store import write_rows


def _spike_table(folder, col=None, text=None):
    cols = g.COLUMNS["spike"]
    rows = []
    for step in range(1, 6):
        r = {c: "0.001" for c in cols}
        r.update(recipe="te-delayed", step=str(step), history="2", spiked="1" if step == 3 else "0")
        rows.append(r)
    if col is not None:
        rows[3][col] = text
    write_rows(folder / "spike.csv", rows, cols)


@pytest.mark.parametrize("col, text", [("step", "6_0"), ("step", " 4"), ("history", "\u0662"),
                                       ("fprop_rel_err", "1_0.5"), ("frac_underflow", " 0.5"),
                                       ("frac_saturated", "0.5\u00a0")])
def test_a_number_cell_no_writer_writes_is_refused(tmp_path, col, text):
    _spike_table(tmp_path, col, text)
    with pytest.raises(ValueError, match=rf"spike\.csv, line 5: column '{col}' holds"):
        g.read_tables(tmp_path)


@pytest.mark.parametrize("col, text", [("step", "4"), ("fprop_rel_err", "1e-05"), ("fprop_rel_err", "nan"),
                                       ("frac_underflow", "-inf"), ("fprop_rel_err", "")])
def test_what_the_writer_writes_is_read_as_before(tmp_path, col, text):
    _spike_table(tmp_path, col, text)
    assert g.read_tables(tmp_path)["spike"][3][col] == text
