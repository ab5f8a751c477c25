"""``AttentionRecipe`` fields checked as they are used: NumPy integers for the integer fields, ``fma`` and
``p_saturate`` as the flags they are, and ``name`` as the string the reports print.

Before the fix ``block_n=np.uint8(16)`` wrapped in uint8 inside the blocked pass ("OverflowError:
Python integer -40 out of bounds for uint8"), ``fma="no"`` ran the fused update (a truthy string),
``p_saturate="no"`` failed only at the P cast, after the Q·K pass, naming a ``saturate`` the caller never
gave, and ``name`` 3 or ``""`` went into the reports.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fp8emu import attention as A

RNG = np.random.default_rng(0)
Q, K, V = RNG.standard_normal((2, 8, 16)), RNG.standard_normal((1, 300, 16)), RNG.standard_normal((1, 300, 16))
FA3 = A.get_recipe("fa3-fp8")


def _out(**fields):
    return A.attention(Q, K, V, dataclasses.replace(FA3, **fields), reference=False).out


@pytest.mark.parametrize("field, value", [("block_n", 16), ("block_n", 200), ("query_chunk", 3),
                                          ("promote_every", 2), ("max_offset", 4)])
@pytest.mark.parametrize("kind", [np.uint8, np.int16, np.uint64])
def test_a_numpy_integer_field_is_the_same_python_integer(field, value, kind):
    r = dataclasses.replace(FA3, **{field: kind(value)})
    assert type(getattr(r, field)) is int
    np.testing.assert_array_equal(_out(**{field: kind(value)}), _out(**{field: value}))


@pytest.mark.parametrize("value", ["no", "yes", 1, None])
def test_fma_is_a_bool(value):
    with pytest.raises(TypeError, match="AttentionRecipe fma must be True or False"):
        dataclasses.replace(FA3, fma=value)


def test_fma_false_and_numpy_bools_run_as_before():
    np.testing.assert_array_equal(_out(fma=np.False_), _out(fma=False))
    np.testing.assert_array_equal(_out(fma=np.True_), _out(fma=True))


@pytest.mark.parametrize("value", ["no", 1, None])
def test_p_saturate_is_checked_when_the_recipe_is_made(value):
    with pytest.raises(TypeError, match="AttentionRecipe p_saturate must be a bool or one of"):
        dataclasses.replace(FA3, p_saturate=value)


def test_p_saturate_modes_run_as_before():
    np.testing.assert_array_equal(_out(p_saturate="satfinite"), _out(p_saturate=True))


@pytest.mark.parametrize("value", ["", 3, None])
def test_name_is_a_non_empty_string(value):
    with pytest.raises(TypeError, match="AttentionRecipe name must be a non-empty string"):
        dataclasses.replace(FA3, name=value)
