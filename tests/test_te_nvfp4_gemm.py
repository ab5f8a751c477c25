"""Replay of Transformer Engine's ``tests/pytorch/nvfp4/test_nvfp4_gemm_exact.py`` reference GEMM.

TE's test (commit d0067d0da6cb) quantizes ``x`` (M, K) and ``w`` (N, K) with its NVFP4 kernels,
multiplies the codes with its Python reference ``NVFP4QuantizerRef.qgemm`` and compares cuBLAS's
NVFP4 GEMM with that reference *with a tolerance* (``atol = rtol = 8e-3``): the GPU kernel is not
held to bit equality there, so only the reference is replayed exactly.  Here, over TE's shapes,
input/output dtypes, accumulation, layouts (row/column-wise operands), row-scaled x and the 4over6
configurations, skipping what TE skips, fp8emu's

    block_scaled_mm(quantize_nvfp4_te(x_rows, q), quantize_nvfp4_te(w_rows.T, q, axis=0),
                    accumulator="fp32", out_dtype=out_dtype)

(``out_dtype="float32"`` and ``(y + out).astype(out_dtype)`` when accumulating: TE adds ``out``
after alpha in float32, then casts once) is compared byte for byte with ``oracle.qgemm`` fed by the
oracle's own quantizer (``tests/te_nvfp4_oracle.py``, no fp8emu code).  Inputs are NumPy normals
(TE's are torch's, seed 0).  The larger shapes run with ``-m exhaustive``.

One fact depends on the device: TE's test runs the reference on a GPU, where PyTorch's
``div_true_kernel_cuda`` replaces a division by a CPU scalar (the Python float ``6*6*E_x*E_w``) with
a product by its float32 reciprocal -- the alpha TE's cuBLAS path (``compute_nvfp4_per_tensor_scale_kernel``)
and fp8emu use.  CPU PyTorch divides.  ``test_live_reference_gemm`` runs TE's reference as written on
CPU torch (``FP8EMU_TE_CHECKOUT``) against the oracle's CPU variant; there fp8emu's GPU alpha differs
from the CPU run in some elements (about 8% on 128x128x112 cases), every difference through alpha.
"""

from __future__ import annotations

import functools
import itertools
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import te_nvfp4_oracle as oracle  # noqa: E402

from fp8emu import block_scaled_mm  # noqa: E402
from fp8emu.scaling.nvfp4_te import NVFP4Quantizer, quantize_nvfp4_te  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
# test_nvfp4_gemm_versus_reference's (M, K, N)
SHAPES = [(128, 128, 128), (256, 128, 256), (256, 256, 256), (256, 1024, 256), (1024, 1024, 1024),
          (4096, 512, 3072), (112, 128, 96), (304, 640, 304), (1008, 3072, 992), (256, 64, 256), (128, 128, 112)]
SMALL = [(128, 128, 112)]
LAYOUTS = [(False, False), (True, False), (True, True)]          # rowxrow (TN), colxrow (NN), colxcol (NT)
# (use_4over6, nvfp4_e4m3_max, err_mode) after TE's skip of E4M3 max 256 without 4over6
FOUR_OVER_SIX = [(False, 448, "MAE"), (False, 448, "MSE")] + [(True, e, m) for e in (448, 256) for m in ("MAE", "MSE")]


def cases(shapes):
    for (m, k, n), xd, wd, od, acc, (xc, wc), rs, fos in itertools.product(
            shapes, (F32, BF16), (F32, BF16), (BF16, F32), (True, False), LAYOUTS, (False, True), FOUR_OVER_SIX):
        if rs and (acc or xc):     # TE: row-scaled output rescale has no accumulation, needs row-wise x
            continue
        yield m, k, n, xd, wd, od, acc, xc, wc, rs, fos


def _normal(shape, dtype, seed):
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32).astype(dtype)


