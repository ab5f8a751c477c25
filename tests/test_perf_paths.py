"""Threads, stochastic rounding from every source type, small calls and table caches.

Expectations come from the exact integer core run without tables or threads
(``fast=False``; itself checked against the rational oracle in test_codec.py),
from NumPy's own ``Generator.integers`` stream, from the value oracle and from
the exact-rational oracle; never from the fast paths under test.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import fp8emu
from fp8emu import codec, parallel, tables
from oracle import ValueOracle, round_fraction
from test_codec_fast import exact_encode, sr_inputs

FORMATS = ["e4m3fn", "e5m2", "e4m3fnuz", "e8m0fnu", "e2m1fn", "e3m2fn", "binary8p3"]


def _sources(n, seed=0):
    """Inputs of every non-float32 source type, with specials, subnormals and extremes."""
    x32 = sr_inputs(seed, n)
    rng = np.random.default_rng(seed)
    big = rng.integers(-2 ** 63, 2 ** 63 - 1, x32.size, dtype=np.int64) >> rng.integers(0, 63, x32.size)
    big[:4] = [np.iinfo(np.int64).min, np.iinfo(np.int64).max, 2 ** 53 + 1, -(2 ** 53) - 3]
    with np.errstate(all="ignore"):
        return {
            "float16": x32.astype(np.float16),
            "bfloat16": x32.astype(ml_dtypes.bfloat16),
            "float64": np.concatenate([x32.astype(np.float64) * (1 + 2.0 ** -40), [1e-310, 1e300, -5e-324]]),
            "int8": rng.integers(-128, 128, 3000).astype(np.int8),
            "uint16": rng.integers(0, 1 << 16, 3000).astype(np.uint16),
            "int32": (x32.view(np.int32) >> rng.integers(0, 31, x32.size)).astype(np.int32),
            "int64": big,
            "uint64": big.view(np.uint64),
            "bool": rng.integers(0, 2, 500).astype(bool),
            "float8_e5m2": x32.astype(ml_dtypes.float8_e5m2),
        }


SOURCES = _sources(6000)


@pytest.mark.parametrize("src", list(SOURCES))
@pytest.mark.parametrize("name", FORMATS)
def test_stochastic_every_source_matches_exact_core(src, name):
    f = fp8emu.get_format(name)
    x = SOURCES[src]
    for k in (2, 11, 32):
        r = np.random.default_rng(k).integers(0, 1 << k, size=x.size, dtype=np.uint64)
        r[:30] = 0
        r[30:60] = (1 << k) - 1
        for sat in (False, True):
            got = fp8emu.encode(x, f, rounding="stochastic", saturate=sat, random_bits=r, sr_bits=k)
            np.testing.assert_array_equal(got, exact_encode(x, f, "stochastic", sat, k, r),
                                          err_msg=f"{src} {name} k={k} sat={sat}")
        # with rng: the stream of one rng.integers call over the whole array
        got = fp8emu.encode(x, f, rounding="stochastic", rng=np.random.default_rng(3), sr_bits=k)
        bits = np.random.default_rng(3).integers(0, 1 << k, size=x.size, dtype=np.uint64)
        np.testing.assert_array_equal(got, exact_encode(x, f, "stochastic", False, k, bits))


@pytest.mark.parametrize("src", ["float16", "bfloat16", "float64", "int32"])
def test_stochastic_sources_vs_fraction_oracle(src):
    f = fp8emu.get_format("e4m3fn")
    x = SOURCES[src][:5000]
    x = x[np.isfinite(x.astype(np.float64)) & (x != 0)][:150]
    x = np.concatenate([x, x])                    # force a table build (above the small-input threshold)
    x = np.resize(x, 1 << 13)
    r = np.random.default_rng(1).integers(0, 1 << 8, size=x.size, dtype=np.uint64)
    got = fp8emu.encode(x, f, rounding="stochastic", random_bits=r, sr_bits=8)
    ref = [round_fraction(int(v) if x.dtype.kind == "i" else float(v), f, "stochastic", False, r=int(b), k=8)
           for v, b in zip(x[:300], r[:300])]
    np.testing.assert_array_equal(got[:300], ref)


N_BIG = (1 << 18) + 4099                          # above MIN_PARALLEL, odd, several blocks


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int16])
def test_threads_give_identical_results(dtype):
    x = np.resize(sr_inputs(4, 5000), N_BIG)
    with np.errstate(all="ignore"):
        x = x.astype(dtype)
    f = fp8emu.get_format("e4m3fn")
    with np.errstate(all="ignore"):
        one = fp8emu.encode(x, f, threads=1)
        assert np.array_equal(one, fp8emu.encode(x, f, threads=3))
        assert np.array_equal(one, fp8emu.encode(x, f))               # default: all cores
        for k in (8, 32):
            s1 = fp8emu.encode(x, f, rounding="stochastic", rng=np.random.default_rng(7), sr_bits=k, threads=1)
            s2 = fp8emu.encode(x, f, rounding="stochastic", rng=np.random.default_rng(7), sr_bits=k, threads=2)
            np.testing.assert_array_equal(s1, s2)
            if dtype == np.float32:                                  # and the documented stream
                bits = np.random.default_rng(7).integers(0, 1 << k, size=x.size, dtype=np.uint64)
                np.testing.assert_array_equal(s2, exact_encode(x, f, "stochastic", False, k, bits))
        q1 = fp8emu.quantize(x, f, threads=1)
        np.testing.assert_array_equal(q1, fp8emu.quantize(x, f, threads=2))
    d1 = fp8emu.decode(one, f, threads=1)
    np.testing.assert_array_equal(d1, fp8emu.decode(one, f, threads=2))
    np.testing.assert_array_equal(d1, one.view(ml_dtypes.float8_e4m3fn).astype(np.float32))
    prof = fp8emu.encode(x.astype(np.float32), f, profile="cuda-satfinite", threads=2)
    np.testing.assert_array_equal(prof, fp8emu.encode(x.astype(np.float32), f, profile="cuda-satfinite",
                                                      threads=1))


def test_thread_settings():
    try:
        fp8emu.set_threads(3)
        assert fp8emu.get_threads() == 3
        assert parallel.resolve_threads(None, 10) == 1                # small: one thread
        assert parallel.resolve_threads(None, 1 << 20) == 3
        fp8emu.set_threads(None)
        assert fp8emu.get_threads() >= 1
        for bad in (0, -2):
            with pytest.raises(ValueError, match="threads"):
                fp8emu.set_threads(bad)
            with pytest.raises(ValueError, match="threads"):
                fp8emu.encode([1.0], "e4m3fn", threads=bad)
        # a count past eight per core (at least 64) is refused, not started: a 10**6 typo would
        # start a thread per piece of a large input
        top = max(64, 8 * len(os.sched_getaffinity(0)))
        fp8emu.set_threads(top)
        assert fp8emu.get_threads() == top
        for bad in (top + 1, 10**6):
            with pytest.raises(ValueError, match=f"threads must be in 1..{top}"):
                fp8emu.set_threads(bad)
            with pytest.raises(ValueError, match=f"threads must be in 1..{top}"):
                fp8emu.decode(np.zeros(1 << 20, np.uint8), "e4m3fn", threads=bad)
        assert fp8emu.get_threads() == top
        for bad in (1.5, True, "2"):
            with pytest.raises(TypeError, match="threads"):
                fp8emu.set_threads(bad)
            with pytest.raises(TypeError, match="threads"):
                fp8emu.decode([1], "e4m3fn", threads=bad)
    finally:
        fp8emu.set_threads(None)


@pytest.mark.parametrize("value, expect", [("3", "3"), ("junk", "FP8EMU_THREADS"),
                                           ("1000000", "FP8EMU_THREADS='1000000' is above")])
def test_thread_environment_variable(value, expect, monkeypatch):
    # The variable is read at each call, so this process shows the value's effect; a fresh process (1-3 s
    # each, so for one bad value only) shows that importing fp8emu with it set does not fail.
    code = ("import fp8emu\ntry:\n    print(fp8emu.get_threads())\nexcept ValueError as e:\n    print(e)")
    if value == "junk":
        out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, FP8EMU_THREADS=value),
                             capture_output=True, text=True, cwd=os.path.dirname(os.path.dirname(fp8emu.__file__)),
                             check=True)
        assert expect in out.stdout
    monkeypatch.setenv("FP8EMU_THREADS", value)
    monkeypatch.setattr(parallel, "_setting", None)
    try:
        got = str(fp8emu.get_threads())
    except ValueError as e:
        got = str(e)
    assert expect in got


@pytest.mark.parametrize("name", ["e5m2", "e4m3fn", "binary8p7", "e2m1fn"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.float64])
def test_small_call_path_matches_oracle(dtype, name):
    x = sr_inputs(8, 3000)
    with np.errstate(all="ignore"):
        x = x.astype(dtype)
    f = fp8emu.get_format(name)
    o = ValueOracle(f)
    ref = o(x.astype(np.float64), "rne", False)
    big = np.resize(x, 1 << 13)
    fp8emu.encode(big, f)                         # builds the table and registers the small path
    if x.dtype != np.float64 or f.mbits <= 5:
        assert (f, "rne", False, x.dtype) in codec._FAST
    np.testing.assert_array_equal(fp8emu.encode(x, f), ref)
    grid = x[:3000].reshape(30, 100)
    np.testing.assert_array_equal(fp8emu.encode(grid, f), ref[:3000].reshape(30, 100))
    np.testing.assert_array_equal(fp8emu.encode(grid[:, ::3], f), ref[:3000].reshape(30, 100)[:, ::3])
    np.testing.assert_array_equal(fp8emu.encode(grid.T, f), ref[:3000].reshape(30, 100).T)
    assert fp8emu.encode(x[:0], f).shape == (0,)
    assert fp8emu.encode(x[0], f).shape == ()


def test_small_float64_call_builds_no_table():
    f = dataclasses.replace(fp8emu.get_format("e4m3fn"), name="perf_probe")   # a fresh cache key
    x = sr_inputs(2, 40).astype(np.float64) * (1 + 2.0 ** -35)
    with np.errstate(all="ignore"):
        ref = ValueOracle(fp8emu.get_format("e4m3fn"))(x, "rup", True)   # same fields, the oracle's name
    np.testing.assert_array_equal(fp8emu.encode(x, f, rounding="rup", saturate=True), ref)
    assert tables.cached_encode_table(f, "float64", "rup", True) is None
    big = np.resize(x, 1 << 13)
    np.testing.assert_array_equal(fp8emu.encode(big, f, rounding="rup", saturate=True), np.resize(ref, big.size))
    assert tables.cached_encode_table(f, "float64", "rup", True) is not None


def test_table_cache_holds_many_configurations():
    x = np.resize(sr_inputs(1, 100), 1 << 13).astype(np.float32)
    configs = [(n, m, s) for n in fp8emu.format_names()[:12] for m in ("rne", "rtz", "rup", "rdn")
               for s in (False, True)]
    assert len(configs) > 64
    # tables an earlier test built (e.g. with one-entry caches) may still be alive and reachable
    # through the fast-path dict without being in the LRU cache: start from neither
    codec._FAST.clear()
    tables._live.clear()
    with np.errstate(all="ignore"):
        for n, m, s in configs:
            fp8emu.encode(x, n, rounding=m, saturate=s)
        built = tables._table_16_32.cache_info().misses
        for n, m, s in configs:                   # a second cycle finds every table
            tables.encode_table(fp8emu.get_format(n), "float32", m, s)
    assert tables._table_16_32.cache_info().misses == built


def test_repeated_small_float64_calls_build_the_table_once():
    f = dataclasses.replace(fp8emu.get_format("e5m2"), name="perf_probe_repeat")
    x = np.linspace(-70000.0, 70000.0, 16) * (1 + 2.0 ** -33)
    with np.errstate(all="ignore"):
        ref = ValueOracle(fp8emu.get_format("e5m2"))(x, "rne", False)
    for _ in range(codec._SMALL_CALLS + 1):
        np.testing.assert_array_equal(fp8emu.encode(x, f), ref)
    assert tables.cached_encode_table(f, "float64", "rne", False) is not None
    x32 = x.astype(np.float32)
    fp8emu.encode(x32, f)                         # a small float32 call builds and registers its table
    assert (f, "rne", False, x32.dtype) in codec._FAST
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(fp8emu.encode(x32, f), ValueOracle(fp8emu.get_format("e5m2"))(
            x32.astype(np.float64), "rne", False))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_threads_work_in_a_forked_child():
    x = np.resize(sr_inputs(6, 1000), N_BIG).astype(np.float32)
    with np.errstate(all="ignore"):
        ref = fp8emu.encode(x, "e4m3fn", threads=2)          # the parent's pool exists now
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                             # child: the same call must not hang
        try:
            with np.errstate(all="ignore"):
                ok = np.array_equal(fp8emu.encode(x, "e4m3fn", threads=2), ref)
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.waitpid(pid, 0)
    assert got == b"1"


@pytest.mark.parametrize("src", ["float64", "float16", "int32"])
def test_stochastic_random_bits_of_any_integer_dtype(src):
    x = SOURCES[src]
    f = fp8emu.get_format("e4m3fn")
    r = np.random.default_rng(2).integers(0, 256, x.size)
    ref = exact_encode(x, f, "stochastic", False, 8, r.astype(np.uint64))
    for dt in (np.int64, np.uint8, np.int16, np.uint64):
        got = fp8emu.encode(x, f, rounding="stochastic", random_bits=r.astype(dt), sr_bits=8)
        np.testing.assert_array_equal(got, ref, err_msg=str(np.dtype(dt)))
