"""fp8emu.attention option by option, and in combination, against an independent step-by-step model.

The model below is written from the steps that :mod:`fp8emu.attention.emulate`'s docstring states (it
reads nothing of the package but the codec, to cast to the 8-bit formats): every float32 operation is
an IEEE float32 operation in the documented order, the exact accumulator and the FMA are exact
rational sums (``fractions.Fraction``) rounded once to float32 here, the scales are Transformer
Engine's ``fl32(fmax / amax)`` (1 for an amax of 0).  Each recipe of ``CASES`` switches on a different
set of options (fold, FMA, max offset, rescale threshold, P pre-scale and format, row sum, promotion,
normalisation, key order, granularity with GQA, given descales, masks, query chunks); the emulation
must give the model's bits.

Written for the mutation samples of tests/MUTATION.md: the earlier samples' survivors were option
combinations no test ran.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from fp8emu import decode, encode, get_format
from fp8emu.attention import AttentionRecipe, attention, exp2_f32, get_recipe, reference_attention

F32 = np.float32
LOG2E = math.log2(math.e)
WIDE = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


# ----------------------------------------------------------------------------- exact float32 rounding
def _fl32(x: Fraction) -> F32:
    """The float32 nearest to the rational ``x`` (ties to even), subnormals and overflow included."""
    if x == 0:
        return F32(0.0)
    sign, a = (-1, -x) if x < 0 else (1, x)
    e = math.floor(math.log2(a.numerator) - math.log2(a.denominator))
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    e = max(e, -126)
    q = a / Fraction(2) ** (e - 23)            # the significand in units of the last place
    n = q.numerator // q.denominator
    rest = q - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2):
        n += 1
    v = n * 2.0 ** (e - 23)
    return F32(sign * v) if v < 2.0 ** 128 else F32(sign * np.inf)


def _dot_exact(a_row, b_col, c=None):
    """fl32(c + sum a*b) with one rounding (the exact accumulator of 8-bit operands)."""
    s = sum((Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a_row, b_col)), Fraction(0))
    if c is not None:
        s += Fraction(float(c))
    return _fl32(s)


def _dot_fp32(a_row, b_col, c=None):
    """float32 products added one by one in K order to the accumulator input."""
    acc = F32(0) if c is None else F32(c)
    for x, y in zip(a_row, b_col):
        acc = F32(acc + F32(F32(x) * F32(y)))
    return acc


def _matmul(a, b_t, acc, c=None):
    f = _dot_exact if acc == "exact" else _dot_fp32
    out = np.zeros((a.shape[0], b_t.shape[0]), F32)
    for i in range(a.shape[0]):
        for j in range(b_t.shape[0]):
            out[i, j] = f(a[i], b_t[j], None if c is None else c[i, j])
    return out


def _te_scale(amax, fmt):
    amax = F32(amax)
    return F32(1) if amax == 0 else F32(F32(get_format(fmt).max) / amax)


# ----------------------------------------------------------------------------- the model
def _operands(x, fmt, rule, gran, given, group):
    """(values as the kernel multiplies them, descale per head) of one operand (H, N, d)."""
    H = x.shape[0]
    if fmt is None:
        return x.astype(F32), np.ones(H, F32)
    if fmt in WIDE:
        return x.astype(WIDE[fmt]).astype(F32), np.ones(H, F32)
    if rule == "none":
        return decode(encode(x, fmt, saturate=True), fmt).astype(F32), np.ones(H, F32)
    if rule == "given":
        d = np.atleast_1d(np.asarray(given, np.float64))
        d = np.full(H, d[0]) if d.size == 1 else (np.repeat(d, group) if gran == "kv-head" else d)
        desc = d.astype(F32)
        scale = np.array([F32(F32(1) / t) for t in desc], F32)
    else:
        amax = np.abs(x).max(axis=(1, 2))
        if gran == "tensor":
            amax = np.full(H, amax.max())
        elif gran == "kv-head":
            amax = np.repeat(amax.reshape(-1, group).max(axis=1), group)
        scale = np.array([_te_scale(a, fmt) for a in amax], F32)
        desc = np.array([F32(F32(1) / s) for s in scale], F32)
    vals = np.stack([decode(encode((x[h] * scale[h]).astype(F32), fmt, saturate=True), fmt).astype(F32)
                     for h in range(H)])
    return vals, desc


def _fold(r, ss, qd, kd):
    """(c, the factors S is multiplied by first (fold 'none'))."""
    qk = F32(F32(qd) * F32(kd))
    if r.fold == "fa3":
        return F32(F32(ss * LOG2E) * qk), None
    if r.fold == "flashinfer":
        return F32(F32(F32(qk * F32(ss)) * F32(LOG2E))), None
    if r.fold == "triton":
        return F32(F32(ss) * F32(1.44269504)), None
    return F32(LOG2E), (F32(ss), F32(qd), F32(kd))


def _exp2(r, x):
    """The recipe's exp2 model on one float32 (the default: float64 exp2 rounded to float32)."""
    if r.exp2 is exp2_f32:
        return F32(np.exp2(np.float64(x)))
    return F32(r.exp2(np.array([x], F32))[0])


def _low_exp2(x):
    """An exp2 model biased low by 2**-10 (exp2(0) is not 1), as an approximate ex2 might be."""
    return (exp2_f32(x) * F32(1 - 2.0 ** -10)).astype(F32)


