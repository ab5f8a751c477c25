"""Threads vs the 84baad6 base, same process, 2^24 float32 -> e4m3fn and decode.

Usage: git archive 84baad6 fp8emu | tar -x -C /tmp/base && mkdir -p /tmp/basepkg &&
       cp -r /tmp/base/fp8emu /tmp/basepkg/fp8emu_base && python3 benchmarks/compare_threads_base.py
"""
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's fp8emu
sys.path.insert(0, "/tmp/basepkg")
import fp8emu  # noqa: E402
import fp8emu_base  # noqa: E402
x = (np.random.default_rng(0).standard_normal(1 << 24) * 8).astype(np.float32)
def t(f, n=7):
    ts=[]
    for _ in range(n):
        a=time.perf_counter(); f(); ts.append(time.perf_counter()-a)
    return np.median(ts)
for name, f in [("new 1 thread", lambda: fp8emu.encode(x, "e4m3fn", threads=1)),
                ("new 2 threads", lambda: fp8emu.encode(x, "e4m3fn", threads=2)),
                ("base 84baad6", lambda: fp8emu_base.encode(x, "e4m3fn")),
                ("ml_dtypes", lambda: x.astype(ml_dtypes.float8_e4m3fn)),
                ("new decode 1", lambda: fp8emu.decode(c, "e4m3fn", threads=1)),
                ("new decode 2", lambda: fp8emu.decode(c, "e4m3fn", threads=2)),
                ("base decode", lambda: fp8emu_base.decode(c, "e4m3fn"))]:
    if name == "new decode 1": c = fp8emu.encode(x, "e4m3fn")
    s = t(f)
    print(f"{name:14s} {x.size/s/1e6:7.0f} M/s")
assert (fp8emu.encode(x,"e4m3fn",threads=2)==fp8emu_base.encode(x,"e4m3fn")).all()
