"""The engine profiles, proven against the real engines on every run.

Each test casts inputs through the engine itself (ONNX reference evaluator,
ONNX Runtime's CPU provider, JAX on the CPU, torch on the CPU) and compares
the codes bit for bit with ``fp8emu.encode(..., profile=...)``.  The default
run uses :func:`fp8emu.engines.probe_inputs` (all 16-bit patterns; every
float32 upper half with low halves around each midpoint, plus random
patterns; float64 neighbours and random patterns); ``-m exhaustive`` runs
all 2**32 float32 inputs per engine, format and setting.

Independent expectations (the ONNX Runtime quirk, the ONNX reference's FP4
and E8M0 behaviour, torch's saturation) are spelled out from spec constants.
"""

from __future__ import annotations

import numpy as np
import pytest

import fp8emu
from fp8emu import engines as E
from fp8emu.tables import SOURCE_DTYPES

INSTALLED = E.installed_engines()


def _need(engine):
    if engine == "torch-cpu":
        pytest.importorskip("torch")
    elif engine not in INSTALLED:
        pytest.skip(f"{engine} is not installed")
    stale = E.version_check({engine: INSTALLED.get(engine, {})})
    if stale:
        pytest.skip(f"{engine}: installed " + "; ".join(f"{d} {v} lies outside {r}" for _, d, v, r in stale)
                    + ": no profile claims it (fp8emu conformance --live shows what differs)")


def _cases():
    for engine in E.ENGINES:
        for fmt in E.ENGINE_FORMATS[engine]:
            for opt in E.engine_options(engine, fmt):
                yield pytest.param(engine, fmt, opt, id=f"{engine}-{fmt}-{E._setting_text(opt)}")


def _bits(a):
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _first_diffs(x, got, exp, n=5):
    i = np.flatnonzero(got != exp)[:n]
    return [(float(x[j]), hex(_bits(x[j:j + 1])[0]), hex(int(got[j])), hex(int(exp[j]))) for j in i]


@pytest.fixture(scope="module")
def probes():
    return {src: E.probe_inputs(src, 1 << 16, seed=15) for src in ("float32", "float16", "bfloat16", "float64")}


@pytest.mark.parametrize("engine, fmt, opt", list(_cases()))
def test_encode_matches_profile(engine, fmt, opt, probes):
    _need(engine)
    prof, rnd = E.engine_profile(engine, fmt, **opt)
    for src in E.ENGINE_SOURCES[engine]:
        x = probes[src]
        got = E.engine_cast(engine, x, fmt, **opt)
        exp = fp8emu.encode(x, fmt, profile=prof, rounding=rnd)
        assert np.array_equal(got, exp), (
            f"{engine} {INSTALLED.get(engine)} {fmt} {src} {opt}: {int((got != exp).sum())} mismatches with "
            f"profile {prof!r}, first (x, bits, engine, profile): {_first_diffs(x, got, exp)}")


@pytest.mark.parametrize("engine", list(E.ENGINES))
def test_decode_matches_profile(engine):
    _need(engine)
    for fmt in E.ENGINE_FORMATS[engine]:
        codes = np.arange(1 << fp8emu.get_format(fmt).bits, dtype=np.uint8)
        prof = E.engine_profile(engine, fmt)[0]
        for src in E.ENGINE_SOURCES[engine]:
            dt = SOURCE_DTYPES[src]
            got = _bits(E.engine_decode(engine, codes, fmt, dt))
            exp = _bits(fp8emu.decode(codes, fmt, dtype=dt, profile=prof))
            bad = np.flatnonzero(got != exp)
            assert bad.size == 0, (f"{engine} decode {fmt} -> {src}: codes {[hex(c) for c in bad[:5]]} give "
                                   f"{[hex(v) for v in got[bad[:5]]]}, profile {[hex(v) for v in exp[bad[:5]]]}")


@pytest.mark.parametrize("engine", ["onnx", "onnxruntime-cpu"])
def test_onnx_defaults_are_saturate_1_and_round_up(engine, probes):
    _need(engine)
    x = probes["float32"]
    for fmt in ("e4m3fn", "e5m2", "e8m0fnu"):
        omitted = E.engine_cast(engine, x, fmt)
        explicit = E.engine_cast(engine, x, fmt, saturate=True,
                                 rounding="rup" if fmt == "e8m0fnu" else None)
        assert np.array_equal(omitted, explicit)


