"""Step arithmetic shared by the fast routes: C's exponents from its bits, the output rounding of
whole blocks of step results in place, and the ``"paired"`` step on gathered halves.

Each function gives the bits of its counterpart in :mod:`fp8emu.gemm.datapaths` (named in its
docstring) on the inputs the routes hand it.
"""

from __future__ import annotations

import numpy as np

from ..aligned_sums import pow2, trunc_sum
from ..outputs import OUTPUT_TYPES, canonical, kept_bits, nearest, round_output

_CEXP = {}


def _c_exponent_table(out):
    """:func:`_c_exponent` of every sign-and-exponent field of the output type (int16)."""
    if out not in _CEXP:
        ot = OUTPUT_TYPES[out]
        ut, sh = ot.uint, ot.frac_bits
        nf = 1 << (8 * np.dtype(ut).itemsize - sh - 1)          # exponent fields
        f = np.arange(2 * nf) % nf
        e = np.where(f == nf - 1, -1, np.maximum(f, 1) - (nf // 2 - 1)).astype(np.int16)
        e.flags.writeable = False
        _CEXP[out] = e
    return _CEXP[out]


def c_exponents(c, ins, zero_c=True, out=None):
    """C's exponents as a step aligns it (int16), from its bits: the table's exponent of each
    sign-and-exponent field, and ``zero_exp`` for a zero C where ``zero_c`` (see
    :func:`zero_c_matters`)."""
    ot = OUTPUT_TYPES[ins.out]
    u = c.view(ot.uint)
    ec = np.take(_c_exponent_table(ins.out), u >> ot.uint(ot.frac_bits), out=out, mode="wrap")
    if zero_c:
        ec[(u & ot.uint(ot.magnitude)) == 0] = ins.zero_exp
    return ec


def zero_c_matters(ins, xmin):
    """Whether a zero C's exponent (``zero_exp``, not the subnormals' one) can change a result.

    It enters only as a candidate for a step's largest exponent: when every non-zero product
    carries at least the output's smallest normal exponent, a zero C's exponent loses to any
    non-zero product, and with all products zero too the result is zero whatever the grid.
    Block scales shift the products' exponents by any amount, so there it always may.
    """
    if ins.datapath == "paired":          # its zero C carries the subnormal exponent anyway
        return False
    if ins.datapath != "fused":
        return True
    return xmin < OUTPUT_TYPES[ins.out].emin


def round_results(x, ins, E=None, *, coarse=False):
    """:func:`~fp8emu.gemm.outputs.round_output`, then :func:`~fp8emu.gemm.outputs.canonical`, of the
    float64 step results ``x`` (overwritten).

    ``E``, where given, is each result's step exponent: ``x`` is then a multiple of
    ``2**(E - frac_bits)``, so where that grid is no finer than the output's below its smallest
    normal, truncating the significand alone is exact.  ``coarse``: the caller knows that it is
    nowhere finer.
    """
    dt, emin = OUTPUT_TYPES[ins.out].dtype, OUTPUT_TYPES[ins.out].emin
    if ins.datapath == "paired":
        r = x.astype(np.float32)
    elif nearest(ins):
        r = round_output(x, ins)
    else:
        # truncation: clear the float64 fraction bits below the kept ones (sign-magnitude, so
        # toward zero); below float32's smallest normal the grid is fixed, 2**(emin - bits)
        bits = kept_bits(ins)
        fine = not coarse and (E is None or int(E.min()) - ins.frac_bits < emin - bits)
        small = np.abs(x) < 2.0 ** emin if fine else None
        xi = x.view(np.int64)
        np.bitwise_and(xi, np.int64(-1 << (52 - bits)), out=xi)
        if fine and small.any():
            q = 2.0 ** (emin - bits)
            x[small] = np.trunc(x[small] / q) * q
        r = x.astype(dt)
    return canonical(r, ins.out)


def halves(x):
    """``x`` (L, ...) as (L / 2, 2, ...): its even and odd entries along K on the second axis."""
    return x.reshape(x.shape[0] // 2, 2, *x.shape[1:])


def paired_halves(ps, E2, c, ec, ins, floor_e=None):
    """The ``"paired"`` step (:func:`fp8emu.gemm.datapaths.reference`'s) on products ``ps`` (overwritten)
    given the largest exponents of the even and of the odd products, E2 (2, ...): both halves go
    through each pass together, their partial sums kept in units of their grids (integers), so that
    each alignment is one multiplication by a power of two.

    float32 products ``ps`` (exact, as products of FP8 values are) take float32 aligning factors:
    those of a half below ``floor_e`` (the smallest exponent of a non-zero product, so a half of
    zero products) capped there, so that they stay finite.
    """
    F, F2 = ins.frac_bits, ins.pair_bits
    if ps.dtype == np.float32:
        f2 = pow2(np.maximum(E2, floor_e), F, -1, np.float32)
    else:
        f2 = pow2(E2, F, -1)
    s2 = trunc_sum(halves(ps), f2)                    # units of 2**(E2 - F)
    Ed = np.maximum(E2[0], E2[1])
    s2 *= pow2(E2 - Ed)                                # units of 2**(Ed - F)
    np.floor(s2, out=s2)
    sd = np.add(s2[0], s2[1], out=s2[0])
    Em = np.maximum(Ed, ec)
    sd = np.floor(sd * pow2(Ed - Em, F2 + 1 - F)) * pow2(Em, -F2 - 1)
    return paired_finish(sd, Ed, Em, c, ec, ins)


def paired_finish(x, Ed, Em, c, ec, ins):
    """The end of a ``"paired"`` step: the products' sum ``x`` (float64, overwritten), cut to its
    grid, plus C floored to ``2**(Em - F)`` (zero where it lies wholly below), the total floored to
    ``pair_bits + 1`` bits.  Ed is the products' largest exponent, Em the larger of it and C's."""
    F, F2 = ins.frac_bits, ins.pair_bits
    if (Ed > ec + 1).any():
        gc = pow2(Em, F, -1)
        cc = np.floor(c * gc)
        cc /= gc
        cc[ec < Em - F - 1] = 0.0
        x += cc
    else:
        x += c             # where Em <= ec + 1, a float32 C is on the grid already (most steps)
    _, e = np.frexp(x)     # Inf, NaN and 0 give 0: their q does not matter
    q = pow2(np.maximum(e, -125), -1 - F2)
    x /= q
    np.floor(x, out=x)
    x *= q
    return x
