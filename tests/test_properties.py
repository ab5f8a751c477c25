"""Property-based tests (Hypothesis) over every format, rounding mode and source dtype.

Each property holds by definition of rounding, whatever the implementation: monotonicity,
sign symmetry, idempotence, codes that re-encode to themselves, directed modes that bracket
the input, stochastic rounding that only ever picks one of the two neighbours (and the one
the independent oracle picks), scaling recipes within half a unit of the scaled format,
``scaled_mm(accumulator="exact")`` equal to an exact rational sum, and ``DelayedScaling``
equal to a plain model of its amax history.  Profiles (tests/conftest.py): ``ci`` by
default, ``HYPOTHESIS_PROFILE=thorough`` by hand.
"""

import math
import warnings
from fractions import Fraction

import ml_dtypes
import numpy as np
from hypothesis import assume, given, note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import fp8emu
import oracle
from fp8emu.rounding import DETERMINISTIC_MODES

FORMATS = fp8emu.format_names()
BUILTIN = [n for n in FORMATS if n in oracle.SPECS]
SIGNED = [n for n in BUILTIN if fp8emu.get_format(n).signed]
EIGHT_BIT = [n for n in SIGNED if fp8emu.get_format(n).bits == 8]
DTYPES = {"float16": (np.float16, np.uint16), "bfloat16": (ml_dtypes.bfloat16, np.uint16),
          "float32": (np.float32, np.uint32), "float64": (np.float64, np.uint64)}
MIRROR = {"rne": "rne", "rna": "rna", "rtz": "rtz", "rto": "rto", "rup": "rdn", "rdn": "rup"}


@st.composite
def float_arrays(draw, dtype_name=None, min_size=1, max_size=40):
    """Arrays of any bit patterns of a source dtype (NaN, Inf, subnormals, -0 included), biased
    toward the narrow formats' range by also drawing small-exponent values."""
    # float64 less often: its first encode per (format, mode) builds a 2**20-entry table
    name = dtype_name or draw(st.sampled_from(["float16", "bfloat16", "float32"] * 3 + ["float64"]))
    dt, ut = DTYPES[name]
    n = draw(st.integers(min_size, max_size))
    bits = np.iinfo(ut).bits
    raw = draw(st.lists(st.integers(0, (1 << bits) - 1), min_size=n, max_size=n))
    a = np.array(raw, dtype=ut).view(dt)
    mant = draw(st.lists(st.floats(-2, 2, allow_nan=False, width=32), min_size=n, max_size=n))
    exps = draw(st.lists(st.integers(-20, 20), min_size=n, max_size=n))
    with np.errstate(over="ignore"):
        b = np.ldexp(np.array(mant, np.float64), exps).astype(dt)
    pick = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    return np.where(pick, a, b).astype(dt)


def values(codes, fmt):
    return fp8emu.decode(codes, fmt, dtype=np.float64)


def exact(x):
    return np.asarray(x).astype(np.float64)      # every source value is exact in float64


# ----------------------------------------------------------------------------- encode properties
@given(fmt=st.sampled_from(FORMATS), mode=st.sampled_from(DETERMINISTIC_MODES), x=float_arrays())
def test_encode_is_monotonic(fmt, mode, x):
    f = fp8emu.get_format(fmt)
    x = np.sort(x[np.isfinite(exact(x))])
    if not f.signed:
        x = x[exact(x) > 0]           # unsigned: negatives are NaN by definition
    v = values(fp8emu.encode(x, f, rounding=mode, saturate=True), f)
    assert np.all(np.diff(v) >= 0), (x, v)


@given(fmt=st.sampled_from(SIGNED), mode=st.sampled_from(sorted(MIRROR)), x=float_arrays(),
       saturate=st.booleans())
def test_encode_sign_symmetry(fmt, mode, x, saturate):
    f = fp8emu.get_format(fmt)
    x = x[~np.isnan(exact(x))] if not f.has_signed_nan else x   # NaN -> +max or an unsigned NaN
    pos = fp8emu.encode(x, f, rounding=mode, saturate=saturate)
    neg = fp8emu.encode(-x, f, rounding=MIRROR[mode], saturate=saturate)
    np.testing.assert_array_equal(values(neg, f), -values(pos, f))
    if f.has_negative_zero and (f.has_signed_nan or not f.has_nan):
        np.testing.assert_array_equal(neg, pos ^ np.uint8(f.sign_bit))   # the codes differ by the sign bit only


