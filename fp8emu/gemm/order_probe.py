"""Revealing the summation order of a black-box float32 GEMM by probing it (a :class:`~fp8emu.gemm.sumtree.GemmOrder`).

Revealing (FPRev, Xie et al., USENIX ATC '25, arXiv 2411.00442): with every term 1 except
``+B`` at ``i`` and ``-B`` at ``j``, where ``B`` is so large that adding any partial sum of ones
to it changes nothing, the result is the number of ones summed *outside* the smallest subtree
holding both ``i`` and ``j``: ``L(i, j) = K - result`` is that subtree's size.  For a set of
leaves with pivot ``i`` (its smallest index), the leaves grouped by ``L(i, j)`` are the sibling
subtrees met on the way from ``i`` to the set's root, smallest first; each group is revealed
the same way.  A GEMM answers many queries at once: output ``(m, n)`` sums row ``m`` of A
against column ``n`` of B, so ``+B`` in B's column ``n`` at ``i_n`` and ``-B`` in A's row
``m`` at ``j_m`` asks ``(i_n, j_m)`` there (:func:`reveal`).  Where the outputs do not share
one tree (a kernel's edge tiles sum in another order), every query is asked of all outputs at
once and the outputs are grouped by their answers (:func:`reveal` with ``uniform=False``).

Where the sums start (:class:`~fp8emu.gemm.sumtree.SumTree`'s ``start``, the sign of a zero) is asked with
products of -0 terms: all of them, then (per tree) all but each partial sum's first, which underflows.
Each leaf a tree joins to a partial sum is asked whether it is fused or rounded first (a tree without FMA,
or ``lone``: a K block of one product, a partial sum of its own), at every output where outputs differ:
with the partial sum 1 and the leaf's product just over ``2**-24``, an FMA gives ``1 + 2**-23`` and a
rounded product added gives the tie's even neighbour 1.

Examples
--------
>>> import numpy as np
>>> from fp8emu.gemm.sumtree import SumTree, evaluate
>>> order, facts = reveal(lambda a, b: evaluate(SumTree.blocks([0, 3, 6]), a, b), 2, 6, 2)
>>> order.describe(), facts["explained"]
('fma [0:3] + [3:6]', 1.0)
"""

from __future__ import annotations

import numpy as np

from ..interop import is_integer
from .sumtree import STARTS, GemmOrder, SumTree, evaluate, evaluate_order

__all__ = ["reveal", "check_order", "NotATreeError", "ProbeBudgetError"]

#: A float32 whose square (2**-200, negated) underflows: the start probe's first products.
_UNDER = np.float32(2.0 ** -100)
#: Factors of the lone probe's product 2**-24 (1 + 2**-24 - 2**-35): it rounds to 2**-24, which a partial sum
#: of 1 meets at a tie (to even: 1), while the exact product, fused, lies past the tie (1 + 2**-23).
_LONE_X, _LONE_Y = np.float32(1 + 2.0 ** -12 + 2.0 ** -23), np.float32(2.0 ** -24 - 2.0 ** -36)


class NotATreeError(ValueError):
    """The probed sums are not one fixed binary tree of float32 additions."""


class ProbeBudgetError(RuntimeError):
    """Revealing the order took more products than :func:`reveal`'s ``max_calls`` allows."""


def _big(K):
    # every partial sum of ones (at most K) must vanish against B: K < ulp(B) / 2 = B * 2**-24
    return np.float32(2.0 ** (26 + int(np.ceil(np.log2(max(K, 2))))))


def _float32_answer(raw, M, N, who, caller):
    """A black box's answer as float32 (M, N), or one error.  A cast alone would drop a complex answer's
    imaginary part, parse strings and round wider floats into sums the GEMM did not make (an order then
    "held" against made-up outputs): wider floats are taken only where they hold float32 values."""
    out = np.asarray(raw)
    if out.shape != (M, N):
        raise ValueError(f"the {who} GEMM returned shape {out.shape}, expected {(M, N)}")
    if out.dtype.kind != "f":
        raise TypeError(f"the {who} GEMM returned {out.dtype} values; {caller} needs the float32 results of a "
                        "float32 GEMM")
    out32 = out.astype(np.float32)
    if out.dtype != np.float32 and not np.array_equal(out32.astype(np.float64), out.astype(np.float64),
                                                      equal_nan=True):
        raise ValueError(f"the {who} GEMM returned {out.dtype} values that are not float32 values; {caller} "
                         "needs the float32 results of a float32 GEMM")
    return out32


