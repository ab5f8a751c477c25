"""No silent wrong answer.  Each test pins one defect found by an audit of the
public entry points with bad and unusual inputs; every one failed before its fix.

Expectations come from spec constants (float32 limits, format fields), exact
arithmetic and the code tables, never from the code under test.
"""

import math
import tracemalloc
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import fp8emu
from fp8emu import Format
from fp8emu.lab import analysis, train

F32_MAX = float(np.finfo(np.float32).max)
E4 = "e4m3fn"


def codes(x, fmt=E4):
    return fp8emu.encode(np.asarray(x, np.float64), fmt)


# ----------------------------------------------------------------------------- as_ml_dtypes
@pytest.mark.parametrize("fmt, bad", [("e2m1fn", 0x1F), ("e2m1fn", 0x10), ("e2m3fn", 0x40),
                                      ("e3m2fn", 0xFF)])
def test_as_ml_dtypes_rejects_codes_wider_than_the_format(fmt, bad):
    with pytest.raises(ValueError, match=r"holds codes above .*'s [46] bits \(accepted: 0\.\.(15|63)\)"):
        fp8emu.as_ml_dtypes(np.array([0, bad], np.uint8), fmt)


def test_as_ml_dtypes_accepts_every_valid_code():
    for fmt, bits in (("e2m1fn", 4), ("e2m3fn", 6), ("e4m3fn", 8)):
        c = np.arange(1 << bits, dtype=np.uint8)
        v = fp8emu.as_ml_dtypes(c, fmt)
        assert np.shares_memory(v, c)
        np.testing.assert_array_equal(v.astype(np.float64), fp8emu.get_format(fmt).values())


# ----------------------------------------------------------------------------- scaled_mm
def _ab(m=2, k=16, n=3):
    g = np.random.default_rng(0)
    return codes(g.uniform(-2, 2, (m, k))), codes(g.uniform(-2, 2, (k, n)))


def test_scaled_mm_scaledtensor_with_conflicting_format_is_an_error():
    t = fp8emu.quantize_tensorwise(np.ones((2, 16)), E4, scale=1.0)
    _, b = _ab()
    with pytest.raises(ValueError, match="ScaledTensor of format e4m3fn but a_format is e5m2"):
        fp8emu.scaled_mm(t, b, a_format="e5m2", b_format=E4)
    # the same format (by name or object) is fine: 16 products of 1 * value
    same = fp8emu.scaled_mm(t, b, a_format=fp8emu.get_format(E4), b_format=E4, accumulator="exact")
    vb = fp8emu.decode(b, E4, dtype=np.float64)
    np.testing.assert_array_equal(same, np.tile(vb.sum(0), (2, 1)).astype(np.float32))


@pytest.mark.parametrize("kw", [{"scale_a": 1e39}, {"scale_b": -1e39}, {"scale_a": np.array([[1.0], [1e40]])}])
def test_scaled_mm_finite_scales_beyond_float32_are_errors(kw):
    a, b = _ab()
    with pytest.raises(ValueError, match="overflows float32"):
        fp8emu.scaled_mm(a, b, a_format=E4, b_format=E4, **kw)


@pytest.mark.parametrize("kw", [{"scale_a": np.inf}, {"scale_b": np.nan}, {"scale_a": np.array([[1.0], [-np.inf]])},
                                {"scale_a": np.float32(np.inf), "scale_b": 0.0}])
def test_scaled_mm_inf_and_nan_scales_warn_and_multiply_as_ieee(kw):
    # cuBLAS's epilogue multiplies whatever the scale holds (torchao passes 1 / 0 = Inf for a tensor holding
    # Inf): the emulation does the same, and says so once
    a, b = _ab()
    with pytest.warns(RuntimeWarning, match="Inf or NaN value.*IEEE float32"):
        out = fp8emu.scaled_mm(a, b, a_format=E4, b_format=E4, accumulator="exact", **kw)
    acc = fp8emu.scaled_mm(a, b, a_format=E4, b_format=E4, accumulator="exact")
    sa = np.broadcast_to(np.asarray(kw.get("scale_a", 1.0), np.float64), (2, 1))
    sb = np.asarray(kw.get("scale_b", 1.0), np.float64)
    with np.errstate(invalid="ignore"):
        want = acc.astype(np.float64) * sa * sb       # float64 products with +-Inf / NaN / 0: IEEE's rules
    np.testing.assert_array_equal(out, want.astype(np.float32))
    assert not np.isfinite(out).all()


