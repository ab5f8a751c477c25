"""The order cache and MKL settings changed inside the process (tests/AUDIT.md, "Tenth fresh audit, part A", #1).

MKL reads ``MKL_CBWR`` / ``MKL_ENABLE_INSTRUCTIONS`` / ``MKL_DEBUG_CPU_TYPE`` once, when it starts; the cache
key holds the settings in ``os.environ`` at the call.  A process that set ``MKL_CBWR=COMPATIBLE`` after torch's
first GEMM stored the default kernel's order under the COMPATIBLE key (a later process started with the
setting read it: 7348 outputs of two 64x512x64 products differed from torch, silently), and read orders of a kernel its MKL
does not run.
"""

import json
import os

import numpy as np
import pytest

from fp8emu.gemm import cpu_order, order_probe, sumtree

torch = pytest.importorskip("torch")

_VARS = ("MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "MKL_DEBUG_CPU_TYPE")


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    if any(os.environ.get(v) for v in _VARS):
        pytest.skip("this process was started with MKL settings")
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "auto")
    monkeypatch.setattr(cpu_order, "_MEMO", {})
    old = torch.get_num_threads()
    yield cpu_order.cache_path()
    torch.set_num_threads(old)


def _torch_mm(a, b):
    with torch.no_grad():
        return torch.mm(torch.from_numpy(a).clone(), torch.from_numpy(b).clone()).numpy()


def test_an_order_revealed_after_the_process_changed_mkl_settings_is_not_stored(fresh, monkeypatch):
    torch.set_num_threads(1)
    _torch_mm(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32))     # MKL has started
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")                             # too late for MKL
    order, src = cpu_order.order_for(4, 24, 4, threads=1)
    assert src == "revealed"
    assert order_probe.check_order(order, _torch_mm, 4, 24, 4) == 0             # the live order, all the same
    stored = json.loads(fresh.read_text()) if fresh.exists() else {}
    assert not [k for k in stored if "MKL_CBWR" in k]


def test_an_order_stored_under_settings_the_process_set_itself_is_not_read(fresh, monkeypatch):
    torch.set_num_threads(1)
    M, K, N = 4, 24, 4
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    key = cpu_order._key(cpu_order.machine(), cpu_order._library(torch), 1, M, K, N, "NN")
    # an order torch's default kernel does not take: a plain left-to-right chain without FMA
    forged = sumtree.GemmOrder([sumtree.SumTree.blocks([0, K], fma=False)], np.zeros((M, N), np.int16))
    fresh.parent.mkdir(parents=True, exist_ok=True)
    fresh.write_text(json.dumps({key: {"order": forged.to_json(), "explained": 1.0, "calls": 1}}))
    order, src = cpu_order.order_for(M, K, N, threads=1)
    assert src == "revealed" and order_probe.check_order(order, _torch_mm, M, K, N) == 0


def test_without_a_change_the_cache_is_written_and_read_as_before(fresh, monkeypatch):
    torch.set_num_threads(1)
    order, _ = cpu_order.order_for(4, 24, 4, threads=1)
    (key, entry), = json.loads(fresh.read_text()).items()
    assert json.loads(key)[0]["mkl_env"] == {} and entry["order"] == order.to_json()
    cpu_order._MEMO.clear()
    probes = []
    real = cpu_order.reveal_here
    monkeypatch.setattr(cpu_order, "reveal_here", lambda *a, **k: probes.append(a) or real(*a, **k))
    assert cpu_order.order_for(4, 24, 4, threads=1)[0].to_json() == order.to_json()
    assert probes == []
