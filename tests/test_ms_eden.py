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


# ----------------------------------------------------------------------------- float32 midpoints, clipping
# a * b + c whose float64 sum lands exactly on a float32 midpoint while the exact value does not:
# (1 + 2**-23) * 2**-24 * (1 - 2**-23) = 2**-24 - 2**-70, so the sum is a midpoint -+ 2**-70
FMA_TIES = [
    (1 + 2.0 ** -23, 2.0 ** -24 * (1 - 2.0 ** -23), 1 + 2.0 ** -23),           # just below a midpoint
    (-(1 + 2.0 ** -23), 2.0 ** -24 * (1 - 2.0 ** -23), 1 + 3 * 2.0 ** -23),    # just above a midpoint
]


def test_fma32_rounds_once_at_float64_midpoints_and_everywhere():
    """The vectorised float32 FMA of the lane dot products against exact rationals, at the double-rounding
    ties (RNE of the float64 sum would pick the even neighbour, the wrong one) and on random operands whose
    exponents differ widely (the float64 sum inexact)."""
    from fp8emu.scaling.ms_eden import _fma32
    rng = np.random.default_rng(53)
    cases = FMA_TIES + [(-a, b, -c) for a, b, c in FMA_TIES] + [(a, -b, -c) for a, b, c in FMA_TIES]
    a, b, c = (np.array([t[i] for t in cases], F32) for i in range(3))
    n = 4000
    ra = (rng.standard_normal(n) * np.exp2(rng.integers(-30, 30, n))).astype(F32)
    rb = (rng.standard_normal(n) * np.exp2(rng.integers(-30, 30, n))).astype(F32)
    rc = (rng.standard_normal(n) * np.exp2(rng.integers(-60, 60, n))).astype(F32)
    a, b, c = np.concatenate([a, ra]), np.concatenate([b, rb]), np.concatenate([c, rc])
    got = _fma32(a, b, c)
    want = [F32(round_f32(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)))) for x, y, z in zip(a, b, c)]
    assert got.view(np.uint32).tolist() == np.array(want, F32).view(np.uint32).tolist()
    # the ties are what they claim: float64 then float32 rounding differs from the exact rounding there
    naive = (a[:6].astype(np.float64) * b[:6].astype(np.float64) + c[:6].astype(np.float64)).astype(F32)
    assert (naive != got[:6]).all()
    # a product that is itself a float32 midpoint (24929 * 673 = 2**24 + 1) and an addend below float64's
    # resolution there: the addend alone decides the side (the error term TwoSum takes from c)
    a, b = np.array([24929, 24929, -24929, -24929], F32), np.full(4, 673, F32)
    c = np.array([2.0 ** -40, -(2.0 ** -40), -(2.0 ** -40), 2.0 ** -40], F32)
    assert _fma32(a, b, c).tolist() == [2.0 ** 24 + 2, 2.0 ** 24, -(2.0 ** 24 + 2), -(2.0 ** 24)]