def _cast_p(p, r):
    if r.p_format is None:
        return p
    if r.p_format in WIDE:
        return p.astype(WIDE[r.p_format]).astype(F32)
    return decode(encode(p, r.p_format, saturate=r.p_saturate), r.p_format).astype(F32)


def _head(q, k, v, r, ss, qd, kd, vd, causal, kv_len, Nq, Nk, rows):
    r0, r1 = rows
    M = r1 - r0
    c, s_mult = _fold(r, ss, qd, kd)
    m = np.full(M, -np.inf, F32)
    l = np.zeros(M, F32)
    o_total = np.zeros((M, v.shape[1]), F32)
    o_part = np.zeros((M, v.shape[1]), F32)
    under = np.zeros(M, np.int64)
    nb = -(-Nk // r.block_n)
    order = range(nb) if r.key_order == "forward" else reversed(range(nb))
    first, visited = True, 0
    last_pos = r1 - 1 + Nk - Nq
    for j in order:
        b0, b1 = j * r.block_n, min(Nk, (j + 1) * r.block_n)
        if b0 >= kv_len or (causal and b0 > last_pos):
            continue
        s = _matmul(q[r0:r1], k[b0:b1], r.qk_accumulator)
        if s_mult is not None:
            s = F32(F32(F32(s * s_mult[0]) * s_mult[1]) * s_mult[2])
        keys = np.arange(b0, b1)[None, :]
        pos = np.arange(r0, r1)[:, None] + Nk - Nq
        mask = np.broadcast_to((keys >= kv_len) | ((keys > pos) if causal else False), s.shape)
        s = np.where(mask, F32(-np.inf), s).astype(F32)
        m_new = np.maximum(m, s.max(axis=1)).astype(F32)
        if first:
            alpha = np.ones(M, F32)
        else:
            alpha = np.empty(M, F32)
            for i in range(M):
                if m[i] == -np.inf:
                    arg = F32(-np.inf)
                else:
                    arg = F32(F32(m[i] - (F32(0) if m_new[i] == -np.inf else m_new[i])) * c)
                if r.rescale_threshold > 0 and m[i] != -np.inf and arg >= -F32(r.rescale_threshold):
                    m_new[i], arg = m[i], None
                alpha[i] = F32(1) if arg is None else _exp2(r, arg)
        m = m_new
        p = np.zeros(s.shape, F32)
        for i in range(M):
            mi = F32(0) if m[i] == -np.inf else m[i]
            for t in range(s.shape[1]):
                if mask[i, t]:
                    x = F32(-np.inf)
                elif r.fold == "none":
                    x = F32(F32(s[i, t] - mi) * c)
                    if r.max_offset:
                        x = F32(x - F32(r.max_offset))
                else:
                    bias = F32(F32(mi * c) - F32(r.max_offset))
                    if r.fma:
                        x = _fl32(Fraction(float(s[i, t])) * Fraction(float(c)) - Fraction(float(bias)))
                    else:
                        x = F32(F32(s[i, t] * c) - bias)
                p[i, t] = _exp2(r, x)
        p_pre = (p * F32(r.p_scale)).astype(F32) if r.p_scale != 1 else p
        pq = _cast_p(p_pre, r)
        under += ((p_pre > 0) & (pq == 0)).sum(axis=1)
        l = (l * alpha).astype(F32)
        src = p
        if r.row_sum == "quantized":
            src = pq if r.p_scale == 1 else (pq * F32(F32(1) / F32(r.p_scale))).astype(F32)
        for t in range(src.shape[1]):
            l = (l + src[:, t]).astype(F32)
        o_total = (o_total * alpha[:, None]).astype(F32)
        o_part = (o_part * alpha[:, None]).astype(F32)
        o_part = _matmul(pq, v[b0:b1].T, r.pv_accumulator, c=o_part)
        visited += 1
        first = False
        if r.promote_every is not None and visited % r.promote_every == 0:
            o_total = (o_total + o_part).astype(F32)
            o_part = np.zeros_like(o_part)
    o = (o_total + o_part).astype(F32) if r.promote_every is not None else o_part
    vscale = F32(F32(vd) * F32(F32(1) / F32(r.p_scale))) if r.p_scale != 1 else F32(vd)
    out = np.zeros_like(o)
    lse = np.full(M, -np.inf, F32)
    for i in range(M):
        if l[i] == 0:
            continue
        if r.normalize == "reciprocal":
            out[i] = (o[i] * F32(F32(F32(1) / l[i]) * vscale)).astype(F32)
        else:
            out[i] = (o[i] / l[i]).astype(F32)
            if vscale != 1:
                out[i] = (out[i] * vscale).astype(F32)
        lse[i] = F32(float(m[i]) * float(c) * math.log(2) + math.log(float(l[i])) - r.max_offset * math.log(2))
    return out, lse, under


def model(q, k, v, r, *, causal=False, kv_len=None, softmax_scale=None, descales=None):
    H, Nq, d = q.shape
    Hk, Nk, _ = k.shape
    group = H // Hk
    kv_len = Nk if kv_len is None else kv_len
    ss = 1 / math.sqrt(d) if softmax_scale is None else softmax_scale
    given = descales or (None, None, None)
    qv, qd = _operands(q, r.q_format, r.scale_rule, r.granularity, given[0], group)
    kvv, kd = _operands(k, r.k_format, r.scale_rule, r.granularity, given[1], 1)
    vv, vd = _operands(v, r.v_format, r.scale_rule, r.granularity, given[2], 1)
    out = np.zeros((H, Nq, v.shape[2]), F32)
    lse = np.zeros((H, Nq), F32)
    under = np.zeros((H, Nq), np.int64)
    for h in range(H):
        hk = h // group
        for r0 in range(0, Nq, r.query_chunk):
            r1 = min(Nq, r0 + r.query_chunk)
            out[h, r0:r1], lse[h, r0:r1], under[h, r0:r1] = _head(
                qv[h], kvv[hk], vv[hk], r, ss, qd[h], kd[hk], vd[hk], causal, kv_len, Nq, Nk, (r0, r1))
    return out, lse, (qd, kd, vd), under


# ----------------------------------------------------------------------------- the cases
_8 = dict(qk_accumulator="fp32", pv_accumulator="fp32")
_X = dict(qk_accumulator="exact", pv_accumulator="exact")
CASES = {
    "fa3-fold-fp32-acc": (AttentionRecipe(block_n=16, **_8), {}),
    "fa3-exact-kv-head-gqa": (AttentionRecipe(granularity="kv-head", block_n=8, **_X), dict(gqa=True)),
    "flashinfer-p-scale-per-head": (AttentionRecipe(fold="flashinfer", granularity="head", max_offset=0,
                                                    p_scale=448.0, block_n=16, **_8), {}),
    "triton-e5m2-forward-divide": (AttentionRecipe(q_format="e5m2", k_format="e5m2", v_format="e5m2",
                                                   scale_rule="none", fold="triton", max_offset=0, p_format="e5m2",
                                                   key_order="forward", normalize="divide", block_n=8, **_8), {}),
    "none-fold-no-fma-bf16": (AttentionRecipe(q_format="bfloat16", fold="none", fma=False, max_offset=0,
                                              p_format="bfloat16", normalize="divide", block_n=16, **_8), {}),
    "none-fold-with-offset-fp16": (AttentionRecipe(q_format="float16", k_format="float16", v_format="float16",
                                                   fold="none", max_offset=4, p_format="float16", block_n=16, **_8),
                                   {}),
    "rescale-threshold": (AttentionRecipe(rescale_threshold=4.0, block_n=8, **_X), dict(spread=3.0)),
    "quantized-row-sum-p-scale-promote": (AttentionRecipe(row_sum="quantized", p_scale=2.0, max_offset=6,
                                                          promote_every=2, block_n=8, **_X), {}),
    "given-kv-head-gqa-causal": (AttentionRecipe(scale_rule="given", granularity="kv-head", block_n=8, **_8),
                                 dict(gqa=True, causal=True, kv_len=30,
                                      descales=([0.03125, 0.0078125], 0.015625, [0.0625, 0.25]))),
    "given-per-head-flashinfer": (AttentionRecipe(scale_rule="given", granularity="head", fold="flashinfer",
                                                  max_offset=0, block_n=16, **_8),
                                  dict(descales=([0.02, 0.011], [0.013, 0.03], 0.1))),
    "query-chunks-causal-promote-each": (AttentionRecipe(query_chunk=2, promote_every=1, block_n=8,
                                                         max_offset=3, **_8), dict(causal=True)),
    "no-fma-forward-tensor": (AttentionRecipe(fma=False, key_order="forward", block_n=16, **_X),
                              dict(softmax_scale=0.7)),
    "p-e5m2-non-saturating-in-range": (AttentionRecipe(p_format="e5m2", p_saturate=False, block_n=16, **_8), {}),
    "biased-exp2-threshold-0": (AttentionRecipe(exp2=_low_exp2, block_n=8, **_8), {}),
    "biased-exp2-threshold-2": (AttentionRecipe(exp2=_low_exp2, rescale_threshold=2.0, block_n=8, **_8),
                                dict(spread=3.0)),
    "wide-p-float32-exact-offset0": (AttentionRecipe(p_format=None, max_offset=0, block_n=16, **_X),
                                     dict(kv_len=23)),
}


def _inputs(gqa=False, spread=1.0, seed=0):
    rng = np.random.default_rng(seed)
    H, Hk = (4, 2) if gqa else (2, 2)
    q = (rng.standard_normal((H, 5, 8)) * np.array([1.0, 3.0, 0.5, 2.0])[:H, None, None] * spread).astype(F32)
    k = (rng.standard_normal((Hk, 37, 8)) * spread).astype(F32)
    v = (rng.standard_normal((Hk, 37, 6)) * np.array([1.0, 4.0])[:, None, None]).astype(F32)
    return q, k, v


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_option_combination_gives_the_models_bits(case):
    r, kw = CASES[case]
    kw = dict(kw)
    q, k, v = _inputs(kw.pop("gqa", False), kw.pop("spread", 1.0))
    want_out, want_lse, want_desc, want_under = model(q, k, v, r, **kw)
    res = attention(q, k, v, r, reference=False, **kw)
    for got, want in zip(res.descales, want_desc):
        assert got.dtype == np.float32 and np.array_equal(got[:len(want)], want[:len(got)])
    assert np.array_equal(res.out, want_out, equal_nan=True), np.abs(res.out - want_out).max()
    assert np.array_equal(res.lse, want_lse), np.abs(res.lse - want_lse).max()
    assert np.array_equal(res.report.p_underflow, want_under)
    assert np.all(np.isfinite(res.out))


def test_the_cases_differ_from_each_other():
    """Each option changes the bits on these inputs (else a case would not test its option)."""
    q, k, v = _inputs()
    base = AttentionRecipe(block_n=16, **_8)
    ref = attention(q, k, v, base, reference=False)
    for change in (dict(fma=False), dict(max_offset=0), dict(key_order="forward"),
                   dict(p_scale=2.0), dict(row_sum="quantized"), dict(promote_every=1), dict(normalize="divide"),
                   dict(block_n=8), dict(granularity="head"), dict(p_format="e5m2"),
                   dict(pv_accumulator="exact")):
        other = attention(q, k, v, dataclasses.replace(base, **change), reference=False)
        assert not (np.array_equal(other.out, ref.out) and np.array_equal(other.lse, ref.lse)), change


def test_named_recipes_are_their_documented_settings():
    """Every field of each named kernel, as its docstring's sources state it (written out here)."""
    common = dict(q_format="e4m3fn", k_format="e4m3fn", v_format="e4m3fn", scale_rule="amax", fma=True,
                  rescale_threshold=0.0, p_scale=1.0, p_saturate=True, row_sum="float32", promote_every=None,
                  normalize="reciprocal", query_chunk=2048)
    want = {
        "fa3-fp8": dict(granularity="kv-head", qk_accumulator="hopper", pv_accumulator="hopper", block_n=128,
                        key_order="reverse", fold="fa3", max_offset=8, p_format="e4m3fn"),
        "fa4-sm100-fp8-pre2717": dict(granularity="kv-head", qk_accumulator="exact", pv_accumulator="exact",
                                      block_n=128, key_order="reverse", fold="fa3", max_offset=8,
                                      rescale_threshold=4.0, p_format="e4m3fn"),
        "fa4-sm100-fp8": dict(granularity="kv-head", qk_accumulator="exact", pv_accumulator="exact", block_n=128,
                              key_order="reverse", fold="fa3", max_offset=8, p_format="e4m3fn"),
        "flashinfer-fp8-prefill": dict(granularity="head", qk_accumulator="hopper", pv_accumulator="hopper",
                                       block_n=128, key_order="reverse", fold="flashinfer", max_offset=0,
                                       p_scale=448.0, p_format="e4m3fn"),
        "flashinfer-fp8-decode": dict(q_format="float16", granularity="tensor", qk_accumulator="fp32",
                                      pv_accumulator="fp32", block_n=16, key_order="forward", fold="flashinfer",
                                      max_offset=0, p_format=None, normalize="divide"),
        "vllm-fp8-kv-decode": dict(q_format="bfloat16", granularity="tensor", qk_accumulator="fp32",
                                   pv_accumulator="fp32", block_n=16, key_order="forward", fold="none", fma=False,
                                   max_offset=0, p_format="bfloat16", normalize="divide"),
        "triton-tutorial-fp8": dict(q_format="e5m2", k_format="e5m2", v_format="e5m2", scale_rule="none",
                                    granularity="tensor", qk_accumulator="hopper", pv_accumulator="hopper",
                                    block_n=64, key_order="forward", fold="triton", max_offset=0, p_format="e5m2",
                                    normalize="divide"),
    }
    for name, fields in want.items():
        r = get_recipe(name)
        expect = {**common, **fields}
        got = {f: getattr(r, f) for f in expect}
        assert got == expect, name
        assert r.name == name


# ----------------------------------------------------------------------------- recipe checks at their boundaries
@pytest.mark.parametrize("field, value", [
    ("p_scale", 1e-39),          # a float32 subnormal: its reciprocal overflows float32
    ("p_scale", 1e39), ("p_scale", float("nan")), ("p_scale", True), ("p_scale", "2"),
    ("rescale_threshold", 1e-50),  # > 0 in float64, 0 in float32
    ("rescale_threshold", 1e39), ("rescale_threshold", float("inf")), ("rescale_threshold", None),
])
def test_float32_fields_are_checked_as_float32(field, value):
    with pytest.raises(ValueError, match=field):
        AttentionRecipe(**{field: value})


def test_float32_fields_accept_their_boundaries():
    assert AttentionRecipe(rescale_threshold=0).rescale_threshold == 0
    assert AttentionRecipe(p_scale=2.0 ** -126).p_scale == 2.0 ** -126          # reciprocal 2**126 is finite
    assert AttentionRecipe(p_scale=np.float32(448)).p_scale == 448
    assert AttentionRecipe(p_scale=3).p_scale == 3 and AttentionRecipe(rescale_threshold=np.int64(2)).rescale_threshold == 2


@pytest.mark.parametrize("field, value, exc, match", [
    ("block_n", True, ValueError, "block_n must be a positive integer"),
    ("block_n", 2.0, ValueError, "block_n must be a positive integer"),
    ("query_chunk", 0, ValueError, "query_chunk must be a positive integer"),
    ("query_chunk", -3, ValueError, "query_chunk"),
    ("promote_every", True, ValueError, "promote_every must be None or a positive integer"),
    ("promote_every", 1.0, ValueError, "promote_every"),
    ("max_offset", True, ValueError, "max_offset"),
    ("max_offset", -1, ValueError, "max_offset"),
    ("q_format", "e8m0", ValueError, None),
    ("v_format", "float32", ValueError, "v_format"),
    ("p_format", 7, ValueError, "p_format"),
    ("scale_rule", "max", ValueError, "scale_rule must be one of"),
    ("fold", "fa2", ValueError, "fold must be one of"),
    ("normalize", "none", ValueError, "normalize must be one of"),
    ("exp2", "exp2", TypeError, "exp2 must be a callable"),
])
def test_each_recipe_field_check(field, value, exc, match):
    with pytest.raises(exc, match=match):
        AttentionRecipe(**{field: value})


def test_smallest_accepted_integer_fields():
    r = AttentionRecipe(block_n=1, query_chunk=1, promote_every=1, max_offset=0)
    assert (r.block_n, r.query_chunk, r.promote_every, r.max_offset) == (1, 1, 1, 0)
    assert AttentionRecipe(block_n=np.int32(64)).block_n == 64


def test_formats_wider_than_8_bits_are_refused_and_none_is_float32():
    from fp8emu.attention.inputs import operand_format
    assert operand_format(None, "x") is None
    with pytest.raises(ValueError, match="x must be a format name"):
        operand_format(None, "x", allow_none=False)
    assert operand_format("bfloat16", "x") == "bfloat16" and operand_format("float16", "x") == "float16"
    assert operand_format("e4m3", "x") == "e4m3"


@pytest.mark.parametrize("which", ["qk", "pv"])
def test_tensor_core_accumulators_need_8_bit_operands_naming_each(which):
    ops = ("q_format", "k_format") if which == "qk" else ("p_format", "v_format")
    one = {ops[0]: "bfloat16"}
    with pytest.raises(ValueError, match=f"{which}_accumulator='hopper'.* {ops[0]} is not"):
        AttentionRecipe(**{f"{which}_accumulator": "hopper"}, **one)
    both = {ops[0]: "bfloat16", ops[1]: None}
    with pytest.raises(ValueError, match=f"{ops[0]}, {ops[1]} are not"):
        AttentionRecipe(**{f"{which}_accumulator": "hopper"}, **both)
    assert AttentionRecipe(**{f"{which}_accumulator": "fp32"}, **both).fold == "fa3"


def test_quantized_row_sum_needs_a_p_format():
    with pytest.raises(ValueError, match="row_sum='quantized' needs a p_format"):
        AttentionRecipe(row_sum="quantized", p_format=None, pv_accumulator="fp32")
    assert AttentionRecipe(row_sum="quantized", p_format="bfloat16", pv_accumulator="fp32").row_sum == "quantized"


def test_off_recipe_turns_every_quantization_off_and_takes_changes():
    from fp8emu.attention import off_recipe
    r = off_recipe()
    assert (r.name, r.q_format, r.k_format, r.v_format, r.p_format, r.scale_rule, r.max_offset) == (
        "float32-fp32", None, None, None, None, "none", 0)
    assert (r.qk_accumulator, r.pv_accumulator) == ("fp32", "fp32")
    r = off_recipe("exact", block_n=7, name="x")
    assert (r.name, r.qk_accumulator, r.pv_accumulator, r.block_n) == ("x", "exact", "exact", 7)


def test_exp2_f32_overflows_and_underflows_quietly():
    import warnings
    from fp8emu.attention import exp2_f32
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = exp2_f32(np.array([200.0, -200.0, -np.inf, 127.5], F32))
    assert got.dtype == np.float32
    assert got.tolist() == [np.inf, 0.0, 0.0, float(F32(2.0 ** 127.5))]


# ----------------------------------------------------------------------------- non-finite P by IEEE rules
@pytest.mark.parametrize("v_format, pv", [(None, "fp32"), ("e4m3fn", "fp32"), ("e4m3fn", "exact"),
                                          ("bfloat16", "exact")])
def test_infinite_p_times_v_follows_ieee_signs(v_format, pv):
    """Two keys with equal scores, P = 2**16 past e5m2's max (non-saturating: +Inf codes): a column whose
    two V values are positive is +Inf, negative -Inf, of both signs NaN (Inf - Inf), with a zero NaN (Inf * 0)."""
    q = np.ones((1, 1, 4), F32)
    k = np.ones((1, 2, 4), F32)
    v = np.array([[[1.0, -1.0, 1.0, 0.0, 2.0], [2.0, -0.5, -1.0, 1.0, 0.5]]], F32)
    r = AttentionRecipe(q_format=None, k_format=None, v_format=v_format, scale_rule="none", qk_accumulator="fp32",
                        pv_accumulator=pv, p_format="e5m2", p_saturate=False, max_offset=16, block_n=2)
    res = attention(q, k, v, r, reference=False)
    out = res.out[0, 0]
    assert out[0] == np.inf and out[1] == -np.inf and np.isnan(out[2]) and np.isnan(out[3]) and out[4] == np.inf
    assert res.report.p_saturated.tolist() == [[2]]
    assert res.report.out_nonfinite.tolist() == [[5]] and not res.report.ok


@pytest.mark.parametrize("v_format", [None, "e4m3fn"])
def test_nan_p_makes_the_whole_row_nan(v_format):
    """e4m3fn has no Inf: an overflowing P is NaN, and NaN times anything is NaN in every column."""
    q = np.ones((1, 1, 4), F32)
    k = np.ones((1, 2, 4), F32)
    v = np.array([[[1.0, -1.0, 0.0], [2.0, 0.5, 1.0]]], F32)
    r = AttentionRecipe(q_format=None, k_format=None, v_format=v_format, scale_rule="none", qk_accumulator="fp32",
                        pv_accumulator="fp32", p_format="e4m3fn", p_saturate=False, max_offset=9, block_n=1)
    res = attention(q, k, v, r, reference=False)
    assert np.isnan(res.out).all() and res.report.p_saturated.tolist() == [[2]]
    # saturating: the same P is 448, finite, and the row is the V mean exactly
    sat = attention(q, k, v, dataclasses.replace(r, p_saturate=True), reference=False)
    # O = 448 * (v0 + v1) over the float32 row sum of the unclipped P (2 * 2**9)
    want = [448 * (a + b) / 1024 for a, b in zip(v[0, 0], v[0, 1])]
    assert sat.out[0, 0].tolist() == want and sat.report.p_saturated.tolist() == [[2]]


def test_wide_p_overflow_and_underflow_counts():
    """float16 P: 2**17 overflows to Inf (counted as saturated); P = 2**-30 (> 0 in float32) flushes to 0
    (counted as underflow)."""
    q = np.ones((1, 1, 1), F32)
    k = np.array([[[0.0], [-30.0]]], F32)
    v = np.ones((1, 2, 1), F32)
    r = AttentionRecipe(q_format=None, k_format=None, v_format=None, scale_rule="none", qk_accumulator="fp32",
                        pv_accumulator="fp32", p_format="float16", max_offset=17, block_n=2, fold="triton")
    res = attention(q, k, v, r, softmax_scale=1 / 1.44269504, reference=False)
    assert res.report.p_saturated.tolist() == [[1]] and res.report.p_underflow.tolist() == [[0]]
    res = attention(q, k, v, dataclasses.replace(r, max_offset=0), softmax_scale=1 / 1.44269504, reference=False)
    assert res.report.p_saturated.tolist() == [[0]] and res.report.p_underflow.tolist() == [[1]]
    assert res.out[0, 0, 0] == 1.0


# ----------------------------------------------------------------------------- masks, empty keys, given descales
def test_causal_rows_without_keys_are_zero_and_valid():
    """Bottom-right causal with more queries than keys: query i sees keys j <= i + Nk - Nq, so the first
    Nq - Nk rows see none: O = 0, lse = -inf, and that is not an invalid lse."""
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((1, 6, 8)), rng.standard_normal((1, 3, 8)), rng.standard_normal((1, 3, 4))
    res = attention(q, k, v, "fa3-fp8", causal=True)
    assert np.all(res.out[0, :3] == 0) and np.all(res.lse[0, :3] == -np.inf) and np.all(np.isfinite(res.lse[0, 3:]))
    assert res.report.lse_invalid.tolist() == [[0] * 6] and res.report.ok
    ref, ref_lse = reference_attention(q, k, v, causal=True)
    assert np.all(ref[0, :3] == 0) and np.all(ref_lse[0, :3] == -np.inf)
    assert res.out[0, 3, 0] == pytest.approx(ref[0, 3, 0], abs=0.1)
    # a row that has keys but whose lse is -inf is invalid, also under a causal mask
    bad = attention(q, k, v, "fa3-fp8", causal=True, softmax_scale=1e38, reference=False)
    assert bad.report.lse_invalid[0, 3:].tolist() == [1, 1, 1] and bad.report.lse_invalid[0, :3].tolist() == [0] * 3


def test_no_keys_at_all():
    q = np.ones((2, 3, 4), F32)
    k, v = np.zeros((1, 0, 4), F32), np.zeros((1, 0, 5), F32)
    res = attention(q, k, v, "fa3-fp8")
    assert res.out.shape == (2, 3, 5) and np.all(res.out == 0) and np.all(res.lse == -np.inf)
    assert res.descales[1].tolist() == [1.0] and res.descales[2].tolist() == [1.0] and res.report.ok


def test_given_descales_of_wide_operands_are_one():
    """Only 8-bit operands have descales: a bf16 Q keeps descale 1 whatever is given for it."""
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((2, 4, 8)).astype(F32) for _ in range(3))
    r = AttentionRecipe(q_format="bfloat16", scale_rule="given", qk_accumulator="fp32")
    res = attention(q, k, v, r, descales=(5.0, [0.5], np.float32(0.25)), reference=False)
    assert [d.tolist() for d in res.descales] == [[1.0, 1.0], [0.5, 0.5], [0.25, 0.25]]
    with pytest.raises(ValueError, match=r"k descale must be a scalar, got \(2,\)"):
        attention(q, k, v, r, descales=(1.0, [0.5, 0.5], 1.0))
    for bad in ((1.0, 1.0), [1.0] * 4, "abc", 1.0):
        with pytest.raises(ValueError, match="descales must be a tuple"):
            attention(q, k, v, r, descales=bad)
    assert attention(q, k, v, r, descales=[1.0, 1.0, 1.0], reference=False).out.shape == (2, 4, 8)


