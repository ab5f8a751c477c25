"""The stochastic roundings other than ``"stochastic"`` (``stochastic_p3109``, ``stochastic_odd``,
``stochastic_fast``) in the commands and helpers that offer every rounding mode: ``fp8emu encode``,
``fp8emu golden`` / ``golden_vectors`` / ``load_golden``, ``rle_table`` and ``fp8emu.dask``.

Each listed the four modes as choices but took a seed only for ``"stochastic"``, so the other three
could never run (without ``--seed``: "pass rng ... or random_bits", options the command does not have;
with it: "--seed applies only to --rounding stochastic").  The expected codes here come from the
rules as gfloat states them (the fraction ``f`` of the way to the upper neighbour, ``k`` random bits
``r``), computed with exact fractions over an e4m3fn grid built from its bit layout.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from fp8emu.cli import main
from fp8emu.testing import golden

MODES = ("stochastic_p3109", "stochastic_odd", "stochastic_fast")


def _e4m3fn_value(code: int) -> Fraction:
    """The value of a non-NaN e4m3fn code, from its bits (bias 7, 3 mantissa bits)."""
    s, e, m = code >> 7, (code >> 3) & 0xF, code & 7
    v = Fraction(m, 8) * Fraction(2) ** -6 if e == 0 else (1 + Fraction(m, 8)) * Fraction(2) ** (e - 7)
    return -v if s else v


_GRID = sorted({_e4m3fn_value(c) for c in range(0x7F)})      # 0 .. 448, the positive finite values


def _round_half(t: Fraction, odd: bool) -> int:
    lo = math.floor(t)
    if t - lo != Fraction(1, 2):
        return lo + (t - lo > Fraction(1, 2))
    want_odd = odd
    return lo if (lo % 2 == 1) == want_odd else lo + 1


def _expected(x: Fraction, mode: str, r: int, k: int) -> Fraction:
    """The e4m3fn value ``mode`` gives for 0 < x < 448 with random bits ``r`` of ``k``."""
    i = max(j for j, g in enumerate(_GRID) if g <= x)
    lo, hi = _GRID[i], _GRID[i + 1]
    if lo == x:
        return x
    f = (x - lo) / (hi - lo)
    if mode == "stochastic_fast":
        up = f + Fraction(2 * r + 1, 2 ** (k + 1)) >= 1
    else:
        up = _round_half(f * 2 ** k, odd=mode == "stochastic_odd") + r >= 2 ** k
    return hi if up else lo


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k", [3, 32])
def test_golden_vectors_take_a_seed_for_every_stochastic_mode(mode, k):
    g = golden.golden_vectors("e4m3fn", rounding=mode, seed=5, sr_bits=k)
    assert g["rounding"] == mode and g["sr_bits"] == k and g["seed"] == 5
    with np.errstate(invalid="ignore"):          # the signalling NaN inputs
        x = g["x"].astype(np.float64)
    codes, rb = g["codes"], g["random_bits"]
    checked = rounded_up = 0
    for xi, c, r in zip(x.tolist(), codes.tolist(), rb.tolist()):
        if not (0 < xi < 448):
            continue
        assert _e4m3fn_value(int(c)) == _expected(Fraction(xi), mode, int(r), k), (xi, r)
        checked += 1
        rounded_up += _e4m3fn_value(int(c)) > Fraction(xi)
    assert checked > 1000 and 0 < rounded_up < checked


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ext", [".json", ".npz"])
def test_golden_command_writes_and_load_golden_reads_them(tmp_path, capsys, mode, ext):
    out = tmp_path / f"g{ext}"
    assert main(["golden", "--format", "e4m3fn", "--rounding", mode, "--seed", "1", "--sr-bits", "4",
                 "--out", str(out)]) == 0
    g = golden.load_golden(out)
    assert g["rounding"] == mode and g["sr_bits"] == 4 and g["random_bits"].size == g["codes"].size
    with np.errstate(invalid="ignore"):
        x = g["x"].astype(np.float64)
    for xi, c, r in zip(x.tolist(), g["codes"].tolist(), g["random_bits"].tolist()):
        if 0 < xi < 448:
            assert _e4m3fn_value(int(c)) == _expected(Fraction(xi), mode, int(r), 4)


@pytest.mark.parametrize("mode", MODES)
def test_encode_command_runs_every_stochastic_mode_with_a_seed(capsys, mode):
    assert main(["encode", "-r", mode, "--seed", "3", "--sr-bits", "2", "1.1", "1.1", "1.1", "1.1"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert len(rows) == 4 and {r.split()[1] for r in rows} <= {"0x38", "0x39"}   # 1 or 1.125


@pytest.mark.parametrize("mode", MODES + ("stochastic",))
def test_encode_command_asks_for_the_seed_by_its_option(capsys, mode):
    assert main(["encode", "-r", mode, "1.1"]) == 2
    err = capsys.readouterr().err
    assert f"--rounding {mode} needs --seed" in err and "random_bits" not in err


def test_a_seed_without_a_stochastic_mode_names_all_four(capsys):
    assert main(["encode", "-r", "rne", "--seed", "3", "1.1"]) == 2
    assert "stochastic_p3109" in capsys.readouterr().err
    with pytest.raises(ValueError, match="stochastic_fast"):
        golden.golden_vectors("e4m3fn", rounding="rne", seed=1)


@pytest.mark.parametrize("mode", MODES)
def test_no_run_length_table_for_any_stochastic_mode(mode):
    with pytest.raises(ValueError, match="has no table"):
        golden.rle_table("e4m3fn", source_dtype="float16", rounding=mode)


@pytest.mark.parametrize("mode", MODES)
def test_dask_refuses_every_stochastic_mode_as_not_available(mode):
    da = pytest.importorskip("dask.array")
    from fp8emu import dask as fd
    dx = da.from_array(np.linspace(-3, 3, 64), chunks=16)
    for fn in (lambda: fd.encode(dx, "e4m3fn", rounding=mode), lambda: fd.quantize(dx, "e4m3fn", rounding=mode),
               lambda: fd.float32_runs("e4m3fn", lo=0, hi=1 << 10, rounding=mode)):
        with pytest.raises(ValueError, match="not available on dask arrays"):
            fn()
