"""OCP Microscaling (MX v1.0): an E8M0 scale shared by a block of elements.

Examples
--------
>>> MX_SCALE_RULES
('floor', 'ceil', 'even', 'rceil')
>>> MX_ALL_SCALE_RULES[4:], MX_VARIANTS
(('nki',), ('ocp', 'torchao'))
>>> MX_ELEMENT_FORMATS[-1], MXINT8.max          # MXFP4's element; MXINT8's largest value 127/64
('e2m1fn', 1.984375)
"""

from __future__ import annotations

import math

import numpy as np

from ..formats import Format
from ..rounding import check_rounding
from . import torchao_variants as torchao
from .tensor import F32, ScaledTensor, as_format, code_array, axis_arg, axis_block, block_amax, block_amax_finite, \
    block_arg, expand, int_arg, prepare, scale_times, scaled_cast

__all__ = ["quantize_mx", "mx_from_codes", "MX_SCALE_RULES", "MX_ALL_SCALE_RULES", "MX_VARIANTS",
           "MX_ELEMENT_FORMATS", "MXINT8"]

#: The MX scale rules of torchao's ``ScaleCalculationMode`` (the recipe catalogue's MX rules).
MX_SCALE_RULES = ("floor", "ceil", "even", "rceil")

#: Every scale rule :func:`quantize_mx` accepts: torchao's four and AWS Trainium3's ``"nki"``
#: (``nki.isa.quantize_mx``).
MX_ALL_SCALE_RULES = MX_SCALE_RULES + ("nki",)

#: Edge-block behaviours of :func:`quantize_mx`: the OCP spec's and torchao's (``to_mx``).
MX_VARIANTS = ("ocp", "torchao")

#: Element formats of OCP MX v1.0 (MXFP8, MXFP6, MXFP4).
MX_ELEMENT_FORMATS = ("e4m3fn", "e5m2", "e2m3fn", "e3m2fn", "e2m1fn")


def _floor_log2_f32(a: np.ndarray) -> np.ndarray:
    """floor(log2 a) for positive finite float32 a (subnormals included), exactly.

    A normal float32's biased exponent field is floor(log2 a) + 127; only
    subnormals (field 0) need their leading bit found.
    """
    a = np.asarray(a, np.float32)
    field = (a.view(np.uint32) >> np.uint32(23)).astype(np.int32)
    e = field - np.int32(127)
    sub = field == 0
    if sub.any():
        _, fe = np.frexp(a[sub].astype(np.float64))
        e[sub] = fe - 1
    return e


def _pow2_f32(e: np.ndarray) -> np.ndarray:
    """2**e as float32 for integer e in [-127, 127] (2**-127 is float32's subnormal 0x00400000), from its bits."""
    biased = (np.asarray(e, np.int32) + np.int32(127)).astype(np.uint32)
    bits = np.where(biased > 0, biased << np.uint32(23), np.uint32(0x00400000))
    return bits.view(np.float32)


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
    if rule == "nki":
        # Trainium3: a block scale twice the OCP rule's
        return _floor_log2_f32(amax) - emax + 1
    # rceil (Transformer Engine float_to_e8m0): ceil to a power of two of fl32(amax * fl32(1 / max_elem));
    # the quotient fl32(amax / max_elem) gives the same code for every float32 amax
    with np.errstate(over="ignore", under="ignore"):
        v = np.multiply(amax, F32(F32(1) / F32(fmt.max)), dtype=np.float32)
    fl = _floor_log2_f32(np.where(v > 0, v, F32(1)))
    exact_pow2 = np.ldexp(np.float64(1), fl) == v.astype(np.float64)
    e = fl + (~exact_pow2)
    return np.where(v > 0, e, -127)


