"""Version-scoped library profiles: each ml_dtypes variant against the recorded casts of every release it
claims, the plain name against the installed ml_dtypes, and the rules for choosing a variant.

The recordings (``tests/data/library_vectors``, made by ``tools/record_library_vectors.py`` in a fresh
venv per release) hold ml_dtypes' own ``astype`` results: expectations come from the library, never from
fp8emu, and they prove the rules for releases that are not installed here.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fp8emu.profiles import UndecidedVersionError

import fp8emu
from fp8emu.profiles import (UnprovenVersionWarning, VersionRange, get_profile, resolve_versioned,
                             versioned_names)

DATA = Path(__file__).resolve().parent / "data" / "library_vectors"
RECORDED = sorted(p.name[len("ml_dtypes-"):-len(".npz")] for p in DATA.glob("ml_dtypes-*.npz"))
VIEW = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32, "float64": np.float64}
UINT = {"float16": np.uint16, "bfloat16": np.uint16, "float32": np.uint32, "float64": np.uint64}


@pytest.fixture(scope="module")
def inputs():
    with np.load(DATA / "inputs.npz") as z:
        return {k: z[k].view(VIEW[k]) for k in z.files}


def _fmt(ml_name):
    return ml_name.split("_", 1)[1]          # float8_e4m3fn -> e4m3fn, float4_e2m1fn -> e2m1fn


def _variant(version):
    """The ml_dtypes variant whose range claims ``version`` (from the ranges, not from the resolver)."""
    hits = [n for n in versioned_names()["ml_dtypes"]
            if any(r.distribution == "ml_dtypes" and r.contains(version) for r in get_profile(n).versions)]
    assert len(hits) == 1, (version, hits)
    return get_profile(hits[0])


def test_recordings_cover_every_proven_version():
    assert {"0.5.4", "0.6.0", "0.7.0"} <= set(RECORDED)
    for name in versioned_names()["ml_dtypes"]:
        for r in get_profile(name).versions:
            assert set(r.proven) <= set(RECORDED), (name, r.proven)


@pytest.mark.parametrize("version", RECORDED)
def test_variant_reproduces_the_recorded_release(version, inputs):
    prof = _variant(version)
    with np.load(DATA / f"ml_dtypes-{version}.npz") as z:
        assert str(z["version"]) == version
        keys = [k for k in z.files if k.startswith("encode/")]
        # every narrow type the release has: 0.7 added float8_e5m3fnu (UE5M3)
        assert len({k.split("/")[1] for k in keys}) == (12 if version.startswith("0.7") else 11)
        for key in keys:
            _, ml_name, src = key.split("/")
            got = fp8emu.encode(inputs[src], _fmt(ml_name), profile=prof)
            want = z[key]
            bad = np.flatnonzero(got != want)
            assert bad.size == 0, (f"{prof.name} vs ml_dtypes {version}, {ml_name} from {src}: {bad.size} "
                                   f"differ, first input {inputs[src][bad[0]]!r}: {got[bad[0]]:#x} vs {want[bad[0]]:#x}")
        for key in (k for k in z.files if k.startswith("decode/")):
            _, ml_name, dst = key.split("/")
            f = fp8emu.get_format(_fmt(ml_name))
            codes = np.arange(1 << f.bits, dtype=np.uint8)
            got = fp8emu.decode(codes, f, dtype=VIEW[dst], profile=prof).view(UINT[dst])
            np.testing.assert_array_equal(got, z[key], err_msg=key)


def test_the_two_behaviours_really_differ(inputs):
    """The recordings tell 0.6 from 0.7 on float64 near-midpoints and e8m0 float32 subnormals."""
    with np.load(DATA / "ml_dtypes-0.6.0.npz") as a, np.load(DATA / "ml_dtypes-0.7.0.npz") as b:
        f64 = a["encode/float8_e4m3fn/float64"] != b["encode/float8_e4m3fn/float64"]
        e8 = a["encode/float8_e8m0fnu/float32"] != b["encode/float8_e8m0fnu/float32"]
    assert f64.sum() > 100 and e8.sum() > 100
    x = inputs["float32"][e8].astype(np.float64)
    assert ((x > 2.0 ** -127) & (x < 1.5 * 2.0 ** -127)).all()   # exactly the README's e8m0 band


def test_ml_dtypes_0_6_rounds_twice_and_0_7_once():
    x = np.array([1.0625 + 2 ** -40])            # just above the midpoint of 1.0 and 1.125
    assert fp8emu.encode(x, "e4m3fn", profile="ml_dtypes-0.6").tolist() == [0x38]   # via float32: the tie
    assert fp8emu.encode(x, "e4m3fn", profile="ml_dtypes-0.7").tolist() == [0x39]   # rounded once


# ----------------------------------------------------------------------------- the installed release
def test_plain_name_is_the_installed_release(inputs):
    version = ml_dtypes.__version__
    prof = get_profile("ml_dtypes")
    if not any(r.contains(version) for n in versioned_names()["ml_dtypes"] for r in get_profile(n).versions):
        pytest.skip(f"ml_dtypes {version} lies outside every proven range")
    assert prof is _variant(version)
    for ml_name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz",
                    "float8_e4m3", "float8_e3m4", "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn",
                    "float4_e2m1fn", "float8_e5m3fnu"):
        if not hasattr(ml_dtypes, ml_name):         # float8_e5m3fnu came with ml_dtypes 0.7
            continue
        dt = getattr(ml_dtypes, ml_name)
        for src, x in inputs.items():
            with np.errstate(all="ignore"):
                want = x.astype(dt).view(np.uint8)
            got = fp8emu.encode(x, _fmt(ml_name), profile="ml_dtypes")
            assert np.array_equal(got, want), (ml_name, src, int((got != want).sum()))


# ----------------------------------------------------------------------------- choosing a variant
@pytest.mark.parametrize("version, variant", [("0.5.4", "ml_dtypes-0.6"), ("0.6.0", "ml_dtypes-0.6"),
                                              ("0.6.1", "ml_dtypes-0.6"), ("0.7.0", "ml_dtypes-0.7"),
                                              ("0.7.1rc1", "ml_dtypes-0.7")])
def test_resolve_by_version(version, variant):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_versioned("ml_dtypes", {"ml_dtypes": version}).name == variant


@pytest.mark.parametrize("version, variant", [("0.8.0", "ml_dtypes-0.7"), ("0.5.0", "ml_dtypes-0.6")])
def test_resolve_outside_every_range_warns(version, variant):
    with pytest.warns(UnprovenVersionWarning, match=rf"ml_dtypes {version} lies outside every version range"):
        assert resolve_versioned("ml_dtypes", {"ml_dtypes": version}).name == variant


def test_onnx_follows_its_ml_dtypes():
    assert resolve_versioned("onnx", {"onnx": "1.23.2", "ml_dtypes": "0.6.0"}).name == "onnx-ml_dtypes-0.6"
    assert resolve_versioned("onnx-nosat", {"onnx": "1.23.2", "ml_dtypes": "0.7.0"}).name == \
        "onnx-nosat-ml_dtypes-0.7"
    # onnx not installed: the variant follows the installed ml_dtypes alone
    assert resolve_versioned("onnx", {"ml_dtypes": "0.7.0"}).name == "onnx-ml_dtypes-0.7"
    with pytest.warns(UnprovenVersionWarning, match="onnx 1.24.0"):
        assert resolve_versioned("onnx", {"onnx": "1.24.0", "ml_dtypes": "0.7.0"}).name == "onnx-ml_dtypes-0.7"
    with pytest.raises(ValueError, match="not a versioned profile name"):
        resolve_versioned("torch-cpu", {})


def test_version_ranges():
    r = VersionRange("torch", "2.13.0", "2.14", ("2.13.0+cpu",))
    assert r.contains("2.13.0+cpu") and r.contains("2.13.1") and not r.contains("2.14.0")
    assert not VersionRange("x", "1.0").contains("0.9.9") and VersionRange("x", "1.0").contains("99")
    with pytest.raises(ValueError, match="proven version must lie in the range"):
        VersionRange("x", "1.0", "2.0", ("2.0",))
    with pytest.raises(ValueError, match="must be above"):
        VersionRange("x", "2.0", "1.0")
    with pytest.raises(ValueError, match="not a release version"):
        VersionRange("x", "latest")


def test_listing_names_the_variant():
    d = fp8emu.profile_names()
    assert get_profile("ml_dtypes").name in d["ml_dtypes"] and "variants: ml_dtypes-0.6, ml_dtypes-0.7" in d["ml_dtypes"]
    for variants in versioned_names().values():
        assert all(v in d for v in variants)


def test_demo_checkpoint_reproduces_byte_for_byte(tmp_path):
    """tools/make_demo_checkpoint.py rebuilds the shipped file under the installed ml_dtypes, mode 0644."""
    pytest.importorskip("safetensors")
    import importlib.util
    import os
    import stat
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("make_demo_checkpoint", root / "tools" / "make_demo_checkpoint.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    out = tmp_path / "demo.safetensors"
    old = os.umask(0o077)                     # a strict umask must not leak into the file's mode
    try:
        tool.write(out)
    finally:
        os.umask(old)
    assert out.read_bytes() == (root / "fp8emu" / "data" / "demo" / "demo.safetensors").read_bytes()
    assert stat.S_IMODE(out.stat().st_mode) == 0o644


# ----------------------------------------------------------------------------- version boundaries
@pytest.mark.parametrize("version, inside", [
    ("1.2", True), ("1.2.0", True), ("1.2.0+local", True), ("1.2.post1", True), ("1.2.0.post1", True),
    ("1.3.99", True), ("1.3.0rc1", True),             # a pre-release inside the range is in it
    ("1.4.0rc1", False), ("1.4.0.dev1", False),       # a pre-release of the bound: in neither range
    ("1.1.9", False), ("1.2.0rc1", False), ("1.2.0.dev1", False), ("1.4", False), ("1.4.0", False),
    ("1.4.1", False), ("1.10", False), ("2", False), ("0.99", False),
])
def test_version_range_boundaries(version, inside):
    """[minimum, below): the minimum is in, the bound is out, parts compare as numbers (1.10 > 1.4)."""
    assert VersionRange("x", "1.2", "1.4").contains(version) is inside
    assert VersionRange("x", "1.2").contains(version) is (inside or version not in ("1.1.9", "1.2.0rc1",
                                                                                      "1.2.0.dev1", "0.99"))


@pytest.mark.parametrize("version", ["0.7.0.0", "0.7.0.0.0", "0.7.0+local", "0.7.0.post1", "0.7.1rc1"])
def test_versions_compare_by_pep440(version):
    """'0.7.0.0' (PEP 440: equal to 0.7) compared below '0.7' by hand and resolved to the 0.6
    variant without a warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_versioned("ml_dtypes", {"ml_dtypes": version}).name == "ml_dtypes-0.7"


