"""The golden-value kit (fp8emu.testing) and the GPU validator's no-GPU path."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

import fp8emu
from fp8emu import testing as T
from fp8emu import validate_gpu as V
from fp8emu.cli import main
from oracle import ValueOracle

pytest_plugins = ["fp8emu.testing"]


class FakeDlpack:
    """A device-less tensor exposing only the DLPack protocol (as torch does)."""

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


@pytest.mark.parametrize("wrap", [lambda c: c, lambda c: c.view(ml_dtypes.float8_e4m3fn), FakeDlpack,
                                  FakeArray, lambda c: c.tolist()])
def test_assert_fp8_equal_accepts_containers(wrap):
    codes = np.array([0x38, 0x7E, 0x7F, 0x2A, 0x80], np.uint8)   # CUDA satfinite, worked by hand
    T.assert_fp8_equal(wrap(codes), X, "e4m3fn", profile="cuda-satfinite")
    with pytest.raises(AssertionError, match=r"^2 of 5 FP8 codes differ"):
        T.assert_fp8_equal(wrap(codes), X, "e4m3fn")   # ocp: 464.33 -> NaN 0x7F, -NaN -> 0xFF


def test_assert_fp8_equal_message_details():
    x = np.linspace(1, 2, 40, dtype=np.float32)
    good = fp8emu.encode(x, "e5m2")
    bad = good + np.uint8(1)
    with pytest.raises(AssertionError) as e:
        T.assert_fp8_equal(bad, x, "e5m2")
    lines = str(e.value).splitlines()
    assert lines[0] == "40 of 40 FP8 codes differ from fp8emu (e5m2, profile 'ocp')"
    assert len(lines) == 2 + 10
    assert lines[2].startswith("0 | 1.0 (0x3f800000) | 0x3c = 1.0 | 0x3d = 1.25 | +1")


def test_assert_fp8_equal_options_and_errors():
    x = np.array([1000.0], np.float32)
    T.assert_fp8_equal(np.array([0x7E], np.uint8), x, "e4m3fn", saturate=True)
    with pytest.raises(AssertionError, match="shape"):
        T.assert_fp8_equal(np.zeros(2, np.uint8), x, "e4m3fn")
    with pytest.raises(TypeError, match="FP8 codes"):
        T.assert_fp8_equal(np.zeros(1, np.float32), x, "e4m3fn")
    with pytest.raises(TypeError, match="__dlpack__"):
        T.assert_fp8_equal(object(), x, "e4m3fn")


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
    # contents: every representable value, +-0, +-Inf, NaNs of both signs with several payloads
    assert set(fin_vals.tolist()) <= set(x[fin].tolist())
    assert {0.0, np.inf, -np.inf} <= set(x.tolist())
    assert np.signbit(x[x == 0]).any() and (~np.signbit(x[x == 0])).any()
    nan = np.isnan(x)
    assert np.signbit(x[nan]).any() and (~np.signbit(x[nan])).any() and len(set(g["bits"][nan])) >= 6
    # midpoints and their neighbours on both sides
    a = np.sort(np.unique(np.abs(fin_vals)))
    mids = (a[1:] + a[:-1]) / 2
    present = np.isin(mids.astype(g["x"].dtype).astype(np.float64), x)
    assert present.all()
    assert g["x"].dtype == np.dtype(T.SOURCE_DTYPES[src]) and g["bits"].view(g["x"].dtype).tolist() is not None


def test_golden_vectors_profile_and_errors():
    g = T.golden_vectors("e4m3fn", profile="cuda-satfinite")
    np.testing.assert_array_equal(g["codes"], fp8emu.encode(g["x"], "e4m3fn", profile="cuda-satfinite"))
    assert g["codes"][np.isinf(g["x"]) & (g["x"] > 0)][0] == 0x7E
    with pytest.raises(ValueError, match="source_dtype"):
        T.golden_vectors("e4m3fn", source_dtype="int8")


def test_save_golden_json_and_npz(tmp_path):
    pj = tmp_path / "v.json"
    g = T.save_golden(pj, "e5m2", profile="torch-cuda")
    d = json.loads(pj.read_text())        # plain JSON, no fp8emu needed
    assert d["profile"] == "torch-cuda" and d["format"] == "e5m2"
    bits = np.array([int(b, 16) for b in d["bits"]], np.uint32)
    np.testing.assert_array_equal(bits, g["bits"])
    np.testing.assert_array_equal(np.array([int(c, 16) for c in d["codes"]], np.uint8), g["codes"])
    pn = tmp_path / "v.npz"
    T.save_golden(pn, "e5m2", source_dtype="float16")
    with np.load(pn) as z:
        x = z["bits"].view(np.float16)
        np.testing.assert_array_equal(z["codes"], fp8emu.encode(x, "e5m2"))
    back = T.load_golden(pj)
    np.testing.assert_array_equal(back["codes"], g["codes"])
    with pytest.raises(ValueError, match=".json or .npz"):
        T.save_golden(tmp_path / "v.txt", "e5m2")


def test_cli_golden(tmp_path, capsys):
    out = tmp_path / "vectors.json"
    assert main(["golden", "--format", "e4m3fn", "--profile", "torch-cuda", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["profile"] == "torch-cuda" and len(d["codes"]) == len(d["bits"]) > 500
    assert main(["golden", "--format", "e4m3fn", "--profile", "triton-rtz", "--out", str(out)]) == 2


def test_fixture(fp8_golden):
    assert fp8_golden is T.golden_vectors


def test_validate_gpu_without_torch(monkeypatch, capsys):
    monkeypatch.setattr(V, "_try_import", lambda name: None)
    assert V.validate() is None
    assert main(["validate-gpu"]) == 0
    out = capsys.readouterr().out
    assert "torch is not installed" in out and "nothing to validate" in out


def test_validate_gpu_without_cuda(monkeypatch, capsys):
    class FakeTorch:
        class cuda:
            @staticmethod
            def is_available():
                return False
    monkeypatch.setattr(V, "_try_import", lambda name: FakeTorch if name == "torch" else None)
    assert main(["validate-gpu"]) == 0
    assert "no CUDA device" in capsys.readouterr().out
