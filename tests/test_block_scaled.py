"""Block-scaled GEMM (MX, NVFP4, mixed) against exact Fraction references."""

from __future__ import annotations

import zlib
from fractions import Fraction

import numpy as np
import pytest

import fp8emu
from fp8emu.gemm import GemmModel, Policy, block_scaled_mm, datapaths, models, scaled_mm, step_row
from fp8emu.scaling import MXINT8
from fp8emu.scaling.nvfp4 import nvfp4_from_codes
from oracle import floor_log2, round_f32


def _model(group=32, frac_bits=31, sum_bits=24, sum_rounding="rne", scale_at="product"):
    """A block-scaled model of these step widths: a catalogue row and where the scales apply."""
    return GemmModel("widths", "instruction", step_row(group, frac_bits, sum_bits, sum_rounding), Policy(scale_at=scale_at))

def frac_values(codes, fmt):
    return [[Fraction(float(v)) for v in row] for row in fp8emu.decode(codes, fmt, dtype=np.float64)]


def finite_codes(rng, fmt, shape, zero_frac=0.2):
    vals = fmt.values()
    ok = np.flatnonzero(np.isfinite(vals)).astype(np.uint8)
    codes = rng.choice(ok, size=shape)
    codes[rng.random(shape) < zero_frac] = 0
    return codes.astype(np.uint8)


