"""Record Transformer Engine's pure-PyTorch FP8 reference quantizers (current scaling, block, MXFP8).

Runs TE's own reference code as written, on CPU PyTorch, from a TE source
checkout given on the command line (TE's code is only read from there, never
copied; TE's compiled extension is not needed):

``current``
    ``CurrentScalingQuantizerRef`` of
    ``transformer_engine/pytorch/custom_recipes/reference_current_scaling.py``
    (the ``CustomRecipe`` reference of ``Float8CurrentScaling``), loaded with
    the framework stand-ins of ``record_te_vectors.load_reference``.
``block``
    ``BlockwiseQuantizerReference`` of
    ``tests/pytorch/references/blockwise_quantizer_reference.py`` (TE's
    reference for ``Float8BlockScaling``: 1x128 and 128x128 tiles, with and
    without power-of-two scales), ``munge_scale_shapes=False``.
``mxfp8``
    TE's MXFP8 reference functions of ``tests/pytorch/test_mxfp8_2d_quantize.py``
    (``_float_to_e8m0``, ``_e8m0_to_scale_inv``, ``_mxfp8_2d_quantize_reference``),
    taken from the file's syntax tree without its TE imports.  TE has no
    pure-PyTorch 1-D (1x32) MXFP8 reference at the recorded commit; the 1-D
    cases apply TE's ``_float_to_e8m0`` / ``_e8m0_to_scale_inv`` to 1x32
    blocks with the same ``x / scale_inv`` cast as its 2-D reference
    (:func:`mxfp8_1d`, the only glue written here).

Inputs are generated with NumPy from :func:`all_cases` (no stored arrays); for
each case the JSON file ``tests/data/te_reference_quantizers.json`` keeps the
first 24 hex digits of the SHA-256 of every output (FP8 code bytes, float32
``scale_inv`` or E8M0 scale bytes), plus, for inputs with Inf/NaN, the digests
of the outputs with the blocks that hold a non-finite value zeroed
(``*_finite``: where the reference's and the kernels' non-finite handling
part, see ``tests/test_te_reference_quantizers.py``).

Usage::

    python tools/record_te_reference_quantizers.py /path/to/TransformerEngine [--commit SHA] [--out FILE]

Needs ``torch`` (the CPU wheel is enough).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import subprocess
import sys
import types
from pathlib import Path

import ml_dtypes
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import record_te_vectors  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
OUT = ROOT / "tests" / "data" / "te_reference_quantizers.json"
MXFP8_NAMES = ("MXFP8_BLOCK_SIZE", "FP8_E4M3_MAX", "_float_to_e8m0", "_e8m0_to_scale_inv",
               "_mxfp8_2d_quantize_reference")


# ----------------------------------------------------------------------------- inputs
KINDS = ("normal", "wide", "zeros", "tiny", "pow2_edges", "inf", "nan", "below_eps")


def make_input(kind, shape, dtype, seed=0):
    """A deterministic float32 or bfloat16 input of one adversarial ``kind``."""
    rng = np.random.default_rng([seed, KINDS.index(kind)])
    x = rng.standard_normal(shape, dtype=np.float32)
    if kind == "wide":                 # magnitudes over ~60 binades, so blocks get very different scales
        x = (x * np.exp2(rng.integers(-30, 30, shape))).astype(np.float32)
    elif kind == "zeros":              # all zero except one nonzero row, so some blocks are all zero
        x[:] = 0
        x[0, : shape[1] // 3] = 1.5
    elif kind == "tiny":               # subnormal-range amax: 448/amax overflows float32 in places
        x = (x * np.float32(1e-39 if dtype == F32 else 1e-38)).astype(np.float32)
        x[-1] *= np.float32(1e-6)
    elif kind == "pow2_edges":         # each row's amax exactly at, or one ulp around, fp8_max / 2**k
        x = (x * np.float32(0.01)).astype(np.float32)
        edges = amax_edges()
        rows = np.arange(shape[0])
        x[rows, (rows * 37) % shape[1]] = edges[(rows + seed) % edges.size] * np.where(rows % 2, -1, 1)
    elif kind in ("inf", "nan"):
        bad = np.float32(np.inf if kind == "inf" else np.nan)
        x[0, 1], x[-1, -1] = bad, -bad if kind == "inf" else bad
    elif kind == "below_eps":          # amax under eps (the cases with eps use 1e-3)
        x = (x * np.float32(1e-5)).astype(np.float32)
    return x.astype(dtype)


def amax_sweep(dtype):
    """(144, 4, 16): slice i holds small normals and one element equal to ``amax_edges()[i]``."""
    rng = np.random.default_rng(144)
    edges = amax_edges()
    x = (rng.standard_normal((edges.size, 4, 16), dtype=np.float32) * np.float32(0.01)).astype(np.float32)
    x[np.arange(edges.size), np.arange(edges.size) % 4, np.arange(edges.size) % 16] = edges
    return x.astype(dtype)


def amax_edges():
    """``fp8_max * 2**k`` for E4M3 and E5M2, k in [-12, 12), each with its float32 neighbours (144 values)."""
    base = np.concatenate([np.float32(m) * np.exp2(np.arange(-12, 12, dtype=np.float32)) for m in (448, 57344)])
    return np.concatenate([base, np.nextafter(base, np.float32(0)), np.nextafter(base, np.float32(np.inf))])


def nonfinite_grid(x, block):
    """Boolean per-block grid: blocks (zero-padded at the ends) that hold an Inf or NaN."""
    bad = ~np.isfinite(np.asarray(x, np.float32))
    if block is None:
        return np.array([bad.any()])
    b0, b1 = block
    m, n = bad.shape
    pm, pn = -(-m // b0) * b0, -(-n // b1) * b1
    padded = np.zeros((pm, pn), bool)
    padded[:m, :n] = bad
    return padded.reshape(pm // b0, b0, pn // b1, b1).any(axis=(1, 3))


def nonfinite_blocks(x, block):
    """Boolean mask of x's shape: elements whose block holds an Inf or NaN."""
    grid = nonfinite_grid(x, block)
    if block is None:
        return np.full(np.shape(x), grid[0])
    return np.repeat(np.repeat(grid, block[0], 0), block[1], 1)[: np.shape(x)[0], : np.shape(x)[1]]


