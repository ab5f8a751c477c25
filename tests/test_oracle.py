"""The oracle's own format constants agree with an independent peer (gfloat's format definitions)."""

from __future__ import annotations

import math

import pytest

from oracle import SPECS, code_value, expected_nan, spec_max_code

gfloat = pytest.importorskip("gfloat")
F = pytest.importorskip("gfloat.formats")

# gfloat's FormatInfo for the formats it defines.
PEERS = {
    "e4m3fn": F.format_info_ocp_e4m3,
    "e5m2": F.format_info_ocp_e5m2,
    "e8m0fnu": F.format_info_ocp_e8m0,
    "e2m3fn": F.format_info_ocp_e2m3,
    "e3m2fn": F.format_info_ocp_e3m2,
    "e2m1fn": F.format_info_ocp_e2m1,
    **{f"binary8p{p}": F.format_info_p3109(8, p) for p in range(1, 8)},
}


@pytest.mark.parametrize("name", list(PEERS))
def test_every_code_value_matches_gfloat(name):
    fi = PEERS[name]
    s = SPECS[name]
    assert s.bits == fi.bits
    for code in range(1 << s.bits):
        want = gfloat.decode_float(fi, code).fval
        got = code_value(s, code)
        if math.isnan(want):
            assert got is None, (name, code)
        else:
            assert got is not None and float(got) == want, (name, code, got, want)
            if want == 0:   # signed zeros: gfloat's sign must match
                assert math.copysign(1, want) == (-1 if code & s.sign_bit else 1), (name, code)


@pytest.mark.parametrize("name", list(PEERS))
def test_max_and_specials_match_gfloat(name):
    fi = PEERS[name]
    s = SPECS[name]
    assert float(code_value(s, spec_max_code(s))) == fi.max
    assert (s.inf is not None) == (fi.num_posinfs > 0)
    assert len(s.nan) == fi.num_nans
    if fi.num_nans:
        assert (expected_nan(s, False) in s.nan) or s.nan_input is None


def test_specs_state_the_documented_maxima():
    # Constants quoted in the specs: OCP OFP8 448 / 57344, OCP MX 7.5 / 28 / 6 / 2**127, P3109 p3 49152.
    want = {"e4m3fn": 448, "e5m2": 57344, "e2m3fn": 7.5, "e3m2fn": 28, "e2m1fn": 6,
            "e8m0fnu": 2.0 ** 127, "e4m3fnuz": 240, "e5m2fnuz": 57344, "binary8p3": 49152}
    for name, m in want.items():
        assert float(code_value(SPECS[name], spec_max_code(SPECS[name]))) == m, name
