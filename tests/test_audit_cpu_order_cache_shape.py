"""Second fresh audit (issue 53): orders of shapes no array can hold (the order cache, ``fp8emu cpu-order``)."""

import json
import warnings

import numpy as np
import pytest

from fp8emu.cli import main
from fp8emu.gemm import cpu_order, torch_cpu


@pytest.fixture
def cache(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "auto")
    monkeypatch.setattr(cpu_order, "_MEMO", {})
    return cpu_order.cache_path()


def _torch_mm(x, y):
    import torch
    torch.set_num_threads(1)
    return torch.mm(torch.from_numpy(x).clone(), torch.from_numpy(y).clone()).numpy()


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
