"""OCP Microscaling (MX v1.0): an E8M0 scale shared by a block of elements."""

from __future__ import annotations

import math

import numpy as np

from ..formats import Format
from .tensor import F32, ScaledTensor, as_format, axis_block, block_amax_finite, int_arg, prepare, \
    scaled_cast

__all__ = ["quantize_mx", "MX_SCALE_RULES", "MX_ELEMENT_FORMATS"]

#: MX scale rules accepted by :func:`quantize_mx`.
MX_SCALE_RULES = ("floor", "ceil", "even", "rceil")

#: Element formats of OCP MX v1.0 (MXFP8, MXFP6, MXFP4).
MX_ELEMENT_FORMATS = ("e4m3fn", "e5m2", "e2m3fn", "e3m2fn", "e2m1fn")


def _floor_log2_f32(a: np.ndarray) -> np.ndarray:
    """floor(log2 a) for positive finite float32 a (subnormals included), exactly."""
    _, e = np.frexp(a.astype(np.float64))
    return e.astype(np.int64) - 1


def _mx_exponent(amax: np.ndarray, fmt: Format, rule: str) -> np.ndarray:
    """Unbiased shared exponent (before clamping) for positive finite amax."""
    emax = int(math.floor(math.log2(fmt.max)))
    if rule == "floor":
        return _floor_log2_f32(amax) - emax
    if rule == "ceil":
        fl = _floor_log2_f32(amax)
        exact_pow2 = np.ldexp(np.float64(1), fl) == amax.astype(np.float64)
        return fl + (~exact_pow2) - emax
    if rule == "even":
        # torchao EVEN: round amax to the element's mantissa width (ties away),
        # keep the resulting binade: add half an element ulp to the float32 bits.
        bits = amax.view(np.uint32).astype(np.uint64) + np.uint64(1 << (22 - fmt.mbits))
        biased = (bits >> np.uint64(23)).astype(np.int64)
        # A carry into exponent 255 means the rounded amax is 2**128.
        e = np.where(biased == 0, -127, biased - 127)
        return e - emax
    # rceil (Transformer Engine / torchao RCEIL): ceil to a power of two of
    # fl32(amax * fl32(1 / max_elem)).
    rcp = F32(F32(1) / F32(fmt.max))
    with np.errstate(over="ignore", under="ignore"):
        v = np.multiply(amax, rcp, dtype=np.float32)
    fl = _floor_log2_f32(np.where(v > 0, v, F32(1)))
    exact_pow2 = np.ldexp(np.float64(1), fl) == v.astype(np.float64)
    e = fl + (~exact_pow2)
    return np.where(v > 0, e, -127)


def quantize_mx(x, elem_format, *, block=32, axis=-1, scale_rule="floor") -> ScaledTensor:
    """OCP Microscaling (MX v1.0): an E8M0 scale shared by ``block`` elements.

    The blocks run along ``axis``.  For each block, with ``amax = max|x|``
    and ``emax_elem = floor(log2(elem max))`` (8 for E4M3, 15 for E5M2, 2 for
    E2M3 and E2M1, 4 for E3M2), the shared exponent ``E`` is

    * ``"floor"`` (OCP MX v1.0 section 6.3): ``floor(log2 amax) - emax_elem``;
    * ``"ceil"``: ``ceil(log2 amax) - emax_elem`` (never saturates);
    * ``"even"`` (torchao ``EVEN``): amax first rounded to the element's
      mantissa width (half-ulp added to its float32 bits), then as floor;
    * ``"rceil"`` (Transformer Engine ``MXFP8BlockScaling`` /
      ``float_to_e8m0``, torchao ``RCEIL``):
      ``ceil(log2(fl32(amax * fl32(1/elem_max))))``.

    ``E`` is clamped to [-127, 127]; the scale code is ``E + 127`` and
    ``scale_inv = 2**E``.  Elements are ``cast(fl32(x * 2**-E))`` with
    round-to-nearest-even and saturation to +-max (the spec's clamping).

    Edge cases: an all-zero block gets ``E = -127`` (code 0) and zero
    elements; a subnormal amax clamps to ``E = -127``; a block holding Inf or
    NaN gets the NaN scale code 0xFF (``scale_inv`` NaN: the whole block
    dequantizes to NaN), its finite elements are cast with multiplier 1.
    Transformer Engine's kernel differs for blocks whose amax is below
    ``2**-127 * elem_max`` (it multiplies by 1 instead of ``2**127``) and for
    Inf (code 0xFE); those are not reproduced.  Partial blocks are padded
    with zeros.

    Parameters
    ----------
    x : array_like
    elem_format : {"e4m3fn", "e5m2", "e2m3fn", "e3m2fn", "e2m1fn"}
    block : int, keyword-only
        Elements per scale (32 in the spec).
    axis : int, keyword-only
    scale_rule : {"floor", "ceil", "even", "rceil"}, keyword-only

    Returns
    -------
    ScaledTensor
        With ``scale_codes`` (uint8 E8M0), ``scale = 2**-E``,
        ``scale_inv = 2**E``.

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> x = np.array([448.0, 1.0, -3.0, 0.0])
    >>> t = fp8emu.quantize_mx(x, "e4m3fn")           # floor(log2 448) - 8 = 0
    >>> t.scale_codes.tolist(), t.dequantize().tolist()
    ([127], [448.0, 1.0, -3.0, 0.0])
    >>> fp8emu.quantize_mx(x, "e4m3fn", scale_rule="ceil").scale_codes.tolist()
    [128]
    >>> fp8emu.quantize_mx(np.array([7.0]), "e2m1fn").dequantize().tolist()   # 7 -> E=0, saturates
    [6.0]
    """
    fmt = as_format(elem_format)
    if fmt.name not in MX_ELEMENT_FORMATS:
        raise ValueError(f"unsupported MX element format {fmt.name!r}; accepted: "
                         + ", ".join(MX_ELEMENT_FORMATS))
    if scale_rule not in MX_SCALE_RULES:
        raise ValueError(f"unknown scale_rule {scale_rule!r}; accepted: "
                         + ", ".join(MX_SCALE_RULES))
    block = int_arg(block, "block", minimum=1)
    fmt, xf = prepare(x, fmt, "quantize_mx")
    ax, blk = axis_block(xf.ndim, axis, block)

    amax, nonfinite = block_amax_finite(xf, blk)
    pos = amax > 0
    e = _mx_exponent(np.where(pos, amax, F32(1)), fmt, scale_rule)
    e = np.clip(np.where(pos, e, -127), -127, 127)
    codes_scale = np.where(nonfinite, 255, e + 127).astype(np.uint8)
    mult = np.where(nonfinite, F32(1), np.ldexp(F32(1), -e).astype(np.float32))
    inv = np.where(nonfinite, F32(np.nan), np.ldexp(F32(1), e).astype(np.float32))
    mult = mult.astype(np.float32)
    inv = inv.astype(np.float32)
    codes = scaled_cast(xf, mult, blk, fmt)
    return ScaledTensor(codes=codes, fmt=fmt, scale=mult, scale_inv=inv, block=blk, axis=ax,
                        shape=xf.shape, scale_codes=codes_scale, recipe=f"mx-{scale_rule}")
