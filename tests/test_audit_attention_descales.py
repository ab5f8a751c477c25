"""``attention(..., descales=(q, k, v))`` under ``scale_rule="given"``: each descale read by the one rule
for real numbers handed in (``interop.real_values``).

Before the fix ``np.asarray(descale, float64)`` read ``"1"`` and ``True`` as 1.0 and ran, and a Python int
past float64 (``2**1100``) was Python's bare "OverflowError: int too large to convert to float".
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

from fp8emu import attention as A

RNG = np.random.default_rng(0)
Q, K, V = RNG.standard_normal((2, 4, 8)), RNG.standard_normal((1, 6, 8)), RNG.standard_normal((1, 6, 8))
GIVEN = dataclasses.replace(A.get_recipe("fa3-fp8"), scale_rule="given")


def _out(descales):
    return A.attention(Q, K, V, GIVEN, descales=descales, reference=False).out


@pytest.mark.parametrize("bad", ["1", True, np.True_, "0.5", b"1"])
@pytest.mark.parametrize("where", [0, 1, 2])
def test_a_string_or_bool_descale_is_refused(bad, where):
    d = [0.5, 0.25, 1.0]
    d[where] = bad
    with pytest.raises(TypeError, match=f"{'qkv'[where]} descale must be a positive number"):
        _out(tuple(d))


def test_a_python_int_past_float64_is_one_line():
    with pytest.raises(ValueError, match="q descale holds an integer beyond float64's range"):
        _out((2 ** 1100, 1, 1))


@pytest.mark.parametrize("same", [np.float32(0.5), np.array([0.5]), np.array([0.5], ml_dtypes.bfloat16), 0.5])
def test_numbers_of_every_real_type_are_taken_as_before(same):
    np.testing.assert_array_equal(_out((same, 0.25, 1)), _out((0.5, 0.25, 1.0)))
