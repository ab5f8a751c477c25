"""``probes.capture`` of a model that uses activation checkpointing (``torch.utils.checkpoint``).

The recompute runs each checkpointed layer's forward again inside the backward, and capture said "layer 'a'
was called twice in one forward; a probe needs one call per layer" (false: the model calls it once).  The
recompute is now known (it runs inside the backward): without reentry the gradients flow through the
forward's own graph; with ``use_reentrant=True`` (whose forward runs under no_grad) the recompute's graph is
the backward's.  Either way the capture equals the capture of the same model without checkpointing, bit for
bit, plain and emulated.
"""

import copy
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.checkpoint import checkpoint  # noqa: E402

import fp8emu.torch as ft  # noqa: E402
from fp8emu.torch import probes  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(32, 32), torch.nn.Linear(32, 32)
        self.mode = None          # None: no checkpointing; else use_reentrant

    def forward(self, x):
        inner = lambda t: torch.relu(self.a(t))      # noqa: E731
        h = inner(x) if self.mode is None else checkpoint(inner, x, use_reentrant=self.mode)
        return self.b(h)


def _capture(model, mode, x):
    model.mode = mode
    return probes.capture(model, lambda m: (m(x) ** 2).mean())


@pytest.mark.parametrize("recipe", [None, "te-delayed"])
@pytest.mark.parametrize("reentrant", [False, True])
def test_capture_under_checkpointing_is_the_capture_without_it(recipe, reentrant):
    torch.manual_seed(0)
    model = Block()
    if recipe is not None:
        ft.emulate(model, recipe, "h100")
    twin = copy.deepcopy(model)
    x = torch.randn(32, 32, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # no recompute warning: the emulated layers replay their call
        loss, caps = _capture(model, reentrant, x)
    want_loss, want = _capture(twin, None, x)
    assert loss == want_loss and sorted(caps) == sorted(want) == ["a", "b"]
    for name in caps:
        for f in ("x", "w", "b", "y", "dy", "dx", "dw"):
            assert np.array_equal(getattr(caps[name], f), getattr(want[name], f)), (name, f)


def test_a_layer_called_twice_in_the_forward_is_still_named():
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 32)
    model = torch.nn.Sequential(lin, torch.nn.ReLU(), lin)
    with pytest.raises(ValueError, match="layer '0' was called twice in one forward"):
        probes.capture(model, lambda m: m(torch.randn(16, 32)).sum())
