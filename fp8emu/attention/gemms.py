"""The GEMMs of emulated FP8 attention, S = Q·Kᵀ and P·V, on its operands
(:mod:`fp8emu.attention.operands`) through a GEMM model of :mod:`fp8emu.gemm`."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..gemm.code_tables import any_nonfinite
from ..gemm.kernels import exact_dot, fp32_dot
from ..gemm.models import GemmModel, row_for_formats, run_steps
from .inputs import F32
from .operands import Operand


def chain_model(model: GemmModel) -> GemmModel:
    """The model's step chain with no promotion and no split-K (the recipe decides those).

    Examples
    --------
    >>> from fp8emu.gemm.models import get_model
    >>> m = chain_model(get_model("hopper"))
    >>> get_model("hopper").policy.promote, m.policy.promote, m.policy.split_k
    (4, None, None)
    """
    if model.kind != "instruction":
        return model
    return dataclasses.replace(model, policy=dataclasses.replace(model.policy, promote=None, split_k=None))


def _finite_codes(op: Operand):
    """The operand's codes with its Inf/NaN codes read as zero, as the sums take them (their IEEE
    contributions are added apart, :func:`fp8emu.attention.emulate._head_forward`)."""
    codes = op.codes
    if any_nonfinite(codes, op.fmt):
        codes = np.where(op.values == 0, np.uint8(0), codes)
    return codes


def matmul(a: Operand, b_t: Operand, model: GemmModel, c=None):
    """float32 (M, N) result of ``c + a @ b_t.T`` summed as ``model`` does (``c``: accumulator input)."""
    va, vb = a.values, b_t.values.T
    if model.kind == "instruction":
        if a.fmt is None or b_t.fmt is None:
            raise ValueError(f"tensor-core accumulator {model.name!r} needs 8-bit operands; use 'fp32' or "
                             "'exact' with float32/bf16/fp16 operands")
        row = row_for_formats(model, a.fmt, b_t.fmt, va.shape[1])
        return run_steps(model, _finite_codes(a), a.fmt, _finite_codes(b_t).T, b_t.fmt,
                         c=None if c is None else np.asarray(c, F32), ins=row)
    if model.kind == "exact":
        if a.fmt is not None and b_t.fmt is not None:
            return exact_dot(va, a.exps, vb, b_t.exps.T, a.mbits, b_t.mbits, extra=c)
        r = va @ vb
        return (r if c is None else r + c).astype(F32)
    return fp32_dot(va, vb, c)      # float32-rounded products added in K order to the accumulator input