def reveal(mm, M, K, N, *, uniform=True, check=6, seed=0, max_calls=None):
    """The summation order of the float32 GEMM ``mm`` at shape (M, K, N), found by probing.

    Parameters
    ----------
    mm : callable
        ``mm(a, b)`` with float32 arrays (M, K) and (K, N) returns their float32 (M, N) product:
        the black box (``torch.mm`` on the CPU, a BLAS).
    M, K, N : int
        The shape probed; the order may depend on each.
    uniform : bool, keyword-only
        First try one tree for every output (queries packed M x N per call); when random
        products disagree with it, every output is probed on its own.  False: the latter only.
    check : int, keyword-only
        Random products each candidate must reproduce bit for bit (``fma`` is decided by them); at
        least 1.
    seed : int, keyword-only
        Non-negative; seeds the random products.
    max_calls : int or None, keyword-only
        The most products to compute; past it :class:`ProbeBudgetError`.  A tree as deep as it is long
        (a sum taken from its last term) takes about ``K**2 / (2 max(M, N))``; None: no limit.

    Returns
    -------
    (GemmOrder, dict)
        The order, and facts: ``calls`` (products computed), ``explained`` (fraction of outputs
        the order reproduced on every check).

    Examples
    --------
    >>> import numpy as np
    >>> order, facts = reveal(lambda a, b: evaluate(SumTree.blocks([0, 4, 8]), a, b), 2, 8, 2)
    >>> order.describe(), facts["explained"]
    ('fma [0:4] + [4:8]', 1.0)
    """
    M, K, N = _box_shape(mm, M, K, N, "reveal")
    if not isinstance(uniform, bool):
        raise TypeError(f"uniform must be True or False, got {uniform!r}")
    # with no random products checked every candidate would "explain" every output
    if not is_integer(check) or check < 1:
        raise ValueError(f"check must be a positive integer (random products the order must reproduce), got {check!r}")
    if not is_integer(seed) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if K > 1 << 20:
        raise ValueError(f"reveal handles K up to 2**20, got {K}")
    if max_calls is not None and (not is_integer(max_calls) or max_calls < 1):
        raise ValueError(f"max_calls must be a positive integer or None, got {max_calls!r}")
    calls = [0]

    def call(a, b):
        # each round of the probe resolves one level of the tree: a sum taken from its last term took K rounds
        # (4x200x4: 5117 products; 2x1200x2 had not finished after minutes)
        if max_calls is not None and calls[0] >= max_calls:
            raise ProbeBudgetError(f"revealing the {M}x{K}x{N} order took more than {max_calls:,} products (a "
                                   "tree as deep as it is long, such as a sum taken from its last term, takes about "
                                   "K**2 / (2 max(M, N)))")
        calls[0] += 1
        return _float32_answer(mm(a, b), M, N, "probed", "reveal")

    trials = _trials(M, K, N, check, seed)
    wants = [call(a, b) for a, b in trials]
    # where sums start (random products are never zero, so the checks cannot tell): products all -0, and
    # (asked once per tree's spine starts, by _fit) products -0 but those starting a spine, which underflow
    zeros, under = call(*_start_operands(M, K, N, ())), {}

    def probe(first):
        if first not in under:
            under[first] = call(*_start_operands(M, K, N, first))
        return under[first]

    def lone(tree, mask, full):
        return _lone_leaves(call, tree, mask, full)

    order = None
    if uniform and K > 1:
        try:
            nested = _reveal_packed(call, M, K, N)
        except NotATreeError:          # the outputs do not share one tree: ask each on its own
            nested = None
        if nested is not None:
            order, explained = _fit([nested], np.zeros((M, N), np.int16), trials, wants, zeros, probe, lone)
            if explained < 1.0:
                order = None
    if order is None:
        if K == 1:
            nested, classes = [0], np.zeros((M, N), np.int16)
        else:
            nested, classes = _reveal_each(call, M, K, N)
        order, explained = _fit(nested, classes, trials, wants, zeros, probe, lone)
    return order, {"calls": calls[0], "explained": explained}


def _box_shape(mm, M, K, N, who):
    """``(M, K, N)`` as Python ints, after checking them and the black box ``mm`` (one line each)."""
    if not all(is_integer(v) for v in (M, K, N)):
        raise TypeError(f"{who} needs integers M, K, N, got {M!r}, {K!r}, {N!r}")
    M, K, N = int(M), int(K), int(N)
    if min(M, K, N) < 1:
        raise ValueError(f"{who} needs M, K, N >= 1, got {M}x{K}x{N}")
    if not callable(mm):
        raise TypeError(f"{who} needs a callable mm(a, b), got {type(mm).__name__}")
    return M, K, N


