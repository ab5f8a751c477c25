"""Delayed scaling's state in another dtype than float32 is named by the buffer that is.

``load_state_dict(..., assign=True)`` takes the state dict's tensors with their dtypes: a state dict whose
``amax_history_input`` was float64 (its ``scale_input`` float32) was refused with "delayed scaling's state was
converted to torch.float32 (model.to(dtype)?); keep the model in float32", which names the dtype the state must
have as the wrong one.  ``model.to(torch.bfloat16)`` keeps the state float32 (``test_audit_delayed_state_casts``).
"""

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch as ft  # noqa: E402


def _model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32))
    ft.emulate(model, "te-delayed", "h100")
    return model


@pytest.mark.parametrize("name", ["amax_history_input", "scale_input", "amax_history_weight"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_the_buffer_of_another_dtype_is_named(name, dtype):
    model = _model()
    sd = model.state_dict()
    sd[f"0.{name}"] = sd[f"0.{name}"].to(dtype)
    model.load_state_dict(sd, assign=True)
    with torch.no_grad(), pytest.raises(TypeError) as info:
        model(torch.randn(16, 32))
    msg = str(info.value)
    assert msg.startswith(f"layer '0': delayed scaling's state was converted to {dtype} ({name} is {dtype}; ")
    assert "converted to torch.float32" not in msg


def test_a_model_converted_keeps_its_state_float32_and_runs():
    # as TE's fp8_meta and the fp8emu.torch.te modules (audit25's open item): refused before, at the next call
    model = _model()
    model.to(torch.bfloat16)
    assert model[0].weight.dtype == torch.bfloat16
    assert {n: b.dtype for n, b in model.named_buffers() if "amax" in n or "scale" in n} == {
        f"0.{k}_{r}": torch.float32 for k in ("amax_history", "scale") for r in ("input", "weight", "grad_output")}
    y = model(torch.ones(16, 32, dtype=torch.bfloat16))
    assert y.dtype == torch.bfloat16 and bool(torch.isfinite(y).all())
