"""Summation trees: the order in which a float32 dot product adds its K terms, revealed and evaluated.

A BLAS chooses how to sum ``sum_k x_k y_k`` (K blocks, several accumulators, the thread split)
by CPU, library version, shape and thread count, so the only dependable description is the one
found on the machine.  This module finds it by numerical probing and evaluates it bit for bit.

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

Evaluating (:func:`evaluate`): a leaf is the product ``x_k y_k``.  With ``fma=True`` a node
that joins a leaf to a partial sum is a float32 FMA (the exact product, one rounding), a node
of two leaves rounds its left (pivot) product first and fuses the right one, and a node of two
partial sums is a float32 addition; with ``fma=False`` every product is rounded to float32
first and every node is a float32 addition.  Products are exact in float64 (24-bit operands).

Examples
--------
>>> import numpy as np
>>> t = SumTree.blocks([0, 3, 6])          # two FMA chains, their sums added
>>> t.describe()
'[0:3] + [3:6]'
>>> x = np.array([[1.0, 2.0**-24, 2.0**-24, 1.0, 0.0, 0.0]], np.float32)
>>> y = np.ones((6, 1), np.float32)
>>> float(evaluate(t, x, y)[0, 0])          # 1 + 2**-24 + 2**-24 loses both halves in order
2.0
"""

from __future__ import annotations

import numpy as np

from ..interop import is_integer
from .fparith import round_hi_lo, two_sum

__all__ = ["SumTree", "GemmOrder", "evaluate", "evaluate_order", "reveal", "check_order", "NotATreeError", "STARTS"]

#: How a partial sum starts from its first product (:class:`SumTree`'s ``start``).
STARTS = ("add", "fma", "product")
_START_TEXT = {"add": "", "fma": " (fma start)", "product": " (-0 kept)"}
#: A float32 whose square (2**-200, negated) underflows: the start probe's first products.
_UNDER = np.float32(2.0 ** -100)


class NotATreeError(ValueError):
    """The probed sums are not one fixed binary tree of float32 additions."""

#: A float64's low 29 bits where it lies halfway between two float32 neighbours (normal range).
_LOW29, _MIDPOINT = np.int64(0x1FFFFFFF), np.int64(0x10000000)
_TINY32 = 2.0 ** -126
#: Output elements (at most columns) of the block one chain runs over (it stays in cache).
_CHAIN_ELEMS, _CHAIN_COLS = 1 << 15, 1024


