"""Twelfth audit, part A (#3): ``probes.capture`` of a subclass of ``nn.Linear`` with a forward of its own.

Before the fix such a layer (a fake-quantized weight as ``torch.ao.nn.qat.Linear``, a scaled output) was
captured as a linear layer: ``y`` its output and ``dw`` its weight's gradient, neither ``x w^T + b`` nor
``dy^T x``, silently (grad-study compares passes with them).  ``emulate`` leaves such a subclass as it is.
Expectations are float64 products of the captured operands, not the code under test."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from fp8emu.torch.probes import capture  # noqa: E402


class Scaled(nn.Linear):
    def forward(self, input):
        return super().forward(input) * 2.0


class Renamed(nn.Linear):          # a subclass that keeps nn.Linear's forward
    pass


def _loss(x):
    return lambda m: m(x).square().sum()


def test_a_subclass_with_its_own_forward_is_refused():
    torch.manual_seed(0)
    model = nn.Sequential(Scaled(5, 8), nn.ReLU(), nn.Linear(8, 4))
    with pytest.raises(ValueError, match=r"layer '0' is a Scaled, a subclass of nn.Linear with a forward of its own"):
        capture(model, _loss(torch.randn(6, 5)))
    # the hooks are removed: the model runs as before
    assert not model[0]._forward_hooks and not model[0]._forward_pre_hooks


def test_torch_ao_qat_linear_is_refused():
    qat = pytest.importorskip("torch.ao.nn.qat")
    qconfig = torch.ao.quantization.get_default_qat_qconfig("x86")
    model = nn.Sequential(qat.Linear(5, 8, qconfig=qconfig), nn.ReLU(), nn.Linear(8, 4))
    with pytest.raises(ValueError, match=r"layer '0' is a Linear, a subclass of nn.Linear with a forward of its own"):
        capture(model, _loss(torch.randn(6, 5)))


@pytest.mark.parametrize("first", [lambda: Renamed(5, 8), lambda: nn.LazyLinear(8), lambda: nn.Linear(5, 8)])
def test_layers_computing_x_w_plus_b_are_captured_as_before(first):
    torch.manual_seed(0)
    model = nn.Sequential(first(), nn.ReLU(), nn.Linear(8, 4))
    _, caps = capture(model, _loss(torch.randn(6, 5)))
    assert sorted(caps) == ["0", "2"]
    for c in caps.values():
        x, w, b, dy = (a.astype(np.float64) for a in (c.x, c.w, c.b, c.dy))
        np.testing.assert_allclose(c.y, x @ w.T + b, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(c.dw, dy.T @ x, rtol=1e-4, atol=1e-5)


def test_an_uncalled_subclass_is_left_out_as_before():
    model = nn.ModuleDict({"used": nn.Linear(5, 4), "unused": Scaled(5, 4)})
    _, caps = capture(model, lambda m: m["used"](torch.randn(3, 5)).sum())
    assert sorted(caps) == ["used"]
