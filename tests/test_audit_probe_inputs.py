"""Hostile input: the same-state probes' inputs (``fp8emu.torch.probes``)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from fp8emu.torch import probes  # noqa: E402


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float64"])
def test_a_torch_operand_not_float32_is_named_by_its_dtype(dtype):
    # before: a bfloat16 tensor raised torch's "Got unsupported ScalarType BFloat16" from np.asarray
    dt = getattr(torch, dtype)
    x, w, dy = torch.ones(4, 8, dtype=dt), torch.ones(3, 8, dtype=dt), torch.ones(4, 3, dtype=dt)
    for f in (lambda: probes.exact_passes(x, w, None, dy),
              lambda: probes.layer_passes(x, w, None, dy, "te-current", "exact")):
        with pytest.raises(TypeError, match=rf"x must be a float32 array .* got torch\.{dtype}"):
            f()
    f32 = probes.exact_passes(x.float(), w.float(), None, dy.float())
    assert np.array_equal(f32["fprop"], np.full((4, 3), 8.0))      # 8 products of 1 * 1


def _linear():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 3))


def test_capture_refuses_a_layer_run_under_autocast():
    # before: x and w were recorded in float32, y as autocast's bfloat16 product of their rounded copies
    # (|y - x w^T - b| up to 5e-3 on this layer): a capture whose y is not the product of its operands
    m, x = _linear(), torch.randn(4, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="layer '0' ran under torch.autocast"):
            probes.capture(m, lambda mod: mod(x).sum())
    _, caps = probes.capture(m, lambda mod: mod(x).sum())      # without autocast: y is x w^T + b in float32
    c = caps["0"]
    exact = c.x.astype(np.float64) @ c.w.T.astype(np.float64) + c.b
    assert np.max(np.abs(c.y - exact)) < 1e-6


@pytest.mark.parametrize("how", ["detach", "no_grad"])
def test_capture_names_a_loss_that_needs_no_gradient(how):
    # before: torch's "element 0 of tensors does not require grad and does not have a grad_fn"
    m, x = _linear(), torch.randn(4, 8)

    def loss_fn(mod):
        if how == "detach":
            return mod(x).sum().detach()
        with torch.no_grad():
            return mod(x).sum()
    with pytest.raises(ValueError, match="does not depend on the model's parameters"):
        probes.capture(m, loss_fn)
