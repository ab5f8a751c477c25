"""A compiled emulated model whose weights are still on the meta device, called with a real input (thirteenth
audit, part B).

``emulate`` makes the layer's state buffers on the CPU, so a model built under ``torch.device("meta")`` and
emulated holds meta weights beside CPU buffers.  Compiled, the custom op's call had a meta operand, so torch's
dispatcher ran its fake kernel (registered as the op's Meta kernel) at run time: a CPU output of uninitialized
memory and a step counter copied back from ``empty_like`` (values like 140212526319408), silently, with every
backend.  (Plain ``nn.Linear`` compiled is torch's "Tensor device mismatch"; the eager emulated layer names its
meta weights.)
"""

import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import fp8emu.torch as ft  # noqa: E402


def _meta_model():
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ft.emulate(model, "te-current", "h100")
    return model


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("grad", [False, True])
def test_compiled_meta_weights_are_named(backend, grad):
    model = _meta_model()
    compiled = torch.compile(model, backend=backend)
    with torch.set_grad_enabled(grad), pytest.raises(Exception, match=r"layer '0': its weight and bias are meta "
                                                                       r"tensors \(a shape without values\)"):
        compiled(torch.randn(16, 32))
    assert int(model[0].fp8emu_step) == 0           # not overwritten with empty_like's memory


@pytest.mark.usefixtures("fresh_dynamo")
def test_compiled_after_to_empty_and_a_load_runs_as_eager():
    model = _meta_model()
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32))
    model.load_state_dict(plain.state_dict(), strict=False)
    x = torch.randn(16, 32)
    with torch.no_grad():
        y = torch.compile(model, backend="aot_eager")(x)
        model[0].fp8emu_step.zero_()
        model[2].fp8emu_step.zero_()
        assert torch.equal(y, model(x))

