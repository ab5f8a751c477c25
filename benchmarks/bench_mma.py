"""fp8emu's matrix-instruction catalogue against MMA-Sim, per MMA tile, side by side in one process.

Run in a venv with mmasim and the CPU torch (see tools/record_mmasim.py), fp8emu on the path::

    PYTHONPATH=. /tmp/venv-mmasim/bin/python benchmarks/bench_mma.py [--repeat 5] [--batch 256 4096]

For each instruction both simulators compute the same random tiles (the instruction's m x n x k,
finite codes, random C): one tile per call, and each ``--batch`` of tiles per call (both through
their row-wise dot products: MMA-Sim's ``dpa`` and :func:`fp8emu.gemm.instructions.dot` on the
tiles' m * n rows).  Outputs are checked equal before timing; the two are timed alternately, best
of ``--repeat``.  Prints microseconds per tile and the ratio (MMA-Sim / fp8emu) for each batch.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests"))

import record_mmasim  # noqa: E402
from fp8emu.gemm.instructions import INSTRUCTIONS, dot  # noqa: E402

# (preset, a format, b format, scale kind, block, tile n used here)
BENCH = [("ada-mma", "e4m3fn", "e4m3fn", None, None), ("hopper-wgmma", "e4m3fn", "e5m2", None, None),
         ("blackwell-tcgen05-f8f6f4", "e4m3fn", "e2m1fn", None, None),
         ("blackwell-tcgen05-mxf8f6f4", "e4m3fn", "e4m3fn", "ue8m0", 32),
         ("blackwell-tcgen05-mxf4nvf4", "e2m1fn", "e2m1fn", "ue4m3", 16),
         ("rtx-blackwell-mma", "e5m2", "e5m2", None, None), ("cdna3-mfma-fp8", "e4m3fnuz", "e5m2fnuz", None, None)]
FINITE_MAX = {"e4m3fn": 0x7E, "e5m2": 0x7B, "e2m1fn": 0x7, "e4m3fnuz": 0x7F, "e5m2fnuz": 0x7F}


def _group(rng, preset, fa, fb, kind, block, rows):
    ins = INSTRUCTIONS[preset]
    K = ins.shape[2]
    lim = FINITE_MAX

    def codes(f):
        bits = 4 if f == "e2m1fn" else 8
        mag = rng.integers(0, lim[f] + 1, (rows, K))
        return (mag | (rng.integers(0, 2, (rows, K)) << (bits - 1))).astype(np.uint8) if f != "e4m3fnuz" and \
            f != "e5m2fnuz" else np.where(mag == 0, 0, mag | (rng.integers(0, 2, (rows, K)) << 7)).astype(np.uint8)
    g = dict(a_format=fa, b_format=fb, a=codes(fa), b=codes(fb), c=rng.standard_normal(rows).astype(np.float32))
    if kind:
        lo, hi = (120, 135) if kind == "ue8m0" else (40, 70)
        g.update(scale_format=kind, block=block, a_scales=rng.integers(lo, hi, (rows, K // block)).astype(np.uint8),
                 b_scales=rng.integers(lo, hi, (rows, K // block)).astype(np.uint8))
    return g


def _fp8emu(preset, g):
    return dot(g["a"], g["b"], g["c"], instruction=preset, a_format=g["a_format"], b_format=g["b_format"],
               a_scales=g.get("a_scales"), b_scales=g.get("b_scales"), scale_format=g.get("scale_format"))


def _best(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--batch", type=int, nargs="+", default=[256], help="tiles per call in the batched comparisons")
    ap.add_argument("--only", nargs="*", help="instructions to run (default: all)")
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    print(f"mmasim {importlib.metadata.version('mmasim')}, torch {torch.__version__}, numpy {np.__version__}; "
          "one thread each; microseconds per tile (best of {})".format(args.repeat))
    sizes = [1] + list(args.batch)
    head = "".join(f" {'MMA-Sim ' + str(t):>12s} {'fp8emu ' + str(t):>11s} {'ratio':>6s}" for t in sizes)
    print(f"{'instruction':30s} {'tile':>11s}{head}")
    rng = np.random.default_rng(0)
    for preset, fa, fb, kind, block in BENCH:
        if args.only and preset not in args.only:
            continue
        m, n, k = INSTRUCTIONS[preset].shape
        row = ""
        for tiles in sizes:
            g = _group(rng, preset, fa, fb, kind, block, m * n * tiles)
            theirs = record_mmasim.run_mmasim(preset, [g])
            mine = _fp8emu(preset, g)
            assert np.array_equal(mine.view(theirs.dtype), theirs), preset
            del theirs, mine
            t_sim = t_emu = float("inf")
            for _ in range(args.repeat):          # alternately, so both see the same machine load
                t_sim = min(t_sim, _best(lambda: record_mmasim.run_mmasim(preset, [g]), 1) / tiles)
                t_emu = min(t_emu, _best(lambda: _fp8emu(preset, g), 1) / tiles)
            row += f" {t_sim * 1e6:12.0f} {t_emu * 1e6:11.1f} {t_sim / t_emu:6.1f}"
        print(f"{preset:30s} {f'{m}x{n}x{k}':>11s}{row}", flush=True)


if __name__ == "__main__":
    main()
