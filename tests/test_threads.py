"""Thread safety: 16 threads encoding, decoding, quantizing and running scaled_mm with a mix of
formats, profiles and modes (so the table caches fill and evict concurrently) give results
identical, bit for bit, to a serial run; the same with every table cache shrunk to one entry,
so that almost every call evicts what another thread is using."""

import functools
import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np
import pytest

from fp8emu.profiles import UndecidedVersionError

import fp8emu

THREADS = 16


def _inputs():
    g = np.random.default_rng(16)
    x = g.standard_normal(3000) * np.exp2(g.integers(-12, 12, 3000))
    x[::97] = np.nan
    x[::89] = np.inf
    return {"float64": x, "float32": x.astype(np.float32), "float16": x.astype(np.float16),
            "bfloat16": x.astype(ml_dtypes.bfloat16)}


def _jobs():
    """(name, callable) pairs covering every cached path: encode tables per source dtype,
    rounding and saturation, profile tables, decode tables per dtype, SR, and scaled_mm."""
    xs = _inputs()
    jobs = []
    formats = ["e4m3fn", "e5m2", "e4m3fnuz", "e2m1fn", "e8m0fnu", "binary8p3"]
    modes = ["rne", "rtz", "rup", "rdn", "rna", "rto"]
    for i, fmt in enumerate(formats):
        for j, src in enumerate(xs):
            if src == "float64" and i % 3:
                continue                          # float64 tables are 2**20 entries: a few suffice
            mode = modes[(i + j) % len(modes)]
            sat = bool((i + j) % 2)
            jobs.append((f"encode {fmt} {src} {mode} {sat}",
                         functools.partial(fp8emu.encode, xs[src], fmt, rounding=mode, saturate=sat)))
        jobs.append((f"sr {fmt}", functools.partial(fp8emu.encode, xs["float32"], fmt, rounding="stochastic",
                                                    rng=i, sr_bits=8 + i)))
        for dt in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64):
            codes = np.arange(256, dtype=np.uint8) & np.uint8((1 << fp8emu.get_format(fmt).bits) - 1)
            jobs.append((f"decode {fmt} {np.dtype(dt)}", functools.partial(fp8emu.decode, codes, fmt, dtype=dt)))
        jobs.append((f"quantize {fmt}", functools.partial(fp8emu.quantize, xs["float16"], fmt, rounding="rne")))
    for prof in fp8emu.profile_names():
        try:
            p = fp8emu.get_profile(prof)
        except UndecidedVersionError:       # "torch-cuda" without torch: its variants are listed by name
            continue
        for fmt in ("e4m3fn", "e5m2"):
            for src in ("float32", "bfloat16", "float16"):
                try:
                    fp8emu.encode(xs[src][:4], fmt, profile=prof)
                except (ValueError, TypeError):
                    continue                      # not a path this profile covers
                jobs.append((f"profile {p.name} {fmt} {src}",
                             functools.partial(fp8emu.encode, xs[src], fmt, profile=prof)))
            dec = functools.partial(fp8emu.decode, np.arange(256, dtype=np.uint8), fmt, profile=prof)
            try:
                dec()
            except (ValueError, TypeError):
                continue
            jobs.append((f"profile decode {p.name} {fmt}", dec))
    g = np.random.default_rng(17)
    for acc in ("exact", "fp32", "hopper", "hopper-fast"):
        for fa, fb in (("e4m3fn", "e4m3fn"), ("e5m2", "e4m3fn"), ("e4m3fnuz", "e5m2fnuz")):
            a = g.integers(0, 256, (24, 160)).astype(np.uint8)
            b = g.integers(0, 256, (160, 8)).astype(np.uint8)
            jobs.append((f"scaled_mm {acc} {fa} {fb}", functools.partial(
                fp8emu.scaled_mm, a, b, a_format=fa, b_format=fb, accumulator=acc, scale_a=0.5,
                scale_b=np.float32(3.0))))
    return jobs


def _bits(r):
    r = np.asarray(r)
    return r.view(np.uint8).copy() if r.dtype.itemsize else r


def _run_threaded(jobs, rounds=3):
    """Every job ``rounds`` times, interleaved in a shuffled order over 16 threads that start together."""
    order = [i for _ in range(rounds) for i in range(len(jobs))]
    np.random.default_rng(0).shuffle(order)
    barrier = threading.Barrier(THREADS)
    out = [[] for _ in jobs]

    def worker(t):
        barrier.wait()
        for i in order[t::THREADS]:
            out[i].append(_bits(jobs[i][1]()))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(worker, range(THREADS)))
    return out


def _check(jobs, rounds=3):
    _clear_caches()                # the threads fill (and evict) the caches concurrently
    threaded = _run_threaded(jobs, rounds)
    _clear_caches()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        serial = [_bits(fn()) for _, fn in jobs]
    for (name, _), ref, got in zip(jobs, serial, threaded):
        assert got, name
        for r in got:
            np.testing.assert_array_equal(r, ref, err_msg=name)


def _clear_caches():
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("fp8emu"):
            for v in vars(mod).values():
                if isinstance(v, functools._lru_cache_wrapper):
                    v.cache_clear()


def test_threads_match_a_serial_run():
    _check(_jobs())


@pytest.fixture
def tiny_caches(monkeypatch):
    """Every fp8emu lru_cache rebuilt with maxsize=1, in every module that holds it."""
    replaced = {}
    for mod in list(sys.modules.values()):
        if not getattr(mod, "__name__", "").startswith("fp8emu"):
            continue
        for attr, v in list(vars(mod).items()):
            if isinstance(v, functools._lru_cache_wrapper):
                new = replaced.setdefault(id(v), functools.lru_cache(maxsize=1)(v.__wrapped__))
                monkeypatch.setattr(mod, attr, new)
    assert replaced, "no caches found"
    yield replaced


def test_threads_match_a_serial_run_with_one_entry_caches(tiny_caches):
    import fp8emu.tables as tables
    # encode tables live in two caches by size (16-bit/float32 and float64 sources)
    assert tables._table_16_32.cache_info().maxsize == 1 and tables._table_64.cache_info().maxsize == 1
    _check(_jobs(), rounds=2)
    # the caches really were tiny (and evicting): one entry each
    assert all(c.cache_info().currsize <= 1 for c in tiny_caches.values())
