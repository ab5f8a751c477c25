"""The operands of emulated FP8 attention: Q, K, V (and P) quantized as a kernel receives them, with
their descales (the GEMMs that take them: :mod:`fp8emu.attention.gemms`)."""

from __future__ import annotations

import numpy as np

from ..codec import encode
from ..formats import get_format
from ..gemm.code_tables import values_and_exponents
from ..interop import real_values
from ..scaling import current_scale
from .inputs import F32, WIDE, as_heads, operand_format, positive_f32

__all__ = ["quantize_qkv"]


class Operand:
    """An operand of one head: float64 values and, for 8-bit operands only (the GEMM kernels read them only
    there), int16 exponents, codes, format and mantissa bits (None for float32/bf16/fp16 operands)."""

    __slots__ = ("values", "exps", "codes", "fmt", "mbits")

    def __init__(self, values, exps, codes, fmt, mbits):
        self.values, self.exps, self.codes, self.fmt, self.mbits = values, exps, codes, fmt, mbits


def wide_operand(x32, name):
    """float32 (or bf16/fp16-rounded) values for the exact/fp32 kernels, which multiply them as float64
    (``"exact"``) or float32 (``"fp32"``): no exponents, codes or format."""
    if name in WIDE:
        with np.errstate(over="ignore"):   # beyond the narrow type's range is its Inf, as the cast on a GPU
            x32 = x32.astype(WIDE[name]).astype(F32)
    return Operand(x32.astype(np.float64), None, None, None, None)


def operand_descales(x32, fmt, recipe, given, what, group=1):
    """(descale, scale) float32 arrays of shape (H,) of one operand: ``descale`` as the kernel receives
    it and ``scale`` the multiplier the codes are made with.  ``group``: query heads per KV head (for
    ``granularity="kv-head"``, where the query heads of a group share one descale)."""
    H = x32.shape[0]
    ones = np.ones(H, F32)
    if recipe.scale_rule == "none" or fmt is None:
        return ones, ones
    gran = recipe.granularity
    if recipe.scale_rule == "given":
        if given is None:
            raise ValueError(f"scale_rule='given' needs descales=(q, k, v); {what} descale missing")
        # the one rule for real numbers handed in: "1" and True were read as 1.0, 2**1100 was Python's OverflowError
        d = real_values(given, f"{what} descale", "a positive number or an array of them").astype(np.float64)
        n = H // group if gran == "kv-head" else H
        if d.size == 1:
            d = np.full(H, float(d.reshape(())))
        elif gran == "tensor" or d.shape != (n,):
            raise ValueError(f"{what} descale must be a scalar" + ("" if gran == "tensor" else
                                                                   f" or shape ({n},)") + f", got {d.shape}")
        elif gran == "kv-head":
            d = np.repeat(d, group)
        # checked as the float32 the kernel receives, with its reciprocal
        return positive_f32(d, f"{what} descale", reciprocal=True)
    amax = np.abs(x32).max(axis=(1, 2)) if x32.size else np.zeros(H, F32)
    if gran == "tensor":
        amax = np.full(H, amax.max(initial=0))
    elif gran == "kv-head" and group > 1:
        amax = np.repeat(amax.reshape(-1, group).max(axis=1), group)
    scale = np.array([current_scale(a, fmt) for a in amax], F32)
    return np.divide(F32(1), scale, dtype=F32), scale


def quantize_qkv(x, fmt_name, scale):
    """Codes of ``x`` (H, N, d) as ``encode(fl32(x * scale[h]), saturate=True)`` (uint8).

    ``scale`` is float32 of shape (H,): Transformer Engine's ``fl32(fmax / amax)`` for
    ``scale_rule="amax"``, ``fl32(1 / descale)`` for given descales.  ``x`` is checked as
    :func:`attention` checks its operands (finite, (H, N, d) or (N, d)), ``scale`` as float32
    values that are finite and > 0, and ``fmt_name`` must be an 8-bit format.

    Examples
    --------
    >>> from fp8emu.codec import decode
    >>> c = quantize_qkv(np.full((1, 1, 2), 3.0, np.float32), "e4m3fn", np.array([2.0], np.float32))
    >>> decode(c, "e4m3fn").tolist()
    [[[6.0, 6.0]]]
    """
    x = as_heads(x, "x")
    fmt = operand_format(fmt_name, "fmt_name", allow_none=False)
    if fmt in WIDE:
        raise ValueError(f"fmt_name must be an 8-bit format (codes), got {fmt_name!r}")
    try:
        s = None if isinstance(scale, str) else np.asarray(scale, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        s = None
    if s is None or s.shape != (x.shape[0],):
        raise ValueError(f"scale must be {x.shape[0]} finite float32 values > 0 (one per head), got {scale!r}")
    s32, _ = positive_f32(s, "scale", reciprocal=False)
    return _quantize_qkv(x, fmt, s32)


def _quantize_qkv(x, fmt_name, scale):
    """:func:`quantize_qkv` without the checks, for operands :func:`attention` has checked."""
    return encode(np.multiply(np.asarray(x, F32), np.asarray(scale, F32)[:, None, None], dtype=F32), fmt_name,
                  saturate=True)


def quantized_operand(codes, fmt_name):
    fmt = get_format(fmt_name)
    v, e = values_and_exponents(codes, fmt)
    return Operand(v, e, codes, fmt, fmt.mbits)


def operand_for(x, fmt_name, scale):
    if fmt_name is None or fmt_name in WIDE:
        return wide_operand(x[0], fmt_name)
    return quantized_operand(_quantize_qkv(x, fmt_name, scale)[0], fmt_name)


def slice_rows(op: Operand, a, b):
    return Operand(*(None if x is None else x[a:b] for x in (op.values, op.exps, op.codes)), op.fmt, op.mbits)


def transpose(op: Operand) -> Operand:
    """V (keys, dv) seen as the (dv, keys) 'B transposed' operand of :func:`fp8emu.attention.gemms.matmul`."""
    return Operand(*(None if x is None else x.T for x in (op.values, op.exps, op.codes)), op.fmt, op.mbits)
