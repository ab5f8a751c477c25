"""Replay of Transformer Engine's NVFP4 stochastic-rounding tests (statistical, as TE's are).

TE's ``tests/pytorch/nvfp4/test_nvfp4_sr_quantize.py`` (commit d0067d0da6cb) has no bitwise
reference for stochastic rounding: it checks that the mean of 50 stochastically rounded
quantizations is closer to ``x`` (RMSE) than round-to-nearest, row-wise and column-wise (with the
RHT'd transpose), and that every draw lands on one of the two E2M1 neighbours of the exact scaled
value and two draws differ.  The same checks run here on
``quantize_nvfp4_te(x, NVFP4Quantizer(stochastic_rounding=True, ...), rng=...)``, with TE's
input ``randn * 2 - 1`` (smaller shapes than TE's 8192x8192; the larger with ``-m exhaustive``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import te_nvfp4_oracle as oracle  # noqa: E402

from fp8emu.scaling.nvfp4_te import NVFP4Quantizer, quantize_nvfp4_te  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def _rmse(a, b):
    return float(np.sqrt(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)))


def _check_sr_beats_rn(m, n, dtype, use_2d, use_rht, iters=50):
    g = np.random.default_rng(12345)
    x = (g.standard_normal((m, n), dtype=np.float32) * 2 - 1).astype(dtype)
    for axis in (-1, 0):
        rht = use_rht and axis == 0                      # TE transforms the column-wise copy only
        rn = quantize_nvfp4_te(x, NVFP4Quantizer(with_2d_quantization=use_2d, with_rht=rht), axis=axis)
        if rht:     # the column-wise copy approximates the transformed tensor (TE's y = RHT(x.T))
            target = oracle.rht(np.ascontiguousarray(x.T).astype(np.float32), x.dtype).astype(np.float32).T
        else:
            target = x.astype(np.float32)
        q = NVFP4Quantizer(with_2d_quantization=use_2d, with_rht=rht, stochastic_rounding=True)
        acc = np.zeros(x.shape, np.float64)
        for i in range(iters):
            acc += quantize_nvfp4_te(x, q, axis=axis, rng=g).dequantize()
        assert _rmse(acc / iters, target) < _rmse(rn.dequantize(), target)


@pytest.mark.parametrize("use_rht", [False, True], ids=["no_rht", "rht"])
@pytest.mark.parametrize("use_2d", [False, True], ids=["1d", "2d"])
@pytest.mark.parametrize("dtype", [np.dtype(np.float32), BF16], ids=str)
def test_stochastic_rounding_beats_round_to_nearest_on_average(dtype, use_2d, use_rht):
    if dtype != BF16 and use_rht:
        pytest.skip("TE: RHT is only supported with bfloat16")
    _check_sr_beats_rn(128, 256, dtype, use_2d, use_rht)


@pytest.mark.exhaustive
@pytest.mark.parametrize("shape", [(8192, 8192), (8192, 8256)])
def test_stochastic_rounding_beats_round_to_nearest_te_shapes(shape):
    _check_sr_beats_rn(*shape, BF16, False, True)


@pytest.mark.parametrize("use_2d", [False, True], ids=["1d", "2d"])
@pytest.mark.parametrize("dtype", [np.dtype(np.float32), BF16], ids=str)
def test_stochastic_rounding_picks_an_adjacent_fp4_value(dtype, use_2d):
    g = np.random.default_rng(12345)
    x = g.standard_normal((512, 1024), dtype=np.float32).astype(dtype)
    q = NVFP4Quantizer(with_2d_quantization=use_2d, stochastic_rounding=True)
    for axis in (-1, 0):
        a, b = quantize_nvfp4_te(x, q, axis=axis, rng=1), quantize_nvfp4_te(x, q, axis=axis, rng=2)
        assert not np.array_equal(a.codes, b.codes), "two stochastic rounding draws are identical"
        inv = np.repeat(a.scale_inv, 16, axis=axis)
        if use_2d:
            inv = np.repeat(np.repeat(a.scale_inv, 16, axis=0), 16, axis=1)
        exact = np.clip(x.astype(np.float64) / inv.astype(np.float64), -6, 6)
        mag = np.abs(exact)
        step = np.where(mag >= 4, 2.0, np.where(mag >= 2, 1.0, 0.5))
        gap = np.abs(E2M1[a.codes] - exact)
        assert np.all(gap <= step * 1.0001), gap.max()