@pytest.mark.parametrize("version", ["0.7.0rc1", "0.7.0a1", "0.7.0b2", "0.7.0.dev3", "0.7rc1"])
def test_a_pre_release_of_a_claimed_version_warns_and_gets_its_release(version):
    """A pre-release of 0.7 sorted below 0.7, into the 0.6 range, silently.  Decided: it is
    proven for no variant (warning) and gets the variant of the release it leads up to."""
    with pytest.warns(UnprovenVersionWarning, match=rf"ml_dtypes {version} lies outside"):
        assert resolve_versioned("ml_dtypes", {"ml_dtypes": version}).name == "ml_dtypes-0.7"
    with pytest.warns(UnprovenVersionWarning):
        assert resolve_versioned("ml_dtypes", {"ml_dtypes": "0.5.4rc1"}).name == "ml_dtypes-0.6"


def test_version_range_checks_and_text():
    with pytest.raises(ValueError, match="below='1.0.0' must be above minimum='1.0'"):
        VersionRange("x", "1.0", "1.0.0")                     # an empty range: below equals minimum
    assert VersionRange("x", "1.0", "1.0.1").contains("1.0")  # the narrowest range holds its minimum
    with pytest.raises(ValueError, match="every proven version must lie in the range"):
        VersionRange("x", "1.0", None, ["1.0"])               # proven must be a tuple
    with pytest.raises(ValueError, match="every proven version must lie in the range"):
        VersionRange("x", "1.0", "2.0", ("0.9",))
    for bad in (1.0, None, "v1.0", "", "latest"):
        with pytest.raises(ValueError, match="not a release version"):
            VersionRange("x", bad)
    with pytest.raises(ValueError, match="not a release version: 'dev'"):
        VersionRange("x", "1.0").contains("dev")
    assert str(VersionRange("x", "1.0")) == "x >=1.0"
    assert str(VersionRange("x", "1.0", "2")) == "x >=1.0,<2"
    assert str(VersionRange("x", "1.0", "2", ("1.0", "1.5"))) == "x >=1.0,<2 (proven on 1.0, 1.5)"


