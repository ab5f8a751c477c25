"""The kit's commands: encode, decode, formats, profiles, golden, conformance, validate-gpu (and its comparer)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import fp8emu
from fp8emu import conformance
from fp8emu.hifloat import hif8_summary
from fp8emu import testing as T
from fp8emu.gpu import validate as V
from fp8emu.cli import main
from fp8emu.data import golden_path
from oracle import ValueOracle


def _rows(capsys):
    return capsys.readouterr().out.splitlines()[1:]


# ----------------------------------------------------------------------------- encode / decode
def test_encode_negative_values_without_dashdash(capsys):
    assert main(["encode", "-nan", "-1e-3", "-inf", "-0.5", "--format", "e5m2"]) == 0
    rows = [r.split() for r in _rows(capsys)]
    assert [r[0] for r in rows] == ["-nan", "-1e-3", "-inf", "-0.5"]
    # spec E5M2: -NaN keeps its sign (0xFE), -Inf is 0xFC, -0.5 = 1 01110 00
    assert [r[1] for r in rows] == ["0xFE", "0x94", "0xFC", "0xB8"]
    # the same through a real process, options after the values
    r = subprocess.run([sys.executable, "-m", "fp8emu", "encode", "-1e-3", "-f", "e4m3fn", "-inf"],
                       capture_output=True, text=True)
    # e4m3fn has no Inf: -inf is NaN 0xFF; -1e-3 rounds to -2^-9 = 0x81
    assert r.returncode == 0, r.stderr
    assert [line.split()[1] for line in r.stdout.splitlines()[1:]] == ["0x81", "0xFF"]


def test_encode_hex_floats_bit_patterns_and_source_dtype(capsys):
    assert main(["encode", "0x1.8p+3", "-0x1p-9", "bits:0x3f800000", "bits:0xff800000", "-f", "e4m3fn"]) == 0
    rows = _rows(capsys)
    assert rows[0].startswith("0x1.8p+3 = 12 (0x41400000)  0x54  0 1010 100  12  0  0")   # 1.5 * 2^3
    assert rows[1].split()[4] == "0x81"                  # -2^-9: the smallest subnormal, negative
    assert rows[2].startswith("bits:0x3f800000 = 1 (0x3f800000)  0x38")
    assert rows[3].split()[4] == "0xFF"                  # -Inf pattern -> NaN (no Inf in e4m3fn)
    # bfloat16 inputs: 0.1 is first rounded to bfloat16 0x3dcd = 0.10009765625
    assert main(["encode", "0.1", "--source-dtype", "bfloat16", "-f", "e5m2"]) == 0
    row = _rows(capsys)[0]
    assert row.startswith("0.1 = 0.1000976562 (0x3dcd)")
    want = ValueOracle(fp8emu.get_format("e5m2"))(np.array([0.10009765625]), "rne", False)[0]
    assert int(row.split()[4], 16) == want
    assert main(["encode", "bits:0x3c00", "--source-dtype", "float16"]) == 0
    assert _rows(capsys)[0].split()[4] == "0x38"


def test_encode_stochastic_with_seed(capsys):
    args = ["encode"] + ["0.3"] * 64 + ["--rounding", "stochastic", "--seed", "5", "--sr-bits", "6"]
    assert main(args) == 0
    first = [r.split()[1] for r in _rows(capsys)]
    assert set(first) == {"0x29", "0x2A"}                # 0.28125 or 0.3125, never anything else
    assert main(args) == 0
    assert [r.split()[1] for r in _rows(capsys)] == first   # reproducible from the seed
    want = fp8emu.encode(np.full(64, 0.3), "e4m3fn", rounding="stochastic", rng=5, sr_bits=6)
    assert [int(c, 16) for c in first] == want.tolist()


@pytest.mark.parametrize("argv,needle", [
    (["encode", "1", "--rounding", "stochastic"], "needs --seed"),
    (["encode", "1", "--seed", "3"], "only to the stochastic roundings"),
    (["encode", "bits:0x1ffffffff"], "does not fit float32"),
    (["encode", "bits:zz"], "bad bit pattern"),
    (["decode", "16", "-f", "e2m1fn"], "out of range"),
    (["decode", "x7"], "CODE must be an integer"),
    (["golden", "--format", "e4m3fn", "--out", "v.txt"], ".json (JSON vectors), .h (C header), .hpp (C++ header), .cuh (CUDA header), .rle"),
    (["golden", "--out", "v.npz"], "--format is required"),
    (["golden", "--format", "e4m3fn", "--rounding", "stochastic", "--out", "v.npz"], "seed"),
    (["golden", "--format", "e4m3fn", "--exhaustive", "--out", "v.npz"], "exhaustive"),
    (["golden", "--format", "e4m3fn", "--seed", "1", "--out", "v.rle"], "do not apply"),
    (["golden", "--scaled-mm", "--out", "v.json"], "writes an .npz"),
    (["golden", "--scaled-mm", "--accumulators", "bogus", "--out", "v.npz"], "bogus"),
    (["validate-gpu", "--limit", "-5"], "positive"),
    (["validate-gpu", "--limit", "0"], "positive"),
])
def test_bad_input_is_one_line_exit_2(argv, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err


def test_decode_any_output_dtype(capsys):
    assert main(["decode", "0x7e", "0x01", "0b10000001", "--format", "e4m3fn", "--dtype", "bfloat16"]) == 0
    rows = [r.split() for r in _rows(capsys)]
    assert rows[0] == ["0x7E", "0", "1111", "110", "448", "0x43e0"]
    assert rows[1][4] == "0.001953125" and rows[1][5] == "0x3b00"      # 2^-9 in bfloat16
    assert rows[2][4] == "-0.001953125"
    assert main(["decode", "0x7f", "-f", "e5m2", "--dtype", "float64"]) == 0
    assert _rows(capsys)[0].split()[4:] == ["nan", "0x7ff8000000000000"]
    assert main(["decode", "0xff", "-f", "e4m3fn", "--profile", "torch-cuda-2.11"]) == 0
    assert _rows(capsys)[0].split()[5] == "0xfff00000"   # torch's float32 NaN for E4M3FN keeps the sign


def test_formats_and_profiles_listings(capsys):
    assert main(["formats"]) == 0
    assert capsys.readouterr().out.strip() == fp8emu.format_table() + "\n\nAlso: " + hif8_summary()
    assert main(["formats", "--names"]) == 0
    assert capsys.readouterr().out.split() == fp8emu.format_names()
    assert main(["profiles", "--names"]) == 0
    assert capsys.readouterr().out.split() == list(fp8emu.profile_names())
    assert main(["profiles"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(fp8emu.profile_names()) and out[2].startswith("torch-cuda ")


def test_presets_listing(capsys):
    from fp8emu.gemm import INSTRUCTIONS, presets
    assert main(["presets", "--names"]) == 0
    assert sorted(capsys.readouterr().out.split()) == sorted(INSTRUCTIONS)
    assert main(["presets", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(presets()))
    assert main(["presets", "--arch", "cdna"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cdna3-mfma-fp8  [CDNA3]  v_mfma") and "e4m3fnuz, e5m2fnuz -> float32" in out
    assert "equals MMA-Sim 2.1.1 on 200,000 random MMAs" in out
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    assert all(f"\n{n}  [" in "\n" + out for n in INSTRUCTIONS)
    assert "reproduces MATLAB-tensor-core model_validation b200_e4m3" in out
    assert main(["presets", "--arch", "tpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no preset's architecture contains 'tpu'" in err[0] and "CDNA3" in err[0]


@pytest.mark.parametrize("cmd", ["encode", "decode", "formats", "profiles", "presets", "golden", "validate-gpu",
                                 "conformance"])
def test_help(cmd, capsys):
    with pytest.raises(SystemExit) as e:
        main([cmd, "--help"])
    assert e.value.code == 0 and "usage: fp8emu " + cmd in capsys.readouterr().out


# ----------------------------------------------------------------------------- golden
def test_golden_outputs(tmp_path, capsys):
    out = tmp_path / "V.NPZ"
    assert main(["golden", "--format", "e4m3fn", "--profile", "torch-cuda-2.11", "--out", str(out)]) == 0
    assert out.exists() and not (tmp_path / "V.NPZ.npz").exists()
    g = T.load_golden(out)
    np.testing.assert_array_equal(g["codes"], fp8emu.encode(g["x"], "e4m3fn", profile="torch-cuda-2.11"))
    j = tmp_path / "sr.json"
    assert main(["golden", "--format", "e5m2", "--rounding", "stochastic", "--seed", "2", "--sr-bits", "3",
                 "--out", str(j)]) == 0
    d = json.loads(j.read_text())
    assert d["sr_bits"] == 3 and d["seed"] == 2 and len(d["random_bits"]) == len(d["codes"])
    assert max(int(r, 16) for r in d["random_bits"]) <= 7
    e = tmp_path / "all.npz"
    assert main(["golden", "--format", "e4m3fn", "--source-dtype", "float16", "--exhaustive", "--profile",
                 "torch-cuda-2.11", "--out", str(e)]) == 0
    with np.load(golden_path("torch_tables.npz")) as z:
        np.testing.assert_array_equal(T.load_golden(e)["codes"], z["f16_to_e4m3fn"])   # the H200 recording
    r = tmp_path / "t.rle"
    assert main(["golden", "--format", "e5m2", "--profile", "triton-rtz", "--rounding", "rtz", "--out", str(r)]) == 0
    s, c, n = conformance.read_rle(r)
    rs, rc, _ = conformance.read_rle(golden_path("triton_f32_e5m2_rtz.rle"))
    assert n == 1 << 32 and np.array_equal(s, rs) and np.array_equal(c, rc)
    h = tmp_path / "k.cuh"
    assert main(["golden", "--format", "e2m1fn", "--profile", "cuda-satfinite", "--name", "fp4", "--out", str(h)]) == 0
    assert "static const uint8_t fp4_expected_codes[FP4_COUNT]" in h.read_text()
    m = tmp_path / "mm.npz"
    assert main(["golden", "--scaled-mm", "--seed", "3", "--accumulators", "hopper-fast", "exact", "--out", str(m)]) == 0
    with np.load(m, allow_pickle=False) as z:
        assert z["shapes"].tolist()[-1] == [32, 32, 16384]
        a, b = z["case0_a"], z["case0_b"]
        want = fp8emu.scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", scale_a=z["case0_scale_a"],
                                scale_b=z["case0_scale_b"], accumulator="hopper-fast")
        np.testing.assert_array_equal(z["case0_tensorwise_f32_hopper-fast"], want)
        assert z["accumulators"].tolist() == ["hopper-fast", "exact"] and "case0_rowwise_bf16_exact" in z.files


# ----------------------------------------------------------------------------- conformance
def test_conformance_bad_folders(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "cuda_f32_e9m9_sat.rle").write_text("0 0\n")
    mal = tmp_path / "mal"
    mal.mkdir()
    (mal / "torch_f32_e4m3fn.rle").write_text("# torch_f32_e4m3fn inputs=4294967296\nzz top\n")
    zipless = tmp_path / "zipless"
    zipless.mkdir()
    (zipless / "torch_tables.npz").write_text("not a zip")
    for folder, needle in [("empty", "no recorded tables"), ("bad", "unknown table name"),
                           ("mal", "malformed run-length table"), ("zipless", "not an .npz"),
                           ("missing", "not a folder")]:
        assert main(["conformance", "--folder", str(tmp_path / folder)]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err
    one = tmp_path / "one"
    one.mkdir()
    shutil.copy(golden_path("torch_f32_e5m2.rle"), one / "torch_f32_e5m2.rle")
    assert main(["conformance", "--folder", str(one)]) == 0
    assert "all 1 recorded tables reproduced" in capsys.readouterr().out


# ----------------------------------------------------------------------------- validate-gpu
def test_validate_gpu_without_cuda_exit_3_and_json(tmp_path, capsys):
    report = tmp_path / "r.json"
    code = main(["validate-gpu", "--json", str(report)])
    out = capsys.readouterr().out
    ok, _ = V.gpu_available()
    if ok:
        pytest.skip("a CUDA device is present: the no-GPU exit status does not apply")
    assert code == V.EXIT_NO_GPU == 3 and "nothing to validate" in out
    d = json.loads(report.read_text())
    assert d["gpu"] is False and d["exit_status"] == 3 and d["results"] == [] and d["report_version"] == 1
    assert main(["validate-gpu", "--require-gpu"]) == 1


def test_validate_gpu_without_torch(monkeypatch, capsys):
    # simulates a machine without torch (the import itself is what fails there)
    monkeypatch.setattr(V, "_try_import", lambda name: None)
    assert V.validate() is None
    assert main(["validate-gpu"]) == 3
    assert "torch is not installed" in capsys.readouterr().out


# The comparer runs on CPU: there is no GPU here, so the GPU call is replaced by a CPU function that stands
# in for it (a NumPy cast, or a replay of outputs recorded on an H200).  These are the only test doubles.
def _ml_cast(fmt):
    dt = getattr(ml_dtypes, "float8_" + fmt)

    def cast(x):
        with np.errstate(invalid="ignore", over="ignore"):
            return x.astype(dt)
    return cast


def test_check_cast_counts_and_reports_mismatches():
    ok = V.check_cast(V.CastCase("ml_dtypes", "e5m2", "ml_dtypes", "rne", "bfloat16", _ml_cast("e5m2")))
    assert (ok.status, ok.inputs, ok.mismatches) == ("ok", 1 << 16, 0)

    def broken(x):                      # one wrong code: input 1.0 gives 0x39 instead of 0x38
        c = _ml_cast("e4m3fn")(x).view(np.uint8).copy()
        c[x.view(np.uint16) == 0x3F80] = 0x39
        return c
    r = V.check_cast(V.CastCase("mine", "e4m3fn", "ml_dtypes", "rne", "bfloat16", broken),
                     limit=3 << 14, chunk_bits=13)             # six chunks, the last holding 1.0
    assert (r.status, r.inputs, r.mismatches) == ("mismatch", 3 << 14, 1)
    assert r.examples == [{"bits": "0x3f80", "input": "1.0", "expected": "0x38", "expected_value": "1.0",
                           "got": "0x39", "got_value": "1.125"}]
    f32 = V.check_cast(V.CastCase("ml_dtypes", "e4m3fn", "ml_dtypes", "rne", "float32", _ml_cast("e4m3fn")),
                       limit=1000)
    assert (f32.status, f32.inputs) == ("ok", 1000)
    # torch CUDA's E5M2 NaN is 0x7F; ml_dtypes' is the spec's 0x7E: every NaN input differs
    nan = V.check_cast(V.CastCase("ml_dtypes", "e5m2", "torch-cuda-2.11", "rne", "float16", _ml_cast("e5m2")))
    assert nan.mismatches == 2 * 1023 and nan.examples[0]["expected"] == "0x7f"
    failed = V.check_cast(V.CastCase("mine", "e4m3fn", "ocp", "rne", "float16", lambda x: x[:3].astype(np.uint8)))
    assert failed.status == "failed" and "shape" in failed.message
    skipped = V.check_cast(V.CastCase("triton", "e5m2", "triton-rtz", "rtz", "float32", None, "triton not installed"))
    assert skipped.status == "skipped" and V.exit_status([skipped, ok]) == V.EXIT_OK
    assert V.exit_status([ok, r]) == V.EXIT_MISMATCH and V.exit_status([failed]) == V.EXIT_MISMATCH
    lines = V.markdown([ok, r])
    assert lines[3].startswith("| mine | bfloat16->e4m3fn | ml_dtypes | 49152 | 1 | mismatch |")
    assert "input 1.0 (bits 0x3f80): expected 0x38 (1.0), got 0x39 (1.125)" in lines[-1]


def _recorded_mm():
    """The H200 outputs of torch._scaled_mm for the recorded operands, as an `mm` function."""
    with np.load(golden_path("scaled_mm_dev.npz")) as z:
        rec = {k: z[k] for k in z.files if k.startswith("out_K64_")}
    p = "out_K64_"
    case = dict(a=rec[p + "a"], b=rec[p + "b"], scale_a=rec[p + "scales"][0], scale_b=rec[p + "scales"][1],
                rowscale_a=rec[p + "rowscale_a"], rowscale_b=rec[p + "rowscale_b"], bias=rec[p + "bias_f32"])

    def mm(a, b, fa, fb, sa, sb, bias, out_dtype, fast):
        assert np.array_equal(a, case["a"]) and np.array_equal(b, case["b"])
        if np.ndim(sa) == 2:
            return rec[f"{p}rowwise_bf16_fast{int(fast)}"].view(ml_dtypes.bfloat16)
        if out_dtype == "float32":
            return rec[f"{p}f32_fast{int(fast)}_bias0"]
        return rec[f"{p}bf16_fast{int(fast)}_bias1"].view(ml_dtypes.bfloat16)
    return mm, case


def test_check_scaled_mm_against_recorded_h200_outputs():
    mm, case = _recorded_mm()
    pairs = (("e4m3fn", "e4m3fn", ("tensorwise_f32", "tensorwise_bf16_bias", "rowwise_bf16")),)
    res = V.check_scaled_mm(mm, pairs=pairs, cases=[case])
    assert len(res) == 6 and all(r.status == "ok" and r.inputs == 32 * 32 for r in res), V.markdown(res)

    def off_by_one(*args):              # one element one ULP away, as a kernel bug would be
        out = np.array(mm(*args))
        flat = out.reshape(-1)
        flat[5] = np.nextafter(flat[5], np.inf) if out.dtype == np.float32 else \
            (flat[5:6].view(np.uint16) + np.uint16(1)).view(out.dtype)[0]
        return out
    bad = V.check_scaled_mm(off_by_one, pairs=pairs, cases=[case])
    assert all(r.status == "mismatch" and r.mismatches == 1 for r in bad)
    assert bad[0].examples[0]["index"] == "(0, 5)"
    assert V.exit_status(bad) == V.EXIT_MISMATCH


def test_run_prints_report_and_json(tmp_path, capsys):
    mm, case = _recorded_mm()
    lines = []
    pairs = (("e4m3fn", "e4m3fn", ("tensorwise_f32",)),)
    results = V.run([V.CastCase("ml_dtypes", "e4m3fn", "ml_dtypes", "rne", "float16", _ml_cast("e4m3fn"))], mm,
                    out=lines.append, mm_options=dict(pairs=pairs, cases=[case]), progress=True)
    err = capsys.readouterr().err                 # progress: a tqdm bar, or lines without tqdm
    assert "65.5k/65.5k" in err or "65536/65536 inputs" in err
    assert [r.status for r in results] == ["ok", "ok", "ok"]
    assert lines[0] == "| library | case | profile | inputs | mismatches | status |"
    d = V.report_dict(results, device="test double")
    json.dumps(d)
    assert d["exit_status"] == 0 and d["results"][0]["inputs"] == 65536 and d["gpu"] is True


def test_torch_calls_run_with_cpu_kernels():
    """The real torch call code of validate-gpu, on torch's CPU kernels (device="cpu")."""
    torch = pytest.importorskip("torch")
    for src in ("float32", "float16", "bfloat16"):
        # FNUZ casts on the CPU agree with the H200-recorded CUDA behaviour (the torch-cuda profile)
        r = V.check_cast(V.CastCase("torch", "e4m3fnuz", "torch-cuda-2.11", "rne", src,
                                    V._torch_cast(torch, "e4m3fnuz", device="cpu")), limit=1 << 16)
        assert (r.status, r.mismatches) == ("ok", 0), r
    res = V.check_scaled_mm(V._torch_mm(torch, device="cpu"), shapes=((16, 16, 32),))
    # CPU kernels do not accumulate as Hopper does: only that every variant runs is checked here
    assert len(res) == 10 and all(r.status in ("ok", "mismatch") and r.inputs == 256 for r in res), V.markdown(res)


