"""MS-EDEN against element-wise stochastic rounding (and RNE) for NVFP4: error and bias, not time.

Run from the repository root::

    python3 benchmarks/bench_ms_eden.py            # 32 x 2048 elements, 32 draws per method (~2 min)
    python3 benchmarks/bench_ms_eden.py --quick    # 16 x 1024, 16 draws

Two bfloat16 inputs: ``gaussian`` (i.i.d. N(0, 1), what a 128-point random Hadamard rotation makes of
most tensors; Quartet II applies one before MS-EDEN) and ``scaled-blocks`` (N(0, 1) times a log-normal
scale per 16-element block, sigma 1.5: blocks of unequal scale, no rotation).  Per method, over the draws:

* ``rel. MSE``: mean of ||deq - x||^2 / ||x||^2 (RNE has one draw);
* ``proj. bias``: mean of <deq, x> / <x, x> - 1, the bias of the projection an unbiased rounding keeps
  (zero up to sampling noise for an unbiased method; its standard error is printed beside it);
* ``MSE vs SR``: the method's rel. MSE over element-wise SR's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import fp8emu  # noqa: E402


def inputs(rows, cols, seed):
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((rows, cols))
    s = g.reshape(rows, cols // 16, 16) * np.exp(1.5 * rng.standard_normal((rows, cols // 16, 1)))
    bf = lambda a: a.reshape(rows, cols).astype(ml_dtypes.bfloat16).astype(np.float32)  # noqa: E731
    return {"gaussian": bf(g), "scaled-blocks": bf(s)}


def measure(x, method, draws):
    xx = float(np.sum(x.astype(np.float64) ** 2))
    mse, proj = [], []
    for d in range(draws if method != "rne" else 1):
        opts = {} if method == "rne" else {"rounding": method, "rng": 1000 + d}
        deq = fp8emu.quantize_nvfp4(x, **opts).dequantize(np.float64)
        mse.append(float(np.sum((deq - x) ** 2)) / xx)
        proj.append(float(np.sum(deq * x)) / xx - 1)
    se = np.std(proj, ddof=1) / np.sqrt(len(proj)) if len(proj) > 1 else 0.0
    return np.mean(mse), np.mean(proj), se


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    rows, cols, draws = (16, 1024, 16) if args.quick else (32, 2048, 32)
    print(f"fp8emu {fp8emu.__version__}, numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}; "
          f"{rows} x {cols} bfloat16 values, {draws} draws")
    for name, x in inputs(rows, cols, 2601).items():
        res = {m: measure(x, m, draws) for m in ("rne", "stochastic", "ms-eden")}
        sr = res["stochastic"][0]
        print(f"\n{name}:")
        print(f"  {'method':<12} {'rel. MSE':>10} {'proj. bias':>12} {'(s.e.)':>9} {'MSE vs SR':>10}")
        for m, (mse, bias, se) in res.items():
            print(f"  {m:<12} {mse:10.3e} {bias:12.2e} {se:9.1e} {mse / sr:10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