def test_correction_groups_are_256_elements():
    """One EDEN correction per 256 consecutive elements (the reference kernel's warp: 32 lanes x 8):
    a change in one group moves no other group's block scales."""
    from fp8emu.scaling.ms_eden import EDEN_GROUP, ms_eden_nvfp4
    assert EDEN_GROUP == 32 * 8
    rng = np.random.default_rng(5)
    x = bf16_sample(rng, (1, 1024))
    noise = rng.integers(0, 1 << 16, (1, 64), dtype=np.uint16)
    base = ms_eden_nvfp4(x, F32(np.max(np.abs(x))), 1.0, noise)[2]
    for g in range(1024 // EDEN_GROUP):
        y = x.copy()
        # rescale one element of every block of group g (block amaxes and the amax kept): only the
        # correction changes, and it is shared by the group's 16 blocks alone
        lo, hi = g * EDEN_GROUP, (g + 1) * EDEN_GROUP
        blocks = y[0, lo:hi].reshape(-1, 16)
        idx = np.argmin(np.abs(blocks), axis=1)
        blocks[np.arange(len(blocks)), idx] *= F32(0.5)
        y[0, lo:hi] = blocks.reshape(-1)
        got = ms_eden_nvfp4(y, F32(np.max(np.abs(x))), 1.0, noise)[2]
        others = np.ones(64, bool)
        others[g * 16:(g + 1) * 16] = False
        assert (got[0, others] == base[0, others]).all(), g


def kernel_sr(fixed, noise):
    """utils.cuh's stochastic_rounding of one float32 to an E4M3 code (the scalar rule of reference_warp)."""
    fixed = F32(fixed)
    if abs(fixed) > 448 or abs(fixed) < 0.015625:
        return e4m3_sat(fixed)
    bits = int(np.array(fixed, F32).view(np.uint32))
    thr = (int(noise) << 4) & 0xFFFFF
    bits = bits | 0xFFFFF if (bits & 0xFFFFF) > thr else bits & ~0xFFFFF
    return e4m3_sat(np.array(bits, np.uint32).view(F32))


def test_stochastic_e4m3_at_the_edges_of_its_range():
    """Inside [2**-6, 448] the 20 dropped bits are forced by the noise, outside it a plain saturating
    cast: 447.5 rounds down to 416 with high noise (a plain cast gives 448); 1.3 * 2**-8, below the
    range, is a plain cast to 3 * 2**-9 (forced down it would be 2 * 2**-9, a tie to even); every one
    of the 20 dropped bits counts against the threshold, the lowest too."""
    from fp8emu.scaling.ms_eden import _stochastic_e4m3
    rng = np.random.default_rng(9)
    vals = [447.5, 448.0, 447.0, 448.5, 500.0, 2.0 ** -6, 2.0 ** -6 * (1 - 2.0 ** -24), 1.3 * 2.0 ** -8, 0.01,
            1.0 + 2.0 ** -20, 3.3, -3.3, 1e30, 1.0 + 2.0 ** -23]
    vals += list(np.exp2(rng.uniform(-12, 10, 300)) * rng.choice([-1, 1], 300))
    v = np.repeat(np.array(vals, F32), 3)
    noise = np.tile(np.array([0, 0xFFFF, 0x8000], np.uint16), len(vals))
    noise[3 * 14:] = rng.integers(0, 1 << 16, len(noise) - 3 * 14, dtype=np.uint16)
    got = _stochastic_e4m3(v, noise)
    assert got.tolist() == [kernel_sr(a, r) for a, r in zip(v, noise)]
    assert got[:3].tolist() == [0x7E, 0x7D, 0x7E]                        # 447.5: 448, 416 (forced down), 448
    assert got[21:24].tolist() == [3, 3, 3]                              # 1.3 * 2**-8: always 3 * 2**-9
    # 1 + 2**-23: its 20 dropped bits are 1, above noise 0 (threshold 0): forced up, to 1.125 (seed-54 hole)
    assert got[39] == 0x39


def test_butterfly_adds_in_the_kernels_order():
    """The xor shuffles (offsets 16, 8, 4, 2, 1) add in an order float32 rounding can see: lanes
    [1, -1, 2**-24, 0, ...] sum to 0 at lane 0 ((1 + 2**-24) + (-1 + 0)), another order gives 2**-24."""
    from fp8emu.scaling.ms_eden import _butterfly
    rng = np.random.default_rng(4)
    first = np.zeros(32, F32)
    first[:3] = [1.0, -1.0, 2.0 ** -24]
    rand = (rng.standard_normal((7, 32)) * np.exp2(rng.integers(-30, 30, (7, 32)))).astype(F32)
    v = np.concatenate([first[None], rand]).reshape(-1)
    want = []
    for warp in v.reshape(-1, 32):
        w = [F32(x) for x in warp]
        for off in (16, 8, 4, 2, 1):
            w = [F32(w[i] + w[i ^ off]) for i in range(32)]
        want += w
    got = _butterfly(v)
    assert got.view(np.uint32).tolist() == np.array(want, F32).view(np.uint32).tolist()
    assert got[0] == 0.0


def test_ms_eden_on_three_dimensional_input():
    """Rows of any leading shape: the same codes and scales as the rows flattened to 2-D (correction groups
    are 256 consecutive elements of the flattened array, blocks 16 along the last axis)."""
    rng = np.random.default_rng(3)
    x = bf16_sample(rng, (2, 3, 256))
    noise = rng.integers(0, 1 << 16, (2, 3, 16), dtype=np.uint16)
    a = fp8emu.quantize_nvfp4(x, rounding="ms-eden", random_bits=noise)
    amax = F32(np.max(np.abs(x)))
    assert a.codes.shape == (2, 3, 256) and a.block_scale_codes.shape == (2, 3, 16)
    for i in range(2):
        for j in range(3):
            codes, scales = reference_warp(x[i, j], amax, 1.0, noise[i, j])
            assert a.codes[i, j].tolist() == codes and a.block_scale_codes[i, j].tolist() == scales
