"""The sign of a zero output of a K = 1 float32 GEMM (tests/AUDIT.md, "Tenth fresh audit, part A", #5).

torch's CPU ``mm`` (MKL's sgemm, M, N >= 2) returns an outer product's rounded products as they are: a product
of 0 and a negative number is -0.  Every order fp8emu evaluated (revealed or recorded) started its accumulator at
+0, so the emulated output was +0.  The probe could not see it (its random products have no zero).  Now a
SumTree says where its sums start (``start``), ``reveal`` and ``check_order`` ask torch with products that
are all -0, and the recorded models keep the -0 of an outer product.  With K >= 2 torch's outputs of -0 products
are +0, and so are gemv's (M or N = 1).  torch itself is the reference where it is installed; without it the
expectations are IEEE's: 0 x -1 = -0, and +0 + -0 = +0.
"""

import warnings

import numpy as np
import pytest

from fp8emu.gemm import cpu_order
from fp8emu.gemm.order_probe import check_order, reveal
from fp8emu.gemm.sumtree import SumTree, evaluate
from fp8emu.gemm.torch_cpu import sgemm

NEG0, POS0 = np.float32(-0.0).view(np.int32), np.float32(0.0).view(np.int32)


def _minus_products(M, K, N):
    x = np.zeros((M, K), np.float32)
    x[::2] = 1.5
    return x, -np.ones((K, N), np.float32)              # 0 x -1 = -0 in every other row


def _want(M, K, N):
    """IEEE: the odd rows' products are all -0; a sum of them is -0 only where K = 1 and M, N >= 2 (as measured)."""
    want = np.full((M, N), np.float32(-1.5 * K))
    want[1::2] = np.float32(-0.0) if K == 1 and min(M, N) >= 2 else np.float32(0.0)
    return want


@pytest.mark.parametrize("model", ["mkl-2024.2-avx512", "mkl-2024.2-compatible"])
@pytest.mark.parametrize("M, K, N", [(2, 1, 2), (64, 1, 8), (1, 1, 5), (5, 1, 1), (4, 2, 4), (8, 16, 8)])
def test_the_recorded_models_keep_an_outer_products_minus_zero(model, M, K, N):
    x, y = _minus_products(M, K, N)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")            # gemv shapes and the other CPU's settings warn
        with cpu_order.use(model):
            got = sgemm(x, y, threads=1)
    assert np.array_equal(got.view(np.int32), _want(M, K, N).view(np.int32))


def test_a_sum_tree_says_where_it_starts_and_keeps_it_in_json():
    t = SumTree.blocks([0, 1], start="product")
    x, y = np.zeros((2, 1), np.float32), -np.ones((1, 2), np.float32)
    assert (evaluate(t, x, y).view(np.int32) == NEG0).all()
    assert (evaluate(t.starting("add"), x, y).view(np.int32) == POS0).all()
    assert (evaluate(t.starting("fma"), x, y).view(np.int32) == POS0).all()       # -0 + +0 in one FMA: +0
    assert SumTree.from_json(t.to_json()) == t != t.starting("add")
    assert SumTree.from_json(t.starting("fma").to_json()).start == "fma"
    assert "start='product'" in repr(t)
    # a tree written before start existed started as "add"
    assert SumTree.from_json({"K": 1, "fma": True, "children": []}).start == "add"
    with pytest.raises(ValueError, match="a start of 'add', 'fma', 'product'"):
        SumTree.from_json({"K": 1, "fma": True, "start": 0, "children": []})
    with pytest.raises(ValueError, match=r"\(and optionally start, lone\), got \['K', 'children', 'fma', 'zero_start'\]"):
        SumTree.from_json({"K": 1, "fma": True, "zero_start": False, "children": []})
    with pytest.raises(ValueError, match="start must be one of 'add', 'fma', 'product'"):
        SumTree(1, [], start="no")
    with pytest.raises(ValueError, match="start must be one of"):
        SumTree(1, [], start=True)


@pytest.mark.parametrize("start", ["add", "fma", "product"])
@pytest.mark.parametrize("K", [1, 3])
def test_reveal_and_check_order_find_where_the_sums_start(start, K):
    box = SumTree.blocks([0, K], start=start)
    order, facts = reveal(lambda a, b: evaluate(box, a, b), 4, K, 3)
    assert order.trees[0].start == start and facts["explained"] == 1.0
    assert ("(-0 kept)" in order.describe()) is (start == "product")
    # the random products cannot tell the starts apart; the products of -0 (and those whose first underflows)
    # tell every output
    assert check_order(order, lambda a, b: evaluate(box, a, b), 4, K, 3) == 0
    for other in {"add", "fma", "product"} - {start}:
        wrong = order.__class__([order.trees[0].starting(other)], order.classes)
        # "add" and "product" differ on both probes, "fma" from either on one
        probes = 2 if {start, other} == {"add", "product"} else 1
        assert check_order(wrong, lambda a, b: evaluate(box, a, b), 4, K, 3) == 12 * probes


torch = pytest.importorskip("torch")


def _both(M, K, N, monkeypatch, tmp_path):
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "auto")
    monkeypatch.setattr(cpu_order, "_MEMO", {})
    x, y = _minus_products(M, K, N)
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        want = torch.mm(torch.from_numpy(x), torch.from_numpy(y)).numpy()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = sgemm(x, y, threads=1)
    finally:
        torch.set_num_threads(old)
    return got, want


@pytest.mark.parametrize("M, N", [(2, 2), (4, 8), (64, 64)])
def test_an_outer_product_keeps_the_sign_of_a_negative_zero_product(M, N, monkeypatch, tmp_path):
    got, want = _both(M, 1, N, monkeypatch, tmp_path)
    assert np.array_equal(got.view(np.int32), want.view(np.int32))


@pytest.mark.parametrize("M, K, N", [(1, 1, 5), (5, 1, 1), (4, 2, 4), (8, 16, 8)])
def test_gemv_and_longer_sums_give_plus_zero_as_torch(M, K, N, monkeypatch, tmp_path):
    got, want = _both(M, K, N, monkeypatch, tmp_path)
    assert np.array_equal(got.view(np.int32), want.view(np.int32))
