"""Scaling recipes: formulas re-derived here with exact rationals, Python ints and
ml_dtypes casts (never with fp8emu.scaling itself), hand-worked spec examples,
edge cases and round-trip bounds."""

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import fp8emu
from oracle import floor_log2, round_f32 as f32

F32_MAX = float(np.finfo(np.float32).max)
ML = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2,
      "e2m3fn": ml_dtypes.float6_e2m3fn, "e3m2fn": ml_dtypes.float6_e3m2fn,
      "e2m1fn": ml_dtypes.float4_e2m1fn}
SPEC_MAX = {"e4m3fn": 448.0, "e5m2": 57344.0, "e2m3fn": 7.5, "e3m2fn": 28.0, "e2m1fn": 6.0}
SPEC_EMAX = {"e4m3fn": 8, "e5m2": 15, "e2m3fn": 2, "e3m2fn": 4, "e2m1fn": 2}   # OCP MX table
SPEC_MBITS = {"e4m3fn": 3, "e5m2": 2, "e2m3fn": 3, "e3m2fn": 2, "e2m1fn": 1}


# ----------------------------------------------------------------- exact helpers

def mul32(a, b):
    return f32(Fraction(a) * Fraction(b))


def div32(a, b):
    return f32(Fraction(a) / Fraction(b))


def te_scale(amax, fp8max, margin=0, pow2=False, eps=0.0):
    """Transformer Engine compute_scale_from_amax, re-derived with rationals."""
    amax = float(np.float32(amax))
    eps = float(np.float32(eps))
    if amax < eps:
        amax = eps
    if math.isnan(amax) or math.isinf(amax) or amax == 0:
        return 1.0
    s = div32(mul32(fp8max, Fraction(1, 2 ** margin) if margin >= 0 else 2 ** -margin), amax)
    if math.isinf(s):
        s = F32_MAX
    if pow2:
        s = 2.0 ** floor_log2(Fraction(s))
    return s


def ml_cast_codes(y, name):
    """Saturating RNE cast through ml_dtypes (clipping first gives saturation)."""
    m = SPEC_MAX[name]
    y = np.clip(np.asarray(y, np.float32), -m, m)
    return y.astype(ML[name]).view(np.uint8)


def is_pow2(a):
    a = np.asarray(a, np.float32)
    return np.all((a.view(np.uint32) & 0x7FFFFF) == 0) and np.all(a > 0)


def spacing(y, fmt):
    """Spacing of fmt's grid at |y| (y within range)."""
    fmt = fp8emu.get_format(fmt)
    emin = 1 - fmt.bias
    ay = np.abs(np.asarray(y, np.float64))
    e = np.floor(np.log2(np.where(ay > 0, ay, 1.0)))
    e = np.maximum(e, emin)
    return np.ldexp(1.0, (e - fmt.mbits).astype(int))


def sample(rng, shape, spread=6.0):
    return (rng.standard_normal(shape) * np.exp(rng.standard_normal(shape) * spread)).astype(
        np.float32)