@functools.lru_cache(maxsize=64)
def _operands(rows, cols, dtype, transposed, row_scaled, fos, seed):
    """One GEMM operand, as TE's test makes it (``transposed``: TE's column-wise usage of a
    (cols, rows) tensor), quantized by the oracle and by fp8emu: ((codes, scale codes, amax),
    fp8emu's ScaledTensor of the (rows, K) row view, and of its (K, rows) transpose)."""
    use, emax, mode = fos
    t = _normal((cols, rows) if transposed else (rows, cols), dtype, seed)
    view = np.ascontiguousarray(t.T if transposed else t)      # what TE's (column-wise) data quantizes
    ref = oracle.quantize(view, row_scaled=row_scaled, use_4over6=use, e4m3_max=emax, err_mode=mode)
    q = NVFP4Quantizer(row_scaled_nvfp4=row_scaled, nvfp4_use_4over6=use, nvfp4_e4m3_max=emax if use else 448,
                       nvfp4_4over6_err_mode=mode)
    as_a = quantize_nvfp4_te(view, q)                                            # (rows, K), blocks along K
    as_b = quantize_nvfp4_te(t if transposed else t.T, q, axis=0) if not row_scaled else None   # (K, rows)
    return ref, as_a, as_b


def run(m, k, n, xd, wd, od, acc, xc, wc, rs, fos, seed=0):
    """(elements compared, differing) of one case."""
    emax = fos[1] if fos[0] else 448
    (qx, sx, ax), a, _ = _operands(m, k, xd, xc, rs, fos, seed)
    (qw, sw, aw), _, b = _operands(n, k, wd, wc, False, fos, seed + 1)
    out = _normal((m, n), od, seed + 2) if acc else None
    ref = oracle.qgemm(qx, sx, ax, emax, qw, sw, aw, emax, od, out)
    y = block_scaled_mm(a, b, accumulator="fp32", out_dtype="float32" if acc else od)
    if acc:
        y = (y + out.astype(np.float32)).astype(od)
    view = np.uint16 if od == BF16 else np.uint32
    return ref.size, int(np.count_nonzero(y.view(view) != ref.view(view)))


_SMALL = list(cases(SMALL))


@pytest.mark.parametrize("shape", SMALL, ids=lambda s: "x".join(map(str, s)))
def test_nvfp4_gemm_versus_reference(shape):
    compared = differing = 0
    for case in _SMALL:
        if case[:3] == shape:
            c, d = run(*case)
            compared, differing = compared + c, differing + d
    assert compared and differing == 0


@pytest.mark.exhaustive
@pytest.mark.parametrize("case", list(cases([s for s in SHAPES if s not in SMALL])), ids=str)
def test_nvfp4_gemm_versus_reference_large(case):
    assert run(*case)[1] == 0


def test_alpha_is_the_gpu_reference_product_not_a_division():
    """On a GPU TE's reference divides by a Python float as a product with the float32 reciprocal
    (as TE's compute_nvfp4_per_tensor_scale_kernel does); a true division rounds differently."""
    from fp8emu.gemm import nvfp4_alpha
    amax = np.random.default_rng(0).random(20000).astype(np.float32) * 10
    for e in (448, 256):
        factor = np.float32(36.0 * e * e)
        prod = nvfp4_alpha(amax, np.float32(3.0), e, e)
        div = (amax * np.float32(3.0)) / factor
        assert np.array_equal(prod, (amax * np.float32(3.0)) * (np.float32(1) / factor))
        assert np.count_nonzero(prod != div)


