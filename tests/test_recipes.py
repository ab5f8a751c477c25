"""Recipe options: MX element rounding, 2-D MX blocks, MXINT8, NVFP4 training-recipe options and variants."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import scipy.linalg

import fp8emu
from fp8emu.scaling import MXINT8, inverse_rht, rht
from fp8emu.scaling.hadamard import TE_WGRAD_SIGNS, rht_matrix


def test_mx_rounding_half_away_matches_microxcaling():
    # microxcaling's own test: 400 -> 416 in MXFP8 E4M3 with its default round="nearest" (half away)
    assert fp8emu.quantize_mx(np.array([400.0]), "e4m3fn", rounding="rna").dequantize().tolist() == [416.0]
    assert fp8emu.quantize_mx(np.array([400.0]), "e4m3fn").dequantize().tolist() == [384.0]
    with pytest.raises(ValueError, match="unknown rounding"):
        fp8emu.quantize_mx(np.array([1.0]), "e4m3fn", rounding="nearest")


def test_mx_2d_blocks_value_reference():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((40, 70)) * np.exp(rng.uniform(-4, 4, (40, 70)))).astype(np.float32)
    t = fp8emu.quantize_mx(x, "e4m3fn", block=(32, 32))
    assert t.block == (32, 32) and t.scale_codes.shape == (2, 3)
    for bi in range(2):
        for bj in range(3):
            tile = x[32 * bi:32 * bi + 32, 32 * bj:32 * bj + 32]
            amax = float(np.abs(tile).max())
            e = math.frexp(amax)[1] - 1 - 8             # OCP floor rule, emax(E4M3) = 8
            assert t.scale_codes[bi, bj] == e + 127
            y = np.clip(tile * np.float32(2.0 ** -e), -448, 448)
            want = y.astype(ml_dtypes.float8_e4m3fn).astype(np.float32) * np.float32(2.0 ** e)
            got = t.dequantize()[32 * bi:32 * bi + 32, 32 * bj:32 * bj + 32]
            assert np.array_equal(got, want)


def test_mxint8_value_reference():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 64)).astype(np.float32) * 10
    t = fp8emu.quantize_mx(x, "int8")
    assert t.fmt is MXINT8
    for r in range(3):
        for b in range(2):
            blk = x[r, 32 * b:32 * b + 32].astype(np.float64)
            e = math.frexp(float(np.abs(blk).max()))[1] - 1     # emax(INT8) = 0
            k = np.clip(np.round(blk * 2.0 ** -e * 64), -127, 127)   # numpy rounds half to even
            assert np.array_equal(t.dequantize()[r, 32 * b:32 * b + 32], (k / 64 * 2.0 ** e).astype(np.float32))


def test_scale_rule_names_snr():
    x = np.random.default_rng(0).standard_normal((256, 1024)).astype(np.float32)

    def snr(rule):
        d = fp8emu.quantize_mx(x, "e2m1fn", scale_rule=rule).dequantize().astype(np.float64)
        return 10 * np.log10((x.astype(np.float64) ** 2).sum() / ((x - d) ** 2).sum())

    assert abs(snr("ceil") - 16.82) < 0.1 and abs(snr("rceil") - 18.75) < 0.1


def test_bf16_block_scale_clamp():
    tiny = np.full((1, 128), 1e-38)
    bf = fp8emu.quantize_blockwise(tiny.astype(ml_dtypes.bfloat16), "e4m3fn", pow2=False)
    assert bf.scale[0, 0] == np.float32(3.3895314e38)
    assert bf.scale[0, 0].view(np.uint32) == 0x7F7F0000
    f32 = fp8emu.quantize_blockwise(tiny, "e4m3fn", pow2=False)
    assert f32.scale[0, 0] == np.finfo(np.float32).max
    pw = fp8emu.quantize_blockwise(tiny, "e4m3fn", pow2=True, input_dtype="bfloat16")
    assert pw.scale[0, 0] == np.float32(2.0 ** 127)
    with pytest.raises(ValueError, match="input_dtype"):
        fp8emu.quantize_blockwise(tiny, "e4m3fn", input_dtype="float16")


# ----------------------------------------------------------------------------- NVFP4
E2M1 = ml_dtypes.float4_e2m1fn
E4M3 = ml_dtypes.float8_e4m3fn
F = np.float32


def nvfp4_reference(x, tile_rows=1, target=6.0, scale_max=448.0, headroom=1.0):
    """Transformer Engine's NVFP4 steps written out with ml_dtypes casts, blocks of tile_rows x 16."""
    x = x.astype(np.float32)
    gamax = F(np.abs(x).max())
    s_enc = F(F(F(scale_max) * F(6)) / gamax)
    out = np.empty_like(x)
    for r0 in range(0, x.shape[0], tile_rows):
        for c0 in range(0, x.shape[1], 16):
            blk = x[r0:r0 + tile_rows, c0:c0 + 16]
            amax = F(np.abs(blk).max())
            s_dec = F(amax * F(s_enc * F(F(headroom) / F(target))))
            s_q = F(np.clip(s_dec, 0, 448).astype(E4M3).astype(np.float32))
            inv = F(s_q * F(F(1) / s_enc))
            scale = F(min(F(F(1) / inv), np.finfo(np.float32).max)) if inv > 0 else np.finfo(np.float32).max
            y = np.clip(blk * scale, -6, 6).astype(np.float32)
            out[r0:r0 + tile_rows, c0:c0 + 16] = y.astype(E2M1).astype(np.float32) * inv
    return out


