"""An independent NVFP4 oracle written from the facts of Transformer Engine's reference quantizer.

Facts read from TransformerEngine at commit d0067d0da6cb01811b8072a7d304f0e00344ce2b,
``transformer_engine/pytorch/custom_recipes/reference_nvfp4.py`` (``NVFP4QuantizerRef``)
and the kernels' ``compute_global_encode_scaling_factor_FP4`` (``core_nvfp4.cuh``):

* every arithmetic step is a float32 tensor op (NumPy float32 ufuncs round the same way);
* E4M3 block scales: clamp to +-448 then a round-to-nearest-even cast (``torch.float8_e4m3fn``;
  here ml_dtypes' float32 -> float8_e4m3fn cast, also RNE);
* E2M1 elements: clamp to +-6, then the reference's interval table (``cast_to_fp4x2``);
* the Four Over Six candidate errors, the 16x16 error tree and the RHT as a matmul in the
  input dtype, accumulated in float32 (``bf16 @ bf16`` on a GPU: fp32 accumulation, one
  rounding to bfloat16).

Nothing here is imported from fp8emu.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

F = np.float32
BF16 = np.dtype(ml_dtypes.bfloat16)
FLT_MAX = np.finfo(np.float32).max
TE_SIGNS = np.array([1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1], np.float32)

# Reference E2M1 intervals on the clamped value y: (lower, lower_inclusive, upper, upper_inclusive, code)
_POS = [(0.0, True, 0.25, True, 0), (0.25, False, 0.75, False, 1), (0.75, True, 1.25, True, 2),
        (1.25, False, 1.75, False, 3), (1.75, True, 2.5, True, 4), (2.5, False, 3.5, False, 5),
        (3.5, True, 5.0, True, 6)]
E2M1_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def e2m1_codes(y):
    """The reference's E2M1 codes of clamped float32 values (masks in its order; NaN -> 0)."""
    out = np.zeros(y.shape, np.uint8)
    for lo, lo_in, hi, hi_in, code in _POS:
        ge = (y >= lo) if lo_in else (y > lo)
        le = (y <= hi) if hi_in else (y < hi)
        out[ge & le] = code
    out[y > 5.0] = 7
    for lo, lo_in, hi, hi_in, code in _POS:
        if code == 0:
            # the reference's mask (y < -0.0) gives an input of -0.0 code 0; TE's kernel converts with the
            # hardware's cvt, which keeps the sign (H200: __nv_cvt_float_to_fp4(-0.0) = 0x8, in
            # fp8emu/data/golden/cuda_f32_e2m1_rn.rle), and fp8emu models the kernel: -0.0 is 0x8 here too
            out[(y >= -0.25) & ((y < -0.0) | ((y == 0) & np.signbit(y)))] = 8
            continue
        le = (y <= -lo) if lo_in else (y < -lo)
        ge = (y >= -hi) if hi_in else (y > -hi)
        out[le & ge] = code | 8
    out[y < -5.0] = 15
    return out


def e4m3(v):
    """(codes, float32 values) of ``e4m3fn(clamp(v, -448, 448))``."""
    c = np.clip(v, F(-448), F(448)).astype(ml_dtypes.float8_e4m3fn)
    return c.view(np.uint8), c.astype(np.float32)


def hadamard16(with_sign_mask):
    h = np.ones((1, 1), np.float32)
    while h.shape[0] < 16:
        h = np.block([[h, h], [h, -h]])
    if with_sign_mask:
        h = TE_SIGNS[:, None] * h
    return h


