"""A ``GemmOrder`` keeps its own, read-only classes.

An int16 ``classes`` array given to ``GemmOrder`` was kept as it is (``astype(int16, copy=False)``): a later
write to the caller's array, or to ``order.classes`` of an order ``cpu_order.order_for`` hands out from its
cache, made a class name no tree after the constructor's check, and that output summed nothing (0.0 where
the sum of eight ones is 8), silently; ``describe`` lost the output.
"""

import tracemalloc

import numpy as np
import pytest

from fp8emu.gemm import cpu_order
from fp8emu.gemm.sumtree import GemmOrder, SumTree, evaluate_order

TREES = [SumTree.blocks([0, 4, 8]), SumTree.blocks([0, 8])]


def test_a_write_to_the_array_given_does_not_reach_the_order():
    classes = np.zeros((2, 2), np.int16)
    order = GemmOrder(TREES, classes)
    classes[0, 0] = 5                          # a class naming no tree
    got = evaluate_order(order, np.ones((2, 8), np.float32), np.ones((8, 2), np.float32))
    assert np.array_equal(got, np.full((2, 2), 8.0, np.float32))     # eight ones, summed exactly
    assert order.describe().startswith("4 outputs") or order.uniform


def test_the_order_classes_are_read_only():
    order = GemmOrder(TREES, np.array([[0, 1], [1, 0]], np.int16))
    with pytest.raises(ValueError, match="read-only"):
        order.classes[0, 0] = 5
    assert order.classes.tolist() == [[0, 1], [1, 0]]


def test_the_cached_order_cannot_be_changed_by_its_user(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    with cpu_order.use("revealed"):
        order, src = cpu_order.order_for(3, 24, 5, threads=1)
        again, _ = cpu_order.order_for(3, 24, 5, threads=1)
    # the process's cache: its classes array itself (read-only) in a GemmOrder of each caller's own (audit26 #2)
    assert src == "revealed" and again is not order and again.classes is order.classes
    with pytest.raises(ValueError, match="read-only"):
        order.classes[...] = 0
    order.trees[0] = order.trees[-1]                 # a caller's list: the cache's order is as it was
    assert cpu_order.order_for(3, 24, 5, threads=1)[0].trees == again.trees


def test_a_recorded_model_order_is_read_only_too():
    with cpu_order.use("mkl-2024.2-avx512"):
        order, _ = cpu_order.order_for(4, 64, 4, threads=1)
    with pytest.raises(ValueError, match="read-only"):
        order.classes[...] = 0


@pytest.mark.parametrize("name", sorted(cpu_order.RECORDED))
def test_the_recorded_models_hand_over_their_classes_without_a_copy(name):
    # a copy of every output's int16 class would double the order's memory (10**9 outputs: 2 GB more)
    M, N = 1500, 1600
    tracemalloc.start()
    try:
        order = cpu_order.RECORDED[name].order(M, 256, N, 1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert order.classes.shape == (M, N) and not order.classes.flags.writeable
    assert peak < 3 * M * N
