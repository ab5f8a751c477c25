"""A step counter that is no step (a corrupt or hand-edited state dict) is one error naming the layer.

The ``fp8emu_step`` buffer counts a layer's calls, seeds stochastic rounding and is saved in the state dict.
Loaded as -1 (or as int64's largest value, which the next call's ``+= 1`` wraps to the smallest), the first
quantizer raised NumPy's bare "expected non-negative integer" from ``np.random.default_rng``, naming neither
the layer nor the buffer, eagerly, compiled and in ``fp8emu.torch.te``'s modules.  A counter in range runs
as before: the step before int64's largest value gives a fresh model's bits (te-current has no stochastic
rounding, so the step changes nothing it computes).
"""

import warnings

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch as ft  # noqa: E402
import fp8emu.torch.te as te  # noqa: E402

TOP = torch.iinfo(torch.int64).max


def _model(recipe="te-current", gpu="h100"):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    ft.emulate(model, recipe, gpu)
    return model


def _with_step(model, step):
    sd = model.state_dict()
    sd["0.fp8emu_step"] = torch.tensor(step, dtype=torch.int64)
    model.load_state_dict(sd)
    return model


@pytest.mark.parametrize("recipe,gpu", [("te-current", "h100"), ("te-nvfp4", "b200"), ("te-delayed", "h100")])
@pytest.mark.parametrize("step", [-1, -(2**63), TOP])
def test_a_counter_out_of_range_is_one_error_naming_the_layer(recipe, gpu, step):
    model = _with_step(_model(recipe, gpu), step)
    with pytest.raises(ValueError, match=rf"layer '0': its step counter \(the fp8emu_step buffer.*\) is {step}; "):
        model(torch.randn(64, 64, requires_grad=True))
    with torch.no_grad(), pytest.raises(ValueError, match="its step counter"):
        model(torch.randn(3, 64))


def test_the_last_step_runs_then_the_counter_is_full():
    x = torch.randn(64, 64)
    fresh = _model()
    with torch.no_grad():
        want = fresh(x)
    model = _with_step(_model(), TOP - 1)
    with torch.no_grad():
        assert torch.equal(model(x), want)
        assert int(model[0].fp8emu_step) == TOP
        with pytest.raises(ValueError, match=f"is {TOP}; it counts the calls from 0 to {TOP - 1}"):
            model(x)


def test_compiled():
    model = _with_step(_model(), -1)
    compiled = torch.compile(model, backend="aot_eager")
    with pytest.raises(Exception, match=r"layer '0': its step counter .* is -1"):
        compiled(torch.randn(64, 64, requires_grad=True))


def test_te_module():
    torch.manual_seed(0)
    mod = te.Linear(64, 64)
    with torch.no_grad():
        mod.fp8emu_gemm.fp8emu_step.fill_(-1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with te.autocast(recipe=te.recipe.Float8CurrentScaling()), pytest.raises(ValueError,
                                                                                  match="its step counter .* is -1"):
            mod(torch.randn(64, 64))


def test_te_module_seed():
    """The neighbour in ``fp8emu.torch.te``: the GEMM's ``fp8emu_seed`` buffer, also in the state dict."""
    torch.manual_seed(0)
    mod = te.Linear(64, 64)
    sd = mod.state_dict()
    sd["fp8emu_gemm.fp8emu_seed"] = torch.tensor(-1)
    mod.load_state_dict(sd)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with te.autocast(recipe=te.recipe.Float8CurrentScaling()), pytest.raises(
                ValueError, match=r"its stochastic-rounding seed \(the fp8emu_seed buffer, saved in its state dict\) "
                                  r"is -1; it must be >= 0"):
            mod(torch.randn(64, 64))
