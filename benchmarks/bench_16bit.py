"""float16 / bfloat16 -> 8-bit casts: fp8emu against ml_dtypes (and optionally an older fp8emu), one thread.

Usage::

    python3 benchmarks/bench_16bit.py [--log2n 22] [--repeats 9] [--base DIR]

``--base DIR``: a folder holding an older package renamed ``fp8emu_base`` (e.g. ``git archive REV
fp8emu | tar -x -C DIR`` then ``mv DIR/fp8emu DIR/fp8emu_base``), timed in the same rotation and
checked to give the same codes.  Calls are interleaved; thread-time medians; ratios are
ml_dtypes' time over fp8emu's.
"""

from __future__ import annotations

import argparse
import sys
import time

import ml_dtypes
import numpy as np

import fp8emu


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2n", type=int, default=22)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--base", default=None, help="folder holding fp8emu_base (an older fp8emu)")
    a = ap.parse_args(argv)
    base = None
    if a.base:
        sys.path.insert(0, a.base)
        import fp8emu_base as base
        base.set_threads(1)
    fp8emu.set_threads(1)
    data = np.random.default_rng(0).standard_normal(1 << a.log2n) * 8
    print(f"numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}, 2^{a.log2n} elements, one thread, "
          f"thread-time medians of {a.repeats}")
    print("| path | ml_dtypes ms | " + ("base ms (ratio) | " if base else "") + "fp8emu ms (ratio) |")
    print("|---|---:|" + ("---:|" if base else "") + "---:|")
    for src in (np.float16, ml_dtypes.bfloat16):
        x = data.astype(src)
        for name in ("e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz"):
            for rounding in ("rne", "rtz"):
                mt = getattr(ml_dtypes, "float8_" + name)
                calls = [lambda: x.astype(mt), lambda: fp8emu.encode(x, name, rounding=rounding)]
                if base:
                    calls.append(lambda: base.encode(x, name, rounding=rounding))
                    assert np.array_equal(calls[1](), calls[2]()), "base and fp8emu codes differ"
                times = [[] for _ in calls]
                for _ in range(a.repeats):
                    for f, t in zip(calls, times):
                        t0 = time.thread_time()
                        f()
                        t.append(time.thread_time() - t0)
                ml, new, *old = (float(np.median(t)) * 1e3 for t in times)
                # ml_dtypes casts with RNE only: the RTZ rows compare fp8emu's RTZ with its RNE cast
                row = f"| {np.dtype(src).name} -> {name} {rounding.upper()} | {ml:.2f} | "
                if old:
                    row += f"{old[0]:.2f} ({ml / old[0]:.2f}x) | "
                print(row + f"{new:.2f} ({ml / new:.2f}x) |", flush=True)


if __name__ == "__main__":
    main()
