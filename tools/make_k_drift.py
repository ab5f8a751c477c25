"""Measure FP8 GEMM accumulation error vs K for the study's GPU models; write the CSV and the figure.

Run: ``python3 tools/make_k_drift.py`` (NumPy only; 141 s of wall time on this project's shared
2-core machine on 2026-12-04).  Writes ``docs/data/lm-study/k_drift.csv``
(:func:`fp8emu.lab.drift.k_drift` with its defaults: K = 64 to 16384, M = N = 32, seeds 0-2, both
GEMMs' formats, Gaussian, all-positive and mixed operands, every model) and
``figures/lm_study_k_drift.png``.  The section "Fast accumulation and K" of
``docs/guides/lm-study.md`` states numbers from that CSV; ``tests/test_k_drift.py`` checks them.
``--out DIR`` writes both files into DIR instead.
"""

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fp8emu.lab import drift  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None, help="write k_drift.csv and lm_study_k_drift.png here")
    args = p.parse_args(argv)
    csv_path = (args.out or ROOT / "docs" / "data" / "lm-study") / "k_drift.csv"
    png_path = (args.out or ROOT / "figures") / "lm_study_k_drift.png"
    t0 = time.perf_counter()
    table = drift.k_drift()
    took = time.perf_counter() - t0
    drift.write_csv(table, csv_path)
    drift.figure_k_drift(table).savefig(png_path, dpi=100, bbox_inches="tight", metadata={"Software": None})
    print(f"{len(table)} rows in {took:.1f} s -> {csv_path}, {png_path}")


if __name__ == "__main__":
    main()
