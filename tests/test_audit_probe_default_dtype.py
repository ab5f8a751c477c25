"""``probes.layer_passes`` under ``torch.set_default_dtype`` (tests/AUDIT.md, "Sixteenth audit, part B", #4).

``layer_passes`` takes float32 operands and builds its one-layer probe with ``nn.Linear``, which takes torch's
default dtype: under ``torch.set_default_dtype(torch.bfloat16)`` (or float16) the float32 ``w`` and ``b`` were
rounded into a bfloat16 layer and every wgrad output of a te-current probe differed, silently.  The reference is
the same probe in a process left at torch's float32 default (what the docstring promises: float32 operands), and
the layer's weight, which must hold ``w`` bit for bit.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
probes = pytest.importorskip("fp8emu.torch.probes")


def _operands():
    rng = np.random.default_rng(28)
    x = rng.standard_normal((32, 64)).astype(np.float32)
    w = (rng.standard_normal((48, 64)) * (1 + 2.0 ** -20)).astype(np.float32)    # not exact in bfloat16
    b = rng.standard_normal(48).astype(np.float32)
    dy = rng.standard_normal((32, 48)).astype(np.float32)
    return x, w, b, dy


@pytest.fixture
def default_dtype():
    old = torch.get_default_dtype()
    yield torch.set_default_dtype
    torch.set_default_dtype(old)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("recipe, gpu", [("te-current", "h100"), ("torchao-tensorwise", "cpu")])
def test_the_probe_layer_is_float32_whatever_the_default_dtype(default_dtype, dtype, recipe, gpu):
    x, w, b, dy = _operands()
    want = probes.layer_passes(x, w, b, dy, recipe, gpu)          # torch's default float32
    default_dtype(dtype)
    got = probes.layer_passes(x, w, b, dy, recipe, gpu)
    for k in ("fprop", "dgrad", "wgrad"):
        assert got[k].dtype == np.float32 and np.array_equal(got[k], want[k]), k   # wgrad: 3072 of 3072 differed


def test_the_probe_layer_holds_w_and_b_bit_for_bit(default_dtype):
    x, w, b, dy = _operands()
    default_dtype(torch.bfloat16)
    lin = probes._single(w, b)
    assert lin.weight.dtype == torch.float32 and np.array_equal(lin.weight.detach().numpy(), w)
    assert np.array_equal(lin.bias.detach().numpy(), b)
