"""fp8emu.dask and the distributed study: bit-identical to NumPy, same rows on any scheduler, worker loss.

The cluster tests start a real ``distributed.LocalCluster`` of 2 worker
processes on 127.0.0.1 (module scope) and shut it down.
"""

import os
import signal
import threading
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import fp8emu
from fp8emu.cli import main
from fp8emu.lab import study

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
safetensors_numpy = pytest.importorskip("safetensors.numpy")
fd = pytest.importorskip("fp8emu.dask")

ROOT = Path(__file__).resolve().parents[1]
F32 = np.float32


def _bits(a):
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" else a


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(_bits(a), _bits(b))


@pytest.fixture(scope="module")
def x():
    g = np.random.default_rng(0)
    v = g.standard_t(3, (300, 200)).astype(F32)
    v[5, 7], v[9, 9], v[100:130] = np.nan, np.inf, 0.0
    v[200:210] *= 1e-6   # subnormal territory after scaling
    return v


@pytest.mark.parametrize("name, lazy, eager", [
    ("tensorwise", lambda d: fd.quantize_tensorwise(d, "e4m3fn"), lambda v: fp8emu.quantize_tensorwise(v, "e4m3fn")),
    ("tensorwise-pow2", lambda d: fd.quantize_tensorwise(d, "e5m2", pow2=True, margin=1),
     lambda v: fp8emu.quantize_tensorwise(v, "e5m2", pow2=True, margin=1)),
    ("rows", lambda d: fd.quantize_axiswise(d, "e4m3fn"), lambda v: fp8emu.quantize_axiswise(v, "e4m3fn")),
    ("columns", lambda d: fd.quantize_axiswise(d, "e4m3fn", axis=0), lambda v: fp8emu.quantize_axiswise(v, "e4m3fn", axis=0)),
    ("1x128", lambda d: fd.quantize_blockwise(d, "e4m3fn"), lambda v: fp8emu.quantize_blockwise(v, "e4m3fn")),
    ("128x128", lambda d: fd.quantize_blockwise(d, "e4m3fn", block=(128, 128)),
     lambda v: fp8emu.quantize_blockwise(v, "e4m3fn", block=(128, 128))),
    ("mx-fp4-even", lambda d: fd.quantize_mx(d, "e2m1fn", scale_rule="even"),
     lambda v: fp8emu.quantize_mx(v, "e2m1fn", scale_rule="even")),
    ("mx-fp8-axis0", lambda d: fd.quantize_mx(d, "e4m3fn", axis=0, scale_rule="rceil"),
     lambda v: fp8emu.quantize_mx(v, "e4m3fn", axis=0, scale_rule="rceil")),
    ("nvfp4", lambda d: fd.quantize_nvfp4(d), lambda v: fp8emu.quantize_nvfp4(v)),
    ("nvfp4-finite", lambda d: fd.quantize_nvfp4(d[:, 10:]), lambda v: fp8emu.quantize_nvfp4(v[:, 10:])),
])
@pytest.mark.parametrize("chunks", [(70, 45), (128, 200), (300, 33)])
def test_scaling_recipes_are_bit_identical_to_numpy(x, name, lazy, eager, chunks):
    t = lazy(da.from_array(x, chunks=chunks))
    got, want = t.compute(), eager(x)
    assert _same(got.codes, want.codes)
    assert _same(got.scale, want.scale) and _same(got.scale_inv, want.scale_inv)
    for extra in ("scale_codes", "block_scale_codes"):
        if getattr(want, extra) is not None:
            assert _same(getattr(got, extra), getattr(want, extra))
    assert got.global_scale == want.global_scale or (got.global_scale is None and want.global_scale is None)
    assert _same(t.dequantize().compute(), want.dequantize())


def test_encode_decode_quantize_are_bit_identical(x):
    d = da.from_array(x, chunks=(64, 64))
    for prof in (None, "torch-cuda-2.11", "cuda-satfinite"):
        assert _same(fd.encode(d, "e4m3fn", profile=prof).compute(), fp8emu.encode(x, "e4m3fn", profile=prof))
    codes = fp8emu.encode(x, "e5m2")
    assert _same(fd.decode(da.from_array(codes, chunks=50), "e5m2", dtype=np.float16).compute(),
                 fp8emu.decode(codes, "e5m2", dtype=np.float16))
    b = x.astype(ml_dtypes.bfloat16)
    assert np.array_equal(fd.quantize(da.from_array(b, chunks=100), "e4m3fn", saturate=True).compute(),
                          fp8emu.quantize(b, "e4m3fn", saturate=True), equal_nan=True)
    assert float(fd.amax(d)) == float(np.nanmax(np.abs(x)))


