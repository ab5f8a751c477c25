"""Fourth fresh audit: ``fp8emu cpu-order`` sizes with leading zeros, non-ASCII digits and long texts."""

import pytest

from fp8emu.cli import main


@pytest.mark.parametrize("shape, want", [
    ("0" * 32 + "4x8x4", "4x8x4"),              # 33 digits, value 4: was "a size of 33 digits is past what is described"
    ("4x" + "0" * 5000 + "8x4", "4x8x4"),       # int() of 5001 digits: Python's digit limit
    ("004x0384x02", "4x384x2"),
])
def test_leading_zeros_are_no_size(monkeypatch, capsys, shape, want):
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "mkl-2024.2-avx512")
    assert main(["cpu-order", shape, "--threads", "1"]) == 0
    assert f"\n{want} NN: mkl-2024.2-avx512:" in capsys.readouterr().out


@pytest.mark.parametrize("shape, message", [
    ("٠" * 5000 + "4x8x4", "a shape is MxKxN with positive integers"),     # Arabic-Indic zeros: not stripped
    ("4x" + "0" * 5000 + "2000000x4", "K up to 1048576 (2**20) is described"),
    ("0" * 5000 + "0x8x4", "a shape is MxKxN with positive integers"),
])
def test_a_refused_size_is_one_short_line(monkeypatch, capsys, shape, message):
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "mkl-2024.2-avx512")
    assert main(["cpu-order", shape]) == 2
    err = capsys.readouterr().err
    assert message in err and "set_int_max_str_digits" not in err and len(err) < 400