def test_the_result_scale_must_still_be_finite():
    a, b = _ab()
    with pytest.raises(ValueError, match="finite in float32"):
        fp8emu.scaled_mm(a, b, a_format=E4, b_format=E4, out_dtype="e4m3fn", scale_result=np.inf)


def test_scaled_mm_largest_float32_scale_is_accepted():
    a, b = _ab()
    out = fp8emu.scaled_mm(a, b, a_format=E4, b_format=E4, scale_a=F32_MAX, scale_b=2.0 ** -127,
                           accumulator="exact")
    ref = fp8emu.scaled_mm(a, b, a_format=E4, b_format=E4, accumulator="exact")
    # alpha = fl32(F32_MAX * 2**-127) is exactly (2 - 2**-23): one rounding of acc * alpha
    alpha = Fraction(2) - Fraction(1, 2 ** 23)
    exp = [[float(np.float32(float(Fraction(float(v)) * alpha))) for v in row] for row in ref]
    np.testing.assert_array_equal(out, np.array(exp, np.float32))


@pytest.mark.parametrize("kw, what", [({"scale_a": "2"}, "scale_a"), ({"scale_b": [b"1"]}, "scale_b"),
                                      ({"scale_a": 1 + 0j}, "scale_a"), ({"scale_a": True}, "scale_a"),
                                      ({"bias": np.array([1 + 2j, 1, 1])}, "bias"),
                                      ({"bias": ["1", "2", "3"]}, "bias")])
def test_scaled_mm_strings_bools_and_complex_are_errors(kw, what):
    a, b = _ab()
    with pytest.raises(TypeError, match=what):
        fp8emu.scaled_mm(a, b, a_format=E4, b_format=E4, **kw)


@pytest.mark.parametrize("m, k, n", [(0, 16, 3), (2, 16, 0), (0, 0, 0), (0, 16, 0)])
@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16", E4])
def test_scaled_mm_empty_results(m, k, n, out_dtype):
    a = np.zeros((m, k), np.uint8)
    b = np.zeros((k, n), np.uint8)
    for acc in ("exact", "fp32", "hopper", "hopper-fast"):
        out = fp8emu.scaled_mm(a, b, a_format=E4, b_format=E4, accumulator=acc, out_dtype=out_dtype,
                               bias=np.ones(n))
        assert out.shape == (m, n)
        assert out.dtype == (np.uint8 if out_dtype == E4 else np.dtype(out_dtype))


def test_scaled_mm_k_zero_is_bias_only():
    out = fp8emu.scaled_mm(np.zeros((2, 0), np.uint8), np.zeros((0, 3), np.uint8), a_format=E4,
                           b_format=E4, bias=[1.5, -2.0, 0.25], accumulator="exact")
    np.testing.assert_array_equal(out, np.tile(np.array([1.5, -2.0, 0.25], np.float32), (2, 1)))


def test_scaled_mm_scale_b_shape_error_in_the_callers_orientation():
    a, b = _ab(m=4, k=256, n=3)          # K = 256 -> 2 K-blocks; N = 3
    with pytest.raises(ValueError) as e:
        fp8emu.scaled_mm(a, b, a_format=E4, b_format=E4, scale_b=np.ones((3, 1)))
    msg = str(e.value)
    assert "scale_b has shape (3, 1)" in msg
    assert "(1, 3) column-wise" in msg and "(2, 3) 1x128 blocks" in msg and "(2, 1) 128x128" in msg
    # and the shapes it lists are really accepted
    for shape in ((1, 3), (2, 3), (2, 1)):
        fp8emu.scaled_mm(a, b, a_format=E4, b_format=E4, scale_b=np.ones(shape))
    with pytest.raises(ValueError, match=r"scale_a has shape \(1, 4\); accepted: a scalar, \(4, 1\)"):
        fp8emu.scaled_mm(a, b, a_format=E4, b_format=E4, scale_a=np.ones((1, 4)))


# ----------------------------------------------------------------------------- scaling recipes
@pytest.mark.parametrize("scale", [1e-45, 2.0 ** -128.5, 0.0, -1.0, np.inf, np.nan, 1e39])
def test_given_scale_must_be_finite_positive_with_finite_reciprocal(scale):
    with pytest.raises(ValueError, match="scale"):
        fp8emu.quantize_tensorwise(np.ones(3), E4, scale=scale)
    with pytest.raises(ValueError, match="scale"):
        fp8emu.quantize_blockwise(np.ones((2, 4)), E4, block=(1, 2), scale=np.full((2, 2), scale))