def test_bad_input_is_refused(x):
    with pytest.raises(TypeError, match="dask.array"):
        fd.encode(x, "e4m3fn")
    with pytest.raises(ValueError, match="stochastic"):
        fd.encode(da.from_array(x), "e4m3fn", rounding="stochastic", rng=0)
    with pytest.raises(ValueError, match="element format"):
        fd.quantize_mx(da.from_array(x), "e8m0fnu")


def test_study_metrics_on_dask_equal_the_in_process_study(x, tmp_path):
    np.save(tmp_path / "w.npy", x)
    ref = study.discover([tmp_path / "w.npy"])[0][0]
    names = ["tensor-e4m3fn", "row-e4m3fn", "block128x128-e4m3fn", "mx-e2m1fn-floor", "nvfp4", "calib-kl-e4m3fn"]
    want = study.study_tensor(ref, names, chunk_mb=128 * 200 * 4 / 2 ** 20)
    got = fd.study_metrics(da.from_array(x, chunks=(50, 50)), names, rows_per_chunk=128)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        for k, v in g.items():
            assert v == w[k] or (v != v and w[k] != w[k]), (g["recipe"], k)


# --------------------------------------------------------------------------- a real cluster

@pytest.fixture(scope="module")
def client():
    # Worker processes must import this checkout's fp8emu, whatever is installed.
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([old] if old else []))
    try:
        with study.dask_client(workers=2) as c:
            yield c
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """Tensors of every kind, two of them large enough to be split into chunk tasks."""
    g = np.random.default_rng(5)
    t = {f"layers.{i}.w": (g.standard_t(4, (256, 192)) * 0.05).astype(ml_dtypes.bfloat16 if i % 2 else F32)
         for i in range(16)}
    t["big.a"] = g.standard_normal((1024, 96)).astype(F32)
    t["big.b"] = g.standard_normal((640, 64)).astype(ml_dtypes.bfloat16)
    t["special"] = np.array([[1.0, np.nan, np.inf, 0.0, 500.0]], F32)
    t["zeros"] = np.zeros((4, 4), F32)
    path = tmp_path_factory.mktemp("many") / "many.safetensors"
    safetensors_numpy.save_file(t, str(path))
    return path


RECIPES = ["tensor-e4m3fn", "row-e4m3fn", "block128x128-e4m3fn", "mx-e4m3fn-floor", "nvfp4", "calib-mse-e4m3fn"]
CHUNK_MB = 256 * 96 * 4 / 2 ** 20   # big.a -> 4 chunks, big.b -> 3


