"""The validation kit (fp8emu.testing): comparisons, ULP checks, golden files, the pytest plugin."""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
import tomllib
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import fp8emu
from fp8emu import conformance
from fp8emu import testing as T
from fp8emu.data import golden_path
from oracle import ValueOracle

pytest_plugins = ["pytester"]
# NaN bit patterns of bfloat16/float16 widened to float64 for the oracle
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning")
ROOT = Path(__file__).resolve().parents[1]


class FakeDlpack:
    """A device-less tensor exposing only the DLPack protocol."""

    def __init__(self, arr):
        self._a = arr

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


class FakeArray:
    def __init__(self, arr):
        self._a = arr

    def __array__(self, dtype=None, copy=None):
        return self._a


X = np.array([1.0, 464.33, -np.nan, 0.3, -1e-9], np.float32)
CUDA_SAT = np.array([0x38, 0x7E, 0x7F, 0x2A, 0x80], np.uint8)   # CUDA satfinite, worked by hand


def _jax(c):
    jnp = pytest.importorskip("jax.numpy")
    return jnp.asarray(c.view(ml_dtypes.float8_e4m3fn))


def _torch(c):
    torch = pytest.importorskip("torch")
    return torch.from_numpy(c.copy()).view(torch.float8_e4m3fn)


@pytest.mark.parametrize("wrap", [lambda c: c, lambda c: c.view(ml_dtypes.float8_e4m3fn), FakeDlpack,
                                  FakeArray, lambda c: c.tolist(), _jax, _torch],
                         ids=["uint8", "ml_dtypes", "dlpack", "array", "list", "jax", "torch"])
def test_assert_fp8_equal_accepts_containers(wrap):
    T.assert_fp8_equal(wrap(CUDA_SAT), X, "e4m3fn", profile="cuda-satfinite")
    with pytest.raises(AssertionError) as e:
        T.assert_fp8_equal(wrap(CUDA_SAT), X, "e4m3fn")   # ocp: 464.33 -> NaN 0x7F, -NaN -> 0xFF
    lines = str(e.value).splitlines()
    assert lines[0] == "2 of 5 e4m3fn codes differ from fp8emu (profile 'ocp')"
    assert lines[1] == "by kind: NaN code 1, saturation/overflow 1"
    assert lines[5].startswith("1 | 464.3299865722656 (0x43e82a3d) | 0x7f [0 1111 111] = nan | "
                               "0x7e [0 1111 110] = 448.0 | saturation/overflow | nan")


def test_inputs_from_frameworks():
    """x may be a torch tensor with requires_grad, a JAX bfloat16 array, an ml_dtypes float8 array."""
    torch = pytest.importorskip("torch")
    jnp = pytest.importorskip("jax.numpy")
    xs = np.array([1.0, 1.0625, -3.3, 500.0], np.float32)
    want = ValueOracle(fp8emu.get_format("e4m3fn"))(xs.astype(np.float64), "rne", True).astype(np.uint8)
    T.assert_fp8_equal(want, torch.tensor(xs, requires_grad=True), "e4m3fn", saturate=True)
    xb = xs.astype(ml_dtypes.bfloat16)
    want_b = ValueOracle(fp8emu.get_format("e4m3fn"))(xb.astype(np.float64), "rne", True).astype(np.uint8)
    T.assert_fp8_equal(want_b, jnp.asarray(xb), "e4m3fn", saturate=True)
    x8 = np.array([1.0, 57344.0, -0.5], ml_dtypes.float8_e5m2)       # e5m2 inputs into e4m3fn
    want8 = ValueOracle(fp8emu.get_format("e4m3fn"))(x8.astype(np.float64), "rne", False).astype(np.uint8)
    T.assert_fp8_equal(want8, x8, "e4m3fn")
    T.assert_fp8_equal(want8, jnp.asarray(x8), "e4m3fn")


