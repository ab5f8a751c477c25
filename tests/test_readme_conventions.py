"""Every convention the documentation states (docs/reference/formats.md, sections "Conventions"
and "Known differences from ml_dtypes"; the README's before the docs site) is checked here against
the code, with expectations written from the page's own words, the format's spec constants and
ml_dtypes.

Each check names the phrase it verifies; a test fails if the phrase is gone (the page changed:
update the check) and another fails if a bullet has no check at all.
"""

import pathlib
import re

import ml_dtypes
import numpy as np
import pytest

import fp8emu

# The page that states the conventions (kept under the old name: every check below reads it).
README = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "reference" / "formats.md").read_text(encoding="utf-8")
LIBRARY = pathlib.Path(__file__).resolve().parent / "data" / "library_vectors"
NAN = np.float64("nan")


def enc(x, fmt, **kw):
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore"):
        x32 = x.astype(np.float32)
    # float32 where exact (its tables are 16x smaller than float64's, so the checks stay fast)
    same = np.array_equal(x32.astype(np.float64), x, equal_nan=True)
    return fp8emu.encode(x32 if same else x, fmt, **kw).tolist()


def section(title):
    start = README.index(title)
    end = README.index("\n## ", start + len(title))
    return README[start:end]


def bullets(text):
    return [b.strip() for b in re.split(r"\n- ", text)[1:]]


# ----------------------------------------------------------------------------- the checks
def nan_e4m3fn():
    assert enc([NAN, -NAN], "e4m3fn") == [0x7F, 0xFF]


def nan_ieee_quiet():
    for fmt, ml, pos, neg in (("e5m2", ml_dtypes.float8_e5m2, 0x7E, 0xFE),
                              ("e4m3", ml_dtypes.float8_e4m3, 0x7C, 0xFC),
                              ("e3m4", ml_dtypes.float8_e3m4, 0x78, 0xF8)):
        assert enc([NAN, -NAN], fmt) == [pos, neg]
        f = fp8emu.get_format(fmt)
        # all-ones exponent, top mantissa bit set
        assert pos == (((1 << f.ebits) - 1) << f.mbits) | (1 << (f.mbits - 1))
        # "as ml_dtypes"
        got = np.array([np.nan, -np.nan], np.float32).astype(ml).view(np.uint8).tolist()
        assert got == [pos, neg]


def nan_fnuz_p3109():
    names = ["e4m3fnuz", "e5m2fnuz", "e4m3b11fnuz"] + [f"binary8p{p}" for p in range(1, 8)]
    for fmt in names:
        assert enc([NAN, -NAN], fmt) == [0x80, 0x80], fmt


def nan_e8m0():
    assert enc([NAN, -NAN], "e8m0fnu") == [0xFF, 0xFF]


def fp6_fp4_nan_is_plus_max():
    for fmt, maxcode in (("e2m3fn", 0x1F), ("e3m2fn", 0x1F), ("e2m1fn", 0x7)):
        assert enc([NAN, -NAN], fmt) == [maxcode, maxcode]
        assert fp8emu.decode(maxcode, fmt) == fp8emu.get_format(fmt).max


def fp6_fp4_saturate():
    for fmt, maxcode, sign in (("e2m3fn", 0x1F, 0x20), ("e3m2fn", 0x1F, 0x20), ("e2m1fn", 0x7, 0x8)):
        for rounding in ("rne", "rna", "rup", "rdn", "rtz"):
            big = float(np.float32(3e38))
            assert enc([big, -big, np.inf, -np.inf], fmt, rounding=rounding) == \
                [maxcode, maxcode | sign, maxcode, maxcode | sign]


def negative_zero():
    for name in fp8emu.format_names():
        f = fp8emu.get_format(name)
        if not f.signed:
            continue
        neg_zero = f.sign_bit if f.has_negative_zero else 0
        tiny = f.min_subnormal / 4                    # rounds to zero under rne
        assert enc([-0.0, -tiny], name) == [neg_zero, neg_zero], name
        assert enc([0.0, tiny], name) == [0, 0], name


