"""An emulated layer whose state buffers were made under ``torch.inference_mode()`` (thirteenth audit, part B).

``emulate`` (or a deep copy, a ``load_state_dict(..., assign=True)``, a ``model.to()``) run inside an
inference-mode block made the layer's state buffers inference tensors; the layer advances them in place on every
call, so the next call outside the block (``torch.no_grad()`` inference, or training) was torch's "Inplace update
to inference tensor outside InferenceMode is not allowed", where the plain ``nn.Linear`` the layer replaced runs.
"""

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import fp8emu.torch as ft  # noqa: E402


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32))


def _reference(recipe, x, calls):
    """The same model emulated outside inference mode, run ``calls`` times without grad: its last output."""
    ref = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ft.emulate(ref, recipe, "h100")
    with torch.no_grad():
        for _ in range(calls):
            y = ref(x)
    return y


@pytest.mark.parametrize("recipe", ["te-delayed", "te-current"])
def test_a_model_emulated_inside_inference_mode_runs_outside_it(recipe):
    model = _model()
    x = torch.randn(16, 32)
    with torch.inference_mode():
        ft.emulate(model, recipe, "h100")
        model(x)
    with torch.no_grad():
        y = model(x)
    assert torch.equal(y, _reference(recipe, x, 2))
    assert int(model[0].fp8emu_step) == 2 and int(model[2].fp8emu_step) == 2
    # and it trains afterwards (plain torch refuses inference-tensor parameters; these are normal ones)
    model(x.requires_grad_()).sum().backward()
    assert int(model[0].fp8emu_step) == 3 and model[0].weight.grad is not None


def test_a_deep_copy_made_inside_inference_mode_runs_outside_it():
    model = _model()
    ft.emulate(model, "te-delayed", "h100")
    x = torch.randn(16, 32)
    with torch.inference_mode():
        twin = copy.deepcopy(model)
    with torch.no_grad():
        y = twin(x)
    assert torch.equal(y, _reference("te-delayed", x, 1))
    assert int(twin[0].fp8emu_step) == 1 and int(model[0].fp8emu_step) == 0


def test_a_state_dict_assigned_inside_inference_mode_runs_outside_it():
    source = _model()
    ft.emulate(source, "te-delayed", "h100")
    x = torch.randn(16, 32)
    with torch.no_grad():
        source(x)
    target = _model()
    ft.emulate(target, "te-delayed", "h100")
    with torch.inference_mode():
        state = {k: v.clone() for k, v in source.state_dict().items()}   # inference tensors
        target.load_state_dict(state, assign=True)
    with torch.no_grad():
        y = target(x)
    assert torch.equal(y, _reference("te-delayed", x, 2))
    assert int(target[0].fp8emu_step) == 2


def test_a_model_moved_inside_inference_mode_runs_outside_it():
    model = _model()
    ft.emulate(model, "te-delayed", "h100")
    x = torch.randn(16, 32)
    with torch.inference_mode():
        model.to(torch.float32)             # torch's _apply makes no new tensors for a no-op .to()
        model.to_empty(device="cpu")        # new buffers, made in inference mode
        model.load_state_dict(_fresh_state(), strict=True)
    with torch.no_grad():
        y = model(x)
    assert torch.equal(y, _reference("te-delayed", x, 1))


def _fresh_state():
    fresh = _model()
    ft.emulate(fresh, "te-delayed", "h100")
    return fresh.state_dict()


def test_inside_inference_mode_the_layer_still_runs_as_before():
    model = _model()
    ft.emulate(model, "te-delayed", "h100")
    x = torch.randn(16, 32)
    with torch.inference_mode():
        y = model(x)
        y = model(x)
    assert torch.equal(y, _reference("te-delayed", x, 2))
    assert int(model[0].fp8emu_step) == 2
