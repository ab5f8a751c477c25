"""torch's CPU GEMM presets (fp8emu.gemm.torch_cpu): what the issue-53 mutation samples found untested
(tests/MUTATION.md, "The torch adapter's layer, swap and torch's CPU GEMM").

Expectations are written out from torch's source as the module docstring cites it
(``aten/src/ATen/native/Blas.cpp``: which path runs; oneDNN's per-product scaling in K order) and
computed here with NumPy float32 step by step, never by the module's own functions."""

import json
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fp8emu.formats import get_format
from fp8emu.gemm import cpu_order
from fp8emu.gemm.torch_cpu import EMULATED_MAX_K, cpu_path, sgemm, torch_cpu_mm, torchao_emulated_mm

E4 = get_format("e4m3fn")


@pytest.mark.parametrize("fa, fb, tensorwise, mkldnn, flags, path", [
    ("e4m3fn", "e4m3fn", True, True, {"amx_int8"}, "onednn"),
    ("e4m3fn", "e5m2", True, True, {"amx_int8", "amx_fp16"}, "onednn"),      # mixed dtypes need AMX-FP16
    ("e4m3fn", "e5m2", True, True, {"amx_int8"}, "emulated"),
    ("e4m3fn", "e4m3fn", True, False, {"amx_int8", "amx_fp16"}, "emulated"),  # mkldnn off
    ("e4m3fn", "e4m3fn", False, True, {"amx_int8", "amx_fp16"}, "emulated"),  # row-wise scales
    ("e4m3fn", "e4m3fn", True, True, {"amx_fp16", "avx512f"}, "emulated"),    # no AMX-INT8
    ("e5m2", "e5m2", np.bool_(True), np.bool_(True), ["amx_int8"], "onednn"),
])
def test_cpu_path_follows_torchs_dispatch(fa, fb, tensorwise, mkldnn, flags, path):
    assert cpu_path(fa, fb, tensorwise=tensorwise, mkldnn=mkldnn, flags=flags) == "torch-cpu-" + path


@pytest.mark.parametrize("kw", [{"tensorwise": 1}, {"tensorwise": True, "mkldnn": "on"}])
def test_cpu_path_refuses_flags_that_are_not_booleans(kw):
    with pytest.raises(TypeError, match="must be True or False"):
        cpu_path("e4m3fn", "e4m3fn", flags={"amx_int8"}, **kw)


def _onednn_reference(va, vb, sa, sb):
    """oneDNN's sum, one K step at a time: acc = fl(acc + fl(fl(a_k b_k sa) sb)) from +0."""
    f = np.float32
    acc = np.zeros((va.shape[0], vb.shape[1]), f)
    with np.errstate(all="ignore"):
        for k in range(va.shape[1]):
            p = va[:, k:k + 1] * vb[k:k + 1, :]                       # exact: two FP8 values
            acc = (acc + ((p * f(sa)).astype(f) * f(sb)).astype(f)).astype(f)
    return acc


def test_onednn_sums_in_k_order_over_any_number_of_rows():
    """Enough rows and K * N that the product block is formed a few rows at a time, and K = 0."""
    rng = np.random.default_rng(55)
    M, K, N = 7, 1024, 2048                          # K * N = 2**21: two rows at a time
    ca = (rng.integers(0, 0x7F, (M, K)) | (rng.integers(0, 2, (M, K)) << 7)).astype(np.uint8)   # no NaN code
    cb = (rng.integers(0, 0x7F, (K, N)) | (rng.integers(0, 2, (K, N)) << 7)).astype(np.uint8)
    va, vb = (c.view(ml_dtypes.float8_e4m3fn).astype(np.float32) for c in (ca, cb))
    sa, sb = np.float32(0.37), np.float32(1.9)
    got = torch_cpu_mm("torch-cpu-onednn", ca, E4, cb, E4, sa, None, sb, None)
    assert np.array_equal(got.view(np.uint32), _onednn_reference(va, vb, sa, sb).view(np.uint32))
    empty = torch_cpu_mm("torch-cpu-onednn", ca[:, :0], E4, cb[:0], E4, sa, None, sb, None)
    assert empty.shape == (M, N) and not empty.any() and not np.signbit(empty).any()


