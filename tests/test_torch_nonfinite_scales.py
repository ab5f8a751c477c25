"""An Inf in a torchao layer's input: torchao's scale is 448 / Inf = 0 and its dequantisation scale
1 / 0 = Inf, which ``_scaled_mm`` multiplies in IEEE float32; the emulation follows (it raised
"scale_a must be finite")."""

import warnings

import pytest

torch = pytest.importorskip("torch")
ft = pytest.importorskip("fp8emu.torch")


def _run(recipe, gpu):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 32))
    ft.emulate(m, recipe, gpu)
    x = torch.randn(32, 32)
    x[0, 0] = float("inf")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = m(x)
    return y, caught


@pytest.mark.parametrize("gpu", ["h100", "b200"])
def test_tensorwise_scales_of_an_input_holding_inf_give_nan_everywhere(gpu):
    # the scale 0 makes every finite element's code 0 and the Inf's NaN: row 0 sums a NaN, every other
    # output sums zeros, and 0 * Inf is NaN
    y, caught = _run("torchao-tensorwise", gpu)
    assert torch.isnan(y).all()
    assert any("Inf or NaN value" in str(w.message) for w in caught)


def test_rowwise_scales_confine_it_to_its_row():
    y, _ = _run("torchao-rowwise", "h100")
    assert torch.isnan(y[0]).all() and torch.isfinite(y[1:]).all()


def test_live_torchao_on_the_cpu_agrees_that_every_output_is_nan():
    # the cpu stack runs torch's own CPU _scaled_mm: a peer for the tensor-wise case
    y, _ = _run("torchao-tensorwise", "cpu")
    assert torch.isnan(y).all()