def quantize_mx(x, elem_format, *, block=32, axis=-1, scale_rule="floor", rounding="rne",
                rng=None, variant="ocp") -> ScaledTensor:
    """OCP Microscaling (MX v1.0): an E8M0 scale shared by a block of elements.

    The blocks run along ``axis`` (``block`` an int), or are 2-D tiles over
    the last dimensions (``block=(32, 32)``, Transformer Engine's MXFP8 weight
    option; ``axis`` then only records the GEMM's K axis).  For each block,
    with ``amax = max|x|`` and ``emax_elem = floor(log2(elem max))`` (8 for
    E4M3, 15 for E5M2, 2 for E2M3 and E2M1, 4 for E3M2, 0 for INT8), the
    shared exponent ``E`` is given by ``scale_rule``:

    ``"floor"``: ``E = floor(log2 amax) - emax_elem``
        OCP MX v1.0 section 6.3 and microxcaling's default.
    ``"rceil"``: ``E = ceil(log2(fl32(amax * fl32(1 / elem_max))))``, exactly
        Transformer Engine ``MXFP8BlockScaling`` (``float_to_e8m0`` of the
        amax times the reciprocal).  The rule of NVIDIA's MXFP8 pre-training
        recipe (arXiv 2506.08027: ``amax / destmax`` rounded up to a power of
        two), with the quotient in float32 as cuBLAS's UE8M0 conversion
        (``cvt.rp.satfinite.ue8m0x2.f32``) and torchao ``RCEIL`` compiled for
        sm_100 take it, gives the same code for every float32 amax (the two
        can only part within a few ulps of ``elem_max * 2**k``; every such
        amax is checked), so it has no name of its own.  torchao's eager
        ``RCEIL`` differs (it rounds ``log2`` to float32 first):
        ``variant="torchao"``.
    ``"ceil"``: ``E = ceil(log2 amax) - emax_elem``
        torchao ``CEIL``; *not* the papers' "ceil".
    ``"even"``: the floor rule on amax first rounded to the element's mantissa
        width (half an element ulp added to its float32 bits); torchao ``EVEN``.
    ``"nki"``: ``E = floor(log2 amax) - emax_elem + 1``
        AWS Trainium3 ``nki.isa.quantize_mx`` (MXFP8 only): "a block scale two
        times larger" than the OCP rule, as the Neuron documentation (v2.32)
        states it; modelled from that text, not measured.

    The papers' "ceil" is ``rceil``: the smallest power of two with
    ``amax / 2**E <= elem_max``, so nothing saturates.  ``ceil``
    rounds ``log2 amax`` up *before* subtracting ``emax_elem`` and can lose
    up to one binade (on N(0,1) data in blocks of 32, MXFP4 gives 16.82 dB
    SNR with ``ceil`` and 18.75 dB with ``rceil``).

    ``E`` is clamped to [-127, 127]; the scale code is ``E + 127`` and
    ``scale_inv = 2**E``.  Elements are ``cast(fl32(x * 2**-E))`` with
    ``rounding`` and saturation to +-max (the spec's clamping).

    Edge cases: an all-zero block gets ``E = -127`` (code 0) and zero
    elements; a subnormal amax clamps to ``E = -127``; a block holding Inf or
    NaN gets the NaN scale code 0xFF (``scale_inv`` NaN: the whole block
    dequantizes to NaN), its finite elements are cast with multiplier 1.
    Transformer Engine's kernel differs for blocks whose amax is below
    ``2**-127 * elem_max`` (it multiplies by 1 instead of ``2**127``) and for
    Inf (code 0xFE); those are not reproduced.  Partial blocks are padded
    with zeros.

    On blocks of finite values the default variant's ``floor``, ``ceil`` and
    ``even`` scale codes are torchao's, and so are the elements wherever the
    code is not 0; its ``rceil`` is Transformer Engine's, not torchao's.
    ``variant="torchao"`` is torchao's ``to_mx`` (eager, CPU) bit for bit,
    proven on torchao :data:`fp8emu.scaling.torchao_variants.TORCHAO_PROVEN` with the
    four ``scale_rule`` of its ``ScaleCalculationMode`` and ``rounding="rne"``:

    * FLOOR/CEIL/EVEN take ``E`` from the float32 exponent field of amax
      (Inf and NaN included: an Inf block gets code ``255 - emax_elem``, i.e.
      247 for E4M3, 240 for E5M2, 253 for E2M3/E2M1, 251 for E3M2), clamp it
      to [-127, 128], give NaN blocks code 255, and *divide* by the code's
      power of two clamped below at ``2**-126`` (code 0 divides by
      ``2**-126``, not ``2**-127``; code 255 divides by Inf: finite values
      become 0);
    * RCEIL: ``E = ceil(log2_f32(fl32(amax / elem_max)))`` with ``log2``
      rounded to float32 (torch.log2), so an amax just above ``elem_max *
      2**k`` gets ``k`` instead of ``k + 1``; Inf blocks get code 254 and
      multiplier ``2**-127``, NaN blocks 255 and NaN elements, code 0
      multiplier 1 (tiny elements, so zeros);
    * FP8 elements: clamp to +-max, torch's RNE cast (NaN to 0x7F/0xFF).
      FP6/FP4: torchao's own cast (RNE, saturating, Inf to +-max) where NaN,
      which these formats lack, becomes a number: FP4 0x3 / -NaN 0xB
      (1.5 / -1.5), E2M3 0x0C, E3M2 0x0E.

    MXINT8 (``elem_format="int8"``): OCP MX v1.0 INT8 elements are
    two's-complement integers ``k`` with an implicit ``2**-6`` (values
    ``k / 64``).  fp8emu holds them as codes of the sign-magnitude format
    :data:`MXINT8` (E1M6, bias 1: exactly the values ``k / 64``,
    ``|k| <= 127``, symmetric as microxcaling clamps them);
    :func:`fp8emu.layouts.int8_from_mxint8` gives the two's-complement bytes.

    Parameters
    ----------
    x : array_like
    elem_format : {"e4m3fn", "e5m2", "e2m3fn", "e3m2fn", "e2m1fn", "int8"}
    block : int or tuple of int, keyword-only
        Elements per scale along ``axis`` (32 in the spec), or a 2-D block
        shape such as ``(32, 32)`` over the last two dimensions.
    axis : int, keyword-only
    scale_rule : {"floor", "ceil", "even", "rceil", "nki"}, keyword-only
    rounding : str, keyword-only
        Element rounding (any :data:`fp8emu.ROUNDING_MODES` entry).  ``"rne"``
        as the spec and Transformer Engine; microxcaling's default
        ``round="nearest"`` is round-half-away, ``"rna"``.
    rng : numpy.random.Generator or int, optional, keyword-only
        Randomness for stochastic rounding modes.
    variant : {"ocp", "torchao"}, keyword-only
        Edge-block behaviour and float32 steps: the spec's (default) or
        torchao's ``to_mx`` (see above).

    Returns
    -------
    ScaledTensor
        With ``scale_codes`` (uint8 E8M0), ``scale = 2**-E``,
        ``scale_inv = 2**E`` (``variant="torchao"``: ``scale`` is the
        multiplier torchao applied, ``scale_inv`` what its dequantization
        multiplies by, ``2**(code - 127)``, NaN for code 255).

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
    >>> fp8emu.quantize_mx(np.array([400.0]), "e4m3fn", rounding="rna").dequantize().tolist()
    [416.0]
    >>> big = np.array([np.inf, 1.0])
    >>> [int(fp8emu.quantize_mx(big, "e4m3fn", variant=v).scale_codes[0]) for v in MX_VARIANTS]
    [255, 247]
    >>> [int(fp8emu.quantize_mx(np.array([450.0]), "e4m3fn", scale_rule=r).scale_codes[0]) for r in ("floor", "nki")]
    [127, 128]
    """
    fmt = _mx_format(elem_format)
    if not isinstance(scale_rule, str) or scale_rule not in MX_ALL_SCALE_RULES:
        raise ValueError(f"unknown scale_rule {scale_rule!r}; accepted: "
                         + ", ".join(MX_ALL_SCALE_RULES))
    if not isinstance(variant, str) or variant not in MX_VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; accepted: " + ", ".join(MX_VARIANTS))
    if scale_rule == "nki" and fmt.name not in ("e4m3fn", "e5m2"):
        raise ValueError(f"scale_rule='nki' (nki.isa.quantize_mx) quantizes to MXFP8 only: elem_format "
                         f"e4m3fn or e5m2, got {fmt.name}")
    check_rounding(rounding)
    fmt, xf = prepare(x, fmt, "quantize_mx")
    if isinstance(block, (tuple, list)):
        blk = block_arg(tuple(block), xf.ndim)
        ax = axis_arg(axis, xf.ndim)
    else:
        block = int_arg(block, "block", minimum=1)
        ax, blk = axis_block(xf.ndim, axis, block)
    if variant == "torchao":
        return _quantize_mx_torchao(xf, fmt, blk, ax, scale_rule, rounding, rng)

    amax, nonfinite = block_amax_finite(xf, blk)
    pos = amax > 0
    e = _mx_exponent(np.where(pos, amax, F32(1)), fmt, scale_rule)
    e = np.clip(np.where(pos, e, -127), -127, 127)
    codes_scale = np.where(nonfinite, 255, e + 127).astype(np.uint8)
    mult = np.where(nonfinite, F32(1), _pow2_f32(-e))
    inv = np.where(nonfinite, F32(np.nan), _pow2_f32(e))
    options = {"rounding": rounding}
    if rng is not None:
        options["rng"] = rng
    codes = scaled_cast(xf, mult, blk, fmt, **options)
    return ScaledTensor(codes=codes, fmt=fmt, scale=mult, scale_inv=inv, block=blk, axis=ax,
                        shape=xf.shape, scale_codes=codes_scale, recipe=f"mx-{scale_rule}")


