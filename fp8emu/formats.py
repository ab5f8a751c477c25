"""Narrow floating-point format descriptions and the format registry.

A :class:`Format` is a small, explicit description of a binary floating-point
format of at most 8 bits: sign, exponent and mantissa widths, the exponent
bias, and how infinities, NaNs and negative zero are encoded.  Everything else
in fp8emu (rounding, encoding, decoding, profiles) is parametrised by it, so
one implementation serves the whole family.

Code layout
-----------
Codes are unsigned integers held in ``uint8`` (FP6 and FP4 codes live in the
low bits).  A signed format puts the sign in the top bit; the remaining
*magnitude code* is ``exponent_field << mbits | mantissa_field``.  Magnitude
codes increase with magnitude, which the rounding core relies on.
"""

from __future__ import annotations

import dataclasses
from functools import cached_property

import numpy as np

from .registry import Registry
from .interop import is_integer

__all__ = ["Format", "get_format", "format_names", "register_format", "format_table", "p3109_format"]

_INF_STYLES = (None, "ieee", "top")
_NAN_STYLES = (None, "ieee", "fn", "negzero", "top")
_PARITY = ("code", "significand")


@dataclasses.dataclass(frozen=True)
class Format:
    """Description of a narrow binary floating-point format.

    Parameters
    ----------
    name : str
        Registry name, e.g. ``"e4m3fn"``.
    ebits, mbits : int
        Exponent and (stored) mantissa field widths.
    bias : int
        Exponent bias: a normal value is ``1.m * 2**(exponent_field - bias)``.
    signed : bool, optional
        Whether the top bit is a sign bit (default True).
    subnormals : bool, optional
        Whether exponent field 0 encodes subnormals (and zero).  When False
        (as in E8M0) exponent field 0 is an ordinary binade and the format
        has no zero.
    inf : {None, "ieee", "top"}
        How +-Inf are encoded: ``"ieee"`` all-ones exponent with zero
        mantissa; ``"top"`` the largest magnitude code that is not NaN (IEEE
        P3109: 0x7F/0xFF in signed formats, 0xFE below the NaN 0xFF in
        unsigned ones).
    nan : {None, "ieee", "fn", "negzero", "top"}
        How NaN is encoded: ``"ieee"`` all-ones exponent with non-zero
        mantissa; ``"fn"`` all-ones magnitude (OCP E4M3, sign kept);
        ``"negzero"`` the code ``1000...0`` (FNUZ formats, P3109);
        ``"top"`` the all-ones code of an unsigned format (E8M0).
        Formats with no NaN map NaN inputs to ``+max``.
    parity : {"code", "significand"}, optional
        What "even" means for round-to-nearest-even (and "odd" for
        round-to-odd).  It matters only when ``mbits == 0``: ``"code"``
        compares the codes' last bits (IEEE P3109), ``"significand"`` the
        significand integer including the implicit bit, which is odd for
        every normal value, so ties round up (ml_dtypes' E8M0).
    description : str, optional
        One line shown in tables.

    Examples
    --------
    >>> from fp8emu import Format
    >>> f = Format("e3m3", ebits=3, mbits=3, bias=3, nan="fn")
    >>> float(f.max), f.bits
    (28.0, 7)
    """

    name: str
    ebits: int
    mbits: int
    bias: int
    signed: bool = True
    subnormals: bool = True
    inf: str | None = None
    nan: str | None = None
    parity: str = "code"
    description: str = ""

    def __post_init__(self):
        # Every field is checked by type and range here, so that a wrong field is
        # named at construction rather than surfacing later as an overflow warning,
        # a zero maximum or an Inf value table.
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Format.name must be a non-empty string, got {self.name!r}")
        for field in ("ebits", "mbits", "bias"):
            v = getattr(self, field)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"Format.{field} must be an int, got {v!r}")
            object.__setattr__(self, field, int(v))
        for field in ("signed", "subnormals"):
            v = getattr(self, field)
            if not isinstance(v, (bool, np.bool_)):
                raise TypeError(f"Format.{field} must be a bool (True or False), got {v!r}")
            object.__setattr__(self, field, bool(v))
        if not isinstance(self.description, str):
            raise TypeError(f"Format.description must be a string, got {self.description!r}")
        if not 0 <= self.ebits <= 8:
            raise ValueError(f"Format.ebits must be in 0..8, got {self.ebits}")
        if self.ebits == 0 and (not self.subnormals or self.inf is not None or self.nan is not None):
            # with no exponent field every code is a multiple of the one step 2**(emin - mbits):
            # a scaled integer format (CUDA's E0M3), with no room for Inf/NaN codes
            raise ValueError("a format with ebits=0 is a scaled integer format: it needs subnormals=True "
                             "and no Inf or NaN")
        if not 0 <= self.mbits <= 7:
            raise ValueError(f"Format.mbits must be in 0..7, got {self.mbits}")
        if self.bits > 8:
            raise ValueError(f"fp8emu formats have at most 8 bits; {self.name} would have {self.bits} "
                             f"(signed={self.signed}, ebits={self.ebits}, mbits={self.mbits})")
        lo, hi = self.bias_range(self.ebits, self.mbits, self.subnormals)
        if not lo <= self.bias <= hi:
            raise ValueError(f"Format.bias must be in {lo}..{hi} for ebits={self.ebits}, mbits={self.mbits}"
                             f" (every value a finite float64, the smallest one normal), got {self.bias}")
        if self.inf not in _INF_STYLES:
            raise ValueError(f"inf must be one of {_INF_STYLES}, got {self.inf!r}")
        if self.nan not in _NAN_STYLES:
            raise ValueError(f"nan must be one of {_NAN_STYLES}, got {self.nan!r}")
        if self.parity not in _PARITY:
            raise ValueError(f"parity must be one of {_PARITY}, got {self.parity!r}")
        if self.nan == "negzero" and not self.signed:
            raise ValueError("nan='negzero' needs a signed format")
        if self.nan == "top" and self.signed:
            raise ValueError("nan='top' is for unsigned formats")
        if self.inf == "ieee" and self.nan not in (None, "ieee"):
            raise ValueError("inf='ieee' pairs with nan='ieee' or no NaN")
        if self.nan == "ieee" and self.inf != "ieee":
            raise ValueError("nan='ieee' needs inf='ieee'")
        if self.inf == "ieee" and not self.signed:
            raise ValueError("unsigned formats take Inf as inf='top' (P3109), not 'ieee'")
        if self.inf == "top" and not self.signed and self.nan != "top":
            raise ValueError("an unsigned format with Inf needs nan='top' (P3109: NaN 0xFF, Inf 0xFE)")
        if self.nan == "ieee" and self.mbits == 0:
            raise ValueError("nan='ieee' needs at least one mantissa bit")
        if self.max_code < (1 << self.mbits) and not self.subnormals:
            raise ValueError("format has no finite values")

    @staticmethod
    def bias_range(ebits: int, mbits: int, subnormals: bool = True) -> tuple[int, int]:
        """Accepted ``bias`` values ``(lo, hi)`` for the given field widths.

        The largest exponent field's binade must stay below ``2**1024`` (every
        value a finite float64) and the smallest value must be a normal float64
        (``>= 2**-1022``), so values, tables and the exact core stay exact.

        Examples
        --------
        >>> Format.bias_range(4, 3)
        (-1008, 1020)
        """
        return (1 << ebits) - 1024, 1022 + int(bool(subnormals)) - mbits

    # ------------------------------------------------------------------ layout
    @property
    def bits(self) -> int:
        """Total width in bits (sign + exponent + mantissa)."""
        return int(self.signed) + self.ebits + self.mbits

    @property
    def sign_bit(self) -> int:
        """The sign bit's value in a code (0 for unsigned formats)."""
        return (1 << (self.ebits + self.mbits)) if self.signed else 0

    @property
    def magnitude_mask(self) -> int:
        """Mask selecting the magnitude part of a code."""
        return (1 << (self.ebits + self.mbits)) - 1

    @property
    def emin(self) -> int:
        """Exponent of the smallest binade (the minimum normal exponent)."""
        return (1 if self.subnormals else 0) - self.bias

    @property
    def inf_code(self) -> int | None:
        """Magnitude code of +Inf, or None when the format has no Inf."""
        if self.inf == "ieee":
            return ((1 << self.ebits) - 1) << self.mbits
        if self.inf == "top":
            return self.magnitude_mask - (1 if self.nan == "top" else 0)
        return None

    @property
    def max_code(self) -> int:
        """Magnitude code of the largest finite value."""
        if self.inf is not None:
            return self.inf_code - 1
        if self.nan in ("fn", "top"):
            return self.magnitude_mask - 1
        return self.magnitude_mask

    @property
    def nan_code(self) -> int | None:
        """Canonical (positive, quiet) NaN code, or None when there is no NaN.

        ``ieee``: all-ones exponent with the top mantissa bit set (0x7E for
        E5M2, as ml_dtypes); ``fn``: 0x7F; ``negzero``: 0x80; ``top``: 0xFF.
        Formats whose NaN has a sign (``ieee``, ``fn``) keep the input's sign.
        """
        if self.nan == "ieee":
            return self.inf_code | (1 << (self.mbits - 1))
        if self.nan == "fn":
            return self.magnitude_mask
        if self.nan == "negzero":
            return self.sign_bit
        if self.nan == "top":
            return (1 << self.bits) - 1
        return None

    # -------------------------------------------------------------- properties
    @property
    def has_inf(self) -> bool:
        """Whether the format encodes +-Inf."""
        return self.inf is not None

    @property
    def has_nan(self) -> bool:
        """Whether the format encodes NaN."""
        return self.nan is not None

    @property
    def has_zero(self) -> bool:
        """Whether zero is representable (False for E8M0)."""
        return self.subnormals

    @property
    def has_negative_zero(self) -> bool:
        """Whether -0 has its own code."""
        return self.signed and self.subnormals and self.nan != "negzero"

    @property
    def has_signed_nan(self) -> bool:
        """Whether NaN codes carry a sign (then encode keeps the input's sign)."""
        return self.nan in ("ieee", "fn")

    def _magnitude_value(self, mag):
        """Float64 value of non-negative magnitude codes (no special cases)."""
        mag = np.asarray(mag, dtype=np.int64)
        exp_field = mag >> self.mbits
        mant = (mag & ((1 << self.mbits) - 1)).astype(np.float64)
        if self.subnormals:
            is_sub = exp_field == 0
            sig = np.where(is_sub, mant, mant + (1 << self.mbits))
            exp = np.where(is_sub, 1, exp_field) - self.bias - self.mbits
        else:
            sig = mant + (1 << self.mbits)
            exp = exp_field - self.bias - self.mbits
        return np.ldexp(sig, exp.astype(np.int32))

    @cached_property
    def _values(self) -> np.ndarray:
        codes = np.arange(1 << self.bits, dtype=np.int64)
        mag = codes & self.magnitude_mask
        neg = (codes & self.sign_bit) != 0 if self.signed else np.zeros(codes.shape, bool)
        vals = self._magnitude_value(mag)
        vals = np.where(neg, -vals, vals)
        if self.inf_code is not None:
            vals = np.where(mag == self.inf_code, np.where(neg, -np.inf, np.inf), vals)
        nan = self.nan_mask(codes)
        # a NaN code decodes to a NaN with the code's sign bit (as ml_dtypes), so that
        # encode(decode(c)) gives c back for every canonical NaN code
        vals = np.where(nan, np.where(neg, -np.nan, np.nan), vals)
        vals.setflags(write=False)
        return vals

    def nan_mask(self, codes) -> np.ndarray:
        """Boolean mask of the NaN codes among ``codes``."""
        codes = np.asarray(codes, dtype=np.int64)
        mag = codes & self.magnitude_mask
        if self.nan == "ieee":
            return (mag > self.inf_code) & ((mag >> self.mbits) == (1 << self.ebits) - 1)
        if self.nan == "fn":
            return mag == self.magnitude_mask
        if self.nan == "negzero":
            return codes == self.sign_bit
        if self.nan == "top":
            return codes == (1 << self.bits) - 1
        return np.zeros(codes.shape, dtype=bool)

    def values(self) -> np.ndarray:
        """Value of every code, as a read-only float64 array indexed by code.

        NaN codes hold NaN with the sign of the code's sign bit (as ml_dtypes), Inf codes +-Inf.

        Examples
        --------
        >>> import fp8emu
        >>> v = fp8emu.get_format("e2m1fn").values()
        >>> v[:8].tolist()
        [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
        """
        return self._values

    @property
    def max(self) -> float:
        """Largest finite value."""
        return float(self._magnitude_value(self.max_code))

    @property
    def min_normal(self) -> float:
        """Smallest positive normal value (``2**emin``).

        A format with no exponent field (``ebits=0``, E0M3) has no normal value;
        ``2**emin`` is then the binade just above ``max`` (8 for E0M3), the scale
        the integer codes are counted in.
        """
        return float(2.0**self.emin)

    @property
    def min_subnormal(self) -> float:
        """Smallest positive value (equals ``min_normal`` without subnormals)."""
        if not self.subnormals:
            return self.min_normal
        return float(2.0 ** (self.emin - self.mbits))

    @property
    def eps(self) -> float:
        """Distance from 1 to the next larger value (``2**-mbits``)."""
        return float(2.0**-self.mbits)

    @property
    def ml_dtype(self):
        """The matching ``ml_dtypes`` scalar type, or None where ml_dtypes has none."""
        import ml_dtypes

        name = ML_DTYPES_NAMES.get(self.name)
        if name is None or getattr(ml_dtypes, name, None) is None:
            return None
        # Only a registered built-in is the ml_dtypes type; a look-alike user format is not.
        return getattr(ml_dtypes, name) if _REGISTRY.get(self.name) is self else None

    def __str__(self) -> str:
        return self.name


