"""0-d results of the torch adapter's functions keep their shape (fifteenth audit, part A).

``to_torch`` made every array C-ordered with ``np.ascontiguousarray``, which returns at least one dimension: the
encoding of a 0-d tensor came back of shape (1,) (torch's own ``x.to(torch.float8_e4m3fn)`` keeps ``()``), as did
``quantize`` / ``decode`` of a scalar and every per-tensor scale of a :class:`TorchScaled` (documented "0-d" for
NVFP4's global scale), where the NumPy functions return 0-d arrays.  The expected shapes are torch's and NumPy's.
"""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import fp8emu  # noqa: E402
import fp8emu.torch as ft  # noqa: E402


@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2", "e2m3fn", "e8m0fnu"])
def test_encoding_a_scalar_tensor_keeps_it_0d(fmt):
    x = torch.tensor(1.5)
    codes = ft.encode(x, fmt)
    assert codes.shape == () == np.shape(fp8emu.encode(np.float32(1.5), fmt))
    if codes.dtype != torch.uint8:         # a format torch holds: torch's own cast gives the same bits and shape
        want = x.to(codes.dtype)
        assert want.shape == () and codes.view(torch.uint8).item() == want.view(torch.uint8).item()


def test_quantize_and_decode_of_a_scalar_are_0d():
    q = ft.quantize(torch.tensor(300.0), "e4m3fn")
    assert q.shape == () and q.item() == 288.0          # E4M3: 256 + 32 is the nearest
    assert ft.quantize(2.7, "e4m3fn").shape == () == np.shape(fp8emu.quantize(2.7, "e4m3fn"))
    d = ft.decode(torch.tensor(288.0).to(torch.float8_e4m3fn))
    assert d.shape == () and d.item() == 288.0
    assert ft.to_torch(np.array(1.5, np.float32)).shape == ()
    assert ft.to_torch(np.array(56, np.uint8), fmt="e4m3fn").shape == ()
    ro = np.array(2.0, np.float32)
    ro.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # torch warns where it is handed a read-only array
        t = ft.to_torch(ro)
    assert t.shape == () and t.item() == 2.0


def test_per_tensor_scales_have_the_numpy_shapes():
    x = torch.linspace(-3, 5, 64).reshape(2, 32)
    t = ft.quantize_tensorwise(x, "e4m3fn")
    st = fp8emu.quantize_tensorwise(x.numpy(), "e4m3fn")
    assert t.scale.shape == np.shape(st.scale) == () and t.scale_inv.shape == ()
    assert t.scale.item() == float(st.scale)
    n = ft.quantize_nvfp4(x)
    assert n.global_scale.shape == ()                   # the docstring's "0-d"
    assert n.global_scale.item() == float(fp8emu.quantize_nvfp4(x.numpy()).global_scale)
    assert ft.quantize_tensorwise(torch.tensor(3.0), "e4m3fn").dequantize().shape == ()


def test_arrays_of_one_or_more_dimensions_are_as_before():
    for shape in [(1,), (3,), (2, 4), (2, 1, 4)]:
        x = torch.arange(int(np.prod(shape)), dtype=torch.float32).reshape(shape)
        assert ft.encode(x, "e4m3fn").shape == shape
        assert ft.quantize(x, "e4m3fn").shape == shape
    # a transposed (F-ordered) result is still copied to C order with its values
    a = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    t = ft.to_torch(a)
    assert t.is_contiguous() and t.tolist() == [[0, 1, 2], [3, 4, 5]]
    # a NVFP4 operand's global scale still works as block_scaled_mm's argument
    n1, n2 = ft.quantize_nvfp4(torch.ones(16, 64)), ft.quantize_nvfp4(torch.ones(64, 16), axis=0)
    got = ft.block_scaled_mm(n1.codes, n2.codes, a_scales=n1.block_scale_codes, b_scales=n2.block_scale_codes,
                             a_global_scale=n1.global_scale, b_global_scale=n2.global_scale)
    assert torch.equal(got, torch.full((16, 16), 64.0))
