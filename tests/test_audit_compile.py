"""Hostile input to compiled emulated layers, module filters and inference at any batch (tests/AUDIT.md)."""

import copy

import pytest

torch = pytest.importorskip("torch")
ft = pytest.importorskip("fp8emu.torch")
nn = torch.nn


pytestmark = pytest.mark.usefixtures("fresh_dynamo")    # tests/conftest.py


def _model():
    m = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 16))
    ft.emulate(m, "te-current", "h100")
    return m


@pytest.mark.parametrize("bad, err, msg", [
    (lambda: torch.randn(16, 24), ValueError, "layer '0': input has 24 features, expected 32"),
    (lambda: torch.ones(16, 32, dtype=torch.int64), TypeError, "layer '0': input must be a float32"),
])
@pytest.mark.parametrize("fullgraph", [False, True])
def test_a_bad_call_under_compile_is_the_layers_error_and_the_next_good_call_runs(bad, err, msg, fullgraph):
    m = _model()
    ref = copy.deepcopy(m)
    c = torch.compile(m, backend="aot_eager", fullgraph=fullgraph)
    # before: fullgraph=True said only Dynamo's "Observed exception"; without it the error was right but
    # Dynamo then skipped the layer's frame and traced the next (good) calls from inside the layer:
    # InternalTorchDynamoError "argument of type: <class 'type'>" on every later call
    with pytest.raises(err, match=msg):
        c(bad())
    x = torch.randn(16, 32)
    xr = x.clone().requires_grad_()
    x.requires_grad_()
    y = c(x)
    y.square().sum().backward()
    yr = ref(xr)
    yr.square().sum().backward()
    assert torch.equal(y, yr) and torch.equal(x.grad, xr.grad) and torch.equal(m[0].weight.grad, ref[0].weight.grad)


def test_a_meta_input_is_named():
    m = _model()
    # before: "unknown device type for autocast in get_autocast_dispatch_key_from_device_type"
    with pytest.raises(ValueError, match="layer '0': input is a meta tensor"):
        m(torch.randn(16, 32, device="meta"))


def test_a_training_batch_of_any_count_is_pointed_to_inference():
    m = _model().eval()                    # eval mode, autograd still on: training's token rule
    with pytest.raises(ValueError, match="pad the batch, or run inference without autograd \\(torch.no_grad"):
        m(torch.randn(3, 32))
    with torch.no_grad():
        assert m(torch.randn(3, 32)).shape == (3, 16)


def test_module_filter_fn_errors_leave_the_model_as_it_was():
    m = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 16))

    def boom(mod, fqn):
        if fqn == "2":
            raise RuntimeError("boom")
        return True
    with pytest.raises(RuntimeError, match="boom"):
        ft.emulate(m, "te-current", "h100", module_filter_fn=boom)
    assert [type(x) for x in m] == [nn.Linear, nn.ReLU, nn.Linear]        # nothing swapped before the error
    for verdict in (1, None, torch.tensor(True)):
        with pytest.raises(TypeError, match="module_filter_fn must return True or False"):
            ft.emulate(m, "te-current", "h100", module_filter_fn=lambda mod, fqn, v=verdict: v)
    assert [type(x) for x in m] == [nn.Linear, nn.ReLU, nn.Linear]
