"""``fp8emu encode`` / ``parse_inputs`` with ``--source-dtype`` float16, bfloat16 or float32 (and the errors it prints
for a zero encoded as NaN, E8M0 having no zero: "rel_error inf" before the fix): a decimal or
hex-float VALUE is "read exactly, rounded to --source-dtype" (the command's description).

Before the fix the text was rounded to the nearest float64 first: a value just above a tie of the
source type landed on the tie in float64, and the tie then went to even, the other way than the value
itself rounds.  The expected values are worked out by hand from the types' spacings at 1 (float16
2**-10, bfloat16 2**-7, float32 2**-23): the tie is half a spacing above 1.  A hex float past float64
(``0x1p+2000``) was Python's OverflowError where ``1e400`` is Inf; the exact reading is bounded (a first
version of the fix computed 10**99999999999 for ``1e-99999999999``).
"""

from __future__ import annotations

import numpy as np
import pytest

from fp8emu.cli import main
from fp8emu.describe import parse_inputs

ABOVE = "0000000000001"      # digits far below float64's precision at 1


@pytest.mark.parametrize("dtype, tie, up", [
    ("float16", "1.00048828125", 1 + 2.0 ** -10),
    ("bfloat16", "1.00390625", 1 + 2.0 ** -7),
    ("float32", "1.000000059604644775390625", 1 + 2.0 ** -23),
])
def test_a_decimal_just_above_a_tie_rounds_up_once(dtype, tie, up):
    got = parse_inputs([tie + ABOVE, "-" + tie + ABOVE, tie, tie[:-1] + str(int(tie[-1]) - 1) + "9" * 12], dtype)
    assert got.astype(np.float64).tolist() == [up, -up, 1.0, 1.0]   # above: up; the tie: to even; below: 1


def test_a_hex_float_past_53_bits_rounds_once_too():
    # 0x1.002p0 is float16's tie 1 + 2**-11; one more bit 2**-68 puts it above
    got = parse_inputs(["0x1.00200000000000001p0", "-0x1.00200000000000001p0", "0x1.002p0"], "float16")
    assert got.astype(np.float64).tolist() == [1 + 2.0 ** -10, -(1 + 2.0 ** -10), 1.0]


def test_a_bfloat16_subnormal_tie_rounds_once_whatever_ml_dtypes_does():
    # bfloat16's smallest subnormal is 2**-133; 2**-134 is the tie between it and 0.  ml_dtypes before 0.7
    # casts float64 through float32, where 2**-134 is exact: a value just above it landed on it, then went to 0
    got = parse_inputs(["0x1.00000000000000001p-134", "-0x1.00000000000000001p-134", "0x1p-134"], "bfloat16")
    assert got.astype(np.float64).tolist() == [2.0 ** -133, -(2.0 ** -133), 0.0]


@pytest.mark.parametrize("text, want", [
    ("1e-400", 0.0), ("-1e-400", -0.0), ("1e400", np.inf), ("-1e400", -np.inf), ("65520", np.inf),
    ("65519.99999999999999999", 65504.0), ("0.1", 0.0999755859375), ("inf", np.inf), ("1.5", 1.5),
])
def test_the_float16_edges_are_as_one_rounding_gives(text, want):
    got = float(parse_inputs([text], "float16")[0])
    assert got == want and np.signbit(got) == np.signbit(want)


def test_the_command_shows_the_source_value_rounded_once(capsys):
    assert main(["encode", "--source-dtype", "float16", "-f", "e5m2", "1.00048828125" + ABOVE]) == 0
    row = capsys.readouterr().out.splitlines()[1]
    assert "= 1.000976562 (0x3c01)" in row


def test_the_float64_default_is_the_nearest_float64_as_before():
    assert parse_inputs(["0.1", "1.00048828125" + ABOVE]).tolist() == [0.1, 1.00048828125]


@pytest.mark.parametrize("text", ["0", "-0"])
def test_a_zero_encoded_as_nan_has_a_nan_relative_error(text):
    # E8M0 has no zero: 0 encodes to its NaN code 0xFF, whose error is NaN, not an infinite relative error
    from fp8emu.describe import encode_lines
    cells = encode_lines([text], "e8m0fnu")[1].split()
    assert cells[1] == "0xFF" and cells[3:] == ["nan", "nan", "nan"]


def test_a_zero_encoded_exactly_still_has_zero_error():
    from fp8emu.describe import encode_lines
    assert encode_lines(["0"], "e4m3fn")[1].split()[-2:] == ["0", "0"]


@pytest.mark.parametrize("text, want", [("1e-99999999999", 0.0), ("-1e-99999999999", -0.0), ("1e99999999999", np.inf),
                                        ("0x1p-99999999999", 0.0), ("0x1p+99999999999", np.inf)])
def test_huge_exponents_are_read_at_once(text, want):
    # the exact reading must not compute 10**99999999999: these are 0 or Inf in every narrower type
    import time
    t0 = time.perf_counter()
    got = float(parse_inputs([text], "float16")[0])
    assert got == want and np.signbit(got) == np.signbit(want) and time.perf_counter() - t0 < 5


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_a_hex_float_past_float64_is_inf_as_a_decimal_is(dtype):
    # 1e400 was Inf and 0x1p+2000 Python's OverflowError "hexadecimal value too large to represent as a float"
    got = parse_inputs(["0x1p+2000", "-0x1p+2000", "1e400"], dtype).astype(np.float64).tolist()
    assert got == [np.inf, -np.inf, np.inf]
