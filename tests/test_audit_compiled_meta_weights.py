"""A compiled emulated model whose weights are still on the meta device, called with a real input (thirteenth
audit, part B).

``emulate`` makes the layer's state buffers on the CPU, so a model built under ``torch.device("meta")`` and
emulated holds meta weights beside CPU buffers.  Compiled, the custom op's call had a meta operand, so torch's
dispatcher ran its fake kernel (registered as the op's Meta kernel) at run time: a CPU output of uninitialized
memory and a step counter copied back from ``empty_like`` (values like 140212526319408), silently, with every
backend.  (Plain ``nn.Linear`` compiled is torch's "Tensor device mismatch"; the eager emulated layer names its
meta weights.)
"""

import pytest

torch = pytest.importorskip("torch")

from test_audit_meta_weights import _loaded_meta_model, _meta_model  # noqa: E402  (the eager tests' models)


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
    model = _loaded_meta_model()
    x = torch.randn(16, 32)
    with torch.no_grad():
        y = torch.compile(model, backend="aot_eager")(x)
        model[0].fp8emu_step.zero_()
        model[2].fp8emu_step.zero_()
        assert torch.equal(y, model(x))

