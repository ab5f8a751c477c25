"""A catalogue of FP8/FP6/FP4 matrix instructions: one small description each, one shared arithmetic.

Each :class:`Instruction` is data: which datapath it uses, how many products one fused step
sums, how many fraction bits the alignment keeps, how the step's result is rounded, which
exponent a zero term carries, and (block-scaled kinds) the scale type and block.  The four
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

:func:`mma` runs one instruction on one tile, ``D = A @ B + C``; :func:`presets` lists
every instruction with the evidence behind it (public GPU recordings reproduced, random
MMAs equal to MMA-Sim, or model only).
"""

from __future__ import annotations

import threading

import numpy as np

from ..codec import decode, encode
from ..formats import get_format
from .catalogue import (_OUT, EVIDENCE, INSTRUCTIONS, Instruction, as_instruction,  # noqa: F401 (the public API)
                        get_instruction, presets)
from .kernels import _ZERO_LOW, _low_table, _value_tables, any_nonfinite

__all__ = ["Instruction", "INSTRUCTIONS", "EVIDENCE", "get_instruction", "as_instruction", "presets", "mma", "dot",
           "gemm", "block_scaled_gemm"]


# ----------------------------------------------------------------------------- operands
def _sig_exp(fmt):
    """Per-code float64 values and MMA-Sim exponents (``floor(log2|v|)``, at least the format's emin)."""
    v = decode(np.arange(1 << fmt.bits, dtype=np.uint8), fmt, dtype=np.float64)
    emin = int(np.log2(fmt.min_normal))
    with np.errstate(divide="ignore", invalid="ignore"):
        _, e = np.frexp(np.where(np.isfinite(v), v, 0.5))
    e = np.maximum(e.astype(np.int32) - 1, emin)
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
    if kind == "ue8m0":
        e = codes.astype(np.int64) - 127
        v = np.where(codes == 255, np.nan, np.ldexp(1.0, np.minimum(e, 127)))
        return v, e
    # ue4m3: an E4M3 code read without its sign bit (as the instruction does)
    v = decode(codes & np.uint8(0x7F), get_format("e4m3fn"), dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        _, e = np.frexp(np.where(np.isfinite(v), v, 1.0))
    return v, np.maximum(e.astype(np.int64) - 1, -6)


def _c_exponent(c, out):
    lo = _OUT[out][2]
    with np.errstate(divide="ignore", invalid="ignore"):
        # Inf/NaN carry exponent -1 (frexp's 0, as MMA-Sim's models read them)
        _, e = np.frexp(np.where(np.isfinite(c) & (c != 0), c, 0.5))
    return np.where(c == 0, lo, np.maximum(e.astype(np.int64) - 1, lo))


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


# ----------------------------------------------------------------------------- datapaths
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


def dot(a, b, c=None, *, instruction, a_format, b_format=None, a_scales=None, b_scales=None,
        scale_format=None):
    """Row-wise dot products through one instruction's datapath: ``d[i] = a[i]·b[i] + c[i]``.

    The vector form of :func:`mma` (each row is one output element of an MMA), for test
    vectors and recordings.

    Parameters
    ----------
    a, b : ndarray of uint8, shape (n, K)
        Element codes (one per byte; FP4/FP6 in the low bits).
    c : array_like, shape (n,) or scalar, optional
        Accumulator input in the instruction's output type (default zero).
    instruction : str or Instruction
    a_format, b_format : str
        Element formats (``b_format`` defaults to ``a_format``).
    a_scales, b_scales : ndarray of uint8, shape (n, K // block), optional
        Block-scaled instructions: scale codes.
    scale_format : {"ue8m0", "ue4m3"}, optional
        Block-scaled instructions: scale type (default the instruction's first).

    Returns
    -------
    ndarray, shape (n,)
        float32 or float16 results.

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> a = fp8emu.encode(np.array([[1.0] + [2.0 ** -9] * 31]), "e4m3fn")
    >>> b = fp8emu.encode(np.array([[1.0] + [2.0 ** -6] * 31]), "e4m3fn")
    >>> [float(dot(a, b, instruction=i, a_format="e4m3fn")[0])        # 1 + 31 * 2**-15
    ...  for i in ("hopper-wgmma", "blackwell-mma")]                    # 13 vs 31 fraction bits
    [1.0, 1.000946044921875]
    """
    ins = get_instruction(instruction)
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(f"a and b must be (n, K) arrays of the same shape, got {a.shape} and {b.shape}")
    n, K = a.shape
    if c is not None:
        c = np.asarray(c)
        if c.shape not in ((n,), ()):
            raise ValueError(f"c must be ({n},) for a and b {a.shape}, or a scalar; got {c.shape}")
        c = np.broadcast_to(c, (n,)).reshape(n, 1)
    for name, x in (("a_scales", a_scales), ("b_scales", b_scales)):
        if x is not None and (np.ndim(x) != 2 or np.shape(x)[0] != n):
            raise ValueError(f"{name} must be (n, K // block) = ({n}, K // block) for a and b {a.shape}, "
                             f"got {np.shape(x)}")
    d = _run(ins, a[:, None, :], b[:, None, :], _c_in(c, (n, 1), ins), a_format,
             a_format if b_format is None else b_format, None if a_scales is None else np.asarray(a_scales)[:, None],
             None if b_scales is None else np.asarray(b_scales)[:, None], scale_format)
    return d[:, 0]


def mma(a, b, c=None, *, instruction, a_format, b_format=None, a_scales=None, b_scales=None,
        scale_format=None):
    """One matrix instruction on a tile, or on a batch of tiles: ``D = A @ B + C``.

    K must be a multiple of the instruction's step.  Leading (batch) dimensions broadcast as in
    :func:`numpy.matmul`: each tile of the batch is one independent instruction.

    Parameters
    ----------
    a : ndarray of uint8, shape (..., M, K)
        Element codes of A (FP4/FP6 one per byte, in the low bits).
    b : ndarray of uint8, shape (..., K, N)
        Element codes of B.
    c : array_like, shape (..., M, N), optional
        Accumulator input, in the instruction's output type (float32 or float16); default zero.
    instruction : str or Instruction
        A name from :data:`INSTRUCTIONS` (see :func:`presets`).
    a_format, b_format : str
        Element formats the instruction accepts (``b_format`` defaults to ``a_format``).
    a_scales : ndarray of uint8, shape (..., M, K // block), optional
        Block-scaled instructions: A's scale codes along K.
    b_scales : ndarray of uint8, shape (..., K // block, N), optional
        Block-scaled instructions: B's scale codes along K.
    scale_format : {"ue8m0", "ue4m3"}, optional
        Block-scaled instructions: the scale type (default the instruction's first).

    Returns
    -------
    ndarray, shape (..., M, N), of the instruction's output type

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> a = fp8emu.encode(np.full((1, 32), 2.0 ** -9), "e4m3fn")
    >>> b = fp8emu.encode(np.full((32, 1), 2.0 ** -5), "e4m3fn")
    >>> c = np.ones((1, 1), np.float32)                           # D = 1 + 32 * 2**-14
    >>> [float(mma(a, b, c, instruction=i, a_format="e4m3fn")[0, 0])
    ...  for i in ("hopper-wgmma", "blackwell-mma")]            # 13 vs 31 fraction bits
    [1.0, 1.001953125]
    >>> tiles = np.stack([a, fp8emu.encode(np.full((1, 32), 2.0 ** -3), "e4m3fn")])   # two tiles
    >>> mma(tiles, b, c, instruction="hopper-wgmma", a_format="e4m3fn")[:, 0, 0].tolist()
    [1.0, 1.125]
    """
    ins = get_instruction(instruction)
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"a must be (..., M, K) and b (..., K, N), got {a.shape} and {b.shape}")
    M, K = a.shape[-2:]
    N = b.shape[-1]
    bf = a_format if b_format is None else b_format
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(f"the batch dimensions of a {a.shape[:-2]} and b {b.shape[:-2]} do not broadcast") from None
    for name, x, tail in (("a_scales", a_scales, (M, None)), ("b_scales", b_scales, (None, N))):
        if x is not None:
            x = np.asarray(x)
            if x.ndim < 2 or any(w is not None and x.shape[-2 + i] != w for i, w in enumerate(tail)):
                raise ValueError(f"{name} must be (..., {'M, K // block' if name == 'a_scales' else 'K // block, N'})"
                                 f" for a {a.shape} and b {b.shape}, got {x.shape}")
            try:
                ok = np.broadcast_shapes(x.shape[:-2], batch) == batch
            except ValueError:
                ok = False
            if not ok:
                raise ValueError(f"the batch dimensions of {name} {x.shape[:-2]} do not broadcast to {batch}")
    if a.ndim == 2 and b.ndim == 2:
        bs = None if b_scales is None else np.asarray(b_scales).T[None, :, :]
        return _run(ins, a[:, None, :], b.T[None, :, :], _c_in(c, (M, N), ins), a_format, bf,
                    None if a_scales is None else np.asarray(a_scales)[:, None, :], bs, scale_format)
    T = int(np.prod(batch))
    cc = _c_in(c, batch + (M, N), ins).reshape(T, M, N)
    a3 = np.broadcast_to(a, batch + (M, K)).reshape(T, M, K)
    b3 = np.swapaxes(np.broadcast_to(b, batch + (K, N)), -1, -2).reshape(T, N, K)
    # the scales as (T, M, K / block) and (T, N, K / block), like the codes
    sa3 = None if a_scales is None else np.broadcast_to(
        a_scales, batch + np.shape(a_scales)[-2:]).reshape(T, M, np.shape(a_scales)[-1])
    sb3 = None if b_scales is None else np.swapaxes(
        np.broadcast_to(b_scales, batch + np.shape(b_scales)[-2:]), -1, -2).reshape(T, N, np.shape(b_scales)[-2])
    if _format_name(a_format) not in _WIDE:
        sa, sb, block = _check(ins, K, a_format, bf, sa3, sb3, scale_format)
        fa, fb = get_format(a_format), get_format(bf)
        route = _tile_route(ins, fa, fb, block)
        if cc.size == 0:
            return np.empty(batch + (M, N), cc.dtype)
        if route is not None:
            # _check's scales are K-major, (K / block, T, M): the tiles innermost instead
            scl = None if sa is None else (*((v.transpose(0, 2, 1), e.transpose(0, 2, 1)) for v, e in (sa, sb)), block)
            return route(ins, a3, b3, cc, fa, fb, scl).reshape(batch + (M, N))
    # every other datapath: the tiles' M * N dot products as rows
    rows = T * M * N
    ar = np.broadcast_to(a3[:, :, None, :], (T, M, N, K)).reshape(rows, 1, K)
    br = np.broadcast_to(b3[:, None, :, :], (T, M, N, K)).reshape(rows, 1, K)
    sa = None if sa3 is None else np.broadcast_to(sa3[:, :, None], (T, M, N, sa3.shape[-1])).reshape(rows, 1, -1)
    sb = None if sb3 is None else np.broadcast_to(sb3[:, None], (T, M, N, sb3.shape[-1])).reshape(rows, 1, -1)
    d = _run(ins, ar, br, cc.reshape(rows, 1), a_format, bf, sa, sb, scale_format)
    return d.reshape(batch + (M, N))


