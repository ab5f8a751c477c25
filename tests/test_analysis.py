"""Error metrics and sweeps, checked against hand-worked values, spec bounds and theory."""

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import fp8emu
from fp8emu.lab import analysis


def test_error_metrics_hand_worked():
    m = analysis.error_metrics([1.0, -2.0, 4.0, 0.0], [1.0, -2.5, 3.0, 0.0], fmt="e4m3fn")
    # errors 0, -0.5, -1, 0
    assert m["abs_err"] == 1.0
    assert m["mean_abs_err"] == 0.375
    assert m["mse"] == (0.25 + 1.0) / 4
    assert m["bias"] == -1.5 / 4
    assert m["rel_err"] == pytest.approx((0 + 0.25 + 0.25) / 3)
    assert m["max_rel_err"] == 0.25
    assert m["sqnr_db"] == pytest.approx(10 * np.log10(21 / 1.25))
    # ulp of e4m3fn is 0.25 at 2 and 0.5 at 4: errors of 2 ulps each
    assert m["ulp_err"] == 2.0
    assert m["nonfinite"] == 0


def test_error_metrics_counts_nonfinite_and_checks_shapes():
    m = analysis.error_metrics([1.0, 1e6], [1.0, np.nan])
    assert m["nonfinite"] == 1 and m["sqnr_db"] == float("inf")
    with pytest.raises(ValueError, match="same shape"):
        analysis.error_metrics([1.0], [1.0, 2.0])


@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2", "e3m4", "e2m1fn"])
def test_ulp_is_the_spacing_of_representable_values(fmt):
    f = fp8emu.get_format(fmt)
    v = np.unique(f.values()[np.isfinite(f.values())])
    v = v[v >= 0]
    x = np.random.default_rng(1).uniform(0, f.max, 2000)
    hi = np.searchsorted(v, x, side="right")
    keep = hi < v.size
    spacing = v[hi[keep]] - v[hi[keep] - 1]
    assert np.array_equal(analysis.ulp(x[keep], fmt), spacing)


@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2", "e3m4", "e2m1fn", "e8m0fnu"])
def test_values_per_binade_match_the_codes(fmt):
    f = fp8emu.get_format(fmt)
    e, c = analysis.values_per_binade(fmt)
    vals = f.values()
    npos = np.count_nonzero(np.isfinite(vals) & (vals > 0))
    assert c.sum() == npos
    # Every normal binade below the top one has 2^mbits values (the spec's significand count).
    emin_normal = int(np.log2(f.min_normal))
    normal = (e >= emin_normal) & (e < e.max())
    assert np.all(c[normal] == 2 ** f.mbits)


@pytest.mark.parametrize("fmt,mbits", [("e4m3fn", 3), ("e5m2", 2), ("e3m4", 4), ("e2m1fn", 1),
                                       ("bfloat16", 7)])
def test_relative_error_bounded_by_half_ulp_in_normal_range(fmt, mbits):
    x, r = analysis.relative_error_curve(fmt, n=3001)
    min_normal = (float(ml_dtypes.finfo(ml_dtypes.bfloat16).smallest_normal) if fmt == "bfloat16"
                  else fp8emu.get_format(fmt).min_normal)
    normal = x >= min_normal
    assert r[normal].max() <= 2.0 ** -(mbits + 1)
    # the sup is at the first midpoint of a binade, half an ulp over 1 + half an ulp
    h = 2.0 ** -(mbits + 1)
    _, r1 = analysis.relative_error_curve(fmt, 1.0, 2.0, n=4001)
    assert r1.max() > 0.95 * h / (1 + h)


def test_uniform_rounding_noise_matches_ulp_squared_over_12():
    x = np.random.default_rng(2).uniform(1.0, 2.0, 200_000)
    q = analysis.quantize_values(x, "e4m3fn")
    m = analysis.error_metrics(x, q)
    assert m["mse"] == pytest.approx(0.125 ** 2 / 12, rel=0.03)
    assert abs(m["bias"]) < 4 * np.sqrt(0.125 ** 2 / 12 / x.size)


