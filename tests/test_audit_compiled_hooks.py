"""Module hooks on an emulated layer under ``torch.compile``: run once per call, as in eager mode.

The compiled op ran the eager layer through ``functional_call(layer, ...)``, which runs the layer's hooks
again: a forward hook that graph-breaks (a logging hook reading ``.item()``; ``probes.capture``'s, which
converts to NumPy) ran twice per compiled call, and ``capture`` of a compiled emulated model said each layer
"was called twice in one forward".
"""

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import fp8emu.torch as ft  # noqa: E402
from fp8emu.torch import probes  # noqa: E402


pytestmark = pytest.mark.usefixtures("fresh_dynamo")    # tests/conftest.py


def _model():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 16))
    ft.emulate(m, "te-current", "h100", module_filter_fn=lambda mod, fqn: fqn == "0")
    return m


@pytest.mark.parametrize("grad", [True, False])
def test_a_graph_breaking_hook_runs_once_per_compiled_call(grad):
    m, seen = _model(), []
    m[0].register_forward_hook(lambda mod, args, out: seen.append(float(out.abs().max())))
    compiled = torch.compile(m, backend="aot_eager")
    x = torch.randn(16, 32)
    with torch.set_grad_enabled(grad):
        for _ in range(2):
            compiled(x)
    assert len(seen) == 2 and seen[0] == seen[1]


def test_capture_of_a_compiled_emulated_model_is_the_eager_capture():
    m = _model()
    x = torch.randn(16, 32)
    loss_fn = lambda mod: mod(x).square().mean()  # noqa: E731
    _, eager = probes.capture(copy.deepcopy(m), loss_fn)
    _, caps = probes.capture(torch.compile(m, backend="aot_eager"), loss_fn)
    assert sorted(caps) == ["_orig_mod.0", "_orig_mod.2"]
    for name, c in caps.items():
        for t in ("x", "y", "dy", "dw"):
            np.testing.assert_array_equal(getattr(c, t), getattr(eager[name.removeprefix("_orig_mod.")], t))
