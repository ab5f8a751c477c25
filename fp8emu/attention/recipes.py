"""The recipes of FP8 attention: how one kernel computes it, step by step, as a frozen
:class:`AttentionRecipe`, and the named kernel configurations (:data:`RECIPES`).

What each option means is told step by step in :mod:`fp8emu.attention.emulate`, the kernel that runs them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np

from ..registry import named
from ..rounding import check_saturation
from ..gemm import GemmModel, get_model
from .inputs import F32, WIDE, f32_number, operand_format

__all__ = ["AttentionRecipe", "RECIPES", "get_recipe", "off_recipe", "exp2_f32", "fa3_fp8", "fa4_sm100_fp8",
           "fa4_sm100_fp8_pre2717", "flashinfer_fp8_prefill", "flashinfer_fp8_decode", "vllm_fp8_kv_decode",
           "triton_tutorial_fp8"]

LOG2E = math.log2(math.e)


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
    qk_accumulator, pv_accumulator : str or GemmModel
        GEMM models (:func:`fp8emu.gemm.get_model`); their own
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
    qk_accumulator: str | GemmModel = "hopper"
    pv_accumulator: str | GemmModel = "hopper"
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
        if not isinstance(self.name, str) or not self.name:    # 3 and "" were taken into the reports
            raise TypeError(f"AttentionRecipe name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.fma, (bool, np.bool_)):          # fma="no" ran fused, as truthy
            raise TypeError(f"AttentionRecipe fma must be True or False, got {self.fma!r}")
        try:      # p_saturate="no" failed only at the P cast, after the Q·K pass, naming "saturate"
            check_saturation(self.p_saturate)
        except TypeError as exc:
            raise TypeError(f"AttentionRecipe p_{exc}") from None
        for f in ("q_format", "k_format", "v_format", "p_format"):
            object.__setattr__(self, f, operand_format(getattr(self, f), f))
        choices = {"granularity": ("tensor", "head", "kv-head"), "scale_rule": ("amax", "given", "none"),
                   "key_order": ("forward", "reverse"), "fold": ("fa3", "flashinfer", "triton", "none"),
                   "row_sum": ("float32", "quantized"), "normalize": ("reciprocal", "divide")}
        for f, ok in choices.items():
            if getattr(self, f) not in ok:
                raise ValueError(f"AttentionRecipe {f} must be one of {ok}, got {getattr(self, f)!r}")
        for f, ops in (("qk_accumulator", ("q_format", "k_format")), ("pv_accumulator", ("p_format", "v_format"))):
            acc = get_model(getattr(self, f))   # raises on an unknown name
            if acc.kind == "torch-cpu" or acc.policy.scale_at is not None:
                raise ValueError(f"AttentionRecipe {f}={acc.name!r} is not a model of a kernel's tensor-core "
                                 "GEMM; use a tensor-core model ('hopper', an instruction preset), 'fp32' or 'exact'")
            wide = [o for o in ops if getattr(self, o) is None or getattr(self, o) in WIDE]
            if acc.kind == "instruction" and wide:   # refused here, not after the Q·K pass has run
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
        # NumPy integers kept as Python ints: block_n=np.uint8(16) wrapped ("Python integer -40 out of bounds")
        for f in ("block_n", "query_chunk", "promote_every", "max_offset"):
            if isinstance(getattr(self, f), np.integer):
                object.__setattr__(self, f, int(getattr(self, f)))
        # both are used in float32 (p_scale also as fl32(1 / p_scale)): checked as float32
        f32_number(self.rescale_threshold, "AttentionRecipe rescale_threshold", positive=False)
        f32_number(self.p_scale, "AttentionRecipe p_scale", positive=True, reciprocal=True)
        if not callable(self.exp2):
            raise TypeError(f"AttentionRecipe exp2 must be a callable, got {type(self.exp2).__name__}")
        if self.fold == "triton" and self.scale_rule != "none" and any(
                f not in (None, *WIDE) for f in (self.q_format, self.k_format)):
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
