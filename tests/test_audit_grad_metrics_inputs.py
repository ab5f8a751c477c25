"""The gradient study's metric helpers on inputs they did not name (tests/AUDIT.md, "Eleventh fresh audit, part
A", #3 and #4).

#3: ``mean_curve``'s ``ns`` given as one number (``1``, ``np.int64(4)``) was Python's "'int' object is not
iterable", naming no argument.  #4: ``fit_floor`` squared its ``errs`` first, so an error of -0.1 was fitted as
0.1, silently; errors are magnitudes (>= 0), and a NaN still gives a NaN fit.
"""

import math

import numpy as np
import pytest

from fp8emu.lab.grad_metrics import fit_floor, mean_curve


@pytest.mark.parametrize("ns", [1, np.int64(4), 2.0])
def test_mean_curve_names_ns_given_as_one_number(ns):
    with pytest.raises(TypeError, match=r"mean_curve: ns must be a sequence of draw counts"):
        mean_curve([np.ones(2)] * 4, np.ones(2), ns)


def test_mean_curve_takes_a_sequence_as_before():
    # draws 3, 1: means 3 and 2 against a reference of 1 (exact relative errors 2 and 1)
    assert mean_curve([np.full(2, 3.0), np.ones(2)], np.ones(2), np.array([1, 2])) == [2.0, 1.0]


@pytest.mark.parametrize("errs", [[-0.1, 0.07, 0.05], [0.1, -0.0707, 0.05], [-1.0, -1.0, -1.0]])
def test_fit_floor_refuses_negative_errors(errs):
    with pytest.raises(ValueError, match=r"fit_floor: errs are errors, >= 0"):
        fit_floor([1, 2, 4], errs)


def test_fit_floor_fits_as_before():
    ns = [1, 4, 16]
    b, v = fit_floor(ns, [math.sqrt(0.04 + 0.09 / n) for n in ns])      # b = 0.2, v = 0.09 exactly
    assert math.isclose(b, 0.2, rel_tol=1e-12) and math.isclose(v, 0.09, rel_tol=1e-12)
    assert fit_floor([1, 2], [0.0, -0.0]) == (0.0, 0.0)            # a zero error of either sign is no error
    assert all(math.isnan(t) for t in fit_floor([1, 2, 4], [0.1, math.nan, 0.05]))
