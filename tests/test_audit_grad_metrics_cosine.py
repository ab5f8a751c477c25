"""Thirteenth audit, part A: ``grad_metrics.compare``'s cosine stays within [-1, 1].

Expectation: the Cauchy-Schwarz inequality (|<a, r>| <= |a| |r|), so no cosine lies outside [-1, 1], and a vector
against itself (or its negation) is at the bound.
"""

from __future__ import annotations

import numpy as np

from fp8emu.lab.grad_metrics import compare


def test_a_vector_against_itself_has_a_cosine_of_at_most_one():
    # 489 of 2000 such float32 vectors gave 1.0000000000000002 (the three rounded sums of the quotient)
    rng = np.random.default_rng(0)
    for _ in range(300):
        a = rng.standard_normal(int(rng.integers(1, 300))).astype(np.float32)
        assert -1.0 <= compare(a, a)["cosine"] <= 1.0
        assert -1.0 <= compare(-a, a)["cosine"] <= 1.0
        assert compare(a, a)["cosine"] > 1 - 1e-15 and compare(-a, a)["cosine"] < -1 + 1e-15

