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
    As ``"fused"``, each product also carrying the exponents of its two E8M0 block scales.
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
included), ``"rne"`` rounds to the output type (float32 or float16) to nearest even.
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

from ..codec import decode
from ..formats import get_format
from .catalogue import _OUT


# ----------------------------------------------------------------------------- operands
def _sig_exp(fmt):
    """Per-code float64 values and MMA-Sim exponents (``floor(log2|v|)``, at least the format's emin)."""
    v = decode(np.arange(1 << fmt.bits, dtype=np.uint8), fmt, dtype=np.float64)
    emin = int(np.log2(fmt.min_normal))
    with np.errstate(divide="ignore", invalid="ignore"):
        _, e = np.frexp(np.where(np.isfinite(v), v, 0.5))
    e = np.maximum(e.astype(np.int32) - 1, emin)
    v.flags.writeable = e.flags.writeable = False   # cached in _TABLES and shared by every GEMM
    return v, e


_TABLES = {}
#: 16- and 19-bit input types of the older instructions (not fp8emu Formats): the dtype of their bit
#: patterns and the exponent of their smallest normal.
_WIDE = {"float16": (np.uint16, -14), "bfloat16": (np.uint16, -126), "tf32": (np.uint32, -126)}


def _format_name(f):
    if isinstance(f, str) and f in _WIDE:
        return f
    return get_format(f).name


