"""TE's GEMM modules inside ``torch.autocast`` and ``te.autocast`` together (fourteenth audit, part A).

TE's modules take ``torch.autocast``'s dtype as their activation dtype ("native AMP gets highest priority",
``set_activation_dtype``): the input is cast to it and the output is in it, in FP8 too.  Here the high-precision
path gave bfloat16 (torch's autocast casts ``F.linear``) but the FP8 path returned the input's float32, a dtype
mix that changed the residual stream's arithmetic downstream, silently.  Now the FP8 path computes as for an input
given in the autocast dtype.
"""

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch.te as te  # noqa: E402

CLASSES = [te.Linear, te.LayerNormLinear, te.LayerNormMLP]


def _pair(cls):
    mods = []
    for _ in range(2):
        torch.manual_seed(0)
        mods.append(cls(64, 64))
    return mods


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cls", CLASSES)
def test_fp8_output_is_in_torch_autocasts_dtype(cls, dtype):
    mod, ref = _pair(cls)
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(1), requires_grad=True)
    with torch.autocast("cpu", dtype=dtype):
        high = mod(x)
        with te.autocast(recipe=te.recipe.Float8CurrentScaling()):
            y = mod(x)
    assert high.dtype == dtype and y.dtype == dtype
    # the same as the input given in that dtype, without torch.autocast
    xd = x.detach().to(dtype).requires_grad_(True)
    with te.autocast(recipe=te.recipe.Float8CurrentScaling()):
        expected = ref(xd)
    assert expected.dtype == dtype and torch.equal(y, expected)
    y.float().sum().backward()
    expected.float().sum().backward()
    assert x.grad.dtype == torch.float32 and torch.equal(x.grad, xd.grad.float())


@pytest.mark.parametrize("cls", CLASSES)
def test_without_torch_autocast_the_output_is_the_inputs_dtype_as_before(cls):
    mod, _ = _pair(cls)
    with te.autocast(recipe=te.recipe.Float8CurrentScaling()):
        assert mod(torch.randn(32, 64)).dtype == torch.float32
        assert mod(torch.randn(32, 64, dtype=torch.float64)).dtype == torch.float64


def test_a_float64_input_stays_float64_under_torch_autocast():
    # torch's autocast leaves float64 alone (nn.Linear's output is float64 there): so does the FP8 path
    mod, _ = _pair(te.Linear)
    x = torch.randn(32, 64, dtype=torch.float64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.nn.functional.linear(x, mod.weight.double()).dtype == torch.float64
        with te.autocast(recipe=te.recipe.Float8CurrentScaling()):
            assert mod(x).dtype == torch.float64
