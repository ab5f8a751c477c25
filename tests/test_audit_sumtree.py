"""Hostile input to ``fp8emu.gemm.sumtree``: black boxes that are no tree, and reveal's options (tests/AUDIT.md,
"Fresh audit of the CPU order, probes, compile and filters")."""

import numpy as np
import pytest

from fp8emu.gemm.order_probe import NotATreeError, reveal
from fp8emu.gemm.sumtree import GemmOrder, SumTree


def _chain(a, b):
    """An in-order float32 FMA-free chain: a fixed tree (the reference a correct reveal finds)."""
    c = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k in range(a.shape[1]):
        c = (c + (a[:, k:k + 1] * b[k:k + 1, :]).astype(np.float32)).astype(np.float32)
    return c


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_a_box_answering_no_whole_number_of_terms_is_not_a_tree(value):
    # NaN was "cannot convert float NaN to integer", an infinity an OverflowError
    def box(a, b):
        return np.full((a.shape[0], b.shape[1]), value, np.float32)
    with pytest.raises(NotATreeError, match="not a summation tree"):
        reveal(box, 3, 8, 3)
    with pytest.raises(NotATreeError, match="not a summation tree"):
        reveal(box, 3, 8, 3, uniform=False)


@pytest.mark.parametrize("check", [0, -1, 1.5, True])
def test_reveal_checks_at_least_one_random_product(check):
    # check=0 reported explained = 1.0 with nothing checked: any order "explained" every output
    with pytest.raises(ValueError, match="check must be a positive integer"):
        reveal(_chain, 2, 8, 2, check=check)
    order, facts = reveal(_chain, 2, 8, 2, check=1)
    assert order.trees[0] == SumTree.blocks([0, 8], fma=False) and facts["explained"] == 1.0


@pytest.mark.parametrize("kw, match", [
    (dict(uniform="no"), "uniform must be True or False"),          # was read as True
    (dict(seed=-1), "seed must be a non-negative integer"),        # NumPy's "expected non-negative integer"
])
def test_reveal_options_are_checked(kw, match):
    with pytest.raises((TypeError, ValueError), match=match):
        reveal(_chain, 2, 8, 2, **kw)


@pytest.mark.parametrize("shape", [(2.5, 8, 2), ("2", 8, 2), (True, 8, 2), (2, 8.0, 2)])
def test_reveal_takes_integer_sizes_only(shape):
    # 2.5 was truncated to 2 and probed: the order of another shape
    with pytest.raises(TypeError, match="reveal needs integers M, K, N"):
        reveal(_chain, *shape)
    assert reveal(_chain, np.int64(2), 8, 2)[1]["explained"] == 1.0


def test_reveal_names_a_box_that_is_not_callable():
    with pytest.raises(TypeError, match="callable mm"):
        reveal(None, 2, 8, 2)


def test_a_gemm_order_refuses_what_would_sum_nothing_or_fail_later():
    t = SumTree.blocks([0, 4])
    with pytest.raises(ValueError, match="one or more SumTree"):
        GemmOrder([], np.zeros((2, 2)))                # evaluated to zeros, silently
    with pytest.raises(ValueError, match="must index its 1 tree"):
        GemmOrder([t], np.full((2, 2), 3))
    with pytest.raises(ValueError, match="the same K"):
        GemmOrder([t, SumTree.blocks([0, 8])], np.zeros((2, 2)))
    with pytest.raises(ValueError, match="an M x N array"):
        GemmOrder([t], np.zeros(4))
    d = GemmOrder([t], np.zeros((2, 3))).to_json()
    for bad in ({**d, "shape": [2]}, {**d, "classes": [[0, 0]]}, {**d, "trees": [{**d["trees"][0], "fma": "no"}]},
                {**d, "trees": []}):
        with pytest.raises(ValueError):
            GemmOrder.from_json(bad)
    back = GemmOrder.from_json(d)
    assert back.trees == [t] and back.classes.shape == (2, 3)


@pytest.mark.parametrize("make, match", [
    (lambda: SumTree.blocks([0, 5, 3]), "strictly increasing"),          # a six-term tree, silently
    (lambda: SumTree.blocks([0, 2.5]), "strictly increasing"),           # "'float' object cannot be ..."
    (lambda: SumTree.blocks([]), "strictly increasing"),                 # "int() argument must be ... 'NoneType'"
    (lambda: SumTree.from_nested((0, 1.9)), "integer term indices"),     # 1.9 read as leaf 1
    (lambda: SumTree.from_nested(("0", "1")), "integer term indices"),   # strings parsed
    (lambda: SumTree(2.5, [[0, 1]]), "K is an integer"),                 # K = 2
    (lambda: SumTree(2, [[0.2, 1.7]]), "integer node numbers"),          # children 0 and 1
    (lambda: SumTree(2, [[0, 1]], fma="no"), "fma must be True or False"),  # read as True
])
def test_a_sum_tree_is_built_from_integers_only(make, match):
    with pytest.raises((TypeError, ValueError), match=match):
        make()
    # what each meant, written correctly, still builds
    assert SumTree.blocks(np.array([0, 2, 4])).describe() == "[0:2] + [2:4]"
    assert SumTree(2, [[0, 1]], fma=np.False_).fma is False


def test_a_flat_children_list_of_odd_length_is_refused_in_one_line():
    # (mutation sample seed 81, [53]: an odd count read as pairs was NumPy's "cannot reshape array of size 3")
    with pytest.raises(ValueError, match=r"pairs of node numbers \(an n x 2 array, or a flat list of even length\), "
                                         r"got shape \(3,\)"):
        SumTree(3, [0, 1, 3])
    assert SumTree(3, [0, 1, 3, 2]).describe() == "[0:3]"      # the same numbers, even: as before
