"""A parametrization added to an emulated layer after ``emulate``, under ``torch.compile``.

The compiled op calls the layer with the weight it was given (``functional_call``), which replaces a
parametrization's computed weight for the call: the eager graph ended at that weight, and the
parametrization's own tensors (weight norm's ``original0`` / ``original1``) got zero gradients while the
eager model trained them, silently.  Training such a layer compiled is one clear error; inference, and a
pruned layer (whose weight a pre-hook computes), keep the eager bits.
"""

import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
import torch.nn.utils.prune  # noqa: E402,F401

import fp8emu.torch as ft  # noqa: E402


def _model(kind):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 16))
    ft.emulate(m, "te-current", "h100")
    if kind == "weight_norm":
        torch.nn.utils.parametrizations.weight_norm(m[0])
    else:
        torch.nn.utils.prune.l1_unstructured(m[0], "weight", 0.5)
    return m


pytestmark = pytest.mark.usefixtures("fresh_dynamo")    # tests/conftest.py


def test_training_a_weight_norm_added_after_emulate_compiled_is_refused_not_zero_gradients():
    m = _model("weight_norm")
    x = torch.randn(16, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=r"layer '0': its weight is computed by a parametrization added "
                                             r"after emulate.*without torch.compile"):
            torch.compile(m)(x).sum().backward()


@pytest.mark.parametrize("kind", ["weight_norm", "prune"])
def test_inference_and_a_pruned_layer_keep_the_eager_bits_compiled(kind):
    m, ref = _model(kind), _model(kind)
    x = torch.randn(16, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = torch.compile(m)
        with torch.no_grad():
            assert torch.equal(cm(x), ref(x))
        if kind == "prune":
            cm(x).sum().backward()
            ref(x).sum().backward()
            assert torch.equal(m[0].weight_orig.grad, ref[0].weight_orig.grad)
            assert m[0].weight_orig.grad.abs().max() > 0
