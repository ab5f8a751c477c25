"""``emulate(seed=)`` (and the probes that pass it on) takes a NumPy integer as the same Python integer.

``seed=np.int64(1)`` (a seed from ``np.arange``) or ``np.uint8(3)`` was refused: "seed must be an int >= 0,
got np.uint8(3)", an integer said not to be one, while ``Policy`` and the CPU order take NumPy integers
as Python ints.  The seed is kept as a Python int, so its stochastic rounding is that of the same int.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from fp8emu.torch import emulate, probes  # noqa: E402


def _grads(seed):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    emulate(model, "te-nvfp4", "b200", seed=seed)
    x = torch.randn(64, 64)
    model(x).square().sum().backward()
    return model[0].weight.grad.clone()


@pytest.mark.parametrize("seed", [np.uint8(3), np.int64(3), np.uint64(3)])
def test_a_numpy_integer_seed_is_the_same_python_integer(seed):
    assert torch.equal(_grads(seed), _grads(3))


def test_the_seed_matters_here():
    # stochastic rounding in the backward: another seed gives other bits, so the equality above is a test
    assert not torch.equal(_grads(3), _grads(4))


def test_layer_passes_takes_a_numpy_integer_seed():
    rng = np.random.default_rng(0)
    x, w, dy = (rng.standard_normal(s).astype(np.float32) for s in ((64, 64), (64, 64), (64, 64)))
    a = probes.layer_passes(x, w, None, dy, "te-nvfp4", "b200", seed=np.int64(5))
    b = probes.layer_passes(x, w, None, dy, "te-nvfp4", "b200", seed=5)
    assert all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("seed", [np.int64(-1), np.float64(1.0), np.bool_(True), True, 2.0])
def test_other_seeds_are_still_refused(seed):
    with pytest.raises(ValueError, match="seed must be an int >= 0"):
        emulate(torch.nn.Sequential(torch.nn.Linear(16, 16)), "te-current", "h100", seed=seed)
