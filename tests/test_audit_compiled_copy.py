"""``copy.deepcopy`` of an emulated model while a compiled forward awaits its backward.

A compiled emulated layer keeps the eager graph of each training-mode call until its backward runs (or the
graph is dropped); that graph holds non-leaf tensors, and a deep copy of the model in between (a snapshot of
the best model after an evaluation run with autograd on, whose loss is still held) was torch's "Only Tensors
created explicitly by the user (graph leaves) support the deepcopy protocol", where an eager model copies.
"""

import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import fp8emu.torch as ft  # noqa: E402


@pytest.mark.parametrize("recipe", ["te-current", "te-delayed"])
def test_a_model_with_a_pending_compiled_call_deep_copies_and_both_run_as_eager(recipe):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32))
    ft.emulate(model, recipe, "h100")
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="aot_eager")
    x = torch.randn(16, 32)
    y = compiled(x)
    assert len(model[0].compiled_pending) == 1
    snap = copy.deepcopy(model)
    assert snap[0].compiled_pending == {} and snap[0] is not model[0]
    # the original's pending backward still runs and gives the eager gradients
    ye = eager(x)
    assert torch.equal(y, ye)
    y.sum().backward()
    ye.sum().backward()
    assert torch.equal(model[0].weight.grad, eager[0].weight.grad)
    # the copy holds the state after that forward, as the eager copy does: the next step's bits agree
    x2 = torch.randn(16, 32)
    ys, ye2 = snap(x2), eager(x2)
    assert torch.equal(ys, ye2)
