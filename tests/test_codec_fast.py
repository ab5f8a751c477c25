"""Tests of the codec's fast paths (float64 table, stochastic float32 pattern addition,
raw random draws, chunking).  Expectations come from the independent value oracle,
the exact-rational oracle, NumPy's own ``Generator.integers`` stream, or the exact
integer core run without any table (itself checked against the rational oracle in
test_codec.py)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fp8emu
from fp8emu import codec, random_bits
from oracle import SPECS, ValueOracle, round_fraction

ALL = list(SPECS)
MODES = ["rne", "rna", "rtz", "rup", "rdn", "rto"]


def boundaries_f64(fmt):
    """Every finite value of fmt and every midpoint, +-0..3 float64 ulps, both signs,
    plus float64 extremes and the float32 overflow range."""
    v = fmt.values()
    v = np.unique(np.abs(v[np.isfinite(v)]))
    mids = (v[:-1] + v[1:]) / 2
    top = v[-1] + (v[-1] - v[-2]) * np.array([0.5, 1.0, 1.5, 2.0])   # beyond max
    base = np.concatenate([v, mids, top, v[:1] / 2, [v[v > 0][0] / 2, v[v > 0][0] / 4]])
    pts = [base]
    up, dn = base.copy(), base.copy()
    for _ in range(3):
        up = np.nextafter(up, np.inf)
        dn = np.nextafter(dn, -np.inf)
        pts += [up, dn]
    f32max = float(np.finfo(np.float32).max)
    extra = np.array([5e-324, 1e-320, 2.0 ** -1022, 1e-300, 2.0 ** -149, 2.0 ** -150, 3 * 2.0 ** -151,
                      f32max, np.nextafter(f32max, np.inf), 2.0 ** 128 - 2.0 ** 103,
                      np.nextafter(2.0 ** 128 - 2.0 ** 103, 0), 2.0 ** 128, 1e300,
                      np.finfo(np.float64).max, np.inf, np.nan, 0.0])
    x = np.concatenate(pts + [extra])
    return np.concatenate([x, -x])


@pytest.mark.parametrize("name", ALL)
def test_float64_table_at_every_boundary(name):
    f = fp8emu.get_format(name)
    o = ValueOracle(f)
    x = boundaries_f64(f)
    with np.errstate(all="ignore"):
        for mode in MODES:
            for sat in (False, True):
                np.testing.assert_array_equal(fp8emu.encode(x, f, rounding=mode, saturate=sat),
                                              o(x, mode, sat), err_msg=f"{name} {mode} {sat}")


def sr_inputs(seed, n=20000):
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32)
    y = (rng.standard_normal(n) * 2.0 ** rng.integers(-140, 130, n)).astype(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3.0e38, -3.3e38, 1e-45, -1e-45,
                        2.0 ** -127, 2.0 ** 127 * 1.9, 448.0, 464.0, 57344.0, 61440.0], np.float32)
    return np.concatenate([bits.view(np.float32), y, special])


def exact_encode(x, f, rounding, saturate, k=0, bits=None):
    out = np.empty(x.size, np.uint8)
    codec._encode_flat(x, out, f, rounding, saturate, k, bits, None, fast=False)
    return out


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("k", [1, 8, 17, 18, 24, 32])
def test_stochastic_f32_fast_path_matches_exact_core(name, k):
    f = fp8emu.get_format(name)
    x = sr_inputs(k * 7 + len(name))
    r = np.random.default_rng(k).integers(0, 1 << k, size=x.size, dtype=np.uint64)
    r[:50] = 0
    r[50:100] = (1 << k) - 1                      # the extremes of the random range
    for sat in (False, True):
        got = fp8emu.encode(x, f, rounding="stochastic", saturate=sat, random_bits=r, sr_bits=k)
        np.testing.assert_array_equal(got, exact_encode(x, f, "stochastic", sat, k, r),
                                      err_msg=f"{name} k={k} sat={sat}")


@pytest.mark.parametrize("name", ["e4m3fn", "e5m2", "e8m0fnu", "e4m3fnuz", "e2m1fn", "binary8p7"])
def test_stochastic_f32_fast_path_vs_fraction_oracle(name):
    f = fp8emu.get_format(name)
    x = sr_inputs(5, 120)
    x = x[x != 0]                                 # Fractions have no -0; signed zeros are tested above
    for k in (3, 8, 32):
        r = np.random.default_rng(k).integers(0, 1 << k, size=x.size, dtype=np.uint64)
        got = fp8emu.encode(x, f, rounding="stochastic", random_bits=r, sr_bits=k)
        ref = [round_fraction(float(v), f, "stochastic", False, r=int(b), k=k) for v, b in zip(x, r)]
        np.testing.assert_array_equal(got, ref, err_msg=f"{name} k={k}")


@pytest.mark.parametrize("bg", [np.random.PCG64, np.random.PCG64DXSM, np.random.Philox,
                                np.random.SFC64, np.random.MT19937])
@pytest.mark.parametrize("n", [1, 2, 7, 1000, 1001])
def test_draw_bits_is_the_documented_stream(bg, n):
    for k in (1, 8, 31, 32):
        g1, g2 = np.random.Generator(bg(11)), np.random.Generator(bg(11))
        got = random_bits.draw_bits(g1, k, n)
        ref = g2.integers(0, 2 ** k, size=n, dtype=np.uint64)
        np.testing.assert_array_equal(got, ref)
        # the generators are left in the same state
        np.testing.assert_array_equal(g1.integers(0, 1 << 20, 5), g2.integers(0, 1 << 20, 5))


def test_stochastic_rng_stream_across_chunks(monkeypatch):
    """With several chunks (odd total), rng bits equal one rng.integers call over the array."""
    monkeypatch.setattr(codec, "CHUNK", 64)
    f = fp8emu.get_format("e4m3fn")
    x = sr_inputs(3, 1001)
    for k in (8, 32):
        got = fp8emu.encode(x, f, rounding="stochastic", rng=np.random.default_rng(5), sr_bits=k)
        bits = np.random.default_rng(5).integers(0, 2 ** k, size=x.size, dtype=np.uint64)
        np.testing.assert_array_equal(got, exact_encode(x, f, "stochastic", False, k, bits))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_chunk_boundaries(monkeypatch, dtype):
    monkeypatch.setattr(codec, "CHUNK", 16)
    f = fp8emu.get_format("e5m2")
    x = sr_inputs(9, 999).astype(dtype)[:1003]
    with np.errstate(all="ignore"):
        ref = ValueOracle(f)(x.astype(np.float64), "rne", False)
    np.testing.assert_array_equal(fp8emu.encode(x, f), ref)
    y = x.reshape(-1)[:1000].reshape(10, 100)[:, ::3]      # non-contiguous input
    np.testing.assert_array_equal(fp8emu.encode(y, f), ref[:1000].reshape(10, 100)[:, ::3])
    assert fp8emu.encode(x[:0], f).shape == (0,)


@pytest.mark.parametrize("name", ["e4m3fn", "e5m2"])
def test_chunked_decode_matches_ml_dtypes(monkeypatch, name):
    monkeypatch.setattr(codec, "CHUNK", 16)
    f = fp8emu.get_format(name)
    codes = np.arange(1003, dtype=np.uint32).astype(np.uint8)
    ref = codes.view(f.ml_dtype).astype(np.float32)
    np.testing.assert_array_equal(fp8emu.decode(codes, f), ref)
    grid = codes[:1000].reshape(10, 100)[:, ::3]          # non-contiguous
    np.testing.assert_array_equal(fp8emu.decode(grid, f), ref[:1000].reshape(10, 100)[:, ::3])
    one = fp8emu.decode(np.uint8(0x38), f)
    assert one.shape == () and one == np.uint8(0x38).view(f.ml_dtype).astype(np.float32)
    assert fp8emu.decode(np.zeros((0, 3), np.uint8), f).shape == (0, 3)


@pytest.mark.parametrize("src", ["float16", "bfloat16"])
def test_stochastic_16bit_fast_path_every_pattern(src):
    """Every 16-bit pattern with the extreme and random draws: the pattern addition (and its test
    of which codes it may trust) gives what the exact core gives, for every format."""
    dt = np.float16 if src == "float16" else ml_dtypes.bfloat16
    pats = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dt)
    x = np.concatenate([pats, pats, pats])
    for name in ALL:
        f = fp8emu.get_format(name)
        for k in (3, 32):
            r = np.concatenate([np.zeros(1 << 16, np.uint64), np.full(1 << 16, (1 << k) - 1, np.uint64),
                                np.random.default_rng(k).integers(0, 1 << k, 1 << 16, dtype=np.uint64)])
            for sat in (False, True):
                got = fp8emu.encode(x, f, rounding="stochastic", saturate=sat, random_bits=r, sr_bits=k)
                np.testing.assert_array_equal(got, exact_encode(x, f, "stochastic", sat, k, r),
                                              err_msg=f"{src} {name} k={k} sat={sat}")


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_stochastic_rng_path_holds_exact_elements_across_steps(monkeypatch, dtype):
    """With rng on one thread the whole array is one pass drawing as it goes; elements left to
    the exact core (here a third of them: zeros, target subnormals, specials) are held over
    steps and sent on in batches.  Results equal the exact core fed the documented stream."""
    monkeypatch.setattr(codec, "CHUNK", 64)
    rng = np.random.default_rng(8)
    x = sr_inputs(6, 3000)
    x[rng.integers(0, x.size, x.size // 3)] = 0.0
    with np.errstate(all="ignore"):
        x = x.astype(dtype)
    x = x[:x.size - 1 + x.size % 2]               # an odd size: the last step draws an odd count
    for name in ("e4m3fn", "e5m2", "e4m3fnuz", "e8m0fnu", "e2m1fn", "binary8p3"):
        f = fp8emu.get_format(name)
        for k, sat in ((32, False), (8, True), (19, "satpropagate")):
            got = fp8emu.encode(x, f, rounding="stochastic", saturate=sat, rng=np.random.default_rng(9),
                                sr_bits=k, threads=1)
            bits = np.random.default_rng(9).integers(0, 1 << k, size=x.size, dtype=np.uint64)
            np.testing.assert_array_equal(got, exact_encode(x, f, "stochastic", sat, k, bits),
                                          err_msg=f"{np.dtype(dtype).name} {name} k={k} sat={sat}")


@pytest.mark.parametrize("name", ["e4m3fn", "e5m2", "e4m3fnuz", "e3m4", "e2m3fn", "e2m1fn", "binary8p3"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_stochastic_gaussian_data_never_reaches_the_exact_core(monkeypatch, name, dtype):
    """Finite data, here Gaussian with a quarter zeros and (for FP4/FP6/e3m4) many overflows, stays
    on the fast paths: the pattern addition, and for the codes it does not trust (zeros, target
    subnormals, the smallest normal binade) the fixed-quantum rounding of the held elements.
    (The results are checked against the exact core by the tests above.)"""
    x = (np.random.default_rng(0).standard_normal(1 << 18) * 8).astype(dtype)
    x[::4] = 0
    x[1::8] = -0.0
    f = fp8emu.get_format(name)
    real = codec.encode_exact
    for sat in (False, True, "satpropagate"):
        fp8emu.encode(x[:5000], f, rounding="stochastic", saturate=sat, rng=1)   # tables built
        seen = []
        monkeypatch.setattr(codec, "encode_exact", lambda v, *a, **kw: (seen.append(v.size), real(v, *a, **kw))[1])
        got = fp8emu.encode(x, f, rounding="stochastic", saturate=sat, rng=1, threads=1)
        monkeypatch.setattr(codec, "encode_exact", real)
        assert sum(seen) == 0, (sat, seen)
        bits = np.random.default_rng(1).integers(0, 1 << 32, size=x.size, dtype=np.uint64)
        np.testing.assert_array_equal(got, exact_encode(x, f, "stochastic", sat, 32, bits))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_stochastic_top_fields_and_nan_payloads(dtype):
    """The source's two top exponent fields (where a carry can reach Inf/NaN patterns, and NaNs
    whose payload lies only in the bits below the table index) against the exact core, with the
    smallest, largest and random draws, for every format and overflow mode.  The 64 lowest and 64
    highest mantissas are the edge cases (payload only below the index; a carry out of the field);
    128 random ones cover the middle (512 cost the float64 case 20 s for no site more)."""
    uint, mb = (np.uint32, 23) if dtype == np.float32 else (np.uint64, 52)
    nb = 8 * np.dtype(uint).itemsize
    top = (1 << (nb - 1)) - (1 << mb)             # +Inf
    rng = np.random.default_rng(12)
    mant = np.concatenate([np.arange(64), (1 << mb) - 1 - np.arange(64),
                           rng.integers(0, 1 << mb, 128, dtype=np.uint64)]).astype(np.uint64)
    low = np.array([0, 1, 2], np.uint64)[:, None] << np.uint64(mb)      # fields 255/2047, below, two below
    pats = (np.uint64(top) - low + mant[None, :]).ravel()
    pats = np.concatenate([pats, pats | np.uint64(1 << (nb - 1))]).astype(uint)   # both signs
    x = np.concatenate([pats, pats, pats]).view(dtype)
    for name in ALL:
        f = fp8emu.get_format(name)
        for k in (5, 32):
            r = np.concatenate([np.zeros(pats.size, np.uint64), np.full(pats.size, (1 << k) - 1, np.uint64),
                                rng.integers(0, 1 << k, pats.size, dtype=np.uint64)])
            for sat in (False, True, "satpropagate"):
                got = fp8emu.encode(x, f, rounding="stochastic", saturate=sat, random_bits=r, sr_bits=k)
                np.testing.assert_array_equal(got, exact_encode(x, f, "stochastic", sat, k, r),
                                              err_msg=f"{np.dtype(dtype).name} {name} k={k} sat={sat}")
