"""A batched backward through an emulated layer (fifteenth audit, part A).

``torch.autograd.grad(..., is_grads_batched=True)`` and ``torch.autograd.functional.jacobian(..., vectorize=True)``
run the backward under torch's own (legacy) vmap: the emulated backward read the batched output gradient with NumPy
and failed with torch's bare "Batching rule not implemented for aten::detach; the fallback path doesn't work on out=
or view ops".  Now one error naming the layer and the way out, which works: the unbatched calls give, row by row,
what a loop over the output gradients gives (the reference: the same backward run once per row).
"""

import warnings

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch as ft  # noqa: E402

_MSG = (r"^layer '0': a batched backward \(torch.autograd.grad\(..., is_grads_batched=True\), "
        r"torch.autograd.functional.jacobian\(..., vectorize=True\)\) cannot run an emulated layer's backward, whose "
        r"GEMMs are NumPy calls on the tensors' values; take the gradients one output gradient at a time \(a loop, "
        r"or vectorize=False\)$")


def _model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ft.emulate(model, "te-current", "h100")
    return model


def test_is_grads_batched_is_one_error_naming_the_layer():
    model = _model()
    x = torch.randn(16, 32, requires_grad=True)
    with pytest.raises(RuntimeError, match=_MSG):
        torch.autograd.grad(model(x).sum(0), x, grad_outputs=torch.eye(16), is_grads_batched=True)


def test_a_vectorized_jacobian_is_one_error_naming_the_layer():
    model = _model()
    with pytest.raises(RuntimeError, match=_MSG):
        torch.autograd.functional.jacobian(lambda a: model(a).sum(0), torch.randn(16, 32), vectorize=True)


def test_the_way_out_works():
    model = _model()
    x = torch.randn(16, 32)
    jac = torch.autograd.functional.jacobian(lambda a: model(a).sum(0), x)     # vectorize=False: one row at a time
    assert jac.shape == (16, 16, 32)
    for i in (0, 7, 15):
        xi = x.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(model(xi).sum(0), xi, grad_outputs=torch.eye(16)[i])
        assert torch.equal(jac[i], g)