def all_cases():
    """(id, recipe, input, options) for every recorded case."""
    for dtype in (F32, BF16):
        dn = "f32" if dtype == F32 else "bf16"
        for kind in KINDS:
            for fmt in ("e4m3fn", "e5m2"):
                for pow2 in (False, True):
                    eps = 1e-3 if kind == "below_eps" else 0.0
                    yield (f"current/{kind}-{dn}-{fmt}-{'pow2' if pow2 else 'fp32'}", "current",
                           make_input(kind, (48, 80), dtype), dict(fmt=fmt, pow2=pow2, eps=eps))
                    for tile, shapes in (((1, 128), ((4, 256), (130, 200))), ((128, 128), ((256, 256), (130, 300)))):
                        for shape in shapes:
                            yield (f"block{tile[0]}x{tile[1]}/{kind}-{shape[0]}x{shape[1]}-{dn}-{fmt}-"
                                   f"{'pow2' if pow2 else 'fp32'}", "block", make_input(kind, shape, dtype),
                                   dict(fmt=fmt, pow2=pow2, eps=eps, tile=tile))
        for fmt in ("e4m3fn", "e5m2"):     # one small tensor per amax edge: the tensor's amax is the edge
            for pow2 in (False, True):
                yield (f"current-sweep/{dn}-{fmt}-{'pow2' if pow2 else 'fp32'}", "current_sweep",
                       amax_sweep(dtype), dict(fmt=fmt, pow2=pow2, eps=0.0))
        for kind in KINDS:
            for tile, shape in (((1, 32), (64, 96)), ((32, 32), (64, 96)), ((32, 32), (128, 160))):
                if kind == "below_eps":
                    continue                   # MXFP8 has no eps
                yield (f"mxfp8-{tile[0]}x{tile[1]}/{kind}-{shape[0]}x{shape[1]}-{dn}", "mxfp8",
                       make_input(kind, shape, dtype), dict(tile=tile))


