"""An FP8 primary weight (``te.quantized_model_init``) follows writes to its master weight through ``.data``.

The quantized copy was keyed by the Parameter's version counter, which writes through ``.data`` do not bump
(``p.data.clamp_(-c, c)``, WGAN's weight clipping; ``p.data = ...``): the next forward computed with the old
weight's copy, silently.  The copy is now keyed by the master weight's values: after any write the module
gives the bits of a module built with the new weight.
"""

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch.te as te  # noqa: E402

R = te.recipe.Float8CurrentScaling


def _layer():
    torch.manual_seed(0)
    with te.quantized_model_init(recipe=R()):
        return te.Linear(32, 32)


def _fp8(layer, x):
    with te.autocast(recipe=R()):
        return layer(x)


WRITES = {
    "data.clamp_": lambda p: p.data.clamp_(-0.01, 0.01),
    "data.mul_": lambda p: p.data.mul_(2),
    "data =": lambda p: setattr(p, "data", p.data * 2),
    "no_grad mul_": lambda p: torch.no_grad()(p.mul_)(2),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_a_write_to_the_master_weight_reaches_the_fp8_copy(write):
    x = torch.randn(16, 32)
    layer = _layer()
    before = _fp8(layer, x)
    WRITES[write](layer.weight)
    fresh = _layer()                        # a module built with the written weight
    with torch.no_grad():
        fresh.weight.copy_(layer.weight)
    got = _fp8(layer, x)
    assert not torch.equal(got, before)
    assert torch.equal(got, _fp8(fresh, x))
    # the high-precision path reads the same copy
    assert torch.equal(layer(x), fresh(x))


def test_an_unchanged_weight_keeps_its_copy():
    layer = _layer()
    x = torch.randn(16, 32)
    y = _fp8(layer, x)
    copy_before = layer.fp8emu_gemm._weight_copy
    assert torch.equal(_fp8(layer, x), y) and layer.fp8emu_gemm._weight_copy[1] is copy_before[1]
