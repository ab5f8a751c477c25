"""The wide route: rows of unbounded exponents (float64 output), from decoded operands.

Contract (:func:`run_wide`): a ``"fused"`` or ``"scaled"`` row whose output is float64
(:func:`fp8emu.gemm.models.wide_row`: the step widths of any width, exponents unbounded, a zero term
never setting the alignment), operands decoded to values and exponents, a ``"scaled"`` row's with
their block scales folded in (:func:`scaled_operand`); the result is the chain's last step result, in
float64 as the row's output type holds it.  The block-scaled models of :func:`fp8emu.block_scaled_mm` and the step widths no instruction
has take it; tests/test_gemm_routes.py holds it to the reference steps
(:func:`fp8emu.gemm.datapaths.reference`).

Each step is the reference step on K-major slabs (:func:`_dense_step`), or, where a step's terms
provably lose nothing to the alignment, one float64 matrix product per step (the exact fast path,
:func:`_mma_piece_fast`).
"""

from __future__ import annotations

import threading
from typing import NamedTuple

import numpy as np

from ... import parallel
from ..code_tables import ZERO_EXP, ZERO_LOW, low_bits, values_and_exponents
from ..aligned_sums import fused_step
from ..kernels import exp_span
from ..outputs import kept_bits, nearest, round_output


#: Elements of the (group, rows, N) product block of the dense step processed at once.
_BLOCK_ELEMS = 1 << 18
#: Multiply-adds below which OpenBLAS computes a matrix product on one thread.
_BLAS_SERIAL = 1 << 18
#: Step sums (rows x N x steps, float64) one batched matrix product forms on the fast path: 4 MiB
#: of them are still read back from the caches (1.03-1.07x against 16 MiB on this machine).
_STEP_CHUNK = 1 << 19


#: The rows the route serves carry a zero term's exponent at or below this: below every product of
#: operands of at most 8 bits and their block scales (E8M0 x E8M0 x the smallest subnormals:
#: about 2**-290) and every float32 C, so that a zero never sets a step's alignment, as the route
#: takes it (:func:`fp8emu.gemm.models.wide_row` gives -900).
ZERO_BELOW = -600


def serves(ins):
    """Whether the route serves the row ``ins`` (see :data:`ZERO_BELOW`).

    Examples
    --------
    >>> from fp8emu.gemm.catalogue import get_instruction
    >>> import dataclasses
    >>> hop = get_instruction("hopper-wgmma")
    >>> serves(hop), serves(dataclasses.replace(hop, out="float64", rounding="rz-e8m13", zero_exp=-900))
    (False, True)
    """
    return ins.out == "float64" and ins.datapath in ("fused", "scaled") and ins.zero_exp <= ZERO_BELOW


def scaled_operand(codes, fmt, scales, block):
    """A block-scaled operand as the wide route takes it: values ``v * s`` (rows, K), their exponents
    ``e(v) + floor(log2 s)`` (zero terms, a zero scale's too: :data:`ZERO_EXP`) and lowest set bits,
    from element ``codes`` (rows, K) of ``fmt`` and float64 ``scales`` (rows, ceil(K / block); no NaN:
    the caller gives a NaN-scaled row its NaN), worked out per (row, block) and broadcast over the
    block.  The lowest set bit of a product of binary numbers is the sum of theirs.

    Examples
    --------
    >>> from fp8emu.formats import get_format
    >>> v, e, low = scaled_operand(np.array([[0x38, 0x3C, 0]], np.uint8), get_format("e4m3fn"),
    ...                            np.array([[0.25]]), 32)
    >>> v.tolist(), e[0, :2].tolist(), low[0, :2].tolist()
    ([[0.25, 0.375, 0.0]], [-2, -2], [-2, -3])
    """
    K, (rows, nb) = codes.shape[1], scales.shape
    _, q = np.frexp(scales)
    zero_s = scales == 0
    q = np.where(zero_s, 0, q - 1).astype(np.int16)
    lq = low_bits(scales).astype(np.int16)
    va, ea, la = values_and_exponents(codes, fmt, lows=True)
    pad = nb * block - K
    if pad:
        va, ea, la = (np.pad(x, ((0, 0), (0, pad))) for x in (va, ea, la))
    # the gathered arrays are this call's own: scaled in place, and the zero terms' sentinels put
    # back only where there are any
    p, e2, l2 = (x.reshape(rows, nb, block) for x in (va, ea, la))
    zero = e2 == ZERO_EXP
    if zero_s.any():
        zero |= zero_s[:, :, None]
    p *= scales[:, :, None]
    e2 += q[:, :, None]
    l2 += lq[:, :, None]
    if zero.any():
        np.copyto(e2, np.int16(ZERO_EXP), where=zero)
        np.copyto(l2, np.int16(ZERO_LOW), where=zero)
    return p.reshape(rows, -1)[:, :K], e2.reshape(rows, -1)[:, :K], l2.reshape(rows, -1)[:, :K]


