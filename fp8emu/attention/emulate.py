"""FP8 attention, emulated step by step as the kernels compute it.

:func:`attention` runs a blocked forward pass of scaled-dot-product attention
the way a flash-attention kernel does, every step an explicit option of a
frozen :class:`~fp8emu.attention.recipes.AttentionRecipe`:

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
   exp2 is the pluggable ``exp2`` function (default :func:`~fp8emu.attention.recipes.exp2_f32`).
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
default :func:`~fp8emu.attention.recipes.exp2_f32` is float64 exp2 rounded to float32.  Attention results
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

import functools
import math

import numpy as np

from ..codec import decode, encode
from ..formats import Format, get_format
from ..gemm.models import get_model
from ..gemm.epilogue import special_masks
from ..gemm.fparith import add_scaled_f32
from .gemms import chain_model, matmul
from .inputs import F32, WIDE, validate
from .operands import operand_descales, operand_for, quantized_operand, slice_rows, transpose, wide_operand
from .recipes import LOG2E, get_recipe
from .reference import reference_attention
from .report import AttentionReport, AttentionResult, fill_errors

__all__ = ["attention"]


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
        A name of :data:`~fp8emu.attention.recipes.RECIPES` or a recipe.
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
    q, k, v, softmax_scale, causal, kv_len = validate(q, k, v, softmax_scale, causal, kv_len)
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
        return None if f is None or f in WIDE else f
    qd, qs = operand_descales(q, narrow(recipe.q_format), recipe, given[0], "q", group)
    kd, ks = operand_descales(k, narrow(recipe.k_format), recipe, given[1], "k")
    vd, vs = operand_descales(v, narrow(recipe.v_format), recipe, given[2], "v")
    _check_fold(recipe, softmax_scale, qd, kd, group)
    out = np.empty((H, Nq, dv), F32)
    lse = np.empty((H, Nq), F32)
    counts = {n: np.zeros((H, Nq), np.int64) for n in ("p_saturated", "p_underflow", "s_overflow")}
    ops_k = [operand_for(k[hk, None], recipe.k_format, ks[hk, None]) for hk in range(Hk)]
    ops_v = [operand_for(v[hk, None], recipe.v_format, vs[hk, None]) for hk in range(Hk)]
    for h in range(H):
        hk = h // group
        qop = operand_for(q[h, None], recipe.q_format, qs[h, None])
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
        q_deq = np.stack([operand_for(q[h, None], recipe.q_format, qs[h, None]).values * float(qd[h])
                          for h in range(H)])
        k_deq = np.stack([op.values * float(kd[i]) for i, op in enumerate(ops_k)])
        v_deq = np.stack([op.values * float(vd[i]) for i, op in enumerate(ops_v)])
        opts = dict(causal=causal, kv_len=kv_len, softmax_scale=softmax_scale)
        _measure(report, out, lse, (q, k, v), (q_deq, k_deq, v_deq), reference, opts)
    return AttentionResult(out, lse, report, (qd, kd, vd))


def _measure(report, out, lse, given, dequantized, reference, opts):
    """Fill ``report``'s errors against float64 attention of the ``given`` inputs or (``reference=
    "dequantized"``) of the ``dequantized`` ones; its ``kernel_*`` errors always against the latter."""
    kernel = AttentionReport(report.recipe, report.p_saturated, report.p_underflow, report.s_overflow)
    fill_errors(kernel, out, lse, *reference_attention(*dequantized, **opts))
    report.kernel_rms_rel_error, report.kernel_max_rel_error = kernel.rms_rel_error, kernel.max_rel_error
    if reference == "dequantized":
        fill_errors(report, out, lse, *reference_attention(*dequantized, **opts))
    else:
        fill_errors(report, out, lse, *reference_attention(*given, **opts))
    report.reference = "dequantized" if reference == "dequantized" else "inputs"


def _invalid_lse(lse, Nq, Nk, kv_len, causal):
    """1 where the lse is NaN or +Inf, or -Inf although the row has a key to attend to."""
    visible = np.full(Nq, kv_len)
    if causal:   # bottom-right aligned: query i sees keys j <= i + Nk - Nq
        visible = np.minimum(visible, np.arange(Nq) + Nk - Nq + 1)   # <= 0: no key (only > 0 is read)
    return (np.isnan(lse) | (lse == np.inf) | ((lse == -np.inf) & (visible > 0))).astype(np.int64)


def _cast_p(p32, recipe, counts_rows):
    """(P operand, its float32 values) after the cast; updates saturation/underflow counts."""
    if recipe.p_format is None:
        return wide_operand(p32, None), p32
    if recipe.p_format in WIDE:
        op = wide_operand(p32, recipe.p_format)
        pq = op.values.astype(F32)
        counts_rows["p_underflow"] += ((p32 > 0) & (pq == 0)).sum(1)
        counts_rows["p_saturated"] += (~np.isfinite(pq)).sum(1)
        return op, pq
    fmt = get_format(recipe.p_format)
    codes = encode(p32, fmt, saturate=recipe.p_saturate)
    op = quantized_operand(codes, recipe.p_format)
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
    qa = slice_rows(qop, r0, r1)
    qk_acc = chain_model(get_model(recipe.qk_accumulator))
    pv_acc = chain_model(get_model(recipe.pv_accumulator))
    c, s_mult = _scale_log2(recipe, softmax_scale, qd, kd)
    c = F32(c)
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
        kb, vb = slice_rows(kop, b0, b1), slice_rows(vop, b0, b1)
        with np.errstate(over="ignore", invalid="ignore"):
            s = matmul(qa, kb, qk_acc)
        cnt["s_overflow"] += (~np.isfinite(s)).sum(1)
        if s_mult is not None:   # fold 'none': scale S first, one float32 product per factor
            s = np.multiply(np.multiply(np.multiply(s, s_mult[0], dtype=F32), s_mult[1], dtype=F32),
                            s_mult[2], dtype=F32)
        keys = np.arange(b0, b1)[None, :]
        mask = keys >= kv_len
        if causal:
            mask = mask | (keys > qpos)
        s = np.where(mask, F32(-np.inf), s)
        m, alpha = _online_max(m, s, c, recipe, first)
        x = np.where(mask, F32(-np.inf), _exp2_argument(s, m, c, recipe))
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
        with np.errstate(invalid="ignore"):   # an Inf of an overflowed P times an alpha of 0 is NaN, as on the GPU
            np.multiply(o_total, alpha[:, None], out=o_total)
            np.multiply(o_part, alpha[:, None], out=o_part)
            np.multiply(special, alpha[:, None], out=special)
        if pop.codes is not None and not np.all(np.isfinite(pq)):
            # V's values are its codes' (finite: V is quantized saturating from finite inputs)
            pos, neg, nan = special_masks(pq, vb.values)
            special += np.where(nan, F32(np.nan), np.where(pos, F32(np.inf), np.where(neg, F32(-np.inf), 0)))
        o_part = matmul(pop, transpose(vb), pv_acc, c=o_part)
        visited += 1
        first = False
        if recipe.promote_every is not None and visited % recipe.promote_every == 0:
            o_total = np.add(o_total, o_part, dtype=F32)
            o_part = np.zeros_like(o_part)
    o = np.add(o_total, o_part, dtype=F32) if recipe.promote_every is not None else o_part
    o = np.where(special != 0, special, o).astype(F32) if np.any(special != 0) else o
    o = np.where(np.isnan(special), F32(np.nan), o)
    o, lse = _normalize(o, l, m, c, vd, recipe)
    return o, lse, cnt


def _online_max(m, s, c, recipe, first):
    """Step 4, the online softmax: (the new running row max, the rescale factor alpha) after block ``s``."""
    m_new = np.maximum(m, s.max(axis=1))
    if first:
        return m_new.astype(F32), np.ones(m.shape[0], F32)
    safe_new = np.where(m_new == -np.inf, F32(0), m_new)
    with np.errstate(invalid="ignore"):
        diff = np.subtract(m, safe_new, dtype=F32)
    arg = np.multiply(diff, c, dtype=F32)
    arg = np.where(np.isnan(arg), F32(-np.inf), arg)
    alpha = recipe.exp2(arg)
    if recipe.rescale_threshold > 0:
        keep = (arg >= -F32(recipe.rescale_threshold)) & (m != -np.inf)
        m_new = np.where(keep, m, m_new)
        alpha = np.where(keep, F32(1), alpha)
    return m_new.astype(F32), alpha


def _exp2_argument(s, m, c, recipe):
    """Step 5's exp2 argument ``x = s * c - (m * c - offset)``, the max of a fully masked row taken as 0."""
    offset = F32(recipe.max_offset)
    safe = np.where(m == -np.inf, F32(0), m)
    if recipe.fold == "none":
        bias = safe   # natural exp: x = s - m, then exp(x) = exp2(fl32(x * log2e))
        with np.errstate(invalid="ignore"):
            x = np.subtract(s, bias[:, None], dtype=F32)
        x = np.multiply(x, c, dtype=F32)
        if recipe.max_offset:
            x = np.subtract(x, offset, dtype=F32)
        return x
    with np.errstate(over="ignore"):   # a max past float32 / c is Inf in the kernel too
        bias = np.subtract(np.multiply(safe, c, dtype=F32), offset, dtype=F32)
    if recipe.fma:
        with np.errstate(invalid="ignore"):
            return add_scaled_f32(-bias[:, None], s.astype(np.float64), np.float64(c))   # fl32(s * c - bias): an FMA
    return np.subtract(np.multiply(s, c, dtype=F32), bias[:, None], dtype=F32)


def _normalize(o, l, m, c, vd, recipe):
    """Step 9: (O normalised by the row sum and the V descale, the natural lse), both float32."""
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
    return o.astype(F32), lse
