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
