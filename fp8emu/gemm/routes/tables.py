"""The code-pair route: products gathered from tables of every (a, b) code pair.

Contract: any FP8/FP6/FP4 operands (not the 16-bit inputs), any datapath, any shape; it is the
route of rows (:func:`fp8emu.gemm.instructions.dot`), of tiles under 512 outputs, and of every
block-scaled kind the tile routes do not take.
"""

from __future__ import annotations

import threading

import numpy as np

from ...interop import byte_codes
from ..aligned_sums import fused_step, pow2, trunc_sum
from .codes import ZERO_PRODUCT_EXP, pair_tables
from .steps import c_exponents, halves, paired_halves, round_results, zero_c_matters

#: Products handled per block on the table path: small enough that a block's intermediates stay in
#: the CPU caches (and no fresh pages are faulted in per call), large enough to amortise NumPy's
#: per-call cost.
_TILE = 1 << 17
#: The quad tables of (a format, b format) (:func:`_quad_table`), and this thread's work arrays.
_QUADS = {}
_LOCAL = threading.local()

def _quad_table(fa, fb):
    """For 4-bit operands: every two consecutive code pairs ``(a_k, b_k), (a_k+1, b_k+1)`` as one
    16-bit index, holding ``sum / q + 2**16 * nonzero`` as int32 (``q`` the smallest product
    magnitude, of which every product is a multiple; ``nonzero`` how many of the two products are).

    A group's entries then add up, exactly and in one integer pass, to its sum and its count of
    non-zero products (the sum's magnitude stays below 2**15), with half the gathers.
    """
    key = (fa.name, fb.name)
    if key not in _QUADS:
        P = pair_tables(fa, fb, ZERO_PRODUCT_EXP)[0]
        q = float(np.abs(P[P != 0]).min())
        units = np.rint(P / q).astype(np.int32)
        nz = (P != 0).astype(np.int32)
        hi, lo = np.arange(1 << 16) >> 8, np.arange(1 << 16) & 0xFF
        t = units[hi] + units[lo] + ((nz[hi] + nz[lo]) << 16)
        t.flags.writeable = False
        _QUADS[key] = t, q, int(np.abs(units).max())
    return _QUADS[key]

def _buffers(n):
    """This thread's work arrays (index, products, exponents, code pairs) of at least ``n`` elements.

    Kept between calls: fresh arrays of a block's size are returned to the OS when freed and
    page-faulted in again on every call, which cost more than the arithmetic on them.
    """
    ws = getattr(_LOCAL, "buffers", None)
    if ws is None or ws[0].size < n:
        ws = (np.empty(n, np.intp), np.empty(n), np.empty(n, np.int16), np.empty(n, np.uint16))
        _LOCAL.buffers = ws
    return ws