def rht(x2, dtype, with_sign_mask=True):
    """``x2 @ (H * 0.25)`` per 16 columns: the exact sum of the float32 products, rounded once to float32, then
    ``dtype``.  TE's reference is a matmul whose float32 accumulation order the GPU does not publish; the exact
    sum rounded once is the model here and in fp8emu.  A sequential float32 sum lands on a bfloat16 tie the
    exact sum is off in 2 of 29,360,128 elements at TE's 8192x3584 (column-wise, sign mask;
    ``test_rht_accumulation_order_barely_reaches_the_bfloat16_result``), where the two disagree."""
    m, n = x2.shape
    t = (hadamard16(with_sign_mask) * F(0.25)).astype(np.float64)
    u = x2.astype(np.float32).astype(np.float64).reshape(m, n // 16, 16)
    s = np.zeros((m, n // 16, 16))
    lost = np.zeros_like(s)
    for i in range(16):                      # two-sum: s + lost is the exact sum of the terms so far
        term = u[:, :, i:i + 1] * t[i][None, None, :]          # exact: a float32 value times +-1/4
        total = s + term
        back = total - s
        lost += (s - (total - back)) + (term - back)
        s = total
    if np.any(lost):                         # 16 terms of 24 bits within float64's 53: never expected
        raise AssertionError("the RHT sum was not exact in float64")
    out = s.reshape(m, n).astype(np.float32)
    return out.astype(dtype) if dtype != np.float32 else out


def _err(q_vals, sf, x, amax, denom, s_enc, mode, fast, scale_codes):
    """Sequential float32 error over the 16 elements of each (row, block)."""
    err = np.zeros(x.shape[:2], np.float32)
    for i in range(16):
        if fast:
            cand = q_vals[:, :, i] * sf
            cand = np.where((scale_codes & 0x7F) == 0x7F, F(np.nan), cand)
            diff = cand - x[:, :, i] * s_enc
        else:
            diff = (q_vals[:, :, i] * sf * amax) / denom - x[:, :, i]
        err = err + (np.abs(diff) if mode == "MAE" else diff * diff)
    return err


def _tree(err):
    """Rows of each 16-row tile: r + (r+8), then +4, +2, +1 (CUDA warp order)."""
    t = err.reshape(err.shape[0] // 16, 16, err.shape[1])
    for h in (8, 4, 2, 1):
        t = t[:, :h] + t[:, h:2 * h]
    return t[:, 0]


def _encode_scale(a, gmax):
    """TE's per-tensor encode scale of amax ``a`` (the kernels' convention at 0 and on underflow)."""
    s_enc = np.minimum((gmax * F(6)) / a, FLT_MAX)
    return np.where((a == 0) | (s_enc == 0), F(1), s_enc).astype(np.float32)


def quantize(x, *, tile_2d=False, row_scaled=False, use_4over6=False, e4m3_max=448,
             err_mode="MAE", fast_math=False, scale_override=1.0):
    """NVFP4 of a 2-D array along its rows (float32 or bfloat16 values).

    ``scale_override`` (Quartet II): the per-tensor scale of the elements and of the 4over6
    errors comes from ``amax * scale_override`` (one float32 product); the block scales from
    the amax itself.

    Returns (codes (M, N) uint8, scale codes (rows of blocks, N/16) uint8, amax) -- with an
    override, the amax returned is ``amax * scale_override``.
    """
    with np.errstate(all="ignore"):
        xv = x.astype(np.float32)
        m, n = xv.shape
        ty = 16 if tile_2d else 1
        mp = -(-m // ty) * ty
        npad = -(-n // 16) * 16
        xp = np.zeros((mp, npad), np.float32)
        xp[:m, :n] = xv
        nb = npad // 16
        blocks = xp.reshape(mp, nb, 16)
        vec = np.abs(blocks).max(axis=-1)                                   # (mp, nb)
        if tile_2d:
            vec = np.repeat(vec.reshape(mp // 16, 16, nb).max(axis=1), 16, axis=0)
        if row_scaled:
            amax = np.abs(xv).max(axis=1)
            amax_p = np.zeros(mp, np.float32)
            amax_p[:m] = amax
            a = amax_p[:, None]
        else:
            amax = np.abs(xv).max()
            a = amax
        gmax = F(e4m3_max if use_4over6 else 448)
        s_enc = _encode_scale(a, gmax)                      # block scales
        if scale_override != 1:
            a = a * F(scale_override)
            amax = amax * F(scale_override)
        s_enc_el = _encode_scale(a, gmax)                   # elements and errors
        s_dec = F(1) / s_enc_el

        def candidate(dec):
            codes, d = e4m3(dec)
            enc = np.minimum(F(1) / (d * s_dec), FLT_MAX)
            y = np.clip(blocks * enc[:, :, None], F(-6), F(6))
            q = e2m1_codes(y)
            return q, codes, d

        if not use_4over6:
            dec = np.minimum(vec * (s_enc * (F(1) / F(6))), FLT_MAX)
            q, codes, _ = candidate(dec)
        else:
            base = (vec / F(6)) * s_enc
            q6, c6, d6 = candidate(base)
            q4, c4, d4 = candidate(base * F(1.5))
            denom = F(6) * gmax
            errs = [_err(E2M1_VALUES[qq], dd, blocks, a, denom, s_enc_el, err_mode, fast_math, cc)
                    for qq, cc, dd in ((q4, c4, d4), (q6, c6, d6))]
            if tile_2d:
                errs = [np.repeat(_tree(e), 16, axis=0) for e in errs]
            pick4 = errs[0] < errs[1]
            q = np.where(pick4[:, :, None], q4, q6)
            codes = np.where(pick4, c4, c6)
    q = q.reshape(mp, npad)[:m, :n]
    codes = codes[:m:ty] if tile_2d else codes[:m]
    return q, codes, amax


def qgemm(qx, sx, amax_x, e4m3_max_x, qw, sw, amax_w, e4m3_max_w, out_dtype, out=None, alpha_rule="gpu"):
    """TE's reference NVFP4 GEMM ``y = x @ w.T`` (``NVFP4QuantizerRef.qgemm``), from its facts.

    ``qx`` (M, K) / ``qw`` (N, K): E2M1 codes, one per byte, blocks of 16 along K; ``sx`` (M, K/16) /
    ``sw`` (N, K/16): E4M3 scale codes; ``amax_x``: a scalar or one per row of x (row-scaled).
    Facts (TE d0067d0, ``reference_nvfp4.py``; its test runs it on a GPU):

    * E2M1 codes become their values (exact in the output dtype and in float32);
    * for each 16-wide K block in order, a float32 matmul of the block (exact: E2M1 products are
      multiples of 1/4 below 36, 16 of them stay below 2**10) is multiplied by the outer product of
      the two blocks' E4M3 scales (exact) and added to a float32 total starting at 0;
    * ``alpha = fl32(amax_x * amax_w) / (6 * 6 * E_x * E_w)``: PyTorch on CUDA divides by a Python
      float as a product with its float32 reciprocal (``alpha_rule="gpu"``), on the CPU it divides
      (``"cpu"``);
    * ``y = fl32(alpha * y)``, then ``fl32(y + out)`` when accumulating, then one cast to the
      output dtype (round to nearest even).
    """
    xv, wv = E2M1_VALUES[qx], E2M1_VALUES[qw]
    m, k = xv.shape
    n = wv.shape[0]
    sxv = sx.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    swv = sw.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    y = np.zeros((m, n), np.float32)
    with np.errstate(all="ignore"):
        for b in range(k // 16):
            part = xv[:, 16 * b:16 * b + 16] @ wv[:, 16 * b:16 * b + 16].T
            y = y + np.outer(sxv[:, b], swv[:, b]) * part
        factor = F(6.0 * 6.0 * e4m3_max_x * e4m3_max_w)
        pa = np.asarray(amax_x, np.float32).reshape(-1, 1) * np.asarray(amax_w, np.float32).reshape(1, -1)
        alpha = pa * (F(1) / factor) if alpha_rule == "gpu" else pa / factor
        y = alpha * y
        if out is not None:
            y = y + out.astype(np.float32)
    return y.astype(out_dtype)