def test_given_scale_smallest_accepted_has_finite_dequantization():
    s = float(np.nextafter(np.float32(2.0 ** -128), np.float32(1)))   # 1/s < 2**128: finite
    with pytest.raises(ValueError, match=r"> 2\*\*-128"):
        fp8emu.quantize_tensorwise(np.ones(3), E4, scale=2.0 ** -128)   # 1/s = 2**128 overflows
    t = fp8emu.quantize_tensorwise(np.full(3, 2.0 ** 120), E4, scale=s)
    assert np.isfinite(t.scale_inv) and np.all(np.isfinite(t.dequantize()))


@pytest.mark.parametrize("margin", [10000, -10000, 150, -200])
def test_margin_out_of_range_is_a_clear_error(margin):
    for call in (lambda: fp8emu.quantize_tensorwise(np.ones(3), E4, margin=margin),
                 lambda: fp8emu.current_scale(3.0, E4, margin=margin),
                 lambda: fp8emu.quantize_axiswise(np.ones((2, 2)), E4, margin=margin),
                 lambda: fp8emu.quantize_blockwise(np.ones((2, 2)), E4, margin=margin),
                 lambda: fp8emu.DelayedScaling(E4, margin=margin)):
        with pytest.raises(ValueError, match=r"margin must be in -?\d+\.\.\d+ for e4m3fn"):
            call()


def test_margin_extremes_inside_the_range_give_exact_scaled_max():
    # 448 = 7 * 2**6: fl32(448 * 2**-m) exact for -119 <= m <= 149 (2**-149 needs 7 * 2**-143 >= 2**-149)
    for m, amax in ((-119, 2.0 ** 127), (149, 2.0 ** -140)):
        s = fp8emu.current_scale(amax, E4, margin=m)
        exact = Fraction(448) * Fraction(2) ** -m / Fraction(amax)
        assert Fraction(float(s)) == exact


@pytest.mark.parametrize("pow2", ["no", 1, 0, None, "False"])
def test_pow2_must_be_a_bool(pow2):
    for call in (lambda: fp8emu.quantize_tensorwise(np.ones(3) * 3, E4, pow2=pow2),
                 lambda: fp8emu.current_scale(3.0, E4, pow2=pow2),
                 lambda: fp8emu.quantize_blockwise(np.ones((2, 2)), E4, pow2=pow2),
                 lambda: fp8emu.quantize_axiswise(np.ones((2, 2)), E4, pow2=pow2)):
        with pytest.raises(TypeError, match="pow2 must be a bool"):
            call()
    # numpy bools are bools
    assert float(fp8emu.current_scale(3.0, E4, pow2=np.bool_(True))) == 128.0


@pytest.mark.parametrize("bad", [0, -1.0, np.inf, np.nan, 1e-45, "2", 1e39])
def test_delayed_scaling_scale_cannot_be_set_to_a_bad_value(bad):
    ds = fp8emu.DelayedScaling(E4, amax_history_len=2)
    with pytest.raises((ValueError, TypeError), match="scale"):
        ds.scale = bad
    assert ds.scale == 1 and ds.scale_inv == 1


def test_delayed_scaling_scale_setter_updates_scale_inv():
    ds = fp8emu.DelayedScaling(E4, amax_history_len=2)
    ds.scale = 3.0
    assert ds.scale == np.float32(3) and ds.scale_inv == np.float32(1 / np.float32(3))
    assert ds.quantize(np.array([1.0])).scale_inv == np.float32(1 / np.float32(3))
    with pytest.raises(AttributeError):
        ds.scale_inv = 2.0


# ----------------------------------------------------------------------------- e8m0 as element format
def test_unsigned_scale_format_is_rejected_as_element_format():
    x = np.array([[-1.0, 2.0]])
    for call in (lambda: fp8emu.quantize_tensorwise(x, "e8m0fnu"),
                 lambda: fp8emu.quantize_axiswise(x, "e8m0fnu"),
                 lambda: fp8emu.quantize_blockwise(x, "e8m0fnu"),
                 lambda: fp8emu.current_scale(2.0, "e8m0fnu"),
                 lambda: fp8emu.DelayedScaling("e8m0fnu"),
                 lambda: fp8emu.quantize_mx(x, "e8m0fnu"),
                 lambda: fp8emu.ScaledTensor(codes=np.zeros(2, np.uint8), fmt="e8m0fnu", scale=1.0,
                                             scale_inv=1.0)):
        with pytest.raises(ValueError, match="e8m0fnu"):
            call()


