"""Time emulated FP8 attention (fp8emu.attention, FA3 recipe, Hopper accumulator) against a float32 NumPy
blocked attention of the same shape, side by side in one process.

Usage::

    python3 benchmarks/bench_attention.py                # 32768 tokens, head dim 128, one head
    python3 benchmarks/bench_attention.py --tokens 4096  # quicker

The float32 peer is flash attention in NumPy: the same query chunks and 128-key blocks, S = Q·Kᵀ and
O += P·V as float32 BLAS matrix products, online softmax with exp2 in float32; no quantization.  Both
run once per repetition, interleaved; wall and process CPU time are reported and their ratios printed.
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's fp8emu
from fp8emu.attention import attention  # noqa: E402


def float32_blocked_attention(q, k, v, block_n=128, query_chunk=2048):
    """Flash attention forward in float32 NumPy (BLAS products), one head: (Nq, d) -> (Nq, dv)."""
    Nq, d = q.shape
    c = np.float32(math.log2(math.e) / math.sqrt(d))
    out = np.empty((Nq, v.shape[1]), np.float32)
    for r0 in range(0, Nq, query_chunk):
        qc = q[r0:r0 + query_chunk]
        m = np.full(len(qc), -np.inf, np.float32)
        l = np.zeros(len(qc), np.float32)
        o = np.zeros((len(qc), v.shape[1]), np.float32)
        for b0 in range(0, k.shape[0], block_n):
            s = (qc @ k[b0:b0 + block_n].T) * c
            m_new = np.maximum(m, s.max(1))
            alpha = np.exp2(m - m_new)
            p = np.exp2(s - m_new[:, None])
            l = l * alpha + p.sum(1)
            o = o * alpha[:, None] + p @ v[b0:b0 + block_n]
            m = m_new
        out[r0:r0 + query_chunk] = o / l[:, None]
    return out


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    r = fn()
    return time.perf_counter() - w, time.process_time() - c, r


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=32768, help="queries = keys (default 32768)")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=1, help="interleaved repetitions (median; default 1)")
    args = ap.parse_args(argv)
    g = np.random.default_rng(0)
    n, d = args.tokens, args.head_dim
    q, k, v = (g.standard_normal((n, d)).astype(np.float32) for _ in range(3))
    walls, cpus = {"fp8emu": [], "float32": []}, {"fp8emu": [], "float32": []}
    for _ in range(args.repeat):
        w, c, ref = timed(lambda: float32_blocked_attention(q, k, v))
        walls["float32"].append(w)
        cpus["float32"].append(c)
        w, c, res = timed(lambda: attention(q, k, v, "fa3-fp8", reference=False))
        walls["fp8emu"].append(w)
        cpus["fp8emu"].append(c)
    med = {key: (float(np.median(walls[key])), float(np.median(cpus[key]))) for key in walls}
    err = np.linalg.norm(res.out[0] - ref) / np.linalg.norm(ref)
    from importlib.metadata import version
    print(f"attention forward, {n} tokens, head dim {d}, one head (fp8emu {version('fp8emu')}, "
          f"numpy {np.__version__}, Python {platform.python_version()}, {platform.machine()})")
    print("| implementation | wall (s) | CPU (s) |")
    print("|---|---|---|")
    print(f"| float32 NumPy blocked attention (BLAS) | {med['float32'][0]:.2f} | {med['float32'][1]:.2f} |")
    print(f"| fp8emu.attention fa3-fp8 (hopper accumulator) | {med['fp8emu'][0]:.2f} | {med['fp8emu'][1]:.2f} |")
    print(f"ratio fp8emu / float32: wall {med['fp8emu'][0] / med['float32'][0]:.1f}x, "
          f"CPU {med['fp8emu'][1] / med['float32'][1]:.1f}x (target <= 50x)")
    print(f"relative L2 difference of the outputs (FP8 vs float32): {err:.4f}")


if __name__ == "__main__":
    main()