def _decode_wide(codes, name, what):
    """float16 / bfloat16 bit patterns, or float32 words read as tf32 (the low 13 bits ignored)."""
    dt, emin = _WIDE[name]
    if codes.dtype != dt:
        raise TypeError(f"{what} as {name} must be {np.dtype(dt).name} bit patterns, got dtype {codes.dtype}")
    with np.errstate(invalid="ignore"):        # NaN patterns widen to NaN
        if name == "float16":
            v = codes.view(np.float16).astype(np.float64)
        elif name == "bfloat16":
            v = (codes.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
        else:
            v = (codes & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        _, e = np.frexp(np.where(np.isfinite(v), v, 0.5))
    return v, np.maximum(e.astype(np.int32) - 1, emin)


def _decode_operand(codes, fmt, what):
    if isinstance(fmt, str) and fmt in _WIDE:
        return _decode_wide(np.asarray(codes), fmt, what)
    fmt = get_format(fmt)
    if fmt.name not in _TABLES:
        _TABLES[fmt.name] = _sig_exp(fmt)
    codes = np.asarray(codes)
    if codes.dtype != np.uint8:
        raise TypeError(f"{what} must be uint8 codes (one element per byte), got dtype {codes.dtype}")
    if fmt.bits < 8 and (codes >> fmt.bits).any():
        raise ValueError(f"{what} holds codes above {fmt.name}'s {fmt.bits} bits")
    v, e = _TABLES[fmt.name]
    idx = codes.astype(np.intp)            # gathers with intp indices are several times faster
    return np.take(v, idx), np.take(e, idx)


def _decode_scales(codes, kind, what):
    """Block scale values (float64, NaN for NaN codes) and their exponents, looked up per code."""
    codes = np.asarray(codes)
    if codes.dtype != np.uint8:
        raise TypeError(f"{what} must be uint8 scale codes, got dtype {codes.dtype}")
    if ("scale", kind) not in _TABLES:
        v, e = _scale_values(np.arange(256, dtype=np.uint8), kind)
        v.flags.writeable = e.flags.writeable = False
        _TABLES["scale", kind] = v, e
    v, e = _TABLES["scale", kind]
    idx = codes.astype(np.intp)
    return np.take(v, idx), np.take(e, idx)


def _scale_values(codes, kind):
    """Values (float64, NaN for NaN codes) and exponents of block-scale codes: the one rule for a
    scale code in every instruction.  ``"ue8m0"``: ``2**(code - 127)``, 0xFF NaN; ``"ue4m3"``: an
    E4M3 code read without its sign bit (as the instruction does); ``"ue5m3"``: the unsigned UE5M3
    code (fp8emu's ``e5m3fnu``, ml_dtypes' ``float8_e5m3fnu``: bias 15, 0xFF NaN).  A UE4M3 / UE5M3
    exponent is ``floor(log2 v)``, at least the format's minimum normal exponent (a subnormal scale
    carries that, as a subnormal operand does)."""
    if kind == "ue8m0":
        e = codes.astype(np.int64) - 127
        v = np.where(codes == 255, np.nan, np.ldexp(1.0, np.minimum(e, 127)))
        return v, e
    fmt = get_format("e4m3fn" if kind == "ue4m3" else "e5m3fnu")
    v = decode(codes & np.uint8(0x7F) if kind == "ue4m3" else codes, fmt, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        _, e = np.frexp(np.where(np.isfinite(v), v, 1.0))
    return v, np.maximum(e.astype(np.int64) - 1, int(np.log2(fmt.min_normal)))


def _c_exponent(c, out):
    lo = _OUT[out][2]
    with np.errstate(divide="ignore", invalid="ignore"):
        # Inf/NaN carry exponent -1 (frexp's 0, as MMA-Sim's models read them)
        _, e = np.frexp(np.where(np.isfinite(c) & (c != 0), c, 0.5))
    return np.where(c == 0, lo, np.maximum(e.astype(np.int64) - 1, lo))

#: Output elements (M * N * step) handled at once.
_BLOCK = 1 << 21


def _kmajor(x):
    """``x`` with its last (K) axis first, contiguous: a K step is then a slab along axis 0 and its
    reductions are element-wise over contiguous planes, much faster than reducing a short last axis."""
    return np.ascontiguousarray(np.moveaxis(np.asarray(x), -1, 0))


def _check(ins, K, a_format, b_format, a_scales, b_scales, scale_format):
    """Check the operand formats, K and the block scales against the instruction; return the decoded
    scales (values and exponents, K-major) and the block, or ``None`` for instructions without."""
    for f, what in ((a_format, "a_format"), (b_format, "b_format")):
        if _format_name(f) not in ins.formats:
            raise ValueError(f"{ins.name} takes {', '.join(ins.formats)} operands, not "
                             f"{what}={_format_name(f)!r}")
    if K % ins.step or K == 0:
        raise ValueError(f"K = {K} must be a positive multiple of {ins.name}'s step of {ins.step}")
    sa = sb = None
    block = None
    if ins.block_scaled:
        if a_scales is None or b_scales is None:
            raise ValueError(f"{ins.name} is block-scaled: give a_scales and b_scales")
        kind = ins.scales[0] if scale_format is None else scale_format
        if kind not in ins.scales:
            raise ValueError(f"{ins.name} takes {', '.join(ins.scales)} scales, not {scale_format!r}")
        if a_scales.shape[-1] != b_scales.shape[-1] or K % a_scales.shape[-1]:
            raise ValueError(f"scales must hold K / block entries along K for both operands, got "
                             f"{a_scales.shape[-1]} and {b_scales.shape[-1]} for K = {K}")
        block = K // a_scales.shape[-1]
        if block not in ins.blocks:
            raise ValueError(f"{ins.name} takes blocks of {', '.join(map(str, ins.blocks))} along K, "
                             f"got {block}")
        if (kind, block) not in ins.scale_modes:
            raise ValueError(f"{ins.name} takes {kind} scales with blocks of "
                             f"{', '.join(str(b) for k, b in ins.scale_modes if k == kind)} along K, got {block}")
        sa = _decode_scales(_kmajor(a_scales), kind, "a_scales")
        sb = _decode_scales(_kmajor(b_scales), kind, "b_scales")
    elif a_scales is not None or b_scales is not None or scale_format is not None:
        raise ValueError(f"{ins.name} takes no block scales")
    return sa, sb, block


# ----------------------------------------------------------------------------- rounding
def _kept_bits(ins):
    """Fraction bits the instruction's output rounding keeps (13 for ``"rz-e8m13"``)."""
    return 13 if ins.rounding == "rz-e8m13" else _OUT[ins.out][3]


def _round_out(x, ins):
    """The exact float64 sums ``x`` rounded to the instruction's output type."""
    dt, _, emin, _, _ = _OUT[ins.out]
    if ins.rounding == "rne" and ins.out == "float32":
        with np.errstate(over="ignore"):
            return x.astype(np.float32)
    bits = _kept_bits(ins)
    with np.errstate(divide="ignore", invalid="ignore"):
        _, e = np.frexp(np.where(np.isfinite(x) & (x != 0), x, 1.0))
    q = np.ldexp(1.0, np.maximum(e.astype(np.int64) - 1, emin) - bits)
    y = x / q
    y = np.rint(y) if ins.rounding == "rne" else np.trunc(y)
    with np.errstate(over="ignore"):
        return (y * q).astype(dt)


def _finish(r, ins):
    """Output bits: zeros made +0, NaNs canonical."""
    _, ut, _, _, qnan = _OUT[ins.out]
    r = r + r.dtype.type(0)            # -0 -> +0, as MMA-Sim's models
    bits = r.view(ut)
    return np.where(np.isnan(r), ut(qnan), bits).view(r.dtype)

#: Per float type: the integer type of its bits, its exponent bias, and its fraction bits.
_POW2 = {np.float64: (np.int64, 1023, 52), np.float32: (np.int32, 127, 23)}


def _pow2(e, k=0, sign=1, dtype=np.float64):
    """``2.0 ** (k + sign * e)`` for integer arrays ``e`` (results normal in ``dtype``), built in the
    exponent field."""
    it, bias, frac = _POW2[dtype]
    t = np.add(e, bias + k, dtype=it) if sign > 0 else np.subtract(bias + k, e, dtype=it)
    return np.left_shift(t, frac, out=t).view(dtype)


def _trunc_sum(ps, f):
    """``sum(trunc(ps * f))`` over axis 0, in float64, ``ps`` overwritten (the sum is exact: integers
    below 2**53)."""
    np.multiply(ps, f, out=ps)
    np.trunc(ps, out=ps)
    return np.add.reduce(ps, axis=0, dtype=np.float64)


# ----------------------------------------------------------------------------- the steps
def _fused_step(terms, exps, c, ec, F):
    """Exact sum of ``terms`` (L, ...; overwritten) and ``c`` (...), each truncated to ``2**(E - F)``."""
    E = np.maximum(exps.max(axis=0), ec)
    sc = _pow2(E, F, -1)
    with np.errstate(invalid="ignore", over="ignore"):
        t = _trunc_sum(terms, sc)
        t += np.trunc(c * sc)
        t /= sc
        return t


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
    dt = _OUT[ins.out][0]
    for step in steps:
        cv = c.astype(np.float64)
        ec = _c_exponent(cv, ins.out)
        ec = np.where(cv == 0, ins.zero_exp, ec) if ins.datapath != "paired" else ec
        x = step(cv, ec)
        c = _round_out(x, ins) if ins.datapath != "paired" else x.astype(np.float32)
        c = _finish(c.astype(dt), ins)
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
        kb = (k0 + np.arange(L)) // block
        s_a, s_b, q_a, q_b = scl[0][kb], scl[2][kb], scl[1][kb], scl[3][kb]
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
            return _fused_step(p, e, cv, ec, ins.frac_bits)
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
    sa, sb, block = _check(ins, a.shape[-1], a_format, b_format, a_scales, b_scales, scale_format)
    if c.size == 0:
        return np.empty(c.shape, c.dtype)
    return _reference(ins, a, b, c, a_format, b_format, sa, sb, block)


def _reference(ins, a, b, c, a_format, b_format, sa, sb, block):
    """:func:`reference` given the checked and decoded scales (see :func:`_check`)."""
    K = a.shape[-1]
    va, ea = _decode_operand(_kmajor(a), a_format, "a")
    vb, eb = _decode_operand(_kmajor(b), b_format, "b")
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
