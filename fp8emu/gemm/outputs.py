"""The output types of the matrix instructions, and how a step's exact sum is rounded to one.

A catalogue row (:class:`~fp8emu.gemm.catalogue.Instruction`) names its output type (``out``, the
type of C and D) and its result rounding (``rounding``); the reference steps of
:mod:`fp8emu.gemm.datapaths` and the fast routes of :mod:`fp8emu.gemm.routes` both round with
:func:`round_output` (or, on whole blocks in place, with what it states), so the rule is written once.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["OutputType", "OUTPUT_TYPES", "kept_bits", "nearest", "round_output", "canonical"]


class OutputType(NamedTuple):
    """One output type of the matrix instructions: its NumPy type and the facts of its bits."""

    dtype: type
    #: the unsigned integer type of its bit patterns
    uint: type
    #: exponent of its smallest normal
    emin: int
    #: fraction bits
    frac_bits: int
    #: all bits but the sign
    magnitude: int
    #: its canonical quiet NaN (the pattern MMA-Sim's models give every NaN result)
    qnan: int


#: The output types by name: float32 and float16, and float64, which holds the results of step widths
#: no instruction has (``"rz-e8mN"`` / ``"rne-e8mN"`` of up to 39 fraction bits, exponents unbounded).
OUTPUT_TYPES = {"float32": OutputType(np.float32, np.uint32, -126, 23, 0x7FFFFFFF, 0x7FFFFFFF),
                "float16": OutputType(np.float16, np.uint16, -14, 10, 0x7FFF, 0x7FFF),
                "float64": OutputType(np.float64, np.uint64, -1022, 52, 0x7FFFFFFFFFFFFFFF, 0x7FFFFFFFFFFFFFFF)}


def kept_bits(ins):
    """Fraction bits the instruction's result rounding keeps: N for ``"rz-e8mN"`` / ``"rne-e8mN"``,
    else its output type's.

    Examples
    --------
    >>> from fp8emu.gemm.catalogue import get_instruction
    >>> kept_bits(get_instruction("hopper-wgmma")), kept_bits(get_instruction("blackwell-mma-f16"))
    (13, 10)
    """
    _, sep, bits = ins.rounding.partition("-e8m")
    return int(bits) if sep else OUTPUT_TYPES[ins.out].frac_bits


def nearest(ins):
    """Whether the instruction's result rounding is to nearest even (``"rne"``, ``"rne-e8mN"``),
    not toward zero.

    Examples
    --------
    >>> from fp8emu.gemm.catalogue import get_instruction
    >>> nearest(get_instruction("hopper-wgmma")), nearest(get_instruction("blackwell-mma"))
    (False, True)
    """
    return ins.rounding.startswith("rne")


def round_output(x, ins):
    """The exact float64 sums ``x`` rounded to the instruction's output type by its ``rounding``:
    ``"rne"`` and ``"rne-e8mN"`` to nearest even, ``"rz"`` and ``"rz-e8mN"`` toward zero, to
    :func:`kept_bits` fraction bits, below the smallest normal (of float32 for the ``e8mN`` forms)
    on the fixed grid ``2**(emin - bits)``; overflow of the output type gives Inf.

    Examples
    --------
    >>> from fp8emu.gemm.catalogue import get_instruction
    >>> x = np.array([1 + 2.0 ** -13 + 2.0 ** -20])
    >>> round_output(x.copy(), get_instruction("hopper-wgmma")).tolist()      # 13 bits, toward zero
    [1.0001220703125]
    """
    ot = OUTPUT_TYPES[ins.out]
    bits = kept_bits(ins)
    if nearest(ins) and bits == ot.frac_bits and ins.out == "float32":
        with np.errstate(over="ignore"):
            return x.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        _, e = np.frexp(np.where(np.isfinite(x) & (x != 0), x, 1.0))
    emin = OUTPUT_TYPES["float32"].emin if "-e8m" in ins.rounding else ot.emin
    q = np.ldexp(1.0, np.maximum(e.astype(np.int64) - 1, emin) - bits)
    y = x / q
    y = np.rint(y) if nearest(ins) else np.trunc(y)
    with np.errstate(over="ignore"):
        return (y * q).astype(ot.dtype)


def canonical(r, out):
    """Results ``r`` of the output type (overwritten, non-empty): -0 made +0 and every NaN the quiet
    NaN, as MMA-Sim's models give them.

    Examples
    --------
    >>> canonical(np.array([-0.0, np.nan], np.float32), "float32").view(np.uint32).tolist()
    [0, 2147483647]
    """
    ot = OUTPUT_TYPES[out]
    r += r.dtype.type(0)
    if np.isnan(r.max()):          # one pass where there is no NaN (max propagates NaN)
        r.view(ot.uint)[np.isnan(r)] = ot.qnan
    return r