def run_wide(ins, va, ea, vb, eb, c=None, lows=None):
    """float64 (M, N) D of a ``"fused"`` row of unbounded exponents (:func:`fp8emu.gemm.models.wide_row`,
    float64 output) chained along K, from decoded operands: ``va`` (M, K) and ``vb`` (K, N) float64
    values (non-finite ones zeroed), ``ea`` / ``eb`` their int16 exponents (:data:`ZERO_EXP` for zero
    terms), as :func:`~fp8emu.gemm.code_tables.values_and_exponents` gives them; K is padded with
    zero terms to whole steps.  A ``"scaled"`` row's operands arrive scaled (:func:`scaled_operand`):
    a product's scales then join its exponent, as the datapath states.

    ``c``, a float32 (M, N) array (its values float32's) or None, is the accumulator input of the first
    step (the MMA's C operand): it joins that step's alignment as its running sum.
    ``lows``, optional: the operands' lowest-set-bit exponents (:func:`low_bits` of ``va`` and
    ``vb``), when the caller has them from per-code tables.  Steps whose terms provably lose
    nothing to the alignment take the exact fast path (:func:`_mma_piece_fast`); the others,
    entry by entry, the dense step (:func:`_dense_step`).
    """
    if not serves(ins):
        raise ValueError(f"{ins.name}: the wide route serves float64-output 'fused' / 'scaled' rows whose zero "
                         f"terms never set a step's alignment (zero_exp <= {ZERO_BELOW}) only")
    M, K = va.shape
    N = vb.shape[1]
    G = ins.step
    pad = (-K) % G
    if pad:
        ka, kb = ((0, 0), (0, pad)), ((0, pad), (0, 0))        # K is A's last axis and B's first
        va, vb = np.pad(va, ka), np.pad(vb, kb)
        ea, eb = np.pad(ea, ka, constant_values=ZERO_EXP), np.pad(eb, kb, constant_values=ZERO_EXP)
        if lows is not None:
            lows = np.pad(lows[0], ka, constant_values=ZERO_LOW), np.pad(lows[1], kb, constant_values=ZERO_LOW)
    ng = (K + pad) // G
    out = np.empty((M, N))
    threads = parallel.resolve_threads(None, M * N * K)
    rows = max(1, min(M, _BLOCK_ELEMS // max(1, N * G)))
    # Lowest exponent any non-zero term can have; all-zero steps are clamped to it
    # (their result is zero whatever the alignment).
    (lo_a, hi_a), (lo_b, hi_b) = exp_span(ea), exp_span(eb)
    e_floor = lo_a + lo_b - 2
    if c is not None:
        # C's terms are aligned like a running sum: the floor must reach its lowest exponent
        c = np.asarray(c, np.float64)
        nz = c[c != 0]
        if nz.size:
            e_floor = min(e_floor, int(np.frexp(np.abs(nz).min())[1]) - 2)
    fast = _fast_plan(va, ea, vb, eb, ins, e_floor, c, lows)
    if fast is not None:
        def row_block_fast(m0, m1):
            out[m0:m1] = _mma_piece_fast(fast, (m0, m1), (0, ng), ins, e_floor=e_floor,
                                         c_in=None if c is None else c[m0:m1], threads=threads)

        # row blocks of about 2**16 entries keep a step's (rows, N) arrays in cache
        rows_f = min(-(-M // max(1, min(threads, M))), max(1, (1 << 16) // max(1, N)))
        parallel.run(row_block_fast, parallel.split(0, M, -(-M // rows_f), 1), threads)
        return out
    _count(dense=M * N * ng)
    # K-major: a step's products and exponents are (group, rows, N) slabs, reduced over contiguous planes
    # (int16 holds a sum of two zero terms' exponents, -32000)
    # float32 products and step sums (fused_step's in32, half the memory traffic) are exact where the
    # operands' exponents lie within +-50: values of at most 12 bits from 2**(e - 8) to 2**(e + 2) give
    # normal float32 products of at most 24 bits; a step's E lies from e_floor to 121 (products below
    # 2**104, K below 2**16) or C's, so 2**(F - E) is normal; terms below 2**(F + 4) sum below 2**24
    F = ins.frac_bits
    in32 = (F + 4 + (G - 1).bit_length() <= 24 and min(lo_a, lo_b) >= -50 and max(hi_a, hi_b) <= 50
            and F - e_floor <= 126 and K < 1 << 16 and (c is None or np.abs(c).max(initial=0) < 2.0 ** 100))
    dt = np.float32 if in32 else np.float64
    vat, eat = np.ascontiguousarray(va.T, dt), np.ascontiguousarray(ea.T, dtype=np.int16)
    vb, eb = np.ascontiguousarray(vb, dt), np.ascontiguousarray(eb, dtype=np.int16)   # B may come column-major
    rows = -(-M // max(min(threads, M), -(-M // rows)))   # at least one block per core

    def row_block(m0, m1):
        part = np.zeros((m1 - m0, N)) if c is None else c[m0:m1].copy()
        # reused (group, rows, N) buffers: fresh arrays of this size are new pages every step
        P, E = np.empty((G, m1 - m0, N), dt), np.empty((G, m1 - m0, N), np.int16)
        for g in range(ng):
            sl = slice(g * G, (g + 1) * G)
            part = _dense_step(np.einsum("km,kn->kmn", vat[sl, m0:m1], vb[sl], out=P),
                               np.add(eat[sl, m0:m1, None], eb[sl, None], out=E), part, ins, e_floor, in32)
        # a zero step result is +0 whatever the signs that cancelled or truncated away (the
        # fixed-point sum has no signed zero; MMA-Sim's models agree, no recording shows -0)
        out[m0:m1] = part + 0.0

    # row blocks are independent, and NumPy releases the GIL in its loops: threads share them out
    parallel.run(row_block, parallel.split(0, M, -(-M // rows), 1), threads)
    return out


def _dense_step(P, E, part, ins, e_floor, in32=False):
    """The reference step (:func:`~fp8emu.gemm.aligned_sums.fused_step`, then the row's rounding) of
    products ``P`` (G, ...) with exponents ``E`` (zero terms below ``e_floor``) and the running sum
    ``part`` (...), every exponent taken at ``e_floor`` or above: a zero partial never sets the
    alignment, and the aligning powers of two stay finite."""
    _, ep = np.frexp(part)
    ep = np.where(part == 0, e_floor, np.maximum(ep - 1, e_floor))
    with np.errstate(invalid="ignore", over="ignore"):
        return round_output(fused_step(P, E, part, ep, ins.frac_bits, in32), ins)


# ----------------------------------------------------------------------------- the exact fast path
# A step's truncation to F fraction bits below its largest exponent E is the identity when every
# product and the incoming partial are multiples of 2**(E - F).  Per (row, step) and (step, column)
# the largest exponent H and the lowest set bit L of the operands bound that: with
# (Ha - La) + (Hb - Lb) <= F nothing of the products is cut (unless the partial raises E), and
# one float64 matmul per step gives their exact sum.  Entries failing a check take the
# per-entry copy of the dense step (:func:`_entry_step`).

#: Internal switch: None chooses, "dense" runs the reference step (:func:`_dense_step`) everywhere,
#: "fast" the fast path wherever its checks hold, "fallback" the fast path's machinery with every
#: entry sent through the per-entry step.  Tests force each in turn.
_PATH = None
#: The fast path's per-entry checks; tests drop one to show a case it guards.
#: "span": (Ha - La) + (Hb - Lb) <= F (and the 53-bit bound of the float64 sum);
#: "small_part": a nonzero partial is not cut by a larger step maximum;
#: "large_part": a partial that raises E does not cut the products.
_CHECKS = frozenset({"span", "small_part", "large_part"})
#: Entries x steps computed by each route since tests last zeroed them (tests read them).
COUNTERS = {"fast": 0, "fallback": 0, "dense": 0}
_COUNTER_LOCK = threading.Lock()
# the fast path pays off when at least this share of a sample of entries passes the span check
_FAST_SHARE = 0.5


def _count(**n):
    with _COUNTER_LOCK:
        for k, v in n.items():
            COUNTERS[k] += int(v)


def _group_bounds(e, low, G):
    """Per step: largest exponent H and lowest set bit L over each run of G along the rows (rows, steps)."""
    shape = (e.shape[0], e.shape[1] // G, G)
    return e.reshape(shape).max(axis=2).astype(np.int32), low.reshape(shape).min(axis=2).astype(np.int32)


class _FastOps(NamedTuple):
    """Row-major operands and per-step bounds for the fast path."""

    va: np.ndarray        # (M, K) float64
    vbt: np.ndarray       # (N, K) float64: B transposed, so both operands' steps are contiguous
    ea: np.ndarray        # (M, K) int16
    ebt: np.ndarray       # (N, K) int16
    ha: np.ndarray        # (M, steps) int32: largest exponent (zero-step sentinel)
    la: np.ndarray        # (M, steps) int32: lowest set bit (zero-step sentinel)
    hb: np.ndarray        # (steps, N)
    lb: np.ndarray        # (steps, N)
    f32_range: bool       # every partial stays below 2**126 in magnitude (and, as every term, 2**-126 or 0)


def _fast_plan(va, ea, vb, eb, ins, e_floor, c, lows):
    """The :class:`_FastOps` when the fast path applies to this product, else None.

    Global conditions: each step's result keeps at most F + 1 bits (so a partial that sets E is
    never cut), its exact sum fits float64, every term is a multiple of 2**(e_floor - F) (so the
    floor exponent never cuts one) and of 2**-126 (so no partial is a float32 subnormal), and C
    holds no -0.0 (whose sign the dense step keeps).
    """
    G, F = ins.step, ins.frac_bits
    glog = (G - 1).bit_length()
    if _PATH == "dense" or kept_bits(ins) > F or F + 3 + glog > 53:
        return None
    la_e, lb_e = lows if lows is not None else (low_bits(va), low_bits(vb))
    # a sample of entries decides whether enough of them pass the span check
    if _PATH is None and _span_share(ea[:32], la_e[:32], eb[:, :32], lb_e[:, :32], G, F) < _FAST_SHARE:
        return None
    lo_a, lo_b = int(la_e.min(initial=ZERO_LOW)), int(lb_e.min(initial=ZERO_LOW))
    if lo_a < ZERO_LOW and lo_b < ZERO_LOW and lo_a + lo_b < e_floor - F:
        return None
    lowest = lo_a + lo_b
    if c is not None:
        cz = c == 0
        if np.signbit(c[cz]).any():
            return None
        nz = c[~cz]
        if nz.size:
            lowest = min(lowest, int(low_bits(nz).min()))
            if lowest < e_floor - F:
                return None
    if lowest < -126:
        # a partial could land in float32's subnormal range, where a step's rounding to
        # sum_bits and float32's own grid part ways: the dense step decides there
        return None
    ha, la = _group_bounds(ea, la_e, G)
    ebt = np.ascontiguousarray(eb.T)
    hb, lb = (x.T.copy() for x in _group_bounds(ebt, np.ascontiguousarray(lb_e.T), G))
    # |partial| <= |C| + K max|a| max|b|, |a| < 2**(H + 2) (a scaled operand's exponent can be one below
    # its value's binade); each step's rounding adds less than a factor 2 in all
    bound = va.shape[1] * 2.0 ** min(int(ha.max(initial=0)) + int(hb.max(initial=0)) + 5, 1000)
    bound += 0.0 if c is None else float(np.abs(c).max(initial=0))
    return _FastOps(np.ascontiguousarray(va, np.float64), np.ascontiguousarray(vb.T, np.float64),
                    np.ascontiguousarray(ea), ebt, ha, la, hb, lb, bound < 2.0 ** 126)


def _span_share(ea, la, eb, lb, G, F):
    """Share of the (row, step, column) entries of operands of exponents ``ea``, ``eb`` and lowest set
    bits ``la``, ``lb`` that pass the span check."""
    ha, la = _group_bounds(ea, la, G)
    hb, lb = (x.T for x in _group_bounds(eb.T, lb.T, G))
    zero = (ha <= ZERO_EXP)[:, :, None] | (hb <= ZERO_EXP)[None, :, :]
    if zero.size == 0:
        return 1.0                  # no entries: none fails the check
    return float(np.mean(zero | ((ha - la)[:, :, None] + (hb - lb)[None, :, :] <= F)))


def _entry_step(ops: _FastOps, mi, ni, sl, part, ins, e_floor):
    """The dense step (:func:`_dense_step`) for the entries (mi, ni) alone: their new partials."""
    P = (ops.va[mi, sl] * ops.vbt[ni, sl]).T                      # (G, n): exact products
    return _dense_step(P, (ops.ea[mi, sl].astype(np.int32) + ops.ebt[ni, sl]).T, part, ins, e_floor)


def _round_in_place(s, bits, rne):
    """Round normal float64 values (or zeros) in place to ``bits`` significant bits on their bit
    patterns: the same values as :func:`~fp8emu.gemm.outputs.round_output` (normal results)."""
    u = s.view(np.int64)
    drop = 53 - bits
    if drop <= 0:
        return
    if rne:
        lsb = np.right_shift(u, drop)
        np.bitwise_and(lsb, 1, out=lsb)
        u += np.int64((1 << (drop - 1)) - 1)
        u += lsb
    u &= np.int64(-(1 << drop))


def _mma_piece_fast(ops: _FastOps, rows, steps, ins, *, e_floor, c_in, threads):
    """The steps of :func:`_dense_step` by the fast path: one float64 matmul per step, checks per entry.

    Steps rounded to nearest even at 24 bits keep their partials in float32, so one add with a
    float32 output both sums and rounds, where no partial can leave float32's normal range (where
    that cast and the 24-bit rounding part ways: :attr:`_FastOps.f32_range`); float64 partials
    elsewhere.
    """
    f32 = nearest(ins) and kept_bits(ins) == 23 and ops.f32_range
    (m0, m1), (g0, g1) = rows, steps
    G, F, B = ins.step, ins.frac_bits, kept_bits(ins) + 1
    N = ops.vbt.shape[0]
    shape = (m1 - m0, N)
    part = np.zeros(shape, np.float32 if f32 else np.float64)
    if c_in is not None:
        part[...] = c_in
    ap, t = np.empty(shape), np.empty(shape)
    ok, ok2, bad = np.empty(shape, bool), np.empty(shape, bool), np.empty(shape, bool)
    fs = F if "span" in _CHECKS else 1 << 30
    fs = min(fs, 51 - (G - 1).bit_length())
    ha, la = ops.ha[m0:m1], ops.la[m0:m1]
    zero_a, zero_b = ha <= ZERO_EXP, ops.hb <= ZERO_EXP
    da = np.where(zero_a, -(1 << 20), ha - la)
    db = np.where(zero_b, -(1 << 20), ops.hb - ops.lb)
    with np.errstate(over="ignore", under="ignore"):
        # |part| < tla * tlb  <=>  floor(log2|part|) <= La + Lb + F   (the products are not cut)
        tla = np.where(zero_a, np.inf, np.ldexp(1.0, np.clip(la + F + 1, -1070, 1020)))
        tlb = np.where(zero_b, np.inf, np.ldexp(1.0, np.clip(ops.lb, -1070, 1020)))
        # |part| >= tha * thb  <=>  floor(log2|part|) >= Ha + Hb - F + B - 1   (the partial is not cut)
        tha = np.where(zero_a, 0.0, np.ldexp(1.0, np.clip(ha - F + B - 1, -1070, 1020)))
        thb = np.where(zero_b, 0.0, np.ldexp(1.0, np.clip(ops.hb, -1070, 1020)))
    span_ok = da.max(axis=0, initial=-(1 << 20)) + db.max(axis=1, initial=-(1 << 20)) <= fs
    force_fallback = _PATH == "fallback"
    chunk = max(1, min(g1 - g0, _STEP_CHUNK // max(1, shape[0] * N)))
    sub = shape[0] if threads <= 1 else max(1, _BLAS_SERIAL // (G * N))
    S = np.empty((chunk,) + shape)
    va3 = ops.va[m0:m1].reshape(shape[0], -1, G)
    vb3 = ops.vbt.reshape(N, -1, G).transpose(1, 2, 0)       # (steps, G, N) views
    n_slow = 0
    for g in range(g0, g1):
        j = (g - g0) % chunk
        if j == 0:
            c1 = min(g1, g + chunk)
            for r in range(0, shape[0], sub):
                r1 = min(shape[0], r + sub)
                np.matmul(va3[r:r1, g:c1].transpose(1, 0, 2), vb3[g:c1], out=S[:c1 - g, r:r1])
        first_c = c_in is not None and g == g0
        bp = 24 if first_c else B        # bits of the incoming partial (C is float32)
        if force_fallback:
            ok.fill(False)
        else:
            np.abs(part, out=ap)
            if bp > F + 1:
                # a partial that sets E would be cut: only a zero partial passes
                np.equal(ap, 0, out=ok)
            else:
                if "large_part" in _CHECKS:
                    np.multiply(tla[:, g:g + 1], tlb[g], out=t)
                    np.less(ap, t, out=ok)
                else:
                    ok.fill(True)
                if "small_part" in _CHECKS:
                    np.multiply(tha[:, g:g + 1], thb[g], out=t)
                    if bp != B:
                        t *= 2.0 ** (bp - B)
                    np.greater_equal(ap, t, out=ok2)
                    np.equal(ap, 0, out=bad)
                    ok2 |= bad
                    ok &= ok2
            if not span_ok[g]:
                ok &= (da[:, g:g + 1] + db[g]) <= fs
        np.logical_not(ok, out=bad)
        idx = np.flatnonzero(bad)
        if idx.size:
            mi, ni = np.divmod(idx, N)
            old = part[mi, ni].astype(np.float64)
            slow = _entry_step(ops, mi + m0, ni, slice(g * G, (g + 1) * G), old, ins, e_floor)
            n_slow += idx.size
        # exact: every term is a multiple of 2**(E - F); the float32 output rounds once (RNE)
        np.add(part, S[j], out=part, casting="same_kind")
        if not f32:
            _round_in_place(part, B, nearest(ins))
        if idx.size:
            part[mi, ni] = slow
    _count(fast=(g1 - g0) * part.size - n_slow, fallback=n_slow)
    return part