def _quantize_mx_torchao(xf, fmt, blk, ax, scale_rule, rounding, rng) -> ScaledTensor:
    """torchao ``to_mx`` (see :func:`quantize_mx`, ``variant="torchao"``)."""
    if scale_rule not in MX_SCALE_RULES:
        raise ValueError(f"variant='torchao' has the scale rules of torchao's ScaleCalculationMode: "
                         f"{', '.join(MX_SCALE_RULES)}; got {scale_rule!r}")
    if fmt == MXINT8:
        raise ValueError("variant='torchao': torchao has no MXINT8; elem_format must be one of "
                         + ", ".join(MX_ELEMENT_FORMATS))
    if rounding != "rne" or rng is not None:
        raise ValueError(f"variant='torchao' rounds to nearest even: rounding must be 'rne' and rng None, "
                         f"got rounding={rounding!r}")
    amax = block_amax(xf, blk)                                 # NaN ignored, Inf kept
    with np.errstate(invalid="ignore"):
        has_nan = block_amax(np.isnan(xf).astype(F32), blk) > 0
    codes_scale, mult = torchao.mx_scales(amax, has_nan, fmt, scale_rule)
    full = expand(mult, blk, xf.shape)
    y = scale_times(xf, full)
    if scale_rule == "rceil":
        # a NaN block's multiplier is its NaN descale, and torch's product keeps that NaN (a -NaN element
        # becomes +NaN); FLOOR/CEIL/EVEN divide by +Inf instead, which keeps each element's own sign
        y = np.where(np.isnan(full), full, y)
    codes = torchao.element_cast(y, fmt)
    nan = codes_scale == 255
    inv = np.where(nan, F32(np.nan), _pow2_f32(np.where(nan, 0, codes_scale.astype(np.int32) - 127)))
    return ScaledTensor(codes=codes, fmt=fmt, scale=mult, scale_inv=inv, block=blk, axis=ax,
                        shape=xf.shape, scale_codes=codes_scale, recipe=f"mx-{scale_rule}-torchao")


