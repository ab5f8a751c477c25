"""The output type of a decode or dequantize given by a name NumPy does not know (``"flaot32"``,
``"float8"``) or one that is no float type: ``fp8emu.decode``, ``hif8_decode``,
``ScaledTensor.dequantize`` and ``fp8emu.dask``'s ``decode`` and ``dequantize``.

NumPy's ``dtype('float64') == None`` is True, so an unknown name (read as None) passed the check
``dt not in (float16, bfloat16, float32, float64)`` and the values came back as float64, silently;
the dask layer gave NumPy's own "data type not understood", or an ``int32`` dequantize truncated.
"""

from __future__ import annotations

import numpy as np
import pytest

import fp8emu
from fp8emu.hifloat import hif8_decode

CODES = np.array([0x38, 0x7E, 0x01], np.uint8)       # 1, 448, 2**-9 in e4m3fn
BAD = ["flaot32", "float8", "bogus", "float96", "int32", "complex64"]


@pytest.mark.parametrize("name", BAD)
def test_decode_refuses_a_type_name_it_does_not_take(name):
    with pytest.raises(TypeError, match="unsupported decode dtype"):
        fp8emu.decode(CODES, "e4m3fn", dtype=name)
    with pytest.raises(TypeError, match="unsupported decode dtype"):
        hif8_decode(CODES, dtype=name)


@pytest.mark.parametrize("name", BAD)
def test_dequantize_refuses_a_type_name_it_does_not_take(name):
    t = fp8emu.quantize_mx(np.array([1.0, 3.0, -0.5]), "e4m3fn")
    with pytest.raises(TypeError, match="unsupported dequantize dtype"):
        t.dequantize(name)


@pytest.mark.parametrize("name, dt", [("float32", np.float32), ("float64", np.float64), ("float16", np.float16),
                                      ("bfloat16", fp8emu.tables.SOURCE_DTYPES["bfloat16"]), (np.float32, np.float32)])
def test_the_four_types_decode_as_before(name, dt):
    got = fp8emu.decode(CODES, "e4m3fn", dtype=name)
    assert got.dtype == np.dtype(dt)
    assert got.astype(np.float64).tolist() == [1.0, 448.0, 2.0 ** -9]


@pytest.mark.parametrize("name", BAD)
def test_the_dask_layer_names_the_type_in_the_same_line(name):
    da = pytest.importorskip("dask.array")
    from fp8emu import dask as fd
    codes = da.from_array(CODES, chunks=2)
    with pytest.raises(TypeError, match="unsupported decode dtype"):
        fd.decode(codes, "e4m3fn", dtype=name)
    t = fd.quantize_mx(da.from_array(np.linspace(-3, 3, 64), chunks=16), "e4m3fn", block=16)
    with pytest.raises(TypeError, match="unsupported dequantize dtype"):
        t.dequantize(name)


def test_the_dask_layer_decodes_and_dequantizes_the_four_types_as_numpy():
    da = pytest.importorskip("dask.array")
    from fp8emu import dask as fd
    x = np.linspace(-3, 3, 64)
    t = fd.quantize_mx(da.from_array(x, chunks=16), "e4m3fn", block=16)
    ref = fp8emu.quantize_mx(x, "e4m3fn", block=16)
    for name in ("float16", "bfloat16", "float32", "float64"):
        assert np.array_equal(fd.decode(da.from_array(CODES, chunks=2), "e4m3fn", dtype=name).compute(),
                              fp8emu.decode(CODES, "e4m3fn", dtype=name))
        got = t.dequantize(name).compute()
        assert got.dtype == ref.dequantize(name).dtype and np.array_equal(got, ref.dequantize(name))
