"""Replay of Transformer Engine's MXFP8 2-D exact test against an independent oracle.

TE's ``tests/pytorch/test_mxfp8_2d_quantize.py`` (commit d0067d0da6cb01811b8072a7d304f0e00344ce2b)
compares its ``MXFP8Quantizer(with_2d_quantization=True)`` kernel byte for byte with a PyTorch
reference: one E8M0 scale per 32x32 tile from ``fl32(amax / 448)`` (its exponent field, plus one
when the mantissa is non-zero, except at exponent field 254 and for subnormals up to half the
smallest normal), elements ``e4m3fn(fl32(x / 2**(e - 127)))``.  The oracle below is written from
those facts (NumPy float32 and ml_dtypes' RNE cast, no fp8emu code); fp8emu's call is
``quantize_mx(x, "e4m3fn", block=(32, 32), scale_rule="rceil")``.  Column-wise data and scales of
a 2-D tile are the same bytes, so one direction is compared.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fp8emu

BF16 = np.dtype(ml_dtypes.bfloat16)
SHAPES = [(64, 64), (128, 128), (256, 1024), (1024, 256), (256, 288), (320, 320), (352, 256), (2048, 1024)]


def e8m0_like_te_test(amax):
    val = (amax.astype(np.float32) / np.float32(448)).astype(np.float32)
    bits = val.view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.int32)
    mantissa = bits & 0x7FFFFF
    up = (mantissa > 0) & (exponent != 254) & ~((exponent == 0) & (mantissa <= 0x400000))
    exponent = exponent + up
    return np.where(val == 0, 0, exponent).astype(np.uint8)


def oracle_2d(x):
    m, n = x.shape
    xv = x.astype(np.float32)
    tiles = xv.reshape(m // 32, 32, n // 32, 32)
    amax = np.abs(tiles).max(axis=(1, 3))
    codes = e8m0_like_te_test(amax)
    inv = np.ldexp(np.float32(1), codes.astype(np.int32) - 127).astype(np.float32)
    scaled = (tiles / inv[:, None, :, None]).astype(np.float32)
    data = scaled.astype(ml_dtypes.float8_e4m3fn).view(np.uint8).reshape(m, n)
    return data, codes


def compare(x):
    data, codes = oracle_2d(x)
    t = fp8emu.quantize_mx(x, "e4m3fn", block=(32, 32), scale_rule="rceil")
    return data.size + codes.size, int(np.count_nonzero(t.codes != data) + np.count_nonzero(t.scale_codes != codes))


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), BF16], ids=str)
@pytest.mark.parametrize("shape", SHAPES)
def test_mxfp8_2d_quantize_matches_te_reference(shape, dtype):
    x = np.random.default_rng(9012).standard_normal(shape, dtype=np.float32).astype(dtype)
    compared, differing = compare(x)
    assert compared and differing == 0


def test_mxfp8_2d_scales_match_known_block_amax():
    """TE's hand-built 2x2-tile matrix: tile amax 448 * 2**e gives the scale byte e + 127."""
    exps = np.array([[-2, -1], [0, 1]])
    x = np.zeros((64, 64), np.float32)
    for i in range(2):
        for j in range(2):
            amax = 448.0 * 2.0 ** exps[i, j]
            x[32 * i:32 * i + 32, 32 * j:32 * j + 32] = amax * 0.5
            x[32 * i, 32 * j] = amax
    t = fp8emu.quantize_mx(x, "e4m3fn", block=(32, 32), scale_rule="rceil")
    assert t.scale_codes.tolist() == (exps + 127).tolist()
    assert compare(x)[1] == 0


def table():
    c = d = 0
    for shape in SHAPES:
        for dtype in (np.dtype(np.float32), BF16):
            x = np.random.default_rng(9012).standard_normal(shape, dtype=np.float32).astype(dtype)
            cc, dd = compare(x)
            c, d = c + cc, d + dd
    return c, d


if __name__ == "__main__":
    print("MXFP8 2D (32x32, rceil): compared %d, differing %d" % table())


def test_the_oracle_tells_the_scale_rules_apart():
    x = np.random.default_rng(9012).standard_normal((128, 128), dtype=np.float32)
    data, codes = oracle_2d(x)
    other = fp8emu.quantize_mx(x, "e4m3fn", block=(32, 32), scale_rule="floor")
    assert np.count_nonzero(other.scale_codes != codes) > 0
