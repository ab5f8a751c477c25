"""A GEMM's bias and scales are checked in the type they are used in: a finite value that overflows it is named.

``scaled_mm`` and ``block_scaled_mm`` add the bias in the output type (float32, bfloat16 or
float16; float32 for FP8 outputs) and the ``torch-cpu-*`` paths in float32.  A float64 bias of
1e39 (or 1e5 with a float16 output) was cast to Inf there and every output of its column was
Inf, silently, though the value given was finite; an Inf or NaN the caller gave still propagates
by IEEE rules.
"""

import numpy as np
import pytest

import fp8emu
from fp8emu import block_scaled_mm, scaled_mm

A = np.full((2, 32), 0x38, np.uint8)          # e4m3fn 1.0
B = np.full((32, 2), 0x38, np.uint8)
S = np.full((2, 1), 127, np.uint8)            # E8M0 1.0


def _mm(bias, out_dtype="float32", accumulator="exact"):
    return scaled_mm(A, B, a_format="e4m3fn", b_format="e4m3fn", bias=bias, out_dtype=out_dtype,
                     accumulator=accumulator)


def _bsmm(bias, out_dtype="float32"):
    return block_scaled_mm(A, B, a_format="e4m3fn", b_format="e4m3fn", a_scales=S, b_scales=S.T.copy(),
                           bias=bias, out_dtype=out_dtype, accumulator="exact")


CASES = [(np.array([1e39, 1.0]), "float32", "float32"), (np.array([1e39, 1.0]), "bfloat16", "bfloat16"),
         (np.array([1e5, 1.0]), "float16", "float16"), (np.array([1e39, 1.0]), "e4m3fn", "float32"),
         (np.array([-3.5e38, 1.0]), "float32", "float32")]


@pytest.mark.parametrize("bias, out, added_in", CASES, ids=lambda v: v if isinstance(v, str) else None)
@pytest.mark.parametrize("mm", [_mm, _bsmm], ids=["scaled_mm", "block_scaled_mm"])
def test_a_finite_bias_beyond_the_type_it_is_added_in_is_named(mm, bias, out, added_in):
    assert np.isfinite(bias).all()
    with pytest.raises(ValueError, match=rf"bias overflows {added_in}, the type it is added in"):
        mm(bias, out)


@pytest.mark.parametrize("path", ["torch-cpu-onednn", "torch-cpu-emulated"])
def test_the_torch_cpu_paths_name_a_float32_overflow_of_the_bias(path):
    with pytest.raises(ValueError, match=r"bias overflows float32, the type it is added in"):
        scaled_mm(A, B, a_format="e4m3fn", b_format="e4m3fn", scale_a=np.float32(1), scale_b=np.float32(1),
                  bias=np.array([1e39, 1.0]), accumulator=path)


@pytest.mark.parametrize("mm", [_mm, _bsmm], ids=["scaled_mm", "block_scaled_mm"])
def test_a_bias_at_the_types_edge_or_given_as_inf_or_nan_is_added_as_before(mm):
    big = float(np.finfo(np.float32).max)
    out = mm(np.array([big, 1.0]))
    assert out[0, 0] == np.float32(big) and out[0, 1] == 33.0     # 32 + max rounds to max
    out = mm(np.array([np.inf, np.nan]))
    assert out[0, 0] == np.inf and np.isnan(out[0, 1])
    # float16 output: 65504 is float16's largest; -65519.99 rounds to -65504 (plus 32: -65472), -65520 to -Inf
    assert mm(np.array([-65519.99, 0.0]), "float16")[0, 0] == np.float16(-65472)
    with pytest.raises(ValueError, match=r"bias overflows float16"):
        mm(np.array([-65520.0, 0.0]), "float16")


@pytest.mark.parametrize("kw", [{"scale_a": 1e39}, {"scale_b": -1e39}, {"scale_a": np.array([[1.0], [1e40]])}])
def test_a_finite_scale_beyond_float32_is_named_an_overflow_not_non_finite(kw):
    # it said "must be finite in float32 (...), got non-finite values" for a finite 1e39 (item 1's confusion)
    a = np.full((2, 32), 0x38, np.uint8)
    with pytest.raises(ValueError, match=r"overflows float32, the type torch passes scales in: its largest "
                                         r"magnitude 1e\+(39|40)") as exc:
        scaled_mm(a, B, a_format="e4m3fn", b_format="e4m3fn", **kw)
    assert "non-finite" not in str(exc.value)


@pytest.mark.parametrize("kw", [{"scale_a": np.inf}, {"scale_b": np.nan}, {"scale_a": np.array([[1.0], [-np.inf]])}])
def test_a_nan_or_inf_scale_is_not_called_an_overflow(kw):
    # Inf and NaN dequantisation scales are multiplied as cuBLAS's epilogue does (tests/test_reliability.py);
    # only a finite value beyond float32 is an overflow
    a = np.full((2, 32), 0x38, np.uint8)
    with pytest.warns(RuntimeWarning, match="Inf or NaN value") as caught:
        scaled_mm(a, B, a_format="e4m3fn", b_format="e4m3fn", **kw)
    assert not any("overflows" in str(w.message) for w in caught)


def test_an_inf_result_scale_is_still_not_finite():
    a = np.full((2, 32), 0x38, np.uint8)
    with pytest.raises(ValueError, match=r"must be finite in float32 \(\|scale\| <= 3.40282e\+38\), got non-finite"):
        scaled_mm(a, B, a_format="e4m3fn", b_format="e4m3fn", out_dtype="e4m3fn", scale_result=np.inf)