def test_report_kinds_and_distances():
    f = fp8emu.get_format("e5m2")
    x = np.linspace(1, 2, 40, dtype=np.float32)
    good = ValueOracle(f)(x.astype(np.float64), "rne", False).astype(np.uint8)
    bad = good + np.uint8(1)
    c = T.compare_codes(bad, x, "e5m2")
    vals = f.values()
    # +1 code is the other neighbour (a rounding direction) exactly when the input lies strictly between
    rounding = int(np.count_nonzero((vals[good] < x) & (x < vals[bad])))
    assert 0 < rounding < 40
    assert c.mismatches == 40 and c.total == 40 and not c.ok
    assert c.kinds == {"NaN code": 0, "saturation/overflow": 0, "rounding direction": rounding,
                       "zero/sign": 0, "other": 40 - rounding}
    assert c.distance_histogram == {1: 40}
    lines = str(c).splitlines()
    assert lines[2] == "code distance (actual - expected, in steps of e5m2): +1: 40"
    assert len(lines) == 5 + 10
    assert lines[5] == "0 | 1.0 (0x3f800000) | 0x3c [0 01111 00] = 1.0 | 0x3d [0 01111 01] = 1.25 | other | +1"
    json.dumps(c.to_dict())
    # signed codes: one step towards zero on the negative side is distance +1
    neg = T.compare_codes(np.array([0xBD], np.uint8), np.float32([-1.1]), "e5m2")   # -1.25 for -1.0
    assert neg.distance_histogram == {-1: 1} and neg.kinds["rounding direction"] == 1
    z = T.compare_codes(np.array([0x80], np.uint8), np.float32([0.0]), "e5m2")
    assert z.kinds["zero/sign"] == 1 and z.examples[0]["index"] == "0"
    nd = T.compare_codes(np.array([[0x3C, 0x3C]], np.uint8), np.float32([[1.0, 2.0]]), "e5m2")
    assert nd.examples[0]["index"] == "(0, 1)"


def test_expected_codes_and_values():
    exp = np.array([0x38, 0x7F, 0xFF], np.uint8)
    assert T.compare_codes(exp, None, "e4m3fn", expected=exp).ok
    # values carry no NaN code: a NaN value matches either NaN code
    vals = np.array([1.0, np.nan, np.nan], np.float32)
    assert T.compare_codes(vals, None, "e4m3fn", expected=exp).ok
    assert not T.compare_codes(np.array([1.0, 2.0, np.nan], np.float32), None, "e4m3fn", expected=exp).ok
    with pytest.raises(ValueError, match="not e4m3fn values"):
        T.compare_codes(np.float32([0.3]), np.float32([0.3]), "e4m3fn")
    with pytest.raises(ValueError, match="inputs x"):
        T.compare_codes(exp, None, "e4m3fn")


def test_assert_fp8_equal_errors():
    x = np.array([1000.0], np.float32)
    T.assert_fp8_equal(np.array([0x7E], np.uint8), x, "e4m3fn", saturate=True)
    with pytest.raises(AssertionError, match="shape"):
        T.assert_fp8_equal(np.zeros(2, np.uint8), x, "e4m3fn")
    with pytest.raises(TypeError, match="array-like"):
        T.assert_fp8_equal(object(), x, "e4m3fn")
    with pytest.raises(TypeError, match="codes"):
        T.assert_fp8_equal(np.array([1 + 1j]), x, "e4m3fn")
    # FP4 codes must fit in 4 bits: 16 and 0x1F are not codes
    for bad in (16, 0x1F):
        with pytest.raises(ValueError, match=r"0\.\.15"):
            T.assert_fp8_equal(np.array([bad], np.uint8), np.float32([1.0]), "e2m1fn")
    # an e5m2 array is not a set of e4m3fn codes
    with pytest.raises(ValueError, match="dtype float8_e5m2 are not e4m3fn codes"):
        T.assert_fp8_equal(np.array([1.0], ml_dtypes.float8_e5m2), np.float32([1.0]), "e4m3fn")
    with pytest.raises(ValueError, match="masked"):
        T.assert_fp8_equal(np.ma.masked_array([0x38], mask=[True]), np.float32([1.0]), "e4m3fn")


