"""MS-EDEN (Quartet II) in quantize_nvfp4: codes and block scales against a scalar re-derivation of the
reference kernel (IST-DASLab/Quartet-II 8776a90, kernels/csrc/round_eden_fp4.cu and utils.cuh's
stochastic_rounding), written here with Python floats, exact rationals for the fused multiply-adds and
ml_dtypes casts, never with fp8emu's own arithmetic."""

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import fp8emu
from oracle import round_f32

F32 = np.float32
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def e4m3_sat(v):
    """Saturating RNE E4M3 code of a float32 (ml_dtypes casts; clipping first gives saturation)."""
    return int(np.array(np.clip(F32(v), -448, 448), F32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8))


def e4m3_value(code):
    return float(np.array(code, np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32))


def e2m1_sat(v):
    return int(np.array(np.clip(F32(v), -6, 6), F32).astype(ml_dtypes.float4_e2m1fn).view(np.uint8))


def fma32(a, b, c):
    return F32(round_f32(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))))


def reference_warp(xw, amax, override, noise):
    """One 256-element warp of eden_fp4_kernel: (16 FP4 code lists, 16 E4M3 scale codes)."""
    val_max = F32(F32(6) / F32(override))
    t = F32(1) if amax == 0 else F32(F32(F32(amax) / F32(255.99)) / val_max)
    codes, lane_xx, lane_xy, s_round = [], [], [], []
    for g in range(16):
        grp = xw[16 * g:16 * g + 16]
        s = e4m3_value(e4m3_sat(F32(F32(F32(max(abs(float(v)) for v in grp)) / val_max) / t)))
        s = F32(1) if s == 0 else F32(s)
        s_round.append(s)
        factor = F32(F32(1) / F32(s * t))
        for lane in range(2):
            xx = xy = F32(0)
            for v in grp[8 * lane:8 * lane + 8]:
                xs = F32(F32(v) * factor)
                c = e2m1_sat(xs)
                codes.append(c)
                q = F32(E2M1[c & 7] * (-1 if c & 8 else 1))
                xx, xy = fma32(xs, xs, xx), fma32(xs, q, xy)
            lane_xx.append(xx)
            lane_xy.append(xy)
    for vals in (lane_xx, lane_xy):
        for off in (16, 8, 4, 2, 1):
            vals[:] = [F32(vals[i] + vals[i ^ off]) for i in range(32)]
    scales = []
    for g in range(16):
        xx, xy = lane_xx[2 * g], lane_xy[2 * g]
        corr = F32(1) if xy == 0 else F32(xx / xy)
        fixed = F32(s_round[g] * corr)
        if abs(fixed) > 448 or abs(fixed) < 0.015625:
            scales.append(e4m3_sat(fixed))
            continue
        bits = int(np.array(fixed, F32).view(np.uint32))
        thr = (int(noise[g]) << 4) & 0xFFFFF
        bits = bits | 0xFFFFF if (bits & 0xFFFFF) > thr else bits & ~0xFFFFF
        scales.append(e4m3_sat(np.array(bits, np.uint32).view(F32)))
    return codes, scales