def _trials(M, K, N, n, seed):
    rng = np.random.default_rng(seed)
    out = []
    for t in range(n):
        a = rng.standard_normal((M, K)).astype(np.float32)
        b = rng.standard_normal((K, N)).astype(np.float32)
        if t % 2:                                   # wide magnitudes: cancellation and swamping
            a *= np.exp2(rng.integers(-12, 13, (M, K))).astype(np.float32)
        out.append((a, b))
    return out


def _start_operands(M, K, N, first):
    """Operands whose products are all -0 (0 x -1) but those of the leaves ``first``: -2**-200, which rounds
    to -0 and is no zero.  A partial sum started at such a leaf is -0 (``"product"``, ``"fma"``) or +0
    (``"add"``); with ``first`` empty, -0 (``"product"``) or +0 (both others).  Adding -0 products keeps
    either, and -0 + +0 is +0, so an output is -0 only where every partial sum started -0."""
    a = np.zeros((M, K), np.float32)
    b = np.full((K, N), -1.0, np.float32)
    first = list(first)
    a[:, first] = -_UNDER
    b[first, :] = _UNDER
    return a, b


def _zero_sign(v):
    """(-0, +0) masks of an answer."""
    return (v == 0) & np.signbit(v), (v == 0) & ~np.signbit(v)


def _fit(nested, classes, trials, wants, zeros, probe, lone):
    """Choose fma per output by the checks (a kernel's edge tiles may multiply and add apart) or, where they leave
    outputs unexplained, by which joined leaves each output rounds before adding (``lone(tree, mask)``: none,
    FMA; all, no FMA; some, lone leaves), and where sums start by ``zeros`` (the answer to products all -0) and
    ``probe(first)`` (the answer where the products starting the tree's spines, ``first``, underflow); the order
    and the fraction of outputs it explains."""
    minus, plus = _zero_sign(zeros)
    trees, out, ok = [], np.zeros(classes.shape, np.int16), np.zeros(classes.shape, bool)

    def matches(tree, mask):
        g = mask.copy()
        for (a, b), want in zip(trials, wants):
            got = evaluate(tree, a, b)
            g &= (got.view(np.int32) == want.view(np.int32)) | (np.isnan(got) & np.isnan(want))
        return g

    def explained(cands, mask):
        return np.array_equal(np.logical_or.reduce([e[1] for e in cands]), mask) if cands else False

    for c, t in enumerate(nested):
        mask = classes == c
        fused = SumTree.from_nested(t) if isinstance(t, tuple) else SumTree(1, np.zeros((0, 2)))
        plain = SumTree(fused.K, fused.children, False)
        joined = fused.K - len(fused.spine_starts())
        good = []                    # (tree, outputs it explains, outputs it may take, from the leaf probe)

        def probed(groups):
            # none rounded: the FMA tree; all: the tree without FMA (whose partial sums start as its own do,
            # where a lone leaf would start one of its own); some: K blocks of one product summed apart
            out = []
            for leaves, sel in groups:
                tree = fused if not leaves else plain if len(leaves) == joined else fused.with_lone(leaves)
                out.append((tree, matches(tree, sel), sel, True))
            return out

        if joined:
            # which joined leaves each output rounds before adding is asked of the box, not left to the random
            # products (a fused and a rounded leaf differ on few of them where K or M x N is small: a 1x10x2 box
            # with a lone leaf passed for the fused tree).  One round first; where its trees leave outputs
            # unexplained, every leaf at every output
            groups, final = lone(fused, mask, False)
            good = probed(groups)
            if not final and not explained(good, mask):
                good = probed(lone(fused, mask, True)[0])
        for tree in (fused, plain):  # for outputs the probe's trees do not explain (or K = 1)
            if explained(good, mask):
                break
            good.append((tree, matches(tree, mask), mask, False))
        # each output takes the tree that explains most outputs among those that explain it (FMA first on a tie),
        # the leaf probe's trees before the others; an output none explains takes the first that may take it,
        # and stays unexplained
        good.sort(key=lambda e: (not e[3], -int(e[1].sum())))
        taken = ~mask
        parts = []
        for tree, g, may, _ in good:
            sel = g & ~taken
            taken |= sel
            parts.append([tree, sel, g, may])
        for part in parts:
            rest = ~taken & part[3]
            part[1] |= rest
            taken |= rest
        for tree, sel, g, _ in parts:
            if not sel.any():
                continue
            # asked per part: a tree with lone leaves starts more partial sums than the same tree without
            u_minus, u_plus = _zero_sign(probe(tuple(tree.spine_starts())))
            # each start's outputs a tree of their own; outputs neither answer fits are left unexplained
            start = {"product": minus, "fma": plus & u_minus, "add": ~minus & ~(plus & u_minus)}
            fits = {"product": minus & u_minus, "fma": plus & u_minus, "add": plus & u_plus}
            for name in STARTS:
                s = sel & start[name]
                if s.any():
                    out[s], ok = len(trees), ok | (s & g & fits[name])
                    trees.append(tree.starting(name))
    return GemmOrder(trees, out), float(ok.mean())