def test_amax_descales_per_granularity_with_gqa():
    """TE's scale fl32(448 / amax) per tensor, per query head, or per KV group (two query heads share one)."""
    rng = np.random.default_rng(5)
    q = (rng.standard_normal((4, 4, 8)) * np.array([1, 2, 3, 4])[:, None, None]).astype(F32)
    k, v = (rng.standard_normal((2, 6, 8)).astype(F32) for _ in range(2))
    amax = [float(np.abs(q[h]).max()) for h in range(4)]
    for gran, per in (("tensor", [max(amax)] * 4), ("head", amax),
                      ("kv-head", [max(amax[:2])] * 2 + [max(amax[2:])] * 2)):
        res = attention(q, k, v, AttentionRecipe(granularity=gran, **_8), reference=False)
        want = [F32(1) / F32(F32(448) / F32(a)) for a in per]
        assert res.descales[0].tolist() == [float(w) for w in want], gran


# ----------------------------------------------------------------------------- the input contract
def test_inputs_are_checked_as_float32():
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal((1, 4, 8)) for _ in range(3))
    big = q.copy()
    big[0, 0, 0] = 1e39                                     # finite in float64, Inf in float32
    with pytest.raises(ValueError, match="q overflows float32"):   # finite, so not "must be finite"
        attention(big, k, v, "fa3-fp8")
    with pytest.raises(TypeError, match="real numeric array"):
        attention(q > 0, k, v, "fa3-fp8")
    with pytest.raises(TypeError, match="real numeric array"):
        attention(q.astype(complex), k, v, "fa3-fp8")
    with pytest.raises(TypeError, match="numeric array"):
        attention(None, k, v, "fa3-fp8")
    two_d = attention(q[0], k[0], v[0], "fa3-fp8", reference=False)
    three_d = attention(q, k, v, "fa3-fp8", reference=False)
    assert np.array_equal(two_d.out, three_d.out) and two_d.out.shape == (1, 4, 8)
    ints = attention(np.ones((1, 2, 4), np.int64), np.ones((1, 3, 4), np.int8), np.ones((1, 3, 2), np.uint16),
                     "fa3-fp8", reference=False)
    assert ints.out.dtype == np.float32 and np.allclose(ints.out, 1, rtol=1e-6, atol=0)
    bf = attention(q.astype(ml_dtypes.bfloat16), k, v, "fa3-fp8", reference=False)
    assert bf.out.shape == (1, 4, 8)


