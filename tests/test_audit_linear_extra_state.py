"""A layer holding more than its weight and bias is left as it is and named, not swapped and stripped of it.

``emulate`` replaces each ``nn.Linear`` by a new module that holds its weight and bias.  A Parameter, a buffer
or a sub-module a user registered on the layer (a learned per-channel scale, a mask) was dropped silently: gone
from ``model.parameters()`` (an optimizer made afterwards never trains it) and from ``model.state_dict()`` (a
checkpoint saved without it), with the layer reported emulated.  A plain layer, with or without bias, is
emulated as before.
"""

import warnings

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch as ft  # noqa: E402


def _emulate(model):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = ft.emulate(model, "te-current", "h100")
    return report, [str(w.message) for w in caught]


@pytest.mark.parametrize("kind", ["parameter", "buffer", "module"])
def test_extra_state_is_kept(kind):
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32))
    if kind == "parameter":
        model[0].gain = torch.nn.Parameter(torch.ones(32))
    elif kind == "buffer":
        model[0].register_buffer("mask", torch.ones(32, 32))
    else:
        model[0].adapter = torch.nn.Linear(32, 4, bias=False)
    keys, n_params = set(model.state_dict()), len(list(model.parameters()))
    report, warned = _emulate(model)
    assert "0" not in report.swapped and "besides weight and bias" in report.skipped["0"]
    assert list(report.swapped) == ["2"]
    assert any("'0'" in w and "besides weight and bias" in w for w in warned)
    assert keys <= set(model.state_dict())
    assert len(list(model.parameters())) == n_params


@pytest.mark.parametrize("bias", [True, False])
def test_a_plain_layer_is_emulated_as_before(bias):
    model = torch.nn.Sequential(torch.nn.Linear(32, 32, bias=bias))
    report, warned = _emulate(model)
    assert list(report.swapped) == ["0"] and report.skipped == {} and warned == []
