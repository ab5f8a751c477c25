"""A second derivative through an emulated backward is one error, not a silent zero.

The emulated backward is NumPy: with ``create_graph=True`` (a gradient penalty, a Hessian-vector product) the
input gradient came back with no graph, so ``(loss + penalty(g)).backward()`` added nothing of the penalty to
the weights' gradients, silently (and ``penalty(g).backward()`` alone was torch's "element 0 of tensors does
not require grad").  Such a gradient now raises one error naming the layer when it is differentiated; a
first-order backward, and ``create_graph=True`` whose gradients are only read, are as before.
"""

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch as ft  # noqa: E402
import fp8emu.torch.te as te  # noqa: E402


def _emulated():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32))
    ft.emulate(m, "te-current", "h100")
    return m, lambda x: m(x)


def _te():
    torch.manual_seed(0)
    m = torch.nn.Sequential(te.Linear(32, 32), torch.nn.Tanh(), te.Linear(32, 32))

    def run(x):
        with te.autocast(recipe=te.recipe.Float8CurrentScaling()):
            return m(x)
    return m, run


@pytest.mark.parametrize("make, owner", [(_emulated, "layer '0'"), (_te, "Linear.gemm")])
@pytest.mark.parametrize("loss", ["square", "sum"])
def test_a_gradient_penalty_through_an_emulated_backward_is_named(make, owner, loss):
    model, run = make()
    x = torch.randn(16, 32, requires_grad=True)
    y = run(x)
    g, = torch.autograd.grad(y.square().sum() if loss == "square" else y.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match=rf"{owner}: the emulated backward \(NumPy\) is differentiable once"):
        (y.sum() + g.pow(2).sum()).backward()


@pytest.mark.parametrize("make", [_emulated, _te])
def test_first_order_gradients_are_as_before(make):
    model, run = make()
    x = torch.randn(16, 32, requires_grad=True)
    run(x).sum().backward()
    first = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    grads = torch.autograd.grad(run(x).sum(), list(model.parameters()), create_graph=True)     # only read
    assert all(torch.equal(a, b.detach()) for a, b in zip(first, grads))