#: The most (leaf, output) answers the lone probe keeps when it asks every leaf at every output (64 MiB).
_LONE_ALL = 1 << 26


def _lone_leaves(call, tree, mask, full):
    """``([(leaves, outputs)], final)``: the joined leaves of the FMA ``tree`` that are rounded before they are
    added (partial sums of their own), by output (every output of ``mask`` in one group); ``final``: asking
    with ``full`` would tell no more (every output answered every leaf, or that is too many answers).

    Each leaf joined to a partial sum is asked at the outputs of one column (or row) of ``mask``, as many
    leaves per product as it has columns: there the leaf's spine start has product 1, the leaf the product
    of ``_LONE_X`` and ``_LONE_Y``, every other product is 0, and an output answers 1 where the leaf is
    rounded first (1 + 2**-23 where it is fused).  Where the outputs along each column answer alike and not
    ``full``, one round: a leaf is rounded at every output where its column said so.  Otherwise every leaf is
    asked at every column in turn (one round per column: a kernel's edge rows and columns may sum another
    way), and the outputs are grouped by the leaves they round, unless that is over ``_LONE_ALL`` answers.
    """
    M, N = mask.shape
    K = tree.K
    asked = [(k, first) for first, items in tree.spines() for kind, k in items if kind == "leaf"]
    rows, cols = np.nonzero(mask.any(axis=1))[0], np.nonzero(mask.any(axis=0))[0]
    by_cols = cols.size >= rows.size
    lanes = cols if by_cols else rows
    if not asked or lanes.size == 0:
        return [((), mask)], True
    affordable = M * N * len(asked) <= _LONE_ALL
    answers = np.zeros((len(asked), M, N), bool) if affordable else None
    found, alike = [], True
    leaf = np.array([k for k, _ in asked], np.int64)
    first = np.array([f for _, f in asked], np.int64)
    # the outputs as the lanes see them: along the lane (rows of a column, or columns of a row)
    seen = mask if by_cols else mask.T
    for shift in range(lanes.size if affordable else 1):
        for i0 in range(0, len(asked), lanes.size):
            i = np.arange(i0, min(i0 + lanes.size, len(asked)))
            where = lanes[(i - i0 + shift) % lanes.size]
            # the side across the lanes is all ones but for the asked leaves' factor; each lane holds its own
            # leaf's spine start (1) and other factor, and zeros elsewhere
            across = np.ones(K, np.float32)
            across[leaf[i]] = _LONE_X
            own = np.zeros((K, N if by_cols else M), np.float32)
            own[first[i], where], own[leaf[i], where] = 1.0, _LONE_Y
            if by_cols:
                got = call(np.broadcast_to(across, (M, K)).copy(), own)
            else:
                got = call(own.T.copy(), np.broadcast_to(across[:, None], (K, N)).copy()).T
            vals = got[:, where] == 1.0                         # (outputs along the lane, leaves)
            if answers is not None:
                if by_cols:
                    answers[i, :, where] = vals.T
                else:
                    answers[i, where, :] = vals.T
            if shift == 0:
                at = seen[:, where]
                rounded, kept = np.all(vals | ~at, axis=0) & at.any(axis=0), np.all(~vals | ~at, axis=0)
                found += leaf[i][rounded].tolist()
                alike &= bool(np.all(rounded | kept))
        if shift == 0 and ((alike and not full) or answers is None):
            # final where no more answers can be kept: asking again with full would tell nothing more
            return [(tuple(sorted(found)), mask)], answers is None
    # outputs grouped by the leaves they round (each output has answered every leaf), by their answers' bytes
    # (np.unique over rows sorts them as records: 26 s for 36,864 outputs of 766 leaves)
    idx = np.flatnonzero(mask.reshape(-1))
    packed = np.packbits(answers.reshape(len(asked), -1)[:, idx].T, axis=1)
    groups = {}
    for i, row in zip(idx, packed):
        groups.setdefault(row.tobytes(), []).append(i)
    out = []
    for key, at in groups.items():
        sig = np.unpackbits(np.frombuffer(key, np.uint8))[:len(asked)]
        sel = np.zeros(M * N, bool)
        sel[at] = True
        out.append((tuple(sorted(asked[i][0] for i in np.flatnonzero(sig))), sel.reshape(M, N)))
    return out, True


