"""The codec's fast paths: each against the path it replaces."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import fp8emu
from fp8emu import tables


def _f32_patterns(rng, n):
    u = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    # every exponent, with lower halves 0, 1 and random, and bit 16 on and off
    e = np.arange(256, dtype=np.uint32) << np.uint32(23)
    m = rng.integers(0, 1 << 23, 256 * 8, dtype=np.uint32)
    m[::8] &= np.uint32(0xFFFF0000)
    m[1::8] = (m[1::8] & np.uint32(0xFFFF0000)) | np.uint32(1)
    m[2::8] ^= np.uint32(1 << 16)
    extra = (np.repeat(e, 8) | m)
    return np.concatenate([u, extra, extra | np.uint32(1 << 31)]).view(np.float32)


@pytest.mark.parametrize("name", fp8emu.format_names())
@pytest.mark.parametrize("rounding", ["rne", "rtz", "rup"])
def test_sticky16_lookup_equals_full_table(name, rounding):
    fmt = fp8emu.get_format(name)
    if not tables.sticky16_ok(fmt, np.float32):
        pytest.skip("format keeps too many fraction bits for the half table")
    x = _f32_patterns(np.random.default_rng(len(name)), 1 << 18)
    table = tables.encode_table(fmt, "float32", rounding, False)
    full, half = np.empty(x.size, np.uint8), np.empty(x.size, np.uint8)
    tables.lookup(x, full, table)
    tables.lookup(x, half, table, sticky16=True)
    np.testing.assert_array_equal(half, full)


def test_sticky16_refuses_wide_formats():
    assert tables.sticky16_ok(fp8emu.get_format("binary8p6"), np.float32)      # 5 fraction bits
    assert not tables.sticky16_ok(fp8emu.get_format("binary8p7"), np.float32)  # 6
    assert not tables.sticky16_ok(fp8emu.get_format("e4m3fn"), np.float64)


def test_first_encode_does_not_load_numpy_ma():
    code = ("import sys, numpy as np, fp8emu; fp8emu.encode(np.array([1.0, 2.0]), 'e4m3fn'); "
            "print('numpy.ma' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    # masked arrays are still refused
    with pytest.raises(ValueError, match="masked array"):
        fp8emu.encode(np.ma.masked_array([1.0], mask=[True]), "e4m3fn")


@pytest.mark.parametrize("name", ["e4m3fn", "e5m2", "e2m1fn"])
def test_small_call_fast_path_equals_general_path(name):
    # the small-call path (after the general path has registered the table) on 16-bit halves
    x = _f32_patterns(np.random.default_rng(3), 4096)
    ref = fp8emu.encode(x, name, threads=1)                 # general path; registers the small path
    from fp8emu import codec
    assert (fp8emu.get_format(name), "rne", False, np.dtype(np.float32)) in codec._FAST
    for shape in ((16,), (4, 4), (2, 3, 8)):
        n = int(np.prod(shape))
        for i in range(0, x.size - n, 997):
            xs = x[i:i + n].reshape(shape)
            np.testing.assert_array_equal(fp8emu.encode(xs, name), ref[i:i + n].reshape(shape))
            np.testing.assert_array_equal(fp8emu.encode(xs[..., ::-1], name),
                                          ref[i:i + n].reshape(shape)[..., ::-1])   # not contiguous


def test_encoder_plan():
    f = fp8emu.get_format("e5m2")
    plan = tables.encoder_plan(f, np.float32, "rtz", True)
    assert plan.table is tables.encode_table(f, "float32", "rtz", True) and plan.sticky16
    x = _f32_patterns(np.random.default_rng(9), 5000)
    out = np.empty(x.size, np.uint8)
    plan(x, out)
    np.testing.assert_array_equal(out, tables.encode_exact(x, f, "rtz", True))
    # the build policy: a table not cached and not worth building yet gives no plan
    g = fp8emu.Format("plan-test", ebits=4, mbits=3, bias=7)
    assert tables.encoder_plan(g, np.float64, "rne", False, build=lambda src: False) is None
    assert tables.encoder_plan(g, np.float64, "rne", False) is not None
    assert tables.encoder_plan(g, np.float64, "rne", False, build=lambda src: False) is not None  # cached
    assert tables.encoder_plan(f, np.int32, "rne", False) is None


def test_a_table_evicted_but_alive_is_handed_out_again():
    """One table per key: after the cache drops a table that a caller still holds, encode_table and
    encoder_plan give that same table (they gave a second, freshly built copy before)."""
    f = fp8emu.Format("evict-test", ebits=4, mbits=3, bias=7)
    held = tables.encode_table(f, "float32", "rne", False)
    tables._table_16_32.cache_clear()
    again = tables.encode_table(f, "float32", "rne", False)
    assert again is held
    assert tables.encoder_plan(f, np.float32, "rne", False).table is held


@pytest.mark.parametrize("src", ["float16", "bfloat16"])
def test_16_bit_lookup_in_chunks_is_every_pattern(monkeypatch, src):
    """The 16-bit sources index their table a chunk at a time (small chunks here, so every boundary
    and a ragged last chunk are crossed): every pattern, in a shuffled order, against the exact
    encoder, for a saturating and a non-saturating table."""
    import ml_dtypes
    from oracle import ValueOracle
    monkeypatch.setattr(tables, "CHUNK", 97)
    dt = np.float16 if src == "float16" else ml_dtypes.bfloat16
    pats = np.random.default_rng(3).permutation(np.arange(1 << 16, dtype=np.uint32).astype(np.uint16))
    x = pats.view(dt)
    for name, sat in (("e4m3fn", True), ("e5m2", False)):
        f = fp8emu.get_format(name)
        with np.errstate(all="ignore"):
            want = ValueOracle(f)(x.astype(np.float64), "rne", sat)
        out = np.empty(x.size, np.uint8)
        tables.lookup(x, out, tables.encode_table(f, src, "rne", sat))
        np.testing.assert_array_equal(out, want)
