"""fp8emu's MKL-sgemm model (``fp8emu.gemm.torch_cpu.sgemm``, the ``cpu`` stack's GEMM): the chain before
and after it was made fast, side by side in one process, one thread, with torch's own float32 ``torch.mm``
(whose bits both reproduce) as the peer where torch is importable.  Gaussian float32 operands; the
best of ``--repeat`` interleaved runs per shape (M x K x N).  With ``--pairs recipe@cpu,...``:
also one training step of the train-study GPT (benchmarks/bench_train_study.py's model and
step) per pair with the old chain and with the new, interleaved, beside the float32 step.  Run:
OMP_NUM_THREADS=1 PYTHONPATH=. python3 benchmarks/bench_sgemm_chain.py [--pairs deepseek-v3@cpu]
Historical since issue 49: ``sgemm`` now evaluates the order revealed on the machine
(``fp8emu.gemm.sumtree``), so ``--pairs`` (which swaps ``torch_cpu._fma_chain``) times the same code twice;
the per-shape GEMM rows still compare the two chains.
"""
import argparse
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
import numpy as np  # noqa: E402

from fp8emu.gemm import torch_cpu  # noqa: E402


# the chain as it was (fp8emu at f957393), kept once: tests/test_sgemm_fma_chain.py checks the new chain
# against it bit for bit
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from test_sgemm_fma_chain import _slow_chain as old_chain  # noqa: E402


def sgemm_with(chain, x, y):
    b = torch_cpu.sgemm_k_blocks(x.shape[1])
    total = chain(x, y, b[0], b[1])
    for k0, k1 in zip(b[1:-1], b[2:]):
        total = total + chain(x, y, k0, k1)
    return total


def best(f, repeat):
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = f()
        ts.append(time.perf_counter() - t)
    return min(ts), out


def steps(pairs, repeat):
    """Seconds of one training step per pair, old chain vs new chain vs float32 (medians)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_train_study import _stepper  # noqa: E402
    from fp8emu import parallel  # noqa: E402
    from fp8emu.torch.study.model import ModelConfig  # noqa: E402
    parallel.set_threads(1)
    mc = ModelConfig(2, 128, 4, 32, 4)
    fp32 = _stepper(mc, None, None)
    fp32()
    new_chain = torch_cpu._fma_chain
    print(f"train-study step ({mc}): pair, old s, new s, old/new, fp32 s, new/fp32")
    for pair in pairs:
        step = _stepper(mc, *pair.split("@"))
        step()
        t = {"old": [], "new": [], "fp32": []}
        for _ in range(repeat):
            for name in ("old", "new"):
                torch_cpu._fma_chain = old_chain if name == "old" else new_chain
                t0 = time.perf_counter()
                step()
                t[name].append(time.perf_counter() - t0)
            torch_cpu._fma_chain = new_chain
            t0 = time.perf_counter()
            fp32()
            t["fp32"].append(time.perf_counter() - t0)
        o, n, f = (statistics.median(t[k]) for k in ("old", "new", "fp32"))
        print(f"{pair:24s} {o:7.3f} {n:7.3f} {o / n:6.1f}x {f:8.4f} {n / f:6.0f}x", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pairs", help="comma-separated recipe@stack whose training step to time as well")
    args = ap.parse_args()
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    print("shape MxKxN     old s    new s   old/new   torch.mm s  new/torch  bits: new==old new==torch")
    for M, K, N in [(128, 128, 384), (128, 384, 128), (128, 512, 128), (2048, 256, 256)]:
        x = rng.standard_normal((M, K)).astype(np.float32)
        y = rng.standard_normal((K, N)).astype(np.float32)
        t_old, v_old = best(lambda: sgemm_with(old_chain, x, y), args.repeat)
        t_new, v_new = best(lambda: sgemm_with(torch_cpu._fma_chain, x, y), args.repeat)
        same_old = np.array_equal(v_old.view(np.uint32), v_new.view(np.uint32))
        line = f"{M}x{K}x{N:<8} {t_old:8.4f} {t_new:8.4f} {t_old / t_new:8.1f}x"
        if torch is not None:
            tx, ty = torch.from_numpy(x), torch.from_numpy(y)
            t_t, v_t = best(lambda: torch.mm(tx, ty).numpy(), max(args.repeat, 10))
            same_t = np.array_equal(v_t.view(np.uint32), v_new.view(np.uint32))
            line += f"   {t_t:10.6f} {t_new / t_t:9.0f}x   {same_old!s:>13} {same_t!s:>10}"
        else:
            line += f"   {'-':>10} {'-':>9}    {same_old!s:>13}"
        print(line, flush=True)
    print(platform.processor() or platform.machine(), "numpy", np.__version__,
          "torch", torch.__version__ if torch is not None else "-")
    if args.pairs:
        steps(args.pairs.split(","), args.repeat)


if __name__ == "__main__":
    main()