def test_fp4_from_torch_packed():
    torch = pytest.importorskip("torch")
    # torch packs the first element in the low nibble: 0x21 = (0.5, 1.0), 0xF3 = (1.5, -6.0)
    packed = torch.tensor([[0x21, 0xF3]], dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    T.assert_fp8_equal(packed, np.float32([[0.5, 1.0, 1.5, -6.0]]), "e2m1fn")


def test_compare_ulp():
    e = np.float32([1.0, 2.0, 0.0, np.inf, np.nan, 3.0e38])
    a = e.copy()
    a[1] = np.nextafter(np.float32(2.0), np.float32(3.0))
    a[2] = -0.0                                   # +0 and -0 are 0 ULP apart
    a[5] = np.float32(3.4028235e38)                # max: a long way from 3e38
    r = T.compare_ulp(a, e, "float32")
    big = int(np.float32(3.4028235e38).view(np.int32) - np.float32(3.0e38).view(np.int32))
    assert r.exceeding == 2 and r.max_distance == big
    assert r.histogram["0"] == 4 and r.histogram["1"] == 1 and sum(r.histogram.values()) == 6
    assert r.worst[0]["ulp"] == big and r.worst[0]["index"] == "5"
    T.assert_close_ulp(a[:5], e[:5], "float32", max_ulp=1)
    with pytest.raises(AssertionError, match=r"^1 of 5 float32 elements differ by more than 0 ULP"):
        T.assert_close_ulp(a[:5], e[:5], "float32")
    # NaN against a number; max against Inf is one step
    n = T.compare_ulp(np.float16([np.nan, 65504.0]), np.float16([1.0, np.inf]), "float16")
    assert n.histogram == {"1": 1, "nan": 1} and n.exceeding == 2
    # bfloat16 results given as float32 values, and a torch bfloat16 tensor
    b = T.compare_ulp(np.float32([1.0, 1.0078125]), np.array([1.0, 1.0], ml_dtypes.bfloat16), "bfloat16")
    assert b.histogram == {"0": 1, "1": 1}
    with pytest.raises(ValueError, match="not a bfloat16 value"):
        T.compare_ulp(np.float32([1.001]), np.float32([1.0]), "bfloat16")
    with pytest.raises(ValueError, match="unsupported dtype"):
        T.compare_ulp(e, e, "int8")
    with pytest.raises(ValueError, match="max_ulp"):
        T.compare_ulp(e, e, "float32", max_ulp=-1)
    torch = pytest.importorskip("torch")
    T.assert_close_ulp(torch.tensor([1.0, 1.0078125], dtype=torch.bfloat16, requires_grad=True),
                       np.array([1.0, 1.0], ml_dtypes.bfloat16), "bfloat16", max_ulp=1)


def test_gemm_output_check_against_scaled_mm():
    a = fp8emu.encode(np.random.default_rng(1).normal(size=(16, 64)), "e4m3fn")
    b = fp8emu.encode(np.random.default_rng(2).normal(size=(64, 8)), "e4m3fn")
    hopper = fp8emu.scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", accumulator="hopper")
    exact = fp8emu.scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", accumulator="exact")
    r = T.compare_ulp(hopper, exact, "float32")
    assert r.total == 128 and r.max_distance >= 0


# ----------------------------------------------------------------------------- golden vectors
@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2", "e4m3fnuz", "e2m3fn", "e2m1fn"])
@pytest.mark.parametrize("src", ["float32", "float16", "bfloat16", "float64"])
def test_golden_vectors_ocp_match_oracle(fmt, src):
    g = T.golden_vectors(fmt, source_dtype=src)
    f = fp8emu.get_format(fmt)
    x = g["x"].astype(np.float64)
    fin = np.isfinite(x)
    np.testing.assert_array_equal(g["codes"][fin], ValueOracle(f)(x[fin], "rne", False))
    vals = f.values()
    fin_vals = vals[np.isfinite(vals)]
    assert set(fin_vals.tolist()) <= set(x[fin].tolist())
    assert {0.0, np.inf, -np.inf} <= set(x.tolist())
    assert np.signbit(x[x == 0]).any() and (~np.signbit(x[x == 0])).any()
    nan = np.isnan(x)
    assert np.signbit(x[nan]).any() and (~np.signbit(x[nan])).any() and len(set(g["bits"][nan])) >= 6
    a = np.sort(np.unique(np.abs(fin_vals)))
    mids = (a[1:] + a[:-1]) / 2
    assert np.isin(mids.astype(g["x"].dtype).astype(np.float64), x).all()
    assert g["x"].dtype == np.dtype(T.SOURCE_DTYPES[src])


@pytest.mark.parametrize("src,fmt", [("float16", "e4m3fn"), ("bfloat16", "e5m2"), ("bfloat16", "e8m0fnu")])
def test_exhaustive_vectors_match_recorded_torch_table(src, fmt):
    g = T.golden_vectors(fmt, source_dtype=src, profile="torch-cuda-2.11", exhaustive=True)
    np.testing.assert_array_equal(g["bits"], np.arange(1 << 16))
    key = {"float16": "f16", "bfloat16": "bf16"}[src] + "_to_" + fmt
    with np.load(golden_path("torch_tables.npz")) as z:
        np.testing.assert_array_equal(g["codes"], z[key])
    with pytest.raises(ValueError, match="exhaustive"):
        T.golden_vectors(fmt, exhaustive=True)


def test_stochastic_vectors():
    g = T.golden_vectors("e4m3fn", rounding="stochastic", seed=7, sr_bits=8)
    n = g["x"].size // 4
    rb = g["random_bits"]
    assert rb.dtype == np.uint32 and (rb[:n] == 0).all() and (rb[n:2 * n] == 255).all() and rb.max() <= 255
    assert g["sr_bits"] == 8 and g["seed"] == 7
    x = g["x"][:n].astype(np.float64)
    f = fp8emu.get_format("e4m3fn")
    ok = np.isfinite(x) & (np.abs(x) <= f.max)
    # zero random bits truncate; all-ones bits round up unless the discarded part is below 2**-8 of an ulp
    np.testing.assert_array_equal(g["codes"][:n][ok], ValueOracle(f)(x[ok], "rtz", False))
    again = T.golden_vectors("e4m3fn", rounding="stochastic", seed=7, sr_bits=8)
    np.testing.assert_array_equal(again["codes"], g["codes"])
    np.testing.assert_array_equal(g["codes"], fp8emu.encode(g["x"], "e4m3fn", rounding="stochastic",
                                                            random_bits=rb, sr_bits=8))
    with pytest.raises(ValueError, match="seed"):
        T.golden_vectors("e4m3fn", rounding="stochastic")
    with pytest.raises(ValueError, match="only to the stochastic roundings"):
        T.golden_vectors("e4m3fn", seed=1)


def test_golden_files_round_trip(tmp_path):
    pj = tmp_path / "v.json"
    g = T.save_golden(pj, "e5m2", profile="torch-cuda-2.11")
    d = json.loads(pj.read_text())        # plain JSON, no fp8emu needed
    assert d["profile"] == "torch-cuda-2.11" and d["format"] == "e5m2" and d["format_version"] == 1
    np.testing.assert_array_equal(np.array([int(b, 16) for b in d["bits"]], np.uint32), g["bits"])
    pn = tmp_path / "V.NPZ"                # written exactly where asked
    T.save_golden(pn, "e5m2", source_dtype="float16", rounding="stochastic", seed=3, sr_bits=5)
    assert pn.exists() and not (tmp_path / "V.NPZ.npz").exists()
    with np.load(pn, allow_pickle=False) as z:
        x = z["bits"].view(np.float16)
        np.testing.assert_array_equal(z["codes"], fp8emu.encode(x, "e5m2", rounding="stochastic",
                                                                random_bits=z["random_bits"], sr_bits=5))
    for p in (pj, pn):
        back = T.load_golden(p)
        assert back["format_version"] == 1
    back = T.load_golden(pn)
    assert back["sr_bits"] == 5 and back["random_bits"].size == back["codes"].size
    with pytest.raises(ValueError, match=".json, .npz or C headers"):
        T.save_golden(tmp_path / "v.txt", "e5m2")


def _npz(path, **arrays):
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)
    return path