def run_tables(ins, a, b, c, fa, fb, sa, sb, block, K):
    """D for FP8/FP6/FP4 operands a (M|1, N|1, K) and b: products gathered from the code-pair tables.

    The outputs are taken in blocks (rows x columns x whole K steps) of about ``_TILE``
    products, C carried along K.  Per block one index array (steps, L + 1, R) holds every code
    pair, K-major, and two gathers give the products and their exponents; each step's spare
    last row is where a fused step puts C and its exponent, so that C is aligned, truncated and
    added by the same passes as the products.
    """
    a, b = byte_codes(a, fa, "a"), byte_codes(b, fb, "b")
    zero = {"scaled": ZERO_PRODUCT_EXP, "grouped": ZERO_PRODUCT_EXP, "paired": max(ins.zero_exp, -900)}.get(ins.datapath, ins.zero_exp)
    P, X, xmin = pair_tables(fa, fb, zero)
    zero_c = zero_c_matters(ins, xmin)
    quads = ins.datapath == "grouped" and fa.bits == fb.bits == 4 and ins.group % 2 == 0
    if quads:
        Q, quantum, umax = _quad_table(fa, fb)
        quads = ins.group * umax < 1 << 15
    M, N = c.shape
    L = ins.step
    # as many outputs per block as one step's products allow (the per-output passes are then
    # long ones), then as many whole steps as fit
    nb = min(N, max(1, _TILE // L))
    mb = min(M, max(1, _TILE // (L * nb)))
    kc = min(K, max(L, _TILE // (mb * nb) // L * L))
    bi, bp, bx, bw = _buffers(kc // L * (L + 1) * mb * nb)
    shift = np.uint16(fb.bits)
    out = np.empty((M, N), c.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        for m0 in range(0, M, mb):
            m1 = min(M, m0 + mb)
            for n0 in range(0, N, nb):
                n1 = min(N, n0 + nb)
                sel = [(slice(m0, m1) if x.shape[0] > 1 else slice(None),
                        slice(n0, n1) if x.shape[1] > 1 else slice(None)) for x in (a, b)]
                m, n = m1 - m0, n1 - n0
                scl = None
                if sa is not None:
                    scl = tuple(np.broadcast_to(v[:, i, j], (v.shape[0], m, n)).reshape(v.shape[0], m * n)
                                for v, (i, j) in ((sa[0], sel[0]), (sa[1], sel[0]), (sb[0], sel[1]), (sb[1], sel[1])))
                cb = c[m0:m1, n0:n1].reshape(m * n)
                for k0 in range(0, K, kc):
                    k1 = min(K, k0 + kc)
                    S = (k1 - k0) // L
                    if quads:
                        q = _gather_quads(Q, a[sel[0] + (slice(k0, k1),)], b[sel[1] + (slice(k0, k1),)],
                                          (bi, bp, bw), S, m, n)
                        cb = _quad_rows(ins, q, quantum, scl, block, cb, k0)
                        continue
                    size = S * (L + 1) * m * n
                    idx = bi[:size].reshape(S, L + 1, m, n)
                    # code pairs as uint16 in the operands' own layout (contiguous reads, narrow
                    # writes), then widened to the K-major index in one transposing copy
                    w = bw[:m * n * (k1 - k0)].reshape(m, n, k1 - k0)
                    np.left_shift(a[sel[0] + (slice(k0, k1),)], shift, out=w, dtype=np.uint16)
                    np.bitwise_or(w, b[sel[1] + (slice(k0, k1),)], out=w)
                    np.copyto(idx[:, :L], np.moveaxis(w, 2, 0).reshape(S, L, m, n))
                    idx[:, L] = 0
                    idx = idx.reshape(size)
                    pk = np.take(P, idx, out=bp[:size], mode="wrap").reshape(S, L + 1, m * n)
                    xk = np.take(X, idx, out=bx[:size], mode="wrap").reshape(S, L + 1, m * n)
                    cb = _table_rows(ins, pk, xk, scl, block, cb, k0, zero_c)
                out[m0:m1, n0:n1] = cb.reshape(m, n)
    return out


def _table_rows(ins, p, x, scl, block, c, k_first, zero_c):
    """The chain of steps over gathered products ``p`` (steps, L + 1, R) (overwritten) and exponents
    ``x``, the first step at ``k_first`` along K; returns the last step's rounded result."""
    L, F = ins.step, ins.frac_bits
    for s in range(p.shape[0]):
        ps, xs = p[s], x[s]
        k = k_first + s * L
        ec = c_exponents(c, ins, zero_c, out=xs[L])          # into the step's spare row
        if ins.datapath == "fused":
            ps[L] = c
            E = xs.max(axis=0)
            sc = pow2(E, F, -1)
            x_ = trunc_sum(ps, sc) / sc
        elif ins.datapath == "paired":
            # zero products carry max(zero_exp, -900) (the table's), which changes nothing (a zero half's
            # sum is zero and C's exponent is above both) and keeps every power of two normal in float64
            x_, E = paired_halves(ps[:L], halves(xs[:L]).max(axis=0), c, ec, ins), None
        elif ins.datapath == "scaled":
            x_, E = _scaled_sum(ins, ps[:L], xs[:L], scl, block, k, c, ec)
        else:
            x_, E = fused_step(*_grouped_table_terms(ins, ps[:L], xs[:L], scl, block, k), c, ec, F), None
        c = round_results(x_, ins, E)
    return c

def _scaled_sum(ins, ps, xs, scl, block, k0, c, ec):
    """One ``"scaled"`` step: E8M0 scales are powers of two, so a block's scales add to its products'
    exponents and fold into the one factor that aligns them (a NaN scale makes its block NaN)."""
    L, F = ins.step, ins.frac_bits
    bl = min(block, L)
    nb = L // bl
    kb = (k0 + np.arange(nb) * bl) // block
    q = scl[1][kb] + scl[3][kb]                                  # (nb, R)
    nan = np.isnan(scl[0][kb]) | np.isnan(scl[2][kb])
    xb = xs.reshape(nb, bl, -1)
    hi, lo = xb.max(axis=1), xb.min(axis=1)
    # zero products carry zero_exp; the others their exponent plus their block's scales'
    eb = np.where(hi == ZERO_PRODUCT_EXP, ins.zero_exp, hi + q)
    eb = np.where(lo == ZERO_PRODUCT_EXP, np.maximum(eb, ins.zero_exp), eb)
    E = np.maximum(eb.max(axis=0), ec)
    f = pow2(q - E, F)
    f[nan] = np.nan
    np.multiply(ps.reshape(nb, bl, -1), f[:, None], out=ps.reshape(nb, bl, -1))
    np.trunc(ps, out=ps)
    t = np.add.reduce(ps, axis=0)
    sc = pow2(E, F, -1)
    t += np.trunc(c * sc)
    return t / sc, E


def _gather_quads(Q, ak, bk, bufs, S, m, n):
    """The quad-table entries (S, L / 2, m * n) of a block of 4-bit codes ak (m|1, n|1, k), bk."""
    bi, bp, bw = bufs
    h = ak.shape[-1] // 2
    w, tmp = bw[:m * n * h].reshape(m, n, h), bw[m * n * h:2 * m * n * h].reshape(m, n, h)
    np.left_shift(ak[..., 0::2], np.uint16(12), out=w, dtype=np.uint16)
    np.left_shift(bk[..., 0::2], np.uint16(8), out=tmp, dtype=np.uint16)
    w |= tmp
    np.left_shift(ak[..., 1::2], np.uint16(4), out=tmp, dtype=np.uint16)
    w |= tmp
    w |= bk[..., 1::2]
    idx = bi[:m * n * h].reshape(h, m, n)
    np.copyto(idx, np.moveaxis(w, 2, 0))
    return np.take(Q, idx.reshape(-1), out=bp.view(np.int32)[:m * n * h], mode="wrap").reshape(S, -1, m * n)


def _quad_rows(ins, q, quantum, scl, block, c, k_first):
    """The chain of ``"grouped"`` steps over quad-table entries ``q`` (steps, L / 2, R)."""
    L, F, G = ins.step, ins.frac_bits, ins.group
    sums = np.add.reduce(q.reshape(q.shape[0], L // G, G // 2, -1), axis=2, dtype=np.int32)
    count = (sums + (1 << 15)) >> 16
    s_all = (sums - (count << 16)) * quantum
    for s in range(q.shape[0]):
        ec = c_exponents(c, ins)
        t, e = _group_terms(ins, s_all[s], count[s] == 0, scl, block, k_first + s * L)
        c = round_results(fused_step(t, e, c, ec, F), ins)
    return c


def _grouped_table_terms(ins, ps, xs, scl, block, k0):
    """:func:`_grouped_terms` on gathered products; a group is all zero when its largest exponent is
    the zero marker."""
    G = ins.group
    pg = ps.reshape(-1, G, ps.shape[-1])
    allzero = xs.reshape(pg.shape).max(axis=1) == ZERO_PRODUCT_EXP
    return _group_terms(ins, np.add.reduce(pg, axis=1), allzero, scl, block, k0)


def _group_terms(ins, s, allzero, scl, block, k0):
    """Group sums ``s`` (groups, R) times their scales, with the scales' exponents (``zero_exp``
    where the group is all zero or a scale is zero)."""
    G = ins.group
    kb = (k0 + np.arange(s.shape[0]) * G) // block
    sa, qa, sb, qb = scl[0][kb], scl[1][kb], scl[2][kb], scl[3][kb]
    t = s * sa * sb
    zero = allzero | (sa == 0) | (sb == 0)
    return t, np.where(zero, ins.zero_exp, qa + qb)
