"""Memory layouts of the fast routes' operands: transposed copies and K-major codes, moved in
8-byte words.

NumPy copies a transpose one element at a time, each a cache miss; 8-byte words of 1-, 2- or
4-byte elements move ``8 / itemsize`` elements per miss, and each word's elements are then moved
apart with strides of one word, which stay in the caches.
"""

from __future__ import annotations

import numpy as np


def transposed(x):
    """A new C-contiguous copy of the transpose of a 2-D array whose last axis is contiguous.

    Examples
    --------
    >>> x = np.arange(12, dtype=np.uint8).reshape(3, 4)
    >>> bool((transposed(x) == x.T).all()), transposed(x).flags.c_contiguous
    (True, True)
    """
    P, Q = x.shape
    g = 8 // x.itemsize
    if x.itemsize < 8 and P > 1 and Q % g == 0 and x.strides[1] == x.itemsize:
        w = np.ascontiguousarray(x.view(np.uint64).T)                     # (Q / g, P) words
        return np.ascontiguousarray(w.view(x.dtype).reshape(Q // g, P, g).transpose(0, 2, 1)).reshape(Q, P)
    return np.array(x.T, order="C")


def kmajor_codes(codes):
    """uint8 codes (t, r, k) as a K-major array (k, r, t), or a view of one (moved in 8-byte words
    where k or k x r is contiguous: A's tiles and B's as :func:`fp8emu.gemm.instructions.mma` lays
    them out).

    Examples
    --------
    >>> c = np.arange(2 * 3 * 8, dtype=np.uint8).reshape(2, 3, 8)
    >>> bool((kmajor_codes(c) == np.transpose(c, (2, 1, 0))).all())
    True
    """
    t, r, k = codes.shape
    if t > 1 and codes.strides[2] == 1 and k % 8 == 0:
        # words of 8 codes along k, K-major, then each word's codes apart
        w = np.ascontiguousarray(codes.view(np.uint64).transpose(2, 1, 0))          # (k / 8, r, t)
        return np.ascontiguousarray(w.view(np.uint8).reshape(k // 8, r, t, 8).transpose(0, 3, 1, 2)).reshape(k, r, t)
    if t > 1 and codes.strides[1] == 1 and codes.strides[2] == r:
        return transposed(codes.transpose(0, 2, 1).reshape(t, k * r)).reshape(k, r, t)
    return np.transpose(codes, (2, 1, 0))