def test_sample_distributions_are_seeded_and_shaped():
    for d in analysis.DISTRIBUTIONS:
        a = analysis.sample(d, 5000, rng=3)
        assert a.shape == (5000,) and a.dtype == np.float64
        assert np.array_equal(a, analysis.sample(d, 5000, rng=3))
    o = analysis.sample("outliers", 200_000, rng=0)
    assert 0.0005 < np.mean(np.abs(o) > 50) < 0.002  # ~0.1 % outliers x1000
    assert np.all(np.abs(analysis.sample("uniform", 1000)) <= 1)
    assert np.all(analysis.sample("lognormal", 1000) != 0)
    with pytest.raises(ValueError, match="distribution"):
        analysis.sample("cauchy", 10)
    with pytest.raises(ValueError, match="n must"):
        analysis.sample("gaussian", 0)


def test_sweep_per_tensor_scaling_is_scale_invariant_and_unscaled_is_not():
    scales = 2.0 ** np.arange(-20, 21, 4)
    t = analysis.sweep_scale(["e4m3fn", "e5m2"], ["gaussian", "laplace"], scales, n=2000,
                             recipes=("none", "tensor"))
    assert len(t) == 2 * 2 * 2 * scales.size
    for f in ("e4m3fn", "e5m2"):
        s = t.where(format=f, recipe="tensor", distribution="laplace")["sqnr_db"]
        # scaling by powers of two commutes with rounding, so the scaled SQNR is identical
        assert np.all(s == s[0])
        u = t.where(format=f, recipe="none", distribution="gaussian")
        assert u["sqnr_db"].min() < 1.0 and u["sqnr_db"].max() == pytest.approx(
            t.where(format=f, recipe="tensor", distribution="gaussian")["sqnr_db"][0], abs=1.0)


def test_sweep_counts_overflow_and_underflow_independently():
    scale = 1000.0
    t = analysis.sweep_scale(["e4m3fn"], ["gaussian"], [scale, 1e-4], n=3000, seed=5)
    z = analysis.sample("gaussian", 3000, rng=[5, 0])
    assert t["overflow"][0] == np.count_nonzero(np.abs(z * scale) > 448)
    # values below half the min subnormal 2^-10 round to zero under rne
    assert t["underflow"][1] >= np.count_nonzero(np.abs(z * 1e-4) < 2.0 ** -10)


def test_sweep_rejects_unknown_recipe():
    with pytest.raises(ValueError, match="recipe"):
        analysis.sweep_scale(["e4m3fn"], ["gaussian"], [1.0], recipes=("blockwise",))


def test_rounding_bias_rtz_is_minus_the_fraction_and_sr_is_unbiased():
    x = np.array([1.0 + 1 / 32, 1.0 + 3 / 32, 3.3])
    b = analysis.rounding_bias("e4m3fn", x, modes=("rtz", "rne", "stochastic"), draws=4000)
    expected_rtz = [float(Fraction(1, 32)) * -1, -float(Fraction(3, 32)), 3.25 - 3.3]
    assert b["rtz"] == pytest.approx(expected_rtz)
    assert b["rne"][0] == -1 / 32 and b["rne"][1] == 1 / 32
    # SR std of the mean over 4000 draws is < 0.5 ulp / sqrt(4000)
    assert np.all(np.abs(b["stochastic"]) < 4 * 0.25 / np.sqrt(4000))


def test_stochastic_variance_approaches_f_one_minus_f():
    x = np.array([1.0 + 0.125 * 0.3])  # f = 0.3 of an ulp
    t = analysis.stochastic_variance("e4m3fn", x, bits=(1, 16), draws=20000)
    assert t["ideal_variance"][0] == pytest.approx(0.21)
    assert t["variance"][1] == pytest.approx(0.21, rel=0.05)
    # one random bit can only round at the half-way point: 0.3 < 0.5 never rounds up
    assert t["variance"][0] == 0.0 and t["mean_abs_bias"][0] == pytest.approx(0.3)


def test_table_object():
    t = analysis.Table({"a": [1, 2], "b": [0.5, 0.25]})
    assert t.columns == ("a", "b") and len(t) == 2
    assert t.rows() == [{"a": 1, "b": 0.5}, {"a": 2, "b": 0.25}]
    with pytest.raises(KeyError, match="no column"):
        t["c"]
    with pytest.raises(ValueError, match="equal lengths"):
        analysis.Table({"a": [1], "b": [1, 2]})
    with pytest.raises(TypeError):
        analysis.Table([1, 2])


# ----------------------------------------------------------------------------- your own data
# Expectations below come from ml_dtypes' own casts (round to nearest even, an independent
# implementation) and NumPy formulas written here, never from fp8emu's codec.

