"""A finding whose measurements hold an infinity gives no verdict, and the README's line of a finding that ran says so.

``loglog_slope`` leaves an infinite point out (no point of a power law) and the rules compare with ``<=``, so an
overflowed accumulation error at one K of the sweep gave finding (d) a slope over the other points and the verdict
"reproduced" (at the largest K, "fast inf" was above split by any factor); the same for (a) and (f).  Only NaN was
counted as a damaged measurement.  ``readme_block`` said "(not run)" of every finding without a value, a finding whose
table says "ran; 1 NaN measurement(s): no verdict" too.
"""

import csv
import math
import shutil
from pathlib import Path

import pytest

from fp8emu.lab import grad_study as gs

COMMITTED = Path(__file__).resolve().parents[1] / "docs" / "data" / "grad-study"


def _edited(folder, table, match, column, value):
    """The committed study with ``column`` set to ``value`` in the rows of ``table`` that ``match`` picks."""
    shutil.copytree(COMMITTED, folder)
    with (folder / f"{table}.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    hit = [r for r in rows if all(r[k] == v for k, v in match.items())]
    assert len(hit) == 1, hit
    hit[0][column] = value
    with (folder / f"{table}.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return {r["finding"]: r for r in gs.findings(gs.read_tables(folder))}


CASES = {
    "d at K=2048": ("d", "ksweep", {"stack": "h100-fast", "K": "2048", "gemm": "wgrad"}, "accum_err", "inf"),
    "d at K=4096": ("d", "ksweep", {"stack": "h100-fast", "K": "4096", "gemm": "wgrad"}, "accum_err", "inf"),
    "a": ("a", "bias", {"case": "plain", "recipe": "te-nvfp4-no-rht", "level": "operand", "n": "32"}, "rel_err_mean",
          "inf"),
    "f": ("f", "bias", {"case": "eden", "recipe": "ms-eden-rht", "level": "operand", "n": "64"}, "rel_err_mean",
          "-inf"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_infinite_measurement_gives_no_verdict(tmp_path, case):
    key, table, match, column, value = CASES[case]
    before = {r["finding"]: r for r in gs.findings(gs.read_tables(COMMITTED))}[key]
    row = _edited(tmp_path / "s", table, match, column, value)[key]
    assert row["verdict"] == "not at this scale" and math.isnan(row["value"]), row
    assert row["measured"].endswith("; 1 infinite measurement(s): no verdict"), row["measured"]
    # the committed study itself keeps its verdict (reproduced for (a) and (d), so the rule did call the edited one so)
    assert before["verdict"] in ("reproduced", "not at this scale") and "infinite" not in before["measured"]


def test_nan_and_infinite_measurements_are_both_counted(tmp_path):
    shutil.copytree(COMMITTED, tmp_path / "s")
    path = tmp_path / "s" / "ksweep.csv"
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    fast = [r for r in rows if r["stack"] == "h100-fast" and r["gemm"] == "wgrad"]
    fast[0]["accum_err"], fast[1]["accum_max_rel"], fast[2]["accum_err"] = "nan", "inf", "inf"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    d = {r["finding"]: r for r in gs.findings(gs.read_tables(tmp_path / "s"))}["d"]
    assert d["measured"].endswith("; 1 NaN and 2 infinite measurement(s): no verdict")


def test_the_readme_line_of_a_finding_that_ran_without_a_value_does_not_say_not_run(tmp_path):
    _edited(tmp_path / "s", "ksweep", {"stack": "h100-fast", "K": "2048", "gemm": "wgrad"}, "accum_err", "nan")
    lines = gs.readme_block(tmp_path / "s").splitlines()
    assert lines[3] == ("- (d) not at this scale: fast accumulation's error grows with K (1 NaN measurement(s): no "
                        "verdict)")
    # a finding whose table is missing still reads "not run"
    (tmp_path / "s" / "ksweep.csv").unlink()
    assert gs.readme_block(tmp_path / "s").splitlines()[3] == \
        "- (d) not at this scale: fast accumulation's error grows with K (not run)"


def test_the_committed_readme_lines_are_unchanged():
    # every committed finding has a value: the README's block (compared word for word by test_grad_study) is as before
    assert "not run" not in gs.readme_block(COMMITTED) and "no verdict" not in gs.readme_block(COMMITTED)
