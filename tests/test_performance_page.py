"""docs/performance.md's training-step rows are the benchmark's, not typed by hand.

``benchmarks/bench_torch_step.py --write-docs`` writes the text between two marker comments: a
line naming the date, machine and versions, the command, and one table row per case.  These tests
run no benchmark; they check that what a hand edit tends to drop is there and consistent: the
markers, a machine line that parses, the command, a ratio in every row that agrees with the row's
own seconds, the targets the benchmark states, and the run's section in benchmarks/RESULTS.md.
"""

import ast
import datetime
import importlib.util
import re
from fractions import Fraction
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "performance.md"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
BENCH = ROOT / "benchmarks" / "bench_torch_step.py"
BEGIN, END = "<!-- bench_torch_step:begin -->", "<!-- bench_torch_step:end -->"

MACHINE = re.compile(
    r"^Measured (?P<date>\d{4}-\d{2}-\d{2}) on (?P<cpu>\S.*?), (?P<cores>\d+) cores, load average "
    r"(?P<before>\d+\.\d\d|n/a) before and (?P<after>\d+\.\d\d|n/a) after; torch (?P<torch>\S+), "
    r"numpy (?P<numpy>\S+), fp8emu (?P<fp8emu>\S+); (?P<threads>\d+) threads?\.$", re.M)
COMMAND = re.compile(r"^Command: `(?P<cmd>python3 benchmarks/bench_torch_step\.py [^`]*--write-docs[^`]*)`", re.M)
ROW = re.compile(r"^\| `(?P<recipe>[a-z0-9-]+)` / `(?P<gpu>[a-z0-9-]+)` \| (?P<ec>\d+\.\d\d) \| (?P<pc>\d+\.\d{3}) "
                 r"\| (?P<ratio>\d+)× \| (?P<wall>\d+)× \| ≤ (?P<target>\d+)× \| (?P<met>yes|no) \|$")


def bench_constants():
    """CASES and TARGET as the benchmark states them, read from its source (importing it needs torch)."""
    found = {}
    for node in ast.parse(BENCH.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in {"CASES", "TARGET"}:
                found[node.targets[0].id] = ast.literal_eval(node.value)
    return found["CASES"], found["TARGET"]


def section(text):
    """The text between the markers; fails unless there is exactly one of each, in order."""
    assert text.count(BEGIN) == 1, f"{BEGIN} must appear once in docs/performance.md"
    assert text.count(END) == 1, f"{END} must appear once in docs/performance.md"
    a, b = text.index(BEGIN), text.index(END)
    assert a < b, "the begin marker must come before the end marker"
    return text[a + len(BEGIN):b]


def check(text):
    """Every check on the written section; returns the parsed machine line and rows."""
    body = section(text)
    m = MACHINE.search(body)
    assert m, "the machine/date line ('Measured YYYY-MM-DD on CPU, N cores, load average ...') is missing"
    date = datetime.date.fromisoformat(m["date"])
    assert datetime.date(2026, 12, 1) <= date <= datetime.date.today(), date
    assert int(m["cores"]) >= 1 and int(m["threads"]) >= 1
    assert "process-CPU-time ratios" in body and "one process" in body
    assert COMMAND.search(body), "the command that wrote the rows is missing"
    _, target = bench_constants()
    table = [line for line in body.splitlines() if line.startswith("|")]
    assert len(table) >= 3, "the table has no rows"
    assert "target" in table[0] and "ratio (CPU)" in table[0]
    rows = []
    for line in table[2:]:
        r = ROW.match(line)
        assert r, f"row without the benchmark's columns (a ratio, a target): {line}"
        ec, pc = Fraction(r["ec"]), Fraction(r["pc"])
        # The shown seconds are rounded to 0.005 / 0.0005; the ratio written from the unrounded ones
        # must lie within what those roundings allow (plus its own rounding to a whole number).
        lo = (ec - Fraction(1, 200)) / (pc + Fraction(1, 2000))
        hi = (ec + Fraction(1, 200)) / (pc - Fraction(1, 2000))
        assert lo - Fraction(1, 2) <= int(r["ratio"]) <= hi + Fraction(1, 2), line
        assert int(r["target"]) == target[r["gpu"]], f"target of {r['gpu']} is {target[r['gpu']]}x: {line}"
        if hi <= int(r["target"]):          # met whatever the unrounded seconds were
            assert r["met"] == "yes", line
        elif lo > int(r["target"]):
            assert r["met"] == "no", line
        rows.append(r)
    return m, rows


def test_page_has_the_benchmark_rows():
    m, rows = check(PAGE.read_text())
    cases, _ = bench_constants()
    assert {(r["recipe"], r["gpu"]) for r in rows} <= set(cases)
    assert len({(r["recipe"], r["gpu"]) for r in rows}) == len(rows), "a case appears twice"


def test_results_has_the_same_run():
    m, _ = check(PAGE.read_text())
    cmd = COMMAND.search(section(PAGE.read_text()))["cmd"]
    results = RESULTS.read_text()
    heads = [h for h in re.findall(r"^## .*$", results, re.M) if "bench_torch_step" in h and m["date"] in h]
    assert heads, f"benchmarks/RESULTS.md has no bench_torch_step section dated {m['date']}"
    assert f"`{cmd}` on {m['cpu']}, {m['cores']} cores" in results


def test_checks_catch_hand_edits():
    good = PAGE.read_text()
    check(good)
    body = section(good)
    row = next(line for line in body.splitlines() if ROW.match(line))
    r = ROW.match(row)
    edits = [good.replace(BEGIN, ""), good.replace(END, END + "\n" + END),
             good.replace(MACHINE.search(body)[0], "Machine: 2-vCPU Intel Xeon at load average 10-19."),
             good.replace(f"| {r['ratio']}× |", "| |", 1),
             good.replace(f"| {r['ratio']}× |", f"| {int(r['ratio']) * 3 + 5}× |", 1),
             good.replace(f"≤ {r['target']}×", f"≤ {int(r['target']) + 1}×", 1)]
    for bad in edits:
        with pytest.raises(AssertionError):
            check(bad)


def test_writer_output_passes_the_checks():
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("bench_torch_step", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    info = {"cpu": "Test CPU @ 1.00GHz", "cores": "4", "load_before": "1.25", "load_after": "n/a",
            "torch": "2.13.0+cpu", "numpy": "2.4.6", "fp8emu": "0.1.0"}
    # CPU seconds 3.00 / 0.100 are 30x, under h100's 50x; 3.00 / 0.050 are 60x, over b200's 25x.
    rows = [("te-delayed", "h100", (6.0, 3.0), (0.2, 0.1)), ("te-mxfp8", "b200", (5.0, 3.0), (0.1, 0.05))]
    block = bench.docs_block(rows, info, 1, 2, "python3 benchmarks/bench_torch_step.py --write-docs",
                             datetime.date.today().isoformat())
    m, got = check(bench.splice(f"a\n{BEGIN}\nold rows\n{END}\nb\n", block))
    assert m["cpu"] == info["cpu"] and m["cores"] == "4"
    assert [(g["ratio"], g["wall"], g["met"]) for g in got] == [("30", "30", "yes"), ("60", "50", "no")]
    with pytest.raises(SystemExit, match="exactly one"):
        bench.splice("no markers here", block)
