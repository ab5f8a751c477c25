"""Emulated FP8 GEMM (``scaled_mm``) with bit-exact models of GPU accumulators.

``scaled_mm`` computes ``(A @ B) * scale_a * scale_b (+ bias)`` from FP8 codes
with the semantics of ``torch._scaled_mm``.  How the K products are summed is
chosen by an *accumulator*:

``"exact"``
    The exact sum, rounded once to float32 (round to nearest even).
``"fp32"``
    Sequential IEEE float32 additions in K order (products are exact in float32).
``"hopper-fast"``
    The Hopper (sm_90) FP8 tensor core as used by ``use_fast_accum=True``:
    a chain of k = 32 MMA steps whose accumulator never leaves the tensor core.
``"hopper"``
    ``use_fast_accum=False``: the same steps, with the partial sum promoted
    (added with float32 round-to-nearest-even) into an FP32 accumulator every
    4 steps (K = 128), after which the tensor-core partial sum restarts at zero.

One tensor-core step (model fitted to, and bit-exact on, 170 ``torch._scaled_mm``
outputs recorded on an H200; see ``tests/test_gemm.py``):

1. Each product ``a_k * b_k`` carries the *unnormalised* exponent
   ``e(a_k) + e(b_k)`` (``e`` of a subnormal is the format's minimum exponent);
   the incoming accumulator carries its own exponent ``floor(log2|c|)``.
2. All terms are aligned to the largest of these exponents ``E`` and each is
   truncated toward zero (sign-magnitude) to a multiple of ``2**(E - 13)``.
3. The truncated terms are added exactly; the sum is normalised and truncated
   toward zero to 14 significant bits.

A 16-wide step behaves as a 32-wide step with zero products, so K = 16 needs no
special case.  :class:`Accumulator` exposes every parameter (group size,
fraction bits, result bits and rounding, promotion interval, split-K) for other
hardware.

Split-K: for long K and few output tiles cuBLAS splits K into ``S`` contiguous
pieces of ``ceil(ceil(K / 128) / S)`` K-tiles of 128 (the last piece takes the
rest).  Each piece is reduced from zero exactly as above (its own tensor-core
chain and, for ``"hopper"``, its own FP32 accumulator), and the ``S`` float32
piece results are then added in piece order with float32 round-to-nearest-even.
With ``split_k="cublas"`` (the presets) ``S`` comes from :func:`cublas_split_k`,
the choice observed on the H200 (see there; an assumption for other shapes).

Epilogue (fitted to the same data): float32 result ``acc``; scalar scales are
first multiplied, ``alpha = fl32(scale_a * scale_b)``, then
``fl32(acc * alpha)``; with a bias the value ``acc * alpha + bias`` is rounded
*once* to the output type (bias given in the output type);  row-wise scales give
``fl32(fl32(acc * scale_a[m]) * scale_b[n])``.  Block scales (1x128 / 128x128)
multiply each K-block's tensor-core partial sum before it is promoted:
``acc = fl32(acc + partial * fl32(sa[m, kb] * sb[kb, n]))`` with one rounding
(as DeepSeek-V3 / DeepGEMM kernels do with an FMA).

Limits of the fit: the dev set covers K <= 16384 with M = N = 32 (and
M = 64 at K = 256); every recorded case is bit-exact, K = 16384 through 6-way
split-K.  How cuBLAS picks the split count for other shapes is not recorded
(:func:`cublas_split_k`).  With split-K the scales and bias are applied once,
after the pieces are summed (only unit scales were recorded at K = 16384).
FP8 outputs (``scale_result``) follow cuBLASLt's documented D-scale semantics
but were not recorded on the GPU.

Products are exact in float64 (at most 8 significant bits), so the emulation
works on float64 values scaled by powers of two; all work is vectorised over
M, N and the products of a step, in chunks of rows so memory stays bounded.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from concurrent.futures import ThreadPoolExecutor
import warnings

import ml_dtypes
import numpy as np

from .codec import decode, encode
from .formats import Format, get_format

__all__ = ["Accumulator", "ACCUMULATORS", "scaled_mm", "get_accumulator", "cublas_split_k",
           "split_bounds"]

# Exponent given to zero terms: far below any real term, so it never wins the
# maximum and truncates to nothing; the sum of two still fits in int16.
_ZERO_EXP = -16000
#: Elements of the (rows, N, group) product block processed at once.
_BLOCK_ELEMS = 1 << 20
_THREADS = os.cpu_count() or 1
#: cuBLASLt needs K to be a multiple of this for FP8 operands.
HW_K_MULTIPLE = 16
#: K extent of one CTA K-tile of cuBLAS's sm_90 FP8 kernels: split-K pieces are whole tiles.
SPLIT_K_TILE = 128
#: Observed heuristic (see cublas_split_k): the fewest K-tiles cuBLAS gives one split-K piece,
#: the number of SMs of an H200, and the output tile assumed when counting tiles.
_MIN_TILES_PER_SPLIT = 20
_NUM_SMS = 132
_OUT_TILE = 128
_OUT_DTYPES = {"float32": np.dtype(np.float32), "bfloat16": np.dtype(ml_dtypes.bfloat16),
               "float16": np.dtype(np.float16)}


@dataclasses.dataclass(frozen=True)
class Accumulator:
    """How the K products of a dot product are summed.

    Parameters
    ----------
    kind : {"exact", "fp32", "mma"}
        ``"exact"``: exact sum, one rounding to float32. ``"fp32"``: sequential
        float32 additions.  ``"mma"``: chained tensor-core steps (below).
    group : int
        Products summed per tensor-core step (``"mma"`` only).
    frac_bits : int
        Fraction bits kept when every term is aligned to the largest exponent.
    sum_bits : int
        Significant bits of each step's result.
    sum_rounding : {"rtz", "rne"}
        How a step's result is rounded to ``sum_bits`` bits.
    promote : int or None
        Steps after which the partial sum is added into an FP32 accumulator
        (round to nearest even) and restarted; ``None`` never promotes.
    split_k : int, "cublas" or None
        ``"mma"`` only: split K into this many contiguous pieces of whole
        128-wide K-tiles, each reduced from zero, whose float32 results are
        summed in order with float32 additions.  ``None`` or 1: no split;
        ``"cublas"``: the count :func:`cublas_split_k` gives for the shape.
    name : str
        Label used in reprs and reports.

    Examples
    --------
    >>> get_accumulator("hopper").promote
    4
    >>> get_accumulator("hopper").split_k
    'cublas'
    >>> blackwell_like = Accumulator("mma", group=32, frac_bits=25, sum_bits=25)
    >>> blackwell_like.frac_bits
    25
    """

    kind: str = "mma"
    group: int = 32
    frac_bits: int = 13
    sum_bits: int = 14
    sum_rounding: str = "rtz"
    promote: int | None = None
    name: str = "custom"
    split_k: int | str | None = None

    def __post_init__(self):
        if self.kind not in ("exact", "fp32", "mma"):
            raise ValueError(f"Accumulator kind must be 'exact', 'fp32' or 'mma', got {self.kind!r}")
        for field in ("group", "frac_bits", "sum_bits"):
            v = getattr(self, field)
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"Accumulator {field} must be a positive integer, got {v!r}")
        if self.frac_bits > 40 or self.sum_bits > 40:
            raise ValueError("Accumulator frac_bits and sum_bits must be at most 40 "
                             "(the emulation is exact in float64 up to there)")
        if self.group > 4096:
            raise ValueError(f"Accumulator group must be at most 4096, got {self.group}")
        if self.sum_rounding not in ("rtz", "rne"):
            raise ValueError(f"Accumulator sum_rounding must be 'rtz' or 'rne', got {self.sum_rounding!r}")
        if self.promote is not None and (not isinstance(self.promote, (int, np.integer))
                                         or self.promote < 1):
            raise ValueError(f"Accumulator promote must be None or a positive integer, got {self.promote!r}")
        sk = self.split_k
        if not (sk is None or sk == "cublas"
                or (isinstance(sk, (int, np.integer)) and not isinstance(sk, bool) and sk >= 1)):
            raise ValueError(f"Accumulator split_k must be None, 'cublas' or a positive integer, got {sk!r}")
        if sk not in (None, 1) and self.kind != "mma":
            raise ValueError(f"Accumulator split_k applies to kind 'mma' only, not {self.kind!r}")

    def splits(self, M, N, K):
        """Number of split-K pieces this accumulator uses for an M x K by K x N product.

        Examples
        --------
        >>> get_accumulator("hopper-fast").splits(32, 32, 16384)
        6
        >>> Accumulator("mma", split_k=3).splits(32, 32, 16384)
        3
        """
        if self.split_k is None:
            return 1
        if self.split_k == "cublas":
            return cublas_split_k(M, N, K)
        return int(self.split_k)


#: The named accumulators.
ACCUMULATORS = {
    "exact": Accumulator("exact", name="exact"),
    "fp32": Accumulator("fp32", name="fp32"),
    "hopper-fast": Accumulator("mma", 32, 13, 14, "rtz", None, name="hopper-fast", split_k="cublas"),
    "hopper": Accumulator("mma", 32, 13, 14, "rtz", 4, name="hopper", split_k="cublas"),
}


def cublas_split_k(M, N, K):
    """Split-K count cuBLASLt (CUDA 13.0, H200) is assumed to choose for an FP8 GEMM.

    Observed (``torch._scaled_mm``, M = N = 32, both ``use_fast_accum``
    settings): no split for K <= 4096, and at K = 16384 six pieces of 22
    K-tiles (K = 2816) with the last of 18.  Every other contiguous split
    (2-16 pieces, remainder first or last) matches at most 2% of those outputs.
    The rule below is the simplest one consistent with that: as many pieces as
    give each at least 20 K-tiles of 128 (so 8192 -> 3), and no more pieces
    than fit next to the output tiles (assumed 128 x 128) on the 132 SMs.  Both
    limits are *assumptions* outside the recorded shapes; pass an integer
    ``split_k`` to :class:`Accumulator` to model another choice.

    Parameters
    ----------
    M, N, K : int
        Problem shape.

    Returns
    -------
    int
        Number of pieces (1 = no split).

    Examples
    --------
    >>> cublas_split_k(32, 32, 4096), cublas_split_k(32, 32, 16384)
    (1, 6)
    """
    k_tiles = -(-int(K) // SPLIT_K_TILE)
    tiles = -(-int(M) // _OUT_TILE) * -(-int(N) // _OUT_TILE)
    s = min(k_tiles // _MIN_TILES_PER_SPLIT, _NUM_SMS // max(1, tiles))
    return max(1, s)


def split_bounds(K, splits):
    """K offsets bounding the split-K pieces: whole 128-wide K-tiles, remainder last.

    Examples
    --------
    >>> split_bounds(16384, 6)
    [0, 2816, 5632, 8448, 11264, 14080, 16384]
    >>> split_bounds(4096, 1)
    [0, 4096]
    """
    k_tiles = -(-int(K) // SPLIT_K_TILE)
    per = -(-k_tiles // max(1, int(splits))) * SPLIT_K_TILE
    return list(range(0, K, per))[:max(1, int(splits))] + [K] if K > 0 else [0, 0]


def get_accumulator(acc) -> Accumulator:
    """Return the :class:`Accumulator` for a name or an accumulator object.

    Parameters
    ----------
    acc : str or Accumulator
        One of ``"exact"``, ``"fp32"``, ``"hopper-fast"``, ``"hopper"``, or an object.

    Returns
    -------
    Accumulator

    Examples
    --------
    >>> get_accumulator("hopper-fast").group
    32
    """
    if isinstance(acc, Accumulator):
        return acc
    if isinstance(acc, str) and acc in ACCUMULATORS:
        return ACCUMULATORS[acc]
    raise ValueError(f"unknown accumulator {acc!r}; use one of {sorted(ACCUMULATORS)} "
                     "or an fp8emu.gemm.Accumulator")


# ----------------------------------------------------------------------------- operands
def _operand(x, fmt, what):
    """(codes, Format, scale_inv or None) from codes or a ScaledTensor-like object."""
    scale = None
    if hasattr(x, "codes") and hasattr(x, "fmt"):
        if fmt is None:
            fmt = x.fmt
        scale = getattr(x, "scale_inv", None)
        x = x.codes
    if fmt is None:
        raise TypeError(f"{what}_format is required when {what} is an array of codes")
    fmt = get_format(fmt)
    codes = np.asarray(x)
    if codes.dtype != np.uint8:
        raise TypeError(f"{what} must hold uint8 FP8 codes (or be a ScaledTensor), got dtype {codes.dtype}")
    if codes.ndim != 2:
        raise ValueError(f"{what} must be 2-D, got shape {codes.shape}")
    if fmt.bits > 8:
        raise ValueError(f"{what}_format must be a format of at most 8 bits, got {fmt.name}")
    return codes, fmt, scale


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


def _values_and_exponents(codes, fmt: Format):
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


def _inf_masks(codes_a, fa, codes_b, fb):
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


# ----------------------------------------------------------------------------- exact helpers
def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _round_f32(hi, lo, dtype=np.float32):
    """Nearest-even rounding to ``dtype`` of the exact value hi + lo (|lo| <= ulp64(hi)/2)."""
    dtype = np.dtype(dtype)
    r = hi.astype(dtype)
    back = r.astype(np.float64)
    diff = hi - back
    big = np.array(np.inf, dtype)
    other = np.nextafter(r, np.where(diff > 0, big, -big)).astype(np.float64)
    # hi exactly halfway between two neighbours: the tail decides the direction
    mid = (diff != 0) & (np.abs(diff) * 2 == np.abs(other - back)) & (lo != 0) & np.isfinite(hi)
    if np.any(mid):
        nudged = np.nextafter(hi, np.where(lo > 0, np.inf, -np.inf))
        r = np.where(mid, nudged.astype(dtype), r)
    return r


def _trunc_bits(x, bits, rounding):
    """Round float64 x to ``bits`` significant bits (toward zero or nearest even)."""
    _, e = np.frexp(x)
    s = np.ldexp(1.0, bits - e)
    y = x * s
    y = np.trunc(y) if rounding == "rtz" else np.rint(y)
    return y / s


# ----------------------------------------------------------------------------- accumulators
def _mma(va, ea, vb, eb, acc: Accumulator, kscale=None, kblock=128):
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
    rows = -(-M // max(min(_THREADS, M), -(-M // rows)))   # at least one block per core

    def row_block(m0, m1):
        P = np.empty((G, m1 - m0, N), dt)
        Eb = np.empty((G, m1 - m0, N), np.int16)
        result = None
        for g0, g1 in pieces:
            piece = _mma_piece(vat_, vb_, eat_, eb_, m0, m1, g0, g1, P, Eb, acc, promote, e_floor, dt,
                               kscale, kblock)
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


def _mma_piece(vat_, vb_, eat_, eb_, m0, m1, g0, g1, P, Eb, acc, promote, e_floor, dt, kscale, kblock):
    """float32 result of steps g0..g1-1 for rows m0..m1, starting from a zero accumulator."""
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
        part = _trunc_bits(s, acc.sum_bits, acc.sum_rounding) / sc
        if promote and ((g + 1 - g0) % promote == 0 or g == g1 - 1):
            if kscale is None:
                total = (total + part.astype(np.float32)).astype(np.float32)
            else:
                f = kscale(m0, m1, (g * G) // kblock)
                hi, lo = _two_sum(total.astype(np.float64), part * f)
                total = _round_f32(hi, lo)
            part = np.zeros_like(part)
    return total if promote else part.astype(np.float32)


def _fp32(va, vb):
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


def _exact(va, ea, vb, eb, mbits_a=6, mbits_b=6):
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
            terms[i + 1], terms[i] = _two_sum(terms[i], terms[i + 1])
    hi = terms[-1]
    lo = np.sum(terms[:-1], axis=0) if len(terms) > 1 else np.zeros_like(hi)
    return _round_f32(hi, lo)


def _accumulate(va, ea, vb, eb, acc: Accumulator, mbits=(6, 6)):
    if acc.kind == "exact":
        return _exact(va, ea, vb, eb, *mbits)
    if acc.kind == "fp32":
        return _fp32(va, vb)
    return _mma(va, ea, vb, eb, acc)


# ----------------------------------------------------------------------------- scales
_KBLOCK = 128


def _as_scale(s, what):
    try:
        arr = np.asarray(s, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{what} must be a float or an array of floats, got {type(s).__name__}") from None
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} must be finite, got non-finite values")
    # torch passes scales as float32 tensors
    return arr.astype(np.float32)


def _classify_scale(s, rows, K, what, other):
    """'scalar', 'row' (one per row) or 'block' ((row blocks, K blocks)) for an operand
    seen as rows x K; returns (kind, array shaped (rows or row-blocks, 1 or K-blocks), row_block)."""
    kb = -(-K // _KBLOCK)
    if s.size == 1:
        return "scalar", s.reshape(()), 1
    if s.ndim != 2:
        raise ValueError(f"{what} must be a scalar or 2-D, got shape {s.shape}")
    r, c = s.shape
    if (r, c) == (rows, 1):
        return "row", s, 1
    if (r, c) == (rows, kb):
        return "block", s, 1
    if (r, c) == (-(-rows // _KBLOCK), kb):
        return "block", s, _KBLOCK
    raise ValueError(
        f"{what} has shape {s.shape}; accepted: a scalar, {other}, ({rows}, {kb}) 1x128 blocks "
        f"or ({-(-rows // _KBLOCK)}, {kb}) 128x128 blocks")


# ----------------------------------------------------------------------------- public API
def _out_dtype(out_dtype):
    if isinstance(out_dtype, str) and out_dtype in _OUT_DTYPES:
        return _OUT_DTYPES[out_dtype], None
    try:
        dt = np.dtype(out_dtype)
        if dt in _OUT_DTYPES.values():
            return dt, None
    except TypeError:
        pass
    try:
        return None, get_format(out_dtype)
    except (ValueError, TypeError, KeyError):
        raise ValueError(f"unknown out_dtype {out_dtype!r}; use 'float32', 'bfloat16', 'float16' "
                         "or an FP8 format name") from None


def scaled_mm(a, b, *, a_format=None, b_format=None, scale_a=1.0, scale_b=1.0, bias=None,
              out_dtype="float32", accumulator="hopper", scale_result=None):
    """Emulate ``torch._scaled_mm``: ``(A @ B) * scale_a * scale_b (+ bias)`` from FP8 codes.

    Parameters
    ----------
    a : ndarray of uint8, shape (M, K), or ScaledTensor
        FP8 codes of A, or an object with ``codes``, ``fmt`` and ``scale_inv``
        (then ``a_format`` may be omitted and ``scale_inv`` is used as ``scale_a``).
    b : ndarray of uint8, shape (K, N), or ScaledTensor
        FP8 codes of B (logical K x N layout).
    a_format, b_format : str or Format
        Formats of the codes.
    scale_a, scale_b : float or ndarray
        float32 dequantisation multipliers: scalars, row-wise (``scale_a`` (M, 1),
        ``scale_b`` (1, N)), or block scales: ``scale_a`` (M, ceil(K/128)) for 1x128
        blocks or (ceil(M/128), ceil(K/128)) for 128x128 blocks; ``scale_b``
        (ceil(K/128), N) or (ceil(K/128), ceil(N/128)).  Block scales multiply each
        128-wide K block's partial sum before it joins the FP32 accumulator.
    bias : array_like of shape (N,), optional
        Added to every row; converted to the output type first (as torch does).
    out_dtype : str
        ``"float32"``, ``"bfloat16"``, ``"float16"`` or an FP8/narrow format name.
    accumulator : str or Accumulator
        ``"hopper"`` (``use_fast_accum=False``), ``"hopper-fast"``
        (``use_fast_accum=True``), ``"fp32"``, ``"exact"``, or an :class:`Accumulator`.
    scale_result : float, optional
        Narrow output only: the float32 result is multiplied by it before the
        (round-to-nearest-even, saturating) conversion.

    Returns
    -------
    ndarray, shape (M, N)
        float32 / bfloat16 / float16 values, or uint8 codes for a narrow ``out_dtype``.

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> a = fp8emu.encode(np.array([[1.0] + [2.0 ** -9] * 15]), "e4m3fn")
    >>> b = fp8emu.encode(np.array([[1.0]] + [[2.0 ** -6]] * 15), "e4m3fn")
    >>> float(scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", accumulator="exact")[0, 0])
    1.000457763671875
    >>> float(scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", accumulator="hopper")[0, 0])
    1.0
    """
    ca, fa, sa_obj = _operand(a, a_format, "a")
    cb, fb, sb_obj = _operand(b, b_format, "b")
    if sa_obj is not None:
        if not (np.ndim(scale_a) == 0 and float(scale_a) == 1.0):
            raise ValueError("give scale_a or a ScaledTensor with scale_inv, not both")
        scale_a = sa_obj
    if sb_obj is not None:
        if not (np.ndim(scale_b) == 0 and float(scale_b) == 1.0):
            raise ValueError("give scale_b or a ScaledTensor with scale_inv, not both")
        scale_b = sb_obj
    M, K = ca.shape
    if cb.shape[0] != K:
        raise ValueError(f"shape mismatch: a is {ca.shape} and b is {cb.shape}; need (M, K) @ (K, N)")
    N = cb.shape[1]
    acc = get_accumulator(accumulator)
    odt, ofmt = _out_dtype(out_dtype)
    if scale_result is not None:
        if ofmt is None:
            raise ValueError("scale_result applies only to a narrow (FP8) out_dtype")
        scale_result = _as_scale(scale_result, "scale_result")
        if scale_result.size != 1:
            raise ValueError("scale_result must be a scalar")
    if K % HW_K_MULTIPLE:
        warnings.warn(f"K = {K} is not a multiple of {HW_K_MULTIPLE}: cuBLASLt rejects such FP8 "
                      "GEMMs; computing anyway", RuntimeWarning, stacklevel=2)

    sa = _as_scale(scale_a, "scale_a")
    sb = _as_scale(scale_b, "scale_b")
    ka, sa, rba = _classify_scale(sa, M, K, "scale_a", f"({M}, 1) row-wise")
    kb_, sbt, rbb = _classify_scale(sb.T if sb.ndim == 2 else sb, N, K, "scale_b",
                                    f"(1, {N}) column-wise")

    va, ea = _values_and_exponents(ca, fa)
    vb, eb = _values_and_exponents(cb, fb)

    if "block" in (ka, kb_):
        def expand(s, kind, rows, rb):
            # -> (rows, K-blocks) float64
            nkb = -(-K // _KBLOCK)
            if kind == "scalar":
                return np.full((rows, nkb), float(s))
            if kind == "row":
                return np.repeat(s.astype(np.float64), nkb, axis=1)
            return np.repeat(s.astype(np.float64), rb, axis=0)[:rows]
        SA = expand(sa, ka, M, rba)
        SB = expand(sbt, kb_, N, rbb)

        def kscale(m0, m1, kb):
            return (SA[m0:m1, kb, None].astype(np.float32) * SB[None, :, kb].astype(np.float32)
                    ).astype(np.float64)
        if acc.kind == "mma":
            v = _mma(va, ea, vb, eb, acc, kscale=kscale, kblock=_KBLOCK)
        else:
            total = np.zeros((M, N), np.float32)
            for kb in range(-(-K // _KBLOCK)):
                sl = slice(kb * _KBLOCK, (kb + 1) * _KBLOCK)
                part = _accumulate(va[:, sl], ea[:, sl], vb[sl], eb[sl], acc, (fa.mbits, fb.mbits)).astype(np.float64)
                hi, lo = _two_sum(total.astype(np.float64), part * kscale(0, M, kb))
                total = _round_f32(hi, lo)
            v = total
    else:
        c = _accumulate(va, ea, vb, eb, acc, (fa.mbits, fb.mbits))
        with np.errstate(over="ignore", invalid="ignore"):
            if ka == "scalar" and kb_ == "scalar":
                v = c * (sa * sb).astype(np.float32)
            else:
                v = (c * sa.reshape(-1, 1) if ka == "row" else c * sa).astype(np.float32)
                v = v * (sbt.reshape(1, -1) if kb_ == "row" else sbt)
        v = v.astype(np.float32)

    # IEEE semantics for NaN/Inf operands (the core above works on finite values)
    if (~np.isfinite(decode(ca, fa))).any() or (~np.isfinite(decode(cb, fb))).any():
        pos, neg, nan = _inf_masks(ca, fa, cb, fb)
        v = np.where(nan, np.float32(np.nan), np.where(pos, np.float32(np.inf),
                                                       np.where(neg, np.float32(-np.inf), v)))

    target = odt if odt is not None else np.dtype(np.float32)
    if bias is not None:
        bias = np.asarray(bias, dtype=np.float64)
        if bias.shape not in ((N,), (1, N)):
            raise ValueError(f"bias must have shape ({N},), got {bias.shape}")
        bias = bias.reshape(1, N).astype(target).astype(np.float64)
        with np.errstate(invalid="ignore"):
            hi, lo = _two_sum(v.astype(np.float64), bias)
            lo = np.where(np.isfinite(hi), lo, 0.0)
        out = _round_f32(hi, lo, target)
    else:
        out = v.astype(target)
    if ofmt is None:
        return out
    if scale_result is not None:
        out = (out * scale_result).astype(np.float32)
    return encode(out, ofmt, saturate=True)
