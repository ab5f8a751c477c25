"""Hostile input: the grad-study's public metrics (``fp8emu.lab.grad_metrics`` and ``fp8emu.lab.grad_study``)."""

import math

import numpy as np
import pytest

from fp8emu.lab import grad_metrics as gm
from fp8emu.lab import grad_study as gs


@pytest.mark.parametrize("xs, ys", [([1, 2, 3], [1, 2]), ([[1, 2]], [[1, 2]])])
def test_loglog_slope_names_arguments_of_another_shape(xs, ys):
    # before: NumPy's "operands could not be broadcast together" (the 2-D case: a slope of a flattened grid)
    with pytest.raises(ValueError, match="loglog_slope: xs and ys must be 1-D of one length"):
        gm.loglog_slope(xs, ys)


def test_loglog_slope_leaves_out_an_infinite_x():
    # before: LAPACK's "SVD did not converge" (and DLASCL lines on stderr); y = x exactly on the finite points
    assert gm.loglog_slope([1, 2, 4, math.inf], [1, 2, 4, 8]) == pytest.approx(1.0)


@pytest.mark.parametrize("ns, errs, what", [([], [], "of one length >= 1"), ([1, 2, 3], [0.1, 0.2], "of one length"),
                                            ([0, 1, 2], [0.3, 0.2, 0.1], "finite and > 0"),
                                            ([-1, 2, 4], [0.3, 0.2, 0.1], "finite and > 0")])
def test_fit_floor_refuses_what_it_cannot_fit(ns, errs, what):
    # before: no points gave (0.0, 0.0), a bias floor of nothing; other lengths and n = 0 LAPACK errors;
    # a negative n a fit of err^2 = b^2 + v/n with the wrong sign of 1/n
    with pytest.raises(ValueError, match=what):
        gm.fit_floor(ns, errs)


def test_mean_curve_refuses_draws_of_another_shape():
    # before: NumPy's broadcast error (or, for a draw of shape (1,), a silent broadcast)
    with pytest.raises(ValueError, match="mean_curve: every draw must have the reference's shape"):
        gm.mean_curve([np.ones(3), np.ones(2)], np.ones(3), [1, 2])
    with pytest.raises(ValueError, match="mean_curve: every draw"):
        gm.mean_curve([np.ones(1), np.ones(1)], np.ones(3), [1, 2])


def test_compare_and_norm_refuse_complex_arrays():
    # before: the imaginary part dropped (compare of 1+1j against 1 said rel_err 0, cosine 1)
    with pytest.raises(TypeError, match="compare: takes real arrays"):
        gm.compare(np.array([1 + 1j]), np.array([1.0]))
    with pytest.raises(TypeError, match="norm: takes real arrays"):
        gm.norm([3 + 4j])


def _spike_rows(spike=3):
    return [{"recipe": "r", "step": s, "spiked": int(s == spike), "history": 2, "fprop_rel_err": 0.1 * (1 + (s == spike)) + 0.1,
             "frac_underflow": 0.0} for s in range(6)]


@pytest.mark.parametrize("factor", [math.nan, -1.0, 0, "2", True, math.inf])
def test_spike_summary_takes_a_positive_factor(factor):
    # before: NaN called the spike "not saturated" and no step off; -1 every step saturated; "2" a TypeError
    with pytest.raises(ValueError, match="factor must be a finite number > 0"):
        gs.spike_summary(_spike_rows(), factor=factor)
    assert gs.spike_summary(_spike_rows(), factor=1.2)["r"]["saturated"]     # 0.3 > 1.2 x 0.2


@pytest.mark.parametrize("spike, what", [(None, "no spiked step"), (1, "no step between 1 and its spike 1")])
def test_spike_summary_names_a_recipe_without_a_spike_or_steps_before_it(spike, what):
    # before: StopIteration; "max() arg is an empty sequence" with NumPy's mean-of-empty warning
    with pytest.raises(ValueError, match=f"recipe 'r' has {what}"):
        gs.spike_summary(_spike_rows(spike))


def test_read_tables_of_a_missing_folder_is_an_error_not_a_study_of_nothing(tmp_path):
    # before: {} for a mistyped folder, so guide_table / readme_block said every finding "not run"
    with pytest.raises(FileNotFoundError, match="no such study folder"):
        gs.read_tables(tmp_path / "nope")
    with pytest.raises(FileNotFoundError):
        gs.readme_block(tmp_path / "nope")
    assert gs.read_tables(tmp_path) == {}          # an existing folder without tables: a study of no cells


def test_finding_e_with_one_recipes_spike_rows_is_not_run():
    # before: TypeError "'NoneType' object is not subscriptable" (no te-delayed rows)
    rows = [dict(r, recipe="te-current", frac_saturated=0.0) for r in _spike_rows()]
    e = next(r for r in gs.findings({"spike": rows}) if r["finding"] == "e")
    assert e["verdict"] == "not at this scale" and "not run" in e["measured"]
