"""NVFP4 (Transformer Engine): E2M1 elements, an E4M3 scale per 16 elements, a float32 tensor scale."""

from __future__ import annotations

import numpy as np

from ..codec import decode, encode
from ..formats import get_format
from . import torchao_variants as torchao
from .hadamard import rht
from .tensor import F32, FLT_MAX, ScaledTensor, amax_nan_ignoring, code_array, axis_block, block_amax, blocked_view, \
    expand, pad_to_blocks, prepare, reciprocal, scale_times, scaled_cast

__all__ = ["quantize_nvfp4", "nvfp4_from_codes", "NVFP4_BLOCK", "NVFP4_VARIANTS"]

#: Elements per E4M3 block scale.
NVFP4_BLOCK = 16

#: Float32 steps of :func:`quantize_nvfp4`: Transformer Engine's and torchao's.
NVFP4_VARIANTS = ("te", "torchao")


def quantize_nvfp4(x, *, axis=-1, rounding="rne", rng=None, global_amax=None,
                   fp4_2d_quantization=False, stochastic_rounding=False,
                   random_hadamard_transform=False, four_over_six=False, scale_max=448.0,
                   headroom=1.0, variant="te", single_level=False) -> ScaledTensor:
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

    Parameters
    ----------
    x : array_like
    axis : int, keyword-only
        Axis along which the 16-element blocks run.
    rounding : {"rne", "stochastic"}, keyword-only
    rng : numpy.random.Generator or int, optional, keyword-only
        Randomness for stochastic rounding.
    global_amax : float, optional, keyword-only
        Per-tensor amax to use (default: ``max|x|``, after the transform).
    fp4_2d_quantization, stochastic_rounding, random_hadamard_transform, four_over_six : bool
    scale_max : {448.0, 256.0}
    headroom : float >= 1
    variant : {"te", "torchao"}, keyword-only
        Transformer Engine's float32 steps (default) or torchao's.
    single_level : bool, keyword-only
        ``variant="torchao"`` only: torchao's mode without a tensor scale.

    Returns
    -------
    ScaledTensor
        ``fmt`` e2m1fn, ``block_scale_codes`` (e4m3fn codes),
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
    """
    if _variant_arg(variant, single_level) == "torchao":
        return _quantize_nvfp4_torchao(x, axis, rounding, rng, global_amax, single_level, {
            "fp4_2d_quantization": fp4_2d_quantization, "stochastic_rounding": stochastic_rounding,
            "random_hadamard_transform": random_hadamard_transform, "four_over_six": four_over_six,
            "scale_max": scale_max != 448, "headroom": headroom != 1})
    for name, flag in (("fp4_2d_quantization", fp4_2d_quantization), ("stochastic_rounding", stochastic_rounding),
                       ("random_hadamard_transform", random_hadamard_transform), ("four_over_six", four_over_six)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{name} must be a bool, got {flag!r}")
    if stochastic_rounding:
        if rounding not in ("rne", "stochastic"):
            raise ValueError("stochastic_rounding=True conflicts with rounding=" + repr(rounding))
        rounding = "stochastic"
    if rounding not in ("rne", "stochastic"):
        raise ValueError(f"unknown rounding {rounding!r} for NVFP4; accepted: 'rne', 'stochastic'")
    if rounding != "stochastic" and rng is not None:
        raise ValueError("rng applies only to rounding='stochastic'")
    if isinstance(scale_max, bool) or scale_max not in (448, 256):
        raise ValueError(f"scale_max must be 448 or 256, got {scale_max!r}")
    if isinstance(headroom, bool) or not isinstance(headroom, (int, float, np.floating)) \
            or not np.isfinite(headroom) or headroom < 1:
        raise ValueError(f"headroom must be a finite number >= 1, got {headroom!r}")
    fmt = get_format("e2m1fn")
    e4m3 = get_format("e4m3fn")
    fmt, xf = prepare(x, fmt, "quantize_nvfp4")
    ax, blk = axis_block(xf.ndim, axis, NVFP4_BLOCK)
    if fp4_2d_quantization:
        if xf.ndim < 2:
            raise ValueError("fp4_2d_quantization needs an array with at least two dimensions")
        blk = (1,) * (xf.ndim - 2) + (NVFP4_BLOCK, NVFP4_BLOCK)
    if random_hadamard_transform:
        xf = rht(xf, axis=ax)

    if global_amax is None:
        gamax = F32(amax_nan_ignoring(xf, None))
    else:
        gamax = _global_amax_arg(global_amax)
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
        bcodes = encode(s_dec, e4m3, saturate=True)
        s_dec_q = decode(bcodes, e4m3, dtype=np.float32)
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
        + ("-4over6" if four_over_six else "")
    t = ScaledTensor(codes=codes, fmt=fmt, scale=scale, scale_inv=inv, block=blk, axis=ax,
                     shape=xf.shape, block_scale_codes=bcodes, global_scale=s_enc, recipe=recipe,
                     global_amax=gamax, scale_max=F32(scale_max))
    return t


def _variant_arg(variant, single_level) -> str:
    if not isinstance(variant, str) or variant not in NVFP4_VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; accepted: " + ", ".join(NVFP4_VARIANTS))
    if not isinstance(single_level, (bool, np.bool_)):
        raise TypeError(f"single_level must be a bool, got {single_level!r}")
    if single_level and variant != "torchao":
        raise ValueError("single_level=True is torchao's mode: use it with variant='torchao'")
    return variant


def _global_amax_arg(global_amax):
    g = np.asarray(global_amax)
    if g.shape != () or g.dtype.kind not in "iuf":
        raise TypeError(f"global_amax must be a real scalar, got {global_amax!r}")
    gamax = F32(g)
    if np.isnan(gamax) or gamax < 0:
        raise ValueError(f"global_amax must be >= 0 and not NaN, got {global_amax!r}")
    return gamax


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
            gamax = _global_amax_arg(global_amax)
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


def _block_sq_error(xf, codes, inv, blk, fmt):
    """Per-block sum of squared errors (float64) of the dequantized values; non-finite x ignored."""
    deq = decode(codes, fmt, dtype=np.float64) * expand(inv.astype(np.float64), blk, xf.shape)
    err = np.where(np.isfinite(xf), (xf.astype(np.float64) - deq) ** 2, 0.0)
    view, axes = blocked_view(pad_to_blocks(err, blk), blk)
    return view.sum(axis=axes)


def nvfp4_from_codes(codes, block_scale_codes, global_scale, *, axis=-1, global_amax=None,
                     scale_max=448.0) -> ScaledTensor:
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
        elements along ``axis``.
    global_scale : float
        The per-tensor encode multiplier ``S_enc`` (float32, > 0).
    axis : int, keyword-only
    global_amax : float, optional, keyword-only
        The tensor amax, if known (a block-scaled GEMM then forms its alpha as
        Transformer Engine does).
    scale_max : {448.0, 256.0}, keyword-only
        The block-scale target ``S_enc`` was made for (see :func:`quantize_nvfp4`).

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
    bcodes = code_array(block_scale_codes, 0x80, "block_scale_codes",
                        held="UE4M3 block scales are positive: sign bit 0")
    if codes.ndim == 0:
        raise ValueError("codes need at least one dimension")
    ax, blk = axis_block(codes.ndim, axis, NVFP4_BLOCK)
    expected = tuple(-(-s // b) for s, b in zip(codes.shape, blk))
    if bcodes.shape != expected:
        raise ValueError(f"block_scale_codes have shape {bcodes.shape}, expected {expected}")
    s_enc = F32(global_scale)
    if not np.isfinite(s_enc) or s_enc <= 0:
        raise ValueError(f"global_scale must be finite and > 0, got {global_scale!r}")
    if isinstance(scale_max, bool) or scale_max not in (448, 256):
        raise ValueError(f"scale_max must be 448 or 256, got {scale_max!r}")
    s_dec_q = decode(bcodes, get_format("e4m3fn"), dtype=np.float32)
    inv = np.multiply(s_dec_q, F32(F32(1) / s_enc), dtype=np.float32)
    scale = np.fmin(reciprocal(inv), FLT_MAX).astype(np.float32)
    t = ScaledTensor(codes=codes.copy(), fmt=get_format("e2m1fn"), scale=scale, scale_inv=inv,
                     block=blk, axis=ax, shape=codes.shape, block_scale_codes=bcodes.copy(),
                     global_scale=s_enc, recipe="nvfp4-codes",
                     global_amax=None if global_amax is None else F32(global_amax), scale_max=F32(scale_max))
    return t
