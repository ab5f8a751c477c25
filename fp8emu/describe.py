"""Human-readable descriptions of codes: bit fields, code tables, encode reports.

:func:`code_table` lists every code of a format with its bits and value
(``fp8emu table``); :func:`encode_lines` shows how each value is encoded
(code, bits, decoded value, absolute and relative error; ``fp8emu encode``).

Examples
--------
>>> print(code_table("e2m1fn").splitlines()[4])
0x2  0 01 0  1
>>> print(encode_lines(["300"], "e4m3fn")[1])
300  0x79  0 1111 001  288  -12  -0.04
"""

from __future__ import annotations

import numpy as np

from .codec import decode, encode
from .formats import get_format

__all__ = ["code_bits", "code_table", "encode_lines"]


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


def encode_lines(values, fmt, *, rounding="rne", saturate=False, profile=None) -> list:
    """Encode decimal strings (parsed exactly as float64) and describe each result.

    Returns
    -------
    list of str
        A header, then ``input code bits value abs_error rel_error`` per value.

    Examples
    --------
    >>> encode_lines(["1e9"], "e4m3fn", saturate=True)[1]
    '1e9  0x7E  0 1111 110  448  -999999552  -0.999999552'
    """
    f = get_format(fmt)
    try:
        x = np.array([float(v) for v in values], np.float64)
    except ValueError as exc:
        raise ValueError(f"VALUE must be a number (e.g. 3.5, -1e-3, inf, nan): {exc}") from None
    opts = {"rounding": rounding, "saturate": saturate}
    if profile is not None:
        opts["profile"] = profile
    codes = encode(x, f, **opts)
    dec = decode(codes, f, dtype=np.float64)
    width = (f.bits + 3) // 4
    out = ["input  code  bits  value  abs_error  rel_error"]
    with np.errstate(invalid="ignore", divide="ignore"):
        err = np.where(dec == x, 0.0, dec - x)  # exact infinities have no error, not inf - inf
        rel = np.where(x != 0, err / np.abs(x), np.where(err == 0, 0.0, np.inf))
    for s, c, v, e, r in zip(values, codes.tolist(), dec.tolist(), err.tolist(), rel.tolist()):
        out.append(f"{s}  0x{c:0{width}X}  {code_bits(c, f)}  {_value_text(v)}  "
                   f"{_value_text(e)}  {_value_text(r)}")
    return out
