"""Transformer Engine's NVFP4 quantizer options, reproduced bit for bit.

:class:`NVFP4Quantizer` is a frozen recipe object holding the options of
Transformer Engine's ``NVFP4Quantizer`` under TE's own names, and
:func:`quantize_nvfp4_te` quantizes with them in the order of float32
operations of TE's reference quantizer ``NVFP4QuantizerRef``
(``transformer_engine/pytorch/custom_recipes/reference_nvfp4.py``), which
TE's ``tests/pytorch/nvfp4/test_nvfp4_quantize_exact.py`` and
``test_nvfp4_rht_quantize_exact.py`` compare byte for byte with its CUDA
kernels.  Followed at TransformerEngine commit :data:`TE_COMMIT`.

Every step is one float32 operation, written ``fl32(...)``.  ``E`` is the
global E4M3 bound ``nvfp4_e4m3_max`` (448, or 256 with 4over6), ``A`` the
global amax (one per tensor, or one per row with ``row_scaled_nvfp4``) and
``v`` the amax of one 16-element block (or 16x16 tile):

1. ``S_enc = min(fl32(fl32(E * 6) / A), FLT_MAX)``, and 1 where ``A == 0`` or
   ``S_enc == 0`` (the kernels' ``compute_global_encode_scaling_factor_FP4``;
   the Python reference gives ``FLT_MAX`` at ``A == 0``, which yields the same
   all-zero codes and scales); ``S_dec = fl32(1 / S_enc)``.
2. Default block scale: ``e4m3(clamp(fl32(v * fl32(S_enc * fl32(1/6))), 448))``
   (round to nearest even; the reference first takes ``min(., FLT_MAX)``).
3. Four Over Six (``nvfp4_use_4over6``; TE ``_quantize_blockwise_4over6_reference``
   and ``quantize_4over6_nvfp4.cuh``): ``base = fl32(fl32(v / 6) * S_enc)``;
   map-to-6 scale ``e4m3(clamp(base, 448))``, map-to-4 scale
   ``e4m3(clamp(fl32(base * 1.5), 448))``.
4. For each scale ``d``: ``enc = min(fl32(1 / fl32(d * S_dec)), FLT_MAX)``;
   elements ``e2m1(clamp(fl32(x * enc), 6))`` with ties to even.
5. Four Over Six picks per block the candidate with the smaller error, ties to
   map-to-6.  The error of a candidate ``(q, d)`` is summed in float32 over the
   16 elements in index order starting from 0, ``err = fl32(err + e_i)`` with
   ``e_i = |diff_i|`` (``"MAE"``, the default) or ``fl32(diff_i * diff_i)``
   (``"MSE"``), where

   * exact error path: ``diff_i = fl32(fl32(fl32(fl32(q_i * d) * A) / fl32(6 * E)) - x_i)``;
   * ``nvfp4_4over6_err_use_fast_math``: ``diff_i = fl32(q_i * d - fl32(x_i * S_enc))``
     (``q_i * d`` is exact; TE forms it as an FP16 product, NaN when ``d`` is
     the E4M3 NaN).

   For 16x16 tiles the 16 row errors of a tile are then added as TE's warp
   reduction does: rows ``r`` and ``r + 8``, then ``r`` and ``r + 4``, then
   ``r`` and ``r + 2``, then rows 0 and 1.
6. ``with_rht`` (TE ``NVFP4QuantizerRef._apply_rht``): before the amax, each run
   of 16 values ``u`` along ``axis`` becomes ``u @ (H * 0.25)``, ``H`` the 16x16
   Sylvester Hadamard matrix with its rows multiplied by TE's sign vector
   (``with_random_sign_mask``, default) -- a matmul in the input's dtype.  For
   bfloat16 (and float16) inputs the product is formed as a GPU matmul does it,
   with float32 accumulation and one rounding of the result to the input dtype:
   ``bf16(fl32(sum))``.  fp8emu forms ``sum`` in float64 and rounds it once to
   float32; that is one rounding of the *exact* sum when the block's 16 terms
   span at most 25 binades (their 24-bit significands and 4 carry bits fit in
   float64's 53), as on TE's test data (``tests/test_te_nvfp4_parity.py``).  A
   block spanning more (``1e30`` beside ``1e-30``) may be rounded twice, in
   float64 and then in float32 (``tests/test_docstring_claims.py`` shows such a
   block); an fp32 accumulator itself is exact only when the terms span at most
   24 bits.  float32 inputs give ``fl32(sum)`` under the same bound.
7. ``row_scaled_nvfp4`` (TE PR #2931/#3206): ``A`` is the amax of each row
   (each line along ``axis``) instead of the whole tensor.
8. ``stochastic_rounding``: step 4 rounds stochastically.  TE's kernels draw
   one 32-bit word per 4 elements from Philox4x32 (``curanddx``
   ``philox4x32_native_state``, ``core_nvfp4.cuh::get_rbits``; seed and offset
   unpacked from the PyTorch CUDA generator's Philox state by
   ``pytorch/csrc/quantizer.cpp``, subsequence = the thread's linear index in
   ``quantize_transpose_nvfp4.cuh``) and hand it to the PTX instruction
   ``cvt.rs.satfinite.e2m1x4.f32 d, {a, b, e, f}, rbits``.  What is published
   about that instruction (PTX ISA 8.7+, its syntax; LLVM's NVPTX usage guide,
   its ``.rs`` mode) is that one 32-bit ``rbits`` operand serves all four inputs
   and that each result is rounded towards or away from zero by the carry out
   of an integer addition of random bits to the input's mantissa.  Which bits
   of ``rbits`` go to which of ``a, b, e, f``, how many each uses, and which
   thread quantizes which element, are not published (checked again against
   those documents for TE commit :data:`TE_COMMIT`); ``cvt.rs`` runs only on
   ``sm_100a``/``sm_103a``, so it was not measured either.  TE's own test
   (``test_nvfp4_sr_quantize.py``) is statistical and is replayed as such
   (``tests/test_te_nvfp4_sr.py``).  So TE's draw is not modelled here; the
   carry rule is.  fp8emu's stochastic rounding
   adds ``k`` random bits to the top ``k`` discarded bits of ``|fl32(x * enc)|``
   (:func:`fp8emu.encode`, ``rounding="stochastic"``); supply the same bits as
   ``random_bits`` (one unsigned integer per element, shape of ``x``) to
   reproduce a draw, or ``rng`` to draw them.

9. ``scale_override`` (Quartet II's name, default 1): the per-tensor scale is
   computed from ``A' = fl32(A * scale_override)`` instead of ``A`` -- step 1
   with ``A'`` gives ``S_enc'`` and ``S_dec' = fl32(1 / S_enc')``, used by step 4
   (``enc = min(fl32(1 / fl32(d * S_dec')), FLT_MAX)``) and by both 4over6 error
   paths of step 5 (``A'`` and ``S_enc'`` in place of ``A`` and ``S_enc``) --
   while the block scales of steps 2 and 3 still come from ``A``.  With
   ``scale_override=0.93`` each block's amax lands near ``6 / 0.93`` before the
   E2M1 cast saturates it to 6: the per-tensor decode scale shrinks, the E4M3
   block-scale bytes stay those of ``scale_override=1``.  TE has no such
   option (none at :data:`TE_COMMIT`).  It follows IST-DASLab/Quartet-II at
   commit :data:`QUARTET2_COMMIT`, whose kernels
   (``kernels/csrc/round_four_six.cu``, ``four_six_fp4_kernel``) take
   ``scale_override`` as ``val_max = 6 / scale_override`` in both the
   per-tensor decode scale ``fl32(fl32(A * fl32(1/E)) * fl32(scale_override *
   fl32(1/6)))`` and the block target ``fl32(v * fl32(fl32(1/6) *
   scale_override))``; their ratio, the E4M3 block scale, does not depend on
   it, so in exact arithmetic the option multiplies the per-tensor decode scale
   by ``scale_override`` -- what is modelled here, in TE's order of float32
   operations.  Quartet II's own float32 steps are not reproduced: they divide
   with ``rcp.approx.ftz.f32`` (``reciprocal_approximate_ftz``), whose results
   are not published bit for bit, and start from ``fl32(A * fl32(1/E))`` where TE
   divides.  Its recipe (``kernels/python/quartet2/linear.py``) uses 1.0 in
   the forward pass and ``(17 / 16) * 0.93`` for the backward-pass
   quantizers; like Quartet II's ``EdenSRQuantizer``, stochastic rounding with
   an override other than 1 is rejected.  With an override, ``global_amax``
   is ``A'`` (so a GEMM's alpha, :func:`fp8emu.block_scaled_mm`, matches
   ``dequantize()``).

Elements: NaN ``x`` gives +6 (code 7) and -0.0 gives code 8, as the hardware
cast does; TE's Python reference maps NaN to code 0 and -0.0 to code 0 (its
masks), which TE's exact tests never exercise.

Option combinations TE rejects are rejected with TE's message (see
:class:`NVFP4Quantizer`).
"""

