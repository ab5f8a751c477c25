"""MS-EDEN: unbiased NVFP4 rounding with the randomness on the block scale (Quartet II).

Quartet II (Panferov et al., arXiv 2601.22813) rounds the FP4 elements to
nearest and makes the *block scale* carry the randomness: the scale is
multiplied by an EDEN correction ``<x, x> / <x, q>`` (so the dequantized group
keeps the input's projection) and then rounded stochastically to E4M3.  This
module follows the reference CUDA kernel ``eden_fp4_kernel``
(``kernels/csrc/round_eden_fp4.cu`` and ``stochastic_rounding`` in
``kernels/csrc/utils.cuh`` of github.com/IST-DASLab/Quartet-II at commit
8776a90b7aa0c0a400ad858a3c05a66f7ec55b73), operation by operation in float32:

1. ``val_max = 6 / scale_override``; tensor scale ``t = amax / 255.99 / val_max``
   (1 for a zero amax);
2. per group of 16: ``s = e4m3(fl32(fl32(max|x| / val_max) / t))`` (saturating
   RNE), 1 where it is 0; elements ``q = e2m1(fl32(x * fl32(1 / fl32(s * t))))``
   (RNE, saturating);
3. per 256 consecutive elements of a row (the kernel's 32-lane warp, 8 elements
   a lane): ``<x', x'>`` and ``<x', q>`` of the scaled elements ``x'``, each
   lane accumulating its 8 products with fused multiply-adds (nvcc contracts
   ``a += b * c``), then summed over the lanes by the xor butterfly (offsets 16,
   8, 4, 2, 1).  The kernel's comment speaks of the 128-element Hadamard group,
   but its loop starts at offset 16 and so spans 32 lanes; the code is followed;
4. ``fixed = fl32(s * (<x', x'> / <x', q>))`` (``s`` where ``<x', q> = 0``),
   rounded to E4M3 stochastically with 16 random bits ``r`` per group: for
   ``2**-6 <= |fixed| <= 448`` the 20 float32 bits E4M3 drops are set to all
   ones when they exceed ``r << 4`` and cleared otherwise, then cast with RNE;
   outside that range a plain saturating RNE cast.

The FP4 codes keep the scale of step 2; the stored block scale is step 4's.
Given the same 16 random bits per group (the kernel draws them with Philox from
its seed; this module takes them as ``random_bits`` or draws them from ``rng``),
the codes and scales are the kernel's, bit for bit, for bfloat16 inputs.
"""

from __future__ import annotations

import numpy as np

from ..codec import decode, encode
from ..formats import get_format

__all__ = ["ms_eden_nvfp4"]

F32 = np.float32
#: Elements per EDEN correction (one warp of the reference kernel: 32 lanes x 8 elements).
EDEN_GROUP = 256
_LANE = 8
_SR_MASK = np.uint32(0x000FFFFF)


def _fma32(a, b, c):
    """float32 fused multiply-add ``fl32(a * b + c)`` with one rounding, vectorised.

    ``a * b`` is exact in float64; the float64 sum ``s`` and its TwoSum error
    ``e`` hold the exact result, and the float32 rounding of ``s`` is corrected
    where ``s`` lies exactly on a float32 midpoint and ``e`` decides the side.
    """
    p = a.astype(np.float64) * b.astype(np.float64)
    c64 = c.astype(np.float64)
    s = p + c64
    bb = s - p
    e = (p - (s - bb)) + (c64 - bb)
    r = s.astype(F32)
    r64 = r.astype(np.float64)
    toward = np.nextafter(r, np.where(s > r64, F32(np.inf), F32(-np.inf)).astype(F32))
    mid = (r64 + toward.astype(np.float64)) / 2
    tie = (r64 != s) & (s == mid) & (e != 0)
    # at a tie RNE picked the even one of r / toward; the exact value lies on e's side of the midpoint
    up = e > 0
    hi = np.maximum(r, toward)
    lo = np.minimum(r, toward)
    return np.where(tie, np.where(up, hi, lo), r).astype(F32)


def _lane_dots(xs, q):
    """Per lane of 8 elements: ``(<xs, xs>, <xs, q>)`` accumulated with FMAs in element order."""
    lanes_x = xs.reshape(-1, _LANE)
    lanes_q = q.reshape(-1, _LANE)
    xx = np.zeros(lanes_x.shape[0], F32)
    xy = np.zeros(lanes_x.shape[0], F32)
    for k in range(_LANE):
        xx = _fma32(lanes_x[:, k], lanes_x[:, k], xx)
        xy = _fma32(lanes_x[:, k], lanes_q[:, k], xy)
    return xx, xy


