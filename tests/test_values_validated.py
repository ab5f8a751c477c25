"""Values are validated, never wrapped or reinterpreted.

ULP distances are computed from bit patterns with Python integers here (the oracle), and compared with
compare_ulp for every width, float64 included.
"""

from __future__ import annotations

import os
import struct

import ml_dtypes
import numpy as np
import pytest

from fp8emu import testing as T


def _f64_bits(v):
    return struct.unpack("<Q", struct.pack("<d", v))[0]


def _f64(bits):
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def _ordinal_distance(a_bits, b_bits, nbits):
    """Python-int distance between two sign-magnitude patterns (independent of the package)."""
    def ordv(u):
        mag = u & ((1 << (nbits - 1)) - 1)
        return -mag if u >> (nbits - 1) else mag
    return abs(ordv(a_bits) - ordv(b_bits))


@pytest.mark.parametrize("steps", [1, 2, 3, 300, 1 << 40])
def test_compare_ulp_float64_counts_exact_steps(steps):
    one = _f64_bits(1.0)
    a = np.array([_f64(one + steps)])
    e = np.array([1.0])
    r = T.compare_ulp(a, e, "float64")
    assert r.max_distance == steps and isinstance(r.max_distance, int)
    assert r.worst[0]["ulp"] == steps
    assert r.exceeding == 1
    assert T.compare_ulp(a, e, "float64", max_ulp=steps).ok
    assert not T.compare_ulp(a, e, "float64", max_ulp=steps - 1).ok
    T.assert_close_ulp(a, e, "float64", max_ulp=steps)
    with pytest.raises(AssertionError):
        T.assert_close_ulp(a, e, "float64", max_ulp=steps - 1)


def test_compare_ulp_float64_across_zero_and_extremes():
    big = np.finfo(np.float64).max
    pairs = [(0.0, -0.0), (5e-324, -5e-324), (big, -big), (np.inf, -np.inf), (big, np.inf), (-1.0, 1.0)]
    a = np.array([p[0] for p in pairs])
    e = np.array([p[1] for p in pairs])
    r = T.compare_ulp(a, e, "float64", n_worst=len(pairs))
    want = [_ordinal_distance(_f64_bits(x), _f64_bits(y), 64) for x, y in pairs]
    assert want[0] == 0 and want[1] == 2 and want[2] > 2 ** 63   # beyond int64
    got = {w["index"]: w["ulp"] for w in r.worst}
    for i, w in enumerate(want):
        assert got.get(str(i), 0) == w
    assert r.max_distance == max(want)


@pytest.mark.parametrize("dtype,uint", [("float32", np.uint32), ("float16", np.uint16),
                                        ("bfloat16", np.uint16)])
def test_compare_ulp_matches_integer_oracle(dtype, uint):
    rng = np.random.default_rng(5)
    nbits = np.dtype(uint).itemsize * 8
    ab = rng.integers(0, 1 << nbits, 500, dtype=np.uint64).astype(uint)
    eb = rng.integers(0, 1 << nbits, 500, dtype=np.uint64).astype(uint)
    dt = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[dtype]
    a, e = ab.view(dt), eb.view(dt)
    with np.errstate(invalid="ignore"):
        fin = np.isfinite(a.astype(np.float64)) & np.isfinite(e.astype(np.float64))
    a, e, ab, eb = a[fin], e[fin], ab[fin], eb[fin]
    r = T.compare_ulp(a, e, dtype, n_worst=len(a))
    want = [_ordinal_distance(int(x), int(y), nbits) for x, y in zip(ab, eb)]
    assert r.max_distance == max(want)
    got = {w["index"]: w["ulp"] for w in r.worst}
    assert [got.get(str(i), 0) for i in range(len(want))] == want


# ----------------------------------------------------------------------------- raw block-scale codes
from fp8emu import layouts as L  # noqa: E402
from fp8emu.scaling import mx_from_codes, nvfp4_from_codes, quantize_mx, quantize_nvfp4  # noqa: E402


def _nvfp4():
    x = np.linspace(-3, 3, 64, dtype=np.float32).reshape(2, 32)
    return quantize_nvfp4(x)


def test_ue4m3_scale_with_sign_bit_is_rejected():
    t = _nvfp4()
    bad = t.block_scale_codes.copy()
    bad[0, 0] = 0xB8                        # -1.0 in E4M3: would negate its block
    with pytest.raises(ValueError, match=r"block_scale_codes out of range.*0x7f.*0xb8"):
        nvfp4_from_codes(t.codes, bad, t.global_scale)
    buf = L.export_kernel_buffers(t)
    sw = buf["scales"].copy()
    sw[0] = 0xB8
    with pytest.raises(ValueError, match="sign bit"):
        L.import_kernel_buffers(buf["data"], sw, fmt="nvfp4", k=32, global_scale=buf["global_scale"])


@pytest.mark.parametrize("scales", [
    lambda s: s.astype(np.int32),                      # signed: refused whatever the values
    lambda s: s.astype(np.int32) + 256,                # would wrap to the same uint8 codes
    lambda s: s.astype(np.float32),                    # float codes
    lambda s: s.astype(np.float32) + 0.5,
    lambda s: s.astype(bool),
])
def test_import_kernel_buffers_refuses_non_unsigned_scale_codes(scales):
    t = quantize_mx(np.arange(64.0, dtype=np.float32).reshape(2, 32), "e4m3fn")
    buf = L.export_kernel_buffers(t)
    with pytest.raises(TypeError, match="unsigned integer"):
        L.import_kernel_buffers(buf["data"], scales(buf["scales"]), fmt="e4m3fn", k=32)


