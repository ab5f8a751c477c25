"""The lab's subcommands: table, encode, figures, train-demo."""

import importlib.util

import ml_dtypes
import numpy as np
import pytest

from fp8emu.cli import main

HAS_SCALING = importlib.util.find_spec("fp8emu.scaling") is not None


def test_table_lists_every_code_with_ml_dtypes_values(capsys):
    assert main(["table", "e4m3fn"]) == 0
    lines = capsys.readouterr().out.splitlines()[2:]
    assert len(lines) == 256
    ref = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    for code in (0x00, 0x01, 0x38, 0x7E, 0x7F, 0x80, 0xB9):
        hexcode, s, e, m, value = lines[code].split()
        assert int(hexcode, 16) == code
        assert int(s + e + m, 2) == code and len(e) == 4 and len(m) == 3
        assert (np.isnan(ref[code]) and value == "nan") or float(value) == ref[code]


def test_encode_prints_code_bits_value_error(capsys):
    assert main(["encode", "300", "-1e-3", "1e9", "--format", "e4m3fn", "--saturate"]) == 0
    rows = [l.split() for l in capsys.readouterr().out.splitlines()[1:]]
    # 300 -> 288 = 1.001b * 2^8: exponent field 8 + 7 = 1111, mantissa 001 (hand-worked)
    assert rows[0] == ["300", "0x79", "0", "1111", "001", "288", "-12", "-0.04"]
    # 1e-3 is below 2^-9 * 0.75, nearest e4m3fn value is 2^-9 (0x01), sign set -> 0x81
    assert rows[1][1] == "0x81" and float(rows[1][5]) == -(2.0 ** -9)
    assert rows[2][1] == "0x7E" and rows[2][5] == "448"


def test_encode_rounding_option(capsys):
    assert main(["encode", "1.0625", "-r", "rup", "-f", "e4m3fn"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[5] == "1.125"


@pytest.mark.parametrize("argv,needle", [
    (["table", "e9m9"], "unknown format"),
    (["encode", "abc"], "VALUE must be a number"),
    (["encode", "1", "--profile", "no-such-profile"], "profile"),
    (["figures", "--only", "fig99", "--out", "unused"], "unknown figure"),
])
def test_errors_are_one_line_exit_2(argv, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and needle in err


@pytest.mark.parametrize("cmd", ["table", "encode", "figures", "train-demo"])
def test_help(cmd, capsys):
    with pytest.raises(SystemExit) as e:
        main([cmd, "--help"])
    assert e.value.code == 0 and "usage: fp8emu " + cmd in capsys.readouterr().out


def test_figures_list_and_render(tmp_path, capsys):
    assert main(["figures", "--list"]) == 0
    assert "fig1_values_per_binade" in capsys.readouterr().out
    assert main(["figures", "--out", str(tmp_path), "--only", "fig1_values_per_binade", "--quiet"]) == 0
    assert (tmp_path / "fig1_values_per_binade.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(not HAS_SCALING, reason="needs fp8emu.scaling")
def test_train_demo_runs_small(capsys):
    assert main(["train-demo", "--steps", "10", "--train-size", "512", "--quiet"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("float32") and out[2].startswith("fp8")


def test_train_demo_rejects_bad_steps(capsys):
    assert main(["train-demo", "--steps", "0"]) == 2
    assert "argument --steps: expected a positive integer (>= 1), got 0" in capsys.readouterr().err