def test_load_golden_validates(tmp_path):
    good = dict(format=np.array("e4m3fn"), source_dtype=np.array("float32"), profile=np.array("ocp"),
                rounding=np.array("rne"), saturate=np.array(False), bits=np.zeros(3, np.uint32),
                codes=np.zeros(3, np.uint8), format_version=np.array(1))
    T.load_golden(_npz(tmp_path / "ok.npz", **good))
    cases = {
        "unknown source_dtype": dict(good, source_dtype=np.array("int4")),
        "16-bit unsigned": dict(good, source_dtype=np.array("float16")),
        "equal length": dict(good, codes=np.zeros(2, np.uint8)),
        "missing key": {k: v for k, v in good.items() if k != "codes"},
        "format_version 9": dict(good, format_version=np.array(9)),
        "unknown format": dict(good, format=np.array("e9m9")),
        "out of range": dict(good, format=np.array("e2m1fn"), codes=np.full(3, 16, np.uint8)),
        "pickle": dict(good, profile=np.array([{"a": 1}], dtype=object)),
    }
    for msg, arrays in cases.items():
        with pytest.raises(ValueError, match=msg.split()[0] if msg != "pickle" else "pickle"):
            T.load_golden(_npz(tmp_path / "bad.npz", **arrays))
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(ValueError, match="not a zip"):
        T.load_golden(tmp_path / "text.npz")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a golden JSON"):
        T.load_golden(tmp_path / "bad.json")
    doc = {"format": "e4m3fn", "source_dtype": "float16", "profile": "ocp", "rounding": "rne",
           "saturate": False, "bits": ["0x12345"], "codes": ["0x01"]}
    (tmp_path / "wide.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="wider than 16 bits"):
        T.load_golden(tmp_path / "wide.json")


@pytest.mark.parametrize("compiler,lang", [("gcc", "c"), ("g++", "c++")])
def test_c_header_compiles_and_holds_the_vectors(tmp_path, compiler, lang):
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} not installed")
    h = tmp_path / "e4m3_sr.h"
    g = T.save_golden(h, "e4m3fn", source_dtype="bfloat16", profile="ocp", rounding="stochastic", seed=1,
                      sr_bits=4)
    # the header alone, as the main file (unused static arrays must not warn)
    subprocess.run([compiler, "-x", lang, "-c", "-Wall", "-Wextra", "-Werror", str(h), "-o",
                    str(tmp_path / "h.o")], check=True)
    T.save_golden(tmp_path / "other.h", "e5m2")        # a second header in the same translation unit
    src = tmp_path / ("main.c" if lang == "c" else "main.cpp")
    src.write_text(textwrap.dedent("""\
        #include <stdio.h>
        #include "e4m3_sr.h"
        #include "other.h"
        int main(void) {
            unsigned long sum = other_expected_codes[0] * 0u;
            for (int i = 0; i < E4M3_SR_COUNT; ++i)
                sum += e4m3_sr_input_bits[i] * 3u + e4m3_sr_expected_codes[i] + e4m3_sr_random_bits[i] * 7u;
            printf("%d %lu\\n", E4M3_SR_COUNT, sum);
            return 0;
        }
        """))
    exe = tmp_path / "main"
    subprocess.run([compiler, "-Wall", "-Wextra", "-Werror", "-I", str(tmp_path), str(src), "-o", str(exe)],
                   check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()
    want = int((g["bits"].astype(np.uint64) * 3 + g["codes"] + g["random_bits"].astype(np.uint64) * 7).sum())
    assert out == [str(g["codes"].size), str(want)]
    text = h.read_text()
    assert "format=e4m3fn" in text and "rounding=stochastic" in text and "format_version=1" in text


def test_rle_tables_reproduce_recordings(tmp_path):
    for name, fmt, src, prof, rnd in [("torch_f32_e4m3fn", "e4m3fn", "float32", "torch-cuda-2.11", "rne"),
                                      ("cuda_bf16_e5m2_satfinite", "e5m2", "bfloat16", "cuda-satfinite", "rne"),
                                      ("triton_f32_e5m2_rtz", "e5m2", "float32", "triton-rtz", "rtz")]:
        p = tmp_path / f"{name}.RLE"
        runs = T.save_rle(p, fmt, source_dtype=src, profile=prof, rounding=rnd)
        s, c, n = conformance.read_rle(p)
        rs, rc, rn = conformance.read_rle(golden_path(f"{name}.rle"))
        assert n == rn and runs == s.size
        np.testing.assert_array_equal(s, rs)
        np.testing.assert_array_equal(c, rc)


def test_rle_table_ocp_saturating_matches_oracle():
    s, c = [], []
    text = T.rle_table("e5m2", rounding="rtz", saturate=True)
    for line in text.splitlines()[1:]:
        a, b = line.split()
        s.append(int(a, 16))
        c.append(int(b, 16))
    pats = np.random.default_rng(0).integers(0, 1 << 32, 20000, dtype=np.uint64)
    got = conformance.rle_at(np.array(s, np.uint64), np.array(c), pats)
    x = pats.astype(np.uint32).view(np.float32).astype(np.float64)
    fin = np.isfinite(x)
    np.testing.assert_array_equal(got[fin], ValueOracle(fp8emu.get_format("e5m2"))(x[fin], "rtz", True))
    with pytest.raises(ValueError, match="stochastic"):
        T.rle_table("e5m2", rounding="stochastic")


def test_scaled_mm_cases_match_h200_recordings(tmp_path):
    with np.load(golden_path("scaled_mm_dev.npz")) as z:
        p = "out_K64_"
        op = dict(a=z[p + "a"], b=z[p + "b"], scale_a=z[p + "scales"][0], scale_b=z[p + "scales"][1],
                  rowscale_a=z[p + "rowscale_a"], rowscale_b=z[p + "rowscale_b"], bias=z[p + "bias_f32"])
        rec = {k: z[k] for k in z.files if k.startswith(p)}
    path = tmp_path / "cases.npz"
    T.save_scaled_mm_cases(path, operands=[op])
    with np.load(path, allow_pickle=False) as c:
        for fast, acc in ((0, "hopper"), (1, "hopper-fast")):
            np.testing.assert_array_equal(c[f"case0_tensorwise_f32_{acc}"].view(np.uint32),
                                          rec[f"{p}f32_fast{fast}_bias0"].view(np.uint32))
            np.testing.assert_array_equal(c[f"case0_tensorwise_bf16_bias_{acc}"], rec[f"{p}bf16_fast{fast}_bias1"])
            np.testing.assert_array_equal(c[f"case0_rowwise_bf16_{acc}"], rec[f"{p}rowwise_bf16_fast{fast}"])
        assert int(c["format_version"]) == 1 and c["shapes"].tolist() == [[32, 32, 64]]
    d = T.scaled_mm_cases(shapes=[(16, 16, 32), (32, 16, 16384)], accumulators=["hopper"])
    assert d["case1_a"].shape == (32, 16384) and d["case1_rowwise_bf16_hopper"].shape == (32, 16)


# ----------------------------------------------------------------------------- pytest plugin
PLUGIN = ("-p", "fp8emu.testing.plugin")

SNAPSHOT_TEST = """
import ml_dtypes, numpy as np, fp8emu

X = np.linspace(-3, 3, 24, dtype=np.float32)
XB = X.astype(ml_dtypes.bfloat16)

def kernel(x):
    return fp8emu.encode(x, "e4m3fn"{rounding})

def test_kernel(fp8_golden):
    fp8_golden.check(kernel(X), x=X, fmt="e4m3fn", profile="ocp")
    fp8_golden.check(fp8emu.quantize(X, "e5m2"), x=X, fmt="e5m2", name="values")
    fp8_golden.check(XB.astype(ml_dtypes.float8_e5m2), x=XB, fmt="e5m2", name="bf16")
"""


def test_plugin_snapshot_cycle(pytester):
    pytester.makepyfile(test_snap=SNAPSHOT_TEST.format(rounding=""))
    r = pytester.runpytest(*PLUGIN)
    r.assert_outcomes(passed=1)
    assert r.stdout.str().count("fp8_golden: created") == 3    # three snapshots created, a warning each
    files = sorted(p.name for p in (pytester.path / "fp8_golden" / "test_snap").iterdir())
    assert files == ["test_kernel.npz", "test_kernel__bf16.npz", "test_kernel__values.npz"]
    with np.load(pytester.path / "fp8_golden" / "test_snap" / "test_kernel.npz", allow_pickle=False) as z:
        assert str(z["format"]) == "e4m3fn" and str(z["profile"]) == "ocp" and int(z["format_version"]) == 1
        assert z["x"].dtype == np.float32 and z["codes"].size == 24
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=1)
    # the kernel changes: the check fails with the comparison report
    pytester.makepyfile(test_snap=SNAPSHOT_TEST.format(rounding=', rounding="rtz"'))
    r = pytester.runpytest(*PLUGIN)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*codes differ from the snapshot (profile 'ocp')*", "*rounding direction*",
                            "*--fp8-update-golden*"])
    # the wrong kernel cannot be accepted: the update checks it against encode(x, options)
    before = (pytester.path / "fp8_golden" / "test_snap" / "test_kernel.npz").read_bytes()
    r = pytester.runpytest(*PLUGIN, "--fp8-update-golden")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*fp8_golden: not recorded*"])
    assert (pytester.path / "fp8_golden" / "test_snap" / "test_kernel.npz").read_bytes() == before
    # the options say what the kernel does: now it is checked, recorded and passes
    pytester.makepyfile(test_snap=SNAPSHOT_TEST.format(rounding=', rounding="rtz"').replace(
        'profile="ocp")', 'profile="ocp", rounding="rtz")'))
    pytester.runpytest(*PLUGIN, "--fp8-update-golden").assert_outcomes(passed=1)
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=1)