@given(fmt=st.sampled_from(SIGNED), x=float_arrays(dtype_name="float32"), k=st.integers(1, 32),
       data=st.data())
def test_stochastic_sign_symmetry(fmt, x, k, data):
    if not fp8emu.get_format(fmt).has_signed_nan:
        x = x[~np.isnan(x)]                                      # NaN -> +max or an unsigned NaN
    r = np.array(data.draw(st.lists(st.integers(0, (1 << k) - 1), min_size=x.size, max_size=x.size)), np.uint64)
    pos = fp8emu.encode(x, fmt, rounding="stochastic", random_bits=r, sr_bits=k)
    neg = fp8emu.encode(-x, fmt, rounding="stochastic", random_bits=r, sr_bits=k)
    np.testing.assert_array_equal(values(neg, fmt), -values(pos, fmt))


def _holds_exactly(fmt, dt):
    """Whether every finite value of ``fmt`` is exact (and finite) in dtype ``dt``."""
    fi = ml_dtypes.finfo(dt)
    return fmt.max <= float(fi.max) and fmt.min_subnormal >= float(fi.smallest_subnormal) \
        and fmt.mbits <= int(fi.nmant)


@given(fmt=st.sampled_from(FORMATS), mode=st.sampled_from(DETERMINISTIC_MODES + ("stochastic",)),
       x=float_arrays(), saturate=st.booleans(), seed=st.integers(0, 2 ** 32 - 1))
def test_quantize_is_idempotent(fmt, mode, x, saturate, seed):
    f = fp8emu.get_format(fmt)
    assume(_holds_exactly(f, x.dtype))
    opts = {"rounding": mode, "saturate": saturate}
    if mode == "stochastic":
        opts["rng"] = seed
    q = fp8emu.quantize(x, f, **opts)
    assert q.dtype == x.dtype
    opts2 = dict(opts, rng=seed + 1) if mode == "stochastic" else opts
    ut = DTYPES[x.dtype.name][1]
    # bit for bit (NaN signs included; NumPy cannot compare bfloat16 NaNs)
    np.testing.assert_array_equal(fp8emu.quantize(q, f, **opts2).view(ut), q.view(ut))


@given(fmt=st.sampled_from(FORMATS), mode=st.sampled_from(DETERMINISTIC_MODES + ("stochastic",)),
       dtype=st.sampled_from(sorted(DTYPES)), saturate=st.booleans(), seed=st.integers(0, 2 ** 32 - 1))
def test_every_code_decodes_and_reencodes_to_itself(fmt, mode, dtype, saturate, seed):
    f = fp8emu.get_format(fmt)
    dt = DTYPES[dtype][0]
    assume(_holds_exactly(f, dt))
    codes = np.arange(1 << f.bits, dtype=np.uint8)
    opts = {"rng": seed} if mode == "stochastic" else {}
    back = fp8emu.encode(fp8emu.decode(codes, f, dtype=dt), f, rounding=mode, saturate=saturate, **opts)
    nan = f.nan_mask(codes)
    # NaN codes come back as the canonical NaN (with their sign where NaNs are signed)
    spec = oracle.spec(fmt) if fmt in oracle.SPECS else None
    expected = codes.copy()
    if spec is not None:
        for c in np.flatnonzero(nan):
            expected[c] = oracle.expected_nan(spec, bool(c & spec.sign_bit))
    else:
        expected[nan] = back[nan]
    if saturate and f.has_inf:       # saturate: Inf becomes max
        inf = np.isinf(f.values())
        expected[inf] = np.where(codes[inf] & f.sign_bit, f.max_code | f.sign_bit, f.max_code)
    np.testing.assert_array_equal(back, expected)


def _in_range(x, f):
    """Finite values inside the format's range (within +-max; above the smallest value if no zero)."""
    v = exact(x)
    ok = np.isfinite(v) & (np.abs(v) <= f.max)
    if not f.signed:
        ok &= v >= f.min_subnormal
    return x[ok]


