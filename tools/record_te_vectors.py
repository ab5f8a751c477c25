"""Record Transformer Engine's NVFP4 reference outputs for the replayed exact-test cases.

Runs TE's own reference quantizer (``NVFP4QuantizerRef`` in
``transformer_engine/pytorch/custom_recipes/reference_nvfp4.py``) as written,
on CPU PyTorch, from a TE source checkout given on the command line (TE's
code is only read from there, never copied).  TE's compiled extension is not
needed: the two framework base classes the reference subclasses
(``QuantizedTensorStorage``, ``Quantizer``) and ``tensor.utils.is_custom`` are
replaced by minimal stand-ins; every number comes from the reference's own
torch operations.

For every case of ``tests/test_te_nvfp4_parity.py`` (same inputs, generated
with NumPy) it stores SHA-256 digests of the unpacked E2M1 codes, the E4M3
scale bytes and the float32 amax of each direction, in
``tests/data/te_nvfp4_vectors.json``; ``tests/test_te_nvfp4_vectors.py``
checks fp8emu against them without torch.

Usage::

    python tools/record_te_vectors.py /path/to/TransformerEngine [--commit SHA] [--out FILE] [--quiet]

Needs ``torch`` (the CPU wheel is enough).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import subprocess
import sys
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def load_reference(checkout):
    """Import TE's ``reference_nvfp4`` module from a checkout, with stand-ins for TE's framework classes."""
    checkout = Path(checkout)
    recipes_dir = checkout / "transformer_engine" / "pytorch" / "custom_recipes"
    if not (recipes_dir / "reference_nvfp4.py").is_file():
        raise FileNotFoundError(f"{recipes_dir / 'reference_nvfp4.py'} not found: not a TransformerEngine checkout")

    def module(name, path=None):
        m = types.ModuleType(name)
        if path is not None:
            m.__path__ = [str(path)]
        sys.modules[name] = m
        return m

    module("transformer_engine", checkout / "transformer_engine")
    module("transformer_engine.pytorch", checkout / "transformer_engine" / "pytorch")
    qt = module("transformer_engine.pytorch.quantized_tensor")

    class QuantizedTensorStorage:      # only a base class for the reference's dataclass
        pass

    class Quantizer:                   # the attributes the reference reads
        def __init__(self, *, rowwise, columnwise):
            self.rowwise_usage = rowwise
            self.columnwise_usage = columnwise
            self.internal = False

    qt.QuantizedTensorStorage, qt.Quantizer = QuantizedTensorStorage, Quantizer
    module("transformer_engine.pytorch.tensor", checkout / "transformer_engine" / "pytorch" / "tensor")
    module("transformer_engine.pytorch.tensor.utils").is_custom = lambda *a, **k: True
    module("transformer_engine.pytorch.custom_recipes", recipes_dir)
    out = {}
    for name in ("reference_utils", "gemm", "reference_nvfp4"):
        full = f"transformer_engine.pytorch.custom_recipes.{name}"
        spec = importlib.util.spec_from_file_location(full, recipes_dir / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[full] = mod
        spec.loader.exec_module(mod)
        out[name] = mod
    return out["reference_nvfp4"], out["reference_utils"]


def _digest(a) -> str:
    """First 96 bits of the SHA-256 of the array's bytes (C order)."""
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:24]


def _unpack(packed):
    p = packed.numpy().astype(np.uint8)
    out = np.empty((p.shape[0], p.shape[1] * 2), np.uint8)
    out[:, 0::2] = p & 0x0F
    out[:, 1::2] = p >> 4
    return out


