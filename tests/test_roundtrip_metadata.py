"""Every field of every ScaledTensor survives Dask compute, kernel buffers and golden files.

Each test compares *every* dataclass field (arrays bit for bit) and the downstream block-scaled GEMM,
not only the codes.
"""

from __future__ import annotations

import dataclasses

import dask
import dask.array as da
import numpy as np
import pytest

import fp8emu
from fp8emu import dask as fd
from fp8emu import layouts as L
from fp8emu.gemm import block_scaled_mm
from fp8emu.scaling import ScaledTensor
from fp8emu.testing import golden_vectors, load_golden, save_golden

F32 = np.float32


def _bits(v):
    a = np.asarray(v)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind not in "biu" else a   # floats, ml_dtypes


def assert_same_tensor(got: ScaledTensor, want: ScaledTensor):
    for f in dataclasses.fields(ScaledTensor):
        g, w = getattr(got, f.name), getattr(want, f.name)
        if isinstance(w, np.ndarray) or isinstance(g, np.ndarray):
            assert g is not None and w is not None, f.name
            ga, wa = np.asarray(g), np.asarray(w)
            assert ga.shape == wa.shape and ga.dtype == wa.dtype, f.name
            assert np.array_equal(_bits(ga), _bits(wa)), f.name
        elif isinstance(w, (np.floating, float)) or isinstance(g, (np.floating, float)):
            assert g is not None and w is not None, f.name
            assert type(g) is type(w) and _bits(np.asarray(g)) == _bits(np.asarray(w)), (f.name, g, w)
        else:
            assert g == w, (f.name, g, w)


@pytest.fixture(scope="module")
def x():
    g = np.random.default_rng(11)
    v = (g.standard_t(3, (96, 128)) * 3).astype(F32)
    v[3, 5] = np.nan
    return v


DASK_RECIPES = [
    ("tensorwise", lambda d: fd.quantize_tensorwise(d, "e4m3fn"), lambda v: fp8emu.quantize_tensorwise(v, "e4m3fn")),
    ("axiswise", lambda d: fd.quantize_axiswise(d, "e5m2"), lambda v: fp8emu.quantize_axiswise(v, "e5m2")),
    ("blockwise", lambda d: fd.quantize_blockwise(d, "e4m3fn"), lambda v: fp8emu.quantize_blockwise(v, "e4m3fn")),
    ("mx", lambda d: fd.quantize_mx(d, "e2m1fn"), lambda v: fp8emu.quantize_mx(v, "e2m1fn")),
    ("nvfp4", lambda d: fd.quantize_nvfp4(d), lambda v: fp8emu.quantize_nvfp4(v)),
    ("nvfp4-axis0-amax", lambda d: fd.quantize_nvfp4(d, axis=0, global_amax=100.0),
     lambda v: fp8emu.quantize_nvfp4(v, axis=0, global_amax=100.0)),
]


def test_dask_tensor_has_every_scaled_tensor_field():
    mine = {f.name for f in dataclasses.fields(fd.DaskScaledTensor)}
    assert {f.name for f in dataclasses.fields(ScaledTensor)} <= mine


@pytest.mark.parametrize("name,lazy,eager", DASK_RECIPES, ids=[r[0] for r in DASK_RECIPES])
def test_dask_compute_keeps_every_field(x, name, lazy, eager):
    with dask.config.set(scheduler="threads"):
        got = lazy(da.from_array(x, chunks=(32, 64))).compute()
    assert_same_tensor(got, eager(x))


def test_dask_nvfp4_gemm_equals_the_numpy_path(x):
    w = np.random.default_rng(2).standard_normal((128, 40)).astype(F32)
    with dask.config.set(scheduler="threads"):
        a = fd.quantize_nvfp4(da.from_array(x, chunks=(48, 64))).compute()
        b = fd.quantize_nvfp4(da.from_array(w, chunks=(64, 20)), axis=0).compute()
    assert a.global_amax is not None and a.scale_max == 448
    want = block_scaled_mm(fp8emu.quantize_nvfp4(x), fp8emu.quantize_nvfp4(w, axis=0))
    got = block_scaled_mm(a, b)
    assert np.array_equal(_bits(got), _bits(want))


