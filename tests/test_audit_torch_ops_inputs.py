"""What the torch adapter's conversion functions and quantizers are given (fifteenth audit, part A).

* ``fp8emu.torch.scaled_to_torch`` (public, in ``fp8emu.torch.__all__``) of anything but a ``ScaledTensor`` was a
  bare AttributeError ("'Tensor' object has no attribute 'global_scale'", "'TorchScaled' object has no attribute
  'fmt'"); now one TypeError naming what it takes and what was given.
* ``encode`` / ``quantize`` / ``quantize_*`` of a :class:`TorchScaled` (codes and scales, not values) unwrapped it
  and reached the NumPy function's "x must be array-like ..., got ScaledTensor", naming a type the caller never
  passed; now the error names the TorchScaled and the way out (``.dequantize()``).  GEMM operands take a
  TorchScaled as before.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import fp8emu  # noqa: E402
import fp8emu.torch as ft  # noqa: E402


@pytest.mark.parametrize("given, named", [
    (lambda: np.ones(3), "ndarray"), (lambda: torch.ones(4), "Tensor"),
    (lambda: ft.quantize_tensorwise(torch.ones(4), "e4m3fn"), "a TorchScaled already")])
def test_scaled_to_torch_names_what_it_takes(given, named):
    with pytest.raises(TypeError, match=rf"^scaled_to_torch takes an fp8emu.ScaledTensor \(what "
                                        rf"fp8emu.quantize_tensorwise, quantize_mx, quantize_nvfp4, ... return\), got "
                                        rf"{named}; "):
        ft.scaled_to_torch(given())


def test_scaled_to_torch_of_a_scaled_tensor_is_as_before():
    st = fp8emu.quantize_tensorwise(np.array([1.0, -2.0, 448.0], np.float32), "e4m3fn")
    t = ft.scaled_to_torch(st)
    assert t.codes.dtype == torch.float8_e4m3fn and t.scaled is st
    assert t.dequantize().tolist() == [1.0, -2.0, 448.0]


_QUANTIZERS = {
    "encode": lambda x: ft.encode(x, "e4m3fn"),
    "quantize": lambda x: ft.quantize(x, "e4m3fn"),
    "quantize_tensorwise": lambda x: ft.quantize_tensorwise(x, "e4m3fn"),
    "quantize_axiswise": lambda x: ft.quantize_axiswise(x, "e4m3fn"),
    "quantize_mx": lambda x: ft.quantize_mx(x, "e4m3fn"),
    "quantize_nvfp4": lambda x: ft.quantize_nvfp4(x),
}


@pytest.mark.parametrize("name", list(_QUANTIZERS))
def test_a_torch_scaled_given_as_values_is_named(name):
    t = ft.quantize_tensorwise(torch.linspace(-4, 4, 64).reshape(2, 32), "e4m3fn")
    with pytest.raises(TypeError, match=r"^x is a TorchScaled \(quantized codes and their scales\), not values; pass "
                                        r"x.dequantize\(\) for the values it stands for$"):
        _QUANTIZERS[name](t)
    # the way out: the values it stands for, quantized as any tensor of them
    out = _QUANTIZERS[name](t.dequantize())
    ref = _QUANTIZERS[name](torch.from_numpy(t.scaled.dequantize(np.float32)))
    a, b = (out.codes, ref.codes) if isinstance(out, ft.TorchScaled) else (out, ref)
    assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_gemm_operands_take_a_torch_scaled_as_before():
    # amax 448 (E4M3's largest): scale 1, so every product is exact, 448 * 448 summed 16 times
    a = ft.quantize_tensorwise(torch.full((16, 16), 448.0), "e4m3fn")
    assert a.scale.item() == 1.0
    assert torch.equal(ft.scaled_mm(a, a), torch.full((16, 16), 448.0 * 448.0 * 16))
