"""Study throughput (in-process vs a 2-worker Dask LocalCluster) and the study's peak memory.

Run from the repository root::

    python3 benchmarks/bench_study.py              # throughput, default recipes
    python3 benchmarks/bench_study.py --quick      # a small smoke version
    python3 benchmarks/bench_study.py --memory     # peak RSS on a checkpoint larger than the memory allowed

Throughput: the same generated bfloat16 checkpoint is studied in-process and
on a local cluster of 2 worker processes (1 thread each), both after a
warm-up study of a tiny checkpoint (imports, encode tables); reported are
tensors/s, input GB/s (checkpoint bytes) and the per-core rate in
element-recipes/s (elements x recipes / s / cores).

Memory: a child process limits its data segment (``RLIMIT_DATA``, which
counts heap and anonymous memory) below the checkpoint's size, studies it,
and reports its peak resident set (``VmHWM``; not ``ru_maxrss``, which Linux
keeps across ``execve`` from the parent that wrote the checkpoint).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ml_dtypes
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fp8emu.lab import study  # noqa: E402
from fp8emu.lab.recipes import select_recipes  # noqa: E402


def make_checkpoint(path, tensors, rows, cols, seed=0):
    from safetensors.numpy import save_file
    g = np.random.default_rng(seed)
    t = {f"model.layers.{i}.w": (g.standard_t(4, (rows, cols)).astype(np.float32) * 0.02).astype(ml_dtypes.bfloat16)
         for i in range(tensors)}
    save_file(t, str(path))
    return path


def _timed(paths, out, recipes, client=None):
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    res = study.run_study(paths, out, recipes=recipes, progress=False, report=False, client=client)
    return time.perf_counter() - t0, res


def throughput(args):
    recipes = None if args.recipes == "default" else args.recipes.split(",")
    n_recipes = len(select_recipes(recipes))
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        ck = make_checkpoint(d / "bench.safetensors", args.tensors, args.rows, args.cols)
        warm = make_checkpoint(d / "warm.safetensors", 2, 128, 256, seed=1)
        size = ck.stat().st_size
        numel = args.tensors * args.rows * args.cols
        print(f"checkpoint: {args.tensors} bf16 tensors of {args.rows}x{args.cols} ({size / 2**20:.1f} MiB, "
              f"{numel / 1e6:.1f} M elements), {n_recipes} recipes")
        _timed([warm], d / "w0", recipes)
        t_in, _ = _timed([ck], d / "in", recipes)
        os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
        with study.dask_client(workers=2) as client:
            _timed([warm], d / "w1", recipes, client)
            t_cl, _ = _timed([ck], d / "cl", recipes, client)
        same = (d / "in" / "results.csv").read_bytes() == (d / "cl" / "results.csv").read_bytes()
    print("| run | cores | seconds | tensors/s | input GB/s | M element-recipes/s per core |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, t, cores in (("in-process", t_in, 1), ("LocalCluster, 2 workers", t_cl, 2)):
        print(f"| {name} | {cores} | {t:.2f} | {args.tensors / t:.2f} | {size / t / 1e9:.4f} | "
              f"{numel * n_recipes / t / cores / 1e6:.2f} |")
    print(f"results.csv identical: {same}")
    rate = numel * n_recipes / t_in
    total = 70e9 * n_recipes
    print(f"estimate, 70B bf16 ({n_recipes} recipes) at the in-process per-core rate: "
          + ", ".join(f"{n} workers {total / rate / n / 3600:.1f} h" for n in (1, 8, 64, 256)))


_CHILD = """
import resource, sys, time
lim = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_DATA, (lim, lim))
sys.path.insert(0, sys.argv[5])
from fp8emu.lab import study
t = time.perf_counter()
res = study.run_study([sys.argv[1]], sys.argv[3], recipes=sys.argv[4].split(","), chunk_mb=float(sys.argv[6]),
                      progress=False, report=False)
hwm = [l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")][0]
print(f"{time.perf_counter() - t:.1f} {res['computed']} {hwm}")
"""


def memory(args):
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        ck = make_checkpoint(d / "huge.safetensors", args.mem_tensors, 4096, 8192)
        size = ck.stat().st_size
        limit = args.limit_mb * 2 ** 20
        out = subprocess.run([sys.executable, "-c", _CHILD, str(ck), str(limit), str(d / "out"), args.mem_recipes,
                              str(ROOT), str(args.chunk_mb)], capture_output=True, text=True)
        if out.returncode:
            print(out.stderr[-2000:])
            raise SystemExit(f"the study failed under RLIMIT_DATA={args.limit_mb} MiB")
        secs, n, hwm_kb = out.stdout.split()
    print(f"checkpoint {size / 2**20:.0f} MiB ({args.mem_tensors} bf16 tensors of 4096x8192), "
          f"RLIMIT_DATA {args.limit_mb} MiB, chunk {args.chunk_mb} MiB, recipes {args.mem_recipes}: "
          f"{n} tensors in {secs} s, peak RSS (VmHWM) {int(hwm_kb) / 1024:.0f} MiB")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tensors", type=int, default=16)
    p.add_argument("--rows", type=int, default=512)
    p.add_argument("--cols", type=int, default=1024)
    p.add_argument("--recipes", default="default", help="'default' or comma-separated names/globs")
    p.add_argument("--quick", action="store_true", help="4 tensors of 256x512")
    p.add_argument("--memory", action="store_true", help="measure peak RSS instead of throughput")
    p.add_argument("--mem-tensors", type=int, default=10, help="64 MiB tensors in the memory checkpoint")
    p.add_argument("--limit-mb", type=int, default=256, help="RLIMIT_DATA of the memory run (MiB)")
    p.add_argument("--mem-recipes", default="tensor-e4m3fn,mx-e4m3fn-floor")
    p.add_argument("--chunk-mb", type=float, default=16)
    args = p.parse_args()
    if args.quick:
        args.tensors, args.rows, args.cols, args.mem_tensors = 4, 256, 512, 2
    if args.memory:
        memory(args)
    else:
        throughput(args)


if __name__ == "__main__":
    main()