def test_softmax_scale_default_and_argument_checks():
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((1, 4, 16)).astype(F32) for _ in range(3))
    r = AttentionRecipe(**_8)
    assert np.array_equal(attention(q, k, v, r, reference=False).out,
                          attention(q, k, v, r, softmax_scale=0.25, reference=False).out)     # 1 / sqrt(16)
    assert np.array_equal(attention(q, k, v, r, softmax_scale=np.float32(0.25), reference=False).out,
                          attention(q, k, v, r, softmax_scale=0.25, reference=False).out)
    for bad in (True, "0.25", None if False else [0.25]):
        with pytest.raises(ValueError, match="softmax_scale"):
            attention(q, k, v, r, softmax_scale=bad)
    for bad in (True, 2.0, -1, 5):
        with pytest.raises(ValueError, match=r"kv_len must be an integer in \[0, 4\]"):
            attention(q, k, v, r, kv_len=bad)
    assert attention(q, k, v, r, kv_len=np.int64(4), causal=np.bool_(True), reference=False).out.shape == (1, 4, 16)


# ----------------------------------------------------------------------------- the report
def test_error_measures_by_their_definitions():
    """max|O - R| / max|R|, ||O - R|| / ||R||, the cosine, and the lse error over rows with a finite
    reference lse; a zero reference gives the absolute errors, and the cosine of two zero outputs is 1."""
    from fp8emu.attention.report import AttentionReport, fill_errors
    z = np.zeros((3, 1), np.int64)
    rep = AttentionReport("x", z, z, z)
    out = np.array([[[3.0, 4.0]], [[0.5, 0.0]], [[0.0, 0.0]]], F32)
    ref = np.array([[[3.0, 3.0]], [[0.0, 0.0]], [[0.0, 0.0]]])
    lse = np.array([[1.5], [2.0], [-np.inf]], F32)
    ref_lse = np.array([[1.0], [-np.inf], [-np.inf]])
    fill_errors(rep, out, lse, ref, ref_lse)
    assert rep.max_rel_error.tolist() == [1 / 3, 0.5, 0.0]
    assert rep.rms_rel_error.tolist() == [1 / math.sqrt(18), 0.5, 0.0]
    assert rep.cosine[0] == pytest.approx(21 / (5 * math.sqrt(18)), rel=1e-15)
    assert rep.cosine[1:].tolist() == [0.0, 1.0]
    assert rep.lse_max_abs_error.tolist() == [0.5, 0.0, 0.0]


