"""Fifteenth audit, part B (audit26): an order handed out by ``order_for`` cannot change the orders of later GEMMs.

``order_for`` keeps each revealed order for the process (its memo) and handed out that very object: its trees'
``children`` were writeable and their attributes assignable, and its list of trees was the memo's, so a write to
the order a caller got (``order.trees[0] = ...``, ``tree.fma = False``, ``tree.children[...] = ...``) changed every
later ``sgemm`` of that shape, silently.  The expected sums below are exact float32 arithmetic worked by hand.
"""

import copy
import json
import pickle

import numpy as np
import pytest

from fp8emu.gemm import cpu_order, torch_cpu
from fp8emu.gemm.sumtree import GemmOrder, SumTree, evaluate
from test_mut_cpu_order import _FakeTorch   # what cpu_order reads of torch without probing


# 1 + 2**-24 + 2**-24: in order (a chain) each half is lost to the tie's even (1.0); the two halves added first
# give 2**-23, which 1 keeps (1 + 2**-23)
# (two rows and columns: a single one is MKL's gemv, which warns)
X = np.array([[1.0, 2.0**-24, 2.0**-24]] * 2, np.float32)
Y = np.ones((3, 2), np.float32)
CHAIN = SumTree.from_nested(((0, 1), 2), fma=False)
PAIRED = SumTree.from_nested((0, (1, 2)), fma=False)


@pytest.fixture
def revealed(monkeypatch, tmp_path):
    """order_for with a stand-in torch whose probe reveals CHAIN (no torch needed, the file cache in tmp_path)."""
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "revealed")
    monkeypatch.setattr(cpu_order, "_torch", lambda: _FakeTorch(threads=1))
    monkeypatch.setattr(cpu_order, "_MEMO", {})
    monkeypatch.setattr(cpu_order, "reveal_here", lambda M, K, N, **k: (
        GemmOrder([CHAIN], np.zeros((M, N), np.int16)), {"explained": 1.0, "calls": 3}))


def test_the_hand_worked_sums():
    assert float(evaluate(CHAIN, X, Y)[0, 0]) == 1.0
    assert float(evaluate(PAIRED, X, Y)[0, 0]) == 1.0 + 2.0**-23


def test_replacing_a_tree_of_a_handed_out_order_leaves_the_next_gemm_alone(revealed):
    assert float(torch_cpu.sgemm(X, Y)[0, 0]) == 1.0
    order, src = cpu_order.order_for(2, 3, 2)
    assert src == "revealed"
    order.trees[0] = PAIRED                   # the caller's own order: it was the memo's (1 + 2**-23 below)
    assert float(torch_cpu.sgemm(X, Y)[0, 0]) == 1.0
    assert cpu_order.order_for(2, 3, 2)[0].trees == [CHAIN]


def test_a_tree_cannot_be_changed_in_place(revealed):
    order, _ = cpu_order.order_for(2, 3, 2)
    tree = order.trees[0]
    with pytest.raises(ValueError, match="read-only"):
        tree.children[1] = [0, 3]            # was written, and the memo's tree with it
    for name, value in (("fma", True), ("start", "fma"), ("lone", (2,)), ("K", 4), ("children", PAIRED.children)):
        with pytest.raises(AttributeError, match="immutable"):
            setattr(tree, name, value)
    with pytest.raises(AttributeError, match="immutable"):
        del tree.fma
    assert float(torch_cpu.sgemm(X, Y)[0, 0]) == 1.0
    assert tree == CHAIN and hash(tree) == hash(CHAIN)


def test_a_tree_keeps_no_array_of_its_caller():
    children = np.array([[0, 1], [3, 2]])
    tree = SumTree(3, children, fma=False)
    children[1] = [2, 3]                      # the caller's array, not the tree's
    assert tree == CHAIN


def test_trees_still_copy_pickle_and_round_trip_json():
    t = SumTree.blocks([0, 2, 3, 5], start="fma", split=3)
    assert t.lone == (2,)
    for back in (pickle.loads(pickle.dumps(t)), copy.deepcopy(t), copy.copy(t),
                 SumTree.from_json(json.loads(json.dumps(t.to_json())))):
        assert back == t and back.lone == t.lone and back.start == "fma" and not back.children.flags.writeable
    assert t.starting("add").start == "add" and t.with_lone(()).lone == ()     # the ways to another tree
