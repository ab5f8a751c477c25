"""A compiled emulated model moved entirely to the meta device, called on a meta input (fourteenth audit, part A;
audit21's open item).

``compiled_forward`` asked ``torch.is_autocast_enabled("meta")``, which torch refuses: Dynamo's
"InternalTorchDynamoError: RuntimeError: unknown device type for autocast in
get_autocast_dispatch_key_from_device_type", where the eager model names its meta tensors.  Now the compiled call
is fp8emu's one-line meta error (the op's run-time call refuses operands that are all meta, as it refused meta
weights beside real buffers); a graph traced from such a model (``torch.export``, whose tensors are fake) still
traces.
"""

import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import fp8emu.torch as ft  # noqa: E402


def _all_meta_model():
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ft.emulate(model, "te-current", "h100")
    return model.to("meta")


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("grad", [False, True])
def test_an_all_meta_compiled_model_is_fp8emus_meta_error(backend, grad):
    compiled = torch.compile(_all_meta_model(), backend=backend)
    with torch.set_grad_enabled(grad), pytest.raises(ValueError, match=r"^an emulated layer: its weight and bias are "
                                                                        r"meta tensors \(a shape without values\): a "
                                                                        r"model built on the meta device needs "
                                                                        r"model.to_empty"):
        compiled(torch.randn(16, 32, device="meta"))


def test_the_eager_all_meta_model_names_its_meta_input_as_before():
    with pytest.raises(ValueError, match=r"^layer '0': input is a meta tensor \(a shape without values\)"):
        _all_meta_model()(torch.randn(16, 32, device="meta"))


@pytest.mark.usefixtures("fresh_dynamo")
def test_an_all_meta_model_still_exports():
    # torch.export traces with fake tensors: the op's fake kernel gives the shapes, nothing is computed
    ep = torch.export.export(_all_meta_model(), (torch.randn(16, 32, device="meta"),))
    ops = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert ops.count(torch.ops.fp8emu.emulated_linear.default) == 2
