"""``emulate`` of a model in which ``torch.compile`` wraps one ``nn.Linear`` by itself.

``torch.compile(layer)`` returns an ``OptimizedModule`` that holds the layer as ``_orig_mod`` and calls the layer
it was built with.  ``emulate`` swapped ``_orig_mod`` and reported the layer emulated (``report.swapped ==
['0._orig_mod']``), but the wrapper went on calling the plain layer: high-precision bits, silently.  Now such a
layer is left as it is, in ``report.skipped`` and the warning.  A compiled container (the usual
``torch.compile(model)``) is swapped into as before: its wrapper calls the container, whose layers change.
The expectations are torch's own ``nn.Linear`` and an emulated model never compiled.
"""

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch as ft  # noqa: E402


def _layer():
    torch.manual_seed(0)
    return torch.nn.Linear(32, 32)


@pytest.mark.parametrize("called", [False, True])
def test_a_layer_compiled_by_itself_is_left_as_it_is(called):
    lin = _layer()
    x = torch.randn(16, 32)
    with torch.no_grad():
        plain = lin(x)
    model = torch.nn.Sequential(torch.compile(copy.deepcopy(lin), backend="aot_eager"))
    if called:
        with torch.no_grad():
            model(x)
    with pytest.warns(ft.HighPrecisionWarning, match=r"'0._orig_mod' \(compiled by itself \(torch.compile wraps "
                                                     r"it as '0'\)"):
        report = ft.emulate(model, "te-current", "h100")
    assert report.swapped == {} and list(report.skipped) == ["0._orig_mod"]
    with torch.no_grad():
        assert torch.equal(model(x), plain)


def test_a_compiled_linear_as_the_model():
    model = torch.compile(_layer(), backend="aot_eager")
    with pytest.warns(ft.HighPrecisionWarning, match=r"torch.compile wraps it as the model"):
        report = ft.emulate(model, "te-current", "h100")
    assert report.swapped == {}


def test_a_compiled_container_is_still_swapped_into():
    lin = _layer()
    x = torch.randn(16, 32)
    eager = torch.nn.Sequential(copy.deepcopy(lin))
    ft.emulate(eager, "te-current", "h100")
    model = torch.compile(torch.nn.Sequential(copy.deepcopy(lin)), backend="aot_eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ft.HighPrecisionWarning)
        report = ft.emulate(model, "te-current", "h100")
    assert list(report.swapped) == ["_orig_mod.0"]
    with torch.no_grad():
        assert torch.equal(model(x), eager(x))
