"""``fp8emu.torch.te``'s modules with float64 parameters or gradients beyond float32's range (fourteenth audit,
part A).

A float64 *input* past float32's range has been refused since an earlier round, and audit21 refused float64
weights, biases and output gradients past it for ``EmulatedLinear``; the TE modules were not checked.  Their
GEMMs and norms compute in float32: a float64 ``te.Linear`` whose weight held -1e39 gave -448 (E4M3's largest
value) where the product is near -1e39, a bias of -1e39 gave -Inf, a loss scaled by 1e39 gave input gradients
near 1e3 and weight gradients near 9e5, and a ``layer_norm_weight`` of 1e39 gave outputs near 14, silently.
Each is now one line naming the module and the tensor; values float32 holds run as before.
"""

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch.te as te  # noqa: E402

BIG = 1e39                                  # finite in float64, beyond float32's largest (3.4028234663852886e+38)
F32_MAX = float(torch.finfo(torch.float32).max)
RECIPES = {"current": te.recipe.Float8CurrentScaling, "delayed": te.recipe.DelayedScaling}


def _module(cls):
    torch.manual_seed(0)
    if cls in (te.LayerNorm, te.RMSNorm):
        return cls(64, params_dtype=torch.float64)
    return cls(64, 64, params_dtype=torch.float64)


def _fp8(mod, x, recipe="current"):
    with te.autocast(recipe=RECIPES[recipe]()):
        return mod(x)


# (module, parameter, the name the error gives, the owner it names)
CASES = [(te.Linear, "weight", "its weight", "Linear.gemm"), (te.Linear, "bias", "its bias", "Linear.gemm"),
         (te.LayerNormLinear, "weight", "its weight", "LayerNormLinear.gemm"),
         (te.LayerNormLinear, "layer_norm_weight", "its layer_norm_weight", "LayerNormLinear"),
         (te.LayerNormLinear, "layer_norm_bias", "its layer_norm_bias", "LayerNormLinear"),
         (te.LayerNormMLP, "fc1_weight", "its weight", "LayerNormMLP.fc1"),
         (te.LayerNormMLP, "fc2_bias", "its bias", "LayerNormMLP.fc2"),
         (te.LayerNormMLP, "layer_norm_weight", "its layer_norm_weight", "LayerNormMLP"),
         (te.LayerNorm, "weight", "its weight", "LayerNorm"), (te.RMSNorm, "weight", "its weight", "RMSNorm")]


@pytest.mark.parametrize("recipe", ["current", "delayed"])
@pytest.mark.parametrize("cls, param, what, owner", CASES, ids=[f"{c[0].__name__}.{c[1]}" for c in CASES])
def test_a_float64_parameter_past_float32_is_named(cls, param, what, owner, recipe):
    mod = _module(cls)
    with torch.no_grad():
        getattr(mod, param).view(-1)[3] = -BIG
    x = torch.randn(16, 64, dtype=torch.float64)
    with pytest.raises(ValueError, match=rf"^{owner}: {what} overflows float32.*1 finite float64 value\(s\).*"
                                         r"largest magnitude given 1e\+39"):
        _fp8(mod, x, recipe)
    if "." in owner:        # refused before its GEMM took a step
        assert int(getattr(mod, f"fp8emu_{owner.split('.')[1]}").fp8emu_step) == 0


@pytest.mark.parametrize("cls, param, what, owner", CASES[:2], ids=["weight", "bias"])
def test_large_values_float32_holds_still_run(cls, param, what, owner):
    # 2**120 is a float32 value: taken, and the output is finite and in float64, as before
    mod = _module(cls)
    with torch.no_grad():
        getattr(mod, param).view(-1)[3] = 2.0 ** 120
    y = _fp8(mod, torch.randn(16, 64, dtype=torch.float64) * 1e-3)
    assert y.dtype == torch.float64 and bool(torch.isfinite(y).all())
    assert float(y.detach().abs().max()) > 2.0 ** 100


def test_float32s_largest_value_is_not_refused():
    # float32's rounding decides, not a bound: its largest finite value given as float64 is taken
    mod = _module(te.Linear)
    with torch.no_grad():
        mod.weight[0, 0] = F32_MAX
    _fp8(mod, torch.zeros(16, 64, dtype=torch.float64))


@pytest.mark.parametrize("recipe", ["current", "delayed"])
def test_a_float64_output_gradient_past_float32_is_named(recipe):
    mod = _module(te.Linear)
    x = torch.ones(16, 64, dtype=torch.float64, requires_grad=True)
    y = _fp8(mod, x, recipe)
    with pytest.raises(ValueError, match=r"^Linear.gemm: its output gradient overflows float32.*1024 finite float64 "
                                         r"value\(s\).*1e\+39\); scale the loss"):
        (y * BIG).sum().backward()
    assert x.grad is None and mod.weight.grad is None


def test_a_float64_output_gradient_float32_holds_trains():
    # 2**100 times the loss: the gradients are 2**100 times those of the loss itself (a power of two scales every
    # operand's amax and so its scale, leaving the codes: the exact multiple)
    grads = []
    for k in (1.0, 2.0 ** 100):
        mod = _module(te.Linear)
        x = torch.ones(16, 64, dtype=torch.float64, requires_grad=True)
        (_fp8(mod, x) * k).sum().backward()
        grads.append((x.grad, mod.weight.grad))
    assert torch.equal(grads[1][0], grads[0][0] * 2.0 ** 100)
    assert torch.equal(grads[1][1], grads[0][1] * 2.0 ** 100)


def test_a_primary_weight_past_float32_is_named_outside_autocast():
    # an FP8 primary weight's high-precision forward computes with its quantized copy, made from the float32 values
    with te.quantized_model_init(recipe=te.recipe.Float8CurrentScaling()):
        mod = _module(te.Linear)
    with torch.no_grad():
        mod.weight[0, 0] = BIG
    with pytest.raises(ValueError, match=r"^Linear.gemm: its weight overflows float32"):
        mod(torch.randn(16, 64, dtype=torch.float64))
