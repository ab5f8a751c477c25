"""What a matrix instruction accepts: its operand formats, K and block scales checked against its
catalogue row, and the block-scale codes read as values and exponents.

:func:`check_inputs` is the one check of an instruction's inputs, made by
:func:`fp8emu.gemm.instructions.mma` and by the reference (:func:`fp8emu.gemm.datapaths.reference`);
:func:`scale_values` is the one rule for a block-scale code in every instruction.
"""

from __future__ import annotations

import numpy as np

from ..codec import decode
from ..formats import get_format
from .code_tables import ZERO_EXP
from .wide_inputs import operand_name

__all__ = ["check_inputs", "decode_scales", "scale_values", "kmajor"]

_SCALES = {}


def kmajor(x):
    """``x`` with its last (K) axis first, contiguous: a K step is then a slab along axis 0 and its
    reductions are element-wise over contiguous planes, much faster than reducing a short last axis.

    Examples
    --------
    >>> kmajor(np.zeros((2, 3, 32), np.uint8)).shape
    (32, 2, 3)
    """
    return np.ascontiguousarray(np.moveaxis(np.asarray(x), -1, 0))


def check_inputs(ins, K, a_format, b_format, a_scales, b_scales, scale_format):
    """Check the operand formats, K and the block scales against the instruction; return the decoded
    scales (values and exponents, K-major) and the block, or ``None`` for instructions without.

    Examples
    --------
    >>> from fp8emu.gemm.catalogue import get_instruction
    >>> check_inputs(get_instruction("hopper-wgmma"), 64, "e4m3fn", "e5m2", None, None, None)
    (None, None, None)
    >>> sa, sb, block = check_inputs(get_instruction("blackwell-tcgen05-mxf8f6f4"), 64, "e4m3fn", "e4m3fn",
    ...                              np.full((1, 2), 127, np.uint8), np.full((1, 2), 128, np.uint8), None)
    >>> block, sa[0].ravel().tolist(), sb[1].ravel().tolist()          # values of A's, exponents of B's
    (32, [1.0, 1.0], [1, 1])
    >>> check_inputs(get_instruction("hopper-wgmma"), 48, "e4m3fn", "e4m3fn", None, None, None)
    Traceback (most recent call last):
    ...
    ValueError: K = 48 must be a positive multiple of hopper-wgmma's step of 32
    """
    for f, what in ((a_format, "a_format"), (b_format, "b_format")):
        if operand_name(f) not in ins.formats:
            raise ValueError(f"{ins.name} takes {', '.join(ins.formats)} operands, not "
                             f"{what}={operand_name(f)!r}")
    if K % ins.step or K == 0:
        raise ValueError(f"K = {K} must be a positive multiple of {ins.name}'s step of {ins.step}")
    sa = sb = None
    block = None
    if ins.block_scaled:
        if a_scales is None or b_scales is None:
            raise ValueError(f"{ins.name} is block-scaled: give a_scales and b_scales")
        # a row of unbounded exponents (float64 output, a block-scaled model's) takes a scale type and
        # a block per operand; an instruction one of each for both
        wide = ins.out == "float64"
        kinds = tuple(scale_format) if wide and isinstance(scale_format, tuple) else (scale_format,) * 2
        kinds = tuple(ins.scales[0] if k is None else k for k in kinds)
        for k in kinds:
            if k not in ins.scales:
                raise ValueError(f"{ins.name} takes {', '.join(ins.scales)} scales, not {k!r}")
        if (not wide and a_scales.shape[-1] != b_scales.shape[-1]) or any(
                x.shape[-1] == 0 or K % x.shape[-1] for x in (a_scales, b_scales)):
            raise ValueError(f"scales must hold K / block entries along K for "
                             f"{'each operand' if wide else 'both operands'}, got "
                             f"{a_scales.shape[-1]} and {b_scales.shape[-1]} for K = {K}")
        blocks = (K // a_scales.shape[-1], K // b_scales.shape[-1])
        for kind, blk in zip(kinds, blocks):
            if blk not in ins.blocks:
                raise ValueError(f"{ins.name} takes blocks of {', '.join(map(str, ins.blocks))} along K, "
                                 f"got {blk}")
            if (kind, blk) not in ins.scale_modes:
                raise ValueError(f"{ins.name} takes {kind} scales with blocks of "
                                 f"{', '.join(str(b) for k, b in ins.scale_modes if k == kind)} along K, got {blk}")
        sa = decode_scales(kmajor(a_scales), kinds[0], "a_scales", unbounded=wide)
        sb = decode_scales(kmajor(b_scales), kinds[1], "b_scales", unbounded=wide)
        block = blocks if wide else blocks[0]
    elif a_scales is not None or b_scales is not None or scale_format is not None:
        raise ValueError(f"{ins.name} takes no block scales")
    return sa, sb, block


def decode_scales(codes, kind, what, unbounded=False):
    """Block scale values (float64, NaN for NaN codes) and their exponents, looked up per code
    (:func:`scale_values`, tabulated once per scale type); ``what`` names the scales in the error.
    ``unbounded``: the exponents of a row of unbounded exponents, ``floor(log2 v)`` of the value itself
    (a subnormal scale's too), ``ZERO_EXP`` for a zero scale (its products are zero terms).

    Examples
    --------
    >>> v, e = decode_scales(np.array([126, 255], np.uint8), "ue8m0", "a_scales")
    >>> v.tolist(), e.tolist()
    ([0.5, nan], [-1, 128])
    """
    codes = np.asarray(codes)
    if codes.dtype != np.uint8:
        raise TypeError(f"{what} must be uint8 scale codes, got dtype {codes.dtype}")
    if kind not in _SCALES:
        v, e = scale_values(np.arange(256, dtype=np.uint8), kind)
        v.flags.writeable = e.flags.writeable = False
        _SCALES[kind] = v, e
    v, e = _SCALES[kind]
    idx = codes.astype(np.intp)
    v = np.take(v, idx)
    if unbounded:
        with np.errstate(divide="ignore", invalid="ignore"):
            _, q = np.frexp(np.where(np.isfinite(v), v, 1.0))
        return v, np.where(v == 0, ZERO_EXP, q.astype(np.int64) - 1)
    return v, np.take(e, idx)


def scale_values(codes, kind):
    """Values (float64, NaN for NaN codes) and exponents of block-scale codes: the one rule for a
    scale code in every instruction.  ``"ue8m0"``: ``2**(code - 127)``, 0xFF NaN; ``"ue4m3"``: an
    E4M3 code read without its sign bit (as the instruction does); ``"ue5m3"``: the unsigned UE5M3
    code (fp8emu's ``e5m3fnu``, ml_dtypes' ``float8_e5m3fnu``: bias 15, 0xFF NaN).  A UE4M3 / UE5M3
    exponent is ``floor(log2 v)``, at least the format's minimum normal exponent (a subnormal scale
    carries that, as a subnormal operand does).

    Examples
    --------
    >>> v, e = scale_values(np.array([0x38, 0xB8, 0x01], np.uint8), "ue4m3")     # the sign bit is ignored
    >>> v.tolist(), e.tolist()
    ([1.0, 1.0, 0.001953125], [0, 0, -6])
    """
    if kind == "ue8m0":
        e = codes.astype(np.int64) - 127
        v = np.where(codes == 255, np.nan, np.ldexp(1.0, np.minimum(e, 127)))
        return v, e
    fmt = get_format("e4m3fn" if kind == "ue4m3" else "e5m3fnu")
    v = decode(codes & np.uint8(0x7F) if kind == "ue4m3" else codes, fmt, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        _, e = np.frexp(np.where(np.isfinite(v), v, 1.0))
    return v, np.maximum(e.astype(np.int64) - 1, int(np.log2(fmt.min_normal)))