def test_report_flags_and_text():
    from fp8emu.attention.report import AttentionReport
    z = np.zeros((2, 3), np.int64)
    one = z.copy()
    one[1, 2] = 4
    one[0, 0] = 1
    rep = AttentionReport("r", z, one, one * 0 + (one > 0), out_nonfinite=one, lse_invalid=z,
                          rms_rel_error=np.array([0.1, 0.05]), max_rel_error=np.array([0.2, 0.3]),
                          cosine=np.array([0.9999, 0.99]), lse_max_abs_error=np.array([0.0, 0.0]))
    assert rep.flags == [
        "P underflow: 5 elements in 2 rows (small probabilities flushed to zero; invisible to LSE-based checks)",
        "S overflow: 2 elements in 2 rows (non-finite scores)",
        "non-finite output: 5 elements in 2 rows (NaN or Inf in O)"]
    assert not rep.ok
    text = str(rep).splitlines()
    assert text[0] == "attention report (r)"
    assert text[1] == "  error vs float64: max rel 3.000e-01, RMS rel 1.000e-01, cosine 0.990000"
    assert text[2:] == ["  " + f for f in rep.flags]
    # the output error is flagged above the threshold, not at it
    at = AttentionReport("r", z, z, z, rms_rel_error=np.array([0.1, 0.0]))
    assert at.flags == [] and at.ok
    above = AttentionReport("r", z, z, z, rms_rel_error=np.array([0.125, 0.0]), error_threshold=0.1)
    assert above.flags == ["output error: RMS relative error 0.125 above 0.1"]
    lse = AttentionReport("r", z, z, z, lse_invalid=one > 0)
    assert lse.flags == ["invalid lse: 2 elements in 2 rows (NaN or Inf log-sum-exp of a row with keys; "
                         "its row sum is 0, NaN or Inf)"]


