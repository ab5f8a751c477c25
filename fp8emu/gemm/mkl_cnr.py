"""MKL's reproducible sgemm (``MKL_CBWR=COMPATIBLE``): its float32 summation order, recorded as a rule.

MKL's conditional numerical reproducibility (CNR) branch ``COMPATIBLE`` is its SSE2 code without the
approximation instructions (``rcpps``/``rsqrtps``) whose results differ between vendors; Intel's
developer guide gives it as the branch that returns the same results on Intel and Intel-compatible
CPUs (at a fixed thread count), and ``AUTO`` and ``COMPATIBLE`` as the only branches a non-Intel CPU
(an AMD EPYC) may be set to.  So where a torch CPU run sets
``MKL_CBWR=COMPATIBLE``, its GEMMs are one order on every vendor's CPU, which is recorded here.

The order, as found by probing torch 2.13.0+cpu (MKL 2024.2) on an Intel Xeon (KVM, 2 vCPUs; the
survey and random shapes in ``docs/data/cpu-order/xeon-amx-mkl-2024.2-compatible*.json``) and found
again, bit for bit on the same random products, on an AMD EPYC with AVX2 (``epyc-avx2-*``), with
no FMA (each product rounded to float32, then added):

* **Interior tiles** (MKL's kernel tiles of 4 rows of C by 8 columns, where the part of C one
  thread computes has at least 8 rows and 8 columns): K in blocks of 112, each block a chain from
  zero; the first block's sum, then the last block's, then the middle blocks' in order, added one
  after the other (:func:`block_tree`).
* **Edge columns** (the columns past the last whole 8 of such a part): one chain that starts with
  product 0, adds the last block's sum, then products 1 .. of the blocks before the last one by
  one (:func:`edge_tree`).
* **Everything else** (the rows past the last whole 4; a part under 8 rows or 8 columns): one
  plain chain over K (:func:`chain_tree`).
* **Two threads** cut C in two along its longer side (rows where M >= N), the first part
  ``floor(half)`` long, and each part is tiled as above.

Proven for row-major B (layouts ``"NN"`` and ``"TN"``), M >= 1, N >= 2 (and the single output
1 x K x 1, one plain chain as measured), K <= 4096, 1 and 2 threads; with a transposed B (``"NT"``,
``"TT"``) MKL sums the edge tiles in SIMD lanes, so only shapes whose every output lies in an
interior tile are proven there.  A single column of more than one row (N = 1 < M) goes to MKL's
gemv, whose order was not measured.

Examples
--------
>>> m = MODEL
>>> m.order(16, 400, 9, threads=1).describe()     # 8 columns of whole tiles, one edge column
'128 outputs: mul+add [0:112] + [336:400] + [112:224] + [224:336]; 16 outputs: mul+add 0 + [336:400] then [1:336]'
>>> m.order(8, 400, 8, threads=2).describe()      # two threads: 4 x 8 each, too small to tile
'mul+add [0:400]'
>>> m.unproven(13, 500, 29, 1, "NT")
'with a transposed B (NT) MKL sums edge tiles in SIMD lanes; only shapes tiled whole were proven'
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..interop import is_integer
from .sumtree import GemmOrder, SumTree

__all__ = ["CompatibleModel", "MODEL", "block_tree", "edge_tree", "chain_tree", "tile_classes", "LAYOUTS",
           "check_gemm"]

#: Classes of :func:`tile_classes`.
INTERIOR, EDGE, PLAIN = 0, 1, 2
#: How A and B reach a BLAS: row-major (N) or transposed views (T), as ``transa`` / ``transb``.
LAYOUTS = ("NN", "NT", "TN", "TT")


def check_gemm(M, K, N, threads=None, layout="NN", *, name="order"):
    """One ValueError for sizes that are no non-negative integers, a thread count neither None nor a
    positive integer, or a layout outside :data:`LAYOUTS` (a recorded model's methods read a negative K,
    ``True`` threads or a layout ``"XX"`` as another order, or as proven, silently).

    Examples
    --------
    >>> check_gemm(4, 0, 2, 2, "TN") is None
    True
    >>> check_gemm(4, -1, 2)
    Traceback (most recent call last):
    ...
    ValueError: order: M, K, N must be non-negative integers, got 4, -1, 2
    """
    if not all(is_integer(v) and v >= 0 for v in (M, K, N)):
        raise ValueError(f"{name}: M, K, N must be non-negative integers, got {M!r}, {K!r}, {N!r}")
    if threads is not None and (not is_integer(threads) or threads < 1):
        raise ValueError(f"{name}: threads must be a positive integer (torch's thread count) or None, got {threads!r}")
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def _chain(k0, k1):
    """Nested pairs of one chain over ``[k0, k1)``."""
    c = k0
    for k in range(k0 + 1, k1):
        c = (c, k)
    return c


def _terms(K):
    # K = 0 or True gave a tree of None leaves or of one term; the trees describe K >= 1 products
    if not is_integer(K) or K < 1:
        raise ValueError(f"K must be a positive integer (the number of products summed), got {K!r}")


def _bounds(K, kc):
    _terms(K)
    if not is_integer(kc) or kc < 1:   # kc=True read as blocks of one term, edge_tree(300, -5) as one chain
        raise ValueError(f"kc must be a positive integer (the K block MKL sums as one chain), got {kc!r}")
    return list(range(0, K, kc)) + [K]


def chain_tree(K):
    """One chain of float32 additions over K, no FMA."""
    _terms(K)
    return SumTree.blocks([0, K], fma=False)


def block_tree(K, kc=112):
    """Blocks of ``kc``, each a chain; the first block's sum, the last's, then the middle ones', in order.

    Examples
    --------
    >>> block_tree(300).describe()
    '[0:112] + [224:300] + [112:224]'
    """
    b = _bounds(K, kc)
    blocks = list(zip(b[:-1], b[1:]))
    if len(blocks) > 2:
        blocks = [blocks[0], blocks[-1]] + blocks[1:-1]
    t = None
    for k0, k1 in blocks:
        c = _chain(k0, k1)
        t = c if t is None else (t, c)
    return SumTree.from_nested(t, fma=False)


def edge_tree(K, kc=112):
    """Product 0, plus the last block's sum, then products 1 .. up to the last block, one by one.

    Examples
    --------
    >>> edge_tree(300).describe()
    '0 + [224:300] then [1:224]'
    """
    b = _bounds(K, kc)
    if len(b) <= 2:
        return chain_tree(K)
    t = (0, _chain(b[-2], b[-1]))
    for k in range(1, b[-2]):
        t = (t, k)
    return SumTree.from_nested(t, fma=False)


def _part(M, N, m_min, m_tile, n_tile):
    c = np.full((M, N), PLAIN, np.int16)
    if M >= m_min and N >= n_tile:
        mb, nb = M - M % m_tile, N - N % n_tile
        c[:mb, :nb] = INTERIOR
        c[:mb, nb:] = EDGE
    return c


def _part_present(M, N, m_min=8, m_tile=4, n_tile=8):
    """The classes :func:`_part` gives some output of an M x N part, in class order."""
    if M == 0 or N == 0:
        return set()
    if M >= m_min and N >= n_tile:
        return {INTERIOR} | ({EDGE} if N % n_tile else set()) | ({PLAIN} if M % m_tile else set())
    return {PLAIN}


def _parts(M, N, threads):
    """The parts of C the threads compute, and the axis they are stacked along: two threads cut the
    longer side, the first part floor(half) long."""
    # None, 0, 2.5 or "2" tiled as two threads, True as one (order_for takes None for an unknown count and
    # passes 1): each another order, silently
    if not is_integer(threads) or threads < 1:
        raise ValueError(f"threads must be a positive integer (torch's thread count), got {threads!r}")
    if threads == 1:
        return [(M, N)], 0
    if M >= N:
        return [(M // 2, N), (M - M // 2, N)], 0
    return [(M, N // 2), (M, N - N // 2)], 1


def _present(M, N, threads=1):
    """The classes :func:`tile_classes` gives some output, in class order, without building the array."""
    return sorted(set().union(*(_part_present(m, n) for m, n in _parts(M, N, threads)[0])))


def _class_at(M, N, threads, i, j, m_min=8, m_tile=4, n_tile=8):
    """The class :func:`tile_classes` gives output (i, j), without building the array."""
    parts, axis = _parts(M, N, threads)
    (m, n), at = parts[0], (i, j)[axis]
    if len(parts) == 2 and at >= parts[0][axis]:
        m, n = parts[1]
        i, j = (i - parts[0][0], j) if axis == 0 else (i, j - parts[0][1])
    if m < m_min or n < n_tile or i >= m - m % m_tile:
        return PLAIN
    return INTERIOR if j < n - n % n_tile else EDGE


def _cuts(M, N, threads, m_tile=4, n_tile=8):
    """Rows and columns where :func:`tile_classes`' value can change (parts' and tiles' ends)."""
    parts, axis = _parts(M, N, threads)
    rows, cols, r0, c0 = {0}, {0}, 0, 0
    for m, n in parts:
        rows |= {r0, r0 + m - m % m_tile}
        cols |= {c0, c0 + n - n % n_tile}
        r0, c0 = (r0 + m, c0) if axis == 0 else (r0, c0 + n)
    return rows, cols


