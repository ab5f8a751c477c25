"""Time scaled_mm's accumulators against np.matmul in float32 on the same shape.

Usage: python3 benchmarks/bench_gemm.py [M N K]   (default 256 256 4096)
"""

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's fp8emu
import fp8emu  # noqa: E402


def best_of(fn, repeat):
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main(argv):
    M, N, K = (int(x) for x in argv) if argv else (256, 256, 4096)
    rng = np.random.default_rng(0)
    a = fp8emu.encode(rng.standard_normal((M, K)) * 4, "e4m3fn")
    b = fp8emu.encode(rng.standard_normal((K, N)) * 4, "e4m3fn")
    A, B = fp8emu.decode(a, "e4m3fn"), fp8emu.decode(b, "e4m3fn")
    base = best_of(lambda: A @ B, 50)
    print(f"shape {M}x{N}x{K}; np.matmul float32: {base * 1e3:.2f} ms")
    print("| accumulator | time (s) | ratio to np.matmul float32 |")
    print("|---|---|---|")
    for acc in ("exact", "fp32", "hopper-fast", "hopper"):
        t = best_of(lambda: fp8emu.scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn",
                                             accumulator=acc), 3)
        print(f"| {acc} | {t:.3f} | {t / base:.0f}x |")


if __name__ == "__main__":
    main(sys.argv[1:])