def test_reference_kinds():
    rng = np.random.default_rng(9)
    q, k, v = (rng.standard_normal((1, 8, 16)).astype(F32) for _ in range(3))
    inp = attention(q, k, v, "fa3-fp8").report
    deq = attention(q, k, v, "fa3-fp8", reference="dequantized").report
    none = attention(q, k, v, "fa3-fp8", reference=False).report
    assert (inp.reference, deq.reference, none.reference) == ("inputs", "dequantized", None)
    assert attention(q, k, v, "fa3-fp8", reference="inputs").report.rms_rel_error.tolist() == \
        inp.rms_rel_error.tolist()
    assert none.rms_rel_error is None and none.kernel_rms_rel_error is None and none.cosine is None
    # the kernel errors are always against the dequantized inputs; the reported ones as asked
    assert inp.kernel_rms_rel_error.tolist() == deq.kernel_rms_rel_error.tolist() == deq.rms_rel_error.tolist()
    assert inp.kernel_max_rel_error.tolist() == deq.max_rel_error.tolist()
    assert inp.rms_rel_error[0] > deq.rms_rel_error[0]     # input quantization adds error
    assert attention(q, k, v, "fa3-fp8", reference=None).report.reference is None


def test_reference_attention_with_masks_and_gqa_against_direct_softmax():
    rng = np.random.default_rng(10)
    q, k, v = rng.standard_normal((4, 5, 8)), rng.standard_normal((2, 9, 8)), rng.standard_normal((2, 9, 3))
    o, lse = reference_attention(q, k, v, causal=True, kv_len=7, softmax_scale=0.3, block_n=2)
    for h in range(4):
        for i in range(5):
            keys = [j for j in range(7) if j <= i + 9 - 5]
            s = np.array([0.3 * (q[h, i] @ k[h // 2, j]) for j in keys])
            p = np.exp(s - s.max())
            np.testing.assert_allclose(o[h, i], (p / p.sum()) @ v[h // 2, keys], rtol=1e-12)
            assert lse[h, i] == pytest.approx(s.max() + math.log(p.sum()), rel=1e-13)
    o, lse = reference_attention(q, k, v, causal=True)       # bottom-right: every row sees keys
    assert np.all(np.isfinite(lse))
    with pytest.raises(ValueError, match="block_n must be a positive integer"):
        reference_attention(q, k, v, block_n=True)


# ----------------------------------------------------------------------------- fourth sample's holes (seed 42)
@pytest.mark.parametrize("p_format", ["bfloat16", "float16"])
def test_masked_keys_are_not_underflow_of_a_wide_p(p_format):
    """A masked key's P is 0 before the cast; only a P > 0 that the cast flushes to 0 is an underflow
    (bf16 and fp16 hold every P of these scores: none underflows)."""
    rng = np.random.default_rng(11)
    q, k, v = (rng.standard_normal((1, 6, 8)).astype(F32) for _ in range(3))
    r = AttentionRecipe(p_format=p_format, block_n=2, **_8)
    rep = attention(q, k, v, r, causal=True, kv_len=5, reference=False).report
    assert rep.p_underflow.tolist() == [[0] * 6] and rep.p_saturated.tolist() == [[0] * 6]


def test_divide_normalisation_of_rows_with_no_key_one_key_and_two():
    """normalize='divide' (O / l): a row with no visible key is 0 (not 0 / 0), a row with one key is that
    key's V (P = exp2(0) = 1 with max_offset 0, l = 1), a row with two equal scores is their mean."""
    q, k = np.ones((1, 3, 2), F32), np.ones((1, 2, 2), F32)
    v = np.array([[[3.0, -2.0], [5.0, 7.0]]], F32)
    r = AttentionRecipe(q_format=None, k_format=None, v_format=None, scale_rule="none", p_format=None,
                        max_offset=0, normalize="divide", block_n=1, **_8)
    res = attention(q, k, v, r, causal=True, reference=False)      # bottom-right: rows see 0, 1, 2 keys
    assert res.out[0].tolist() == [[0.0, 0.0], [3.0, -2.0], [4.0, 2.5]]
    assert res.lse[0, 0] == -np.inf and res.report.ok


@pytest.mark.parametrize("v_format", [None, "e4m3fn"])
def test_an_infinite_partial_output_rescaled_by_zero_is_nan(v_format):
    """Key 0's P overflows e5m2 (2**16, non-saturating: +Inf), so O holds +Inf; key 1's score is 200 above
    (log2 units), so the running output is rescaled by alpha = exp2(-200) = 0 in float32, and Inf * 0 is
    NaN, which key 1's own +Inf contribution cannot undo: the output is NaN, as IEEE float32 gives."""
    q = np.ones((1, 1, 1), F32)
    k = np.array([[[0.0], [200.0]]], F32)
    v = np.ones((1, 2, 1), F32)
    r = AttentionRecipe(q_format=None, k_format=None, v_format=v_format, scale_rule="none", p_format="e5m2",
                        p_saturate=False, max_offset=16, block_n=1, fold="triton", key_order="forward", **_8)
    assert F32(np.exp2(np.float64(-200))) == 0
    res = attention(q, k, v, r, softmax_scale=1 / 1.44269504, reference=False)
    assert np.isnan(res.out[0, 0, 0]) and res.report.p_saturated.tolist() == [[2]] and not res.report.ok
