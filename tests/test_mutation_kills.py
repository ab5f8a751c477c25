"""Behaviours that mutation testing found unpinned (tools/mutate.py, tests/MUTATION.md).

Each test pins one behaviour that a changed operator, constant or dropped statement
altered without any other test noticing.  Expectations come from exact rationals, the
docstrings' stated rules and the independent oracle, never from the code under test.
"""

import math
import warnings
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import fp8emu
import oracle
from fp8emu import Format
from fp8emu.gemm import GemmModel, Policy, cublas_split_k, split_bounds, step_row


def f32(q) -> float:
    """Exact rational -> float32 value, round to nearest even (overflow -> inf)."""
    q = Fraction(q)
    if q == 0:
        return 0.0
    a = abs(q)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    e = e - 1 if Fraction(2) ** e > a else e
    e = max(e, -126)
    ulp = Fraction(2) ** (e - 23)
    v = round(a / ulp) * ulp
    if v >= Fraction(2) ** 128:
        return math.copysign(math.inf, q)
    return math.copysign(float(v), q)


def mm(a, b, fa, fb, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fp8emu.scaled_mm(np.asarray(a, np.uint8), np.asarray(b, np.uint8), a_format=fa, b_format=fb, **kw)


def codes_of(values, fmt):
    c = fp8emu.encode(np.asarray(values, np.float64), fmt)
    assert np.array_equal(fp8emu.decode(c, fmt, dtype=np.float64), np.asarray(values, np.float64)), "not exact"
    return c


ACCS = ["exact", "fp32", "hopper", "hopper-fast"]


# ----------------------------------------------------------------------------- exact accumulator tails
@pytest.mark.parametrize("tail_sign", [1, -1])
@pytest.mark.parametrize("tail_exp", [-60, -100, -120])
def test_exact_accumulator_tie_broken_by_a_far_tail(tail_sign, tail_exp):
    """1 + 2**-24 is a float32 tie; a tail far below (more than 53 bits: no float64 holds the
    sum) decides the direction.  binary8p1 (powers of two from 2**-63) reaches such tails."""
    f = "binary8p1"
    h = tail_exp // 2
    a = codes_of([[1.0, 2.0 ** -12, tail_sign * 2.0 ** h]], f)
    b = codes_of([[1.0], [2.0 ** -12], [2.0 ** (tail_exp - h)]], f)
    exact = Fraction(1) + Fraction(2) ** -24 + tail_sign * Fraction(2) ** tail_exp
    out = mm(a, b, f, f, accumulator="exact")
    assert out[0, 0] == f32(exact) == (1 + 2.0 ** -23 if tail_sign > 0 else 1.0)
    # in any order of the K products
    out = mm(a[:, ::-1], b[::-1], f, f, accumulator="exact")
    assert out[0, 0] == f32(exact)


def test_exact_accumulator_many_bands_random():
    """Random binary8p1 operands spanning the whole exponent range (many bands): the exact
    sum rounded once, compared with Fractions."""
    g = np.random.default_rng(4)
    f = fp8emu.get_format("binary8p1")
    finite = [c for c in range(256) if np.isfinite(f.values()[c])]
    a = g.choice(finite, (3, 20)).astype(np.uint8)
    b = g.choice(finite, (20, 2)).astype(np.uint8)
    out = mm(a, b, f, f, accumulator="exact")
    for i in range(3):
        for j in range(2):
            s = sum(oracle.code_value(f, int(x)) * oracle.code_value(f, int(y)) for x, y in zip(a[i], b[:, j]))
            assert out[i, j] == np.float32(f32(s))


# ----------------------------------------------------------------------------- IEEE specials in scaled_mm
E5 = "e5m2"
INF, NINF, NAN5, ONE, ZERO = 0x7C, 0xFC, 0x7E, 0x3C, 0x00


@pytest.mark.parametrize("acc", ACCS)
def test_scaled_mm_inf_and_nan_rules(acc):
    a = np.array([[ONE, ONE], [INF, ONE], [NINF, ONE], [ONE, ONE], [NAN5, ONE], [0xBC, ONE]], np.uint8)
    b = np.array([[INF, ZERO, ONE, NINF, ONE], [ONE, ONE, NINF, INF, ONE]], np.uint8)
    out = mm(a, b, E5, E5, accumulator=acc)
    nan = math.nan
    exp = np.array([
        # b columns: (+inf, 1) (0, 1) (1, -inf) (-inf, +inf) (1, 1)
        [math.inf, 1.0, -math.inf, nan, 2.0],            # a = (1, 1): Inf in B
        [math.inf, nan, nan, nan, math.inf],             # a = (+inf, 1): inf*0 NaN, inf - inf NaN
        [-math.inf, nan, -math.inf, math.inf, -math.inf],  # a = (-inf, 1): -inf x 0 NaN; (-inf)(-inf) + inf
        [math.inf, 1.0, -math.inf, nan, 2.0],
        [nan, nan, nan, nan, nan],                       # NaN anywhere in the row
        [-math.inf, 1.0, -math.inf, math.inf, 0.0],      # a = (-1, 1)
    ], np.float32)
    np.testing.assert_array_equal(out, exp)


# ----------------------------------------------------------------------------- split-K
@pytest.mark.parametrize("M, N, K", [(256, 256, 16384), (1024, 1024, 16384), (1024, 512, 16384),
                                     (2048, 2048, 16384), (129, 64, 16384), (64, 64, 2560), (64, 64, 2559),
                                     (4096, 4096, 1 << 20), (1, 1, 128 * 40), (32, 32, 56448)])
def test_cublas_split_k_rule(M, N, K):
    """The documented rule: as many pieces as give each >= 20 K-tiles of 128, but no more than
    fit next to the output tiles (128 x 128) on 132 SMs; at least one; counted as the pieces of
    ceil(tiles / s) whole K-tiles make them (441 tiles for s = 22 make 21 pieces of 21)."""
    k_tiles = math.ceil(K / 128)
    out_tiles = math.ceil(M / 128) * math.ceil(N / 128)
    s = max(1, min(k_tiles // 20, 132 // out_tiles))
    per = math.ceil(k_tiles / s)
    assert cublas_split_k(M, N, K) == math.ceil(k_tiles / per) == len(split_bounds(K, s)) - 1
    if K == 56448:
        assert (s, cublas_split_k(M, N, K)) == (22, 21)


def test_split_bounds_rule():
    assert split_bounds(16384, 6) == [0, 2816, 5632, 8448, 11264, 14080, 16384]
    assert split_bounds(1000, 3) == [0, 384, 768, 1000]     # ceil(8 tiles / 3) = 3 tiles of 128
    assert split_bounds(300, 1) == [0, 300]
    assert split_bounds(0, 4) == [0, 0]


@pytest.mark.parametrize("K", [384, 640, 16384])
def test_split_k_none_is_one_piece(K):
    g = np.random.default_rng(K)
    a = fp8emu.encode(g.uniform(0, 1, (2, K)), "e4m3fn")
    b = fp8emu.encode(g.uniform(0, 1, (K, 2)), "e4m3fn")
    none, one, three = (GemmModel("hopper-like", "instruction", step_row(32, 13, 14, "rtz"), Policy(promote=4, split_k=s))
                        for s in (None, 1, 3))
    assert none.policy.splits(2, 2, K) == 1 and three.policy.splits(2, 2, K) == 3
    r_none = mm(a, b, "e4m3fn", "e4m3fn", accumulator=none)
    np.testing.assert_array_equal(r_none, mm(a, b, "e4m3fn", "e4m3fn", accumulator=one))
    # three pieces: each reduced alone, the float32 results summed in order
    bounds = split_bounds(K, 3)
    parts = [mm(a[:, k0:k1], b[k0:k1], "e4m3fn", "e4m3fn", accumulator=one) for k0, k1 in zip(bounds, bounds[1:])]
    total = parts[0]
    for p in parts[1:]:
        total = (total + p).astype(np.float32)
    np.testing.assert_array_equal(mm(a, b, "e4m3fn", "e4m3fn", accumulator=three), total)


# ----------------------------------------------------------------------------- stochastic rounding bits
@pytest.mark.parametrize("dtype, k", [(np.uint8, 8), (np.uint16, 16), (np.uint32, 32)])
def test_random_bits_width_from_dtype(dtype, k):
    """x = 1 + half an ulp of e4m3fn: the discarded part is exactly 1/2, so with k random bits
    r >= 2**(k-1) rounds up and r = 2**(k-1) - 1 rounds down."""
    x = np.array([1.0625, 1.0625, -1.0625], np.float32)
    r = np.array([1 << (k - 1), (1 << (k - 1)) - 1, 1 << (k - 1)], dtype)
    assert fp8emu.encode(x, "e4m3fn", rounding="stochastic", random_bits=r).tolist() == [0x39, 0x38, 0xB9]
    # the same through the exact core (float64 inputs)
    assert fp8emu.encode(x.astype(np.float64), "e4m3fn", rounding="stochastic", random_bits=r).tolist() == \
        [0x39, 0x38, 0xB9]


def test_random_bits_of_a_signed_or_wide_dtype_need_sr_bits():
    with pytest.raises(ValueError, match="sr_bits"):
        fp8emu.encode([1.0], "e4m3fn", rounding="stochastic", random_bits=np.array([1], np.int64))
    with pytest.raises(ValueError, match="sr_bits"):
        fp8emu.encode([1.0], "e4m3fn", rounding="stochastic", random_bits=np.array([1], np.uint64))
    assert fp8emu.encode([1.0625], "e4m3fn", rounding="stochastic", random_bits=np.array([2], np.int64),
                         sr_bits=2).tolist() == [0x39]


# ----------------------------------------------------------------------------- ml_dtypes inputs
@pytest.mark.parametrize("src", [ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fn, ml_dtypes.float6_e3m2fn,
                                 ml_dtypes.float4_e2m1fn, ml_dtypes.float8_e8m0fnu])
@pytest.mark.parametrize("fmt", ["e4m3fn", "e2m1fn", "e5m2"])
def test_quantize_of_ml_dtypes_narrow_input(src, fmt):
    x = np.arange(256, dtype=np.uint8)
    x = x[x < (1 << (8 * np.dtype(src).itemsize if np.dtype(src).itemsize else 8))]
    bits = {ml_dtypes.float6_e3m2fn: 6, ml_dtypes.float4_e2m1fn: 4}.get(src, 8)
    v = x[x < (1 << bits)].view(src)
    ref32 = v.astype(np.float32)
    q = fp8emu.quantize(v, fmt)
    assert q.dtype == np.float32
    np.testing.assert_array_equal(q, fp8emu.quantize(ref32, fmt))
    np.testing.assert_array_equal(fp8emu.encode(v, fmt), fp8emu.encode(ref32.astype(np.float64), fmt))


# ----------------------------------------------------------------------------- user formats
@pytest.fixture
def user_format():
    made = []

    def make(fmt):
        made.append(fmt.name)
        return fp8emu.register_format(fmt)

    yield make
    for name in made:
        fp8emu.formats._REGISTRY.pop(name, None)


@pytest.mark.parametrize("mode", ["rne", "rna", "rtz", "rup", "rdn", "rto"])
@pytest.mark.parametrize("saturate", [False, True])
def test_unsigned_user_format_with_a_zero(user_format, mode, saturate):
    f = user_format(Format("u2m2test", ebits=2, mbits=2, bias=1, signed=False))
    spec = oracle.Spec("u2m2test", 2, 2, 1, False, True, frozenset(), None, None)
    assert [oracle.code_value(spec, c) for c in range(16)] == [Fraction(v) for v in f.values()]
    assert f.has_zero and not f.has_negative_zero and f.max == 7.0      # 1.75 * 2**(3 - 1)
    x = np.concatenate([np.linspace(-5, 5, 161), [0.0, -0.0, 0.03, -0.03, np.inf, -np.inf, np.nan]])
    got = fp8emu.encode(x, f, rounding=mode, saturate=saturate)
    exp = [oracle.round_float(v, spec, mode, saturate) for v in x]
    np.testing.assert_array_equal(got, np.array(exp, np.uint8))


def test_register_format_rules(user_format):
    a = user_format(Format("e3m3regtest", 3, 3, 3, nan="fn"))
    assert fp8emu.get_format("e3m3regtest") is a
    with pytest.raises(ValueError, match="already registered"):
        fp8emu.register_format(Format("e3m3regtest", 3, 3, 4, nan="fn"))
    assert fp8emu.get_format("e3m3regtest") is a                       # unchanged
    b = fp8emu.register_format(Format("e3m3regtest", 3, 3, 4, nan="fn"), replace=True)
    assert fp8emu.get_format("e3m3regtest") is b and b is not a
    with pytest.raises(ValueError, match="already registered"):
        fp8emu.register_format(Format("e4m3fn", 4, 3, 7, nan="fn"), replace=True)   # built-ins never
    with pytest.raises(TypeError, match="expects a Format"):
        fp8emu.register_format("e4m3fn")
    assert "e3m3regtest" in fp8emu.format_names()


@pytest.mark.parametrize("kw, match", [
    ({"nan": "negzero", "signed": False}, "nan='negzero' needs a signed format"),
    ({"nan": "top"}, "nan='top' is for unsigned formats"),
    ({"inf": "ieee", "nan": "fn"}, "inf='ieee' pairs with nan='ieee' or no NaN"),
    ({"nan": "ieee"}, "nan='ieee' needs inf='ieee'"),
    ({"inf": "top", "nan": "negzero", "signed": False}, "needs a signed format|unsigned format with Inf"),
    ({"inf": "ieee", "signed": False}, "unsigned formats take Inf as inf='top'"),
    ({"inf": "ieee", "nan": "ieee", "mbits": 0, "ebits": 4}, "nan='ieee' needs at least one mantissa bit"),
    ({"inf": "bad"}, "inf must be one of"), ({"nan": "bad"}, "nan must be one of"),
    ({"parity": "odd"}, "parity must be one of"),
    ({"ebits": 1, "mbits": 0, "subnormals": False, "nan": "top", "signed": False}, "no finite values"),
])
def test_every_format_structure_error(kw, match):
    args = {"name": "x", "ebits": 4, "mbits": 3, "bias": 7} | kw
    with pytest.raises(ValueError, match=match):
        Format(**args)


@pytest.mark.parametrize("fmt", ["e2m3fn", "e3m2fn", "e2m1fn"])
def test_nan_mask_of_formats_without_nan_and_values_read_only(fmt):
    f = fp8emu.get_format(fmt)
    c = np.arange(1 << f.bits)
    assert not f.nan_mask(c).any() and f.nan_code is None and not f.has_nan
    v = f.values()
    assert not v.flags.writeable
    with pytest.raises(ValueError):
        v[0] = 1.0
    assert np.isfinite(v).all() and v[(1 << (f.bits - 1)) - 1] == f.max


def test_nan_masks_of_every_builtin_match_the_spec():
    for name, spec in oracle.SPECS.items():
        f = fp8emu.get_format(name)
        c = np.arange(1 << f.bits)
        assert set(np.flatnonzero(f.nan_mask(c)).tolist()) == set(spec.nan), name


def test_format_derived_constants_of_every_builtin_match_the_spec():
    for name, spec in oracle.SPECS.items():
        f = fp8emu.get_format(name)
        vals = [oracle.code_value(spec, c) for c in range(1 << spec.bits)]
        finite = [v for v in vals if v is not None and not isinstance(v, float)]
        pos = sorted(v for v in finite if v > 0)
        assert f.bits == spec.bits and f.max == float(max(finite)), name
        assert f.min_subnormal == float(pos[0]), name
        assert f.min_normal == float(Fraction(2) ** ((1 if spec.has_zero else 0) - spec.bias)), name
        assert f.eps == 2.0 ** -spec.mbits
        assert f.has_inf == (spec.inf is not None) and f.has_nan == bool(spec.nan)
        assert f.has_zero == spec.has_zero
        assert f.inf_code == spec.inf
        assert f.sign_bit == spec.sign_bit and f.magnitude_mask == (1 << (spec.ebits + spec.mbits)) - 1
        assert f.emin == int(math.log2(f.min_normal))
        assert vals[f.max_code] == max(finite)
        assert f.has_negative_zero == (spec.signed and spec.has_zero and spec.sign_bit not in spec.nan)
        assert str(f) == name


# ----------------------------------------------------------------------------- scaling argument normalisation
def test_scaling_argument_normalisation():
    g = np.random.default_rng(7)
    x = g.standard_normal((3, 10))
    ref = fp8emu.quantize_blockwise(x, "e4m3fn", block=(1, 4))
    for block in (4, [1, 4], (4,), np.int64(4), (1, 1, 4)):
        t = fp8emu.quantize_blockwise(x, "e4m3fn", block=block)
        assert t.block == (1, 4)
        np.testing.assert_array_equal(t.codes, ref.codes)
    with pytest.raises(ValueError, match="more non-unit dimensions"):
        fp8emu.quantize_blockwise(x, "e4m3fn", block=(2, 1, 4))
    with pytest.raises(ValueError, match="block sizes must be >= 1"):
        fp8emu.quantize_blockwise(x, "e4m3fn", block=(0, 4))
    # one-element scales of any shape for one scale per tensor / per block
    for s in (2.0, [2.0], [[2.0]], np.float32(2)):
        t = fp8emu.quantize_tensorwise(x, "e4m3fn", scale=s)
        assert t.scale.shape == () and t.scale == 2
    t = fp8emu.quantize_blockwise(x[:1, :4], "e4m3fn", block=(1, 4), scale=[2.0])
    assert t.scale.shape == (1, 1)
    # a format name in ScaledTensor is the Format
    st = fp8emu.ScaledTensor(codes=np.zeros(3, np.uint8), fmt="e5m2", scale=1.0, scale_inv=1.0)
    assert st.fmt is fp8emu.get_format("e5m2")
    # axis normalisation
    a = fp8emu.quantize_axiswise(x, "e4m3fn", axis=-2)
    assert a.axis == 0 and a.block == (3, 1) and a.scale.shape == (1, 10)
    with pytest.raises(ValueError, match="out of range"):
        fp8emu.quantize_axiswise(x, "e4m3fn", axis=2)


# ----------------------------------------------------------------------------- fast paths taken
def test_fast_paths_are_taken(monkeypatch):
    """Deterministic encodes of float16/bfloat16/float32/float64 look up a table; SR of float32
    adds bits and truncates through a table (in the normal range), or rounds on the one quantum
    of the subnormal range: neither calls the exact core on the input (only table builds do,
    through fp8emu.tables)."""
    import fp8emu.codec as codec

    calls = []

    def spy(x, *a, **k):
        calls.append(x.size)
        return real(x, *a, **k)

    real = codec.encode_exact
    monkeypatch.setattr(codec, "encode_exact", spy)
    g = np.random.default_rng(1)
    x = g.uniform(-3, 3, 5000)
    for dt in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64):
        fp8emu.encode(x.astype(dt), "e4m3fn", rounding="rdn")
    normal = np.where(np.abs(x) < 0.1, 1.0, x)       # every result in e4m3fn's normal range
    fp8emu.encode(normal.astype(np.float32), "e4m3fn", rounding="stochastic", rng=1)
    assert calls == []
    fp8emu.encode(np.array([1e-30, -0.0, 0.01], np.float32), "e4m3fn", rounding="stochastic", rng=1)
    assert calls == []                                 # below the normal range: the subnormal quantum
    fp8emu.encode(np.array([np.inf, 1e-30, 1.0], np.float32), "e4m3fn", rounding="stochastic", rng=1)
    assert calls == [1]                                # only the element whose sum reads as NaN
    fp8emu.encode(x.astype(np.int32), "e4m3fn")        # integers: the exact core
    assert calls[-1] == 5000


# ----------------------------------------------------------------------------- table exactness limits
@pytest.mark.parametrize("bias, mbits", [(131, 3), (130, 4), (134, 1)])
def test_float32_table_limit_for_deep_subnormal_user_formats(user_format, bias, mbits):
    """A format whose subnormals round below float32's upper 16 bits (emin - mbits < -132)
    cannot use the float32 table: every float32 input must still be rounded exactly."""
    ebits = 7 - mbits
    f = user_format(Format(f"deep{bias}m{mbits}", ebits, mbits, bias))
    spec = oracle.Spec(f.name, ebits, mbits, bias, True, True, frozenset(), None, None)
    assert f.emin - f.mbits < -132
    g = np.random.default_rng(bias)
    lo = f.min_subnormal
    x = (g.uniform(0.5, 64, 400) * lo * np.where(g.random(400) < 0.5, -1, 1)).astype(np.float32)
    edge = np.array([1.5 * lo, np.nextafter(np.float32(lo / 2), np.float32(1))], np.float32)
    x = np.concatenate([x, edge, -edge])
    for mode in ("rne", "rup", "rtz"):
        got = fp8emu.encode(x, f, rounding=mode)
        exp = [oracle.round_float(v, spec, mode, False) for v in x.astype(np.float64)]
        np.testing.assert_array_equal(got, np.array(exp, np.uint8), err_msg=mode)


def test_as_ml_dtypes_needs_uint8_codes():
    """A wider integer array would be reinterpreted byte by byte (one int64 -> 8 values)."""
    for dt in (np.int64, np.uint16, np.int8, np.float32):
        with pytest.raises(TypeError, match=r"must be uint8 codes \(one element per byte\)"):
            fp8emu.as_ml_dtypes(np.array([56], dt), "e4m3fn")
    with pytest.raises(ValueError, match="ml_dtypes has no type for format 'binary8p3'"):
        fp8emu.as_ml_dtypes(np.array([56], np.uint8), "binary8p3")
    v = fp8emu.as_ml_dtypes(np.array([56, 0xB8], np.uint8), "e4m3fn")
    assert v.dtype == ml_dtypes.float8_e4m3fn and v.astype(np.float32).tolist() == [1.0, -1.0]


def test_spec_profile_accepts_every_encode_option():
    ocp = fp8emu.get_profile("ocp")
    assert ocp.is_spec
    e4 = fp8emu.get_format("e4m3fn")
    assert ocp.check_options(e4, "rne", saturate=True, stochastic=True, via="float16") is None
    cuda = next(fp8emu.get_profile(n) for n in fp8emu.profile_names() if not fp8emu.get_profile(n).is_spec)
    for kw in ({"saturate": True}, {"stochastic": True}, {"via": "float32"}):
        with pytest.raises(ValueError, match=cuda.name):
            cuda.check_options(e4, "rne", **kw)


def test_scaling_rejects_void_dtypes_with_a_clear_message():
    for x in (np.zeros(2, "V4"), np.zeros(2, [("a", np.float32)])):
        with pytest.raises(TypeError, match=r"unsupported x dtype .*; accepted"):
            fp8emu.quantize_tensorwise(x, "e4m3fn")
    # ml_dtypes narrow floats (kind "V" or "f") are converted exactly
    v = np.array([1.5, -3.0], ml_dtypes.float4_e2m1fn)
    t = fp8emu.quantize_tensorwise(v, "e4m3fn", scale=1.0)
    assert t.dequantize().tolist() == [1.5, -3.0]


def test_scaled_tensor_codes_must_have_the_stated_shape():
    with pytest.raises(ValueError, match=r"codes have shape \(2, 3\), expected \(3, 2\)"):
        fp8emu.ScaledTensor(codes=np.zeros((2, 3), np.uint8), fmt="e4m3fn", scale=1.0, scale_inv=1.0, shape=(3, 2))
    t = fp8emu.ScaledTensor(codes=np.zeros((2, 3), np.uint8), fmt="e4m3fn", scale=1.0, scale_inv=1.0)
    assert t.shape == (2, 3)


def test_mx_from_codes_rejects_codes_wider_than_the_element_format():
    from fp8emu.scaling import mx_from_codes
    ok = mx_from_codes(np.array([0x7, 0xF], np.uint8), np.array([127], np.uint8), "e2m1fn", block=32)
    assert ok.dequantize().tolist() == [6.0, -6.0]
    for fmt, bad in (("e2m1fn", 0x10), ("e2m3fn", 0x40), ("e3m2fn", 0xFF)):
        with pytest.raises(ValueError, match="codes out of range: must lie in"):
            mx_from_codes(np.array([0, bad], np.uint8), np.array([127], np.uint8), fmt, block=32)


def test_scaled_tensor_stores_float32_scales():
    t = fp8emu.ScaledTensor(codes=np.zeros(2, np.uint8), fmt="e4m3fn", scale=10.0, scale_inv=0.1)
    for arr, v in ((t.scale, 10.0), (t.scale_inv, 0.1)):
        assert isinstance(arr, np.ndarray) and arr.dtype == np.float32 and arr == np.float32(v)


def test_gemm_value_tables_are_read_only():
    from fp8emu.gemm import code_tables
    for name in ("e4m3fn", "e5m2", "binary8p1"):
        for arr in code_tables.value_tables(fp8emu.get_format(name)):
            assert not arr.flags.writeable, name


def test_split_k_pieces_must_hold_whole_steps():
    """A group that does not divide the 128-wide K-tiles cannot be split: an error, not
    pieces cut in the middle of a tensor-core step."""
    a = np.full((2, 512), 0x38, np.uint8)
    b = np.full((512, 2), 0x38, np.uint8)
    for splits in (2, 3):
        with pytest.raises(ValueError, match="do not hold whole steps of group 48"):
            mm(a, b, "e4m3fn", "e4m3fn", accumulator=GemmModel("g48", "instruction", step_row(48, 13, 14), Policy(split_k=splits)))
    # one piece is fine: 512 ones summed exactly
    assert mm(a, b, "e4m3fn", "e4m3fn", accumulator=GemmModel("g48", "instruction", step_row(48, 13, 14), Policy(split_k=1)))[0, 0] == 512


# ----------------------------------------------------------------------------- survivors of the seed-3 sample
def test_nvfp4_scale_max_is_448_or_256():
    x = np.linspace(-3, 3, 32, dtype=np.float32).reshape(2, 16)
    for bad in (300, True, 447.5):
        with pytest.raises(ValueError, match="scale_max must be 448 or 256"):
            fp8emu.quantize_nvfp4(x, scale_max=bad)


def test_nvfp4_from_codes_checks_the_block_scale_shape():
    from fp8emu.scaling import nvfp4_from_codes
    x = np.linspace(-3, 3, 64, dtype=np.float32).reshape(2, 32)
    t = fp8emu.quantize_nvfp4(x)
    back = nvfp4_from_codes(t.codes, t.block_scale_codes, t.global_scale)
    np.testing.assert_array_equal(back.dequantize(), t.dequantize())
    with pytest.raises(ValueError, match=r"block_scale_codes have shape \(2, 1\), expected \(2, 2\)"):
        nvfp4_from_codes(t.codes, t.block_scale_codes[:, :1], t.global_scale)


@pytest.mark.parametrize("block", [None, (1, 128), (128, 128)])
def test_chunked_scaled_cast_equals_small_slices(block):
    # Inputs above the chunk size take the fused chunked path; slices of at most one chunk take the
    # plain path.  With the same given scales both must give the same codes, element for element.
    rows, cols = 640, 384                       # 245760 elements > one chunk of 2**17
    x = np.random.default_rng(11).standard_normal((rows, cols)).astype(np.float32) * 30
    if block is None:
        big = fp8emu.quantize_tensorwise(x, "e4m3fn", scale=4.0)
        parts = [fp8emu.quantize_tensorwise(x[r:r + 128], "e4m3fn", scale=4.0).codes for r in range(0, rows, 128)]
    else:
        big = fp8emu.quantize_blockwise(x, "e4m3fn", block=block)
        sc = big.scale
        parts = [fp8emu.quantize_blockwise(x[r:r + 128], "e4m3fn", block=block,
                                           scale=sc[r // block[0]:(r + 128) // block[0] if block[0] > 1 else r + 128]).codes
                 for r in range(0, rows, 128)]
    assert big.codes.shape == x.shape
    np.testing.assert_array_equal(big.codes, np.concatenate(parts))


# ----------------------------------------------------------------------------- survivors of the seed-4 sample
def test_nvfp4_from_codes_refuses_0d_codes_and_a_zero_global_scale():
    from fp8emu.scaling import nvfp4_from_codes
    with pytest.raises(ValueError, match="at least one dimension"):
        nvfp4_from_codes(np.uint8(3), np.zeros((), np.uint8), 1.0)
    codes, scales = np.zeros((1, 16), np.uint8), np.full((1, 1), 0x38, np.uint8)
    for bad in (0.0, -1.0, np.inf):
        with pytest.raises(ValueError, match="global_scale must be finite and > 0"):
            nvfp4_from_codes(codes, scales, bad)
    assert nvfp4_from_codes(codes, scales, 2.0 ** -20).global_scale == np.float32(2.0 ** -20)


def test_margin_upper_limit_is_where_max_stays_exact_in_float32():
    # e2m3fn: max 7.5 = 15 * 2**-1; 7.5 * 2**-148 = 15 * 2**-149 is exact (subnormal), 2**-149 further is not.
    s = fp8emu.current_scale(1.0, "e2m3fn", margin=148)
    assert s == np.float32(15 * 2.0 ** -149)
    with pytest.raises(ValueError, match="margin"):
        fp8emu.current_scale(1.0, "e2m3fn", margin=149)


# --- seed 5 sample (scaling) -------------------------------------------------------------

def test_te_wgrad_sign_vector():
    # Transformer Engine's fixed signs (get_wgrad_sign_vector in transformer_engine/pytorch/
    # tensor/nvfp4_tensor.py and transformer_engine/jax/quantize/hadamard.py), and the bit mask
    # its kernels take (bit i set where sign i is -1, get_sign_from_vector)
    from fp8emu.scaling.hadamard import TE_WGRAD_SIGNS
    assert TE_WGRAD_SIGNS == (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)
    assert sum(1 << i for i, s in enumerate(TE_WGRAD_SIGNS) if s == -1) == 0b1101011111101000


def test_mx_from_codes_rebuilds_quantize_mx_scales_including_nan_blocks():
    x = np.linspace(-3, 3, 4 * 64).reshape(4, 64)
    x[1, 5] = np.nan                     # block (1, 0) gets the NaN scale code 255
    st = fp8emu.quantize_mx(x, "e4m3fn")
    assert st.scale_codes[1, 0] == 255
    back = fp8emu.scaling.mx_from_codes(st.codes, st.scale_codes, "e4m3fn")
    np.testing.assert_array_equal(back.scale, st.scale)            # NaN blocks: the same multiplier
    np.testing.assert_array_equal(back.scale_inv, st.scale_inv)    # (assert_array_equal: NaN == NaN)
    np.testing.assert_array_equal(back.dequantize(np.float32), st.dequantize(np.float32))


def test_blockwise_3d_blocks_with_a_non_unit_middle_dimension():
    # (1, 2, 32) blocks of a 3-D tensor are (2, 32) blocks of its (A*B, C) reshape when B is even
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((3, 4, 64)) * np.exp(rng.standard_normal((3, 4, 1)) * 3)).astype(np.float32)
    st3 = fp8emu.scaling.quantize_blockwise(x, "e4m3fn", block=(1, 2, 32), pow2=False)
    st2 = fp8emu.scaling.quantize_blockwise(x.reshape(12, 64), "e4m3fn", block=(2, 32), pow2=False)
    np.testing.assert_array_equal(st3.codes.reshape(12, 64), st2.codes)
    np.testing.assert_array_equal(st3.scale.reshape(6, 2), st2.scale)


# --- seed 5 sample (gemm) ----------------------------------------------------------------

def test_exact_accumulator_at_the_band_width_limit():
    # binary8p2 operands whose exponents span exactly one more than the band width the exact
    # accumulator allows (24 = 46 // 2 + 1 for K = 32): the top products sum past 2**53, a
    # float32 half-ulp term makes a tie and three nearly cancelling tail products break it.
    # One band per operand would round the tail away inside a float64 matmul.
    from fractions import Fraction
    import itertools
    la = lb = -20
    top = 1.5 * 2.0 ** (la + 23)
    for ntop, signs in itertools.product(range(20, 29), itertools.product([1, -1], repeat=3)):
        half = 2.0 ** (int(np.floor(np.log2(ntop * top * top))) - 24)
        ex = min(la + 23, int(np.log2(half)) - lb)
        a = [top] * ntop + [2.0 ** ex, signs[0] * 1.5 * 2.0 ** la, signs[1] * 2.0 ** la, signs[2] * 2.0 ** la]
        b = [top] * ntop + [half / 2.0 ** ex, 1.5 * 2.0 ** lb, 2.0 ** lb, 2.0 ** lb]
        a, b = np.array(a + [0.0] * (32 - len(a))), np.array(b + [0.0] * (32 - len(b)))
        ca, cb = fp8emu.encode(a[None, :], "binary8p2"), fp8emu.encode(b[:, None], "binary8p2")
        assert np.array_equal(fp8emu.decode(ca, "binary8p2", dtype=np.float64)[0], a)
        assert np.array_equal(fp8emu.decode(cb, "binary8p2", dtype=np.float64)[:, 0], b)
        got = fp8emu.scaled_mm(ca, cb, a_format="binary8p2", b_format="binary8p2", accumulator="exact")
        want = oracle.round_f32(sum(Fraction(x) * Fraction(y) for x, y in zip(a, b)))
        assert float(got[0, 0]) == want, (ntop, signs)


# --- seed 6 sample (core) ----------------------------------------------------------------

@pytest.mark.parametrize("k", [2, 3, 4, 5])
@pytest.mark.parametrize("name", ["stochastic", "stochastic_p3109", "stochastic_odd", "stochastic_fast"])
def test_stochastic_modes_from_bfloat16_with_few_discarded_bits(name, k):
    # bfloat16 -> e4m3fn discards exactly 4 bits in e4m3fn's normal range, so k = 3 puts the
    # rules at their edge (the bits below the k kept ones: none); the float64 sweeps never do.
    import ml_dtypes
    bf = np.arange(0x3C80, 0x43E0, dtype=np.uint16).view(ml_dtypes.bfloat16)    # 2**-6 .. 448
    x = bf.astype(np.float64)
    grid = np.unique(np.abs(fp8emu.get_format("e4m3fn").values()))
    grid = grid[np.isfinite(grid)]
    i = np.searchsorted(grid, x, side="right") - 1
    down, up = grid[i], grid[np.minimum(i + 1, grid.size - 1)]
    f = np.where(up > down, (x - down) / np.where(up > down, up - down, 1), 0.0)   # a multiple of 1/16
    for r in range(2 ** k):
        got = fp8emu.decode(fp8emu.encode(bf, "e4m3fn", rounding=name, random_bits=np.full(x.shape, r),
                                          sr_bits=k), "e4m3fn", dtype=np.float64)
        fk = f * 2 ** k                       # f with k bits kept: ties broken per mode
        if name == "stochastic":
            away = np.floor(fk) + r >= 2 ** k
        elif name == "stochastic_fast":
            away = f + (2 * r + 1) / 2 ** (k + 1) >= 1
        else:
            fl = np.floor(fk)
            tie = fk - fl == 0.5
            odd = fl % 2 == 1
            rounded = np.where(fk - fl > 0.5, fl + 1, np.where(
                tie, fl + ((odd if name == "stochastic_p3109" else ~odd)), fl))
            away = rounded + r >= 2 ** k
        want = np.where((f > 0) & away, up, down)
        assert np.array_equal(got, want), (name, k, r)


def test_formats_without_subnormals_need_one_finite_code_past_exponent_field_zero():
    # ebits=1 without subnormals: two binades (fields 0 and 1) of (1 + m/4) * 2**(field - bias)
    want = [(1 + m / 4) * 2.0 ** (e - 1) for e in (0, 1) for m in range(4)]
    f = fp8emu.Format("one_binade", ebits=1, mbits=2, bias=1, subnormals=False)
    assert f.values()[:8].tolist() == want and f.values()[8:].tolist() == [-v for v in want]
    g = fp8emu.Format("one_binade_fn", ebits=1, mbits=2, bias=1, subnormals=False, nan="fn")
    assert g.values()[:7].tolist() == want[:7] and np.isnan(g.values()[7])
    with pytest.raises(ValueError, match="no finite values"):
        fp8emu.Format("nothing", ebits=1, mbits=0, bias=1, subnormals=False, nan="fn")


# --- seed 7 sample (scaling, gemm) -------------------------------------------------------

@pytest.mark.parametrize("flag", ["fp4_2d_quantization", "stochastic_rounding", "random_hadamard_transform",
                                  "four_over_six"])
def test_nvfp4_recipe_flags_must_be_bools(flag):
    x = np.ones((16, 32), np.float32)
    with pytest.raises(TypeError, match=f"{flag} must be a bool"):
        fp8emu.quantize_nvfp4(x, **{flag: "no"})     # a truthy string must not switch the option on


def test_nvfp4_2d_blocks_need_two_dimensions():
    with pytest.raises(ValueError, match="at least two dimensions"):
        fp8emu.quantize_nvfp4(np.ones(32, np.float32), fp4_2d_quantization=True)


@pytest.mark.parametrize("axis", [1.0, True, "1"])
def test_scaling_axis_must_be_an_int(axis):
    x = np.ones((4, 32), np.float32)
    for call in (lambda: fp8emu.quantize_mx(x, "e4m3fn", axis=axis),
                 lambda: fp8emu.quantize_nvfp4(x, axis=axis),
                 lambda: fp8emu.scaling.quantize_axiswise(x, "e4m3fn", axis=axis),
                 lambda: fp8emu.scaling.rht(x, axis=axis)):
        with pytest.raises(TypeError, match="axis must be an int"):
            call()


def test_scaled_tensor_rejects_a_zero_block():
    st = fp8emu.quantize_mx(np.ones((4, 32), np.float32), "e4m3fn")
    one = np.ones((4, 1), np.float32)
    with pytest.raises(ValueError, match=r"block \(1, 0\) does not fit"):
        fp8emu.scaling.ScaledTensor(codes=st.codes, fmt=st.fmt, scale=one, scale_inv=one, block=(1, 0),
                                    axis=None, shape=(4, 32))


def test_split_bounds_needs_at_least_one_piece():
    for bad in (0, -2):
        with pytest.raises(ValueError, match="splits must be >= 1"):
            split_bounds(4096, bad)


def test_an_accumulator_input_with_split_k_is_refused():
    from fp8emu.gemm import models
    a = np.full((1, 512), 0x38, np.uint8)
    split = GemmModel("split", "instruction", step_row(32, 13, 14, "rtz"), Policy(split_k=2))
    with pytest.raises(ValueError, match="without split-K"):
        models.run_steps(split, a, "e4m3fn", a.T.copy(), "e4m3fn", c=np.zeros((1, 1), np.float32))


# --- seed 8 sample (scaling) -------------------------------------------------------------

def test_mx_even_rule_for_a_float32_subnormal_amax_is_the_smallest_scale():
    # "even" (torchao EVEN) reads the rounded amax's float32 exponent field; 0 (a subnormal
    # amax) means 2**-127, so with MXINT8 (emax 0) the scale is 2**-127, E8M0 code 0
    st = fp8emu.quantize_mx(np.full((2, 32), 1e-39, np.float32), "int8", scale_rule="even")
    assert st.scale_codes.tolist() == [[0], [0]]


@pytest.mark.parametrize("where", [0, -1])
def test_tensor_amax_of_inputs_larger_than_a_chunk(where):
    # amax over more than CHUNK_ELEMS elements is reduced chunk by chunk: the max may sit in any
    from fp8emu.scaling.tensor import CHUNK_ELEMS
    big = np.full(3 * CHUNK_ELEMS + 16, 0.5, np.float32)
    big[where] = 100.0
    t = fp8emu.scaling.quantize_tensorwise(big, "e4m3fn")
    assert t.scale == np.float32(448) / np.float32(100)       # TE: fmt.max / amax in float32
    n = fp8emu.quantize_nvfp4(big.reshape(-1, 16))
    assert n.global_scale == np.float32(np.float32(6 * 448) / np.float32(100))
