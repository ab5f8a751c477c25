"""Per-code tables of the operand formats: each code's value and exponent, looked up by gather.

A GEMM decodes its FP8/FP6/FP4 operands once per code, not once per element: every table here holds
one entry per code of a format and is cached and read-only (a caller that wrote into one would change
every later GEMM's bits).  Two readings of a code:

* the sums' (:mod:`fp8emu.gemm.kernels`, the exact and wide routes): the value with Inf/NaN zeroed (their
  IEEE semantics are applied apart), the exponent ``floor(log2|v|)`` at least the format's smallest
  normal one, :data:`ZERO_EXP` for zeros, and the exponent of the lowest set bit (:func:`low_bits`,
  :data:`ZERO_LOW` for zeros): :func:`value_tables`, :func:`low_bit_table`, :func:`values_and_exponents`;
* the datapaths' (:mod:`fp8emu.gemm.datapaths`, the routes): the value as decoded (Inf/NaN kept)
  and MMA-Sim's exponent, at least the format's smallest normal one for zeros too
  (:func:`datapath_tables`).
"""

from __future__ import annotations

import functools

import numpy as np

from ..codec import decode
from ..formats import Format

__all__ = ["ZERO_EXP", "ZERO_LOW", "value_tables", "low_bit_table", "low_bits", "values_and_exponents",
           "any_nonfinite", "datapath_tables"]

#: Exponent given to zero terms: far below any real term, so it never wins the maximum and
#: truncates to nothing; the sum of two still fits in int16.
ZERO_EXP = -16000
#: Lowest-set-bit exponent given to zero terms: above any real one, so it never wins the minimum.
ZERO_LOW = 16000


@functools.lru_cache(maxsize=64)
def value_tables(fmt: Format):
    """Per-code float64 value (non-finite -> 0) and exponent (subnormals -> emin, zero -> sentinel).

    Cached on the Format object itself, so formats that differ in any field (their Inf/NaN codes
    too) never share a table.
    """
    v = decode(np.arange(1 << fmt.bits, dtype=np.uint8), fmt, dtype=np.float64)
    fin = np.where(np.isfinite(v), v, 0.0)
    emin = int(np.log2(fmt.min_normal))
    _, e = np.frexp(fin)
    e = np.where(fin == 0, ZERO_EXP, np.maximum(e.astype(np.int64) - 1, emin))
    fin.setflags(write=False)
    e = e.astype(np.int16)
    e.setflags(write=False)
    return fin, e


@functools.lru_cache(maxsize=64)
def low_bit_table(fmt: Format):
    """Per-code exponent of the value's lowest set bit (zero and non-finite codes -> sentinel)."""
    tv, _ = value_tables(fmt)
    low = low_bits(tv).astype(np.int16)
    low.setflags(write=False)
    return low


def _code_index(codes, fmt: Format):
    return codes if fmt.bits >= 8 else codes & np.uint8((1 << fmt.bits) - 1)


def values_and_exponents(codes, fmt: Format, *, lows=False):
    """float64 values with non-finite ones zeroed, and per-element int16 exponents; with ``lows``,
    also the exponents of their lowest set bits (:func:`low_bits` of the values, per code).

    The codes are widened to NumPy's index type once for all the per-code tables (a gather with
    uint8 indices widens them again for each table).

    Examples
    --------
    >>> from fp8emu.formats import get_format
    >>> v, e, low = values_and_exponents(np.array([0x38, 0x3C, 0], np.uint8), get_format("e4m3fn"), lows=True)
    >>> v.tolist(), e[:2].tolist(), low[:2].tolist()                  # 1.0, 1.5, 0
    ([1.0, 1.5, 0.0], [0, 0], [0, -1])
    """
    tv, te = value_tables(fmt)
    idx = _code_index(codes, fmt).astype(np.intp)
    out = np.take(tv, idx), np.take(te, idx)
    return out + (np.take(low_bit_table(fmt), idx),) if lows else out


@functools.lru_cache(maxsize=64)
def _nonfinite_table(fmt: Format):
    t = ~np.isfinite(decode(np.arange(1 << fmt.bits, dtype=np.uint8), fmt, dtype=np.float64))
    t.setflags(write=False)
    return t


def any_nonfinite(codes, fmt: Format) -> bool:
    """Whether any code decodes to Inf or NaN (a per-code table, not a decode).

    Examples
    --------
    >>> from fp8emu.formats import get_format
    >>> any_nonfinite(np.array([0x38, 0x7F], np.uint8), get_format("e4m3fn"))
    True
    """
    t = _nonfinite_table(fmt)
    return bool(t.any()) and bool(np.take(t, _code_index(codes, fmt)).any())


def low_bits(v):
    """Exponent of the lowest set bit of each (normal or zero) float64 value; zeros get a sentinel.

    Examples
    --------
    >>> low_bits(np.array([1.0, 6.0, 0.375, -2.0 ** -20])).tolist()
    [0, 1, -3, -20]
    """
    v = np.ascontiguousarray(v, np.float64)
    bits = v.view(np.int64)
    mant = (bits & np.int64((1 << 52) - 1)) | np.int64(1 << 52)
    _, tz = np.frexp((mant & -mant).astype(np.float64))
    low = ((bits >> 52) & np.int64(0x7FF)) - 1076 + tz
    return np.where(v == 0, ZERO_LOW, low).astype(np.int32)


_DATAPATH = {}


def datapath_tables(fmt: Format):
    """Per-code float64 values (Inf/NaN kept) and MMA-Sim exponents (``floor(log2|v|)``, at least the
    format's smallest normal exponent) of an FP8/FP6/FP4 format: how the instructions' datapaths read
    a code (:mod:`fp8emu.gemm.datapaths`).  Zero and Inf/NaN codes carry ``max(-1, emin)``, which no
    step reads (a zero product carries the instruction's ``zero_exp``).  Cached by format name,
    read-only.

    Examples
    --------
    >>> from fp8emu.formats import get_format
    >>> v, e = datapath_tables(get_format("e4m3fn"))
    >>> v[[0x38, 0x01, 0x00]].tolist(), e[[0x38, 0x01, 0x00]].tolist()
    ([1.0, 0.001953125, 0.0], [0, -6, -1])
    """
    if fmt.name not in _DATAPATH:
        v = decode(np.arange(1 << fmt.bits, dtype=np.uint8), fmt, dtype=np.float64)
        emin = int(np.log2(fmt.min_normal))
        with np.errstate(divide="ignore", invalid="ignore"):
            _, e = np.frexp(np.where(np.isfinite(v), v, 0.5))
        e = np.maximum(e.astype(np.int32) - 1, emin)
        v.flags.writeable = e.flags.writeable = False   # shared by every GEMM
        _DATAPATH[fmt.name] = v, e
    return _DATAPATH[fmt.name]