@given(fmt=st.sampled_from(FORMATS), x=float_arrays(), saturate=st.booleans(), data=st.data())
def test_directed_modes_bracket_x(fmt, x, saturate, data):
    f = fp8emu.get_format(fmt)
    x = _in_range(x, f)
    v = exact(x)
    modes = ("rdn", "rup", "rtz", "rne", data.draw(st.sampled_from(["rna", "rto"])))
    q = {m: values(fp8emu.encode(x, f, rounding=m, saturate=saturate), f) for m in modes}
    assert np.all(q["rdn"] <= v) and np.all(v <= q["rup"])
    assert np.all(np.abs(q["rtz"]) <= np.abs(v))
    for m in modes[2:]:
        assert np.all((q[m] == q["rdn"]) | (q[m] == q["rup"])), m
    # rdn and rup are neighbours: no value of the format lies strictly between them
    vals = np.unique(f.values()[np.isfinite(f.values())])
    lo = np.searchsorted(vals, q["rdn"], side="right")
    hi = np.searchsorted(vals, q["rup"], side="left")
    assert np.all(hi <= lo)
    # exact inputs are returned unchanged by every mode
    exact_in = q["rdn"] == q["rup"]
    assert np.all(q["rne"][exact_in] == v[exact_in])


@given(fmt=st.sampled_from(BUILTIN), x=float_arrays(max_size=12), k=st.integers(1, 32), saturate=st.booleans(),
       data=st.data())
def test_stochastic_rounding_picks_a_neighbour_as_the_oracle_does(fmt, x, k, saturate, data):
    f = fp8emu.get_format(fmt)
    r = data.draw(st.lists(st.integers(0, (1 << k) - 1), min_size=x.size, max_size=x.size))
    got = fp8emu.encode(x, f, rounding="stochastic", random_bits=np.array(r, np.uint64), sr_bits=k,
                        saturate=saturate)
    exp = [oracle.round_float(xi, fmt, "stochastic", saturate) if not np.isfinite(float(xi)) or xi == 0
           else oracle.round_fraction(Fraction(float(xi)), fmt, "stochastic", saturate, r=ri, k=k)
           for xi, ri in zip(x.tolist(), r)]
    np.testing.assert_array_equal(got, np.array(exp, np.uint8))
    inside = np.isin(x, _in_range(x, f))
    lo = values(fp8emu.encode(x, f, rounding="rdn", saturate=saturate), f)
    hi = values(fp8emu.encode(x, f, rounding="rup", saturate=saturate), f)
    v = values(got, f)
    assert np.all(((v == lo) | (v == hi))[inside])
    # zero random bits truncate (inside the range, where no overflow rule applies)
    zero = fp8emu.encode(x, f, rounding="stochastic", random_bits=np.zeros(x.size, np.uint64), sr_bits=k,
                         saturate=saturate)
    np.testing.assert_array_equal(values(zero, f)[inside],
                                  values(fp8emu.encode(x, f, rounding="rtz"), f)[inside])


# ----------------------------------------------------------------------------- scaling recipes
def _f32(q: Fraction) -> float:
    """An exact rational rounded to float32, nearest-even (overflow -> inf)."""
    if q == 0:
        return 0.0
    a = abs(q)
    e = max(a.numerator.bit_length() - a.denominator.bit_length(), -126)
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    e = max(e, -126)
    ulp = Fraction(2) ** (e - 23)
    v = round(a / ulp) * ulp
    if v >= Fraction(2) ** 128:
        return math.copysign(math.inf, q)
    return float(v) if q > 0 else -float(v)


def _half_ulp(y, f):
    """Half the spacing of format ``f`` around |y| (subnormal spacing below the normal range)."""
    _, e = np.frexp(np.maximum(np.abs(y), f.min_normal))
    return np.ldexp(1.0, e - 2 - f.mbits)


RECIPES = {
    "tensorwise": lambda x, f: fp8emu.quantize_tensorwise(x, f),
    "tensorwise-pow2": lambda x, f: fp8emu.quantize_tensorwise(x, f, pow2=True),
    "axiswise": lambda x, f: fp8emu.quantize_axiswise(x, f, axis=0),
    "blockwise": lambda x, f: fp8emu.quantize_blockwise(x, f, block=(2, 3)),
    "mx-ceil": lambda x, f: fp8emu.quantize_mx(x, f, block=4, scale_rule="ceil"),
    "mx-rceil": lambda x, f: fp8emu.quantize_mx(x, f, block=4, scale_rule="rceil"),
}


@given(recipe=st.sampled_from(sorted(RECIPES)), fmt=st.sampled_from(["e4m3fn", "e5m2", "e2m3fn", "e3m2fn", "e2m1fn"]),
       data=st.data())
