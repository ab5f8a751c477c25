"""The wide route's dense step against the reference steps, for every format, accumulator, K
remainder, zero and subnormal operand; and the per-code tables' non-finite test."""

from __future__ import annotations

import dataclasses
import math
import zlib
import numpy as np
import pytest

import fp8emu
from fp8emu.gemm import code_tables, datapaths, models
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
def test_dense_step_equals_the_reference_steps(monkeypatch, fmt, acc):
    rng = np.random.default_rng(len(fmt))
    M, N, K = 37, 19, 300
    a, b = _codes(rng, (M, K), fmt, 4), _codes(rng, (K, N), fmt, 4)
    f = fp8emu.get_format(fmt)
    a[~np.isfinite(fp8emu.decode(a, f))] = 0                # the route takes finite codes
    b[~np.isfinite(fp8emu.decode(b, f))] = 0
    row = dataclasses.replace(acc, formats=(fmt,))
    pad = (-K) % row.step                                     # the route pads K with zero terms
    ref = datapaths.reference(row, np.pad(a, ((0, 0), (0, pad)))[:, None], np.pad(b.T, ((0, 0), (0, pad)))[None],
                              np.zeros((M, N)), fmt, fmt)
    ops = (*code_tables.values_and_exponents(a, f), *code_tables.values_and_exponents(b, f))
    monkeypatch.setattr(wide, "_PATH", "dense")
    got = wide.run_wide(row, *ops)
    np.testing.assert_array_equal(got.view(np.uint64), ref.view(np.uint64))


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
