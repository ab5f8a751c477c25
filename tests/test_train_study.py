"""fp8emu train-study: corpus split, bad input, determinism, resume, tampering, Dask, inference quantizers."""

import csv
import json
import math
import os
import shutil

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fp8emu.torch as fp8torch  # noqa: E402
from fp8emu.cli import main  # noqa: E402
from fp8emu.lab import lm_study as report  # noqa: E402
from fp8emu.torch.study import corpus, infer, runs  # noqa: E402
from fp8emu.torch.study.model import GPT, ModelConfig  # noqa: E402

HAS_EMULATE = hasattr(fp8torch, "emulate")
#: The smallest study: baselines only (and one recipe where fp8emu.torch.emulate exists), few steps.
TINY = ["--recipes", "none", "--steps", "6", "--eval-every", "3", "--seeds", "2", "--seq-len", "16",
        "--batch", "2", "--infer-windows", "4", "--quiet"]
#: TINY for a study without the inference table (--no-inference, --no-report refuse --infer-windows).
TINY_NO_INFER = TINY[:TINY.index("--infer-windows")] + TINY[TINY.index("--infer-windows") + 2:]


def _csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study") / "a"
    assert main(["train-study", "--quick", "--out", str(out), *TINY]) == 0
    return out


# --------------------------------------------------------------------------- corpus

def test_corpus_is_pydoc_topics_split_at_nine_tenths():
    from pydoc_data.topics import topics   # the documented source, read independently
    data = "\n\n".join(topics[k] for k in sorted(topics)).encode("utf-8")
    c = corpus.load_corpus()
    n_train = len(data) * 9 // 10
    assert c.train.tobytes() == data[:n_train] and c.val.tobytes() == data[n_train:]
    assert c.n_bytes == len(data) and "Python Software Foundation" in c.license


def test_windows_are_fixed_and_targets_shift_by_one():
    data = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
    x, y = corpus.eval_windows(data, 2, 4)
    assert bytes(x[0].astype(np.uint8)) == b"abcd" and bytes(y[0].astype(np.uint8)) == b"bcde"
    assert bytes(x[1].astype(np.uint8)) == b"vwxy"     # last start = 26 - 4 - 1 = 21 -> 'v'


@pytest.mark.parametrize("kind,needle", [("missing", "does not exist"), ("dir", "is not a file"),
                                         ("binary", "is not UTF-8 text"), ("nul", "contains NUL"),
                                         ("tiny", "too small")])