def test_plugin_metadata_inputs_and_missing(pytester, monkeypatch):
    pytester.makepyfile(test_meta="""
        import numpy as np, fp8emu, os
        X = np.float32([1.0, 2.5, -7.0]) * float(os.environ.get("SCALE", "1"))
        def test_a(fp8_golden):
            fp8_golden.check(fp8emu.encode(X, "e5m2"), x=X, fmt="e5m2", kernel=os.environ.get("SAT", "0"))
    """)
    pytester.runpytest(*PLUGIN, "--fp8-golden-missing=fail").assert_outcomes(failed=1)
    r = pytester.runpytest(*PLUGIN)
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*fp8_golden: created*"])
    monkeypatch.setenv("SAT", "1")           # an option that is not encode's: stored and compared
    r = pytester.runpytest(*PLUGIN)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*recorded with format e5m2 and options*"])
    monkeypatch.setenv("SAT", "0")
    monkeypatch.setenv("SCALE", "2")
    r = pytester.runpytest(*PLUGIN)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*inputs x differ*"])


def test_plugin_is_declared_as_pytest11_entry_point():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    eps = meta["project"]["entry-points"]["pytest11"]
    assert eps == {"fp8emu.testing.plugin": "fp8emu.testing.plugin"}
    import importlib
    mod = importlib.import_module(eps["fp8emu.testing.plugin"])
    assert callable(mod.pytest_addoption) and hasattr(mod, "fp8_golden")


