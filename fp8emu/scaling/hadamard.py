"""The random Hadamard transform (RHT) of NVIDIA's NVFP4 training recipe, and its inverse.

Transformer Engine applies it, in blocks of 16 along K, to both inputs of the
weight-gradient GEMM before NVFP4 quantization (``NVFP4Quantizer(with_rht=True)``
for the column-wise copies; ``transformer_engine/pytorch/tensor/nvfp4_tensor.py``,
``get_rht_matrix``): each block row ``v`` becomes ``v @ R`` with
``R = diag(s) @ H16 / 4``, ``H16`` the Sylvester Hadamard matrix
(``H[i, j] = (-1)**popcount(i & j)``) and ``s`` TE's fixed random sign vector
:data:`TE_WGRAD_SIGNS`.  ``R`` is orthogonal (``R @ R.T = I``), so transforming
both GEMM operands along K leaves the product unchanged, while outliers are
spread over 16 elements before quantization.
"""

from __future__ import annotations

import numpy as np

from .tensor import as_f32, axis_arg

__all__ = ["hadamard_matrix", "rht_matrix", "rht", "inverse_rht", "TE_WGRAD_SIGNS", "RHT_SIZE"]

#: Block length of the transform.
RHT_SIZE = 16
#: Transformer Engine's fixed sign vector for the weight-gradient RHT (``get_wgrad_sign_vector``).
TE_WGRAD_SIGNS = (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)


def hadamard_matrix(n: int = RHT_SIZE) -> np.ndarray:
    """Sylvester Hadamard matrix of order ``n`` (a power of two): entries +-1.

    Examples
    --------
    >>> hadamard_matrix(4).astype(int).tolist()
    [[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]]
    """
    if not isinstance(n, (int, np.integer)) or n < 1 or n & (n - 1):
        raise ValueError(f"Hadamard order must be a power of two, got {n!r}")
    i = np.arange(n)
    both = i[:, None] & i[None, :]
    parity = np.zeros(both.shape, dtype=np.int64)
    for bit in range(int(n).bit_length()):      # popcount parity, one bit position at a time
        parity ^= (both >> bit) & 1
    return np.where(parity == 1, -1.0, 1.0)


def rht_matrix(signs=TE_WGRAD_SIGNS) -> np.ndarray:
    """``diag(signs) @ H16 / 4`` as float64 (entries +-0.25, exact in any float type).

    Parameters
    ----------
    signs : sequence of 16 values in {+1, -1}, optional
        The random sign vector (default: Transformer Engine's).

    Examples
    --------
    >>> import numpy as np
    >>> r = rht_matrix()
    >>> bool(np.array_equal(r @ r.T, np.eye(16)))
    True
    """
    s = np.asarray(signs, dtype=np.float64)
    if s.shape != (RHT_SIZE,) or not np.all(np.abs(s) == 1):
        raise ValueError(f"signs must be {RHT_SIZE} values of +1 or -1")
    return s[:, None] * hadamard_matrix(RHT_SIZE) / 4.0


def _apply(x, axis, matrix):
    xf = as_f32(x)
    if xf.ndim == 0:
        raise ValueError("the Hadamard transform needs an array with at least one dimension")
    ax = axis_arg(axis, xf.ndim)
    n = xf.shape[ax]
    if n % RHT_SIZE:
        raise ValueError(f"the Hadamard transform needs a multiple of {RHT_SIZE} elements along "
                         f"axis {ax}, got {n}")
    moved = np.moveaxis(xf, ax, -1).astype(np.float64)
    blocks = moved.reshape(moved.shape[:-1] + (n // RHT_SIZE, RHT_SIZE))
    # Each output is a float64 sum of 16 terms +-x/4 (NumPy's matmul order), then rounded to
    # float32.  The sum is exact while the terms' bits span at most 53 binary places; beyond
    # that it is rounded first and the result is a double rounding (see rht's docstring).
    out = (blocks @ matrix).reshape(moved.shape).astype(np.float32)
    return np.moveaxis(out, -1, ax)


def rht(x, *, axis=-1, signs=TE_WGRAD_SIGNS) -> np.ndarray:
    """Random Hadamard transform in blocks of 16 along ``axis``: ``v -> v @ R``.

    Parameters
    ----------
    x : array_like
        Values (converted to float32); ``x.shape[axis]`` a multiple of 16.
    axis : int, keyword-only
    signs : sequence of 16 +-1, keyword-only

    Returns
    -------
    numpy.ndarray of float32
        ``fl32(fl64(v @ R))`` per block: the block product is summed in
        float64 and the sum rounded to nearest-even float32.  The float64
        sum is exact when the 16 terms ``+-x/4`` of an output span at most
        53 bits (so in any block whose nonzero magnitudes lie within a factor
        of ``2**25`` of each other), and the result is then the correctly rounded
        exact product; otherwise the float64 sum is itself rounded first and
        the result can differ from the correct rounding by one float32 ULP
        (two roundings).

    Examples
    --------
    >>> import numpy as np
    >>> x = np.zeros(16); x[0] = 4.0
    >>> rht(x)[:4].tolist()          # a spike is spread over the block
    [1.0, 1.0, 1.0, 1.0]
    >>> bool(np.allclose(inverse_rht(rht(x)), x))
    True
    """
    return _apply(x, axis, rht_matrix(signs))


def inverse_rht(y, *, axis=-1, signs=TE_WGRAD_SIGNS) -> np.ndarray:
    """Inverse of :func:`rht`: ``w -> w @ R.T`` in blocks of 16 along ``axis``.

    Examples
    --------
    >>> import numpy as np
    >>> inverse_rht(rht(np.arange(16.0)))[:3].tolist()
    [0.0, 1.0, 2.0]
    """
    return _apply(y, axis, rht_matrix(signs).T)
