"""``fp8emu.dask`` on inputs the NumPy functions refuse or read in one way: a given tensor-wise scale,
``study_metrics``' ``rows_per_chunk``, and the ``(starts, codes)`` table ``float32_mismatches`` takes.

Run on a real ``dask.distributed`` cluster (two in-process workers).  Before the fixes a given scale
was cast with ``np.float32`` first (1e39 became Inf and failed in every chunk's task as "not finite",
``"1"`` and ``True`` were taken as 1.0), ``rows_per_chunk`` 0 was a ZeroDivisionError and a negative
count dask's own message, and a table whose first run does not start at pattern 0, or whose starts
are unsorted or of another length than its codes, was a count of mismatches or NumPy's message.
The options of ``encode`` / ``decode`` / ``quantize_axiswise`` / ``quantize_blockwise`` that the NumPy
functions refuse (a bad profile, rounding, saturate, margin, pow2, eps, float codes) built a graph whose
every chunk failed at compute, and ``amax`` of a complex array was its real part's (1.0 for 1 + 2j).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

import fp8emu

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("dask.distributed")
from fp8emu import dask as fd   # noqa: E402  (needs dask)


@pytest.fixture(scope="module")
def client():
    logging.getLogger("distributed").setLevel(logging.CRITICAL)
    cluster = distributed.LocalCluster(n_workers=2, processes=False, threads_per_worker=1,
                                       dashboard_address=None)
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


X = np.linspace(-3, 3, 1000).reshape(10, 100)


@pytest.mark.parametrize("scale, message", [
    (1e39, "scale overflows float32"), (1e-50, "scale underflows to 0 in float32"),
    ("1", "scale must be a positive number"), (True, "scale must be a positive number"),
    (0, "must be finite and > 0"), (np.nan, "must be finite and > 0"), ([1.0, 2.0], "has shape"),
])
def test_a_given_tensorwise_scale_is_checked_when_called_as_numpy_checks_it(client, scale, message):
    with pytest.raises((ValueError, TypeError), match=message) as numpy_error:
        fp8emu.quantize_tensorwise(X, "e4m3fn", scale=scale)
    with pytest.raises(type(numpy_error.value), match=message):
        fd.quantize_tensorwise(da.from_array(X, chunks=(3, 40)), "e4m3fn", scale=scale)   # no compute


@pytest.mark.parametrize("options", [{"margin": "x"}, {"pow2": "yes"}, {"margin": 1.5}])
def test_the_other_options_are_checked_with_a_given_scale_too(client, options):
    with pytest.raises((ValueError, TypeError)):
        fp8emu.quantize_tensorwise(X, "e4m3fn", scale=2.0, **options)
    with pytest.raises((ValueError, TypeError)):
        fd.quantize_tensorwise(da.from_array(X, chunks=(3, 40)), "e4m3fn", scale=2.0, **options)


@pytest.mark.parametrize("scale", [None, 2.0, 2 ** 64, np.float16(0.5)])
def test_tensorwise_gives_the_numpy_codes_as_before(client, scale):
    ref = fp8emu.quantize_tensorwise(X, "e5m2", scale=scale)
    got = fd.quantize_tensorwise(da.from_array(X, chunks=(3, 40)), "e5m2", scale=scale).compute()
    assert np.array_equal(got.codes, ref.codes) and got.scale == ref.scale


@pytest.mark.parametrize("rows", [0, -128, 100, 2.5, 128.0, True, "128"])
def test_rows_per_chunk_is_a_positive_multiple_of_128_in_one_line(client, rows):
    with pytest.raises((ValueError, TypeError), match="rows_per_chunk"):
        fd.study_metrics(da.from_array(X, chunks=(3, 40)), "cast-e4m3fn-ocp", rows_per_chunk=rows)


def test_rows_per_chunk_of_numpy_integer_128_or_past_the_rows_is_taken(client):
    a = fd.study_metrics(da.from_array(X, chunks=(3, 40)), "cast-e4m3fn-ocp", rows_per_chunk=np.int64(128))
    b = fd.study_metrics(da.from_array(X, chunks=(3, 40)), "cast-e4m3fn-ocp", rows_per_chunk=256)
    c = fd.study_metrics(da.from_array(X, chunks=(3, 40)), "cast-e4m3fn-ocp", rows_per_chunk=10 ** 20)  # one chunk
    assert a == b == c and a[0]["numel"] == X.size


@pytest.mark.parametrize("starts, codes, message", [
    ([5, 100], [0, 1], "first run must start at pattern 0"),
    ([0, 100, 50], [0, 1, 0], "increasing"),
    ([0, 100, 100], [0, 1, 0], "increasing"),
    ([0, 5], [0], "one code per run"),
    ([[0, 5]], [[0, 1]], "1-D"),
    ([0, 2 ** 32], [0, 1], "below 2\\*\\*32"),
    ([0], [300], "codes of e4m3fn"),
    ([0], [-1], "codes of e4m3fn"),
    ([0.5], [0], "integer"),
])
def test_a_table_given_as_starts_and_codes_is_checked(client, starts, codes, message):
    with pytest.raises(ValueError, match=message):
        fd.float32_mismatches((np.array(starts), np.array(codes)), "e4m3fn", lo=0, hi=1 << 10, task_size=1 << 9)


def test_a_table_given_as_starts_and_codes_still_counts(client):
    # every pattern below 0x3b800000 (1/256 as float32) that e4m3fn takes to code 0: patterns 0 .. 0x3a800000
    # (2**-10, half the smallest subnormal, a tie to even 0) give code 0; 0x3a800001 on give code 1
    starts, codes = np.array([0, 0x3A800001]), np.array([0, 1])
    lo, hi = 0x3A800000 - 8, 0x3A800000 + 8
    assert fd.float32_mismatches((starts, codes), "e4m3fn", lo=lo, hi=hi, task_size=4) == 0
    assert fd.float32_mismatches((np.array([0]), np.array([0])), "e4m3fn", lo=lo, hi=hi, task_size=4) == 7


@pytest.mark.parametrize("name, call", [
    ("encode profile", lambda dx: fd.encode(dx, "e4m3fn", profile="bogus")),
    ("encode saturate", lambda dx: fd.encode(dx, "e4m3fn", saturate="yes")),
    ("encode rounding", lambda dx: fd.encode(dx, "e4m3fn", rounding="bogus")),
    ("encode profile rounding", lambda dx: fd.encode(dx, "e4m3fn", profile="torch-cuda", rounding="rtz")),
    ("decode profile", lambda dx: fd.decode(fd.encode(dx, "e4m3fn"), "e4m3fn", profile="bogus")),
    ("decode float codes", lambda dx: fd.decode(dx, "e4m3fn")),
    ("axiswise margin", lambda dx: fd.quantize_axiswise(dx, "e4m3fn", margin="x")),
    ("axiswise pow2", lambda dx: fd.quantize_axiswise(dx, "e4m3fn", pow2="yes")),
    ("axiswise eps", lambda dx: fd.quantize_axiswise(dx, "e4m3fn", eps=-1)),
    ("blockwise pow2", lambda dx: fd.quantize_blockwise(dx, "e4m3fn", pow2="yes")),
    ("blockwise eps", lambda dx: fd.quantize_blockwise(dx, "e4m3fn", eps=-1)),
])
def test_options_the_numpy_function_refuses_are_refused_when_called(client, name, call):
    # before: the graph was built and each chunk's task failed at compute, in the workers
    with pytest.raises((ValueError, TypeError)):
        call(da.from_array(X, chunks=(3, 40)))


@pytest.mark.parametrize("fn", [fd.amax, lambda d: fd.quantize_tensorwise(d, "e4m3fn"),
                                lambda d: fd.quantize_mx(d, "e4m3fn"), lambda d: fd.quantize_nvfp4(d),
                                lambda d: fd.encode(d, "e4m3fn")])
def test_a_complex_array_is_refused_as_numpy_refuses_it(client, fn):
    # amax took the real part: max |1 + 2j| was 1.0, silently
    with pytest.raises(TypeError, match="unsupported x dtype complex128"):
        fn(da.from_array(np.array([1 + 2j, -3 + 0j]), chunks=1))


def test_amax_of_real_and_bool_arrays_as_before(client):
    assert fd.amax(da.from_array(np.array([1.0, np.nan, -3.0]), chunks=1)) == np.float32(3.0)
    assert fd.amax(da.from_array(np.array([True, False]), chunks=1)) == np.float32(1.0)
    assert fd.amax(da.from_array(np.array([-7, 2], np.int16), chunks=1)) == np.float32(7.0)
