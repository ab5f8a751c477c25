"""scaled_mm: bit-exact against torch._scaled_mm on an H200, hand-worked truncation cases,
exact/fp32 accumulators against independent references, and input errors."""

import types
import warnings
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import fp8emu
from fp8emu.data import golden_path
from fp8emu import GemmModel, Policy, scaled_mm, step_row

GOLDEN = np.load(golden_path("scaled_mm_dev.npz"))
E4 = "e4m3fn"


def enc(x, fmt=E4):
    codes = fp8emu.encode(np.asarray(x, dtype=np.float64), fmt)
    # the hand-built cases must use exactly representable values
    assert np.array_equal(fp8emu.decode(codes, fmt, dtype=np.float64), np.asarray(x, dtype=np.float64))
    return codes


def one_dot(a_vals, b_vals, acc, fa=E4, fb=E4):
    a = enc(np.asarray(a_vals, dtype=np.float64)[None, :], fa)
    b = enc(np.asarray(b_vals, dtype=np.float64)[:, None], fb)
    return Fraction(float(scaled_mm(a, b, a_format=fa, b_format=fb, accumulator=acc)[0, 0]))


def padded(pairs, K=32):
    """Row/column vectors of length K with (position, a, b) entries, zeros elsewhere."""
    a, b = np.zeros(K), np.zeros(K)
    for k, x, y in pairs:
        a[k], b[k] = x, y
    return a, b


# ----------------------------------------------------------------------------- golden data
def _golden_cases():
    cases = []
    for k in GOLDEN.files:
        if k.startswith("probe_fast") and k.endswith("_f32"):
            cases.append(k)
        elif k.startswith("out_K") and "_fast" in k and not k.endswith("_error"):
            cases.append(k)
        elif k.endswith("_f32") and "_fast" in k and not k.startswith(("out_", "probe")):
            cases.append(k)
    return cases


CASES = _golden_cases()
# K = 16384: cuBLAS splits K six ways there (see cublas_split_k)
LARGE_K = [c for c in CASES if "_K16384_" in c]


def _run_golden(case):
    acc = "hopper-fast" if "_fast1" in case else "hopper"
    if case.startswith("probe"):
        return scaled_mm(GOLDEN["probe_a"], GOLDEN["probe_b"], a_format=E4, b_format=E4, accumulator=acc)
    if case.startswith("out_K"):
        base = "_".join(case.split("_")[:2])
        a, b = GOLDEN[base + "_a"], GOLDEN[base + "_b"]
        if "rowwise" in case:
            return scaled_mm(a, b, a_format=E4, b_format=E4, scale_a=GOLDEN[base + "_rowscale_a"],
                             scale_b=GOLDEN[base + "_rowscale_b"], out_dtype="bfloat16", accumulator=acc)
        od = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[case.split("_")[2]]
        sa, sb = GOLDEN[base + "_scales"]
        bias = GOLDEN[base + "_bias_f32"] if case.endswith("bias1") else None
        return scaled_mm(a, b, a_format=E4, b_format=E4, scale_a=sa, scale_b=sb, bias=bias,
                         out_dtype=od, accumulator=acc)
    key = case.rsplit("_fast", 1)[0]
    fa, rest = key.split("x", 1)
    fb = rest.split("_")[0]
    return scaled_mm(GOLDEN[key + "_a"], GOLDEN[key + "_b"], a_format=fa, b_format=fb, accumulator=acc)


def _bits_equal(out, ref):
    if out.dtype == np.float32:
        same = out.view(np.uint32) == ref.view(np.uint32)
        return same | (np.isnan(out) & np.isnan(ref))
    same = out.view(np.uint16) == ref
    return same | (np.isnan(out.astype(np.float32)) & np.isnan(ref.view(out.dtype).astype(np.float32)))


def test_golden_case_count():
    assert len(CASES) == 170
    assert len(LARGE_K) == 18


@pytest.mark.parametrize("case", CASES)
def test_golden_bit_exact(case):
    out = _run_golden(case)
    ref = GOLDEN[case]
    assert out.shape == ref.shape
    same = _bits_equal(out, ref)
    assert same.all(), f"{case}: {same.mean():.4%} of elements bit-identical"


