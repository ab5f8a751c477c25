"""The exact GEMM route: a step whose grid cuts no product is one slice of a batched matrix product.

Contract (:func:`run_exact`): one GEMM tile of at least ``_EXACT_MIN`` outputs, float32 output,
the ``"fused"`` datapath where a zero product's exponent never wins, ``"paired"``, or ``"scaled"``
with finite E8M0 scales and one block per step; it declines (returns ``None``) where a sample's
entries mostly fail its exactness check or the sums could overflow, and hands the rest of K to
the operand route where a non-finite code or many failing entries appear.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ..aligned_sums import pow2
from ..code_tables import ZERO_LOW, any_nonfinite, low_bit_table, value_tables
from ..outputs import OUTPUT_TYPES, kept_bits
from .codes import ZERO_OPERAND_EXP, operand_tables
from .operands import OP_TILE, run_operands
from .steps import c_exponents, paired_finish, round_results, zero_c_matters
from .workspace import work

#: A GEMM (one tile) of at least this many outputs tries :func:`run_exact`, which serves it where
#: at least ``_EXACT_SHARE`` of a sample's (output, step) entries pass its exactness check.
_EXACT_MIN = 4096
_EXACT_SHARE = 0.9
#: Outputs the route holds per-output arrays for at once (a block of rows), and the size of its
#: chunks of steps (outputs per chunk, or decoded operand elements): a chunk's float64 sums (2 MiB)
#: then stay in the caches for its steps (1.05-1.2x against 2**20 on this machine's 2 MiB L2).
_EXACT_OUT = 1 << 18
#: The power tables of :func:`_power_tables`, by (what, formats, step).
_POWERS = {}


def run_exact(ins, a, b, c, fa, fb, scales=None):
    """D of one GEMM tile (a (M, K), b (N, K) codes, C (M, N)) of the ``"fused"``, ``"paired"`` or
    ``"scaled"`` datapath from float64 matrix products, or ``None`` where this route does not apply.

    Where every product of a step is a multiple of the grid its terms are truncated to (and, for
    ``"paired"``, of the grid its sum is cut to once C is aligned), no truncation happens before
    the step's result is rounded: its sum is then exact in float64 and one slice of a batched
    matrix product.  Its largest product exponent is the binade of another matrix product, of
    per-code powers ``2**(p e)`` (:func:`_power_tables`; a broadcast pass over the int8 exponents
    where no float type holds them).  A product's lowest set bit is bounded below by the lowest
    bits of its row's and column's elements in the step, which is checked per (output, step); the
    entries that fail that bound have their products' lowest bit itself formed the same way, from
    powers ``2**(-p low)``.  The entries that fail take the sum of their truncated terms instead
    (:func:`_cut_sums`; ``"paired"``: their step through the operand path, as 1 x 1 tiles), and
    every entry rounds as the operand path would; where more than an eighth fail at a step, the
    operand path takes the rest of K.  C is cut to the step's grid only where its last
    bit lies below it.
    ``"scaled"`` (``scales`` as :func:`run_operands` takes them, E8M0, one block per step): every
    product of an output's step carries the same two scales, a power of two ``2**Q``, which
    multiplies its exact sum and adds ``Q`` to its exponents and to its lowest bits alike.
    Applies to float32 outputs, finite scales and C far from overflow, datapaths where a zero
    product's exponent never wins, and where a 32 x 32 sample of 32 steps passes the check; from a
    chunk of steps holding a non-finite code on, the operand path takes the rest of K.
    """
    plan = _plan(ins, a, b, c, fa, fb, scales)
    if plan is None:
        return None
    M, N = c.shape
    # blocks of rows of about _EXACT_OUT outputs: each block's per-output arrays stay that size
    out = np.empty((M, N), np.float32)
    rows = max(1, _EXACT_OUT // N)
    with np.errstate(invalid="ignore", over="ignore"):
        for r0 in range(0, M, rows):
            r1 = min(M, r0 + rows)
            out[r0:r1] = _chain(plan, a[r0:r1], b, np.array(c[r0:r1], np.float32), r0)
    return out


def _plan(ins, a, b, c, fa, fb, scales):
    """What the route knows of a tile once it serves it (the instruction and formats, the per-code
    tables, the scales' exponents ``qa`` (S, M) and ``qb`` (S, N) or ``None``, and the facts that
    follow), or ``None`` where it does not apply (see :func:`run_exact`)."""
    M, K = a.shape
    N = b.shape[0]
    L, F = ins.step, ins.frac_bits
    paired = ins.datapath == "paired"
    (_, xa, lo_a), (_, xb, lo_b) = operand_tables(fa, np.float32), operand_tables(fb, np.float32)
    floor_e = lo_a + lo_b               # the smallest exponent of a non-zero product
    if ins.out != "float32" or M * N < _EXACT_MIN or K < L:
        return None
    qa = qb = None
    qmin = qmax = 0
    if scales is not None:
        (sva, sea), (svb, seb), sblock = scales
        if (ins.datapath != "scaled" or ins.scales != ("ue8m0",) or sblock != L
                or np.isnan(sva).any() or np.isnan(svb).any()):
            return None
        qa, qb = sea[:, :, 0].astype(np.int16), seb[:, :, 0].astype(np.int16)       # (S, M), (S, N)
        # a real product's exponent is at least floor_e + Q: a zero product's must stay below it
        qmin = int(qa.min()) + int(qb.min())
        if ins.zero_exp > floor_e + qmin:
            return None
        qmax = int(qa.max()) + int(qb.max())
    elif not (paired or (ins.datapath == "fused" and ins.zero_exp <= floor_e)):
        return None
    # per code: float64 values (non-finite ones zeroed) and the exponents of their lowest set bits
    (va_t, _), (vb_t, _) = value_tables(fa), value_tables(fb)
    p = SimpleNamespace(ins=ins, fa=fa, fb=fb, scales=scales, K=K, N=N, L=L, F=F, paired=paired, xa=xa, xb=xb,
              floor_e=floor_e, qa=qa, qb=qb, va_t=va_t, vb_t=vb_t, la_t=low_bit_table(fa), lb_t=low_bit_table(fb),
              S=K // L, zero_mark=max(ins.zero_exp, -900) if paired else ins.zero_exp)
    # a sample decides whether enough entries pass (ignoring C, which only adds failures)
    rs, cs, s1 = min(M, 32), min(N, 32), min(p.S, 32)
    E = _exponents(p, _per_step(xa, a[:rs, :s1 * L], L).transpose(1, 2, 0),
                   _per_step(xb, b[:cs, :s1 * L], L).transpose(1, 2, 0))
    low = _lowest(a[:rs, :s1 * L], p.la_t, L)[:, :, None] + _lowest(b[:cs, :s1 * L], p.lb_t, L)[:, None, :]
    if np.mean(low >= E - F) < _EXACT_SHARE:
        return None
    cmax = float(np.abs(c).max(initial=0.0))
    vmax = float(np.abs(va_t).max()) * float(np.abs(vb_t).max())
    if not cmax + 2.0 * K * vmax * 2.0 ** qmax < 2.0 ** 126:
        return None          # a non-finite C, or sums that could overflow: the operand path
    # the scales known, the smallest real product exponent is too (see zero_c_matters)
    p.zero_c = zero_c_matters(ins, floor_e) if qa is None else floor_e + qmin < OUTPUT_TYPES[ins.out].emin
    p.coarse = not p.zero_c and F <= kept_bits(ins)
    p.F2, p.c_bits = ins.pair_bits, OUTPUT_TYPES[ins.out].frac_bits
    # each step's largest product exponent and lowest product bit, where the float types allow, from
    # matrix products of powers of two (_power_tables): the bits' bound per row and column above
    # only sends an entry to have its lowest bit formed
    p.powers = _power_tables(fa, fb, L, "exponent")
    p.lows = _power_tables(fa, fb, L, "low")
    return p


def _exponents(p, ea, eb):
    """Largest product exponents of steps from their int8 exponents ea (..., L, rows) and
    eb (..., L, cols), in blocks of rows of about ``OP_TILE`` products."""
    L = p.L
    rows = ea.shape[-1]
    xm = np.empty(ea.shape[:-2] + (rows, eb.shape[-1]), np.int8)
    step = max(1, OP_TILE // (L * eb.shape[-1] * int(np.prod(ea.shape[:-2]))))
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        np.add(ea[..., :, r0:r1, None], eb[..., :, None, :]).max(axis=-3, out=xm[..., r0:r1, :])
    E = xm.astype(np.int16)
    E[xm < p.floor_e] = p.zero_mark                      # all products zero (a zero's marker)
    return E


def _per_step(table, codes, L):
    """A per-code table gathered for codes (rows, steps * L), as (rows, steps, L)."""
    return np.take(table, codes).reshape(len(codes), -1, L)


def _lowest(codes, table, L):
    """Lowest set bits per (step, row): a product's is at least its row's plus its column's."""
    return _per_step(table, codes, L).min(axis=2).T