def test_bad_operands_and_outputs_are_refused_naming_what_is_accepted():
    a, b = np.zeros((2, 16), np.uint8), np.zeros((16, 2), np.uint8)
    with pytest.raises(ValueError, match="unknown torch CPU path 'torch-cpu'; use one of"):
        torch_cpu_mm("torch-cpu", a, E4, b, E4, 1.0, None, 1.0, None)
    with pytest.raises(ValueError, match="writes float32, bfloat16, float16, float8_e4m3fn or float8_e5m2, not e2m1fn"):
        torch_cpu_mm("torch-cpu-emulated", a, E4, b, E4, 1.0, None, 1.0, None, ofmt=get_format("e2m1fn"))
    with pytest.raises(ValueError, match="torchao-emulate: out_dtype must be float32, bfloat16 or float16, got float64"):
        torchao_emulated_mm(a, E4, 1.0, b, E4, 1.0, out_dtype=np.float64)
    with pytest.raises(ValueError, match="takes float8_e4m3fn / float8_e5m2 operands, got e4m3fnuz"):
        torchao_emulated_mm(a, E4, 1.0, b, get_format("e4m3fnuz"), 1.0)
    x = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"x is 2x3 and y is 2x2: their inner dimensions must match"):
        sgemm(x, np.ones((2, 2), np.float32))
    for bad in (0, True, 1.0):
        with pytest.raises(ValueError, match="threads must be a positive integer"):
            sgemm(x, x.T, threads=bad)
    with pytest.raises(ValueError, match=r"y must be a 2-D matrix, got 1 dimension\(s\)"):
        sgemm(x, np.ones(3, np.float32))
    with pytest.raises(TypeError, match="x must be float32 .* got float64"):
        sgemm(x.astype(np.float64), x.T)
    assert sgemm(x[:, :0], x.T[:0]).tolist() == [[0.0, 0.0], [0.0, 0.0]]        # an empty sum is +0
    assert sgemm(x.astype(np.float16), x.T.astype(ml_dtypes.bfloat16), threads=1).tolist() == [[3.0, 3.0], [3.0, 3.0]]


def test_sgemms_range_warning_points_at_the_callers_line():
    """The recorded model is proven for M, N >= 2 only (one row goes to MKL's gemv): a direct sgemm call
    outside that range is warned about at the caller's line."""
    with cpu_order.use("mkl-2024.2-avx512"), pytest.warns(RuntimeWarning, match="a single row or column goes to MKL.s gemv") as caught:
        sgemm(np.ones((1, 8), np.float32), np.ones((8, 2), np.float32))
    assert [w.filename for w in caught] == [__file__]


def test_a_single_column_or_row_is_summed_not_taken_for_an_empty_product():
    """A K x 1 (or 1 x K) product is a real sum (MKL's gemv, warned about under the recorded model),
    not the +0 of an empty one; small integers make every order's sum exact."""
    x = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    y = np.array([[1], [-2], [4]], np.float32)
    want = [[1 - 4 + 12], [4 - 10 + 24]]                 # 9, 18
    with cpu_order.use("mkl-2024.2-avx512"), pytest.warns(RuntimeWarning, match="gemv"):
        assert sgemm(x, y).tolist() == want
    with cpu_order.use("mkl-2024.2-avx512"), pytest.warns(RuntimeWarning, match="gemv"):
        assert sgemm(y.T, x.T).tolist() == [[9, 18]]


def test_sgemm_takes_array_likes_of_float32():
    """Operands go through np.asarray: a list of float32 rows is a float32 matrix (a list of Python
    floats would be float64, and is refused)."""
    rows = [np.array([1.0, 2.0], np.float32), np.array([3.0, 4.0], np.float32)]
    with cpu_order.use("mkl-2024.2-avx512"):
        assert sgemm(rows, rows).tolist() == [[7.0, 10.0], [15.0, 22.0]]      # 1+6, 2+8, 3+12, 6+16
    with pytest.raises(TypeError, match="x must be float32 .* got float64"):
        sgemm([[1.0, 2.0]], np.ones((2, 2), np.float32))


