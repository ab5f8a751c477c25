"""HiFloat4 (fp8emu.scaling.hifloat4) against a per-unit re-derivation of its rules with NumPy float32
scalars, Python's round() and ml_dtypes' bfloat16 (never fp8emu's own arithmetic), plus the format's
properties: 32 bits of scale per 64 elements, elements of FP4 E1M2."""

import math

import ml_dtypes
import numpy as np
import pytest

import fp8emu
from fp8emu.scaling.hifloat4 import quantize_hif4

F32 = np.float32


def bf16(v):
    return F32(np.array(v, F32).astype(ml_dtypes.bfloat16).astype(F32))


def reference_unit(x):
    """(codes, per-4 scale) of one 64-element unit, step by step."""
    a = [abs(float(v)) for v in x]
    m64 = F32(max(a))
    s1 = bf16(F32(m64 * bf16(F32(1) / F32(7))))
    s1 = min(max(float(s1), 2.0 ** -48), 49152.0)
    e = math.floor(math.log2(s1))
    s1 = F32(round(s1 * 2.0 ** (2 - e)) * 2.0 ** (e - 2))      # Python round(): ties to even
    r = bf16(F32(1) / s1)
    codes, inv = [], []
    for g8 in range(8):
        m8 = F32(max(a[8 * g8:8 * g8 + 8]))
        l2 = F32(2) if F32(m8 * r) >= 4 else F32(1)
        for g4 in range(2):
            base = 8 * g8 + 4 * g4
            m4 = F32(max(a[base:base + 4]))
            l3 = F32(2) if F32(F32(m4 * r) / l2) >= 2 else F32(1)
            inv.append(float(l2 * l3 * s1))
            for v, av in zip(x[base:base + 4], a[base:base + 4]):
                m = F32(F32(F32(F32(av) / l2) / l3) * r)
                q = min(int(math.floor(F32(F32(m * F32(4)) + F32(0.5)))), 7)
                codes.append(q | 8 if v < 0 else q)
    return codes, inv


def test_hif4_matches_the_rules_unit_by_unit():
    rng = np.random.default_rng(2602)
    x = (rng.standard_normal((3, 128)) * np.exp(rng.standard_normal((3, 128)) * 2)).astype(F32)
    x[1, 64:128] = 0                                   # a zero unit: level-1 scale clipped to 2**-48
    x[2, :64] *= 1e-20
    t = quantize_hif4(x)
    assert t.fmt.name == "e1m2" and t.block == (1, 4) and t.recipe == "hif4"
    for r in range(3):
        for u in range(2):
            codes, inv = reference_unit(x[r, 64 * u:64 * u + 64])
            assert t.codes[r, 64 * u:64 * u + 64].tolist() == codes, (r, u)
            assert t.scale_inv[r, 16 * u:16 * u + 16].tolist() == inv, (r, u)
    e1m2 = fp8emu.get_format("e1m2").values()
    np.testing.assert_array_equal(t.dequantize(np.float64),
                                  e1m2[t.codes] * np.repeat(t.scale_inv.astype(np.float64), 4, axis=1))


def test_hif4_scale_is_32_bits_per_unit_and_the_levels_are_1_or_2():
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(F32) * 100
    t = quantize_hif4(x)
    inv = t.scale_inv.reshape(4, 8, 2).astype(np.float64)
    s1 = inv.min(axis=(1, 2), keepdims=True)
    ratio = inv / s1
    # level 2 x level 3 takes 1, 2 or 4; level 1 has 2 mantissa bits (E6M2): 8 + 8 + 16 bits
    assert set(np.unique(ratio).tolist()) <= {1.0, 2.0, 4.0}
    frac, _ = np.frexp(s1)
    assert np.all((frac * 8) == np.round(frac * 8))
    # every element within half a step (0.25 * its scale) plus the bfloat16 reciprocal's error (2**-9
    # relative, on values up to 1.75 steps of 4), or clamped near 1.75 * its scale
    full = np.repeat(t.scale_inv.astype(np.float64), 4, axis=1)
    err = np.abs(t.dequantize(np.float64) - x)
    assert np.all((err <= (0.125 + 1.75 * 2.0 ** -8) * full) | (np.abs(x) >= 1.74 * full))
    assert np.mean(err <= 0.125 * full) > 0.9


def test_hif4_axis_and_errors():
    x = np.random.default_rng(3).standard_normal((64, 2)).astype(F32)
    a, b = quantize_hif4(x, axis=0), quantize_hif4(np.ascontiguousarray(x.T))
    np.testing.assert_array_equal(a.codes, b.codes.T)
    with pytest.raises(ValueError, match="multiple of 64"):
        quantize_hif4(np.ones(32, F32))
    with pytest.raises(ValueError, match="finite values only"):
        quantize_hif4(np.full(64, np.inf, F32))
