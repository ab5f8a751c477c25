"""FP8 attention, emulated step by step as the kernels compute it.

:func:`attention` runs a blocked forward pass of scaled-dot-product attention
the way a flash-attention kernel does, every step an explicit option of a
frozen :class:`AttentionRecipe`:

1. **Quantization** of Q, K, V (``q_format``/``k_format``/``v_format``): an
   8-bit format, ``"bfloat16"``/``"float16"`` (round to nearest even) or None
   (float32).  8-bit operands get descales per tensor or per head
   or per KV head (``granularity``), either given (``descales=``; then
   ``scale = fl32(1 / descale)``) or derived from the amax as host code does
   (``scale_rule="amax"``: Transformer Engine's ``scale = fl32(fmax / amax)``,
   ``descale = fl32(1 / scale)``); the codes are ``encode(fl32(x * scale),
   saturate=True)``.
2. **S = Q·Kᵀ** per (query chunk, key block) through a GEMM accumulator of
   :mod:`fp8emu.gemm` (``qk_accumulator``; ``"hopper"`` models the Hopper
   wgmma chain, bit-exact for FP8 operands).
3. **Softmax scale** folded with log2(e) in float32 (``fold``, below) and the
   descales of Q and K folded into it, as the kernels do.
4. **Online softmax** over key blocks of ``block_n`` keys in ``key_order``:
   running row max ``m``, rescale factor ``alpha = exp2(fl32(fl32(m_old -
   m_new) * scale_log2))`` for O and the row sum; with ``rescale_threshold =
   t > 0`` the max is only updated when it grew by more than ``t`` (log2
   units), as FlashAttention-4 does, so P can exceed ``2**max_offset``.
5. **P = exp2(x)** in float32 with ``x = fl32(s * scale_log2 - b)`` (one
   rounding, the FMA the kernels use) and ``b = fl32(fl32(m * scale_log2) -
   max_offset)``: FA3's max-offset pre-scale puts P in ``[0, 2**max_offset]``.
   ``p_scale`` then multiplies P in float32 (FlashInfer's P quantization scale).
   exp2 is the pluggable ``exp2`` function (default :func:`exp2_f32`).
6. **Row sum** ``l = fl32(l * alpha)`` plus the block's P in key order
   (sequential float32 additions), from the float32 P before ``p_scale``
   (``row_sum="float32"``) or from the quantized P times ``fl32(1 / p_scale)``
   (``row_sum="quantized"``).
7. **Cast of P** to ``p_format`` (RNE), saturating (``p_saturate=True``: to
   +-max) or not (an overflow becomes NaN/Inf as the format has them).
8. **O += P·V** through ``pv_accumulator``: O is multiplied by alpha in
   float32, then each block's product is added with O as the accumulator input
   (the MMA's C operand) of the block's first step; with ``promote_every = n``
   the tensor-core partial sum is added into a separate float32 O every n key
   blocks and restarts at zero (None: never; O stays in the chain); both are
   multiplied by alpha.  Non-finite P codes (a non-saturating cast) give NaN/Inf
   outputs by IEEE rules.
9. **Normalisation**: ``normalize="reciprocal"``: ``O * fl32(fl32(1 / l) * d)``
   with ``d = v_descale``, or ``fl32(v_descale * fl32(1 / p_scale))`` when
   ``p_scale != 1`` (FA3; a zero or NaN sum gives 0);
   ``"divide"``: ``fl32(O / l)`` then the descale (Triton's ``acc / l_i``).
   ``lse`` is the natural log-sum-exp ``m * scale_log2 * ln 2 + ln(l) -
   max_offset * ln 2`` computed in float64 and rounded to float32.

``fold``:
``"fa3"``: ``scale_log2 = fl32(fl32(softmax_scale * log2e) * fl32(qd * kd))``
with ``softmax_scale * log2e`` computed in double first;
``"flashinfer"``: ``fl32(fl32(fl32(qd * kd) * softmax_scale) * log2e)``;
``"triton"``: ``fl32(fl32(softmax_scale) * fl32(1.44269504))`` (no descales);
``"none"``: the scale is applied to S first (``s = fl32(S * softmax_scale *
qd * kd)`` with one float32 product per factor) and exp is natural, computed as
``exp2(fl32(x * log2e))`` (``__expf`` is ``ex2.approx`` of that product).

Masks (causal, aligned bottom-right as in FlashAttention when the query and key
lengths differ; ``kv_len`` padding) set S to -inf before the row max; a row
whose keys are all masked gives O = 0 and lse = -inf.  GQA: query head h uses
key/value head ``h // (H // H_kv)``.

**Transcendentals are a stated model.**  GPUs compute exp2 with
``ex2.approx.ftz.f32`` (max error about 2 ulp, not correctly rounded); the
default :func:`exp2_f32` is float64 exp2 rounded to float32.  Attention results
are therefore *algorithm-exact* (every rounding step as the kernel orders it)
but not bit-exact against a GPU until exp2 recordings replace the model: pass
any vectorised float32 -> float32 function as ``exp2``.

Accumulators on non-8-bit operands: tensor-core (``"mma"``) models need 8-bit
operands and are refused otherwise; ``"fp32"`` adds float32-rounded products
in K order (no FMA); ``"exact"`` is exact for 8-bit operands and, for wider
ones, a float64 matrix product rounded once to float32 (relative error of the
sum below ``K * 2**-53`` before the final rounding).

Memory is bounded by ``query_chunk x block_n`` (never the full S matrix).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable

import ml_dtypes
import numpy as np

from ..codec import decode, encode
from ..formats import Format, get_format
from ..registry import named
from ..gemm import Accumulator, get_accumulator
from ..gemm.fparith import add_scaled_f32
from ..gemm.kernels import exact_dot, mma_dot, special_masks, values_and_exponents
from ..scaling import current_scale

__all__ = ["AttentionRecipe", "AttentionResult", "AttentionReport", "RECIPES", "get_recipe", "attention",
           "reference_attention", "exp2_f32", "quantize_qkv", "off_recipe", "fa3_fp8", "fa4_sm100_fp8",
           "fa4_sm100_fp8_pre2717", "flashinfer_fp8_prefill", "flashinfer_fp8_decode", "vllm_fp8_kv_decode",
           "triton_tutorial_fp8"]

F32 = np.float32
LOG2E = math.log2(math.e)
_WIDE = {"bfloat16": np.dtype(ml_dtypes.bfloat16), "float16": np.dtype(np.float16)}
#: Exponent given to zero terms in the exponent arrays of the GEMM kernels (as fp8emu.gemm.kernels does).
_ZERO_EXP = -16000


def exp2_f32(x):
    """Default exp2 model: float64 ``exp2`` of a float32 argument, rounded to float32.

    Correctly rounded except where the float64 result lies within one float64
    ulp of a float32 rounding boundary (not excluded by proof).  GPUs use
    ``ex2.approx``; replace this function to model it.

    Examples
    --------
    >>> float(exp2_f32(np.float32(-1.0))), float(exp2_f32(np.float32(8.0)))
    (0.5, 256.0)
    """
    with np.errstate(over="ignore", under="ignore"):
        return np.exp2(np.asarray(x, F32).astype(np.float64)).astype(F32)


def _f32_number(v, what, *, positive, reciprocal=False):
    """Check a real number as the float32 it is used as: finite, > 0 (``positive``) or >= 0, and
    (``reciprocal``) with a finite float32 ``fl32(1 / v)``.  A value that is fine in float64 but
    overflows or flushes to zero in float32 would otherwise give NaN/Inf outputs silently."""
    want = "> 0" if positive else ">= 0"
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.floating, np.integer)):
        raise ValueError(f"{what} must be a finite real number {want}, got {v!r}")
    with np.errstate(over="ignore", divide="ignore"):
        v32 = F32(v)
        inv = F32(1.0 / float(v)) if reciprocal and float(v) != 0 else F32(1)
    if not np.isfinite(v32) or v32 < 0 or (positive and v32 == 0) or (v32 == 0) != (v == 0) \
            or not np.isfinite(inv):
        raise ValueError(f"{what} must be a finite number {want} as float32 (the type it is used in)"
                         + (", with a finite float32 reciprocal" if reciprocal else "")
                         + f"; got {v!r}, which is {float(v32)!r} in float32")


def _fmt_or_wide(name, what, allow_none=True):
    if name is None:
        if allow_none:
            return None
        raise ValueError(f"{what} must be a format name")
    if isinstance(name, str) and name in _WIDE:
        return name
    try:
        fmt = get_format(name)
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"{what} must be an 8-bit format name, 'bfloat16', 'float16' or None, "
                         f"got {name!r}") from None
    if fmt.bits > 8:
        raise ValueError(f"{what} must be a format of at most 8 bits, got {fmt.name}")
    return fmt.name


@dataclasses.dataclass(frozen=True)
class AttentionRecipe:
    """How one kernel computes FP8 attention, step by step (see :mod:`fp8emu.attention`).

    Parameters
    ----------
    name : str
        Label used in reports.
    q_format, k_format, v_format : str or None
        Operand formats: an 8-bit format (codes with descales), ``"bfloat16"``,
        ``"float16"`` or None (float32, no quantization).
    granularity : {"tensor", "head", "kv-head"}
        One descale per tensor, per head, or per KV head (the query heads of a GQA group
        share one Q descale, as FlashAttention's ``(batch, kv_head)`` descales).
    scale_rule : {"amax", "given", "none"}
        ``"amax"``: host-side ``scale = fl32(fmax / amax)``; ``"given"``: from
        ``descales=``; ``"none"``: descale 1 (values cast as they are).
    qk_accumulator, pv_accumulator : str or Accumulator
        GEMM accumulators (:func:`fp8emu.gemm.get_accumulator`); their own
        promotion and split-K are not used (see ``promote_every``).
    block_n : int
        Keys per block of the online softmax.
    key_order : {"forward", "reverse"}
        Order in which key blocks are visited (FA3 and FlashInfer go last to first).
    fold : {"fa3", "flashinfer", "triton", "none"}
        How softmax scale, log2(e) and descales are folded (module docstring).
    fma : bool
        ``x = fl32(s * c - b)`` with one rounding (True) or two.
    max_offset : int
        FA3's max-offset pre-scale: P in ``[0, 2**max_offset]``.
    rescale_threshold : float
        Keep the stale row max while it grew by at most this (log2 units); 0 disables.
    p_scale : float
        Multiplies P in float32 before the cast (FlashInfer: the format's max).
    p_format : str or None
        Format of P for P·V (None: float32).
    p_saturate : bool
        Saturating cast of P.
    row_sum : {"float32", "quantized"}
        Row sum from the float32 P or from the quantized P.
    promote_every : int or None
        Key blocks after which the P·V partial sum is added into a float32 O.
    normalize : {"reciprocal", "divide"}
        Final normalisation (module docstring).
    exp2 : callable
        float32 -> float32 exp2 model (default :func:`exp2_f32`).
    query_chunk : int
        Query rows processed together (memory bound; no effect on the numbers).

    The defaults are FA3's (:func:`fa3_fp8`) with one descale per tensor.

    Examples
    --------
    >>> r = get_recipe("fa3-fp8")
    >>> r.max_offset, r.p_format, r.promote_every
    (8, 'e4m3fn', None)
    >>> dataclasses.replace(r, promote_every=4).promote_every
    4
    """

    name: str = "custom"
    q_format: str | None = "e4m3fn"
    k_format: str | None = "e4m3fn"
    v_format: str | None = "e4m3fn"
    granularity: str = "tensor"
    scale_rule: str = "amax"
    qk_accumulator: str | Accumulator = "hopper"
    pv_accumulator: str | Accumulator = "hopper"
    block_n: int = 128
    key_order: str = "reverse"
    fold: str = "fa3"
    fma: bool = True
    max_offset: int = 8
    rescale_threshold: float = 0.0
    p_scale: float = 1.0
    p_format: str | None = "e4m3fn"
    p_saturate: bool = True
    row_sum: str = "float32"
    promote_every: int | None = None
    normalize: str = "reciprocal"
    exp2: Callable = exp2_f32
    query_chunk: int = 2048

    def __post_init__(self):
        for f in ("q_format", "k_format", "v_format", "p_format"):
            object.__setattr__(self, f, _fmt_or_wide(getattr(self, f), f))
        choices = {"granularity": ("tensor", "head", "kv-head"), "scale_rule": ("amax", "given", "none"),
                   "key_order": ("forward", "reverse"), "fold": ("fa3", "flashinfer", "triton", "none"),
                   "row_sum": ("float32", "quantized"), "normalize": ("reciprocal", "divide")}
        for f, ok in choices.items():
            if getattr(self, f) not in ok:
                raise ValueError(f"AttentionRecipe {f} must be one of {ok}, got {getattr(self, f)!r}")
        for f, ops in (("qk_accumulator", ("q_format", "k_format")), ("pv_accumulator", ("p_format", "v_format"))):
            acc = get_accumulator(getattr(self, f))   # raises on an unknown name
            wide = [o for o in ops if getattr(self, o) is None or getattr(self, o) in _WIDE]
            if acc.kind == "mma" and wide:   # refused here, not after the Q·K pass has run
                raise ValueError(f"AttentionRecipe {f}={acc.name!r} is a tensor-core model that needs 8-bit "
                                 f"operands, but {', '.join(wide)} {'is' if len(wide) == 1 else 'are'} not; use "
                                 "'fp32' or 'exact'")
        for f in ("block_n", "query_chunk"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"AttentionRecipe {f} must be a positive integer, got {v!r}")
        pe = self.promote_every
        if pe is not None and (isinstance(pe, bool) or not isinstance(pe, (int, np.integer)) or pe < 1):
            raise ValueError(f"AttentionRecipe promote_every must be None or a positive integer, got {pe!r}")
        mo = self.max_offset
        if isinstance(mo, bool) or not isinstance(mo, (int, np.integer)) or not 0 <= mo <= 64:
            raise ValueError(f"AttentionRecipe max_offset must be an integer in [0, 64], got {mo!r}")
        # both are used in float32 (p_scale also as fl32(1 / p_scale)): checked as float32
        _f32_number(self.rescale_threshold, "AttentionRecipe rescale_threshold", positive=False)
        _f32_number(self.p_scale, "AttentionRecipe p_scale", positive=True, reciprocal=True)
        if not callable(self.exp2):
            raise TypeError(f"AttentionRecipe exp2 must be a callable, got {type(self.exp2).__name__}")
        if self.fold == "triton" and self.scale_rule != "none" and any(
                f not in (None, *_WIDE) for f in (self.q_format, self.k_format)):
            raise ValueError("fold='triton' has no descales: use scale_rule='none' with 8-bit Q/K")
        if self.row_sum == "quantized" and self.p_format is None:
            raise ValueError("row_sum='quantized' needs a p_format")


# ----------------------------------------------------------------------------- named kernels


def fa3_fp8() -> AttentionRecipe:
    """FlashAttention-3 FP8 forward on Hopper (``"fa3-fp8"``).

    Source: Dao-AILab/flash-attention @ 0251105a2fb19d2957484b7f023cd8c115286ced:
    hopper/softmax.h (``scale_apply_exp2`` with ``Max_offset``, ``max_get_scale``, ``finalize``),
    hopper/flash_fwd_kernel_sm90.h (``softmax_scale_log2 *= q_descale * k_descale``;
    ``Softmax<..., Max_offset = Is_FP8 ? 8 : 0>``), hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp
    (``softmax_scale * M_LOG2E`` rounded to float; key blocks from the last down; ``rescale_o`` then the
    P·V wgmma into ``acc_o``; ``finalize(v_descale)``).  Descales per (batch, KV head); row sum from the
    float32 P; O never leaves the wgmma accumulator chain (``promote_every=None``).

    Unverified: the order of the row sum (a row is split over 4 threads whose sums are added at the end;
    modelled in key order), whether ``max * scale - max_offset`` is contracted into one FMA (modelled with
    two roundings), the key block (128 assumed for head dim 128), and that the wgmma C input aligns as in
    fp8emu's Hopper model (fitted to ``torch._scaled_mm``, not to attention).

    Examples
    --------
    >>> fa3_fp8().key_order
    'reverse'
    """
    return AttentionRecipe(name="fa3-fp8", granularity="kv-head", qk_accumulator="hopper",
                           pv_accumulator="hopper", block_n=128, key_order="reverse", fold="fa3",
                           max_offset=8, p_format="e4m3fn")


def fa4_sm100_fp8_pre2717() -> AttentionRecipe:
    """FlashAttention-4 (CuTe DSL, SM100) FP8 forward before PR #2717 (``"fa4-sm100-fp8-pre2717"``).

    Source: Dao-AILab/flash-attention, parent of 2409214a03797b168f648ea30df1adbc09ce658a,
    flash_attn/cute/flash_fwd_sm100.py (``max_offset = 8`` and ``rescale_threshold = 4.0`` for 8-bit
    inputs) and flash_attn/cute/softmax.py (``SoftmaxSm100``: the stale max is kept while
    ``(m_old - m_new) * scale_log2 >= -rescale_threshold``).  P then reaches ``2**12`` and saturates at
    448 (issue #2716).  The B200 tensor-core accumulators are not modelled here (``"exact"``).

    Examples
    --------
    >>> fa4_sm100_fp8_pre2717().rescale_threshold
    4.0
    """
    return AttentionRecipe(name="fa4-sm100-fp8-pre2717", granularity="kv-head", qk_accumulator="exact",
                           pv_accumulator="exact", block_n=128, key_order="reverse", fold="fa3",
                           max_offset=8, rescale_threshold=4.0, p_format="e4m3fn")


def fa4_sm100_fp8() -> AttentionRecipe:
    """FlashAttention-4 SM100 FP8 forward after the fix (``"fa4-sm100-fp8"``).

    Source: Dao-AILab/flash-attention @ 849f660f73b176e5ad5670e7f822c7fa9f3eaf8b (PR #2731, which followed
    #2717 at 2409214a), flash_attn/cute/flash_fwd_sm100.py: ``max_offset = 8`` and
    ``rescale_threshold = 0`` for 8-bit inputs.  Accumulators modelled as ``"exact"``.

    Examples
    --------
    >>> fa4_sm100_fp8().rescale_threshold
    0.0
    """
    return dataclasses.replace(fa4_sm100_fp8_pre2717(), name="fa4-sm100-fp8", rescale_threshold=0.0)


def flashinfer_fp8_prefill() -> AttentionRecipe:
    """FlashInfer SM90 FP8 prefill, ``StandardFP8Attention`` (``"flashinfer-fp8-prefill"``).

    Source: flashinfer-ai/flashinfer include/flashinfer/attention/hopper/variants.cuh @
    24bfeceab589034e5df4fe6a64512e0798bbf9fd (``p_scale`` = max of the KV type, ``scale_pv = scale_v /
    p_scale``, ``sm_scale_with_qk_log2 = scale_q[qo_head] * scale_k[kv_head] * sm_scale * log2e``),
    hopper/quantization/mainloop_mma.cuh @ 1cc390cd72d21b923c6c57ba24356865111049e7 (KV tiles from the last
    to the first; ``PQuantize`` after the online-softmax update; P cast to the KV type),
    hopper/attention_updater.cuh @ 93e1a2634e22355b0856246b032b285ad1d1da6b (row sum from the float32 P;
    no max offset).

    Unverified: how ``finalize(scale_pv)`` applies the scale (modelled as FA3's ``inv_sum * scale``), the
    tile size (128 assumed).

    Examples
    --------
    >>> flashinfer_fp8_prefill().p_scale
    448.0
    """
    return AttentionRecipe(name="flashinfer-fp8-prefill", granularity="head", qk_accumulator="hopper",
                           pv_accumulator="hopper", block_n=128, key_order="reverse", fold="flashinfer",
                           max_offset=0, p_scale=448.0, p_format="e4m3fn")


def flashinfer_fp8_decode() -> AttentionRecipe:
    """FlashInfer decode with an FP8 KV cache (``"flashinfer-fp8-decode"``).

    Source: flashinfer-ai/flashinfer include/flashinfer/attention/decode.cuh @
    9ca04e4d1a098235dd4188f004dd3812616e3823 (``SingleDecodeWithKVCacheKernel``, ``compute_qk``,
    ``update_local_state``): ``sm_scale *= log2e``; K and V loaded from the cache and converted to float
    (``cast_load``); float32 dot products on CUDA cores; ``o_scale = exp2(m_prev - m)``; P =
    ``exp2(s - m)`` stays float32 (no P quantization); ``d += p``; ``o = o * o_scale + p * v``; the state
    is normalised at the end.  Modelled with fp16 queries, e4m3 K/V with per-tensor scales folded as in
    the prefill variant and a final division.

    Not modelled: the kernel multiplies Q by ``sm_scale * log2e`` before the dot product (here the
    product scales S), masked keys get -5e4 rather than -inf, the dot product is a per-thread FMA chain
    plus a shuffle-xor tree (here sequential), the tile (16 keys assumed); where the FP8 k/v scales are
    applied (the Python wrapper; not read) and how ``state_t::normalize`` divides (state.cuh not read).

    Examples
    --------
    >>> flashinfer_fp8_decode().p_format is None
    True
    """
    return AttentionRecipe(name="flashinfer-fp8-decode", q_format="float16", granularity="tensor",
                           qk_accumulator="fp32", pv_accumulator="fp32", block_n=16, key_order="forward",
                           fold="flashinfer", max_offset=0, p_format=None, normalize="divide")


def vllm_fp8_kv_decode() -> AttentionRecipe:
    """vLLM paged-attention decode with an FP8 KV cache (``"vllm-fp8-kv-decode"``).

    Source: vllm-project/vllm csrc/attention/attention_kernels.cuh @
    5bc0e56c7a30800631543dd1a447e4e44fbd5bba: K and V e4m3 dequantized with ``k_scale`` / ``v_scale``
    (``scaled_convert``), ``qk = scale * dot`` in float32, natural ``__expf``, P converted to the query
    type (bf16 here) before P·V, float32 accumulators.  Per-head scales: ``granularity="head"``.

    Not modelled: the kernel is two-pass (global max, then P normalised by ``1 / (sum + 1e-6)`` before
    P·V; here the online form with a final division), the dequantized K/V are kept in float32 rather than
    rounded to bf16, and the reduction order across a thread group.

    Examples
    --------
    >>> vllm_fp8_kv_decode().q_format
    'bfloat16'
    """
    return AttentionRecipe(name="vllm-fp8-kv-decode", q_format="bfloat16", granularity="tensor",
                           qk_accumulator="fp32", pv_accumulator="fp32", block_n=16, key_order="forward",
                           fold="none", fma=False, max_offset=0, p_format="bfloat16", normalize="divide")


def triton_tutorial_fp8() -> AttentionRecipe:
    """Triton fused-attention tutorial, FP8 (e5m2) variant (``"triton-tutorial-fp8"``).

    Source: triton-lang/triton python/tutorials/06-fused-attention.py @
    dc6ee3ed2cf9b2b436544d6153351f9bc679cc61: ``qk_scale = sm_scale * 1.44269504``;
    ``m_ij = max(m_i, max(qk) * qk_scale)``; ``p = exp2(qk * qk_scale - m_ij)``;
    ``l_i = l_i * alpha + sum(p)``; ``acc *= alpha``; P cast to ``float8e5``; ``acc = dot(p, v, acc)``;
    ``acc / l_i`` at the end; keys in forward order; no descales.

    Unverified: whether ``qk * qk_scale - m_ij`` is contracted into an FMA (modelled as one), the order of
    ``tl.sum`` (modelled in key order), the autotuned ``BLOCK_N`` (64 assumed), and whether the fp8 cast
    saturates (modelled saturating).

    Examples
    --------
    >>> triton_tutorial_fp8().normalize
    'divide'
    """
    return AttentionRecipe(name="triton-tutorial-fp8", q_format="e5m2", k_format="e5m2", v_format="e5m2",
                           scale_rule="none", qk_accumulator="hopper", pv_accumulator="hopper", block_n=64,
                           key_order="forward", fold="triton", max_offset=0, p_format="e5m2",
                           normalize="divide")


#: The named kernel configurations (each built by the function of the same name, which cites its source).
RECIPES = {r.name: r for r in (fa3_fp8(), fa4_sm100_fp8_pre2717(), fa4_sm100_fp8(), flashinfer_fp8_prefill(),
                               flashinfer_fp8_decode(), vllm_fp8_kv_decode(), triton_tutorial_fp8())}


def get_recipe(recipe) -> AttentionRecipe:
    """The :class:`AttentionRecipe` for a name in :data:`RECIPES` or a recipe object.

    Examples
    --------
    >>> get_recipe("triton-tutorial-fp8").p_format
    'e5m2'
    """
    return named(recipe, AttentionRecipe, RECIPES, "attention recipe", "fp8emu.attention.AttentionRecipe")


def off_recipe(accumulator="fp32", **changes) -> AttentionRecipe:
    """A recipe with every quantization step off (float32 operands and P), for comparisons.

    Examples
    --------
    >>> off_recipe().p_format is None
    True
    """
    base = dict(name=f"float32-{accumulator}", q_format=None, k_format=None, v_format=None, scale_rule="none",
                qk_accumulator=accumulator, pv_accumulator=accumulator, max_offset=0, p_format=None)
    base.update(changes)
    return AttentionRecipe(**base)



# ----------------------------------------------------------------------------- operands
class _Operand:
    """A quantized operand of one head: float64 values, int16 exponents, codes (8-bit only) and format."""

    __slots__ = ("values", "exps", "codes", "fmt", "mbits")

    def __init__(self, values, exps, codes, fmt, mbits):
        self.values, self.exps, self.codes, self.fmt, self.mbits = values, exps, codes, fmt, mbits


def _wide_operand(x32, name):
    """float32 (or bf16/fp16-rounded) values with exponents for the exact/fp32 kernels."""
    if name in _WIDE:
        x32 = x32.astype(_WIDE[name]).astype(F32)
        mbits = 7 if name == "bfloat16" else 10
    else:
        mbits = 23
    v = x32.astype(np.float64)
    _, e = np.frexp(v)
    e = np.where(v == 0, _ZERO_EXP, e.astype(np.int64) - 1).astype(np.int16)
    return _Operand(v, e, None, None, mbits)


def _descales(x32, fmt, recipe, given, what, group=1):
    """(descale, scale) float32 arrays of shape (H,) of one operand: ``descale`` as the kernel receives
    it and ``scale`` the multiplier the codes are made with.  ``group``: query heads per KV head (for
    ``granularity="kv-head"``, where the query heads of a group share one descale)."""
    H = x32.shape[0]
    ones = np.ones(H, F32)
    if recipe.scale_rule == "none" or fmt is None:
        return ones, ones
    gran = recipe.granularity
    if recipe.scale_rule == "given":
        if given is None:
            raise ValueError(f"scale_rule='given' needs descales=(q, k, v); {what} descale missing")
        d = np.asarray(given, dtype=np.float64)
        n = H // group if gran == "kv-head" else H
        if d.size == 1:
            d = np.full(H, float(d.reshape(())))
        elif gran == "tensor" or d.shape != (n,):
            raise ValueError(f"{what} descale must be a scalar" + ("" if gran == "tensor" else
                                                                   f" or shape ({n},)") + f", got {d.shape}")
        elif gran == "kv-head":
            d = np.repeat(d, group)
        with np.errstate(over="ignore", divide="ignore", under="ignore", invalid="ignore"):
            d32 = d.astype(F32)   # checked again as the float32 the kernel receives, with its reciprocal
            s32 = np.divide(F32(1), d32, dtype=F32)
        if not (np.all(np.isfinite(d32)) and np.all(d32 > 0) and np.all(np.isfinite(s32)) and np.all(s32 > 0)):
            raise ValueError(f"{what} descales must be finite and positive in float32 (the type the kernel "
                             f"uses), with a finite float32 reciprocal; got {d.tolist()!r}")
        return d32, s32
    amax = np.abs(x32).max(axis=(1, 2)) if x32.size else np.zeros(H, F32)
    if gran == "tensor":
        amax = np.full(H, amax.max(initial=0))
    elif gran == "kv-head" and group > 1:
        amax = np.repeat(amax.reshape(-1, group).max(axis=1), group)
    scale = np.array([current_scale(a, fmt) for a in amax], F32)
    return np.divide(F32(1), scale, dtype=F32), scale


def quantize_qkv(x, fmt_name, scale):
    """Codes of ``x`` (H, N, d) as ``encode(fl32(x * scale[h]), saturate=True)`` (uint8).

    ``scale`` is float32 of shape (H,): Transformer Engine's ``fl32(fmax / amax)`` for
    ``scale_rule="amax"``, ``fl32(1 / descale)`` for given descales.  ``x`` is checked as
    :func:`attention` checks its operands (finite, (H, N, d) or (N, d)), ``scale`` as float32
    values that are finite and > 0, and ``fmt_name`` must be an 8-bit format.

    Examples
    --------
    >>> c = quantize_qkv(np.full((1, 1, 2), 3.0, np.float32), "e4m3fn", np.array([2.0], np.float32))
    >>> decode(c, "e4m3fn").tolist()
    [[[6.0, 6.0]]]
    """
    x = _as_heads(x, "x")
    fmt = _fmt_or_wide(fmt_name, "fmt_name", allow_none=False)
    if fmt in _WIDE:
        raise ValueError(f"fmt_name must be an 8-bit format (codes), got {fmt_name!r}")
    with np.errstate(over="ignore"):
        s = np.asarray(scale, dtype=np.float64).astype(F32).reshape(-1) if not isinstance(scale, str) else None
    if s is None or s.shape != (x.shape[0],) or not (np.all(np.isfinite(s)) and np.all(s > 0)):
        raise ValueError(f"scale must be {x.shape[0]} finite float32 values > 0 (one per head), got {scale!r}")
    return _quantize_qkv(x, fmt, s)


def _quantize_qkv(x, fmt_name, scale):
    """:func:`quantize_qkv` without the checks, for operands :func:`attention` has checked."""
    return encode(np.multiply(np.asarray(x, F32), np.asarray(scale, F32)[:, None, None], dtype=F32), fmt_name,
                  saturate=True)


def _quantized_operand(codes, fmt_name):
    fmt = get_format(fmt_name)
    v, e = values_and_exponents(codes, fmt)
    return _Operand(v, e, codes, fmt, fmt.mbits)


# ----------------------------------------------------------------------------- GEMM pieces
def _chain_acc(acc: Accumulator) -> Accumulator:
    """The accumulator's step model with no promotion and no split-K (the recipe decides those)."""
    if acc.kind != "mma":
        return acc
    return dataclasses.replace(acc, promote=None, split_k=None)


def _matmul(a: _Operand, b_t: _Operand, acc: Accumulator, c=None):
    """float32 (M, N) result of ``c + a @ b_t.T`` summed as ``acc`` does (``c``: accumulator input)."""
    va, ea = a.values, a.exps
    vb, eb = b_t.values.T, b_t.exps.T
    if acc.kind == "mma":
        if a.fmt is None or b_t.fmt is None:
            raise ValueError(f"tensor-core accumulator {acc.name!r} needs 8-bit operands; use 'fp32' or "
                             "'exact' with float32/bf16/fp16 operands")
        return mma_dot(va, ea, vb, eb, acc, c=c)
    if acc.kind == "exact":
        if a.fmt is not None and b_t.fmt is not None:
            return exact_dot(va, ea, vb, eb, a.mbits, b_t.mbits, extra=c)
        r = va @ vb
        return (r if c is None else r + c).astype(F32)
    # fp32: float32-rounded products added in K order to the accumulator input
    a32, b32 = va.astype(F32), vb.astype(F32)
    out = np.zeros((a32.shape[0], b32.shape[1]), F32) if c is None else np.array(c, F32)
    tmp = np.empty_like(out)
    for k in range(a32.shape[1]):
        np.multiply(a32[:, k, None], b32[k], out=tmp)
        out += tmp
    return out


def _fl32_fma(a, b, c):
    """``fl32(a * b + c)`` with one rounding (a, b, c float32 arrays)."""
    return add_scaled_f32(np.asarray(c, F32), np.asarray(a, np.float64), np.asarray(b, np.float64))


# ----------------------------------------------------------------------------- results
@dataclasses.dataclass
class AttentionReport:
    """Diagnostics of one emulated attention call.

    Attributes
    ----------
    recipe : str
    p_saturated, p_underflow, s_overflow : ndarray of int64, shape (H, Nq)
        Per head and query row: P elements (after the pre-scale) that a non-saturating
        cast would overflow (clipped to the max when saturating, NaN/Inf otherwise);
        P elements > 0 that the cast made zero; non-finite S elements.
    max_rel_error, rms_rel_error, cosine : ndarray of float64, shape (H,) or None
        O against exact float64 attention of the unquantized inputs (None when not
        computed): ``max|O - R| / max|R|``, ``||O - R|| / ||R||`` and the cosine of the
        flattened head outputs.
    lse_max_abs_error : ndarray (H,) or None
        Largest absolute error of the lse against float64.
    error_threshold : float
        RMS relative error above which :attr:`flags` reports the output error.
    reference : {"inputs", "dequantized"} or None
        What the errors were measured against (see :func:`attention`).
    kernel_rms_rel_error, kernel_max_rel_error : ndarray (H,) or None
        The same errors against float64 attention of the dequantized Q, K, V (the
        quantized values times their descales): the error of the kernel's arithmetic
        (softmax, P cast, accumulation) without the input quantization.
    out_nonfinite, lse_invalid : ndarray (H, Nq) or None
        Per query row: NaN/Inf elements of the output, and whether the lse is NaN, +Inf,
        or -Inf for a row that has keys to attend to (its probabilities all flushed to
        zero; filled by :func:`attention`).  A NaN or Inf anywhere in the output, the
        lse or the errors is always flagged: a result that was not checked is never ``ok``.
    """

    recipe: str
    p_saturated: np.ndarray
    p_underflow: np.ndarray
    s_overflow: np.ndarray
    max_rel_error: np.ndarray | None = None
    rms_rel_error: np.ndarray | None = None
    cosine: np.ndarray | None = None
    lse_max_abs_error: np.ndarray | None = None
    error_threshold: float = 0.1
    reference: str | None = None
    kernel_rms_rel_error: np.ndarray | None = None
    kernel_max_rel_error: np.ndarray | None = None
    out_nonfinite: np.ndarray | None = None
    lse_invalid: np.ndarray | None = None

    @property
    def flags(self) -> list:
        """Failure modes found, one sentence each (empty when none).

        Examples
        --------
        >>> z = np.zeros((1, 2), np.int64)
        >>> AttentionReport("x", z + 1, z, z).flags
        ['P saturation: 2 elements in 2 rows (the largest probabilities are clipped; the float32 row sum still counts them)']
        """
        out = []
        for name, counts, why in (
                ("P saturation", self.p_saturated,
                 "the largest probabilities are clipped; the float32 row sum still counts them"),
                ("P underflow", self.p_underflow,
                 "small probabilities flushed to zero; invisible to LSE-based checks"),
                ("S overflow", self.s_overflow, "non-finite scores")):
            n = int(counts.sum())
            if n:
                out.append(f"{name}: {n} elements in {int((counts > 0).sum())} rows ({why})")
        for name, counts, why in (("non-finite output", self.out_nonfinite, "NaN or Inf in O"),
                                  ("invalid lse", self.lse_invalid,
                                   "NaN or Inf log-sum-exp of a row with keys; its row sum is 0, NaN or Inf")):
            n = 0 if counts is None else int(np.sum(counts))
            if n:
                out.append(f"{name}: {n} elements in {int((np.asarray(counts) > 0).sum())} rows ({why})")
        errors = {e: getattr(self, e) for e in ("max_rel_error", "rms_rel_error", "lse_max_abs_error",
                                                 "kernel_max_rel_error", "kernel_rms_rel_error")}
        bad = [e for e, a in errors.items() if a is not None and not np.all(np.isfinite(a))]
        if bad:   # a NaN error is an unchecked result, never a pass (np.nanmax would skip it)
            out.append(f"error not finite: {', '.join(bad)} (NaN/Inf in the output or the reference)")
        rms = self.rms_rel_error
        if rms is not None and np.any(np.asarray(rms) > self.error_threshold):
            out.append(f"output error: RMS relative error {np.nanmax(rms):.3g} above "
                       f"{self.error_threshold}")
        return out

    @property
    def ok(self) -> bool:
        """True when :attr:`flags` is empty."""
        return not self.flags

    def __str__(self):
        lines = [f"attention report ({self.recipe})"]
        if self.rms_rel_error is not None:
            lines.append(f"  error vs float64: max rel {np.max(self.max_rel_error):.3e}, RMS rel "
                         f"{np.max(self.rms_rel_error):.3e}, cosine {np.min(self.cosine):.6f}")
        lines += [f"  {f}" for f in self.flags] or ["  no failure modes flagged"]
        return "\n".join(lines)


@dataclasses.dataclass
class AttentionResult:
    """Output of :func:`attention`: ``out`` (H, Nq, dv) float32, ``lse`` (H, Nq) float32 natural
    log-sum-exp of the scaled scores, ``report`` (:class:`AttentionReport`), ``descales``
    (q, k, v float32 arrays of shape (H,) / (H_kv,))."""

    out: np.ndarray
    lse: np.ndarray
    report: AttentionReport
    descales: tuple


# ----------------------------------------------------------------------------- validation
def _as_heads(x, what, dtype=F32):
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{what} must be a numeric array, got {type(x).__name__}")
    a = np.asarray(x)
    if a.dtype.kind not in "fiu" and a.dtype not in _WIDE.values():
        raise TypeError(f"{what} must be a real numeric array, got dtype {a.dtype}")
    if a.ndim == 2:
        a = a[None]
    if a.ndim != 3:
        raise ValueError(f"{what} must have shape (heads, tokens, dim) or (tokens, dim), got {a.shape}")
    with np.errstate(over="ignore"):
        a = a.astype(dtype)   # a copy: the caller's array is never modified
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{what} must be finite (NaN/Inf inputs are not modelled)")
    return a


def _validate(q, k, v, softmax_scale, causal, kv_len, dtype=F32):
    """The one contract of :func:`attention` and :func:`reference_attention` (inputs as ``dtype``)."""
    q, k, v = _as_heads(q, "q", dtype), _as_heads(k, "k", dtype), _as_heads(v, "v", dtype)
    H, Nq, d = q.shape
    Hk, Nk, dk = k.shape
    if H == 0 or Nq == 0 or d == 0 or v.shape[2] == 0:
        # an empty query or head dim has nothing to attend with (an empty key/value set is allowed:
        # it gives zeros, as the kernels' empty rows do)
        raise ValueError(f"q needs at least one head, token and head-dim element, and v at least one "
                         f"head-dim element; got q {q.shape}, v {v.shape}")
    if dk != d:
        raise ValueError(f"q and k must have the same head dim, got {d} and {dk}")
    if v.shape[:2] != (Hk, Nk):
        raise ValueError(f"v must have shape ({Hk}, {Nk}, dv) like k, got {v.shape}")
    if Hk == 0 or H % Hk:
        raise ValueError(f"the number of query heads ({H}) must be a multiple of the KV heads ({Hk})")
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(d) if d else 1.0
    if isinstance(softmax_scale, (bool, np.bool_)) or not isinstance(softmax_scale, (int, float, np.floating,
                                                                                     np.integer)):
        raise ValueError(f"softmax_scale must be a finite positive number, got {softmax_scale!r}")
    _f32_number(softmax_scale, "softmax_scale", positive=True)   # the kernels fold it in float32
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    if kv_len is None:
        kv_len = Nk
    if isinstance(kv_len, bool) or not isinstance(kv_len, (int, np.integer)) or not 0 <= kv_len <= Nk:
        raise ValueError(f"kv_len must be an integer in [0, {Nk}], got {kv_len!r}")
    return q, k, v, float(softmax_scale), bool(causal), int(kv_len)


def _scale_log2(recipe, softmax_scale, qd, kd):
    """(c, s_mult): exp2 argument multiplier and (fold 'none') the factor applied to S first."""
    qk = np.multiply(qd, kd, dtype=F32)
    if recipe.fold == "fa3":
        return np.multiply(F32(softmax_scale * LOG2E), qk, dtype=F32), None
    if recipe.fold == "flashinfer":
        t = np.multiply(np.multiply(qk, F32(softmax_scale), dtype=F32), F32(LOG2E), dtype=F32)
        return t, None
    if recipe.fold == "triton":
        return np.multiply(F32(softmax_scale), F32(1.44269504), dtype=F32), None
    return F32(LOG2E), (F32(softmax_scale), qd, kd)


def _check_fold(recipe, softmax_scale, qd, kd, group):
    """The folded float32 multiplier of every head must be finite and positive (a softmax scale that
    is finite in float32 can still overflow once log2(e) and the descales are folded into it)."""
    for h in range(qd.shape[0]):
        with np.errstate(over="ignore", under="ignore"):
            c, s_mult = _scale_log2(recipe, softmax_scale, qd[h], kd[h // group])
            if s_mult is not None:
                c = np.multiply(np.multiply(s_mult[0], s_mult[1], dtype=F32), s_mult[2], dtype=F32)
        if not (np.isfinite(c) and c > 0):
            raise ValueError(f"softmax_scale={softmax_scale!r} folded with log2(e) and the Q/K descales "
                             f"({float(qd[h])!r}, {float(kd[h // group])!r}) is {float(c)!r} in float32 "
                             f"(fold={recipe.fold!r}); it must be finite and positive")


# ----------------------------------------------------------------------------- the kernel
def attention(q, k, v, recipe="fa3-fp8", *, causal=False, kv_len=None, softmax_scale=None, descales=None,
              reference=True) -> AttentionResult:
    """Emulated FP8 attention forward, step by step as ``recipe`` (see :mod:`fp8emu.attention`).

    Parameters
    ----------
    q : array_like, shape (H, Nq, d) or (Nq, d)
        Queries (converted to float32; never modified).
    k : array_like, shape (H_kv, Nk, d) or (Nk, d)
        Keys; ``H`` must be a multiple of ``H_kv`` (GQA).
    v : array_like, shape (H_kv, Nk, dv) or (Nk, dv)
        Values.
    recipe : str or AttentionRecipe
        A name of :data:`RECIPES` or a recipe.
    causal : bool, keyword-only
        Causal mask, aligned bottom-right (query i sees keys j <= i + Nk - Nq).
    kv_len : int, keyword-only
        Keys from index ``kv_len`` on are padding (masked).
    softmax_scale : float, keyword-only
        Default ``1 / sqrt(d)``.
    descales : tuple of 3, keyword-only
        (q, k, v) descales for ``scale_rule="given"``: scalars, or per-head arrays.
    reference : bool or {"inputs", "dequantized"}, keyword-only
        Fill the report's errors against float64 attention of the given inputs (True,
        ``"inputs"``: total error) or of the quantized Q, K, V times their descales
        (``"dequantized"``: the error of the kernel's arithmetic alone); the ``kernel_*``
        fields always hold the latter.  False: no errors.

    Returns
    -------
    AttentionResult

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((1, 64, 32)).astype(np.float32) for _ in range(3))
    >>> res = attention(q, k, v, "fa3-fp8")
    >>> res.out.shape, res.lse.shape
    ((1, 64, 32), (1, 64))
    >>> bool(res.report.rms_rel_error[0] < 0.1)
    True
    """
    recipe = get_recipe(recipe)
    q, k, v, softmax_scale, causal, kv_len = _validate(q, k, v, softmax_scale, causal, kv_len)
    if descales is not None:
        if not isinstance(descales, (tuple, list)) or len(descales) != 3:
            raise ValueError("descales must be a tuple (q_descale, k_descale, v_descale)")
        if recipe.scale_rule != "given":
            raise ValueError(f"descales given but the recipe's scale_rule is {recipe.scale_rule!r}; "
                             "use scale_rule='given'")
    given = descales if descales is not None else (None, None, None)
    H, Nq, d = q.shape
    Hk, Nk, dv = v.shape
    group = H // Hk
    def narrow(f):
        return None if f is None or f in _WIDE else f
    qd, qs = _descales(q, narrow(recipe.q_format), recipe, given[0], "q", group)
    kd, ks = _descales(k, narrow(recipe.k_format), recipe, given[1], "k")
    vd, vs = _descales(v, narrow(recipe.v_format), recipe, given[2], "v")
    _check_fold(recipe, softmax_scale, qd, kd, group)
    out = np.empty((H, Nq, dv), F32)
    lse = np.empty((H, Nq), F32)
    counts = {n: np.zeros((H, Nq), np.int64) for n in ("p_saturated", "p_underflow", "s_overflow")}
    ops_k = [_operand_for(k[hk:hk + 1], recipe.k_format, ks[hk:hk + 1]) for hk in range(Hk)]
    ops_v = [_operand_for(v[hk:hk + 1], recipe.v_format, vs[hk:hk + 1]) for hk in range(Hk)]
    for h in range(H):
        hk = h // group
        qop = _operand_for(q[h:h + 1], recipe.q_format, qs[h:h + 1])
        for r0 in range(0, Nq, recipe.query_chunk):
            r1 = min(Nq, r0 + recipe.query_chunk)
            o, ls, cnt = _head_forward(qop, ops_k[hk], ops_v[hk], (r0, r1), recipe, softmax_scale,
                                       qd[h], kd[hk], vd[hk], causal, kv_len, Nq, Nk)
            out[h, r0:r1], lse[h, r0:r1] = o, ls
            for n in counts:
                counts[n][h, r0:r1] = cnt[n]
    report = AttentionReport(recipe.name, **counts, out_nonfinite=(~np.isfinite(out)).sum(axis=2),
                             lse_invalid=_invalid_lse(lse, Nq, Nk, kv_len, causal))
    if reference not in (True, False, None, "inputs", "dequantized"):
        raise ValueError(f"reference must be True/'inputs', 'dequantized' or False, got {reference!r}")
    if reference:
        q_deq = np.stack([_operand_for(q[h:h + 1], recipe.q_format, qs[h:h + 1]).values * float(qd[h])
                          for h in range(H)])
        k_deq = np.stack([op.values * float(kd[i]) for i, op in enumerate(ops_k)])
        v_deq = np.stack([op.values * float(vd[i]) for i, op in enumerate(ops_v)])
        opts = dict(causal=causal, kv_len=kv_len, softmax_scale=softmax_scale)
        kernel = AttentionReport(recipe.name, **counts)
        _fill_errors(kernel, out, lse, *reference_attention(q_deq, k_deq, v_deq, **opts))
        report.kernel_rms_rel_error, report.kernel_max_rel_error = kernel.rms_rel_error, kernel.max_rel_error
        if reference == "dequantized":
            _fill_errors(report, out, lse, *reference_attention(q_deq, k_deq, v_deq, **opts))
        else:
            _fill_errors(report, out, lse, *reference_attention(q, k, v, **opts))
        report.reference = "dequantized" if reference == "dequantized" else "inputs"
    return AttentionResult(out, lse, report, (qd, kd, vd))


def _invalid_lse(lse, Nq, Nk, kv_len, causal):
    """1 where the lse is NaN or +Inf, or -Inf although the row has a key to attend to."""
    visible = np.full(Nq, kv_len)
    if causal:   # bottom-right aligned: query i sees keys j <= i + Nk - Nq
        visible = np.minimum(visible, np.maximum(np.arange(Nq) + Nk - Nq + 1, 0))
    return (np.isnan(lse) | (lse == np.inf) | ((lse == -np.inf) & (visible > 0))).astype(np.int64)


def _operand_for(x, fmt_name, scale):
    if fmt_name is None or fmt_name in _WIDE:
        return _wide_operand(x[0], fmt_name)
    return _quantized_operand(_quantize_qkv(x, fmt_name, scale)[0], fmt_name)


def _slice(op: _Operand, a, b):
    return _Operand(op.values[a:b], op.exps[a:b], None if op.codes is None else op.codes[a:b], op.fmt, op.mbits)


def _cast_p(p32, recipe, counts_rows):
    """(P operand, its float32 values) after the cast; updates saturation/underflow counts."""
    if recipe.p_format is None:
        return _wide_operand(p32, None), p32
    if recipe.p_format in _WIDE:
        op = _wide_operand(p32, recipe.p_format)
        pq = op.values.astype(F32)
        counts_rows["p_underflow"] += ((p32 > 0) & (pq == 0)).sum(1)
        counts_rows["p_saturated"] += (~np.isfinite(pq)).sum(1)
        return op, pq
    fmt = get_format(recipe.p_format)
    codes = encode(p32, fmt, saturate=recipe.p_saturate)
    op = _quantized_operand(codes, recipe.p_format)
    pq = decode(codes, fmt, dtype=np.float32)
    # saturated: the elements a non-saturating cast would overflow (P >= 0 here)
    t, inclusive = _overflow_threshold(fmt)
    counts_rows["p_saturated"] += ((p32 >= t) if inclusive else (p32 > t)).sum(1)
    counts_rows["p_underflow"] += ((p32 > 0) & (pq == 0)).sum(1)
    return op, pq


@functools.lru_cache(maxsize=32)
def _overflow_threshold(fmt: Format):
    """(t, inclusive): a non-negative float32 overflows a non-saturating RNE cast to ``fmt`` iff it is
    above ``t`` (or at ``t`` when ``inclusive``); ``t`` is the midpoint above the format's max."""
    t = F32(fmt.max + 2.0 ** (math.floor(math.log2(fmt.max)) - fmt.mbits - 1))
    at_t = decode(encode(np.array([t], F32), fmt, saturate=False), fmt, dtype=np.float32)[0]
    return t, not bool(np.isfinite(at_t))


def _head_forward(qop, kop, vop, rows, recipe, softmax_scale, qd, kd, vd, causal, kv_len, Nq, Nk):
    """One head, query rows ``rows``: (O float32 (M, dv), lse (M,), counts per row)."""
    r0, r1 = rows
    M = r1 - r0
    dv = vop.values.shape[1]
    qa = _slice(qop, r0, r1)
    qk_acc = _chain_acc(get_accumulator(recipe.qk_accumulator))
    pv_acc = _chain_acc(get_accumulator(recipe.pv_accumulator))
    c, s_mult = _scale_log2(recipe, softmax_scale, qd, kd)
    c = F32(c)
    offset = F32(recipe.max_offset)
    thr = recipe.rescale_threshold
    exp2 = recipe.exp2
    cnt = {n: np.zeros(M, np.int64) for n in ("p_saturated", "p_underflow", "s_overflow")}
    m = np.full(M, -np.inf, F32)
    l = np.zeros(M, F32)
    o_total = np.zeros((M, dv), F32)
    o_part = np.zeros((M, dv), F32)
    special = np.zeros((M, dv), F32)     # IEEE NaN/Inf contributions of non-finite P codes
    qpos = np.arange(r0, r1)[:, None] + (Nk - Nq)   # causal limit: keys j <= i + Nk - Nq
    nb = -(-Nk // recipe.block_n) if Nk else 0
    order = range(nb) if recipe.key_order == "forward" else range(nb - 1, -1, -1)
    visited = 0
    first = True
    for j in order:
        b0, b1 = j * recipe.block_n, min(Nk, (j + 1) * recipe.block_n)
        if b0 >= kv_len or (causal and b0 > qpos[-1, 0]):
            continue   # the kernels skip blocks that are masked for every row
        kb, vb = _slice(kop, b0, b1), _slice(vop, b0, b1)
        with np.errstate(over="ignore", invalid="ignore"):
            s = _matmul(qa, kb, qk_acc)
        cnt["s_overflow"] += (~np.isfinite(s)).sum(1)
        if s_mult is not None:   # fold 'none': scale S first, one float32 product per factor
            s = np.multiply(np.multiply(np.multiply(s, s_mult[0], dtype=F32), s_mult[1], dtype=F32),
                            s_mult[2], dtype=F32)
        keys = np.arange(b0, b1)[None, :]
        mask = keys >= kv_len
        if causal:
            mask = mask | (keys > qpos)
        s = np.where(mask, F32(-np.inf), s)
        # -- online softmax: running max and the rescale factor
        blk_max = s.max(axis=1)
        m_new = np.maximum(m, blk_max)
        if first:
            alpha = np.ones(M, F32)
        else:
            safe_new = np.where(m_new == -np.inf, F32(0), m_new)
            with np.errstate(invalid="ignore"):
                diff = np.subtract(m, safe_new, dtype=F32)
            arg = np.multiply(diff, c, dtype=F32)
            arg = np.where(np.isnan(arg), F32(-np.inf), arg)
            alpha = exp2(arg)
            if thr > 0:
                keep = (arg >= -F32(thr)) & (m != -np.inf)
                m_new = np.where(keep, m, m_new)
                alpha = np.where(keep, F32(1), alpha)
        m = m_new.astype(F32)
        # -- P = exp2(s * c - (m * c - offset)), the max of a fully masked row taken as 0
        safe = np.where(m == -np.inf, F32(0), m)
        if recipe.fold == "none":
            bias = safe   # natural exp: x = s - m, then exp(x) = exp2(fl32(x * log2e))
            with np.errstate(invalid="ignore"):
                x = np.subtract(s, bias[:, None], dtype=F32)
            x = np.multiply(x, c, dtype=F32)
            if recipe.max_offset:
                x = np.subtract(x, offset, dtype=F32)
        else:
            bias = np.subtract(np.multiply(safe, c, dtype=F32), offset, dtype=F32)
            if recipe.fma:
                with np.errstate(invalid="ignore"):
                    x = _fl32_fma(s, np.full_like(s, c), -bias[:, None])
            else:
                x = np.subtract(np.multiply(s, c, dtype=F32), bias[:, None], dtype=F32)
        x = np.where(mask, F32(-np.inf), x)
        p32 = exp2(x)
        if recipe.p_scale != 1.0:
            p_pre = np.multiply(p32, F32(recipe.p_scale), dtype=F32)
        else:
            p_pre = p32
        pop, pq = _cast_p(p_pre, recipe, cnt)
        # -- row sum, in key order, after rescaling the running sum
        l = np.multiply(l, alpha, dtype=F32)
        src = pq if recipe.row_sum == "quantized" else p32
        if recipe.row_sum == "quantized" and recipe.p_scale != 1.0:
            src = np.multiply(src, F32(1.0 / recipe.p_scale), dtype=F32)
        for t in range(src.shape[1]):
            l += src[:, t]
        # -- O: rescale, then accumulate P·V with O (or the partial sum) as the accumulator input
        np.multiply(o_total, alpha[:, None], out=o_total)
        np.multiply(o_part, alpha[:, None], out=o_part)
        np.multiply(special, alpha[:, None], out=special)
        if pop.codes is not None and not np.all(np.isfinite(pq)):
            if vb.codes is not None:
                pos, neg, nan = special_masks(pop.codes, pop.fmt, vb.codes, vb.fmt)
            else:
                pos, neg, nan = _wide_specials(pq, vb.values)
            special += np.where(nan, F32(np.nan), np.where(pos, F32(np.inf), np.where(neg, F32(-np.inf), 0)))
        o_part = _matmul(pop, _transpose(vb), pv_acc, c=o_part)
        visited += 1
        first = False
        if recipe.promote_every is not None and visited % recipe.promote_every == 0:
            o_total = np.add(o_total, o_part, dtype=F32)
            o_part = np.zeros_like(o_part)
    o = np.add(o_total, o_part, dtype=F32) if recipe.promote_every is not None else o_part
    o = np.where(special != 0, special, o).astype(F32) if np.any(special != 0) else o
    o = np.where(np.isnan(special), F32(np.nan), o)
    vscale = np.multiply(F32(vd), F32(1.0 / recipe.p_scale), dtype=F32) if recipe.p_scale != 1.0 else F32(vd)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if recipe.normalize == "reciprocal":
            inv = np.where((l == 0) | np.isnan(l), F32(0), np.divide(F32(1), l, dtype=F32))
            o = np.multiply(o, np.multiply(inv, vscale, dtype=F32)[:, None], dtype=F32)
        else:
            o = np.divide(o, l[:, None], dtype=F32)
            o = np.where((l == 0)[:, None], F32(0), o)
            if vscale != 1:
                o = np.multiply(o, vscale, dtype=F32)
        lse = np.where((l == 0) | np.isnan(l), -np.inf,
                       m.astype(np.float64) * float(c) * math.log(2) + np.log(l.astype(np.float64))
                       - recipe.max_offset * math.log(2)).astype(F32)
    return o.astype(F32), lse, cnt


def _transpose(op: _Operand) -> _Operand:
    """V (keys, dv) seen as the (dv, keys) 'B transposed' operand of :func:`_matmul`."""
    return _Operand(op.values.T, op.exps.T, None if op.codes is None else op.codes.T, op.fmt, op.mbits)


def _wide_specials(pq, vvals):
    f = np.float64
    inf_p = np.isposinf(pq).astype(f)
    nan_p = np.isnan(pq).astype(f)
    vpos, vneg, vzero = (vvals > 0).astype(f), (vvals < 0).astype(f), (vvals == 0).astype(f)
    pos, neg = inf_p @ vpos > 0, inf_p @ vneg > 0
    nan = (nan_p.sum(1)[:, None] > 0) | (inf_p @ vzero > 0) | (pos & neg)
    return pos, neg, nan


# ----------------------------------------------------------------------------- float64 reference
def reference_attention(q, k, v, *, causal=False, kv_len=None, softmax_scale=None, block_n=1024):
    """Exact-input float64 attention (blocked over keys; memory O(Nq x block_n)).

    Returns ``(out, lse)`` as float64 arrays of shapes (H, Nq, dv) and (H, Nq);
    fully masked rows give 0 and -inf.

    Examples
    --------
    >>> o, l = reference_attention(np.zeros((1, 2, 4)), np.zeros((1, 3, 4)), np.ones((1, 3, 4)))
    >>> o[0, 0].tolist(), round(float(l[0, 0]), 12) == round(math.log(3), 12)
    ([1.0, 1.0, 1.0, 1.0], True)
    """
    q, k, v, scale, causal, kv_len = _validate(q, k, v, softmax_scale, causal, kv_len, np.float64)
    if isinstance(block_n, (bool, np.bool_)) or not isinstance(block_n, (int, np.integer)) or block_n < 1:
        raise ValueError(f"block_n must be a positive integer, got {block_n!r}")
    H, Nq, d = q.shape
    Hk, Nk, dv = v.shape
    group = H // Hk
    out = np.zeros((H, Nq, dv))
    lse = np.full((H, Nq), -np.inf)
    qpos = np.arange(Nq)[:, None] + (Nk - Nq)
    for h in range(H):
        m = np.full(Nq, -np.inf)
        l = np.zeros(Nq)
        o = np.zeros((Nq, dv))
        for b0 in range(0, Nk, block_n):
            b1 = min(Nk, b0 + block_n)
            s = (q[h] @ k[h // group, b0:b1].T) * scale
            keys = np.arange(b0, b1)[None, :]
            mask = (keys >= kv_len) | ((keys > qpos) if causal else False)
            s = np.where(mask, -np.inf, s)
            m_new = np.maximum(m, s.max(axis=1))
            safe = np.where(np.isinf(m_new), 0.0, m_new)
            a = np.exp(np.where(np.isinf(m), -np.inf, m - safe))
            p = np.exp(s - safe[:, None])
            l = l * a + p.sum(1)
            o = o * a[:, None] + p @ v[h // group, b0:b1]
            m = m_new
        ok = l > 0
        out[h][ok] = o[ok] / l[ok, None]
        lse[h][ok] = m[ok] + np.log(l[ok])
    return out, lse


def _fill_errors(report, out, lse, ref, ref_lse):
    H = out.shape[0]
    o = out.astype(np.float64).reshape(H, -1)
    r = ref.reshape(H, -1)
    err = np.abs(o - r)
    rmax = np.abs(r).max(axis=1)
    rn = np.linalg.norm(r, axis=1)
    on = np.linalg.norm(o, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        report.max_rel_error = np.where(rmax > 0, err.max(axis=1) / rmax, err.max(axis=1))
        report.rms_rel_error = np.where(rn > 0, np.linalg.norm(o - r, axis=1) / rn, np.linalg.norm(o - r, axis=1))
        report.cosine = np.where((rn > 0) & (on > 0), (o * r).sum(1) / (rn * on), np.where(rn == on, 1.0, 0.0))
        fin = np.isfinite(ref_lse)
        dl = np.where(fin, np.abs(lse.astype(np.float64) - np.where(fin, ref_lse, 0)), 0.0)
        report.lse_max_abs_error = dl.max(axis=1)
