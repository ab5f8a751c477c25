"""torchao's quantizers as fp8emu variants, and the MX scale rules of the MXFP8 paper and Trainium3.

Expectations come from torchao itself: vectors recorded by ``tools/record_torchao.py`` (every file in
``tests/data/torchao/``, so the default suite needs neither torch nor torchao), and live torchao where it
is installed.  The MXFP8 paper's RCEIL (fp8emu's ``rceil``) and Trainium3's ``nki`` rule are checked against
exact arithmetic and ml_dtypes.
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import fp8emu
from fp8emu.scaling import torchao_variants

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import record_torchao as rec  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "torchao"
RECORDINGS = sorted(DATA.glob("torchao-*.npz"))
F32 = np.float32
EMAX = {"e4m3fn": 8, "e5m2": 15, "e2m3fn": 2, "e3m2fn": 4, "e2m1fn": 2}


@pytest.fixture(scope="module", params=RECORDINGS, ids=lambda p: p.stem)
def recording(request):
    with np.load(request.param) as d:
        return {k: d[k] for k in d.files}


def test_recordings_exist_and_name_proven_versions():
    assert RECORDINGS, "no recorded torchao vectors"
    versions = sorted(str(np.load(p)["torchao_version"]) for p in RECORDINGS)
    assert torchao_variants.TORCHAO_PROVEN in versions


# ---- MX: 4 scale modes x 5 element types ----

def _mx_mismatches(x, fmt, rule, scale, codes):
    t = fp8emu.quantize_mx(x, fmt, scale_rule=rule, variant="torchao")
    return int((t.scale_codes != scale).sum()), int((t.codes != codes).sum())


@pytest.mark.parametrize("rule", rec.MX_RULES)
@pytest.mark.parametrize("fmt", rec.MX_FORMATS)
def test_mx_torchao_matches_recording(recording, fmt, rule):
    x = recording["mx/x"]
    got = _mx_mismatches(x, fmt, rule, recording[f"mx/{fmt}/{rule}/scale"], recording[f"mx/{fmt}/{rule}/codes"])
    assert got == (0, 0), f"{fmt} {rule}: (scale, element) mismatches {got} of {x.shape[0]} blocks"


@pytest.mark.parametrize("fmt", rec.MX_FORMATS)
def test_mx_default_variant_agrees_with_torchao_where_its_docstring_says(recording, fmt):
    """floor/ceil/even: torchao's scale codes on finite blocks, its elements where the code is not 0."""
    x = recording["mx/x"]
    finite = np.isfinite(x).all(axis=1)
    for rule in ("floor", "ceil", "even"):
        t = fp8emu.quantize_mx(x[finite], fmt, scale_rule=rule)
        scale, codes = recording[f"mx/{fmt}/{rule}/scale"][finite], recording[f"mx/{fmt}/{rule}/codes"][finite]
        assert np.array_equal(t.scale_codes, scale)
        nonzero = scale[:, 0] != 0
        assert np.array_equal(t.codes[nonzero], codes[nonzero])
        assert not np.array_equal(t.codes[~nonzero], codes[~nonzero])      # code 0: 2**127 vs / 2**-126
    rceil = fp8emu.quantize_mx(x[finite], fmt, scale_rule="rceil").scale_codes
    assert (rceil != recording[f"mx/{fmt}/rceil/scale"][finite]).sum() > 100


def _rows(x, predicate):
    return [i for i in range(x.shape[0]) if predicate(x[i])]