@pytest.mark.parametrize("engine", ["onnx", "onnxruntime-cpu"])
def test_quantizelinear_with_scale_1_is_cast(engine, probes):
    _need(engine)
    # ONNX Runtime 1.32's CPU QuantizeLinear has no bfloat16 input and no FLOAT4E2M1 output.
    srcs = ("float32", "float16") if engine == "onnxruntime-cpu" else ("float32", "float16", "bfloat16")
    fmts = [f for f in E.ENGINE_FORMATS[engine] if f != "e8m0fnu"]
    for fmt in fmts:
        for sat in ((None,) if fmt in E._SUBBYTE else (False, True)):
            for src in srcs:
                x = probes[src]
                q = E.engine_cast(engine, x, fmt, saturate=sat, op="QuantizeLinear")
                prof, _ = E.engine_profile(engine, fmt, saturate=sat)
                assert np.array_equal(q, fp8emu.encode(x, fmt, profile=prof)), (engine, fmt, sat, src)


def test_jax_eager_equals_jit(probes):
    _need("jax-cpu")
    for fmt in E.ENGINE_FORMATS["jax-cpu"]:
        for src in ("float32", "float64"):     # each (format, source) compiles anew: keep it to two
            x = probes[src][: 1 << 17]
            assert np.array_equal(E.engine_cast("jax-cpu", x, fmt, jit=False),
                                  E.engine_cast("jax-cpu", x, fmt, jit=True)), (fmt, src)


# ----------------------------------------------------------------------------- rules from constants
def test_onnxruntime_e4m3fn_nosat_quirk():
    """ORT 1.32: |x| in [480, 496) gives +-448 with saturate=0; OCP gives NaN above 464."""
    _need("onnxruntime-cpu")
    x = np.array([464.0, 464.5, 479.9, 480.0, 490.0, 495.99, 496.0, 1e4, np.inf], np.float32)
    x = np.concatenate([x, -x])
    spec = [0x7E, 0x7F, 0x7F, 0x7F, 0x7F, 0x7F, 0x7F, 0x7F, 0x7F]          # RNE to 480 (no such value) -> NaN
    ort = [0x7E, 0x7F, 0x7F, 0x7E, 0x7E, 0x7E, 0x7F, 0x7F, 0x7F]
    neg = [c | 0x80 for c in spec], [c | 0x80 for c in ort]
    assert E.engine_cast("onnxruntime-cpu", x, "e4m3fn", saturate=False).tolist() == ort + neg[1]
    assert fp8emu.encode(x, "e4m3fn", profile="onnxruntime-cpu-nosat").tolist() == ort + neg[1]
    assert fp8emu.encode(x, "e4m3fn").tolist() == spec + neg[0]
    assert fp8emu.encode(x, "e4m3fn", profile="onnx-nosat").tolist() == spec + neg[0]


def test_onnxruntime_e5m2_nosat_rounding_overflow_is_nan():
    """ORT 1.32: round-up past 57344 gives NaN 0x7F (sign kept); only |x| >= 65536 gives Inf."""
    _need("onnxruntime-cpu")
    x = np.array([61439.0, 61440.0, 65535.0, 65536.0, np.inf, np.nan], np.float32)
    assert E.engine_cast("onnxruntime-cpu", x, "e5m2", saturate=False).tolist() == [0x7B, 0x7F, 0x7F, 0x7C,
                                                                                    0x7C, 0x7F]
    assert E.engine_cast("onnxruntime-cpu", -x, "e5m2", saturate=False).tolist() == [0xFB, 0xFF, 0xFF, 0xFC,
                                                                                     0xFC, 0xFF]


