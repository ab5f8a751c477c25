"""The exact encode of a chunk, and the cached encode/decode tables.

This module owns everything that turns checked input (:func:`fp8emu.interop.source_array`,
:func:`fp8emu.interop.narrow_codes`: the one place where inputs are coerced) into codes without
any policy of a particular implementation: it describes each finite input exactly and rounds it
once with :func:`fp8emu.rounding.round_exact` (:func:`encode_exact`), and tabulates that exact
encode for the source types where a table is exact.

Tables
------
For 16-bit sources the code of every one of the 65,536 bit patterns is
tabulated once per (format, rounding, saturate).  A float32 input's code
depends only on its upper 16 bits and on whether its lower 16 bits are
non-zero (the rounding position of a format with at most 6 mantissa bits lies
in the upper half, so the lower half acts only as a sticky bit); a 2**17-entry
table therefore covers float32 exactly.  float64 works the same way with its
upper 19 bits (sign, exponent, 7 mantissa bits) and a sticky bit: a
2**20-entry table, so float64 is rounded once, never through float32.  The
tables are built by the exact core, so they agree with it by construction.

Every cache is keyed on the :class:`~fp8emu.formats.Format` object itself
(a frozen dataclass: equal fields, equal behaviour), never on its name.

Examples
--------
>>> list(SOURCE_DTYPES)
['float16', 'bfloat16', 'float32', 'float64']
>>> source_name(SOURCE_DTYPES["bfloat16"])
'bfloat16'
"""

from __future__ import annotations

import functools
from typing import NamedTuple
import weakref

import ml_dtypes
import numpy as np

from . import parallel
from .formats import Format
from .interop import ML_NARROW_DTYPES, SOURCE_FLOATS
from .rounding import check_saturation, finish_codes, nan_codes, round_exact

__all__ = [
    "SOURCE_DTYPES", "DECODE_DTYPES", "decode_dtype", "source_name", "encode_exact",
    "table_ok", "table_inputs", "encode_table", "cached_encode_table", "lookup", "decode_table", "decode_take", "CHUNK",
]

_U64 = np.uint64
#: Elements processed per step; keeps temporaries small (a few MB) for any input size.
CHUNK = 1 << 16

#: The floating-point source types fp8emu reads exactly, by name (the one table of dtype names).
SOURCE_DTYPES = {dt.name: dt for dt in SOURCE_FLOATS}
_SOURCE_NAMES = {dt: name for name, dt in SOURCE_DTYPES.items()}
#: The short names the recorded tables' file names use for the source types (``f32`` ...).
SOURCE_SHORT_NAMES = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64"}
#: dtypes that decode can produce (the same four types).
DECODE_DTYPES = tuple(SOURCE_DTYPES.values())


def decode_dtype(dtype, what="decode") -> np.dtype:
    """``dtype`` as one of :data:`DECODE_DTYPES`, or one TypeError naming the accepted ones (``what``: the
    operation the error names, ``"decode"`` or ``"dequantize"``).

    Examples
    --------
    >>> decode_dtype("float32")
    dtype('float32')
    """
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    # ``dt is None`` first: NumPy's ``dtype('float64') == None`` is True, so an unknown name ("flaot32")
    # would pass ``None in DECODE_DTYPES`` and decode as float64
    if dt is None or dt not in DECODE_DTYPES:
        raise TypeError(f"unsupported {what} dtype {dtype!r}; accepted: float16, bfloat16, float32, float64")
    return dt
# (uint view, exponent bits, mantissa bits) of the IEEE-style source types.
_FLOAT_LAYOUT = {
    SOURCE_DTYPES["float16"]: (np.uint16, 5, 10),
    SOURCE_DTYPES["bfloat16"]: (np.uint16, 8, 7),
    SOURCE_DTYPES["float32"]: (np.uint32, 8, 23),
    SOURCE_DTYPES["float64"]: (np.uint64, 11, 52),
}


def source_name(dtype) -> str:
    """Name of a floating-point source dtype (a key of :data:`SOURCE_DTYPES`).

    Raises
    ------
    ValueError
        If ``dtype`` is not float16, bfloat16, float32 or float64.

    Examples
    --------
    >>> import numpy as np
    >>> source_name(np.float32)
    'float32'
    """
    dt = np.dtype(dtype)
    try:
        return _SOURCE_NAMES[dt]
    except KeyError:
        raise ValueError(f"unsupported source dtype {dt}; accepted: {', '.join(SOURCE_DTYPES)}") from None