def _e4m3_tensorwise(x):
    """ml_dtypes: one float32 scale 448/amax, RNE cast, dequantized in float32 with fl32(1/scale)."""
    x32 = np.asarray(x, np.float32)
    s = np.float32(448.0) / np.float32(np.max(np.abs(x32)))
    y = (x32 * s).astype(np.float32).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    return (y * (np.float32(1.0) / s)).astype(np.float64)


def _sqnr(x, q):
    return 10 * np.log10(np.sum(x ** 2) / np.sum((q - x) ** 2))


def test_granularity_sqnr_of_user_data_matches_ml_dtypes():
    g = np.random.default_rng(3)
    x = (g.standard_normal((64, 256)) * np.exp(g.standard_normal((64, 1)))).astype(np.float32).astype(np.float64)
    t = analysis.granularity_sqnr(x)
    assert list(t["recipe"]) == list(analysis.GRANULARITY_RECIPES)
    got = dict(zip(t["recipe"], t["sqnr_db"]))
    assert got["per-tensor"] == pytest.approx(_sqnr(x, _e4m3_tensorwise(x)), abs=1e-9)
    rows = np.stack([_e4m3_tensorwise(r) for r in x])
    assert got["row-wise"] == pytest.approx(_sqnr(x, rows), abs=1e-9)
    # MX (OCP v1.0): scale 2^(floor(log2 amax) - 8) per 32 elements, elements cast saturating
    b = x.reshape(64, 8, 32)
    e = np.floor(np.log2(np.max(np.abs(b), axis=-1, keepdims=True))) - 8
    y = np.clip(b / 2.0 ** e, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float64) * 2.0 ** e
    assert got["MX32 e4m3 floor"] == pytest.approx(_sqnr(x, y.reshape(x.shape)), abs=1e-9)


