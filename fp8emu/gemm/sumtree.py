"""Summation trees: the order in which a float32 dot product adds its K terms, and its evaluation.

A BLAS chooses how to sum ``sum_k x_k y_k`` (K blocks, several accumulators, the thread split)
by CPU, library version, shape and thread count, so the only dependable description is the one
found on the machine (:mod:`fp8emu.gemm.order_probe` finds it by numerical probing).  This module
describes it and evaluates it bit for bit.

Evaluating (:func:`evaluate`): a leaf is the product ``x_k y_k``.  With ``fma=True`` a node
that joins a leaf to a partial sum is a float32 FMA (the exact product, one rounding), a node
of two leaves rounds its left (pivot) product first and fuses the right one, and a node of two
partial sums is a float32 addition; with ``fma=False`` every product is rounded to float32
first and every node is a float32 addition.  A *lone* leaf (``lone``) is a partial sum of its own
(a K block of one product): its rounded product is added, not fused.  Products are exact in float64
(24-bit operands).

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

__all__ = ["SumTree", "GemmOrder", "evaluate", "evaluate_order", "STARTS"]

#: How a partial sum starts from its first product (:class:`SumTree`'s ``start``).
STARTS = ("add", "fma", "product")
_START_TEXT = {"add": "", "fma": " (fma start)", "product": " (-0 kept)"}


#: A float64's low 29 bits where it lies halfway between two float32 neighbours (normal range).
_LOW29, _MIDPOINT = np.int64(0x1FFFFFFF), np.int64(0x10000000)
_TINY32 = 2.0 ** -126
#: Output elements (at most columns) of the block one chain runs over (it stays in cache).
_CHAIN_ELEMS, _CHAIN_COLS = 1 << 15, 1024


class SumTree:
    """A binary summation tree over K leaves, and whether leaves join partial sums by FMA.

    ``children``: int array (K - 1, 2); node ``K + r`` adds ``children[r]`` (leaves are
    ``0 .. K-1``), and the last node is the root.  Build with :meth:`from_nested`,
    :meth:`blocks` or :func:`~fp8emu.gemm.order_probe.reveal`; :meth:`describe` prints it compactly.
    ``start``: how each partial sum (each chain, a "spine") starts from its first product ``p``, which
    decides the sign of a zero (IEEE 754 6.3): ``"add"`` rounds ``p`` to float32, then adds it to an
    accumulator zeroed first (+0 for a -0 product and for one that underflows); ``"fma"`` joins ``p`` to
    the zeroed accumulator by one FMA (+0 for an exact -0, but -0 for a negative product that underflows:
    the exact sum is not zero); ``"product"`` takes the rounded ``p`` as it is (-0 kept).  Which one a BLAS
    takes depends on its kernel, so on the shape and layout (:func:`~fp8emu.gemm.order_probe.reveal`
    asks); every partial sum of one tree starts alike.
    ``lone``: leaves that are a partial sum of their own, a K block of one product that a BLAS sums apart
    (its product rounded, then added) where a leaf in ``children`` alone would join its sibling by FMA;
    each is a node's right child, and only an FMA tree has them (without FMA every product is rounded).
    :meth:`blocks` marks its one-product blocks so; :meth:`describe` writes one ``[k:k+1]``.

    Examples
    --------
    >>> x, y = np.array([[-2.0**-100, 0.0]], np.float32), np.array([[2.0**-100], [-1.0]], np.float32)
    >>> [float(evaluate(SumTree.blocks([0, 2], start=s), x, y)[0, 0]) for s in STARTS]   # -2**-200 + (-0)
    [0.0, -0.0, -0.0]
    >>> x = np.array([[1.0, 1.0 + 2.0**-12 + 2.0**-23]], np.float32)      # 1 + a product just over 2**-24
    >>> y = np.array([[1.0], [2.0**-24 - 2.0**-36]], np.float32)
    >>> [float(evaluate(t, x, y)[0, 0]) - 1 for t in (SumTree.blocks([0, 2]), SumTree.blocks([0, 1, 2]))]
    [1.1920928955078125e-07, 0.0]
    """

    __slots__ = ("K", "children", "fma", "start", "lone")

    def __init__(self, K, children, fma=True, *, start="add", lone=()):
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
        object.__setattr__(self, "K", int(K))
        ch = raw.astype(np.int64).reshape(-1, 2)   # a copy: the caller's array is not kept
        if self.K < 1 or ch.shape[0] != self.K - 1:
            raise ValueError(f"a sum tree over K={K} leaves has K - 1 = {K - 1} nodes, got {ch.shape[0]}")
        if self.K > 1 and sorted(ch.reshape(-1).tolist()) != list(range(2 * self.K - 2)):
            raise ValueError("a sum tree's nodes must use every leaf and every inner node but the root once")
        if self.K > 1 and np.any(ch >= self.K + np.arange(self.K - 1)[:, None]):
            raise ValueError("a sum tree's node may only add leaves and earlier nodes")
        # immutable (read-only children, no attribute set after this): a tree is hashed, and order_for hands out
        # the trees of its memo, so a write to one (children[0] = ..., tree.fma = False) changed every later
        # GEMM of that shape in the process, silently
        ch.flags.writeable = False
        lone = _lone(lone, self.K, ch, bool(fma))
        for name, v in (("children", ch), ("fma", bool(fma)), ("start", start), ("lone", lone)):
            object.__setattr__(self, name, v)

    def __setattr__(self, name, value):
        raise AttributeError(f"a SumTree is immutable (it is hashed, and order_for shares its trees): build another "
                             f"(SumTree(...), starting, with_lone) instead of setting {name!r}")

    def __delattr__(self, name):
        raise AttributeError(f"a SumTree is immutable: {name!r} cannot be deleted")

    def __reduce__(self):
        # pickle and copy set no attribute one by one (__setattr__ refuses): the tree is built again
        return _rebuilt, (self.K, self.children, self.fma, self.start, self.lone)

    def __eq__(self, other):
        return (isinstance(other, SumTree) and self.K == other.K and self.fma == other.fma
                and self.start == other.start and self.lone == other.lone
                and np.array_equal(self.children, other.children))

    def __hash__(self):
        return hash((self.K, self.fma, self.start, self.lone, self.children.tobytes()))

    def __repr__(self):
        start = "" if self.start == "add" else f", start={self.start!r}"
        return f"SumTree(K={self.K}, fma={self.fma}{start}: {self.describe()})"

    def starting(self, start):
        """This tree with its partial sums starting as ``start`` says (:data:`STARTS`)."""
        return SumTree(self.K, self.children, self.fma, start=start, lone=self.lone)

    def with_lone(self, lone):
        """This tree with the leaves ``lone`` summed apart (a partial sum each; see the class)."""
        return SumTree(self.K, self.children, self.fma, start=self.start, lone=lone)

    # ------------------------------------------------------------------ building
    @classmethod
    def from_nested(cls, nested, fma=True, *, start="add", lone=()):
        """From nested pairs of leaf indices, e.g. ``((0, 1), 2)``; ``lone`` as the class says."""
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
        return cls(K, np.array(ch, np.int64).reshape(-1, 2), fma, start=start, lone=lone)

    @classmethod
    def blocks(cls, bounds, fma=True, *, start="add", split=None):
        """One chain per K block ``[bounds[b], bounds[b+1])`` in K order, the block sums added in order.

        ``bounds`` are integers from 0, strictly increasing (``[0, 5, 3]`` made a six-term tree).  A block
        of one product past a part's first is its rounded product (``lone``; without FMA every product is).
        ``split``: one of the inner bounds, where a second part starts that is summed the same way on its
        own (a BLAS's second thread); the second part's sum is added to the first's.

        Examples
        --------
        >>> SumTree.blocks([0, 3, 4]).describe(), SumTree.blocks([0, 3, 4], fma=False).describe()
        ('[0:3] + [3:4]', '[0:4]')
        >>> SumTree.blocks([0, 2, 4, 6], split=4).describe()
        '[0:2] + [2:4] + [4:6]'
        >>> SumTree.blocks([0, 2, 4, 6, 8], split=4).describe()
        '[0:2] + [2:4] + ([4:6] + [6:8])'
        """
        bounds = list(bounds)
        if len(bounds) < 2 or bounds[0] != 0 or not all(is_integer(b) for b in bounds) \
                or any(b1 <= b0 for b0, b1 in zip(bounds, bounds[1:])):
            raise ValueError(f"block bounds are integers from 0, strictly increasing (e.g. [0, 384, 768]), "
                             f"got {bounds!r:.80}")
        if split is not None and (not is_integer(split) or split not in bounds[1:-1]):
            raise ValueError(f"split is one of the inner block bounds ({bounds[1:-1]!r:.60}) or None, got {split!r}")
        cuts = [0, bounds[-1]] if split is None else [0, int(split), bounds[-1]]
        parts, lone = [], []
        for p0, p1 in zip(cuts, cuts[1:]):
            t = None
            part = [b for b in bounds if p0 <= b <= p1]
            for k0, k1 in zip(part[:-1], part[1:]):
                c = k0
                for k in range(k0 + 1, k1):
                    c = (c, k)
                if t is not None and k1 - k0 == 1 and fma:
                    lone.append(k0)
                t = c if t is None else (t, c)
            if parts and not isinstance(t, tuple) and fma:
                # a second part of one product is a partial sum of its own too (a thread's), rounded and then
                # added to the first part's: as a bare right child it was fused into that sum, silently
                lone.append(t)
            parts.append(t)
        return cls.from_nested(parts[0] if len(parts) == 1 else tuple(parts), fma, start=start, lone=lone)

    def nested(self):
        """The tree as nested pairs (deep trees are returned without recursion; :attr:`lone` is apart)."""
        K = self.K
        built = list(range(K)) + [None] * (K - 1)
        for r, (a, b) in enumerate(self.children.tolist()):
            built[K + r] = (built[a], built[b])
        return built[-1] if K > 1 else 0

    # ------------------------------------------------------------------ reading
    def spines(self):
        """The tree as spines: ``[(start_leaf, [(kind, item), ...]), ...]``, root's spine first.

        A spine starts at a leaf and climbs: each step adds a leaf (``("leaf", k)``) or the value
        of another spine (``("spine", index)``); a lone leaf is a spine of its own, without steps.
        """
        K = self.K
        out = []
        lone = set(self.lone)

        def climb(node):
            # a spine's steps from its start leaf up, numbered as it is met (the root's 0, each sub-spine after
            # the spine holding it: evaluate and describe read them so)
            steps = []
            while node >= K:
                a, b = self.children[node - K]
                steps.append(int(b))
                node = int(a)
            out.append(None)
            return [len(out) - 1, node, steps[::-1], 0, []]

        # depth first without recursion: a tree summed from its last term (x_0 + (x_1 + (...)), K spines deep) was
        # Python's RecursionError past about a thousand terms, in describe, evaluate and reveal
        stack = [climb(2 * K - 2 if K > 1 else 0)]
        while stack:
            frame = stack[-1]
            idx, start, steps, i, items = frame
            if i == len(steps):
                out[idx] = (start, items)
                stack.pop()
                continue
            r = steps[i]
            frame[3] = i + 1
            if r < K and r not in lone:
                items.append(("leaf", r))
            else:
                stack.append(climb(r))
                items.append(("spine", stack[-1][0]))
        return out

    def describe(self):
        """Compact text: ``[a:b]`` an in-order chain, ``[a:b:s]`` a strided one, ``X + Y`` an addition.

        ``+ [a:b]`` (or ``+ (X + Y)``) adds a sum of its own, ``+ [k:k+1]`` a lone leaf; ``then [a:b]`` joins
        leaves one by one to the sum so far (fused in an FMA tree) after another sum was added to it:
        ``[0:2] + [2:4] then [4:6]`` sums leaves 4 and 5 into the running sum, ``[0:2] + [2:4] + [4:6]``
        adds their own sum.

        Examples
        --------
        >>> SumTree.from_nested(((((0, 1), (2, 3)), 4), 5)).describe()
        '[0:2] + [2:4] then [4:6]'
        >>> SumTree.from_nested((((0, 1), (2, 3)), (4, 5))).describe()
        '[0:2] + [2:4] + [4:6]'
        """
        sp = self.spines()
        texts = [None] * len(sp)

        def text(i):
            start, items = sp[i]
            if i and not items:                  # a lone leaf: a K block of one product
                return f"[{start}:{start + 1}]"
            parts, run = [], [start]

            def flush():
                parts.append(_run_text(run))

            joined, tail = False, []            # whether another sum was added to this one already
            for kind, v in items:
                if kind == "leaf" and joined:
                    # leaves joining the sum after another sum was added to it: "then [4:6]", since a run
                    # "+ [4:6]" there read as a sum of its own added (another tree, which evaluates otherwise)
                    tail.append(v)
                    continue
                if kind == "leaf":
                    run.append(v)
                    continue
                if run:
                    flush()
                    run = []
                if tail:
                    parts[-1] += " then " + _run_text(tail)
                    tail = []
                joined = True
                sub = texts[v]
                parts.append(f"({sub})" if " + " in sub else sub)
            if run:
                flush()
            if tail:
                parts[-1] += " then " + _run_text(tail)
            return " + ".join(parts)

        # each spine after the spines it holds (they are numbered after it): no recursion on deep trees
        for i in reversed(range(len(sp))):
            texts[i] = text(i)
        return texts[0]

    def spine_starts(self):
        """The leaves that start a partial sum (each spine's first product, a lone leaf's own), root's first.

        Examples
        --------
        >>> SumTree.blocks([0, 4, 8, 10]).spine_starts(), SumTree.blocks([0, 4, 5]).spine_starts()
        ([0, 4, 8], [0, 4])
        """
        return [first for first, _ in self.spines()]

    def to_json(self):
        # start and lone written where they are not "add" and none: every tree written before they existed is so
        start = {} if self.start == "add" else {"start": self.start}
        lone = {"lone": list(self.lone)} if self.lone else {}
        return {"K": self.K, "fma": self.fma, **start, **lone, "children": self.children.reshape(-1).tolist()}

    @classmethod
    def from_json(cls, d):
        # start absent: "add", lone absent: none (every tree written before they existed was so)
        _json_keys(d, "a sum tree's JSON", ("K", "fma", "children"), optional=("start", "lone"))
        if not isinstance(d.get("fma"), bool) or d.get("start", "add") not in STARTS or not is_integer(d.get("K")):
            raise ValueError(f"a sum tree's JSON has an integer K, a bool fma and a start of "
                             f"{', '.join(map(repr, STARTS))}, got {d!r:.80}")
        # no cast here: the constructor refuses children 0.2 / 1.7 or "1" (a cast truncated or parsed them)
        return cls(d["K"], np.asarray(d["children"]), d["fma"], start=d.get("start", "add"), lone=d.get("lone", ()))


def _rebuilt(K, children, fma, start, lone):
    return SumTree(K, children, fma, start=start, lone=lone)


def _run_text(run):
    """Leaves in their order: ``k``, ``[a:b]``, ``[a:b:s]`` (a stride) or ``[i,j,k]``."""
    if len(run) == 1:
        return str(run[0])
    step = run[1] - run[0]
    if step > 0 and all(b - a == step for a, b in zip(run, run[1:])):
        return f"[{run[0]}:{run[-1] + 1}]" if step == 1 else f"[{run[0]}:{run[-1] + 1}:{step}]"
    return "[" + ",".join(map(str, run)) + "]"


def _lone(lone, K, children, fma):
    """``lone`` checked (leaves that are a node's right child, in an FMA tree) as a sorted tuple of ints."""
    if isinstance(lone, (str, bytes, dict)) or not hasattr(lone, "__iter__") \
            or not all(is_integer(k) for k in lone):
        raise TypeError(f"a sum tree's lone leaves are integer term indices, got {lone!r:.80}")
    out = tuple(sorted({int(k) for k in lone}))
    if out and not fma:       # without FMA every product is rounded before it is added: lone would say nothing
        raise ValueError("lone leaves are for an FMA tree (fma=True): without FMA every product is rounded "
                         "and then added already")
    joined = set(children[:, 1].tolist()) if K > 1 else set()
    bad = [k for k in out if k not in joined or k >= K]
    if bad:
        raise ValueError(f"a lone leaf is a leaf joined to a partial sum (a node's right child), got {bad[:8]} "
                         f"of a tree over K={K}")
    return out


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

    def __reduce__(self):
        # through __init__: pickle and deepcopy (a spawned process's order, a copy) set the slots directly, so the
        # copy's classes came back writeable, and a class written later to name no tree summed nothing (0.0 where
        # the original gives 17), silently: the guarantee the checks above give the original
        return (GemmOrder, (self.trees, self.classes))

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
    tiny = tree.fma and may_reach_subnormals(x, y)
    cols = min(N, _CHAIN_COLS)
    rows = max(1, _CHAIN_ELEMS // max(1, cols))
    xt = np.ascontiguousarray(x.T, dtype=np.float64)              # (K, M): row k is x_k
    y64 = y.astype(np.float64)
    with np.errstate(all="ignore"):
        for r0 in range(0, M, rows):
            for c0 in range(0, N, cols):
                xs = xt[:, r0:r0 + rows, None]
                ys = y64[:, None, c0:c0 + cols]
                out[r0:r0 + rows, c0:c0 + cols] = _tree_value(sp, xs, ys, tree, tiny)
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


def _start_value(first, xs, ys, start):
    p = xs[first] * ys[first]                  # float64: exact
    if start == "fma":
        p = p + 0.0                            # fma(x, y, +0): an exact -0 is +0, a product that underflows keeps its sign
    c = p.astype(np.float32)
    if start == "add":
        c += np.float32(0)                     # the rounded product added to +0: -0 (either kind) is +0
    return c


def _tree_value(sp, xs, ys, tree, tiny):
    """The root spine's value: each spine from its start, its leaves chained, each sub-spine's value added in
    its place.  Without recursion (a spine per term of x_0 + (x_1 + (...)) was Python's RecursionError), and
    at most one accumulator per open spine, as the recursion held."""
    stack = [[0, _start_value(sp[0][0], xs, ys, tree.start), 0]]
    sub = None
    while True:
        frame = stack[-1]
        i, c, j = frame
        items = sp[i][1]
        if sub is not None:                    # the sub-spine just summed, added in its place (c first: NaN bits)
            c = (c + sub).astype(np.float32)
            sub = None
        ks = []
        while j < len(items) and items[j][0] == "leaf":
            ks.append(items[j][1])
            j += 1
        if ks:
            _chain(c, xs, ys, ks, tree.fma, tiny)
        if j == len(items):
            stack.pop()
            if not stack:
                return c
            sub = c
            continue
        frame[1], frame[2] = c, j + 1
        v = items[j][1]
        stack.append([v, _start_value(sp[v][0], xs, ys, tree.start), 0])


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


def may_reach_subnormals(x, y):
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