class SumTree:
    """A binary summation tree over K leaves, and whether leaves join partial sums by FMA.

    ``children``: int array (K - 1, 2); node ``K + r`` adds ``children[r]`` (leaves are
    ``0 .. K-1``), and the last node is the root.  Build with :meth:`from_nested`,
    :meth:`blocks` or :func:`reveal`; :meth:`describe` prints it compactly.
    ``start``: how each partial sum (each chain, a "spine") starts from its first product ``p``, which
    decides the sign of a zero (IEEE 754 6.3): ``"add"`` rounds ``p`` to float32, then adds it to an
    accumulator zeroed first (+0 for a -0 product and for one that underflows); ``"fma"`` joins ``p`` to
    the zeroed accumulator by one FMA (+0 for an exact -0, but -0 for a negative product that underflows:
    the exact sum is not zero); ``"product"`` takes the rounded ``p`` as it is (-0 kept).  Which one a BLAS
    takes depends on its kernel, so on the shape and layout (:func:`reveal` asks); every partial sum of one
    tree starts alike.

    Examples
    --------
    >>> x, y = np.array([[-2.0**-100, 0.0]], np.float32), np.array([[2.0**-100], [-1.0]], np.float32)
    >>> [float(evaluate(SumTree.blocks([0, 2], start=s), x, y)[0, 0]) for s in STARTS]   # -2**-200 + (-0)
    [0.0, -0.0, -0.0]
    """

    __slots__ = ("K", "children", "fma", "start")

    def __init__(self, K, children, fma=True, *, start="add"):
        # K = 2.5, children 0.2 / 1.7 or fma="no" were truncated or read as truthy: another tree, silently
        if not is_integer(K):
            raise TypeError(f"a sum tree's K is an integer, got {K!r}")
        if not isinstance(fma, (bool, np.bool_)):
            raise TypeError(f"fma must be True or False, got {fma!r}")
        if not isinstance(start, str) or start not in STARTS:
            raise ValueError(f"start must be one of {', '.join(map(repr, STARTS))} (how a partial sum starts from "
                             f"its first product), got {start!r}")
        raw = np.asarray(children)
        if raw.size and raw.dtype.kind not in "iu":
            raise TypeError(f"a sum tree's children are integer node numbers, got {raw.dtype}")
        # pairs (n, 2) or their flat list (JSON's): an odd count was NumPy's "cannot reshape", and a (2, 3)
        # array was read as three other pairs
        if not ((raw.ndim == 2 and raw.shape[1] == 2) or (raw.ndim == 1 and raw.size % 2 == 0)):
            raise ValueError(f"a sum tree's children are pairs of node numbers (an n x 2 array, or a flat list of "
                             f"even length), got shape {raw.shape}")
        self.K = int(K)
        ch = raw.astype(np.int64).reshape(-1, 2)
        if self.K < 1 or ch.shape[0] != self.K - 1:
            raise ValueError(f"a sum tree over K={K} leaves has K - 1 = {K - 1} nodes, got {ch.shape[0]}")
        if self.K > 1 and sorted(ch.reshape(-1).tolist()) != list(range(2 * self.K - 2)):
            raise ValueError("a sum tree's nodes must use every leaf and every inner node but the root once")
        if self.K > 1 and np.any(ch >= self.K + np.arange(self.K - 1)[:, None]):
            raise ValueError("a sum tree's node may only add leaves and earlier nodes")
        self.children = ch
        self.fma = bool(fma)
        self.start = start

    def __eq__(self, other):
        return (isinstance(other, SumTree) and self.K == other.K and self.fma == other.fma
                and self.start == other.start and np.array_equal(self.children, other.children))

    def __hash__(self):
        return hash((self.K, self.fma, self.start, self.children.tobytes()))

    def __repr__(self):
        start = "" if self.start == "add" else f", start={self.start!r}"
        return f"SumTree(K={self.K}, fma={self.fma}{start}: {self.describe()})"

    def starting(self, start):
        """This tree with its partial sums starting as ``start`` says (:data:`STARTS`)."""
        return SumTree(self.K, self.children, self.fma, start=start)

    # ------------------------------------------------------------------ building
    @classmethod
    def from_nested(cls, nested, fma=True, *, start="add"):
        """From nested pairs of leaf indices, e.g. ``((0, 1), 2)``."""
        children, stack = [], [(nested, False)]
        ids = []
        leaves = []
        while stack:
            t, done = stack.pop()
            if isinstance(t, (tuple, list)):
                if len(t) != 2:
                    raise ValueError(f"a sum tree node adds exactly two terms, got {t!r}")
                if done:
                    r = ids.pop()
                    left = ids.pop()
                    children.append((left, r))
                    ids.append(-len(children))          # inner node, renumbered below
                else:
                    stack += [(t, True), (t[1], False), (t[0], False)]
            else:
                if not is_integer(t):          # int("1") and int(1.9) would make another tree
                    raise TypeError(f"a sum tree's leaves are integer term indices, got {t!r}")
                leaves.append(int(t))
                ids.append(int(t))
        K = len(leaves)
        if sorted(leaves) != list(range(K)):
            raise ValueError(f"a sum tree's leaves must be 0 .. K-1 once each, got {sorted(leaves)[:8]}...")
        ch = [[K - c - 1 if c < 0 else c for c in pair] for pair in children]
        return cls(K, np.array(ch, np.int64).reshape(-1, 2), fma, start=start)

    @classmethod
    def blocks(cls, bounds, fma=True, *, start="add"):
        """One chain per K block ``[bounds[b], bounds[b+1])`` in K order, the block sums added in order.

        ``bounds`` are integers from 0, strictly increasing (``[0, 5, 3]`` made a six-term tree)."""
        bounds = list(bounds)
        if len(bounds) < 2 or bounds[0] != 0 or not all(is_integer(b) for b in bounds) \
                or any(b1 <= b0 for b0, b1 in zip(bounds, bounds[1:])):
            raise ValueError(f"block bounds are integers from 0, strictly increasing (e.g. [0, 384, 768]), "
                             f"got {bounds!r:.80}")
        t = None
        for k0, k1 in zip(bounds[:-1], bounds[1:]):
            c = k0
            for k in range(k0 + 1, k1):
                c = (c, k)
            t = c if t is None else (t, c)
        return cls.from_nested(t, fma, start=start)

    def nested(self):
        """The tree as nested pairs (deep trees are returned without recursion)."""
        K = self.K
        built = list(range(K)) + [None] * (K - 1)
        for r, (a, b) in enumerate(self.children.tolist()):
            built[K + r] = (built[a], built[b])
        return built[-1] if K > 1 else 0

    # ------------------------------------------------------------------ reading
    def spines(self):
        """The tree as spines: ``[(start_leaf, [(kind, item), ...]), ...]``, root's spine first.

        A spine starts at a leaf and climbs: each step adds a leaf (``("leaf", k)``) or the value
        of another spine (``("spine", index)``).
        """
        K = self.K
        out = []

        def walk(node):
            steps = []
            while node >= K:
                a, b = self.children[node - K]
                steps.append(int(b))
                node = int(a)
            idx = len(out)
            out.append(None)
            items = []
            for r in reversed(steps):
                items.append(("leaf", r) if r < K else ("spine", walk(r)))
            out[idx] = (node, items)
            return idx

        walk(2 * K - 2 if K > 1 else 0)
        return out

    def describe(self):
        """Compact text: ``[a:b]`` an in-order chain, ``[a:b:s]`` a strided one, ``X + Y`` an addition."""
        sp = self.spines()

        def text(i):
            start, items = sp[i]
            parts, run = [], [start]

            def flush():
                if len(run) == 1:
                    parts.append(str(run[0]))
                    return
                step = run[1] - run[0]
                if step > 0 and all(b - a == step for a, b in zip(run, run[1:])):
                    parts.append(f"[{run[0]}:{run[-1] + 1}]" if step == 1 else f"[{run[0]}:{run[-1] + 1}:{step}]")
                else:
                    parts.append("[" + ",".join(map(str, run)) + "]")

            for kind, v in items:
                if kind == "leaf" and run:
                    run.append(v)
                elif kind == "leaf":
                    run = [v]
                else:
                    if run:
                        flush()
                        run = []
                    sub = text(v)
                    parts.append(f"({sub})" if " + " in sub else sub)
            if run:
                flush()
            return " + ".join(parts)

        return text(0)

    def spine_starts(self):
        """The leaves that start a partial sum (each spine's first product), root's first.

        Examples
        --------
        >>> SumTree.blocks([0, 4, 8, 10]).spine_starts()
        [0, 4, 8]
        """
        return [first for first, _ in self.spines()]

    def to_json(self):
        # start written where it is not "add": every tree written before it existed starts so
        start = {} if self.start == "add" else {"start": self.start}
        return {"K": self.K, "fma": self.fma, **start, "children": self.children.reshape(-1).tolist()}

    @classmethod
    def from_json(cls, d):
        # start absent: "add" (every tree written before it existed started so)
        _json_keys(d, "a sum tree's JSON", ("K", "fma", "children"), optional=("start",))
        if not isinstance(d.get("fma"), bool) or d.get("start", "add") not in STARTS or not is_integer(d.get("K")):
            raise ValueError(f"a sum tree's JSON has an integer K, a bool fma and a start of "
                             f"{', '.join(map(repr, STARTS))}, got {d!r:.80}")
        # no cast here: the constructor refuses children 0.2 / 1.7 or "1" (a cast truncated or parsed them)
        return cls(d["K"], np.asarray(d["children"]), d["fma"], start=d.get("start", "add"))