def test_mx_edge_blocks_recorded_differ_from_ocp(recording):
    """torchao's Inf / NaN / code-0 blocks, as recorded, and the OCP variant's (255, 2**127) beside them."""
    x = recording["mx/x"]
    inf_only = _rows(x, lambda r: np.isinf(r).any() and not np.isnan(r).any())
    nan_rows = _rows(x, lambda r: np.isnan(r).any())
    for fmt in rec.MX_FORMATS:
        floor = recording[f"mx/{fmt}/floor/scale"][:, 0]
        rceil = recording[f"mx/{fmt}/rceil/scale"][:, 0]
        assert set(floor[inf_only]) == {255 - EMAX[fmt]}            # 247 / 240 / 253 / 251 / 253
        assert set(rceil[inf_only]) == {254}
        assert set(floor[nan_rows]) == set(rceil[nan_rows]) == {255}
        ocp = fp8emu.quantize_mx(x[inf_only], fmt).scale_codes[:, 0]
        assert set(ocp) == {255}
        # NaN blocks: FLOOR sends finite elements to (signed) zero, RCEIL makes every element NaN
        codes_f = recording[f"mx/{fmt}/floor/codes"][nan_rows]
        finite = np.isfinite(x[nan_rows])
        assert set(codes_f[finite] & ~np.uint8(0x80 if fmt in ("e4m3fn", "e5m2") else 1 << (fp8emu.get_format(fmt).bits - 1))) == {0}
    # code-0 blocks: FLOOR divides by 2**-126 (not 2**-127), RCEIL multiplies by 1 (zeros)
    tiny = _rows(x, lambda r: np.isfinite(r).all() and 0 < np.abs(r).max() < 1e-38)
    assert tiny
    floor = recording["mx/e4m3fn/floor/scale"][tiny, 0]
    assert set(floor) == {0}
    ocp = fp8emu.quantize_mx(x[tiny], "e4m3fn")
    expect = fp8emu.encode(np.clip(x[tiny].astype(np.float64) * 2.0 ** 126, -448, 448), "e4m3fn")
    assert np.array_equal(recording["mx/e4m3fn/floor/codes"][tiny], expect)
    assert not np.array_equal(ocp.codes, expect)
    assert set(np.unique(recording["mx/e4m3fn/rceil/codes"][tiny] & 0x7F)) == {0}


def _exact_ceil_log2(q: float) -> int:
    """Smallest E with 2**E >= q > 0 (exact)."""
    m, e = math.frexp(q)
    return e - 1 if m == 0.5 else e


def test_torchao_rceil_is_one_lower_above_max_times_pow2(recording):
    """torchao RCEIL (torch.log2 in float32) vs the exact rule, for amax one ulp above elem_max * 2**k."""
    x = recording["mx/x"]
    amax = np.abs(x).max(axis=1)
    for fmt, fmax in rec.MX_MAX.items():
        lower = tested = 0
        for k in range(-126 + EMAX[fmt], 127 - EMAX[fmt]):
            a = rec._bump(F32(np.ldexp(fmax, k)), 1)           # k < 126: finite
            rows = np.nonzero(amax == a)[0]
            if not rows.size:
                continue
            tested += 1
            exact = 127 + max(-127, min(127, _exact_ceil_log2(float(F32(np.float64(a) / fmax)))))
            got = int(recording[f"mx/{fmt}/rceil/scale"][rows[0], 0])
            assert got in (exact, exact - 1)
            lower += got == exact - 1
            assert int(fp8emu.quantize_mx(x[rows[:1]], fmt, scale_rule="rceil").scale_codes[0, 0]) == exact
        assert tested > 200 and lower > 0.8 * tested, (fmt, lower, tested)


def test_guide_numbers_match_the_recording(recording):
    """The counts docs/guides/scaling.md quotes come from the recorded vectors."""
    guide = (Path(__file__).resolve().parents[1] / "docs" / "guides" / "scaling.md").read_text()
    x = recording["mx/x"]
    assert f"{x.shape[0]:,} blocks of 32 per mode and type" in guide
    nv = sum(recording[k].size for k in recording if k.startswith("nvfp4/") and k.endswith("/x"))
    assert f"{nv // 16:,} blocks of 16 per mode" in guide
    f8 = sum(recording[k].size for k in recording if k.startswith("float8/") and k.endswith("/x"))
    assert f"{f8:,} values per case" in guide
    amax = np.abs(x).max(axis=1)
    tested = lower = 0
    for k in range(-150, 128):
        a = np.ldexp(448.0, k)
        if not 0 < a < np.finfo(F32).max or F32(a) == 0:
            continue
        rows = np.nonzero(amax == rec._bump(F32(a), 1))[0]
        if rows.size:
            tested += 1
            ao = int(recording["mx/e4m3fn/rceil/scale"][rows[0], 0])
            lower += ao != int(fp8emu.quantize_mx(x[rows[:1]], "e4m3fn", scale_rule="rceil").scale_codes[0, 0])
    assert f"for e4m3: {lower} of the {tested} binades" in guide


