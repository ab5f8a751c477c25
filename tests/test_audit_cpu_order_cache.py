"""Hostile input to the CPU order policy, its cache file, ``fp8emu cpu-order`` and ``tools/record_cpu_order.py``
(tests/AUDIT.md, "Fresh audit of the CPU order, probes, compile and filters")."""

import importlib.util
import json
import sys
import warnings

import numpy as np
import pytest

from fp8emu.cli import main
from fp8emu.gemm import cpu_order, torch_cpu


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache file under tmp_path, the revealed policy, no memo; the key of 4x8x4 on one thread."""
    pytest.importorskip("torch")
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "auto")
    monkeypatch.setattr(cpu_order, "_MEMO", {})
    return cpu_order.cache_path()


def _torch_mm(x, y):
    import torch
    torch.set_num_threads(1)
    return torch.mm(torch.from_numpy(x).clone(), torch.from_numpy(y).clone()).numpy()


def _operands():
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((4, 8)) * np.exp2(rng.integers(-12, 13, (4, 8)))).astype(np.float32)
    return x, rng.standard_normal((8, 4)).astype(np.float32)


def _tamper(path, change):
    data = json.loads(path.read_text())
    (key, entry), = data.items()
    change(entry)
    path.write_text(json.dumps({key: entry}))
    return key, entry


def _no_trees(e):
    e["order"]["trees"] = []


def _other_k(e):
    e["order"]["trees"][0] = {"K": 4, "fma": True, "children": [0, 1, 4, 2, 5, 3]}


def _explained_nan(e):
    e["explained"] = float("nan")


def _fma_zero(e):
    e["order"]["trees"][0]["fma"] = 0        # was bool(0): a mul+add order torch does not take


@pytest.mark.parametrize("change", [_no_trees, _other_k, _explained_nan, _fma_zero])
def test_a_cache_entry_that_does_not_fit_its_shape_is_probed_again(cache, monkeypatch, change):
    # before: no trees gave zeros for every output (silent), another K "the sum tree is for K=4" in every later
    # GEMM of the shape, a NaN `explained` silenced the warning about unexplained outputs
    x, y = _operands()
    torch_cpu.sgemm(x, y, threads=1)
    _tamper(cache, change)
    monkeypatch.setattr(cpu_order, "_MEMO", {})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = torch_cpu.sgemm(x, y, threads=1)
    assert np.array_equal(got.view(np.int32), _torch_mm(x, y).view(np.int32))
    entry = next(iter(json.loads(cache.read_text()).values()))   # rewritten by the new probe
    assert entry["explained"] == 1.0 and entry["order"]["trees"][0]["K"] == 8


def test_a_cache_file_with_a_key_twice_is_damaged_not_read_last_wins(cache, monkeypatch):
    x, y = _operands()
    torch_cpu.sgemm(x, y, threads=1)
    good = json.loads(cache.read_text())
    (key, entry), = good.items()
    bad = json.loads(json.dumps(entry))
    bad["order"]["trees"][0] = {"K": 8, "fma": False, "children": entry["order"]["trees"][0]["children"]}
    # json.loads kept the second (a mul+add order torch does not take); parse_json refuses the file
    cache.write_text("{%s: %s, %s: %s}" % (json.dumps(key), json.dumps(entry), json.dumps(key), json.dumps(bad)))
    monkeypatch.setattr(cpu_order, "_MEMO", {})
    got = torch_cpu.sgemm(x, y, threads=1)
    assert np.array_equal(got.view(np.int32), _torch_mm(x, y).view(np.int32))
    assert json.loads(cache.read_text()) == good


@pytest.mark.parametrize("shape", [(-1, 8, 4), (4, 8, -1), (2.5, 8, 4), (True, 8, 4)])
def test_order_for_takes_integer_sizes(shape):
    # -1 was NumPy's "negative dimensions are not allowed", 2.5 "'float' object cannot be interpreted as an
    # integer", True one row
    with cpu_order.use("mkl-2024.2-avx512"), pytest.raises(ValueError, match="M, K, N must be non-negative integ"):
        cpu_order.order_for(*shape, threads=1)


@pytest.mark.parametrize("threads", [0, -1, 2.5, "2", True])
def test_order_for_and_reveal_here_check_threads(threads, monkeypatch):
    # 0 was torch's "set_num_threads expects a positive integer", 2.5 truncated to 2, "2" parsed
    with cpu_order.use("mkl-2024.2-avx512"), pytest.raises(ValueError, match="threads must be a positive integer"):
        cpu_order.order_for(4, 8, 4, threads=threads)
    if cpu_order._torch() is not None:
        with pytest.raises(ValueError, match="threads must be a positive integer"):
            cpu_order.reveal_here(4, 8, 4, threads=threads)


def test_recorded_refuses_threads_zero_too(capsys):
    # `--recorded --threads 0` listed the models: 0 is falsy, so the option was ignored
    assert main(["cpu-order", "--recorded", "--threads", "0"]) == 2
    assert "it takes no --threads" in capsys.readouterr().err


def test_a_k_too_long_to_describe_is_refused(monkeypatch, capsys):
    # K = 10**7 under a recorded model built a ten-million-term tree: over a minute, no message
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "mkl-2024.2-avx512")
    monkeypatch.setattr(cpu_order, "order_for", lambda *a, **k: pytest.fail("described"))
    assert main(["cpu-order", "4x10000000x4"]) == 2
    assert f"K up to {2 ** 20} (2**20) is described, got '4x10000000x4'" in capsys.readouterr().err


def test_a_shape_no_array_can_index_is_one_clear_error(monkeypatch, capsys):
    # NumPy's "array is too big; `arr.size * arr.dtype.itemsize` is larger than the maximum possible size"
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "mkl-2024.2-avx512")
    assert main(["cpu-order", "10000000000x64x10000000000"]) == 2
    err = capsys.readouterr().err
    assert "M x N = 1e+20 outputs is more than an array indexes (2**62" in err and "arr.size" not in err


@pytest.mark.parametrize("args, message", [
    (["--threads", "0"], "argument --threads: expected thread counts 1..1024"),     # torch's RuntimeError
    (["--threads", "100000"], "argument --threads: expected thread counts 1..1024"),  # a segmentation fault
    (["--threads", ""], "argument --threads"),                                       # int('') ValueError
    (["--random", "-5"], "argument --random: expected an integer >= 0"),             # wrote 0 shapes
    (["--model", "bogus"], "argument --model: invalid choice: 'bogus'"),             # KeyError
    (["--seed", "-1"], "argument --seed: expected an integer >= 0"),                 # NumPy's message
    (["--out", "nowhere/x.json"], "the folder of 'nowhere/x.json' does not exist"),  # after the survey
    (["--out", "."], "'.' is a folder; give a file name"),
])
def test_the_recording_tool_checks_its_options_before_surveying(record_tool, tmp_path, monkeypatch, capsys, args, message):
    tool = record_tool.main
    monkeypatch.chdir(tmp_path)
    full = ["--random", "1"] + (args if "--out" in args else ["--out", "r.json"] + args)
    monkeypatch.setattr(sys, "argv", ["record_cpu_order.py", *full])
    with pytest.raises(SystemExit) as exc:
        tool()
    assert exc.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_revealed_without_torch_is_one_line_not_a_traceback(monkeypatch, capsys):
    # order_for's RuntimeError ("needs torch to probe") escaped the command as a traceback
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "revealed")
    monkeypatch.setattr(cpu_order, "_torch", lambda: None)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else find_spec(name, *a))
    assert main(["cpu-order", "4x8x4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "FP8EMU_CPU_ORDER=revealed probes torch's own GEMM" in err[0]

# the second fresh audit (tests/AUDIT.md): orders of shapes no array can hold


@pytest.mark.parametrize("shape", [[1 << 31, 1 << 31], [1 << 40, 3]])
def test_an_entry_of_a_shape_no_array_holds_is_damaged_not_a_memory_error(cache, monkeypatch, shape):
    # before: GemmOrder.from_json built np.zeros(shape) for the entry's "classes": null before the shape was
    # compared with the key's: "Unable to allocate 8.00 EiB" (MemoryError) in every sgemm of the shape
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 4)).astype(np.float32)
    torch_cpu.sgemm(x, y, threads=1)
    data = json.loads(cache.read_text())
    (key, entry), = data.items()
    entry["order"]["shape"], entry["order"]["classes"] = shape, None
    cache.write_text(json.dumps({key: entry}))
    monkeypatch.setattr(cpu_order, "_MEMO", {})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = torch_cpu.sgemm(x, y, threads=1)
    assert np.array_equal(got.view(np.int32), _torch_mm(x, y).view(np.int32))
    assert next(iter(json.loads(cache.read_text()).values()))["order"]["shape"] == [4, 4]    # probed again


@pytest.mark.parametrize("model", ["mkl-2024.2-avx512", "mkl-2024.2-compatible"])
def test_exactly_2_to_the_62_outputs_is_refused_by_the_command(monkeypatch, capsys, model):
    # before: the bound let M x N = 2**62 through (2**63 bytes of int16, one byte over NumPy's limit): NumPy's
    # "array is too big; `arr.size * arr.dtype.itemsize` is larger than the maximum possible size"
    monkeypatch.setenv("FP8EMU_CPU_ORDER", model)
    monkeypatch.setattr(cpu_order, "order_for", lambda *a, **k: pytest.fail("described"))
    assert main(["cpu-order", f"{2 ** 31}x64x{2 ** 31}"]) == 2
    err = capsys.readouterr().err
    assert "outputs is more than an array indexes (2**62 - 1" in err and "arr.size" not in err