def test_golden_k16384_needs_the_split():
    # one unsplit chain over K = 16384 reproduces almost none of the GPU's fast-accum outputs
    case = "e4m3fnxe5m2_codes_K16384_fast1_f32"
    key = case.rsplit("_fast", 1)[0]
    chain = GemmModel("one chain", "instruction", step_row(32, 13, 14, "rtz"))
    out = scaled_mm(GOLDEN[key + "_a"], GOLDEN[key + "_b"], a_format=E4, b_format="e5m2",
                    accumulator=chain)
    assert _bits_equal(out, GOLDEN[case]).mean() < 0.05


def test_cublas_split_choice_on_the_recorded_shapes():
    # recorded: no split up to K = 4096 (M = N = 32, and M = 64 at K = 256), six at K = 16384
    for M, N, K in [(32, 32, 16), (32, 32, 1024), (32, 32, 4096), (64, 32, 256)]:
        assert fp8emu.gemm.cublas_split_k(M, N, K) == 1
    assert fp8emu.gemm.cublas_split_k(32, 32, 16384) == 6
    # 128 K-tiles in 6 pieces: ceil(128 / 6) = 22 tiles (2816) each, the last one 18 tiles
    assert fp8emu.gemm.split_bounds(16384, 6) == [0, 2816, 5632, 8448, 11264, 14080, 16384]
    assert fp8emu.gemm.split_bounds(16384, 1) == [0, 16384]


def test_split_pieces_restart_the_tensor_core_accumulator():
    # 1 at k = 0 and 2**-15 at k = 128: in one chain the small term falls below 2**(0 - 13)
    # and is dropped; in its own split-K piece it is exact, and float32 keeps 1 + 2**-15
    a, b = padded([(0, 1.0, 1.0), (128, 2.0 ** -9, 2.0 ** -6)], 256)
    assert one_dot(a, b, "hopper-fast") == 1
    assert one_dot(a, b, GemmModel("split", "instruction", step_row(32, 13, 14, "rtz"), Policy(split_k=2))) == 1 + Fraction(1, 2 ** 15)
    assert one_dot(a, b, GemmModel("split", "instruction", step_row(32, 13, 14, "rtz"), Policy(promote=4, split_k=2))) == 1 + Fraction(1, 2 ** 15)


def test_split_pieces_are_added_in_order_in_float32():
    # pieces 2**24, 1, -2**24: (2**24 + 1) ties to 2**24 in float32, minus 2**24 gives 0
    # (any other order, or an exact sum, gives 1)
    a, b = padded([(0, 2.0 ** 12, 2.0 ** 12), (128, 1.0, 1.0), (256, -(2.0 ** 12), 2.0 ** 12)], 384)
    assert one_dot(a, b, GemmModel("split", "instruction", step_row(32, 13, 14, "rtz"), Policy(split_k=3)), "e5m2", "e5m2") == 0
    assert one_dot(a, b, "exact", "e5m2", "e5m2") == 1


def test_golden_has_nans_and_they_propagate():
    case = "e4m3fnxe5m2_wide_K256_fast1_f32"
    ref = GOLDEN[case]
    assert np.isnan(ref).any() and not np.isnan(ref).all()
    assert np.array_equal(np.isnan(_run_golden(case)), np.isnan(ref))


# ----------------------------------------------------------------------------- hand-worked steps
def test_terms_below_13_fraction_bits_are_dropped():
    # 1*1 plus fifteen products 2**-9 * 2**-6 = 2**-15: each is below 2**(0 - 13)
    a, b = padded([(0, 1.0, 1.0)] + [(k, 2.0 ** -9, 2.0 ** -6) for k in range(1, 16)], 16)
    assert one_dot(a, b, "hopper-fast") == 1
    assert one_dot(a, b, "exact") == 1 + Fraction(15, 2 ** 15)


def test_negative_terms_truncate_toward_zero():
    # -(1.5 * 2**-13) aligned to exponent 0 with 13 fraction bits: toward zero gives -2**-13
    # (toward -inf would give -2**-12)
    a, b = padded([(0, 1.0, 1.0), (5, -1.5 * 2.0 ** -7, 2.0 ** -6)])
    assert one_dot(a, b, "hopper-fast") == 1 - Fraction(1, 2 ** 13)


