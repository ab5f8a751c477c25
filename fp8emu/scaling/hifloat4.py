"""HiFloat4 (HiF4): 64 FP4 E1M2 elements under a three-level 32-bit scale (arXiv 2602.11287).

A HiF4 unit holds 64 elements of FP4 E1M2 (``+-{0, 0.25, ..., 1.75}``, the
CANN ``HiFloat4`` element) and 32 bits of scale: one level-1 scale per 64
elements in E6M2 (8 bits: 6 exponent, 2 mantissa bits, from 2**-48 up to
49152), one level-2 bit per 8 elements (a factor 1 or 2) and one level-3 bit per
4 elements (1 or 2): 8 + 8 + 16 = 32 bits, 4.5 bits per element.  An element's
value is ``e1m2 * level3 * level2 * level1``, so ``7 * level1`` is the largest.

The rules follow the public fake-quantization reference ``quant_hifx``
(``quant/quant_cy_npu/quant_cy_npu/base/QFunc/hifx.py`` in NVIDIA/Megatron-LM at
98efdedd0581ce2f705d098df8244996472cdcce, "HIFxV14"), in float32 with its
bfloat16 roundings:

1. ``s1 = bf16(fl32(max64 * bf16(fl32(1 / 7))))`` clipped to [2**-48, 49152],
   then rounded to 2 mantissa bits (ties to even); ``r = bf16(fl32(1 / s1))``;
2. ``level2 = 2`` where ``fl32(max8 * r) >= 4``, else 1;
3. ``level3 = 2`` where ``fl32(fl32(max4 * r) / level2) >= 2``, else 1;
4. ``m = fl32(fl32(|x| / level2 / level3) * r)``; element
   ``floor(fl32(fl32(m * 4) + 0.5)) / 4`` (to nearest, ties up), 1.75 where
   that reaches 2, times ``sign(x)`` (so a negative ``x`` that rounds to 0 gives -0).

Examples
--------
>>> import numpy as np
>>> from fp8emu.scaling.hifloat4 import quantize_hif4
>>> t = quantize_hif4(np.linspace(-7, 7, 64, dtype=np.float32))
>>> t.fmt.name, t.block, t.dequantize()[[0, 31, 63]].tolist()
('e1m2', (4,), [-7.0, -0.0, 7.0])
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..formats import get_format
from .tensor import F32, ScaledTensor, axis_block, prepare

__all__ = ["quantize_hif4", "HIF4_UNIT"]

#: Elements per HiF4 unit (one level-1 scale); level 2 covers 8 and level 3 covers 4 of them.
HIF4_UNIT = 64


def _bf16(v):
    return np.asarray(v, F32).astype(ml_dtypes.bfloat16).astype(F32)


def _e6m2(s):
    """Round positive float32 ``s`` to 2 mantissa bits, ties to even (``torch.round``)."""
    _, e = np.frexp(s)                        # s = f * 2**e with f in [0.5, 1)
    k = (e - 1 - 2).astype(np.int32)          # s * 2**(2 - floor(log2 s)) lies in [4, 8)
    return np.ldexp(np.round(np.ldexp(s.astype(np.float64), -k)), k).astype(F32)


def quantize_hif4(x, *, axis=-1) -> ScaledTensor:
    """HiFloat4: FP4 E1M2 elements in units of 64 along ``axis`` with a three-level scale.

    Parameters
    ----------
    x : array_like
        Finite values (a NaN or Inf is a ValueError: the reference has no rule
        for them); the length along ``axis`` a multiple of 64.
    axis : int, keyword-only

    Returns
    -------
    ScaledTensor
        ``fmt`` e1m2, ``block`` 4 along ``axis`` (the finest level),
        ``scale_inv`` per block ``level1 * level2 * level3`` (exact), recipe
        ``"hif4"``.
    """
    fmt, xf = prepare(x, get_format("e1m2"), "quantize_hif4")
    ax, blk = axis_block(xf.ndim, axis, 4)
    if xf.shape[ax] % HIF4_UNIT:
        raise ValueError(f"quantize_hif4 needs the length along axis {ax} to be a multiple of {HIF4_UNIT}, "
                         f"got shape {xf.shape}")
    if not np.isfinite(xf).all():
        # x was converted to float32: a finite float64 beyond float32's range is Inf now
        raise ValueError("quantize_hif4 takes finite values only, finite in float32 (the HiF4 reference has no "
                         "NaN/Inf rule): x holds NaN/Inf, or finite values beyond +-3.4028235e+38 that overflow "
                         "float32")
    moved = np.moveaxis(np.asarray(xf, F32), ax, -1)
    u = moved.reshape(moved.shape[:-1] + (-1, 8, 2, 4))
    a = np.abs(u)
    m4 = a.max(axis=-1, keepdims=True)
    m8 = m4.max(axis=-2, keepdims=True)
    m64 = m8.max(axis=-3, keepdims=True)
    div7 = _bf16(F32(1) / F32(7))
    s1 = np.clip(_bf16((m64 * div7).astype(F32)), F32(2.0 ** -48), F32(49152))
    s1 = _e6m2(s1)
    r = _bf16((F32(1) / s1).astype(F32))
    l2 = np.where((m8 * r).astype(F32) >= 4, F32(2), F32(1))
    l3 = np.where(((m4 * r).astype(F32) / l2).astype(F32) >= 2, F32(2), F32(1))
    m = ((a / l2 / l3).astype(F32) * r).astype(F32)
    q = np.floor(((m * F32(4)).astype(F32) + F32(0.5)).astype(F32))
    q = np.minimum(q, 7).astype(np.uint8)
    codes = np.where(u < 0, q | 8, q).astype(np.uint8)          # sign(x) * 0 is -0 for x < 0, as the reference
    inv = np.broadcast_to((l2 * l3 * s1).astype(F32), u.shape[:-1] + (1,))[..., 0]
    codes = np.moveaxis(codes.reshape(moved.shape), -1, ax)
    inv = np.moveaxis(inv.reshape(moved.shape[:-1] + (moved.shape[-1] // 4,)), -1, ax)
    scale = (F32(1) / inv).astype(F32)
    return ScaledTensor(codes=np.ascontiguousarray(codes), fmt=fmt, scale=scale, scale_inv=np.ascontiguousarray(inv),
                        block=blk, axis=ax, shape=xf.shape, recipe="hif4")
