"""What each datapath computes: the reference step of every matrix instruction, in one place.

Each :class:`~fp8emu.gemm.catalogue.Instruction` of the catalogue (:mod:`fp8emu.gemm.catalogue`)
names one of four datapaths and its parameters (``step``, ``frac_bits``, ``rounding``,
``zero_exp``, ``group``, ``pair_bits``).  This module states what each datapath computes, as the
plain reference step below (:func:`reference`), to be read beside the PTX / ISA text.  The four
datapaths, written after the models of MMA-Sim (microsoft/MMA-Sim, arXiv:2511.10909; facts
taken from its description, code written here):

``"fused"`` (NVIDIA ``mma``, ``wgmma``, ``tcgen05.mma`` kind ``f8f6f4``)
    One step sums ``step`` products and the accumulator input C.  Each product
    ``a_k * b_k`` carries the exponent ``e(a_k) + e(b_k)`` (``e`` of a subnormal is the
    format's minimum exponent), C its own; a zero product or a zero C carries
    ``zero_exp``.  Every term is truncated toward zero to a multiple of ``2**(E - F)``
    (``E`` the largest exponent, ``F = frac_bits``), the truncated terms are added
    exactly and the sum is rounded once to the output (``rounding``).  K longer than
    ``step`` is a chain of steps, each step's result the next one's C.
``"scaled"`` (``kind::mxf8f6f4``)
    As ``"fused"``, each product also carrying the exponents of its two E8M0 block scales.  A row of
    unbounded exponents (float64 output: a block-scaled model's, :func:`fp8emu.gemm.models.scaled_row`)
    takes a scale type and a block per operand, each scale carrying ``floor(log2 s)``.
``"grouped"`` (``kind::mxf4``, ``kind::mxf4nvf4``)
    Products are first summed exactly in groups of ``group`` (16); a group's sum times
    its two scales is one term whose exponent is the two scales' exponents alone (the
    sum's own magnitude does not enter), ``zero_exp`` when all its products or a scale
    are zero.  The terms and C are then aligned and truncated as above.
``"paired"`` (AMD CDNA3 ``v_mfma`` fp8/bf8)
    The even- and odd-indexed products of a step are aligned and truncated separately
    (``frac_bits`` bits), both partial sums floored onto the larger one's grid, C
    floored to ``frac_bits`` below the common exponent (dropped when more than
    ``frac_bits + 1`` binades below), the dot part floored to ``pair_bits + 1`` bits,
    their sum floored to ``pair_bits`` bits and rounded to float32 to nearest even.

Result roundings: ``"rz-e8m13"`` truncates to 14 significant bits with float32's exponent
range (subnormals on the grid ``2**-139``), ``"rz"`` truncates to float32 (subnormals
included), ``"rne"`` rounds to the output type (float32 or float16) to nearest even; ``"rz-e8mN"``
and ``"rne-e8mN"`` (N = 1..23) are those roundings to N fraction bits with float32's exponent
range (subnormals on the grid ``2**(-126 - N)``), for step widths no instruction has.
A result ``>= 2**128`` (float16: that rounds to ``2**16``) is infinite.  Zero results
are ``+0``; NaN results are the canonical quiet NaN ``0x7fffffff`` (float16
``0x7fff``); a NaN operand or block scale, ``0 * Inf`` and ``Inf - Inf`` give NaN.

The reference works on whole arrays of decoded values (float64, exact: a product of two
FP8/FP6/FP4 values has at most 8 significant bits, and so on) one K step at a time; nothing in it
is there for speed.  The fast routes of :mod:`fp8emu.gemm.routes` compute the same bits on the
inputs their contracts name, and tests/test_gemm_routes.py holds every one of them to this module
on every preset.  A GEMM through an instruction is this module's chain of steps along K
(:func:`fp8emu.gemm.instructions.gemm`).

The schedules of whole GEMMs are the kernel policies of :mod:`fp8emu.gemm.models` (a named model is a
row of the catalogue plus a :class:`~fp8emu.gemm.models.Policy`, run by
:func:`~fp8emu.gemm.models.run_steps` as chains of this module's steps):

promotion (``promote = n``, Hopper's FP8 GEMMs: ``n = 4`` steps of 32 products)
    The chain restarts from zero every ``n`` steps; each chain's float32 result is added into a
    float32 accumulator, rounded to nearest even (with block scales: times its block's scale factor,
    one rounding).
split-K (``split_k = s``, or ``"cublas"``: the count cuBLAS's heuristic picks for the shape)
    K is cut into ``s`` contiguous pieces of whole 128-wide K-tiles, each reduced from zero as
    above, and the pieces' float32 results are added in order with float32 additions.
"""