from __future__ import annotations

import dataclasses
import math

import ml_dtypes
import numpy as np

from ..codec import decode, encode
from ..formats import get_format
from .hadamard import RHT_SIZE, hadamard_matrix, TE_WGRAD_SIGNS
from .tensor import F32, FLT_MAX, ScaledTensor, amax_nan_ignoring, as_f32, given_amax_f32
from ..interop import is_integer

__all__ = ["NVFP4Quantizer", "quantize_nvfp4_te", "TE_COMMIT", "TE_4OVER6_ERR_MODES", "QUARTET2_COMMIT"]

#: The TransformerEngine commit whose reference quantizer and kernels this module follows.
TE_COMMIT = "d0067d0da6cb01811b8072a7d304f0e00344ce2b"
#: The IST-DASLab/Quartet-II commit whose ``scale_override`` this module models (module notes, step 9).
QUARTET2_COMMIT = "8776a90b7aa0c0a400ad858a3c05a66f7ec55b73"
#: Error modes of Four Over Six candidate selection (TE ``nvfp4_4over6_err_mode``).
TE_4OVER6_ERR_MODES = ("MAE", "MSE")

_BLOCK = 16
_BF16 = np.dtype(ml_dtypes.bfloat16)


@dataclasses.dataclass(frozen=True)
class NVFP4Quantizer:
    """Options of Transformer Engine's ``NVFP4Quantizer``, under TE's names.

    Attributes
    ----------
    with_2d_quantization : bool
        One E4M3 scale per 16x16 tile (TE's weight recipe) instead of 1x16.
    stochastic_rounding : bool
        Round elements stochastically (TE's gradient recipe); see the module notes.
    with_rht : bool
        Random Hadamard transform along the block axis before quantizing.
    with_random_sign_mask : bool
        Multiply the Hadamard rows by TE's fixed sign vector (default True);
        only meaningful with ``with_rht``.
    row_scaled_nvfp4 : bool
        One global amax per row (line along ``axis``) instead of per tensor.
    nvfp4_use_4over6 : bool
        Four Over Six: per block, keep the better of map-to-6 and map-to-4.
    nvfp4_e4m3_max : {448, 256}
        Global E4M3 bound ``E``; 256 only with 4over6 (TE's recipe default
        for 4over6 tensors is 256).
    nvfp4_4over6_err_mode : {"MAE", "MSE"}
        Error of the 4over6 selection (case-insensitive, as TE).
    nvfp4_4over6_err_use_fast_math : bool
        TE's ``NVTE_NVFP4_4OVER6_ERR_USE_FAST_MATH=1`` error path.
    scale_override : float
        Quartet II's factor on the per-tensor scale (default 1, TE's
        behaviour): the per-tensor scale comes from ``fl32(amax *
        scale_override)``; 0.93 lets each block's amax reach ``6 / 0.93``
        before the E2M1 cast saturates it.  A finite number > 0.  See the
        module notes, step 9.

    Raises
    ------
    ValueError
        For a combination TE rejects, with TE's message:
        ``"NVFP4 4over6 quantization does not support stochastic rounding."``,
        ``"NVFP4 4over6 quantization does not support RHT."``,
        ``"Row-scaled NVFP4 quantization does not support 2D quantization."``,
        ``"Non-4over6 NVFP4 quantization requires E4M3 max 448."``,
        ``"nvfp4_e4m3_max must be 448 or 256."``,
        ``"nvfp4_4over6_err_mode must be 'MAE' or 'MSE'."``; Quartet II's
        ``"Scale Override is incompatible with Stochastic Rounding"``; for a
        ``scale_override`` that is not a finite number > 0; and for options
        that would be silently ignored (fast math without 4over6, the sign
        mask without RHT).

    Examples
    --------
    >>> q = NVFP4Quantizer(nvfp4_use_4over6=True, nvfp4_e4m3_max=256, nvfp4_4over6_err_mode="mse")
    >>> q.nvfp4_4over6_err_mode
    'MSE'
    >>> NVFP4Quantizer(nvfp4_use_4over6=True, with_rht=True)
    Traceback (most recent call last):
    ...
    ValueError: NVFP4 4over6 quantization does not support RHT.
    >>> NVFP4Quantizer(scale_override=0.93).name
    'nvfp4-so0.93'
    """

    with_2d_quantization: bool = False
    stochastic_rounding: bool = False
    with_rht: bool = False
    with_random_sign_mask: bool = True
    row_scaled_nvfp4: bool = False
    nvfp4_use_4over6: bool = False
    nvfp4_e4m3_max: int = 448
    nvfp4_4over6_err_mode: str = "MAE"
    nvfp4_4over6_err_use_fast_math: bool = False
    scale_override: float = 1.0

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.type == "bool" and not isinstance(v, (bool, np.bool_)):
                raise TypeError(f"{f.name} must be a bool, got {v!r}")
        mode = self.nvfp4_4over6_err_mode
        if not isinstance(mode, str):
            raise TypeError(f"nvfp4_4over6_err_mode must be a str, got {mode!r}")
        object.__setattr__(self, "nvfp4_4over6_err_mode", mode.upper())
        if isinstance(self.nvfp4_e4m3_max, bool) or self.nvfp4_e4m3_max not in (448, 256):
            raise ValueError("nvfp4_e4m3_max must be 448 or 256.")
        if self.nvfp4_4over6_err_mode not in TE_4OVER6_ERR_MODES:
            raise ValueError("nvfp4_4over6_err_mode must be 'MAE' or 'MSE'.")
        if not self.nvfp4_use_4over6 and self.nvfp4_e4m3_max != 448:
            raise ValueError("Non-4over6 NVFP4 quantization requires E4M3 max 448.")
        if self.nvfp4_use_4over6 and self.stochastic_rounding:
            raise ValueError("NVFP4 4over6 quantization does not support stochastic rounding.")
        if self.nvfp4_use_4over6 and self.with_rht:
            raise ValueError("NVFP4 4over6 quantization does not support RHT.")
        if self.row_scaled_nvfp4 and self.with_2d_quantization:
            raise ValueError("Row-scaled NVFP4 quantization does not support 2D quantization.")
        if self.nvfp4_4over6_err_use_fast_math and not self.nvfp4_use_4over6:
            raise ValueError("nvfp4_4over6_err_use_fast_math applies only with nvfp4_use_4over6=True")
        if not self.with_random_sign_mask and not self.with_rht:
            raise ValueError("with_random_sign_mask=False applies only with with_rht=True")
        so = self.scale_override
        if isinstance(so, (bool, np.bool_)) or not isinstance(so, (int, float, np.integer, np.floating)) \
                or not np.isfinite(so) or so <= 0:
            raise ValueError(f"scale_override must be a finite number > 0, got {so!r}")
        object.__setattr__(self, "scale_override", float(so))
        if self.stochastic_rounding and self.scale_override != 1:
            # Quartet II's EdenSRQuantizer refuses the pair (src/models/quantization/quantizers/eden.py)
            raise ValueError("Scale Override is incompatible with Stochastic Rounding")

    @property
    def name(self) -> str:
        """Short recipe name, e.g. ``"nvfp4-4over6-mae-256"``.

        Examples
        --------
        >>> NVFP4Quantizer(row_scaled_nvfp4=True).name
        'nvfp4-rowscaled'
        """
        parts = ["nvfp4"]
        if self.with_2d_quantization:
            parts.append("2d")
        if self.row_scaled_nvfp4:
            parts.append("rowscaled")
        if self.with_rht:
            parts.append("rht" if self.with_random_sign_mask else "rht-nosign")
        if self.stochastic_rounding:
            parts.append("sr")
        if self.nvfp4_use_4over6:
            parts += ["4over6", self.nvfp4_4over6_err_mode.lower(), str(self.nvfp4_e4m3_max)]
            if self.nvfp4_4over6_err_use_fast_math:
                parts.append("fast")
        if self.scale_override != 1:
            parts.append(f"so{self.scale_override:g}")
        return "-".join(parts)


