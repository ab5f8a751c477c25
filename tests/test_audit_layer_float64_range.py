"""Fourth fresh audit: an emulated layer's float64 input must fit float32, the type the layer computes in."""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fp8emu.torch as ft  # noqa: E402

F32MAX = float(np.finfo(np.float32).max)


def _layer(recipe):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 32)).double()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ft.emulate(m, recipe, "b200")
    return m


@pytest.mark.parametrize("recipe", ["te-current", "te-delayed", "te-mxfp8", "torchao-tensorwise"])
def test_a_finite_float64_input_beyond_float32_is_named_as_a_float32_overflow(recipe):
    # before: cast to float32 silently (Inf): te-current and te-delayed returned finite outputs of at most
    # ~1e3 for inputs near 1e39, te-mxfp8 NaN, torchao-tensorwise "scale_a must be finite in float32"
    m = _layer(recipe)
    x = torch.randn(32, 32, dtype=torch.float64)
    x[3, 4] = 1e39
    with pytest.raises(ValueError, match=r"layer '0': input overflows float32, the type the layer computes in: 1 "
                                         r"finite float64 value\(s\) round to Inf in float32 .*largest magnitude "
                                         r"given 1e\+39"):
        m(x)
    with torch.no_grad(), pytest.raises(ValueError, match="input overflows float32"):
        m(x[2:5])                            # the inference route too (3 tokens)


def test_the_boundary_is_float32_rounding():
    m = _layer("te-current")
    x = torch.zeros(32, 32, dtype=torch.float64)
    x[0, 0] = F32MAX * (1 + 2.0 ** -26)      # rounds to float32's largest finite value: taken
    assert torch.isfinite(m(x)).all()
    x[0, 0] = F32MAX * (1 + 2.0 ** -24)      # half an ulp above it: rounds to Inf
    with pytest.raises(ValueError, match="input overflows float32"):
        m(x)


def test_an_infinite_input_is_not_called_an_overflow():
    # an Inf the user gave is the recipe's business (TE's scaling rules for a non-finite amax), as before
    m = _layer("te-current")
    x = torch.randn(32, 32, dtype=torch.float64)
    x[0, 0] = float("inf")
    m(x)


def test_under_compile_the_error_is_the_layers():
    m = _layer("te-current")
    c = torch.compile(m, backend="aot_eager", fullgraph=True)
    x = torch.randn(32, 32, dtype=torch.float64)
    assert torch.equal(c(x), m(x))
    x[0, 0] = -1e300
    with pytest.raises(Exception, match="input overflows float32"):
        c(x)