from __future__ import annotations

import numpy as np

from ..formats import get_format
from ..interop import byte_codes
from .aligned_sums import fused_step
from .code_tables import datapath_tables
from .instruction_inputs import check_inputs, kmajor
from .outputs import OUTPUT_TYPES, canonical, round_output
from .wide_inputs import WIDE_INPUTS, decode_wide

#: Output elements (M * N * step) handled at once.
_BLOCK = 1 << 21


# ----------------------------------------------------------------------------- operands
def _decode_operand(codes, fmt, what):
    """Values and exponents of operand codes: a wide input's bit patterns, or FP8/FP6/FP4 codes
    checked as the instructions take them (:func:`fp8emu.interop.byte_codes`) and read from the
    per-code tables."""
    if isinstance(fmt, str) and fmt in WIDE_INPUTS:
        return decode_wide(np.asarray(codes), fmt, what)
    fmt = get_format(fmt)
    codes = byte_codes(codes, fmt, what)
    v, e = datapath_tables(fmt)
    idx = codes.astype(np.intp)            # gathers with intp indices are several times faster
    return np.take(v, idx), np.take(e, idx)


def _c_exponent(c, out):
    lo = OUTPUT_TYPES[out].emin
    with np.errstate(divide="ignore", invalid="ignore"):
        # Inf/NaN carry exponent -1 (frexp's 0, as MMA-Sim's models read them)
        _, e = np.frexp(np.where(np.isfinite(c) & (c != 0), c, 0.5))
    return np.where(c == 0, lo, np.maximum(e.astype(np.int64) - 1, lo))


# ----------------------------------------------------------------------------- the steps
def _paired_step(p, ep, c, ec, ins):
    F, F2 = ins.frac_bits, ins.pair_bits
    pe, po = p[0::2], p[1::2]
    ee, eo = ep[0::2], ep[1::2]
    Ee, Eo = ee.max(axis=0), eo.max(axis=0)
    with np.errstate(invalid="ignore", over="ignore"):
        se = np.trunc(pe * np.ldexp(1.0, F - Ee)[None]).sum(axis=0) * np.ldexp(1.0, Ee - F)
        so = np.trunc(po * np.ldexp(1.0, F - Eo)[None]).sum(axis=0) * np.ldexp(1.0, Eo - F)
        Ed = np.maximum(Ee, Eo)
        g = np.ldexp(1.0, F - Ed)
        sd = (np.floor(se * g) + np.floor(so * g)) / g
        Em = np.maximum(Ed, ec)
        g2 = np.ldexp(1.0, F2 + 1 - Em)
        sd = np.floor(sd * g2) / g2
        gc = np.ldexp(1.0, F - Em)
        cc = np.where(ec < Em - F - 1, 0.0, np.floor(c * gc) / gc)
        x = sd + cc
        _, e = np.frexp(np.where(np.isfinite(x) & (x != 0), x, 1.0))
        q = np.ldexp(1.0, np.maximum(e.astype(np.int64) - 1, -126) - F2)
        return np.floor(x / q) * q


def _chain(ins, c, steps):
    """Run the steps in K order, each step's rounded result the next one's C; return D."""
    dt = OUTPUT_TYPES[ins.out].dtype
    for step in steps:
        cv = c.astype(np.float64)
        ec = _c_exponent(cv, ins.out)
        ec = np.where(cv == 0, ins.zero_exp, ec) if ins.datapath != "paired" else ec
        x = step(cv, ec)
        c = round_output(x, ins) if ins.datapath != "paired" else x.astype(np.float32)
        c = canonical(c.astype(dt), ins.out)
    return c

