"""Independent reference for rounding into narrow formats.

Nothing here calls fp8emu's rounding or codec.  Values of codes are computed
from the spec formula with exact rationals; rounding is done by locating the
input between the two neighbouring representable values (value space, not bit
manipulation) and applying each mode's definition.  Only the format's spec
constants (field widths, bias, special encodings) are read from the Format.

Two implementations share one definition:
- :func:`round_fraction` rounds one exact ``Fraction`` (slow, fully general);
- :class:`ValueOracle` does the same with NumPy ``searchsorted`` for inputs
  that are exact in float64 (every float16/bfloat16/float32/float64 value);
  all representable values and midpoints of fp8emu's formats are exact in
  float64, so its comparisons are exact.  The tests check the two agree.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

# The canonical NaN code chosen for each NaN style (documented in Format.nan_code).
def expected_nan(fmt, neg):
    if fmt.nan is None:
        return spec_max_code(fmt)   # no NaN: +max (documented choice, as CUDA's FP6/FP4 intrinsics)
    sign = 1 << (fmt.ebits + fmt.mbits)
    if fmt.nan == "fn":
        return (sign - 1) | (sign if neg else 0)
    if fmt.nan == "ieee":
        q = (((1 << fmt.ebits) - 1) << fmt.mbits) | (1 << (fmt.mbits - 1))
        return q | (sign if neg else 0)
    if fmt.nan == "negzero":
        return sign
    if fmt.nan == "top":
        return (1 << fmt.bits) - 1
    raise AssertionError(fmt.nan)


def code_value(fmt, code):
    """Exact value of one code from the spec formula (None for NaN, +-inf as float)."""
    mbits, ebits = fmt.mbits, fmt.ebits
    sign_bit = (1 << (ebits + mbits)) if fmt.signed else 0
    neg = bool(code & sign_bit)
    mag = code & ((1 << (ebits + mbits)) - 1)
    e_all_ones = (mag >> mbits) == (1 << ebits) - 1
    if fmt.nan == "negzero" and code == sign_bit:
        return None
    if fmt.nan == "fn" and mag == (1 << (ebits + mbits)) - 1:
        return None
    if fmt.nan == "top" and code == (1 << fmt.bits) - 1:
        return None
    if fmt.inf == "ieee" and e_all_ones:
        if mag & ((1 << mbits) - 1):
            return None
        return -math.inf if neg else math.inf
    if fmt.inf == "top" and mag == (1 << (ebits + mbits)) - 1:
        return -math.inf if neg else math.inf
    e = mag >> mbits
    f = mag & ((1 << mbits) - 1)
    if fmt.subnormals and e == 0:
        v = Fraction(f, 1 << mbits) * Fraction(2) ** (1 - fmt.bias)
    else:
        v = (1 + Fraction(f, 1 << mbits)) * Fraction(2) ** (e - fmt.bias)
    return -v if neg else v


@functools.lru_cache(maxsize=None)
def positive_table(fmt):
    """Sorted list of (value, code) for the finite non-negative values."""
    out = []
    sign_bit = (1 << (fmt.ebits + fmt.mbits)) if fmt.signed else 0
    for c in range(1 << fmt.bits):
        if c & sign_bit:
            continue
        v = code_value(fmt, c)
        if v is None or isinstance(v, float):
            continue
        out.append((v, c))
    out.sort()
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _inf_code(fmt):
    return [c for c in range(1 << fmt.bits) if code_value(fmt, c) == math.inf][0]


def spec_max_code(fmt):
    return positive_table(fmt)[-1][1]


def _next_after_max(table, mbits):
    """The value one step above max, as if the exponent range were unbounded."""
    vmax = table[-1][0]
    e = math.floor(math.log2(vmax))
    while Fraction(2) ** e > vmax:
        e -= 1
    while Fraction(2) ** (e + 1) <= vmax:
        e += 1
    return vmax + Fraction(2) ** e / 2 ** mbits


def _even(fmt, code, value):
    """Whether a candidate is 'even' for ties-to-even."""
    if fmt.parity == "significand" and fmt.mbits == 0:
        # Significand integer incl. the implicit bit: 1 (odd) for every normal value,
        # so only the binade above (significand 2 in the lower binade's units) is even.
        return None
    return code % 2 == 0


def round_fraction(x, fmt, rounding, saturate, r=None, k=None):
    """Code for one exact value ``x`` (Fraction, or float nan/inf)."""
    if isinstance(x, float) and math.isnan(x):
        return expected_nan(fmt, math.copysign(1, x) < 0)
    table = positive_table(fmt)
    if isinstance(x, float) and math.isinf(x):
        neg = x < 0
        if not fmt.signed and neg:
            return expected_nan(fmt, True)
        return _beyond_max(fmt, neg, saturate)
    x = Fraction(x)
    neg = x < 0 or (x == 0 and r == "negzero")
    a = abs(x)
    if not fmt.signed and neg and a != 0:
        return expected_nan(fmt, True)
    if not fmt.subnormals and a == 0:
        return expected_nan(fmt, neg)
    vals = [v for v, _ in table]
    codes = [c for _, c in table]
    nxt = _next_after_max(table, fmt.mbits)
    # locate a between neighbours
    import bisect
    i = bisect.bisect_right(vals, a) - 1
    if i >= 0 and vals[i] == a:
        mag = codes[i]
        overflow = False
    else:
        if i < 0:  # below the smallest value (formats without zero)
            mag = codes[0]
            return _sign(fmt, mag, neg)
        lo_v, lo_c = vals[i], codes[i]
        if i + 1 < len(vals):
            hi_v, hi_c = vals[i + 1], codes[i + 1]
        else:
            hi_v, hi_c = nxt, None   # beyond max: the next value is an overflow
        away = {
            "rne": None, "rna": None, "rtz": False, "rto": None, "stochastic": None,
            "rup": not neg, "rdn": neg,
        }[rounding]
        if rounding in ("rne", "rna"):
            mid = (lo_v + hi_v) / 2
            if a != mid:
                away = a > mid
            elif rounding == "rna":
                away = True
            else:
                ev = _even(fmt, lo_c, lo_v)
                if ev is None:
                    away = lo_v != 0   # significand parity: normal lo is odd
                else:
                    away = not ev
        elif rounding == "rto":
            away = (lo_c % 2 == 0) if not (fmt.parity == "significand" and fmt.mbits == 0) else False
        elif rounding == "stochastic":
            frac = (a - lo_v) / (hi_v - lo_v)
            top = math.floor(frac * 2 ** k)
            away = top + r >= 2 ** k
        if not away:
            mag = lo_c
            overflow = False
        elif hi_c is None:
            overflow = True
        else:
            mag = hi_c
            overflow = False
    if overflow:
        # P3109 (Inf at the top code): round to odd overflows to Inf; OCP formats give max
        rto_max = rounding == "rto" and fmt.inf != "top"
        to_max = saturate or rounding == "rtz" or rto_max or (rounding == "rdn" and not neg) or (
            rounding == "rup" and neg)
        return _beyond_max(fmt, neg, to_max)
    return _sign(fmt, mag, neg)


def _beyond_max(fmt, neg, to_max):
    """Code (sign applied) of a result beyond max: +-max, else +-Inf, else NaN."""
    if to_max or (fmt.inf is None and fmt.nan is None):
        mag = spec_max_code(fmt)
    elif fmt.inf is not None:
        mag = _inf_code(fmt)
    else:
        return expected_nan(fmt, neg)
    return _sign(fmt, mag, neg)


def _sign(fmt, mag, neg):
    sign_bit = (1 << (fmt.ebits + fmt.mbits)) if fmt.signed else 0
    if not neg:
        return mag
    if not fmt.signed:
        return mag if mag == 0 else expected_nan(fmt, True)
    if mag == 0 and not (fmt.subnormals and fmt.nan != "negzero"):
        return 0
    return mag | sign_bit


def round_float(xf, fmt, rounding, saturate):
    """Convenience: round a Python/NumPy float (exact) with round_fraction."""
    xf = float(xf)
    if math.isnan(xf) or math.isinf(xf):
        return round_fraction(xf, fmt, rounding, saturate)
    r = "negzero" if (xf == 0 and math.copysign(1, xf) < 0) else None
    return round_fraction(Fraction(xf), fmt, rounding, saturate, r=r)


class ValueOracle:
    """Vectorised form of :func:`round_fraction` for float64-exact inputs."""

    def __init__(self, fmt):
        self.fmt = fmt
        table = positive_table(fmt)
        self.vals = np.array([float(v) for v, _ in table])
        assert all(Fraction(float(v)) == v for v, _ in table)
        self.codes = np.array([c for _, c in table], dtype=np.int64)
        nxt = _next_after_max(table, fmt.mbits)
        self.hi_vals = np.append(self.vals[1:], float(nxt))
        self.mids = (self.vals + self.hi_vals) / 2   # exact: few significant bits
        self.sign_bit = (1 << (fmt.ebits + fmt.mbits)) if fmt.signed else 0
        self.max_code = int(self.codes[-1])
        infs = [c for c in range(1 << fmt.bits) if code_value(fmt, c) == math.inf]
        self.inf_code = infs[0] if infs else None

    def nan_code(self, neg):
        return np.where(neg, expected_nan(self.fmt, True), expected_nan(self.fmt, False))

    def __call__(self, x, rounding, saturate):
        fmt = self.fmt
        x = np.asarray(x, dtype=np.float64)
        neg = np.signbit(x)
        a = np.abs(x)
        finite = np.isfinite(x)
        af = np.where(finite, a, 0.0)
        i = np.searchsorted(self.vals, af, side="right") - 1
        below = i < 0
        ic = np.maximum(i, 0)
        lo_v, lo_c = self.vals[ic], self.codes[ic]
        last = ic == len(self.vals) - 1
        hi_c = np.where(last, -1, self.codes[np.minimum(ic + 1, len(self.vals) - 1)])
        exact = (lo_v == af) & ~below
        mid = self.mids[ic]
        sig_parity = fmt.parity == "significand" and fmt.mbits == 0
        if rounding == "rne":
            lo_odd = (lo_v != 0) if sig_parity else (lo_c % 2 == 1)
            away = (af > mid) | ((af == mid) & lo_odd)
        elif rounding == "rna":
            away = af >= mid
        elif rounding == "rtz":
            away = np.zeros(x.shape, bool)
        elif rounding == "rup":
            away = ~neg
        elif rounding == "rdn":
            away = neg.copy()
        elif rounding == "rto":
            away = np.zeros(x.shape, bool) if sig_parity else (lo_c % 2 == 0)
        else:
            raise ValueError(rounding)
        away &= ~exact
        mag = np.where(away, hi_c, lo_c)
        overflow = away & last
        to_max = np.full(x.shape, saturate or rounding == "rtz" or (rounding == "rto" and fmt.inf != "top"))
        if rounding == "rdn":
            to_max |= ~neg
        if rounding == "rup":
            to_max |= neg
        if fmt.inf is None and fmt.nan is None:
            to_max[:] = True
        ov_mag = np.where(to_max, self.max_code, self.inf_code if self.inf_code is not None else -1)
        mag = np.where(overflow, ov_mag, mag)
        mag = np.where(below, self.codes[0], mag)
        # infinities
        isinf = np.isinf(x)
        if saturate or (fmt.inf is None and fmt.nan is None):
            inf_mag = self.max_code
        else:
            inf_mag = self.inf_code if self.inf_code is not None else -1
        mag = np.where(isinf, inf_mag, mag)
        isnan_res = mag < 0
        # signs
        if fmt.signed:
            has_nz = fmt.subnormals and fmt.nan != "negzero"
            signed = neg & ((mag != 0) | has_nz)
            out = np.where(signed, mag | self.sign_bit, mag)
        else:
            out = mag
            isnan_res = isnan_res | (neg & ((mag != 0) | (not fmt.subnormals)))
            if not fmt.subnormals:
                isnan_res |= (a == 0)
        out = np.where(isnan_res, self.nan_code(neg), out)
        out = np.where(np.isnan(x), self.nan_code(neg), out)
        return out.astype(np.int64)