def test_sum_truncated_to_14_significant_bits():
    # 1 + 1 + 2**-13 = 2 + 2**-13: 14 significant bits at exponent 1 keep 2**-12 steps
    a, b = padded([(0, 1.0, 1.0), (1, 1.0, 1.0), (2, 2.0 ** -7, 2.0 ** -6)])
    assert one_dot(a, b, "hopper-fast") == 2
    # -(2 + 2**-13) truncates toward zero as well
    a, b = padded([(0, -1.0, 1.0), (1, -1.0, 1.0), (2, -(2.0 ** -7), 2.0 ** -6)])
    assert one_dot(a, b, "hopper-fast") == -2


def test_product_exponent_is_unnormalised():
    # 1.5*1.5 = 2.25 has exponent 0+0 (not 1), so -2**-13 survives alignment (ulp 2**-13);
    # 2.25 - 2**-13 then truncates to 14 bits at exponent 1: 2.25 - 2**-12
    a, b = padded([(0, 1.5, 1.5), (7, -(2.0 ** -7), 2.0 ** -6)])
    assert one_dot(a, b, "hopper-fast") == Fraction(9, 4) - Fraction(1, 2 ** 12)
    assert one_dot(a, b, "exact") == Fraction(9, 4) - Fraction(1, 2 ** 13)


def test_incoming_accumulator_is_aligned_and_truncated():
    # step 1 leaves 1 + 2**-13; step 2 holds 4*4 = 16 (exponent 4): the carried
    # 1 + 2**-13 is truncated to multiples of 2**(4-13) = 2**-9 -> 1
    a, b = padded([(0, 1.0, 1.0), (1, 2.0 ** -7, 2.0 ** -6), (32, 4.0, 4.0)], 64)
    assert one_dot(a, b, "hopper-fast") == 17
    assert one_dot(a, b, "hopper") == 17  # both steps fall in one 128-wide promotion block
    assert one_dot(a, b, "fp32") == 17 + Fraction(1, 2 ** 13)
    assert one_dot(a, b, "exact") == 17 + Fraction(1, 2 ** 13)


def test_promotion_every_128_products():
    # 2**-13 at k=0, 16*16 = 256 at k=128: with fast accumulation the small value is
    # truncated away by the big step; with promotion it was moved into FP32 first
    a, b = padded([(0, 2.0 ** -7, 2.0 ** -6), (128, 16.0, 16.0)], 256)
    assert one_dot(a, b, "hopper-fast") == 256
    assert one_dot(a, b, "hopper") == 256 + Fraction(1, 2 ** 13)
    # inside one promotion block (k=127) the value is lost in both modes
    a, b = padded([(0, 2.0 ** -7, 2.0 ** -6), (127, 16.0, 16.0)], 256)
    assert one_dot(a, b, "hopper") == 256


def test_custom_accumulator_with_more_bits_keeps_small_terms():
    wide = GemmModel("wide", "instruction", step_row(32, 25, 25))
    a, b = padded([(0, 1.0, 1.0)] + [(k, 2.0 ** -9, 2.0 ** -6) for k in range(1, 16)], 16)
    assert one_dot(a, b, wide) == 1 + Fraction(15, 2 ** 15)


def test_rne_step_rounding_option():
    # 2 + 3 * 2**-13 (the small product is on the 2**-13 alignment grid, so it is kept
    # whole); 14 bits at exponent 1 -> steps of 2**-12 and 3 * 2**-13 = 1.5 steps:
    # RTZ gives 2 + 2**-12, RNE (a tie, to even) gives 2 + 2*2**-12
    a, b = padded([(0, 1.0, 1.0), (1, 1.0, 1.0), (2, 1.5 * 2.0 ** -6, 2.0 ** -6)])
    assert one_dot(a, b, "hopper-fast") == 2 + Fraction(1, 2 ** 12)
    rne = GemmModel("rne", "instruction", step_row(32, 13, 14, "rne"))
    assert one_dot(a, b, rne) == 2 + Fraction(2, 2 ** 12)


