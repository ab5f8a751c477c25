"""Every argument error of the scaling recipes: the exception type and a message naming the
argument (one case per ``raise`` in fp8emu/scaling, so a dropped or loosened check fails here)."""

import numpy as np
import pytest

import fp8emu
from fp8emu import scaling as S
from fp8emu.scaling.hadamard import hadamard_matrix, rht_matrix

X = np.linspace(-2, 2, 64, dtype=np.float32).reshape(2, 32)
U8 = np.zeros((2, 32), np.uint8)
NV = fp8emu.quantize_nvfp4(X)
ONE = np.ones((2, 1), np.uint8) * 127

CASES = {
    "amax not scalar": (lambda: S.current_scale([1.0, 2.0], "e4m3fn"), TypeError, "amax must be a real scalar"),
    "amax a string": (lambda: S.current_scale("1", "e4m3fn"), TypeError, "amax must be a real scalar"),
    "input_dtype": (lambda: S.quantize_blockwise(X, "e4m3fn", input_dtype="float16"), ValueError,
                    "input_dtype must be None or 'bfloat16'"),
    "fp8_format type": (lambda: S.recipe_formats(5), TypeError, "fp8_format must be a string"),
    "fp8_format name": (lambda: S.recipe_formats("E3M4"), ValueError, "unknown fp8_format 'E3M4'"),
    "amax_compute_algo": (lambda: S.DelayedScaling("e4m3fn", amax_compute_algo="mean"), ValueError,
                          "unknown amax_compute_algo 'mean'"),
    "hadamard order": (lambda: hadamard_matrix(12), ValueError, "power of two, got 12"),
    "hadamard order bool": (lambda: hadamard_matrix(0), ValueError, "power of two, got 0"),
    "rht signs": (lambda: rht_matrix((1,) * 15), ValueError, "signs must be 16 values"),
    "rht signs values": (lambda: rht_matrix((2,) * 16), ValueError, "signs must be 16 values"),
    "rht 0-d": (lambda: S.rht(np.float32(1.0)), ValueError, "at least one dimension"),
    "rht length": (lambda: S.rht(np.ones(24, np.float32)), ValueError, "multiple of 16 elements"),
    "inverse rht length": (lambda: S.inverse_rht(np.ones(24, np.float32)), ValueError, "multiple of 16"),
    "mx codes 0-d": (lambda: S.mx_from_codes(np.uint8(1), np.uint8(127), "e4m3fn"), ValueError,
                     "codes need at least one dimension"),
    "mx block": (lambda: S.mx_from_codes(U8, ONE, "e4m3fn", block=0), ValueError, "block must be >= 1, got 0"),
    "mx codes dtype": (lambda: S.mx_from_codes(U8.astype(np.int64), ONE, "e4m3fn"), TypeError,
                       "codes must be unsigned integers"),
    "mx scale dtype": (lambda: S.mx_from_codes(U8, ONE.astype(np.int16), "e4m3fn"), TypeError,
                       "scale_codes must be unsigned integers"),
    "nvfp4 rng without stochastic": (lambda: fp8emu.quantize_nvfp4(X, rng=1), ValueError,
                                     "rng applies only to rounding='stochastic'"),
    "nvfp4 conflicting rounding": (lambda: fp8emu.quantize_nvfp4(X, stochastic_rounding=True, rounding="rtz"),
                                   ValueError, "stochastic_rounding=True conflicts with rounding='rtz'"),
    "nvfp4 rounding": (lambda: fp8emu.quantize_nvfp4(X, rounding="rtz"), ValueError, "unknown rounding 'rtz'"),
    "nvfp4 headroom < 1": (lambda: fp8emu.quantize_nvfp4(X, headroom=0.5), ValueError,
                           "headroom must be a finite number >= 1"),
    "nvfp4 headroom bool": (lambda: fp8emu.quantize_nvfp4(X, headroom=True), ValueError, "headroom"),
    "nvfp4 headroom inf": (lambda: fp8emu.quantize_nvfp4(X, headroom=np.inf), ValueError, "headroom"),
    "nvfp4 global_amax type": (lambda: fp8emu.quantize_nvfp4(X, global_amax="1"), TypeError,
                               "global_amax must be a real scalar"),
    "nvfp4 global_amax shape": (lambda: fp8emu.quantize_nvfp4(X, global_amax=[1.0, 2.0]), TypeError,
                                "global_amax must be a real scalar"),
    "nvfp4 global_amax < 0": (lambda: fp8emu.quantize_nvfp4(X, global_amax=-1.0), ValueError,
                              "global_amax must be >= 0 and not NaN"),
    "nvfp4 global_amax nan": (lambda: fp8emu.quantize_nvfp4(X, global_amax=np.nan), ValueError,
                              "global_amax must be >= 0 and not NaN"),
    "nvfp4 codes dtype": (lambda: S.nvfp4_from_codes(NV.codes.astype(np.int32), NV.block_scale_codes,
                                                     NV.global_scale), TypeError, "codes must be unsigned integers"),
    "nvfp4 block codes dtype": (lambda: S.nvfp4_from_codes(NV.codes, NV.block_scale_codes.astype(np.int32),
                                                           NV.global_scale), TypeError,
                                "block_scale_codes must be unsigned integers"),
    "nvfp4 packed codes": (lambda: S.nvfp4_from_codes(NV.codes | np.uint8(0x10), NV.block_scale_codes,
                                                      NV.global_scale), ValueError, "E2M1 codes out of range: must lie in 0..15"),
    "fmt type": (lambda: fp8emu.quantize_mx(X, 5), TypeError, "fmt must be a format name or a Format"),
    "fmt unsigned": (lambda: S.quantize_tensorwise(X, "e8m0fnu"), ValueError,
                     r"e8m0fnu is unsigned \(a scale format\)"),
    "eps type": (lambda: S.quantize_tensorwise(X, "e4m3fn", eps="0"), TypeError, "eps must be a real number"),
    "eps negative": (lambda: S.quantize_tensorwise(X, "e4m3fn", eps=-1.0), ValueError,
                     "eps must be finite and >= 0"),
    "eps inf": (lambda: S.quantize_tensorwise(X, "e4m3fn", eps=np.inf), ValueError, "eps must be finite"),
    "scale reciprocal": (lambda: S.quantize_tensorwise(X, "e4m3fn", scale=1e-45), ValueError,
                         "must have a finite float32 reciprocal"),
    "scale zero": (lambda: S.quantize_tensorwise(X, "e4m3fn", scale=0.0), ValueError, "finite and > 0"),
    "0-d input mx": (lambda: fp8emu.quantize_mx(np.float32(1.0), "e4m3fn"), ValueError,
                     "quantize_mx needs an array with at least one dimension"),
    "0-d input nvfp4": (lambda: fp8emu.quantize_nvfp4(np.float32(1.0)), ValueError,
                        "quantize_nvfp4 needs an array with at least one dimension"),
    "0-d input axiswise": (lambda: S.quantize_axiswise(np.float32(1.0), "e4m3fn"), ValueError,
                           "quantize_axiswise needs an array with at least one dimension"),
    "block too many dims": (lambda: S.quantize_blockwise(X, "e4m3fn", block=(2, 1, 32)), ValueError,
                            r"block \(2, 1, 32\) has more non-unit dimensions than the 2-dimensional input"),
    "block unit extra dims": (None, None, None),
    "block zero": (lambda: S.quantize_blockwise(X, "e4m3fn", block=(1, 0)), ValueError, "block sizes must be >= 1"),
    "block type": (lambda: S.quantize_blockwise(X, "e4m3fn", block=("1", 32)), TypeError,
                   "block must be an int or a non-empty tuple of ints"),
    "dequantize dtype": (lambda: NV.dequantize(np.int8), TypeError, "unsupported dequantize dtype"),
    "dequantize complex": (lambda: NV.dequantize(np.complex64), TypeError, "unsupported dequantize dtype"),
}


@pytest.mark.parametrize("case", [k for k, v in CASES.items() if v[0] is not None])
def test_scaling_argument_error(case):
    call, exc, match = CASES[case]
    with pytest.raises(exc, match=match):
        call()


def test_unit_leading_block_dimensions_are_accepted():
    # the counterpart of "block too many dims": extra leading 1s are harmless
    a = S.quantize_blockwise(X, "e4m3fn", block=(1, 1, 32), pow2=False)
    b = S.quantize_blockwise(X, "e4m3fn", block=(1, 32), pow2=False)
    np.testing.assert_array_equal(a.codes, b.codes)
    np.testing.assert_array_equal(a.scale, b.scale)


def test_tensorwise_keeps_the_shape_of_a_0d_input():
    # np.ascontiguousarray once turned 0-d inputs into shape (1,), silently
    st = S.quantize_tensorwise(np.float32(3.0), "e4m3fn")
    assert st.shape == () and st.codes.shape == () and st.dequantize().shape == ()
    assert float(st.dequantize()) == 3.0