def test_readme_kit_example_runs(pytester):
    """The validation guide's "Use fp8emu in your project's tests" example is a working test file."""
    import re
    text = (ROOT / "docs" / "guides" / "validate-kernel.md").read_text()
    sec = text[text.index("## Use fp8emu in your project's tests"):]
    block = re.search(r"```python\n# test_my_kernel\.py\n(.*?)```", sec, re.S).group(1)
    pytester.makepyfile(test_my_kernel=block)
    r = pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider")
    outcomes = r.parseoutcomes()
    assert outcomes.get("passed", 0) >= 3 and not outcomes.get("failed") and not outcomes.get("errors"), r.stdout.str()
    assert zipfile.is_zipfile(next((pytester.path / "fp8_golden").rglob("*.npz")))


# ----------------------------------------------------------------------------- the kit's snapshots
def test_snapshot_options_are_stored_exactly(pytester, monkeypatch):
    """Options were stored with json.dumps(default=str), NumPy's shortened repr of an array,
    so a changed element inside the '...' still matched."""
    pytester.makepyfile(test_opt="""
        import numpy as np, fp8emu, os
        X = np.float32([1.0, 2.5, -7.0])
        T = np.arange(5000)
        T[2500] = int(os.environ.get("T2500", "2500"))
        def test_a(fp8_golden):
            fp8_golden.check(fp8emu.encode(X, "e5m2"), x=X, fmt="e5m2", table=T, scale=np.float32(0.1))
    """)
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=1)
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=1)
    monkeypatch.setenv("T2500", "7")
    r = pytester.runpytest(*PLUGIN)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*recorded with format e5m2 and options*"])