def e8m0_rules():
    f = fp8emu.get_format("e8m0fnu")
    assert enc([0.0, -0.0, -1.0, -2.0 ** -130], f) == [0xFF] * 4          # zero and negatives: NaN
    assert enc([2.0 ** -128, 2.0 ** -140, 5e-324], f) == [0, 0, 0]        # below 2**-127: 2**-127
    assert fp8emu.decode(0, f, dtype=np.float64) == 2.0 ** -127
    # rne ties round up (1.5 between 1 and 2; 3 between 2 and 4), as ml_dtypes
    assert enc([1.5, 3.0, 0.75], f) == [128, 129, 127]
    ml = np.array([1.5, 3.0, 0.75], np.float32).astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)
    assert ml.tolist() == [128, 129, 127]


def p3109_even_code():
    f = fp8emu.get_format("binary8p1")
    v = f.values()
    for c in range(1, 0x7D):                      # positive finite neighbours c, c + 1
        mid = (v[c] + v[c + 1]) / 2
        assert enc([mid], f)[0] == (c if c % 2 == 0 else c + 1), c


def rto_rtz_never_overflow():
    for name in fp8emu.format_names():
        f = fp8emu.get_format(name)
        p3109 = name.startswith("binary8p")
        for rounding in ("rto", "rtz"):
            big = np.float32(3e38)                 # above every format's max
            got = fp8emu.decode(fp8emu.encode(np.array([big, -big]), f, rounding=rounding), f,
                                dtype=np.float64)
            if p3109 and rounding == "rto":        # P3109: the code after max is Inf
                exp = [np.inf, -np.inf]
            else:
                exp = [f.max, -f.max] if f.signed else [f.max, np.nan]
            np.testing.assert_array_equal(got, exp, err_msg=f"{name} {rounding}")


def saturate_true():
    for name in fp8emu.format_names():
        f = fp8emu.get_format(name)
        if not f.signed:
            continue
        x = np.array([3e38, -3e38, np.inf, -np.inf, NAN], np.float32)
        got = fp8emu.decode(fp8emu.encode(x, f, saturate=True), f, dtype=np.float64)
        exp_nan = np.nan if f.has_nan else f.max
        np.testing.assert_array_equal(got, [f.max, -f.max, f.max, -f.max, exp_nan], err_msg=name)


def _recorded(version, key, x):
    """ml_dtypes ``version``'s recorded code for the recorded input nearest ``x`` (tests/data/library_vectors)."""
    src = key.split("/")[2]
    with np.load(LIBRARY / "inputs.npz") as z:
        pats = z[src]
    with np.load(LIBRARY / f"ml_dtypes-{version}.npz") as z:
        codes = z[key]
    vals = pats.view({"float64": np.float64, "float32": np.float32}[src])
    i = int(np.flatnonzero(vals == x)[0])
    return int(codes[i])


def _installed_is_07():
    return tuple(int(v) for v in ml_dtypes.__version__.split(".")[:2]) >= (0, 7)


def float64_rounded_once():
    x = 1.0625 * (1 + 2.0 ** -40)                # above the tie 1.0625 only in float64
    assert enc([x], "e4m3fn") == [0x39]           # fp8emu: 1.125
    assert fp8emu.encode(np.array([x]), "e4m3fn", via="float32").tolist() == [0x38]   # through float32: tie -> 1.0
    assert _recorded("0.6.0", "encode/float8_e4m3fn/float64", x) == 0x38   # 0.5.4-0.6: double rounding
    assert _recorded("0.5.4", "encode/float8_e4m3fn/float64", x) == 0x38
    assert _recorded("0.7.0", "encode/float8_e4m3fn/float64", x) == 0x39   # 0.7: once
    got = np.array([x]).astype(ml_dtypes.float8_e4m3fn).view(np.uint8).tolist()
    assert got == ([0x39] if _installed_is_07() else [0x38])


def e8m0_subnormal_difference():
    x = np.float32(1.25 * 2.0 ** -127)            # nearer 2**-127 than 2**-126
    assert _recorded("0.6.0", "encode/float8_e8m0fnu/float32", x) == 1      # 0.5.4-0.6: 2**-126
    assert _recorded("0.7.0", "encode/float8_e8m0fnu/float32", x) == 0      # 0.7: 2**-127
    got = np.array([x]).astype(ml_dtypes.float8_e8m0fnu).view(np.uint8).tolist()
    assert got == ([0] if _installed_is_07() else [1])
    assert fp8emu.encode(np.array([x]), "e8m0fnu").tolist() == [0]          # fp8emu: 2**-127


