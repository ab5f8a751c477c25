"""Per-code tables and operand decoding shared by the fast routes (:mod:`fp8emu.gemm.routes`).

The tables hold, per code (or per pair of codes), exactly the values and MMA-Sim exponents that
:mod:`fp8emu.gemm.datapaths` decodes; operands are decoded into this thread's work arrays
(:mod:`.workspace`).
"""

from __future__ import annotations

import numpy as np

from ..code_tables import datapath_tables
from .layout import kmajor_codes
from .workspace import work

#: Exponent a zero product carries in the tables of the block-scaled datapaths: below every real
#: one, so a maximum over a block sees only its non-zero products.
ZERO_PRODUCT_EXP = -(1 << 15)
_PAIRS = {}
#: The routes' per-code tables, by (kind, format name, ...).
_TABLES = {}


def pair_tables(fa, fb, zero_exp):
    """Exact float64 product and MMA-Sim exponent of every (a, b) code pair, indexed ``a << bits_b | b``,
    and the smallest exponent of a finite non-zero product.

    FP8 x FP8 products have at most 8 significant bits and exponents within float64's range, so
    the product of two decoded values is exact; a zero product carries ``zero_exp``.
    """
    key = (fa.name, fb.name, zero_exp)
    if key not in _PAIRS:
        (va, ea), (vb, eb) = datapath_tables(fa), datapath_tables(fb)
        with np.errstate(invalid="ignore"):
            p = np.multiply.outer(va, vb).ravel()
        x = np.where(p == 0, zero_exp, np.add.outer(ea, eb).ravel()).astype(np.int16)
        p.flags.writeable = x.flags.writeable = False
        nz = x[(x != zero_exp) & np.isfinite(p)]
        _PAIRS[key] = p, x, int(nz.min()) if nz.size else 0
    return _PAIRS[key]

#: Exponent a zero operand carries on the operand path (int8): a product with a zero factor then
#: carries at most -64 + 15, below every real product exponent (at least -28, e5m2 x e5m2), and two
#: zero factors -128, still an int8.
ZERO_OPERAND_EXP = -64


def operand_tables(fmt, dt):
    """Per-code value (``dt``) and MMA-Sim exponent (int8, ``ZERO_OPERAND_EXP`` for zeros) of an FP8/FP6/FP4
    format, and the smallest exponent of a non-zero code."""
    key = ("operand", fmt.name, dt)
    if key not in _TABLES:
        v, e = datapath_tables(fmt)
        ev = np.where(v == 0, ZERO_OPERAND_EXP, e).astype(np.int8)
        vv = v.astype(dt)
        vv.flags.writeable = ev.flags.writeable = False
        _TABLES[key] = vv, ev, int(e[v != 0].min())
    return _TABLES[key]

def _operand_pair_tables(fmt):
    """:func:`operand_tables` (float32 values) for two consecutive codes at once: indexed by the
    two bytes read as one uint16, the two values as one 8-byte word and the two exponents as one
    2-byte word.  A gather then moves two elements for one index, and half as many indices are
    widened to intp.  Built from the bytes of each index as this machine orders them."""
    key = ("operand pairs", fmt.name)
    if key not in _TABLES:
        v, e, _ = operand_tables(fmt, np.float32)
        n = v.size
        b = np.arange(1 << 16, dtype=np.uint16).view(np.uint8).reshape(-1, 2).astype(np.intp) % n
        pv = np.ascontiguousarray(v[b]).view(np.uint64).reshape(-1)
        pe = np.ascontiguousarray(e[b]).view(np.int16).reshape(-1)
        pv.flags.writeable = pe.flags.writeable = False
        _TABLES[key] = pv, pe
    return _TABLES[key]


def pair_decode(codes, fmt, which, exps=False):
    """float32 values (and, with ``exps``, int8 exponents) of codes (any shape, C-contiguous or
    copied so, an even number of them), two per gather (:func:`_operand_pair_tables`), in this
    thread's work arrays."""
    pv, pe = _operand_pair_tables(fmt)
    n = codes.size // 2
    idx = work(which + "i", n, np.intp)
    np.copyto(idx, np.ascontiguousarray(codes).reshape(-1).view(np.uint16))
    v = np.take(pv, idx, out=work(which + "v", n, np.uint64), mode="wrap").view(np.float32).reshape(codes.shape)
    if not exps:
        return v
    return v, np.take(pe, idx, out=work(which + "e", n, np.int16), mode="wrap").view(np.int8).reshape(codes.shape)


def decoded_chunk(codes, fmt, which):
    """float32 values and int8 exponents of codes (t, r, k) K-major, (k, r, t) (k, a whole number of
    steps, is even)."""
    return pair_decode(kmajor_codes(codes), fmt, which, exps=True)
