"""fp8emu's matrix-instruction catalogue against MMA-Sim, per MMA tile, side by side in one process.

Run in a venv with mmasim and the CPU torch (see tools/record_mmasim.py), fp8emu on the path::

    PYTHONPATH=. /tmp/venv-mmasim/bin/python benchmarks/bench_mma.py [--repeat 5] [--batch 256 4096]

For each instruction both simulators compute the same random tiles (the instruction's m x n x k,
finite codes, random C): one tile per call, and each ``--batch`` of tiles per call (both through
their row-wise dot products: MMA-Sim's ``dpa`` and :func:`fp8emu.gemm.instructions.dot` on the
tiles' m * n rows).  Outputs are checked equal before timing; the two are timed alternately, best
of ``--repeat`` (fp8emu: its first call after MMA-Sim, its tables and code out of the caches, and
the best of four calls after that, as in a loop over tiles).  Prints process CPU microseconds per tile and the ratios
MMA-Sim / fp8emu (both kinds of fp8emu call; the last column the warm call's wall-time ratio).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
import time
from pathlib import Path

import numpy as np

# one thread for torch's kernels and no OpenMP pool spinning beside it (so CPU time is its work)
os.environ.setdefault("OMP_NUM_THREADS", "1")
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


def _timed(fn):
    """(wall, process CPU) seconds of one call: CPU time is what a busy shared machine distorts least."""
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--batch", type=int, nargs="+", default=[256], help="tiles per call in the batched comparisons")
    ap.add_argument("--only", nargs="*", help="instructions to run (default: all)")
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    print(f"mmasim {importlib.metadata.version('mmasim')}, torch {torch.__version__}, numpy {np.__version__}; "
          f"one thread each; process CPU microseconds per tile, best of {args.repeat}; load average "
          f"{open('/proc/loadavg').read().split()[0] if os.path.exists('/proc/loadavg') else '?'}")
    sizes = [1] + list(args.batch)
    print(f"{'instruction':28s} {'tile':>9s} {'tiles':>5s} {'MMA-Sim':>9s} {'fp8emu':>8s} {'ratio':>6s} "
          f"{'fp8emu warm':>11s} {'ratio':>6s} {'wall ratio':>10s}")
    rng = np.random.default_rng(0)
    for preset, fa, fb, kind, block in BENCH:
        if args.only and preset not in args.only:
            continue
        m, n, k = INSTRUCTIONS[preset].shape
        for tiles in sizes:
            g = _group(rng, preset, fa, fb, kind, block, m * n * tiles)
            theirs = record_mmasim.run_mmasim(preset, [g])
            mine = _fp8emu(preset, g)
            assert np.array_equal(mine.view(theirs.dtype), theirs), preset
            del theirs, mine
            sim, emu, warm = [np.inf] * 2, [np.inf] * 2, [np.inf] * 2
            for _ in range(args.repeat):
                # alternately, so both see the same machine load.  Right after MMA-Sim, fp8emu finds
                # its tables and code out of the caches ("cold"); the next calls, as in a loop over
                # tiles, find them back ("warm").  One-tile MMA-Sim calls get a second try too.
                for _ in range(2 if tiles == 1 else 1):
                    sim = np.minimum(sim, _timed(lambda: record_mmasim.run_mmasim(preset, [g])))
                emu = np.minimum(emu, _timed(lambda: _fp8emu(preset, g)))
                for _ in range(4):
                    warm = np.minimum(warm, _timed(lambda: _fp8emu(preset, g)))
            sim, emu, warm = sim / tiles * 1e6, emu / tiles * 1e6, warm / tiles * 1e6
            print(f"{preset:28s} {f'{m}x{n}x{k}':>9s} {tiles:5d} {sim[1]:9.1f} {emu[1]:8.1f} {sim[1] / emu[1]:6.1f} "
                  f"{warm[1]:11.1f} {sim[1] / warm[1]:6.1f} {sim[0] / warm[0]:10.1f}", flush=True)


if __name__ == "__main__":
    main()
