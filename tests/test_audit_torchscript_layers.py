"""TorchScript and emulated layers (fifteenth audit, part A).

* ``emulate`` of a model holding an ``nn.Linear`` compiled by TorchScript (a ``torch.jit.script``-ed block, a
  ``torch.jit.trace``-d layer) left those layers in high precision without a word: no ``report.skipped`` entry, no
  ``HighPrecisionWarning``, and ``report.last`` named an earlier layer "emulated"; a model scripted as a whole was
  said to "hold no nn.Linear layer".  ``probes.capture`` refuses such layers by name (thirteenth audit, part B);
  ``emulate`` now reports them as skipped and warns (``module_filter_fn`` is asked about ``nn.Linear`` modules only,
  as torchao's).
* ``torch.jit.script`` of an emulated model failed in TorchScript's frontend on fp8emu's own code
  ("NotSupportedError: Don't support conversion in JoinedStr", an f-string of ``linear.py``), where
  ``torch.jit.trace`` is one error naming the layer; now it is one error naming the layer and the ways out.

What runs is checked against torch itself: a scripted layer's output stays the plain ``F.linear``.
"""

import warnings

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch as ft  # noqa: E402

# torch deprecates TorchScript (a warning at each script / trace); models made with it exist, so emulate meets them
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 32)

    def forward(self, x):
        return torch.relu(self.fc(x))


def _mixed():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 32), torch.jit.script(_Block()),
                               torch.jit.trace(torch.nn.Linear(32, 32), torch.randn(2, 32)))


def test_scripted_and_traced_layers_are_reported_and_warned_about():
    model = _mixed()
    with pytest.warns(ft.HighPrecisionWarning, match=r"^2 layer\(s\) left in high precision \(fp8emu.torch.emulate\): "
                                                     r"'1.fc' \(an nn.Linear compiled by TorchScript"):
        report = ft.emulate(model, "te-current", "h100")
    assert list(report.swapped) == ["0"]
    assert list(report.skipped) == ["1.fc", "2"]
    assert report.skipped["2"].startswith("an nn.Linear compiled by TorchScript (torch.jit.script or torch.jit.trace)")
    assert (report.first, report.last) == ("0", "2")
    assert "last nn.Linear (registration order): '2', high precision" in str(report)
    # what runs: the scripted layers compute as torch's F.linear, the first layer is emulated
    x = torch.randn(16, 32)
    with torch.no_grad():
        h = torch.relu(torch.nn.functional.linear(model[0](x), model[1].fc.weight, model[1].fc.bias))
        assert torch.equal(model(x), torch.nn.functional.linear(h, model[2].weight, model[2].bias))


def test_the_filter_is_asked_about_nn_linear_modules_only():
    # torchao's contract: a filter reads nn.Linear attributes (a traced layer has no out_features to read)
    model = _mixed()
    seen = []

    def by_width(mod, fqn):
        seen.append(fqn)
        return mod.out_features % 16 == 0

    with pytest.warns(ft.HighPrecisionWarning) as caught:
        report = ft.emulate(model, "te-current", "h100", module_filter_fn=by_width)
    assert seen == ["0"] and list(report.swapped) == ["0"] and list(report.skipped) == ["1.fc", "2"]
    # only TorchScript layers skipped: the warning does not offer the filter, which cannot leave them out
    assert "pass module_filter_fn" not in str(caught[0].message)


def test_a_model_scripted_as_a_whole_is_not_said_to_hold_no_linear():
    model = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = ft.emulate(model, "te-current", "h100")
    msgs = [str(w.message) for w in caught]
    assert not any("holds no nn.Linear" in m for m in msgs)
    assert len(msgs) == 1 and msgs[0].startswith("2 layer(s) left in high precision")
    assert list(report.skipped) == ["0", "2"] and report.swapped == {}


def test_a_model_without_linear_layers_keeps_its_warning():
    with pytest.warns(ft.HighPrecisionWarning, match="holds no nn.Linear layer"):
        ft.emulate(torch.jit.script(torch.nn.Sequential(torch.nn.ReLU())), "te-current", "h100")


@pytest.mark.parametrize("what", ["model", "layer"])
def test_scripting_an_emulated_model_is_one_error_naming_the_layer(what):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Sequential(torch.nn.Linear(32, 32)))
    ft.emulate(model, "te-current", "h100")
    target = model if what == "model" else model[2][0]
    want = "0" if what == "model" else "2.0"
    with pytest.raises(TypeError, match=rf"^layer '{want}': torch.jit.script cannot compile an emulated layer, whose "
                                        r"GEMMs are NumPy calls on the tensors' values; use torch.compile or "
                                        r"torch.export \(one custom op per layer\)$"):
        torch.jit.script(target)
    # the model is left as it was, and runs
    assert type(model[0]).__name__ == "EmulatedLinear" and type(model[2][0]).__name__ == "EmulatedLinear"
    with torch.no_grad():
        assert model(torch.randn(16, 32)).shape == (16, 32)
