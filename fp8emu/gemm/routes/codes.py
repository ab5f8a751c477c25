"""Per-code tables and operand decoding shared by the fast routes (:mod:`fp8emu.gemm.routes`).

The tables hold, per code (or per pair of codes), exactly the values and MMA-Sim exponents that
:mod:`fp8emu.gemm.datapaths` decodes; the work arrays are kept per thread between calls.
"""

from __future__ import annotations

import threading

import numpy as np

from ..datapaths import _TABLES, _sig_exp

#: Exponent a zero product carries in the tables of the block-scaled datapaths: below every real
#: one, so a maximum over a block sees only its non-zero products.
_NONE = -(1 << 15)
_PAIRS = {}
_LOCAL = threading.local()


def _pair_tables(fa, fb, zero_exp):
    """Exact float64 product and MMA-Sim exponent of every (a, b) code pair, indexed ``a << bits_b | b``,
    and the smallest exponent of a finite non-zero product.

    FP8 x FP8 products have at most 8 significant bits and exponents within float64's range, so
    the product of two decoded values is exact; a zero product carries ``zero_exp``.
    """
    key = (fa.name, fb.name, zero_exp)
    if key not in _PAIRS:
        for f in (fa, fb):
            if f.name not in _TABLES:
                _TABLES[f.name] = _sig_exp(f)
        (va, ea), (vb, eb) = _TABLES[fa.name], _TABLES[fb.name]
        with np.errstate(invalid="ignore"):
            p = np.multiply.outer(va, vb).ravel()
        x = np.where(p == 0, zero_exp, np.add.outer(ea, eb).ravel()).astype(np.int16)
        p.flags.writeable = x.flags.writeable = False
        nz = x[(x != zero_exp) & np.isfinite(p)]
        _PAIRS[key] = p, x, int(nz.min()) if nz.size else 0
    return _PAIRS[key]

def _codes_ok(codes, fmt, what):
    codes = np.asarray(codes)
    if codes.dtype != np.uint8:
        raise TypeError(f"{what} must be uint8 codes (one element per byte), got dtype {codes.dtype}")
    if fmt.bits < 8 and int(codes.max(initial=0)) >> fmt.bits:
        raise ValueError(f"{what} holds codes above {fmt.name}'s {fmt.bits} bits")
    return codes

#: Exponent a zero operand carries on the operand path (int8): a product with a zero factor then
#: carries at most -64 + 15, below every real product exponent (at least -28, e5m2 x e5m2), and two
#: zero factors -128, still an int8.
_ZERO8 = -64


def _operand_tables(fmt, dt):
    """Per-code value (``dt``) and MMA-Sim exponent (int8, ``_ZERO8`` for zeros) of an FP8/FP6/FP4
    format, and the smallest exponent of a non-zero code."""
    key = ("operand", fmt.name, dt)
    if key not in _TABLES:
        if fmt.name not in _TABLES:
            _TABLES[fmt.name] = _sig_exp(fmt)
        v, e = _TABLES[fmt.name]
        ev = np.where(v == 0, _ZERO8, e).astype(np.int8)
        vv = v.astype(dt)
        vv.flags.writeable = ev.flags.writeable = False
        _TABLES[key] = vv, ev, int(e[v != 0].min())
    return _TABLES[key]

def _work(name, n, dtype):
    """This thread's work array ``name`` of at least ``n`` elements (kept between calls, see
    :func:`fp8emu.gemm.routes.tables._buffers`)."""
    ws = _LOCAL.__dict__.setdefault("operand", {})
    w = ws.get(name)
    if w is None or w.size < n or w.dtype != dtype:
        w = ws[name] = np.empty(max(n, 1), dtype)
    return w[:n]


def _swap2(x):
    """A new C-contiguous copy of the transpose of a 2-D array whose last axis is contiguous.

    NumPy copies a transpose one element at a time, each a cache miss; 8-byte words of 1-, 2-
    or 4-byte elements move ``8 / itemsize`` elements per miss, and each word's elements are then
    moved apart with strides of one word, which stay in the caches.
    """
    P, Q = x.shape
    g = 8 // x.itemsize
    if x.itemsize < 8 and P > 1 and Q % g == 0 and x.strides[1] == x.itemsize:
        w = np.ascontiguousarray(x.view(np.uint64).T)                     # (Q / g, P) words
        return np.ascontiguousarray(w.view(x.dtype).reshape(Q // g, P, g).transpose(0, 2, 1)).reshape(Q, P)
    return np.array(x.T, order="C")


def _kmajor_codes(codes):
    """uint8 codes (t, r, k) as a K-major array (k, r, t), or a view of one (moved in 8-byte words
    where k or k x r is contiguous: A's tiles and B's as :func:`mma` lays them out)."""
    t, r, k = codes.shape
    if t > 1 and codes.strides[2] == 1 and k % 8 == 0:
        # words of 8 codes along k, K-major, then each word's codes apart
        w = np.ascontiguousarray(codes.view(np.uint64).transpose(2, 1, 0))          # (k / 8, r, t)
        return np.ascontiguousarray(w.view(np.uint8).reshape(k // 8, r, t, 8).transpose(0, 3, 1, 2)).reshape(k, r, t)
    if t > 1 and codes.strides[1] == 1 and codes.strides[2] == r:
        return _swap2(codes.transpose(0, 2, 1).reshape(t, k * r)).reshape(k, r, t)
    return np.transpose(codes, (2, 1, 0))


def _operand_pair_tables(fmt):
    """:func:`_operand_tables` (float32 values) for two consecutive codes at once: indexed by the
    two bytes read as one uint16, the two values as one 8-byte word and the two exponents as one
    2-byte word.  A gather then moves two elements for one index, and half as many indices are
    widened to intp.  Built from the bytes of each index as this machine orders them."""
    key = ("operand pairs", fmt.name)
    if key not in _TABLES:
        v, e, _ = _operand_tables(fmt, np.float32)
        n = v.size
        b = np.arange(1 << 16, dtype=np.uint16).view(np.uint8).reshape(-1, 2).astype(np.intp) % n
        pv = np.ascontiguousarray(v[b]).view(np.uint64).reshape(-1)
        pe = np.ascontiguousarray(e[b]).view(np.int16).reshape(-1)
        pv.flags.writeable = pe.flags.writeable = False
        _TABLES[key] = pv, pe
    return _TABLES[key]


def _pair_decode(codes, fmt, which, exps=False):
    """float32 values (and, with ``exps``, int8 exponents) of codes (any shape, C-contiguous or
    copied so, an even number of them), two per gather (:func:`_operand_pair_tables`), in this
    thread's work arrays."""
    pv, pe = _operand_pair_tables(fmt)
    n = codes.size // 2
    idx = _work(which + "i", n, np.intp)
    np.copyto(idx, np.ascontiguousarray(codes).reshape(-1).view(np.uint16))
    v = np.take(pv, idx, out=_work(which + "v", n, np.uint64), mode="wrap").view(np.float32).reshape(codes.shape)
    if not exps:
        return v
    return v, np.take(pe, idx, out=_work(which + "e", n, np.int16), mode="wrap").view(np.int8).reshape(codes.shape)


def _decoded_chunk(codes, fmt, which):
    """float32 values and int8 exponents of codes (t, r, k) K-major, (k, r, t) (k, a whole number of
    steps, is even)."""
    return _pair_decode(_kmajor_codes(codes), fmt, which, exps=True)