#: Built-in format name -> the name of its ml_dtypes type (torch names the narrow dtypes it has,
#: :data:`fp8emu.interop.TORCH_NARROW_NAMES`, the same): the one map between formats and dtypes
#: (:attr:`Format.ml_dtype`, :func:`format_of_dtype`).
ML_DTYPES_NAMES = {
    "e4m3fn": "float8_e4m3fn", "e5m2": "float8_e5m2", "e4m3fnuz": "float8_e4m3fnuz",
    "e5m2fnuz": "float8_e5m2fnuz", "e4m3b11fnuz": "float8_e4m3b11fnuz", "e4m3": "float8_e4m3",
    "e3m4": "float8_e3m4", "e8m0fnu": "float8_e8m0fnu", "e2m3fn": "float6_e2m3fn",
    "e3m2fn": "float6_e3m2fn", "e2m1fn": "float4_e2m1fn", "e5m3fnu": "float8_e5m3fnu",
}


def format_of_dtype(dtype):
    """The built-in :class:`Format` whose ml_dtypes type is ``dtype``, or None (uint8 codes, wide floats).

    Examples
    --------
    >>> import ml_dtypes, numpy as np
    >>> format_of_dtype(ml_dtypes.float8_e5m2).name, format_of_dtype(np.uint8)
    ('e5m2', None)
    """
    dt = np.dtype(dtype)
    for name in ML_DTYPES_NAMES:
        f = _REGISTRY.get(name)
        if f is not None and f.ml_dtype is not None and np.dtype(f.ml_dtype) == dt:
            return f
    return None


