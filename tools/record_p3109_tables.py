"""Record the IEEE P3109 interim report's value tables of the 8-bit formats as one small test file.

The P3109 working group publishes, beside its interim report, a value table per format: every code point
and its value in hexadecimal floating point (``Value Tables/Hexadecimal/K8/P{p}/{signed,unsigned}/
Binary8p{p}{se,sf,ue,uf}.csv`` in github.com/P3109/Public).  This tool reads those CSVs from a checkout and
writes the float64 value of every code of every 8-bit format to ``tests/data/p3109/value_tables_K8.npz``
(keys ``Binary8p3se`` ...; NaN for NaN, +-inf for Inf) with the checkout's commit and report version, so
``tests/test_p3109.py`` proves fp8emu's P3109 formats code for code without the checkout.

Usage::

    python tools/record_p3109_tables.py /path/to/P3109-Public [--commit SHA] [--version 4.0]
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import subprocess
import sys
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "p3109" / "value_tables_K8.npz"


def parse_value(text: str) -> float:
    t = text.strip()
    if t == "NaN":
        return math.nan
    if t in ("Inf", "+Inf", "-Inf"):
        return -math.inf if t.startswith("-") else math.inf
    return float.fromhex(t)


def read_table(raw: str) -> np.ndarray:
    rows = list(csv.DictReader(io.StringIO(raw)))
    vals = np.full(256, np.nan)
    codes = [int(r["codepoint"], 16) for r in rows]
    if sorted(codes) != list(range(256)):
        raise SystemExit("a K8 table must list the 256 code points once each")
    for r, c in zip(rows, codes):
        vals[c] = parse_value(r["value"])
    return vals


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", type=Path, help="a git checkout (or bare mirror) of github.com/P3109/Public")
    ap.add_argument("--commit", default="HEAD")
    ap.add_argument("--version", default=None, help="report version to record (default: CITATION.cff's)")
    args = ap.parse_args(argv)

    def show(path):
        return subprocess.run(["git", "-C", str(args.checkout), "show", f"{args.commit}:{path}"], check=True,
                              capture_output=True, text=True).stdout

    sha = subprocess.run(["git", "-C", str(args.checkout), "rev-parse", args.commit], check=True,
                         capture_output=True, text=True).stdout.strip()
    version = args.version or next(line.split(":", 1)[1].strip() for line in show("CITATION.cff").splitlines()
                                   if line.startswith("version:"))
    out = {"commit": np.array(sha), "version": np.array(version)}
    for p in range(1, 9):
        for sign, sfx in (("signed", "s"), ("unsigned", "u")):
            if sign == "signed" and p == 8:
                continue
            for dom in ("e", "f"):
                name = f"Binary8p{p}{sfx}{dom}"
                out[name] = read_table(show(f"Value Tables/Hexadecimal/K8/P{p}/{sign}/{name}.csv"))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **out)
    print(f"P3109 report {version} at {sha[:12]}: {len(out) - 2} tables -> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