# ----------------------------------------------------------------------------- loading TE
def load_current(checkout):
    """TE's ``reference_current_scaling`` module (stand-ins as for the NVFP4 reference)."""
    recipes = Path(checkout) / "transformer_engine" / "pytorch" / "custom_recipes"
    if not (recipes / "reference_current_scaling.py").is_file():
        raise FileNotFoundError(f"{recipes / 'reference_current_scaling.py'} not found: "
                                "not a TransformerEngine checkout")
    record_te_vectors.load_reference(checkout)          # installs the stand-ins, loads gemm and utils
    return _load("transformer_engine.pytorch.custom_recipes.reference_current_scaling",
                 recipes / "reference_current_scaling.py")


def load_block(checkout):
    """TE's ``references.blockwise_quantizer_reference`` module (imports only torch)."""
    refs = Path(checkout) / "tests" / "pytorch" / "references"
    if not (refs / "blockwise_quantizer_reference.py").is_file():
        raise FileNotFoundError(f"{refs / 'blockwise_quantizer_reference.py'} not found: "
                                "not a TransformerEngine checkout")
    pkg = types.ModuleType("references")
    pkg.__path__ = [str(refs)]
    sys.modules["references"] = pkg
    _load("references.quantize_scale_calc", refs / "quantize_scale_calc.py")
    return _load("references.blockwise_quantizer_reference", refs / "blockwise_quantizer_reference.py")


def load_mxfp8(checkout):
    """TE's MXFP8 reference functions, executed from the test file's syntax tree (no TE imports)."""
    import torch
    path = Path(checkout) / "tests" / "pytorch" / "test_mxfp8_2d_quantize.py"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: not a TransformerEngine checkout")
    tree = ast.parse(path.read_text())
    keep = [node for node in tree.body
            if (isinstance(node, ast.FunctionDef) and node.name in MXFP8_NAMES)
            or (isinstance(node, ast.Assign) and any(getattr(t, "id", None) in MXFP8_NAMES for t in node.targets))]
    ns = {"torch": torch}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(path), "exec"), ns)  # noqa: S102 - TE's own code
    missing = [n for n in MXFP8_NAMES if n not in ns]
    if missing:
        raise FileNotFoundError(f"{path} lacks {', '.join(missing)}: a TE version this tool does not know")
    return types.SimpleNamespace(**{n: ns[n] for n in MXFP8_NAMES})


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def load_all(checkout):
    return {"current": load_current(checkout), "block": load_block(checkout), "mxfp8": load_mxfp8(checkout)}


