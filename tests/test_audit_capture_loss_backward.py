"""``probes.capture`` given a training step (a ``loss_fn`` that calls ``backward()`` itself).

The step's backward freed the graph, and capture's own backward was torch's "Trying to backward through the
graph a second time ... Specify retain_graph=True"; with ``retain_graph=True`` both backwards ran and every
``.grad`` was doubled: ``dw`` twice the layer's wgrad ``dy^T x``, silently.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from fp8emu.torch import probes  # noqa: E402


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 16))


@pytest.mark.parametrize("how", ["backward", "retain_graph"])
def test_a_loss_fn_that_runs_a_backward_is_refused(how):
    model, x = _model(), torch.randn(16, 32)

    def step(m):
        loss = m(x).square().mean()
        loss.backward(retain_graph=how == "retain_graph")
        return loss

    with pytest.raises(ValueError, match=r"loss_fn ran a backward itself .* without calling backward\(\)"):
        probes.capture(model, step)


@pytest.mark.parametrize("peek", [False, True])
def test_the_loss_alone_gives_the_layers_own_wgrad(peek):
    model, x = _model(), torch.randn(16, 32)

    def loss_fn(m):
        loss = m(x).square().mean()
        if peek:        # torch.autograd.grad leaves .grad alone: the capture is the loss's, not refused
            torch.autograd.grad(loss, list(m.parameters()), retain_graph=True)
        return loss

    _, caps = probes.capture(model, loss_fn)
    for c in caps.values():
        np.testing.assert_allclose(c.dw, np.float64(c.dy).T @ np.float64(c.x), rtol=1e-5, atol=1e-7)