def _p3109(p: int) -> Format:
    # P3109 binary8pP, signed and extended: bias 2^(8-P-1), NaN 0x80, Inf 0x7F/0xFF, no -0.
    return Format(
        f"binary8p{p}", ebits=8 - p, mbits=p - 1, bias=2 ** (7 - p), inf="top", nan="negzero",
        description=f"IEEE P3109 binary8p{p} (signed, extended)",
    )


def p3109_format(p: int, *, signed: bool = True, domain: str = "extended") -> Format:
    """The IEEE P3109 8-bit format of precision ``p`` (1..7 signed, 1..8 unsigned).

    fp8emu follows the P3109 interim report v4.0 (2026-06-28, arXiv 2606.04028),
    whose value tables for the 8-bit formats (``Binary8p{p}se``, ``sf``, ``ue``,
    ``uf``) ``tests/test_p3109.py`` checks every code against.

    Signed extended: ``binary8p{p}``, the registered built-in (NaN 0x80, Inf
    0x7F/0xFF, no -0).  Unsigned extended (``binary8p{p}u``): no sign bit,
    ``9 - p`` exponent bits, bias ``2**(8 - p)``, zero at 0x00, +Inf at 0xFE and
    NaN at 0xFF (as gfloat's ``format_info_p3109(8, p, Unsigned)``); negative
    inputs give NaN.  ``domain="finite"``: the same without Inf, the Inf code a
    finite value (``binary8p{p}f``: max at 0x7F; ``binary8p{p}uf``: max at 0xFE).
    Only the signed extended formats are registered; pass another to
    :func:`register_format` to use it by name.

    Examples
    --------
    >>> from fp8emu.formats import p3109_format
    >>> f = p3109_format(3, signed=False)
    >>> f.bits, f.bias, f.max, f.inf_code, f.nan_code
    (8, 32, 2684354560.0, 254, 255)
    >>> p3109_format(3, domain="finite").max
    57344.0
    """
    if not is_integer(p):
        raise TypeError(f"p must be an int, got {p!r}")
    if domain not in ("extended", "finite"):
        raise ValueError(f"domain must be 'extended' or 'finite', got {domain!r}")
    finite = domain == "finite"
    if signed:
        if not 1 <= p <= 7:
            raise ValueError(f"signed P3109 8-bit formats have p in 1..7, got {p}")
        if not finite:
            return _REGISTRY[f"binary8p{p}"]
        return Format(f"binary8p{p}f", ebits=8 - p, mbits=p - 1, bias=2 ** (7 - p), nan="negzero",
                      description=f"IEEE P3109 binary8p{p} (signed, finite)")
    if not 1 <= p <= 8:
        raise ValueError(f"unsigned P3109 8-bit formats have p in 1..8, got {p}")
    return Format(f"binary8p{p}u" + ("f" if finite else ""), ebits=9 - p, mbits=p - 1, bias=2 ** (8 - p),
                  signed=False, inf=None if finite else "top", nan="top",
                  description=f"IEEE P3109 binary8p{p} (unsigned, {domain})")