# ----------------------------------------------------------------------------- dequantize dtype
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, ml_dtypes.float8_e4m3fn, np.complex64, "S4", object])
def test_dequantize_rejects_non_float_dtypes(dtype):
    t = fp8emu.quantize_tensorwise(np.array([1.0, -2.0]), E4)
    with pytest.raises(TypeError, match="float16, bfloat16, float32, float64"):
        t.dequantize(dtype)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64, "float64"])
def test_dequantize_accepts_the_four_float_dtypes(dtype):
    t = fp8emu.quantize_tensorwise(np.array([1.0, -2.0, 0.5]), E4)
    out = t.dequantize(dtype)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out.astype(np.float64), [1.0, -2.0, 0.5])


# ----------------------------------------------------------------------------- huge blocks
@pytest.mark.parametrize("call", [
    lambda x: fp8emu.quantize_blockwise(x, E4, block=(1, 2 ** 40)),
    lambda x: fp8emu.quantize_blockwise(x, E4, block=(2 ** 30, 2 ** 30)),
    lambda x: fp8emu.quantize_mx(x, E4, block=2 ** 40),
])
def test_block_larger_than_the_axis_is_one_block_of_the_axis(call):
    g = np.random.default_rng(1)
    x = g.standard_normal((4, 300))
    tracemalloc.start()
    try:
        t = call(x)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100 * x.nbytes          # proportional to the input, not to the block
    # one block per axis it covers: the same codes as one scale for that span
    if t.recipe.startswith("mx"):
        ref = fp8emu.quantize_mx(x, E4, block=300)
    else:
        ref = fp8emu.quantize_blockwise(x, E4, block=tuple(min(b, s) for b, s in zip(t.block, x.shape)))
    np.testing.assert_array_equal(t.codes, ref.codes)
    np.testing.assert_array_equal(t.scale, ref.scale)
    np.testing.assert_array_equal(t.dequantize(), ref.dequantize())


@pytest.mark.parametrize("block", [("2",), (1.0, 2), (True,), "12", (), [None]])
def test_bad_block_is_a_clear_error(block):
    with pytest.raises(TypeError, match=r"block must be an int or a non-empty tuple of ints"):
        fp8emu.quantize_blockwise(np.ones((2, 4)), E4, block=block)


# ----------------------------------------------------------------------------- Format fields
@pytest.mark.parametrize("kw, match", [
    ({"bias": 10 ** 6}, r"Format.bias must be in -1008\.\.1020 for ebits=4, mbits=3"),
    ({"bias": -2000}, r"Format.bias must be in -1008\.\.1020"),
    ({"bias": 1021}, r"Format.bias must be in"),
    ({"bias": -1009}, r"Format.bias must be in"),
    ({"ebits": 9, "mbits": 0}, r"Format.ebits must be in 0\.\.8"),      # 0: scaled integers (FP4 E0M3)
    ({"ebits": -1}, r"Format.ebits must be in 0\.\.8"),
    ({"mbits": -1}, r"Format.mbits must be in 0\.\.7"),
    ({"ebits": 5, "mbits": 3}, r"at most 8 bits"),
    ({"name": ""}, r"Format.name"),
    ({"name": 5}, r"Format.name"),
])
def test_format_field_range_errors_name_the_field(kw, match):
    args = {"name": "x", "ebits": 4, "mbits": 3, "bias": 7} | kw
    with pytest.raises(ValueError, match=match):
        Format(**args)


@pytest.mark.parametrize("kw, match", [
    ({"ebits": True}, "Format.ebits must be an int"), ({"mbits": 3.0}, "Format.mbits must be an int"),
    ({"bias": "7"}, "Format.bias must be an int"), ({"signed": "no"}, "Format.signed must be a bool"),
    ({"signed": 1}, "Format.signed must be a bool"), ({"subnormals": None}, "Format.subnormals must be a bool"),
    ({"description": 5}, "Format.description must be a string"),
])
def test_format_field_type_errors_name_the_field(kw, match):
    args = {"name": "x", "ebits": 4, "mbits": 3, "bias": 7} | kw
    with pytest.raises(TypeError, match=match):
        Format(**args)


