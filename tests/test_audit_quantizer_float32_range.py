"""The scaling recipes compute in float32: a finite float64 input beyond float32's range is named as an
overflow, not quantized as the Inf the cast makes of it.

``quantize_mx`` turned a block holding 1e39 into a NaN block (the Inf rule), ``quantize_nvfp4`` into 2688
and zeros, ``quantize_tensorwise`` / ``_axiswise`` / ``_blockwise`` into the format's max, silently: the
neighbours of the emulated layer's and ``quantize_hif4``'s fixes.  An Inf or NaN the caller gave still
follows each recipe's own rule.
"""

import numpy as np
import pytest

import fp8emu

RECIPES = {
    "quantize_mx": lambda x: fp8emu.quantize_mx(x, "e4m3fn"),
    "quantize_nvfp4": lambda x: fp8emu.quantize_nvfp4(x),
    "quantize_tensorwise": lambda x: fp8emu.quantize_tensorwise(x, "e4m3fn"),
    "quantize_axiswise": lambda x: fp8emu.quantize_axiswise(x, "e4m3fn"),
    "quantize_blockwise": lambda x: fp8emu.quantize_blockwise(x, "e4m3fn"),
}


@pytest.mark.parametrize("name", list(RECIPES))
@pytest.mark.parametrize("big", [1e39, -3.5e38, np.float64(np.finfo(np.float32).max) * (1 + 2.0 ** -23)], ids=repr)
def test_a_finite_float64_input_beyond_float32_is_named_as_an_overflow(name, big):
    x = np.ones((2, 128))
    x[0, 5] = big
    with pytest.raises(ValueError, match=r"x overflows float32, the type the recipe computes in: 1 finite value"):
        RECIPES[name](x)


@pytest.mark.parametrize("name", list(RECIPES))
def test_the_boundary_is_float32_rounding_and_given_infs_keep_their_rules(name):
    fmax = float(np.finfo(np.float32).max)
    x = np.ones((2, 128))
    x[0, 5] = fmax * (1 + 2.0 ** -26)          # rounds to float32's max: taken
    RECIPES[name](x)
    x[0, 5] = np.inf                          # the caller's Inf: the recipe's rule, as before
    y = x.astype(np.float32)
    a, b = RECIPES[name](x), RECIPES[name](y)
    np.testing.assert_array_equal(a.codes, b.codes)
