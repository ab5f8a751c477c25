"""Python integers past int64 as real numbers handed in (``interop.real_values``: GEMM and quantizer scales).

``scaled_mm(..., scale_a=2**64)`` (1.8e19, a float32 value) and ``quantize_tensorwise(..., scale=2**64)``
were refused with "must be a float or an array of floats (an integer, float or bfloat16 dtype), got dtype
object": NumPy holds such an integer as an object, and the message said integers are accepted.  They are
now read as float64 values; 2**200 is then "overflows float32", and an integer beyond float64 one line.
"""
import numpy as np
import pytest

import fp8emu
from fp8emu import scaled_mm
from fp8emu.interop import real_values


def _ab():
    rng = np.random.default_rng(1)
    return (fp8emu.encode(rng.standard_normal((2, 32)), "e4m3fn"),
            fp8emu.encode(rng.standard_normal((32, 2)), "e4m3fn"))


@pytest.mark.parametrize("big,as_float", [(2**64, 2.0**64), ([[2**64], [1]], [[2.0**64], [1.0]]),
                                          (2**100, 2.0**100)])
def test_a_python_integer_past_int64_scales_as_its_float(big, as_float):
    a, b = _ab()
    want = scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", scale_a=np.asarray(as_float, np.float32))
    got = scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", scale_a=big)
    np.testing.assert_array_equal(got, want)


def test_a_quantizer_scale_past_int64_is_taken():
    q = fp8emu.quantize_tensorwise(np.ones(4), "e4m3fn", scale=2**64)
    assert float(q.scale) == 2.0**64


def test_beyond_float32_and_float64_are_one_line_each():
    a, b = _ab()
    with pytest.raises(ValueError, match="scale_a overflows float32"):
        scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", scale_a=2**200)
    with pytest.raises(ValueError, match="scale_a holds an integer beyond float64's range"):
        scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", scale_a=10**400)


def test_other_objects_are_still_refused():
    for bad in ([2**64, "1"], [2**64, True], np.array([1.5], object)):
        with pytest.raises(TypeError, match="got dtype object"):
            real_values(bad, "scale")