def test_type_errors_are_one_error_line_unless_tracebacks_are_asked_for(monkeypatch, capsys):
    """The library raises TypeError for a wrong kind of input; the CLI reports it like a ValueError
    (one line, status 2), and FP8EMU_TRACEBACK=1 raises it with its traceback for debugging."""
    import fp8emu.cli.table as table_cli

    def wrong_kind(args):
        raise TypeError("codes must be unsigned integers, got an array of dtype int64")
    monkeypatch.setattr(table_cli, "run", wrong_kind)
    monkeypatch.delenv("FP8EMU_TRACEBACK", raising=False)
    assert main(["table", "e4m3fn"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["fp8emu table: error: codes must be unsigned integers, got an array of dtype int64"]
    monkeypatch.setenv("FP8EMU_TRACEBACK", "1")
    with pytest.raises(TypeError, match="dtype int64"):
        main(["table", "e4m3fn"])


# ----------------------------------------------------------------------------- every command's contract
_BAD_LINES = {
    "encode": ["encode", "1", "--format", "e4m3fn", "--seed", "-1"],
    "decode": ["decode", "--no-such-option"],
    "formats": ["formats", "--no-such-option"],
    "profiles": ["profiles", "--no-such-option"],
    "presets": ["presets", "--no-such-option"],
    "cpu-order": ["cpu-order", "12x3"],
    "table": ["table"],
    "conformance": ["conformance", "--workers", "0"],
    "golden": ["golden", "--format", "e4m3fn", "--out", "."],
    "validate-gpu": ["validate-gpu", "--json", "."],
    "figures": ["figures", "--size", "1e12"],
    "train-demo": ["train-demo", "--train-size", "1000000000000"],
    "study": ["study", "--demo", "--chunk-mb", "0"],
    "attention-study": ["attention-study", "--head-dim", "100000000000"],
    "attention-study contexts": ["attention-study", "--contexts", "1000000000000"],
    "attention-study product": ["attention-study", "--contexts", "1048576", "--head-dim", "1024"],
    "attention-study seed": ["attention-study", "--seed", "-3"],
    "attention-study folder": ["attention-study", "--figure", "."],
    "attention-study svg": ["attention-study", "--figure", "fig.svg"],
    "study chunk": ["study", "--demo", "--out", "o", "--chunk-mb", "1e308"],   # was an OverflowError traceback
    "train-study": ["train-study", "--steps", "0"],
    "train-study recipe": ["train-study", "--recipes", "no-such-recipe"],
    "grad-study": ["grad-study", "--kinds", "no-such-kind"],
}


@pytest.mark.parametrize("case", list(_BAD_LINES))
def test_every_command_refuses_with_one_line_and_status_2(case, capsys, tmp_path, monkeypatch):
    """argparse printed its usage lines before the error; attention-study allocated
    10**12 tokens (MemoryError traceback), named no option for a negative --seed, wrote DIR.png for a
    folder and failed on .svg only after the whole run.  Every refusal is now one line, before any work."""
    monkeypatch.chdir(tmp_path)
    assert set(c.split()[0] for c in _BAD_LINES) == set(fp8emu.cli.COMMANDS)
    argv = _BAD_LINES[case]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"fp8emu") and "error:" in err and "usage:" not in err
    assert list(tmp_path.iterdir()) == []          # nothing was written
    if case.startswith("attention-study") and case != "attention-study product":
        assert "--" in err                          # the option at fault is named
