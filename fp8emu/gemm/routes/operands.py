"""The operand route: each operand element decoded once, a step's products as broadcast passes.

Contract (:func:`run_operands`): tiles or GEMMs of FP8/FP6/FP4 codes through the ``"fused"`` or
``"paired"`` datapath, or ``"scaled"`` with a block a multiple of the step.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ...interop import byte_codes
from ..aligned_sums import pow2
from ..outputs import OUTPUT_TYPES, canonical, kept_bits
from .codes import decoded_chunk, operand_tables
from .layout import transposed
from .steps import c_exponents, halves, paired_halves, round_results, zero_c_matters
from .workspace import work

def _sum_dtype(ins):
    """The type :func:`run_operands` sums a step's truncated terms in: float64 for the ``"scaled"``
    and ``"paired"`` datapaths; otherwise float32 where the terms (integers below ``2**(F + 2)``) and
    their sum are exact in it, else float64.  The products and terms themselves always are exact in
    float32 (products of FP8/FP6/FP4 values have at most 8 significant bits, and truncating one
    keeps at most as many)."""
    if ins.datapath in ("scaled", "paired"):
        return np.float64
    return np.float32 if ins.frac_bits + 2 + (ins.step + 1).bit_length() <= 24 else np.float64

#: Decoded operand elements (values and exponents of A and B) held at once on the operand path, a
#: chunk of tiles and of K, and the products of one block there: the tiles of a chunk are the
#: innermost axis of every pass, so a chunk holds as many as its operands allow in the caches.
_CHUNK = 1 << 19
OP_TILE = 1 << 18

def _operand_blocks(T, M, N, K, L):
    """How :func:`run_operands` splits T tiles of M x N x K into steps of L: tiles per chunk, K per
    chunk (whole steps), and rows and columns per block (its products about ``OP_TILE``)."""
    tc = min(T, max(1, _CHUNK // (L * (M + N))))
    kc = min(K, max(L, _CHUNK // (tc * (M + N)) // L * L))
    nb = min(N, max(1, OP_TILE // (L * tc)))
    mb = min(M, max(1, OP_TILE // (L * tc * nb)))
    return tc, kc, mb, nb


def _step_products(p, x, ops, ks, rows, cols):
    """One step's products into ``p`` and their exponents into ``x`` (L, rows, cols, tiles), from a
    chunk's decoded operands ``ops`` = (va, ea, vb, eb), K-major: the step ``ks`` along K, a block of
    A's rows and of B's columns."""
    va, ea, vb, eb = ops
    # A's broadcast copied, then B's multiplied in place: NumPy's ufunc with two broadcast inputs
    # runs ~1.5x slower than both passes
    np.copyto(p, va[ks, rows, None])
    np.multiply(p, vb[ks, None, cols], out=p)
    np.copyto(x, ea[ks, rows, None])
    np.add(x, eb[ks, None, cols], out=x)

def _e8m13_step(p, c, E, F, floor_e):
    """One ``"fused"`` step rounded ``"rz-e8m13"`` on float32 products ``p`` (overwritten) whose
    truncated terms sum exactly in float32 (:func:`_sum_dtype`), all in float32.

    Where E is at least ``floor_e`` (the smallest real product's exponent), ``2**(F - E)`` is a
    normal float32, C aligned by it is below ``2**(F + 1)`` (E is at least C's exponent), so the
    truncated C, the sum and the result ``sum * 2**(E - F)`` (at least ``2**(floor_e - F)`` unless
    zero, so never subnormal) are exact, and clearing the ten low fraction bits truncates it to 13.
    E below ``floor_e`` means a step of zero products: with ``F >= 13`` and a zero exponent below
    float32's normals (the caller's conditions) its grid ``2**(E - F)`` is then C's own or finer, or C
    is zero, so its result is C truncated to 13 fraction bits: C is taken there before the bits are
    cleared, unless a zero times Inf or NaN made it NaN.
    """
    f = pow2(np.maximum(E, floor_e), F, -1, np.float32)
    np.multiply(p, f, out=p)
    np.trunc(p, out=p)
    s = np.add.reduce(p, axis=0)
    cu = np.multiply(c, f)
    s += np.trunc(cu, out=cu)
    s /= f
    if int(E.min()) < floor_e:
        low = (E < floor_e) & (s == s)      # NaN stays: a zero times Inf or NaN
        s[low] = c[low]
    si = s.view(np.int32)
    np.bitwise_and(si, np.int32(-1 << 10), out=si)
    return canonical(s, "float32")

def run_operands(ins, a, b, c, fa, fb, scales=None):
    """D of the ``"fused"``, ``"scaled"`` and ``"paired"`` datapaths for tiles a (T, M, K) and
    b (T, N, K) of codes and C (T, M, N).

    Contract: FP8/FP6/FP4 operands; ``"scaled"`` only with a block a multiple of the step (a step
    then lies in one block); any T, M, N and K a multiple of the step.

    Each operand element is decoded once per chunk of tiles and K (value and exponent, K-major
    with the tiles innermost, so that element-wise passes run along contiguous tiles); a step's
    products and their exponents are then two broadcast passes, aligned to the step's largest
    exponent (C's included) by one multiplication by a power of two, truncated and added.  C is
    aligned and truncated apart, in float64.  Blocks of about ``OP_TILE`` products; D holds each
    block's C between chunks of K.

    ``scales`` (``"scaled"``): the decoded E8M0 scales (values, exponents) of A (K / block, M, T)
    and of B (K / block, N, T), and the block.  Their exponents add to the products' and fold into
    the aligning factor.

    The loops over chunks and blocks are here, a step's passes in :func:`_operand_step`.
    """
    T, M, N = c.shape
    if T == 1 and N < M:
        # every datapath is symmetric in A and B: the longer side innermost (long element-wise loops)
        sw = None if scales is None else (scales[1], scales[0], scales[2])
        return np.swapaxes(run_operands(ins, b, a, np.swapaxes(c, 1, 2), fb, fa, sw), 1, 2)
    a, b = byte_codes(a, fa, "a"), byte_codes(b, fb, "b")
    pl = _operand_plan(ins, fa, fb, scales)
    K, L = a.shape[-1], ins.step
    tc, kc, mb, nb = _operand_blocks(T, M, N, K, L)
    out = np.empty((T, M, N), c.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        for t0 in range(0, T, tc):
            t1 = min(T, t0 + tc)
            # this chunk's C with its tiles innermost (a transpose of a chunk stays in the caches)
            cc = transposed(np.reshape(c[t0:t1], (t1 - t0, M * N))).reshape(M, N, t1 - t0)
            for k0 in range(0, K, kc):
                k1 = min(K, k0 + kc)
                va, ea = decoded_chunk(a[t0:t1, :, k0:k1], fa, "a")
                vb, eb = decoded_chunk(b[t0:t1, :, k0:k1], fb, "b")
                for m0 in range(0, M, mb):
                    m1 = min(M, m0 + mb)
                    for n0 in range(0, N, nb):
                        n1 = min(N, n0 + nb)
                        shp = (L, m1 - m0, n1 - n0, t1 - t0)
                        size = L * (m1 - m0) * (n1 - n0) * (t1 - t0)
                        # products, their aligning factors and truncated terms in float32 (all
                        # exact there)
                        p = work("p", L * mb * nb * tc, np.float32)[:size].reshape(shp)
                        x = work("x", L * mb * nb * tc, np.int8)[:size].reshape(shp)
                        cb = cc[m0:m1, n0:n1]
                        sel = (slice(m0, m1), slice(n0, n1), slice(t0, t1))
                        for s0 in range(0, k1 - k0, L):
                            _step_products(p, x, (va, ea, vb, eb), slice(s0, s0 + L), sel[0], sel[1])
                            cb = _operand_step(pl, p, x, cb, k0 + s0, sel)
                        cc[m0:m1, n0:n1] = cb
            out[t0:t1] = transposed(cc.reshape(M * N, t1 - t0)).reshape(t1 - t0, M, N)
    return out


def _operand_plan(ins, fa, fb, scales):
    """The facts a step of :func:`run_operands` needs: the instruction, the sum type, the smallest
    real product exponent, the scales' exponents and NaN masks, and which shortcuts are exact."""
    pl = SimpleNamespace(ins=ins, scaled=ins.datapath == "scaled", paired=ins.datapath == "paired",
                         F=ins.frac_bits)
    if scales is not None:
        (sva, sea), (svb, seb), pl.sblock = scales
        pl.qa, pl.qb, pl.nan_a, pl.nan_b = sea.astype(np.int16), seb.astype(np.int16), np.isnan(sva), np.isnan(svb)
        pl.nan_scales = bool(pl.nan_a.any() or pl.nan_b.any())
    # the truncated terms' sums in float32 where exact there too, else in float64
    pl.acc = _sum_dtype(ins)
    la, lb = operand_tables(fa, np.float32)[2], operand_tables(fb, np.float32)[2]
    pl.zero_c = zero_c_matters(ins, la + lb)
    # the smallest exponent of a non-zero product; a zero factor's marker puts its products below
    pl.floor_e = la + lb
    # where a zero product's exponent can exceed a real one's, each zero product is a candidate
    # for the step's largest exponent (block scales shift the real ones by any amount)
    pl.zero_wins = ins.zero_exp > pl.floor_e or pl.scaled
    pl.pair_zero = max(ins.zero_exp, -900)
    # truncated results need no care below the output's smallest normal where no step's grid
    # (2**(E - F)) is finer there than the output's (2**(emin - kept bits)): E is at least emin
    # where a zero C cannot carry zero_exp (never so for the scaled datapath, see zero_c_matters)
    pl.coarse = not pl.zero_c and pl.F <= kept_bits(ins)
    # a fused step truncated to e8m13 whose terms sum exactly in float32 stays in float32 throughout
    # (where a step of zero products leaves C's own grid, see _e8m13_step)
    pl.e8m13 = (not pl.scaled and not pl.paired and ins.rounding == "rz-e8m13" and pl.acc == np.float32
                and pl.F >= 13 and ins.zero_exp <= OUTPUT_TYPES["float32"].emin)
    return pl


def _operand_step(pl, p, x, cb, k, sel):
    """One step (at ``k`` along K) of a block: its products ``p`` (L, rows, cols, tiles; overwritten)
    and their exponents ``x``, C ``cb``; ``sel`` the block's rows, columns and tiles (for its
    scales).  Returns the step's rounded result."""
    ins, F, floor_e = pl.ins, pl.F, pl.floor_e
    ec = c_exponents(cb, ins, pl.zero_c)
    if pl.paired:
        # a half of zero products carries the table's zero exponent
        E2 = halves(x).max(axis=0).astype(np.int16)
        E2[E2 < floor_e] = pl.pair_zero
        return round_results(paired_halves(p, E2, cb, ec, ins, floor_e), ins)
    # zero products carry zero_exp: it is the products' largest exponent where all are zero, and
    # (zero_wins) a candidate wherever one is
    xm = x.max(axis=0)
    Ep = xm.astype(np.int16)
    if pl.scaled:
        ms, ns, ts = sel
        kb = k // pl.sblock
        Q = pl.qa[kb, ms, None, ts] + pl.qb[kb, None, ns, ts]
        Ep += Q
    Ep[xm < floor_e] = ins.zero_exp
    if pl.zero_wins:
        # a zero product's zero_exp wins only where the real ones' largest exponent is below it
        # (rare: tiny scales); look for zeros there alone
        low = Ep < ins.zero_exp
        if low.any():
            low &= x.min(axis=0) < floor_e
            Ep[low] = ins.zero_exp
    E = np.maximum(Ep, ec)
    if pl.e8m13:
        return _e8m13_step(p, cb, E, F, floor_e)
    sc = pow2(E, F, -1)
    # the aligning factor 2**(F - E) (times the scales), built in float32's exponent field: capped
    # where every product is zero (E below the smallest real product's), so that it stays finite,
    # and where it is below float32's normals (every term truncates to zero there anyway)
    if pl.scaled:
        f = pow2(np.clip(E - Q, floor_e, F + 126), F, -1, np.float32)
        if pl.nan_scales:
            f[pl.nan_a[kb, ms, None, ts] | pl.nan_b[kb, None, ns, ts]] = np.nan
    else:
        f = pow2(np.maximum(E, floor_e), F, -1, np.float32)
    np.multiply(p, f, out=p)
    np.trunc(p, out=p)
    r = np.add.reduce(p, axis=0, dtype=pl.acc).astype(np.float64, copy=False)
    cs = np.multiply(cb, sc, out=work("c", cb.size, np.float64).reshape(cb.shape))
    r += np.trunc(cs, out=cs)
    r /= sc
    return round_results(r, ins, E, coarse=pl.coarse)
