"""A float64 emulated layer whose weight or bias holds a value beyond float32's range (thirteenth audit, part B).

The layer computes in float32; a float64 input past float32's range is refused (its own check), but a float64
weight or bias past it became Inf in the float32 copy and the recipe gave finite garbage (te-current: outputs near
274 and 448 where the product is near 1e39), silently.
"""

import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import fp8emu.torch as ft  # noqa: E402

BIG = 1e39      # beyond float32's largest finite value, 3.4028234663852886e+38


def _model(recipe="te-current", gpu="h100"):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32, dtype=torch.float64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ft.emulate(model, recipe, gpu)
    return model


@pytest.mark.parametrize("recipe, what", [("te-current", "weight"), ("te-delayed", "weight"),
                                          ("torchao-rowwise", "weight"), ("te-current", "bias"),
                                          ("te-delayed", "bias"), ("torchao-rowwise", "bias")])
def test_a_float64_parameter_past_float32_is_named(recipe, what):
    model = _model(recipe)
    with torch.no_grad():
        getattr(model[0], what).view(-1)[3] = -BIG
    x = torch.randn(16, 32, dtype=torch.float64)
    with pytest.raises(ValueError, match=rf"layer '0': its {what} overflows float32.*1 finite float64 value.*1e\+39"):
        model(x)
    with pytest.raises(ValueError, match=rf"its {what} overflows float32"), torch.no_grad():
        model(x[:1])
    assert int(model[0].fp8emu_step) == 0


def test_a_float64_bias_torchao_adds_in_torch_is_taken():
    # on torch's CPU torchao's Float8Linear adds its bias after the GEMM, in the output's dtype: float64 here, no
    # float32 copy (on h100 the bias is the scaled GEMM's epilogue, in float32: refused above)
    model = _model("torchao-rowwise", "cpu")
    with torch.no_grad():
        model[0].bias[3] = -BIG
        y = model(torch.randn(16, 32, dtype=torch.float64))
    assert y.dtype == torch.float64
    assert (y[:, 3] == -BIG).all()          # |x w^T| < 1e3 vanishes beside 1e39 in float64 (ulp 2**77)
    assert torch.isfinite(y).all()


def test_float64_parameters_within_float32_run_as_before():
    model = _model()
    with torch.no_grad():
        model[0].weight[0, 0] = 3.0e38                # finite in float32
        model[0].bias[0] = float("inf")               # Inf is no overflow: it stays Inf
    y = model(torch.randn(16, 32, dtype=torch.float64))
    assert y.dtype == torch.float64 and int(model[0].fp8emu_step) == 1


@pytest.mark.usefixtures("fresh_dynamo")
def test_a_float64_parameter_past_float32_is_named_under_compile():
    model = _model()
    with torch.no_grad():
        model[0].weight[5, 7] = BIG
    compiled = torch.compile(model, backend="aot_eager")
    with pytest.raises(ValueError, match=r"its weight overflows float32"), torch.no_grad():
        compiled(torch.randn(16, 32, dtype=torch.float64))


def test_a_float64_output_gradient_past_float32_is_named():
    # the backward's float32 copy of dy: 1e39 became Inf and the GEMMs gave gradients near 6e3 and 3e4, silently
    model = _model()
    x = torch.randn(16, 32, dtype=torch.float64, requires_grad=True)
    y = model(x)
    with pytest.raises(ValueError, match=r"layer '0': its output gradient overflows float32.*1e\+39"):
        (y.sum() * BIG).backward()


def test_a_float64_output_gradient_within_float32_as_before():
    model = _model()
    x = torch.randn(16, 32, dtype=torch.float64, requires_grad=True)
    (model(x).sum() * 1e30).backward()
    assert x.grad.dtype == torch.float64 and torch.isfinite(x.grad).all() and x.grad.abs().max() > 1e29