# ----------------------------------------------------------------------------- exact / fp32
def _round_to_f32(x: Fraction) -> Fraction:
    """Nearest-even float32 of an exact rational, by comparing the neighbours exactly."""
    c = np.float32(float(x))
    cands = [c, np.nextafter(c, np.float32(np.inf)), np.nextafter(c, np.float32(-np.inf))]
    best = min(cands, key=lambda v: (abs(Fraction(float(v)) - x),
                                     int(np.array(v).view(np.uint32)) & 1))
    return Fraction(float(best))


@pytest.mark.parametrize("fa,fb", [(E4, E4), ("e5m2", "e5m2"), (E4, "e5m2")])
def test_exact_equals_fraction_sum_rounded_once(fa, fb):
    rng = np.random.default_rng(7)
    M, K, N = 3, 96, 4
    va = np.sign(rng.standard_normal((M, K))) * 2.0 ** rng.uniform(-14, 14, (M, K))
    vb = np.sign(rng.standard_normal((K, N))) * 2.0 ** rng.uniform(-14, 14, (K, N))
    a = fp8emu.encode(va, fa, saturate=True)
    b = fp8emu.encode(vb, fb, saturate=True)
    A = fp8emu.decode(a, fa, dtype=np.float64)
    B = fp8emu.decode(b, fb, dtype=np.float64)
    out = scaled_mm(a, b, a_format=fa, b_format=fb, accumulator="exact")
    for i in range(M):
        for j in range(N):
            s = sum(Fraction(float(A[i, k])) * Fraction(float(B[k, j])) for k in range(K))
            assert Fraction(float(out[i, j])) == _round_to_f32(s), (i, j)


def test_exact_breaks_a_float32_tie_with_a_tiny_term():
    # 1 + 2**-24 is a float32 tie (-> 1); a further +2**-40 must push it up to 1 + 2**-23
    a = np.zeros(32)
    b = np.zeros(32)
    a[:3] = [1.0, 2.0 ** -12, 2.0 ** -13]
    b[:3] = [1.0, 2.0 ** -12, 2.0 ** -14]
    va = enc(a[None, :], "e5m2")
    vb = enc(b[:, None], "e5m2")
    out = scaled_mm(va, vb, a_format="e5m2", b_format="e5m2", accumulator="exact")[0, 0]
    assert Fraction(float(out)) == 1 + Fraction(1, 2 ** 23)


def test_fp32_equals_sequential_float32_loop():
    rng = np.random.default_rng(3)
    a = fp8emu.encode(rng.standard_normal((4, 208)) * 30, E4, saturate=True)
    b = fp8emu.encode(rng.standard_normal((208, 5)) * 30, E4, saturate=True)
    A = fp8emu.decode(a, E4)
    B = fp8emu.decode(b, E4)
    ref = np.zeros((4, 5), np.float32)
    for i in range(4):
        for j in range(5):
            s = np.float32(0)
            for k in range(208):
                s = np.float32(s + np.float32(A[i, k] * B[k, j]))
            ref[i, j] = s
    out = scaled_mm(a, b, a_format=E4, b_format=E4, accumulator="fp32")
    assert np.array_equal(out.view(np.uint32), ref.view(np.uint32))


def test_accumulators_differ_as_expected_on_long_sums():
    rng = np.random.default_rng(5)
    a = fp8emu.encode(rng.standard_normal((8, 2048)), E4)
    b = fp8emu.encode(np.abs(rng.standard_normal((2048, 8))), E4)
    exact = scaled_mm(a, b, a_format=E4, b_format=E4, accumulator="exact").astype(np.float64)
    err = {n: np.abs(scaled_mm(a, b, a_format=E4, b_format=E4, accumulator=n) - exact).max()
           for n in ("fp32", "hopper", "hopper-fast")}
    assert err["hopper-fast"] > err["hopper"] > 0


