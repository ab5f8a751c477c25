"""An emulated layer called with a 0-D tensor names what is wrong.

``model(torch.tensor(1.0))`` on any recipe raised Python's bare "IndexError: tuple index out of range"
(the layer read ``x.shape[-1]`` of a shape with no axes); torch's own ``nn.Linear`` refuses it as well,
so the emulated layer now says so in one line naming the layer and what it takes.
"""

import pytest

torch = pytest.importorskip("torch")
from fp8emu.torch import emulate  # noqa: E402


@pytest.mark.parametrize("recipe, gpu", [("te-delayed", "h100"), ("te-nvfp4", "b200"), ("torchao-rowwise", "h100")])
@pytest.mark.parametrize("grad", [True, False])
def test_a_scalar_input_is_one_line_naming_the_layer(recipe, gpu, grad):
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    emulate(model, recipe, gpu)
    with torch.set_grad_enabled(grad), pytest.raises(ValueError, match=r"layer '0': input is a 0-D tensor"):
        model(torch.tensor(1.0))


def test_torch_refuses_it_too():
    with pytest.raises(RuntimeError):
        torch.nn.Linear(64, 64)(torch.tensor(1.0))


def test_a_one_dimensional_input_still_runs_without_grad():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    emulate(model, "te-current", "h100")
    with torch.no_grad():
        assert model(torch.ones(64)).shape == (64,)