@pytest.mark.parametrize("kw,ref", [
    ({}, {}),
    ({"fp4_2d_quantization": True}, {"tile_rows": 16}),
    ({"scale_max": 256}, {"scale_max": 256.0}),
    ({"headroom": 1.5}, {"headroom": 1.5}),
])
def test_nvfp4_options_value_reference(kw, ref):
    x = np.random.default_rng(4).standard_t(3, (32, 48)).astype(np.float32)
    assert np.array_equal(fp8emu.quantize_nvfp4(x, **kw).dequantize(), nvfp4_reference(x, **ref))


def test_nvfp4_four_over_six_picks_the_better_candidate():
    x = np.random.default_rng(5).standard_t(3, (16, 64)).astype(np.float32)
    got = fp8emu.quantize_nvfp4(x, four_over_six=True, scale_max=256).dequantize()
    six = nvfp4_reference(x, target=6.0, scale_max=256.0)
    four = nvfp4_reference(x, target=4.0, scale_max=256.0)
    e6 = ((x - six).astype(np.float64) ** 2).reshape(16, 4, 16).sum(-1)
    e4 = ((x - four).astype(np.float64) ** 2).reshape(16, 4, 16).sum(-1)
    want = np.where(np.repeat(e4 < e6, 16, axis=1), four, six)
    assert np.array_equal(got, want)
    assert (e4 < e6).any() and (e4 >= e6).any()      # both choices occur


def test_rht_matrix_and_inverse():
    r = rht_matrix()
    h = scipy.linalg.hadamard(16)
    assert np.array_equal(r, np.diag(TE_WGRAD_SIGNS) @ h / 4)
    assert np.array_equal(r @ r.T, np.eye(16))
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 32)).astype(np.float32)
    assert np.allclose(inverse_rht(rht(x)), x, atol=1e-6)
    y = rht(x, axis=-1)
    assert np.array_equal(y[:, :16], (x[:, :16].astype(np.float64) @ r).astype(np.float32))
    # transforming both GEMM operands along K keeps the product
    w = rng.standard_normal((32, 5)).astype(np.float32)
    assert np.allclose(rht(x) @ rht(w, axis=0), x @ w, atol=1e-5)
    with pytest.raises(ValueError, match="multiple of 16"):
        rht(np.zeros(10))


def test_nvfp4_rht_quantizes_the_transformed_tensor():
    x = np.random.default_rng(7).standard_t(2, (8, 32)).astype(np.float32)
    t = fp8emu.quantize_nvfp4(x, random_hadamard_transform=True)
    assert np.array_equal(t.dequantize(), nvfp4_reference(rht(x)))
    assert t.global_amax == np.abs(rht(x)).max()     # the amax is taken after the transform


def test_nvfp4_stochastic_rounding_option():
    x = np.full((1, 16), 0.7, np.float32)
    x[0, 0] = 6.0
    a = fp8emu.quantize_nvfp4(x, stochastic_rounding=True, rng=1).dequantize()
    assert set(np.unique(a[0, 1:]).tolist()) <= {0.5, 1.0}
    with pytest.raises(ValueError, match="conflicts"):
        fp8emu.quantize_nvfp4(x, stochastic_rounding=True, rounding="rtz")
    with pytest.raises(ValueError, match="scale_max"):
        fp8emu.quantize_nvfp4(x, scale_max=300)
    with pytest.raises(ValueError, match="headroom"):
        fp8emu.quantize_nvfp4(x, headroom=0.5)