def test_scaling_recipes_dequantize_within_half_a_unit(recipe, fmt, data):
    f = fp8emu.get_format(fmt)
    shape = data.draw(st.tuples(st.integers(1, 5), st.integers(1, 9)))
    n = shape[0] * shape[1]
    mant = data.draw(st.lists(st.floats(-2, 2, width=32), min_size=n, max_size=n))
    e = data.draw(st.lists(st.integers(-30, 30), min_size=n, max_size=n))
    x = np.ldexp(np.array(mant, np.float64), e).astype(np.float32).reshape(shape)
    t = RECIPES[recipe](x, f)
    scale = t.scale if not t.block else np.broadcast_to(
        np.repeat(np.repeat(t.scale, t.block[0], 0), t.block[1], 1)[:shape[0], :shape[1]], shape)
    y = np.multiply(x, scale, dtype=np.float32).astype(np.float64)      # the recipe's fl32(x * scale)
    q = values(t.codes, f)
    note(f"x={x!r} scale={t.scale!r} codes={t.codes!r}")
    # in the scaled domain: one round-to-nearest of y, never saturated (amax maps to <= max)
    assert np.all(np.abs(q - y) <= _half_ulp(y, f))
    assert np.all(np.abs(y) <= f.max + _half_ulp(f.max, f))
    # back in the input's domain: that half unit divided by the scale, plus float32 roundings
    inv = (1 / scale.astype(np.float64))
    deq = t.dequantize(np.float64)
    bound = _half_ulp(y, f) * inv + 2.0 ** -22 * (np.abs(x) + np.abs(deq))
    assert np.all(np.abs(deq - x) <= bound + np.finfo(np.float32).smallest_subnormal)


# ----------------------------------------------------------------------------- scaled_mm exact
def _exact_mm_entry(a_codes, fa, b_codes, fb):
    """IEEE result of one dot product of codes with exact rationals: float (maybe inf/nan)."""
    total, pos_inf, neg_inf, nan = Fraction(0), False, False, False
    for ca, cb in zip(a_codes, b_codes):
        va, vb = oracle.code_value(fa, int(ca)), oracle.code_value(fb, int(cb))
        if va is None or vb is None:
            nan = True
            continue
        if isinstance(va, float) or isinstance(vb, float):          # an infinity
            if va == 0 or vb == 0:
                nan = True
                continue
            if (va > 0) == (vb > 0):
                pos_inf = True
            else:
                neg_inf = True
            continue
        total += va * vb
    if nan or (pos_inf and neg_inf):
        return math.nan
    if pos_inf or neg_inf:
        return math.inf if pos_inf else -math.inf
    return total


@given(fa=st.sampled_from(EIGHT_BIT), fb=st.sampled_from(EIGHT_BIT), m=st.integers(1, 3), k=st.integers(1, 40),
       n=st.integers(1, 3), data=st.data(), special=st.booleans())
