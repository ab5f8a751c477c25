"""Tensor-core step widths as parameters, and cuBLAS's split-K.

The named GEMM models are catalogue rows plus a kernel policy (:mod:`fp8emu.gemm.models`).  An
:class:`Accumulator` or :class:`BlockScaledAccumulator` states a step by its widths (products per
step, fraction bits, result bits and rounding): :func:`fp8emu.gemm.models.get_model` runs an
:class:`Accumulator` as the catalogue row of those widths (a preset's, or Hopper's row with the
widths changed), a :class:`BlockScaledAccumulator` on :mod:`fp8emu.gemm.kernels`.

Examples
--------
>>> Accumulator("mma", 32, 13, 14, "rtz", promote=4).frac_bits
13
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["Accumulator", "BlockScaledAccumulator", "cublas_split_k", "split_pieces", "split_bounds",
           "HW_K_MULTIPLE", "SPLIT_K_TILE"]

#: cuBLASLt needs K to be a multiple of this for FP8 operands.
HW_K_MULTIPLE = 16
#: K extent of one CTA K-tile of cuBLAS's sm_90 FP8 kernels: split-K pieces are whole tiles.
SPLIT_K_TILE = 128
#: Observed heuristic (see cublas_split_k): the fewest K-tiles cuBLAS gives one split-K piece,
#: the number of SMs of an H200, and the output tile assumed when counting tiles.
_MIN_TILES_PER_SPLIT = 20
_NUM_SMS = 132
_OUT_TILE = 128

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
    >>> b200_fp8 = Accumulator("mma", group=32, frac_bits=31, sum_bits=24, sum_rounding="rne")
    >>> b200_fp8.frac_bits
    31
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
        >>> Accumulator("mma", split_k="cublas").splits(32, 32, 16384)
        6
        >>> Accumulator("mma", split_k=3).splits(32, 32, 16384)
        3
        """
        return split_pieces(self.split_k, M, N, K)


def split_pieces(split_k, M, N, K):
    """Split-K pieces for an M x K by K x N product: ``None`` 1, ``"cublas"`` :func:`cublas_split_k`'s
    count for the shape, an integer itself.

    Examples
    --------
    >>> split_pieces(None, 32, 32, 16384), split_pieces("cublas", 32, 32, 16384), split_pieces(3, 32, 32, 16384)
    (1, 6, 3)
    """
    if split_k is None:
        return 1
    if split_k == "cublas":
        return cublas_split_k(M, N, K)
    return int(split_k)


@dataclasses.dataclass(frozen=True)
class BlockScaledAccumulator:
    """A block-scaled tensor-core accumulator (chained steps; see :mod:`fp8emu.gemm.block_scaled`).

    Parameters
    ----------
    group : int
        Products summed per tensor-core step.
    frac_bits : int
        Fraction bits kept when a step's terms are aligned to the largest exponent.
    sum_bits : int
        Significant bits of each step's result.
    sum_rounding : {"rtz", "rne"}
        How a step's result is rounded to ``sum_bits``.
    scale_at : {"product", "block"}
        Where the block scales apply: to every product before alignment, or to
        each K-block's partial sum as it joins a float32 accumulator.
    name : str

    Examples
    --------
    >>> BlockScaledAccumulator(group=16, frac_bits=13, sum_bits=14, scale_at="block").scale_at
    'block'
    """

    group: int = 32
    frac_bits: int = 31
    sum_bits: int = 24
    sum_rounding: str = "rne"
    scale_at: str = "product"
    name: str = "custom"

    def __post_init__(self):
        # Accumulator's checks of the shared fields
        Accumulator("mma", self.group, self.frac_bits, self.sum_bits, self.sum_rounding)
        if self.scale_at not in ("product", "block"):
            raise ValueError(f"scale_at must be 'product' or 'block', got {self.scale_at!r}")


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
    if int(splits) < 1:
        raise ValueError(f"splits must be >= 1, got {splits}")
    k_tiles = -(-int(K) // SPLIT_K_TILE)
    per = -(-k_tiles // int(splits)) * SPLIT_K_TILE
    return list(range(0, K, per))[:int(splits)] + [K] if K > 0 else [0, 0]
