"""Time scaled_mm's accumulators against np.matmul, an older fp8emu and torch._scaled_mm (CPU).

Usage::

    python3 benchmarks/bench_gemm.py [M N K]                 # default 256 256 4096
    python3 benchmarks/bench_gemm.py --base /tmp/perf-old     # also an older package, copied there
                                                              # as fp8emu_old (e.g. git archive 84baad6)
    python3 benchmarks/bench_gemm.py 4096 4096 4096 --once --memory   # one timed run and its peak memory
    python3 benchmarks/bench_gemm.py --threads 1 --block 128 128 4096 --block 256 256 4096 \
        --base /tmp/perf-old        # also block_scaled_mm "blackwell" (MXFP8) at those shapes
    python3 benchmarks/bench_gemm.py --skip-scaled --instructions --base /tmp/perf-old
                                    # GEMMs through every FP8/FP6/FP4 matrix-instruction preset
    python3 benchmarks/bench_gemm.py --threads 1 --skip-scaled --dense 256 256 1024 --base /tmp/perf-old
                                    # the wide route's dense step: block_scaled_mm through step_row(32, 13, 14)
    python3 benchmarks/bench_gemm.py --skip-scaled --nvfp4 4096 3072 512 --base /tmp/perf-old
                                    # block_scaled_mm "fp32" on NVFP4 operands (TE's NVFP4 reference GEMM)

Repetitions are interleaved (this package, the base, ..., then the reverse order) and medians taken;
wall time and process CPU time are both reported (the CPU time is what a busy
shared machine distorts least).  torch runs at the same thread count as fp8emu.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import tracemalloc
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # torch's idle OpenMP workers must not spin
if "--threads" in sys.argv:      # np.matmul's BLAS runs on as many threads as fp8emu (set before numpy loads)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", sys.argv[sys.argv.index("--threads") + 1])

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's fp8emu
import fp8emu  # noqa: E402


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def minor_faults():
    """This process's minor page faults so far (pages the system gave it, zeroed, on first touch)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def interleaved(fns, repeat):
    """Median wall and CPU seconds of each of ``fns``, ``repeat`` rounds, each round in the order of the last one
    reversed: a call leaves the process's heap (what glibc has trimmed back to the system) to the next, so a
    function always run right after another paid for the other's page faults (benchmarks/RESULTS.md, "The exact
    row's page faults")."""
    for f in fns:
        f()
    walls, cpus = [[] for _ in fns], [[] for _ in fns]
    FAULTS.clear()
    FAULTS.extend([] for _ in fns)
    for r in range(repeat):
        for i in (range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))):
            f0 = minor_faults()
            w, c = timed(fns[i])
            FAULTS[i].append(minor_faults() - f0)
            walls[i].append(w)
            cpus[i].append(c)
    return [float(np.median(w)) for w in walls], [float(np.median(c)) for c in cpus]


