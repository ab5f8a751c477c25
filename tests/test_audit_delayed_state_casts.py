"""Delayed scaling's state of an emulated layer through dtype casts of the model (audit25's open item).

TE keeps its ``fp8_meta`` (amax history and scale) in float32 whatever the model is cast to, and so do the
``fp8emu.torch.te`` modules (audit22 #13).  An emulated ``nn.Linear`` converted its state with the model:
``model.half().float()`` brought the amax history and scale back rounded to float16 (an amax of 1/3 as
0.333251953125, one past 65504 as Inf), and the next steps quantized with them, silently; ``model.to(torch.bfloat16)``
was refused at the next call.  Now the state stays float32 through every cast, as in TE.

Expected values: the state before the casts, bit for bit; and a float32 twin with the same (bfloat16-rounded) weights
and inputs, whose state is never cast.
"""

import copy

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch as ft  # noqa: E402

_STATE = ("amax_history", "scale")


def _trained():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32))
    ft.emulate(model, "te-delayed", "h100")
    gen = torch.Generator().manual_seed(1)
    for step in range(3):
        # amaxes of no float16 value, one past float16's largest
        x = torch.randn(16, 32, generator=gen) * (1 / 3 if step < 2 else 70000.0)
        model(x).sum().backward()
    return model


def _state(model):
    return {n: b.clone() for n, b in model.named_buffers() if n.split(".")[-1].startswith(_STATE)}


@pytest.mark.parametrize("there_and_back", [lambda m: m.half().float(), lambda m: m.bfloat16().float(),
                                            lambda m: m.to(torch.float64).to(torch.float32)],
                         ids=["half", "bfloat16", "float64"])
def test_a_cast_there_and_back_leaves_the_state_as_it_was(there_and_back):
    model = _trained()
    before = _state(model)
    assert any(torch.isinf(b.half()).any() for b in before.values())      # float16 could not hold it
    there_and_back(model)
    after = _state(model)
    assert after.keys() == before.keys()
    for n in before:
        assert after[n].dtype == torch.float32 and torch.equal(after[n], before[n]), n


def test_a_bfloat16_model_keeps_the_float32_twins_state():
    model = _trained()
    twin = copy.deepcopy(model)
    model.to(torch.bfloat16)
    with torch.no_grad():
        twin[0].weight.copy_(model[0].weight.float())
        twin[0].bias.copy_(model[0].bias.float())
    x = (torch.randn(16, 32) * 5).to(torch.bfloat16)
    y = model(x)
    y.float().square().sum().backward()
    twin(x.float()).square().sum().backward()
    got, want = _state(model), _state(twin)
    for n in want:
        assert got[n].dtype == torch.float32 and torch.equal(got[n], want[n]), n
    assert model[0].fp8emu_step.item() == twin[0].fp8emu_step.item() == 4
