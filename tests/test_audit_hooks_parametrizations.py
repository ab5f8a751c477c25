"""Hooks, parametrizations and weight norm on a model's linear layers: ``emulate()`` and ``probes.capture``.

``emulate`` replaces each ``nn.Linear`` by a new module: hooks registered on the layer, and a weight that
``torch.nn.utils.weight_norm`` computes in a pre-hook, would be silently lost there, so such a layer is
left as it is and named.  ``capture`` records each layer's own output and gradient (before a user's forward
hook changes what the next layer gets), and names a computed weight, which has no gradient of its own.
"""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import fp8emu.torch as ft  # noqa: E402
from fp8emu.torch import probes  # noqa: E402


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 16))


def _emulate(model):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = ft.emulate(model, "te-current", "h100")
    return report, [str(w.message) for w in caught if issubclass(w.category, ft.HighPrecisionWarning)]


@pytest.mark.parametrize("kind", ["forward", "forward_pre", "full_backward"])
def test_a_layer_with_hooks_is_left_as_it_is_and_named_not_stripped_of_them(kind):
    model, calls = _mlp(), []
    if kind == "forward":
        model[0].register_forward_hook(lambda mod, args, out: calls.append(1))
    elif kind == "forward_pre":
        model[0].register_forward_pre_hook(lambda mod, args: calls.append(1))
    else:
        model[0].register_full_backward_hook(lambda mod, gi, go: calls.append(1))
    report, warned = _emulate(model)
    assert "0" not in report.swapped and "hook" in report.skipped["0"]
    assert "2" in report.swapped
    assert any("'0'" in w and "hook" in w for w in warned)
    x = torch.randn(16, 32, requires_grad=True)
    model(x).sum().backward()
    assert calls == [1]                        # the user's hook still runs


def test_a_weight_norm_layer_is_left_as_it_is_with_its_parameters():
    model = _mlp()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model[0] = torch.nn.utils.weight_norm(model[0])
    before = [n for n, _ in model.named_parameters()]
    report, _ = _emulate(model)
    assert "0" not in report.swapped and "not a Parameter" in report.skipped["0"]
    assert [n for n, _ in model.named_parameters()] == before          # weight_g and weight_v kept
    x = torch.randn(16, 32)
    for _ in range(2):                          # a second backward through the frozen weight's graph failed
        model(x).sum().backward()
    assert model[0].weight_g.grad is not None


def _loss(x):
    return lambda m: m(x).square().mean()


def test_capture_records_the_layers_own_output_before_a_forward_hook_changes_it():
    model = _mlp()
    model[0].register_forward_hook(lambda mod, args, out: out * 2)
    x = torch.randn(16, 32)
    _, caps = probes.capture(model, _loss(x))
    c = caps["0"]
    x64, w64, b64, dy64 = (np.asarray(a, np.float64) for a in (c.x, c.w, c.b, c.dy))
    np.testing.assert_allclose(c.y, x64 @ w64.T + b64, rtol=0, atol=1e-5)      # was off by the hook's y
    np.testing.assert_allclose(c.dw, dy64.T @ x64, rtol=1e-5, atol=1e-7)       # dy the layer's own
    # the model's own gradient is unchanged by the capture
    ref = _mlp()
    ref[0].register_forward_hook(lambda mod, args, out: out * 2)
    _loss(x)(ref).backward()
    assert torch.equal(ref[0].weight.grad, model[0].weight.grad)


@pytest.mark.parametrize("how", ["parametrize", "weight_norm", "parametrizations.weight_norm"])
def test_capture_names_a_computed_weight(how):
    model = _mlp()

    class Double(nn.Module):
        def forward(self, w):
            return 2 * w

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        if how == "parametrize":
            torch.nn.utils.parametrize.register_parametrization(model[0], "weight", Double())
        elif how == "weight_norm":
            model[0] = torch.nn.utils.weight_norm(model[0])
        else:
            model[0] = torch.nn.utils.parametrizations.weight_norm(model[0])
    with pytest.raises(ValueError, match=r"weight of layer '0' is computed at each use"):
        probes.capture(model, _loss(torch.randn(16, 32)))


def test_a_pruned_layer_keeps_its_mask():
    model = _mlp()
    from torch.nn.utils import prune
    prune.l1_unstructured(model[0], "weight", amount=0.5)
    report, _ = _emulate(model)
    assert "0" not in report.swapped and "not a Parameter" in report.skipped["0"]
    x = torch.randn(16, 32)
    model(x).sum().backward()
    assert int((model[0].weight == 0).sum()) == 32 * 32 // 2       # the mask still applies
    assert model[0].weight_orig.grad is not None
