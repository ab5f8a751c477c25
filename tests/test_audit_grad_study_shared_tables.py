"""A ``grad-study --kinds`` rerun into a study's folder keeps the tables that several kinds write.

Cells of different kinds write rows into one table (``bias.csv``: the bias and eden cells; ``operands.csv``:
the eden and operands cells), and the command wrote the tables from the invocation's cells alone: ``--kinds
eden`` into a finished study rewrote ``bias.csv`` and ``operands.csv`` with eden's rows only, and findings
(a), (b) and (g), whose cells were all in the folder, became "not run", silently.  The tables (and the report)
are now made from every cell of the study in ``--out``.
"""

import csv

import pytest

pytest.importorskip("torch")
from fp8emu.cli import main  # noqa: E402


def _findings(out):
    with open(out / "findings.csv", newline="", encoding="utf-8") as f:
        return {r["finding"]: (r["measured"], r["verdict"]) for r in csv.DictReader(f)}


def test_a_rerun_of_one_kind_keeps_the_rows_of_the_others(tmp_path):
    out = tmp_path / "gs"
    argv = ["grad-study", "--quick", "--out", str(out), "--quiet", "--kinds"]
    assert main(argv + ["bias,eden,operands"]) == 0
    before = {t: (out / f"{t}.csv").read_bytes() for t in ("bias", "draws", "operands", "findings")}
    verdicts = _findings(out)
    assert all(verdicts[f][0] != "not run" for f in "abg"), verdicts
    for kind in ("eden", "operands", "bias"):
        assert main(argv + [kind]) == 0
        after = {t: (out / f"{t}.csv").read_bytes() for t in before}
        assert after == before, kind       # the same tables, the same findings, as the study with every kind
        assert _findings(out) == verdicts
