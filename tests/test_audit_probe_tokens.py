"""A probe of a token count the recipe cannot train on is the probe's own error.

``layer_passes`` of 20 tokens on te-current raised the emulated layer's training error, which names a layer
'0' the caller never made and advises running inference without autograd, which a probe of the three
passes cannot do.  It is the probe's line, like that of a layer shape the recipe cannot take.
"""

import numpy as np
import pytest

pytest.importorskip("torch")
from fp8emu.torch import probes  # noqa: E402


@pytest.mark.parametrize("recipe,gpu,m,multiple", [("te-current", "h100", 20, 16), ("te-mxfp8", "b200", 48, 32),
                                                   ("te-nvfp4", "b200", 96, 64)])
def test_a_token_count_the_recipe_cannot_train_on_is_named_by_the_probe(recipe, gpu, m, multiple):
    r = np.random.default_rng(0)
    x = r.standard_normal((m, 64), dtype=np.float32)
    w = r.standard_normal((64, 64), dtype=np.float32)
    dy = r.standard_normal((m, 64), dtype=np.float32)
    with pytest.raises(ValueError) as e:
        probes.layer_passes(x, w, None, dy, recipe, gpu)
    msg = str(e.value)
    assert f"does not take a 64 -> 64 layer with {m} tokens" in msg and f"multiple of {multiple}" in msg
    assert "layer '0'" not in msg and "no_grad" not in msg
    # the neighbour that is taken: a multiple of it runs
    got = probes.layer_passes(x[:multiple], w, None, dy[:multiple], recipe, gpu)
    assert got["wgrad"].shape == (64, 64) and np.isfinite(got["wgrad"]).all()
