"""``fp8emu.torch.autocast`` entered inside a function ``torch.compile`` traces (fifteenth audit, part A).

The block's state is a ``contextvars.ContextVar``, which Dynamo cannot trace: with ``fullgraph=True`` the compile
failed with Dynamo's "Dynamo does not know how to trace method `get` of class `ContextVar` ... Hint: Avoid calling
`ContextVar.get` in your code. Hint: Please report an issue to PyTorch.", naming fp8emu's code and sending the user
to PyTorch.  Now the reason says the cause and the ways out (the block outside the compiled function, which
compiled layers read when they run, or no ``fullgraph``); without ``fullgraph`` the block is a graph break and
gives the eager bits, as before.  The expected outputs are the eager model's under the same block (and, for
``enabled=False``, torch's ``F.linear``).
"""

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch as ft  # noqa: E402

_WHY = (r"reason: fp8emu.torch.autocast keeps its state in a contextvars.ContextVar, which torch.compile cannot "
        r"trace \(a graph break\): enter the block outside the compiled function \(compiled emulated layers read it "
        r"when they run\), or compile without fullgraph=True")


def _model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32))
    ft.emulate(model, "te-current", "h100")
    return model


_BLOCKS = {"off": lambda: ft.autocast(enabled=False), "exact": lambda: ft.autocast(gpu="exact")}


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("block", list(_BLOCKS))
def test_fullgraph_names_the_cause_and_the_ways_out(block):
    model = _model()

    def f(x):
        with _BLOCKS[block]():
            return model(x)

    with torch.no_grad(), pytest.raises(Exception, match=_WHY):
        torch.compile(f, backend="eager", fullgraph=True)(torch.randn(32, 32))


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("block", list(_BLOCKS))
def test_without_fullgraph_the_block_gives_the_eager_bits(block):
    model, eager = _model(), _model()
    x = torch.randn(32, 32)

    def f(x):
        with _BLOCKS[block]():
            return model(x)

    xc, xe = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    y = torch.compile(f, backend="aot_eager")(xc)
    with _BLOCKS[block]():
        want = eager(xe)
    assert torch.equal(y, want)
    if block == "off":
        lin = [eager[0], eager[2]]
        plain = torch.nn.functional.linear(torch.relu(torch.nn.functional.linear(x, lin[0].weight, lin[0].bias)),
                                           lin[1].weight, lin[1].bias)
        assert torch.equal(y, plain)
    y.square().sum().backward()
    want.square().sum().backward()
    assert torch.equal(xc.grad, xe.grad) and torch.equal(model[0].weight.grad, eager[0].weight.grad)


@pytest.mark.usefixtures("fresh_dynamo")
def test_the_block_around_a_fullgraph_model_is_the_way_out():
    model, eager = _model(), _model()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    x = torch.randn(32, 32)
    with torch.no_grad(), ft.autocast(gpu="exact"):
        assert torch.equal(compiled(x), eager(x))


def test_the_block_still_checks_its_arguments():
    with pytest.raises(TypeError, match=r"^enabled must be True or False, got 1$"):
        with ft.autocast(enabled=1):
            pass