def _c_in(c, shape, ins):
    dt = _OUT[ins.out][0]
    if c is None:
        return np.zeros(shape, dt)
    arr = np.asarray(c)
    if arr.dtype.kind not in "fiu":
        raise TypeError(f"c must be a real array, got dtype {arr.dtype}")
    try:
        arr = np.broadcast_to(arr, shape)
    except ValueError:
        raise ValueError(f"c has shape {arr.shape}, which does not broadcast to {shape}") from None
    if arr.dtype == dt:            # read only, never written
        return arr
    cd = arr.astype(dt)
    with np.errstate(invalid="ignore"):
        same = (cd.astype(np.float64) == arr.astype(np.float64)) | (np.isnan(cd) & np.isnan(arr.astype(np.float64)))
    if not same.all():
        raise ValueError(f"c must hold {ins.out} values (the instruction's accumulator type); round it first")
    return cd


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
        if kind == "ue4m3" and block != 16:
            raise ValueError("ue4m3 scales go with blocks of 16 (NVFP4)")
        sa = _decode_scales(_kmajor(a_scales), kind, "a_scales")
        sb = _decode_scales(_kmajor(b_scales), kind, "b_scales")
    elif a_scales is not None or b_scales is not None or scale_format is not None:
        raise ValueError(f"{ins.name} takes no block scales")
    return sa, sb, block


def _run(ins, a, b, c, a_format, b_format, a_scales, b_scales, scale_format, *, tables=True):
    """D for broadcastable operands a (M|1, N|1, K) and b, one K step at a time, rows in blocks.

    Unless ``tables`` is false, FP8/FP6/FP4 operands take a faster route: a tile or GEMM decodes
    each operand once (:func:`_run_operands`, from 512 outputs; ``kind::mxf4nvf4``:
    :func:`_run_groups`), anything else gathers its products from the code-pair tables
    (:func:`_run_tables`).  The per-operand decode below is the reference they are tested against.
    """
    K = a.shape[-1]
    sa, sb, block = _check(ins, K, a_format, b_format, a_scales, b_scales, scale_format)
    if c.size == 0:
        return np.empty(c.shape, c.dtype)
    if tables and _format_name(a_format) not in _WIDE:
        fa, fb = get_format(a_format), get_format(b_format)
        tile = a.shape[1] == 1 and b.shape[0] == 1 and a.shape[0] > 1 and b.shape[1] > 1
        route = _tile_route(ins, fa, fb, block) if tile else None
        if route is _run_operands and a.shape[0] * b.shape[1] < 512:
            route = None          # a tile of fewer outputs: the code-pair path's fewer NumPy calls win
        if route is not None:
            # sa (K / block, M, 1) and sb (K / block, 1, N) as the routes take them, (K / block, N, 1)
            scl = None if sa is None else (sa, (sb[0].swapaxes(1, 2), sb[1].swapaxes(1, 2)), block)
            return route(ins, a[None, :, 0], b[None, 0], c[None], fa, fb, scl)[0]
        # FP8/FP6/FP4 rows (or a block-scaled kind): products from code-pair tables
        return _run_tables(ins, a, b, c, fa, fb, sa, sb, block, K)
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


def _run_rows(ins, ops, scl, block, c, K):
    va, ea, vb, eb = ops
    L = ins.step

    def make(k0):
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

    def step_fn(k0):
        def step(cv, ec):
            p, e = make(k0)
            if ins.datapath == "paired":
                return _paired_step(p, e, cv, ec, ins)
            return _fused_step(p, e, cv, ec, ins.frac_bits)
        return step

    return _chain(ins, c, [step_fn(k0) for k0 in range(0, K, L)])


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


# ----------------------------------------------------------------------------- code-pair tables
#: Products handled per block on the table path: small enough that a block's intermediates stay in
#: the CPU caches (and no fresh pages are faulted in per call), large enough to amortise NumPy's
#: per-call cost.
_TILE = 1 << 17
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


def _quad_table(fa, fb):
    """For 4-bit operands: every two consecutive code pairs ``(a_k, b_k), (a_k+1, b_k+1)`` as one
    16-bit index, holding ``sum / q + 2**16 * nonzero`` as int32 (``q`` the smallest product
    magnitude, of which every product is a multiple; ``nonzero`` how many of the two products are).

    A group's entries then add up, exactly and in one integer pass, to its sum and its count of
    non-zero products (the sum's magnitude stays below 2**15), with half the gathers.
    """
    key = ("quads", fa.name, fb.name)
    if key not in _PAIRS:
        P = _pair_tables(fa, fb, _NONE)[0]
        q = float(np.abs(P[P != 0]).min())
        units = np.rint(P / q).astype(np.int32)
        nz = (P != 0).astype(np.int32)
        hi, lo = np.arange(1 << 16) >> 8, np.arange(1 << 16) & 0xFF
        t = units[hi] + units[lo] + ((nz[hi] + nz[lo]) << 16)
        t.flags.writeable = False
        _PAIRS[key] = t, q, int(np.abs(units).max())
    return _PAIRS[key]


def _codes_ok(codes, fmt, what):
    codes = np.asarray(codes)
    if codes.dtype != np.uint8:
        raise TypeError(f"{what} must be uint8 codes (one element per byte), got dtype {codes.dtype}")
    if fmt.bits < 8 and int(codes.max(initial=0)) >> fmt.bits:
        raise ValueError(f"{what} holds codes above {fmt.name}'s {fmt.bits} bits")
    return codes


def _buffers(n):
    """This thread's work arrays (index, products, exponents, code pairs) of at least ``n`` elements.

    Kept between calls: fresh arrays of a block's size are returned to the OS when freed and
    page-faulted in again on every call, which cost more than the arithmetic on them.
    """
    ws = getattr(_LOCAL, "buffers", None)
    if ws is None or ws[0].size < n:
        ws = (np.empty(n, np.intp), np.empty(n), np.empty(n, np.int16), np.empty(n, np.uint16))
        _LOCAL.buffers = ws
    return ws