def per_element(a, block, shape):
    """Broadcast one value per block to every element (independent of fp8emu)."""
    if not block:
        return np.asarray(a)
    idx = np.ix_(*[np.arange(n) // b for n, b in zip(shape, block)])
    return np.asarray(a)[idx]


def check_roundtrip(t, x):
    """Each code is within half a spacing of fl32(x*scale); dequantize is q*scale_inv."""
    x = np.asarray(x, np.float32)
    full_scale = per_element(t.scale, t.block, t.shape)
    full_inv = per_element(t.scale_inv, t.block, t.shape)
    y = (x * full_scale).astype(np.float32)
    q = fp8emu.decode(t.codes, t.fmt, dtype=np.float64)
    m = t.fmt.max
    inside = np.abs(y) <= m
    assert np.all(np.abs(q - y)[inside] <= spacing(y, t.fmt)[inside] / 2)
    assert np.all(q[~inside] == np.sign(y[~inside]) * m)
    deq = t.dequantize()
    assert deq.dtype == np.float32 and deq.shape == x.shape
    np.testing.assert_array_equal(deq, (q.astype(np.float32) * full_inv).astype(np.float32))


# ----------------------------------------------------------------- current scaling

def test_f32_helper_agrees_with_numpy_division():
    rng = np.random.default_rng(1)
    a = sample(rng, 200)
    b = sample(rng, 200)
    with np.errstate(all="ignore"):
        want = (a / b).astype(np.float32)
    got = np.array([div32(float(p), float(r)) for p, r in zip(a, b)], np.float32)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", ["e4m3fn", "e5m2"])
@pytest.mark.parametrize("margin", [0, 1, 3])
@pytest.mark.parametrize("pow2", [False, True])
def test_current_scale_formula(name, margin, pow2):
    rng = np.random.default_rng(margin + 10 * pow2)
    amaxes = np.abs(sample(rng, 60, spread=20.0))
    amaxes = np.concatenate([amaxes, np.float32([1e-45, 1e-40, 1.0, 448.0, 3.0, F32_MAX])])
    for a in amaxes:
        got = fp8emu.current_scale(a, name, margin=margin, pow2=pow2)
        assert isinstance(got, np.float32)
        assert float(got) == te_scale(a, SPEC_MAX[name], margin, pow2), a
        if pow2:
            assert is_pow2(got)


def test_current_scale_special_amax():
    assert fp8emu.current_scale(0.0, "e4m3fn") == 1
    assert fp8emu.current_scale(np.inf, "e4m3fn") == 1
    assert fp8emu.current_scale(np.nan, "e4m3fn") == 1
    assert fp8emu.current_scale(2.0 ** -149, "e4m3fn") == np.float32(F32_MAX)   # 448/amax overflows
    assert fp8emu.current_scale(2.0 ** -149, "e4m3fn", pow2=True) == np.float32(2.0 ** 127)
    # eps replaces a smaller amax: 448 / fl32(1e-4)
    assert float(fp8emu.current_scale(1e-10, "e4m3fn", eps=1e-4)) == div32(448, float(np.float32(1e-4)))
    assert fp8emu.current_scale(0.0, "e4m3fn", eps=2.0) == 224
    assert fp8emu.current_scale(3.5, "e4m3fn") == 128          # hand-worked: 448 / 3.5
    assert fp8emu.current_scale(3.5, "e4m3fn", margin=2) == 32


@pytest.mark.parametrize("name", ["e4m3fn", "e5m2"])
def test_tensorwise_codes_match_independent_cast(name):
    rng = np.random.default_rng(3)
    x = sample(rng, (7, 33))
    t = fp8emu.quantize_tensorwise(x, name)
    s = te_scale(np.max(np.abs(x)), SPEC_MAX[name])
    assert float(t.scale) == s and t.scale.shape == () and t.block == () and t.axis is None
    assert float(t.scale_inv) == div32(1, s)
    np.testing.assert_array_equal(t.codes, ml_cast_codes(x * np.float32(s), name))
    check_roundtrip(t, x)
    assert t.shape == x.shape and t.codes.dtype == np.uint8


def test_tensorwise_float64_input_goes_through_float32_and_is_not_modified():
    x = np.array([0.1, 1.0 + 2.0 ** -40, -3.0])
    keep = x.copy()
    t = fp8emu.quantize_tensorwise(x, "e4m3fn")
    np.testing.assert_array_equal(x, keep)
    np.testing.assert_array_equal(t.codes, fp8emu.quantize_tensorwise(x.astype(np.float32), "e4m3fn").codes)


def test_tensorwise_inf_and_nan():
    x = np.float32([1.0, np.nan, -2.0])
    t = fp8emu.quantize_tensorwise(x, "e4m3fn")      # NaN ignored by amax (fmaxf)
    assert t.scale == 224
    assert t.codes[1] == 0x7F and t.codes[0] == ml_cast_codes(224.0, "e4m3fn")
    t = fp8emu.quantize_tensorwise(np.float32([1.0, -np.inf]), "e4m3fn")
    assert t.scale == 1 and t.codes.tolist() == [0x38, 0xFE]   # Inf saturates to -448
    t = fp8emu.quantize_tensorwise(np.zeros(4), "e5m2")
    assert t.scale == 1 and not t.codes.any()


def test_tensorwise_given_scale_and_errors():
    t = fp8emu.quantize_tensorwise(np.float32([1.0, 2.0]), "e4m3fn", scale=4.0)
    assert t.scale == 4 and t.dequantize().tolist() == [1.0, 2.0]
    for bad in (0.0, -1.0, np.inf, np.nan):
        with pytest.raises(ValueError, match="finite and > 0"):
            fp8emu.quantize_tensorwise([1.0], "e4m3fn", scale=bad)
    with pytest.raises(ValueError, match="shape"):
        fp8emu.quantize_tensorwise([1.0], "e4m3fn", scale=[1.0, 2.0])
    with pytest.raises(TypeError, match="unsupported x dtype"):
        fp8emu.quantize_tensorwise(np.array([1j]), "e4m3fn")
    with pytest.raises(TypeError, match="margin"):
        fp8emu.current_scale(1.0, "e4m3fn", margin=0.5)
    with pytest.raises(ValueError, match="eps"):
        fp8emu.current_scale(1.0, "e4m3fn", eps=-1.0)
    with pytest.raises(TypeError, match="amax"):
        fp8emu.current_scale([1.0, 2.0], "e4m3fn")


# ----------------------------------------------------------------- delayed scaling

def simulate_delayed(amaxes, fp8max, length, algo, margin):
    """Transformer Engine's amax_and_scale_update, step by step with Python lists."""
    hist = [0.0] * length
    scale = 1.0
    used = []
    for a in amaxes:
        used.append(scale)
        hist[0] = max(hist[0], a) if not math.isnan(a) else hist[0]
        finite = [h for h in hist if not math.isnan(h)]
        amax = max(finite) if algo == "max" else hist[0]
        hist = [0.0] + hist[2:] + hist[:1] if length > 1 else [0.0]
        if math.isfinite(amax) and amax > 0:
            s = div32(mul32(fp8max, Fraction(1, 2 ** margin)), amax)
            scale = F32_MAX if math.isinf(s) else s
    return used, scale, hist


@pytest.mark.parametrize("algo", ["max", "most_recent"])
@pytest.mark.parametrize("length", [1, 3, 16])
def test_delayed_scaling_history(algo, length):
    rng = np.random.default_rng(length)
    steps = [sample(rng, 20, spread=3.0) for _ in range(12)]
    steps[4] = np.zeros(20, np.float32)                        # zero amax keeps the scale
    steps[6] = steps[6].copy(); steps[6][3] = np.inf           # Inf amax keeps the scale
    steps[8] = steps[8].copy(); steps[8][0] = np.nan           # NaN ignored by the amax
    amaxes = [float(np.max(np.where(np.isnan(s), 0, np.abs(s)))) for s in steps]
    used, final, hist = simulate_delayed(amaxes, 448.0, length, algo, margin=1)
    ds = fp8emu.DelayedScaling("e4m3fn", amax_history_len=length, amax_compute_algo=algo, margin=1)
    for x, s in zip(steps, used):
        t = ds.quantize(x)
        assert float(t.scale) == s
        assert float(t.scale_inv) == div32(1, s)
        np.testing.assert_array_equal(t.codes, ml_cast_codes(x * np.float32(s), "e4m3fn"))
    assert float(ds.scale) == final and float(ds.scale_inv) == div32(1, final)
    assert ds.amax_history.dtype == np.float32
    np.testing.assert_array_equal(ds.amax_history, np.float32(hist))


def test_delayed_scaling_window_by_hand():
    # amax 7 enters the history, stays in the window for exactly 4 updates, then leaves.
    ds = fp8emu.DelayedScaling("e4m3fn", amax_history_len=4)
    ds.quantize(np.float32([7.0]))
    assert ds.scale == 64 and ds.amax_history.tolist() == [0, 0, 0, 7]
    for _ in range(3):
        ds.quantize(np.float32([1.0]))
        assert ds.scale == 64
    ds.quantize(np.float32([1.0]))
    assert ds.scale == 448 and ds.amax_history.tolist() == [0, 1, 1, 1]
    most = fp8emu.DelayedScaling("e5m2", amax_history_len=4, amax_compute_algo="most_recent")
    most.quantize(np.float32([7.0]))
    most.quantize(np.float32([1.0]))
    assert most.scale == 57344


def test_delayed_scaling_errors_and_hybrid():
    with pytest.raises(ValueError, match="amax_compute_algo"):
        fp8emu.DelayedScaling("e4m3fn", amax_compute_algo="mean")
    with pytest.raises(ValueError, match="amax_history_len"):
        fp8emu.DelayedScaling("e4m3fn", amax_history_len=0)
    assert fp8emu.HYBRID == {"forward": "e4m3fn", "backward": "e5m2"}
    assert fp8emu.recipe_formats("hybrid") == fp8emu.HYBRID
    assert fp8emu.recipe_formats("E5M2") == {"forward": "e5m2", "backward": "e5m2"}
    with pytest.raises(ValueError, match="E4M3, E5M2, HYBRID"):
        fp8emu.recipe_formats("E3M4")
    ds = fp8emu.DelayedScaling(fp8emu.recipe_formats("HYBRID")["backward"])
    assert ds.fmt.name == "e5m2" and ds.amax_history.shape == (1024,)


# ----------------------------------------------------------------- axis-wise and block-wise

def test_axiswise_rows_and_columns():
    rng = np.random.default_rng(5)
    x = sample(rng, (6, 40))
    rows = fp8emu.quantize_axiswise(x, "e4m3fn", axis=-1)
    cols = fp8emu.quantize_axiswise(x, "e4m3fn", axis=0)
    assert rows.scale.shape == (6, 1) and rows.block == (1, 40) and rows.axis == 1
    assert cols.scale.shape == (1, 40) and cols.block == (6, 1) and cols.axis == 0
    for i in range(6):
        assert float(rows.scale[i, 0]) == te_scale(max(abs(float(v)) for v in x[i]), 448.0)
    for j in range(40):
        assert float(cols.scale[0, j]) == te_scale(max(abs(float(v)) for v in x[:, j]), 448.0)
    np.testing.assert_array_equal(rows.codes, ml_cast_codes(x * rows.scale, "e4m3fn"))
    np.testing.assert_array_equal(cols.codes, ml_cast_codes(x * cols.scale, "e4m3fn"))
    check_roundtrip(rows, x)
    check_roundtrip(cols, x)
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        fp8emu.quantize_axiswise(x, "e4m3fn", axis=2)
    with pytest.raises(ValueError, match=r"shape \(6,\), expected \(6, 1\)"):
        fp8emu.quantize_axiswise(x, "e4m3fn", scale=np.ones(6))


@pytest.mark.parametrize("block", [(1, 128), (128, 128)])
def test_blockwise_scales_and_padding(block):
    rng = np.random.default_rng(7)
    x = sample(rng, (130, 300))          # neither dimension a multiple of 128
    x[0, 130:140] = 0                    # partial zero run inside a block
    t = fp8emu.quantize_blockwise(x, "e4m3fn", block=block)
    bm, bk = block
    nm, nk = -(-130 // bm), -(-300 // bk)
    assert t.scale.shape == (nm, nk) and t.block == block and t.shape == x.shape
    assert is_pow2(t.scale)
    np.testing.assert_array_equal(t.scale * t.scale_inv, np.ones((nm, nk), np.float32))
    for i in range(nm):
        for j in range(nk):
            blk = x[i * bm:(i + 1) * bm, j * bk:(j + 1) * bk]
            assert float(t.scale[i, j]) == te_scale(np.max(np.abs(blk)), 448.0, pow2=True)
    check_roundtrip(t, x)


def test_blockwise_edge_cases():
    x = np.zeros((2, 256), np.float32)
    x[0, :128] = np.linspace(-1, 1, 128)
    x[0, 5] = 1e30                       # one huge outlier in block (0, 0)
    x[1, 128:] = 2.0 ** -130             # subnormal amax in block (1, 1)
    x[1, 200] = 2.0 ** -140
    x[1, 3] = np.nan                     # NaN in block (1, 0), otherwise zero
    t = fp8emu.quantize_blockwise(x, "e4m3fn")
    # outlier: scale = 2**floor(log2(448/1e30)); the small values flush to zero
    assert float(t.scale[0, 0]) == te_scale(1e30, 448.0, pow2=True)
    assert t.dequantize()[0, 5] == pytest.approx(1e30, rel=2 ** -4)
    assert np.all(t.dequantize()[0, :128][np.arange(128) != 5] == 0)
    assert t.scale[0, 1] == 1 and t.scale[1, 0] == 1             # all-zero (and all-zero+NaN) blocks
    assert t.codes[1, 3] == 0x7F                                    # NaN stays NaN
    # subnormal amax: 448/2**-130 overflows float32 -> FLT_MAX, then pow2 -> 2**127;
    # 2**-130 becomes 2**-3 (exact), 2**-140 becomes 2**-13, below E4M3's range: zero
    assert t.scale[1, 1] == np.float32(2.0 ** 127)
    deq = t.dequantize()[1, 128:]
    assert deq[200 - 128] == 0
    assert np.all(np.delete(deq, 200 - 128) == np.float32(2.0 ** -130))


def test_blockwise_nd_and_errors():
    rng = np.random.default_rng(8)
    x = sample(rng, (3, 4, 200))
    t = fp8emu.quantize_blockwise(x, "e5m2")
    assert t.block == (1, 1, 128) and t.scale.shape == (3, 4, 2)
    check_roundtrip(t, x)
    t1 = fp8emu.quantize_blockwise(x[0, 0], "e5m2")        # 1-D input with the (1, 128) default
    np.testing.assert_array_equal(t1.codes, t.codes[0, 0])
    with pytest.raises(ValueError, match=">= 1"):
        fp8emu.quantize_blockwise(x, "e4m3fn", block=(1, 0))
    with pytest.raises(ValueError, match="non-unit"):
        fp8emu.quantize_blockwise(x[0, 0], "e4m3fn", block=(128, 128))
    with pytest.raises(ValueError, match="expected"):
        fp8emu.quantize_blockwise(x, "e4m3fn", scale=np.ones((3, 4)))
    with pytest.raises(ValueError, match="finite"):
        fp8emu.quantize_blockwise(x, "e4m3fn", scale=np.full((3, 4, 2), np.nan))


# ----------------------------------------------------------------- MX

def mx_exponent(amax, name, rule):
    """Shared exponent before clamping, from the rule's definition."""
    a = Fraction(float(amax))
    emax = SPEC_EMAX[name]
    if rule == "floor":
        return floor_log2(a) - emax
    if rule == "ceil":
        f = floor_log2(a)
        return f - emax + (Fraction(2) ** f != a)
    if rule == "even":
        # amax rounded to mbits fraction bits, ties away from zero (float32 subnormals
        # have the fixed exponent -126); then floor(log2).
        e = max(floor_log2(a), -126)
        ulp = Fraction(2) ** (e - SPEC_MBITS[name])
        r = math.floor(a / ulp + Fraction(1, 2)) * ulp
        return (floor_log2(r) if r >= Fraction(2) ** -126 else -127) - emax
    v = mul32(float(amax), div32(1, SPEC_MAX[name]))    # rceil
    if v == 0:
        return -127
    f = floor_log2(Fraction(v))
    return f + (Fraction(2) ** f != Fraction(v))


@pytest.mark.parametrize("name", list(SPEC_MAX))
@pytest.mark.parametrize("rule", ["floor", "ceil", "even", "rceil"])
def test_mx_scales_and_elements(name, rule):
    rng = np.random.default_rng(len(name) + len(rule))
    x = sample(rng, (4, 64 * 3 + 5), spread=8.0)          # padded last block
    # amax exactly at / just below powers of two and element-max boundaries
    specials = np.float32([1.0, 2.0 ** 10, np.nextafter(np.float32(2.0), 0), 448.0, 449.0, 6.0,
                           7.0, 0.75 * 2 ** -3, np.float32(1.9375), np.float32(1.96875)])
    ramp = np.linspace(-1, 1, 32, dtype=np.float32)            # block amax = the special value
    for j in range(6):
        x[0, 32 * j:32 * (j + 1)] = specials[j] * np.float32(2.0 ** 10) * ramp
        x[1, 32 * j:32 * (j + 1)] = specials[4 + j] * np.float32(2.0 ** -10) * ramp
    t = fp8emu.quantize_mx(x, name, scale_rule=rule)
    nb = -(-x.shape[1] // 32)
    assert t.scale_codes.shape == (4, nb) and t.block == (1, 32) and t.axis == 1
    assert is_pow2(t.scale) and is_pow2(t.scale_inv)
    for i in range(4):
        for j in range(nb):
            blk = x[i, j * 32:(j + 1) * 32]
            e = mx_exponent(np.max(np.abs(blk)), name, rule)
            e = min(max(e, -127), 127)
            assert int(t.scale_codes[i, j]) == e + 127, (i, j)
            assert float(t.scale_inv[i, j]) == 2.0 ** e
            np.testing.assert_array_equal(t.codes[i, j * 32:(j + 1) * 32],
                                          ml_cast_codes(blk * np.float32(2.0 ** -e), name))
    check_roundtrip(t, x)


def test_mx_hand_examples():
    # OCP MX v1.0: X = 2**(floor(log2 amax) - emax_elem); E4M3 emax_elem = 8.
    t = fp8emu.quantize_mx(np.float32([1.0, 0.5, -0.25]), "e4m3fn")
    assert t.scale_codes.tolist() == [127 - 8]                 # 2**-8
    assert t.codes.tolist() == [0x78, 0x70, 0xE8]              # 256, 128, -64 in E4M3
    # amax 500 -> floor(log2 500) = 8 -> X = 1; 500 is clamped to 448 (saturation)
    t = fp8emu.quantize_mx(np.float32([500.0, 1.0]), "e4m3fn")
    assert t.scale_codes.tolist() == [127] and t.dequantize().tolist() == [448.0, 1.0]
    # the same block with ceil: X = 2, nothing saturates (250 rounds to 256 in E4M3)
    t = fp8emu.quantize_mx(np.float32([500.0, 1.0]), "e4m3fn", scale_rule="ceil")
    assert t.scale_codes.tolist() == [128] and t.dequantize().tolist() == [512.0, 1.0]
    # FP4, amax 7: floor rule E = 2 - 2 = 0, 7 saturates to 6; rceil: ceil(log2(7/6)) = 1
    assert fp8emu.quantize_mx(np.float32([7.0]), "e2m1fn").dequantize().tolist() == [6.0]
    t = fp8emu.quantize_mx(np.float32([7.0]), "e2m1fn", scale_rule="rceil")
    assert t.scale_codes.tolist() == [128] and t.dequantize().tolist() == [8.0]
    # even: 7.75 rounds (E2M1 keeps 1 fraction bit) to 8 -> E = 3 - 2 = 1
    assert fp8emu.quantize_mx(np.float32([7.75]), "e2m1fn", scale_rule="even").scale_codes[0] == 128
    assert fp8emu.quantize_mx(np.float32([5.5]), "e2m1fn", scale_rule="even").scale_codes[0] == 127


def test_mx_edge_cases():
    x = np.zeros((3, 40), np.float32)
    x[0, :] = 1.0
    x[0, 7] = np.inf                                  # Inf in block (0, 0)
    x[1, 33] = np.nan                                 # NaN in block (1, 1)
    x[2, :32] = 2.0 ** -130                           # subnormal amax in block (2, 0)
    x[2, 32:] = 2.0 ** -140                           # ... and in block (2, 1)
    t = fp8emu.quantize_mx(x, "e4m3fn")
    assert t.scale_codes.shape == (3, 2)
    assert t.scale_codes[0, 0] == 0xFF and t.scale_codes[1, 1] == 0xFF
    deq = t.dequantize()
    assert np.all(np.isnan(deq[0, :32])) and np.all(np.isnan(deq[1, 32:]))
    assert np.all(deq[0, 32:] == 1.0)                 # neighbour block unaffected
    assert t.scale_codes[1, 0] == 0 and np.all(deq[1, :32] == 0)       # all-zero block: 2**-127
    # subnormal amax: E clamps to -127; 2**-130 * 2**127 = 2**-3 is exact, while
    # 2**-140 * 2**127 = 2**-13 is below E4M3's smallest subnormal and becomes 0
    assert t.scale_codes[2, 0] == 0 and t.scale_inv[2, 0] == np.float32(2.0 ** -127)
    assert t.scale_codes[2, 1] == 0
    np.testing.assert_array_equal(deq[2, :32], np.float32(2.0 ** -130))
    assert np.all(deq[2, 32:] == 0)


def test_mx_axis_and_errors():
    rng = np.random.default_rng(9)
    x = sample(rng, (70, 5))
    a0 = fp8emu.quantize_mx(x, "e5m2", axis=0, scale_rule="rceil")
    aT = fp8emu.quantize_mx(x.T, "e5m2", axis=-1, scale_rule="rceil")
    assert a0.block == (32, 1) and a0.scale_codes.shape == (3, 5)
    np.testing.assert_array_equal(a0.codes, aT.codes.T)
    np.testing.assert_array_equal(a0.scale_codes, aT.scale_codes.T)
    t = fp8emu.quantize_mx(x, "e4m3fn", block=16, axis=0)
    assert t.scale_codes.shape == (5, 5)
    with pytest.raises(ValueError, match="scale_rule"):
        fp8emu.quantize_mx(x, "e4m3fn", scale_rule="nearest")
    with pytest.raises(ValueError, match=">= 1"):
        fp8emu.quantize_mx(x, "e4m3fn", block=0)
    with pytest.raises(ValueError, match="out of range"):
        fp8emu.quantize_mx(x, "e4m3fn", axis=-3)
    with pytest.raises(ValueError, match="MX element format"):
        fp8emu.quantize_mx(x, "e4m3fnuz")


# ----------------------------------------------------------------- NVFP4

# UE5M3 (ml_dtypes 0.7 float8_e5m3fnu): unsigned, max 114688 = 1.75 * 2**16 (the constant)
UE5M3_MAX = 114688.0


def ue5m3_cast_codes(y):
    """Saturating RNE cast of non-negative values to UE5M3 through ml_dtypes."""
    return np.minimum(np.asarray(y, np.float32), UE5M3_MAX).astype(ml_dtypes.float8_e5m3fnu).view(np.uint8)


def nvfp4_reference(x, global_amax, scale="e4m3fn", block=16):
    smax, cast, mltype = ((448.0, lambda v: ml_cast_codes(v, "e4m3fn"), ml_dtypes.float8_e4m3fn)
                          if scale == "e4m3fn" else (UE5M3_MAX, ue5m3_cast_codes, ml_dtypes.float8_e5m3fnu))
    s_enc = div32(smax * 6, global_amax) if global_amax > 0 else math.inf
    s_enc = min(s_enc, F32_MAX)
    if global_amax == 0 or s_enc == 0:
        s_enc = 1.0
    factor = mul32(s_enc, div32(1, 6))
    rcp_enc = div32(1, s_enc)
    out_codes, out_block = [], []
    for j in range(0, x.shape[-1], block):
        blk = x[..., j:j + block]
        bamax = np.max(np.abs(blk), axis=-1)
        s_dec = np.float32([mul32(float(a), factor) for a in bamax.ravel()]).reshape(bamax.shape)
        bcode = cast(s_dec)
        bval = bcode.view(mltype).astype(np.float64)
        inv = np.float32([mul32(float(v), rcp_enc) for v in bval.ravel()]).reshape(bval.shape)
        scale = np.float32([min(div32(1, float(v)) if v else math.inf, F32_MAX) for v in inv.ravel()])
        scale = scale.reshape(inv.shape)
        out_codes.append(ml_cast_codes(blk * scale[..., None], "e2m1fn"))
        out_block.append(bcode)
    return s_enc, np.concatenate(out_codes, axis=-1), np.stack(out_block, axis=-1)


def test_nvfp4_matches_reference():
    rng = np.random.default_rng(11)
    x = sample(rng, (3, 16 * 4 + 7), spread=4.0)
    x[1, 16:32] = 0                                   # all-zero block
    x[2, 40] = 1e6                                    # outlier block
    t = fp8emu.quantize_nvfp4(x)
    s_enc, codes, bcodes = nvfp4_reference(x, float(np.max(np.abs(x))))
    assert t.fmt.name == "e2m1fn" and t.block == (1, 16) and t.scale.shape == (3, 5)
    assert float(t.global_scale) == s_enc
    np.testing.assert_array_equal(t.block_scale_codes, bcodes)
    np.testing.assert_array_equal(t.codes, codes)
    assert t.block_scale_codes[1, 1] == 0 and t.scale[1, 1] == np.float32(F32_MAX)
    assert np.all(t.dequantize()[1, 16:32] == 0)
    check_roundtrip(t, x)


@pytest.mark.parametrize("scale, block", [("e5m3fnu", 16), ("e5m3fnu", 32), ("e4m3fn", 32)])
def test_fp4_block_scales_ue5m3_and_32(scale, block):
    """Rubin's FP4 scale modes (UE5M3 x 16/32, UE4M3 x 32) against the same rule with ml_dtypes casts."""
    if scale == "e5m3fnu" and not hasattr(ml_dtypes, "float8_e5m3fnu"):
        pytest.skip(f"ml_dtypes {ml_dtypes.__version__} has no float8_e5m3fnu (0.7 added it)")
    rng = np.random.default_rng(12)
    x = sample(rng, (3, 32 * 3 + 5), spread=5.0)      # wide spread: UE5M3's range matters
    x[1, 32:64] = 0
    x[2, 70] = 1e7
    t = fp8emu.quantize_nvfp4(x, scale_format=scale, block_size=block)
    s_enc, codes, bcodes = nvfp4_reference(x, float(np.max(np.abs(x))), scale, block)
    assert t.block == (1, block) and float(t.global_scale) == s_enc
    got_b = t.block_scale_codes if scale == "e4m3fn" else t.scale_format_codes
    np.testing.assert_array_equal(got_b, bcodes)
    np.testing.assert_array_equal(t.codes, codes)
    if scale == "e5m3fnu":
        assert t.block_scale_codes is None and t.scale_format.name == "e5m3fnu" and t.recipe.endswith("-ue5m3" + (
            "-b32" if block == 32 else ""))
        back = fp8emu.scaling.nvfp4_from_codes(t.codes, t.scale_format_codes, t.global_scale,
                                               scale_format="e5m3fnu", block_size=block)
        np.testing.assert_array_equal(back.dequantize(), t.dequantize())
        # UE5M3 reaches 2**-17 * 114688 / amax below the tensor amax (E4M3: 2**-9 * 448): fewer zero blocks
        small = np.full((1, 64), 1e-4, np.float32)
        small[0, 0] = 1e3
        assert fp8emu.quantize_nvfp4(small, scale_format="e5m3fnu").dequantize()[0, 16:].min() > 0
        assert not fp8emu.quantize_nvfp4(small).dequantize()[0, 16:].any()
    check_roundtrip(t, x)


def test_fp4_block_scale_options_are_checked():
    x = np.ones((1, 32), np.float32)
    with pytest.raises(ValueError, match="scale_format must be one of 'e4m3fn', 'e5m3fnu'"):
        fp8emu.quantize_nvfp4(x, scale_format="e8m0fnu")
    with pytest.raises(ValueError, match="scale_max must be 114688 or 65536 for e5m3fnu"):
        fp8emu.quantize_nvfp4(x, scale_format="e5m3fnu", scale_max=448)
    with pytest.raises(ValueError, match=r"block_size must be one of \(16, 32\)"):
        fp8emu.quantize_nvfp4(x, block_size=64)
    with pytest.raises(ValueError, match="block_size"):
        fp8emu.quantize_nvfp4(x, block_size=True)
    t = fp8emu.quantize_nvfp4(x, scale_format="e5m3fnu")
    # block_scaled_mm takes UE5M3 scales (decoded as UE5M3, never as UE4M3): x times a column of ones
    # is each row's dequantized sum, whatever the scale type, within the FP32 accumulation
    ones = fp8emu.quantize_nvfp4(np.ones((32, 1), np.float32), axis=0, scale_format="e5m3fnu")
    got = fp8emu.block_scaled_mm(t, ones, accumulator="exact")
    want = t.dequantize().astype(np.float64) @ ones.dequantize().astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=2 ** -22)
    with pytest.raises(ValueError, match="scale_format and scale_format_codes"):
        fp8emu.scaling.ScaledTensor(codes=t.codes, fmt="e2m1fn", scale=t.scale, scale_inv=t.scale_inv,
                                    block=t.block, scale_format="e5m3fnu")


def test_nvfp4_hand_example_and_global_amax():
    # amax 6 -> S_enc = 2688/6 = 448; block scale e4m3(6 * 448/6) = 448 -> code 0x7E
    t = fp8emu.quantize_nvfp4(np.float32([6.0, -3.0, 1.5, 0.25]))
    assert t.global_scale == 448 and t.block_scale_codes.tolist() == [0x7E]
    assert t.dequantize().tolist() == [6.0, -3.0, 1.5, 0.0]        # 0.25 -> 0 (ties to even)
    z = fp8emu.quantize_nvfp4(np.zeros(20))
    assert z.global_scale == 1 and not z.codes.any() and not z.dequantize().any()
    # global_amax 12 -> S_enc 224; block scale e4m3(2 * fl32(224/6) = 74.67) = 72 (code 0x69),
    # so scale_inv = fl32(72 * fl32(1/224)) and 2 * fl32(1/scale_inv) > 6 saturates
    g = fp8emu.quantize_nvfp4(np.float32([1.0, 2.0]), global_amax=12.0)
    inv = mul32(72, div32(1, 224))
    assert g.global_scale == 224 and g.block_scale_codes.tolist() == [0x69]
    assert float(g.scale_inv[0]) == inv
    assert g.dequantize().tolist() == [mul32(3, inv), mul32(6, inv)]
    with pytest.raises(ValueError, match="global_amax"):
        fp8emu.quantize_nvfp4([1.0], global_amax=-1.0)
    with pytest.raises(ValueError, match="rounding"):
        fp8emu.quantize_nvfp4([1.0], rounding="rtz")


def test_nvfp4_stochastic_rounding():
    x = np.full((1, 4096), 1.25, np.float32)
    x[0, ::16] = 6.0                                  # scale 1 per block: 1.25 lies between 1 and 1.5
    a = fp8emu.quantize_nvfp4(x, rounding="stochastic", rng=5)
    b = fp8emu.quantize_nvfp4(x, rounding="stochastic", rng=5)
    np.testing.assert_array_equal(a.codes, b.codes)
    d = np.delete(a.dequantize()[0], np.arange(0, 4096, 16))
    assert np.all(a.scale_inv == 1)
    assert set(np.unique(d).tolist()) == {1.0, 1.5}
    assert abs(d.mean() - 1.25) < 0.02               # unbiased on average
    with pytest.raises(ValueError, match="rng"):
        fp8emu.quantize_nvfp4(x, rng=1)


def test_scaled_tensor_validates_layout():
    with pytest.raises(ValueError, match="scale has shape"):
        fp8emu.ScaledTensor(codes=np.zeros((4, 4), np.uint8), fmt="e4m3fn", scale=np.ones((4, 2)),
                            scale_inv=np.ones((4, 1)), block=(1, 4), shape=(4, 4))
    with pytest.raises(TypeError, match="uint8"):
        fp8emu.ScaledTensor(codes=np.zeros(3), fmt="e4m3fn", scale=1.0, scale_inv=1.0)
    t = fp8emu.ScaledTensor(codes=np.full(3, 0x38, np.uint8), fmt="e4m3fn", scale=2.0, scale_inv=0.5)
    assert t.dequantize(np.float64).tolist() == [0.5, 0.5, 0.5]


def test_mx_scale_powers_of_two_from_bits_cover_every_exponent():
    """2**e for every E8M0 exponent (-127 is float32's subnormal 0x00400000) and floor(log2 a) for
    every float32 binade, normal and subnormal, against math.ldexp / exact integer logs."""
    import math
    from fp8emu.scaling.mx import _floor_log2_f32, _pow2_f32
    e = np.arange(-127, 128)
    got = _pow2_f32(e)
    assert got.dtype == np.float32
    assert [float(g) for g in got] == [math.ldexp(1.0, int(k)) for k in e]
    assert got[0].view(np.uint32) == 0x00400000
    a = np.array([2.0 ** k for k in range(-149, 128)] + [3.0 * 2.0 ** -149, 1.5, 0.75, 2.0 ** 127 * 1.9999],
                 np.float32)
    want = [k for k in range(-149, 128)] + [-148, 0, -1, 127]
    assert _floor_log2_f32(a).tolist() == want
    # codes round trip: every scale code gives the powers of two it names
    codes = np.arange(255, dtype=np.uint8).reshape(-1, 1)
    from fp8emu.scaling.mx import mx_from_codes
    t = mx_from_codes(np.zeros((255, 32), np.uint8), codes, "e4m3fn")
    assert [float(v) for v in t.scale_inv.ravel()] == [math.ldexp(1.0, int(c) - 127) for c in codes.ravel()]
    assert [float(v) for v in t.scale.ravel()] == [math.ldexp(1.0, 127 - int(c)) for c in codes.ravel()]
