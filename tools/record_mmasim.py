"""Record MMA-Sim's outputs on the random MMA cases of tests/mmasim_cases.py.

Run in a venv holding ``mmasim`` (2.1.1) and the CPU build of torch (never the CUDA one)::

    python -m venv /tmp/venv-mmasim
    /tmp/venv-mmasim/bin/pip install torch==2.13.0          # the CPU wheel
    /tmp/venv-mmasim/bin/pip install --no-deps mmasim==2.1.1 ninja setuptools numpy
    /tmp/venv-mmasim/bin/python tools/record_mmasim.py [--n 200000] [--seed 1] [PRESET ...]

For every preset it writes ``tests/data/mmasim/<preset>.npz``: the seed and case count (the
inputs are regenerated from them by tests/mmasim_cases.py), MMA-Sim's version, the first
``--keep`` outputs in full (as bits) and a SHA-256 digest of every ``--chunk`` outputs, so the
files stay small while every output is checked.  ``--check`` instead compares MMA-Sim with
fp8emu live on a fresh seed (fp8emu must be importable, e.g. ``pip install -e .`` in that venv
or ``PYTHONPATH=.``).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import mmasim_cases  # noqa: E402

OUT = ROOT / "tests" / "data" / "mmasim"
PTX = {"e4m3fn": "e4m3", "e5m2": "e5m2", "e3m2fn": "e3m2", "e2m3fn": "e2m3", "e2m1fn": "e2m1",
       "e4m3fnuz": "fp8", "e5m2fnuz": "bf8", "float16": "f16", "bfloat16": "bf16", "tf32": "tf32"}


def operator(preset, g):
    """The MMA-Sim object whose ``dpa`` computes the preset's dot products for group ``g``."""
    from mmasim import amd, nv_ptx
    a, b = PTX[g["a_format"]], PTX[g["b_format"]]
    d = "f16" if preset.endswith("-f16") else "f32"
    base = preset.removesuffix("-f16")
    if base == "ada-mma":
        return nv_ptx.MMA("Ada Lovelace", f"m16n8k32.{d}.{a}.{b}.{d}")
    if base == "hopper-wgmma":
        return nv_ptx.WGMMA("Hopper", f"m64n8k32.{d}.{a}.{b}")
    if base == "blackwell-tcgen05-f8f6f4":
        return nv_ptx.TCGen05MMA("Blackwell", f"m128n8k32.kind::f8f6f4.{d}.{a}.{b}")
    if base == "blackwell-tcgen05-mxf8f6f4":
        return nv_ptx.TCGen05MMABlockScale("Blackwell", f"m128n8k32.kind::mxf8f6f4.block32.f32.{a}.{b}.ue8m0")
    if base == "blackwell-tcgen05-mxf4nvf4":
        return nv_ptx.TCGen05MMABlockScale(
            "Blackwell", f"m128n8k64.kind::mxf4nvf4.block{g['block']}.f32.e2m1.e2m1.{g['scale_format']}")
    if base == "rtx-blackwell-mma":
        return nv_ptx.MMA("RTX Blackwell", f"m16n8k32.kind::f8f6f4.{d}.{a}.{b}.{d}")
    if base == "rtx-blackwell-mma-mxf8f6f4":
        return nv_ptx.MMABlockScale("RTX Blackwell", f"m16n8k32.kind::mxf8f6f4.block32.f32.{a}.{b}.f32.ue8m0")
    if base == "rtx-blackwell-mma-mxf4nvf4":
        return nv_ptx.MMABlockScale(
            "RTX Blackwell", f"m16n8k64.kind::mxf4nvf4.block{g['block']}.f32.e2m1.e2m1.f32.{g['scale_format']}")
    if base == "cdna3-mfma-fp8":
        return amd.MFMA("CDNA3", f"f32_16x16x32_{a}_{b}")
    gen, _, kind = base.partition("-mma-")
    if kind in ("f16in", "bf16in", "tf32in"):
        arch = {"volta": "Volta", "ampere": "Ampere", "ada": "Ada Lovelace", "hopper": "Hopper",
                "blackwell": "Blackwell"}[gen]
        t = kind.removesuffix("in")
        k = g["a"].shape[1]
        shape = "m8n8k4" if gen == "volta" else f"m16n8k{k}"
        return nv_ptx.MMA(arch, f"{shape}.{d}.{t}.{t}.{d}")
    raise SystemExit(f"no MMA-Sim instruction for preset {preset!r}")