# ----------------------------------------------------------------------------- scales, bias, output
def test_power_of_two_block_scales_scale_exactly():
    rng = np.random.default_rng(11)
    a = fp8emu.encode(rng.standard_normal((8, 256)) * 4, E4)
    b = fp8emu.encode(rng.standard_normal((256, 8)) * 4, E4)
    base = scaled_mm(a, b, a_format=E4, b_format=E4)
    out = scaled_mm(a, b, a_format=E4, b_format=E4, scale_a=np.full((8, 2), 0.25, np.float32),
                    scale_b=np.full((2, 8), 8.0, np.float32))
    assert np.array_equal(out, base * np.float32(2.0))


def test_block_scales_weight_each_k_block():
    # K block 0 holds 1*1, K block 1 holds 1*1: scales 3 and 5 give 1*3 + 1*5 = 8
    a, b = padded([(0, 1.0, 1.0), (128, 1.0, 1.0)], 256)
    A, B = enc(a[None, :]), enc(b[:, None])
    sa = np.array([[3.0, 5.0]], np.float32)
    for acc in ("hopper", "hopper-fast", "fp32", "exact"):
        assert scaled_mm(A, B, a_format=E4, b_format=E4, scale_a=sa, accumulator=acc)[0, 0] == 8.0
    sa128 = np.array([[3.0, 5.0]], np.float32)  # 128x128 blocks: ceil(1/128) = 1 row block
    sb128 = np.array([[2.0], [0.5]], np.float32)
    assert scaled_mm(A, B, a_format=E4, b_format=E4, scale_a=sa128, scale_b=sb128)[0, 0] == 8.5


def test_scaled_tensor_duck_typing():
    rng = np.random.default_rng(2)
    ca = fp8emu.encode(rng.standard_normal((4, 64)), E4)
    cb = fp8emu.encode(rng.standard_normal((64, 6)), "e5m2")
    sa = types.SimpleNamespace(codes=ca, fmt=fp8emu.get_format(E4), scale_inv=np.float32(0.5))
    sb = types.SimpleNamespace(codes=cb, fmt=fp8emu.get_format("e5m2"),
                               scale_inv=np.full((1, 6), 2.0, np.float32))
    out = scaled_mm(sa, sb)
    ref = scaled_mm(ca, cb, a_format=E4, b_format="e5m2", scale_a=0.5, scale_b=np.full((1, 6), 2.0))
    assert np.array_equal(out, ref)


def test_bias_is_added_in_the_output_type_with_one_rounding():
    a, b = padded([(0, 1.0, 1.0)], 16)
    A, B = enc(a[None, :]), enc(b[:, None])
    # 1 + bf16(2**-8 + 2**-20) = 1 + 2**-8: a bf16 tie, rounded once to even -> 1
    out = scaled_mm(A, B, a_format=E4, b_format=E4, bias=np.array([2.0 ** -8 + 2.0 ** -20]),
                    out_dtype="bfloat16")
    assert out.dtype == ml_dtypes.bfloat16 and float(out[0, 0]) == 1.0
    out = scaled_mm(A, B, a_format=E4, b_format=E4, bias=np.array([3 * 2.0 ** -8]), out_dtype="bfloat16")
    assert float(out[0, 0]) == 1.0 + 2.0 ** -6  # 1 + 3*2**-8: tie between 1+2**-7 and 1+2*2**-7


def test_fp8_output_with_scale_result():
    a, b = padded([(0, 3.0, 1.0)], 16)
    A, B = enc(a[None, :]), enc(b[:, None])
    out = scaled_mm(A, B, a_format=E4, b_format=E4, out_dtype="e4m3fn", scale_result=2.0)
    assert out.dtype == np.uint8 and fp8emu.decode(out, E4)[0, 0] == 6.0


def test_infinities_propagate():
    a = np.zeros((1, 16))
    b = np.zeros((16, 3))
    a[0, 0], a[0, 1] = np.inf, 1.0
    b[0] = [1.0, -1.0, 0.0]
    b[1] = [1.0, 1.0, 1.0]
    out = scaled_mm(fp8emu.encode(a, "e5m2"), fp8emu.encode(b, "e5m2"), a_format="e5m2", b_format="e5m2")
    assert out[0, 0] == np.inf and out[0, 1] == -np.inf and np.isnan(out[0, 2])


