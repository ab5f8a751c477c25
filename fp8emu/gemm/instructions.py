"""Matrix instructions of FP8/FP6/FP4 (and 16-bit) tensor cores: one tile, a batch, or a GEMM.

:func:`mma` runs one instruction of the catalogue on one tile, or on a batch of tiles,
``D = A @ B + C``; :func:`dot` the same as rows; :func:`gemm` and :func:`block_scaled_gemm`
chain one along K.  The instructions themselves are the rows of :mod:`fp8emu.gemm.catalogue`, whose
:func:`~fp8emu.gemm.catalogue.presets` lists every one with the evidence behind it (public GPU
recordings reproduced, random MMAs equal to MMA-Sim, or model only).

Where things are: the catalogue as data, :mod:`fp8emu.gemm.catalogue` (a new preset is a row);
what each datapath computes, :mod:`fp8emu.gemm.datapaths` (the reference step, beside the PTX /
ISA text); the fast routes that give the same bits, each with its contract,
:mod:`fp8emu.gemm.routes`.
"""

from __future__ import annotations

import numpy as np

from ..codec import encode
from ..formats import get_format
from ..interop import byte_codes
from . import catalogue
from .code_tables import any_nonfinite, values_and_exponents
from .datapaths import reference
from .fparith import integers_kept
from .instruction_inputs import check_inputs
from .outputs import OUTPUT_TYPES
from .wide_inputs import WIDE_INPUTS, operand_name
from .routes import run_tiles, tile_route
from .routes.tables import run_tables
from .routes.wide import run_wide, serves