def bf16_sample(rng, shape):
    blocks = shape[:-1] + (shape[-1] // 16, 16)
    x = rng.standard_normal(blocks) * np.exp(rng.standard_normal(blocks[:-1] + (1,)) * 1.5)
    return x.reshape(shape).astype(ml_dtypes.bfloat16).astype(np.float32)


@pytest.mark.parametrize("override", [1.0, 1.5])
def test_ms_eden_matches_the_reference_kernel(override):
    rng = np.random.default_rng(2601)
    x = bf16_sample(rng, (2, 512))
    x[0, 16:32] = 0                                    # a zero block: scale 1, <x, q> = 0
    x[1, 300:316] *= 1e-6                              # a block whose corrected scale is below 2**-6
    x[1, 0] = 60.0                                     # an outlier block
    noise = rng.integers(0, 1 << 16, (2, 32), dtype=np.uint16)
    t = fp8emu.quantize_nvfp4(x, rounding="ms-eden", random_bits=noise, headroom=override)
    amax = F32(np.max(np.abs(x)))
    for r in range(2):
        for w in range(2):
            codes, scales = reference_warp(x[r, 256 * w:256 * w + 256], amax, override,
                                           noise[r, 16 * w:16 * w + 16])
            assert t.codes[r, 256 * w:256 * w + 256].tolist() == codes, (r, w)
            assert t.block_scale_codes[r, 16 * w:16 * w + 16].tolist() == scales, (r, w)
    tt = F32(F32(amax / F32(255.99)) / F32(F32(6) / F32(override)))
    assert t.global_scale == F32(F32(1) / tt) and t.recipe == "nvfp4-ms-eden"
    expect_inv = np.array([e4m3_value(c) for c in t.block_scale_codes.ravel()], F32).reshape(2, 32) * tt
    np.testing.assert_array_equal(t.scale_inv, expect_inv.astype(F32))


def test_ms_eden_along_axis_0_and_from_rng():
    rng = np.random.default_rng(7)
    x = bf16_sample(rng, (2, 256)).T.copy()            # blocks run down axis 0
    noise = rng.integers(0, 1 << 16, (16, 2), dtype=np.uint16)
    a = fp8emu.quantize_nvfp4(x, axis=0, rounding="ms-eden", random_bits=noise)
    b = fp8emu.quantize_nvfp4(np.ascontiguousarray(x.T), rounding="ms-eden", random_bits=noise.T.copy())
    np.testing.assert_array_equal(a.codes, b.codes.T)
    np.testing.assert_array_equal(a.block_scale_codes, b.block_scale_codes.T)
    c = fp8emu.quantize_nvfp4(x, axis=0, rounding="ms-eden", rng=3)
    d = fp8emu.quantize_nvfp4(x, axis=0, rounding="ms-eden", rng=3)
    np.testing.assert_array_equal(c.block_scale_codes, d.block_scale_codes)


def test_ms_eden_is_unbiased_where_sr_of_the_scale_is():
    """Mean of many draws: the block scale's expectation is the corrected scale, so where every block of the
    256-element correction group has the same scale (every block's amax 3 here; a 128-point rotation, as
    Quartet II applies first, makes them alike) the dequantized projection on x equals <x, x> on average
    (the EDEN property), within sampling noise.  Blocks of unequal scale share one correction, so there the
    reference algorithm is not unbiased (benchmarks/bench_ms_eden.py measures how far)."""
    rng = np.random.default_rng(11)
    x = np.clip(rng.standard_normal((1, 256)), -2.9, 2.9).astype(ml_dtypes.bfloat16).astype(np.float32)
    x[0, ::16] = 3.0
    proj = [float(np.dot(fp8emu.quantize_nvfp4(x, rounding="ms-eden", rng=s).dequantize(np.float64)[0], x[0]))
            for s in range(300)]
    assert abs(np.mean(proj) / float(np.dot(x[0], x[0])) - 1) < 2e-3


def test_ms_eden_errors():
    x = np.ones((1, 256), np.float32)
    with pytest.raises(ValueError, match="needs rng"):
        fp8emu.quantize_nvfp4(x, rounding="ms-eden")
    with pytest.raises(ValueError, match="multiple of 128"):
        fp8emu.quantize_nvfp4(np.ones((1, 64), np.float32), rounding="ms-eden", rng=1)
    with pytest.raises(ValueError, match="drop four_over_six, scale_format"):
        fp8emu.quantize_nvfp4(x, rounding="ms-eden", rng=1, four_over_six=True, scale_format="e5m3fnu")
    with pytest.raises(ValueError, match=r"uint16 of the block-scale shape \(1, 16\)"):
        fp8emu.quantize_nvfp4(x, rounding="ms-eden", random_bits=np.zeros((1, 16), np.uint32))
    with pytest.raises(ValueError, match="random_bits applies only to rounding='ms-eden'"):
        fp8emu.quantize_nvfp4(x, random_bits=np.zeros((1, 16), np.uint16))
    with pytest.raises(ValueError, match="either rng or random_bits"):
        fp8emu.quantize_nvfp4(x, rounding="ms-eden", rng=1, random_bits=np.zeros((1, 16), np.uint16))
