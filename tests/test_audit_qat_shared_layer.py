"""``probes.qat_model`` of a model that uses one linear layer at two places.

QAT is the recipe's quantized forward with the exact float32 backward at every layer; a layer reached
under two names (``Sequential(lin, act, lin)``) kept its second use emulated, its backward quantized,
because ``named_children`` yields a module once.
"""

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from fp8emu.torch import probes  # noqa: E402
from fp8emu.torch.linear import EmulatedLinear  # noqa: E402


def test_every_use_of_a_shared_layer_is_qat_and_stays_one_module():
    torch.manual_seed(0)
    lin = nn.Linear(32, 32)
    q = probes.qat_model(nn.Sequential(lin, nn.ReLU(), lin), "te-current", "h100")
    assert isinstance(q[0], probes._QATLinear) and q[2] is q[0]
    assert not any(isinstance(c, EmulatedLinear) for c in q.children())
    nested = probes.qat_model(nn.Sequential(nn.Sequential(lin), nn.ReLU(), nn.Sequential(lin)), "te-current", "h100")
    assert isinstance(nested[0][0], probes._QATLinear) and nested[2][0] is nested[0][0]


def test_the_qat_backward_of_a_shared_layer_is_the_float32_chain_rule():
    torch.manual_seed(0)
    lin = nn.Linear(32, 32)
    q = probes.qat_model(nn.Sequential(lin, nn.ReLU(), lin), "te-current", "h100")
    x = torch.randn(16, 32)
    # the float32 chain rule through the recipe's forward values: dW = sum over uses of dy^T x, with each
    # use's input the quantized forward's output of the one before
    h = q[0](x)
    a = torch.relu(h)
    y = q[2](a)
    q.zero_grad()
    y.sum().backward()
    dy2 = torch.ones(16, 32)
    dh = (dy2 @ lin.weight.detach()) * (h.detach() > 0)
    want = dy2.T @ a.detach() + dh.T @ x
    torch.testing.assert_close(q[0].weight.grad, want, rtol=1e-5, atol=1e-5)
