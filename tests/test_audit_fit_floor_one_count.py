"""``grad_metrics.fit_floor`` of fewer than two distinct draw counts.

``err(n)^2 = b^2 + v / n`` at one ``n`` is fitted exactly by every ``b^2`` in ``[0, err^2]``: ``fit_floor([1], [0.1])``
said ``(0.1, 0.0)``, all of the error a bias floor, and three errors at ``n = 4`` an arbitrary split (the
neighbour of ``loglog_slope`` of one x, which made up a slope before the tenth audit).
"""

import math

import pytest

from fp8emu.lab.grad_metrics import fit_floor


@pytest.mark.parametrize("ns, errs", [([1], [0.1]), ([4, 4, 4], [0.1, 0.12, 0.08]), ([16], [0.0])])
def test_one_draw_count_determines_no_floor(ns, errs):
    # (b^2, v) = (e^2, 0) and (0, n e^2) both fit every point exactly (zero residual): the data choose neither
    b, v = fit_floor(ns, errs)
    assert math.isnan(b) and math.isnan(v)


def test_two_counts_still_fit():
    # err^2 = 0.04 + 0.09 / n at n = 1 and 4: b = 0.2, v = 0.09 (as before)
    b, v = fit_floor([1, 4], [math.sqrt(0.04 + 0.09), math.sqrt(0.04 + 0.09 / 4)])
    assert b == pytest.approx(0.2, rel=1e-12) and v == pytest.approx(0.09, rel=1e-12)
