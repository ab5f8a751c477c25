"""The sums of GEMMs that are no tensor core: the exact sum and the sequential float32 sum.

Operands arrive as float64 values (non-finite codes zeroed) with int16 exponents, as the per-code
tables of :mod:`fp8emu.gemm.code_tables` give them; :func:`exact_dot` (the ``"exact"`` model: one
rounding) and :func:`fp32_dot` (the ``"fp32"`` model: float32 additions in K order) return the float32
(M, N) result of the K reduction.  NaN/Inf semantics are applied apart
(:func:`fp8emu.gemm.epilogue.special_masks`).
Tensor-core models run on the catalogue engine (:mod:`fp8emu.gemm.models`).
"""

from __future__ import annotations

import numpy as np

from .. import parallel
from .code_tables import ZERO_EXP
from .fparith import round_hi_lo, two_sum

__all__ = ["fp32_dot", "exact_dot", "exp_span"]


def exp_span(e):
    """(lowest, highest) exponent of the non-zero values; (0, 0) when all are zero."""
    hi = int(e.max(initial=ZERO_EXP))
    if hi == ZERO_EXP:
        return 0, 0
    return int(np.where(e > ZERO_EXP, e, np.int16(32767)).min()), hi


def fp32_dot(va, vb, c=None):
    """Sequential float32 sum in K order of the float32 products (exact for 8-bit operands), from
    ``c`` (float32 (M, N), the accumulator input) or zero."""
    at = np.ascontiguousarray(va.T, dtype=np.float32)   # K-major: a column of A is contiguous
    b = vb.astype(np.float32)
    M = at.shape[1]
    acc = np.zeros((M, b.shape[1]), np.float32) if c is None else np.array(c, np.float32)

    def row_block(m0, m1):
        rows_acc = acc[m0:m1]
        tmp = np.empty_like(rows_acc)
        for k in range(at.shape[0]):
            np.multiply(at[k, m0:m1, None], b[k], out=tmp)
            rows_acc += tmp

    threads = parallel.resolve_threads(None, M * b.shape[1] * at.shape[0])
    parallel.run(row_block, parallel.split(0, M, threads, 1), threads)
    return acc


def exact_dot(va, ea, vb, eb, mbits_a=6, mbits_b=6, extra=None):
    """Exact dot products (plus ``extra``, an (M, N) array added exactly) rounded once to float32.

    The operands are split into exponent bands so that every band-pair product
    sum is an integer of at most 53 bits times a power of two, hence exact in a
    float64 matmul; the band results are combined error-free (two-sum) and the
    final value is rounded once.
    """
    K = va.shape[1]
    kbits = int(np.ceil(np.log2(max(K, 2))))
    # a value with exponent e in [lo, lo + w) is an integer below 2**(mbits + w)
    # times 2**(lo - mbits); band-pair sums stay below 2**(ma + mb + wa + wb + kbits)
    room = 53 - kbits - mbits_a - mbits_b

    (la, ha), (lb, hb) = exp_span(ea), exp_span(eb)
    wa = max(1, min(ha - la + 1, room // 2))
    wb = max(1, room - wa)

    def bands(v, e, lo_e, hi_e, w):
        if hi_e - lo_e + 1 <= w:
            return [v]
        return [np.where((e >= start) & (e < start + w), v, 0.0) for start in range(lo_e, hi_e + 1, w)]

    terms = [ba @ bb for ba in bands(va, ea, la, ha, wa) for bb in bands(vb, eb, lb, hb, wb)]
    if extra is not None:
        terms.append(np.broadcast_to(np.asarray(extra, np.float64), terms[0].shape))
    if len(terms) == 1:
        return terms[0].astype(np.float32)
    # error-free distillation: repeated two-sum sweeps leave the rounded sum in
    # the last term and exact, ever smaller remainders in the others
    for _ in range(len(terms)):
        for i in range(len(terms) - 1):
            terms[i + 1], terms[i] = two_sum(terms[i], terms[i + 1])
    hi = terms[-1]
    lo = np.sum(terms[:-1], axis=0) if len(terms) > 1 else np.zeros_like(hi)
    return round_hi_lo(hi, lo)


