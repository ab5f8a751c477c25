"""HiFloat8 (HiF8): Huawei Ascend's tapered-precision 8-bit format.

HiF8 (Luo et al., "Ascend HiFloat8 Format for Deep Learning", arXiv 2409.16626)
spends a prefix-coded *dot* field on saying how wide the exponent is, so the
mantissa is 3 bits near 1 and shrinks to 1 bit at the ends of the range.  Its
codes are not ordered by magnitude, so a :class:`~fp8emu.formats.Format` (one
exponent width, magnitude-ordered codes) cannot describe it; this module is its
codec.

A code is ``sign | dot | exponent | mantissa`` (8 bits, the sign on top):

==========  =====  ===============  =============  ====================
dot field   Dot    exponent bits    mantissa bits  exponents E
==========  =====  ===============  =============  ====================
``11``      4      4                1              +-8 .. +-15
``10``      3      3                2              +-4 .. +-7
``01``      2      2                3              +-2, +-3
``001``     1      1                3              +-1
``0001``    0      0                3              0
``0000``    DML    --               3              denormal
==========  =====  ===============  =============  ====================

The exponent is sign-magnitude: its first bit is the sign (1 = negative), the
magnitude's leading 1 is implicit, so ``Dot`` exponent bits hold ``2**(Dot-1)``
magnitudes.  A normal value is ``(-1)**S * 2**E * 1.M``.  A denormal code with
mantissa ``M`` in 1..7 is ``(-1)**S * 2**(M - 23)`` (2**-22 .. 2**-16); with
``M = 0`` it is zero (``S = 0``, code 0x00) or NaN (``S = 1``, code 0x80).
The code that would be ``1.5 * 2**15`` is Inf (0x6F, 0xEF), so the largest
finite value is ``2**15 = 32768``.  There is no -0.

Rounding: HiF8's conversion rounds to nearest with ties away from zero (the
paper's TA; Ascend C's ``asc_float2hif8_rna``; en_dtypes' ``hifloat8`` cast), the
default here.  Non-saturating (the default): overflow and +-Inf give +-Inf, NaN
gives NaN.  Saturating (Ascend's ``_sat`` conversions): overflow and +-Inf give
+-max and NaN gives 0.

Examples
--------
>>> import numpy as np
>>> from fp8emu.hifloat import hif8_encode, hif8_decode
>>> c = hif8_encode(np.array([1.0, 1.0625, 0.1, 40000.0, 40960.0]))
>>> [hex(v) for v in c]
['0x8', '0x9', '0x52', '0x6e', '0x6f']
>>> hif8_decode(c).tolist()
[1.0, 1.125, 0.09375, 32768.0, inf]
"""

from __future__ import annotations

import numpy as np

from .interop import source_array
from .random_bits import random_source
from .tables import decode_dtype

__all__ = ["HIF8_MAX", "HIF8_MIN_SUBNORMAL", "HIF8_INF_CODE", "HIF8_NAN_CODE", "HIF8_ROUNDING",
           "hif8_values", "hif8_decode", "hif8_encode", "hif8_summary"]

#: Largest finite HiF8 value (0x6E).
HIF8_MAX = 2.0 ** 15
#: Smallest positive HiF8 value (denormal 0x01).
HIF8_MIN_SUBNORMAL = 2.0 ** -22
#: Code of +Inf (-Inf is 0xEF).
HIF8_INF_CODE = 0x6F
#: The NaN code.
HIF8_NAN_CODE = 0x80
#: Rounding modes of :func:`hif8_encode` ("rna" is HiF8's own).
HIF8_ROUNDING = ("rna", "rne", "rtz", "rup", "rdn", "stochastic")

# (prefix, prefix length, Dot) of the normal codes, widest exponent first
_DOTS = ((0b11, 2, 4), (0b10, 2, 3), (0b01, 2, 2), (0b001, 3, 1), (0b0001, 4, 0))


def _magnitude_value(b: int) -> float:
    """Value of the 7 bits below the sign (NaN/zero decided by the caller)."""
    for prefix, plen, dot in _DOTS:
        if b >> (7 - plen) == prefix:
            mbits = 7 - plen - dot
            m = b & ((1 << mbits) - 1)
            f = (b >> mbits) & ((1 << dot) - 1)
            if dot == 0:
                e = 0
            else:
                mag = (1 << (dot - 1)) | (f & ((1 << (dot - 1)) - 1))
                e = -mag if f >> (dot - 1) else mag
            return float(np.ldexp(1.0 + m / (1 << mbits), e))
    m = b & 7                                   # dot 0000: denormal
    return 0.0 if m == 0 else float(np.ldexp(1.0, m - 23))


