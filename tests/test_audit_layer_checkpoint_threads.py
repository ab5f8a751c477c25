"""An emulated ``nn.Linear`` shared by threads, one of them checkpointing it (audit27's open item).

Activation checkpointing's recompute replays the layer's call with the state its forward ran with
(``EmulatedLinear._recompute`` puts that state in the layer's buffers for the call and its own back after).
Another thread calling the layer meanwhile took its step from the replayed state and lost it when the layer's own
came back, delayed scaling's amax record with it, silently.  Expected: every forward's step and amax record kept
(three threads of n forwards: 3 n steps; the history's length exceeds 3 n, and random inputs never have amax 0).
"""

import pytest

torch = pytest.importorskip("torch")
from torch.utils.checkpoint import checkpoint  # noqa: E402

import fp8emu.torch as ft  # noqa: E402
from fp8emu.training.recipes import get_recipe  # noqa: E402
from test_audit_layer_threads import _run, switch_often  # noqa: E402, F401  (threads started together)

W = 32


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_threads_sharing_a_checkpointed_layer_keep_every_step(use_reentrant, switch_often):
    assert get_recipe("te-delayed").amax_history_len > 45
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(W, W))
    ft.emulate(model, "te-delayed", "h100")
    n = 15

    def call(i):
        if i == 0:
            x = torch.randn(W, W, requires_grad=True)
            checkpoint(model, x, use_reentrant=use_reentrant).sum().backward()
        else:
            with torch.no_grad():
                model(torch.randn(W, W))
    _run(3, n, call)
    layer = model[0]
    assert int(layer.fp8emu_step) == 3 * n
    assert int((layer.amax_history_input != 0).sum()) == 3 * n
