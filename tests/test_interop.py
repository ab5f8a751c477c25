"""Framework arrays into every array entry point: fp8emu.interop and its users (encode, decode, quantize)."""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import fp8emu
from fp8emu.formats import get_format
from fp8emu.interop import narrow_codes, to_numpy
from oracle import ValueOracle

X = np.array([1.0, -0.3, 300.0, 1e-3, -500.0, 0.0], np.float32)


def _want(x, fmt="e4m3fn", rounding="rne", saturate=False):
    return ValueOracle(get_format(fmt))(np.asarray(x, np.float64), rounding, saturate)


class OnlyDlpack:
    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


class OnlyArray:
    def __init__(self, a):
        self._a = a

    def __array__(self, dtype=None, copy=None):
        return self._a


def test_numpy_inputs_pass_through_without_copy():
    x = X.copy()
    assert to_numpy(x) is x
    view = x[::2]
    assert np.shares_memory(to_numpy(view), x)


def test_big_endian_is_swapped_to_native_and_encodes_the_same():
    be = X.astype(">f4")
    got = to_numpy(be)
    assert got.dtype.isnative and got.dtype == np.float32
    np.testing.assert_array_equal(got, X)
    np.testing.assert_array_equal(fp8emu.encode(be, "e4m3fn"), _want(X))
    np.testing.assert_array_equal(fp8emu.encode(X.astype(">f8"), "e5m2"), _want(X.astype(np.float64), "e5m2"))
    assert be.dtype.byteorder == ">"                   # the input is untouched


def test_masked_arrays_are_rejected():
    m = np.ma.masked_array(X, mask=[0, 1, 0, 0, 0, 0])
    with pytest.raises(ValueError, match="masked"):
        fp8emu.encode(m, "e4m3fn")
    with pytest.raises(ValueError, match="masked"):
        fp8emu.decode(np.ma.masked_array([1], mask=[1]), "e4m3fn")


def test_array_and_dlpack_protocols():
    np.testing.assert_array_equal(fp8emu.encode(OnlyArray(X), "e4m3fn"), _want(X))
    np.testing.assert_array_equal(fp8emu.encode(OnlyDlpack(X), "e4m3fn"), _want(X))
    with pytest.raises(TypeError, match="array-like"):
        fp8emu.encode(object(), "e4m3fn")


def test_dlpack_that_numpy_cannot_import_is_a_clear_error():
    jnp = pytest.importorskip("jax.numpy")
    j8 = jnp.asarray(X).astype(jnp.float8_e4m3fn)      # NumPy's DLPack import has no float8 dtype
    with pytest.raises(TypeError, match="NumPy cannot import this OnlyDlpack through DLPack"):
        fp8emu.decode(OnlyDlpack(j8), "e4m3fn")


def test_narrow_codes_checks_the_format():
    f = get_format("e4m3fn")
    assert narrow_codes(np.array([1.0, -448], ml_dtypes.float8_e4m3fn), f).tolist() == [0x38, 0xFE]
    with pytest.raises(ValueError, match="float8_e5m2 are not e4m3fn codes"):
        narrow_codes(np.array([1.0], ml_dtypes.float8_e5m2), f)
    with pytest.raises(ValueError, match="float8_e5m2 are not e4m3fn codes"):
        fp8emu.decode(np.array([1.0], ml_dtypes.float8_e5m2), "e4m3fn")
    with pytest.raises(ValueError, match=r"0\.\.15"):
        narrow_codes([16], get_format("e2m1fn"))
    with pytest.raises(TypeError, match="codes"):
        narrow_codes(np.float32([1.0]), f)


def test_jax_arrays():
    jnp = pytest.importorskip("jax.numpy")
    xb = X.astype(ml_dtypes.bfloat16)
    jb = jnp.asarray(xb)
    assert to_numpy(jb).dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(fp8emu.encode(jb, "e4m3fn"), _want(xb.astype(np.float64)))
    q = fp8emu.quantize(jb, "e5m2")
    assert q.dtype == np.dtype(ml_dtypes.bfloat16)
    # JAX float8 arrays decode as the format they are, and are refused as another
    j8 = jnp.asarray(X).astype(jnp.float8_e4m3fn)
    np.testing.assert_array_equal(fp8emu.decode(j8, "e4m3fn"), np.asarray(j8).astype(np.float32))
    with pytest.raises(ValueError, match="not e5m2 codes"):
        fp8emu.decode(j8, "e5m2")
    np.testing.assert_array_equal(fp8emu.encode(jnp.asarray(X), "e4m3fn", saturate=True), _want(X, saturate=True))


def test_torch_tensors():
    torch = pytest.importorskip("torch")
    t = torch.tensor(X, requires_grad=True)
    np.testing.assert_array_equal(fp8emu.encode(t, "e4m3fn"), _want(X))
    np.testing.assert_array_equal(fp8emu.encode(t * 2, "e5m2"), _want(X * 2, "e5m2"))   # non-leaf with grad
    tb = torch.tensor(X).to(torch.bfloat16)
    xb = X.astype(ml_dtypes.bfloat16)               # same RNE cast, so the same bits
    assert to_numpy(tb).dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(to_numpy(tb).view(np.uint16), xb.view(np.uint16))
    np.testing.assert_array_equal(fp8emu.encode(tb, "e4m3fn"), _want(xb.astype(np.float64)))
    # float8 tensors decode through their bits; a transposed (non-contiguous) view works too
    t8 = torch.tensor(X[:4]).reshape(2, 2).t().to(torch.float8_e5m2)
    np.testing.assert_array_equal(fp8emu.decode(t8, "e5m2"), t8.to(torch.float32).numpy())
    with pytest.raises(ValueError, match="not e4m3fn codes"):
        fp8emu.decode(t8, "e4m3fn")
    e8 = torch.tensor([1.0, 2.0 ** -10]).to(torch.float8_e8m0fnu)
    assert fp8emu.decode(e8, "e8m0fnu").tolist() == [1.0, 2.0 ** -10]
    # FP4 pairs: the first element in the low nibble
    p = torch.tensor([0x21, 0xF3], dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    assert fp8emu.decode(p, "e2m1fn").tolist() == [0.5, 1.0, 1.5, -6.0]
    with pytest.raises(TypeError, match="complex"):
        to_numpy(torch.tensor([1 + 1j]))


def test_core_does_not_import_frameworks():
    code = ("import sys, numpy as np, fp8emu, fp8emu.testing, fp8emu.interop; "
            "fp8emu.encode(np.float32([1.0]), 'e4m3fn'); fp8emu.testing.compare_codes([56], [1.0], 'e4m3fn'); "
            "print(sorted(m for m in ('torch', 'jax', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