def _json_keys(d, what, keys, optional=()):
    # a list, a string or a missing key was a KeyError / TypeError / AttributeError; a key of another
    # name (a typo) was read as absent
    if not isinstance(d, dict) or not set(keys) <= set(d) <= set(keys) | set(optional):
        got = sorted(map(str, d)) if isinstance(d, dict) else type(d).__name__
        more = f" (and optionally {', '.join(optional)})" if optional else ""
        raise ValueError(f"{what} is an object of the keys {', '.join(keys)}{more}, got {str(got):.120}")


#: The most trees a :class:`GemmOrder` holds: its classes are int16.
_MAX_TREES = int(np.iinfo(np.int16).max) + 1


class GemmOrder:
    """The summation trees of one GEMM shape: ``trees[classes[m, n]]`` sums output ``(m, n)``."""

    __slots__ = ("trees", "classes")

    def __init__(self, trees, classes):
        self.trees = list(trees)
        # a GemmOrder may come from a cache file: an order without trees, of mixed K or with a class
        # naming no tree would sum nothing (zeros) or fail inside the evaluation
        if not self.trees or not all(isinstance(t, SumTree) for t in self.trees):
            raise ValueError(f"a GemmOrder needs one or more SumTree, got {self.trees!r:.80}")
        if len(self.trees) > _MAX_TREES:   # class 39999 of 40000 trees wrapped in int16: its outputs summed nothing
            raise ValueError(f"a GemmOrder holds at most {_MAX_TREES} trees (its classes are int16), got "
                             f"{len(self.trees)}")
        if len({t.K for t in self.trees}) != 1:
            raise ValueError(f"a GemmOrder's trees must sum the same K, got {sorted({t.K for t in self.trees})}")
        # checked before the cast to int16: a cast would truncate 1.7 to 1, parse "1", and wrap 65536 to 0
        # (another tree, silently), and 70000 in a cache file would be NumPy's OverflowError in every GEMM
        classes = np.asarray(classes)
        if classes.ndim != 2:
            raise ValueError(f"a GemmOrder's classes must be an M x N array, got shape {classes.shape}")
        if classes.size and not (classes.dtype.kind in "iu" or (
                classes.dtype.kind == "f" and np.all(np.isfinite(classes)) and np.all(classes == np.trunc(classes)))):
            raise ValueError(f"a GemmOrder's classes must be integer tree indices (whole numbers), got an array "
                             f"of dtype {classes.dtype}")
        if classes.size and (classes.min() < 0 or classes.max() >= len(self.trees)):
            raise ValueError(f"a GemmOrder's classes must index its {len(self.trees)} tree(s), got values "
                             f"{classes.min():.6g}..{classes.max():.6g}")   # int(1e300) printed 301 digits
        # read-only, a copy unless given read-only: a writeable int16 array given was kept as it is, so a later
        # write to it (or to order.classes: order_for hands out the cached order) made a class name no tree
        # after this check, and its outputs summed nothing (0.0), silently.  (A read-only int16 array is
        # taken as it is: the recorded models build orders of 10**8 outputs and hand theirs over so.)
        if classes.dtype != np.int16 or classes.flags.writeable:
            classes = classes.astype(np.int16, copy=True)
            classes.flags.writeable = False
        self.classes = classes

    @property
    def uniform(self):
        return len(self.trees) == 1

    def describe(self):
        def text(t):
            return ("fma " if t.fma else "mul+add ") + t.describe() + _START_TEXT[t.start]

        if self.uniform:
            return text(self.trees[0])
        return "; ".join(f"{int(np.sum(self.classes == c))} outputs: {text(t)}" for c, t in enumerate(self.trees))

    def to_json(self):
        return {"trees": [t.to_json() for t in self.trees],
                "classes": None if self.uniform else self.classes.tolist(),
                "shape": list(self.classes.shape)}

    @classmethod
    def from_json(cls, d):
        _json_keys(d, "a GemmOrder's JSON", ("trees", "classes", "shape"))
        if not isinstance(d["trees"], list):
            raise ValueError(f"a GemmOrder's JSON trees are a list of sum trees, got {d['trees']!r:.80}")
        shape = d["shape"]
        if not isinstance(shape, list) or len(shape) != 2 or not all(is_integer(v) and v >= 0 for v in shape):
            raise ValueError(f"a GemmOrder's JSON shape is [M, N], got {shape!r:.80}")
        trees = [SumTree.from_json(t) for t in d["trees"]]
        try:
            classes = np.zeros(shape, np.int16) if d["classes"] is None else np.asarray(d["classes"])
        except ValueError:   # rows of other lengths were NumPy's "inhomogeneous shape after 1 dimensions"
            raise ValueError(f"a GemmOrder's JSON classes are an M x N array (rows of one length), got "
                             f"{d['classes']!r:.80}") from None
        if classes.shape != tuple(shape):
            raise ValueError(f"a GemmOrder's JSON classes have shape {classes.shape}, its shape says {tuple(shape)}")
        return cls(trees, classes)