# ----------------------------------------------------------------------------- exact encode
def _decompose(x: np.ndarray):
    """Exact (neg, m, lsb, is_nan, is_inf) description of a 1-D chunk."""
    dt = x.dtype
    if dt.kind == "b":
        x = x.astype(np.uint8)
        dt = x.dtype
    if dt.kind in "iu":
        if dt.kind == "i":
            neg = x < 0
            u = x.astype(np.int64).view(_U64)
            m = np.where(neg, ~u + _U64(1), u)   # two's complement magnitude, exact for INT64_MIN
        else:
            neg = np.zeros(x.shape, dtype=bool)
            m = x.astype(_U64)
        no = np.zeros(x.shape, dtype=bool)
        return neg, m, np.zeros(x.shape, np.int64), no, no
    uint, eb, mb = _FLOAT_LAYOUT[dt]
    u = x.view(uint).astype(_U64)
    bias = (1 << (eb - 1)) - 1
    neg = (u >> _U64(eb + mb)) != 0
    ef = ((u >> _U64(mb)) & _U64((1 << eb) - 1)).astype(np.int64)
    mf = u & _U64((1 << mb) - 1)
    special = ef == (1 << eb) - 1
    normal = (ef != 0) & ~special
    m = np.where(normal, mf | _U64(1 << mb), mf)
    m = np.where(special, _U64(0), m)
    lsb = np.maximum(ef, 1) - bias - mb
    return neg, m, lsb, special & (mf != 0), special & (mf == 0)


def _special_codes(fmt: Format, neg, is_nan, is_inf, saturate):
    """Codes of NaN and Inf inputs (int64 magnitude with -1 = NaN marker, neg).

    Inf saturates to max only under ``saturate=True`` (P3109 saturate-finite);
    ``"satpropagate"`` saturates finite overflows alone, so Inf stays Inf.
    """
    if (saturate and not isinstance(saturate, str)) or not (fmt.has_inf or fmt.has_nan):
        inf = fmt.max_code
    elif fmt.has_inf:
        inf = fmt.inf_code
    else:
        inf = -1
    return np.where(is_nan, -1, np.int64(inf))


def encode_exact(x, fmt, rounding, saturate, random_bits=None, sr_bits=0):
    """Codes of a 1-D chunk, each rounded once from its exact value (no tables).

    ``random_bits`` (uint64, one per element) and ``sr_bits`` apply to
    ``rounding="stochastic"``.
    """
    if x.dtype in ML_NARROW_DTYPES:
        x = x.astype(np.float32)   # lossless: every ml_dtypes narrow value fits float32
    neg, m, lsb, is_nan, is_inf = _decompose(x)
    codes = round_exact(neg, m, lsb, fmt, rounding, saturate, random_bits, sr_bits)
    special = is_nan | is_inf
    if special.any():
        sc = _special_codes(fmt, neg, is_nan, is_inf, saturate)
        fixed = finish_codes(sc, neg, fmt)
        if not fmt.signed:  # an unsigned format has no -Inf
            fixed = np.where(neg & is_inf, nan_codes(fmt, neg).astype(np.uint8), fixed)
        codes = np.where(special, fixed, codes)
    return codes


# ----------------------------------------------------------------------------- tables
def _table_ok_f32(fmt: Format) -> bool:
    # The rounding position must lie in the upper 16 bits of every float32,
    # normal (23 - mbits >= 17) and subnormal (emin - mbits + 149 >= 17).
    return fmt.mbits <= 6 and fmt.emin - fmt.mbits >= -132


def _table_ok_f64(fmt: Format) -> bool:
    # float64 keeps 7 mantissa bits in its upper 19 bits; the rounding bit of a
    # format with at most 6 mantissa bits lies there for every float64 binade
    # (values below the target's subnormals only ever need the sticky bit).
    return fmt.mbits <= 6


#: float64 index: bits 63..45 (sign, exponent, top 7 mantissa bits) and a sticky bit.
_F64_SHIFT = 45
_F64_LOW = np.uint64((1 << _F64_SHIFT) - 1)


def table_inputs(src: str) -> np.ndarray:
    """One representative input per entry of a ``src`` encode table, in index order.

    float16/bfloat16: every bit pattern.  float32: index ``hi16 | sticky << 16``,
    the sticky case with lower half 0x0001.  float64: index ``hi19 | sticky << 19``.
    """
    if src in ("float16", "bfloat16"):
        pats = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
        return pats.view(np.float16 if src == "float16" else ml_dtypes.bfloat16)
    if src == "float32":
        pats = np.arange(1 << 16, dtype=np.uint32) << 16
        return np.concatenate([pats, pats | 1]).view(np.float32)
    hi = np.arange(1 << (64 - _F64_SHIFT), dtype=_U64) << _U64(_F64_SHIFT)
    return np.concatenate([hi, hi | _U64(1)]).view(np.float64)


