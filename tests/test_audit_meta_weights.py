"""An emulated layer whose weights are still on the meta device, called with a real input (thirteenth audit,
part B).

A model built under ``torch.device("meta")`` and emulated holds weights without values until ``to_empty`` and a
load; called before that, the layer read the weight with NumPy: "TypeError: can't convert meta device type tensor
to numpy", naming no layer and no cause (a meta *input* has had its own line since the fifth round).
"""

import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import fp8emu.torch as ft  # noqa: E402


def _meta_model(**kw):
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ft.emulate(model, "te-current", "h100", **kw)
    return model


@pytest.mark.parametrize("grad", [True, False])
def test_meta_weights_are_named(grad):
    model = _meta_model()
    with torch.set_grad_enabled(grad), pytest.raises(
            ValueError, match=r"layer '0': its weight and bias are meta tensors \(a shape without values\).*to_empty"):
        model(torch.randn(16, 32))


def test_meta_bias_alone_is_named():
    model = _meta_model()
    model.to_empty(device="cpu")
    model[0].bias = nn.Parameter(torch.empty(32, device="meta"))
    with pytest.raises(ValueError, match=r"layer '0': its bias is a meta tensor"):
        model(torch.randn(16, 32))


def test_meta_weights_inside_fp8emu_autocast_are_named():
    model = _meta_model(autocast_only=True)
    with ft.autocast(), pytest.raises(ValueError, match=r"its weight and bias are meta tensors"):
        model(torch.randn(16, 32))


def _loaded_meta_model():
    """``_meta_model`` after ``to_empty`` and a load of a plain model's weights (seed 0)."""
    model = _meta_model()
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32))
    model.load_state_dict(plain.state_dict(), strict=False)
    return model


def test_after_to_empty_and_a_load_it_runs_as_before():
    model = _loaded_meta_model()
    y = model(torch.randn(16, 32))
    assert y.shape == (16, 32) and torch.isfinite(y).all()