def test_format_bias_extremes_are_exact():
    lo = Format("lo", 4, 3, -1008, nan="fn")
    hi = Format("hi", 4, 3, 1020)
    # max of lo: exponent field 15 (mantissa 110, 111 is NaN): 1.75 * 2**(15 + 1008), finite
    assert lo.max == math.ldexp(1.75, 1023) and np.all(np.isfinite(lo.values()[~lo.nan_mask(np.arange(256))]))
    # smallest subnormal of hi: 2**(1 - 1020 - 3) = 2**-1022, a normal float64
    assert hi.min_subnormal == 2.0 ** -1022 and hi.values()[1] == 2.0 ** -1022
    # and encoding at the extremes is exact (float64 input, rounded once)
    x = np.array([2.0 ** -1022, 1.5 * 2.0 ** -1022, 2.0 ** -1023], np.float64)
    assert fp8emu.encode(x, hi).tolist() == [1, 2, 0]      # 1.5 ulp ties to even (2); half ulp ties to 0


def test_format_numpy_ints_and_bools_are_normalised():
    f = Format("x", np.int64(4), np.uint8(3), np.int32(7), signed=np.bool_(True), nan="fn")
    assert f == Format("x", 4, 3, 7, nan="fn") and hash(f) == hash(Format("x", 4, 3, 7, nan="fn"))
    assert type(f.ebits) is int and type(f.signed) is bool


# ----------------------------------------------------------------------------- sweep_scale
@pytest.mark.parametrize("scales, exc", [([float("nan")], ValueError), ([0.0], ValueError), ([-1.0], ValueError),
                                         ([np.inf], ValueError), ("12", TypeError), (["1"], TypeError),
                                         (2.0, TypeError), ([[1.0]], TypeError)])
def test_sweep_scale_rejects_bad_scales(scales, exc):
    with pytest.raises(exc, match="scales"):
        analysis.sweep_scale([E4], ["gaussian"], scales, n=64)


def test_sweep_scale_rejects_a_bare_string_for_names():
    with pytest.raises(TypeError, match=r"formats must be a sequence of names, e.g. \['e4m3fn'\]"):
        analysis.sweep_scale(E4, ["gaussian"], [1.0], n=64)
    with pytest.raises(TypeError, match="distributions"):
        analysis.sweep_scale([E4], "gaussian", [1.0], n=64)


# ----------------------------------------------------------------------------- decode shapes
def test_decode_of_0d_input_is_a_0d_array_like_encode():
    for c in (np.uint8(56), np.array(56, np.uint8), 56):
        out = fp8emu.decode(c, E4)
        assert isinstance(out, np.ndarray) and out.shape == () and out == 1.0
    enc = fp8emu.encode(1.0, E4)
    assert isinstance(enc, np.ndarray) and enc.shape == ()
    assert isinstance(fp8emu.quantize(np.float32(1.0), E4), np.ndarray)


def test_decode_of_an_empty_list_is_empty():
    for empty in ([], (), [[]]):
        out = fp8emu.decode(empty, E4, dtype=np.float64)
        assert out.shape == np.shape(empty) and out.dtype == np.float64
    with pytest.raises(TypeError, match="got dtype float64"):
        fp8emu.decode(np.array([], np.float64), E4)      # an explicitly float array is still refused


# ----------------------------------------------------------------------------- overflow counts
def test_overflow_threshold_agrees_with_non_saturating_encode():
    """Independent check: the first value above the threshold encodes to Inf/NaN, the threshold
    itself only when ties overflow, the value just below never."""
    for name in fp8emu.format_names():
        f = fp8emu.get_format(name)
        if not (f.signed and (f.has_inf or f.has_nan)):
            continue
        h, tie = analysis.overflow_threshold(f)
        x = np.array([np.nextafter(h, 0), h, np.nextafter(h, np.inf)])
        over = ~np.isfinite(fp8emu.decode(fp8emu.encode(x, f), f, dtype=np.float64))
        assert over.tolist() == [False, tie, True], name
        np.testing.assert_array_equal(analysis.overflow_mask(np.concatenate([x, -x]), f),
                                      np.concatenate([over, over]))


