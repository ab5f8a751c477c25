"""Delayed scaling's state of a TE module through ``model.to(dtype)`` (fourteenth audit, part A).

TE keeps a module's amax history and scales in float32 (``fp8_meta``, not a buffer): ``model.to(torch.bfloat16)``
after delayed-scaling steps (a checkpoint loaded, then cast for evaluation) leaves them.  Here they are buffers,
and torch converted them: a bfloat16 history was NumPy's bare "TypeError: Got unsupported ScalarType BFloat16" at
the next FP8 call, and a float16 one rounded every amax and scale (an amax of 3.3 became 3.30078125), silently.
Now they stay float32; a state dict loaded with ``assign=True`` that holds another dtype is one named error.
"""

import copy

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch.te as te  # noqa: E402

RECIPE = te.recipe.DelayedScaling(amax_history_len=4)
X = torch.randn(32, 64, generator=torch.Generator().manual_seed(1))


def _trained():
    torch.manual_seed(0)
    mod = te.LayerNormMLP(64, 64)
    with te.autocast(recipe=RECIPE):
        mod(X * 3.3)
    return mod


def _state(mod):
    return {n: b.clone() for n, b in mod.named_buffers() if "amax_history" in n or "scale_" in n}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("how", ["to", "method"])
def test_model_to_dtype_keeps_delayed_scaling_state_float32(dtype, how):
    mod = _trained()
    ref = copy.deepcopy(mod)
    before = _state(mod)
    if how == "to":
        mod = mod.to(dtype)
    else:
        mod = {torch.bfloat16: mod.bfloat16, torch.float16: mod.half, torch.float64: mod.double}[dtype]()
    after = _state(mod)
    assert after.keys() == before.keys() and len(after) == 8      # 2 GEMMs x (input, weight) x (history, scale)
    for n in before:
        assert after[n].dtype == torch.float32 and torch.equal(after[n], before[n]), n
    # the twin whose parameters alone were cast (its state as it was) computes the same bits, step after step
    with torch.no_grad():
        for p in ref.parameters():
            p.data = p.data.to(dtype)
    x = X.to(dtype)
    for k in (1.37, 0.5, 2.0):
        with te.autocast(recipe=RECIPE):
            assert torch.equal(mod(x * k), ref(x * k)), k
    for n, b in _state(mod).items():
        assert torch.equal(b, dict(ref.named_buffers())[n]), n


def test_parameters_are_still_converted_as_before():
    mod = _trained().to(torch.bfloat16)
    assert {p.dtype for p in mod.parameters()} == {torch.bfloat16}
    assert mod.fp8emu_fc1.fp8emu_step.dtype == torch.int64


def test_a_state_dict_of_another_dtype_loaded_with_assign_is_named():
    mod = _trained()
    sd = mod.state_dict()
    sd["fp8emu_fc1.amax_history_input"] = sd["fp8emu_fc1.amax_history_input"].to(torch.bfloat16)
    mod.load_state_dict(sd, assign=True)
    with te.autocast(recipe=RECIPE), pytest.raises(
            TypeError, match=r"^GEMM 'LayerNormMLP.fc1': delayed scaling's state must be float32, as TE keeps it "
                             r"\(amax_history_input is torch.bfloat16; load_state_dict with assign=True\?\)"):
        mod(X)