def _te_rht(x2, src_dtype, with_sign_mask):
    """TE's reference RHT of rows of ``x2`` (float32 values) in the input's dtype."""
    n = x2.shape[1]
    if n % RHT_SIZE:
        raise ValueError(f"with_rht needs a multiple of {RHT_SIZE} elements along the block axis, got {n}")
    signs = np.asarray(TE_WGRAD_SIGNS if with_sign_mask else (1,) * RHT_SIZE, dtype=np.float64)
    r = signs[:, None] * hadamard_matrix(RHT_SIZE) * 0.25
    blocks = x2.astype(np.float64).reshape(x2.shape[0], n // RHT_SIZE, RHT_SIZE)
    # each output is 16 terms +-u/4 of a bfloat16/float32 u: exact in float64 while a block's terms
    # span at most 25 binades (module docstring, step 6); one float32 rounding models the fp32 accumulator
    y = (blocks @ r).reshape(x2.shape).astype(np.float32)
    if src_dtype in (_BF16, np.dtype(np.float16)):
        y = y.astype(src_dtype).astype(np.float32)
    return y


def _err_sum(terms):
    """fl32 sum of ``terms[..., i]`` over the last axis in index order, starting from 0."""
    acc = np.zeros(terms.shape[:-1], np.float32)
    for i in range(terms.shape[-1]):
        acc = np.add(acc, terms[..., i], dtype=np.float32)
    return acc


def _tree16(err_rows):
    """Sum 16 consecutive rows (axis 0) as TE's warp reduction: r+8, r+4, r+2, r+1."""
    m = err_rows.shape[0]
    t = err_rows.reshape(m // _BLOCK, _BLOCK, *err_rows.shape[1:])
    for half in (8, 4, 2, 1):
        t = np.add(t[:, :half], t[:, half:2 * half], dtype=np.float32)
    return t[:, 0]


def _quantize_rows(x2, amax_rows, q: NVFP4Quantizer, encode_options):
    """TE's ``_quantize_blockwise_reference`` on a 2-D float32 array with blocks along rows.

    ``amax_rows``: float32 scalar (per tensor) or (M, 1) (row-scaled).
    Returns (codes, bcodes, scale_inv, scale, s_enc, amax_dec) with scales per block;
    ``s_enc``/``amax_dec`` are those of the elements (step 9: from ``fl32(amax * scale_override)``).
    """
    m, n = x2.shape
    tile_y = _BLOCK if q.with_2d_quantization else 1
    mp, np_ = -(-m // tile_y) * tile_y, -(-n // _BLOCK) * _BLOCK
    xp = np.zeros((mp, np_), np.float32)
    xp[:m, :n] = x2
    nb = np_ // _BLOCK
    e2m1, e4m3 = get_format("e2m1fn"), get_format("e4m3fn")

    def per_tensor(a):
        """(S_enc, S_enc per block row, S_dec per block row, amax per block row) of amax ``a``."""
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            se = np.fmin(np.divide(F32(q.nvfp4_e4m3_max * 6), a, dtype=np.float32), FLT_MAX)
            se = np.where((a == 0) | (se == 0), F32(1), se).astype(np.float32)
        if not a.ndim:
            return se, se, np.divide(F32(1), se, dtype=np.float32), a
        # row-scaled: (M, 1) -> (Mp, 1, 1), padding rows with S_enc 1 and amax 0
        pad = np.ones((mp, 1), np.float32)
        pad[:m] = se
        a_b = np.zeros((mp, 1), np.float32)
        a_b[:m] = a
        return se, pad[:, :, None], np.divide(F32(1), pad, dtype=np.float32)[:, :, None], a_b[:, :, None]

    # the block scales come from the amax, the elements' per-tensor scale from amax * scale_override
    _, s_enc_blk, _, _ = per_tensor(amax_rows)
    amax_dec = amax_rows
    if q.scale_override != 1:
        with np.errstate(over="ignore"):
            amax_dec = np.multiply(amax_rows, F32(q.scale_override), dtype=np.float32)
    s_enc, s_enc_b, s_dec_b, amax_b = per_tensor(amax_dec)

    blocks = xp.reshape(mp, nb, _BLOCK)
    with np.errstate(invalid="ignore"):
        vec = np.fmax.reduce(np.abs(blocks), axis=-1, keepdims=True)      # (Mp, nb, 1)
    if tile_y > 1:
        tiles = vec.reshape(mp // _BLOCK, _BLOCK, nb, 1)
        vec = np.repeat(np.fmax.reduce(tiles, axis=1), _BLOCK, axis=0)

    def elements(dcodes):
        d = decode(dcodes, e4m3, dtype=np.float32)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            inv = np.multiply(d, s_dec_b, dtype=np.float32)
            scale = np.fmin(np.divide(F32(1), inv, dtype=np.float32), FLT_MAX).astype(np.float32)
            y = np.multiply(blocks, scale, dtype=np.float32)
        return encode(y, e2m1, saturate=True, **encode_options), inv, scale, d

    with np.errstate(over="ignore", invalid="ignore"):
        if not q.nvfp4_use_4over6:
            mult = np.multiply(s_enc_blk, F32(F32(1) / F32(6)), dtype=np.float32)
            dcodes = encode(np.multiply(vec, mult, dtype=np.float32), e4m3, saturate=True)
            codes, inv, scale, _ = elements(dcodes)
        else:
            base = np.multiply(np.divide(vec, F32(6), dtype=np.float32), s_enc_blk, dtype=np.float32)
            d6 = encode(base, e4m3, saturate=True)
            d4 = encode(np.multiply(base, F32(1.5), dtype=np.float32), e4m3, saturate=True)
            c6, inv6, sc6, f6 = elements(d6)
            c4, inv4, sc4, f4 = elements(d4)
            err6 = _candidate_error(blocks, c6, d6, f6, s_enc_b, amax_b, q)
            err4 = _candidate_error(blocks, c4, d4, f4, s_enc_b, amax_b, q)
            if tile_y > 1:
                err6, err4 = (np.repeat(_tree16(e), _BLOCK, axis=0) for e in (err6, err4))
            use4 = (err4 < err6)[..., None]                               # (Mp, nb, 1)
            dcodes, inv, scale = np.where(use4, d4, d6), np.where(use4, inv4, inv6), np.where(use4, sc4, sc6)
            codes = np.where(use4, c4, c6)
    codes = codes.reshape(mp, np_)[:m, :n]
    per_block = (slice(0, m, tile_y), slice(None), 0)
    return (codes, dcodes[per_block], inv[per_block].astype(np.float32),
            scale[per_block].astype(np.float32), s_enc, amax_dec)


def _candidate_error(blocks, codes, dcodes, d, s_enc_b, amax_b, q):
    """Per-(row, block) float32 error of one 4over6 candidate, TE's order (module notes, step 5)."""
    qv = decode(codes, get_format("e2m1fn"), dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        if q.nvfp4_4over6_err_use_fast_math:
            cand = np.multiply(qv, d, dtype=np.float32)                 # exact: an FP16 product in TE
            cand = np.where((dcodes & 0x7F) == 0x7F, np.float32(np.nan), cand)
            diff = np.subtract(cand, np.multiply(blocks, s_enc_b, dtype=np.float32), dtype=np.float32)
        else:
            denom = F32(6 * q.nvfp4_e4m3_max)
            val = np.multiply(np.multiply(qv, d, dtype=np.float32), amax_b, dtype=np.float32)
            diff = np.subtract(np.divide(val, denom, dtype=np.float32), blocks, dtype=np.float32)
        e = np.abs(diff) if q.nvfp4_4over6_err_mode == "MAE" else np.multiply(diff, diff, dtype=np.float32)
    return _err_sum(e)


def quantize_nvfp4_te(x, quantizer: NVFP4Quantizer | None = None, *, axis=-1, global_amax=None,
                      rng=None, random_bits=None) -> ScaledTensor:
    """Quantize to NVFP4 exactly as Transformer Engine's ``NVFP4QuantizerRef`` with ``quantizer``'s options.

    The steps, their float32 operations and TE's sources are in the module
    docstring (:mod:`fp8emu.scaling.nvfp4_te`).  TE quantizes a 2-D
    ``(M, N)`` tensor row-wise along ``N`` and, for its column-wise copy, the
    transpose; here the blocks run along ``axis``: ``axis=-1`` is TE's
    row-wise output, ``axis=0`` of a 2-D array its column-wise output
    (``codes.T`` is TE's ``data_t``).  Other dimensions are flattened into
    rows, as TE views a 3-D input as ``(-1, N)``.

    Parameters
    ----------
    x : array_like
        float32, bfloat16 (``ml_dtypes.bfloat16``), float16 or float64 values
        (float64 is rounded to float32).  The dtype matters only for
        ``with_rht`` (the transform is a matmul in that dtype).
    quantizer : NVFP4Quantizer, optional
        The options (default: TE's default ``NVFP4Quantizer()``).
    axis : int, keyword-only
        Axis along which the 16-element blocks run.
    global_amax : float or array_like, optional, keyword-only
        The global amax ``A`` to use instead of ``max|x|`` (after the RHT);
        with ``row_scaled_nvfp4`` one value per line along ``axis`` (shape of
        ``x`` with ``axis`` of length 1, or the flattened row count).
    rng : numpy.random.Generator or int, optional, keyword-only
        Randomness for ``stochastic_rounding``.
    random_bits : array_like of unsigned int, optional, keyword-only
        Explicit random bits for ``stochastic_rounding``, shape of ``x``
        (see :func:`fp8emu.encode`).

    Returns
    -------
    ScaledTensor
        ``codes`` (E2M1, shape of ``x``), ``block_scale_codes`` (E4M3),
        ``scale_inv`` / ``scale`` per block, ``global_scale = S_enc`` and
        ``global_amax`` (arrays of shape ``x.shape`` with ``axis`` of length 1
        when row-scaled; with ``scale_override`` they are ``S_enc'`` and
        ``A' = fl32(amax * scale_override)``), ``scale_max = nvfp4_e4m3_max``;
        ``dequantize()`` returns the (transformed, with RHT) values
        ``element * scale_inv``.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[4.0, 1.5, 3.0, 0.0, 5.0, 2.25, -0.7, 1.0] * 2], np.float32)
    >>> t = quantize_nvfp4_te(x, NVFP4Quantizer(nvfp4_use_4over6=True, nvfp4_e4m3_max=256))
    >>> t.dequantize()[0, :8].tolist()         # map-to-4 won: the block max 5 sits on 4 * 1.25
    [3.75, 1.25, 2.5, 0.0, 5.0, 2.5, -0.625, 1.25]
    >>> t = quantize_nvfp4_te(np.array([[6.0, 1.0], [0.5, 0.25]]), NVFP4Quantizer(row_scaled_nvfp4=True))
    >>> t.global_amax.ravel().tolist(), t.dequantize().tolist()
    ([6.0, 0.5], [[6.0, 1.0], [0.5, 0.25]])
    >>> y = np.array([[6.0, 1.8] + [0.0] * 14], np.float32)    # Quartet II's override: the max clips
    >>> [quantize_nvfp4_te(y, NVFP4Quantizer(scale_override=s)).dequantize()[0, :2].tolist() for s in (1, 0.93)]
    [[6.0, 2.0], [5.579999923706055, 1.8600000143051147]]
    """
    q = NVFP4Quantizer() if quantizer is None else quantizer
    if not isinstance(q, NVFP4Quantizer):
        raise TypeError(f"quantizer must be an NVFP4Quantizer, got {type(q).__name__}")
    src = np.asarray(x)
    src_dtype = src.dtype
    xf = as_f32(src)
    if xf.ndim == 0:
        raise ValueError("quantize_nvfp4_te needs an array with at least one dimension")
    if q.with_2d_quantization and xf.ndim != 2:
        raise ValueError("with_2d_quantization needs a 2-D array (TE tiles the (M, N) view; "
                         "reshape to 2-D first)")
    ax = axis if is_integer(axis) else None
    if ax is None or not -xf.ndim <= ax < xf.ndim:
        raise ValueError(f"axis {axis!r} is out of range for an array of {xf.ndim} dimensions")
    ax = int(ax) % xf.ndim
    if not q.stochastic_rounding and (rng is not None or random_bits is not None):
        raise ValueError("rng and random_bits apply only to stochastic_rounding=True")
    moved = np.moveaxis(xf, ax, -1)
    lead, n = moved.shape[:-1], moved.shape[-1]
    x2 = np.ascontiguousarray(moved).reshape(math.prod(lead), n)   # -1 cannot be inferred when n == 0
    if q.with_rht:
        x2 = _te_rht(x2, src_dtype, q.with_random_sign_mask)
    m = x2.shape[0]

    if global_amax is None:
        amax = F32(amax_nan_ignoring(x2, None)) if not q.row_scaled_nvfp4 else \
            amax_nan_ignoring(x2, (1,)).astype(np.float32).reshape(m, 1)
    else:
        g = np.asarray(global_amax)
        if g.dtype.kind not in "iuf":
            raise TypeError(f"global_amax must be real, got dtype {g.dtype}")
        if q.row_scaled_nvfp4:
            if g.size != m:
                raise ValueError(f"row-scaled global_amax needs {m} values (one per line along axis), "
                                 f"got shape {g.shape}")
            amax = given_amax_f32(g, global_amax).reshape(m, 1)
        else:
            if g.shape != ():
                raise TypeError(f"global_amax must be a real scalar, got shape {g.shape}")
            amax = F32(given_amax_f32(g, global_amax))

    options = {}
    if q.stochastic_rounding:
        options["rounding"] = "stochastic"
        if random_bits is not None:
            bits = np.asarray(random_bits)
            if bits.shape != xf.shape:
                raise ValueError(f"random_bits must have the shape of x {xf.shape}, got {bits.shape}")
            bits2 = np.ascontiguousarray(np.moveaxis(bits, ax, -1)).reshape(m, n)
            mp = -(-m // (_BLOCK if q.with_2d_quantization else 1)) * (_BLOCK if q.with_2d_quantization else 1)
            padded = np.zeros((mp, -(-n // _BLOCK) * _BLOCK), bits.dtype)
            padded[:m, :n] = bits2
            options["random_bits"] = padded.reshape(mp, -1, _BLOCK)
        elif rng is not None:
            options["rng"] = rng
    codes2, bcodes2, inv2, scale2, s_enc, amax = _quantize_rows(x2, amax, q, options)

    def back(a2, last):
        rows = (a2.shape[0],) if q.with_2d_quantization else lead
        return np.moveaxis(a2.reshape(*rows, last), -1, ax)

    nb = bcodes2.shape[1]
    codes = back(codes2, n)
    bcodes, inv, scale = back(bcodes2, nb), back(inv2, nb), back(scale2, nb)
    blk = tuple(_BLOCK if (d == ax or q.with_2d_quantization) else 1 for d in range(xf.ndim))
    if q.row_scaled_nvfp4:
        keep = lead + (1,)
        g_scale = np.moveaxis(np.asarray(s_enc, np.float32).reshape(keep), -1, ax)
        g_amax = np.moveaxis(amax.reshape(keep), -1, ax)
    else:
        g_scale, g_amax = F32(s_enc), F32(amax)
    return ScaledTensor(codes=np.ascontiguousarray(codes), fmt=get_format("e2m1fn"), scale=scale,
                        scale_inv=inv, block=blk, axis=ax, shape=xf.shape,
                        block_scale_codes=np.ascontiguousarray(bcodes), global_scale=g_scale,
                        recipe="te-" + q.name, global_amax=g_amax, scale_max=F32(q.nvfp4_e4m3_max))
