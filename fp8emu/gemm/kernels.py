"""GEMM kernels over decoded operands: per-code value tables and the three accumulations.

Operands arrive as float64 values (non-finite codes zeroed) with int16 exponents;
each kernel returns the float32 (M, N) result of the K reduction:
:func:`accumulate` dispatches to the exact sum (:func:`exact_dot`), the
sequential float32 sum (:func:`fp32_dot`) or chained tensor-core steps
(:func:`mma_dot`).  NaN/Inf semantics are applied by :func:`special_masks`.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from ..codec import decode
from ..formats import Format
from .accumulator import Accumulator, split_bounds
from .fparith import round_bits, round_hi_lo, two_sum

__all__ = ["values_and_exponents", "special_masks", "accumulate", "mma_dot", "fp32_dot", "exact_dot"]

# Exponent given to zero terms: far below any real term, so it never wins the
# maximum and truncates to nothing; the sum of two still fits in int16.
_ZERO_EXP = -16000
#: Elements of the (rows, N, group) product block processed at once.
_BLOCK_ELEMS = 1 << 20
_THREADS = os.cpu_count() or 1

@functools.lru_cache(maxsize=64)
def _value_tables(fmt: Format):
    """Per-code float64 value (non-finite -> 0) and exponent (subnormals -> emin, zero -> sentinel).

    Cached on the Format object itself, so formats that differ in any field (their Inf/NaN codes
    too) never share a table.
    """
    v = decode(np.arange(1 << fmt.bits, dtype=np.uint8), fmt, dtype=np.float64)
    fin = np.where(np.isfinite(v), v, 0.0)
    emin = int(np.log2(fmt.min_normal))
    _, e = np.frexp(fin)
    e = np.where(fin == 0, _ZERO_EXP, np.maximum(e.astype(np.int64) - 1, emin))
    fin.setflags(write=False)
    e = e.astype(np.int16)
    e.setflags(write=False)
    return fin, e


def values_and_exponents(codes, fmt: Format):
    """float64 values with non-finite ones zeroed, and per-element int16 exponents."""
    tv, te = _value_tables(fmt)
    idx = codes & np.uint8((1 << fmt.bits) - 1)
    return np.take(tv, idx), np.take(te, idx)


def _exp_span(e):
    """(lowest, highest) exponent of the non-zero values; (0, 0) when all are zero."""
    hi = int(e.max(initial=_ZERO_EXP))
    if hi == _ZERO_EXP:
        return 0, 0
    return int(np.where(e > _ZERO_EXP, e, np.int16(32767)).min()), hi


def special_masks(codes_a, fa, codes_b, fb):
    """(+Inf, -Inf, NaN) masks of the (M, N) results under IEEE rules for Inf/NaN operands."""
    da = decode(codes_a, fa, dtype=np.float64)
    db = decode(codes_b, fb, dtype=np.float64)
    f = np.float64
    ia_p, ia_n = (da == np.inf).astype(f), (da == -np.inf).astype(f)
    ib_p, ib_n = (db == np.inf).astype(f), (db == -np.inf).astype(f)
    pa, na_ = ((da > 0) & ~np.isnan(da)).astype(f), ((da < 0) & ~np.isnan(da)).astype(f)
    pb, nb_ = ((db > 0) & ~np.isnan(db)).astype(f), ((db < 0) & ~np.isnan(db)).astype(f)
    pos = ia_p @ pb + ia_n @ nb_ + pa @ ib_p + na_ @ ib_n
    neg = ia_p @ nb_ + ia_n @ pb + pa @ ib_n + na_ @ ib_p
    nan = (np.isnan(da).astype(f).sum(1)[:, None] + np.isnan(db).astype(f).sum(0)[None, :]
           + (ia_p + ia_n) @ (db == 0).astype(f) + (da == 0).astype(f) @ (ib_p + ib_n))
    return pos > 0, neg > 0, (nan > 0) | ((pos > 0) & (neg > 0))


def mma_dot(va, ea, vb, eb, acc: Accumulator, kscale=None, kblock=128):
    """Chained tensor-core steps (with optional promotion and per-K-block scales)."""
    M, K = va.shape
    N = vb.shape[1]
    G = acc.group
    pad = (-K) % G
    if pad:
        va = np.pad(va, ((0, 0), (0, pad)))
        vb = np.pad(vb, ((0, pad), (0, 0)))
        ea = np.pad(ea, ((0, 0), (0, pad)), constant_values=_ZERO_EXP)
        eb = np.pad(eb, ((0, pad), (0, 0)), constant_values=_ZERO_EXP)
    ng = (K + pad) // G
    promote = acc.promote
    bounds = split_bounds(K, acc.splits(M, N, K))
    if len(bounds) > 2 and (bounds[1] % G):
        raise ValueError(f"split-K pieces of {bounds[1]} do not hold whole steps of group {G}")
    # step ranges of the split-K pieces (the last one also takes the padding)
    pieces = [(b0 // G, b1 // G) for b0, b1 in zip(bounds[:-2], bounds[1:-1])] + [(bounds[-2] // G, ng)]
    if kscale is not None:
        # block scales are applied when a K-block's partial sum is promoted
        if kblock % G:
            raise ValueError(f"block scales need a K block ({kblock}) that is a multiple of the group ({G})")
        promote = kblock // G
    out = np.empty((M, N), np.float32)
    rows = max(1, min(M, _BLOCK_ELEMS // max(1, N * G)))
    F = acc.frac_bits
    # Lowest exponent any non-zero term can have; all-zero steps are clamped to it
    # (their result is zero whatever the alignment).
    e_floor = _exp_span(ea)[0] + _exp_span(eb)[0] - 2
    amax, bmax = np.abs(va).max(initial=0.0), np.abs(vb).max(initial=0.0)
    # float32 is exact when scaled terms stay integers below 2**24 even after
    # summing a group, and when products and scale factors stay normal float32
    small = (F + 2 + int(np.ceil(np.log2(G))) <= 24 and F - e_floor < 120 and e_floor > -120
             and amax * bmax < 2.0 ** 120)
    dt = np.float32 if small else np.float64
    # K-major layout: reductions over a step become element-wise operations on
    # contiguous (rows, N) slabs, much faster than reducing a short last axis
    vat_, vb_ = np.ascontiguousarray(va.T, dtype=dt), vb.astype(dt)
    eat_ = np.ascontiguousarray(np.maximum(ea, _ZERO_EXP).T, dtype=np.int16)
    eb_ = np.maximum(eb, _ZERO_EXP).astype(np.int16)
    ops = _KMajor(vat_, vb_, eat_, eb_)
    rows = -(-M // max(min(_THREADS, M), -(-M // rows)))   # at least one block per core

    def row_block(m0, m1):
        P = np.empty((G, m1 - m0, N), dt)
        Eb = np.empty((G, m1 - m0, N), np.int16)
        result = None
        for g0, g1 in pieces:
            piece = _mma_piece(ops, (m0, m1), (g0, g1), (P, Eb), acc, promote=promote, e_floor=e_floor,
                               kscale=kscale, kblock=kblock)
            # split-K: the pieces' float32 results are added in piece order
            result = piece if result is None else (result + piece).astype(np.float32)
        out[m0:m1] = result

    _over_row_blocks(M, rows, row_block)
    return out


def _over_row_blocks(M, rows, fn):
    """Call ``fn(m0, m1)`` for each block of output rows, spread over the cores.

    Row blocks are independent and NumPy releases the GIL inside its loops, so
    threads share them out (as the BLAS behind ``np.matmul`` uses every core).
    """
    blocks = [(m0, min(M, m0 + rows)) for m0 in range(0, M, rows)]
    if len(blocks) > 1 and _THREADS > 1:
        with ThreadPoolExecutor(min(_THREADS, len(blocks))) as pool:
            list(pool.map(lambda b: fn(*b), blocks))
    else:
        for b in blocks:
            fn(*b)


class _KMajor(NamedTuple):
    """Operands laid out K-major: values of A transposed (K, M), of B (K, N), and their exponents."""

    vat: np.ndarray
    vb: np.ndarray
    eat: np.ndarray
    eb: np.ndarray


def _mma_piece(ops: _KMajor, rows, steps, buffers, acc, *, promote, e_floor, kscale, kblock):
    """float32 result of steps ``steps = (g0, g1)`` for rows ``rows = (m0, m1)``, from a zero accumulator.

    ``buffers = (P, Eb)`` are (group, rows, N) scratch arrays for the products and their exponents.
    """
    vat_, vb_, eat_, eb_ = ops
    (m0, m1), (g0, g1), (P, Eb) = rows, steps, buffers
    dt = P.dtype
    G, F = acc.group, acc.frac_bits
    part = np.zeros((m1 - m0, vb_.shape[1]))
    total = np.zeros(part.shape, np.float32)
    for g in range(g0, g1):
        sl = slice(g * G, (g + 1) * G)
        np.einsum("km,kn->kmn", vat_[sl, m0:m1], vb_[sl], out=P)
        np.add(eat_[sl, m0:m1, None], eb_[sl, None, :], out=Eb)
        E = Eb.max(axis=0).astype(np.int64)
        _, ec = np.frexp(part)
        E = np.maximum(E, np.where(part == 0, e_floor, ec.astype(np.int64) - 1))
        E = np.maximum(E, e_floor)
        sc = np.ldexp(1.0, F - E)
        np.multiply(P, sc.astype(dt)[None], out=P)
        np.trunc(P, out=P)
        s = P.sum(axis=0).astype(np.float64) + np.trunc(part * sc)
        part = round_bits(s, acc.sum_bits, acc.sum_rounding) / sc
        if promote and ((g + 1 - g0) % promote == 0 or g == g1 - 1):
            if kscale is None:
                total = (total + part.astype(np.float32)).astype(np.float32)
            else:
                f = kscale(m0, m1, (g * G) // kblock)
                hi, lo = two_sum(total.astype(np.float64), part * f)
                total = round_hi_lo(hi, lo)
            part = np.zeros_like(part)
    return total if promote else part.astype(np.float32)


def fp32_dot(va, vb):
    """Sequential float32 sum in K order; each product is exact in float32."""
    at = np.ascontiguousarray(va.T, dtype=np.float32)   # K-major: a column of A is contiguous
    b = vb.astype(np.float32)
    M = at.shape[1]
    acc = np.zeros((M, b.shape[1]), np.float32)

    def row_block(m0, m1):
        rows_acc = acc[m0:m1]
        tmp = np.empty_like(rows_acc)
        for k in range(at.shape[0]):
            np.multiply(at[k, m0:m1, None], b[k], out=tmp)
            rows_acc += tmp

    _over_row_blocks(M, max(1, -(-M // _THREADS)), row_block)
    return acc


def exact_dot(va, ea, vb, eb, mbits_a=6, mbits_b=6):
    """Exact dot products rounded once to float32.

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

    (la, ha), (lb, hb) = _exp_span(ea), _exp_span(eb)
    wa = max(1, min(ha - la + 1, room // 2))
    wb = max(1, room - wa)

    def bands(v, e, lo_e, hi_e, w):
        if hi_e - lo_e + 1 <= w:
            return [v]
        return [np.where((e >= start) & (e < start + w), v, 0.0) for start in range(lo_e, hi_e + 1, w)]

    terms = [ba @ bb for ba in bands(va, ea, la, ha, wa) for bb in bands(vb, eb, lb, hb, wb)]
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


def accumulate(va, ea, vb, eb, acc: Accumulator, mbits=(6, 6)):
    """float32 (M, N) result of summing the K products as ``acc`` does."""
    if acc.kind == "exact":
        return exact_dot(va, ea, vb, eb, *mbits)
    if acc.kind == "fp32":
        return fp32_dot(va, vb)
    return mma_dot(va, ea, vb, eb, acc)
