"""The grad-study's metric helpers on float64 values past float32's range and on values that are no numbers
(tests/AUDIT.md, "Tenth fresh audit, part A", #2-#4).  Expectations are exact fractions or float64 math on
values scaled into range by hand."""

import math
from fractions import Fraction

import numpy as np
import pytest

from fp8emu.lab.grad_metrics import compare, fit_floor, loglog_slope, mean_curve, norm


@pytest.mark.parametrize("scale", [2.0 ** 600, 2.0 ** -600, 1e300, 1e-300, 2.0 ** -1070])
def test_compare_and_norm_of_float64_values_whose_squares_leave_float64(scale):
    # before: norm([1e-200]) was 0.0 and every measure of compare NaN (a nonzero reference called zero);
    # norm([1e200, 1e200]) was Inf and compare NaN
    a, r = np.array([2.0, 1.0]) * scale, np.array([1.0, 1.0]) * scale
    assert a[1] != 0 and np.isfinite(a).all()
    m = compare(a, r)
    # exactly: d = (1, 0) s, |d| = s, |r| = sqrt(2) s, <a, r> = 3 s^2, |a| = sqrt(5) s, <d, r> = s^2
    assert m["rel_err"] == pytest.approx(1 / math.sqrt(2), rel=1e-15)
    assert m["cosine"] == pytest.approx(3 / math.sqrt(10), rel=1e-15)
    assert m["shrink"] == pytest.approx(0.5, rel=1e-15)
    assert norm(r) == pytest.approx(math.sqrt(2) * scale, rel=1e-15)


def test_a_norm_past_float64_is_inf_and_float32_values_keep_their_bits():
    assert norm(np.full(4, 1.5e308)) == math.inf
    rng = np.random.default_rng(3)
    a = rng.standard_normal(1000).astype(np.float32)
    r = (a + rng.standard_normal(1000).astype(np.float32) * np.float32(0.01)).astype(np.float32)
    a64, r64 = a.astype(np.float64), r.astype(np.float64)
    # the unscaled float64 formulas, term for term (NumPy's pairwise sum, as the module sums)
    rr = float(np.sum(r64 * r64))
    d = a64 - r64
    assert compare(a, r)["rel_err"] == math.sqrt(float(np.sum(d * d))) / math.sqrt(rr)
    assert norm(a) == math.sqrt(float(np.sum(a64 * a64)))


@pytest.mark.parametrize("call", [
    lambda: compare("1", 1.0),
    lambda: compare(np.array(["1.0", "2.0"]), np.ones(2)),
    lambda: compare(np.array([True, False]), np.ones(2)),
    lambda: compare(np.array([1, "2"], object), np.ones(2)),
    lambda: norm(np.array([True, True])),
    lambda: norm("3"),
    lambda: mean_curve([np.array(["1.0"])], np.ones(1), [1]),
    lambda: mean_curve([np.array([True])], np.ones(1), [1]),
    lambda: loglog_slope(["1", "2", "4"], [1.0, 0.5, 0.25]),
    lambda: loglog_slope([1, 2, 4], [True, True, False]),
    lambda: fit_floor([1, 4, 16], ["0.1", "0.05", "0.03"]),
    lambda: fit_floor(np.array([True, True, True]), [0.1, 0.05, 0.03]),
])
def test_strings_bools_and_objects_are_refused_not_read_as_numbers(call):
    # before: "1" was parsed to 1.0 and True taken as 1.0 (compare("1", 1.0) "rel_err 0.0")
    with pytest.raises(TypeError, match=r"^(compare|norm|mean_curve|loglog_slope|fit_floor): takes real"):
        call()


def test_a_bfloat16_tensor_is_widened_not_torchs_error():
    torch = pytest.importorskip("torch")
    # before: torch's "Got unsupported ScalarType BFloat16"
    t = torch.tensor([1.0, 2.0, 3.0], dtype=torch.bfloat16)
    assert compare(t, np.array([1.0, 2.0, 3.0]))["rel_err"] == 0.0 and norm(t) == math.sqrt(14)


def test_loglog_slope_of_one_x_is_nan_not_a_made_up_slope():
    # before: polyfit's RankWarning and a slope of 0.43 for three points at one x (no slope exists)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(loglog_slope([2, 2, 2], [1.0, 2.0, 3.0]))
        assert math.isnan(loglog_slope([2, 2, -1, 0], [1.0, 2.0, 3.0, 4.0]))     # one x among the positive points


def test_the_helpers_as_before_on_numbers():
    assert loglog_slope([1, 4, 16], [1.0, 0.5, 0.25]) == pytest.approx(-0.5)
    assert loglog_slope(np.array([1, 2]), np.array([1, 4])) == pytest.approx(2.0)
    b, v = fit_floor([1, 4, 16, 64], [math.sqrt(0.01 + 0.04 / n) for n in (1, 4, 16, 64)])
    assert (b, v) == (pytest.approx(0.1), pytest.approx(0.04))
    assert mean_curve([np.ones(2) * 2, np.zeros(2)], np.ones(2), [1, 2]) == [1.0, 0.0]
    assert compare([1, 2], [1, 2])["rel_err"] == 0.0            # lists and integers are numbers
    assert float(Fraction(norm(np.array([3, 4], np.int64)))) == 5.0
