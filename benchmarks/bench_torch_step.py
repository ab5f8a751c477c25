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
    python3 benchmarks/bench_torch_step.py --threads 1 --write-docs    # and rewrite the docs' rows

``--write-docs`` replaces the table between the markers ``<!-- bench_torch_step:begin -->`` and
``<!-- bench_torch_step:end -->`` in docs/performance.md, and adds a dated section at the top of
benchmarks/RESULTS.md, from what this run measured, naming the machine (CPU model, cores, load
average before and after), torch/numpy/fp8emu versions, the date and the command, so that the page
never shows numbers typed by hand from another day or machine (issue 51).
tests/test_performance_page.py checks that the markers, the machine line and every row's ratio
are there.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import os
import platform
import pstats
import shlex
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))   # this checkout's fp8emu
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


BEGIN, END = "<!-- bench_torch_step:begin -->", "<!-- bench_torch_step:end -->"
PAGE, RESULTS = ROOT / "docs" / "performance.md", ROOT / "benchmarks" / "RESULTS.md"


def machine():
    """The CPU model, core count, load average and library versions, as a dict of strings."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = " ".join(line.split(":", 1)[1].split())   # one space between words
                break
    except OSError:
        pass                                 # not Linux: platform's name is what there is
    return {"cpu": cpu, "cores": str(os.cpu_count()), "load": load(), "torch": torch.__version__,
            "numpy": np.__version__, "fp8emu": fp8emu.__version__}


def load():
    """The 1-minute load average, two decimals ("n/a" where the OS has none)."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except (OSError, AttributeError):
        return "n/a"


def docs_block(rows, info, threads, repeats, command, date):
    """The docs page's text between the markers: the machine line, the command and one row per case.

    ``rows`` are ``(recipe, gpu, emulated (wall, cpu) s, float32 (wall, cpu) s)``.  The ratio shown
    first is process CPU time's, the figure that survives a shared machine; wall time's follows.
    """
    out = [f"Measured {date} on {info['cpu']}, {info['cores']} cores, load average {info['load_before']} "
           f"before and {info['load_after']} after; torch {info['torch']}, numpy {info['numpy']}, "
           f"fp8emu {info['fp8emu']}; {threads} thread{'s' if threads != 1 else ''}.",
           "Ratios are process-CPU-time ratios of the emulated step to the float32 step, both run "
           f"alternately in one process (median of {repeats}), so load from other processes affects "
           "both sides alike; the wall-time ratio is shown beside it.",
           f"Command: `{command}` (rows written by it).", "",
           "| recipe / stack | emulated step, CPU s | float32 step, CPU s | ratio (CPU) | ratio (wall) | target "
           "| met |",
           "|---|---:|---:|---:|---:|---:|:-:|"]
    for r, g, (ew, ec), (pw, pc) in rows:
        out.append(f"| `{r}` / `{g}` | {ec:.2f} | {pc:.3f} | {ec / pc:.0f}× | {ew / pw:.0f}× | ≤ {TARGET[g]}× "
                   f"| {'yes' if ec / pc <= TARGET[g] else 'no'} |")
    return "\n".join(out)


def splice(text, block):
    """``text`` with what lies between the markers replaced by ``block``; an error if they are not there once each."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise SystemExit(f"{PAGE}: needs exactly one {BEGIN} followed by one {END}; found "
                         f"{text.count(BEGIN)} and {text.count(END)}")
    head, rest = text.split(BEGIN)
    return head + BEGIN + "\n" + block + "\n" + END + rest.split(END, 1)[1]


def results_section(rows, info, threads, command, date, branch):
    """A dated section for benchmarks/RESULTS.md: the same rows, with wall and CPU seconds both."""
    out = [f"## A transformer block's emulated training step against its float32 torch step "
           f"(bench_torch_step, written by `--write-docs`), {date}, {branch}", "",
           f"`{command}` on {info['cpu']}, {info['cores']} cores, load average {info['load_before']} before "
           f"and {info['load_after']} after; torch {info['torch']}, numpy {info['numpy']}, fp8emu "
           f"{info['fp8emu']}. Both steps run alternately in one process; medians; the ratio that counts is "
           "process CPU time's (the cores are shared, so wall time carries other jobs' load).", "",
           "| recipe | gpu | emulated step s (wall / cpu) | float32 step s (wall / cpu) | ratio (wall / cpu) "
           "| target | met |",
           "|---|---|---:|---:|---:|---:|:-:|"]
    for r, g, (ew, ec), (pw, pc) in rows:
        out.append(f"| {r} | {g} | {ew:.2f} / {ec:.2f} | {pw:.3f} / {pc:.3f} | {ew / pw:.0f}x / {ec / pc:.0f}x "
                   f"| <= {TARGET[g]}x | {'yes' if ec / pc <= TARGET[g] else 'NO'} |")
    return "\n".join(out) + "\n\n"


def write_docs(rows, info, threads, repeats, command):
    date = datetime.date.today().isoformat()
    page = PAGE.read_text()
    PAGE.write_text(splice(page, docs_block(rows, info, threads, repeats, command, date)))
    try:
        head = (ROOT / ".git").read_text() if (ROOT / ".git").is_file() else ""
        gitdir = Path(head.split(":", 1)[1].strip()) if head.startswith("gitdir:") else ROOT / ".git"
        branch = (gitdir / "HEAD").read_text().strip().rsplit("/", 1)[-1]
    except OSError:
        branch = "unknown branch"
    text = RESULTS.read_text()
    at = text.index("\n## ") + 1            # newest first: before the first dated section
    RESULTS.write_text(text[:at] + results_section(rows, info, threads, command, date, branch) + text[at:])
    print(f"wrote {PAGE.relative_to(ROOT)} and {RESULTS.relative_to(ROOT)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--cases", nargs="*", default=[f"{r}/{g}" for r, g in CASES], help="recipe/gpu pairs")
    ap.add_argument("--profile", default=None, help="profile one recipe/gpu step (cProfile, top 25)")
    ap.add_argument("--write-docs", action="store_true",
                    help="rewrite docs/performance.md's training-step rows and add a section to benchmarks/RESULTS.md")
    args = ap.parse_args()
    for case in args.cases:
        r, _, g = case.partition("/")
        if g not in TARGET or r not in {rr for rr, _ in CASES}:
            ap.error(f"--cases: {case!r} is not one of {', '.join(f'{a}/{b}' for a, b in CASES)}")
    info = machine()
    info["load_before"] = info["load"]
    torch.set_num_threads(args.threads)
    set_threads(args.threads)
    torch.manual_seed(0)
    x = torch.randn(8, 256, 256)
    base = Block()
    print(f"torch {torch.__version__}, numpy {np.__version__}, fp8emu {fp8emu.__version__}, "
          f"threads {args.threads}, {info['cores']} cores ({info['cpu']}), load average {info['load']}; "
          "block d_model 256, 4 heads, 2048 tokens")
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
    rows = []
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
        rows.append((r, g, (ew, ec), (pw, pc)))
        print(f"| {r} | {g} | {ew:.2f} / {ec:.2f} | {pw:.3f} / {pc:.3f} | {ratio_w:.0f}x / {ratio_c:.0f}x "
              f"| <= {TARGET[g]}x | {'yes' if ratio_c <= TARGET[g] else 'NO'} |", flush=True)
    if args.write_docs:
        info["load_after"] = load()
        command = "python3 benchmarks/bench_torch_step.py " + shlex.join(sys.argv[1:])
        write_docs(rows, info, args.threads, args.repeats, command)


if __name__ == "__main__":
    main()