def _elements(torch, codes, fmt, packed):
    if fmt == "float16":
        return torch.from_numpy(np.ascontiguousarray(codes).view(np.float16))
    if fmt == "bfloat16":
        return torch.from_numpy(np.ascontiguousarray(codes).view(np.int16)).view(torch.bfloat16)
    if fmt == "tf32":
        return torch.from_numpy(np.ascontiguousarray(codes).view(np.float32))
    if fmt in ("e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz"):
        dt = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "e4m3fnuz": torch.float8_e4m3fnuz,
              "e5m2fnuz": torch.float8_e5m2fnuz}[fmt]
        return torch.from_numpy(np.ascontiguousarray(codes)).view(dt)
    if packed:        # kind::mxf4 / mxf4nvf4: two E2M1 per byte, element 2i in the high nibble (MMA-Sim)
        return torch.from_numpy(np.ascontiguousarray((codes[:, 0::2] << 4) | codes[:, 1::2]))
    if fmt == "e2m1fn":  # kind::f8f6f4: one FP4 per byte in bits 5:2
        return torch.from_numpy(np.ascontiguousarray(codes << 2))
    return torch.from_numpy(np.ascontiguousarray(codes))   # FP6 in bits 5:0


def run_mmasim(preset, groups):
    """MMA-Sim's outputs (as bits: uint32 or uint16) of every case, groups concatenated."""
    import torch
    outs = []
    for g in groups:
        op = operator(preset, g)
        packed = preset.endswith("mxf4nvf4")
        a = _elements(torch, g["a"], g["a_format"], packed)
        b = _elements(torch, g["b"], g["b_format"], packed)
        c = torch.from_numpy(np.ascontiguousarray(g["c"]))
        with torch.no_grad():
            if "a_scales" in g:
                sdt = torch.float8_e8m0fnu if g["scale_format"] == "ue8m0" else torch.float8_e4m3fn
                al = torch.from_numpy(np.ascontiguousarray(g["a_scales"])).view(sdt)
                be = torch.from_numpy(np.ascontiguousarray(g["b_scales"])).view(sdt)
                d = op.dpa(a, b, c, al, be)
            else:
                d = op.dpa(a, b, c)
        d = d.numpy()
        outs.append(d.view(np.uint32 if d.dtype == np.float32 else np.uint16))
    return np.concatenate(outs)


def digests(bits, chunk):
    return np.array([np.frombuffer(hashlib.sha256(np.ascontiguousarray(bits[i:i + chunk]).tobytes()).digest(),
                                   np.uint8) for i in range(0, len(bits), chunk)], np.uint8).reshape(-1, 32)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("presets", nargs="*", help="presets to record (default: all)")
    ap.add_argument("--n", type=int, default=200_000, help="cases per preset")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", type=int, default=2048, help="outputs stored in full")
    ap.add_argument("--chunk", type=int, default=4096, help="outputs per digest")
    ap.add_argument("--check", action="store_true", help="compare with fp8emu live instead of recording")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    names = args.presets or list(mmasim_cases.PRESET_CASES)
    version = importlib.metadata.version("mmasim")
    OUT.mkdir(parents=True, exist_ok=True)
    for p in names:
        t0 = time.perf_counter()
        groups = mmasim_cases.cases(p, args.seed, args.n)
        bits = run_mmasim(p, groups)
        dt = time.perf_counter() - t0
        if args.check:
            sys.path.insert(0, str(ROOT))
            from fp8emu.gemm.instructions import dot
            mine = np.concatenate([dot(g["a"], g["b"], g["c"], instruction=p, a_format=g["a_format"],
                                       b_format=g["b_format"], a_scales=g.get("a_scales"),
                                       b_scales=g.get("b_scales"), scale_format=g.get("scale_format"))
                                   for g in groups])
            diff = np.flatnonzero(mine.view(bits.dtype) != bits)
            print(f"{p}: seed {args.seed}, {len(bits)} cases, {len(diff)} differ (first {diff[:8].tolist()})")
            continue
        np.savez_compressed(OUT / f"{p}.npz", seed=np.int64(args.seed), n=np.int64(args.n),
                            mmasim_version=np.array(version), chunk=np.int64(args.chunk),
                            head_bits=bits[:args.keep], digests=digests(bits, args.chunk))
        if not args.quiet:
            print(f"{p}: {len(bits)} cases recorded in {dt:.1f} s -> {OUT / (p + '.npz')}")


if __name__ == "__main__":
    main()
