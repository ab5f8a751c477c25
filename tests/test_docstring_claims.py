"""What the docstrings and CLI errors say is true (checked against exact arithmetic)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from fp8emu.cli import main
from fp8emu.scaling.hadamard import TE_WGRAD_SIGNS, hadamard_matrix, rht

from oracle import round_f32


def _exact_rht(block):
    """Exact rational v @ (diag(s) H / 4) of one 16-element block (H from its definition)."""
    out = []
    for j in range(16):
        acc = Fraction(0)
        for i in range(16):
            h = -1 if bin(i & j).count("1") % 2 else 1
            acc += Fraction(float(block[i])) * TE_WGRAD_SIGNS[i] * h / 4
        out.append(acc)
    return out


def test_rht_is_correctly_rounded_within_the_documented_range():
    # magnitudes within 2**25 of each other: the float64 sum is exact, one rounding to float32
    rng = np.random.default_rng(3)
    for _ in range(40):
        mant = rng.uniform(1, 2, 16)
        exp = rng.integers(-12, 13, 16)          # span 2**25 at most
        x = (rng.choice([-1, 1], 16) * mant * 2.0 ** exp).astype(np.float32)
        got = rht(x)
        want = [round_f32(q) for q in _exact_rht(x)]
        assert got.tolist() == want


def test_rht_rounds_twice_outside_it_as_documented():
    # output 0 is (x0 + x1 + x2) / 4 (the first three signs and H's first column are +1)
    assert TE_WGRAD_SIGNS[:3] == (1, 1, 1) and np.all(hadamard_matrix(16)[:, 0] == 1)
    x = np.zeros(16, np.float32)
    x[0], x[1], x[2] = 4.0, 2.0 ** -22, 2.0 ** -78     # 1 + 2**-24 (a float32 tie) + 2**-80
    exact = _exact_rht(x)[0]
    assert exact == 1 + Fraction(1, 2 ** 24) + Fraction(1, 2 ** 80)
    correct = round_f32(exact)                         # above the tie: rounds up
    assert correct == 1 + 2.0 ** -23
    double = round_f32(Fraction(float(exact)))         # float64 first drops 2**-80: tie to even
    assert double == 1.0
    assert float(rht(x)[0]) == double != correct


def _err(capsys, argv):
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    return rc, err


@pytest.mark.parametrize("argv,option", [
    (["golden", "--format", "e4m3fn", "--rounding", "stochastic", "--seed", "-1", "--out", "{d}/g.json"], "--seed"),
    (["golden", "--scaled-mm", "--seed", "-3", "--out", "{d}/g.npz"], "--seed"),
    (["encode", "1.0", "--format", "e4m3fn", "--rounding", "stochastic", "--seed", "-1"], "--seed"),
    (["train-demo", "--seed", "-2", "--steps", "1"], "--seed"),
    (["golden", "--format", "e4m3fn", "--rounding", "stochastic", "--seed", "1", "--sr-bits", "0",
      "--out", "{d}/g.json"], "--sr-bits"),
    (["study", "--demo", "--out", "{d}/s", "--workers", "0"], "--workers"),
    (["study", "--demo", "--out", "{d}/s", "--chunk-mb", "-1"], "--chunk-mb"),
])
def test_cli_errors_name_the_option(tmp_path, capsys, argv, option):
    argv = [a.replace("{d}", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert "error:" in last and option in last, err
    assert "Traceback" not in err


def test_golden_out_lists_every_accepted_extension(tmp_path, capsys):
    rc, err = _err(capsys, ["golden", "--format", "e4m3fn", "--out", str(tmp_path / "g.txt")])
    assert rc == 2 and len(err) == 1 and err[0].startswith("fp8emu golden: error:")
    for ext in (".npz", ".json", ".h", ".hpp", ".cuh", ".rle"):
        assert ext in err[0]
    assert "--out" in err[0] and "save_golden" not in err[0]


def test_te_nvfp4_rht_rounding_is_as_documented():
    """nvfp4_te's step 6 promised one rounding of the exact block sum; its float64 sum gives
    that only while a block's terms span at most 25 binades.  Within: the correctly rounded exact sum;
    outside (the block above): two roundings, as the docstring now says."""
    from fp8emu.scaling.nvfp4_te import _te_rht
    f32 = np.dtype(np.float32)
    rng = np.random.default_rng(40)
    for _ in range(40):
        x = (rng.choice([-1, 1], 16) * rng.uniform(1, 2, 16) * 2.0 ** rng.integers(-12, 13, 16)).astype(np.float32)
        assert _te_rht(x[None], f32, True)[0].tolist() == [round_f32(q) for q in _exact_rht(x)]
    x = np.zeros(16, np.float32)
    x[0], x[1], x[2] = 4.0, 2.0 ** -22, 2.0 ** -78
    exact = _exact_rht(x)[0]
    assert float(_te_rht(x[None], f32, True)[0, 0]) == round_f32(Fraction(float(exact))) != round_f32(exact)