def register_format(fmt: Format, *, replace: bool = False) -> Format:
    """Add a user-defined :class:`Format` to the registry under ``fmt.name``.

    Parameters
    ----------
    fmt : Format
        The format to register.
    replace : bool, keyword-only
        Allow replacing an existing user registration (built-ins cannot be
        replaced).

    Returns
    -------
    Format
        ``fmt`` itself.

    Examples
    --------
    >>> import fp8emu
    >>> f = fp8emu.register_format(fp8emu.Format("e3m3demo", 3, 3, 3, nan="fn"), replace=True)
    >>> fp8emu.get_format("e3m3demo") is f
    True
    """
    return _REGISTRY.register(fmt, replace=replace)


_BUILTINS = [
    Format("e4m3fn", 4, 3, 7, nan="fn", description="OCP OFP8 E4M3 (no Inf; NaN S.1111.111)"),
    Format("e5m2", 5, 2, 15, inf="ieee", nan="ieee", description="OCP OFP8 E5M2 (IEEE-like)"),
    Format("e4m3fnuz", 4, 3, 8, nan="negzero", description="E4M3 FNUZ (AMD/Graphcore; NaN 0x80, no -0)"),
    Format("e5m2fnuz", 5, 2, 16, nan="negzero", description="E5M2 FNUZ (AMD/Graphcore; NaN 0x80, no -0)"),
    Format("e4m3b11fnuz", 4, 3, 11, nan="negzero", description="E4M3 bias 11 FNUZ (TPU)"),
    Format("e4m3", 4, 3, 7, inf="ieee", nan="ieee", description="IEEE-like E4M3 (Inf 0x78)"),
    Format("e3m4", 3, 4, 3, inf="ieee", nan="ieee", description="IEEE-like E3M4"),
    Format("e8m0fnu", 8, 0, 127, signed=False, subnormals=False, nan="top", parity="significand",
           description="OCP MX E8M0 scale (unsigned, no zero; NaN 0xFF)"),
    Format("e2m3fn", 2, 3, 1, description="OCP MX FP6 E2M3 (no Inf/NaN)"),
    Format("e3m2fn", 3, 2, 3, description="OCP MX FP6 E3M2 (no Inf/NaN)"),
    Format("e2m1fn", 2, 1, 1, description="OCP MX FP4 E2M1 (no Inf/NaN)"),
] + [_p3109(p) for p in range(1, 8)] + [
    Format("e5m3fnu", 5, 3, 15, signed=False, nan="top",
           description="UE5M3 block scale (NVIDIA Rubin FP4 MMA; unsigned, no Inf; NaN 0xFF)"),
    Format("e0m3", 0, 3, -2, description="CUDA __nv_fp4_e0m3: sign + 3-bit integer -7..7 (no Inf/NaN)"),
    Format("e1m2", 1, 2, 1, description="FP4 E1M2 (Ascend FLOAT4_E1M2, HiFloat4's elements; no Inf/NaN)"),
]
_REGISTRY = Registry("format", Format, _BUILTINS)


