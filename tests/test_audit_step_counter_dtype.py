"""A step counter loaded in another dtype (``load_state_dict(..., assign=True)``) is one error naming the layer.

``assign=True`` puts the state dict's own tensors into the module, dtype and all.  A ``fp8emu_step`` saved as
uint8 then counted 255 -> 0 (the step seeds stochastic rounding: the first steps' bits again, silently), an
int8 one wrapped to -128 (the negative-step line), a bool one raised torch's bare "result type Long can't be
cast to the desired output type Bool", a float one was taken.  The counter must be int64; an int64 state dict
loaded with ``assign=True`` runs as before, eagerly and compiled.
"""

import warnings

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch as ft  # noqa: E402
import fp8emu.torch.te as te  # noqa: E402


def _model(recipe="te-current", gpu="h100"):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    ft.emulate(model, recipe, gpu)
    return model


def _assigned(model, step):
    sd = model.state_dict()
    sd["0.fp8emu_step"] = step
    model.load_state_dict(sd, assign=True)
    return model


@pytest.mark.parametrize("step", [torch.tensor(255, dtype=torch.uint8), torch.tensor(127, dtype=torch.int8),
                                  torch.tensor(7, dtype=torch.int32), torch.tensor(True),
                                  torch.tensor(3.0), torch.tensor(3.0, dtype=torch.float64)])
@pytest.mark.parametrize("recipe,gpu", [("te-current", "h100"), ("te-nvfp4", "b200")])
def test_a_counter_of_another_dtype_is_one_error(step, recipe, gpu):
    model = _assigned(_model(recipe, gpu), step.clone())
    with torch.no_grad(), pytest.raises(TypeError, match=rf"layer '0': its step counter \(the fp8emu_step buffer.*\) "
                                                          rf"is a {step.dtype} tensor; it must be torch.int64"):
        model(torch.randn(64, 64))
    assert model[0].fp8emu_step.item() == step.item()       # not advanced


def test_compiled():
    model = _assigned(_model(), torch.tensor(255, dtype=torch.uint8))
    compiled = torch.compile(model, backend="aot_eager")
    with torch.no_grad(), pytest.raises(TypeError, match=r"is a torch.uint8 tensor; it must be torch.int64"):
        compiled(torch.randn(64, 64))


def test_te_module():
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer = te.Linear(64, 64)
    sd = layer.state_dict()
    key = next(k for k in sd if k.endswith("fp8emu_step"))
    sd[key] = torch.tensor(255, dtype=torch.uint8)
    layer.load_state_dict(sd, assign=True)
    with torch.no_grad(), te.autocast(recipe="te-current", gpu="h100"), \
            pytest.raises(TypeError, match=r"its step counter .* is a torch.uint8 tensor"):
        layer(torch.randn(64, 64))


def test_an_int64_counter_assigned_runs_as_before():
    x = torch.randn(64, 64)
    want = _model("te-nvfp4", "b200")
    with torch.no_grad():
        want(x)                                              # step 0
        want_y = want(x)                                     # step 1 (stochastic rounding seeded by it)
    model = _assigned(_model("te-nvfp4", "b200"), torch.tensor(1, dtype=torch.int64))
    with torch.no_grad():
        assert torch.equal(model(x), want_y)
    assert model[0].fp8emu_step.dtype == torch.int64 and int(model[0].fp8emu_step) == 2