def test_onnx_reference_fp4_and_e8m0():
    """ONNX reference (onnx 1.23): FP4 NaN -> 0x8 / -NaN -> 0x0; E8M0 ignores the sign and
    round_mode='up' maps float32 subnormals to 2**-126 (code 1) where 2**-127 (code 0) is the round-up."""
    _need("onnx")
    nan = np.array([0x7FC00000, 0xFFC00000], np.uint32).view(np.float32)
    assert E.engine_cast("onnx", nan, "e2m1fn").tolist() == [0x8, 0x0]
    x = np.array([-2.0, 2.0, 6.0e-40, 0.0], np.float32)
    assert E.engine_cast("onnx", x, "e8m0fnu", rounding="rup").tolist() == [128, 128, 1, 0]
    assert fp8emu.encode(x, "e8m0fnu", profile="onnx", rounding="rup").tolist() == [128, 128, 1, 0]
    assert fp8emu.encode(x[1:3], "e8m0fnu", rounding="rup").tolist() == [128, 0]   # the spec


def test_torch_cpu_e4m3fn_saturates():
    """torch 2.13 CPU: e4m3fn overflow and Inf give +-448 (its CUDA cast gives NaN)."""
    torch = pytest.importorskip("torch")
    x = np.array([470.0, 1e6, np.inf, -np.inf, np.nan], np.float32)
    got = torch.from_numpy(x).to(torch.float8_e4m3fn).view(torch.uint8).numpy().tolist()
    assert got == [0x7E, 0x7E, 0x7E, 0xFE, 0x7F]
    assert fp8emu.encode(x, "e4m3fn", profile="torch-cpu").tolist() == got
    assert fp8emu.encode(x, "e4m3fn", profile="torch-cuda-2.11").tolist()[:3] == [0x7F] * 3


# ----------------------------------------------------------------------------- ONNX's own test cases
_ONNX_NAMES = {"FLOAT8E4M3FN": "e4m3fn", "FLOAT8E4M3FNUZ": "e4m3fnuz", "FLOAT8E5M2": "e5m2",
               "FLOAT8E5M2FNUZ": "e5m2fnuz", "FLOAT4E2M1": "e2m1fn", "FLOAT8E8M0": "e8m0fnu"}


def _onnx_cases():
    onnx = pytest.importorskip("onnx")
    import importlib
    import sys
    import warnings
    from onnx.backend.test.case import node
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if hasattr(node, "_TargetOpType") and "onnx.backend.test.case.node.cast" not in sys.modules:
            # collect_testcases("Cast") imports every operator's case module (seconds); the Cast
            # cases are generated when their module is imported, filtered by this op type.
            node._TargetOpType = "Cast"
            importlib.import_module("onnx.backend.test.case.node.cast")
            cases = list(node._NodeTestCases)
        else:
            cases = node.collect_testcases("Cast")
    out = []
    for c in cases:
        if not any(k in c.name for k in _ONNX_NAMES):
            continue
        n = c.model.graph.node[0]
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        out.append((c, attrs))
    return out


def test_onnx_backend_cast_cases_replay_on_onnx_profile():
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper
    cases = _onnx_cases()
    assert len(cases) >= 30, [c.name for c, _ in cases]
    for case, attrs in cases:
        for inputs, outputs in case.data_sets:
            x = numpy_helper.to_array(inputs[0])
            y = numpy_helper.to_array(outputs[0])
            to = onnx.helper.tensor_dtype_to_string(attrs["to"]).split(".")[-1]
            sat = bool(attrs.get("saturate", 1))
            prof = "onnx" if sat else "onnx-nosat"
            if to in _ONNX_NAMES:     # encode
                fmt = _ONNX_NAMES[to]
                rnd = {"up": "rup", "down": "rtz", "nearest": "rne"}[attrs.get("round_mode", b"up").decode()
                                                                      if isinstance(attrs.get("round_mode"), bytes)
                                                                      else attrs.get("round_mode", "up")]
                got = fp8emu.encode(x, fmt, profile=prof, rounding=rnd if fmt == "e8m0fnu" else "rne")
                exp = np.asarray(y).view(np.uint8)
                assert np.array_equal(got, exp), (case.name, x[got != exp], got[got != exp], exp[got != exp])
            else:                     # decode
                frm = onnx.helper.tensor_dtype_to_string(inputs[0].data_type).split(".")[-1]
                fmt = _ONNX_NAMES[frm]
                codes = np.asarray(x).view(np.uint8)
                got = fp8emu.decode(codes, fmt, dtype=y.dtype, profile=prof)
                assert np.array_equal(_bits(got), _bits(np.asarray(y))), case.name