def test_torchaos_bias_is_converted_to_the_output_dtype_and_added_after_the_gemm():
    """Float8Linear: ``output + bias.to(output.dtype)``: the bias is rounded to bfloat16 first
    (1 + 2**-10 -> 1: bfloat16 keeps 7 fraction bits), one per column, and the float32 sum rounded once."""
    a = np.full((2, 2), 0x38, np.uint8)                  # E4M3FN 1.0
    b = np.full((2, 2), 0x38, np.uint8)
    bias = np.array([1 + 2.0**-10, -0.5], np.float32)
    with cpu_order.use("mkl-2024.2-avx512"):
        bf = torchao_emulated_mm(a, E4, 1.0, b, E4, 1.0, out_dtype=ml_dtypes.bfloat16, bias=bias)
        f32 = torchao_emulated_mm(a, E4, 1.0, b, E4, 1.0, bias=bias)
        plain = torchao_emulated_mm(a, E4, 1.0, b, E4, 1.0)
    assert bf.dtype == ml_dtypes.bfloat16 and bf.astype(np.float32).tolist() == [[3.0, 1.5], [3.0, 1.5]]
    assert f32.dtype == np.float32 and f32.tolist() == [[3 + 2.0**-10, 1.5], [3 + 2.0**-10, 1.5]]
    assert plain.tolist() == [[2.0, 2.0], [2.0, 2.0]]


def test_emulated_max_k_is_the_largest_k_recorded_on_the_xeon():
    """The public bound of the emulated path's proof: the largest K of the one-thread GEMMs recorded on
    the Xeon (docs/data/cpu-order/xeon-amx-mkl-2024.2.json), 4096 as the changelog says."""
    rec = json.loads((Path(__file__).parent.parent / "docs/data/cpu-order/xeon-amx-mkl-2024.2.json").read_text())
    assert EMULATED_MAX_K == max(g["K"] for g in rec["gemms"] if g["threads"] == 1) == 4096


def test_an_empty_output_is_returned_without_asking_for_an_order():
    """No output column (N = 0) is an empty product: (M, 0) at once, no order and no range warning."""
    with cpu_order.use("mkl-2024.2-avx512"), warnings.catch_warnings():
        warnings.simplefilter("error")
        out = sgemm(np.ones((2, 3), np.float32), np.ones((3, 0), np.float32))
    assert out.shape == (2, 0) and out.dtype == np.float32


def test_onednn_refuses_a_row_wise_scale_on_either_side():
    a, b = np.full((2, 16), 0x38, np.uint8), np.full((16, 2), 0x38, np.uint8)
    row, col = np.ones((2, 1), np.float32), np.ones((1, 2), np.float32)
    for sa, sa_row, sb, sb_col in ((1.0, None, None, col), (None, row, 1.0, None)):
        with pytest.raises(ValueError, match="torch-cpu-onednn takes tensor-wise .scalar. scales only"):
            torch_cpu_mm("torch-cpu-onednn", a, E4, b, E4, sa, sa_row, sb, sb_col)


def test_onednn_forms_one_row_at_a_time_when_a_rows_products_exceed_the_block():
    """K * N above 2**22 products: the oneDNN sum forms a single row's (K, N) block at a time (never zero
    rows, which would leave the loop no step), and each output is still the K-order sum."""
    rng = np.random.default_rng(65)
    M, K, N = 3, 2049, 2048                          # K * N = 2**22 + 2048
    ca = (rng.integers(0, 0x7F, (M, K)) | (rng.integers(0, 2, (M, K)) << 7)).astype(np.uint8)   # no NaN code
    cb = (rng.integers(0, 0x7F, (K, N)) | (rng.integers(0, 2, (K, N)) << 7)).astype(np.uint8)
    va, vb = (c.view(ml_dtypes.float8_e4m3fn).astype(np.float32) for c in (ca, cb))
    sa, sb = np.float32(0.37), np.float32(1.9)
    got = torch_cpu_mm("torch-cpu-onednn", ca, E4, cb, E4, sa, None, sb, None)
    assert got.shape == (M, N)
    assert np.array_equal(got.view(np.uint32), _onednn_reference(va, vb, sa, sb).view(np.uint32))