__all__ = ["mma", "dot", "gemm", "block_scaled_gemm"]

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
    scale_format : {"ue8m0", "ue4m3", "ue5m3"}, optional
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
    ins = catalogue.get_instruction(instruction)
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
        A name from :data:`~fp8emu.gemm.catalogue.INSTRUCTIONS` (see :func:`~fp8emu.gemm.catalogue.presets`).
    a_format, b_format : str
        Element formats the instruction accepts (``b_format`` defaults to ``a_format``).
    a_scales : ndarray of uint8, shape (..., M, K // block), optional
        Block-scaled instructions: A's scale codes along K.
    b_scales : ndarray of uint8, shape (..., K // block, N), optional
        Block-scaled instructions: B's scale codes along K.
    scale_format : {"ue8m0", "ue4m3", "ue5m3"}, optional
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
    ins = catalogue.get_instruction(instruction)
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
    if operand_name(a_format) not in WIDE_INPUTS and ins.out != "float64":
        sa, sb, block = check_inputs(ins, K, a_format, bf, sa3, sb3, scale_format)
        fa, fb = get_format(a_format), get_format(bf)
        route = tile_route(ins, fa, fb, block)
        if cc.size == 0:
            return np.empty(batch + (M, N), cc.dtype)
        if route is not None:
            # check_inputs' scales are K-major, (K / block, T, M): the tiles innermost instead
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
    dt = OUTPUT_TYPES[ins.out].dtype
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
    if not (same.all() and integers_kept(arr, cd)):    # an int64 2**53 + 1 was summed as 2**53
        raise ValueError(f"c must hold {ins.out} values (the instruction's accumulator type); round it first")
    return cd

def _run(ins, a, b, c, a_format, b_format, a_scales, b_scales, scale_format):
    """D for broadcastable operands a (M|1, N|1, K) and b, by the route that applies.

    FP8/FP6/FP4 operands take a fast route (:mod:`fp8emu.gemm.routes`): a tile or GEMM decodes
    each operand once (:func:`~fp8emu.gemm.routes.run_tiles`, from 512 outputs;
    ``kind::mxf4nvf4``: :func:`~fp8emu.gemm.routes.groups.run_groups`), anything else gathers its
    products from the code-pair tables (:func:`~fp8emu.gemm.routes.tables.run_tables`).  The
    float64 results of step widths no instruction has take the wide route
    (:func:`~fp8emu.gemm.routes.wide.run_wide`) where their codes are finite, the 16-bit inputs
    and the rest the reference steps (:func:`fp8emu.gemm.datapaths.reference`), which the routes are
    tested against.
    """
    K = a.shape[-1]
    if ins.datapath == "fused" and serves(ins) and operand_name(a_format) not in WIDE_INPUTS:
        d = _wide(ins, a, b, c, a_format, b_format)
        if d is not None:
            return d
    if operand_name(a_format) in WIDE_INPUTS or ins.out == "float64":
        # the reference steps check the inputs themselves (float64 results: step widths no
        # instruction has, which no fast route serves)
        return reference(ins, a, b, c, a_format, b_format, a_scales, b_scales, scale_format)
    sa, sb, block = check_inputs(ins, K, a_format, b_format, a_scales, b_scales, scale_format)
    if c.size == 0:
        return np.empty(c.shape, c.dtype)
    fa, fb = get_format(a_format), get_format(b_format)
    tile = a.shape[1] == 1 and b.shape[0] == 1 and a.shape[0] > 1 and b.shape[1] > 1
    route = tile_route(ins, fa, fb, block) if tile else None
    if route is run_tiles and a.shape[0] * b.shape[1] < 512:
        route = None          # a tile of fewer outputs: the code-pair path's fewer NumPy calls win
    if route is not None:
        # sa (K / block, M, 1) and sb (K / block, 1, N) as the routes take them, (K / block, N, 1)
        scl = None if sa is None else (sa, (sb[0].swapaxes(1, 2), sb[1].swapaxes(1, 2)), block)
        return route(ins, a[None, :, 0], b[None, 0], c[None], fa, fb, scl)[0]
    # FP8/FP6/FP4 rows (or a block-scaled kind): products from code-pair tables
    return run_tables(ins, a, b, c, fa, fb, sa, sb, block, K)


def _wide(ins, a, b, c, a_format, b_format):
    """D of a tile through a ``"fused"`` row of unbounded exponents by the wide route
    (:func:`~fp8emu.gemm.routes.wide.run_wide`), or ``None`` where the reference steps serve it: rows
    of dot products, Inf/NaN codes, or a C that is not float32 (the route takes float32's)."""
    check_inputs(ins, a.shape[-1], a_format, b_format, None, None, None)
    fa, fb = get_format(a_format), get_format(b_format)
    if c.size == 0 or not (a.shape[1] == 1 and b.shape[0] == 1) or any_nonfinite(a, fa) or any_nonfinite(b, fb):
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        c32 = c.astype(np.float32)
    if not np.array_equal(c32, c):          # NaN too
        return None
    va, ea, la = values_and_exponents(byte_codes(a[:, 0], fa, "a"), fa, lows=True)
    vb, eb, lb = values_and_exponents(byte_codes(b[0], fb, "b"), fb, lows=True)
    return run_wide(ins, va, ea, vb.T, eb.T, c=None if not c32.any() else c32, lows=(la, lb.T))


def _k_padded(ins, a, b):
    """Zero codes appended along K to a whole number of steps, as a kernel pads its last tile."""
    pad = (-a.shape[1]) % ins.step
    if not pad:
        return a, b
    return np.pad(a, ((0, 0), (0, pad))), np.pad(b, ((0, pad), (0, 0)))


def gemm(a, b, *, instruction, a_format, b_format, c=None):
    """float32 ``A @ B (+ C)`` as a chain of one instruction along K (the K-loop of an MMA kernel).

    K is padded with zero codes to a whole number of steps.  Used by :func:`fp8emu.scaled_mm`
    when its ``accumulator`` names an instruction; the instruction must have a float32 output (or
    float64, a row of step widths no instruction has: D is then float64, the chain's last result).

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
    ins = catalogue.get_instruction(instruction)
    if ins.out == "float16":
        raise ValueError(f"{ins.name} returns float16; a GEMM accumulator needs a float32-output instruction "
                         f"(use {ins.name.removesuffix('-f16')!r})")
    if ins.block_scaled:
        raise ValueError(f"{ins.name} is block-scaled: use fp8emu.gemm.block_scaled_mm with MX/NVFP4 operands")
    a, b = _k_padded(ins, np.asarray(a), np.asarray(b))
    if a.ndim == 2 and b.ndim == 2 and a.shape[1] == 0 == b.shape[0]:
        # no step along K: D is C (zero where not given), as np.matmul's empty sum
        return _c_in(c, (a.shape[0], b.shape[1]), ins).astype(OUTPUT_TYPES[ins.out].dtype, copy=True)
    return mma(a, b, c, instruction=ins, a_format=a_format, b_format=b_format)


def _scale_codes(values, kind):
    """Scale codes of decoded block-scale values (E8M0 powers of two, E4M3 or UE5M3 values)."""
    if kind == "ue8m0":
        with np.errstate(divide="ignore", invalid="ignore"):
            e = np.where(np.isnan(values), 128, np.round(np.log2(np.where(np.isnan(values), 1.0, values))))
        return (e + 127).astype(np.uint8)
    return encode(values, "e5m3fnu" if kind == "ue5m3" else "e4m3fn")


def block_scaled_gemm(a, a_format, a_scales, b, b_format, b_scales, *, instruction, scale_format, c=None):
    """float32 ``A @ B (+ C)`` of block-scaled operands as a chain of one block-scaled instruction.

    ``a`` (M, K) and ``b`` (K, N) are element codes; ``a_scales`` (M, K / block) and ``b_scales``
    (K / block, N) decoded scale values (float64, NaN for a NaN code) of the given ``scale_format``.
    Used by :func:`fp8emu.gemm.block_scaled_mm` when its ``accumulator`` names an instruction.
    """
    ins = catalogue.get_instruction(instruction)
    if not ins.block_scaled:
        raise ValueError(f"{ins.name} takes no block scales; use one of "
                         f"{sorted(n for n, i in catalogue.INSTRUCTIONS.items() if i.block_scaled)} "
                         "with MX/NVFP4 operands")
    sa, sb = _scale_codes(a_scales, scale_format), _scale_codes(b_scales, scale_format)
    K = a.shape[1]
    if K % ins.shape[2]:
        raise ValueError(f"K = {K} must be a multiple of {ins.name}'s k = {ins.shape[2]} (whole instructions)")
    if K == 0:
        # no instruction along K: D is C (zero where not given), as np.matmul's empty sum
        return _c_in(c, (a.shape[0], b.shape[1]), ins).astype(np.float32, copy=True)
    return mma(a, b, c, instruction=ins, a_format=a_format, b_format=b_format, a_scales=sa, b_scales=sb,
               scale_format=scale_format)
