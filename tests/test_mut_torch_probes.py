"""Tests answering the mutation sample of fp8emu.torch.probes (tests/MUTATION.md)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fp8emu.torch import probes  # noqa: E402


def test_a_layer_the_recipe_cannot_take_is_one_error_and_no_warning():
    """The swap's HighPrecisionWarning for the skipped layer is not raised on top of the ValueError."""
    rng = np.random.default_rng(0)
    x, w, dy = (rng.standard_normal(s).astype(np.float32) for s in ((64, 24), (16, 24), (64, 16)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="does not take a 24 -> 16 layer with 64 tokens"):
            probes.layer_passes(x, w, None, dy, "te-nvfp4", "b200")


def test_capture_keeps_each_layers_bias_and_input_gradient_for_3d_inputs():
    """A bias-free and a biased layer on (batch, tokens, features) inputs: ``b`` is the bias or None, ``dx``
    the gradient torch itself gives the layer's input, tokens flattened into rows."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3, bias=False), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    x = torch.randn(2, 5, 4, requires_grad=True)
    loss, caps = probes.capture(model, lambda m: m(x).square().sum())
    assert caps["0"].b is None
    assert np.array_equal(caps["2"].b, model[2].bias.detach().numpy())
    assert caps["0"].dx.shape == (10, 4)
    assert np.array_equal(caps["0"].dx, x.grad.reshape(10, 4).numpy())
    h = torch.tanh(x.detach() @ model[0].weight.detach().T).requires_grad_(True)
    (model[2](h)).square().sum().backward()
    assert np.array_equal(caps["2"].dx, h.grad.reshape(10, 3).numpy())