# ---- NVFP4: two-level and single-level ----

NVFP4_CASES = ("adversarial", "normal", "claim", "zeros", "nan", "negnan", "inf", "neginf")


@pytest.mark.parametrize("mode", ("two", "single"))
@pytest.mark.parametrize("case", NVFP4_CASES)
def test_nvfp4_torchao_matches_recording(recording, case, mode):
    x = recording[f"nvfp4/{case}/x"]
    scale, codes = recording[f"nvfp4/{case}/{mode}/scale"], recording[f"nvfp4/{case}/{mode}/codes"]
    t = fp8emu.quantize_nvfp4(x, variant="torchao", single_level=mode == "single")
    assert int((t.codes != codes).sum()) == 0
    # UE4M3 codes are unsigned: torchao's E4M3 -NaN (0xFF) is held as 0x7F; nothing else differs
    assert np.array_equal(t.block_scale_codes, np.where(scale == 0xFF, 0x7F, scale))
    signed_nan = scale == 0xFF
    if signed_nan.any():
        assert mode == "two" and (not np.isfinite(x).all() or not x.any())


def test_nvfp4_recorded_claims(recording):
    x = recording["nvfp4/claim/x"]
    assert recording["nvfp4/claim/two/scale"][0].tolist() == [0x7C, 0x7E]
    assert fp8emu.quantize_nvfp4(x).block_scale_codes[0].tolist() == [0x7B, 0x7E]
    zeros = recording["nvfp4/zeros/single/scale"]
    assert set(zeros.ravel()) == {0x08}                       # clamped to E4M3's smallest normal
    assert set(fp8emu.quantize_nvfp4(recording["nvfp4/zeros/x"]).block_scale_codes.ravel()) == {0}
    nan_x = recording["nvfp4/nan/x"]
    lone = recording["nvfp4/nan/single/codes"][3, :16]       # block 0 of row 3 holds one NaN: all 0x4
    assert np.isnan(nan_x[3, 5]) and set(lone) == {0x4}


# ---- torchao.float8 (Float8Linear) ----

FLOAT8_CASES = ("normal", "nan", "negnan", "inf", "neginf_zero_tiny", "zeros", "pow2edge_e4m3fn", "pow2edge_e5m2")


@pytest.mark.parametrize("pow2", (False, True), ids=("plain", "pow2"))
@pytest.mark.parametrize("gran", tuple(rec.FLOAT8_AXES))
@pytest.mark.parametrize("fmt", ("e4m3fn", "e5m2"))
@pytest.mark.parametrize("case", FLOAT8_CASES)
def test_float8_torchao_matches_recording(recording, case, fmt, gran, pow2):
    x = recording[f"float8/{case}/x"]
    key = f"float8/{case}/{fmt}/{gran}/{'pow2' if pow2 else 'plain'}"
    axis = rec.FLOAT8_AXES[gran]
    if axis is None:
        t = fp8emu.quantize_tensorwise(x, fmt, pow2=pow2, variant="torchao")
    else:
        t = fp8emu.quantize_axiswise(x, fmt, axis=axis, pow2=pow2, variant="torchao")
    want = recording[key + "/scale"].astype(F32)
    assert np.array_equal(t.scale.reshape(want.shape).view(np.uint32), want.view(np.uint32))
    assert np.array_equal(t.codes, recording[key + "/codes"])


