"""Codec throughput: fp8emu vs ml_dtypes (C++) and gfloat (pure Python/NumPy).

Run from the repository root::

    python3 benchmarks/bench_codec.py            # table + size sweep + figure
    python3 benchmarks/bench_codec.py --quick    # smaller, for a smoke test
    python3 benchmarks/bench_codec.py --only threads --only sr --base /tmp/perf-base

Every ratio compares implementations in the same process on the same data,
with repetitions interleaved (fp8emu, ml_dtypes, gfloat, fp8emu, ...) and
the median time of each taken, so load from other processes affects both sides.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import sys
import time
import tracemalloc
from pathlib import Path

import ml_dtypes
import numpy as np

# torch's OpenMP workers otherwise spin after each parallel region and starve the threads
# timed next to them on a small machine
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import fp8emu  # noqa: E402

try:
    import gfloat
    from gfloat.formats import format_info_ocp_e4m3, format_info_ocp_e5m2
except ImportError:  # pragma: no cover - optional peer
    gfloat = None

E4, E5 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2


def _time(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def interleaved(fns, repeats):
    """Median seconds per call of each function, repetitions interleaved."""
    for f in fns:
        if f is not None:
            f()                                   # warm up: tables, caches
    times = [[] for _ in fns]
    for _ in range(repeats):
        for i, f in enumerate(fns):
            if f is not None:
                times[i].append(_time(f))
    return [float(np.median(t)) if t else None for t in times]


def rows(n, seed=0):
    rng = np.random.default_rng(seed)
    x32 = (rng.standard_normal(n) * 8).astype(np.float32)
    x64 = x32.astype(np.float64) * (1 + 2.0 ** -30)   # not float32-representable
    x16 = x32.astype(np.float16)
    xbf = x32.astype(ml_dtypes.bfloat16)
    c4 = fp8emu.encode(x32, "e4m3fn")
    c5 = fp8emu.encode(x32, "e5m2")
    ml4 = lambda: x32.astype(E4)                  # noqa: E731 - the reference for most rows
    gf_n = min(n, 1 << 20)                        # gfloat is slow: time a slice, scale by size
    g32 = x32[:gf_n]

    def gf(fi, rnd=None, **kw):
        if gfloat is None:
            return None
        rnd = rnd or gfloat.RoundMode.TiesToEven
        return lambda: gfloat.encode_ndarray(fi, gfloat.round_ndarray(fi, g32, rnd, **kw))

    out = []
    ge4 = format_info_ocp_e4m3 if gfloat else None
    ge5 = format_info_ocp_e5m2 if gfloat else None
    out.append(("f32->e4m3fn rne", lambda: fp8emu.encode(x32, "e4m3fn"), ml4, gf(ge4), 2.0))
    out.append(("f32->e5m2 rne", lambda: fp8emu.encode(x32, "e5m2"), lambda: x32.astype(E5), gf(ge5), 2.0))
    for src, xs in (("f16", x16), ("bf16", xbf)):
        for fmt, mlt in (("e4m3fn", E4), ("e5m2", E5)):
            for mode in ("rne", "rtz"):
                out.append((f"{src}->{fmt} {mode}", lambda xs=xs, fmt=fmt, mode=mode:
                            fp8emu.encode(xs, fmt, rounding=mode), lambda xs=xs, mlt=mlt: xs.astype(mlt),
                            None, 3.0))
    out.append(("f16->e3m4 rup", lambda: fp8emu.encode(x16, "e3m4", rounding="rup"),
                lambda: x16.astype(ml_dtypes.float8_e3m4), None, 3.0))
    out.append(("f64->e4m3fn rne (single)", lambda: fp8emu.encode(x64, "e4m3fn"), lambda: x64.astype(E4),
                gf(ge4) and (lambda: gfloat.encode_ndarray(ge4, gfloat.round_ndarray(ge4, x64[:gf_n]))), 1.0))
    for mode in ("rtz", "rup", "rdn", "rna", "rto"):
        out.append((f"f32->e4m3fn {mode}", lambda mode=mode: fp8emu.encode(x32, "e4m3fn", rounding=mode),
                    ml4, None, 1.0))
    if gfloat:
        srbits = np.random.default_rng(1).integers(0, 256, gf_n).astype(np.uint8)
        gsr = lambda: gfloat.encode_ndarray(ge4, gfloat.round_ndarray(  # noqa: E731
            ge4, g32, gfloat.RoundMode.Stochastic, srbits=srbits, srnumbits=8))
    else:
        gsr = None
    out.append(("f32->e4m3fn stochastic k=8 (rng)", lambda: fp8emu.encode(
        x32, "e4m3fn", rounding="stochastic", rng=np.random.default_rng(1), sr_bits=8), ml4, gsr, 1.0))
    # Every profile of the profiles issue, against ml_dtypes' plain cast of the same source.
    for prof in ("ml_dtypes", "torch-cuda-2.11", "cuda-satfinite", "cuda-nosat", "triton-rtne", "jax-gpu"):
        out.append((f"f32->e4m3fn profile={prof}", lambda prof=prof: fp8emu.encode(x32, "e4m3fn", profile=prof),
                    ml4, None, 1.0))
    out.append(("f32->e5m2 profile=triton-rtz", lambda: fp8emu.encode(x32, "e5m2", profile="triton-rtz"),
                lambda: x32.astype(E5), None, 1.0))
    out.append(("f32->e8m0fnu profile=cuda-satfinite rtz",
                lambda: fp8emu.encode(x32, "e8m0fnu", profile="cuda-satfinite", rounding="rtz"),
                lambda: x32.astype(ml_dtypes.float8_e8m0fnu), None, 1.0))
    out.append(("f64->e4m3fn profile=torch-cuda-2.11", lambda: fp8emu.encode(x64, "e4m3fn", profile="torch-cuda-2.11"),
                lambda: x64.astype(E4), None, 1.0))
    out.append(("decode e4m3fn->f32", lambda: fp8emu.decode(c4, "e4m3fn"),
                lambda: c4.view(E4).astype(np.float32),
                gf(ge4) and (lambda: gfloat.decode_ndarray(ge4, c4[:gf_n])), 2.5))
    out.append(("decode e5m2->f32", lambda: fp8emu.decode(c5, "e5m2"),
                lambda: c5.view(E5).astype(np.float32),
                gf(ge5) and (lambda: gfloat.decode_ndarray(ge5, c5[:gf_n])), 2.5))
    return out, gf_n


def table(n, repeats):
    specs, gf_n = rows(n)
    print(f"# {n} elements (gfloat timed on {gf_n}), median of {repeats} interleaved runs")
    print("| path | fp8emu M/s | ml_dtypes M/s | gfloat M/s | ratio | target | met |")
    print("|---|---:|---:|---:|---:|---:|:-:|")
    results = []
    for name, ours, ml, gf, target in specs:
        # gfloat is timed apart: its large temporaries, freed, leave the heap to be faulted in
        # again by whichever call comes next (in the rotation always fp8emu: ~1400 page faults,
        # 3-4 ms of system time per 2^22-element call), which read f32 -> e4m3fn as 1.4-1.6x
        # where the pair alone gives 2.5-2.7x
        t_ours, t_ml = interleaved([ours, ml], repeats)
        t_gf = interleaved([gf], repeats)[0]
        r = t_ml / t_ours
        gfs = f"{gf_n / t_gf / 1e6:.1f}" if t_gf else "-"
        print(f"| {name} | {n / t_ours / 1e6:.0f} | {n / t_ml / 1e6:.0f} | {gfs} | {r:.2f}x | "
              f">= {target}x | {'yes' if r >= target else 'NO'} |", flush=True)
        results.append((name, r, target))
    return results


def overhead(repeats=2000, base=None):
    """Per-call time of a 16-element float32 encode, and of the first float64 encode of a small array.

    Reported as wall time and as this thread's CPU time (``time.thread_time``),
    which leaves out the time the thread waits for a core on a loaded machine.
    """
    x = np.linspace(-3, 3, 16, dtype=np.float32)
    fns = {"fp8emu": lambda: fp8emu.encode(x, "e4m3fn"), "ml_dtypes": lambda: x.astype(E4)}
    if base is not None:
        fns["base"] = lambda: base.encode(x, "e4m3fn")
    for f in fns.values():
        f()
    wall = {k: [] for k in fns}
    cpu = {k: [] for k in fns}
    for _ in range(7):                            # interleaved blocks of calls
        for k, f in fns.items():
            c0 = time.thread_time()
            wall[k].append(_time_many(f, repeats))
            cpu[k].append((time.thread_time() - c0) / repeats)
    us = {k: (np.median(wall[k]) * 1e6, np.median(cpu[k]) * 1e6) for k in fns}
    print("per-call time, 16 float32 -> e4m3fn rne (wall / CPU us): "
          + ", ".join(f"{k} {w:.2f} / {c:.2f}" for k, (w, c) in us.items())
          + (f"; base / fp8emu {us['base'][1] / us['fp8emu'][1]:.1f}x (CPU)" if base is not None else "")
          + f" (target <= 3 us: {'yes' if us['fp8emu'][0] <= 3 else 'NO'} wall, "
          f"{'yes' if us['fp8emu'][1] <= 3 else 'NO'} CPU)")
    firsts = []
    for i in range(5):
        # a Format object never seen before has no cached table: this is a first call
        f = dataclasses.replace(fp8emu.get_format("e4m3fn"), name=f"bench_fresh_{i}")
        xd = np.linspace(-3, 3, 16)
        t0 = time.perf_counter()
        fp8emu.encode(xd, f)
        firsts.append(time.perf_counter() - t0)
    ms = np.median(firsts) * 1e3
    print(f"first float64 encode of 16 elements (new format object): {ms:.3f} ms "
          f"(target <= 1 ms: {'yes' if ms <= 1 else 'NO'})")


def threads_table(n, repeats, base=None, with_torch=True):
    """Single- vs multi-thread throughput at n elements, torch at equal thread counts, np.copyto GB/s."""
    try:
        import torch
    except ImportError:                           # pragma: no cover - optional peer
        torch = None
    if not with_torch:
        torch = None
    nt = fp8emu.get_threads() if fp8emu.get_threads() > 1 else 2
    rng = np.random.default_rng(3)
    x32 = (rng.standard_normal(n) * 8).astype(np.float32)
    c4 = fp8emu.encode(x32, "e4m3fn", threads=1)
    dst = np.empty_like(x32)
    t_cp = interleaved([lambda: np.copyto(dst, x32)], repeats)[0]
    cp_gbs = 2 * x32.nbytes / t_cp / 1e9
    print(f"# threads: {n} elements, 1 vs {nt} threads (median of {repeats} interleaved runs); "
          f"np.copyto of the float32 input: {cp_gbs:.1f} GB/s (read + write)")
    print("| path | 1 thread M/s | threads M/s | speed-up | GB/s (read + write) | of np.copyto | "
          "torch 1 thread M/s | torch threads M/s | fp8emu / torch (threads) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    specs = [
        ("f32->e4m3fn rne", lambda t: fp8emu.encode(x32, "e4m3fn", threads=t), 5,
         torch and (lambda: torch.from_numpy(x32).to(torch.float8_e4m3fn))),
        ("decode e4m3fn->f32", lambda t: fp8emu.decode(c4, "e4m3fn", threads=t), 5,
         torch and (lambda: torch.from_numpy(c4).view(torch.float8_e4m3fn).to(torch.float32))),
        ("quantize f32 e4m3fn", lambda t: fp8emu.quantize(x32, "e4m3fn", threads=t), 8, None),
        ("f32->e4m3fn stochastic k=8 (rng)", lambda t: fp8emu.encode(
            x32, "e4m3fn", rounding="stochastic", rng=np.random.default_rng(1), sr_bits=8, threads=t), 5, None),
    ]
    out = {}
    for name, fn, nbytes, tfn in specs:
        fns = [lambda: fn(1), lambda: fn(nt)]
        if tfn is not None:
            fns += [lambda: (torch.set_num_threads(1), tfn()), lambda: (torch.set_num_threads(nt), tfn())]
        ts = interleaved(fns, repeats)
        gbs = nbytes * n / ts[1] / 1e9
        row = (f"| {name} | {n / ts[0] / 1e6:.0f} | {n / ts[1] / 1e6:.0f} | {ts[0] / ts[1]:.2f}x | "
               f"{gbs:.1f} | {gbs / cp_gbs:.0%} |")
        row += (f" {n / ts[2] / 1e6:.0f} | {n / ts[3] / 1e6:.0f} | {ts[3] / ts[1]:.2f}x |" if tfn else " - | - | - |")
        print(row, flush=True)
        out[name] = ts[0] / ts[1]
    if torch is not None:
        torch.set_num_threads(nt)
    return out


def calibrate(runs=3):
    """How much two threads of plain NumPy work gain on this machine right now (no fp8emu involved).

    ``np.sin`` over 2^22 float64 five times on one thread, then the same on each of two
    threads at once: 2x the one-thread time over the two-thread time is the parallel
    efficiency the machine offers (2.0 on two free cores).
    """
    import threading

    x = np.random.default_rng(0).standard_normal(1 << 22)

    def work():
        for _ in range(5):
            np.sin(x)

    def run(nt):
        ts = [threading.Thread(target=work) for _ in range(nt)]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return time.perf_counter() - t0

    eff = [2 * run(1) / run(2) for _ in range(runs)]
    print("parallel efficiency of 2 threads (np.sin, 2.0 = two free cores): "
          + ", ".join(f"{e:.2f}x" for e in eff))


def sr_sources_table(n, repeats, base=None):
    """Stochastic rounding from every source type on one thread (and the base package's, if given)."""
    rng = np.random.default_rng(4)
    x32 = (rng.standard_normal(n) * 8).astype(np.float32)
    srcs = {"float16": x32.astype(np.float16), "bfloat16": x32.astype(ml_dtypes.bfloat16),
            "float64": x32.astype(np.float64) * (1 + 2.0 ** -30), "int32": (x32 * 64).astype(np.int32),
            "float32": x32}
    print(f"# stochastic rounding to e4m3fn, rng, k=32, {n} elements, one thread"
          + (f"; base = {base.__name__} on n/16 elements" if base else ""))
    print("| source | fp8emu M/s | base M/s | ratio |" if base else "| source | fp8emu M/s |")
    print("|---|---:|---:|---:|" if base else "|---|---:|")
    for name, xs in srcs.items():
        f = lambda: fp8emu.encode(xs, "e4m3fn", rounding="stochastic", rng=1, threads=1)   # noqa: E731
        if base is None:
            t = interleaved([f], repeats)[0]
            print(f"| {name} | {n / t / 1e6:.0f} |", flush=True)
            continue
        m = xs[: max(2, n // 16)]                 # the old paths are slow: a slice, scaled by size
        t, tb = interleaved([f, lambda: base.encode(m, "e4m3fn", rounding="stochastic", rng=1)], repeats)
        r_new, r_old = n / t / 1e6, m.size / tb / 1e6
        print(f"| {name} | {r_new:.0f} | {r_old:.1f} | {r_new / r_old:.1f}x |", flush=True)


def interleaved_cpu(fns, repeats, *, clock=time.thread_time, raw=False):
    """(wall, CPU) median seconds per call of each function, repetitions interleaved.

    CPU time is ``clock``: by default ``time.thread_time`` of the calling thread (one-thread
    calls only), which leaves out the time spent waiting for a core on a shared machine;
    ``time.process_time`` counts every thread.  ``raw=True`` returns the per-call lists instead.
    """
    for f in fns:
        f()
    wall, cpu = [[] for _ in fns], [[] for _ in fns]
    for _ in range(repeats):
        for i, f in enumerate(fns):
            c0, t0 = clock(), time.perf_counter()
            f()
            wall[i].append(time.perf_counter() - t0)
            cpu[i].append(clock() - c0)
    if raw:
        return wall, cpu
    return [float(np.median(t)) for t in wall], [float(np.median(t)) for t in cpu]


SR_FORMATS = ("e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz", "e4m3b11fnuz", "e4m3", "e3m4")


def sr_cast_table(n, repeats, base=None, formats=SR_FORMATS):
    """Stochastic rounding (k = 32, a default_rng Generator) against ml_dtypes' plain RNE cast.

    One thread, float32 and float16 sources, ``standard_normal * 8``; each pair (fp8emu, ml_dtypes)
    interleaved on its own, and the base package's pair apart from it (see :func:`table` for why
    no third call shares a rotation).
    """
    rng = np.random.default_rng(0)
    x32 = (rng.standard_normal(n) * 8).astype(np.float32)
    srcs = {"f32": x32, "f16": x32.astype(np.float16)}
    print(f"# stochastic rounding (k=32, rng) vs ml_dtypes RNE astype, {n} elements, one thread, "
          f"median of {repeats} interleaved runs; load average {open('/proc/loadavg').read().split()[0]}")
    cols = "| path | fp8emu ms (wall / CPU) | ml_dtypes ms (wall / CPU) | ratio wall | ratio CPU |"
    print(cols + (" base ratio wall | base ratio CPU |" if base else ""))
    print("|---|---:|---:|---:|---:|" + ("---:|---:|" if base else ""))
    out = {}
    for fmt in formats:
        mlt = fp8emu.get_format(fmt).ml_dtype
        for src, x in srcs.items():
            sr = lambda x=x, fmt=fmt: fp8emu.encode(   # noqa: E731
                x, fmt, rounding="stochastic", rng=np.random.default_rng(1), threads=1)
            ml = lambda x=x, mlt=mlt: x.astype(mlt)    # noqa: E731
            (w_o, w_m), (c_o, c_m) = interleaved_cpu([sr, ml], repeats)
            row = (f"| {src}->{fmt} | {w_o * 1e3:.2f} / {c_o * 1e3:.2f} | {w_m * 1e3:.2f} / {c_m * 1e3:.2f} | "
                   f"{w_m / w_o:.2f}x | {c_m / c_o:.2f}x |")
            if base is not None:
                bsr = lambda x=x, fmt=fmt: base.encode(x, fmt, rounding="stochastic",   # noqa: E731
                                                       rng=np.random.default_rng(1), threads=1)
                (w_b, w_m2), (c_b, c_m2) = interleaved_cpu([bsr, ml], repeats)
                row += f" {w_m2 / w_b:.2f}x | {c_m2 / c_b:.2f}x |"
            print(row, flush=True)
            out[f"{src}->{fmt}"] = (w_m / w_o, c_m / c_o)
    return out


def threads_pair(n, repeats):
    """1 vs 2 threads on one large float32 -> e4m3fn encode: wall and process CPU medians, load average.

    Both settings interleaved; process CPU time (``time.process_time``, all threads) shows the
    work done, wall time what the caller waits for; on a shared machine the load average says
    how many other runnable jobs competed for the two cores.
    """
    x = (np.random.default_rng(3).standard_normal(n) * 8).astype(np.float32)
    one = fp8emu.encode(x, "e4m3fn", threads=1)
    if not np.array_equal(one, fp8emu.encode(x, "e4m3fn", threads=2)):
        raise SystemExit("threads=2 changed the codes")
    fns = [lambda: fp8emu.encode(x, "e4m3fn", threads=1), lambda: fp8emu.encode(x, "e4m3fn", threads=2)]
    load0 = open("/proc/loadavg").read().split()[:3]
    wall, cpu = interleaved_cpu(fns, repeats, clock=time.process_time, raw=True)
    load1 = open("/proc/loadavg").read().split()[:3]
    w = [float(np.median(t)) for t in wall]
    c = [float(np.median(t)) for t in cpu]
    print(f"# threads: f32 -> e4m3fn rne, {n} elements, median of {repeats} interleaved runs; "
          f"load average {' '.join(load0)} before, {' '.join(load1)} after")
    print(f"1 thread: wall {w[0] * 1e3:.1f} ms, CPU {c[0] * 1e3:.1f} ms; 2 threads: wall {w[1] * 1e3:.1f} ms, "
          f"CPU {c[1] * 1e3:.1f} ms; speed-up (wall) {w[0] / w[1]:.2f}x; "
          f"wall spread (min-max) 1 thread {min(wall[0]) * 1e3:.1f}-{max(wall[0]) * 1e3:.1f} ms, "
          f"2 threads {min(wall[1]) * 1e3:.1f}-{max(wall[1]) * 1e3:.1f} ms")
    return w[0] / w[1]


def memory(log2n):
    n = 1 << log2n
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    fp8emu.encode(x[:1024], "e4m3fn")             # build the table outside the measurement
    gc.collect()
    tracemalloc.start()
    out = fp8emu.encode(x, "e4m3fn")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    extra = peak - out.nbytes                     # beyond the output array
    print(f"peak memory, encode 2^{log2n} float32: input {x.nbytes / 2**20:.0f} MiB, "
          f"output {out.nbytes / 2**20:.0f} MiB, peak new allocations {peak / 2**20:.1f} MiB "
          f"= output + {extra / x.nbytes:.3f}x input (target <= output + 1x input: "
          f"{'yes' if extra <= x.nbytes else 'NO'})")


def sweep(max_log2, fig_path):
    from matplotlib.figure import Figure

    try:
        import torch
    except ImportError:                           # pragma: no cover - optional peer
        torch = None
    nt = fp8emu.get_threads() if fp8emu.get_threads() > 1 else 2
    sizes = [1 << p for p in range(4, max_log2 + 1, 2)]
    res = {"fp8emu f32->e4m3fn rne, 1 thread": [], f"fp8emu f32->e4m3fn rne, {nt} threads": [],
           "ml_dtypes f32->e4m3fn": [], "fp8emu f64->e4m3fn rne, 1 thread": [],
           "fp8emu decode e4m3fn, 1 thread": [], f"fp8emu decode e4m3fn, {nt} threads": [],
           "ml_dtypes decode e4m3fn": []}
    if torch is not None:
        res[f"torch f32->e4m3fn, {nt} threads"] = []
        torch.set_num_threads(nt)
    print("| elements | " + " | ".join(f"{k} s/call" for k in res) + " |")
    print("|---:|" + "---:|" * len(res))
    rng = np.random.default_rng(2)
    for n in sizes:
        x = (rng.standard_normal(n) * 8).astype(np.float32)
        xd = x.astype(np.float64)
        c = fp8emu.encode(x, "e4m3fn")
        reps = int(np.clip(2 ** 22 // n, 3, 2000))
        # threads=None: the default (one thread below fp8emu.parallel.MIN_PARALLEL elements)
        fns = [lambda: fp8emu.encode(x, "e4m3fn", threads=1), lambda: fp8emu.encode(x, "e4m3fn"),
               lambda: x.astype(E4), lambda: fp8emu.encode(xd, "e4m3fn", threads=1),
               lambda: fp8emu.decode(c, "e4m3fn", threads=1), lambda: fp8emu.decode(c, "e4m3fn"),
               lambda: c.view(E4).astype(np.float32)]
        if torch is not None:
            xt = torch.from_numpy(x)
            fns.append(lambda: xt.to(torch.float8_e4m3fn))
        ts = interleaved(fns, min(reps, 7)) if n >= 1 << 16 else [
            min(_time_many(f, reps) for _ in range(3)) for f in fns]
        for k, t in zip(res, ts):
            res[k].append(t)
        print(f"| 2^{n.bit_length() - 1} | " + " | ".join(f"{t:.3g}" for t in ts) + " |", flush=True)
    fig = Figure(figsize=(12, 4.8))
    a1, a2 = fig.subplots(1, 2)
    for k, ts in res.items():
        style = ":" if "threads" in k and k.startswith("fp8emu") else "-" if k.startswith("fp8emu") else "--"
        a1.loglog(sizes, np.array(ts) * 1e6, style, marker="o", ms=3, label=k)
        a2.semilogx(sizes, np.array(sizes) / np.array(ts) / 1e6, style, marker="o", ms=3, label=k)
    a1.set(xlabel="elements per call", ylabel="time per call (µs)", title="Time per call")
    a2.set(xlabel="elements per call", ylabel="throughput (million elements / s)", title="Throughput")
    for a in (a1, a2):
        a.grid(True, which="both", alpha=0.3)
        a.set_xscale("log", base=2)
    a2.legend(fontsize=7)
    fig.suptitle(f"fp8emu codec (pure NumPy; 1 and {nt} threads) vs ml_dtypes (C++, 1 thread) "
                 f"and torch (CPU, {nt} threads), one process")
    fig.tight_layout()
    fig_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(fig_path, dpi=120)
    print(f"wrote {fig_path}")


def _time_many(f, reps):
    t0 = time.perf_counter()
    for _ in range(reps):
        f()
    return (time.perf_counter() - t0) / reps


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log2n", type=int, default=24, help="elements in the table runs (log2)")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--sweep-max", type=int, default=26, help="largest sweep size (log2)")
    p.add_argument("--mem-log2n", type=int, default=26)
    p.add_argument("--figure", type=Path, default=ROOT / "figures" / "codec_throughput.png")
    p.add_argument("--base", default=None, help="folder holding another copy of the package as fp8emu_base "
                   "(stochastic-rounding rates of that version)")
    p.add_argument("--only", choices=["table", "calibrate", "threads", "threads2", "sr", "srcast", "overhead",
                                      "memory", "sweep"],
                   action="append",
                   help="run only these parts (repeatable)")
    p.add_argument("--no-torch", action="store_true", help="leave torch out of the threads table")
    p.add_argument("--quick", action="store_true", help="2^18 elements, 3 repeats, sweep to 2^18")
    a = p.parse_args(argv)
    if a.quick:
        a.log2n, a.repeats, a.sweep_max, a.mem_log2n = 18, 3, 18, 20
    base = None
    if a.base:
        sys.path.insert(0, a.base)
        import fp8emu_base as base
    parts = set(a.only or ["table", "calibrate", "threads", "threads2", "sr", "srcast", "overhead", "memory", "sweep"])
    print(f"numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}, "
          f"gfloat {getattr(gfloat, '__version__', 'installed') if gfloat else 'not installed'}, "
          f"fp8emu threads {fp8emu.get_threads()}")
    results = []
    if "table" in parts:
        fp8emu.set_threads(1)                     # equal thread counts against the C++ casts
        results = table(1 << a.log2n, a.repeats)
        fp8emu.set_threads(None)
    if "calibrate" in parts:
        calibrate()
    if "threads" in parts:
        threads_table(1 << a.log2n, a.repeats, with_torch=not a.no_torch)
    if "threads2" in parts:
        threads_pair(1 << a.log2n, a.repeats)
    if "sr" in parts:
        sr_sources_table(1 << a.log2n, a.repeats, base)
    if "srcast" in parts:
        sr_cast_table(1 << a.log2n, a.repeats, base)
    if "overhead" in parts:
        overhead(base=base)
    if "memory" in parts:
        memory(a.mem_log2n)
    if "sweep" in parts:
        sweep(a.sweep_max, a.figure)
    missed = [r for r in results if r[1] < r[2]]
    print("all throughput targets met" if not missed else f"targets missed: {missed}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