def _run_tables(ins, a, b, c, fa, fb, sa, sb, block, K):
    """D for FP8/FP6/FP4 operands a (M|1, N|1, K) and b: products gathered from the code-pair tables.

    The outputs are taken in blocks (rows x columns x whole K steps) of about ``_TILE``
    products, C carried along K.  Per block one index array (steps, L + 1, R) holds every code
    pair, K-major, and two gathers give the products and their exponents; each step's spare
    last row is where a fused step puts C and its exponent, so that C is aligned, truncated and
    added by the same passes as the products.
    """
    a, b = _codes_ok(a, fa, "a"), _codes_ok(b, fb, "b")
    zero = {"scaled": _NONE, "grouped": _NONE, "paired": max(ins.zero_exp, -900)}.get(ins.datapath, ins.zero_exp)
    P, X, xmin = _pair_tables(fa, fb, zero)
    zero_c = _zero_c_matters(ins, xmin)
    quads = ins.datapath == "grouped" and fa.bits == fb.bits == 4 and ins.group % 2 == 0
    if quads:
        Q, quantum, umax = _quad_table(fa, fb)
        quads = ins.group * umax < 1 << 15
    M, N = c.shape
    L = ins.step
    # as many outputs per block as one step's products allow (the per-output passes are then
    # long ones), then as many whole steps as fit
    nb = min(N, max(1, _TILE // L))
    mb = min(M, max(1, _TILE // (L * nb)))
    kc = min(K, max(L, _TILE // (mb * nb) // L * L))
    bi, bp, bx, bw = _buffers(kc // L * (L + 1) * mb * nb)
    shift = np.uint16(fb.bits)
    out = np.empty((M, N), c.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        for m0 in range(0, M, mb):
            m1 = min(M, m0 + mb)
            for n0 in range(0, N, nb):
                n1 = min(N, n0 + nb)
                sel = [(slice(m0, m1) if x.shape[0] > 1 else slice(None),
                        slice(n0, n1) if x.shape[1] > 1 else slice(None)) for x in (a, b)]
                m, n = m1 - m0, n1 - n0
                scl = None
                if sa is not None:
                    scl = tuple(np.broadcast_to(v[:, i, j], (v.shape[0], m, n)).reshape(v.shape[0], m * n)
                                for v, (i, j) in ((sa[0], sel[0]), (sa[1], sel[0]), (sb[0], sel[1]), (sb[1], sel[1])))
                cb = c[m0:m1, n0:n1].reshape(m * n)
                for k0 in range(0, K, kc):
                    k1 = min(K, k0 + kc)
                    S = (k1 - k0) // L
                    if quads:
                        q = _gather_quads(Q, a[sel[0] + (slice(k0, k1),)], b[sel[1] + (slice(k0, k1),)],
                                          (bi, bp, bw), S, m, n)
                        cb = _quad_rows(ins, q, quantum, scl, block, cb, k0)
                        continue
                    size = S * (L + 1) * m * n
                    idx = bi[:size].reshape(S, L + 1, m, n)
                    # code pairs as uint16 in the operands' own layout (contiguous reads, narrow
                    # writes), then widened to the K-major index in one transposing copy
                    w = bw[:m * n * (k1 - k0)].reshape(m, n, k1 - k0)
                    np.left_shift(a[sel[0] + (slice(k0, k1),)], shift, out=w, dtype=np.uint16)
                    np.bitwise_or(w, b[sel[1] + (slice(k0, k1),)], out=w)
                    np.copyto(idx[:, :L], np.moveaxis(w, 2, 0).reshape(S, L, m, n))
                    idx[:, L] = 0
                    idx = idx.reshape(size)
                    pk = np.take(P, idx, out=bp[:size], mode="wrap").reshape(S, L + 1, m * n)
                    xk = np.take(X, idx, out=bx[:size], mode="wrap").reshape(S, L + 1, m * n)
                    cb = _table_rows(ins, pk, xk, scl, block, cb, k0, zero_c)
                out[m0:m1, n0:n1] = cb.reshape(m, n)
    return out


def _table_rows(ins, p, x, scl, block, c, k_first, zero_c):
    """The chain of steps over gathered products ``p`` (steps, L + 1, R) (overwritten) and exponents
    ``x``, the first step at ``k_first`` along K; returns the last step's rounded result."""
    L, F = ins.step, ins.frac_bits
    for s in range(p.shape[0]):
        ps, xs = p[s], x[s]
        k = k_first + s * L
        ec = _c_exps(c, ins, zero_c, out=xs[L])          # into the step's spare row
        if ins.datapath == "fused":
            ps[L] = c
            E = xs.max(axis=0)
            sc = _pow2(E, F, -1)
            x_ = _trunc_sum(ps, sc) / sc
        elif ins.datapath == "paired":
            x_, E = _paired_sum(ps[:L], xs[:L], c, ec, ins), None
        elif ins.datapath == "scaled":
            x_, E = _scaled_sum(ins, ps[:L], xs[:L], scl, block, k, c, ec)
        else:
            x_, E = _fused_step(*_grouped_table_terms(ins, ps[:L], xs[:L], scl, block, k), c, ec, F), None
        c = _round_table(x_, ins, E)
    return c


#: Per output type: unsigned view, exponent shift, magnitude mask, smallest normal exponent.
_FIELDS = {"float32": (np.uint32, 23, 0x7FFFFFFF, -126), "float16": (np.uint16, 10, 0x7FFF, -14)}
_CEXP = {}


def _c_exponent_table(out):
    """:func:`_c_exponent` of every sign-and-exponent field of the output type (int16)."""
    if out not in _CEXP:
        ut, sh, mag, lo = _FIELDS[out]
        nf = 1 << (8 * np.dtype(ut).itemsize - sh - 1)          # exponent fields
        f = np.arange(2 * nf) % nf
        e = np.where(f == nf - 1, -1, np.maximum(f, 1) - (nf // 2 - 1)).astype(np.int16)
        e.flags.writeable = False
        _CEXP[out] = e
    return _CEXP[out]


def _c_exps(c, ins, zero_c=True, out=None):
    """C's exponents as a step aligns it (int16), from its bits: the table's exponent of each
    sign-and-exponent field, and ``zero_exp`` for a zero C where ``zero_c`` (see
    :func:`_zero_c_matters`)."""
    ut, sh, mag, _ = _FIELDS[ins.out]
    u = c.view(ut)
    ec = np.take(_c_exponent_table(ins.out), u >> ut(sh), out=out, mode="wrap")
    if zero_c:
        ec[(u & ut(mag)) == 0] = ins.zero_exp
    return ec


def _zero_c_matters(ins, xmin):
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
    return xmin < _FIELDS[ins.out][3]


def _round_table(x, ins, E=None, *, coarse=False):
    """:func:`_round_out` and :func:`_finish` of the float64 step results ``x`` (overwritten).

    ``E``, where given, is each result's step exponent: ``x`` is then a multiple of
    ``2**(E - frac_bits)``, so where that grid is no finer than the output's below its smallest
    normal, truncating the significand alone is exact.  ``coarse``: the caller knows that it is
    nowhere finer.
    """
    dt, _, emin, _, _ = _OUT[ins.out]
    if ins.datapath == "paired":
        r = x.astype(np.float32)
    elif ins.rounding == "rne":
        r = _round_out(x, ins)
    else:
        # truncation: clear the float64 fraction bits below the kept ones (sign-magnitude, so
        # toward zero); below float32's smallest normal the grid is fixed, 2**(emin - bits)
        bits = _kept_bits(ins)
        fine = not coarse and (E is None or int(E.min()) - ins.frac_bits < emin - bits)
        small = np.abs(x) < 2.0 ** emin if fine else None
        xi = x.view(np.int64)
        np.bitwise_and(xi, np.int64(-1 << (52 - bits)), out=xi)
        if fine and small.any():
            q = 2.0 ** (emin - bits)
            x[small] = np.trunc(x[small] / q) * q
        r = x.astype(dt)
    return _canonical(r, ins.out)


def _canonical(r, out):
    """Results ``r`` of the output type (overwritten): -0 made +0 and every NaN the quiet NaN, as
    MMA-Sim's models give them."""
    _, ut, _, _, qnan = _OUT[out]
    r += r.dtype.type(0)
    if np.isnan(r.max()):          # one pass where there is no NaN (max propagates NaN)
        r.view(ut)[np.isnan(r)] = qnan
    return r


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


def _e8m13_step(p, c, E, F, floor_e):
    """One ``"fused"`` step rounded ``"rz-e8m13"`` on float32 products ``p`` (overwritten) whose
    truncated terms sum exactly in float32 (:func:`_sum_dtype`), all in float32.

    Where E is at least ``floor_e`` (the smallest real product's exponent), ``2**(F - E)`` is a
    normal float32, C aligned by it is below ``2**(F + 1)`` (E is at least C's exponent), so the
    truncated C, the sum and the result ``sum * 2**(E - F)`` (at least ``2**(floor_e - F)`` unless
    zero, so never subnormal) are exact, and clearing the ten low fraction bits truncates it to 13.
    E below ``floor_e`` means a step of zero products: with ``F >= 13`` and a zero exponent below
    float32's normals (the caller's conditions) its grid ``2**(E - F)`` is then C's own or finer, or C
    is zero, so its result is C truncated to 13 fraction bits: C is taken there before the bits are
    cleared, unless a zero times Inf or NaN made it NaN.
    """
    f = _pow2(np.maximum(E, floor_e), F, -1, np.float32)
    np.multiply(p, f, out=p)
    np.trunc(p, out=p)
    s = np.add.reduce(p, axis=0)
    cu = np.multiply(c, f)
    s += np.trunc(cu, out=cu)
    s /= f
    if int(E.min()) < floor_e:
        low = (E < floor_e) & (s == s)      # NaN stays: a zero times Inf or NaN
        s[low] = c[low]
    si = s.view(np.int32)
    np.bitwise_and(si, np.int32(-1 << 10), out=si)
    return _canonical(s, "float32")


def _paired_sum(ps, xs, c, ec, ins):
    """:func:`_paired_step` on gathered products (overwritten) and exponents.

    The partial sums are kept in units of their grids (integers), so each alignment is one
    multiplication by a power of two; zero products carry ``max(zero_exp, -900)`` (the table's),
    which changes nothing (a zero half's sum is zero and C's exponent is above both) and keeps
    every power of two in float64's normal range.
    """
    return _paired_halves(ps, _halves(xs).max(axis=0), c, ec, ins)


def _halves(x):
    """``x`` (L, ...) as (L / 2, 2, ...): its even and odd entries along K on the second axis."""
    return x.reshape(x.shape[0] // 2, 2, *x.shape[1:])


def _paired_halves(ps, E2, c, ec, ins, floor_e=None):
    """:func:`_paired_sum` given the largest exponents of the even and of the odd products, E2
    (2, ...): both halves go through each pass together.

    float32 products ``ps`` (exact, as products of FP8 values are) take float32 aligning factors:
    those of a half below ``floor_e`` (the smallest exponent of a non-zero product, so a half of
    zero products) capped there, so that they stay finite.
    """
    F, F2 = ins.frac_bits, ins.pair_bits
    if ps.dtype == np.float32:
        f2 = _pow2(np.maximum(E2, floor_e), F, -1, np.float32)
    else:
        f2 = _pow2(E2, F, -1)
    s2 = _trunc_sum(_halves(ps), f2)                    # units of 2**(E2 - F)
    Ed = np.maximum(E2[0], E2[1])
    s2 *= _pow2(E2 - Ed)                                # units of 2**(Ed - F)
    np.floor(s2, out=s2)
    sd = np.add(s2[0], s2[1], out=s2[0])
    Em = np.maximum(Ed, ec)
    sd = np.floor(sd * _pow2(Ed - Em, F2 + 1 - F)) * _pow2(Em, -F2 - 1)
    return _paired_finish(sd, Ed, Em, c, ec, ins)


def _paired_finish(x, Ed, Em, c, ec, ins):
    """The end of a ``"paired"`` step: the products' sum ``x`` (float64, overwritten), cut to its
    grid, plus C floored to ``2**(Em - F)`` (zero where it lies wholly below), the total floored to
    ``pair_bits + 1`` bits.  Ed is the products' largest exponent, Em the larger of it and C's."""
    F, F2 = ins.frac_bits, ins.pair_bits
    if (Ed > ec + 1).any():
        gc = _pow2(Em, F, -1)
        cc = np.floor(c * gc)
        cc /= gc
        cc[ec < Em - F - 1] = 0.0
        x += cc
    else:
        x += c             # where Em <= ec + 1, a float32 C is on the grid already (most steps)
    _, e = np.frexp(x)     # Inf, NaN and 0 give 0: their q does not matter
    q = _pow2(np.maximum(e, -125), -1 - F2)
    x /= q
    np.floor(x, out=x)
    x *= q
    return x


def _scaled_sum(ins, ps, xs, scl, block, k0, c, ec):
    """One ``"scaled"`` step: E8M0 scales are powers of two, so a block's scales add to its products'
    exponents and fold into the one factor that aligns them (a NaN scale makes its block NaN)."""
    L, F = ins.step, ins.frac_bits
    bl = min(block, L)
    nb = L // bl
    kb = (k0 + np.arange(nb) * bl) // block
    q = scl[1][kb] + scl[3][kb]                                  # (nb, R)
    nan = np.isnan(scl[0][kb]) | np.isnan(scl[2][kb])
    xb = xs.reshape(nb, bl, -1)
    hi, lo = xb.max(axis=1), xb.min(axis=1)
    # zero products carry zero_exp; the others their exponent plus their block's scales'
    eb = np.where(hi == _NONE, ins.zero_exp, hi + q)
    eb = np.where(lo == _NONE, np.maximum(eb, ins.zero_exp), eb)
    E = np.maximum(eb.max(axis=0), ec)
    f = _pow2(q - E, F)
    f[nan] = np.nan
    np.multiply(ps.reshape(nb, bl, -1), f[:, None], out=ps.reshape(nb, bl, -1))
    np.trunc(ps, out=ps)
    t = np.add.reduce(ps, axis=0)
    sc = _pow2(E, F, -1)
    t += np.trunc(c * sc)
    return t / sc, E


def _gather_quads(Q, ak, bk, bufs, S, m, n):
    """The quad-table entries (S, L / 2, m * n) of a block of 4-bit codes ak (m|1, n|1, k), bk."""
    bi, bp, bw = bufs
    h = ak.shape[-1] // 2
    w, tmp = bw[:m * n * h].reshape(m, n, h), bw[m * n * h:2 * m * n * h].reshape(m, n, h)
    np.left_shift(ak[..., 0::2], np.uint16(12), out=w, dtype=np.uint16)
    np.left_shift(bk[..., 0::2], np.uint16(8), out=tmp, dtype=np.uint16)
    w |= tmp
    np.left_shift(ak[..., 1::2], np.uint16(4), out=tmp, dtype=np.uint16)
    w |= tmp
    w |= bk[..., 1::2]
    idx = bi[:m * n * h].reshape(h, m, n)
    np.copyto(idx, np.moveaxis(w, 2, 0))
    return np.take(Q, idx.reshape(-1), out=bp.view(np.int32)[:m * n * h], mode="wrap").reshape(S, -1, m * n)


def _quad_rows(ins, q, quantum, scl, block, c, k_first):
    """The chain of ``"grouped"`` steps over quad-table entries ``q`` (steps, L / 2, R)."""
    L, F, G = ins.step, ins.frac_bits, ins.group
    sums = np.add.reduce(q.reshape(q.shape[0], L // G, G // 2, -1), axis=2, dtype=np.int32)
    count = (sums + (1 << 15)) >> 16
    s_all = (sums - (count << 16)) * quantum
    for s in range(q.shape[0]):
        ec = _c_exps(c, ins)
        t, e = _group_terms(ins, s_all[s], count[s] == 0, scl, block, k_first + s * L)
        c = _round_table(_fused_step(t, e, c, ec, F), ins)
    return c


def _grouped_table_terms(ins, ps, xs, scl, block, k0):
    """:func:`_grouped_terms` on gathered products; a group is all zero when its largest exponent is
    the zero marker."""
    G = ins.group
    pg = ps.reshape(-1, G, ps.shape[-1])
    allzero = xs.reshape(pg.shape).max(axis=1) == _NONE
    return _group_terms(ins, np.add.reduce(pg, axis=1), allzero, scl, block, k0)


def _group_terms(ins, s, allzero, scl, block, k0):
    """Group sums ``s`` (groups, R) times their scales, with the scales' exponents (``zero_exp``
    where the group is all zero or a scale is zero)."""
    G = ins.group
    kb = (k0 + np.arange(s.shape[0]) * G) // block
    sa, qa, sb, qb = scl[0][kb], scl[1][kb], scl[2][kb], scl[3][kb]
    t = s * sa * sb
    zero = allzero | (sa == 0) | (sb == 0)
    return t, np.where(zero, ins.zero_exp, qa + qb)


# ----------------------------------------------------------------------------- decoded operands
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


def _sum_dtype(ins):
    """The type :func:`_run_operands` sums a step's truncated terms in: float64 for the ``"scaled"``
    and ``"paired"`` datapaths; otherwise float32 where the terms (integers below ``2**(F + 2)``) and
    their sum are exact in it, else float64.  The products and terms themselves always are exact in
    float32 (products of FP8/FP6/FP4 values have at most 8 significant bits, and truncating one
    keeps at most as many)."""
    if ins.datapath in ("scaled", "paired"):
        return np.float64
    return np.float32 if ins.frac_bits + 2 + (ins.step + 1).bit_length() <= 24 else np.float64


#: Decoded operand elements (values and exponents of A and B) held at once on the operand path, a
#: chunk of tiles and of K, and the products of one block there: the tiles of a chunk are the
#: innermost axis of every pass, so a chunk holds as many as its operands allow in the caches.
_CHUNK = 1 << 19
_OP_TILE = 1 << 18


def _work(name, n, dtype):
    """This thread's work array ``name`` of at least ``n`` elements (kept between calls, see
    :func:`_buffers`)."""
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


def _operand_blocks(T, M, N, K, L):
    """How :func:`_run_operands` splits T tiles of M x N x K into steps of L: tiles per chunk, K per
    chunk (whole steps), and rows and columns per block (its products about ``_OP_TILE``)."""
    tc = min(T, max(1, _CHUNK // (L * (M + N))))
    kc = min(K, max(L, _CHUNK // (tc * (M + N)) // L * L))
    nb = min(N, max(1, _OP_TILE // (L * tc)))
    mb = min(M, max(1, _OP_TILE // (L * tc * nb)))
    return tc, kc, mb, nb


def _step_products(p, x, ops, ks, rows, cols):
    """One step's products into ``p`` and their exponents into ``x`` (L, rows, cols, tiles), from a
    chunk's decoded operands ``ops`` = (va, ea, vb, eb), K-major: the step ``ks`` along K, a block of
    A's rows and of B's columns."""
    va, ea, vb, eb = ops
    # A's broadcast copied, then B's multiplied in place: NumPy's ufunc with two broadcast inputs
    # runs ~1.5x slower than both passes
    np.copyto(p, va[ks, rows, None])
    np.multiply(p, vb[ks, None, cols], out=p)
    np.copyto(x, ea[ks, rows, None])
    np.add(x, eb[ks, None, cols], out=x)


def _run_operands(ins, a, b, c, fa, fb, scales=None, *, exact=True):
    """D of the ``"fused"``, ``"scaled"`` and ``"paired"`` datapaths for tiles a (T, M, K) and
    b (T, N, K) of codes and C (T, M, N).

    Each operand element is decoded once per chunk of tiles and K (value and exponent, K-major
    with the tiles innermost, so that element-wise passes run along contiguous tiles); a step's
    products and their exponents are then two broadcast passes, aligned to the step's largest
    exponent (C's included) by one multiplication by a power of two, truncated and added.  C is
    aligned and truncated apart, in float64.  Blocks of about ``_OP_TILE`` products; D holds each
    block's C between chunks of K.

    ``scales`` (``"scaled"``, a block a multiple of the step, so that a step lies in one block):
    the decoded E8M0 scales (values, exponents) of A (K / block, M, T) and of B (K / block, N, T),
    and the block.  Their exponents add to the products' and fold into the aligning factor.

    A single GEMM tile (T = 1) tries :func:`_run_exact` first, unless ``exact`` is false.
    """
    T, M, N = c.shape
    if T == 1 and N < M:
        # every datapath is symmetric in A and B: the longer side innermost (long element-wise loops)
        sw = None if scales is None else (scales[1], scales[0], scales[2])
        return np.swapaxes(_run_operands(ins, b, a, np.swapaxes(c, 1, 2), fb, fa, sw, exact=exact), 1, 2)
    a, b = _codes_ok(a, fa, "a"), _codes_ok(b, fb, "b")
    if T == 1 and exact:
        d = _run_exact(ins, a[0], b[0], c[0], fa, fb, scales)
        if d is not None:
            return d[None]
    if scales is not None:
        (sva, sea), (svb, seb), sblock = scales
        qa, qb, nan_a, nan_b = sea.astype(np.int16), seb.astype(np.int16), np.isnan(sva), np.isnan(svb)
        nan_scales = bool(nan_a.any() or nan_b.any())
    scaled, paired = ins.datapath == "scaled", ins.datapath == "paired"
    # products, their aligning factors and truncated terms in float32 (all exact there), their
    # sums in float32 where exact there too, else in float64
    dt = np.float32
    acc = _sum_dtype(ins)
    la, lb = _operand_tables(fa, dt)[2], _operand_tables(fb, dt)[2]
    K, L, F = a.shape[-1], ins.step, ins.frac_bits
    zero_c = _zero_c_matters(ins, la + lb)
    # the smallest exponent of a non-zero product; a zero factor's marker puts its products below
    floor_e = la + lb
    # where a zero product's exponent can exceed a real one's, each zero product is a candidate
    # for the step's largest exponent (block scales shift the real ones by any amount)
    zero_wins = ins.zero_exp > floor_e or scaled
    pair_zero = max(ins.zero_exp, -900)
    # truncated results need no care below the output's smallest normal where no step's grid
    # (2**(E - F)) is finer there than the output's (2**(emin - kept bits)): E is at least emin
    # where a zero C cannot carry zero_exp (never so for the scaled datapath, see _zero_c_matters)
    coarse = not zero_c and F <= _kept_bits(ins)
    tc, kc, mb, nb = _operand_blocks(T, M, N, K, L)
    # a fused step truncated to e8m13 whose terms sum exactly in float32 stays in float32 throughout
    # (where a step of zero products leaves C's own grid, see _e8m13_step)
    e8m13 = (not scaled and not paired and ins.rounding == "rz-e8m13" and acc == np.float32
             and F >= 13 and ins.zero_exp <= _OUT["float32"][2])
    out = np.empty((T, M, N), c.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        for t0 in range(0, T, tc):
            t1 = min(T, t0 + tc)
            # this chunk's C with its tiles innermost (a transpose of a chunk stays in the caches)
            cc = _swap2(np.reshape(c[t0:t1], (t1 - t0, M * N))).reshape(M, N, t1 - t0)
            for k0 in range(0, K, kc):
                k1 = min(K, k0 + kc)
                va, ea = _decoded_chunk(a[t0:t1, :, k0:k1], fa, "a")
                vb, eb = _decoded_chunk(b[t0:t1, :, k0:k1], fb, "b")
                for m0 in range(0, M, mb):
                    m1 = min(M, m0 + mb)
                    for n0 in range(0, N, nb):
                        n1 = min(N, n0 + nb)
                        shp = (L, m1 - m0, n1 - n0, t1 - t0)
                        size = L * (m1 - m0) * (n1 - n0) * (t1 - t0)
                        p = _work("p", L * mb * nb * tc, dt)[:size].reshape(shp)
                        x = _work("x", L * mb * nb * tc, np.int8)[:size].reshape(shp)
                        cb = cc[m0:m1, n0:n1]
                        for s0 in range(0, k1 - k0, L):
                            _step_products(p, x, (va, ea, vb, eb), slice(s0, s0 + L), slice(m0, m1), slice(n0, n1))
                            ec = _c_exps(cb, ins, zero_c)
                            if paired:
                                # a half of zero products carries the table's zero exponent
                                E2 = _halves(x).max(axis=0).astype(np.int16)
                                E2[E2 < floor_e] = pair_zero
                                cb = _round_table(_paired_halves(p, E2, cb, ec, ins, floor_e), ins)
                                continue
                            # zero products carry zero_exp: it is the products' largest exponent
                            # where all are zero, and (zero_wins) a candidate wherever one is
                            xm = x.max(axis=0)
                            Ep = xm.astype(np.int16)
                            if scaled:
                                kb = (k0 + s0) // sblock
                                Q = qa[kb, m0:m1, None, t0:t1] + qb[kb, None, n0:n1, t0:t1]
                                Ep += Q
                            Ep[xm < floor_e] = ins.zero_exp
                            if zero_wins:
                                # a zero product's zero_exp wins only where the real ones' largest
                                # exponent is below it (rare: tiny scales); look for zeros there alone
                                low = Ep < ins.zero_exp
                                if low.any():
                                    low &= x.min(axis=0) < floor_e
                                    Ep[low] = ins.zero_exp
                            E = np.maximum(Ep, ec)
                            if e8m13:
                                cb = _e8m13_step(p, cb, E, F, floor_e)
                                continue
                            sc = _pow2(E, F, -1)
                            # the aligning factor 2**(F - E) (times the scales), built in float32's
                            # exponent field: capped where every product is zero (E below the
                            # smallest real product's), so that it stays finite, and where it is
                            # below float32's normals (every term truncates to zero there anyway)
                            if scaled:
                                f = _pow2(np.clip(E - Q, floor_e, F + 126), F, -1, np.float32)
                                if nan_scales:
                                    f[nan_a[kb, m0:m1, None, t0:t1] | nan_b[kb, None, n0:n1, t0:t1]] = np.nan
                            else:
                                f = _pow2(np.maximum(E, floor_e), F, -1, np.float32)
                            np.multiply(p, f, out=p)
                            np.trunc(p, out=p)
                            r = np.add.reduce(p, axis=0, dtype=acc).astype(np.float64, copy=False)
                            cs = np.multiply(cb, sc, out=_work("c", cb.size, np.float64).reshape(cb.shape))
                            r += np.trunc(cs, out=cs)
                            r /= sc
                            cb = _round_table(r, ins, E, coarse=coarse)
                        cc[m0:m1, n0:n1] = cb
            out[t0:t1] = _swap2(cc.reshape(M * N, t1 - t0)).reshape(t1 - t0, M, N)
    return out


#: A GEMM (one tile) of at least this many outputs tries :func:`_run_exact`, which serves it where
#: at least ``_EXACT_SHARE`` of a sample's (output, step) entries pass its exactness check.
_EXACT_MIN = 4096
_EXACT_SHARE = 0.9
#: Outputs the route holds per-output arrays for at once (a block of rows), and the size of its
#: chunks of steps (outputs per chunk, or decoded operand elements): a chunk's float64 sums (2 MiB)
#: then stay in the caches for its steps (1.05-1.2x against 2**20 on this machine's 2 MiB L2).
_EXACT_OUT = 1 << 18
def _run_exact(ins, a, b, c, fa, fb, scales=None):
    """D of one GEMM tile (a (M, K), b (N, K) codes, C (M, N)) of the ``"fused"``, ``"paired"`` or
    ``"scaled"`` datapath from float64 matrix products, or ``None`` where this route does not apply.

    Where every product of a step is a multiple of the grid its terms are truncated to (and, for
    ``"paired"``, of the grid its sum is cut to once C is aligned), no truncation happens before
    the step's result is rounded: its sum is then exact in float64 and one slice of a batched
    matrix product.  Its largest product exponent is the binade of another matrix product, of
    per-code powers ``2**(p e)`` (:func:`_power_tables`; a broadcast pass over the int8 exponents
    where no float type holds them).  A product's lowest set bit is bounded below by the lowest
    bits of its row's and column's elements in the step, which is checked per (output, step); the
    entries that fail that bound have their products' lowest bit itself formed the same way, from
    powers ``2**(-p low)``.  The entries that fail take the sum of their truncated terms instead
    (:func:`_cut_sums`; ``"paired"``: their step through the operand path, as 1 x 1 tiles), and
    every entry rounds as the operand path would; where more than an eighth fail at a step, the
    operand path takes the rest of K.  C is cut to the step's grid only where its last
    bit lies below it.
    ``"scaled"`` (``scales`` as :func:`_run_operands` takes them, E8M0, one block per step): every
    product of an output's step carries the same two scales, a power of two ``2**Q``, which
    multiplies its exact sum and adds ``Q`` to its exponents and to its lowest bits alike.
    Applies to float32 outputs, finite scales and C far from overflow, datapaths where a zero
    product's exponent never wins, and where a 32 x 32 sample of 32 steps passes the check; from a
    chunk of steps holding a non-finite code on, the operand path takes the rest of K.
    """
    M, K = a.shape
    N = b.shape[0]
    L, F = ins.step, ins.frac_bits
    paired = ins.datapath == "paired"
    (_, xa, lo_a), (_, xb, lo_b) = _operand_tables(fa, np.float32), _operand_tables(fb, np.float32)
    floor_e = lo_a + lo_b               # the smallest exponent of a non-zero product
    if ins.out != "float32" or M * N < _EXACT_MIN or K < L:
        return None
    qa = qb = None
    qmin = qmax = 0
    if scales is not None:
        (sva, sea), (svb, seb), sblock = scales
        if (ins.datapath != "scaled" or ins.scales != ("ue8m0",) or sblock != L
                or np.isnan(sva).any() or np.isnan(svb).any()):
            return None
        qa, qb = sea[:, :, 0].astype(np.int16), seb[:, :, 0].astype(np.int16)       # (S, M), (S, N)
        # a real product's exponent is at least floor_e + Q: a zero product's must stay below it
        qmin = int(qa.min()) + int(qb.min())
        if ins.zero_exp > floor_e + qmin:
            return None
        qmax = int(qa.max()) + int(qb.max())
    elif not (paired or (ins.datapath == "fused" and ins.zero_exp <= floor_e)):
        return None
    # per code: float64 values (non-finite ones zeroed) and the exponents of their lowest set bits
    (va_t, _), (vb_t, _) = _value_tables(fa), _value_tables(fb)
    la_t, lb_t = _low_table(fa), _low_table(fb)
    S = K // L
    zero_mark = max(ins.zero_exp, -900) if paired else ins.zero_exp

    def exponents(ea, eb):
        """Largest product exponents of steps from their int8 exponents ea (..., L, rows) and
        eb (..., L, cols), in blocks of rows of about ``_OP_TILE`` products."""
        rows = ea.shape[-1]
        xm = np.empty(ea.shape[:-2] + (rows, eb.shape[-1]), np.int8)
        step = max(1, _OP_TILE // (L * eb.shape[-1] * int(np.prod(ea.shape[:-2]))))
        for r0 in range(0, rows, step):
            r1 = min(rows, r0 + step)
            np.add(ea[..., :, r0:r1, None], eb[..., :, None, :]).max(axis=-3, out=xm[..., r0:r1, :])
        E = xm.astype(np.int16)
        E[xm < floor_e] = zero_mark                      # all products zero (a zero's marker)
        return E

    def per_step(table, codes):
        """A per-code table gathered for codes (rows, steps * L), as (rows, steps, L)."""
        return np.take(table, codes).reshape(len(codes), -1, L)

    def lowest(codes, table):
        """Lowest set bits per (step, row): a product's is at least its row's plus its column's."""
        return per_step(table, codes).min(axis=2).T

    # a sample decides whether enough entries pass (ignoring C, which only adds failures)
    rs, cs, s1 = min(M, 32), min(N, 32), min(S, 32)
    E = exponents(per_step(xa, a[:rs, :s1 * L]).transpose(1, 2, 0), per_step(xb, b[:cs, :s1 * L]).transpose(1, 2, 0))
    low = lowest(a[:rs, :s1 * L], la_t)[:, :, None] + lowest(b[:cs, :s1 * L], lb_t)[:, None, :]
    if np.mean(low >= E - F) < _EXACT_SHARE:
        return None
    cmax = float(np.abs(c).max(initial=0.0))
    vmax = float(np.abs(va_t).max()) * float(np.abs(vb_t).max())
    if not cmax + 2.0 * K * vmax * 2.0 ** qmax < 2.0 ** 126:
        return None          # a non-finite C, or sums that could overflow: the operand path
    # the scales known, the smallest real product exponent is too (see _zero_c_matters)
    zero_c = _zero_c_matters(ins, floor_e) if qa is None else floor_e + qmin < _FIELDS[ins.out][3]
    coarse = not zero_c and F <= _kept_bits(ins)
    F2, c_bits = ins.pair_bits, _OUT[ins.out][3]
    # each step's largest product exponent and lowest product bit, where the float types allow, from
    # matrix products of powers of two (_power_tables): the bits' bound per row and column above
    # only sends an entry to have its lowest bit formed
    powers = _power_tables(fa, fb, L, "exponent")
    lows = _power_tables(fa, fb, L, "low")

    def failing(low, Ep, E):
        """The entries of a step whose products (lowest bits ``low``) the step's grid would cut."""
        if paired:
            return (low < Ep - F) | (low < E - (F2 + 1))
        return low < E - F

    def chain(a, cb, r0):
        """D of the rows of a (m, K) with their C (m, N, overwritten), the first of them row r0 of
        the tile."""
        m = len(a)
        rs = slice(r0, r0 + m)
        # chunks of steps of about _EXACT_OUT outputs, or as many decoded elements of A and B; the
        # first of two steps (where C from the steps before cuts many entries, the operand path
        # takes the rest of K early, having decoded little)
        g = max(1, min(S, _EXACT_OUT // (m * N), _EXACT_OUT // ((m + N) * L)))
        g1 = 0
        while g1 < S:
            g0, g1 = g1, min(S, g1 + (min(g, 2) if g1 == 0 else g))
            # a chunk's values (float64; times their step's scale) and exponents, decoded once: its
            # steps' products are one batched matrix product, and each step's exponents one
            # broadcast pass
            ac, bc = a[:, g0 * L:g1 * L], b[:, g0 * L:g1 * L]
            if any_nonfinite(ac, fa) or any_nonfinite(bc, fb):
                # a non-finite code: the operand path takes the rest of K from here
                return _run_operands(ins, a[None, :, g0 * L:], b[None, :, g0 * L:], cb[None], fa, fb,
                                     _scale_rows(scales, slice(g0, S), rs), exact=False)[0]
            la, lb = lowest(ac, la_t), lowest(bc, lb_t)        # (steps of the chunk, rows)
            VA, VB = per_step(va_t, ac), per_step(vb_t, bc)
            if qa is not None:
                VA *= _pow2(qa[g0:g1, rs].T)[:, :, None]
                VB *= _pow2(qb[g0:g1].T)[:, :, None]
            sums = _step_sums(VA, VB, "sums")
            if powers is None:
                EA = np.ascontiguousarray(per_step(xa, ac).transpose(1, 2, 0))
                EB = np.ascontiguousarray(per_step(xb, bc).transpose(1, 2, 0))
            else:
                # the steps' sums of 2**(p * (e_a + e_b)): each one's binade gives its largest term's
                PX = _step_sums(per_step(powers[0], ac), per_step(powers[1], bc), "px")
            LX = None
            for s in range(g0, g1):
                x = sums[s - g0]
                if powers is None:
                    Ep = exponents(EA[s - g0], EB[s - g0])
                else:
                    Ep = _largest_sums(PX[s - g0], powers)
                zero = Ep < floor_e if int(Ep.min()) < floor_e else None     # steps of zero products
                ec = _c_exps(cb, ins, zero_c)
                low = la[s - g0][:, None] + lb[s - g0][None, :]
                Q = None
                if qa is not None:
                    # the step's scales 2**Q add to its real products' exponents and low bits
                    Q = qa[s, rs, None] + qb[s, None, :]
                    low += Q
                    Ep += Q
                if zero is not None:
                    Ep[zero] = zero_mark
                E = np.maximum(Ep, ec)
                bad = failing(low, Ep, E)
                ks = slice(s * L, (s + 1) * L)
                if lows is not None and bad.any():
                    # the entries the bound sends: their lowest product bits themselves (from the
                    # chunk's matrix products of powers, formed at its first step that needs them)
                    if LX is None:
                        LX = _step_sums(per_step(lows[0], ac), per_step(lows[1], bc), "lx")
                    low = -_largest_sums(LX[s - g0], lows)
                    if Q is not None:
                        low += Q
                    bad = failing(low, Ep, E)
                bad = np.flatnonzero(bad)
                if bad.size > x.size // 8:
                    # many entries fail from here (a C far above the products cuts them; past
                    # about an eighth, the per-entry work below costs more than the operand
                    # path): the operand path takes the rest of K from this step's C
                    rest = slice(s * L, K)
                    return _run_operands(ins, a[None, :, rest], b[None, :, rest], cb[None], fa, fb,
                                         _scale_rows(scales, slice(s, S), rs), exact=False)[0]
                if bad.size and not paired:
                    # the entries the grid cuts: their sums are of the truncated terms instead,
                    # trunc(p * 2**(F - E)) in units of 2**(E - F) (each exact in float64: the
                    # chunk's values carry their scales), the rest of the step as for every entry
                    fi, fj = np.divmod(bad, N)
                    x.ravel()[bad] = _cut_sums(VA[fi, s - g0], VB[fj, s - g0], E.ravel()[bad], F)
                if paired:
                    new = _round_table(_paired_finish(x, Ep, E, cb, ec, ins), ins)
                else:
                    # C truncated to the step's grid 2**(E - F) (exact sums in its units) where
                    # its last bit lies below it; elsewhere nothing is cut
                    cut = E > ec + (F - c_bits)
                    nc = np.count_nonzero(cut)
                    if nc > cut.size // 4:
                        sc = _pow2(E, F, -1)
                        x *= sc
                        cs_ = cb * sc
                        x += np.trunc(cs_, out=cs_)
                        x /= sc
                    elif nc:
                        ci = np.flatnonzero(cut)
                        xs = x.ravel()[ci]                # those entries' sums, before C is added
                        x += cb
                        sc = _pow2(E.ravel()[ci], F, -1)
                        xs *= sc
                        xs += np.trunc(cb.ravel()[ci] * sc)
                        xs /= sc
                        x.ravel()[ci] = xs
                    else:
                        x += cb                   # C's last bit is on the grid everywhere
                    new = _round_table(x, ins, E, coarse=coarse)
                if bad.size and paired:
                    # the entries that fail: one step as 1 x 1 tiles, each its own output's
                    fi, fj = np.divmod(bad, N)
                    new.ravel()[bad] = _run_operands(ins, a[fi, None, ks], b[fj, None, ks],
                                                     cb.ravel()[bad, None, None], fa, fb)[:, 0, 0]
                cb = new
        return cb

    # blocks of rows of about _EXACT_OUT outputs: each block's per-output arrays stay that size
    out = np.empty((M, N), np.float32)
    rows = max(1, _EXACT_OUT // N)
    with np.errstate(invalid="ignore", over="ignore"):
        for r0 in range(0, M, rows):
            r1 = min(M, r0 + rows)
            out[r0:r1] = chain(a[r0:r1], np.array(c[r0:r1], np.float32), r0)
    return out


def _step_sums(A, B, name):
    """Per step, the sums over its L products of A (rows, steps, L) times B (cols, steps, L): one
    batched matrix product, (steps, rows, cols), into this thread's work array ``name`` (fresh
    arrays of a chunk's size are page-faulted in on every chunk)."""
    out = _work(name, A.shape[1] * len(A) * len(B), np.result_type(A, B)).reshape(A.shape[1], len(A), len(B))
    return np.matmul(A.transpose(1, 0, 2), B.transpose(1, 2, 0), out=out)


def _cut_sums(pa, pb, E, F):
    """Sums of truncated terms, ``sum(trunc(pa * pb * 2**(F - E))) * 2**(E - F)`` along the last
    axis: the sums of the exact GEMM route's entries whose step grid ``2**(E - F)`` cuts their
    products.  ``pa``, ``pb`` (entries, L) hold the float64 values (scales included) of each entry's
    row of A and column of B in the step, E (entries) its largest exponent; every product, term
    and sum is exact in float64."""
    f = _pow2(E, F, -1)
    t = np.multiply(pa, pb)
    t *= f[:, None]
    return np.trunc(t, out=t).sum(axis=1) / f


def _scale_rows(scales, steps, rows):
    """:func:`_run_operands`'s scales (or ``None``) of a range of steps (one block each) and rows of A."""
    if scales is None:
        return None
    (sva, sea), (svb, seb), block = scales
    return (sva[steps, rows], sea[steps, rows]), (svb[steps], seb[steps]), block


def _power_tables(fa, fb, L, what):
    """Per-code ``2**(p * v)`` of fa and of fb, for :func:`_largest_sums`: ``v`` the code's MMA-Sim
    exponent (``what="exponent"``) or minus the exponent of its lowest set bit (``"low"``), zero
    codes 0; p the smallest integer above ``log2(L)``.  Returns the two tables, the float type's
    integer type, exponent bias and fraction bits, and p; or ``None`` where no float type holds them.

    A step's sum of ``2**(p * (v_a + v_b))`` over its L products lies in ``[2**(p V), L * 2**(p V)]``,
    V the largest ``v_a + v_b``: a float sum of non-negative terms is never below its largest, and
    L times it stays below ``2**(p V + p)`` whatever the rounding, so ``floor(binade / p)`` is V.
    The type is the narrower of float32 and float64 whose normal range holds every such sum, and
    where a sum of zero (no non-zero product, binade field 0) reads below every real V.
    """
    key = ("powers", what, fa.name, fb.name, L)
    if key not in _TABLES:
        if what == "exponent":
            (_, ea, _), (_, eb, _) = _operand_tables(fa, np.float32), _operand_tables(fb, np.float32)
            ea, eb = (np.where(e == _ZERO8, _ZERO_LOW, e.astype(int)) for e in (ea, eb))
        else:
            ea, eb = (np.where(t == _ZERO_LOW, _ZERO_LOW, -t.astype(int)) for t in (_low_table(fa), _low_table(fb)))
        p = int(L).bit_length()
        real_a, real_b = ea[ea != _ZERO_LOW], eb[eb != _ZERO_LOW]
        _TABLES[key] = None
        if real_a.size and real_b.size:
            vmin = int(real_a.min() + real_b.min())
            lo, hi = p * vmin, p * (real_a.max() + real_b.max() + 1)
            for dt, it, bias, frac in ((np.float32, np.int32, 127, 23), (np.float64, np.int64, 1023, 52)):
                if lo >= 1 - bias and hi <= bias and -bias // p < vmin:
                    ta, tb = (np.where(v == _ZERO_LOW, 0.0, np.ldexp(1.0, p * np.where(v == _ZERO_LOW, 0, v)))
                              .astype(dt) for v in (ea, eb))
                    ta.flags.writeable = tb.flags.writeable = False
                    _TABLES[key] = ta, tb, it, bias, frac, p
                    break
    return _TABLES[key]


def _largest_sums(px, powers):
    """The largest ``v_a + v_b`` of steps (int16) from their sums ``px`` of powers (see
    :func:`_power_tables`; overwritten): ``floor((binade - bias) / p)``, which for a sum of zero
    (no non-zero product) is ``floor(-bias / p)``, below every real one."""
    _, _, it, bias, frac, p = powers
    f = px.view(it)
    f >>= frac
    f -= bias
    f //= p
    return f.astype(np.int16)


def _tile_route(ins, fa, fb, block):
    """The route of a tile or GEMM that decodes each operand once (:func:`_run_operands` or
    :func:`_run_groups`), or ``None`` where the code-pair tables must serve."""
    if ins.datapath in ("fused", "paired") or (ins.datapath == "scaled" and block % ins.step == 0):
        return _run_operands
    if ins.datapath == "grouped" and ins.group in (8, 16, 32, 64) and _groups_exact(ins, fa, fb):
        return _run_groups
    return None


def _groups_exact(ins, fa, fb):
    """Whether every group sum of ``ins.group`` products of fa x fb values is exact in float32 (all
    products finite multiples of the smallest, and a group's sum below ``2**24`` of it), so that a
    float32 matrix product gives the group sums in any order."""
    key = ("exact", ins.group, fa.name, fb.name)
    if key not in _PAIRS:
        P = _pair_tables(fa, fb, _NONE)[0]
        nz = np.abs(P[P != 0])
        q = nz.min()
        _PAIRS[key] = bool(np.isfinite(P).all() and np.all(nz / q == np.rint(nz / q))
                           and ins.group * float(nz.max() / q) < 2.0 ** 24)
    return _PAIRS[key]


def _run_groups(ins, a, b, c, fa, fb, scales):
    """D of the ``"grouped"`` datapath for tiles a (T, M, K) and b (T, N, K) of codes, C (T, M, N),
    and ``scales``: the decoded block scales (values, exponents) of A (K / block, M, T) and of B
    (K / block, N, T), and the block.

    A group's sum is exact (:func:`_groups_exact`), so the group sums of a block of outputs are
    one float32 matrix product of the decoded operands; whether a group has a non-zero product at
    all is the AND of its row's and its column's non-zero elements as bit masks (one word of
    ``group`` bits each); the step then aligns the groups' scaled sums and C as
    :func:`_group_terms` and :func:`_fused_step` do.
    """
    T, M, N = c.shape
    if N < M:
        # symmetric in A and B: the longer side last, so that the passes over (tiles, groups, rows,
        # columns) run along it
        return np.swapaxes(_run_groups(ins, b, a, np.swapaxes(c, 1, 2), fb, fa, (scales[1], scales[0], scales[2])),
                           1, 2)
    a, b = _codes_ok(a, fa, "a"), _codes_ok(b, fb, "b")
    K, L, G, F = a.shape[-1], ins.step, ins.group, ins.frac_bits
    (sva, sea), (svb, seb), block = scales
    # a zero scale makes its groups zero terms: its exponent far below, so that a sum of two stays so
    low = -(1 << 13)
    sea = np.where(sva == 0, low, sea).astype(np.int16)
    seb = np.where(svb == 0, low, seb).astype(np.int16)
    ng = L // G
    word = np.dtype(f"u{G // 8}")          # a group's bits: a 16-product group is two bytes
    # blocks of about _OP_TILE / 16 outputs, K in chunks of whole steps holding about _OP_TILE groups
    R = max(1, _OP_TILE // 16)
    tc = min(T, max(1, R // (M * N)))
    nb = min(N, max(1, R // tc))
    mb = min(M, max(1, R // (tc * nb)))
    kc = min(K, max(L, _OP_TILE // (tc * mb * nb) * G // L * L))
    out = np.empty((T, M, N), c.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        for t0 in range(0, T, tc):
            t1 = min(T, t0 + tc)
            for m0 in range(0, M, mb):
                m1 = min(M, m0 + mb)
                for n0 in range(0, N, nb):
                    n1 = min(N, n0 + nb)
                    cb = c[t0:t1, m0:m1, n0:n1]
                    for k0 in range(0, K, kc):
                        k1 = min(K, k0 + kc)
                        gk = (k1 - k0) // G
                        va = _pair_decode(a[t0:t1, m0:m1, k0:k1], fa, "ga")
                        vb = _pair_decode(b[t0:t1, n0:n1, k0:k1], fb, "gb")
                        # the groups outermost, (groups, t, rows, G) and (groups, t, G, columns): the
                        # group sums, scaled terms and exponents then run along K in contiguous planes
                        A = va.reshape(t1 - t0, m1 - m0, gk, G).transpose(2, 0, 1, 3)
                        B = vb.reshape(t1 - t0, n1 - n0, gk, G).transpose(2, 0, 3, 1)
                        S = np.matmul(A, B)                                               # (groups, t, m, n)
                        # a group of zero products carries zero_exp: the groups' non-zero elements as
                        # bit masks, one word per group and row (column), and their AND per output
                        za, zb = (np.ascontiguousarray(np.packbits(v != 0, axis=-1).view(word).transpose(2, 0, 1))
                                  for v in (va, vb))
                        zero = np.bitwise_and(za[..., None], zb[:, :, None, :]) == 0
                        kb = (k0 + np.arange(gk) * G) // block
                        # the groups' scales as (groups, t, m, 1) and (groups, t, 1, n)
                        sA, qA = (np.transpose(x[kb, m0:m1, t0:t1], (0, 2, 1))[..., None] for x in (sva, sea))
                        sB, qB = (np.transpose(x[kb, n0:n1, t0:t1], (0, 2, 1))[:, :, None, :] for x in (svb, seb))
                        terms = np.multiply(S, sA, dtype=np.float64)
                        terms *= sB
                        exps = qA + qB
                        exps[zero | (exps < low // 2)] = ins.zero_exp
                        for g0 in range(0, gk, ng):
                            ec = _c_exps(cb, ins)
                            cb = _round_table(_fused_step(terms[g0:g0 + ng], exps[g0:g0 + ng], cb, ec, F), ins)
                    out[t0:t1, m0:m1, n0:n1] = cb
    return out


def _k_padded(ins, a, b):
    """Zero codes appended along K to a whole number of steps, as a kernel pads its last tile."""
    pad = (-a.shape[1]) % ins.step
    if not pad:
        return a, b
    return np.pad(a, ((0, 0), (0, pad))), np.pad(b, ((0, pad), (0, 0)))


def gemm(a, b, *, instruction, a_format, b_format, c=None):
    """float32 ``A @ B (+ C)`` as a chain of one instruction along K (the K-loop of an MMA kernel).

    K is padded with zero codes to a whole number of steps.  Used by :func:`fp8emu.scaled_mm`
    when its ``accumulator`` names an instruction; the instruction must have a float32 output.

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> a = fp8emu.encode(np.array([[448.0] + [2.0 ** -9] * 47]), "e4m3fn")   # K = 48: two steps of 32
    >>> b = fp8emu.encode(np.ones((48, 1)), "e4m3fn")
    >>> float(gemm(a, b, instruction="hopper-wgmma", a_format="e4m3fn", b_format="e4m3fn")[0, 0])
    448.0
    >>> float(gemm(a, b, instruction="rtx-blackwell-mma", a_format="e4m3fn", b_format="e4m3fn")[0, 0])
    448.091796875
    """
    ins = get_instruction(instruction)
    if ins.out != "float32":
        raise ValueError(f"{ins.name} returns float16; a GEMM accumulator needs a float32-output instruction "
                         f"(use {ins.name.removesuffix('-f16')!r})")
    if ins.block_scaled:
        raise ValueError(f"{ins.name} is block-scaled: use fp8emu.gemm.block_scaled_mm with MX/NVFP4 operands")
    a, b = _k_padded(ins, np.asarray(a), np.asarray(b))
    if a.ndim == 2 and b.ndim == 2 and a.shape[1] == 0 == b.shape[0]:
        # no step along K: D is C (zero where not given), as np.matmul's empty sum
        return _c_in(c, (a.shape[0], b.shape[1]), ins).astype(np.float32, copy=True)
    return mma(a, b, c, instruction=ins, a_format=a_format, b_format=b_format)


def _scale_codes(values, kind):
    """Scale codes of decoded block-scale values (E8M0 powers of two, or E4M3 values)."""
    if kind == "ue8m0":
        with np.errstate(divide="ignore", invalid="ignore"):
            e = np.where(np.isnan(values), 128, np.round(np.log2(np.where(np.isnan(values), 1.0, values))))
        return (e + 127).astype(np.uint8)
    return encode(values, "e4m3fn")


def block_scaled_gemm(a, a_format, a_scales, b, b_format, b_scales, *, instruction, scale_format, c=None):
    """float32 ``A @ B (+ C)`` of block-scaled operands as a chain of one block-scaled instruction.

    ``a`` (M, K) and ``b`` (K, N) are element codes; ``a_scales`` (M, K / block) and ``b_scales``
    (K / block, N) decoded scale values (float64, NaN for a NaN code) of the given ``scale_format``.
    Used by :func:`fp8emu.gemm.block_scaled_mm` when its ``accumulator`` names an instruction.
    """
    ins = get_instruction(instruction)
    if not ins.block_scaled:
        raise ValueError(f"{ins.name} takes no block scales; use one of "
                         f"{sorted(n for n, i in INSTRUCTIONS.items() if i.block_scaled)} with MX/NVFP4 operands")
    sa, sb = _scale_codes(a_scales, scale_format), _scale_codes(b_scales, scale_format)
    K = a.shape[1]
    if K % ins.shape[2]:
        raise ValueError(f"K = {K} must be a multiple of {ins.name}'s k = {ins.shape[2]} (whole instructions)")
    if K == 0:
        # no instruction along K: D is C (zero where not given), as np.matmul's empty sum
        return _c_in(c, (a.shape[0], b.shape[1]), ins).astype(np.float32, copy=True)
    return mma(a, b, c, instruction=ins, a_format=a_format, b_format=b_format, a_scales=sa, b_scales=sb,
               scale_format=scale_format)
