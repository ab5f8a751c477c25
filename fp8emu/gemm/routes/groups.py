"""The group route of the ``"grouped"`` datapath (``kind::mxf4``, ``kind::mxf4nvf4``): group sums
as float32 matrix products.

Contract (:func:`run_groups`): tiles or GEMMs through a ``"grouped"`` instruction whose group is
8, 16, 32 or 64 products and whose group sums are exact in float32 (:func:`groups_exact`).
"""

from __future__ import annotations

import numpy as np

from ...interop import byte_codes
from ..aligned_sums import fused_step
from .codes import ZERO_PRODUCT_EXP, pair_decode, pair_tables
from .steps import c_exponents, round_results

#: Outputs times products per block (as the operand route's ``OP_TILE``).
_OP_TILE = 1 << 18
#: Whether the group sums of (group, a format, b format) are exact (:func:`groups_exact`).
_EXACT = {}

def groups_exact(ins, fa, fb):
    """Whether every group sum of ``ins.group`` products of fa x fb values is exact in float32 (all
    products finite multiples of the smallest, and a group's sum below ``2**24`` of it), so that a
    float32 matrix product gives the group sums in any order."""
    key = (ins.group, fa.name, fb.name)
    if key not in _EXACT:
        P = pair_tables(fa, fb, ZERO_PRODUCT_EXP)[0]
        nz = np.abs(P[P != 0])
        q = nz.min()
        _EXACT[key] = bool(np.isfinite(P).all() and np.all(nz / q == np.rint(nz / q))
                           and ins.group * float(nz.max() / q) < 2.0 ** 24)
    return _EXACT[key]


def run_groups(ins, a, b, c, fa, fb, scales):
    """D of the ``"grouped"`` datapath for tiles a (T, M, K) and b (T, N, K) of codes, C (T, M, N),
    and ``scales``: the decoded block scales (values, exponents) of A (K / block, M, T) and of B
    (K / block, N, T), and the block.

    A group's sum is exact (:func:`groups_exact`), so the group sums of a block of outputs are
    one float32 matrix product of the decoded operands; whether a group has a non-zero product at
    all is the AND of its row's and its column's non-zero elements as bit masks (one word of
    ``group`` bits each); the step then aligns the groups' scaled sums and C as
    :func:`_group_terms` and :func:`fused_step` do.
    """
    T, M, N = c.shape
    if N < M:
        # symmetric in A and B: the longer side last, so that the passes over (tiles, groups, rows,
        # columns) run along it
        return np.swapaxes(run_groups(ins, b, a, np.swapaxes(c, 1, 2), fb, fa, (scales[1], scales[0], scales[2])),
                           1, 2)
    a, b = byte_codes(a, fa, "a"), byte_codes(b, fb, "b")
    K, L, G, F = a.shape[-1], ins.step, ins.group, ins.frac_bits
    (sva, sea), (svb, seb), block = scales
    # a zero scale makes its groups zero terms: its exponent far below, so that a sum of two stays so
    low = -(1 << 13)
    sea = np.where(sva == 0, low, sea).astype(np.int16)
    seb = np.where(svb == 0, low, seb).astype(np.int16)
    ng = L // G
    word = np.dtype(f"u{G // 8}")          # a group's bits: a 16-product group is two bytes
    # blocks of about _OP_TILE / 16 outputs, K in chunks of whole steps holding about _OP_TILE groups
    R = max(1, _OP_TILE // 16)
    tc = min(T, max(1, R // (M * N)))
    nb = min(N, max(1, R // tc))
    mb = min(M, max(1, R // (tc * nb)))
    kc = min(K, max(L, _OP_TILE // (tc * mb * nb) * G // L * L))
    out = np.empty((T, M, N), c.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        for t0 in range(0, T, tc):
            t1 = min(T, t0 + tc)
            for m0 in range(0, M, mb):
                m1 = min(M, m0 + mb)
                for n0 in range(0, N, nb):
                    n1 = min(N, n0 + nb)
                    cb = c[t0:t1, m0:m1, n0:n1]
                    for k0 in range(0, K, kc):
                        k1 = min(K, k0 + kc)
                        gk = (k1 - k0) // G
                        va = pair_decode(a[t0:t1, m0:m1, k0:k1], fa, "ga")
                        vb = pair_decode(b[t0:t1, n0:n1, k0:k1], fb, "gb")
                        # the groups outermost, (groups, t, rows, G) and (groups, t, G, columns): the
                        # group sums, scaled terms and exponents then run along K in contiguous planes
                        A = va.reshape(t1 - t0, m1 - m0, gk, G).transpose(2, 0, 1, 3)
                        B = vb.reshape(t1 - t0, n1 - n0, gk, G).transpose(2, 0, 3, 1)
                        S = np.matmul(A, B)                                               # (groups, t, m, n)
                        # a group of zero products carries zero_exp: the groups' non-zero elements as
                        # bit masks, one word per group and row (column), and their AND per output
                        za, zb = (np.ascontiguousarray(np.packbits(v != 0, axis=-1).view(word).transpose(2, 0, 1))
                                  for v in (va, vb))
                        zero = np.bitwise_and(za[..., None], zb[:, :, None, :]) == 0
                        kb = (k0 + np.arange(gk) * G) // block
                        # the groups' scales as (groups, t, m, 1) and (groups, t, 1, n)
                        sA, qA = (np.transpose(x[kb, m0:m1, t0:t1], (0, 2, 1))[..., None] for x in (sva, sea))
                        sB, qB = (np.transpose(x[kb, n0:n1, t0:t1], (0, 2, 1))[:, :, None, :] for x in (svb, seb))
                        terms = np.multiply(S, sA, dtype=np.float64)
                        terms *= sB
                        exps = qA + qB
                        exps[zero | (exps < low // 2)] = ins.zero_exp
                        for g0 in range(0, gk, ng):
                            ec = c_exponents(cb, ins)
                            cb = round_results(fused_step(terms[g0:g0 + ng], exps[g0:g0 + ng], cb, ec, F), ins)
                    out[t0:t1, m0:m1, n0:n1] = cb
    return out
