"""HiFloat8: every code and every float16/bfloat16 input against the oracle written from the paper's
field table (tests/oracle.py), and against en_dtypes' hifloat8 (live where installed, else its recorded
casts in tests/data/hif8, made by tools/record_hif8_vectors.py)."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fp8emu.hifloat import (HIF8_INF_CODE, HIF8_MAX, HIF8_MIN_SUBNORMAL, HIF8_NAN_CODE, hif8_decode,
                            hif8_encode, hif8_values)
from oracle import hif8_code_value, hif8_round

DATA = Path(__file__).resolve().parent / "data" / "hif8"
SOURCES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def all16(src):
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(src)


def oracle_codes(x, rounding, saturate):
    x64 = np.asarray(x).astype(np.float64)
    uniq, inv = np.unique(x64.view(np.uint64), return_inverse=True)
    out = np.array([hif8_round(float(v), rounding, saturate) for v in uniq.view(np.float64)], np.uint8)
    return out[inv.reshape(x64.shape)]


def test_every_code_decodes_as_the_paper_defines_it():
    for c in range(256):
        want, got = hif8_code_value(c), hif8_values()[c]
        if want is None:
            assert math.isnan(got), hex(c)
        else:
            assert got == want and (isinstance(want, float) or Fraction(float(got)) == want), hex(c)
    for dt in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64):
        np.testing.assert_array_equal(hif8_decode(np.arange(256, dtype=np.uint8), dt).astype(np.float64),
                                      hif8_values())


def test_paper_constants():
    # the paper's range: 2**-22 .. 2**15 (38 binades), Inf 0x6F/0xEF, NaN 0x80, a single zero
    v = hif8_values()
    finite = v[np.isfinite(v)]
    assert (HIF8_MAX, HIF8_MIN_SUBNORMAL) == (2.0 ** 15, 2.0 ** -22) == (finite.max(), finite[finite > 0].min())
    assert (v[HIF8_INF_CODE], v[HIF8_INF_CODE | 0x80]) == (math.inf, -math.inf)
    assert np.isnan(v).nonzero()[0].tolist() == [HIF8_NAN_CODE]
    assert (v == 0).nonzero()[0].tolist() == [0]
    assert len(np.unique(finite)) == 256 - 3       # every finite code its own value
    # tapered precision: 8 values per binade around 1, 4 at 2**4..2**7, 2 at 2**8..2**15, 1 below 2**-15
    assert np.sum((finite >= 1) & (finite < 2)) == 8 and np.sum((finite >= 16) & (finite < 32)) == 4
    assert np.sum((finite >= 256) & (finite < 512)) == 2 and np.sum((finite >= 2.0 ** -16) & (finite < 2.0 ** -15)) == 1


@pytest.mark.parametrize("src", SOURCES)
@pytest.mark.parametrize("rounding, saturate", [("rna", False), ("rna", True), ("rne", False), ("rtz", False),
                                                ("rup", False), ("rdn", True)])
def test_every_16bit_input_against_the_oracle(src, rounding, saturate):
    x = all16(SOURCES[src])
    with np.errstate(all="ignore"):
        got = hif8_encode(x, rounding=rounding, saturate=saturate)
    np.testing.assert_array_equal(got, oracle_codes(x, rounding, saturate))


def test_stochastic_rounding_with_given_bits():
    x = np.array([1.0 + 1 / 32, 1.0 + 1 / 32, 20000.0, -3 * 2.0 ** -23])
    # 1 + 1/32 lies 1/4 of the way from 1.0 to 1.125: with 2 random bits it rounds up for r = 3 only
    got = [hif8_encode(x[:1], rounding="stochastic", random_bits=np.array([r], np.uint8), sr_bits=2).item()
           for r in range(4)]
    assert got == [0x08, 0x08, 0x08, 0x09]
    # 20000 between 16384 (0x6C) and 24576 (0x6D): 0.4414... of the way; -3*2**-23 between 2**-22 and 2**-21
    assert hif8_encode(x[2:], rounding="stochastic", random_bits=np.array([0, 255], np.uint8)).tolist() == [0x6C, 0x82]
    r = hif8_encode(np.full(20000, 1.0 + 1 / 32), rounding="stochastic", rng=3)
    assert abs(np.mean(hif8_decode(r, np.float64)) - (1 + 1 / 32)) < 2e-3


# (rounding, saturate, x, code): IEEE 754 section 7.4 -- an overflow rounded toward zero gives the largest
# finite magnitude, away from zero infinity; the direction of rup/rdn depends on the sign (the
# 16-bit sweep runs rdn saturating only, so the sign of rdn's overflow is pinned here)
DIRECTED_OVERFLOW = [("rdn", False, 40000.0, 0x6E), ("rdn", False, -40000.0, 0xEF),
                     ("rdn", False, 32769.0, 0x6E), ("rdn", False, -32769.0, 0xEF),
                     ("rup", False, 40000.0, 0x6F), ("rup", False, -40000.0, 0xEE),
                     ("rup", False, 32769.0, 0x6F), ("rup", False, -32769.0, 0xEE),
                     ("rdn", True, -40000.0, 0xEE), ("rup", True, 40000.0, 0x6E),
                     ("rtz", False, -40000.0, 0xEE), ("rtz", False, 40000.0, 0x6E),
                     ("rdn", False, -32768.0, 0xEE), ("rup", False, 32768.0, 0x6E)]


@pytest.mark.parametrize("rounding, saturate, x, code", DIRECTED_OVERFLOW)
def test_directed_rounding_overflows_by_sign(rounding, saturate, x, code):
    assert hif8_round(x, rounding, saturate) == code                     # the oracle agrees with IEEE 754
    assert hif8_encode(np.array([x]), rounding=rounding, saturate=saturate).tolist() == [code]
    # the same in one array of mixed signs (the direction is decided per element)
    got = hif8_encode(np.array([x, -x]), rounding=rounding, saturate=saturate).tolist()
    assert got == [hif8_round(x, rounding, saturate), hif8_round(-x, rounding, saturate)]


def test_errors():
    with pytest.raises(ValueError, match="unknown rounding 'rto' for HiF8; accepted: rna, rne"):
        hif8_encode([1.0], rounding="rto")
    with pytest.raises(TypeError, match="saturate must be a bool"):
        hif8_encode([1.0], saturate="satfinite")
    with pytest.raises(ValueError, match="needs a source of randomness"):
        hif8_encode([1.0], rounding="stochastic")
    with pytest.raises(ValueError, match="apply only to rounding='stochastic'"):
        hif8_encode([1.0], rng=1)
    with pytest.raises(ValueError, match="0..255"):
        hif8_decode(np.array([256]))
    with pytest.raises(ValueError, match="via must be None or 'float32'"):
        hif8_encode([1.0], via="float16")
    with pytest.raises(TypeError, match="integer array"):
        hif8_decode(np.array([1.0]))
    x = np.array([1.0, 2.0])
    hif8_encode(x)
    assert x.tolist() == [1.0, 2.0]


# ----------------------------------------------------------------------------- en_dtypes
def _recorded():
    with np.load(DATA / "en_dtypes-0.0.4.npz") as z:
        return {k: z[k] for k in z.files}


def test_recorded_en_dtypes_casts():
    """en_dtypes 0.0.4's hifloat8 casts (recorded): every float16/bfloat16 pattern, float32/float64 probes."""
    z = _recorded()
    np.testing.assert_array_equal(hif8_decode(np.arange(256, dtype=np.uint8), np.float64).view(np.uint64),
                                  z["decode/float64"])
    for src, dt in (("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16), ("float32", np.float32),
                    ("float64", np.float64)):
        x = z[f"input/{src}"].view(dt)
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(hif8_encode(x, via="float32"), z[f"encode/{src}"], err_msg=src)
            once = hif8_encode(x)
        if src != "float64":
            np.testing.assert_array_equal(once, z[f"encode/{src}"], err_msg=src)
        else:
            # en_dtypes casts float64 through float32: it differs from the single rounding exactly where
            # the float32 step lands on a HiF8 midpoint (the near-midpoint probes)
            differ = once != z[f"encode/{src}"]
            assert 100 < differ.sum() < 2000
            np.testing.assert_array_equal(once[differ], oracle_codes(x[differ], "rna", False))


def test_live_en_dtypes():
    en = pytest.importorskip("en_dtypes")
    v = np.arange(256, dtype=np.uint8).view(en.hifloat8).astype(np.float64)
    np.testing.assert_array_equal(v, hif8_values())
    rng = np.random.default_rng(41)
    x = rng.integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32).view(np.float32)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(hif8_encode(x), x.astype(en.hifloat8).view(np.uint8))
        x64 = np.nextafter(np.array([28672.0, 1.0625, 3 * 2.0 ** -23]), 0)   # just below three midpoints
        np.testing.assert_array_equal(hif8_encode(x64, via="float32"), x64.astype(en.hifloat8).view(np.uint8))
        assert hif8_encode(x64).tolist() == [0x6D, 0x08, 0x01]               # rounded once: toward zero


@pytest.mark.exhaustive
def test_all_float32_vs_en_dtypes():
    en = pytest.importorskip("en_dtypes")
    step = 1 << 24
    for start in range(0, 1 << 32, step):
        x = np.arange(start, start + step, dtype=np.uint64).astype(np.uint32).view(np.float32)
        with np.errstate(all="ignore"):
            ref = x.astype(en.hifloat8).view(np.uint8)
        got = hif8_encode(x)
        bad = got != ref
        assert not bad.any(), (hex(int(x[bad].view(np.uint32)[0])), got[bad][:4], ref[bad][:4])
