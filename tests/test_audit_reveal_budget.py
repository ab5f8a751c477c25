"""audit20's open item: ``reveal`` of a tree as deep as it is long (a sum taken from its last term) takes about
K**2 / (2 max(M, N)) products, one level of the tree per round (4x200x4: 5117 products; 2x1200x2 had not finished
after minutes), where ``probe_too_long`` bounds only the first round.  ``reveal(max_calls=)`` stops such a probe
with one error, and ``order_for`` (whose probe has a budget, ``MAX_REVEAL_PRODUCTS``) uses the recorded model
with a warning instead, once per process and shape.  Expectations: products counted by the box itself; torch's
own ``mm`` where torch is installed."""

from __future__ import annotations

import pytest

from fp8emu.gemm import cpu_order
from fp8emu.gemm.order_probe import ProbeBudgetError, reveal
from fp8emu.gemm.sumtree import SumTree, evaluate


def _last_first(K):
    t = K - 1
    for k in range(K - 2, -1, -1):
        t = (k, t)
    return SumTree.from_nested(t)


def _counted(tree):
    seen = [0]

    def mm(a, b):
        seen[0] += 1
        return evaluate(tree, a, b)
    return mm, seen


def test_a_deep_tree_past_the_budget_is_one_error_after_exactly_that_many_products():
    mm, seen = _counted(_last_first(40))
    with pytest.raises(ProbeBudgetError, match=r"revealing the 1x40x1 order took more than 200 products \(a tree "
                                               r"as deep as it is long"):
        reveal(mm, 1, 40, 1, max_calls=200)
    assert seen[0] == 200
    mm, seen = _counted(_last_first(40))
    order, facts = reveal(mm, 1, 40, 1)                     # no limit: found, in more products than that
    assert order.trees[0].children.tolist() == _last_first(40).children.tolist() and facts["calls"] == seen[0] > 200


def test_a_budget_the_probe_fits_in_changes_nothing():
    tree = SumTree.blocks([0, 4, 8])
    mm, seen = _counted(tree)
    order, facts = reveal(mm, 2, 8, 2, max_calls=1000)
    assert order.trees[0] == tree.starting(order.trees[0].start) and facts["calls"] == seen[0] < 1000


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "10"])
def test_max_calls_is_a_positive_integer_or_none(bad):
    with pytest.raises(ValueError, match="max_calls must be a positive integer or None"):
        reveal(lambda a, b: a @ b, 2, 4, 2, max_calls=bad)


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    monkeypatch.delenv("FP8EMU_CPU_ORDER", raising=False)
    monkeypatch.setattr(cpu_order, "_MEMO", {})


def test_order_for_past_the_budget_uses_the_recorded_model_once_warned(fresh, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(cpu_order, "MAX_REVEAL_PRODUCTS", 5)       # a real probe of torch's mm, a small budget
    calls = [0]
    real = torch.mm

    def counting(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)
    monkeypatch.setattr(torch, "mm", counting)
    # the recorded model of this CPU (the AMX Xeon's, the AVX2 EPYC's), else the default kernel's
    info = cpu_order.machine()
    name = next((m.name for m in cpu_order.RECORDED.values() if m.applies_here(info)), "mkl-2024.2-avx512")
    for _ in range(2):
        with pytest.warns(RuntimeWarning, match=rf"took more than 5 products .* so {name} is used"):
            order, src = cpu_order.order_for(4, 64, 4, threads=1)
        assert src == name and order.trees[0] == cpu_order.RECORDED[src].tree(4, 64, 4, 1)
    assert calls[0] == 5                                            # probed once in this process
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "revealed")
    with pytest.raises(RuntimeError, match=r"FP8EMU_CPU_ORDER='revealed': revealing the 4x64x4 order took more"):
        cpu_order.order_for(4, 64, 4, threads=1)


def test_the_budget_holds_mkls_own_orders_at_the_longest_first_round(fresh):
    """1x8000x1 (a first round of 7999 products, under MAX_PROBE_PRODUCTS) and 2x4096x2 are revealed within
    MAX_REVEAL_PRODUCTS, without a warning about the budget."""
    torch = pytest.importorskip("torch")
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for shape in [(1, 8000, 1), (2, 4096, 2)]:
            order, facts = cpu_order.reveal_here(*shape, threads=1)
            assert facts["calls"] <= cpu_order.MAX_REVEAL_PRODUCTS
    finally:
        torch.set_num_threads(old)
