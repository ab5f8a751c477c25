"""NVFP4 (Transformer Engine): E2M1 elements, an E4M3 scale per 16 elements, a float32 tensor scale."""

from __future__ import annotations

import numpy as np

from ..codec import decode, encode
from ..formats import get_format
from ..interop import real_values, is_integer
from . import torchao_variants as torchao
from .hadamard import rht
from .ms_eden import ms_eden_nvfp4
from .tensor import F32, FLT_MAX, ScaledTensor, amax_nan_ignoring, code_array, axis_block, block_amax, blocked_view, \
    expand, given_amax_f32, pad_to_blocks, prepare, reciprocal, scale_times, scaled_cast

__all__ = ["quantize_nvfp4", "nvfp4_from_codes", "NVFP4_BLOCK", "NVFP4_VARIANTS", "FP4_SCALE_FORMATS"]

#: Elements per E4M3 block scale.
NVFP4_BLOCK = 16
#: Block-scale types of FP4 block scaling, with the block-scale targets (``scale_max``) each accepts:
#: UE4M3 (NVFP4, Blackwell; 448, or 256 for Four Over Six) and UE5M3 (NVIDIA Rubin's FP4 block-scaled
#: MMA, PTX ISA 13.4 / cuTile ``float8_e5m3fnu``: its max 114688, or 65536 so that 1.5x still fits).
FP4_SCALE_FORMATS = {"e4m3fn": (448.0, 256.0), "e5m3fnu": (114688.0, 65536.0)}
#: Elements per block scale that FP4 block scaling takes (Rubin kernels: UE5M3 x 16 and x 32, UE4M3 x 32).
FP4_BLOCK_SIZES = (16, 32)


def _scale_options(scale_format, scale_max, block_size):
    """The checked (scale Format, scale_max, block size) of an FP4 block-scaled quantizer."""
    if not isinstance(scale_format, str) or scale_format not in FP4_SCALE_FORMATS:
        raise ValueError(f"scale_format must be one of {', '.join(map(repr, FP4_SCALE_FORMATS))} "
                         f"(UE4M3, UE5M3), got {scale_format!r}")
    accepted = FP4_SCALE_FORMATS[scale_format]
    if scale_max is None:
        scale_max = accepted[0]
    if isinstance(scale_max, bool) or not isinstance(scale_max, (int, float, np.integer, np.floating)) \
            or scale_max not in accepted:
        raise ValueError(f"scale_max must be {' or '.join(f'{v:g}' for v in accepted)} for "
                         f"{scale_format} block scales, got {scale_max!r}")
    if not is_integer(block_size) \
            or block_size not in FP4_BLOCK_SIZES:
        raise ValueError(f"block_size must be one of {FP4_BLOCK_SIZES}, got {block_size!r}")
    return get_format(scale_format), float(scale_max), int(block_size)


def _scale_fields(sfmt, bcodes):
    """ScaledTensor fields holding the block-scale codes: UE4M3 where block_scale_codes holds them."""
    if sfmt.name == "e4m3fn":
        return {"block_scale_codes": bcodes}
    return {"scale_format": sfmt, "scale_format_codes": bcodes}

#: Float32 steps of :func:`quantize_nvfp4`: Transformer Engine's and torchao's.
NVFP4_VARIANTS = ("te", "torchao")