def test_e4m3fn_nothing_up_to_464_overflows():
    # spec: max 448 = 0x7E; the next grid value 480 would be code 0x7F (odd), so the tie 464 rounds to 448
    assert analysis.overflow_threshold(E4) == (464.0, False)
    assert analysis.overflow_threshold("e5m2") == (61440.0, True)
    assert analysis.overflow_threshold(E4, "rna") == (464.0, True)
    q = train._Quantizer(E4, 4)
    q.ds.scale = 1.0
    q(np.array([449.0, 460.0, 464.0, -464.0, 464.5, -500.0, np.nan], np.float32))
    assert q.overflow == 2


def test_figure5_counts_overflows_against_the_rounding_threshold():
    pytest.importorskip("matplotlib")
    from fp8emu.lab import plots
    import inspect
    src = inspect.getsource(plots.figure_delayed_scaling)
    assert "overflow_mask" in src and "xs > fmax" not in src


# ----------------------------------------------------------------------------- deterministic training
def test_training_model_has_no_blas_float32_gemm():
    """A float32 GEMM through BLAS depends on the library's summation order; the model's GEMMs
    go through MLP._mm (sequential K-order float32 sums, or scaled_mm on FP8 codes)."""
    import inspect
    src = inspect.getsource(train.MLP) + inspect.getsource(train._softmax_xent)
    assert " @ " not in src and "np.dot" not in src and "matmul" not in src


def test_training_float32_gemm_is_the_sequential_k_order_sum():
    g = np.random.default_rng(3)
    a = g.standard_normal((3, 40)).astype(np.float32)
    b = g.standard_normal((40, 2)).astype(np.float32)
    m = train.MLP([40, 2], precision="float32")
    out = m._mm(a, None, b, None)
    exp = np.zeros((3, 2), np.float32)
    for k in range(40):                      # one IEEE float32 product and sum at a time, in K order
        exp = (exp + (a[:, k:k + 1] * b[k:k + 1, :]).astype(np.float32)).astype(np.float32)
    np.testing.assert_array_equal(out, exp)


# ----------------------------------------------------------------------------- NaN sign on decode
@pytest.mark.parametrize("fmt", [n for n in fp8emu.format_names() if fp8emu.get_format(n).ml_dtype is not None])
def test_decoded_nan_keeps_the_codes_sign_as_ml_dtypes(fmt):
    """Found by the property 'every code decodes and re-encodes to itself': 0xFF (e4m3fn -NaN)
    decoded to +NaN, so it re-encoded to 0x7F, and ml_dtypes decodes it to -NaN."""
    f = fp8emu.get_format(fmt)
    c = np.arange(1 << f.bits, dtype=np.uint8)
    ml = c.view(f.ml_dtype).astype(np.float32)
    for dt in (np.float32, np.float64, np.float16):
        got = fp8emu.decode(c, f, dtype=dt).astype(np.float32)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(ml))
    nan = np.isnan(ml)
    if f.has_signed_nan:
        assert (fp8emu.encode(ml[nan], f) & f.sign_bit).tolist() == (c[nan] & f.sign_bit).tolist()


# =============================================================================== attention, GEMM and scale inputs
# Each test below failed before its fix.  Expectations: float32 limits (spec constants), the
# documented contracts of the functions, MMA-Sim's reading of a UE4M3 scale code.
from fp8emu.attention import AttentionRecipe, AttentionReport, attention, reference_attention  # noqa: E402


def _qkv(h=2, n=16, d=8, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((h, n, d)).astype(np.float32) for _ in range(3))


# ----------------------------------------------------------------------------- checked as used
@pytest.mark.parametrize("scale", [1e39, 1e-50, 3.0e38, np.float64(1e39), 10 ** 40])
def test_softmax_scale_is_checked_as_the_float32_the_kernel_folds(scale):
    """1e39 and 10**40 are Inf in float32, 1e-50 is 0; 3e38 is finite, but fl32(3e38 * log2(e)) (the
    FA3 fold) is Inf.  Each gave all-NaN output with report.ok True."""
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="softmax_scale"):
        attention(q, k, v, "fa3-fp8", softmax_scale=scale)


