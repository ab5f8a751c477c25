"""Every recorded H200 table is reproduced bit-exactly by its profile."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fp8emu.profiles import UndecidedVersionError

import fp8emu
from fp8emu.data import golden_dir
from fp8emu.conformance import read_rle, recorded_tables, rle_at
from oracle import ValueOracle

GOLDEN = golden_dir()
TABLES = recorded_tables(str(GOLDEN))
CASTS = [t for t in TABLES if t.kind in ("cast", "cast16")]
DECODES = [t for t in TABLES if t.kind == "decode"]
SRC_DT = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
UINT = {"float32": np.uint32, "float16": np.uint16, "bfloat16": np.uint16}
N_RANDOM = 10 ** 6


def _recorded(t):
    """(starts, codes, n) of a recorded cast table."""
    if t.kind == "cast":
        return read_rle(t.path)
    with np.load(t.path) as z:
        a = z[t.key].astype(np.int64)
    return np.arange(a.size, dtype=np.uint64), a, a.size


def _cast(t, pats):
    x = pats.astype(UINT[t.src]).view(SRC_DT[t.src])
    return fp8emu.encode(x, t.fmt, profile=t.profile, rounding=t.rounding).astype(np.int64)


def test_every_recorded_file_is_covered():
    names = {t.name for t in TABLES}
    assert len([p for p in GOLDEN.glob("*.rle")]) == len([t for t in TABLES if t.path.endswith(".rle")])
    assert "torch_f32_e8m0fnu" in names and "torch_f16_to_e5m2" in names and "torch_e5m2_to_f64" in names
    assert len(CASTS) == 44 and len(DECODES) == 26


@pytest.mark.parametrize("t", CASTS, ids=lambda t: t.name)
def test_cast_table_boundaries_and_random(t):
    s, c, n = _recorded(t)
    if n <= 1 << 16:
        pats = np.arange(n, dtype=np.uint64)
    else:
        b = s.astype(np.int64)
        edges = np.concatenate([b - 1, b, b + 1, [n - 1]])
        rnd = np.random.default_rng(abs(hash(t.name)) % 2**32).integers(0, n, N_RANDOM, dtype=np.uint64)
        pats = np.concatenate([edges[(edges >= 0) & (edges < n)].astype(np.uint64), rnd])
    got = _cast(t, pats)
    want = rle_at(s, c, pats)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"{t.name}: {bad.size} mismatches, first at {hex(int(pats[bad[0]]))}"


@pytest.mark.parametrize("t", DECODES, ids=lambda t: t.name)
def test_decode_tables(t):
    f = fp8emu.get_format(t.fmt)
    codes = np.arange(1 << f.bits, dtype=np.uint8)
    dt = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64}[t.dtype]
    uint = {"f16": np.uint16, "bf16": np.uint16, "f32": np.uint32, "f64": np.uint64}[t.dtype]
    got = fp8emu.decode(codes, f, dtype=dt, profile=t.profile).view(uint).astype(np.uint64)
    if t.key is None:
        s, c, _ = read_rle(t.path)
        want = rle_at(s, c, codes.astype(np.uint64)).astype(np.uint64)
    else:
        with np.load(t.path) as z:
            want = z[t.key].astype(np.uint64)
    np.testing.assert_array_equal(got, want)


MID_FMTS = ["e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz", "e8m0fnu"]


@pytest.mark.parametrize("fmt", MID_FMTS)
def test_float64_midpoints_double_rounding(fmt):
    with np.load(GOLDEN / "torch_f64_midpoints.npz") as z:
        x, from64, from32 = z[f"{fmt}_x"], z[f"{fmt}_from_f64"], z[f"{fmt}_from_f32"]
    np.testing.assert_array_equal(fp8emu.encode(x, fmt, profile="torch-cuda-2.11"), from64)
    with np.errstate(over="ignore"):
        x32 = x.astype(np.float32)
    np.testing.assert_array_equal(fp8emu.encode(x32, fmt, profile="torch-cuda-2.11"), from32)
    # ocp rounds once from the exact float64 value: it agrees with the independent oracle
    ocp = fp8emu.encode(x, fmt)
    if fmt != "e8m0fnu":
        finite = np.isfinite(x)
        want = ValueOracle(fp8emu.get_format(fmt))(x[finite], "rne", False)
        np.testing.assert_array_equal(ocp[finite], want)
        # and the double rounding is visible on these probes (1 ulp of float32 decides ties)
        assert np.count_nonzero(ocp != from64) > 0


def test_profiles_listing():
    p = fp8emu.profile_names()
    assert list(p)[:8] == ["ocp", "ml_dtypes", "torch-cuda", "cuda-satfinite", "cuda-nosat", "triton-rtne",
                       "triton-rtz", "jax-gpu"]
    assert all(isinstance(v, str) and "\n" not in v and v for v in p.values())


def test_ocp_profile_is_plain_encode():
    x = np.random.default_rng(1).standard_normal(10000).astype(np.float32) * 300
    for fmt in ("e4m3fn", "e5m2", "e2m1fn"):
        np.testing.assert_array_equal(fp8emu.encode(x, fmt, profile="ocp", saturate=True),
                                      fp8emu.encode(x, fmt, saturate=True))


def test_ml_dtypes_profile_matches_ml_dtypes():
    rng = np.random.default_rng(2)
    bits = rng.integers(0, 2**32, 200000, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([bits.view(np.float32), rng.standard_normal(10000).astype(np.float32)])
    x64 = rng.standard_normal(10000) * 100
    for fmt in ("e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz", "e8m0fnu", "e2m1fn", "e3m2fn"):
        f = fp8emu.get_format(fmt)
        with np.errstate(all="ignore"):
            for v in (x, x64, x.astype(np.float16), x.astype(ml_dtypes.bfloat16)):
                np.testing.assert_array_equal(fp8emu.encode(v, fmt, profile="ml_dtypes"),
                                              v.astype(f.ml_dtype).view(np.uint8), err_msg=fmt)


def test_profiles_part_on_overflow_and_a_negative_nan():
    x = np.array([464.33], np.float32)
    assert fp8emu.encode(x, "e4m3fn", profile="cuda-satfinite")[0] == 0x7E
    assert fp8emu.encode(x, "e4m3fn", profile="triton-rtne")[0] == 0x7E
    assert fp8emu.encode(x, "e4m3fn", profile="torch-cuda-2.11")[0] == 0x7F
    assert fp8emu.encode(x, "e4m3fn", profile="ml_dtypes")[0] == 0x7F
    nan = np.array([-np.nan], np.float32)
    assert fp8emu.encode(nan, "e5m2", profile="cuda-nosat")[0] == 0x7F
    assert fp8emu.encode(nan, "e5m2", profile="torch-cuda-2.11")[0] == 0xFF
    assert fp8emu.encode(nan, "e5m2")[0] == 0xFE
    # quantize passes the profile through
    q = fp8emu.quantize(np.array([1e6], np.float32), "e5m2", profile="cuda-satfinite")
    assert q[0] == 57344.0


def test_e8m0_rules_hand_worked():
    x = np.array([0.0, -1.0, 1.5, 2.5, 1.0000001, 3.0 * 2.0**-128, 2.0**-127], np.float32)
    # torch: float32 significand rounded to nearest, ties up (1.5 -> 2); in the float32 subnormal
    # range the significand 0.75 (3*2^-128) rounds up to 2^-126, 0.5 (2^-127) stays
    assert fp8emu.encode(x, "e8m0fnu", profile="torch-cuda-2.11").tolist() == [0, 127, 128, 128, 127, 1, 0]
    assert fp8emu.encode(x, "e8m0fnu", profile="cuda-nosat", rounding="rtz").tolist() == \
        [0, 127, 127, 128, 127, 0, 0]
    assert fp8emu.encode(x, "e8m0fnu", profile="cuda-nosat", rounding="rup").tolist() == \
        [0, 127, 128, 129, 128, 1, 0]


@pytest.mark.parametrize("profile, fmt, kw, msg", [
    ("triton-rtz", "e4m3fn", {"rounding": "rtz"}, "cannot express format 'e4m3fn'"),
    ("triton-rtne", "e4m3fnuz", {}, "cannot express"),
    ("cuda-nosat", "e8m0fnu", {}, "offers: rtz, rup"),
    ("cuda-satfinite", "e4m3fn", {"rounding": "rtz"}, "no rounding 'rtz'"),
    ("torch-cuda-2.11", "e4m3fn", {"saturate": True}, "fixes saturation"),
    ("jax-gpu", "e4m3fn", {"rounding": "stochastic", "rng": 1}, "deterministic"),
    ("torch-cuda-2.11", "e4m3fn", {"via": "float16"}, "intermediate"),
    ("nvidia", "e4m3fn", {}, "unknown profile"),
])
def test_profile_errors(profile, fmt, kw, msg):
    with pytest.raises(ValueError, match=msg):
        fp8emu.encode(np.array([1.0], np.float32), fmt, profile=profile, **kw)


def test_profile_does_not_modify_input_and_keeps_shape():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = x.copy()
    c = fp8emu.encode(x, "e5m2", profile="jax-gpu")
    assert c.shape == (3, 4) and c.dtype == np.uint8
    np.testing.assert_array_equal(x, y)


@pytest.mark.exhaustive
@pytest.mark.parametrize("t", [t for t in CASTS if t.kind == "cast" and t.src == "float32"],
                         ids=lambda t: t.name)
def test_cast_table_exhaustive(t):
    s, c, n = read_rle(t.path)
    step = 1 << 24
    ends = np.append(s[1:], np.uint64(n)).astype(np.int64)
    for base in range(0, n, step):
        pats = np.arange(base, base + step, dtype=np.uint64)
        got = _cast(t, pats)
        i0 = np.searchsorted(s, np.uint64(base), side="right") - 1
        i1 = np.searchsorted(s, np.uint64(base + step - 1), side="right")
        lens = np.minimum(ends[i0:i1], base + step) - np.maximum(s[i0:i1].astype(np.int64), base)
        want = np.repeat(c[i0:i1], lens)
        assert np.array_equal(got, want), f"{t.name}: mismatch in chunk {hex(base)}"


# ----------------------------------------------------------------------------- saturation is never ignored
@pytest.mark.parametrize("profile, given, alternative", [
    ("onnxruntime-cpu", False, "onnxruntime-cpu-nosat"),
    ("onnxruntime-cpu-nosat", True, "onnxruntime-cpu"),
    ("cuda-satfinite", False, "cuda-nosat"),
    ("cuda-nosat", "satfinite", "cuda-satfinite"),
    ("onnx-ml_dtypes-0.7", False, "onnx-nosat-ml_dtypes-0.7"),
])
def test_contradicting_saturation_names_the_counterpart(profile, given, alternative):
    x = np.array([1000.0], np.float32)
    with pytest.raises(ValueError, match=rf"profile '{profile}' fixes saturation for e4m3fn.*"
                                         rf"use profile='{alternative}'"):
        fp8emu.encode(x, "e4m3fn", profile=profile, saturate=given)


def test_saturation_without_a_counterpart_points_to_ocp():
    x = np.array([1000.0], np.float32)
    for profile in ("ml_dtypes", "torch-cuda-2.11", "triton-rtne"):
        given = profile != "triton-rtne"      # triton-rtne saturates: only False contradicts it
        with pytest.raises(ValueError, match=rf"no other setting; use profile='ocp' with saturate={given}"):
            fp8emu.encode(x, "e4m3fn", profile=profile, saturate=given)


def test_agreeing_saturation_is_accepted():
    x = np.array([1000.0, -np.inf, 3.0], np.float32)
    for profile, sat in (("onnxruntime-cpu", True), ("cuda-satfinite", "satfinite"), ("cuda-nosat", False),
                         ("ml_dtypes", False), ("torch-cpu", True)):
        np.testing.assert_array_equal(fp8emu.encode(x, "e4m3fn", profile=profile, saturate=sat),
                                      fp8emu.encode(x, "e4m3fn", profile=profile))
    # torch-cpu saturates E4M3FN but not E5M2: the check is per format
    with pytest.raises(ValueError, match="fixes saturation for e5m2"):
        fp8emu.encode(x, "e5m2", profile="torch-cpu", saturate=True)
    # FP4/FP6 have neither Inf nor NaN: they always saturate, so saturate= says nothing there
    assert fp8emu.encode(x, "e2m1fn", profile="cuda-nosat", saturate=False).tolist() == [7, 15, 5]


def test_cli_profile_saturation(capsys):
    from fp8emu.cli import main
    assert main(["encode", "1000", "--profile", "cuda-satfinite"]) == 0
    assert "0x7E" in capsys.readouterr().out
    assert main(["encode", "1000", "--profile", "cuda-nosat", "--saturate"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "use profile='cuda-satfinite'" in err and "Traceback" not in err


# ----------------------------------------------------------------------------- tables are read-only
def test_every_profile_table_is_read_only():
    """The tables are cached and shared: a caller writing into one would change every later encode."""
    for name in fp8emu.profile_names():
        try:
            prof = fp8emu.get_profile(name)
        except UndecidedVersionError:       # "torch-cuda" without torch: its variants are listed by name
            continue
        fmts = [fp8emu.get_format("e4m3fn")] if prof.is_spec else list(prof.rules)
        for fmt in fmts:
            for src in ("float16", "bfloat16"):
                for mode in (["rne"] if prof.is_spec else prof.rules[fmt]):
                    t = prof.encode_table(fmt, src, mode)
                    assert not t.flags.writeable, (name, fmt.name, src, mode)
            for dt in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64):
                t = prof.decode_table(fmt, dt)
                assert not t.flags.writeable, (name, fmt.name, dt)
                with pytest.raises(ValueError, match="read-only"):
                    t[0] = 0


# ----------------------------------------------------------------------------- every argument check
from fp8emu.profiles import Profile, Rule, VersionRange, get_profile, register_profile   # noqa: E402

E4M3FN = fp8emu.get_format("e4m3fn")
OK_RULES = {E4M3FN: {"rne": Rule("rne", False)}}


@pytest.mark.parametrize("kw, exc, msg", [
    ({"name": ""}, ValueError, "Profile.name must be a non-empty string"),
    ({"name": 3}, ValueError, "Profile.name must be a non-empty string"),
    ({"versions": ("ml_dtypes 0.7",)}, TypeError, "Profile.versions must be a tuple of VersionRange"),
    ({"versions": [VersionRange("ml_dtypes", "0.7")]}, TypeError, "must be a tuple of VersionRange"),
    ({"via64": "float16"}, ValueError, "Profile.via64 must be 'float32', 'float64' or None, got 'float16'"),
    ({"rules": [(E4M3FN, {"rne": Rule("rne", False)})]}, TypeError, "Profile.rules must be a mapping"),
    ({"rules": {"e4m3fn": {"rne": Rule("rne", False)}}}, TypeError, "keys must be Format objects"),
    ({"rules": {E4M3FN: {}}}, TypeError, r"Profile.rules\[e4m3fn\] must be a non-empty mapping"),
    ({"rules": {E4M3FN: Rule("rne", False)}}, TypeError, r"Profile.rules\[e4m3fn\] must be a non-empty mapping"),
    ({"rules": {E4M3FN: {"stochastic": Rule("rne", False)}}}, ValueError, "deterministic rounding mode"),
    ({"rules": {E4M3FN: {"rne": "rne"}}}, ValueError, r"\['rne'\] must map a deterministic rounding mode .* to a Rule"),
    ({"rules": {E4M3FN: {"rne": Rule("stochastic", False)}}}, ValueError, "Rule.rounding must be one of"),
    ({"rules": {E4M3FN: {"rne": Rule("rne", False, via64="float16")}}}, ValueError,
     "Rule.via64 must be 'float32', 'float64' or None, got 'float16'"),
])
def test_profile_argument_checks(kw, exc, msg):
    args = {"name": "p", "description": "d", "rules": OK_RULES, **kw}
    with pytest.raises(exc, match=msg):
        Profile(**args)


def test_profile_accepts_what_the_checks_allow():
    r = VersionRange("ml_dtypes", "0.7")
    for via in (None, "float32", "float64"):
        p = Profile("p", "d", {E4M3FN: {"rne": Rule("rne", False, via64=via)}}, via64=via, versions=(r,))
        assert p.versions == (r,) and p.via64 == via and not p.is_spec
    assert Profile("p", "d", None, versions=()).is_spec


def test_profile_lookup_errors():
    with pytest.raises(ValueError, match="'ocp' is the exact encode: it has no fixed rules"):
        get_profile("ocp").rule(E4M3FN, "rne")
    with pytest.raises(TypeError, match="profile must be a name or a Profile, got int"):
        get_profile(3)
    with pytest.raises(ValueError, match="unknown profile 'nvidia'; valid profiles: ocp, ml_dtypes, torch-cuda"):
        get_profile("nvidia")
    # a profile without an intermediate type takes only the types its tables cover
    p = Profile("p", "d", OK_RULES, via64=None)
    with pytest.raises(ValueError, match="'p' takes float32, float16 or bfloat16 inputs, got float64"):
        fp8emu.encode(np.float64([1.0]), "e4m3fn", profile=p)
    assert fp8emu.encode(np.float32([1.0]), "e4m3fn", profile=p).tolist() == [0x38]


@pytest.mark.parametrize("name", ["ml_dtypes", "onnx", "onnx-nosat", "ocp", "torch-cuda", "ml_dtypes-0.7"])
def test_built_in_and_plain_library_names_cannot_be_registered(name):
    for replace in (False, True):
        with pytest.raises(ValueError, match=f"a profile named '{name}' is already registered"):
            register_profile(Profile(name, "user", OK_RULES), replace=replace)
    try:
        assert get_profile(name).description != "user"
    except UndecidedVersionError:           # "torch-cuda" without torch: still refused, still not the user's
        assert name == "torch-cuda"


# ----------------------------------------------------------------------------- torch-cuda by torch version
def _torch_minor():
    v = fp8emu.profiles.installed_version("torch").split("+")[0].split(".")
    return int(v[0]), int(v[1])


def test_torch_cuda_resolves_by_the_torch_version():
    from fp8emu.profiles import UndecidedVersionError, resolve_versioned
    assert resolve_versioned("torch-cuda", {"torch": "2.11.0"}).name == "torch-cuda-2.11"
    assert resolve_versioned("torch-cuda", {"torch": "2.8.0+cu128"}).name == "torch-cuda-2.11"
    assert resolve_versioned("torch-cuda", {"torch": "2.12.0"}).name == "torch-cuda-2.12"
    assert resolve_versioned("torch-cuda", {"torch": "2.15.1+cu130"}).name == "torch-cuda-2.12"
    with pytest.raises(UndecidedVersionError, match="'torch-cuda-2.11' .*'torch-cuda-2.12'"):
        resolve_versioned("torch-cuda", {"torch": None})
    with pytest.warns(fp8emu.profiles.UnprovenVersionWarning):
        assert resolve_versioned("torch-cuda", {"torch": "2.16.0"}).name == "torch-cuda-2.12"
    assert "from source, not recorded" in get_profile("torch-cuda-2.12").description
    assert get_profile("torch-cuda-2.11").versions[0].proven == ("2.11",)
    assert get_profile("torch-cuda-2.12").versions[0].proven == ()


def test_torch_cuda_from_source_rules():
    # expectations from torch's source (module docstring): E4M3FN saturates finite overflow and Inf
    # (SATFINITE / the c10 header), NaN 0x7F; E5M2 RNE non-saturating, NaN 0x7F|sign from every source
    x = np.array([500.0, 470.0, 464.0, np.inf, -np.inf, np.nan, -np.nan, -1e6], np.float32)
    for src in (np.float32, np.float16):
        with np.errstate(over="ignore"):
            xs = x.astype(src)
        assert fp8emu.encode(xs, "e4m3fn", profile="torch-cuda-2.12").tolist() == \
            [0x7E, 0x7E, 0x7E, 0x7E, 0xFE, 0x7F, 0x7F, 0xFE]
        y = np.array([57344.0, 60000.0, 61440.0, np.inf, np.nan, -np.nan], np.float32).astype(src)
        assert fp8emu.encode(y, "e5m2", profile="torch-cuda-2.12").tolist() == [0x7B, 0x7B, 0x7C, 0x7C, 0x7F, 0xFF]
    # the recorded 2.11 behaviour it replaces: E4M3FN overflow gives NaN
    assert fp8emu.encode(x[:2], "e4m3fn", profile="torch-cuda-2.11").tolist() == [0x7F, 0x7F]


def test_torch_cuda_e4m3fn_equals_torchs_own_c10_conversion():
    # the CPU runs the same C10_HOST_DEVICE conversion (torch >= 2.12): every finite and infinite float32
    # of a sweep must agree with it (NaN's sign is where the CUDA intrinsic differs)
    torch = pytest.importorskip("torch")
    if _torch_minor() < (2, 12):
        pytest.skip("torch < 2.12 has the old conversion")
    bits = np.arange(0, 1 << 32, 4099, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    x = x[~np.isnan(x)]
    want = torch.from_numpy(x).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    assert np.array_equal(fp8emu.encode(x, "e4m3fn", profile="torch-cuda-2.12"), want)


def test_plain_torch_cuda_follows_the_installed_torch():
    pytest.importorskip("torch")
    want = "torch-cuda-2.12" if _torch_minor() >= (2, 12) else "torch-cuda-2.11"
    assert get_profile("torch-cuda").name == want


def test_every_gpu_profile_names_its_versions():
    for name, dist in (("triton-rtne", "triton"), ("triton-rtz", "triton"), ("jax-gpu", "jaxlib"),
                       ("torch-cuda-2.11", "torch"), ("torch-cuda-2.12", "torch")):
        assert [r.distribution for r in get_profile(name).versions] == [dist], name