def _failing(p, low, Ep, E):
    """The entries of a step whose products (lowest bits ``low``) the step's grid would cut."""
    if p.paired:
        return (low < Ep - p.F) | (low < E - (p.F2 + 1))
    return low < E - p.F


def _chain(p, a, b, cb, r0):
    """D of the rows of a (m, K) with their C (m, N, overwritten), the first of them row r0 of
    the tile: its steps in chunks, each chunk's products one batched matrix product."""
    L, S = p.L, p.S
    m = len(a)
    rs = slice(r0, r0 + m)
    # chunks of steps of about _EXACT_OUT outputs, or as many decoded elements of A and B; the
    # first of two steps (where C from the steps before cuts many entries, the operand path
    # takes the rest of K early, having decoded little)
    g = max(1, min(S, _EXACT_OUT // (m * p.N), _EXACT_OUT // ((m + p.N) * L)))
    g1 = 0
    while g1 < S:
        g0, g1 = g1, min(S, g1 + (min(g, 2) if g1 == 0 else g))
        ac, bc = a[:, g0 * L:g1 * L], b[:, g0 * L:g1 * L]
        if any_nonfinite(ac, p.fa) or any_nonfinite(bc, p.fb):
            # a non-finite code: the operand path takes the rest of K from here
            return run_operands(p.ins, a[None, :, g0 * L:], b[None, :, g0 * L:], cb[None], p.fa, p.fb,
                                 _scale_rows(p.scales, slice(g0, S), rs))[0]
        ch = _chunk(p, ac, bc, g0, g1, rs)
        for s in range(g0, g1):
            new = _step(p, ch, s, cb, a, b, rs)
            if new is None:
                # many entries fail from here (a C far above the products cuts them; past
                # about an eighth, the per-entry work costs more than the operand path): the
                # operand path takes the rest of K from this step's C
                rest = slice(s * L, p.K)
                return run_operands(p.ins, a[None, :, rest], b[None, :, rest], cb[None], p.fa, p.fb,
                                     _scale_rows(p.scales, slice(s, S), rs))[0]
            cb = new
    return cb


def _chunk(p, ac, bc, g0, g1, rs):
    """A chunk's codes ac (m, steps * L) and bc decoded once: values (float64; times their step's
    scale), their steps' sums (one batched matrix product), lowest bits per (step, row), and the
    exponents (or the sums of powers that give each step's largest)."""
    L = p.L
    ch = SimpleNamespace(ac=ac, bc=bc, g0=g0, LX=None)
    ch.la, ch.lb = _lowest(ac, p.la_t, L), _lowest(bc, p.lb_t, L)        # (steps of the chunk, rows)
    ch.VA, ch.VB = _per_step(p.va_t, ac, L), _per_step(p.vb_t, bc, L)
    if p.qa is not None:
        ch.VA *= pow2(p.qa[g0:g1, rs].T)[:, :, None]
        ch.VB *= pow2(p.qb[g0:g1].T)[:, :, None]
    ch.sums = _step_sums(ch.VA, ch.VB, "sums")
    if p.powers is None:
        ch.EA = np.ascontiguousarray(_per_step(p.xa, ac, L).transpose(1, 2, 0))
        ch.EB = np.ascontiguousarray(_per_step(p.xb, bc, L).transpose(1, 2, 0))
    else:
        # the steps' sums of 2**(p * (e_a + e_b)): each one's binade gives its largest term's
        ch.PX = _step_sums(_per_step(p.powers[0], ac, L), _per_step(p.powers[1], bc, L), "px")
    return ch


def _step(p, ch, s, cb, a, b, rs):
    """The rounded result of step ``s`` (of the chunk ``ch``) for the rows of a with their C ``cb``,
    or ``None`` where more than an eighth of its entries fail (see :func:`run_exact`)."""
    ins, L, F, N = p.ins, p.L, p.F, p.N
    i = s - ch.g0
    x = ch.sums[i]
    Ep = _exponents(p, ch.EA[i], ch.EB[i]) if p.powers is None else _largest_sums(ch.PX[i], p.powers)
    zero = Ep < p.floor_e if int(Ep.min()) < p.floor_e else None     # steps of zero products
    ec = c_exponents(cb, ins, p.zero_c)
    low = ch.la[i][:, None] + ch.lb[i][None, :]
    Q = None
    if p.qa is not None:
        # the step's scales 2**Q add to its real products' exponents and low bits
        Q = p.qa[s, rs, None] + p.qb[s, None, :]
        low += Q
        Ep += Q
    if zero is not None:
        Ep[zero] = p.zero_mark
    E = np.maximum(Ep, ec)
    bad = _failing(p, low, Ep, E)
    if p.lows is not None and bad.any():
        # the entries the bound sends: their lowest product bits themselves (from the chunk's
        # matrix products of powers, formed at its first step that needs them)
        if ch.LX is None:
            ch.LX = _step_sums(_per_step(p.lows[0], ch.ac, L), _per_step(p.lows[1], ch.bc, L), "lx")
        low = -_largest_sums(ch.LX[i], p.lows)
        if Q is not None:
            low += Q
        bad = _failing(p, low, Ep, E)
    bad = np.flatnonzero(bad)
    if bad.size > x.size // 8:
        return None
    if p.paired:
        new = round_results(paired_finish(x, Ep, E, cb, ec, ins), ins)
        if bad.size:
            # the entries that fail: one step as 1 x 1 tiles, each its own output's
            fi, fj = np.divmod(bad, N)
            ks = slice(s * L, (s + 1) * L)
            new.ravel()[bad] = run_operands(ins, a[fi, None, ks], b[fj, None, ks],
                                             cb.ravel()[bad, None, None], p.fa, p.fb)[:, 0, 0]
        return new
    if bad.size:
        # the entries the grid cuts: their sums are of the truncated terms instead,
        # trunc(p * 2**(F - E)) in units of 2**(E - F) (each exact in float64: the
        # chunk's values carry their scales), the rest of the step as for every entry
        fi, fj = np.divmod(bad, N)
        x.ravel()[bad] = _cut_sums(ch.VA[fi, i], ch.VB[fj, i], E.ravel()[bad], F)
    _add_c(x, cb, E, ec, F, p.c_bits)
    return round_results(x, ins, E, coarse=p.coarse)


def _add_c(x, cb, E, ec, F, c_bits):
    """The step sums ``x`` plus C (in place), C truncated to the step's grid 2**(E - F) (exact sums in
    its units) where its last bit lies below it; elsewhere nothing is cut."""
    cut = E > ec + (F - c_bits)
    nc = np.count_nonzero(cut)
    if nc > cut.size // 4:
        sc = pow2(E, F, -1)
        x *= sc
        cs_ = cb * sc
        x += np.trunc(cs_, out=cs_)
        x /= sc
    elif nc:
        ci = np.flatnonzero(cut)
        xs = x.ravel()[ci]                # those entries' sums, before C is added
        x += cb
        sc = pow2(E.ravel()[ci], F, -1)
        xs *= sc
        xs += np.trunc(cb.ravel()[ci] * sc)
        xs /= sc
        x.ravel()[ci] = xs
    else:
        x += cb                   # C's last bit is on the grid everywhere


def _step_sums(A, B, name):
    """Per step, the sums over its L products of A (rows, steps, L) times B (cols, steps, L): one
    batched matrix product, (steps, rows, cols), into this thread's work array ``name`` (fresh
    arrays of a chunk's size are page-faulted in on every chunk)."""
    out = work(name, A.shape[1] * len(A) * len(B), np.result_type(A, B)).reshape(A.shape[1], len(A), len(B))
    return np.matmul(A.transpose(1, 0, 2), B.transpose(1, 2, 0), out=out)


def _cut_sums(pa, pb, E, F):
    """Sums of truncated terms, ``sum(trunc(pa * pb * 2**(F - E))) * 2**(E - F)`` along the last
    axis: the sums of the exact GEMM route's entries whose step grid ``2**(E - F)`` cuts their
    products.  ``pa``, ``pb`` (entries, L) hold the float64 values (scales included) of each entry's
    row of A and column of B in the step, E (entries) its largest exponent; every product, term
    and sum is exact in float64."""
    f = pow2(E, F, -1)
    t = np.multiply(pa, pb)
    t *= f[:, None]
    return np.trunc(t, out=t).sum(axis=1) / f


def _scale_rows(scales, steps, rows):
    """:func:`run_operands`'s scales (or ``None``) of a range of steps (one block each) and rows of A."""
    if scales is None:
        return None
    (sva, sea), (svb, seb), block = scales
    return (sva[steps, rows], sea[steps, rows]), (svb[steps], seb[steps]), block


def _power_tables(fa, fb, L, what):
    """Per-code ``2**(p * v)`` of fa and of fb, for :func:`_largest_sums`: ``v`` the code's MMA-Sim
    exponent (``what="exponent"``) or minus the exponent of its lowest set bit (``"low"``), zero
    codes 0; p the smallest integer above ``log2(L)``.  Returns the two tables, the float type's
    integer type, exponent bias and fraction bits, and p; or ``None`` where no float type holds them.

    A step's sum of ``2**(p * (v_a + v_b))`` over its L products lies in ``[2**(p V), L * 2**(p V)]``,
    V the largest ``v_a + v_b``: a float sum of non-negative terms is never below its largest, and
    L times it stays below ``2**(p V + p)`` whatever the rounding, so ``floor(binade / p)`` is V.
    The type is the narrower of float32 and float64 whose normal range holds every such sum, and
    where a sum of zero (no non-zero product, binade field 0) reads below every real V.
    """
    key = ("powers", what, fa.name, fb.name, L)
    if key not in _POWERS:
        if what == "exponent":
            (_, ea, _), (_, eb, _) = operand_tables(fa, np.float32), operand_tables(fb, np.float32)
            ea, eb = (np.where(e == ZERO_OPERAND_EXP, ZERO_LOW, e.astype(int)) for e in (ea, eb))
        else:
            ea, eb = (np.where(t == ZERO_LOW, ZERO_LOW, -t.astype(int)) for t in (low_bit_table(fa), low_bit_table(fb)))
        p = int(L).bit_length()
        real_a, real_b = ea[ea != ZERO_LOW], eb[eb != ZERO_LOW]
        _POWERS[key] = None
        if real_a.size and real_b.size:
            vmin = int(real_a.min() + real_b.min())
            lo, hi = p * vmin, p * (real_a.max() + real_b.max() + 1)
            for dt, it, bias, frac in ((np.float32, np.int32, 127, 23), (np.float64, np.int64, 1023, 52)):
                if lo >= 1 - bias and hi <= bias and -bias // p < vmin:
                    ta, tb = (np.where(v == ZERO_LOW, 0.0, np.ldexp(1.0, p * np.where(v == ZERO_LOW, 0, v)))
                              .astype(dt) for v in (ea, eb))
                    ta.flags.writeable = tb.flags.writeable = False
                    _POWERS[key] = ta, tb, it, bias, frac, p
                    break
    return _POWERS[key]


def _largest_sums(px, powers):
    """The largest ``v_a + v_b`` of steps (int16) from their sums ``px`` of powers (see
    :func:`_power_tables`; overwritten): ``floor((binade - bias) / p)``, which for a sum of zero
    (no non-zero product) is ``floor(-bias / p)``, below every real one."""
    _, _, it, bias, frac, p = powers
    f = px.view(it)
    f >>= frac
    f -= bias
    f //= p
    return f.astype(np.int16)
