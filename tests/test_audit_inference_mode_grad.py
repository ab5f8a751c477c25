"""``torch.enable_grad()`` inside ``torch.inference_mode()`` (thirteenth audit, part B).

Inference mode records no autograd graph whatever the grad mode (a plain ``nn.Linear``'s output does not require
grad there), but the emulated layer asked the grad mode alone: one-token inference (M = 1) in an inference-mode
block that code it calls re-enables grad in (a helper decorated with ``@torch.enable_grad()``) was refused with "1
tokens ... is not a multiple of 16 ...; run inference without autograd (torch.no_grad() or
torch.inference_mode())" -- the block it ran in -- and larger batches quantized the backward GEMMs' copies for a
backward that cannot run.
"""

import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import fp8emu.torch as ft  # noqa: E402


def _model(recipe="te-current", diagnostics=False):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ft.emulate(model, recipe, "h100", diagnostics=diagnostics)
    return model


def _no_grad(recipe, x):
    with torch.no_grad():
        return _model(recipe)(x)


@pytest.mark.parametrize("recipe", ["te-current", "te-delayed"])
@pytest.mark.parametrize("tokens", [1, 3])
def test_one_token_under_enable_grad_inside_inference_mode_runs(recipe, tokens):
    model = _model(recipe)
    torch.manual_seed(1)
    x = torch.randn(tokens, 32)
    with torch.inference_mode(), torch.enable_grad():
        y = model(x)
    assert not y.requires_grad                      # as plain nn.Linear's there: no graph recorded
    assert torch.equal(y, _no_grad(recipe, x))
    assert int(model[0].fp8emu_step) == 1


def test_a_forward_under_enable_grad_inside_inference_mode_records_fprop_only():
    model = _model(diagnostics=True)
    with torch.inference_mode(), torch.enable_grad():
        model(torch.randn(16, 32))
    rows = ft.diagnostics(model)
    assert {r["pass"] for r in rows} == {"fprop"}


@pytest.mark.usefixtures("fresh_dynamo")
def test_compiled_under_enable_grad_inside_inference_mode_runs():
    model = _model()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    torch.manual_seed(1)
    x = torch.randn(1, 32)
    with torch.inference_mode(), torch.enable_grad():
        y = compiled(x)
    assert not y.requires_grad and torch.equal(y, _no_grad("te-current", x))


def test_with_autograd_the_token_check_stays():
    model = _model()
    with pytest.raises(ValueError, match=r"1 tokens .* not a multiple of 16"):
        model(torch.randn(1, 32))