# ---------------------------------------------------------------------- evaluation
def _operands(x, y):
    """x (M, K) and y (K, N) as float32, or one error: y's rows past K were left out (a silent wrong sum),
    fewer rows were NumPy's IndexError.  float16 and bfloat16 are exact in float32; another dtype is
    refused (a cast rounded float64, overflowed 1e39 to Inf, dropped a complex part and parsed strings)."""
    x, y = np.asarray(x), np.asarray(y)
    for what, a in (("x", x), ("y", y)):
        if a.dtype.name not in ("float32", "float16", "bfloat16"):
            raise TypeError(f"{what} must be float32 (float16 and bfloat16 are taken exactly), got {a.dtype}: "
                            "a float32 GEMM's sum tree adds float32 products; convert it (.astype(np.float32)) "
                            "if that rounding is meant")
    x, y = x.astype(np.float32, copy=False), y.astype(np.float32, copy=False)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[0]:
        raise ValueError(f"x @ y needs x (M, K) and y (K, N) of one K, got shapes {x.shape} and {y.shape}")
    return x, y


def evaluate(tree, x, y):
    """``x @ y`` (float32 (M, K) and (K, N)) summed in ``tree``'s order, float32 (M, N)."""
    if not isinstance(tree, SumTree):    # None or a GemmOrder was Python's AttributeError
        raise TypeError(f"evaluate takes a SumTree (evaluate_order takes a GemmOrder), got {type(tree).__name__}")
    x, y = _operands(x, y)
    M, K = x.shape
    N = y.shape[1]
    if K != tree.K:
        raise ValueError(f"the sum tree is for K={tree.K}, the operands have K={K}")
    out = np.zeros((M, N), np.float32)
    if M == 0 or N == 0:
        return out
    sp = tree.spines()
    tiny = tree.fma and _may_reach_subnormals(x, y)
    cols = min(N, _CHAIN_COLS)
    rows = max(1, _CHAIN_ELEMS // max(1, cols))
    xt = np.ascontiguousarray(x.T, dtype=np.float64)              # (K, M): row k is x_k
    y64 = y.astype(np.float64)
    with np.errstate(all="ignore"):
        for r0 in range(0, M, rows):
            for c0 in range(0, N, cols):
                xs = xt[:, r0:r0 + rows, None]
                ys = y64[:, None, c0:c0 + cols]
                out[r0:r0 + rows, c0:c0 + cols] = _spine_value(sp, 0, xs, ys, tree, tiny)
    return out


def evaluate_order(order, x, y):
    """``x @ y`` with each output summed by its own tree of ``order`` (:class:`GemmOrder`)."""
    if not isinstance(order, GemmOrder):
        raise TypeError(f"evaluate_order takes a GemmOrder (evaluate takes a SumTree), got {type(order).__name__}")
    if order.uniform:
        return evaluate(order.trees[0], x, y)
    x, y = _operands(x, y)
    if order.classes.shape != (x.shape[0], y.shape[1]):
        # the outputs past the order's shape were left zero (silently), fewer were NumPy's IndexError
        raise ValueError(f"the order is for {order.classes.shape[0]} x {order.classes.shape[1]} outputs, the operands "
                         f"make {x.shape[0]} x {y.shape[1]}")
    out = np.zeros((x.shape[0], y.shape[1]), np.float32)
    for c, t in enumerate(order.trees):
        mask = order.classes == c
        rows, cols = np.nonzero(mask.any(axis=1))[0], np.nonzero(mask.any(axis=0))[0]
        if rows.size == 0:
            continue
        part = evaluate(t, x[rows], y[:, cols])
        sub = mask[np.ix_(rows, cols)]
        block = out[np.ix_(rows, cols)]
        block[sub] = part[sub]
        out[np.ix_(rows, cols)] = block
    return out


def _spine_value(sp, i, xs, ys, tree, tiny):
    start, items = sp[i]
    fma = tree.fma
    p = xs[start] * ys[start]                  # float64: exact
    if tree.start == "fma":
        p = p + 0.0                            # fma(x, y, +0): an exact -0 is +0, a product that underflows keeps its sign
    c = p.astype(np.float32)
    if tree.start == "add":
        c += np.float32(0)                     # the rounded product added to +0: -0 (either kind) is +0
    j = 0
    while j < len(items):
        kind, v = items[j]
        if kind == "spine":
            c = (c + _spine_value(sp, v, xs, ys, tree, tiny)).astype(np.float32)
            j += 1
            continue
        ks = []
        while j < len(items) and items[j][0] == "leaf":
            ks.append(items[j][1])
            j += 1
        _chain(c, xs, ys, ks, fma, tiny)
    return c


def _chain(c, xs, ys, ks, fma, tiny):
    """``c = fl(c + x_k y_k)`` for k in ``ks``, in place: one FMA each, or mul then add."""
    if not fma:
        for k in ks:
            p = (xs[k].astype(np.float32) * ys[k].astype(np.float32))
            np.add(c, p, out=c)
        return
    s = np.empty(c.shape)
    low = np.empty(c.shape, np.int64)
    redo = np.empty(c.shape, bool)
    for k in ks:
        # s = c + p in float64 (p exact) then rounded once more to float32 is the FMA's single
        # rounding except where s is exactly a float32 midpoint (the float64 rounding may have
        # moved the sum onto it) or in float32's subnormal range: those few are redone error-free.
        np.multiply(xs[k], ys[k], out=s)
        np.add(c, s, out=s)                          # c first: a NaN's bits are c's
        np.bitwise_and(s.view(np.int64), _LOW29, out=low)
        np.equal(low, _MIDPOINT, out=redo)
        if tiny:
            redo |= (np.abs(s) < _TINY32) & (s != 0)
        if redo.any():
            i, jj = np.nonzero(redo)
            p = (xs[k] * ys[k])[i, jj]
            hi, lo = two_sum(c[i, jj].astype(np.float64), p)
            fixed = round_hi_lo(hi, np.where(np.isfinite(hi), lo, 0.0))
            np.copyto(c, s, casting="unsafe")
            c[i, jj] = fixed
        else:
            np.copyto(c, s, casting="unsafe")


def _may_reach_subnormals(x, y):
    """Whether a nonzero partial sum of these operands' products can be below float32's least normal.

    Every product is a multiple of ``q = spacing(min |x|) * spacing(min |y|)`` (nonzero finite
    values) and so is every rounded partial sum, so with ``q >= 2**-126`` none is subnormal.
    """
    q = 1.0
    for v in (x, y):
        a = np.abs(v[np.isfinite(v) & (v != 0)])
        if a.size == 0:
            return False
        q *= float(np.spacing(np.float32(a.min())))
    return q < _TINY32


# ---------------------------------------------------------------------- revealing
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


def reveal(mm, M, K, N, *, uniform=True, check=6, seed=0):
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
    calls = [0]

    def call(a, b):
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

    order = None
    if uniform and K > 1:
        try:
            nested = _reveal_packed(call, M, K, N)
        except NotATreeError:          # the outputs do not share one tree: ask each on its own
            nested = None
        if nested is not None:
            order, explained = _fit([nested], np.zeros((M, N), np.int16), trials, wants, zeros, probe)
            if explained < 1.0:
                order = None
    if order is None:
        if K == 1:
            nested, classes = [0], np.zeros((M, N), np.int16)
        else:
            nested, classes = _reveal_each(call, M, K, N)
        order, explained = _fit(nested, classes, trials, wants, zeros, probe)
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


def _fit(nested, classes, trials, wants, zeros, probe):
    """Choose fma per output by the checks (a kernel's edge tiles may multiply and add apart), and where
    sums start by ``zeros`` (the answer to products all -0) and ``probe(first)`` (the answer where the
    products starting the tree's spines, ``first``, underflow); the order and the fraction of outputs it
    explains."""
    minus, plus = _zero_sign(zeros)
    trees, out, ok = [], np.zeros(classes.shape, np.int16), np.zeros(classes.shape, bool)
    for c, t in enumerate(nested):
        mask = classes == c
        good = {}
        for fma in (True, False):
            tree = SumTree.from_nested(t, fma) if isinstance(t, tuple) else SumTree(1, np.zeros((0, 2)), fma)
            if not fma and np.array_equal(good[True][1], mask):
                good[fma] = (tree, np.zeros_like(mask))     # FMA explains every output: no need to try more
                break
            g = mask.copy()
            for (a, b), want in zip(trials, wants):
                got = evaluate(tree, a, b)
                g &= (got.view(np.int32) == want.view(np.int32)) | (np.isnan(got) & np.isnan(want))
            good[fma] = (tree, g)
        first = True if good[True][1].sum() >= good[False][1].sum() else False
        second = not first
        only_second = good[second][1] & ~good[first][1]
        parts = [(good[first][0], mask & ~only_second, good[first][1])]
        if only_second.any():
            parts.append((good[second][0], only_second, good[second][1]))
        u_minus, u_plus = _zero_sign(probe(tuple(parts[0][0].spine_starts())))
        # each start's outputs a tree of their own; outputs neither answer fits are left unexplained
        start = {"product": minus, "fma": plus & u_minus, "add": ~minus & ~(plus & u_minus)}
        fits = {"product": minus & u_minus, "fma": plus & u_minus, "add": plus & u_plus}
        for tree, sel, g in parts:
            for name in STARTS:
                s = sel & start[name]
                if s.any():
                    out[s], ok = len(trees), ok | (s & g & fits[name])
                    trees.append(tree.starting(name))
    return GemmOrder(trees, out), float(ok.mean())


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
