"""The 16-bit (and 19-bit) input types of the older matrix instructions: float16, bfloat16 and tf32.

They are not fp8emu :class:`~fp8emu.formats.Format` objects (the codec does not encode to them):
an instruction takes them as bit patterns (:func:`decode_wide`), and attention's kernels take
float16 and bfloat16 operands as values of their NumPy / ml_dtypes type.  This is the one table of
them (:data:`WIDE_INPUTS`).
"""

from __future__ import annotations

from typing import NamedTuple

import ml_dtypes
import numpy as np

from ..formats import get_format

__all__ = ["WideInput", "WIDE_INPUTS", "operand_name", "decode_wide"]


class WideInput(NamedTuple):
    """One wide input type: the dtype of its values, the dtype of its bit patterns, the exponent of
    its smallest normal."""

    dtype: np.dtype
    bits: type
    emin: int


#: The wide input types by name (tf32's values are float32 words whose low 13 bits are ignored).
WIDE_INPUTS = {"float16": WideInput(np.dtype(np.float16), np.uint16, -14),
               "bfloat16": WideInput(np.dtype(ml_dtypes.bfloat16), np.uint16, -126),
               "tf32": WideInput(np.dtype(np.float32), np.uint32, -126)}


def operand_name(f):
    """The name of an operand type: a wide input's own name, else the fp8emu format's name.

    Examples
    --------
    >>> operand_name("bfloat16"), operand_name("e4m3")
    ('bfloat16', 'e4m3')
    """
    if isinstance(f, str) and f in WIDE_INPUTS:
        return f
    return get_format(f).name


def decode_wide(codes, name, what):
    """float64 values and MMA-Sim exponents (``floor(log2|v|)``, at least the type's ``emin``) of
    float16 / bfloat16 bit patterns, or of float32 words read as tf32 (the low 13 bits ignored).
    ``what`` names the operand in the error.

    Examples
    --------
    >>> v, e = decode_wide(np.array([0x3C00, 0x0001], np.uint16), "float16", "a")
    >>> v.tolist(), e.tolist()
    ([1.0, 5.960464477539063e-08], [0, -14])
    """
    dt, emin = WIDE_INPUTS[name].bits, WIDE_INPUTS[name].emin
    if codes.dtype != dt:
        raise TypeError(f"{what} as {name} must be {np.dtype(dt).name} bit patterns, got dtype {codes.dtype}")
    with np.errstate(invalid="ignore"):        # NaN patterns widen to NaN
        if name == "float16":
            v = codes.view(np.float16).astype(np.float64)
        elif name == "bfloat16":
            v = (codes.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
        else:
            v = (codes & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        _, e = np.frexp(np.where(np.isfinite(v), v, 0.5))
    return v, np.maximum(e.astype(np.int32) - 1, emin)