def test_a_row_whose_probabilities_all_vanish_is_not_ok():
    """softmax_scale=1e38 folds to a finite multiplier (accepted), but m * scale_log2 overflows in
    float32 inside the kernel, every P is 0, and the rows came out as O = 0, lse = -inf (the
    result of a fully masked row) with report.ok True."""
    q, k, v = _qkv()
    assert np.isfinite(np.float32(1e38 * math.log2(math.e)))
    res = attention(q, k, v, "fa3-fp8", softmax_scale=1e38, reference=False)
    assert np.all(res.lse == -np.inf)            # the kernel's float32 overflow, modelled
    assert not res.report.ok and any("invalid lse" in f for f in res.report.flags)
    masked = attention(q, k, v, "fa3-fp8", kv_len=0, reference=False)   # no keys: -inf is right
    assert np.all(masked.lse == -np.inf) and masked.report.ok
    causal = attention(q[:, :4], k, v, "fa3-fp8", causal=True, reference=False)
    assert causal.report.ok


@pytest.mark.parametrize("field, value", [("p_scale", 1e39), ("p_scale", 1e-46), ("p_scale", 1e-39),
                                          ("rescale_threshold", 1e39), ("rescale_threshold", 1e-50)])
def test_recipe_numbers_are_checked_as_float32(field, value):
    """p_scale 1e39 is Inf in float32; 1e-46 is 0; 1e-39 is a float32 subnormal whose reciprocal
    (the row-sum and descale factor fl32(1 / p_scale)) is Inf; rescale_threshold 1e39 is Inf
    (the max would never be updated) and 1e-50 is 0 (the option silently off)."""
    with pytest.raises(ValueError, match=field):
        AttentionRecipe(**{field: value})


@pytest.mark.parametrize("d, why", [(1e39, "k descale overflows float32"),
                                     (1e-46, "k descale underflows to 0 in float32"),
                                     (1e-39, "k descale has a float32 reciprocal that overflows")])
def test_given_descales_are_checked_as_float32_with_their_reciprocal(d, why):
    # the message says which float32 limit each value breaks (not "must be finite")
    q, k, v = _qkv()
    r = AttentionRecipe(scale_rule="given")
    with pytest.raises(ValueError, match=why):
        attention(q, k, v, r, descales=(1.0, d, 1.0))


# ----------------------------------------------------------------------------- never ok on NaN
def test_a_nan_output_is_never_ok():
    """A non-saturating P cast (p_saturate=False) with P past the format's max gives NaN rows;
    the report flagged nothing (nanmax skipped the NaN errors)."""
    q, k, v = _qkv()
    r = AttentionRecipe(p_saturate=False, max_offset=10)     # P up to 2**10 > e4m3fn's 448 -> NaN
    res = attention(q, k, v, r)
    assert np.isnan(res.out).any()
    assert not res.report.ok
    assert any("non-finite output" in f for f in res.report.flags)
    res = attention(q, k, v, r, reference=False)             # no reference: still flagged
    assert not res.report.ok


@pytest.mark.parametrize("field", ["rms_rel_error", "max_rel_error", "lse_max_abs_error",
                                   "kernel_rms_rel_error"])
def test_a_nan_error_is_never_ok(field):
    z = np.zeros((1, 2), np.int64)
    rep = AttentionReport("x", z, z, z, **{field: np.array([np.nan])})
    assert not rep.ok and any(field in f for f in rep.flags)
    lse = AttentionReport("x", z, z, z, lse_invalid=np.array([[0, 1]]))
    assert not lse.ok


# ----------------------------------------------------------------------------- one contract
_BAD_SHAPES = {
    "v shorter than k": lambda q, k, v: (q, k, v[:, :8]),
    "heads not a multiple": lambda q, k, v: (q[:1], k, v),
    "zero kv heads": lambda q, k, v: (q, k[:0], v[:0]),
    "head dims differ": lambda q, k, v: (q, k[..., :4], v),
    "NaN in q": lambda q, k, v: (np.where(q > 1, np.nan, q), k, v),
}


@pytest.mark.parametrize("case", list(_BAD_SHAPES))
def test_reference_attention_refuses_what_attention_refuses(case):
    """reference_attention took the key count from v (silently dropping keys), divided by the
    head count (ZeroDivisionError) and indexed past the KV heads (IndexError)."""
    args = _BAD_SHAPES[case](*_qkv())
    with pytest.raises(ValueError) as want:
        attention(*args, reference=False)
    with pytest.raises(ValueError) as got:
        reference_attention(*args)
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("kw", [dict(kv_len=-1), dict(kv_len=17), dict(softmax_scale=0.0),
                                dict(softmax_scale=1e39), dict(causal="yes"), dict(block_n=0)])