#: MXINT8 elements (OCP MX v1.0 INT8, values ``k/64`` with ``|k| <= 127``) as a sign-magnitude Format.
MXINT8 = Format("mxint8", ebits=1, mbits=6, bias=1,
                description="OCP MX INT8 element (k/64, |k|<=127) held sign-magnitude")


def _mx_format(elem_format) -> Format:
    if isinstance(elem_format, str) and elem_format in ("int8", "mxint8"):
        return MXINT8
    if isinstance(elem_format, Format) and elem_format == MXINT8:
        return MXINT8
    fmt = as_format(elem_format)
    if fmt.name not in MX_ELEMENT_FORMATS:
        raise ValueError(f"unsupported MX element format {fmt.name!r}; accepted: "
                         + ", ".join(MX_ELEMENT_FORMATS + ("int8",)))
    return fmt


def mx_from_codes(codes, scale_codes, elem_format, *, axis=-1, block=32) -> ScaledTensor:
    """Rebuild an MX :class:`ScaledTensor` from element codes and E8M0 scale codes.

    The inverse of taking ``t.codes`` and ``t.scale_codes`` from
    :func:`quantize_mx`: ``scale_inv = 2**(code - 127)`` (NaN for code 0xFF),
    ``scale = 2**(127 - code)``.  Use it to feed fp8emu the buffers a kernel
    received (see :mod:`fp8emu.layouts` for packed and swizzled buffers).

    Parameters
    ----------
    codes : array of unsigned integers
        Element codes below ``2**bits`` of the format, any shape (any
        unsigned dtype; signed or float arrays are a TypeError, never wrapped).
    scale_codes : array of unsigned integers
        E8M0 codes, one per block: the shape of ``codes`` with ``ceil(n / block)``
        along ``axis``.
    elem_format : str or Format
        One of :data:`MX_ELEMENT_FORMATS` or ``"int8"`` (MXINT8).
    axis : int, keyword-only
        Axis along which the blocks run.
    block : int, keyword-only
        Elements per scale (32 in OCP MX v1.0).

    Returns
    -------
    ScaledTensor
        As :func:`quantize_mx` returns it (``scale_codes`` are the given E8M0 codes).

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> t = fp8emu.quantize_mx(np.array([[3.0, -40.0]]), "e4m3fn")
    >>> u = mx_from_codes(t.codes, t.scale_codes, "e4m3fn")
    >>> u.dequantize().tolist()
    [[3.0, -40.0]]
    """
    fmt = _mx_format(elem_format)
    codes = code_array(codes, 1 << fmt.bits, "codes", held=f"{fmt.bits}-bit {fmt.name} codes")
    scale_codes = code_array(scale_codes, 256, "scale_codes", held="E8M0 codes")
    if codes.ndim == 0:
        raise ValueError("codes need at least one dimension")
    block = int_arg(block, "block", minimum=1)
    ax, blk = axis_block(codes.ndim, axis, block)
    expected = tuple(-(-s // b) for s, b in zip(codes.shape, blk))
    if scale_codes.shape != expected:
        raise ValueError(f"scale_codes have shape {scale_codes.shape}, expected {expected} "
                         f"for codes of shape {codes.shape} with blocks of {block} along axis {ax}")
    e = scale_codes.astype(np.int64) - 127
    nan = scale_codes == 255
    e = np.where(nan, 0, e)
    inv = np.where(nan, F32(np.nan), _pow2_f32(e))
    mult = np.where(nan, F32(1), _pow2_f32(-e))
    return ScaledTensor(codes=codes.copy(), fmt=fmt, scale=mult, scale_inv=inv, block=blk, axis=ax,
                        shape=codes.shape, scale_codes=scale_codes.copy(), recipe="mx-codes")