def _build_values() -> np.ndarray:
    vals = np.empty(256)
    for c in range(256):
        v = _magnitude_value(c & 0x7F)
        vals[c] = -v if c & 0x80 else v
    vals[HIF8_INF_CODE], vals[HIF8_INF_CODE | 0x80] = np.inf, -np.inf
    vals[HIF8_NAN_CODE] = np.nan
    vals.setflags(write=False)
    return vals


_VALUES = _build_values()
# The finite non-negative values in increasing order with their codes; the value after max is the one
# the Inf code would have held (1.5 * 2**15): crossing the midpoint to it overflows.
_POS_CODES = np.array([c for c in range(0x80) if c != HIF8_INF_CODE], dtype=np.int64)
_order = np.argsort(_VALUES[_POS_CODES], kind="stable")
_POS_CODES = _POS_CODES[_order]
_POS_VALS = _VALUES[_POS_CODES]
_HI_VALS = np.append(_POS_VALS[1:], 1.5 * 2.0 ** 15)
_MIDS = (_POS_VALS + _HI_VALS) / 2          # exact: every value has at most 4 significant bits
del _order


def hif8_values() -> np.ndarray:
    """Value of every HiF8 code, a read-only float64 array indexed by code.

    Examples
    --------
    >>> from fp8emu.hifloat import hif8_values
    >>> v = hif8_values()
    >>> v[0x08], v[0x18], v[0x6E], v[0x01] == 2.0 ** -22
    (np.float64(1.0), np.float64(0.5), np.float64(32768.0), np.True_)
    """
    return _VALUES


def hif8_decode(codes, dtype=np.float32) -> np.ndarray:
    """Decode HiF8 codes (any unsigned integers below 256) to ``dtype``.

    Parameters
    ----------
    codes : array_like of unsigned integers
    dtype : {float16, bfloat16, float32, float64}, optional
        Every HiF8 value is exact in each of them (2**-22 is a float16 subnormal).

    Examples
    --------
    >>> from fp8emu.hifloat import hif8_decode
    >>> hif8_decode([0x00, 0x6E, 0xEF, 0x80]).tolist()
    [0.0, 32768.0, -inf, nan]
    """
    c = np.asarray(codes)
    if c.dtype.kind not in "ui" or c.dtype == np.bool_:
        raise TypeError(f"HiF8 codes must be an integer array, got dtype {c.dtype}")
    if c.size and (int(c.min()) < 0 or int(c.max()) > 0xFF):
        raise ValueError("HiF8 codes must lie in 0..255")
    dt = decode_dtype(dtype)
    return _VALUES.astype(dt)[c.astype(np.intp)]


