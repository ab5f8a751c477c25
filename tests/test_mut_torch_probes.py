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