# ----------------------------------------------------------------------------- running TE
def _torch(x):
    import torch
    arr = np.ascontiguousarray(x)
    if arr.dtype == BF16:
        return torch.from_numpy(arr.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(arr.astype(np.float32))


def _u8(t):
    import torch
    return t.contiguous().view(torch.uint8).numpy().copy()


def _f32(t):
    import torch
    return t.to(torch.float32).contiguous().numpy().copy()


def mxfp8_1d(ref, x):
    """1x32 MXFP8 along the last axis with TE's ``_float_to_e8m0`` and its 2-D reference's cast."""
    import torch
    rows, cols = x.shape
    blocks = x.to(torch.float32).view(rows, cols // 32, 32)
    e8m0 = ref._float_to_e8m0(torch.amax(torch.abs(blocks), dim=-1))
    data = (blocks / ref._e8m0_to_scale_inv(e8m0)[:, :, None]).to(torch.float8_e4m3fn)
    return data.reshape(rows, cols), e8m0


def run_reference(refs, recipe, x, opts):
    """TE's reference on a NumPy input: {name: uint8 codes or float32 scale_inv}."""
    import torch
    t = _torch(x)
    if recipe == "mxfp8":
        ref = refs["mxfp8"]
        if opts["tile"] == (32, 32):
            data, row_scale, _ = ref._mxfp8_2d_quantize_reference(t)
            return {"codes": _u8(data), "scale_codes": _u8(row_scale[::32])}
        data, e8m0 = mxfp8_1d(ref, t)
        data_t, e8m0_t = mxfp8_1d(ref, t.t().contiguous())
        return {"codes": _u8(data), "scale_codes": _u8(e8m0), "codes_t": _u8(data_t), "scale_codes_t": _u8(e8m0_t)}
    if recipe == "current_sweep":        # each slice quantized on its own; codes and scales stacked
        runs = [run_reference(refs, "current", x[i], opts) for i in range(x.shape[0])]
        return {"codes": np.stack([r["codes"] for r in runs]),
                "scale_inv": np.concatenate([r["scale_inv"] for r in runs])}
    qdtype = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[opts["fmt"]]
    if recipe == "current":
        q = refs["current"].CurrentScalingQuantizerRef(dtype=qdtype, rowwise=True, columnwise=True,
                                                       pow_2_scales=opts["pow2"], eps=opts["eps"])
        r = q.quantize(t)
    else:
        r = refs["block"].BlockwiseQuantizerReference().quantize(
            t, qdtype, return_transpose=True, eps=opts["eps"], pow_2_scales=opts["pow2"],
            quant_tile_shape=opts["tile"], munge_scale_shapes=False)
    return {"codes": _u8(r.data), "scale_inv": _f32(r.scale), "codes_t": _u8(r.data_t), "scale_inv_t": _f32(r.scale_t)}


def digest(a) -> str:
    """First 96 bits of the SHA-256 of the array's bytes (C order)."""
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:24]


def block_of(recipe, opts):
    """The quantization block of a case's row-wise codes (None: the whole tensor)."""
    return None if recipe.startswith("current") else tuple(opts["tile"])


def finite_parts(outputs, x, recipe, opts) -> dict:
    """Each output with the blocks that hold an Inf or NaN zeroed (codes) or set to 0 (scales)."""
    blk = block_of(recipe, opts)
    xt = np.asarray(x, np.float32).T
    out = {}
    for name, v in outputs.items():
        src = xt if name.endswith("_t") else np.asarray(x, np.float32)
        if name.startswith("codes"):
            mask = nonfinite_blocks(src, blk)
        elif blk is None:
            mask = np.full(np.shape(v), nonfinite_grid(src, None)[0])
        else:
            mask = nonfinite_grid(src, blk)
        out[name + "_finite"] = np.where(mask, 0, v).astype(v.dtype)
    return out


def digests(outputs, x, recipe, opts) -> dict:
    """Digests of every output, plus ``*_finite`` ones (see :func:`finite_parts`) for inputs with Inf/NaN."""
    out = {k: digest(v) for k, v in outputs.items()}
    if not np.isfinite(np.asarray(x, np.float32)).all():
        out.update({k: digest(v) for k, v in finite_parts(outputs, x, recipe, opts).items()})
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout", help="path of a TransformerEngine source checkout")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--commit", help="TE commit to record (default: git rev-parse HEAD of the checkout)")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("error: torch is needed (pip install torch, the CPU wheel is enough)", file=sys.stderr)
        return 2
    try:
        refs = load_all(args.checkout)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    commit = args.commit
    if not commit:
        try:
            commit = subprocess.run(["git", "-C", args.checkout, "rev-parse", "HEAD"], capture_output=True,
                                    text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            commit = "unknown"
    cases = {cid: digests(run_reference(refs, recipe, x, opts), x, recipe, opts)
             for cid, recipe, x, opts in all_cases()}
    data = {"source": "TransformerEngine CurrentScalingQuantizerRef, BlockwiseQuantizerReference and the MXFP8 "
                      "reference of tests/pytorch/test_mxfp8_2d_quantize.py, run on CPU torch",
            "te_commit": commit, "torch": torch.__version__, "numpy": np.__version__,
            "digest": "first 24 hex digits of the sha256 of each output's bytes (uint8 codes, float32 scale_inv, "
                      "uint8 E8M0); *_finite: the same with the blocks holding Inf/NaN zeroed",
            "cases": cases}
    Path(args.out).write_text(json.dumps(data, indent=0, sort_keys=True) + "\n")
    print(f"wrote {len(cases)} cases to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