# ----------------------------------------------------------------------------- versions and the live report
def test_version_check_names_differences():
    assert E.version_check({"onnx": {"onnx": "1.23.2", "ml_dtypes": "0.6.0"}}) == []
    assert E.version_check({"onnx": {"onnx": "1.23.2", "ml_dtypes": "0.7.0"}}) == []
    assert E.version_check({"onnx": {"onnx": "9.9", "ml_dtypes": "0.7.0"}}) == [
        ("onnx", "onnx", "9.9", "onnx >=1.23.2,<1.24 (proven on 1.23.2)")]
    # the ONNX reference casts through ml_dtypes: its version is checked too
    assert E.version_check({"onnx": {"onnx": "1.23.2", "ml_dtypes": "0.8.1"}}) == [
        ("onnx", "ml_dtypes", "0.8.1", "ml_dtypes >=0.7,<0.8 (proven on 0.7.0)")]
    assert E.version_check({"jax-cpu": {"jax": "0.10.2", "jaxlib": "0.4.38"}}) == [
        ("jax-cpu", "jaxlib", "0.4.38", "jaxlib >=0.10.2,<0.11 (proven on 0.10.2)")]


def test_engine_profile_follows_ml_dtypes():
    v6 = {"onnx": "1.23.2", "ml_dtypes": "0.6.0"}
    v7 = {"onnx": "1.23.2", "ml_dtypes": "0.7.0"}
    assert E.engine_profile("onnx", "e4m3fn", installed=v6) == ("onnx-ml_dtypes-0.6", "rne")
    assert E.engine_profile("onnx", "e4m3fn", saturate=False, installed=v7) == ("onnx-nosat-ml_dtypes-0.7", "rne")
    assert E.installed_engines().get("onnx", {}).get("ml_dtypes", ml_dtypes_version()) == ml_dtypes_version()
    # the two variants differ exactly in how float64 is rounded
    x = np.array([1.0625 * (1 + 2.0 ** -40)])
    assert fp8emu.encode(x, "e4m3fn", profile="onnx-ml_dtypes-0.6").tolist() == [0x38]
    assert fp8emu.encode(x, "e4m3fn", profile="onnx-ml_dtypes-0.7").tolist() == [0x39]


def ml_dtypes_version():
    import ml_dtypes
    return ml_dtypes.__version__


def test_live_report_rows_for_jax():
    _need("jax-cpu")
    rows = E.live_report(["jax-cpu"], n_random=0)
    assert {r["format"] for r in rows} == set(E.ENGINE_FORMATS["jax-cpu"])
    assert all(r["mismatches"] == 0 and r["decode_mismatches"] == 0 for r in rows)
    e5m2 = next(r for r in rows if r["format"] == "e5m2")
    # JAX gives 0x7F for every float16/bfloat16 NaN; the spec keeps the sign (0x7E/0xFE).
    assert e5m2["ocp_nan"] == 2 * (2 ** 10 - 1) + 2 * (2 ** 7 - 1)
    with pytest.raises(ValueError, match="unknown engine"):
        E.live_report(["tensorflow"])


@pytest.mark.parametrize("table", ["cuda_bf16_e4m3_satfinite", "cuda_f16_e5m2_satfinite", "torch_f16_to_e8m0fnu"])
def test_classify_differences_agrees_with_the_recorded_report(table):
    """The live report's kinds are the recorded tables' kinds: same split for a profile that reproduces a table."""
    from fp8emu import conformance
    from fp8emu.tables import table_inputs
    row = next(r for r in conformance.report() if r["table"] == table)
    x = table_inputs(row["source"])
    got = fp8emu.encode(x, row["format"], profile=row["profile"])
    ocp = fp8emu.encode(x, row["format"])
    d = got != ocp
    kinds = conformance.classify_differences(fp8emu.get_format(row["format"]), x[d], got[d], ocp[d])
    split = {k: int((kinds == k).sum()) for k in conformance.KINDS}
    assert split == {k: row[f"ocp_{k}"] for k in conformance.KINDS}


