"""An empty (0-token) batch through an emulated layer whose weights are of another dtype than its input
(thirteenth audit, part B).

The layer takes a float16 (or float64, bfloat16) input with float32 weights and gives its output in the input's
dtype; with no tokens it called ``F.linear(x, weight, bias)``, which refuses the pair: torch's bare "mat1 and mat2
must have the same dtype" for an empty batch (the last, partial batch of a filtered data set) where every other
batch ran.
"""

import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import fp8emu.torch as ft  # noqa: E402


def _layer(recipe, wdtype):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32, dtype=wdtype))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ft.emulate(model, recipe, "h100")
    return model


PAIRS = [(torch.float16, torch.float32), (torch.float64, torch.float32), (torch.float32, torch.bfloat16),
         (torch.bfloat16, torch.float16)]


@pytest.mark.parametrize("recipe", ["te-current", "torchao-rowwise"])
@pytest.mark.parametrize("xdtype,wdtype", PAIRS)
def test_an_empty_batch_gives_the_dtype_a_full_one_gives(recipe, xdtype, wdtype):
    model = _layer(recipe, wdtype)
    with torch.no_grad():
        full = model(torch.randn(16, 32, dtype=xdtype))
        empty = model(torch.randn(2, 0, 32, dtype=xdtype))
    assert full.dtype == xdtype                     # the layer's rule: the input's dtype
    assert empty.dtype == xdtype and empty.shape == (2, 0, 32)


@pytest.mark.parametrize("xdtype,wdtype", PAIRS[:2])
def test_an_empty_batch_with_autograd_gives_zero_gradients(xdtype, wdtype):
    model = _layer("te-current", wdtype)
    x = torch.randn(0, 32, dtype=xdtype, requires_grad=True)
    y = model(x)
    assert y.dtype == xdtype and y.shape == (0, 32)
    y.sum().backward()
    layer = model[0]
    assert layer.weight.grad.dtype == wdtype and not layer.weight.grad.any()
    assert layer.bias.grad.dtype == wdtype and not layer.bias.grad.any()
    assert x.grad.shape == (0, 32)
    assert int(layer.fp8emu_step) == 0              # no GEMM ran, no step taken


@pytest.mark.usefixtures("fresh_dynamo")
def test_an_empty_batch_compiled_gives_the_dtype_a_full_one_gives():
    model = _layer("te-current", torch.float32)
    compiled = torch.compile(model, backend="aot_eager", dynamic=False)
    with torch.no_grad():
        empty = compiled(torch.randn(0, 32, dtype=torch.float16))
    assert empty.dtype == torch.float16 and empty.shape == (0, 32)


def test_an_empty_batch_of_the_weights_dtype_as_before():
    model = _layer("te-current", torch.float32)
    x = torch.randn(3, 0, 32, requires_grad=True)
    y = model(x)
    assert y.dtype == torch.float32 and y.shape == (3, 0, 32)