def hif8_encode(x, *, rounding="rna", saturate=False, rng=None, sr_bits=None, random_bits=None,
                via=None) -> np.ndarray:
    """Round values to HiF8 codes (uint8), each exactly once from its exact value.

    Parameters
    ----------
    x : array_like
        float16, bfloat16, float32, float64 (or integers, bool, ml_dtypes narrow floats).
    rounding : {"rna", "rne", "rtz", "rup", "rdn", "stochastic"}, keyword-only
        ``"rna"`` (ties away from zero) is HiF8's rounding.  ``"rne"``'s "even"
        is an even code (the mantissa's last bit, or a denormal code's).
        ``"stochastic"``: with ``f`` the input's fraction of the way from the
        lower neighbour to the upper one and ``r`` ``sr_bits`` random bits,
        round away iff ``floor(f * 2**sr_bits) + r >= 2**sr_bits``.
    saturate : bool, keyword-only
        False: overflow (past the midpoint of 2**15 and 1.5 * 2**15 for the
        nearest modes) and +-Inf give +-Inf, NaN gives NaN.  True (Ascend's
        saturating conversion): overflow and +-Inf give +-max, NaN gives 0.
        ``rtz`` always gives +-max, ``rup``/``rdn`` toward zero give +-max
        (IEEE 754 section 7.4).
    rng, sr_bits, random_bits : keyword-only
        Randomness for ``"stochastic"``, as :func:`fp8emu.encode` takes it.
    via : {None, "float32"}, keyword-only
        ``"float32"``: round float64 (and integer) inputs to float32 first (RNE),
        then to HiF8 -- the double rounding of en_dtypes 0.0.4's ``hifloat8``
        cast, which goes through float32.  None (default): rounded once.

    Returns
    -------
    numpy.ndarray of uint8

    Examples
    --------
    >>> import numpy as np
    >>> from fp8emu.hifloat import hif8_encode
    >>> hif8_encode(np.array([1.0625, 18.0]), rounding="rne").tolist()   # ties to the even code
    [8, 64]
    >>> hif8_encode(np.array([1e6, -np.inf, np.nan]), saturate=True).tolist()
    [110, 238, 0]
    """
    if not isinstance(rounding, str) or rounding not in HIF8_ROUNDING:
        raise ValueError(f"unknown rounding {rounding!r} for HiF8; accepted: {', '.join(HIF8_ROUNDING)}")
    if not isinstance(saturate, (bool, np.bool_)):
        raise TypeError(f"saturate must be a bool for HiF8, got {saturate!r}")
    if via not in (None, "float32"):
        raise ValueError(f"via must be None or 'float32', got {via!r}")
    arr = source_array(x)
    with np.errstate(over="ignore", invalid="ignore"):
        if via == "float32":
            arr = arr.astype(np.float32)
        xf = arr.astype(np.float64)            # exact for every float type; integers past 2**53 overflow anyway
    k, bits, gen = random_source(rounding, rng, sr_bits, random_bits, xf.shape)
    neg = np.signbit(xf)
    a = np.abs(xf)
    finite = np.isfinite(a)
    af = np.where(finite, a, 0.0)
    i = np.searchsorted(_POS_VALS, af, side="right") - 1
    lo, hi = _POS_VALS[i], _HI_VALS[i]
    inexact = af != lo
    if rounding == "rna":
        away = af >= _MIDS[i]
    elif rounding == "rne":
        away = (af > _MIDS[i]) | ((af == _MIDS[i]) & (_POS_CODES[i] % 2 == 1))
    elif rounding == "rtz":
        away = np.zeros(af.shape, bool)
    elif rounding == "rup":
        away = ~neg
    elif rounding == "rdn":
        away = neg.copy()
    else:
        r = bits if bits is not None else gen.integers(0, 1 << k, size=xf.shape, dtype=np.uint64)
        # lo <= a < hi <= 2 lo (or lo = 0), so a - lo is exact (Sterbenz) and hi - lo is a power of two
        top = np.floor((af - lo) / (hi - lo) * 2.0 ** k)
        away = top + np.asarray(r, dtype=np.float64) >= 2.0 ** k
    away &= inexact
    last = i == len(_POS_VALS) - 1
    code = np.where(away & ~last, _POS_CODES[np.minimum(i + 1, len(_POS_VALS) - 1)], _POS_CODES[i])
    overflow = away & last
    to_max = np.full(af.shape, bool(saturate) or rounding == "rtz")
    if rounding == "rup":
        to_max |= neg
    elif rounding == "rdn":
        to_max |= ~neg
    code = np.where(overflow, np.where(to_max, 0x6E, HIF8_INF_CODE), code)
    code = np.where(np.isinf(a), 0x6E if saturate else HIF8_INF_CODE, code)
    code = np.where(neg & (code != 0), code | 0x80, code)      # no -0: a negative zero result is 0x00
    code = np.where(np.isnan(a), 0x00 if saturate else HIF8_NAN_CODE, code)
    return code.astype(np.uint8)


def hif8_summary() -> str:
    """One Markdown line on HiF8 for the formats listing (``fp8emu formats``), from the constants.

    Examples
    --------
    >>> from fp8emu.hifloat import hif8_summary
    >>> hif8_summary()[:42]
    '`hif8` (HiFloat8, arXiv 2409.16626; tapere'
    """
    return (f"`hif8` (HiFloat8, arXiv 2409.16626; tapered, its codes not ordered by magnitude, so not a "
            f"registered Format: `fp8emu.hifloat.hif8_encode` / `hif8_decode`): 8 bits, 3 to 1 mantissa bits, "
            f"max {HIF8_MAX:g}, min subnormal 2^{int(np.log2(HIF8_MIN_SUBNORMAL))}, Inf 0x{HIF8_INF_CODE:02X}/"
            f"0x{HIF8_INF_CODE | 0x80:02X}, NaN 0x{HIF8_NAN_CODE:02X}, no -0; rounding {', '.join(HIF8_ROUNDING)} "
            f"(rna: the paper's)")
