"""What revealing torch's CPU GEMM order costs, and that the cache makes it once per machine.

Per shape (M x K x N, one torch thread, Gaussian float32 operands), side by side in one process:
torch's own ``torch.mm``; fp8emu's emulation of it (``fp8emu.gemm.torch_cpu.sgemm`` with the order
already known); the probe that reveals the order (``cpu_order.reveal_here``: probing torch plus the
random checks); ``order_for`` with an empty cache (probe + store); ``order_for`` in a new process with
the cache file (read only: ``_MEMO`` cleared); ``order_for`` warm (in memory).  Run:
PYTHONPATH=. python3 benchmarks/bench_cpu_order.py [--shapes 64x512x64,...] [--repeat 3]
"""
import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import torch  # noqa: E402

from fp8emu.gemm import cpu_order, torch_cpu  # noqa: E402


def best(fn, n):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="64x512x64,32x1024x32,16x4096x16,128x4096x128")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.environ["FP8EMU_CACHE"] = tempfile.mkdtemp()
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, numpy {np.__version__}, "
          f"1 thread; times in ms (best of {args.repeat})")
    print("| shape | torch.mm | emulated mm | probe (reveal) | order_for, no cache | order_for, cache file "
          "| order_for, warm | probe / emulated mm | order found |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    rng = np.random.default_rng(0)
    for s in args.shapes.split(","):
        M, K, N = (int(v) for v in s.split("x"))
        x = rng.standard_normal((M, K)).astype(np.float32)
        y = rng.standard_normal((K, N)).astype(np.float32)
        tx, ty = torch.from_numpy(x), torch.from_numpy(y)
        t_torch = best(lambda: torch.mm(tx, ty), args.repeat)
        t_probe = best(lambda: cpu_order.reveal_here(M, K, N, threads=1), args.repeat)
        cold = []
        for _ in range(args.repeat):
            cpu_order._MEMO.clear()
            try:
                os.remove(cpu_order.cache_path())
            except FileNotFoundError:
                pass
            t0 = time.perf_counter()
            cpu_order.order_for(M, K, N, threads=1)
            cold.append(time.perf_counter() - t0)
        t_file = best(lambda: (cpu_order._MEMO.clear(), cpu_order.order_for(M, K, N, threads=1)), args.repeat)
        t_warm = best(lambda: cpu_order.order_for(M, K, N, threads=1), args.repeat)
        t_emu = best(lambda: torch_cpu.sgemm(x, y, threads=1), args.repeat)
        want = torch.mm(tx, ty).numpy()
        assert np.array_equal(want.view(np.int32), torch_cpu.sgemm(x, y, threads=1).view(np.int32)), s
        order, _ = cpu_order.order_for(M, K, N, threads=1)
        ms = lambda t: f"{t * 1e3:.3g}"  # noqa: E731
        print(f"| {s} | {ms(t_torch)} | {ms(t_emu)} | {ms(t_probe)} | {ms(min(cold))} | {ms(t_file)} | "
              f"{ms(t_warm)} | {t_probe / t_emu:.2f} | {order.describe()[:60]} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