def format_names() -> list[str]:
    """Names of all registered formats, built-ins first.

    Examples
    --------
    >>> import fp8emu
    >>> fp8emu.format_names()[:3]
    ['e4m3fn', 'e5m2', 'e4m3fnuz']
    """
    return list(_REGISTRY)


def get_format(fmt) -> Format:
    """Look up a format by name (or pass a :class:`Format` through).

    Parameters
    ----------
    fmt : str or Format
        A registered name (see :func:`format_names`) or a Format object.

    Returns
    -------
    Format

    Raises
    ------
    ValueError
        If the name is not registered (the message lists the valid names).
    TypeError
        If ``fmt`` is neither a string nor a Format.

    Examples
    --------
    >>> import fp8emu
    >>> fp8emu.get_format("e4m3fn").max
    448.0
    """
    if isinstance(fmt, Format):
        return fmt
    if isinstance(fmt, str):
        return _REGISTRY.lookup(fmt)
    raise TypeError(f"format must be a name or a Format, got {type(fmt).__name__}")


def _special_text(f: Format) -> tuple[str, str, str]:
    def hx(c):
        return f"0x{c:02X}"
    sb = f.sign_bit
    inf = "none" if not f.has_inf else f"{hx(f.inf_code)}/{hx(f.inf_code | sb)}"
    if f.nan is None:
        nan = "none"
    elif f.nan == "ieee":
        nan = f"{hx(f.inf_code + 1)}-{hx(f.magnitude_mask)} (+sign)"
    elif f.nan == "fn":
        nan = f"{hx(f.magnitude_mask)}/{hx(f.magnitude_mask | sb)}"
    else:
        nan = hx(f.nan_code)
    nz = hx(sb) if f.has_negative_zero else "none"
    return inf, nan, nz


def format_table() -> str:
    """Markdown table of every registered format's constants and special encodings.

    Examples
    --------
    >>> import fp8emu
    >>> print(fp8emu.format_table().splitlines()[2][:40])
    | e4m3fn | 8 | 4 | 3 | 7 | 448 | 2^-6 |
    """
    def g(v):
        e = np.log2(v)
        return f"2^{int(e)}" if e == int(e) and abs(e) > 4 else f"{v:g}"
    rows = ["| name | bits | ebits | mbits | bias | max | min normal | min subnormal | Inf | NaN | -0 |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for f in _REGISTRY.values():
        inf, nan, nz = _special_text(f)
        rows.append(f"| {f.name} | {f.bits} | {f.ebits} | {f.mbits} | {f.bias} | {g(f.max)} | "
                    f"{g(f.min_normal) if f.ebits else 'none'} | {g(f.min_subnormal)} | {inf} | {nan} | {nz} |")
    return "\n".join(rows)
