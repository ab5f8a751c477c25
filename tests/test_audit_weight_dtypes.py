"""A layer whose weight or bias is no float tensor is left as it is by ``emulate``; converted later, one error.

The emulated layer casts its operands to float32.  ``emulate`` swapped an ``nn.Linear`` of complex weights
(which torch computes, complex input in, complex out): every complex input was then refused and a real input
gave the real part's product (torch's "discards the imaginary part" warning, an output nn.Linear refuses to
give); a layer of integer or bool weights, whose every call ``nn.Linear`` refuses, gave float outputs.  Now
such a layer stays as it is (``report.skipped``, the warning), and a model converted to complex after
``emulate`` is one error naming the layer.  The expectation is torch's own ``nn.Linear``.
"""

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch as ft  # noqa: E402


def _model(dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32))
    lin = model[2]
    if dtype.is_complex:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")      # torch's "Complex modules are a new feature"
            lin.to(dtype)
    else:
        lin.weight = torch.nn.Parameter(torch.ones(32, 32, dtype=dtype), requires_grad=False)
    return model


@pytest.mark.parametrize("dtype", [torch.complex64, torch.int64, torch.bool])
def test_a_layer_of_other_weights_is_left_as_it_is(dtype):
    model = _model(dtype)
    plain = copy.deepcopy(model)
    with pytest.warns(ft.HighPrecisionWarning, match=rf"'2' \(its weight is {dtype}"):
        report = ft.emulate(model, "te-current", "h100")
    assert list(report.swapped) == ["0"]
    assert report.skipped["2"].startswith(f"its weight is {dtype}")
    assert type(model[2]) is torch.nn.Linear
    h = torch.relu(torch.randn(16, 32))
    if dtype.is_complex:
        hc = h.to(dtype)
        with torch.no_grad():
            assert torch.equal(model[2](hc), plain[2](hc))
    else:
        with pytest.raises(RuntimeError):     # as nn.Linear: torch's dtype mismatch
            model[2](h)


def test_a_float_layer_converted_to_complex_after_emulate_is_one_error():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32))
    ft.emulate(model, "te-current", "h100")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.to(torch.complex64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # no "discards the imaginary part" either
        with torch.no_grad(), pytest.raises(TypeError, match=r"layer '0': its weight is torch.complex64 and bias is "
                                                              r"torch.complex64; an emulated layer's weight"):
            model(torch.randn(16, 32))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_float_layers_are_emulated_as_before(dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32)).to(dtype)
    report = ft.emulate(model, "te-current", "h100")
    assert list(report.swapped) == ["0"] and not report.skipped
    with torch.no_grad():
        assert model(torch.randn(16, 32, dtype=dtype)).dtype == dtype