def _step_terms(ins, ops, scl, block, k0):
    """The terms of the step at ``k0`` along K and the exponent each carries, as the datapath forms
    them from the decoded operands ``ops`` = (va, ea, vb, eb) (K-major) and scales ``scl``:
    ``"fused"`` and ``"paired"`` the products, ``"scaled"`` the products times their two block
    scales, ``"grouped"`` the scaled group sums (:func:`_grouped_terms`)."""
    va, ea, vb, eb = ops
    L = ins.step
    sl = slice(k0, k0 + L)
    with np.errstate(invalid="ignore"):
        p = va[sl] * vb[sl]
    e = ea[sl] + eb[sl]
    if ins.datapath == "grouped":
        return _grouped_terms(ins, p, scl, block, k0)
    if ins.datapath == "scaled":
        # a block per operand (a row of unbounded exponents), or one for both
        ba, bb = block if isinstance(block, tuple) else (block, block)
        ka, kb = (k0 + np.arange(L)) // ba, (k0 + np.arange(L)) // bb
        s_a, s_b, q_a, q_b = scl[0][ka], scl[2][kb], scl[1][ka], scl[3][kb]
        zero = p == 0
        with np.errstate(invalid="ignore", over="ignore"):
            p = p * s_a * s_b
        e = e + q_a + q_b
        return p, np.where(zero, ins.zero_exp, e)
    return p, np.where(p == 0, ins.zero_exp, e)


def _run_rows(ins, ops, scl, block, c, K):
    """D of rows of decoded operands ``ops`` (K-major) and C: the chain of reference steps along K."""

    def step_fn(k0):
        def step(cv, ec):
            p, e = _step_terms(ins, ops, scl, block, k0)
            if ins.datapath == "paired":
                return _paired_step(p, e, cv, ec, ins)
            return fused_step(p, e, cv, ec, ins.frac_bits)
        return step

    return _chain(ins, c, [step_fn(k0) for k0 in range(0, K, ins.step)])

def _grouped_terms(ins, p, scl, block, k0):
    """Group sums times their scales, with the scales' exponents (MMA-Sim's mxf4/mxf4nvf4 datapath)."""
    G = ins.group
    pg = p.reshape(-1, G, *p.shape[1:])
    allzero = (pg == 0).all(axis=1)
    with np.errstate(invalid="ignore"):
        s = pg.sum(axis=1)
    ng = s.shape[0]
    kb = (k0 + np.arange(ng) * G) // block
    sa, qa, sb, qb = scl[0][kb], scl[1][kb], scl[2][kb], scl[3][kb]
    with np.errstate(invalid="ignore", over="ignore"):
        t = s * sa * sb
    e = qa + qb
    zero = allzero | (sa == 0) | (sb == 0)
    return t, np.where(zero, ins.zero_exp, np.broadcast_to(e, t.shape))


# ----------------------------------------------------------------------------- the reference
def reference(ins, a, b, c, a_format, b_format, a_scales=None, b_scales=None, scale_format=None):
    """D of instruction ``ins`` (an :class:`~fp8emu.gemm.catalogue.Instruction`) for broadcastable
    operand codes a (M|1, N|1, K) and b and C (M, N) of its output type, by the reference steps:
    each operand decoded to float64 values and exponents, one K step at a time, rows in blocks.

    Every route of :mod:`fp8emu.gemm.routes` is tested against this function.

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> from fp8emu.gemm.catalogue import get_instruction
    >>> a = fp8emu.encode(np.full((1, 1, 32), 2.0 ** -9), "e4m3fn")     # one output: row i, column j
    >>> b = fp8emu.encode(np.full((1, 1, 32), 2.0 ** -5), "e4m3fn")
    >>> c = np.ones((1, 1), np.float32)                                 # D = 1 + 32 * 2**-14
    >>> [float(reference(get_instruction(n), a, b, c, "e4m3fn", "e4m3fn")[0, 0])
    ...  for n in ("hopper-wgmma", "blackwell-mma")]                  # 13 vs 31 fraction bits
    [1.0, 1.001953125]
    """
    sa, sb, block = check_inputs(ins, a.shape[-1], a_format, b_format, a_scales, b_scales, scale_format)
    if c.size == 0:
        return np.empty(c.shape, c.dtype)
    K = a.shape[-1]
    va, ea = _decode_operand(kmajor(a), a_format, "a")
    vb, eb = _decode_operand(kmajor(b), b_format, "b")
    M, N = c.shape
    out = np.empty((M, N), c.dtype)
    rows = max(1, _BLOCK // max(1, N * ins.step))
    for m0 in range(0, M, rows):
        rs = slice(m0, min(M, m0 + rows))
        ra = rs if va.shape[1] > 1 else slice(None)
        rb = rs if vb.shape[1] > 1 else slice(None)
        ops = (va[:, ra], ea[:, ra], vb[:, rb], eb[:, rb])
        scl = None if sa is None else (sa[0][:, ra], sa[1][:, ra], sb[0][:, rb], sb[1][:, rb])
        out[rs] = _run_rows(ins, ops, scl, block, c[rs], K)
    return out