@pytest.mark.parametrize("case", [c for c in FLOAT8_CASES if "nan" not in c])
def test_current_scale_torchao_matches_recorded_tensorwise_scale(recording, case):
    x = recording[f"float8/{case}/x"]
    for fmt in ("e4m3fn", "e5m2"):
        for pow2, tag in ((False, "plain"), (True, "pow2")):
            want = recording[f"float8/{case}/{fmt}/tensorwise/{tag}/scale"].astype(F32)
            got = fp8emu.current_scale(np.abs(x).max(), fmt, pow2=pow2, variant="torchao")
            assert np.float32(got).view(np.uint32) == want.reshape(()).view(np.uint32)


def test_float8_pow2_rounds_up_below_a_power_of_two(recording):
    """torchao's exp2(floor(log2 s)) gives 2**k for s just below 2**k, where TE's bit mask gives 2**(k-1)."""
    checked = 0
    for row in recording["float8/pow2edge_e4m3fn/x"][:, :1]:
        amax = F32(row[0])
        s = F32(np.float64(448) / np.float64(amax))
        m, e = math.frexp(float(s))
        # one float32 ulp below 2**e: log2 is e - 8.6e-8, which rounds to e in float32 where the float32
        # spacing next to e is >= 2**-22 (e >= 3 or e <= -2); amax above torchao's 1e-12 floor
        if amax <= 1e-12 or m != 1 - 2.0 ** -24 or -2 < e < 3:
            continue
        tao = fp8emu.quantize_tensorwise(row, "e4m3fn", pow2=True, variant="torchao")
        te = fp8emu.quantize_tensorwise(row, "e4m3fn", pow2=True)
        assert float(tao.scale) == 2.0 ** e and float(te.scale) == 2.0 ** (e - 1)
        checked += 1
    assert checked > 50
    row = np.array([448 / 16383.999], F32)                     # the example: scale just below 2**14
    assert float(fp8emu.quantize_tensorwise(row, "e4m3fn", pow2=True, variant="torchao").scale) == 16384.0


# ---- the MXFP8 paper's RCEIL and Trainium3's rule, from exact arithmetic and ml_dtypes ----

ML = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2, "e2m3fn": ml_dtypes.float6_e2m3fn,
      "e3m2fn": ml_dtypes.float6_e3m2fn, "e2m1fn": ml_dtypes.float4_e2m1fn}


def _oracle_exponent(amax: float, fmt: str, rule: str) -> int:
    if amax == 0:
        return -127
    if rule == "nki":
        e = math.frexp(amax)[1] - 1 - EMAX[fmt] + 1
    else:
        q = float(F32(np.float64(amax) / rec.MX_MAX[fmt]))        # one rounding (53 >= 2*24+2)
        e = _exact_ceil_log2(q) if q > 0 else -127                # a quotient below 2**-150 is 0
    return max(-127, min(127, e))


@pytest.mark.parametrize("rule,fmt", [("rceil", f) for f in rec.MX_FORMATS] + [("nki", "e4m3fn"), ("nki", "e5m2")])
def test_papers_rceil_and_nki_against_exact_arithmetic(rule, fmt):
    x = rec.mx_inputs(seed=7)
    x = x[np.isfinite(x).all(axis=1)]
    t = fp8emu.quantize_mx(x, fmt, scale_rule=rule)
    e = np.array([_oracle_exponent(float(np.abs(r).max()), fmt, rule) for r in x])
    assert np.array_equal(t.scale_codes[:, 0], (e + 127).astype(np.uint8))
    fmax = rec.MX_MAX[fmt]
    y = np.clip(x.astype(np.float64) * np.exp2(-e.astype(np.float64))[:, None], -fmax, fmax).astype(F32)
    want = y.astype(ML[fmt]).view(np.uint8)
    got = fp8emu.decode(t.codes, fmt).astype(ML[fmt]).view(np.uint8)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("fmt", rec.MX_FORMATS)
