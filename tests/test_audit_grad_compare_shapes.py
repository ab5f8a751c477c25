"""Fourth fresh audit: ``grad_metrics.compare`` measures an array against a reference of its own shape only."""

import numpy as np
import pytest

from fp8emu.lab import grad_metrics


@pytest.mark.parametrize("shape_a, shape_ref", [((2, 3), (3, 2)), ((6,), (2, 3)), ((1, 2, 3), (3, 2))])
def test_arrays_of_another_shape_are_refused_even_of_one_size(shape_a, shape_ref):
    # before: both were flattened first and measured element by element: each of these said rel_err 0
    # ("identical") for arrays of another layout (a gradient's transpose paired elements wrongly: 0.33)
    ref = np.arange(1.0, 7.0).reshape(shape_ref)
    with pytest.raises(ValueError, match=r"compare: shapes differ"):
        grad_metrics.compare(ref.reshape(shape_a), ref)


def test_arrays_of_one_shape_are_measured_in_float64():
    ref = np.arange(1.0, 7.0).reshape(2, 3)
    a = ref + np.array([[1.0, 0, 0], [0, 0, 0]])
    m = grad_metrics.compare(a, ref)
    # |a - ref| = 1, |ref| = sqrt(91); (a - ref) . ref = 1
    assert m["rel_err"] == pytest.approx(1 / np.sqrt(91), rel=1e-15)
    assert m["shrink"] == pytest.approx(1 / 91, rel=1e-15)


def test_axes_of_length_one_do_not_count():
    # one vector as a row, a column or flat is the same elements in the same order
    ref = np.arange(1.0, 7.0)
    for shape in ((1, 6), (6, 1), (1, 6, 1)):
        assert grad_metrics.compare(ref.reshape(shape), ref)["rel_err"] == 0.0
        assert grad_metrics.compare(ref, ref.reshape(shape))["rel_err"] == 0.0      # the reference's axes too