def ml_dtypes_fp6_fp4_nan_zero():
    for fmt, ml, sign in (("e2m3fn", ml_dtypes.float6_e2m3fn, 0x20), ("e3m2fn", ml_dtypes.float6_e3m2fn, 0x20),
                          ("e2m1fn", ml_dtypes.float4_e2m1fn, 0x8)):
        got = np.array([np.nan, -np.nan], np.float32).astype(ml).view(np.uint8).tolist()
        assert got == [sign, 0]                   # NaN -> -0, -NaN -> +0
        f = fp8emu.get_format(fmt)
        assert enc([NAN, -NAN], fmt) == [f.max_code, f.max_code]


def ml_dtypes_options():
    # what NumPy's astype (kSaturate = kTruncate = false) does, and fp8emu's two options
    inf = np.array([np.inf, -np.inf, 1e6], np.float32)
    assert np.isnan(inf.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)).all()
    assert enc(inf, "e4m3fn", saturate=True) == [0x7E, 0xFE, 0x7E]
    assert enc([1e6, -1e6], "e5m2", rounding="rtz") == [0x7B, 0xFB]


CHECKS = {
    "`0x7F`/`0xFF` for e4m3fn": nan_e4m3fn,
    "`0x7E`/`0xFE` for e5m2, `0x7C`/`0xFC` for e4m3\n  and `0x78`/`0xF8` for e3m4 (as ml_dtypes)": nan_ieee_quiet,
    "`0x80` for FNUZ and P3109": nan_fnuz_p3109,
    "`0xFF` for e8m0fnu": nan_e8m0,
    "FP6/FP4 have no NaN: NaN becomes `+max`": fp6_fp4_nan_is_plus_max,
    "Overflow and ±Inf\n  in FP6/FP4 always saturate to ±max": fp6_fp4_saturate,
    "−0 and negative values that round to zero give −0 where the format has it, else +0": negative_zero,
    "zero and negative inputs give NaN; positive values below 2^-127 give\n  2^-127": e8m0_rules,
    "For P3109 binary8p1 \"even\" means an even code": p3109_even_code,
    "`rto` (round to odd) and `rtz` never overflow to Inf/NaN in OCP formats; they give ±max. In the P3109\n"
    "  formats `rto` overflows to ±Inf": rto_rtz_never_overflow,
    "`saturate=True`: overflow and ±Inf give ±max; NaN stays NaN": saturate_true,
    "ml_dtypes 0.5.4–0.6 casts float64 arrays through float32 (double rounding); ml_dtypes 0.7 rounds float64 once,\n"
    "  as fp8emu does. `via=\"float32\"` reproduces the double rounding": float64_rounded_once,
    "ml_dtypes 0.5.4–0.6 rounds float32 subnormal inputs in (2^-127, 1.5·2^-127) up to 2^-126 in e8m0fnu, although\n"
    "  2^-127 is nearer; ml_dtypes 0.7 and fp8emu give 2^-127": e8m0_subnormal_difference,
    "ml_dtypes (0.5.4 to 0.7) turns NaN into a zero of the opposite sign in FP6/FP4": ml_dtypes_fp6_fp4_nan_zero,
    "fp8emu's\n  `saturate=True` also maps ±Inf to ±max, and `rounding=\"rtz\"` gives ±max on overflow": ml_dtypes_options,
}


@pytest.mark.parametrize("phrase", list(CHECKS), ids=[f.__name__ for f in CHECKS.values()])
def test_readme_convention_holds(phrase):
    assert phrase in README, f"README no longer says {phrase!r}: update the check"
    CHECKS[phrase]()


@pytest.mark.parametrize("title", ["Conventions (documented per format", "## Known differences from ml_dtypes"])
def test_every_readme_convention_bullet_has_a_check(title):
    for b in bullets(section(title)):
        assert any(p in b for p in CHECKS), f"no check for README bullet: {b[:80]}..."