def run_reference(ref, utils, x, *, tile_2d=False, row_scaled=False, use_4over6=False, e4m3_max=448,
                  err_mode="MAE", fast=False, rht=False, sign_mask=True, rowwise=True, columnwise=True):
    """TE's reference on a NumPy float32/bfloat16 2-D array: {direction: (codes, scale bytes, amax)}."""
    import torch
    import ml_dtypes
    arr = np.ascontiguousarray(x)
    if arr.dtype == np.dtype(ml_dtypes.bfloat16):
        t = torch.from_numpy(arr.view(np.int16).copy()).view(torch.bfloat16)
    else:
        t = torch.from_numpy(arr.astype(np.float32))
    q = ref.NVFP4QuantizerRef(dtype=utils.Fp4Formats.E2M1, rowwise=rowwise, columnwise=columnwise,
                              pow_2_scales=False, eps=0.0, quant_tile_shape=(16, 16) if tile_2d else (1, 16),
                              row_scaled_nvfp4=row_scaled, nvfp4_use_4over6=use_4over6, nvfp4_e4m3_max=e4m3_max,
                              nvfp4_4over6_err_mode=err_mode, nvfp4_4over6_err_use_fast_math=fast,
                              with_rht=rht, with_random_sign_mask=sign_mask)
    r = q.quantize(t)
    m, n = arr.shape
    out = {}
    if rowwise:
        out["row"] = (_unpack(r.data)[:m, :n], r.scale.view(torch.uint8).numpy()[:m],
                      r.global_amax_row.to(torch.float32).numpy().reshape(-1))
    if columnwise:
        out["col"] = (_unpack(r.data_t)[:n, :m], r.scale_t.view(torch.uint8).numpy()[:n],
                      r.global_amax_col.to(torch.float32).numpy().reshape(-1))
    return out


def digests(result) -> dict:
    return {d: [_digest(c), _digest(s), _digest(a.astype(np.float32))] for d, (c, s, a) in result.items()}


def all_cases():
    """(id, input array, reference keyword arguments) for every replayed case."""
    import test_te_nvfp4_parity as T
    for case in T.quantize_cases(T.SMALL):
        m, n, dtype, tile_2d, row_scaled, cfg, transpose = case
        kw = dict(tile_2d=tile_2d, row_scaled=row_scaled, use_4over6=cfg.use, e4m3_max=cfg.e4m3_max,
                  err_mode=cfg.mode, fast=cfg.fast, columnwise=transpose)
        yield "tiling/" + T._id(case), T.randn((m, n), dtype, 0), kw
    for kind, m, n, dtype, row_scaled, cfg, transpose in T._input_cases():
        kw = dict(row_scaled=row_scaled, use_4over6=cfg.use, e4m3_max=cfg.e4m3_max, err_mode=cfg.mode,
                  fast=cfg.fast, columnwise=transpose)
        yield (f"inputs/{kind}-{m}x{n}-{dtype}-{'rs' if row_scaled else 't'}-{cfg.id}-{transpose}",
               T.make_input(kind, m, n, dtype), kw)
    for m, n, mode, sign_mask in T.rht_cases(T.RHT_SMALL):
        kw = dict(rht=True, sign_mask=sign_mask, rowwise=mode != "columnwise_only",
                  columnwise=mode != "rowwise_only")
        yield f"rht/{m}x{n}-{mode}-{sign_mask}", T.randn((m, n), T.BF16, 0), kw


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout", help="path of a TransformerEngine source checkout")
    ap.add_argument("--out", default=str(ROOT / "tests" / "data" / "te_nvfp4_vectors.json"))
    ap.add_argument("--commit", help="TE commit to record (default: git rev-parse HEAD of the checkout)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("error: torch is needed (pip install torch, the CPU wheel is enough)", file=sys.stderr)
        return 2
    try:
        ref, utils = load_reference(args.checkout)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    commit = args.commit
    try:
        commit = commit or subprocess.run(["git", "-C", args.checkout, "rev-parse", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    cases = {}
    todo = list(all_cases())
    for i, (cid, x, kw) in enumerate(todo):
        cases[cid] = digests(run_reference(ref, utils, x, **kw))
        if not args.quiet and (i % 50 == 0 or i == len(todo) - 1):
            print(f"[{i + 1}/{len(todo)}] {cid}", flush=True)
    data = {"source": "TransformerEngine NVFP4QuantizerRef (reference_nvfp4.py) run on CPU torch",
            "te_commit": commit, "torch": torch.__version__, "numpy": np.__version__,
            "digest": "first 24 hex digits of the sha256 of (unpacked E2M1 codes uint8, E4M3 scale bytes, float32 amax) per direction",
            "cases": cases}
    Path(args.out).write_text(json.dumps(data, indent=0, sort_keys=True) + "\n")
    if not args.quiet:
        print(f"wrote {len(cases)} cases to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