# ----------------------------------------------------------------------------- errors
def test_errors():
    a = np.zeros((2, 32), np.uint8)
    b = np.zeros((32, 3), np.uint8)
    with pytest.raises(ValueError, match="shape mismatch"):
        scaled_mm(a, np.zeros((16, 3), np.uint8), a_format=E4, b_format=E4)
    with pytest.raises(ValueError, match="unknown accumulator 'volta'.*instruction preset"):
        scaled_mm(a, b, a_format=E4, b_format=E4, accumulator="volta")
    with pytest.raises(ValueError):
        scaled_mm(a, b, a_format="e9m9", b_format=E4)
    with pytest.raises(TypeError, match="a_format is required"):
        scaled_mm(a, b, b_format=E4)
    with pytest.raises(TypeError, match="e4m3fn codes"):
        scaled_mm(a.astype(np.float32), b, a_format=E4, b_format=E4)
    with pytest.raises(ValueError, match="overflows float32"):
        scaled_mm(a, b, a_format=E4, b_format=E4, scale_a=1e39)
    with pytest.warns(RuntimeWarning, match="Inf or NaN"):     # multiplied as cuBLAS's epilogue does
        scaled_mm(a, b, a_format=E4, b_format=E4, scale_b=np.array([[1.0, np.nan, 1.0]]))
    with pytest.raises(ValueError, match="scale_a has shape"):
        scaled_mm(a, b, a_format=E4, b_format=E4, scale_a=np.ones((3, 1)))
    with pytest.raises(ValueError, match="bias"):
        scaled_mm(a, b, a_format=E4, b_format=E4, bias=np.ones(4))
    with pytest.raises(ValueError, match="out_dtype"):
        scaled_mm(a, b, a_format=E4, b_format=E4, out_dtype="float128x")
    with pytest.raises(ValueError, match="scale_result"):
        scaled_mm(a, b, a_format=E4, b_format=E4, scale_result=2.0)
    with pytest.raises(ValueError, match="frac_bits"):
        step_row(32, 0, 14)
    with pytest.raises(ValueError, match="kind"):
        GemmModel("bf16", "bf16")
    for bad in (0, -2, "auto", 1.5, True):
        with pytest.raises(ValueError, match="split_k"):
            Policy(split_k=bad)
    with pytest.raises(ValueError, match="split_k"):
        GemmModel("fp32", "fp32", policy=Policy(split_k=2))


def test_k_not_multiple_of_16_warns_but_computes():
    a, b = padded([(0, 1.0, 2.0), (9, 1.0, 1.0)], 10)
    with pytest.warns(RuntimeWarning, match="multiple of 16"):
        out = scaled_mm(enc(a[None, :]), enc(b[:, None]), a_format=E4, b_format=E4)
    assert out[0, 0] == 3.0


