"""``report.first`` / ``report.last`` and what ``print(report)`` says of them when one layer is used at several names.

The names were grouped by layer (each layer's names after its first), so ``Sequential(a, b, a, b)`` reported
``last`` '3' but ``Sequential(a, b, a)`` reported b's '1', not '2' (a, the last layer a token passes); and the
report's line looked the name up among the swapped layers, which are keyed by each layer's first name: "last
nn.Linear (registration order): '3', high precision" of an emulated layer.  Now both follow
``named_modules(remove_duplicate=False)`` (every name where it is registered) and the state is that of the layer
the name belongs to.
"""

import warnings

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch as ft  # noqa: E402


def _lines(report):
    return [ln.strip() for ln in str(report).splitlines() if "nn.Linear (registration order)" in ln]


def test_a_b_a_b():
    a, b = torch.nn.Linear(32, 32), torch.nn.Linear(32, 32)
    report = ft.emulate(torch.nn.Sequential(a, b, a, b), "te-current", "h100")
    assert (report.first, report.last) == ("0", "3")
    assert _lines(report) == ["first nn.Linear (registration order): '0', emulated",
                              "last nn.Linear (registration order): '3', emulated"]


def test_a_b_a_ends_with_a():
    a, b = torch.nn.Linear(32, 32), torch.nn.Linear(32, 32)
    report = ft.emulate(torch.nn.Sequential(a, b, a), "te-current", "h100")
    assert (report.first, report.last) == ("0", "2")
    assert _lines(report)[1] == "last nn.Linear (registration order): '2', emulated"


def test_shared_layer_filtered_or_skipped_at_its_second_name():
    a, b = torch.nn.Linear(32, 32), torch.nn.Linear(32, 32)
    report = ft.emulate(torch.nn.Sequential(a, b, a), "te-current", "h100",
                        module_filter_fn=lambda mod, fqn: mod is not a)
    assert report.filtered == {"0": "module_filter_fn returned False"}
    assert _lines(report) == ["first nn.Linear (registration order): '0', high precision",
                              "last nn.Linear (registration order): '2', high precision"]
    a, b = torch.nn.Linear(32, 10), torch.nn.Linear(10, 32)       # a: 10 outputs, which h100's FP8 GEMMs refuse
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = ft.emulate(torch.nn.Sequential(b, a, b, a), "te-current", "h100")
    assert (report.first, report.last) == ("0", "3") and list(report.skipped) == ["0", "1"]
    assert _lines(report)[1] == "last nn.Linear (registration order): '3', high precision"


def test_unshared_layers_as_before():
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32))
    report = ft.emulate(model, "te-current", "h100", module_filter_fn=lambda mod, fqn: fqn != "2")
    assert (report.first, report.last) == ("0", "2")
    assert _lines(report) == ["first nn.Linear (registration order): '0', emulated",
                              "last nn.Linear (registration order): '2', high precision"]