def test_snapshot_options_that_cannot_be_stored_are_refused(pytester):
    pytester.makepyfile(test_bad="""
        import numpy as np, fp8emu
        X = np.float32([1.0, 2.5])
        def test_a(fp8_golden):
            fp8_golden.check(fp8emu.encode(X, "e5m2"), x=X, fmt="e5m2", rng=np.random.default_rng(0))
    """)
    r = pytester.runpytest(*PLUGIN)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*fp8_golden option rng: a Generator cannot be stored exactly*"])
    assert not (pytester.path / "fp8_golden").exists()


def test_snapshot_names_map_to_one_file_each(pytester):
    """Names differing only in punctuation ('a/b', 'a:b') shared one file."""
    pytester.makepyfile(test_names="""
        import numpy as np, fp8emu
        X = np.float32([1.0, 2.5])
        def test_a(fp8_golden):
            fp8_golden.check(fp8emu.encode(X, "e5m2"), x=X, fmt="e5m2", name="a/b")
            fp8_golden.check(fp8emu.encode(X, "e4m3fn"), x=X, fmt="e4m3fn", name="a:b")
    """)
    r = pytester.runpytest(*PLUGIN)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*name=a/b' map to one file*"])
    # a later run (a new session) meets the file the other name wrote
    pytester.makepyfile(test_names="""
        import numpy as np, fp8emu
        X = np.float32([1.0, 2.5])
        def test_a(fp8_golden):
            fp8_golden.check(fp8emu.encode(X, "e5m2"), x=X, fmt="e5m2", name="a:b")
    """)
    r = pytester.runpytest(*PLUGIN)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*holds the snapshot of 'test_a::name=a/b'*"])


