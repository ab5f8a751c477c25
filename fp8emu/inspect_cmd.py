"""Inspect formats from the command line: ``fp8emu table`` and ``fp8emu encode``.

``table FORMAT`` lists every code of a format with its bits and value;
``encode VALUE... --format F`` shows how each value is encoded (code, bits,
decoded value, absolute and relative error).

Examples
--------
>>> print(code_table("e2m1fn").splitlines()[4])
0x2  0 01 0  1
>>> print(encode_lines(["300"], "e4m3fn")[1])
300  0x79  0 1111 001  288  -12  -0.04
"""

from __future__ import annotations

import re

import numpy as np

from .codec import decode, encode
from .formats import get_format
from .rounding import ROUNDING_MODES

__all__ = ["code_bits", "code_table", "encode_lines", "add_cli"]


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
    try:
        codes = encode(x, f, **opts)
    except TypeError as exc:
        if profile is not None and "profile" in str(exc):
            raise ValueError("--profile needs fp8emu.profiles, which this installation lacks") from None
        raise
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


def _table(args) -> int:
    print(code_table(args.format))
    return 0


def _encode(args) -> int:
    print("\n".join(encode_lines(args.values, args.format, rounding=args.rounding,
                                 saturate=args.saturate, profile=args.profile)))
    return 0


def add_cli(sub) -> None:
    """Add the ``table`` and ``encode`` subcommands."""
    p = sub.add_parser("table", help="list every code of a format with its bits and value",
                       description="List every code of FORMAT with its bits (sign exponent mantissa) "
                                   "and value.")
    p.add_argument("format", metavar="FORMAT", help="format name (see `fp8emu.formats()`)")
    p.set_defaults(func=_table)
    p = sub.add_parser("encode", help="encode values and show code, bits, value and error",
                       description="Encode each VALUE (read exactly as float64, rounded once) and print "
                                   "its code, bits, decoded value, absolute and relative error.")
    # Let negative numbers in exponent notation (-1e-3) and -inf be values, not options.
    p._negative_number_matcher = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-inf(inity)?$", re.I)
    p.add_argument("values", nargs="+", metavar="VALUE", help="decimal numbers, inf or nan")
    p.add_argument("--format", "-f", default="e4m3fn", help="target format (default e4m3fn)")
    p.add_argument("--rounding", "-r", default="rne", choices=ROUNDING_MODES,
                   help="rounding mode (default rne)")
    p.add_argument("--saturate", action="store_true", help="clamp overflow and ±Inf to ±max")
    p.add_argument("--profile", default=None, help="implementation profile (e.g. cuda-satfinite)")
    p.set_defaults(func=_encode)