def test_scaled_mm_exact_equals_a_rational_sum(fa, fb, m, k, n, data, special):
    fa_, fb_ = fp8emu.get_format(fa), fp8emu.get_format(fb)

    def codes(fmt, shape):
        f = fp8emu.get_format(fmt)
        finite = np.flatnonzero(np.isfinite(f.values())).tolist()
        # zeros, subnormals and extremes often; NaN/Inf codes only when ``special``
        pool = st.sampled_from(range(256)) if special else st.one_of(
            st.sampled_from(finite), st.sampled_from([c for c in finite if abs(f.values()[c]) < f.min_normal]))
        return np.array(data.draw(st.lists(pool, min_size=math.prod(shape), max_size=math.prod(shape))),
                        np.uint8).reshape(shape)

    a, b = codes(fa, (m, k)), codes(fb, (k, n))
    sa = data.draw(st.sampled_from([1.0, 0.5, 3.0, 1e-3, 2.0 ** 40]))
    sb = data.draw(st.sampled_from([1.0, 0.25, 7.0, 1e5]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # K not a multiple of 16
        got = fp8emu.scaled_mm(a, b, a_format=fa_, b_format=fb_, scale_a=sa, scale_b=sb, accumulator="exact")
    alpha = Fraction(_f32(Fraction(float(np.float32(sa))) * Fraction(float(np.float32(sb)))))
    exp = np.empty((m, n), np.float32)
    for i in range(m):
        for j in range(n):
            s = _exact_mm_entry(a[i], fa, b[:, j], fb)
            if isinstance(s, Fraction):
                acc = _f32(s)                                     # exact sum, rounded once
                s = _f32(Fraction(acc) * alpha) if math.isfinite(acc) else acc * float(alpha)
            else:
                s = s * float(alpha)
            exp[i, j] = s
    np.testing.assert_array_equal(got, exp)


# ----------------------------------------------------------------------------- DelayedScaling, stateful
class DelayedScalingModel(RuleBasedStateMachine):
    """DelayedScaling against a plain list model of its amax history (the documented algorithm)."""

    @initialize(fmt=st.sampled_from(["e4m3fn", "e5m2", "e2m1fn"]), length=st.integers(1, 5),
                algo=st.sampled_from(["max", "most_recent"]), margin=st.integers(-3, 3))
    def setup(self, fmt, length, algo, margin):
        self.f = fp8emu.get_format(fmt)
        self.ds = fp8emu.DelayedScaling(fmt, amax_history_len=length, amax_compute_algo=algo, margin=margin)
        self.hist = [0.0] * length
        self.algo, self.margin = algo, margin
        self.scale = 1.0

    @rule(mant=st.lists(st.one_of(st.floats(-2, 2, width=32), st.just(math.nan), st.just(math.inf)),
                        min_size=1, max_size=6),
          e=st.integers(-20, 20))
    def quantize(self, mant, e):
        x = (np.array(mant, np.float32) * np.float32(2.0 ** e)).astype(np.float32)
        t = self.ds.quantize(x)
        # the cast used the scale in force before this call
        assert float(t.scale) == self.scale
        ref = fp8emu.quantize_tensorwise(x, self.f, scale=self.scale)
        np.testing.assert_array_equal(t.codes, ref.codes)
        # model update: record amax (NaN ignored), reduce, roll, rescale
        a = np.abs(x[~np.isnan(x)])
        amax = float(a.max()) if a.size else 0.0
        self.hist[0] = max(self.hist[0], amax)
        amax_r = max(self.hist) if self.algo == "max" else self.hist[0]
        self.hist = [0.0] + self.hist[2:] + self.hist[:1] if len(self.hist) > 1 else [0.0]
        if math.isfinite(amax_r) and amax_r > 0:
            smax = Fraction(float(np.float32(self.f.max))) * Fraction(2) ** -self.margin
            s = _f32(smax / Fraction(amax_r))
            self.scale = float(np.finfo(np.float32).max) if math.isinf(s) else s

    @precondition(lambda self: hasattr(self, "ds"))
    @rule(s=st.floats(2.0 ** -100, 2.0 ** 100, width=32))
    def set_scale(self, s):
        self.ds.scale = s
        self.scale = float(np.float32(s))

    @invariant()
    def agrees(self):
        if not hasattr(self, "ds"):
            return
        assert float(self.ds.scale) == self.scale
        assert float(self.ds.scale_inv) == _f32(1 / Fraction(self.scale))
        assert self.ds.amax_history.tolist() == self.hist


TestDelayedScalingModel = DelayedScalingModel.TestCase


def test_property_helpers_are_right():
    """The test's own helpers, on hand-checked values."""
    assert _f32(Fraction(1, 3)) == float(np.float32(1 / 3))
    assert _f32(Fraction(2) ** 128) == math.inf and _f32(Fraction(2) ** -150) == 0.0
    assert _f32(Fraction(3, 2) * Fraction(2) ** -149) == 2.0 ** -148          # tie to even
    f = fp8emu.get_format("e4m3fn")
    assert _half_ulp(np.array([1.0, 448.0, 2.0 ** -9]), f).tolist() == [2 ** -4, 16.0, 2 ** -10]
    assert _exact_mm_entry([0x7F, 0x38], "e4m3fn", [0x38, 0x38], "e4m3fn") != _exact_mm_entry(
        [0x7F, 0x38], "e4m3fn", [0x38, 0x38], "e4m3fn")                            # NaN
    assert _exact_mm_entry([0x7C, 0xFC], "e5m2", [0x3C, 0x3C], "e5m2") != 0        # Inf - Inf: NaN
    assert _exact_mm_entry([0x7C, 0x00], "e5m2", [0x3C, 0x3C], "e5m2") == math.inf
