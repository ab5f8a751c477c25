"""NVFP4's ``global_amax`` (``quantize_nvfp4``, Transformer Engine's ``quantize_nvfp4_te``, row-scaled too)
given as a finite number that float32, the type the recipes compute in, does not hold.

Before the fix 1e39 became Inf (NumPy's "overflow encountered in cast" warning) and took the Inf rule,
and 1e-50 became 0 and took the "no amax" rule (a tensor scale of 1), silently; a Python int past int64
(``2**64``, a finite float32 value) was "global_amax must be a real scalar".  An Inf or 0 given keeps
its rule, as audit6's #15 states for inputs.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fp8emu
from fp8emu.scaling import nvfp4_te

X = np.linspace(-3, 3, 64).reshape(2, 32).astype(np.float32)


def _both(g):
    return [lambda: fp8emu.quantize_nvfp4(X, global_amax=g), lambda: nvfp4_te.quantize_nvfp4_te(X, global_amax=g)]


@pytest.mark.parametrize("g", [1e39, float(np.finfo(np.float32).max) * (1 + 2 ** -20), 3.5e38, np.float64(1e300)])
def test_a_finite_amax_beyond_float32_is_named_an_overflow(g):
    for call in _both(g):
        with pytest.raises(ValueError, match="global_amax overflows float32, the type the recipe computes in"):
            call()


@pytest.mark.parametrize("g", [1e-50, 1e-46])
def test_a_positive_amax_below_float32_is_named_an_underflow(g):
    for call in _both(g):
        with pytest.raises(ValueError, match="global_amax underflows to 0 in float32"):
            call()


def test_row_scaled_amaxes_are_checked_each():
    q = nvfp4_te.NVFP4Quantizer(row_scaled_nvfp4=True)
    with pytest.raises(ValueError, match="overflows float32"):
        nvfp4_te.quantize_nvfp4_te(X, q, global_amax=np.array([3.0, 1e39]))
    with pytest.raises(ValueError, match="underflows to 0 in float32"):
        nvfp4_te.quantize_nvfp4_te(X, q, global_amax=np.array([3.0, 1e-50]))


@pytest.mark.parametrize("g, scale", [(np.inf, 1.0), (0, 1.0), (3.0, 896.0), (np.float16(3), 896.0),
                                      (2 ** -149, float(np.finfo(np.float32).max))])
def test_given_inf_zero_and_float32_values_keep_their_rules(g, scale):
    # S_enc = min(fl32(448 * 6 / amax), FLT_MAX), 1 where amax is 0 or Inf: 2688 / 3 = 896
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for call in _both(g):
            assert float(np.float32(call().global_scale)) == scale


def test_a_python_int_past_int64_is_its_float32_value():
    t = fp8emu.quantize_nvfp4(X, global_amax=2 ** 64)
    assert t.global_scale == np.float32(np.float32(2688) / np.float32(2 ** 64))