def test_built_in_ranges_hold_their_minimum_and_proven_versions_but_not_their_bound():
    for name in fp8emu.profile_names():
        try:
            prof = get_profile(name)
        except UndecidedVersionError:       # "torch-cuda" without torch: its variants are listed by name
            continue
        for r in prof.versions:
            assert r.contains(r.minimum) and all(r.contains(v) for v in r.proven), (name, str(r))
            assert r.below is not None and not r.contains(r.below), (name, str(r))


@pytest.mark.parametrize("installed, variant", [
    ({"ml_dtypes": "0.5.4"}, "ml_dtypes-0.6"),                       # the minimum is in
    ({"ml_dtypes": "0.6.99"}, "ml_dtypes-0.6"),
    ({"ml_dtypes": "0.7"}, "ml_dtypes-0.7"),                         # the bound of 0.6 starts 0.7
    ({"ml_dtypes": "0.7.9"}, "ml_dtypes-0.7"),
    ({"ml_dtypes": None}, "ml_dtypes-0.6"),                          # not installed: nothing to contradict
])
def test_resolve_at_the_range_boundaries(installed, variant):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_versioned("ml_dtypes", installed).name == variant


@pytest.mark.parametrize("name, installed, variant, have", [
    ("ml_dtypes", {"ml_dtypes": "0.5.3"}, "ml_dtypes-0.6", "ml_dtypes 0.5.3"),     # just below the oldest
    ("ml_dtypes", {"ml_dtypes": "0.8"}, "ml_dtypes-0.7", "ml_dtypes 0.8"),         # the newest's bound
    # onnx below its range, ml_dtypes in 0.7's: the variant agreeing on one library wins
    ("onnx", {"onnx": "1.20.0", "ml_dtypes": "0.7.0"}, "onnx-ml_dtypes-0.7", "ml_dtypes 0.7.0, onnx 1.20.0"),
    ("onnx-nosat", {"onnx": "1.24", "ml_dtypes": "0.6.0"}, "onnx-nosat-ml_dtypes-0.6", "ml_dtypes 0.6.0, onnx 1.24"),
    # nothing agrees; a version below a range prefers the older variant, above only the newer
    ("onnx", {"onnx": "1.30.0", "ml_dtypes": "0.4.0"}, "onnx-ml_dtypes-0.6", "ml_dtypes 0.4.0, onnx 1.30.0"),
    ("onnx", {"onnx": "1.30.0", "ml_dtypes": "0.9.0"}, "onnx-ml_dtypes-0.7", "ml_dtypes 0.9.0, onnx 1.30.0"),
    # a library not installed is left out of the message and of the vote
    ("onnx", {"onnx": None, "ml_dtypes": "0.9.0"}, "onnx-ml_dtypes-0.7", "ml_dtypes 0.9.0 lies"),
    ("onnx", {"onnx": "1.0", "ml_dtypes": None}, "onnx-ml_dtypes-0.6", "onnx 1.0 lies"),
])
def test_resolve_outside_the_ranges_names_everything(name, installed, variant, have):
    given = dict(installed)
    with pytest.warns(UnprovenVersionWarning) as rec:
        assert resolve_versioned(name, installed).name == variant
    assert installed == given                                        # the mapping is not modified
    (w,) = rec
    msg = str(w.message)
    assert f"profile {name!r}: the installed {have}" in msg and f"using {variant!r}" in msg
    for v in versioned_names()[name]:
        assert f"{v}: " + ", ".join(str(r) for r in get_profile(v).versions) in msg


def test_resolve_without_a_mapping_reads_the_installed_versions():
    from fp8emu.profiles import UndecidedVersionError, installed_version
    torch_version = installed_version("torch")
    for name in versioned_names():
        if name == "torch-cuda" and torch_version is None:     # refuses to guess without torch
            with pytest.raises(UndecidedVersionError):
                resolve_versioned(name)
            continue
        assert resolve_versioned(name) is get_profile(name)
        assert resolve_versioned(name, {"ml_dtypes": ml_dtypes.__version__, "onnx": None,
                                        "torch": torch_version}) is get_profile(name)
