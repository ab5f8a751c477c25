"""Fifteenth audit, part B (audit26): ``capture`` and gradient hooks on parameters.

``capture`` returned the weight's ``.grad`` as ``dw`` and read ``w`` and ``b`` after the backward:

* a ``register_hook`` on a weight (per-parameter clipping, scaling) made ``dw`` the hook's result: twice
  ``dy^T x`` for ``g * 2``, silently;
* an optimizer stepped in the backward (``register_post_accumulate_grad_hook``, torch's "optimizer in backward"
  recipe) moved the weights before they were read: ``y`` was not ``x w^T + b`` (0.12 and 0.81 off), silently;
* a hook that freed the gradients in the backward gave "its output does not reach the loss", false (it did).

References: float64 products of the captured float32 operands, and the Parameters' values before the call.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from fp8emu.torch.probes import capture  # noqa: E402


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 6), nn.Tanh(), nn.Linear(6, 3))


X = torch.randn(5, 8, generator=torch.Generator().manual_seed(1))


def _loss(m):
    return m(X).pow(2).sum()


def _check_products(caps, weights):
    for name, c in caps.items():
        w0, b0 = weights[name]
        assert np.array_equal(c.w, w0) and np.array_equal(c.b, b0)          # the forward's values
        x, w, dy = (a.astype(np.float64) for a in (c.x, c.w, c.dy))
        np.testing.assert_allclose(c.y, x @ w.T + c.b, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(c.dw, dy.T @ x, rtol=1e-5, atol=1e-6)


def _weights(m):
    return {n: (mod.weight.detach().numpy().copy(), mod.bias.detach().numpy().copy())
            for n, mod in m.named_modules() if isinstance(mod, nn.Linear)}


def test_a_hook_that_scales_the_weights_gradient_is_refused():
    m = _model()
    h = m[0].weight.register_hook(lambda g: g * 2)       # dw was 2 dy^T x
    with pytest.raises(ValueError, match=r"the weight of layer '0' has a gradient hook \(register_hook\), so its "
                                         r"\.grad need not be the layer's wgrad"):
        capture(m, _loss)
    h.remove()
    _check_products(capture(m, _loss)[1], _weights(m))     # without it, as before


def test_an_optimizer_stepped_on_the_weight_in_the_backward_is_refused():
    m = _model()

    def step(p):
        with torch.no_grad():
            p.add_(p.grad, alpha=-0.1)
    hs = [p.register_post_accumulate_grad_hook(step) for p in m.parameters()]
    with pytest.raises(ValueError, match=r"the weight of layer '0' has a gradient hook "
                                         r"\(register_post_accumulate_grad_hook\)"):
        capture(m, _loss)
    for h in hs:
        h.remove()


def test_weights_moved_in_the_backward_are_captured_as_the_forward_used_them():
    m = _model()
    before = _weights(m)

    def step(_):        # hooked on a bias: the weights have no hook of their own, and move in the backward
        with torch.no_grad():
            for q in m.parameters():
                if q.grad is not None:
                    q.add_(q.grad, alpha=-0.1)
    h = m[0].bias.register_post_accumulate_grad_hook(step)
    _, caps = capture(m, _loss)
    h.remove()
    assert not np.array_equal(m[2].weight.detach().numpy(), before["2"][0])     # it did step
    _check_products(caps, before)


def test_gradients_freed_in_the_backward_are_not_called_unreached():
    m = _model()

    def free(_):
        for q in m.parameters():
            q.grad = None
    h = m[0].bias.register_post_accumulate_grad_hook(free)
    with pytest.raises(ValueError, match=r"has no gradient after the backward though the layer's output reached "
                                         r"the loss") as info:
        capture(m, _loss)
    assert "does not reach the loss" not in str(info.value)
    h.remove()


def test_hooks_that_leave_the_weights_gradient_alone_are_taken():
    m = _model()
    seen = []
    hs = [m[0].bias.register_hook(lambda g: g * 3),                   # the bias's gradient is not captured
          m[2].register_full_backward_hook(lambda mod, gi, go: seen.append(1))]
    _, caps = capture(m, _loss)
    for h in hs:
        h.remove()
    assert seen and sorted(caps) == ["0", "2"]
    _check_products(caps, _weights(m))
