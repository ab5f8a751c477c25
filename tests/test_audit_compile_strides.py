"""A compiled emulated layer trains under inductor on a transposed input or a transposed weight.

The backward op's fake kernel gave its gradients the strides of ``x`` and ``weight`` (``torch.empty_like``),
while the op returns contiguous gradients; inductor checks a custom op's outputs against its fake kernel's
strides, so ``compiled(x.t())`` (a projection of a transposed activation) or a layer whose weight Parameter is a
transposed view failed its backward with "AssertionError: expected size 16==16, stride 32==1 ... Error in op:
torch.ops.fp8emu.emulated_linear_backward.default".  The gradients must equal eager's.  (Inductor's caches are
off here: a graph cached before the fix keeps the old strides.)
"""

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch as ft  # noqa: E402


def test_inductor_backward_of_a_transposed_input_and_weight():
    # one compile (inductor's are slow): the input's gradient failed first, the weight's the same way alone
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32))
    model[0].weight = torch.nn.Parameter(torch.randn(32, 32).t())         # a transposed view
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ft.emulate(model, "te-current", "h100")
    eager = copy.deepcopy(model)
    x0, dy = torch.randn(32, 16), torch.randn(16, 32)
    xa, xb = x0.clone().requires_grad_(True), x0.clone().requires_grad_(True)
    with torch._inductor.config.patch(force_disable_caches=True):
        compiled = torch.compile(model, backend="inductor")
        ya = compiled(xa.t())
        ya.backward(dy)
    yb = eager(xb.t())
    yb.backward(dy)
    assert torch.equal(ya, yb)
    assert torch.equal(xa.grad, xb.grad)
    assert torch.equal(model[0].weight.grad, eager[0].weight.grad)
    assert torch.equal(model[0].bias.grad, eager[0].bias.grad)