def test_reference_attention_checks_its_options(kw):
    q, k, v = _qkv()
    with pytest.raises((ValueError, TypeError)):
        reference_attention(q, k, v, **kw)


def test_ue4m3_sign_bit_is_read_alike_by_mma_and_block_scaled_mm():
    """The rule is the instruction's: a UE4M3 scale code's bit 7 is not read (MMA-Sim's
    truncate_e4m3_to_ue4m3 masks it).  mma read 0xB8 as 1.0; block_scaled_mm refused it."""
    from fp8emu.gemm import block_scaled_mm
    from fp8emu.gemm.instructions import mma
    rng = np.random.default_rng(3)
    a = rng.integers(0, 16, (2, 64), dtype=np.uint8)
    b = rng.integers(0, 16, (64, 2), dtype=np.uint8)
    one, neg = np.full((2, 4), 0x38, np.uint8), np.full((2, 4), 0xB8, np.uint8)
    ins = "rtx-blackwell-mma-mxf4nvf4"
    want = mma(a, b, instruction=ins, a_format="e2m1fn", a_scales=one, b_scales=one.T, scale_format="ue4m3")
    got = mma(a, b, instruction=ins, a_format="e2m1fn", a_scales=neg, b_scales=neg.T, scale_format="ue4m3")
    np.testing.assert_array_equal(got, want)
    kw = dict(a_format="nvfp4", b_format="nvfp4", a_global_scale=1.0, b_global_scale=1.0, accumulator=ins)
    np.testing.assert_array_equal(block_scaled_mm(a, b, a_scales=neg, b_scales=neg.T, **kw),
                                  block_scaled_mm(a, b, a_scales=one, b_scales=one.T, **kw))


def test_threads_limit_holds_on_the_small_call_path():
    """encode's small-call fast path took threads > 0 as valid, so threads=10**6 was refused in a
    fresh process but accepted once a large call had built the fast path."""
    x = np.linspace(-4, 4, 300)
    fp8emu.encode(x, E4, threads=1)                  # builds the fast path
    fp8emu.encode(np.linspace(-4, 4, 1 << 17), E4)   # and a large call
    for _ in range(2):
        with pytest.raises(ValueError, match="threads must be in 1.."):
            fp8emu.encode(x, E4, threads=10 ** 6)


@pytest.mark.parametrize("amax", [1e39, -1.0, float("nan"), "x", True])
def test_nvfp4_alpha_checks_its_amaxes_as_float32(amax):
    """Checked as used: nvfp4_alpha(1e39, 1) returned Inf (1e39 is Inf in float32), unchecked."""
    from fp8emu.gemm import nvfp4_alpha
    with pytest.raises(ValueError, match="a_amax must be finite and >= 0 in float32"):
        nvfp4_alpha(amax, 1.0)
    with pytest.raises(ValueError, match="b_e4m3_max must be one of 256, 448, 65536, 114688"):
        nvfp4_alpha(1.0, 1.0, 448, 300)
    assert float(nvfp4_alpha(2688.0, 2688.0)) == 1.0          # 2688 = 6 * 448: alpha 1 exactly


@pytest.mark.parametrize("args, match", [
    (("e4m3fn", [1.0]), "scale must be 2 finite"),
    (("e4m3fn", [1.0, np.inf]), "scale must be finite and positive"),
    (("e4m3fn", [1.0, -2.0]), "scale must be finite and positive"),
    (("e4m3fn", [1e39, 1.0]), "scale overflows float32"),          # finite, so not "must be finite"
    (("bfloat16", [1.0, 1.0]), "8-bit format"), (("int4", [1.0, 1.0]), "fmt_name"),
])
def test_quantize_qkv_has_attentions_contract(args, match):
    """One contract: the public quantize_qkv accepted Inf and negative scales (saturated or
    sign-flipped codes) and broadcast a wrong number of scales, which attention() never passes."""
    from fp8emu.attention import quantize_qkv
    x = np.ones((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match=match):
        quantize_qkv(x, *args)
    with pytest.raises(ValueError, match="finite"):
        quantize_qkv(np.full((2, 3, 4), np.nan), "e4m3fn", [1.0, 1.0])
    assert quantize_qkv(x, "e4m3fn", [1.0, 2.0]).tolist() == fp8emu.encode(
        np.concatenate([x[:1], 2 * x[1:]]), "e4m3fn").tolist()
