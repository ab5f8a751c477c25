"""Scaling recipes on a 4096 x 4096 float32 array vs ml_dtypes' plain float32 -> e4m3fn cast.

Run from the repository root::

    python3 benchmarks/bench_scaling.py                 # default threads (all cores)
    python3 benchmarks/bench_scaling.py --threads 1          # CPU time (process_time) medians
    python3 benchmarks/bench_scaling.py --base /tmp/perf-base   # also time another checkout's
                                                                # package, copied as fp8emu_base

Repetitions are interleaved (recipe, ml_dtypes, recipe, ...) and medians taken,
so load from other processes affects both sides.  Peak extra memory is measured
with tracemalloc (NumPy reports its buffers to it) in a separate, untimed call,
as a multiple of the input's bytes.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
from pathlib import Path

import ml_dtypes
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import fp8emu  # noqa: E402


def recipes(mod):
    return {
        "quantize_tensorwise": lambda x: mod.quantize_tensorwise(x, "e4m3fn"),
        "quantize_blockwise 1x128": lambda x: mod.quantize_blockwise(x, "e4m3fn", block=(1, 128)),
        "quantize_blockwise 128x128": lambda x: mod.quantize_blockwise(x, "e4m3fn", block=(128, 128)),
        "quantize_mx e4m3fn": lambda x: mod.quantize_mx(x, "e4m3fn"),
        "quantize_nvfp4": lambda x: mod.quantize_nvfp4(x),
    }


def peak_ratio(fn, x):
    gc.collect()
    tracemalloc.start()
    fn(x)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / x.nbytes


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096, help="side of the square input")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--base", default=None, help="folder holding another copy of the package as fp8emu_base")
    args = ap.parse_args(argv)
    if args.threads:
        fp8emu.set_threads(args.threads)
    base = None
    if args.base:
        sys.path.insert(0, args.base)
        import fp8emu_base as base
    x = np.random.default_rng(0).standard_normal((args.n, args.n)).astype(np.float32)
    dst = np.empty_like(x)
    ml = lambda: x.astype(ml_dtypes.float8_e4m3fn)   # noqa: E731
    cp = lambda: np.copyto(dst, x)                   # noqa: E731
    print(f"input {args.n}x{args.n} float32 ({x.nbytes / 2**20:.0f} MiB), threads={fp8emu.get_threads()}")
    print("| recipe | M elem/s | ratio to ml_dtypes cast | GB/s read | peak extra memory / input |"
          + (" ratio to base | base peak / input |" if base else ""))
    print("|---|---|---|---|---|" + ("---|---|" if base else ""))
    new, old = recipes(fp8emu), recipes(base) if base else None
    # one thread: CPU time, which a shared machine distorts least; more: wall time
    clock = time.process_time if fp8emu.get_threads() == 1 else time.perf_counter
    for name, fn in new.items():
        fns = [lambda: fn(x), ml, cp] + ([lambda: old[name](x)] if base else [])
        for f in fns:
            f()
        times = [[] for _ in fns]
        for _ in range(args.repeats):
            for i, f in enumerate(fns):
                t0 = clock()
                f()
                times[i].append(clock() - t0)
        med = [float(np.median(t)) for t in times]
        row = (f"| {name} | {x.size / med[0] / 1e6:.0f} | {med[1] / med[0]:.2f} | "
               f"{x.nbytes / med[0] / 1e9:.2f} | {peak_ratio(fn, x):.2f} |")
        if base:
            row += f" {med[3] / med[0]:.2f} | {peak_ratio(old[name], x):.2f} |"
        print(row, flush=True)
    t_ml, t_cp = [], []
    for _ in range(args.repeats):
        for f, ts in ((ml, t_ml), (cp, t_cp)):
            t0 = clock()
            f()
            ts.append(clock() - t0)
    print(f"ml_dtypes float32 -> float8_e4m3fn: {x.size / np.median(t_ml) / 1e6:.0f} M elem/s; "
          f"np.copyto of the input: {2 * x.nbytes / np.median(t_cp) / 1e9:.1f} GB/s (read + write)")


if __name__ == "__main__":
    main()
