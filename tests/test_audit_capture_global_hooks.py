"""Fifteenth audit, part B (audit26): ``capture`` and global forward hooks.

torch runs the hooks of ``torch.nn.modules.module.register_module_forward_hook`` before a module's own, so one that
returned another output (``out * 2``) or changed it in place gave capture the hook's output: ``y`` was not
``x w^T + b`` (1.17 off) and ``dy`` the gradient of the hook's output (``dw`` 8.3 off ``dy^T x``), silently,
where the docstring says ``y`` and ``dy`` are the layer's own, before a hook.  References: float64 products of the
captured float32 operands.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn.modules import module as nn_module  # noqa: E402
from torch.utils.module_tracker import ModuleTracker  # noqa: E402

from fp8emu.torch.probes import capture  # noqa: E402
from test_audit_capture_grad_hooks import X, _loss, _model  # noqa: E402  (the same two-layer model and loss)


def _check_products(caps):
    assert sorted(caps) == ["0", "2"]
    for c in caps.values():
        x, w, dy = (a.astype(np.float64) for a in (c.x, c.w, c.dy))
        np.testing.assert_allclose(c.y, x @ w.T + c.b, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(c.dw, dy.T @ x, rtol=1e-5, atol=1e-6)


def _doubled(mod, args, out):
    return out * 2 if isinstance(mod, nn.Linear) else None


def _doubled_in_place(mod, args, out):
    if isinstance(mod, nn.Linear):
        out.mul_(2)


@pytest.mark.parametrize("hook", [_doubled, _doubled_in_place])
def test_a_global_hook_that_changes_a_layers_output_is_refused(hook):
    before = dict(nn_module._global_forward_hooks)
    h = nn_module.register_module_forward_hook(hook)
    try:
        with pytest.raises(ValueError, match=r"layer '0': a global forward hook \(torch.nn.modules.module."
                                             r"register_module_forward_hook\) changed its output"):
            capture(_model(), _loss)
    finally:
        h.remove()
    assert dict(nn_module._global_forward_hooks) == before      # capture's own is gone


def test_a_global_hook_that_only_looks_is_taken():
    seen = []
    h = nn_module.register_module_forward_hook(lambda mod, args, out: seen.append(type(mod).__name__))
    try:
        _, caps = capture(_model(), _loss)
    finally:
        h.remove()
    assert seen.count("Linear") == 2
    _check_products(caps)
    with ModuleTracker():                 # torch's own tracker registers global hooks
        _check_products(capture(_model(), _loss)[1])


def test_a_global_pre_hook_changes_the_input_the_layer_gets():
    h = nn_module.register_module_forward_pre_hook(
        lambda mod, args: (args[0] * 3,) if isinstance(mod, nn.Linear) else None)
    try:
        _, caps = capture(_model(), _loss)
    finally:
        h.remove()
    _check_products(caps)               # x is what the layer got: y = x w^T + b
    np.testing.assert_allclose(caps["0"].x, 3 * X.numpy(), rtol=1e-6)


def test_without_global_hooks_as_before():
    assert not nn_module._global_forward_hooks
    _check_products(capture(_model(), _loss)[1])
