"""An emulated layer takes the call ``nn.Linear`` takes by keyword, ``layer(input=x)``.

``nn.Linear.forward(self, input)``: code that calls a layer as ``layer(input=x)`` ran on the plain model and
raised Python's "EmulatedLinear.forward() got an unexpected keyword argument 'input'" once ``emulate`` had swapped
the layer, eagerly and compiled.  By keyword it gives the positional call's bits.
"""

import copy

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch as ft  # noqa: E402


class _ByKeyword(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(32, 32)

    def forward(self, x):
        return self.proj(input=x)


def test_eager_and_compiled_by_keyword():
    torch.manual_seed(0)
    model = _ByKeyword()
    x = torch.randn(16, 32)
    model(x)                                                   # the plain model takes it
    ft.emulate(model, "te-current", "h100")
    positional = copy.deepcopy(model)
    with torch.no_grad():
        want = positional.proj(x)
        assert torch.equal(model(x), want)
        assert torch.equal(torch.compile(model, backend="aot_eager", fullgraph=True)(x), want)
