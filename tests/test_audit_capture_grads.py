"""``probes.capture``: each layer's own dgrad and wgrad, and a keyword-called layer
(tests/AUDIT.md, "Third fresh audit of the CPU order, probes, compile and filters")."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from fp8emu.torch import probes  # noqa: E402


def _own(c):
    """The layer's own gradients in float64 from its captured operands (independent of the capture's dx, dw)."""
    dy, x, w = (a.astype(np.float64) for a in (c.dy, c.x, c.w))
    return dy @ w, dy.T @ x


class _SharedInput(nn.Module):
    """q, k and v style: two layers on one input, which also reaches the loss directly (a residual)."""

    def __init__(self):
        super().__init__()
        self.p, self.q = nn.Linear(8, 6), nn.Linear(8, 5)

    def forward(self, x):
        return self.p(x).square().sum() + self.q(x).tanh().sum() + x.sum()


def test_dx_is_the_layers_own_dgrad_when_its_input_is_used_elsewhere_too():
    torch.manual_seed(0)
    x = torch.randn(4, 8, requires_grad=True)
    _, caps = probes.capture(_SharedInput(), lambda m: m(x))
    for c in caps.values():       # was the input's whole gradient: off by 1.1 from the layer's own dgrad
        dx, dw = _own(c)
        assert np.allclose(c.dx, dx, rtol=1e-5, atol=1e-5) and np.allclose(c.dw, dw, rtol=1e-5, atol=1e-5)
    assert np.allclose(x.grad.numpy(), caps["p"].dx + caps["q"].dx + 1, atol=1e-5)   # the model's gradient unchanged


def test_two_called_layers_sharing_a_weight_are_refused_not_given_the_sum():
    a, b = nn.Linear(8, 8), nn.Linear(8, 8)
    b.weight = a.weight
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match="layers '0' and '2' share one weight"):     # dw was both layers' sum
        probes.capture(nn.Sequential(a, nn.Tanh(), b), lambda m: m(x).square().sum())
    _, caps = probes.capture(nn.Sequential(a, nn.Tanh()), lambda m: m(x).square().sum())   # one of them called: fine
    assert list(caps) == ["0"]


def test_a_layer_called_with_its_input_as_a_keyword_is_captured():
    class Kw(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 3)

        def forward(self, x):
            return self.lin(input=x)

    x = torch.randn(5, 8, requires_grad=True)
    _, caps = probes.capture(Kw(), lambda m: m(x).square().sum())     # was IndexError: tuple index out of range
    c = caps["lin"]
    dx, dw = _own(c)
    assert c.x.shape == (5, 8) and np.allclose(c.dx, dx, atol=1e-5) and np.allclose(c.dw, dw, atol=1e-5)
