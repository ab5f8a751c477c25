"""NumPy integers as the sizes of the CPU order: ``cpu_order.probe_too_long`` and ``order_for``.

A NumPy integer kept its width: ``probe_too_long(np.uint16(1), np.uint16(0), np.uint16(1))`` wrapped
K - 1 to 65,535 terms ("takes at least 65,535 products", which ``FP8EMU_CPU_ORDER=revealed`` raised
for an empty product), and ``order_for`` of NumPy sizes failed building the cache's key ("Object of
type int16 is not JSON serializable").  Each now answers as the same Python integers do.
"""
import warnings

import numpy as np
import pytest

from fp8emu.gemm import cpu_order


@pytest.mark.parametrize("t", [np.uint16, np.uint8, np.int16])
def test_probe_too_long_of_numpy_sizes_is_that_of_the_same_integers(t):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cpu_order.probe_too_long(t(1), t(0), t(1)) is None
        assert cpu_order.probe_too_long(t(2), t(100), t(3)) is None
    big = cpu_order.probe_too_long(np.int32(1), np.int32(20000), np.int32(1))
    assert big is not None and "19,999 products" in big


def test_an_empty_product_of_numpy_sizes_is_not_refused_as_too_long(monkeypatch, tmp_path):
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "revealed")
    order, _ = cpu_order.order_for(np.uint16(1), np.uint16(0), np.uint16(1))
    assert order.to_json() == cpu_order.order_for(1, 0, 1)[0].to_json()


def test_order_for_numpy_sizes_and_threads_is_that_of_the_same_integers(monkeypatch, tmp_path):
    pytest.importorskip("torch")
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    got, src = cpu_order.order_for(np.int16(8), np.int16(64), np.int16(8), threads=np.int64(1))
    want, src2 = cpu_order.order_for(8, 64, 8, threads=1)
    assert src == src2 == "revealed"
    assert got.to_json() == want.to_json()