def exact_reference(ca, fa, sa, ba, cb, fb, sb, bb, scale_value):
    """(M, N) list of exact sums of block-scaled products."""
    A, B = frac_values(ca, fa), frac_values(cb, fb)
    M, K = ca.shape
    N = cb.shape[1]
    out = []
    for m in range(M):
        row = []
        for n in range(N):
            row.append(sum(A[m][k] * scale_value(sa[m, k // ba]) * B[k][n] * scale_value(sb[k // bb, n])
                           for k in range(K)))
        out.append(row)
    return out


def e8m0(code):
    return Fraction(2) ** (int(code) - 127)


@pytest.mark.parametrize("fa,fb", [("e4m3fn", "e4m3fn"), ("e5m2", "e2m1fn"), ("e2m3fn", "e3m2fn"),
                                   ("int8", "e4m3fn"), ("e2m1fn", "e2m1fn")])
@pytest.mark.parametrize("shape", [(3, 45, 2), (2, 96, 3)])
def test_exact_matches_fraction_reference_mx(fa, fb, shape):
    M, K, N = shape
    rng = np.random.default_rng(zlib.crc32(repr((fa, fb, shape)).encode()))
    fmt_a = MXINT8 if fa == "int8" else fp8emu.get_format(fa)
    fmt_b = MXINT8 if fb == "int8" else fp8emu.get_format(fb)
    ca, cb = finite_codes(rng, fmt_a, (M, K)), finite_codes(rng, fmt_b, (K, N))
    nka = -(-K // 32)
    # extreme scales 2**-127 (code 0) and 2**127 (code 254) among ordinary ones
    sa = rng.choice(np.array([0, 254, 100, 127, 140], np.uint8), size=(M, nka))
    sb = rng.choice(np.array([0, 254, 120, 127, 130], np.uint8), size=(nka, N))
    ref = exact_reference(ca, fmt_a, sa, 32, cb, fmt_b, sb, 32, e8m0)
    got = block_scaled_mm(ca, cb, a_format=fa, b_format=fb, a_scales=sa, b_scales=sb,
                          accumulator="exact")
    want = np.array([[round_f32(q) for q in row] for row in ref], np.float32)
    assert np.array_equal(got, want)
    # the same through ScaledTensors (scaled_mm dispatches block-scaled operands)
    ta = fp8emu.scaling.mx_from_codes(ca, sa, fa)
    tb = fp8emu.scaling.mx_from_codes(cb, sb, fb, axis=0)
    assert np.array_equal(scaled_mm(ta, tb, accumulator="exact"), want)


def test_exact_from_quantized_tensors_with_subnormals_and_zeros():
    rng = np.random.default_rng(7)
    x = rng.standard_t(2, (4, 70)) * np.exp(rng.uniform(-12, 12, (4, 70)))
    x[:, 5:9] = 0.0
    w = rng.standard_normal((70, 3)) * 1e-3
    a = fp8emu.quantize_mx(x, "e4m3fn")
    b = fp8emu.quantize_mx(w, "e2m1fn", axis=0)
    da = a.dequantize().astype(np.float64)
    db = b.dequantize().astype(np.float64)
    assert np.any((a.codes & 0x78) == 0) and np.any(a.codes & 0x7 > 0)     # subnormal elements occur
    want = np.array([[round_f32(sum(Fraction(float(da[m, k])) * Fraction(float(db[k, n])) for k in range(70)))
                      for n in range(3)] for m in range(4)], np.float32)
    assert np.array_equal(block_scaled_mm(a, b, accumulator="exact"), want)


def _fp32_blockwise(A, B, sa, sb, m, n, block=32):
    """One element of the ``"fp32"`` block sum: each K block summed in float32 in K order, joining the
    total with one rounding times its two E8M0 scales."""
    total = Fraction(0)
    for kb in range(sa.shape[1]):
        part = np.float32(0)
        for k in range(kb * block, min(A.shape[1], kb * block + block)):
            part = np.float32(part + np.float32(A[m, k] * B[k, n]))
        total = Fraction(round_f32(total + Fraction(float(part)) * e8m0(sa[m, kb]) * e8m0(sb[kb, n])))
    return float(total)


def test_fp32_accumulator_matches_sequential_reference():
    rng = np.random.default_rng(3)
    M, K, N = 2, 80, 2
    fa = fp8emu.get_format("e4m3fn")
    ca, cb = finite_codes(rng, fa, (M, K)), finite_codes(rng, fa, (K, N))
    sa = rng.integers(110, 145, (M, 3)).astype(np.uint8)
    sb = rng.integers(110, 145, (3, N)).astype(np.uint8)
    A, B = fp8emu.decode(ca, fa, dtype=np.float32), fp8emu.decode(cb, fa, dtype=np.float32)
    want = np.array([[_fp32_blockwise(A, B, sa, sb, m, n) for n in range(N)] for m in range(M)], np.float32)
    got = block_scaled_mm(ca, cb, a_format="e4m3fn", b_format="e4m3fn", a_scales=sa, b_scales=sb,
                          accumulator="fp32")
    assert np.array_equal(got, want)


def test_fp32_accumulator_is_the_same_over_row_chunks_and_threads():
    """The float32 block sum runs a few rows at a time on several threads (for speed): rows past the
    first chunk, on either thread, give the sequential reference's bits."""
    rng = np.random.default_rng(5)
    M, K, N = 300, 64, 600                      # 65536 // 600 = 109 rows a chunk: three chunks
    fa = fp8emu.get_format("e4m3fn")
    ca, cb = finite_codes(rng, fa, (M, K)), finite_codes(rng, fa, (K, N))
    sa = rng.integers(110, 145, (M, 2)).astype(np.uint8)
    sb = rng.integers(110, 145, (2, N)).astype(np.uint8)
    A, B = fp8emu.decode(ca, fa, dtype=np.float32), fp8emu.decode(cb, fa, dtype=np.float32)
    runs, before = [], fp8emu.get_threads()
    try:
        for threads in (1, 2):
            fp8emu.set_threads(threads)
            runs.append(block_scaled_mm(ca, cb, a_format="e4m3fn", b_format="e4m3fn", a_scales=sa,
                                        b_scales=sb, accumulator="fp32"))
    finally:
        fp8emu.set_threads(before)
    assert np.array_equal(runs[0].view(np.uint32), runs[1].view(np.uint32))
    for m, n in [(0, 0), (108, 599), (109, 0), (150, 311), (218, 5), (299, 599)]:
        assert runs[1][m, n] == _fp32_blockwise(A, B, sa, sb, m, n), (m, n)


def te_alpha(amax_a, amax_b):
    # transformer_engine/common/recipe/nvfp4.cu: alpha = amax_A * amax_B * factor_inv in float32
    f = np.float32(1.0 / (6.0 * 6.0 * 448.0 * 448.0))
    return np.float32(np.float32(np.float32(amax_a) * np.float32(amax_b)) * f)


def test_nvfp4_exact_with_te_alpha():
    rng = np.random.default_rng(11)
    x = rng.standard_t(3, (3, 48)).astype(np.float32)
    w = rng.standard_t(3, (48, 2)).astype(np.float32)
    a, b = fp8emu.quantize_nvfp4(x), fp8emu.quantize_nvfp4(w, axis=0)
    e4m3, e2m1 = fp8emu.get_format("e4m3fn"), fp8emu.get_format("e2m1fn")

    def e4(code):
        return Fraction(float(fp8emu.decode(np.array([code], np.uint8), e4m3, dtype=np.float64)[0]))

    ref = exact_reference(a.codes, e2m1, a.block_scale_codes, 16, b.codes, e2m1, b.block_scale_codes, 16, e4)
    alpha = te_alpha(np.abs(x).max(), np.abs(w).max())
    want = np.array([[round_f32(Fraction(round_f32(q)) * Fraction(float(alpha))) for q in row] for row in ref],
                    np.float32)
    assert np.array_equal(block_scaled_mm(a, b, accumulator="exact"), want)
    # close to the product of the dequantized operands
    approx = a.dequantize().astype(np.float64) @ b.dequantize().astype(np.float64)
    assert np.allclose(block_scaled_mm(a, b, accumulator="exact"), approx, rtol=1e-5, atol=1e-5)
    # raw codes with only S_enc: alpha = fl32(1/S_a) * fl32(1/S_b)
    raw = block_scaled_mm(a.codes, b.codes, a_format="nvfp4", b_format="nvfp4", a_scales=a.block_scale_codes,
                          b_scales=b.block_scale_codes, a_global_scale=a.global_scale,
                          b_global_scale=b.global_scale, accumulator="exact")
    da = np.float32(np.float32(1) / a.global_scale)
    db = np.float32(np.float32(1) / b.global_scale)
    alpha2 = np.float32(da * db)
    want2 = np.array([[round_f32(Fraction(round_f32(q)) * Fraction(float(alpha2))) for q in row] for row in ref],
                     np.float32)
    assert np.array_equal(raw, want2)


def test_mixed_mxfp8_times_nvfp4_and_mxfp4():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 64))
    w = rng.standard_normal((64, 4))
    a = fp8emu.quantize_mx(x, "e4m3fn")
    for b in (fp8emu.quantize_mx(w, "e2m1fn", axis=0), fp8emu.quantize_nvfp4(w, axis=0)):
        ex = block_scaled_mm(a, b, accumulator="exact")
        f32 = block_scaled_mm(a, b, accumulator="fp32")
        ref = x @ w
        assert np.max(np.abs(ex - ref)) < 0.5 * np.max(np.abs(ref)) and np.max(np.abs(f32 - ex)) < 1e-5


def test_wide_mma_equals_exact_when_nothing_is_cut():
    rng = np.random.default_rng(9)
    a = fp8emu.quantize_mx(rng.standard_normal((4, 64)), "e4m3fn")
    b = fp8emu.quantize_mx(rng.standard_normal((64, 5)), "e4m3fn", axis=0)
    wide = _model(group=32, frac_bits=40, sum_bits=40)
    assert np.array_equal(block_scaled_mm(a, b, accumulator=wide), block_scaled_mm(a, b, accumulator="exact"))
    narrow = _model(group=32, frac_bits=4, sum_bits=6)
    assert not np.array_equal(block_scaled_mm(a, b, accumulator=narrow),
                              block_scaled_mm(a, b, accumulator="exact"))
    blockwise = _model(group=32, frac_bits=40, sum_bits=40, scale_at="block")
    assert np.array_equal(block_scaled_mm(a, b, accumulator=blockwise), block_scaled_mm(a, b, accumulator="fp32"))


def test_nan_scale_and_errors():
    rng = np.random.default_rng(2)
    a = fp8emu.quantize_mx(rng.standard_normal((2, 32)), "e4m3fn")
    b = fp8emu.quantize_mx(rng.standard_normal((32, 2)), "e4m3fn", axis=0)
    sa = a.scale_codes.copy()
    sa[1, 0] = 255
    out = block_scaled_mm(a.codes, b.codes, a_format="e4m3fn", b_format="e4m3fn", a_scales=sa,
                          b_scales=b.scale_codes, accumulator="exact")
    assert np.all(np.isnan(out[1])) and np.all(np.isfinite(out[0]))
    with pytest.raises(ValueError, match="axis=0"):
        block_scaled_mm(a, fp8emu.quantize_mx(rng.standard_normal((32, 2)), "e4m3fn"))
    with pytest.raises(TypeError, match="b_scales"):
        block_scaled_mm(a, b.codes, b_format="e4m3fn")
    with pytest.raises(ValueError, match="unknown block-scaled accumulator 'hopper'.*instruction preset"):
        block_scaled_mm(a, b, accumulator="hopper")
    promoted = GemmModel("promoted", "instruction", step_row(32, 31, 24, "rne"), Policy(promote=4, scale_at="product"))
    with pytest.raises(ValueError, match="'promoted': block_scaled_mm models one chain of steps .*no promotion"):
        block_scaled_mm(a, b, accumulator=promoted)
    with pytest.raises(ValueError, match="leave scale_a"):
        scaled_mm(a, b, scale_a=2.0)


# Smallest exponent of a normal number, from the OCP MX spec's format tables.
EMIN = {"e4m3fn": -6, "e5m2": -14}


def step_reference(a_row, b_col, c, emin, frac_bits, sum_bits):
    """One documented tensor-core step, D = round_sum_bits(sum of aligned, truncated terms + C).

    Each term is a product a*b with exponent ea + eb (each operand's exponent, at least
    emin: products are not normalised) or C with its own exponent; every term is truncated
    toward zero to ``frac_bits`` fraction bits below the largest of those exponents; the sum is
    rounded to ``sum_bits`` significant bits, to nearest even.
    """
    terms = []
    for x, y in zip(a_row, b_col):
        if x and y:
            terms.append((x * y, max(floor_log2(abs(x)), emin) + max(floor_log2(abs(y)), emin)))
    if c:
        terms.append((c, floor_log2(abs(c))))
    if not terms:
        return Fraction(0)
    unit = Fraction(2) ** (max(e for _, e in terms) - frac_bits)
    total = sum(int(t / unit) * unit for t, _ in terms)     # int() truncates toward zero
    if total == 0:
        return total
    ulp = Fraction(2) ** (floor_log2(abs(total)) - sum_bits + 1)
    n, rem = divmod(abs(total), ulp)
    n = int(n) + (rem * 2 > ulp or (rem * 2 == ulp and int(n) % 2))
    return (1 if total > 0 else -1) * n * ulp


@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2"])
@pytest.mark.parametrize("widths", [(32, 31, 24, "rne"), (32, 12, 24, "rne")])
def test_accumulator_input_c_joins_the_first_step(fmt, widths):
    acc = _model(*widths)
    rng = np.random.default_rng(17)
    f = fp8emu.get_format(fmt)
    ca, cb = finite_codes(rng, f, (3, 32)), finite_codes(rng, f, (32, 4))
    # C spans tiny to large magnitudes, so it is sometimes the largest term, sometimes cut
    c = (rng.standard_normal((3, 4)) * 2.0 ** rng.integers(-30, 12, (3, 4))).astype(np.float32)
    c[0, 0] = 0
    c_before = c.copy()
    ones_a, ones_b = np.full((3, 1), 127, np.uint8), np.full((1, 4), 127, np.uint8)
    got = block_scaled_mm(ca, cb, a_format=fmt, b_format=fmt, a_scales=ones_a, b_scales=ones_b,
                          accumulator=acc, c=c)
    assert np.array_equal(c, c_before)
    A, B = frac_values(ca, fmt), frac_values(cb, fmt)
    for m in range(3):
        for n in range(4):
            want = step_reference(A[m], [B[k][n] for k in range(32)], Fraction(float(c[m, n])),
                                  EMIN[fmt], widths[1], widths[2])
            assert Fraction(float(got[m, n])) == want, (m, n)
    # and "exact" is the exact sum with C, rounded once
    exact = block_scaled_mm(ca, cb, a_format=fmt, b_format=fmt, a_scales=ones_a, b_scales=ones_b,
                            accumulator="exact", c=c)
    for m in range(3):
        for n in range(4):
            q = sum(A[m][k] * B[k][n] for k in range(32)) + Fraction(float(c[m, n]))
            assert float(exact[m, n]) == round_f32(q)


def test_accumulator_input_c_is_checked():
    a = fp8emu.quantize_mx(np.ones((2, 32)), "e4m3fn")
    b = fp8emu.quantize_mx(np.ones((32, 3)), "e4m3fn", axis=0)
    assert block_scaled_mm(a, b, c=0.5)[1, 2] == 32.5          # scalars broadcast
    assert block_scaled_mm(a, b, accumulator="fp32", c=[[1.0, 2.0, 3.0]])[0, 2] == 35.0
    with pytest.raises(ValueError, match=r"c has shape \(4,\).*\(2, 3\)"):
        block_scaled_mm(a, b, c=np.zeros(4))
    with pytest.raises(ValueError, match="float32 values"):
        block_scaled_mm(a, b, c=0.1)
    with pytest.raises(ValueError, match="finite"):
        block_scaled_mm(a, b, c=np.inf)
    with pytest.raises(TypeError, match="c must be"):
        block_scaled_mm(a, b, c="1")


# ----------------------------------------------------------------------------- Rubin: UE5M3 block scales
E2M1 = [Fraction(v) for v in (0, 0.5, 1, 1.5, 2, 3, 4, 6)]


def e2m1_value(code):
    """E2M1 from its bits (OCP MX spec): sign bit 3, magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6."""
    code = int(code)
    return -E2M1[code & 7] if code & 8 else E2M1[code & 7]


def ue5m3_value(code):
    """UE5M3 from its bits: unsigned, 5 exponent bits (bias 15), 3 mantissa bits, 0xFF NaN, no Inf."""
    code = int(code)
    if code == 0xFF:
        return None
    e, m = code >> 3, code & 7
    return Fraction(m, 8) * Fraction(2) ** -14 if e == 0 else (1 + Fraction(m, 8)) * Fraction(2) ** (e - 15)


def rz_f32(x: Fraction) -> float:
    """``x`` truncated toward zero to float32 (x exact in float64 here)."""
    f = float(x)
    assert Fraction(f) == x
    r = np.float32(f)
    if abs(float(r)) > abs(f):
        r = np.nextafter(r, np.float32(0))
    return float(r)


def test_ue5m3_scale_decode_is_ml_dtypes_float8_e5m3fnu():
    # the one rule for a UE5M3 scale code in every instruction, all 256 codes: ml_dtypes 0.7's
    # float8_e5m3fnu and the bit layout, and the exponent floor(log2 v), at least -14 (its emin)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    if not hasattr(ml_dtypes, "float8_e5m3fnu"):
        pytest.skip("ml_dtypes without float8_e5m3fnu (0.7 added it)")
    from fp8emu.gemm import instruction_inputs
    codes = np.arange(256, dtype=np.uint8)
    v, e = instruction_inputs.scale_values(codes, "ue5m3")
    peer = codes.view(ml_dtypes.float8_e5m3fnu).astype(np.float64)
    np.testing.assert_array_equal(v, peer)            # NaN where the peer has NaN (0xFF only)
    assert np.isnan(v).tolist() == [c == 0xFF for c in range(256)]
    for c in range(255):
        want = ue5m3_value(c)
        assert Fraction(float(v[c])) == want, c
        if want:
            assert e[c] == max(floor_log2(want), -14), c
    assert float(v[254]) == 114688.0 and float(v[1]) == 2.0 ** -17
    # and through the instruction: scale code k times 1 * 1 under a unit scale (code 0x78 = 1.0)
    a = np.zeros((256, 64), np.uint8)
    a[:, 0] = 2                                      # E2M1 1.0
    d = fp8emu.gemm.dot(a, a, instruction="rubin-tcgen05-mxf4nvf4", a_format="e2m1fn",
                        a_scales=np.stack([codes, np.full(256, 0x78, np.uint8)], axis=1),
                        b_scales=np.full((256, 2), 0x78, np.uint8), scale_format="ue5m3")
    np.testing.assert_array_equal(d.astype(np.float64), np.where(codes == 0, 0.0, peer))


@pytest.mark.parametrize("block", [16, 32])
def test_rubin_ue5m3_gemm_is_the_exact_sum_truncated(block):
    # one instruction (K = 64): with the scales' exponents within 27 binades of each other the 35-bit
    # alignment of the model cuts nothing, so D is the exact rational sum truncated to float32 (the
    # model's result rounding); subnormal UE5M3 scales (2**-17 ...) against large ones included
    rng = np.random.default_rng(zlib.crc32(f"rubin{block}".encode()))
    M, N, K = 12, 9, 64
    a = rng.integers(0, 16, (M, K), dtype=np.uint8)
    b = rng.integers(0, 16, (K, N), dtype=np.uint8)
    sub = rng.random((M, K // block)) < 0.3
    sa = np.where(sub, rng.integers(1, 8, (M, K // block)), rng.integers(100, 161, (M, K // block))).astype(np.uint8)
    sb = rng.integers(100, 161, (K // block, N)).astype(np.uint8)
    d = fp8emu.gemm.mma(a, b, instruction="rubin-tcgen05-mxf4nvf4", a_format="e2m1fn", a_scales=sa, b_scales=sb,
                        scale_format="ue5m3")
    exact = {}
    for i in range(M):
        for j in range(N):
            x = sum(e2m1_value(a[i, k]) * ue5m3_value(sa[i, k // block]) * e2m1_value(b[k, j])
                    * ue5m3_value(sb[k // block, j]) for k in range(K))
            assert float(d[i, j]) == rz_f32(x), (i, j)
            exact[i, j] = x
    # the truncation is seen, not only sums that float32 holds exactly
    assert sum(Fraction(float(np.float32(float(x)))) != x for x in exact.values()) > 10
    # block_scaled_mm through the instruction, from UE5M3 ScaledTensors (unit tensor scales)
    one = np.float32(1)
    A = nvfp4_from_codes(a, sa, one, scale_format="e5m3fnu", block_size=block)
    B = nvfp4_from_codes(b, sb, one, axis=0, scale_format="e5m3fnu", block_size=block)
    got = block_scaled_mm(A, B, accumulator="rubin-tcgen05-mxf4nvf4")
    np.testing.assert_array_equal(got.view(np.uint32), d.view(np.uint32))
    # and the "exact" accumulator of the same operands: the exact sum rounded once, to nearest
    ex = block_scaled_mm(A, B, accumulator="exact")
    assert all(float(ex[i, j]) == float(np.float32(float(x))) for (i, j), x in exact.items())


def test_rubin_preset_is_listed_as_model_only_with_its_sources():
    from fp8emu.gemm.catalogue import get_instruction
    p = {q["name"]: q for q in fp8emu.gemm.presets()}["rubin-tcgen05-mxf4nvf4"]
    assert p["arch"] == "Rubin" and "sm_107" in p["ptx"]
    [ev] = p["evidence"]
    assert ev.startswith("model only: ")
    for source in ("CUDA Tile IR 13.4.0", "cuTile Python 1.6.0", "float8_e5m3fnu", "UE5M3 = 2",
                   "flashinfer-ai/flashinfer#4601", "Blackwell's kind::mxf4nvf4"):
        assert source in ev, source
    assert "Blackwell's tcgen05 kind::mxf4nvf4 datapath" in p["model"]
    ins, bw = get_instruction("rubin-tcgen05-mxf4nvf4"), get_instruction("blackwell-tcgen05-mxf4nvf4")
    assert sorted(ins.scale_modes) == [(k, b) for k in ("ue4m3", "ue5m3", "ue8m0") for b in (16, 32)]
    assert (ins.datapath, ins.step, ins.frac_bits, ins.rounding, ins.group, ins.zero_exp) == \
        (bw.datapath, bw.step, bw.frac_bits, bw.rounding, bw.group, bw.zero_exp)


def test_rubin_scale_modes_and_errors():
    a, b = np.zeros((2, 64), np.uint8), np.zeros((64, 2), np.uint8)
    s32, s16 = np.full((2, 2), 0x38, np.uint8), np.full((2, 4), 0x38, np.uint8)
    # UE4M3 per 32: a Rubin mode, not a Blackwell one
    d = fp8emu.gemm.mma(a, b, instruction="rubin-tcgen05-mxf4nvf4", a_format="e2m1fn", a_scales=s32,
                        b_scales=s32.T, scale_format="ue4m3")
    assert d.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    with pytest.raises(ValueError, match="takes ue4m3 scales with blocks of 16 along K, got 32"):
        fp8emu.gemm.mma(a, b, instruction="blackwell-tcgen05-mxf4nvf4", a_format="e2m1fn", a_scales=s32,
                        b_scales=s32.T, scale_format="ue4m3")
    with pytest.raises(ValueError, match="takes ue8m0, ue4m3 scales, not 'ue5m3'"):
        fp8emu.gemm.mma(a, b, instruction="blackwell-tcgen05-mxf4nvf4", a_format="e2m1fn", a_scales=s16,
                        b_scales=s16.T, scale_format="ue5m3")
    # one scale type for both operands through an instruction
    one = np.float32(1)
    A = nvfp4_from_codes(a, s16, one, scale_format="e5m3fnu")
    B = nvfp4_from_codes(b, s16.T, one, axis=0)
    with pytest.raises(ValueError, match="one scale type for both operands, got ue5m3 and ue4m3"):
        block_scaled_mm(A, B, accumulator="rubin-tcgen05-mxf4nvf4")
    # UE8M0 per 16 (MXFP4-like vectors of 16) is a Rubin mode too
    A16 = fp8emu.quantize_mx(np.ones((2, 64)), "e2m1fn", block=16)
    B16 = fp8emu.quantize_mx(np.ones((64, 2)), "e2m1fn", block=16, axis=0)
    assert block_scaled_mm(A16, B16, accumulator="rubin-tcgen05-mxf4nvf4").tolist() == [[64.0, 64.0]] * 2


@pytest.mark.parametrize("kind,block", [("ue8m0", 16), ("ue8m0", 32), ("ue4m3", 16)])
def test_rubin_model_is_blackwell_mxf4nvf4_on_blackwells_modes(kind, block):
    # the accumulation model stated in the row: on the scale modes both take, the two presets agree bit
    # for bit (codes over every E2M1 code, scales over the whole code range, NaN included, C random)
    rng = np.random.default_rng(zlib.crc32(f"{kind}{block}".encode()))
    a = rng.integers(0, 16, (3, 16, 128), dtype=np.uint8)
    b = rng.integers(0, 16, (3, 128, 8), dtype=np.uint8)
    hi = 256 if kind == "ue8m0" else 128
    sa = rng.integers(0, hi, (3, 16, 128 // block), dtype=np.uint8)
    sb = rng.integers(0, hi, (3, 128 // block, 8), dtype=np.uint8)
    c = rng.standard_normal((3, 16, 8)).astype(np.float32)
    kw = dict(a_format="e2m1fn", a_scales=sa, b_scales=sb, scale_format=kind)
    rubin = fp8emu.gemm.mma(a, b, c, instruction="rubin-tcgen05-mxf4nvf4", **kw)
    blackwell = fp8emu.gemm.mma(a, b, c, instruction="blackwell-tcgen05-mxf4nvf4", **kw)
    np.testing.assert_array_equal(rubin.view(np.uint32), blackwell.view(np.uint32))


@pytest.mark.parametrize("widths", [(32, 31, 24, "rne"), (64, 25, 24, "rtz"), (16, 12, 13, "rtz")])
def test_product_scaled_models_are_their_scaled_rows_reference_steps(widths):
    # block_scaled_mm of a scale_at="product" model is the reference chain of its row's "scaled" form of
    # unbounded exponents (fp8emu.gemm.models.scaled_row), E8M0 scales per 32 on A and UE4M3 per 16 on B
    # (subnormal and zero scales among them), C given
    rng = np.random.default_rng(zlib.crc32(repr(widths).encode()))
    M, N, K = 6, 5, 128
    e4, e2 = fp8emu.get_format("e4m3fn"), fp8emu.get_format("e2m1fn")
    a, b = finite_codes(rng, e4, (M, K)), finite_codes(rng, e2, (K, N))
    sa = rng.integers(100, 150, (M, K // 32)).astype(np.uint8)
    sb = rng.integers(0, 0x7F, (K // 16, N)).astype(np.uint8)
    sb[0, 0], sb[1, 1] = 0, 3                                   # a zero and a subnormal UE4M3 scale
    c = (rng.standard_normal((M, N)) * 4).astype(np.float32)
    model = GemmModel("w", "instruction", step_row(*widths), Policy(scale_at="product"))
    got = block_scaled_mm(a, b, a_format="e4m3fn", a_scales=sa, b_format="nvfp4", b_scales=sb, b_global_scale=1.0,
                          accumulator=model, c=c)
    row = models.scaled_row(step_row(*widths), formats=("e4m3fn", "e2m1fn"))
    ref = datapaths.reference(row, a[:, None], b.T[None], c.astype(np.float64), "e4m3fn", "e2m1fn", sa[:, None],
                              sb.T[None], ("ue8m0", "ue4m3"))
    assert np.count_nonzero(got) > M * N // 2
    np.testing.assert_array_equal(got.view(np.uint32), ref.astype(np.float32).view(np.uint32))
