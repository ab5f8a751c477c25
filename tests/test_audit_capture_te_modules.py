"""``probes.capture`` of a model built of ``fp8emu.torch.te`` modules.

Their GEMMs are no ``nn.Linear`` layers: capture returned ``(loss, {})``, silently, for a model of
``te.Linear`` / ``te.LayerNormMLP`` layers, and left them out of a mixed model.  It is one error naming the
module; a model of ``nn.Linear`` layers is captured as before.
"""

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch.te as te  # noqa: E402
from fp8emu.torch import probes  # noqa: E402


@pytest.mark.parametrize("make, name, kind", [
    (lambda: torch.nn.Sequential(te.Linear(32, 32), torch.nn.ReLU(), te.LayerNormMLP(32, 64)), "0", "Linear"),
    (lambda: torch.nn.Sequential(torch.nn.Linear(32, 32), te.LayerNormLinear(32, 32)), "1", "LayerNormLinear"),
    (lambda: torch.nn.Sequential(torch.nn.Linear(32, 32), te.LayerNormMLP(32, 64)), "1", "LayerNormMLP"),
])
def test_a_model_of_te_modules_is_named_not_an_empty_capture(make, name, kind):
    torch.manual_seed(0)
    model = make()
    with pytest.raises(ValueError, match=rf"layer '{name}' is a module of fp8emu.torch.te \({kind}\)"):
        probes.capture(model, lambda m: m(torch.randn(16, 32)).sum())


def test_a_model_of_nn_linear_layers_is_captured():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32))
    _, caps = probes.capture(model, lambda m: m(torch.randn(16, 32)).sum())
    assert sorted(caps) == ["0", "2"]
