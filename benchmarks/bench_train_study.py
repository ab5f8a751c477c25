"""Cost of one training step of the train-study GPT under each recipe x stack, against fp32, in one process.

    PYTHONPATH=. python benchmarks/bench_train_study.py [--n-layer 2 --d-model 128 --seq-len 32 --batch 4]
        [--profile te-delayed@h100]

Prints, per valid pair, the median seconds of ``--steps`` timed training steps (after one
warm-up step) and the ratio to the float32 step timed beside it; with ``--profile`` the
share of one step's time spent in fp8emu's quantizers, its GEMM models and everything else
(torch autograd, optimizer), from cProfile's cumulative times.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

import numpy as np
import torch

import fp8emu.torch as fp8torch
from fp8emu import parallel
from fp8emu.torch.study.corpus import load_corpus, sample_batch
from fp8emu.torch.study.model import GPT, ModelConfig
from fp8emu.torch.study.runs import valid_pairs


def _stepper(mc, recipe, stack):
    model = GPT(mc, seed=0)
    if recipe is not None:
        fp8torch.emulate(model, recipe=recipe, gpu=stack)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = load_corpus().train
    rng = np.random.default_rng(0)

    def step():
        x, y = sample_batch(data, rng, mc.batch, mc.seq_len)
        loss = model.loss(torch.from_numpy(x), torch.from_numpy(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def _time(step, n):
    step()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        step()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def _profile(mc, pair):
    recipe, stack = pair.split("@")
    step = _stepper(mc, recipe, stack)
    step()
    prof = cProfile.Profile()
    prof.enable()
    step()
    prof.disable()
    st = pstats.Stats(prof)
    total = max(v[3] for v in st.stats.values())

    def where(file):
        for part, label in (("/fp8emu/gemm/", "fp8emu GEMM models (fp8emu.gemm)"),
                            ("/fp8emu/scaling/", "fp8emu quantizers (scaling, codec)"),
                            ("/fp8emu/codec", "fp8emu quantizers (scaling, codec)"),
                            ):
            if part in file:
                return label
        return None

    # cumulative time of each area's entry points (functions of the area called from outside it)
    share = {}
    for (file, _, _), (_, _, _, ct, callers) in st.stats.items():
        area = where(file)
        if area and all(where(c[0]) != area for c in callers):
            share[area] = share.get(area, 0.0) + ct
    share["the rest (torch, fp8emu.torch glue, optimizer)"] = total - sum(share.values())
    print(f"profile of one {pair} step ({total:.2f} s under cProfile), cumulative time by area:")
    for k, v in sorted(share.items(), key=lambda kv: -kv[1]):
        print(f"  {k:44s} {v:7.2f} s  {100 * v / total:5.1f} %")
    st.sort_stats("tottime").print_stats(8)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--pairs", help="comma-separated recipe@stack (default: every valid pair)")
    p.add_argument("--profile", help="recipe@stack to profile instead")
    a = p.parse_args()
    torch.set_num_threads(1)
    parallel.set_threads(1)     # fp8emu's own pool too: cProfile sees only the calling thread
    mc = ModelConfig(a.n_layer, a.d_model, 4, a.seq_len, a.batch)
    print(f"torch {torch.__version__}, numpy {np.__version__}, 1 thread (torch and fp8emu); model {mc}")
    if a.profile:
        return _profile(mc, a.profile)
    if a.pairs:
        pairs = [tuple(x.split("@")) for x in a.pairs.split(",")]
    else:
        pairs, refused = valid_pairs(fp8torch.recipe_names(), fp8torch.stack_names())
        print(f"{len(pairs)} valid pairs, {len(refused)} refused")
    fp32 = _stepper(mc, None, None)
    bf16_model = _stepper(mc, None, None)
    print(f"{'pair':34s} {'s/step':>8s} {'fp32 s/step':>11s} {'ratio':>7s}")
    for r, s in pairs:
        t = _time(_stepper(mc, r, s), a.steps)
        t32 = _time(fp32, max(a.steps, 5))
        print(f"{r + '@' + s:34s} {t:8.3f} {t32:11.4f} {t / t32:7.0f}x", flush=True)
    del bf16_model


if __name__ == "__main__":
    main()