def test_the_oracle_gemm_sees_each_choice():
    """The replay could fail: on wide-range data another accumulation (the exact sum, rounded once)
    changes the bytes of the reference's result."""
    m, k, n = 64, 512, 64
    g = np.random.default_rng(3)
    x = g.standard_normal((m, k), dtype=np.float32) * np.repeat(10.0 ** g.integers(-3, 4, (m, k // 16)), 16, 1)
    x, w = x.astype(np.float32), g.standard_normal((n, k), dtype=np.float32)
    qx, sx, ax = oracle.quantize(x)
    qw, sw, aw = oracle.quantize(w)
    ref = oracle.qgemm(qx, sx, ax, 448, qw, sw, aw, 448, F32)
    a, b = quantize_nvfp4_te(x), quantize_nvfp4_te(w.T, axis=0)
    assert np.array_equal(block_scaled_mm(a, b, accumulator="fp32").view(np.uint32), ref.view(np.uint32))
    assert np.count_nonzero(block_scaled_mm(a, b, accumulator="exact") != ref)


def _pack(codes):
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)


def live_run(ref, utils, m, k, n, xd, wd, od, acc, xc, wc, rs, fos, seed=0):
    """TE's ``NVFP4QuantizerRef.qgemm`` run as written on CPU torch, fed as TE's test feeds it (codes
    and scales of the quantized operands, the reference quantizer's results for the amaxes).
    Returns (elements, differing from the oracle with the CPU alpha rule, differing from fp8emu)."""
    import torch
    use, emax, mode = fos
    emax = emax if use else 448
    (qx, sx, ax), a, _ = _operands(m, k, xd, xc, rs, fos, seed)
    (qw, sw, aw), _, b = _operands(n, k, wd, wc, False, fos, seed + 1)
    out = _normal((m, n), od, seed + 2) if acc else None

    def tensor(arr):
        arr = np.ascontiguousarray(arr)
        if arr.dtype == BF16:
            return torch.from_numpy(arr.view(np.int16).copy()).view(torch.bfloat16)
        return torch.from_numpy(arr.copy())

    def ref_quantizer(row_scaled):
        return ref.NVFP4QuantizerRef(dtype=utils.Fp4Formats.E2M1, rowwise=True, columnwise=not row_scaled,
                                     pow_2_scales=False, eps=0.0, quant_tile_shape=(1, 16), row_scaled_nvfp4=row_scaled,
                                     nvfp4_use_4over6=use, nvfp4_e4m3_max=emax, nvfp4_4over6_err_mode=mode)
    xrows = _normal((k, m) if xc else (m, k), xd, seed)
    wrows = _normal((k, n) if wc else (n, k), wd, seed + 1)
    xrows, wrows = (xrows.T if xc else xrows), (wrows.T if wc else wrows)
    qxr = ref_quantizer(rs)
    tod = torch.bfloat16 if od == BF16 else torch.float32
    y = qxr.qgemm(qx=torch.from_numpy(_pack(qx)), qw=torch.from_numpy(_pack(qw)), m_params=None, out_dtype=tod,
                  sx=torch.from_numpy(sx.copy()).view(torch.float8_e4m3fn),
                  sw=torch.from_numpy(sw.copy()).view(torch.float8_e4m3fn), bias=None,
                  out=tensor(out) if acc else None, accumulate=acc, gemm_type=None,
                  qresult_x=qxr.quantize(tensor(xrows)), qresult_w=ref_quantizer(False).quantize(tensor(wrows)))
    view = np.uint16 if od == BF16 else np.uint32
    theirs = y.view(torch.int16 if od == BF16 else torch.int32).numpy().view(view)
    cpu = oracle.qgemm(qx, sx, ax, emax, qw, sw, aw, emax, od, out, alpha_rule="cpu")
    ours = block_scaled_mm(a, b, accumulator="fp32", out_dtype="float32" if acc else od)
    if acc:
        ours = (ours + out.astype(np.float32)).astype(od)
    return theirs.size, int(np.count_nonzero(theirs != cpu.view(view))), int(np.count_nonzero(theirs != ours.view(view)))


def test_live_reference_gemm():
    """TE's reference GEMM itself (CPU torch, FP8EMU_TE_CHECKOUT) equals the oracle's CPU variant."""
    import os
    path = os.environ.get("FP8EMU_TE_CHECKOUT")
    if not path:
        pytest.skip("set FP8EMU_TE_CHECKOUT to a TransformerEngine checkout to run TE's reference live")
    pytest.importorskip("torch")
    sys.path.insert(0, str(Path(__file__).parent.parent / "tools"))
    import record_te_vectors as R
    ref, utils = R.load_reference(path)
    compared = differing = 0
    for case in _SMALL[::3]:
        c, d, _ = live_run(ref, utils, *case)
        compared, differing = compared + c, differing + d
    assert compared and differing == 0


def table(shapes=SHAPES[:5] + SHAPES[6:8] + SHAPES[9:]):
    """(cases, elements compared, differing) over the replay (the default: all but the two largest)."""
    total = [0, 0, 0]
    for case in cases(shapes):
        c, d = run(*case)
        total = [total[0] + 1, total[1] + c, total[2] + d]
    return total


if __name__ == "__main__":
    print("cases %d, elements compared %d, differing %d" % tuple(table()))