def test_bad_corpus_is_one_line_before_anything_runs(kind, needle, tmp_path, capsys):
    path = tmp_path / "c.txt"
    if kind == "dir":
        path.mkdir()
    elif kind == "binary":
        path.write_bytes(b"text \xff\xfe more")
    elif kind == "nul":
        path.write_bytes(b"text\x00text" * 100)
    elif kind == "tiny":
        path.write_text("just a few bytes")
    out = tmp_path / "out"
    assert main(["train-study", "--corpus", str(path), "--out", str(out), *TINY]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and err[0].startswith("fp8emu train-study: error:")
    assert not out.exists()


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("argv,needle", [
    (["--steps", "0"], "argument --steps"),
    (["--d-model", "-3"], "argument --d-model"),
    (["--seeds", "0"], "argument --seeds"),
    (["--d-model", "130", "--n-head", "4"], "multiple of n_head"),
    (["--batch", "4096", "--seq-len", "4096"], "GiB"),
    (["--baselines", "fp16"], "unknown baseline 'fp16'"),
    (["--baselines", ""], "unknown baseline ''"),                   # '' is not 'both': say 'none' or 'all'
    (["--baselines", "none"], "the selection has no runs"),          # nothing to run: refused before --out
    (["--lr", "1e40"], "float32 holds"),                             # Inf in the float32 optimizer step
    (["--lr", "1e-50"], "float32 holds"),                            # zero there
])
def test_bad_sizes_are_one_clear_error(argv, needle, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["train-study", "--recipes", "none", "--out", str(out), "--quiet", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert needle in err[-1] and not out.exists()


def test_out_that_is_a_file_is_refused(tmp_path, capsys):
    out = tmp_path / "f"
    out.write_text("keep me")
    assert main(["train-study", "--out", str(out), *TINY]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a file; give a folder" in err[0] and out.read_text() == "keep me"


@pytest.mark.parametrize("lr", [1e40, 1e-50, True, float("nan"), 0.0])
def test_train_config_checks_lr_as_float32(lr):
    from fp8emu.torch.study.train import TrainConfig
    with pytest.raises(ValueError, match="lr must be a positive number that float32 holds"):
        TrainConfig(lr=lr).check()
    assert TrainConfig(lr=3e38).check().lr == 3e38 and TrainConfig(lr=2.0 ** -149).check()


def test_summary_says_how_many_seeds_diverged(tmp_path, capsys):
    out = tmp_path / "dv"
    argv = [a for a in TINY_NO_INFER if a != "--quiet"]
    argv[argv.index("--steps") + 1] = "3"
    assert main(["train-study", "--quick", "--out", str(out), "--baselines", "fp32", "--lr", "1e30",
                 "--no-inference", *argv]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("fp32 ")]
    assert lines and lines[0].endswith("final val loss nan  (2 of 2 seeds diverged)")


def test_unknown_recipe_or_stack_is_one_line(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["train-study", "--recipes", "te-nope", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ("te-nope" in err[0] or "not available" in err[0]) and not out.exists()
    if HAS_EMULATE:
        assert main(["train-study", "--recipes", "te-delayed", "--stacks", "a100", "--out", str(out)]) == 2
        assert "unknown stack 'a100'" in capsys.readouterr().err


# --------------------------------------------------------------------------- the study

def test_quick_study_writes_tables_report_and_is_deterministic(tiny_study, tmp_path):
    again = tmp_path / "b"
    assert main(["train-study", "--quick", "--out", str(again), *TINY]) == 0
    for name in ("runs.csv", "curves.csv", "inference.csv"):
        a, b = _csv(tiny_study / name), _csv(again / name)
        drop = {"s_per_step", "wall_s"}
        assert [{k: v for k, v in r.items() if k not in drop} for r in a] == \
               [{k: v for k, v in r.items() if k not in drop} for r in b]
    rows = _csv(tiny_study / "runs.csv")
    assert [r["run_id"] for r in rows] == ["fp32-s0", "fp32-s1", "bf16-s0", "bf16-s1"]
    assert all(math.isfinite(float(r["final_val_loss"])) for r in rows)
    # training lowers the loss from log(256) = 5.545 nats/byte (uniform bytes)
    curves = _csv(tiny_study / "curves.csv")
    first = [float(r["val_loss"]) for r in curves if r["step"] == "0"]
    assert all(abs(v - math.log(256)) < 0.1 for v in first)
    assert all(float(r["final_val_loss"]) < math.log(256) - 0.3 for r in rows)
    md = (tiny_study / "report.md").read_text()
    html = (tiny_study / "report.html").read_text()
    for needle in ("pydoc_data.topics", "fp8emu train-study --out", "--quick", "torch", "corpus_sha256", "perplexity"):
        assert needle in md and needle in html
    assert (tiny_study / "figures" / "val_loss_curves.png").read_bytes()[:4] == b"\x89PNG"


def test_gaps_are_paired_by_seed_and_match_scipy_t_interval(tiny_study):
    stats = pytest.importorskip("scipy.stats")
    rows = {r["run_id"]: float(r["final_val_loss"]) for r in _csv(tiny_study / "runs.csv")}
    g = [rows[f"fp32-s{s}"] - rows[f"bf16-s{s}"] for s in (0, 1)]
    gap = next(r for r in _csv(tiny_study / "gaps.csv") if r["recipe"] == "fp32")
    half = stats.t.ppf(0.975, 1) * np.std(g, ddof=1) / math.sqrt(2)
    assert float(gap["gap_to_bf16"]) == pytest.approx(np.mean(g), abs=1e-12)
    assert float(gap["gap_ci95_high"]) == pytest.approx(np.mean(g) + half, rel=1e-3)
    for n in (3, 5, 11, 31):
        st = report.gap_stats(np.arange(n) * 0.1)
        want = stats.t.ppf(0.975, n - 1) if n <= 31 else 1.96
        assert (st["ci_high"] - st["mean"]) * math.sqrt(n) / st["sd"] == pytest.approx(want, abs=1e-3)


def test_resume_runs_only_what_is_missing(tiny_study, tmp_path, capsys):
    out = tmp_path / "resume"
    shutil.copytree(tiny_study, out)
    before = (out / "runs" / "fp32-s0.json").read_bytes()
    (out / "runs" / "bf16-s1.json").unlink()
    assert main(["train-study", "--quick", "--out", str(out), *TINY[:-1]]) == 0
    assert "1 runs trained, 3 already" in capsys.readouterr().out
    assert (out / "runs" / "fp32-s0.json").read_bytes() == before
    a, b = _csv(tiny_study / "curves.csv"), _csv(out / "curves.csv")
    assert a == b and len({(r["run_id"], r["step"]) for r in b}) == len(b)   # no run lost or duplicated


def test_tampered_result_file_is_refused_not_merged(tiny_study, tmp_path, capsys):
    out = tmp_path / "tamper"
    shutil.copytree(tiny_study, out)
    path = out / "runs" / "bf16-s0.json"
    d = json.loads(path.read_text())
    d["result"]["final_val_loss"] -= 0.5
    path.write_text(json.dumps(d))
    runs_csv = (out / "runs.csv").read_bytes()
    assert main(["train-study", "--quick", "--out", str(out), *TINY]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bf16-s0.json was modified" in err[0]
    assert (out / "runs.csv").read_bytes() == runs_csv
    path.write_text("{not json")
    assert main(["train-study", "--quick", "--out", str(out), *TINY]) == 2
    assert "unreadable" in capsys.readouterr().err


def test_other_configuration_in_out_is_refused(tiny_study, tmp_path, capsys):
    out = tmp_path / "other"
    shutil.copytree(tiny_study, out)
    assert main(["train-study", "--quick", "--out", str(out), *TINY, "--steps", "7"]) == 2
    assert "another model, schedule or corpus" in capsys.readouterr().err


def test_tampered_weights_are_refused(tiny_study, tmp_path, capsys):
    out = tmp_path / "weights"
    shutil.copytree(tiny_study, out)
    p = out / "models" / "bf16-s0.pt"
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x40
    p.write_bytes(bytes(data))
    assert main(["train-study", "--quick", "--out", str(out), *TINY]) == 2
    assert "bf16-s0.pt is missing or was modified" in capsys.readouterr().err


def test_dask_workers_give_the_same_results(tiny_study, tmp_path):
    pytest.importorskip("distributed")
    out = tmp_path / "dask"
    assert main(["train-study", "--quick", "--out", str(out), "--workers", "2", "--no-report", *TINY_NO_INFER]) == 0
    drop = {"s_per_step", "wall_s"}
    a = [{k: v for k, v in r.items() if k not in drop} for r in _csv(tiny_study / "runs.csv")]
    b = [{k: v for k, v in r.items() if k not in drop} for r in _csv(out / "runs.csv")]
    assert a == b


# --------------------------------------------------------------------------- model and inference

def test_projections_are_linear_layers_and_head_is_not():
    m = GPT(ModelConfig(n_layer=2, d_model=128, n_head=4, seq_len=8, batch=1))
    names = sorted(n for n, x in m.named_modules() if isinstance(x, torch.nn.Linear))
    assert names == sorted(f"blocks.{i}.{p}" for i in range(2) for p in ("attn.qkv", "attn.out", "mlp.fc",
                                                                          "mlp.proj"))
    assert m.cfg.n_params == sum(p.numel() for p in m.parameters())


def test_w8a8_linear_is_e4m3_static_scale_as_ml_dtypes_casts_it():
    rng = np.random.default_rng(3)
    lin = torch.nn.Linear(32, 16)
    x = torch.from_numpy(rng.standard_normal((5, 32)).astype(np.float32) * 3)
    amax_calib = 2.0                                   # inputs above it saturate, as a static scale does
    scale = np.float32(448.0 / amax_calib)
    q = infer._QuantLinear(lin, "e4m3-tensor", scale)
    w = lin.weight.detach().numpy()
    sw = np.float32(448.0) / np.float32(np.abs(w).max())

    def e4m3(v, s):   # saturating RNE cast of fl32(v * s), then the exact value / s
        c = np.clip((v * s).astype(np.float32), -448, 448).astype(ml_dtypes.float8_e4m3fn)
        return c.astype(np.float64) / np.float64(s)
    want = e4m3(x.numpy(), scale) @ e4m3(w, sw).T + lin.bias.detach().numpy()
    got = q(x).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_inference_table_has_every_configuration(tiny_study):
    rows = _csv(tiny_study / "inference.csv")
    assert [r["config"] for r in rows] == [c.name for c in infer.CONFIGS]
    ref = next(float(r["perplexity"]) for r in rows if r["config"] == "bf16")
    for r in rows:
        assert float(r["perplexity"]) == pytest.approx(math.exp(float(r["val_loss"])), rel=1e-12)
        assert float(r["ppl_ratio_to_bf16"]) == pytest.approx(float(r["perplexity"]) / ref, rel=1e-12)


@pytest.mark.skipif(not HAS_EMULATE, reason="fp8emu.torch.emulate is not merged in this tree")
def test_quick_recipe_runs_swap_every_projection_and_are_deterministic(tmp_path):
    # --quick's two pairs (NVFP4 with its stochastic rounding included), shortened to 4 steps
    argv = ["train-study", "--quick", "--baselines", "bf16", "--seeds", "1", "--steps", "4", "--eval-every", "2",
            "--no-report", "--quiet"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 0
    assert main([*argv, "--out", str(tmp_path / "b")]) == 0
    for run in ("te-delayed@h100-s0", "te-nvfp4@b200-s0"):
        a = json.loads((tmp_path / "a" / "runs" / f"{run}.json").read_text())["result"]
        b = json.loads((tmp_path / "b" / "runs" / f"{run}.json").read_text())["result"]
        assert a["train_loss"] == b["train_loss"] and a["val_loss"] == b["val_loss"]
        assert a["swapped"] == ["blocks.0.attn.out", "blocks.0.attn.qkv", "blocks.0.mlp.fc", "blocks.0.mlp.proj"]
        assert a["diagnostics"], "the first seed records diagnostics"
    bf16 = json.loads((tmp_path / "a" / "runs" / "bf16-s0.json").read_text())["result"]
    assert a["train_loss"][0] == pytest.approx(bf16["train_loss"][0], abs=0.05)   # same init and batch
    assert a["train_loss"] != bf16["train_loss"]                                    # but emulated


def test_pairs_option_refuses_bad_items_before_anything_runs(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["train-study", "--pairs", "te-delayed", "--out", str(out), *TINY[2:]]) == 2
    assert "recipe@stack" in capsys.readouterr().err and not out.exists()
    if HAS_EMULATE:
        assert main(["train-study", "--pairs", "te-nvfp4@h100", "--out", str(out), *TINY[2:]]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "te-nvfp4@h100 cannot run" in err[0] and not out.exists()


def test_a_study_grows_by_invocations_and_reports_every_run(tiny_study, tmp_path, capsys):
    out = tmp_path / "grow"
    shutil.copytree(tiny_study, out)
    argv = [a for a in TINY if a != "--quiet"]
    argv[argv.index("--seeds") + 1] = "3"
    assert main(["train-study", "--quick", "--out", str(out), "--baselines", "bf16", *argv]) == 0
    assert "1 runs trained, 2 already" in capsys.readouterr().out
    ids = [r["run_id"] for r in _csv(out / "runs.csv")]
    assert ids == ["fp32-s0", "fp32-s1", "bf16-s0", "bf16-s1", "bf16-s2"]


def test_report_only_trains_nothing(tiny_study, tmp_path, capsys):
    out = tmp_path / "ro"
    shutil.copytree(tiny_study, out)
    (out / "report.md").unlink()
    argv = [a for a in TINY if a != "--quiet"]
    argv[argv.index("--seeds") + 1] = "5"       # more seeds than were run: nothing is trained
    assert main(["train-study", "--quick", "--out", str(out), "--report-only", *argv]) == 0
    assert "0 runs trained" in capsys.readouterr().out and (out / "report.md").exists()
    assert not (out / "runs" / "bf16-s4.json").exists()
    prov = {r["item"]: r["value"] for r in _csv(out / "provenance.csv")}
    assert prov["corpus"] == "pydoc_data.topics" and prov["torch"] == torch.__version__
    # which CPU _scaled_mm path the cpu stack's per-tensor GEMMs took here (Blas.cpp: oneDNN needs mkldnn,
    # AMX-INT8, and AMX-FP16 for two FP8 dtypes), read from /proc/cpuinfo by this test itself
    flags = set()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            flags = next((set(ln.split(":", 1)[1].split()) for ln in f if ln.startswith("flags")), set())
    mk = torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled
    same = "onednn" if mk and "amx_int8" in flags else "emulated"
    mixed = "onednn" if mk and {"amx_int8", "amx_fp16"} <= flags else "emulated"
    assert prov["cpu_scaled_mm"] == (f"e4m3fn x e4m3fn per-tensor: torch-cpu-{same}; e5m2 x e4m3fn per-tensor: "
                                     f"torch-cpu-{mixed}; row-wise: torch-cpu-emulated")
    assert main(["train-study", "--quick", "--out", str(tmp_path / "none"), "--report-only", *argv]) == 2
    assert "holds no study" in capsys.readouterr().err


def test_scheduler_address_runs_on_an_existing_cluster(tiny_study, tmp_path):
    distributed = pytest.importorskip("distributed")
    out = tmp_path / "sched"
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        assert main(["train-study", "--quick", "--out", str(out), "--scheduler", cluster.scheduler_address,
                     "--no-report", *TINY_NO_INFER]) == 0
    drop = {"s_per_step", "wall_s"}
    a = [{k: v for k, v in r.items() if k not in drop} for r in _csv(tiny_study / "runs.csv")]
    b = [{k: v for k, v in r.items() if k not in drop} for r in _csv(out / "runs.csv")]
    assert a == b