def table_ok(fmt: Format, dtype) -> bool:
    """Whether a deterministic encode of ``dtype`` inputs to ``fmt`` is exact by table look-up."""
    dt = np.dtype(dtype)
    if dt.itemsize == 2 and dt in _FLOAT_LAYOUT:
        return True
    if dt == SOURCE_DTYPES["float32"]:
        return _table_ok_f32(fmt)
    if dt == SOURCE_DTYPES["float64"]:
        return _table_ok_f64(fmt)
    return False


def _build_table(fmt: Format, src: str, rounding: str, saturate: bool) -> np.ndarray:
    x = table_inputs(src)
    if rounding == "sr0":
        table = encode_exact(x, fmt, "stochastic", saturate, np.zeros(x.shape, _U64), 1)
    else:
        table = encode_exact(x, fmt, rounding, saturate)
    table.setflags(write=False)
    return table


# Tables of float64 sources have 2**20 entries (1 MB) and the others at most 2**17, so they
# get separate budgets: cycling through many configurations keeps its small tables without
# holding hundreds of MB.
_table_16_32 = functools.lru_cache(maxsize=1024)(_build_table)
_table_64 = functools.lru_cache(maxsize=64)(_build_table)
# Every table still alive anywhere, so that a caller can ask for one without building it.
_live = weakref.WeakValueDictionary()


def cached_encode_table(fmt: Format, src: str, rounding: str, saturate):
    """The table :func:`encode_table` would return if one is built and alive, else None (never builds)."""
    return _live.get((fmt, src, rounding, check_saturation(saturate)))


def encode_table(fmt: Format, src: str, rounding: str, saturate) -> np.ndarray:
    """Code for every 16-bit pattern (float16/bfloat16) or float32/float64 (hi, sticky) index.

    ``rounding="sr0"`` tabulates stochastic rounding with zero random bits,
    i.e. truncation with stochastic rounding's overflow rule.  Built once per
    (format object, source, rounding, saturate) and cached (1024 tables of
    16-bit and float32 sources, 64 of float64).
    """
    key = (fmt, src, rounding, check_saturation(saturate))
    # A table evicted from its cache while still held elsewhere (a plan, a fast-path dict) is
    # still the table: handing it out again keeps one table per key alive, never two copies.
    table = _live.get(key)
    if table is None:
        table = (_table_64 if src == "float64" else _table_16_32)(*key)
        _live[key] = table
    return table


class EncoderPlan(NamedTuple):
    """A ready table encoder for one (format, source dtype, rounding, saturation): ``plan(flat, out)``.

    Holds the encode table and how to index it (:func:`lookup`, with the float32 half-table
    index where :func:`sticky16_ok`).  The tables are cached per Format object; a plan is a
    view of one, asked for once per call by the codec (:func:`encoder_plan`).
    """

    table: np.ndarray
    sticky16: bool

    def __call__(self, flat, out):
        lookup(flat, out, self.table, self.sticky16)


def encoder_plan(fmt: Format, dtype, rounding: str, saturate, build=None):
    """The :class:`EncoderPlan` for ``dtype`` inputs, or None where no table applies.

    ``build``: None builds a missing table; otherwise a function of the source name that says
    whether to build one now (the codec's policy for small float64 calls); a table not built
    gives None (the exact core then encodes).

    Examples
    --------
    >>> from fp8emu.formats import get_format
    >>> plan = encoder_plan(get_format("e4m3fn"), np.float32, "rne", False)
    >>> out = np.empty(2, np.uint8); plan(np.array([1.0, 0.3], np.float32), out); out.tolist()
    [56, 42]
    >>> encoder_plan(get_format("e4m3fn"), np.int32, "rne", False) is None
    True
    """
    dt = np.dtype(dtype)
    if not table_ok(fmt, dt):
        return None
    src = source_name(dt)
    table = cached_encode_table(fmt, src, rounding, saturate)
    if table is None:
        if build is not None and not build(src):
            return None
        table = encode_table(fmt, src, rounding, saturate)
    return EncoderPlan(table, sticky16_ok(fmt, dt))


def sticky16_ok(fmt: Format, dt) -> bool:
    """Whether float32 -> ``fmt`` can use the 2**16-entry half of its table (see :func:`lookup`).

    Bit 16 of a float32 lies below the rounding bit of every float32 input (normal or
    subnormal) when the format keeps at most 5 fraction bits and its smallest subnormal is
    not below 2**-131, so that bit is itself only a sticky bit.

    Examples
    --------
    >>> from fp8emu.formats import get_format
    >>> sticky16_ok(get_format("e4m3fn"), np.float32), sticky16_ok(get_format("binary8p7"), np.float32)
    (True, False)
    """
    return np.dtype(dt) == np.float32 and fmt.mbits <= 5 and fmt.emin - fmt.mbits >= -131