def test_recorded_live_table_covers_every_setting_on_the_proven_versions():
    # The recorded `fp8emu conformance --live` run shown on the docs' live-engines page.
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "docs" / "evidence" / "live_engines.md").read_text()
    m = re.search(r"<!-- live-table:start -->\n(.*?)\n<!-- live-table:end -->", text, re.S)
    assert m
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in m.group(1).splitlines()[2:]]
    want = {(e, f, E._setting_text(o))
            for e in E.ENGINES for f in E.ENGINE_FORMATS[e] for o in E.engine_options(e, f)}
    assert {(r[0], r[2], r[3]) for r in rows} == want
    for r in rows:
        versions = dict(part.split(" ") for part in r[1].split(", "))
        ranges = E.engine_versions(r[0], versions)
        assert {x.distribution for x in ranges} <= set(versions), r
        assert all(versions[x.distribution] in x.proven for x in ranges), r     # run on proven versions
        assert r[6] == "0" and r[7] == "0", r
        opt = next(o for o in E.engine_options(r[0], r[2]) if E._setting_text(o) == r[3])
        assert r[4] == "{} ({})".format(*E.engine_profile(r[0], r[2], installed=versions, **opt)).replace(
            " (rne)", ""), r


def test_engine_argument_errors():
    with pytest.raises(ValueError, match="no cast to"):
        E.engine_cast("torch-cpu", np.zeros(2, np.float32), "e2m1fn")
    with pytest.raises(ValueError, match="ONNX settings"):
        E.engine_cast("jax-cpu", np.zeros(2, np.float32), "e5m2", saturate=True)
    with pytest.raises(TypeError, match="float32, float16"):
        E.engine_cast("onnx", np.zeros(2, np.int32), "e5m2")


# ----------------------------------------------------------------------------- all inputs
_CHUNK = 1 << 26


@pytest.mark.exhaustive
@pytest.mark.parametrize("engine, fmt, opt", list(_cases()))
def test_exhaustive_float32(engine, fmt, opt):
    _need(engine)
    prof, rnd = E.engine_profile(engine, fmt, **opt)
    for start in range(0, 1 << 32, _CHUNK):
        x = (np.arange(_CHUNK, dtype=np.uint32) + np.uint32(start)).view(np.float32)
        got = E.engine_cast(engine, x, fmt, **opt)
        exp = fp8emu.encode(x, fmt, profile=prof, rounding=rnd)
        assert np.array_equal(got, exp), (engine, fmt, opt, hex(start), _first_diffs(x, got, exp))


# ----------------------------------------------------------------------------- command line
def test_cli_conformance_live(capsys):
    _need("jax-cpu")
    from fp8emu.cli import main
    assert main(["conformance", "--live", "--engines", "jax-cpu", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "jax-cpu (jax " in out and "| jax-cpu | jax " in out
    assert "all 9 engine settings reproduced bit-exactly" in out


@pytest.mark.parametrize("argv, message", [
    (["conformance", "--live", "--engines", "tensorflow"], "unknown engine 'tensorflow'"),
    (["conformance", "--engines", "onnx"], "--engines applies to --live"),
    (["conformance", "--live", "--folder", "."], "--folder applies to the recorded tables"),
])
def test_cli_conformance_live_bad_input(argv, message, capsys):
    from fp8emu.cli import main
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("fp8emu conformance: error: ") and message in err


def test_cli_conformance_live_says_when_the_version_is_not_the_proven_one(capsys, monkeypatch):
    _need("jax-cpu")
    from fp8emu.cli import main
    fake = {"jax-cpu": dict(INSTALLED["jax-cpu"], jaxlib="0.0.1")}
    monkeypatch.setattr(E, "installed_engines", lambda: fake)
    assert main(["conformance", "--live", "--engines", "jax-cpu", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert ("version check: jax-cpu: jaxlib 0.0.1 is installed, outside the versions its profile is proven "
            "for (jaxlib >=0.10.2,<0.11 (proven on 0.10.2))") in out
    assert "(not a proven version)" in out
