"""Seventeenth audit (audit29): a TE GEMM module given an input whose dtype is not its parameters'.

Transformer Engine's ``TransformerEngineBaseModule.set_activation_dtype`` (``module/base.py``, called by every
GEMM module's ``prepare_forward``, FP8 or not) asserts outside ``torch.autocast`` that the input's dtype is each
parameter's ("Data types for parameters must match when outside of autocasted region").  fp8emu's modules gave
torch's bare "mat1 and mat2 must have the same dtype" / "mixed dtype (CPU)" in high precision (no module named)
in high precision now raise one error naming the module and the way out.  (Inside ``te.autocast`` fp8emu's FP8
path takes such inputs, as earlier passes fixed it to, in the input's dtype; TE refuses them there too: left open.)
"""
import contextlib

import pytest

torch = pytest.importorskip("torch")

import fp8emu.torch.te as te  # noqa: E402

MODULES = {
    "Linear": lambda dt: te.Linear(64, 64, params_dtype=dt),
    "LayerNormLinear": lambda dt: te.LayerNormLinear(64, 64, params_dtype=dt),
    "LayerNormMLP": lambda dt: te.LayerNormMLP(64, 128, params_dtype=dt),
}


@pytest.mark.parametrize("outside", [False, True], ids=["autocast-disabled", "no-block"])
@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_float32_input_to_bfloat16_parameters_is_one_error_naming_the_module(name, outside):
    module = MODULES[name](torch.bfloat16)
    x = torch.randn(32, 64)
    block = contextlib.nullcontext() if outside else te.autocast(enabled=False)
    with block, pytest.raises(TypeError) as err:
        module(x)
    msg = str(err.value)
    assert msg.startswith(f"{name}: the input is torch.float32 and its parameter ")
    assert "is torch.bfloat16" in msg and "torch.autocast" in msg


@pytest.mark.parametrize("name", sorted(MODULES))
def test_matching_dtypes_and_torch_autocast_still_run(name):
    module = MODULES[name](torch.bfloat16)
    x = torch.randn(32, 64)
    with te.autocast(recipe=te.recipe.Float8CurrentScaling()):
        assert module(x.bfloat16()).dtype == torch.bfloat16
    with te.autocast(recipe=te.recipe.Float8CurrentScaling()):
        assert module(x).dtype == torch.float32       # the FP8 path takes it, as before (TE would refuse)
        # under torch.autocast TE takes the autocast dtype for the activations ("native AMP gets highest
        # priority"), whatever the parameters' dtype
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert MODULES[name](torch.float32)(x).dtype == torch.bfloat16
    assert module(x.bfloat16()).dtype == torch.bfloat16
    with te.autocast(recipe=te.recipe.Float8CurrentScaling()):
        assert module(x).dtype == torch.float32       # the FP8 path takes it, as before (TE would refuse)
