"""A model emulated on the meta device, its weights then loaded with ``load_state_dict(..., assign=True)``
(fifteenth audit, part A).

``assign=True`` is torch's way to fill a model built under ``torch.device("meta")``; it replaces what the state dict
holds and nothing else:

* an emulated checkpoint (weights and the layers' state): the layer's non-persistent ``fp8emu_key`` stayed meta, so
  the eager model ran but the compiled one was refused with "an emulated layer: input is a meta tensor" (the input
  was a CPU tensor).  The key's value is the layer's own: it now follows the loaded state to its device.
* a plain checkpoint (weights only, ``strict=False``): the step counter and delayed scaling's state stayed meta; the
  eager call was torch's bare "Tensor.item() cannot be called on meta tensors" and the compiled one the same false
  "input is a meta tensor".  Both are now one error naming the layer, its meta buffers and the two ways out, which
  work (checked below against the same model built on the CPU).
"""

import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import fp8emu.torch as ft  # noqa: E402


def _model():
    return nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32))


def _emulate(model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ft.emulate(model, "te-delayed", "h100")
    return model


def _meta_emulated():
    with torch.device("meta"):
        return _emulate(_model())


def _checkpoints():
    torch.manual_seed(0)
    plain = _model()
    emulated = _emulate(_model())
    emulated.load_state_dict(plain.state_dict(), strict=False)
    with torch.no_grad():
        emulated(torch.randn(16, 32))           # a state worth restoring: step 1, one amax in each history
    return plain.state_dict(), emulated.state_dict()


def _twin(sd, strict=True):
    """The same model built on the CPU and loaded as usual: what the meta-built one must compute."""
    model = _emulate(_model())
    model.load_state_dict(sd, strict=strict)
    return model


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("grad", [False, True])
def test_an_emulated_checkpoint_assigned_runs_compiled_as_eagerly(grad):
    _, sd = _checkpoints()
    model, twin = _meta_emulated(), _twin(sd)
    model.load_state_dict(sd, assign=True)
    assert model[0].fp8emu_key.device.type == "cpu" and int(model[0].fp8emu_key) == model[0]._fp8emu_id
    x = torch.randn(16, 32)
    with torch.set_grad_enabled(grad):
        y = torch.compile(model, backend="aot_eager")(x)
        assert torch.equal(y, twin(x))
    assert int(model[0].fp8emu_step) == int(twin[0].fp8emu_step) == 2
    assert torch.equal(model[0].amax_history_input, twin[0].amax_history_input)


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("compiled", [False, True])
def test_state_left_on_meta_is_one_error_naming_the_layer(compiled):
    plain_sd, _ = _checkpoints()
    model = _meta_emulated()
    model.load_state_dict(plain_sd, assign=True, strict=False)
    run = torch.compile(model, backend="eager") if compiled else model
    owner = "an emulated layer" if compiled else "layer '0'"
    with torch.no_grad(), pytest.raises(ValueError, match=rf"^{owner}: its fp8emu_step, amax_history_input, "
                                                          r".* are meta tensors \(state buffers without values: "
                                                          r"weights loaded with load_state_dict\(..., assign=True\) "
                                                          r"into a model emulated on the meta device, from a "
                                                          r"checkpoint without the layer's state\?\); call "
                                                          r"model.to_empty\(device=...\) before loading the weights, "
                                                          r"or emulate the model after loading them$"):
        run(torch.randn(16, 32))


def test_the_ways_out_work():
    plain_sd, _ = _checkpoints()
    x = torch.randn(16, 32)
    with torch.no_grad():
        want = _twin(plain_sd, strict=False)(x)
        # to_empty first: the state starts as a new layer's, the weights come from the load
        model = _meta_emulated()
        model.to_empty(device="cpu")
        model.load_state_dict(plain_sd, strict=False)
        assert torch.equal(model(x), want)
        # or emulate after loading
        with torch.device("meta"):
            model = _model()
        model.load_state_dict(plain_sd, assign=True)
        assert torch.equal(_emulate(model)(x), want)


def test_meta_weights_keep_their_own_line():
    with pytest.raises(ValueError, match=r"^layer '0': its weight and bias are meta tensors \(a shape without "
                                         r"values\)"):
        _meta_emulated()(torch.randn(16, 32))
