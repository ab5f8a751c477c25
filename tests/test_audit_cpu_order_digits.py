"""``fp8emu cpu-order``: a size of thousands of digits (tests/AUDIT.md, "Third fresh audit of the CPU order, probes,
compile and filters")."""

from fp8emu.cli import main


def test_a_shape_of_thousands_of_digits_is_refused_by_the_bounds_not_pythons_digit_limit(monkeypatch, capsys):
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "mkl-2024.2-avx512")
    for shape in ("4x" + "9" * 5000 + "x4", "9" * 31 + "x8x4"):
        assert main(["cpu-order", shape]) == 2
        err = capsys.readouterr().err
        assert "past what is described" in err and "set_int_max_str_digits" not in err
