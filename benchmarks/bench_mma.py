"""fp8emu's matrix-instruction catalogue against MMA-Sim, per MMA tile, side by side in one process.

Run in a venv with mmasim and the CPU torch (see tools/record_mmasim.py), fp8emu on the path::

    PYTHONPATH=. /tmp/venv-mmasim/bin/python benchmarks/bench_mma.py [--repeat 5] [--batch 256 4096]

For each instruction both simulators compute the same random tiles (the instruction's m x n x k,
finite codes, random C): one tile per call, and each ``--batch`` of tiles per call.  MMA-Sim takes
them as its tile call does, as the tiles' m * n row-wise dot products through its batched
``dpa``; fp8emu both as those rows (:func:`fp8emu.gemm.instructions.dot`, "rows") and as the
tiles themselves (:func:`fp8emu.gemm.instructions.mma` on a batch, "tiles").  Outputs are
checked equal before timing; all are timed alternately, best of ``--repeat`` (fp8emu's tiles:
the first call after MMA-Sim, its tables and code out of the caches, "cold", and the best of
three calls after that, "warm", as in a loop over tiles).  Prints process CPU microseconds per
tile and the ratios MMA-Sim / fp8emu (the last column the warm tiles' wall-time ratio).

``--base DIR`` times an older fp8emu instead of MMA-Sim (any Python with fp8emu's dependencies; no
torch): DIR holds that package as ``fp8emu_old`` (``git archive REV fp8emu | tar -x -C DIR``, then
rename), and both compute each instruction's batch of ``--batch`` tiles alternately, outputs checked
bit-identical, best process CPU time of ``--repeat`` rounds each; it prints their ratio::

    python3 benchmarks/bench_mma.py --base /tmp/perf-head --batch 4096 --repeat 7

``--floor`` (with MMA-Sim) prints, per ``--batch`` of tiles, what bounds the per-tile ratio of the
presets that take fp8emu's operand path (every one but ``kind::mxf4nvf4``, whose group sums are
matrix products): the passes over products alone (:func:`_floor_passes`), timed alternately with
MMA-Sim and with the whole ``mma`` call, and MMA-Sim's time over theirs, the most this path's
design could reach if every per-output pass cost nothing.  It also times the same passes for one
256 x 256 x 4096 GEMM of ``kind::mxf8f6f4`` against ``np.matmul`` of float32 matrices of that shape:
the fewest times ``np.matmul`` that a GEMM whose entries the exact route cannot serve (random block
scales) can take on the operand path::

    PYTHONPATH=. /tmp/venv-mmasim/bin/python benchmarks/bench_mma.py --floor --batch 4096
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
import time
from pathlib import Path

# one thread for torch's kernels and no OpenMP pool spinning beside it (so CPU time is its work), and
# one for NumPy's BLAS (np.matmul, the GEMM peer of --floor): set before NumPy starts its pool
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests"))

import record_mmasim  # noqa: E402
from fp8emu.formats import get_format  # noqa: E402
from fp8emu.gemm.routes import codes as route_codes, operands, steps, workspace as route_workspace  # noqa: E402
from fp8emu.gemm.catalogue import INSTRUCTIONS  # noqa: E402
from fp8emu.gemm.instructions import dot, mma  # noqa: E402

# (preset, a format, b format, scale kind, block, tile n used here)
BENCH = [("ada-mma", "e4m3fn", "e4m3fn", None, None), ("hopper-wgmma", "e4m3fn", "e5m2", None, None),
         ("blackwell-tcgen05-f8f6f4", "e4m3fn", "e2m1fn", None, None),
         ("blackwell-tcgen05-mxf8f6f4", "e4m3fn", "e4m3fn", "ue8m0", 32),
         ("blackwell-tcgen05-mxf4nvf4", "e2m1fn", "e2m1fn", "ue4m3", 16),
         ("rtx-blackwell-mma", "e5m2", "e5m2", None, None), ("cdna3-mfma-fp8", "e4m3fnuz", "e5m2fnuz", None, None)]
FINITE_MAX = {"e4m3fn": 0x7E, "e5m2": 0x7B, "e2m1fn": 0x7, "e4m3fnuz": 0x7F, "e5m2fnuz": 0x7F}


def _tiles(rng, preset, fa, fb, kind, block, tiles):
    """``tiles`` random tiles of the instruction's m x n x k (finite codes, random C, block scales)."""
    ins = INSTRUCTIONS[preset]
    m, n, k = ins.shape
    lim = FINITE_MAX

    def codes(f, shape):
        bits = 4 if f == "e2m1fn" else 8
        mag = rng.integers(0, lim[f] + 1, shape)
        sign = rng.integers(0, 2, shape) << (bits - 1)
        if f in ("e4m3fnuz", "e5m2fnuz"):         # no -0 code: 0x80 is their NaN
            return np.where(mag == 0, 0, mag | sign).astype(np.uint8)
        return (mag | sign).astype(np.uint8)
    t = dict(a_format=fa, b_format=fb, a=codes(fa, (tiles, m, k)), b=codes(fb, (tiles, k, n)),
             c=rng.standard_normal((tiles, m, n)).astype(np.float32))
    if kind:
        lo, hi = (120, 135) if kind == "ue8m0" else (40, 70)
        t.update(scale_format=kind, a_scales=rng.integers(lo, hi, (tiles, m, k // block)).astype(np.uint8),
                 b_scales=rng.integers(lo, hi, (tiles, k // block, n)).astype(np.uint8))
    return t


def _rows(t):
    """The tiles as their m * n row-wise dot products (what MMA-Sim's tile call expands them to)."""
    T, m, k = t["a"].shape
    n = t["b"].shape[2]
    g = dict(a_format=t["a_format"], b_format=t["b_format"], c=t["c"].reshape(-1),
             a=np.broadcast_to(t["a"][:, :, None, :], (T, m, n, k)).reshape(-1, k),
             b=np.broadcast_to(np.swapaxes(t["b"], 1, 2)[:, None], (T, m, n, k)).reshape(-1, k))
    if "a_scales" in t:
        nk = t["a_scales"].shape[2]
        g.update(scale_format=t["scale_format"], block=k // nk,
                 a_scales=np.broadcast_to(t["a_scales"][:, :, None, :], (T, m, n, nk)).reshape(-1, nk),
                 b_scales=np.broadcast_to(np.swapaxes(t["b_scales"], 1, 2)[:, None], (T, m, n, nk)).reshape(-1, nk))
    return g


def _fp8emu_rows(preset, g):
    return dot(g["a"], g["b"], g["c"], instruction=preset, a_format=g["a_format"], b_format=g["b_format"],
               a_scales=g.get("a_scales"), b_scales=g.get("b_scales"), scale_format=g.get("scale_format"))


def _fp8emu_tiles(preset, t, mma=mma):
    return mma(t["a"], t["b"], t["c"], instruction=preset, a_format=t["a_format"], b_format=t["b_format"],
               a_scales=t.get("a_scales"), b_scales=t.get("b_scales"), scale_format=t.get("scale_format"))


def _floor_passes(preset, t):
    """A function running, on the tiles ``t``, the passes of fp8emu's operand path whose length is
    the number of products, laid out and blocked as that path lays them out: each operand decoded
    once per chunk (value and exponent, K-major, tiles innermost), and per step its products (a
    broadcast copy, a multiplication), their exponents (a copy, an addition) and each output's
    largest (for ``"paired"``: each half's), one multiplication by a per-output aligning factor,
    the truncation and the sum (in float32 where the path's terms sum exactly there, else in
    float64).  Everything whose length is the number of outputs (C's exponent and alignment, the
    factor itself, the rounding) is left out, so its time bounds the whole call's from below."""
    ins = INSTRUCTIONS[preset]
    fa, fb = get_format(t["a_format"]), get_format(t["b_format"])
    a, b = t["a"], np.swapaxes(t["b"], 1, 2)                       # (T, M, K), (T, N, K) as mma takes them
    T, M, K = a.shape
    N, L = b.shape[1], ins.step
    paired = ins.datapath == "paired"
    acc = operands._sum_dtype(ins)
    tc, kc, mb, nb = operands._operand_blocks(T, M, N, K, L)
    f = np.ones((2,) * paired + (mb, nb, tc), np.float32)

    def run():
        for t0 in range(0, T, tc):
            t1 = min(T, t0 + tc)
            for k0 in range(0, K, kc):
                k1 = min(K, k0 + kc)
                va, ea = route_codes.decoded_chunk(a[t0:t1, :, k0:k1], fa, "a")
                vb, eb = route_codes.decoded_chunk(b[t0:t1, :, k0:k1], fb, "b")
                for m0 in range(0, M, mb):
                    m1 = min(M, m0 + mb)
                    for n0 in range(0, N, nb):
                        n1 = min(N, n0 + nb)
                        shp = (L, m1 - m0, n1 - n0, t1 - t0)
                        size = int(np.prod(shp))
                        # kept between calls, as the path's own work arrays are
                        p = route_workspace.work("floor p", L * mb * nb * tc, np.float32)[:size].reshape(shp)
                        x = route_workspace.work("floor x", L * mb * nb * tc, np.int8)[:size].reshape(shp)
                        g = f[..., :m1 - m0, :n1 - n0, :t1 - t0]
                        for s0 in range(0, k1 - k0, L):
                            operands._step_products(p, x, (va, ea, vb, eb), slice(s0, s0 + L), slice(m0, m1),
                                                    slice(n0, n1))
                            if paired:
                                steps.halves(x).max(axis=0)
                                q = steps.halves(p)
                            else:
                                x.max(axis=0)
                                q = p
                            np.multiply(q, g, out=q)
                            np.trunc(q, out=q)
                            np.add.reduce(q, axis=0, dtype=acc)
    return run


def floor(args):
    """Per batch of tiles: MMA-Sim, the whole ``mma`` call and its per-product passes alone
    (:func:`_floor_passes`), alternately; MMA-Sim's time over each."""
    print(f"mmasim {importlib.metadata.version('mmasim')}, numpy {np.__version__}; one thread each; process CPU "
          f"microseconds per tile, best of {args.repeat}; 'bound' is MMA-Sim over the per-product passes alone")
    print(f"{'instruction':28s} {'tiles':>5s} {'MMA-Sim':>9s} {'mma':>8s} {'ratio':>6s} {'passes':>8s} "
          f"{'bound':>6s} {'share':>6s}")
    rng = np.random.default_rng(0)
    for preset, fa, fb, kind, block in BENCH:
        if (args.only and preset not in args.only) or INSTRUCTIONS[preset].datapath == "grouped":
            continue
        for tiles in args.batch:
            t = _tiles(rng, preset, fa, fb, kind, block, tiles)
            g = _rows(t)
            theirs = record_mmasim.run_mmasim(preset, [g])
            assert np.array_equal(_fp8emu_tiles(preset, t).reshape(-1).view(theirs.dtype), theirs), preset
            passes = _floor_passes(preset, t)
            calls = [lambda: record_mmasim.run_mmasim(preset, [g]), lambda: _fp8emu_tiles(preset, t), passes]
            for fn in calls[1:]:
                fn()
            sim, whole, low = (x / tiles * 1e6 for x in _best_cpu(calls, args.repeat))
            print(f"{preset:28s} {tiles:5d} {sim:9.1f} {whole:8.2f} {sim / whole:6.1f} {low:8.2f} {sim / low:6.1f} "
                  f"{low / whole:6.0%}", flush=True)
    M, N, K = 256, 256, 4096
    t = {"a_format": "e4m3fn", "b_format": "e4m3fn", "a": rng.integers(0, 0x7F, (1, M, K)).astype(np.uint8),
         "b": rng.integers(0, 0x7F, (1, K, N)).astype(np.uint8)}
    x, y = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    calls = [lambda: np.matmul(x, y), _floor_passes("blackwell-tcgen05-mxf8f6f4", t)]
    best = _best_cpu(calls, args.repeat)
    print(f"GEMM {M}x{N}x{K} blackwell-tcgen05-mxf8f6f4: np.matmul {best[0] * 1e3:.2f} ms, the per-product passes "
          f"alone {best[1] * 1e3:.1f} ms = {best[1] / best[0]:.0f}x np.matmul", flush=True)


def _timed(fn):
    """(wall, process CPU) seconds of one call: CPU time is what a busy shared machine distorts least."""
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def _best_cpu(calls, repeat):
    """Each call's best process CPU seconds over ``repeat`` rounds, the calls alternating within a round
    (so that all of them see the same machine load)."""
    best = [np.inf] * len(calls)
    for _ in range(repeat):
        for i, fn in enumerate(calls):
            best[i] = min(best[i], _timed(fn)[1])
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--batch", type=int, nargs="+", default=[256], help="tiles per call in the batched comparisons")
    ap.add_argument("--only", nargs="*", help="instructions to run (default: all)")
    ap.add_argument("--base", help="folder holding an older fp8emu as fp8emu_old: time it instead of MMA-Sim")
    ap.add_argument("--floor", action="store_true",
                    help="per batch: the operand path's per-product passes alone, and the ratio they bound")
    args = ap.parse_args(argv)
    if args.base:
        return against_base(args)
    import torch
    torch.set_num_threads(1)
    if args.floor:
        return floor(args)
    print(f"mmasim {importlib.metadata.version('mmasim')}, torch {torch.__version__}, numpy {np.__version__}; "
          f"one thread each; process CPU microseconds per tile, best of {args.repeat}; load average "
          f"{open('/proc/loadavg').read().split()[0] if os.path.exists('/proc/loadavg') else '?'}")
    sizes = [1] + list(args.batch)
    print(f"{'instruction':28s} {'tile':>9s} {'tiles':>5s} {'MMA-Sim':>9s} {'rows':>8s} {'ratio':>6s} "
          f"{'tiles cold':>10s} {'ratio':>6s} {'tiles warm':>10s} {'ratio':>6s} {'wall ratio':>10s}")
    rng = np.random.default_rng(0)
    for preset, fa, fb, kind, block in BENCH:
        if args.only and preset not in args.only:
            continue
        m, n, k = INSTRUCTIONS[preset].shape
        for tiles in sizes:
            t = _tiles(rng, preset, fa, fb, kind, block, tiles)
            g = _rows(t)
            theirs = record_mmasim.run_mmasim(preset, [g])
            for mine in (_fp8emu_rows(preset, g), _fp8emu_tiles(preset, t).reshape(-1)):
                assert np.array_equal(mine.view(theirs.dtype), theirs), preset
            del theirs, mine
            sim, rows, cold, warm = [np.inf] * 2, [np.inf] * 2, [np.inf] * 2, [np.inf] * 2
            for _ in range(args.repeat):
                # alternately, so all see the same machine load.  Right after MMA-Sim, fp8emu finds
                # its tables and code out of the caches ("cold"); the next calls, as in a loop over
                # tiles, find them back ("warm").  One-tile MMA-Sim calls get a second try too.
                for _ in range(2 if tiles == 1 else 1):
                    sim = np.minimum(sim, _timed(lambda: record_mmasim.run_mmasim(preset, [g])))
                cold = np.minimum(cold, _timed(lambda: _fp8emu_tiles(preset, t)))
                for _ in range(3):
                    warm = np.minimum(warm, _timed(lambda: _fp8emu_tiles(preset, t)))
                for _ in range(2):
                    rows = np.minimum(rows, _timed(lambda: _fp8emu_rows(preset, g)))
            sim, rows, cold, warm = (x / tiles * 1e6 for x in (sim, rows, cold, warm))
            print(f"{preset:28s} {f'{m}x{n}x{k}':>9s} {tiles:5d} {sim[1]:9.1f} {rows[1]:8.1f} {sim[1] / rows[1]:6.1f} "
                  f"{cold[1]:10.1f} {sim[1] / cold[1]:6.1f} {warm[1]:10.1f} {sim[1] / warm[1]:6.1f} "
                  f"{sim[0] / warm[0]:10.1f}", flush=True)


def against_base(args):
    """This package's batched tiles against an older one's, alternately in this process."""
    sys.path.insert(0, args.base)
    from fp8emu_old.gemm import instructions as old
    print(f"fp8emu against the base in {args.base}; numpy {np.__version__}; process CPU microseconds "
          f"per tile, best of {args.repeat}")
    print(f"{'instruction':28s} {'tiles':>5s} {'base':>9s} {'fp8emu':>9s} {'faster':>7s}")
    rng = np.random.default_rng(0)
    for preset, fa, fb, kind, block in BENCH:
        if args.only and preset not in args.only:
            continue
        for tiles in args.batch:
            t = _tiles(rng, preset, fa, fb, kind, block, tiles)
            calls = [lambda: _fp8emu_tiles(preset, t), lambda: _fp8emu_tiles(preset, t, old.mma)]
            new_out, old_out = (f() for f in calls)
            assert np.array_equal(new_out.view(np.uint32), old_out.view(np.uint32)), preset
            best = _best_cpu(calls, args.repeat)
            print(f"{preset:28s} {tiles:5d} {best[1] / tiles * 1e6:9.2f} {best[0] / tiles * 1e6:9.2f} "
                  f"{best[1] / best[0]:6.2f}x", flush=True)


if __name__ == "__main__":
    main()
