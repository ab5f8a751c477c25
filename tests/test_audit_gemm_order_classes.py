"""A GemmOrder's classes (each output's tree index) are integers in range, checked before the int16 cast
(tests/AUDIT.md, "Third fresh audit of the CPU order, probes, compile and filters")."""

import json

import numpy as np
import pytest

from fp8emu.gemm import cpu_order
from fp8emu.gemm.sumtree import GemmOrder, SumTree

TREES = [SumTree.blocks([0, 2, 4]), SumTree.blocks([0, 4])]


@pytest.mark.parametrize("classes, message", [
    ([[1.7, 0]], "integer tree indices"),              # was truncated to tree 1
    (np.array([[np.nan, 0.0]]), "integer tree indices"),
    ([[True, False]], "integer tree indices"),          # was read as 1, 0
    ([["1", "0"]], "integer tree indices"),             # was parsed
    (np.array([[65536, 1]]), "index its 2 tree"),      # was wrapped to tree 0, silently
    ([[70000, 0]], "index its 2 tree"),                # was NumPy's OverflowError
])
def test_a_gemm_order_takes_integer_classes_in_range_only(classes, message):
    with pytest.raises(ValueError, match=message):
        GemmOrder(TREES, classes)


def test_integer_classes_of_any_integer_dtype_are_kept():
    for dt in (np.int8, np.int64, np.uint32):
        order = GemmOrder(TREES, np.array([[1, 0], [0, 1]], dt))
        assert order.classes.dtype == np.int16 and order.classes.tolist() == [[1, 0], [0, 1]]
    assert GemmOrder(TREES, np.ones((2, 2))).classes.dtype == np.int16     # whole float64 values, as np.zeros gives
    assert GemmOrder(TREES, np.zeros((3, 0))).classes.shape == (3, 0)     # no outputs: nothing to index


@pytest.mark.parametrize("classes", [[[70000, 0, 0, 0]] * 4, [[1.5, 0, 0, 0]] * 4])
def test_a_cache_entry_whose_classes_are_no_tree_index_is_probed_again(tmp_path, monkeypatch, classes):
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "auto")
    monkeypatch.setattr(cpu_order, "_MEMO", {})
    key = cpu_order._key(cpu_order.machine(), cpu_order._library(torch), 1, 4, 8, 4, "NN")
    order = {"trees": [SumTree.blocks([0, 8]).to_json(), SumTree.blocks([0, 4, 8]).to_json()],
             "classes": classes, "shape": [4, 4]}
    cpu_order.cache_path().write_text(json.dumps({key: {"order": order, "explained": 1.0, "calls": 1}}))
    got, src = cpu_order.order_for(4, 8, 4, threads=1)       # was an OverflowError, or 1.5 read as tree 1
    assert src == "revealed"
    rewritten = json.loads(cpu_order.cache_path().read_text())[key]["order"]
    assert rewritten != order



@pytest.mark.parametrize("children", [[0, 1, 4, 2, 3], [0, 1, 4, 2, 3, 5, 6], np.array([[0, 1, 4], [2, 3, 5]])])
def test_sum_tree_children_are_pairs(children):
    # an odd count was NumPy's "cannot reshape array of size 5 into shape (2)"; a 2 x 3 array was read as
    # the pairs (0, 1), (4, 2), (3, 5): a valid tree of K = 4 nobody gave
    with pytest.raises(ValueError, match="pairs of node numbers"):
        SumTree(4, children)
    with pytest.raises(ValueError, match="pairs of node numbers"):
        SumTree.from_json({"K": 4, "fma": True, "children": np.asarray(children).tolist()})


@pytest.mark.parametrize("children", [[0.2, 1.7], ["0", "1"], [True, False]])
def test_sum_tree_json_children_are_integers_as_the_constructors(children):
    # from_json cast them to int64 first: 0.2 / 1.7 truncated to (0, 1), strings parsed (audit2's #9 held only
    # for the constructors)
    with pytest.raises(TypeError, match="integer node numbers"):
        SumTree.from_json({"K": 2, "fma": True, "children": children})