def test_inputs_not_modified():
    rng = np.random.default_rng(1)
    a = fp8emu.encode(rng.standard_normal((3, 32)), E4)
    b = fp8emu.encode(rng.standard_normal((32, 3)), E4)
    a0, b0 = a.copy(), b.copy()
    sa = np.ones((3, 1), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaled_mm(a, b, a_format=E4, b_format=E4, scale_a=sa, bias=np.zeros(3), out_dtype="bfloat16")
    assert np.array_equal(a, a0) and np.array_equal(b, b0) and np.all(sa == 1)


def test_with_fp8emu_scaling_quantizers():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((40, 320))
    w = rng.standard_normal((320, 24))
    ta = fp8emu.quantize_blockwise(x, E4, block=(1, 128))
    tb = fp8emu.quantize_blockwise(w, E4, block=(128, 128))
    out = scaled_mm(ta, tb)
    ref = scaled_mm(ta.codes, tb.codes, a_format=E4, b_format=E4, scale_a=ta.scale_inv, scale_b=tb.scale_inv)
    assert np.array_equal(out, ref)
    # a coarse sanity bound: FP8 inputs keep the product within a few percent
    assert np.abs(out - x @ w).max() < 0.1 * np.abs(x @ w).max()
    ra = fp8emu.quantize_axiswise(x, E4, axis=-1)
    rb = fp8emu.quantize_axiswise(w, E4, axis=0)
    assert ra.scale_inv.shape == (40, 1) and rb.scale_inv.shape == (1, 24)
    out = scaled_mm(ra, rb, out_dtype="bfloat16")
    assert out.dtype == ml_dtypes.bfloat16


# ----------------------------------------------------------------------------- torch-shaped inputs (no torch)
def test_formats_from_ml_dtypes_arrays_and_a_disagreeing_one_is_refused():
    import ml_dtypes
    rng = np.random.default_rng(5)
    a = (rng.standard_normal((4, 32)) * 8).astype(ml_dtypes.float8_e4m3fn)
    b = (rng.standard_normal((32, 3)) * 8).astype(ml_dtypes.float8_e5m2)
    want = scaled_mm(a.view(np.uint8), b.view(np.uint8), a_format=E4, b_format="e5m2")
    assert np.array_equal(scaled_mm(a, b), want)
    with pytest.raises(ValueError, match="b_format is e4m3fn but b holds e5m2 codes"):
        scaled_mm(a, b, b_format=E4)


def test_bfloat16_bias_and_out_dtype_names():
    import ml_dtypes
    a = np.full((2, 32), 0x38, np.uint8)
    b = np.full((32, 2), 0x38, np.uint8)
    bias16 = np.array([0.5, -1.25], ml_dtypes.bfloat16)
    got = scaled_mm(a, b, a_format=E4, b_format=E4, bias=bias16, out_dtype="bfloat16")
    # 32 products of 1 plus an exact bias: 32.5 and 30.75, both bfloat16 values
    assert got.dtype == np.dtype(ml_dtypes.bfloat16) and got.astype(np.float32).tolist() == [[32.5, 30.75]] * 2
    with pytest.raises(TypeError, match="bias must be float32, float16 or bfloat16"):
        scaled_mm(a, b, a_format=E4, b_format=E4, bias=np.array([1, 2], np.complex64))


def test_batched_operands_are_a_batch_of_gemms():
    rng = np.random.default_rng(6)
    a = rng.integers(0, 0x70, (3, 4, 32)).astype(np.uint8)
    b = rng.integers(0, 0x70, (3, 32, 5)).astype(np.uint8)
    sa = np.float32([[[0.5]], [[2.0]], [[1.5]]]) * np.ones((3, 4, 1), np.float32)
    out = scaled_mm(a, b, a_format=E4, b_format=E4, scale_a=sa, scale_b=np.ones((1, 5), np.float32))
    assert out.shape == (3, 4, 5)
    for i in range(3):
        assert np.array_equal(out[i], scaled_mm(a[i], b[i], a_format=E4, b_format=E4, scale_a=sa[i],
                                                scale_b=np.ones((1, 5), np.float32)))
    shared = scaled_mm(a, b[0], a_format=E4, b_format=E4)          # a 2-D b is shared by the batch
    assert np.array_equal(shared[2], scaled_mm(a[2], b[0], a_format=E4, b_format=E4))
    with pytest.raises(ValueError, match="batch sizes differ"):
        scaled_mm(a, b[:2], a_format=E4, b_format=E4)


def test_torch_out_dtypes_name_their_formats():
    """A torch dtype as out_dtype names the format of the same bits (the one dtype -> format map)."""
    torch = pytest.importorskip("torch")
    from fp8emu.gemm.epilogue import output_type
    want = {torch.float8_e4m3fn: "e4m3fn", torch.float8_e5m2: "e5m2", torch.float8_e4m3fnuz: "e4m3fnuz",
            torch.float8_e5m2fnuz: "e5m2fnuz"}
    for dt, name in want.items():
        assert output_type(dt)[0] is None and output_type(dt)[1].name == name, dt
    for dt, name in ((torch.bfloat16, "bfloat16"), (torch.float16, "float16"), (torch.float32, "float32")):
        assert output_type(dt) == (np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name), None)
    a = np.full((2, 32), 0x38, np.uint8)
    got = scaled_mm(a, a.T.copy(), a_format=E4, b_format=E4, out_dtype=torch.float8_e5m2)
    assert np.array_equal(got, scaled_mm(a, a.T.copy(), a_format=E4, b_format=E4, out_dtype="e5m2"))
    with pytest.raises(ValueError, match="unknown out_dtype"):
        output_type(torch.int8)