def _assemble(structure, S):
    """Nested pairs of the set ``S`` from its pivot and sibling groups (no recursion on deep trees)."""
    memo = {}
    stack = [S]
    while stack:
        s = stack[-1]
        if len(s) == 1:
            memo[s] = s[0]
            stack.pop()
            continue
        i, groups = structure[s]
        pend = [g for _, g in groups if g not in memo]
        if pend:
            stack += pend
            continue
        t = i
        for _, g in groups:
            t = (t, memo[g])
        memo[s] = t
        stack.pop()
    return memo[S]


def _split(S, L):
    """Pivot and sibling groups of ``S`` given ``L[j]`` = size of the subtree joining pivot and j."""
    groups = {}
    for j in S[1:]:
        v = L[j]
        # a NaN, an infinity or a fraction is no subtree size: the box is no tree of float32 additions
        if not np.isfinite(v) or v != int(v):
            raise NotATreeError(f"the probed sums are not a summation tree (an answer of {float(v)!r}, not a whole "
                                "number of terms): the GEMM is not a fixed order of float32 additions at this shape")
        groups.setdefault(int(v), []).append(j)
    for size, g in groups.items():
        if size < 2 or size > len(S):
            raise NotATreeError("the probed sums are not a summation tree (an answer out of range): "
                             "the GEMM is not a fixed order of float32 additions at this shape")
    return S[0], sorted((s, tuple(g)) for s, g in groups.items())


def _reveal_packed(call, M, K, N):
    """One tree for all outputs: query (p, q) at output (m, n) with -B at A[m, p] and +B at B[q, n].

    Pivots ride on the shorter side (rows of A or columns of B), the leaves asked about on the
    longer, so one product answers up to M x N queries.
    """
    big = _big(K)
    piv_rows = M <= N                                # pivots on A's rows, leaves on B's columns
    n_piv, n_oth = (M, N) if piv_rows else (N, M)
    structure, todo = {}, [tuple(range(K))]
    while todo:
        pending = [(S[0], j) for S in todo for j in S[1:]]
        answers = {}
        while pending:
            pv, pset = [], set()
            for i, _ in pending:
                if i not in pset:
                    pset.add(i)
                    pv.append(i)
                    if len(pv) == n_piv:
                        break
            ov, oset = [], set()
            for i, j in pending:
                if i in pset and j not in oset and j not in pset:
                    oset.add(j)
                    ov.append(j)
                    if len(ov) == n_oth:
                        break
            # ov is never empty: the sets asked about are disjoint, so a pending leaf is no set's pivot,
            # and the first pending pair's pivot is in pset (the first pivot taken) with its leaf in ov
            a = np.ones((M, K), np.float32)
            b = np.ones((K, N), np.float32)
            rows, cols = (pv, ov) if piv_rows else (ov, pv)
            for m, j in enumerate(rows):
                a[m, j] = -big
            for n, i in enumerate(cols):
                b[i, n] = big
            c = call(a, b)
            if not piv_rows:
                c = c.T
            where_p = {i: r for r, i in enumerate(pv)}
            where_o = {j: r for r, j in enumerate(ov)}
            rest = []
            for i, j in pending:
                if i in where_p and j in where_o:
                    answers[(i, j)] = K - c[where_p[i], where_o[j]]
                else:
                    rest.append((i, j))
            pending = rest
        nxt = []
        for S in todo:
            L = {j: answers[(S[0], j)] for j in S[1:]}
            structure[S] = _split(S, L)
            nxt += [g for _, g in structure[S][1] if len(g) > 1]
        todo = nxt
    return _assemble(structure, tuple(range(K)))


