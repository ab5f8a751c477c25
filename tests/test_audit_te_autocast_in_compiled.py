"""``fp8emu.torch.te.autocast`` entered inside a function ``torch.compile`` traces (audit25's open item).

As ``fp8emu.torch.autocast`` (``tests/test_audit_autocast_in_compiled.py``): the block's state is a
``contextvars.ContextVar``, which Dynamo cannot trace, and with ``fullgraph=True`` the compile failed with Dynamo's
"does not know how to trace method `get` of class `ContextVar` ... Please report an issue to PyTorch", naming
fp8emu's code.  Now the reason says the cause and the ways out; without ``fullgraph`` the block is a graph break
and gives the eager bits (expected: the same model called eagerly in the same block).
"""

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch.te as te  # noqa: E402

_WHY = (r"reason: fp8emu.torch.te.autocast keeps its state in a contextvars.ContextVar, which torch.compile cannot "
        r"trace \(a graph break\): enter the block outside the compiled function")


def _pair():
    torch.manual_seed(0)
    a = te.Linear(32, 32)
    b = te.Linear(32, 32)
    b.load_state_dict(a.state_dict())
    return a, b


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("enabled", [True, False])
def test_fullgraph_names_the_cause_and_the_ways_out(enabled):
    layer, _ = _pair()

    def f(x):
        with te.autocast(enabled=enabled, recipe=te.recipe.Float8CurrentScaling()):
            return torch.relu(layer(x))

    with torch.no_grad(), pytest.raises(Exception, match=_WHY):
        torch.compile(f, backend="eager", fullgraph=True)(torch.randn(16, 32))


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("enabled", [True, False])
def test_without_fullgraph_the_block_gives_the_eager_bits(enabled):
    layer, eager = _pair()
    x = torch.randn(16, 32)

    def f(v):
        with te.autocast(enabled=enabled, recipe=te.recipe.Float8CurrentScaling()):
            return torch.relu(layer(v))

    xc, xe = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    y = torch.compile(f, backend="aot_eager")(xc)
    with te.autocast(enabled=enabled, recipe=te.recipe.Float8CurrentScaling()):
        want = torch.relu(eager(xe))
    assert torch.equal(y, want)
    y.square().sum().backward()
    want.square().sum().backward()
    assert torch.equal(xc.grad, xe.grad) and torch.equal(layer.weight.grad, eager.weight.grad)
    assert te.current_autocast() is None          # the block was left


def test_the_block_still_checks_its_arguments():
    with pytest.raises(TypeError, match=r"^autocast: enabled must be True or False, got 1$"):
        te.autocast(enabled=1)
