"""Hostile input to ``fp8emu.torch.emulate`` and ``fp8emu.torch.probes.capture``: layers of zero width and float64
models (tests/AUDIT.md, "Fresh audit of the CPU order, probes, compile and filters")."""

import copy
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from fp8emu.torch import HighPrecisionWarning, emulate, probes  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Initializing zero-element tensors:UserWarning")


@pytest.mark.parametrize("recipe, gpu", [("te-current", "h100"), ("te-mxfp8", "b200"),
                                         ("torchao-tensorwise", "cpu")])
@pytest.mark.parametrize("fin, fout", [(0, 32), (32, 0), (0, 0)])
def test_a_layer_of_zero_width_stays_nn_linear_and_says_why(recipe, gpu, fin, fout):
    # in_features 0 was swapped and its forward raised torch's "cannot reshape tensor of 0 elements into shape
    # [-1, 0]"; torchao's recipes also "zero-size array to reduction operation maximum which has no identity"
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(fin, fout))
    model = copy.deepcopy(ref)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = emulate(model, recipe, gpu)
    assert not report.swapped and type(model[0]) is nn.Linear
    assert "0: an empty layer, nothing to quantize" in report.skipped["0"]
    assert any(issubclass(w.category, HighPrecisionWarning) for w in caught)
    x = torch.randn(32, fin, requires_grad=True)
    y = model(x)
    assert torch.equal(y, ref(x))          # nn.Linear's own result: the bias, or nothing
    y.sum().backward()


def test_capture_flattens_tokens_of_a_zero_width_layer():
    # "cannot reshape tensor of 0 elements into shape [-1, 0]" in capture's forward hook
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(0, 16), nn.Linear(16, 4))
    _, caps = probes.capture(model, lambda m: m(torch.randn(2, 8, 0)).square().sum())
    assert caps["0"].x.shape == (16, 0) and caps["0"].dy.shape == (16, 16) and caps["0"].dw.shape == (16, 0)
    passes = probes.exact_passes(caps["0"].x, caps["0"].w, caps["0"].b, caps["0"].dy)
    # an empty sum: fprop is the bias on every token (float64 reference, then float32)
    assert np.array_equal(passes["fprop"], np.broadcast_to(caps["0"].b, (16, 16)))


def test_capture_refuses_a_float64_model_rather_than_round_it():
    # its float64 operands were rounded to float32 silently: the captured y no longer the product of x and w
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16)).double()
    with pytest.raises(TypeError, match=r"the input of layer '0' is torch.float64; capture records float32"):
        probes.capture(model, lambda m: m(torch.randn(16, 16, dtype=torch.float64)).sum())
    # bfloat16 is exact in float32: captured as it ran
    model = nn.Sequential(nn.Linear(16, 16)).to(torch.bfloat16)
    x = torch.randn(16, 16).to(torch.bfloat16)
    _, caps = probes.capture(model, lambda m: m(x).float().sum())
    assert np.array_equal(caps["0"].x, x.float().numpy())
