"""Record torch's CPU ``torch._scaled_mm`` (both paths) into tests/data/torch_cpu/vectors.json.

Each case is stored by its spec (seed, shape, FP8 dtypes, scale kind, bias dtype, out dtype,
scale_result, path); its inputs are rebuilt from the spec by ``tests/torch_cpu_cases.py`` (NumPy
only).  The output is stored as a SHA-256 of its bits (NaNs of float outputs made one quiet NaN)
and 16 sampled (index, bits) pairs, so the file stays small and the default suite proves both
``torch-cpu-*`` accumulator presets without torch.  Expectations come from torch, never fp8emu.

The path is chosen as torch chooses it (``aten/src/ATen/native/Blas.cpp``):
``onednn`` cases use one FP8 dtype, tensor-wise scales and mkldnn on (the tool checks that the CPU
has AMX-INT8, else torch would not take that path); ``emulated`` cases use mixed dtypes (on a CPU
without AMX-FP16), row-wise scales, or mkldnn turned off.

Usage (torch needed)::

    PYTHONPATH=. python tools/record_torch_cpu_scaled_mm.py            # write the vectors
    PYTHONPATH=. python tools/record_torch_cpu_scaled_mm.py --verify   # compare fp8emu live, print counts
    PYTHONPATH=. python tools/record_torch_cpu_scaled_mm.py --verify --threads 2 --scale 4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import torch_cpu_cases as cases  # noqa: E402

OUT = ROOT / "tests" / "data" / "torch_cpu" / "vectors.json"
OUT_NAMES = ["float32", "bfloat16", "float16", "e4m3fn", "e5m2"]


def _specs(scale=1):
    """The recorded sweep: unit, power-of-two and arbitrary scales; K up to 4096; every bias dtype and
    out dtype; FP8 outputs with scale_result."""
    specs, seed = [], 1000
    shapes = {"onednn": [(16, 16, 16), (32, 128, 24), (24, 384, 32), (16, 1024, 16), (8, 4096, 8),
                         (3, 100, 5), (1, 64, 7)],
              "emulated": [(16, 16, 16), (32, 128, 24), (24, 384, 32), (16, 385, 16), (16, 512, 16),
                           (12, 768, 20), (2, 700, 3), (16, 1024, 16), (8, 2048, 8), (6, 4096, 6)]}
    for path, shp in shapes.items():
        pairs = ([("e4m3fn", "e4m3fn"), ("e5m2", "e5m2")] if path == "onednn" else
                 [("e4m3fn", "e5m2"), ("e5m2", "e4m3fn"), ("e4m3fn", "e4m3fn")])
        kinds = ["unit", "pow2", "arbitrary"] + (["rowwise"] if path == "emulated" else [])
        for (M, K, N) in shp:
            for ai, (fa, fb) in enumerate(pairs):
                if path == "emulated" and K > 768 and ai:      # long K: one dtype pair keeps the suite quick
                    continue
                for kind in kinds:
                    for oi, out in enumerate(OUT_NAMES):
                        seed += 1
                        bias = [None, "float32", "bfloat16", "float16"][(seed + ai) % 4]
                        if out == "float32" and bias not in (None, "float32"):
                            bias = "float32"
                        sr = None
                        if out in ("e4m3fn", "e5m2"):
                            sr = [None, 1.0, 0.0625, 0.3, 3.7][seed % 5]
                        mkldnn = not (path == "emulated" and fa == fb)
                        specs.append({"path": path, "seed": seed, "M": M * scale, "K": K, "N": N * scale,
                                      "a": fa, "b": fb, "scales": kind, "bias": bias, "out": out,
                                      "scale_result": sr, "mkldnn": mkldnn, "specials": seed % 7 == 0})
    return specs + _edge_specs()


def _edge_specs():
    """Hand-built outputs at the conversions' edges (K = 16, one product per output)."""
    one = 0x38
    rows = []

    def edge(path, sa, out, sr=None, bias=None, bias_dtype=None, fb="e4m3fn"):
        a = [[one] + [0] * 15] * 2
        b = [[one if fb == "e4m3fn" else 0x3C] * 2] + [[0, 0]] * 15
        rows.append({"path": path, "M": 2, "K": 16, "N": 2, "a": "e4m3fn", "b": fb, "scales": "explicit",
                     "bias": bias_dtype, "out": out, "scale_result": sr, "mkldnn": True,
                     "explicit": {"a": a, "b": b, "sa": sa, "sb": 1.0, "bias": bias}})

    for v in (480.0, 464.0, 30.998046875, -480.0, 448.0, 500.0, 1e6):
        edge("onednn", v, "e4m3fn")
        edge("emulated", v, "e4m3fn", fb="e5m2")
    for v in (57344.0, 60000.0, 61440.0, 1e6):
        edge("onednn", v, "e5m2")
        edge("emulated", v, "e5m2", fb="e5m2")
    edge("onednn", 2.0164597034454346, "e4m3fn", sr=1.89697265625)       # fl(d/sr) vs fl(d*fl(1/sr))
    edge("emulated", 10.0, "e4m3fn", sr=4.0, fb="e5m2")                  # 10 / 4 = 2.5
    edge("onednn", 1.00390625, "bfloat16", bias=[2.0 ** -30] * 2, bias_dtype="float32")   # bf16 tie after fl32
    edge("emulated", 1.00390625, "bfloat16", bias=[2.0 ** -30] * 2, bias_dtype="bfloat16", fb="e5m2")
    return rows


