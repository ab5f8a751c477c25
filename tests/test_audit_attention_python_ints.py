"""Attention's real-number options given as Python integers past float64's range: ``softmax_scale``
and a recipe's ``p_scale`` / ``rescale_threshold``.

``2**1100`` is a real number > 0 that overflows float32 (the type the kernels use it in), so it is
refused as such, in one short line; before the fix ``float()`` raised Python's bare
"OverflowError: int too large to convert to float".
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from fp8emu import attention as A

RNG = np.random.default_rng(0)
Q, K, V = RNG.standard_normal((1, 4, 16)), RNG.standard_normal((1, 6, 16)), RNG.standard_normal((1, 6, 16))


@pytest.mark.parametrize("value", [2 ** 1100, -(2 ** 1100), 10 ** 400])
def test_softmax_scale_past_float64_is_named_as_inf_in_float32(value):
    with pytest.raises(ValueError, match=r"softmax_scale must be a finite number > 0 as float32") as e:
        A.attention(Q, K, V, softmax_scale=value)
    assert "digits), which is" in str(e.value) and len(str(e.value)) < 200


@pytest.mark.parametrize("field", ["p_scale", "rescale_threshold"])
def test_a_recipe_number_past_float64_is_one_line(field):
    with pytest.raises(ValueError, match=f"AttentionRecipe {field} must be a finite number") as e:
        dataclasses.replace(A.get_recipe("fa3-fp8"), **{field: 2 ** 1100})
    assert len(str(e.value)) < 200


@pytest.mark.parametrize("value", [2 ** 64, 1, np.uint64(2 ** 63), np.float16(0.25), np.longdouble(0.125)])
def test_integers_and_other_float_types_in_range_are_taken_as_before(value):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = A.attention(Q, K, V, softmax_scale=value, reference=False).out
    ref = A.attention(Q, K, V, softmax_scale=float(value), reference=False).out
    assert np.array_equal(out, ref, equal_nan=True)


def test_a_longdouble_past_float32_is_still_refused_without_numpy_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="which is inf in float32"):
            A.attention(Q, K, V, softmax_scale=np.longdouble("1e4000"))
