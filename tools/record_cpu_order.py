"""Survey the float32 GEMM summation orders torch's CPU ``mm`` takes on this machine (needs torch).

Reveals (``fp8emu.gemm.cpu_order.reveal_here``) the order of every shape of a grid, 1 and 2 torch threads,
and writes one JSON file: the machine's facts (CPU, kernel flags, MKL settings, torch and BLAS versions),
then per shape and thread count the order found (``describe()`` text), the fraction of outputs it
explains and whether the recorded model ``mkl-2024.2-avx512`` gives the same order.  Run it on each CPU
family (and MKL setting) to see what a recorded model must say there:

    python tools/record_cpu_order.py --out docs/data/cpu-order/NAME.json
    MKL_ENABLE_INSTRUCTIONS=AVX2 python tools/record_cpu_order.py --out docs/data/cpu-order/NAME-avx2.json
"""
import argparse
import json
import platform
import sys

import numpy as np
import torch

from fp8emu.gemm import cpu_order

GRID = [(m, k, n) for m, n in ((2, 2), (3, 5), (8, 8), (13, 16), (32, 32), (64, 64), (128, 96))
        for k in (16, 64, 208, 384, 385, 512, 768, 1000, 1024, 2048, 4096)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    rec = cpu_order.RECORDED["mkl-2024.2-avx512"]
    rows = []
    for t in (int(v) for v in args.threads.split(",")):
        for M, K, N in GRID:
            order, facts = cpu_order.reveal_here(M, K, N, threads=t)
            same = order.uniform and order.trees[0] == rec.order(M, K, N).trees[0]
            rows.append({"M": M, "K": K, "N": N, "threads": t, "explained": facts["explained"],
                         "classes": len(order.trees), "same_as_mkl_2024_2_avx512": bool(same),
                         "order": order.describe()})
            print(f"{M}x{K}x{N} t{t}: {'=' if same else '!'} {order.describe()[:100]}", file=sys.stderr)
    info = cpu_order.machine()
    doc = {"machine": info, "library": cpu_order._library(torch), "python": platform.python_version(),
           "numpy": np.__version__, "layout": "NN", "recorded_by": "tools/record_cpu_order.py", "gemms": rows}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    same = sum(r["same_as_mkl_2024_2_avx512"] for r in rows)
    print(f"{len(rows)} GEMMs; {same} in the recorded model's order; "
          f"{sum(r['explained'] == 1.0 for r in rows)} fully explained")


if __name__ == "__main__":
    main()
