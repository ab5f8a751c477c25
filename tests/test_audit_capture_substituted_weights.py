"""``probes.capture`` of a layer whose forward did not run on its own Parameters, or that no hook can see.

``torch.func.functional_call(model, {name: p + eps}, x)`` (a sharpness-aware step, perturbed or averaged weights)
runs each layer on the given tensors; capture recorded the Parameters as ``w`` and ``b``: ``y`` differed from
``x w^T + b`` by 0.35 and ``dx`` from ``dy w``, silently.  A model scripted or traced by TorchScript runs its compiled
graph (no ``nn.Linear`` instance, no module call): capture returned the loss and no layer, and left a scripted block's
layers out of a mixed model, silently.
"""

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.func import functional_call  # noqa: E402

from fp8emu.torch import probes  # noqa: E402


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 3))


X = torch.randn(6, 8, generator=torch.Generator().manual_seed(1))


def _stateless(m, change):
    return lambda mm: functional_call(mm, {n: change(n, p) for n, p in mm.named_parameters()}, (X,)).square().sum()


@pytest.mark.parametrize("what", ["weight", "bias"])
def test_a_layer_run_on_substituted_tensors_is_refused(what):
    m = _model()
    loss_fn = _stateless(m, lambda n, p: p + 0.05 if n == f"0.{what}" else p)
    with pytest.raises(ValueError, match=f"layer '0' ran with another {what} than its Parameter .*functional_call"):
        probes.capture(m, loss_fn)


def test_functional_call_on_the_parameters_themselves_is_captured():
    m = _model()
    _, caps = probes.capture(m, _stateless(m, lambda n, p: p))
    for c in caps.values():     # float64 products of the captured operands
        x, w, dy = (a.astype(np.float64) for a in (c.x, c.w, c.dy))
        assert np.allclose(c.y, x @ w.T + c.b, rtol=0, atol=1e-6)
        assert np.allclose(c.dw, dy.T @ x, rtol=0, atol=1e-6)
    assert np.allclose(caps["2"].dx, caps["2"].dy.astype(np.float64) @ caps["2"].w, rtol=0, atol=1e-6)


def _traced():
    return torch.jit.trace(_model(), X)


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.fc(x))


@pytest.mark.parametrize("make, name", [(lambda: torch.jit.script(_model()), "0"), (_traced, "0"),
                                        (lambda: nn.Sequential(torch.jit.script(_Block()), nn.Linear(8, 3)), "0.fc"),
                                        (lambda: torch.jit.script(nn.Linear(8, 3)), "(the model itself)")])
def test_a_model_with_torchscript_linear_layers_is_refused(make, name):
    with pytest.raises(ValueError, match=re.escape(f"layer '{name}' is an nn.Linear compiled by TorchScript")):
        probes.capture(make(), lambda mm: mm(X).square().sum())


def test_a_scripted_module_holding_no_linear_layer_is_no_obstacle():
    m = nn.Sequential(nn.Linear(8, 8), torch.jit.script(nn.Tanh()), nn.Linear(8, 3))
    _, caps = probes.capture(m, lambda mm: mm(X).square().sum())
    assert sorted(caps) == ["0", "2"]


def test_a_computed_bias_is_no_substitution():
    # a parametrization computes the bias at each access (a new tensor of the same values): captured as before
    from torch.nn.utils import parametrize

    class Double(nn.Module):
        def forward(self, b):
            return b * 2

    m = _model()
    parametrize.register_parametrization(m[0], "bias", Double())
    _, caps = probes.capture(m, lambda mm: mm(X).square().sum())
    c = caps["0"]
    assert np.array_equal(c.b, 2 * m[0].parametrizations.bias.original.detach().numpy())
    assert np.allclose(c.y, c.x.astype(np.float64) @ c.w.T.astype(np.float64) + c.b, rtol=0, atol=1e-6)