def test_rceil_is_the_papers_quotient_rule_for_every_amax(fmt):
    """TE's amax * fl32(1 / max) and the paper's fl32(amax / max), both rounded up: one code for every amax.

    Two float32 roundings of amax / max can only fall on either side of a power of two when amax is within
    a few ulps of max * 2**k; every amax within 256 ulps of each such point is checked.
    """
    fmax = rec.MX_MAX[fmt]
    points = np.array([np.ldexp(fmax, k) for k in range(-150, 128) if 1e-45 < np.ldexp(fmax, k) < 3.4e38], F32)
    bits = points.view(np.uint32).astype(np.int64)[:, None] + np.arange(-256, 257)
    amax = bits[(bits > 0) & (bits < 0x7F800000)].astype(np.uint32).view(F32)
    q = (amax.astype(np.float64) / fmax).astype(F32).astype(np.float64)       # one rounding (53 >= 2*24+2)
    m, e = np.frexp(q)
    want = np.where(q == 0, -127, np.clip(np.where(m == 0.5, e - 1, e), -127, 127)) + 127
    got = fp8emu.quantize_mx(amax[:, None], fmt, block=1, scale_rule="rceil").scale_codes[:, 0]
    assert np.array_equal(got, want.astype(np.uint8))


def test_nki_scale_is_twice_the_ocp_scale():
    x = np.random.default_rng(5).standard_normal((64, 32)) * 100
    for fmt in ("e4m3fn", "e5m2"):
        ocp = fp8emu.quantize_mx(x, fmt).scale_codes.astype(int)
        nki = fp8emu.quantize_mx(x, fmt, scale_rule="nki").scale_codes.astype(int)
        assert np.array_equal(nki, ocp + 1)


# ---- errors ----

@pytest.mark.parametrize("call,match", [
    (lambda: fp8emu.quantize_mx(np.ones(32), "e4m3fn", variant="tao"), "accepted: ocp, torchao"),
    (lambda: fp8emu.quantize_mx(np.ones(32), "e4m3fn", scale_rule="up"), "accepted: floor, ceil, even, rceil, nki"),
    (lambda: fp8emu.quantize_mx(np.ones(32), "e2m1fn", scale_rule="nki"), "MXFP8 only"),
    (lambda: fp8emu.quantize_mx(np.ones(32), "e4m3fn", scale_rule="nki", variant="torchao"), "ScaleCalculationMode"),
    (lambda: fp8emu.quantize_mx(np.ones(32), "e4m3fn", rounding="rtz", variant="torchao"), "rounding must be 'rne'"),
    (lambda: fp8emu.quantize_mx(np.ones(32), "int8", variant="torchao"), "no MXINT8"),
    (lambda: fp8emu.quantize_nvfp4(np.ones(16), variant="mslk"), "accepted: te, torchao"),
    (lambda: fp8emu.quantize_nvfp4(np.ones(16), single_level=True), "variant='torchao'"),
    (lambda: fp8emu.quantize_nvfp4(np.ones(16), variant="torchao", four_over_six=True), "four_over_six"),
    (lambda: fp8emu.quantize_nvfp4(np.ones(16), variant="torchao", single_level=True, global_amax=2.0),
     "global_amax must be None"),
    (lambda: fp8emu.quantize_tensorwise(np.ones(4), "e4m3fn", variant="ao"), "accepted: te, torchao"),
    (lambda: fp8emu.current_scale(1.0, "e4m3fn", variant=None), "accepted: te, torchao"),
    (lambda: fp8emu.current_scale(1.0, "e4m3fn", eps=1e-6, variant="torchao"), "no margin or eps"),
    (lambda: fp8emu.quantize_tensorwise(np.ones(4), "e4m3fn", margin=1, variant="torchao"), "no margin or eps"),
    (lambda: fp8emu.quantize_axiswise(np.ones((2, 4)), "e4m3fnuz", variant="torchao"), "e4m3fn, e5m2"),
])
def test_bad_variant_options_are_one_clear_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_single_level_must_be_bool():
    with pytest.raises(TypeError, match="single_level must be a bool"):
        fp8emu.quantize_nvfp4(np.ones(16), variant="torchao", single_level="yes")


# ---- live torchao ----