def lookup(flat, out, table, sticky16=False):
    """``out[i] = table[index(flat[i])]`` for a 1-D source array, in cache-sized chunks.

    The index is the one :func:`table_inputs` enumerates for ``flat``'s dtype.  With
    ``sticky16`` (float32 only; :func:`sticky16_ok`), "lower half non-zero" is OR-ed into
    bit 16, so the upper 16 bits alone index the table's first half: one operation fewer and a
    table that stays in cache.
    """
    dt = flat.dtype
    if dt == np.float32 and sticky16:
        half = table[: 1 << 16]
        # larger steps than CHUNK: the 64 kB table stays in cache whatever the step (measured
        # 2**17 ~10 % faster than 2**16); take() converts the uint32 index itself
        step = 2 * CHUNK
        u_buf = np.empty(min(step, flat.size), np.uint32)
        for i in range(0, flat.size, step):
            u = flat[i:i + step].view(np.uint32)
            v = u_buf[:u.size]
            np.bitwise_and(u, 0xFFFF, out=v)
            v += 0xFFFF                           # bit 16 set iff the lower half is non-zero
            v |= u
            v >>= 16
            np.take(half, v, out=out[i:i + u.size])
    elif dt == np.float32:
        step = CHUNK
        u_buf = np.empty(min(step, flat.size), np.uint32)
        idx_buf = np.empty(min(step, flat.size), np.intp)   # take() would otherwise copy to intp
        for i in range(0, flat.size, step):
            u = flat[i:i + step].view(np.uint32)
            n = u.size
            idx, lo = idx_buf[:n], u_buf[:n]
            np.right_shift(u, 16, out=idx)
            np.bitwise_and(u, 0xFFFF, out=lo)
            lo += 0xFFFF                          # bit 16 set iff the lower half is non-zero
            lo &= 0x10000
            idx |= lo
            np.take(table, idx, out=out[i:i + n])
    elif dt == np.float64:
        step = CHUNK
        a_buf = np.empty(min(step, flat.size), _U64)
        b_buf = np.empty(min(step, flat.size), _U64)
        for i in range(0, flat.size, step):
            u = flat[i:i + step].view(_U64)
            n = u.size
            a, b = a_buf[:n], b_buf[:n]
            np.bitwise_and(u, _F64_LOW, out=a)
            a += _F64_LOW                         # bit 45 set iff the low 45 bits are non-zero
            a >>= _U64(_F64_SHIFT - (64 - _F64_SHIFT))
            a &= _U64(1 << (64 - _F64_SHIFT))
            np.right_shift(u, _U64(_F64_SHIFT), out=b)
            b |= a
            np.take(table, b.view(np.int64), out=out[i:i + n])
    else:
        # take() would convert the whole uint16 index to a full-size intp copy (8 bytes a
        # pattern); a chunk at a time into a reused buffer stays in cache (measured ~2x faster)
        step = CHUNK
        u16 = flat.view(np.uint16)
        idx_buf = np.empty(min(step, flat.size), np.intp)
        for i in range(0, flat.size, step):
            v = u16[i:i + step]
            idx = idx_buf[:v.size]
            np.copyto(idx, v, casting="unsafe")
            np.take(table, idx, out=out[i:i + v.size], mode="wrap")   # every index is in range




@functools.lru_cache(maxsize=256)
def decode_table(fmt: Format, dtype: np.dtype) -> np.ndarray:
    """Read-only value of every code of ``fmt`` in ``dtype`` (converted from exact float64 values)."""
    with np.errstate(over="ignore", invalid="ignore"):   # E8M0/E5M2 extremes overflow float16: Inf is right
        t = fmt.values().astype(dtype)
    t.setflags(write=False)
    return t


def decode_take(table, c, threads=1):
    """``table[c]`` in cache-sized chunks, on ``threads`` threads.

    ``np.take`` converts non-intp indices to a full-size intp copy (8 bytes
    per code); converting one chunk at a time into a reused buffer keeps the
    extra memory at a few hundred kB and the indices in cache.
    """
    if c.ndim == 0:
        return table.take(c)                      # a scalar, as for any 0-d index
    if c.size <= CHUNK:
        return table.take(c)
    flat = np.ascontiguousarray(c).reshape(-1)
    out = np.empty(flat.shape, table.dtype)

    def work(a, b):
        idx_buf = np.empty(min(CHUNK, b - a), np.intp)
        for i in range(a, b, CHUNK):
            src = flat[i:min(b, i + CHUNK)]
            idx = idx_buf[:src.size]
            np.copyto(idx, src)
            table.take(idx, out=out[i:i + src.size])

    parallel.run(work, parallel.split(0, flat.size, threads, CHUNK), threads)
    return out.reshape(np.shape(c))
