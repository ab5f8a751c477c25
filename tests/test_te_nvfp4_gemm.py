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


def table(shapes=SHAPES[:5] + SHAPES[6:8] + SHAPES[9:]):
    """(cases, elements compared, differing) over the replay (the default: all but the two largest)."""
    total = [0, 0, 0]
    for case in cases(shapes):
        c, d = run(*case)
        total = [total[0] + 1, total[1] + c, total[2] + d]
    return total


if __name__ == "__main__":
    print("cases %d, elements compared %d, differing %d" % tuple(table()))