def _same_tiling(M, N, threads_a, threads_b):
    """Whether two thread counts tile an M x N output alike, from the cells between every cut (at most
    a handful), not from two M x N arrays."""
    ra, ca = _cuts(M, N, threads_a)
    rb, cb = _cuts(M, N, threads_b)
    rows = sorted(r for r in ra | rb if r < M)
    cols = sorted(c for c in ca | cb if c < N)
    return all(_class_at(M, N, threads_a, i, j) == _class_at(M, N, threads_b, i, j) for i in rows for j in cols)


def tile_classes(M, N, threads=1, *, m_min=8, m_tile=4, n_tile=8):
    """The (M, N) class of each output: :data:`INTERIOR`, :data:`EDGE` or :data:`PLAIN`.

    Examples
    --------
    >>> tile_classes(9, 9)[[0, 8], :][:, [0, 8]].tolist()    # row 8 past the 4-row tiles, column 8 an edge
    [[0, 1], [2, 2]]
    >>> tile_classes(20, 20, threads=2)[:, 0].tolist() == [0] * 8 + [2] * 2 + [0] * 8 + [2] * 2
    True
    """
    if not all(is_integer(v) and v >= 0 for v in (M, N)):     # NumPy's "negative dimensions are not allowed"
        raise ValueError(f"tile_classes: M, N must be non-negative integers, got {M!r}, {N!r}")
    if not all(is_integer(v) and v >= 1 for v in (m_min, m_tile, n_tile)):   # m_tile=0 divided by zero
        raise ValueError(f"tile_classes: m_min, m_tile and n_tile must be positive integers, got {m_min!r}, "
                         f"{m_tile!r}, {n_tile!r}")
    parts, axis = _parts(M, N, threads)
    classes = [_part(m, n, m_min, m_tile, n_tile) for m, n in parts]
    return classes[0] if len(classes) == 1 else np.concatenate(classes, axis=axis)    # one part: no copy