def _reveal_each(call, M, K, N):
    """A tree per output: each query asked of every output at once, outputs grouped by their answers."""
    big = _big(K)
    a = np.ones((M, K), np.float32)
    b = np.ones((K, N), np.float32)
    # classes: label per output; each class has its own structure and todo list
    labels = np.zeros((M, N), np.int64)
    classes = {0: ({}, [tuple(range(K))])}
    while any(todo for _, todo in classes.values()):
        need = {}
        for lab, (_, todo) in classes.items():
            for S in todo:
                for j in S[1:]:
                    need.setdefault((S[0], j), []).append(lab)
        answers = {}
        for (i, j), labs in need.items():
            b[i, :] = big
            a[:, j] = -big
            got = K - call(a, b).astype(np.float64)
            if not np.all(np.isfinite(got) & (got == np.round(got))):
                raise NotATreeError("the probed sums are not a summation tree (an answer that is not a whole number "
                                    "of terms): the GEMM is not a fixed order of float32 additions at this shape")
            answers[(i, j)] = got.astype(np.int64)
            b[i, :] = 1
            a[:, j] = 1
        new_classes, new_labels = {}, np.full((M, N), -1, np.int64)
        for lab, (structure, todo) in classes.items():
            mask = labels == lab
            qs = [(S[0], j) for S in todo for j in S[1:]]
            if qs:
                sig = np.stack([answers[q][mask] for q in qs], axis=1)
                uniq, inv = np.unique(sig, axis=0, return_inverse=True)
            else:
                uniq, inv = np.zeros((1, 0), np.int64), np.zeros(int(mask.sum()), np.int64)
            idx = np.nonzero(mask)
            for u in range(uniq.shape[0]):
                st = dict(structure)
                L = dict(zip(qs, uniq[u].tolist()))
                nxt = []
                for S in todo:
                    st[S] = _split(S, {j: L[(S[0], j)] for j in S[1:]})
                    nxt += [g for _, g in st[S][1] if len(g) > 1]
                new = len(new_classes)
                new_classes[new] = (st, nxt)
                sel = inv.reshape(-1) == u
                new_labels[idx[0][sel], idx[1][sel]] = new
        classes, labels = new_classes, new_labels
    trees = {}
    nested, remap = [], {}
    for lab, (structure, _) in classes.items():
        t = _assemble(structure, tuple(range(K)))
        key = SumTree.from_nested(t).children.tobytes() if isinstance(t, tuple) else b""
        if key not in trees:
            trees[key] = len(nested)
            nested.append(t)
        remap[lab] = trees[key]
    out = np.vectorize(remap.get, otypes=[np.int64])(labels) if labels.size else labels
    return nested, out.astype(np.int16)


def check_order(order, mm, M, K, N, *, trials=2, seed=1):
    """Outputs of ``mm`` that ``order`` does not reproduce on random products and on products that are all
    -0 (where its sums start; 0 when it holds)."""
    # sizes were unchecked: 2.5 and True raised Python's "cannot be interpreted as an integer", -1 NumPy's
    # "negative dimensions are not allowed", mm=None "'NoneType' object is not callable"
    M, K, N = _box_shape(mm, M, K, N, "check_order")
    if not isinstance(order, GemmOrder):   # None or a SumTree was Python's "'SumTree' object has no attribute 'trees'"
        raise TypeError(f"check_order takes a GemmOrder (reveal's first result), got {type(order).__name__}")
    if order.classes.shape != (M, N):   # a uniform order of another shape was NumPy's broadcast error (its starts)
        raise ValueError(f"the order is for {order.classes.shape[0]} x {order.classes.shape[1]} outputs, check_order "
                         f"was asked {M} x {N}")
    # trials 0 (or less) checked nothing and answered 0, "the order holds"
    if not is_integer(trials) or trials < 1:
        raise ValueError(f"trials must be a positive integer (random products checked), got {trials!r}")
    if not is_integer(seed) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    # where sums start: products all -0, then per set of spine starts those underflowing, at its trees' outputs
    cases = [(a, b, True) for a, b in _trials(M, K, N, trials, seed)] + [(*_start_operands(M, K, N, ()), True)]
    firsts = {}
    for i, t in enumerate(order.trees):
        firsts.setdefault(tuple(t.spine_starts()), []).append(i)
    cases += [(*_start_operands(M, K, N, f), np.isin(order.classes, idx)) for f, idx in firsts.items()]
    bad = 0
    for a, b, where in cases:
        want = _float32_answer(mm(a, b), M, N, "checked", "check_order")
        got = evaluate_order(order, a, b)
        bad += int(np.sum((got.view(np.int32) != want.view(np.int32)) & ~(np.isnan(got) & np.isnan(want)) & where))
    return bad
