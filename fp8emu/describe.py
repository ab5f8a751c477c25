"""Human-readable descriptions of codes: bit fields, code tables, encode and decode reports.

:func:`code_table` lists every code of a format with its bits and value
(``fp8emu table``); :func:`encode_lines` shows how each value is encoded
(code, bits, decoded value, absolute and relative error; ``fp8emu encode``);
:func:`decode_lines` shows the value of each code (``fp8emu decode``);
:func:`parse_inputs` reads decimal, hex-float (``0x1.8p+3``) and bit-pattern
(``bits:0x3f800000``) inputs.

Examples
--------
>>> print(code_table("e2m1fn").splitlines()[4])
0x2  0 01 0  1
>>> print(encode_lines(["300"], "e4m3fn")[1])
300  0x79  0 1111 001  288  -12  -0.04
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np

from .codec import decode, encode
from .formats import get_format
from .tables import SOURCE_DTYPES

__all__ = ["code_bits", "code_table", "encode_lines", "decode_lines", "parse_inputs", "parse_codes",
           "SOURCE_DTYPES"]   # SOURCE_DTYPES: the input/output types, re-exported from fp8emu.tables

_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def parse_inputs(texts, source_dtype=None) -> np.ndarray:
    """Read input values from text: decimal, hex-float or ``bits:PATTERN``.

    Decimal text (``-1e-3``, ``inf``, ``-nan``) and C99 hex floats
    (``0x1.8p+3``) are read exactly and rounded once to ``source_dtype``
    (to nearest even: a decimal just above a float16 tie is not first
    rounded onto the tie in float64); ``bits:0x3f800000`` is a bit pattern
    of ``source_dtype``, taken as is.  ``source_dtype`` defaults to float64,
    or float32 when a bit pattern is given.

    Examples
    --------
    >>> parse_inputs(["0x1.8p+3", "-1e-3", "bits:0x3f800000"]).tolist()
    [12.0, -0.0010000000474974513, 1.0]
    >>> parse_inputs(["0.1"], "bfloat16").astype(float).tolist()
    [0.10009765625]
    >>> parse_inputs(["1.00048828125000000001"], "float16").astype(float).tolist()   # just above a tie
    [1.0009765625]
    """
    texts = [str(t) for t in texts]
    if source_dtype is None:
        source_dtype = "float32" if any(t.lower().startswith("bits:") for t in texts) else "float64"
    if source_dtype not in SOURCE_DTYPES:
        raise ValueError(f"unknown source dtype {source_dtype!r}; valid: {', '.join(SOURCE_DTYPES)}")
    dt = SOURCE_DTYPES[source_dtype]
    uint = _UINT[dt.itemsize]
    nbits = dt.itemsize * 8
    out = np.empty(len(texts), dt)
    for i, t in enumerate(texts):       # a handful of command-line values
        low = t.strip().lower()
        if low.startswith("bits:"):
            try:
                pat = int(low[5:], 0)
            except ValueError:
                raise ValueError(f"bad bit pattern {t!r}: write bits:0x3f800000 (hex) or bits:1065353216") from None
            if not 0 <= pat < (1 << nbits):
                raise ValueError(f"bit pattern {t!r} does not fit {source_dtype} ({nbits} bits); "
                                 "pick the type with --source-dtype")
            out[i] = np.array(pat, dtype=np.uint64).astype(uint).view(dt)
            continue
        try:
            v = float.fromhex(low) if "0x" in low else float(low)
        except OverflowError:
            # a hex float past float64 was Python's "hexadecimal value too large" where 1e400 is Inf
            v = -math.inf if low.startswith("-") else math.inf
        except ValueError:
            raise ValueError(f"VALUE must be a number (e.g. 3.5, -1e-3, 0x1.8p+3, inf, -nan) or bits:PATTERN, "
                             f"got {t!r}") from None
        # only where a second rounding can matter: a float64 0 or one past 2**130 is 0 or Inf in every narrower
        # type whatever the text's digits (and reading 1e-99999999999 exactly would compute 10**99999999999)
        if dt != np.float64 and 0 < abs(v) < 2.0 ** 130:
            v = _odd_float64(v, low)
        with np.errstate(over="ignore"):       # out of range rounds to Inf, as a cast does
            out[i] = (_odd_float32(v) if dt.itemsize < 4 else np.float64(v)).astype(dt)
    return out


_HEX = re.compile(r"([+-]?)0x([0-9a-f]*)(?:\.([0-9a-f]*))?(?:p([+-]?\d+))?")


def _exact(low):
    """The exact value of decimal or hex-float text (None where it has none: inf, nan)."""
    m = _HEX.fullmatch(low)
    if m:
        sign, whole, frac, exp = m.groups()
        frac = frac or ""
        v = Fraction(int(whole + frac or "0", 16), 16 ** len(frac)) * Fraction(2) ** int(exp or 0)
        return -v if sign == "-" else v
    try:
        return Fraction(low)
    except (ValueError, ZeroDivisionError):
        return None


def _odd_float64(v, low):
    """``v`` (the text rounded to nearest float64) rounded to odd instead: where the text is not exactly a
    float64 and ``v`` is even, the neighbour on the text's side.  Rounding that once more to a type of at
    most 51 significand bits gives the text's single correct rounding (a decimal just above a float16 tie
    rounds onto the tie in float64, and the tie then went to even, the wrong way)."""
    exact = _exact(low)
    if exact is None or exact == Fraction(v) or int(np.float64(v).view(np.uint64)) & 1:
        return v
    return float(np.nextafter(v, math.inf if exact > Fraction(v) else -math.inf))


def _odd_float32(v):
    """Round-to-odd float64 ``v`` rounded to odd float32 as well, for the 16-bit types: ml_dtypes before 0.7
    casts float64 to bfloat16 through float32 (to nearest even), a second rounding that puts a value just above
    a bfloat16 tie onto the tie.  From odd float32 (24 bits, two more than either 16-bit type needs) the one
    remaining rounding is correct whichever path the cast takes."""
    f = np.float32(v)                          # to nearest even; the caller ignores overflow (Inf, as a cast)
    if math.isfinite(f) and float(f) != v and not int(f.view(np.uint32)) & 1:
        f = np.nextafter(f, np.float32(math.inf if v > float(f) else -math.inf))
    return f


def parse_codes(texts, fmt) -> np.ndarray:
    """uint8 codes from text (``0x7e``, ``126``, ``0b01111110``), checked against the format's width.

    Examples
    --------
    >>> parse_codes(["0x7e", "56"], "e4m3fn").tolist()
    [126, 56]
    """
    f = get_format(fmt)
    codes = []
    for t in texts:
        try:
            c = int(str(t), 0)
        except ValueError:
            raise ValueError(f"CODE must be an integer such as 0x7e, 126 or 0b01111110, got {t!r}") from None
        if not 0 <= c < (1 << f.bits):
            raise ValueError(f"code {t!r} is out of range for the {f.bits}-bit format {f.name} "
                             f"(0..0x{(1 << f.bits) - 1:X})")
        codes.append(c)
    return np.array(codes, np.uint8)


def code_bits(code: int, fmt) -> str:
    """The bits of ``code`` split as ``sign exponent mantissa`` (unsigned formats have no sign field).

    Examples
    --------
    >>> code_bits(0x7E, "e4m3fn")
    '0 1111 110'
    >>> code_bits(0x7F, "e8m0fnu")
    '01111111'
    """
    f = get_format(fmt)
    s = format(int(code), f"0{f.bits}b")
    parts = ([s[0]] if f.signed else []) + [s[len(s) - f.mbits - f.ebits:len(s) - f.mbits]]
    if f.mbits:
        parts.append(s[len(s) - f.mbits:])
    return " ".join(parts)


def _value_text(v: float) -> str:
    return "nan" if np.isnan(v) else format(v, ".10g")


def code_table(fmt) -> str:
    """Every code of ``fmt``: hex code, bits and value, one per line after a header.

    Examples
    --------
    >>> lines = code_table("e4m3fn").splitlines()
    >>> len(lines) - 2, lines[-1]
    (256, '0xFF  1 1111 111  nan')
    """
    f = get_format(fmt)
    values = f.values()
    width = (f.bits + 3) // 4
    lines = [f"# {f.name}: {1 << f.bits} codes", "code  bits  value"]
    lines += [f"0x{c:0{width}X}  {code_bits(c, f)}  {_value_text(values[c])}" for c in range(1 << f.bits)]
    return "\n".join(lines)


def _bits_of(v, dt, uint):
    return "0x" + format(int(np.asarray(v, dt).view(uint)), f"0{2 * dt.itemsize}x")


def encode_lines(values, fmt, *, rounding="rne", saturate=None, profile=None, source_dtype=None,
                 rng=None, sr_bits=None) -> list:
    """Encode values given as text (see :func:`parse_inputs`) and describe each result.

    Returns
    -------
    list of str
        A header, then ``input code bits value abs_error rel_error`` per
        value; with a ``source_dtype`` (or bit-pattern inputs) the input's
        bit pattern follows it.

    Examples
    --------
    >>> encode_lines(["1e9"], "e4m3fn", saturate=True)[1]
    '1e9  0x7E  0 1111 110  448  -999999552  -0.999999552'
    >>> encode_lines(["bits:0x3f800000"], "e5m2")[1]
    'bits:0x3f800000 = 1 (0x3f800000)  0x3C  0 01111 00  1  0  0'
    """
    f = get_format(fmt)
    x = parse_inputs(values, source_dtype)
    show_bits = source_dtype is not None or any(str(v).lower().startswith("bits:") for v in values)
    dt = x.dtype
    uint = _UINT[dt.itemsize]
    opts = {"rounding": rounding, "saturate": saturate}
    if profile is not None:
        opts["profile"] = profile
    if rng is not None or sr_bits is not None:
        opts.update(rng=rng, sr_bits=sr_bits)
    codes = encode(x, f, **opts)
    dec = decode(codes, f, dtype=np.float64)
    xd = x.astype(np.float64)
    width = (f.bits + 3) // 4
    out = ["input  code  bits  value  abs_error  rel_error"]
    with np.errstate(invalid="ignore", divide="ignore"):
        err = np.where(dec == xd, 0.0, dec - xd)  # exact infinities have no error, not inf - inf
        # of a zero: 0 where exact, NaN where the code is NaN (E8M0 has no zero; "inf" was printed), else Inf
        rel = np.where(xd != 0, err / np.abs(xd), np.where(err == 0, 0.0, np.where(np.isnan(err), np.nan, np.inf)))
    for i, (s, c, v, e, r) in enumerate(zip(values, codes.tolist(), dec.tolist(), err.tolist(), rel.tolist())):
        src = f"{s} = {_value_text(float(xd[i]))} ({_bits_of(x[i], dt, uint)})" if show_bits else str(s)
        out.append(f"{src}  0x{c:0{width}X}  {code_bits(c, f)}  {_value_text(v)}  "
                   f"{_value_text(e)}  {_value_text(r)}")
    return out


def decode_lines(codes, fmt, *, dtype="float32", profile=None) -> list:
    """Describe the value of each code (text or integers) in ``dtype``: code, bits, value, value bits.

    Examples
    --------
    >>> decode_lines(["0x7e", "0xff"], "e4m3fn")[1:]
    ['0x7E  0 1111 110  448  0x43e00000', '0xFF  1 1111 111  nan  0xffc00000']
    """
    f = get_format(fmt)
    if dtype not in SOURCE_DTYPES:
        raise ValueError(f"unknown output dtype {dtype!r}; valid: {', '.join(SOURCE_DTYPES)}")
    dt = SOURCE_DTYPES[dtype]
    uint = _UINT[dt.itemsize]
    c = parse_codes(codes, f)
    vals = decode(c, f, dtype=dt, profile=profile)
    width = (f.bits + 3) // 4
    out = [f"code  bits  value ({dtype})  value bits"]
    for code, v in zip(c.tolist(), vals):
        out.append(f"0x{code:0{width}X}  {code_bits(code, f)}  {_value_text(float(v))}  {_bits_of(v, dt, uint)}")
    return out