def _butterfly(v):
    """The xor-shuffle reduction over each warp of 32 lanes (offsets 16, 8, 4, 2, 1), in float32."""
    w = v.reshape(-1, 32)
    lane = np.arange(32)
    for off in (16, 8, 4, 2, 1):
        w = (w + w[:, lane ^ off]).astype(F32)
    return w.reshape(-1)


def _stochastic_e4m3(v, noise):
    """The kernel's ``stochastic_rounding``: E4M3 codes of float32 ``v`` with 16-bit ``noise``."""
    e4m3 = get_format("e4m3fn")
    a = np.abs(v)
    inside = (a <= F32(448)) & (a >= F32(0.015625))
    bits = v.view(np.uint32)
    thr = (noise.astype(np.uint32) << np.uint32(4)) & _SR_MASK
    up = (bits & _SR_MASK) > thr
    moved = np.where(up, bits | _SR_MASK, bits & ~_SR_MASK).astype(np.uint32).view(F32)
    return encode(np.where(inside, moved, v).astype(F32), e4m3, saturate=True)


def ms_eden_nvfp4(x2, amax, scale_override, noise):
    """MS-EDEN codes for float32 rows ``x2`` (the blocked axis last, C order).

    Parameters
    ----------
    x2 : ndarray of float32, shape (..., n)
        ``n`` a multiple of 128 and the size a multiple of 256 (the kernel's
        shape rule); correction groups are 256 consecutive elements of the
        flattened array, as the kernel's warps are.
    amax : numpy.float32
        Tensor amax.
    scale_override : float
        The kernel's ``scale_override`` (1: amax maps to 6).
    noise : ndarray of uint16, shape (..., n // 16)
        16 random bits per group of 16.

    Returns
    -------
    (codes, pre_scale_codes, scale_codes, tensor_scale)
        E2M1 codes (shape of ``x2``), the E4M3 codes of step 2 and of step 4
        (one per group), and the float32 tensor scale ``t`` (dequantized value
        = element * E4M3 scale * t).

    Examples
    --------
    >>> import numpy as np
    >>> x = np.linspace(-1, 1, 256, dtype=np.float32).reshape(1, 256)
    >>> c, s0, s, t = ms_eden_nvfp4(x, np.float32(1), 1.0, np.zeros((1, 16), np.uint16))
    >>> c.shape, s.shape, float(t) == float(np.float32(np.float32(1 / np.float32(255.99)) / np.float32(6)))
    ((1, 256), (1, 16), True)
    """
    e4m3, e2m1 = get_format("e4m3fn"), get_format("e2m1fn")
    val_max = F32(F32(6) / F32(scale_override))
    t = F32(1) if amax == 0 else F32(F32(F32(amax) / F32(255.99)) / val_max)
    g = x2.reshape(-1, 16)
    bamax = np.max(np.abs(g), axis=1)
    s_group = (bamax / val_max).astype(F32)
    with np.errstate(over="ignore"):
        s_codes = encode((s_group / t).astype(F32), e4m3, saturate=True)
    s_r = decode(s_codes, e4m3, dtype=F32)
    s_r = np.where(s_r == 0, F32(1), s_r).astype(F32)
    with np.errstate(divide="ignore", over="ignore"):
        factor = (F32(1) / (s_r * t).astype(F32)).astype(F32)
        xs = (g * factor[:, None]).astype(F32)
    codes = encode(xs, e2m1, saturate=True)
    q = decode(codes, e2m1, dtype=F32)
    xx, xy = _lane_dots(xs, q)
    xx, xy = _butterfly(xx), _butterfly(xy)
    # each group of 16 is two lanes; its scale is written by the even lane (both hold the warp's sums)
    xx, xy = xx[0::2], xy[0::2]
    with np.errstate(divide="ignore", invalid="ignore"):
        corr = np.where(xy == 0, F32(1), (xx / np.where(xy == 0, F32(1), xy)).astype(F32)).astype(F32)
    fixed = (s_r * corr).astype(F32)
    sr_codes = _stochastic_e4m3(fixed, noise.reshape(-1))
    nb = x2.shape[:-1] + (x2.shape[-1] // 16,)
    return codes.reshape(x2.shape), s_codes.reshape(nb), sr_codes.reshape(nb), t
