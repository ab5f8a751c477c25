"""Time an emulated FP8/FP4 training step of a transformer block against its float32 torch step.

One pre-norm transformer block (d_model 256, 4 heads, sequence 256, batch 8: 2048 tokens;
attention by ``torch.nn.functional.scaled_dot_product_attention``, causal; MLP 256-1024-256
with GELU), forward and backward of ``mean(y**2)``.  Its four ``nn.Linear`` layers are
swapped by :func:`fp8emu.torch.emulate`; everything else runs in torch, as in the plain step.
After one untimed step of each, both steps run in this process, alternately, and the
median of ``--repeats`` is taken;
wall time and process CPU time are reported.

Usage::

    python3 benchmarks/bench_torch_step.py --threads 1                 # one thread
    python3 benchmarks/bench_torch_step.py --threads 2                 # all threads of this machine
    python3 benchmarks/bench_torch_step.py --threads 1 --profile te-delayed/h100   # where the time goes
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# NumPy's BLAS on one thread (set before numpy loads): the GEMM models make many small matrix
# products, which OpenBLAS on two threads ran 10x slower here (block_scaled_mm kind::mxf8f6f4,
# 2048x256x768: 9.6 s against 0.8 s wall); fp8emu parallelises with its own threads instead.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # this checkout's fp8emu
import fp8emu  # noqa: E402
import fp8emu.torch as ft  # noqa: E402
from fp8emu.parallel import set_threads  # noqa: E402

CASES = [("te-delayed", "h100"), ("torchao-tensorwise", "h100"), ("te-block", "h100"),
         ("te-mxfp8", "b200"), ("te-nvfp4", "b200"), ("te-current", "cpu"), ("te-current", "exact")]
TARGET = {"h100": 50, "h100-fast": 50, "b200": 25, "cpu": 25, "exact": 25}


class Block(nn.Module):
    def __init__(self, d=256, heads=4, ff=1024):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (t.reshape(B, T, self.heads, D // self.heads).transpose(1, 2) for t in (q, k, v))
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


def step(model, x):
    model.zero_grad(set_to_none=True)
    loss = model(x).square().mean()
    loss.backward()
    return loss


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--cases", nargs="*", default=[f"{r}/{g}" for r, g in CASES], help="recipe/gpu pairs")
    ap.add_argument("--profile", default=None, help="profile one recipe/gpu step (cProfile, top 25)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    set_threads(args.threads)
    torch.manual_seed(0)
    x = torch.randn(8, 256, 256)
    base = Block()
    print(f"torch {torch.__version__}, numpy {np.__version__}, fp8emu {fp8emu.__version__}, "
          f"threads {args.threads}, {os.cpu_count()} cores; block d_model 256, 4 heads, 2048 tokens")
    if args.profile:
        r, g = args.profile.split("/")
        model = Block()
        model.load_state_dict(base.state_dict())
        ft.emulate(model, r, g)
        step(model, x)
        prof = cProfile.Profile()
        prof.runcall(step, model, x)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        return
    print("| recipe | gpu | emulated step s (wall / cpu) | float32 step s (wall / cpu) | ratio (wall / cpu) "
          "| target | met |")
    print("|---|---|---:|---:|---:|---:|:-:|")
    for case in args.cases:
        r, g = case.split("/")
        model = Block()
        model.load_state_dict(base.state_dict())
        ft.emulate(model, r, g)
        ref = Block()
        ref.load_state_dict(base.state_dict())
        step(ref, x)                       # warm torch's kernels
        step(model, x)   # and delayed scaling's scales: its first step quantizes with scale 1, which
        #                  leaves the weights' codes in E4M3's subnormals (a slower path of the GEMM model)
        em, pl = [], []
        for _ in range(args.repeats):      # alternate the two, take medians
            em.append(timed(lambda: step(model, x)))
            pl.append(timed(lambda: step(ref, x)))
        ew, ec = np.median([t[0] for t in em]), np.median([t[1] for t in em])
        pw, pc = np.median([t[0] for t in pl]), np.median([t[1] for t in pl])
        ratio_w, ratio_c = ew / pw, ec / pc
        print(f"| {r} | {g} | {ew:.2f} / {ec:.2f} | {pw:.3f} / {pc:.3f} | {ratio_w:.0f}x / {ratio_c:.0f}x "
              f"| <= {TARGET[g]}x | {'yes' if ratio_c <= TARGET[g] else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