def run_torch(spec, torch):
    a, b, sa, sb, bias, sr = cases.inputs(spec)
    tdt = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    ta = torch.from_numpy(a).view(tdt[spec["a"]])
    tb = torch.from_numpy(np.ascontiguousarray(b.T)).view(tdt[spec["b"]]).t()     # column-major B
    odt = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, **tdt}[spec["out"]]
    kw = {}
    if bias is not None:
        tbias = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[spec["bias"]]
        kw["bias"] = torch.from_numpy(bias.astype(np.float32)).to(tbias)
    if sr is not None:
        kw["scale_result"] = torch.tensor(sr)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="TF32 acceleration")     # printed by flags() itself
        with torch.backends.mkldnn.flags(enabled=spec["mkldnn"]):
            r = torch._scaled_mm(ta, tb, scale_a=torch.from_numpy(np.asarray(sa, np.float32)),
                                 scale_b=torch.from_numpy(np.asarray(sb, np.float32)), out_dtype=odt, **kw)
    if spec["out"] in ("e4m3fn", "e5m2"):
        return r.view(torch.uint8).numpy()
    return r.float().numpy().astype(cases.OUT_FLOAT[spec["out"]][0])


def run_fp8emu(spec):
    import fp8emu
    a, b, sa, sb, bias, sr = cases.inputs(spec)
    return fp8emu.scaled_mm(a, b, a_format=spec["a"], b_format=spec["b"], scale_a=sa, scale_b=sb, bias=bias,
                            out_dtype=spec["out"], scale_result=sr, accumulator="torch-cpu-" + spec["path"])


def _cpu_flags():
    """This CPU's AMX flags (the ones that decide torch's CPU _scaled_mm path)."""
    from fp8emu.gemm.cpu_order import cpu_flags
    return sorted(f for f in cpu_flags() if f.startswith("amx"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verify", action="store_true", help="compare fp8emu live against torch; write nothing")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--scale", type=int, default=1, help="multiply M and N of the sweep (more outputs)")
    args = ap.parse_args(argv)

    import torch
    torch.set_num_threads(args.threads)
    flags = _cpu_flags()
    if "amx_int8" not in flags or "amx_fp16" in flags:
        sys.exit(f"this CPU has AMX flags {flags}: torch's path choice differs from the one recorded "
                 "(AMX-INT8 without AMX-FP16); record on such a CPU")
    specs = _specs(args.scale)
    t0 = time.time()
    total = bad = 0
    per = {}
    rows = []
    for spec in specs:
        got = cases.output_bits(run_torch(spec, torch), spec["out"])
        if args.verify:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                mine = cases.output_bits(run_fp8emu(spec), spec["out"])
            n = int((mine != got).sum())
            in_range = spec["path"] == "onednn" or (spec["M"] >= 2 and spec["N"] >= 2 and (
                spec["K"] <= 768 or (args.threads == 1 and spec["K"] <= 4096)))
            key = (spec["path"], "in range" if in_range else "outside range")
            c = per.setdefault(key, [0, 0])
            c[0] += got.size
            c[1] += n
            total += got.size
            bad += n
            continue
        rng = np.random.default_rng(spec.get("seed", 0))
        idx = rng.choice(got.size, size=min(16, got.size), replace=False)
        rows.append({**spec, "sha256": cases.digest(got),
                     "samples": [[int(i), int(got.reshape(-1)[i])] for i in sorted(idx)]})
    if args.verify:
        for (path, rng_), (n, m) in sorted(per.items()):
            print(f"{path:9s} {rng_:14s} {m} mismatches of {n} outputs")
        print(f"torch {torch.__version__}, {args.threads} thread(s), {len(specs)} cases, {total} outputs, "
              f"{bad} mismatches, {time.time() - t0:.0f} s")
        return
    OUT.parent.mkdir(parents=True, exist_ok=True)
    meta = {"torch": torch.__version__, "threads": args.threads, "cpu_amx_flags": flags,
            "blas": "MKL" if "mkl" in torch.__config__.show().lower() else "other",
            "recorded_by": "tools/record_torch_cpu_scaled_mm.py"}
    OUT.write_text(json.dumps({"meta": meta, "cases": rows}, separators=(",", ":")) + "\n")
    print(f"wrote {len(rows)} cases ({sum(r['M'] * r['N'] for r in rows)} outputs) to {OUT}")


if __name__ == "__main__":
    main()