@pytest.fixture(scope="module")
def live():
    pytest.importorskip("torch")
    pytest.importorskip("torchao")
    import warnings
    warnings.filterwarnings("ignore")
    return rec


def test_live_mx_all_modes_and_types(live):
    rng = np.random.default_rng(11)
    fresh = (rng.standard_normal((512, 64)) * np.exp2(rng.integers(-135, 125, (512, 1)))).astype(F32)
    fresh[3, 40], fresh[9, 1], fresh[17, 33], fresh[20, :32] = np.inf, np.nan, -np.nan, 0.0
    for x in (live.mx_inputs(seed=99), fresh):
        for fmt in live.MX_FORMATS:
            for rule in live.MX_RULES:
                s, c = live.run_mx(x, fmt, rule)
                assert _mx_mismatches(x, fmt, rule, s, c) == (0, 0), (fmt, rule)


def test_live_nvfp4_two_and_single_level(live):
    for name, x in live.nvfp4_inputs(seed=98).items():
        for two in (True, False):
            s, c = live.run_nvfp4(x, two)
            t = fp8emu.quantize_nvfp4(x, variant="torchao", single_level=not two)
            assert np.array_equal(t.codes, c), (name, two)
            assert np.array_equal(t.block_scale_codes, np.where(s == 0xFF, 0x7F, s)), (name, two)


def test_live_float8(live):
    for name, x in live.float8_inputs(seed=97).items():
        for fmt in ("e4m3fn", "e5m2"):
            for axis in live.FLOAT8_AXES.values():
                for pow2 in (False, True):
                    s, c = live.run_float8(x, fmt, axis, pow2)
                    t = (fp8emu.quantize_tensorwise(x, fmt, pow2=pow2, variant="torchao") if axis is None else
                         fp8emu.quantize_axiswise(x, fmt, axis=axis, pow2=pow2, variant="torchao"))
                    assert np.array_equal(t.scale.reshape(s.shape).view(np.uint32), s.view(np.uint32))
                    assert np.array_equal(t.codes, c), (name, fmt, axis, pow2)


def test_live_log2_model_at_every_power_of_two(live):
    """torch.log2 (float32, CPU) rounds like the float64 log2 rounded once, where ceil/floor can change."""
    import torch
    ulps = np.concatenate([np.arange(-64, 0), np.arange(0, 2048)]).astype(np.int64)
    bases = np.array([np.ldexp(1.0, k) for k in range(-148, 128)], F32).view(np.uint32).astype(np.int64)
    v = (bases[:, None] + ulps[None, :]).ravel()
    v = v[(v > 0) & (v < 0x7F800000)].astype(np.uint32).view(F32)
    got = torch.log2(torch.from_numpy(v)).numpy()
    mine = torchao_variants._log2_f32(v)
    assert np.array_equal(np.ceil(got), np.ceil(mine)) and np.array_equal(np.floor(got), np.floor(mine))


# ---- the RCEIL multiplier of each special scale code ----

# torchao 0.18.0 ``_to_mx_rceil`` (prototype/mx_formats/mx_tensor.py) scales the elements by ``rcp``:
# the NaN descale for code 255, 2**-127 for 254 (Inf), 1.0 for code 0 and 2**(127 - code) otherwise.
# Code 0's elements round to zero under either multiplier, so only the multiplier itself shows it.
@pytest.mark.parametrize("fmt", rec.MX_FORMATS)
def test_rceil_multiplier_of_each_special_code(fmt):
    fmax = float(fp8emu.get_format(fmt).max)
    amax = np.array([0.0, fmax * 2.0 ** -130, fmax * 2.0 ** -127, np.inf, 0.0, fmax * 2.0 ** -126, fmax], F32)
    has_nan = np.array([False, False, False, False, True, False, False])
    codes, mult = torchao_variants.mx_scales(amax, has_nan, fmt, "rceil")
    assert codes.tolist() == [0, 0, 0, 254, 255, 1, 127]
    assert mult[:4].tolist() == [1.0, 1.0, 1.0, 2.0 ** -127] and np.isnan(mult[4])
    assert mult[5:].tolist() == [2.0 ** 126, 1.0]