#: The minor page faults of each call of the last :func:`interleaved`, per function.
FAULTS: list = []


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shape", nargs="*", type=int, default=[256, 256, 4096])
    ap.add_argument("--base", default=None, help="folder holding an older package as fp8emu_old")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--once", action="store_true", help="one run of hopper only (large shapes)")
    ap.add_argument("--memory", action="store_true", help="peak traced memory of one hopper run")
    ap.add_argument("--block", nargs=3, type=int, action="append", metavar=("M", "N", "K"), default=None,
                    help="also time block_scaled_mm 'blackwell' on MXFP8 operands of this shape")
    ap.add_argument("--dense", nargs=3, type=int, action="append", metavar=("M", "N", "K"), default=None,
                    help="also time block_scaled_mm through step_row(32, 13, 14) with scale_at 'product' and "
                         "'block' (the wide route's dense step) on MXFP8 operands of this shape")
    ap.add_argument("--nvfp4", nargs=3, type=int, action="append", metavar=("M", "N", "K"), default=None,
                    help="also time block_scaled_mm 'fp32' (float32 block sums, TE's NVFP4 reference GEMM) on NVFP4 "
                         "operands of this shape")
    ap.add_argument("--skip-scaled", action="store_true", help="only the --block / --dense / --nvfp4 rows")
    ap.add_argument("--instructions", action="store_true",
                    help="also time GEMMs through every FP8/FP6/FP4 matrix-instruction preset")
    args = ap.parse_args(argv)
    M, N, K = args.shape
    if args.threads:
        fp8emu.set_threads(args.threads)
    nt = fp8emu.get_threads()
    rng = np.random.default_rng(0)
    a = fp8emu.encode(rng.standard_normal((M, K)) * 4, "e4m3fn")
    b = fp8emu.encode(rng.standard_normal((K, N)) * 4, "e4m3fn")
    mm = lambda acc: (lambda: fp8emu.scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn",  # noqa: E731
                                               accumulator=acc))
    print(f"shape {M}x{N}x{K}, fp8emu threads {nt}")
    if args.once or args.memory:
        if args.memory:
            tracemalloc.start()
        w, c = timed(mm("hopper"))
        line = f"hopper: {w:.1f} s wall, {c:.1f} s CPU"
        if args.memory:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            line += (f"; peak traced memory {peak / 2**20:.0f} MiB "
                     f"({peak / (a.nbytes + b.nbytes):.1f}x the fp8 operands, "
                     f"{peak / (4 * M * N):.1f}x the float32 output)")
        print(line)
        return 0
    old = None
    if args.base:
        sys.path.insert(0, args.base)
        import fp8emu_old as old
        if hasattr(old, "set_threads"):
            old.set_threads(nt)
    try:
        import torch
        torch.set_num_threads(nt)
        ta = torch.from_numpy(a).view(torch.float8_e4m3fn)
        tb = torch.from_numpy(np.ascontiguousarray(b.T)).view(torch.float8_e4m3fn).t()   # column-major B
        one = torch.tensor(1.0)
        tmm = lambda fast: (lambda: torch._scaled_mm(ta, tb, scale_a=one, scale_b=one,  # noqa: E731
                                                     out_dtype=torch.float32, use_fast_accum=fast))
    except (ImportError, RuntimeError):           # pragma: no cover - optional peer
        torch = None
    A, B = fp8emu.decode(a, "e4m3fn"), fp8emu.decode(b, "e4m3fn")
    (base_w,), _ = interleaved([lambda: A @ B], 20)
    print(f"np.matmul float32: {base_w * 1e3:.2f} ms")
    head = "| accumulator | fp8emu wall s | CPU s | / np.matmul |"
    if old:
        head += (" base wall s | base CPU s | speed-up wall | speed-up CPU | bit-identical | minor page faults a call "
                 "(median; base) |")
    if torch:
        head += " torch._scaled_mm CPU s (wall) | fp8emu / torch |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for acc in () if args.skip_scaled else ("exact", "fp32", "hopper-fast", "hopper"):
        fns = [mm(acc)]
        if old:
            fns.append(lambda acc=acc: old.scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", accumulator=acc))
        tfn = torch and acc in ("hopper", "hopper-fast") and tmm(acc == "hopper-fast")
        if tfn:
            fns.append(tfn)
        walls, cpus = interleaved(fns, args.repeat)
        row = f"| {acc} | {walls[0]:.3f} | {cpus[0]:.3f} | {walls[0] / base_w:.0f}x |"
        if old:
            same = np.array_equal(fns[0](), fns[1](), equal_nan=True)
            row += (f" {walls[1]:.3f} | {cpus[1]:.3f} | {walls[1] / walls[0]:.2f}x | {cpus[1] / cpus[0]:.2f}x | {same} | "
                    f"{np.median(FAULTS[0]):.0f} ({np.median(FAULTS[1]):.0f}) |")
        if torch:
            row += f" {walls[-1]:.4f} | {walls[0] / walls[-1]:.0f}x |" if tfn else " - | - |"
        print(row, flush=True)
    if args.block or args.dense or args.nvfp4:
        head = "| block_scaled_mm | np.matmul float32 | fp8emu wall | / np.matmul |"
        if old:
            head += " base | speed-up | bit-identical |"
        print(head)
        print("|" + "---|" * (head.count("|") - 1))
    for shape in args.block or ():
        block_rows(shape, old, args.repeat)
    for shape in args.dense or ():
        for at in ("product", "block"):
            block_rows(shape, old, args.repeat, at)
    for shape in args.nvfp4 or ():
        block_rows(shape, old, args.repeat, nvfp4=True)
    if args.instructions:
        instruction_rows((M, N, K), old, args.repeat, base_w)
    return 0


#: (preset, element format, scale kind, block) of the GEMM rows of --instructions; kind "mx": operands
#: from quantize_mx (E8M0 scales that follow each block's largest element), through block_scaled_mm
INSTRUCTION_ROWS = [("ada-mma", "e4m3fn", None, None), ("hopper-wgmma", "e4m3fn", None, None),
                    ("blackwell-mma", "e4m3fn", None, None), ("blackwell-tcgen05-f8f6f4", "e4m3fn", None, None),
                    ("rtx-blackwell-mma", "e4m3fn", None, None),
                    ("blackwell-tcgen05-mxf8f6f4", "e4m3fn", "ue8m0", 32),
                    ("rtx-blackwell-mma-mxf8f6f4", "e4m3fn", "ue8m0", 32),
                    ("blackwell-tcgen05-mxf8f6f4", "e4m3fn", "mx", 32),
                    ("rtx-blackwell-mma-mxf8f6f4", "e4m3fn", "mx", 32),
                    ("blackwell-tcgen05-mxf4nvf4", "e2m1fn", "ue4m3", 16),
                    ("rtx-blackwell-mma-mxf4nvf4", "e2m1fn", "ue4m3", 16),
                    ("cdna3-mfma-fp8", "e4m3fnuz", None, None)]


def instruction_rows(shape, old, repeat, base_w):
    """GEMMs through the matrix-instruction presets (``instructions.mma`` on M x K and K x N codes of
    standard-normal data, block scales drawn at random over 2**-7 ... 2**7, or ``block_scaled_mm``
    on ``quantize_mx`` operands), against the base package and against np.matmul of float32
    operands timed in the same interleaved rounds (five products a round, the median per product
    for each row: its one-thread time drifts by a third between runs here)."""
    from fp8emu.gemm import instructions
    M, N, K = shape
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    x32, y32 = x.astype(np.float32), y.astype(np.float32)
    head = "| instruction | fp8emu wall s | CPU s | np.matmul ms | / np.matmul |"
    if old:
        head += " base wall s | base CPU s | speed-up CPU | bit-identical |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for preset, fmt, kind, block in INSTRUCTION_ROWS:
        if kind == "mx":
            qa, qb = fp8emu.quantize_mx(x32, fmt), fp8emu.quantize_mx(y32, fmt, axis=0)
            fns = [lambda qa=qa, qb=qb, p=preset: fp8emu.block_scaled_mm(qa, qb, accumulator=p)]
            if old:
                oa, ob = old.quantize_mx(x32, fmt), old.quantize_mx(y32, fmt, axis=0)
                fns.append(lambda oa=oa, ob=ob, p=preset: old.block_scaled_mm(oa, ob, accumulator=p))
        else:
            a, b = fp8emu.encode(x, fmt), fp8emu.encode(y, fmt)
            kw = dict(instruction=preset, a_format=fmt)
            if kind:
                lo, hi = (120, 135) if kind == "ue8m0" else (40, 70)
                kw.update(scale_format=kind, a_scales=rng.integers(lo, hi, (M, K // block), dtype=np.uint8),
                          b_scales=rng.integers(lo, hi, (K // block, N), dtype=np.uint8))
            fns = [lambda kw=kw, a=a, b=b: instructions.mma(a, b, **kw)]
            if old:
                fns.append(lambda kw=kw, a=a, b=b: old.gemm.instructions.mma(a, b, **kw))
        walls, cpus = interleaved(fns + [lambda: [x32 @ y32 for _ in range(5)]], repeat)
        mw = walls[-1] / 5
        label = f"{preset} (quantize_mx)" if kind == "mx" else preset
        row = f"| {label} | {walls[0]:.3f} | {cpus[0]:.3f} | {mw * 1e3:.2f} | {walls[0] / mw:.0f}x |"
        if old:
            same = np.array_equal(fns[0]().view(np.uint32), fns[1]().view(np.uint32))
            row += f" {walls[1]:.3f} | {cpus[1]:.3f} | {cpus[1] / cpus[0]:.2f}x | {same} |"
        print(row, flush=True)


def block_rows(shape, old, repeat, scale_at=None, nvfp4=False):
    """block_scaled_mm 'blackwell' on MXFP8 (e4m3fn) operands from Gaussian data, vs np.matmul float32;
    with ``scale_at``, a model of ``step_row(32, 13, 14)`` (narrow alignment: the wide route's dense step);
    with ``nvfp4``, 'fp32' on NVFP4 operands."""
    M, N, K = shape
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    quantize = (lambda m, v, **kw: m.quantize_nvfp4(v, **kw)) if nvfp4 else (  # noqa: E731
        lambda m, v, **kw: m.quantize_mx(v, "e4m3fn", **kw))
    a, b = quantize(fp8emu, x), quantize(fp8emu, y, axis=0)
    acc = lambda m: m.gemm.GemmModel("dense", "instruction", m.gemm.step_row(32, 13, 14),  # noqa: E731
                                     m.gemm.Policy(scale_at=scale_at)) if scale_at else ("fp32" if nvfp4 else "blackwell")
    fns = [lambda: fp8emu.block_scaled_mm(a, b, accumulator=acc(fp8emu))]
    if old:
        oa, ob = quantize(old, x), quantize(old, y, axis=0)
        fns.append(lambda: old.block_scaled_mm(oa, ob, accumulator=acc(old)))
    (mw,), (mc,) = interleaved([lambda: x @ y], 20)
    walls, cpus = interleaved(fns, repeat)
    name = f"step_row(32, 13, 14) scale_at={scale_at!r}" if scale_at else ("fp32" if nvfp4 else "blackwell")
    row = (f"| {name} {'NVFP4' if nvfp4 else 'MXFP8'} {M}x{N}x{K} | np.matmul {mw * 1e3:.2f} ms wall, {mc * 1e3:.2f} ms CPU | "
           f"{walls[0]:.3f} s | {walls[0] / mw:.0f}x wall, {cpus[0] / mc:.0f}x CPU |")
    if old:
        same = np.array_equal(fns[0]().view(np.uint32), fns[1]().view(np.uint32))
        row += (f" base {walls[1]:.3f} s ({walls[1] / mw:.0f}x wall, {cpus[1] / mc:.0f}x CPU) | "
                f"speed-up {walls[1] / walls[0]:.2f}x wall, {cpus[1] / cpus[0]:.2f}x CPU | {same} |")
    print(row, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