def quantize_nvfp4(x, *, axis=-1, rounding="rne", rng=None, global_amax=None,
                   fp4_2d_quantization=False, stochastic_rounding=False,
                   random_hadamard_transform=False, four_over_six=False, scale_max=None,
                   headroom=1.0, scale_format="e4m3fn", block_size=NVFP4_BLOCK,
                   random_bits=None, variant="te", single_level=False) -> ScaledTensor:
    """NVFP4 (Transformer Engine): E2M1 elements, an E4M3 scale per 16, a float32 tensor scale.

    In float32, following Transformer Engine's NVFP4 kernels
    (``compute_global_encode_scaling_factor_FP4``,
    ``compute_decoding_scaling_factor``, ``compute_scaling_coefficient``):

    1. ``S_enc = min(fl32(fl32(scale_max * 6) / global_amax), FLT_MAX)``; 1 if
       ``global_amax`` is 0 or the result is 0 (Inf amax);
    2. per block of 16 along ``axis``: ``s_b = e4m3fn(fl32(block_amax *
       fl32(S_enc * fl32(headroom / 6))))`` (saturating RNE cast);
    3. ``scale_inv = fl32(float(s_b) * fl32(1 / S_enc))`` and
       ``scale = min(fl32(1 / scale_inv), FLT_MAX)`` (so a zero block scale
       gives ``scale = FLT_MAX``);
    4. elements ``e2m1fn(fl32(x * scale))``, saturating, with ``rounding``
       ``"rne"`` or ``"stochastic"`` (uses ``rng``).

    ``dequantize()`` returns ``element * scale_inv``.  The amax ignores NaN
    (CUDA ``fmaxf``); NaN elements become +6 (E2M1 has no NaN, as CUDA's
    ``__nv_cvt_float_to_fp4``) and +-Inf saturate to +-6.  Partial blocks are
    padded with zeros.

    Recipe options, named as Transformer Engine's ``NVFP4Quantizer``
    (``with_2d_quantization``, ``stochastic_rounding``, ``with_rht``) and its
    recipe ``QParams``; NVIDIA's training recipe ("Pretraining LLMs with
    NVFP4", 2025) uses 1x16 RNE for activations, 16x16 blocks for weights and
    stochastic rounding plus the Hadamard transform for the gradients of the
    weight-gradient GEMM:

    * ``fp4_2d_quantization``: one scale per 16x16 tile of the last two
      dimensions (``block = (16, 16)``) instead of 1x16;
    * ``stochastic_rounding``: same as ``rounding="stochastic"``;
    * ``random_hadamard_transform``: first replace ``x`` by
      :func:`fp8emu.scaling.hadamard.rht` along ``axis`` (TE's fixed 16-entry
      sign vector times the 16x16 Hadamard matrix over 4), then quantize the
      transformed values, their amax included (TE computes the global amax
      after the transform).  The transform is rounded once to float32; TE
      rounds it to the input dtype (bfloat16), as
      :func:`fp8emu.scaling.quantize_nvfp4_te` does.  ``dequantize()`` returns transformed values;
      :func:`fp8emu.scaling.hadamard.inverse_rht` undoes it.  A GEMM whose two
      operands are transformed along K gives the untransformed product.

    Variants from recent papers:

    * ``scale_max``: largest E4M3 block scale the tensor scale aims at, 448
      (TE) or 256 (used with "Four Over Six", Cook et al. 2025, so that a
      block scaled to 4 keeps its scale representable);
    * ``four_over_six``: "Four Over Six" adaptive block scaling: each block is
      quantized both with the amax mapped to 6 and to 4 (step 2 with
      ``6`` replaced by ``4``), and the candidate with the smaller squared
      error of the dequantized block (ties: 6) is kept (the paper's MSE
      selection in float64; Transformer Engine's own selection -- MAE by
      default, map-to-4 scale ``base * 1.5``, float32 error sums -- is
      :func:`fp8emu.scaling.quantize_nvfp4_te` with
      ``NVFP4Quantizer(nvfp4_use_4over6=True)``);
    * ``headroom``: scale-override factor >= 1 dividing the element target
      (amax maps to ``6 / headroom``); 1 is TE's recipe.

    ``variant="torchao"`` is torchao's ``nvfp4_quantize`` (eager, CPU) bit for
    bit, proven on torchao :data:`fp8emu.scaling.torchao_variants.TORCHAO_PROVEN`
    (no recipe options; ``rounding="rne"``):

    * two-level (default): ``pts = fl32(global_amax / 2688)``
      (``per_tensor_amax_to_scale``; ``global_amax`` defaults to ``max|x|``
      with NaN propagating, as ``torch.max``); block scale
      ``e4m3(clamp(fl32(fl32(amax / 6) / pts), 2**-6, 448))`` -- clamped to
      E4M3's smallest normal, code 0x08, where TE lets it reach 0 -- and
      elements ``e2m1(clamp(fl32(x * fl32(fl32(1 / pts) / s)), -6, 6))``:
      a division chain where TE multiplies by ``S_enc``, so a code can differ
      by one (``x = 7976608.5`` in a tensor of amax 9710654: torchao 0x7C,
      TE 0x7B as block scale code);
    * ``single_level=True``: no tensor scale (``global_scale`` 1): block
      scale ``e4m3(clamp(fl32(amax / 6), 2**-6, 448))``, elements times
      ``fl32(1 / s)``;
    * NaN: a NaN block gets scale code 0x7F and all its elements NaN; FP4
      has no NaN and torchao's cast turns NaN into a number that depends on
      its bits: +NaN 0x3 and -NaN 0xB (+-1.5) for the default NaN, 0x4 for a
      NaN block scale (widened to 0x7FF00000), 0xC where the tensor scale is
      NaN (a tensor holding NaN: ``torch.max`` gives 0xFFFFFFFF);
    * where a tensor holds NaN or Inf, or is all zeros, torchao's two-level
      block scales are E4M3 -NaN (0xFF, from x86's default NaN of
      ``0/0`` and ``Inf/Inf``); UE4M3 codes here are unsigned, so those
      blocks hold 0x7F (the same NaN without its sign bit);
      ``dequantize()`` is torchao's: ``e2m1 * fl32(pts * s)`` (or ``* s``).

    The block-scale type and block length of NVIDIA Rubin's FP4 block-scaled
    MMA (PTX ISA 13.4; scale modes ``e5m3`` x 16 and x 32, ``e4m3`` x 32):

    * ``scale_format``: ``"e4m3fn"`` (UE4M3, the default) or ``"e5m3fnu"``
      (UE5M3: unsigned, max 114688, down to 2**-17).  Steps 1-3 are the same
      with the scale cast (saturating RNE) into that format and ``scale_max``
      its largest value unless given.  UE5M3 codes are returned in
      ``scale_format_codes`` (``block_scale_codes`` holds UE4M3 only);
    * ``block_size``: 16 (NVFP4) or 32 elements per block scale (16x16 or
      32x32 tiles with ``fp4_2d_quantization``).

    ``rounding="ms-eden"``: MS-EDEN (Quartet II, arXiv 2601.22813), unbiased
    rounding with the randomness on the block scale: elements to nearest, the
    E4M3 scale times the EDEN correction ``<x, x> / <x, q>`` rounded
    stochastically (:mod:`fp8emu.scaling.ms_eden`, the reference kernel's
    algorithm bit for bit given the same 16 random bits per block).  Its tensor
    scale is the kernel's ``amax / 255.99 / (6 / headroom)`` (``headroom`` is
    its ``scale_override``; ``global_scale`` holds ``fl32(1 / t)``,
    ``scale_max`` 255.99); it takes 1x16 E4M3 blocks with no 2-D tiles or
    Four Over Six, the blocked axis a multiple of 128 long and the size a
    multiple of 256.

    Parameters
    ----------
    x : array_like
    axis : int, keyword-only
        Axis along which the 16-element blocks run.
    rounding : {"rne", "stochastic", "ms-eden"}, keyword-only
    rng : numpy.random.Generator or int, optional, keyword-only
        Randomness for stochastic rounding and MS-EDEN.
    random_bits : array of uint16, optional, keyword-only
        MS-EDEN only: the 16 random bits of each block scale (block-scale
        shape), instead of ``rng``.
    global_amax : float, optional, keyword-only
        Per-tensor amax to use (default: ``max|x|``, after the transform).
    fp4_2d_quantization, stochastic_rounding, random_hadamard_transform, four_over_six : bool
    scale_max : {448.0, 256.0} for e4m3fn, {114688.0, 65536.0} for e5m3fnu, optional
        Default: the scale format's max (448, 114688).
    headroom : float >= 1
    scale_format : {"e4m3fn", "e5m3fnu"}
    block_size : {16, 32}
    variant : {"te", "torchao"}, keyword-only
        Transformer Engine's float32 steps (default) or torchao's.
    single_level : bool, keyword-only
        ``variant="torchao"`` only: torchao's mode without a tensor scale.

    Returns
    -------
    ScaledTensor
        ``fmt`` e2m1fn, ``block_scale_codes`` (e4m3fn codes; with
        ``scale_format="e5m3fnu"``: ``scale_format_codes`` instead),
        ``global_scale = S_enc``, ``global_amax``.

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> t = fp8emu.quantize_nvfp4(np.array([6.0, 1.0, -2.0, 0.5]))
    >>> float(t.global_scale), t.block_scale_codes.tolist(), t.dequantize().tolist()
    (448.0, [126], [6.0, 1.0, -2.0, 0.5])
    >>> t = fp8emu.quantize_nvfp4(np.array([4.0, 1.5, 3.0, 0.0]), four_over_six=True, scale_max=256)
    >>> t.dequantize().tolist()
    [4.0, 1.5, 3.0, 0.0]
    >>> x = np.zeros(32); x[0], x[16] = 7976608.5, 9710654.0      # two blocks
    >>> [fp8emu.quantize_nvfp4(x, variant=v).block_scale_codes.tolist() for v in NVFP4_VARIANTS]
    [[123, 126], [124, 126]]
    >>> t = fp8emu.quantize_nvfp4(np.array([6.0, 1.0, -2.0, 0.5]), scale_format="e5m3fnu", block_size=32)
    >>> float(t.global_scale), t.scale_format.name, t.scale_format_codes.tolist(), t.block
    (114688.0, 'e5m3fnu', [254], (32,))
    """
    if _variant_arg(variant, single_level) == "torchao":
        return _quantize_nvfp4_torchao(x, axis, rounding, rng, global_amax, single_level, {
            "fp4_2d_quantization": fp4_2d_quantization, "stochastic_rounding": stochastic_rounding,
            "random_hadamard_transform": random_hadamard_transform, "four_over_six": four_over_six,
            "scale_max": scale_max is not None, "headroom": headroom != 1,
            "scale_format": scale_format != "e4m3fn", "block_size": block_size != NVFP4_BLOCK,
            "random_bits": random_bits is not None})
    for name, flag in (("fp4_2d_quantization", fp4_2d_quantization), ("stochastic_rounding", stochastic_rounding),
                       ("random_hadamard_transform", random_hadamard_transform), ("four_over_six", four_over_six)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{name} must be a bool, got {flag!r}")
    if stochastic_rounding:
        if rounding not in ("rne", "stochastic"):
            raise ValueError("stochastic_rounding=True conflicts with rounding=" + repr(rounding))
        rounding = "stochastic"
    if rounding not in ("rne", "stochastic", "ms-eden"):
        raise ValueError(f"unknown rounding {rounding!r} for NVFP4; accepted: 'rne', 'stochastic', 'ms-eden'")
    if rounding == "rne" and rng is not None:
        raise ValueError("rng applies only to rounding='stochastic' or 'ms-eden'")
    if rounding != "ms-eden" and random_bits is not None:
        raise ValueError("random_bits applies only to rounding='ms-eden'")
    if rounding == "ms-eden":
        return _quantize_ms_eden(x, axis, rng, random_bits, global_amax, random_hadamard_transform, headroom,
                                 bad=[n for n, v in (("fp4_2d_quantization", fp4_2d_quantization),
                                                     ("four_over_six", four_over_six),
                                                     ("scale_max", scale_max is not None),
                                                     ("scale_format", scale_format != "e4m3fn"),
                                                     ("block_size", block_size != NVFP4_BLOCK)) if v])
    sfmt, scale_max, bsize = _scale_options(scale_format, scale_max, block_size)
    _headroom(headroom)
    fmt = get_format("e2m1fn")
    fmt, xf = prepare(x, fmt, "quantize_nvfp4")
    ax, blk = axis_block(xf.ndim, axis, bsize)
    if fp4_2d_quantization:
        if xf.ndim < 2:
            raise ValueError("fp4_2d_quantization needs an array with at least two dimensions")
        blk = (1,) * (xf.ndim - 2) + (bsize, bsize)
    if random_hadamard_transform:
        xf = rht(xf, axis=ax)

    gamax = _global_amax(xf, global_amax)
    with np.errstate(divide="ignore", over="ignore"):
        s_enc = F32(np.fmin(F32(F32(scale_max) * F32(6)) / gamax, FLT_MAX))
    if gamax == 0 or s_enc == 0:
        s_enc = F32(1)

    amax = block_amax(xf, blk)
    options = {"rounding": rounding}
    if rounding == "stochastic":
        options["rng"] = rng

    def candidate(target):
        factor = F32(s_enc * F32(F32(headroom) / F32(target)))
        with np.errstate(over="ignore"):
            s_dec = np.multiply(amax, factor, dtype=np.float32)
        bcodes = encode(s_dec, sfmt, saturate=True)
        s_dec_q = decode(bcodes, sfmt, dtype=np.float32)
        inv = np.multiply(s_dec_q, F32(F32(1) / s_enc), dtype=np.float32)
        scale = np.fmin(reciprocal(inv), FLT_MAX).astype(np.float32)
        codes = scaled_cast(xf, scale, blk, fmt, **options)
        return bcodes, inv, scale, codes

    bcodes, inv, scale, codes = candidate(6)
    if four_over_six:
        b4, inv4, scale4, codes4 = candidate(4)
        err6 = _block_sq_error(xf, codes, inv, blk, fmt)
        err4 = _block_sq_error(xf, codes4, inv4, blk, fmt)
        use4 = err4 < err6
        bcodes, inv, scale = (np.where(use4, b4, bcodes), np.where(use4, inv4, inv),
                              np.where(use4, scale4, scale))
        codes = np.where(expand(use4, blk, xf.shape), codes4, codes)
    recipe = "nvfp4" + ("-2d" if fp4_2d_quantization else "") + ("-rht" if random_hadamard_transform else "") \
        + ("-4over6" if four_over_six else "") + ("" if sfmt.name == "e4m3fn" else "-ue5m3") \
        + ("" if bsize == NVFP4_BLOCK else f"-b{bsize}")
    t = ScaledTensor(codes=codes, fmt=fmt, scale=scale, scale_inv=inv, block=blk, axis=ax,
                     shape=xf.shape, global_scale=s_enc, recipe=recipe,
                     global_amax=gamax, scale_max=F32(scale_max), **_scale_fields(sfmt, bcodes))
    return t


def _variant_arg(variant, single_level) -> str:
    if not isinstance(variant, str) or variant not in NVFP4_VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; accepted: " + ", ".join(NVFP4_VARIANTS))
    if not isinstance(single_level, (bool, np.bool_)):
        raise TypeError(f"single_level must be a bool, got {single_level!r}")
    if single_level and variant != "torchao":
        raise ValueError("single_level=True is torchao's mode: use it with variant='torchao'")
    return variant


def _headroom(headroom):
    if isinstance(headroom, bool) or not isinstance(headroom, (int, float, np.floating)) \
            or not np.isfinite(headroom) or headroom < 1:
        raise ValueError(f"headroom must be a finite number >= 1, got {headroom!r}")


def _global_amax(xf, global_amax):
    """The tensor amax: ``max|x|`` (NaN ignored) or the given scalar, checked, as float32."""
    if global_amax is None:
        return F32(amax_nan_ignoring(xf, None))
    try:     # the one rule for real numbers handed in: a Python int past int64 (2**64) was "not a real scalar"
        g = real_values(global_amax, "global_amax", "a real scalar")
    except TypeError:
        g = None
    if g is None or g.shape != ():
        raise TypeError(f"global_amax must be a real scalar, got {global_amax!r}")
    return F32(given_amax_f32(g, global_amax))


def _quantize_nvfp4_torchao(x, axis, rounding, rng, global_amax, single_level, te_options) -> ScaledTensor:
    """torchao ``nvfp4_quantize`` (see :func:`quantize_nvfp4`, ``variant="torchao"``)."""
    used = [name for name, on in te_options.items() if on]
    if used:
        raise ValueError(f"variant='torchao' has none of Transformer Engine's recipe options; got {', '.join(used)}")
    if rounding != "rne" or rng is not None:
        raise ValueError(f"variant='torchao' rounds to nearest even: rounding must be 'rne' and rng None, "
                         f"got rounding={rounding!r}")
    if single_level and global_amax is not None:
        raise ValueError("single_level=True has no tensor scale: global_amax must be None")
    fmt, xf = prepare(x, get_format("e2m1fn"), "quantize_nvfp4")
    ax, blk = axis_block(xf.ndim, axis, NVFP4_BLOCK)
    amax = block_amax(xf, blk)                                         # NaN ignored, then restored below
    with np.errstate(invalid="ignore"):
        has_nan = block_amax(np.isnan(xf).astype(F32), blk) > 0
    amax = np.where(has_nan, F32(np.nan), amax).astype(F32)
    if single_level:
        pts, gamax, s_enc = None, None, F32(1)
    else:
        if global_amax is None:
            # torch.max over the whole tensor returns its NaN as 0xFFFFFFFF
            gamax = torchao.nan_bits(0xFFFFFFFF) if has_nan.any() else F32(np.max(amax))
        else:
            gamax = _global_amax(xf, global_amax)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            pts = F32(gamax / F32(2688))
            s_enc = F32(F32(1) / pts)
    bcodes, mult, inv = torchao.nvfp4_chain(amax, pts)
    full = expand(mult, blk, xf.shape)
    y = scale_times(xf, full)
    # a NaN multiplier (NaN block or tensor scale) makes every element of the block +NaN, as torch's product does
    y = np.where(np.isnan(full), full, y)
    with np.errstate(invalid="ignore"):
        codes = torchao.subbyte_cast(np.clip(y, F32(-6), F32(6)), fmt)
    return ScaledTensor(codes=codes, fmt=fmt, scale=mult, scale_inv=inv, block=blk, axis=ax, shape=xf.shape,
                        block_scale_codes=bcodes, global_scale=s_enc,
                        recipe="nvfp4-torchao" + ("-single" if single_level else ""),
                        global_amax=gamax, scale_max=F32(448))


def _quantize_ms_eden(x, axis, rng, random_bits, global_amax, transform, headroom, bad):
    """``quantize_nvfp4(..., rounding="ms-eden")``: checks, then :func:`ms_eden_nvfp4` along ``axis``."""
    if bad:
        raise ValueError(f"rounding='ms-eden' takes 1x16 E4M3 blocks with its own tensor scale; "
                         f"drop {', '.join(bad)}")
    _headroom(headroom)
    fmt, xf = prepare(x, get_format("e2m1fn"), "quantize_nvfp4")
    ax, blk = axis_block(xf.ndim, axis, NVFP4_BLOCK)
    if transform:
        xf = rht(xf, axis=ax)
    n = xf.shape[ax]
    if n % 128 or xf.size % 256:
        raise ValueError(f"rounding='ms-eden' needs the blocked axis a multiple of 128 long and the size a "
                         f"multiple of 256 (the reference kernel's warps), got shape {xf.shape}")
    gamax = _global_amax(xf, global_amax)
    moved = np.ascontiguousarray(np.moveaxis(xf, ax, -1), dtype=F32)
    nshape = moved.shape[:-1] + (n // NVFP4_BLOCK,)
    if random_bits is not None and rng is not None:
        raise ValueError("pass either rng or random_bits, not both")
    if random_bits is not None:
        noise = np.asarray(random_bits)
        want = tuple(np.moveaxis(np.empty(nshape, np.uint8), -1, ax).shape)
        if noise.dtype != np.uint16 or noise.shape != want:
            raise ValueError(f"random_bits must be uint16 of the block-scale shape {want}, got "
                             f"{noise.dtype} {noise.shape}")
        noise = np.moveaxis(noise, ax, -1)
    else:
        if rng is None:
            raise ValueError("rounding='ms-eden' needs rng (Generator or int seed) or random_bits")
        gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        noise = gen.integers(0, 1 << 16, size=nshape, dtype=np.uint16)
    codes, _, scodes, t = ms_eden_nvfp4(moved, gamax, float(headroom), noise)
    codes, scodes = np.moveaxis(codes, -1, ax), np.moveaxis(scodes, -1, ax)
    inv = np.multiply(decode(scodes, get_format("e4m3fn"), dtype=F32), t, dtype=F32)
    scale = np.fmin(reciprocal(inv), FLT_MAX).astype(F32)
    return ScaledTensor(codes=np.ascontiguousarray(codes), fmt=fmt, scale=scale, scale_inv=inv, block=blk,
                        axis=ax, shape=xf.shape, global_scale=F32(F32(1) / t), recipe="nvfp4-ms-eden"
                        + ("-rht" if transform else ""), global_amax=gamax, scale_max=F32(255.99),
                        block_scale_codes=np.ascontiguousarray(scodes))


def _block_sq_error(xf, codes, inv, blk, fmt):
    """Per-block sum of squared errors (float64) of the dequantized values; non-finite x ignored."""
    deq = decode(codes, fmt, dtype=np.float64) * expand(inv.astype(np.float64), blk, xf.shape)
    err = np.where(np.isfinite(xf), (xf.astype(np.float64) - deq) ** 2, 0.0)
    view, axes = blocked_view(pad_to_blocks(err, blk), blk)
    return view.sum(axis=axes)


def nvfp4_from_codes(codes, block_scale_codes, global_scale, *, axis=-1, global_amax=None,
                     scale_max=None, scale_format="e4m3fn", block_size=NVFP4_BLOCK) -> ScaledTensor:
    """Rebuild an NVFP4 :class:`ScaledTensor` from E2M1 codes, E4M3 block-scale codes and ``S_enc``.

    ``scale_inv = fl32(e4m3(block code) * fl32(1 / S_enc))`` and
    ``scale = min(fl32(1 / scale_inv), FLT_MAX)``, as :func:`quantize_nvfp4`.

    Parameters
    ----------
    codes : array of unsigned integers
        E2M1 codes (one per element, below 16); any unsigned dtype, a
        signed or float array is a TypeError (never wrapped).
    block_scale_codes : array of unsigned integers
        UE4M3 codes (e4m3fn with the sign bit 0, so below 0x80), one per 16
        elements along ``axis`` (UE5M3 codes, below 0x100, with
        ``scale_format="e5m3fnu"``; one per ``block_size``).
    global_scale : float
        The per-tensor encode multiplier ``S_enc`` (float32, > 0).
    axis : int, keyword-only
    global_amax : float, optional, keyword-only
        The tensor amax, if known (a block-scaled GEMM then forms its alpha as
        Transformer Engine does).
    scale_max : float, optional, keyword-only
        The block-scale target ``S_enc`` was made for (see :func:`quantize_nvfp4`).
    scale_format : {"e4m3fn", "e5m3fnu"}, keyword-only
    block_size : {16, 32}, keyword-only

    Returns
    -------
    ScaledTensor
        As :func:`quantize_nvfp4` returns it.

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> t = fp8emu.quantize_nvfp4(np.array([[6.0, 1.0, -2.0, 0.5]]))
    >>> nvfp4_from_codes(t.codes, t.block_scale_codes, t.global_scale).dequantize().tolist()
    [[6.0, 1.0, -2.0, 0.5]]
    """
    codes = code_array(codes, 16, "E2M1 codes", held="one code per element; unpack packed bytes with "
                       "fp8emu.layouts.unpack_fp4")
    sfmt, scale_max, bsize = _scale_options(scale_format, scale_max, block_size)
    if sfmt.name == "e4m3fn":
        bcodes = code_array(block_scale_codes, 0x80, "block_scale_codes",
                            held="UE4M3 block scales are positive: sign bit 0")
    else:
        bcodes = code_array(block_scale_codes, 1 << sfmt.bits, "block_scale_codes")
    if codes.ndim == 0:
        raise ValueError("codes need at least one dimension")
    ax, blk = axis_block(codes.ndim, axis, bsize)
    expected = tuple(-(-s // b) for s, b in zip(codes.shape, blk))
    if bcodes.shape != expected:
        raise ValueError(f"block_scale_codes have shape {bcodes.shape}, expected {expected}")
    g = real_values(global_scale, "global_scale", "one positive number (S_enc)")
    if g.size != 1:
        raise ValueError(f"global_scale must be one number (the tensor's S_enc), got shape {g.shape}")
    with np.errstate(over="ignore"):
        s_enc = F32(g.reshape(()))
    if not np.isfinite(s_enc) or s_enc <= 0:
        raise ValueError(f"global_scale must be finite and > 0 in float32 (the type it is used in), "
                         f"got {g.reshape(()).item()!r}")
    s_dec_q = decode(bcodes, sfmt, dtype=np.float32)
    inv = np.multiply(s_dec_q, F32(F32(1) / s_enc), dtype=np.float32)
    scale = np.fmin(reciprocal(inv), FLT_MAX).astype(np.float32)
    t = ScaledTensor(codes=codes.copy(), fmt=get_format("e2m1fn"), scale=scale, scale_inv=inv,
                     block=blk, axis=ax, shape=codes.shape, global_scale=s_enc, recipe="nvfp4-codes",
                     global_amax=None if global_amax is None else F32(global_amax), scale_max=F32(scale_max),
                     **_scale_fields(sfmt, bcodes.copy()))
    return t
