"""The scaling recipes' chunked, threaded passes on inputs larger than one chunk.

Every block is quantized independently, so a large input must give exactly the
codes and scales of its row slices quantized one by one (each slice small enough
for the unchunked path, itself checked against Transformer Engine's formulas in
test_scaling.py); per-tensor amax is checked against NumPy's nanmax.
"""

from __future__ import annotations

import numpy as np
import pytest

import fp8emu
from fp8emu.scaling import tensor

ROWS, COLS = 640, 1000                            # 640k elements: several chunks; 1000 % 128 != 0


def _data(cols=COLS, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((ROWS, cols)) * np.exp2(rng.integers(-20, 20, (ROWS, 1)))).astype(np.float32)
    x[3, 5], x[100, 7], x[333, 999 % cols], x[500, :64] = np.nan, np.inf, -np.inf, 0.0
    x[600:608] = np.nan                           # whole rows of NaN
    return x


def _by_slices(fn, x, rows):
    parts = [fn(x[r:r + rows]) for r in range(0, x.shape[0], rows)]
    return (np.concatenate([p.codes for p in parts]), np.concatenate([p.scale for p in parts]),
            np.concatenate([p.scale_inv for p in parts]))


@pytest.mark.parametrize("cols", [COLS, 1024])
@pytest.mark.parametrize("name, fn, rows", [
    ("blockwise 1x128", lambda x: fp8emu.quantize_blockwise(x, "e4m3fn", block=(1, 128)), 32),
    ("blockwise 128x128", lambda x: fp8emu.quantize_blockwise(x, "e5m2", block=(128, 128)), 128),
    ("axiswise", lambda x: fp8emu.quantize_axiswise(x, "e4m3fn", axis=-1), 16),
    ("mx", lambda x: fp8emu.quantize_mx(x, "e4m3fn"), 16),
    ("mx e2m1 even", lambda x: fp8emu.quantize_mx(x, "e2m1fn", scale_rule="even"), 16),
    ("nvfp4", lambda x: fp8emu.quantize_nvfp4(x, global_amax=1e6), 16),
])
def test_chunked_recipes_equal_slice_by_slice(name, fn, rows, cols):
    x = _data(cols)
    assert x[:rows].size <= tensor.CHUNK_ELEMS < x.size
    t = fn(x)
    codes, scale, inv = _by_slices(fn, x, rows)
    np.testing.assert_array_equal(t.codes, codes, err_msg=name)
    np.testing.assert_array_equal(t.scale, scale, err_msg=name)
    np.testing.assert_array_equal(t.scale_inv, inv, err_msg=name)


def test_chunked_tensorwise():
    x = _data()
    amax = np.float32(np.nanmax(np.abs(x)))       # Inf here: scale 1
    t = fp8emu.quantize_tensorwise(x, "e4m3fn")
    assert t.scale == fp8emu.current_scale(amax, "e4m3fn")
    y = np.where(np.isinf(x), 0, x)
    t = fp8emu.quantize_tensorwise(y, "e4m3fn", margin=1)
    s = fp8emu.current_scale(np.nanmax(np.abs(y)), "e4m3fn", margin=1)
    assert t.scale == s
    with np.errstate(over="ignore", invalid="ignore"):
        ref = fp8emu.encode(np.multiply(y, s, dtype=np.float32), "e4m3fn", saturate=True)
    np.testing.assert_array_equal(t.codes, ref)
    assert fp8emu.quantize_tensorwise(np.full(ROWS * COLS, np.nan, np.float32), "e4m3fn").scale == 1


def test_recipes_leave_float32_input_untouched():
    x = _data()
    before = x.copy()
    fp8emu.quantize_blockwise(x, "e4m3fn")
    fp8emu.quantize_mx(x, "e4m3fn")
    fp8emu.quantize_tensorwise(x, "e4m3fn")
    np.testing.assert_array_equal(x, before)