def _handed(classes):
    """``classes`` made read-only: handed over, GemmOrder keeps it without a copy (10**8 outputs are 200 MB)."""
    classes.flags.writeable = False
    return classes


@dataclasses.dataclass(frozen=True)
class CompatibleModel:
    """The order of MKL's CNR ``COMPATIBLE`` branch, with where it was proven (module docstring)."""

    name: str
    proven_on: str
    vendors: tuple         # /proc/cpuinfo vendor_ids it was measured on
    mkl_env: tuple         # the MKL settings it was measured under, as (name, value) pairs
    kc: int = 112
    max_k: int = 4096
    proven_threads: tuple = (1, 2)
    proven_layouts: tuple = ("NN", "TN")

    def applies_here(self, info):
        return info["vendor"] in self.vendors and info["mkl_env"] == dict(self.mkl_env)

    def order(self, M, K, N, threads=1, layout="NN"):
        """The :class:`~fp8emu.gemm.sumtree.GemmOrder` of an M x K x N product on ``threads`` (one order for
        every ``layout``: where a transposed B sums otherwise, :meth:`unproven` says so)."""
        check_gemm(M, K, N, layout=layout, name=self.name)  # K = -8 was read as an empty sum, 2.5 failed in range()
        outer = K == 1 and min(M, N) >= 2       # an outer product: its products as they are, a -0 kept (measured)
        K = max(K, 1)        # an empty sum: one leaf, as the other recorded model answers
        trees = [block_tree(K, self.kc), edge_tree(K, self.kc), chain_tree(K)]
        if outer:
            trees = [t.starting("product") for t in trees]
        if M == 0 or N == 0:
            return GemmOrder(trees[2:], np.zeros((M, N), np.int16))
        # the classes present follow from the parts' sizes (np.unique sorted every output: 35 s and 5 GB of
        # memory for 30000 x 30000 outputs, where the other recorded model answers at once)
        distinct, index = [], {}      # the trees some output takes, each once (K <= kc: one)
        for u in _present(M, N, threads):
            if trees[u] not in distinct:
                distinct.append(trees[u])
            index[u] = distinct.index(trees[u])
        if len(distinct) == 1:
            return GemmOrder(distinct, _handed(np.zeros((M, N), np.int16)))
        c = tile_classes(M, N, threads)
        for u, i in index.items():        # renumbered in place (no second M x N array)
            if i != u:
                c[c == u] = i
        return GemmOrder(distinct, _handed(c))

    def unproven(self, M, K, N, threads, layout="NN"):
        """Why this GEMM lies outside what was proven (``None`` inside)."""
        check_gemm(M, K, N, threads, layout, name=self.name)   # "XX" was proven, True one thread
        if M == 0 or K == 0 or N == 0:
            # an empty product sums nothing (+0, as torch.mm): K = 0 warned that two threads tile it differently
            return None
        if N < 2 and M > 1:
            return "a single column goes to MKL's gemv, whose order was not measured"
        if K > self.max_k:
            return f"K <= {self.max_k} was proven"
        if threads is None:
            # K <= kc: every class is one chain, so how the threads tile C does not change the order (8x64x8 warned)
            if K > self.kc and not _same_tiling(M, N, 1, 2):
                return "the thread count is not known, and one and two threads tile this shape differently"
            # one and two threads tile it alike: the layout's caveat still applies (it returned None here,
            # calling edge tiles of a transposed B proven where either thread count warns)
        elif threads not in self.proven_threads:
            return f"{' and '.join(map(str, self.proven_threads))} thread(s) were proven"
        if layout not in self.proven_layouts and _present(M, N, threads or 1) not in ([], [INTERIOR]):
            return (f"with a transposed B ({layout}) MKL sums edge tiles in SIMD lanes; only shapes tiled whole "
                    "were proven")
        return None


#: ``mkl-2024.2-compatible``: torch 2.13.0+cpu's MKL 2024.2 under ``MKL_CBWR=COMPATIBLE``.
MODEL = CompatibleModel(
    name="mkl-2024.2-compatible",
    proven_on="an Intel Xeon with AMX, an AMD EPYC with AVX2 (family 23) and one with AVX-512 (family 25, Zen 4) "
              "(each KVM, 2 vCPUs), torch 2.13.0+cpu, MKL 2024.2 with MKL_CBWR=COMPATIBLE: on each, 154 survey GEMMs, "
              "the starts of 216 and torch.mm on the same 300 random shapes (M, N up to 1200, K up to 4096, 1 and 2 "
              "threads, all four layouts), with the same bits on all three; MKL documents this branch as giving the "
              "same results on every Intel or Intel-compatible CPU at a fixed thread count, which was measured on "
              "these three only",
    vendors=("GenuineIntel", "AuthenticAMD"), mkl_env=(("MKL_CBWR", "COMPATIBLE"),))