def test_sweep_scale_takes_user_data_by_label():
    x = np.random.default_rng(4).standard_t(3, 3000).astype(np.float32).astype(np.float64)
    scales = [2.0 ** -10, 1.0, 2.0 ** 6]
    t = analysis.sweep_scale(["e4m3fn"], {"my acts": x}, scales)
    assert set(t["distribution"]) == {"my acts"}
    for s, got in zip(scales, t["sqnr_db"]):
        y = np.clip(x * s, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
        assert got == pytest.approx(_sqnr(x * s, y), abs=1e-9)


def test_binade_errors_match_an_element_wise_computation():
    x = np.random.default_rng(5).lognormal(0, 3, 5000).astype(np.float32).astype(np.float64)
    t = analysis.binade_errors(x, "e4m3fn", recipe="tensor")
    s = 448.0 / np.max(x)     # the lab's float64 "tensor" recipe, as in sweep_scale
    q = (x * s).astype(ml_dtypes.float8_e4m3fn).astype(np.float64) / s
    rel = np.abs(q - x) / x
    e = np.floor(np.log2(x)).astype(int)
    assert t["count"].sum() == x.size
    for row in t.rows():
        sel = e == row["exponent"]
        assert row["count"] == np.count_nonzero(sel)
        assert row["mean_rel_err"] == pytest.approx(np.mean(rel[sel]), rel=1e-12)
        assert row["max_rel_err"] == pytest.approx(np.max(rel[sel]), rel=1e-12)
        assert row["flushed"] == np.count_nonzero(q[sel] == 0)


def test_gemm_error_vs_k_against_exact_and_float32_sums():
    g = np.random.default_rng(6)
    a = g.standard_normal((3, 512)).astype(np.float32)
    b = g.uniform(0, 1, (512, 2)).astype(np.float32)
    t = analysis.gemm_error_vs_k(a, b, accumulators=("exact", "fp32"), ks=(64, 512))
    assert t["k"].tolist() == [64, 64, 512, 512]
    sa = np.float32(448.0) / np.float32(np.max(np.abs(a)))
    sb = np.float32(448.0) / np.float32(np.max(np.abs(b)))
    qa = (a * sa).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    qb = (b * sb).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    inv = np.float64(np.float32(1) / sa) * np.float64(np.float32(1) / sb)
    for k in (64, 512):
        ref = a[:, :k].astype(np.float64) @ b[:k]
        ref_q = qa[:, :k] @ qb[:k] * inv
        acc = np.zeros((3, 2), np.float32)      # fp32: one float32 sum, products exact, in K order
        for i in range(k):
            acc = np.float32(acc + np.float32(qa[:, i:i + 1] * qb[i:i + 1, :]))
        # epilogue as cuBLASLt's alpha: fl32(C * fl32(scale_a * scale_b))
        fp32 = acc * np.float32((np.float32(1) / sa) * (np.float32(1) / sb))
        row = {r["accumulator"]: r for r in t.where(k=k).rows()}
        # exact: the sum rounded to float32 once, then times fl32(scale_a * scale_b)
        assert 0 < row["exact"]["accumulation_error"] <= 3 * 2.0 ** -24
        assert row["exact"]["total_error"] == pytest.approx(
            np.linalg.norm(ref_q - ref) / np.linalg.norm(ref), rel=1e-5)
        assert row["fp32"]["accumulation_error"] == pytest.approx(
            np.linalg.norm(fp32 - ref_q) / np.linalg.norm(ref_q), rel=1e-9)
        assert row["fp32"]["total_error"] == pytest.approx(
            np.linalg.norm(fp32 - ref) / np.linalg.norm(ref), rel=1e-5)


def test_user_data_from_a_checkpoint_by_name(tmp_path):
    from fp8emu.lab.study import demo_checkpoint
    name = "model.layers.0.mlp.up_proj.weight"
    t = analysis.granularity_sqnr(name, checkpoint=demo_checkpoint())
    st = pytest.importorskip("safetensors.numpy")
    ref = np.asarray(st.load_file(str(demo_checkpoint()))[name], np.float64)
    assert t["sqnr_db"][0] == pytest.approx(analysis.granularity_sqnr(ref)["sqnr_db"][0], abs=0)


def test_user_data_from_torch_tensors():
    torch = pytest.importorskip("torch")
    x = torch.randn(16, 64, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(0))
    got = analysis.granularity_sqnr(x)["sqnr_db"]
    ref = analysis.granularity_sqnr(x.float().numpy())["sqnr_db"]
    assert got.tolist() == ref.tolist()


@pytest.mark.parametrize("call, err, match", [
    (lambda: analysis.granularity_sqnr("w.safetensors"), TypeError, "pass checkpoint=PATH"),
    (lambda: analysis.granularity_sqnr([1.0, np.inf]), ValueError, "1 NaN/Inf"),
    (lambda: analysis.granularity_sqnr(np.array([True])), TypeError, "real numbers"),
    (lambda: analysis.granularity_sqnr(np.zeros((0, 3))), ValueError, "empty"),
    (lambda: analysis.gemm_error_vs_k(np.ones((2, 4)), np.ones((5, 2))), ValueError, r"\(M, K\) and \(K, N\)"),
    (lambda: analysis.gemm_error_vs_k(np.ones((2, 4)), np.ones((4, 2)), ks=[8]), ValueError, "1..4"),
    (lambda: analysis.gemm_error_vs_k(np.ones((2, 4)), np.ones((4, 2)), ks=[1.5]), ValueError, "integers"),
    (lambda: analysis.gemm_error_vs_k(np.ones((2, 4)), np.ones((2, 4)), b_transposed=True, ks=[True]),
     ValueError, "integers"),
    (lambda: analysis.gemm_error_vs_k(np.ones((2, 4)), np.ones((4, 2)), b_transposed=True), ValueError,
     r"\(N, K\) \(b_transposed=True\)"),
    (lambda: analysis.gemm_error_vs_k(np.ones((2, 4)), np.ones((4, 2)), accumulators="fp32"), TypeError,
     "sequence of names"),
    (lambda: analysis.sweep_scale(["e4m3fn"], {"x": [1.0, np.nan]}, [1.0]), ValueError,
     r"distributions\['x'\] holds 1 NaN"),
])
def test_user_data_bad_input_is_one_clear_error(call, err, match):
    with pytest.raises(err, match=match):
        call()


def test_unknown_checkpoint_tensor_lists_the_names():
    from fp8emu.lab.study import demo_checkpoint
    with pytest.raises(ValueError, match="holds no floating-point tensor named 'nope'; it holds: activations"):
        analysis.binade_errors("nope", "e4m3fn", checkpoint=demo_checkpoint())


def test_user_data_is_not_modified():
    x = np.linspace(-3, 3, 256).reshape(4, 64)
    before = x.copy()
    analysis.granularity_sqnr(x)
    analysis.binade_errors(x, "e5m2")
    assert np.array_equal(x, before)