@pytest.fixture(scope="module")
def reference(many, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref")
    study.run_study([many], out, recipes=RECIPES, chunk_mb=CHUNK_MB, progress=False, report=False)
    return (out / "results.csv").read_text()


def test_distributed_study_gives_the_same_rows(client, many, reference, tmp_path):
    assert len(study.chunk_ranges(study.discover([many])[0][0], int(CHUNK_MB * 2 ** 20) // 4)) == 4
    res = study.run_study([many], tmp_path, recipes=RECIPES, chunk_mb=CHUNK_MB, progress=False, report=False,
                          client=client)
    assert res["computed"] == 20
    assert (tmp_path / "results.csv").read_text() == reference


def test_cli_scheduler_address(client, many, reference, tmp_path, capsys):
    args = ["study", str(many), "--out", str(tmp_path), "--quiet", "--no-report", "--chunk-mb", str(CHUNK_MB),
            "--scheduler", client.scheduler.address, "--recipes", ",".join(RECIPES)]
    assert main(args) == 0
    assert (tmp_path / "results.csv").read_text() == reference
    with pytest.raises(OSError, match="cannot reach the Dask scheduler"):
        with study.dask_client(scheduler="tcp://127.0.0.1:9", timeout=1):
            pass


def test_a_worker_killed_mid_study_loses_nothing(client, many, reference, tmp_path):
    pids = client.run(os.getpid)
    victim = sorted(pids.values())[0]
    done = {}
    run = threading.Thread(target=lambda: done.update(study.run_study(
        [many], tmp_path, recipes=RECIPES, chunk_mb=CHUNK_MB, progress=False, report=False, client=client)))
    run.start()
    csv_path = tmp_path / "results.csv"
    deadline = time.monotonic() + 60
    # Kill once the study is under way: some rows written, the run still going.
    while time.monotonic() < deadline and run.is_alive():
        if csv_path.exists() and csv_path.read_text().count("\n") > 1 + len(RECIPES):
            break
        time.sleep(0.02)
    assert run.is_alive(), "the study finished before a worker could be killed; make it bigger"
    os.kill(victim, signal.SIGKILL)
    run.join(120)
    assert not run.is_alive()
    assert done["computed"] == 20
    assert csv_path.read_text() == reference
    client.wait_for_workers(2, timeout=60)   # the nanny restarted it
    assert victim not in client.run(os.getpid).values()


def test_cli_workers_starts_and_stops_a_local_cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    path = tmp_path / "small.safetensors"
    g = np.random.default_rng(9)
    safetensors_numpy.save_file({"a": g.standard_normal((64, 64)).astype(F32),
                                 "b": g.standard_normal((32, 48)).astype(ml_dtypes.bfloat16)}, str(path))
    base = ["study", str(path), "--quiet", "--no-report", "--recipes", "tensor-e4m3fn,mx-*-floor"]
    assert main(base + ["--out", str(tmp_path / "local")]) == 0
    assert main(base + ["--out", str(tmp_path / "cluster"), "--workers", "1"]) == 0
    assert (tmp_path / "local" / "results.csv").read_text() == (tmp_path / "cluster" / "results.csv").read_text()


# --------------------------------------------------------------------------- exhaustive float32 sweeps

from fp8emu import conformance  # noqa: E402
from fp8emu.data import golden_path  # noqa: E402


def _same_function_on(lo, hi, a, b):
    """Two run-length tables agree on [lo, hi): compare them at every run start of either."""
    pts = np.union1d(a[0][(a[0] >= lo) & (a[0] < hi)], b[0][(b[0] >= lo) & (b[0] < hi)])
    pts = np.union1d(pts, [lo]).astype(np.uint64)
    return np.array_equal(conformance.rle_at(*a, pts), conformance.rle_at(*b, pts))


@pytest.mark.parametrize("fmt, profile", [("e4m3fn", "ocp"), ("e5m2", "torch-cuda-2.11"), ("e2m1fn", "cuda-satfinite")])
def test_float32_runs_sweep_every_input_and_match_the_table_runs(fmt, profile):
    lo, hi = 0x7F000000, 0x80400000   # the top binades, Inf, every positive NaN, -0 and the first negatives
    swept = fd.float32_runs(fmt, profile=profile, lo=lo, hi=hi, task_size=1 << 22)
    assert swept[0][0] == lo and np.all(np.diff(swept[0].astype(np.int64)) > 0)
    assert _same_function_on(lo, hi, swept, conformance.profile_runs(profile, fmt, "float32"))


def test_float32_mismatches_against_a_recording(client):
    rec = golden_path("torch_f32_e5m2.rle")
    lo, hi = 0x7F700000, 0x80100000   # big values, Inf and NaNs: where torch and the spec differ
    assert fd.float32_mismatches(rec, "e5m2", profile="torch-cuda-2.11", lo=lo, hi=hi, task_size=1 << 21) == 0
    # The spec's E5M2 NaN is 0x7E; torch's is 0x7F: every positive NaN input differs.
    assert fd.float32_mismatches(rec, "e5m2", lo=lo, hi=hi, task_size=1 << 21) == 0x7FFFFF
    with pytest.raises(ValueError, match="lo < hi"):
        fd.float32_runs("e4m3fn", lo=5, hi=5)


@pytest.mark.exhaustive
def test_all_2_32_inputs_on_the_cluster_reproduce_the_recording(client):
    assert fd.float32_mismatches(golden_path("torch_f32_e4m3fn.rle"), "e4m3fn", profile="torch-cuda-2.11") == 0


def test_attention_study_on_the_cluster_equals_in_process(client):
    from fp8emu.lab import attention as al
    opts = dict(contexts=(128, 256), queries=2, head_dim=16, experiments=("prescale", "promotion"),
                distributions=("gaussian",))
    assert al.attention_study(**opts, client=client) == al.attention_study(**opts)