def test_a_wrong_kernel_is_never_recorded(pytester):
    """The first result was stored as it came; a wrong kernel recorded first passed forever."""
    pytester.makepyfile(test_wrong="""
        import numpy as np, fp8emu
        X = np.linspace(-3, 3, 24, dtype=np.float32)
        def test_a(fp8_golden):
            fp8_golden.check(fp8emu.encode(X, "e4m3fn", rounding="rtz"), x=X, fmt="e4m3fn", profile="ocp")
        def test_no_x(fp8_golden):
            fp8_golden.check(fp8emu.encode(X, "e4m3fn"), fmt="e4m3fn")
    """)
    r = pytester.runpytest(*PLUGIN)
    r.assert_outcomes(failed=2)
    r.stdout.fnmatch_lines(["*fp8_golden: not recorded*", "*needs the inputs x*"])
    assert not (pytester.path / "fp8_golden").exists()


def test_a_snapshot_failure_names_its_profile_and_hides_the_kit(pytester, monkeypatch):
    """A torch-cpu snapshot's failure said "profile 'ocp'"; the kit's own frames showed in
    the traceback."""
    pytester.makepyfile(test_prof="""
        import numpy as np, fp8emu, os
        X = np.linspace(-3, 3, 24, dtype=np.float32)
        def test_a(fp8_golden):
            got = fp8emu.encode(X, "e4m3fn", profile="torch-cpu")
            if os.environ.get("BREAK"):
                got = got ^ np.uint8(1)
            fp8_golden.check(got, x=X, fmt="e4m3fn", profile="torch-cpu")
        def test_assert():
            fp8emu.assert_fp8_equal(np.zeros(24, np.uint8) + 1, X, "e4m3fn")
    """)
    pytester.runpytest(*PLUGIN, "-k", "not assert").assert_outcomes(passed=1)
    monkeypatch.setenv("BREAK", "1")
    r = pytester.runpytest(*PLUGIN, "--tb=long")
    r.assert_outcomes(failed=2)
    out = r.stdout.str()
    assert "profile 'torch-cpu'" in out and "profile 'ocp'" in out   # the snapshot's, and the assert's default
    assert "testing/compare.py" not in out and "testing/plugin.py" not in out
