"""NVFP4 (Transformer Engine): E2M1 elements, an E4M3 scale per 16 elements, a float32 tensor scale."""

from __future__ import annotations

import numpy as np

from ..codec import decode, encode
from ..formats import get_format
from .tensor import F32, FLT_MAX, ScaledTensor, amax_nan_ignoring, axis_block, block_amax, prepare, \
    reciprocal, scaled_cast

__all__ = ["quantize_nvfp4", "NVFP4_BLOCK"]

#: Elements per E4M3 block scale.
NVFP4_BLOCK = 16


def quantize_nvfp4(x, *, axis=-1, rounding="rne", rng=None, global_amax=None) -> ScaledTensor:
    """NVFP4 (Transformer Engine): E2M1 elements, an E4M3 scale per 16, a float32 tensor scale.

    In float32, following Transformer Engine's NVFP4 kernels
    (``compute_global_encode_scaling_factor_FP4``,
    ``compute_decoding_scaling_factor``, ``compute_scaling_coefficient``):

    1. ``S_enc = min(fl32(fl32(448 * 6) / global_amax), FLT_MAX)``; 1 if
       ``global_amax`` is 0 or the result is 0 (Inf amax);
    2. per block of 16 along ``axis``: ``s_b = e4m3fn(fl32(block_amax *
       fl32(S_enc * fl32(1/6))))`` (saturating RNE cast);
    3. ``scale_inv = fl32(float(s_b) * fl32(1 / S_enc))`` and
       ``scale = min(fl32(1 / scale_inv), FLT_MAX)`` (so a zero block scale
       gives ``scale = FLT_MAX``);
    4. elements ``e2m1fn(fl32(x * scale))``, saturating, with ``rounding``
       ``"rne"`` or ``"stochastic"`` (uses ``rng``).

    ``dequantize()`` returns ``element * scale_inv``.  The amax ignores NaN
    (CUDA ``fmaxf``); NaN elements become +6 (E2M1 has no NaN, as CUDA's
    ``__nv_cvt_float_to_fp4``) and +-Inf saturate to +-6.  Partial blocks are
    padded with zeros.

    Parameters
    ----------
    x : array_like
    axis : int, keyword-only
        Axis along which the 16-element blocks run.
    rounding : {"rne", "stochastic"}, keyword-only
    rng : numpy.random.Generator or int, optional, keyword-only
        Randomness for ``rounding="stochastic"``.
    global_amax : float, optional, keyword-only
        Per-tensor amax to use (default: ``max|x|``).

    Returns
    -------
    ScaledTensor
        ``fmt`` e2m1fn, ``block_scale_codes`` (e4m3fn codes),
        ``global_scale = S_enc``.

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> t = fp8emu.quantize_nvfp4(np.array([6.0, 1.0, -2.0, 0.5]))
    >>> float(t.global_scale), t.block_scale_codes.tolist(), t.dequantize().tolist()
    (448.0, [126], [6.0, 1.0, -2.0, 0.5])
    """
    if rounding not in ("rne", "stochastic"):
        raise ValueError(f"unknown rounding {rounding!r} for NVFP4; accepted: 'rne', 'stochastic'")
    if rounding != "stochastic" and rng is not None:
        raise ValueError("rng applies only to rounding='stochastic'")
    fmt = get_format("e2m1fn")
    e4m3 = get_format("e4m3fn")
    fmt, xf = prepare(x, fmt, "quantize_nvfp4")
    ax, blk = axis_block(xf.ndim, axis, NVFP4_BLOCK)

    if global_amax is None:
        gamax = F32(amax_nan_ignoring(xf, None))
    else:
        g = np.asarray(global_amax)
        if g.shape != () or g.dtype.kind not in "iuf":
            raise TypeError(f"global_amax must be a real scalar, got {global_amax!r}")
        gamax = F32(g)
        if np.isnan(gamax) or gamax < 0:
            raise ValueError(f"global_amax must be >= 0 and not NaN, got {global_amax!r}")
    with np.errstate(divide="ignore", over="ignore"):
        s_enc = F32(np.fmin(F32(F32(448) * F32(6)) / gamax, FLT_MAX))
    if gamax == 0 or s_enc == 0:
        s_enc = F32(1)

    amax = block_amax(xf, blk)
    factor = F32(s_enc * F32(F32(1) / F32(6)))
    with np.errstate(over="ignore"):
        s_dec = np.multiply(amax, factor, dtype=np.float32)
    bcodes = encode(s_dec, e4m3, saturate=True)
    s_dec_q = decode(bcodes, e4m3, dtype=np.float32)
    inv = np.multiply(s_dec_q, F32(F32(1) / s_enc), dtype=np.float32)
    scale = np.fmin(reciprocal(inv), FLT_MAX).astype(np.float32)

    options = {"rounding": rounding}
    if rounding == "stochastic":
        options["rng"] = rng
    codes = scaled_cast(xf, scale, blk, fmt, **options)
    return ScaledTensor(codes=codes, fmt=fmt, scale=scale, scale_inv=inv, block=blk, axis=ax,
                        shape=xf.shape, block_scale_codes=bcodes, global_scale=s_enc,
                        recipe="nvfp4")
