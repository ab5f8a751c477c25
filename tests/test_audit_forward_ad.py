"""Forward-mode AD (``torch.autograd.forward_ad``'s dual tensors) through an emulated layer (fifteenth audit, part A).

A dual input (or a dual weight) reached the layer's ``autograd.Function``: torch's bare "NotImplementedError: You must
implement the jvp function for custom autograd.Function to use it with forward mode AD", naming neither the layer nor
the way out, where ``torch.func.jvp`` has had fp8emu's one line since the fifth round.  Now one error naming the
layer.  A dual level without a tangent on the layer's tensors runs as before, and a layer that computes as the plain
``nn.Linear`` (``autocast_only`` outside ``autocast``) carries the tangent as torch does (the tangent of ``F.linear``
is ``t @ W.T``).
"""

import warnings

import pytest

torch = pytest.importorskip("torch")
import torch.autograd.forward_ad as fwAD  # noqa: E402

import fp8emu.torch as ft  # noqa: E402

_MSG = (r"^layer '0': forward-mode AD \(torch.autograd.forward_ad's dual tensors\) cannot run through an emulated "
        r"layer, whose GEMMs are NumPy calls with no tangent; take gradients with ordinary \(reverse-mode\) autograd "
        r"\(loss.backward\(\), torch.autograd.grad\)$")


def _model(**kw):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ft.emulate(model, "te-current", "h100", **kw)
    return model


@pytest.mark.parametrize("grad", [True, False])
def test_a_dual_input_is_one_error_naming_the_layer(grad):
    model = _model()
    with fwAD.dual_level(), torch.set_grad_enabled(grad), pytest.raises(RuntimeError, match=_MSG):
        model(fwAD.make_dual(torch.randn(16, 32), torch.randn(16, 32)))


def test_a_dual_weight_is_named_too():
    model = _model()
    x = torch.randn(16, 32)
    w = model[0].weight.detach()
    with fwAD.dual_level(), pytest.raises(RuntimeError, match=_MSG):
        torch.func.functional_call(model, {"0.weight": fwAD.make_dual(w, torch.ones_like(w))}, (x,))


def test_without_a_tangent_the_layer_runs_as_before():
    model = _model()
    x = torch.randn(16, 32)
    with torch.no_grad():
        want = model(x)
        with fwAD.dual_level():
            assert torch.equal(model(x), want)


def test_the_plain_path_carries_the_tangent_as_torch():
    model = _model(autocast_only=True)          # outside ft.autocast: F.linear, which forward AD differentiates
    x, t = torch.randn(16, 32), torch.randn(16, 32)
    with fwAD.dual_level():
        _, tangent = fwAD.unpack_dual(model(fwAD.make_dual(x, t)))
    assert torch.allclose(tangent, t @ model[0].weight.detach().T, rtol=1e-6, atol=1e-6)