def test_one_rule_for_codes_everywhere():
    t = quantize_mx(np.arange(64.0, dtype=np.float32).reshape(2, 32), "e4m3fn")
    buf = L.export_kernel_buffers(t)
    wide = buf["scales"].astype(np.uint16)
    u = L.import_kernel_buffers(buf["data"], wide, fmt="e4m3fn", k=32)        # wider unsigned: accepted
    assert np.array_equal(u.scale_codes, t.scale_codes)
    v = mx_from_codes(t.codes.astype(np.uint32), t.scale_codes.astype(np.uint16), "e4m3fn")
    assert np.array_equal(v.codes, t.codes) and v.codes.dtype == np.uint8
    too_big = wide.copy()
    too_big[0] = 256
    with pytest.raises(ValueError, match=r"0\.\.255 \(0x0\.\.0xff"):
        L.import_kernel_buffers(buf["data"], too_big, fmt="e4m3fn", k=32)
    with pytest.raises(ValueError, match=r"0\.\.255 \(0x0\.\.0xff"):
        mx_from_codes(t.codes, t.scale_codes.astype(np.uint16) + 200, "e4m3fn")
    for bad in (t.scale_codes.astype(np.int32), t.scale_codes.astype(np.float64)):
        with pytest.raises(TypeError, match="unsigned integer"):
            mx_from_codes(t.codes, bad, "e4m3fn")
    with pytest.raises(TypeError, match="unsigned integer"):
        nvfp4_from_codes(_nvfp4().codes.astype(np.int16), _nvfp4().block_scale_codes, 1.0)
    with pytest.raises(ValueError, match="0x10"):
        nvfp4_from_codes(np.full((1, 16), 16, np.uint8), np.zeros((1, 1), np.uint8), 1.0)
    with pytest.raises(TypeError, match="unsigned integer"):
        L.pack_fp4(np.array([1, 2], np.int64))


@pytest.mark.parametrize("rows,cols", [(3.7, 2.2), (3.0, 2), (3, np.float64(2.0)), (True, 2), ("3", 2)])
def test_sizes_must_be_integers(rows, cols):
    flat = L.swizzle_scales(np.zeros((3, 2), np.uint8))
    with pytest.raises(TypeError, match="must be an int"):
        L.unswizzle_scales(flat, rows, cols)


def test_kernel_buffer_sizes_must_be_integers():
    t = quantize_mx(np.arange(64.0, dtype=np.float32).reshape(2, 32), "e4m3fn")
    buf = L.export_kernel_buffers(t)
    for kw in ({"k": 32.0}, {"k": 32, "block": 32.5}, {"k": 32, "k_axis": 1.0}, {"k": 32, "k_axis": True}):
        with pytest.raises((TypeError, ValueError)):
            L.import_kernel_buffers(buf["data"], buf["scales"], fmt="e4m3fn", **kw)
    with pytest.raises(TypeError, match="cols"):
        L.swizzled_offset(0, 0, 4.5)
    assert L.unswizzle_scales(L.swizzle_scales(np.ones((3, 2), np.uint8)), np.int64(3), 2).shape == (3, 2)


def test_counts_are_integers_everywhere():
    from fp8emu import dask as fd
    from fp8emu.lab import study
    e = np.float32([1.0, 2.0])
    for kw in ({"n_worst": 2.5}, {"n_worst": True}, {"n_worst": -1}):
        with pytest.raises(ValueError, match="n_worst"):
            T.compare_ulp(e, e, "float32", **kw)
    with pytest.raises(ValueError, match="max_examples"):
        T.compare_codes(np.uint8([0]), np.float32([0.0]), "e4m3fn", max_examples=1.5)
    with pytest.raises(TypeError, match="task_size"):
        fd.float32_runs("e4m3fn", lo=0, hi=1 << 20, task_size=1e5)
    with pytest.raises(TypeError, match="lo"):
        fd.float32_runs("e4m3fn", lo=0.5, hi=1 << 20)
    with pytest.raises(TypeError, match="integer indices"):
        L.swizzled_offset(1.5, 0, 4)
    ref = study.TensorRef("c", "p", "w", (1000, 64), "float32", "npy")
    with pytest.raises(ValueError, match="chunk_elems"):
        study.chunk_ranges(ref, 300.5 * 64)


def test_cluster_options_checked_before_distributed_starts():
    """dask_client refuses a worker count past four per core (at least 8) and a malformed
    scheduler address at once, before importing distributed or starting anything."""
    import time
    from fp8emu.lab.study import dask_client
    from fp8emu.parallel import max_local_workers
    top = max_local_workers()
    assert top >= 8 and top >= 4 * len(os.sched_getaffinity(0))
    t0 = time.perf_counter()
    for bad, exc, needle in ((top + 1, ValueError, f"1..{top}"), (0, ValueError, ">= 1"), (2.0, TypeError, "int"),
                             (True, TypeError, "int")):
        with pytest.raises(exc, match=needle):
            with dask_client(workers=bad):
                pass
    for bad, needle in (("tcp://h:70000", "port 70000"), ("http://h:1", "unknown scheme 'http'"),
                        ("h:1:2", "not a scheduler address")):
        with pytest.raises(ValueError, match=needle):
            with dask_client(scheduler=bad):
                pass
    with pytest.raises(ValueError, match="not both"):
        with dask_client(workers=2, scheduler="tcp://127.0.0.1:8786"):
            pass
    assert time.perf_counter() - t0 < 1.0


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:8786", "127.0.0.1:8786", "tls://sched.example:443",
                                     "tcp://[::1]:8786", "ucx://10.0.0.2:8786", "localhost"])
def test_scheduler_addresses_dask_accepts_pass_the_check(address):
    from fp8emu.parallel import check_scheduler_address
    assert check_scheduler_address(address) == address