KERNEL_CASES = [
    ("mx-e4m3fn", lambda v: fp8emu.quantize_mx(v, "e4m3fn")),
    ("mx-e2m1fn-axis0", lambda v: fp8emu.quantize_mx(v, "e2m1fn", axis=0)),
    ("mx-32x32", lambda v: fp8emu.quantize_mx(v, "e4m3fn", block=(32, 32))),
    # magnitudes in [1, 2): no element rounds to -0, which two's complement int8 cannot hold
    ("mx-int8", lambda v: fp8emu.quantize_mx(np.where(v < 0, -1, 1) * (1 + np.abs(v) % 1), "int8")),
    ("nvfp4", lambda v: fp8emu.quantize_nvfp4(v)),
    ("nvfp4-axis0", lambda v: fp8emu.quantize_nvfp4(v, axis=0)),
    ("nvfp4-16x16", lambda v: fp8emu.quantize_nvfp4(v, fp4_2d_quantization=True)),
    ("nvfp4-4over6", lambda v: fp8emu.quantize_nvfp4(v, four_over_six=True, scale_max=256)),
    ("nvfp4-amax-given", lambda v: fp8emu.quantize_nvfp4(v, global_amax=7.0)),
]


@pytest.mark.parametrize("name,make", KERNEL_CASES, ids=[c[0] for c in KERNEL_CASES])
def test_kernel_buffers_keep_every_field(x, name, make):
    v = np.nan_to_num(x)
    t = make(v)
    back = L.import_kernel_buffers(**L.export_kernel_buffers(t))
    assert_same_tensor(back, t)
    other = fp8emu.quantize_mx(np.ones((v.shape[1], 8), F32), "e4m3fn", axis=0) if t.axis == 1 else \
        fp8emu.quantize_mx(np.ones((8, v.shape[0]), F32), "e4m3fn")
    pair = (lambda a: (a, other)) if t.axis == 1 else (lambda a: (other, a))
    assert np.array_equal(_bits(block_scaled_mm(*pair(back))), _bits(block_scaled_mm(*pair(t))), equal_nan=True)


def test_kernel_buffers_refuse_a_tile_shape_the_scales_do_not_have(x):
    t = fp8emu.quantize_nvfp4(np.nan_to_num(x))
    buf = L.export_kernel_buffers(t)
    buf["block_shape"] = (16, 16)
    with pytest.raises(ValueError, match="tile"):
        L.import_kernel_buffers(**buf)


@pytest.mark.parametrize("ext", [".json", ".npz"])
@pytest.mark.parametrize("options", [
    dict(fmt="e4m3fn"),
    dict(fmt="e5m2", source_dtype="bfloat16", saturate=True, profile="ocp", rounding="rtz"),
    dict(fmt="e2m1fn", rounding="stochastic", seed=7, sr_bits=5),
    dict(fmt="e4m3fnuz", source_dtype="float64", profile="torch-cuda-2.11"),
])
def test_golden_save_load_keeps_every_field(tmp_path, ext, options):
    options = dict(options)
    fmt = options.pop("fmt")
    want = golden_vectors(fmt, **options)
    p = tmp_path / f"g{ext}"
    save_golden(p, fmt, **options)
    got = load_golden(p)
    assert set(got) == set(want) | {"format_version"}
    for k, v in want.items():
        if isinstance(v, np.ndarray):
            assert got[k].dtype == v.dtype and np.array_equal(_bits(got[k]), _bits(v)), k
        else:
            assert got[k] == v and type(got[k]) is type(v), k


@pytest.mark.parametrize("options", [dict(source_dtype="float16"),
                                     dict(source_dtype="bfloat16", profile="torch-cuda-2.11", rounding="rne"),
                                     dict(source_dtype="float16", saturate=True, rounding="rtz")])
def test_golden_rle_keeps_its_options(tmp_path, options):
    from fp8emu.conformance import read_rle
    from fp8emu.testing.golden import save_rle
    p = tmp_path / "t.rle"
    save_rle(p, "e5m2", **options)
    got = load_golden(p)
    want = dict(dict(profile="ocp", rounding="rne", saturate=False), **options, format="e5m2", format_version=1)
    assert {k: got[k] for k in want} == want
    s, c, n = read_rle(p)
    assert np.array_equal(got["starts"], s) and np.array_equal(got["codes"], c) and got["inputs"] == n == 65536
