"""The operands of emulated FP8 attention: Q, K, V (and P) quantized as a kernel receives them, with
their descales, and the GEMM steps S = Q·Kᵀ and P·V through an accumulator of :mod:`fp8emu.gemm`."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..codec import encode
from ..formats import get_format
from ..gemm.models import GemmModel, row_for_formats, run_steps, steps_accumulator
from ..gemm.fparith import add_scaled_f32
from ..gemm.kernels import any_nonfinite, exact_dot, mma_dot, values_and_exponents
from ..scaling import current_scale
from .inputs import _as_heads, _positive_f32
from .recipes import F32, _WIDE, _fmt_or_wide

__all__ = ["quantize_qkv"]


class _Operand:
    """An operand of one head: float64 values and, for 8-bit operands only (the GEMM kernels read them only
    there), int16 exponents, codes, format and mantissa bits (None for float32/bf16/fp16 operands)."""

    __slots__ = ("values", "exps", "codes", "fmt", "mbits")

    def __init__(self, values, exps, codes, fmt, mbits):
        self.values, self.exps, self.codes, self.fmt, self.mbits = values, exps, codes, fmt, mbits


def _wide_operand(x32, name):
    """float32 (or bf16/fp16-rounded) values for the exact/fp32 kernels, which multiply them as float64
    (``"exact"``) or float32 (``"fp32"``): no exponents, codes or format."""
    if name in _WIDE:
        x32 = x32.astype(_WIDE[name]).astype(F32)
    return _Operand(x32.astype(np.float64), None, None, None, None)


def _descales(x32, fmt, recipe, given, what, group=1):
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
        d = np.asarray(given, dtype=np.float64)
        n = H // group if gran == "kv-head" else H
        if d.size == 1:
            d = np.full(H, float(d.reshape(())))
        elif gran == "tensor" or d.shape != (n,):
            raise ValueError(f"{what} descale must be a scalar" + ("" if gran == "tensor" else
                                                                   f" or shape ({n},)") + f", got {d.shape}")
        elif gran == "kv-head":
            d = np.repeat(d, group)
        # checked as the float32 the kernel receives, with its reciprocal
        return _positive_f32(d, f"{what} descale", reciprocal=True)
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
    x = _as_heads(x, "x")
    fmt = _fmt_or_wide(fmt_name, "fmt_name", allow_none=False)
    if fmt in _WIDE:
        raise ValueError(f"fmt_name must be an 8-bit format (codes), got {fmt_name!r}")
    try:
        s = None if isinstance(scale, str) else np.asarray(scale, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        s = None
    if s is None or s.shape != (x.shape[0],):
        raise ValueError(f"scale must be {x.shape[0]} finite float32 values > 0 (one per head), got {scale!r}")
    s32, _ = _positive_f32(s, "scale", reciprocal=False)
    return _quantize_qkv(x, fmt, s32)


def _quantize_qkv(x, fmt_name, scale):
    """:func:`quantize_qkv` without the checks, for operands :func:`attention` has checked."""
    return encode(np.multiply(np.asarray(x, F32), np.asarray(scale, F32)[:, None, None], dtype=F32), fmt_name,
                  saturate=True)


def _quantized_operand(codes, fmt_name):
    fmt = get_format(fmt_name)
    v, e = values_and_exponents(codes, fmt)
    return _Operand(v, e, codes, fmt, fmt.mbits)


def _operand_for(x, fmt_name, scale):
    if fmt_name is None or fmt_name in _WIDE:
        return _wide_operand(x[0], fmt_name)
    return _quantized_operand(_quantize_qkv(x, fmt_name, scale)[0], fmt_name)


def _slice(op: _Operand, a, b):
    return _Operand(*(None if x is None else x[a:b] for x in (op.values, op.exps, op.codes)), op.fmt, op.mbits)


def _transpose(op: _Operand) -> _Operand:
    """V (keys, dv) seen as the (dv, keys) 'B transposed' operand of :func:`_matmul`."""
    return _Operand(*(None if x is None else x.T for x in (op.values, op.exps, op.codes)), op.fmt, op.mbits)


# ----------------------------------------------------------------------------- GEMM pieces
def _chain_model(model: GemmModel) -> GemmModel:
    """The model's step chain with no promotion and no split-K (the recipe decides those)."""
    if model.kind not in ("instruction", "steps"):
        return model
    return dataclasses.replace(model, policy=dataclasses.replace(model.policy, promote=None, split_k=None),
                               steps=None if model.steps is None else dataclasses.replace(
                                   model.steps, promote=None, split_k=None))


def _finite_codes(op: _Operand):
    """The operand's codes with its Inf/NaN codes read as zero, as the sums take them (their IEEE
    contributions are added apart, :func:`fp8emu.attention.emulate._head_forward`)."""
    codes = op.codes
    if any_nonfinite(codes, op.fmt):
        codes = np.where(op.values == 0, np.uint8(0), codes)
    return codes


def _matmul(a: _Operand, b_t: _Operand, model: GemmModel, c=None):
    """float32 (M, N) result of ``c + a @ b_t.T`` summed as ``model`` does (``c``: accumulator input)."""
    va, vb = a.values, b_t.values.T
    if model.kind in ("instruction", "steps"):
        if a.fmt is None or b_t.fmt is None:
            raise ValueError(f"tensor-core accumulator {model.name!r} needs 8-bit operands; use 'fp32' or "
                             "'exact' with float32/bf16/fp16 operands")
        K = va.shape[1]
        row = None if model.kind == "steps" else row_for_formats(model, a.fmt, b_t.fmt, K)
        if row is not None:
            return run_steps(model, _finite_codes(a), a.fmt, _finite_codes(b_t).T, b_t.fmt,
                             c=None if c is None else np.asarray(c, F32), ins=row)
        return mma_dot(va, a.exps, vb, b_t.exps.T, steps_accumulator(model), c=c)
    if model.kind == "exact":
        if a.fmt is not None and b_t.fmt is not None:
            return exact_dot(va, a.exps, vb, b_t.exps.T, a.mbits, b_t.mbits, extra=c)
        r = va @ vb
        return (r if c is None else r + c).astype(F32)
    # fp32: float32-rounded products added in K order to the accumulator input
    a32, b32 = va.astype(F32), vb.astype(F32)
    out = np.zeros((a32.shape[0], b32.shape[1]), F32) if c is None else np.array(c, F32)
    tmp = np.empty_like(out)
    for k in range(a32.shape[1]):
        np.multiply(a32[:, k, None], b32[k], out=tmp)
        out += tmp
    return out


def _fl32_fma(a, b, c):
    """``fl32(a * b + c)`` with one rounding (a, b, c float32 arrays)."""
    return add_scaled_f32(np.asarray(c, F32), np.asarray(a, np.float64), np.asarray(b, np.float64))