def test_live_rceil_multiplier_is_torchaos(live):
    import torch
    from torchao.prototype.mx_formats.mx_tensor import _to_mx_rceil
    for fmt in rec.MX_FORMATS:
        fmax = float(fp8emu.get_format(fmt).max)
        amax = np.array([0.0, fmax * 2.0 ** -130, np.inf, np.nan, fmax * 2.0 ** -126, fmax * 3.0], F32)
        # elements of 1.0, not bounded by the amax handed in: what comes back is the multiplier itself
        exp, data = _to_mx_rceil(torch.ones(len(amax)), torch.from_numpy(amax), fmax)
        codes, mult = torchao_variants.mx_scales(np.where(np.isnan(amax), 0, amax), np.isnan(amax), fmt, "rceil")
        assert codes.tolist() == exp.numpy().tolist(), fmt
        want = np.clip(mult, -fmax, fmax)
        np.testing.assert_array_equal(data.numpy().view(np.uint32), want.view(np.uint32), err_msg=fmt)


# ---- torchao's FP4/FP6 code of a NaN, every tie of its rounding ----

def _nan_code(bits, ebits, mbits, bias):
    """torchao's ``_f32_to_floatx_unpacked`` treats a NaN as the normal number with exponent field 255:
    its fraction rounded to ``mbits`` bits, ties to even (exact rationals here), a carry into the
    exponent, the exponent rebiased, the code kept to the format's width, the sign on top."""
    sign, frac = bits >> 31, bits & 0x7FFFFF
    m = round(Fraction(frac, 2 ** (23 - mbits)))          # Python rounds a Fraction's tie to even
    e = 255 - 127 + bias
    if m == 1 << mbits:
        m, e = 0, e + 1
    return (((e << mbits) | m) & ((1 << (ebits + mbits)) - 1)) | (sign << (ebits + mbits))


def _nan_patterns(mbits, rng):
    half = 1 << (22 - mbits)                              # the dropped bits' midpoint
    fracs = {1, half, half - 1, half + 1, 0x7FFFFF, 0x400000, 0x400000 | half, 0x400000 | half | 1}
    fracs |= {(k << (23 - mbits)) | half for k in range(1 << mbits)}          # every tie, kept bit 0 and 1
    fracs |= {(k << (23 - mbits)) | (half - 1) for k in range(1 << mbits)}
    fracs |= set(rng.integers(1, 1 << 23, 2000).tolist())
    f = np.array(sorted(fracs), np.uint32)
    return np.concatenate([0x7F800000 | f, 0xFF800000 | f]).astype(np.uint32)


@pytest.mark.parametrize("fmt", ["e2m1fn", "e2m3fn", "e3m2fn"])
def test_subbyte_nan_codes_round_the_nan_bits_to_nearest_even(fmt):
    f = fp8emu.get_format(fmt)
    bits = _nan_patterns(f.mbits, np.random.default_rng(53))
    got = torchao_variants.subbyte_cast(bits.view(F32), f)
    want = [_nan_code(int(b), f.ebits, f.mbits, f.bias) for b in bits]
    assert got.tolist() == want


def test_live_subbyte_nan_codes_are_torchaos(live):
    import torch
    from torchao.prototype.mx_formats import kernels
    casts = {"e2m1fn": kernels.f32_to_f4_unpacked, "e2m3fn": kernels.f32_to_f6_e2m3_unpacked,
             "e3m2fn": kernels.f32_to_f6_e3m2_unpacked}
    for fmt, cast in casts.items():
        f = fp8emu.get_format(fmt)
        bits = _nan_patterns(f.mbits, np.random.default_rng(54))
        want = cast(torch.from_numpy(bits.view(F32).copy())).numpy()
        np.testing.assert_array_equal(torchao_variants.subbyte_cast(bits.view(F32), f), want, err_msg=fmt)
        assert want.tolist() == [_nan_code(int(b), f.ebits, f.mbits, f.bias) for b in bits]
