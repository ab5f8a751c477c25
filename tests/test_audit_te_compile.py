"""``torch.compile`` of a model built from ``fp8emu.torch.te``'s modules.

Dynamo cannot trace the emulated GEMMs (NumPy calls) nor guard on ``te.autocast``'s state: the first FP8
call of a compiled model raised Dynamo's internal "InternalTorchDynamoError: NotImplementedError: argument
of type: <class 'type'>".  Each TE module now runs eagerly under compile (a graph break around it): a
compiled model gives the eager model's outputs and gradients, inside and outside ``te.autocast``, call
after call (delayed scaling's state advancing as in eager).
"""

import copy

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch.te as te  # noqa: E402


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(te.Linear(64, 64), torch.nn.GELU(), te.LayerNormLinear(64, 64),
                               te.LayerNormMLP(64, 64), te.LayerNorm(64), te.RMSNorm(64))


def _step(model, fn, x, on, recipe):
    with te.autocast(enabled=on, recipe=recipe):
        y = fn(x)
    y.square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return y.detach(), grads


@pytest.mark.parametrize("recipe", [te.recipe.DelayedScaling(), te.recipe.Float8CurrentScaling()])
def test_a_compiled_te_model_gives_the_eager_bits_in_and_out_of_autocast(recipe):
    eager, model = _model(), _model()
    compiled = torch.compile(model, backend="aot_eager")
    x = torch.randn(64, 64)
    for on in (True, True, False, True):
        ye, ge = _step(eager, eager, x, on, recipe)
        yc, gc = _step(model, compiled, x, on, recipe)
        assert torch.equal(ye, yc) and all(torch.equal(a, b) for a, b in zip(ge, gc)), on
    assert all(torch.equal(a, b) for a, b in zip(eager.buffers(), model.buffers()))      # the same state


def test_a_compiled_transformer_layer_gives_the_eager_bits():
    torch.manual_seed(0)
    layer = te.TransformerLayer(64, 128, 4, hidden_dropout=0.0, attention_dropout=0.0)
    twin = copy.deepcopy(layer)
    compiled = torch.compile(twin, backend="aot_eager")
    x = torch.randn(16, 4, 64)
    with te.autocast(recipe=te.recipe.DelayedScaling()):
        assert torch.equal(layer(x), compiled(x))
