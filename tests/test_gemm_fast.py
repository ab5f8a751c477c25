"""The wide route's exponent-maximum product and reused buffers against the per-term path.

The step maximum ``max_k(ea_k + eb_k)`` read off one matrix product of exponent
weights must equal the elementwise maximum (the original algorithm, still used
when weights would leave float64's range), for every format, accumulator,
K remainder, zero, subnormal and non-finite operand.
"""

from __future__ import annotations

import math
import zlib
import numpy as np
import pytest

import fp8emu
from fp8emu.gemm import code_tables, models
from fp8emu.gemm.routes import wide

#: Rows of unbounded exponents of three step widths (step, fraction bits, result bits, rounding).
ACCS = [models.wide_row(models.step_row(32, 13, 14, "rtz")), models.wide_row(models.step_row(8, 20, 22, "rne")),
        models.step_row(64, 30, 30, "rtz")]


def _codes(rng, shape, fmt, scale):
    x = rng.standard_normal(shape) * scale * np.exp2(rng.integers(-12, 12, shape))
    x[rng.random(shape) < 0.05] = 0.0
    with np.errstate(over="ignore"):
        return fp8emu.encode(x, fmt, saturate=True)


@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2", "e2m1fn", "e3m2fn", "e4m3fnuz"])
@pytest.mark.parametrize("acc", ACCS, ids=lambda a: f"g{a.step}")
def test_weights_path_equals_elementwise_path(monkeypatch, fmt, acc):
    rng = np.random.default_rng(len(fmt))
    M, N, K = 37, 19, 300
    a, b = _codes(rng, (M, K), fmt, 4), _codes(rng, (K, N), fmt, 4)
    f = fp8emu.get_format(fmt)
    if f.has_nan:
        a[0, 5] = f.nan_code
    ops = (*code_tables.values_and_exponents(a, f), *code_tables.values_and_exponents(b, f))
    monkeypatch.setattr(wide, "_PATH", "dense")            # the steps that read the exponent maximum
    fast = wide.run_wide(acc, *ops)
    monkeypatch.setattr(wide, "_exponent_weights", lambda eat, eb, G: (None, None, 1, 0))
    slow = wide.run_wide(acc, *ops)
    np.testing.assert_array_equal(fast.view(np.uint32), slow.view(np.uint32))


def test_exponent_weights_give_the_maximum():
    rng = np.random.default_rng(3)
    for G in (1, 7, 32, 63, 64, 200):
        ea = rng.integers(-20, 20, (G, 30)).astype(np.int16)
        eb = rng.integers(-20, 20, (G, 40)).astype(np.int16)
        ea[rng.random(ea.shape) < 0.3] = code_tables.ZERO_EXP
        eb[:, 0] = code_tables.ZERO_EXP                       # an all-zero column
        wat, wb, c, shift = wide._exponent_weights(ea, eb, G)
        S = wat.T @ wb
        _, e = np.frexp(S)
        got = np.where(S > 0, (e.astype(np.int64) - 1) // c + shift, -99999)
        sums = ea[:, :, None].astype(np.int64) + eb[:, None, :]
        sums = np.where((ea[:, :, None] > code_tables.ZERO_EXP) & (eb[:, None, :] > code_tables.ZERO_EXP), sums, -99999)
        np.testing.assert_array_equal(got, sums.max(axis=0), err_msg=f"G={G}")
    span = np.array([[-400], [400]], np.int16)       # a span float64 weights cannot hold
    assert wide._exponent_weights(span, span, 32)[0] is None


@pytest.mark.parametrize("name", ["e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz", "e4m3b11fnuz", "e3m4", "e4m3",
                                  "binary8p3", "e3m2fn", "e2m3fn", "e2m1fn"])
def test_any_nonfinite_finds_every_inf_and_nan_code(name):
    # per code, then in arrays: the one-code arrays, every code with one non-finite code dropped in at
    # a random place of a strided view, and all finite codes (the spec formula decides, not fp8emu);
    # FP6/FP4 codes carry junk above their bits, which must be ignored
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    import oracle
    s = oracle.spec(name)
    bits = 1 + s.ebits + s.mbits
    fmt = fp8emu.get_format(name)
    bad = [c for c in range(1 << bits) if (v := oracle.code_value(name, c)) is None or v in (math.inf, -math.inf)]
    good = np.array(sorted(set(range(1 << bits)) - set(bad)), np.uint8)
    high = np.uint8(0xFF ^ ((1 << bits) - 1)) if bits < 8 else np.uint8(0)
    for c in range(1 << bits):
        assert code_tables.any_nonfinite(np.array([c | high], np.uint8), fmt) == (c in bad), (name, c)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    for c in bad:
        x = rng.choice(good, (24, 40)) | high
        x[rng.integers(24), 2 * rng.integers(20)] = c
        assert code_tables.any_nonfinite(x[:, ::2], fmt)
        assert not code_tables.any_nonfinite(x[:, 1::2], fmt)
    assert not code_tables.any_nonfinite(good | high, fmt)
