"""Tests answering the mutation samples of fp8emu.gemm.sumtree and fp8emu.gemm.cpu_order (tests/MUTATION.md).

Expectations are written out by hand or computed with exact rational / float64 arithmetic, never with the
module under test.
"""

from __future__ import annotations

import json
import warnings
from fractions import Fraction

import numpy as np
import pytest

from fp8emu.gemm import cpu_order
from fp8emu.gemm.order_probe import NotATreeError, reveal
from fp8emu.gemm.sumtree import GemmOrder, SumTree, evaluate, evaluate_order

from test_sgemm_fma_chain import _exact_chain, _rne32   # exact RNE to float32 of a Fraction, an exact FMA chain


# ----------------------------------------------------------------------------- a hand-written tree evaluator
def _ref_value(t, x, y, fma):
    """One output summed over nested pairs ``t`` exactly as the module documents it, by rational arithmetic:
    a leaf that starts a sum is its product rounded to float32 (+0 for a zero product); with ``fma`` a node
    adding a leaf fuses its product (one rounding), one adding a subtree is a float32 addition; without
    ``fma`` every product is rounded first and every node is a float32 addition."""
    if not isinstance(t, tuple):
        return _rne32(Fraction(float(x[t])) * Fraction(float(y[t])), 1.0) + 0.0
    left = _ref_value(t[0], x, y, fma)
    if isinstance(t[1], tuple):
        right = _ref_value(t[1], x, y, fma)
    elif fma:
        right = Fraction(float(x[t[1]])) * Fraction(float(y[t[1]]))
    else:
        right = _rne32(Fraction(float(x[t[1]])) * Fraction(float(y[t[1]])), 1.0)
    s = Fraction(left) + Fraction(right)
    neg = np.signbit(left) and (right < 0 or (right == 0 and np.signbit(float(right))))
    return _rne32(s, -1.0 if neg else 1.0)


def _ref(t, x, y, fma):
    M, N = x.shape[0], y.shape[1]
    return np.array([[_ref_value(t, x[m], y[:, n], fma) for n in range(N)] for m in range(M)], np.float32)


def _random_nested(rng, leaves):
    """A random binary tree over ``leaves`` in order: random split points, either side first."""
    if len(leaves) == 1:
        return leaves[0]
    cut = int(rng.integers(1, len(leaves)))
    return (_random_nested(rng, leaves[:cut]), _random_nested(rng, leaves[cut:]))


def _nasty(rng, shape, lo, hi):
    frac = rng.choice([1.0, 1 - 2.0 ** -24, 1 + 2.0 ** -23, 1 + 3 * 2.0 ** -23, 1.5, 1.5 + 2.0 ** -23], size=shape)
    sign = rng.choice([-1.0, 1.0], size=shape)
    return (sign * np.ldexp(frac, rng.integers(lo, hi, size=shape))).astype(np.float32)


def _bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


@pytest.mark.parametrize("fma", [True, False])
@pytest.mark.parametrize("seed", range(3))
def test_evaluate_is_the_documented_tree_arithmetic_on_random_trees(seed, fma):
    """Random trees (leaves in any order, chains and subtrees mixed) on values near powers of two with wide
    exponents (ties, cancellation, swamping) and on tiny ones (subnormal partial sums): bit for bit the
    rational reference."""
    rng = np.random.default_rng(seed)
    for K, lo, hi in [(9, -14, 14), (13, -75, -60), (6, -3, 3)]:
        perm = [int(v) for v in rng.permutation(K)]
        nested = _random_nested(rng, perm)
        tree = SumTree.from_nested(nested, fma)
        x, y = _nasty(rng, (3, K), lo, hi), _nasty(rng, (K, 2), lo, hi)
        if lo < -60:
            y = np.abs(y)                       # subnormal partial sums whose products lie 2**-150 apart
        want = _ref(nested, x, y, fma)
        assert np.array_equal(_bits(evaluate(tree, x, y)), _bits(want)), (K, nested)


@pytest.mark.parametrize("c,x1,y1,want_naive", [
    # normal range: p = 2**-24 (1 + 2**-23)(1 - 2**-23)
    (1 + 2.0 ** -23, 2.0 ** -24 * (1 + 2.0 ** -23), 1 - 2.0 ** -23, 1 + 2.0 ** -22),
    # subnormal range: p = 2**-150 (1 + 2**-23)(1 - 2**-23), each factor a normal float32
    (2.0 ** -130 + 2.0 ** -149, 2.0 ** -75 * (1 + 2.0 ** -23), 2.0 ** -75 * (1 - 2.0 ** -23), 2.0 ** -130 + 2.0 ** -148),
], ids=["normal", "subnormal"])
def test_an_fma_whose_float64_sum_lands_on_a_float32_midpoint_rounds_once(c, x1, y1, want_naive):
    """c + p with p = s - s 2**-46, s half c's last place and c's last bit odd: the exact sum lies just below the
    midpoint (rounds down to c), the float64 sum is the midpoint itself (ties to even: up)."""
    x = np.array([[c, x1]], np.float32)
    y = np.array([[1.0], [y1]], np.float32)
    s = Fraction(2) ** (-24 if c > 1 else -150)
    assert Fraction(float(x[0, 1])) * Fraction(float(y[1, 0])) == s - s * Fraction(2) ** -46
    assert np.float32(np.float64(c) + float(x[0, 1]) * float(y[1, 0])) == np.float32(want_naive)   # the trap is real
    for nested, K in [((0, 1), 2), (((0, 1), 2), 3), ((2, (0, 1)), 3)]:
        xx = np.concatenate([x, np.zeros((1, K - 2), np.float32)], axis=1)
        yy = np.concatenate([y, np.zeros((K - 2, 1), np.float32)])
        assert evaluate(SumTree.from_nested(nested), xx, yy)[0, 0] == np.float32(c), nested


# ----------------------------------------------------------------------------- SumTree and GemmOrder as data
def test_a_sum_tree_refuses_what_is_no_binary_tree_naming_the_rule():
    with pytest.raises(ValueError, match="K=0 leaves has K - 1 = -1 nodes, got 0"):
        SumTree(0, np.zeros((0, 2)))
    with pytest.raises(ValueError, match="K=3 leaves has K - 1 = 2 nodes, got 1"):
        SumTree(3, [[0, 1]])
    with pytest.raises(ValueError, match="every leaf and every inner node but the root once"):
        SumTree(3, [[0, 1], [0, 3]])                       # leaf 0 twice, leaf 2 never
    with pytest.raises(ValueError, match="only add leaves and earlier nodes"):
        SumTree(3, [[1, 3], [0, 2]])                       # node 3 adds itself
    with pytest.raises(ValueError, match="only add leaves and earlier nodes"):
        SumTree(4, [[0, 5], [1, 2], [3, 4]])               # node 4 adds node 5, made after it
    with pytest.raises(ValueError, match="exactly two terms"):
        SumTree.from_nested((0, 1, 2))
    with pytest.raises(ValueError, match="leaves must be 0 .. K-1 once each"):
        SumTree.from_nested(((0, 1), 1))
    one = SumTree(1, np.zeros((0, 2)))                     # a single term: no node
    assert one.K == 1 and one.describe() == "0" and one.nested() == 0


def test_equality_hash_repr_nested_and_json():
    t = SumTree.from_nested(((0, 2), (1, (3, 4))))
    assert t.children.tolist() == [[0, 2], [3, 4], [1, 6], [5, 7]]        # node 5 = (0, 2), 6 = (3, 4), ...
    same = SumTree(5, [[0, 2], [3, 4], [1, 6], [5, 7]])
    assert t == same and hash(t) == hash(same) and t != SumTree(5, same.children, fma=False)
    assert t != SumTree.from_nested((((0, 2), 1), (3, 4))) and t != "[0:3:2] + (1 + [3:5])"
    assert t != SumTree.from_nested(((0, 1), 2))
    assert len({t, same, SumTree(5, same.children, fma=False)}) == 2
    assert t.describe() == "[0:3:2] + (1 + [3:5])"      # Python slices: 0, 2
    assert repr(t) == "SumTree(K=5, fma=True: [0:3:2] + (1 + [3:5]))"
    assert t.nested() == ((0, 2), (1, (3, 4))) and SumTree.blocks([0, 2]).nested() == (0, 1)
    assert SumTree.from_nested((1, 0)).describe() == "[1,0]"
    assert SumTree.from_nested((((3, 2), 1), 0)).describe() == "[3,2,1,0]"
    assert SumTree.from_nested(((0, 1), ((2, 3), 4)), fma=False).describe() == "[0:2] + [2:5]"
    d = t.to_json()
    assert d == {"K": 5, "fma": True, "children": [0, 2, 3, 4, 1, 6, 5, 7]}
    assert SumTree.from_json(d) == t and SumTree.from_json({**d, "fma": False}).fma is False
    deep = SumTree.blocks([0, 3000])                                       # a 3000-deep chain, no recursion
    assert deep.describe() == "[0:3000]" and SumTree.from_nested(deep.nested()) == deep


def test_a_gemm_order_describes_and_stores_its_classes():
    a, b = SumTree.blocks([0, 2, 4]), SumTree.blocks([0, 4], fma=False)
    one = GemmOrder([a], np.zeros((2, 3), np.int16))
    assert one.uniform and one.describe() == "fma [0:2] + [2:4]"
    assert GemmOrder([b], np.zeros((1, 1))).describe() == "mul+add [0:4]"
    classes = np.array([[0, 1, 0], [0, 0, 0]])
    two = GemmOrder([a, b], classes)
    assert not two.uniform and two.describe() == "5 outputs: fma [0:2] + [2:4]; 1 outputs: mul+add [0:4]"
    assert two.classes.dtype == np.int16
    d = one.to_json()
    assert d["classes"] is None and d["shape"] == [2, 3] and len(d["trees"]) == 1
    back = GemmOrder.from_json(d)
    assert back.uniform and back.trees == [a] and back.classes.shape == (2, 3) and not back.classes.any()
    d = two.to_json()
    assert d["classes"] == classes.tolist()
    back = GemmOrder.from_json(d)
    assert back.trees == [a, b] and np.array_equal(back.classes, classes)


def test_evaluate_order_sums_each_output_by_its_own_tree():
    rng = np.random.default_rng(7)
    na, nb, nc = _random_nested(rng, [0, 1, 2, 3, 4, 5]), _random_nested(rng, [5, 4, 3, 2, 1, 0]), ((0, 1), ((2, 3), (4, 5)))
    x, y = _nasty(rng, (3, 6), -12, 12), _nasty(rng, (6, 4), -12, 12)
    classes = np.array([[0, 1, 1, 0], [1, 0, 0, 0], [0, 0, 1, 1]])
    trees = [SumTree.from_nested(na), SumTree.from_nested(nb, fma=False), SumTree.from_nested(nc)]   # tree 2: unused
    got = evaluate_order(GemmOrder(trees, classes), x, y)
    want = np.where(classes == 0, _ref(na, x, y, True), _ref(nb, x, y, False))
    assert np.array_equal(_bits(got), _bits(want))
    assert np.array_equal(_bits(evaluate_order(GemmOrder([trees[1]], np.zeros((3, 4))), x, y)), _bits(_ref(nb, x, y, False)))


def test_evaluate_checks_k_and_gives_empty_products_of_zeros():
    t = SumTree.blocks([0, 2, 3])
    with pytest.raises(ValueError, match="the sum tree is for K=3, the operands have K=4"):
        evaluate(t, np.ones((1, 4), np.float32), np.ones((4, 1), np.float32))
    for M, N in [(0, 2), (2, 0)]:
        out = evaluate(t, np.ones((M, 3), np.float32), np.ones((3, N), np.float32))
        assert out.shape == (M, N) and out.dtype == np.float32
    # -0 products: the sum starts at +0 (an accumulator's zero), so -0 * 1 + -0 * 1 is +0; with a partial
    # sum of two chains the same
    z = evaluate(t, np.full((1, 3), -0.0, np.float32), np.ones((3, 1), np.float32))
    assert z[0, 0] == 0 and not np.signbit(z[0, 0])
    # NaN and Inf propagate; Inf - Inf is NaN
    x = np.array([[np.inf, 1, 1], [np.inf, -np.inf, 1], [np.nan, 1, 1]], np.float32)
    out = evaluate(t, x, np.ones((3, 1), np.float32))
    assert out[0, 0] == np.inf and np.isnan(out[1, 0]) and np.isnan(out[2, 0])


# ----------------------------------------------------------------------------- reveal
def _mul_add_chain(a, b):
    """Every product rounded to float32, added in K order: plain float32 arithmetic."""
    c = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k in range(a.shape[1]):
        c = c + (a[:, k, None] * b[None, k, :]).astype(np.float32)
    return c


def _blocks_mm(a, b, bounds):
    """float32 mul+add chains over the blocks, the block sums added in order."""
    total = None
    for k0, k1 in zip(bounds[:-1], bounds[1:]):
        c = _mul_add_chain(a[:, k0:k1], b[k0:k1])
        total = c if total is None else total + c
    return total


def test_reveal_refuses_bad_shapes_and_a_gemm_of_the_wrong_shape():
    with pytest.raises(ValueError, match="M, K, N >= 1, got 0x4x2"):
        reveal(_mul_add_chain, 0, 4, 2)
    with pytest.raises(ValueError, match="M, K, N >= 1, got 2x4x0"):
        reveal(_mul_add_chain, 2, 4, 0)
    with pytest.raises(ValueError, match=r"K up to 2\*\*20, got 1048577"):
        reveal(_mul_add_chain, 1, (1 << 20) + 1, 1)
    with pytest.raises(ValueError, match=r"returned shape \(2, 3\), expected \(3, 2\)"):
        reveal(lambda a, b: _mul_add_chain(a, b).T, 3, 4, 2)


def test_reveal_of_one_term_and_of_a_mul_add_chain():
    order, facts = reveal(_mul_add_chain, 2, 1, 3)
    assert order.uniform and order.trees[0].K == 1 and facts["explained"] == 1.0 and facts["calls"] == 6 + 2
    # (every reveal asks two products of -0 terms, one with its spines' first products underflowing: where the
    # sums start)
    # packed: a chain's pivot is leaf 0 alone, its 6 queries (0, j) ride on A's 3 rows (M > N: pivots on B's
    # columns): 2 products, after the 4 checks; each output on its own: one product per query.  Then the leaf
    # probe asks the 6 joined leaves, one per row (the longer side): 2 products (every output answers alike)
    order, facts = reveal(_mul_add_chain, 3, 7, 2, check=4)
    assert order.describe() == "mul+add [0:7]" and facts["explained"] == 1.0 and facts["calls"] == 4 + 2 + 2 + 2
    order, facts = reveal(_mul_add_chain, 3, 7, 2, uniform=False, check=3)
    assert order.describe() == "mul+add [0:7]" and facts["explained"] == 1.0 and order.classes.shape == (3, 2)
    assert facts["calls"] == 3 + 6 + 2 + 2
    # blocks of 2 (4 x 8 x 4): pivot 0's 7 queries take 2 products (4 leaves each); then the sets (2, 3), (4, 5),
    # (6, 7) are asked together, pivots 2, 4, 6 on one side, 3, 5, 7 on the other: 1 product; the 4 joined leaves
    # one per column: 1 product
    order, facts = reveal(lambda a, b: _blocks_mm(a, b, [0, 2, 4, 6, 8]), 4, 8, 4, check=2)
    assert order.describe() == "mul+add [0:2] + [2:4] + [4:6] + [6:8]" and facts["calls"] == 2 + 3 + 2 + 1


def test_reveal_gives_each_output_the_fma_choice_that_explains_it():
    """Row 0 fused (exact rational FMA chain from +0), row 1 multiplied then added: one chain order, two trees."""
    def mm(a, b):
        out = _exact_chain(a, b)
        out[1] = _mul_add_chain(a[1:], b)[0]
        return out
    order, facts = reveal(mm, 2, 6, 3, check=4)
    assert facts["explained"] == 1.0 and len(order.trees) == 2
    assert order.trees[order.classes[0, 0]] == SumTree.blocks([0, 6], start="fma")
    assert order.trees[order.classes[1, 2]] == SumTree.blocks([0, 6], fma=False)
    assert (order.classes[0] == order.classes[0, 0]).all() and (order.classes[1] == order.classes[1, 0]).all()
    assert order.describe() == "3 outputs: fma [0:6] (fma start); 3 outputs: mul+add [0:6]"


def test_a_large_k_is_probed_with_a_big_enough_term():
    """K = 3000 ones must vanish against the probe's big term: a chain of 3000 is revealed as one."""
    def mm(a, b):                   # float32 products summed in K order (np.add.accumulate is sequential)
        p = (a[:, :, None] * b[None, :, :]).astype(np.float32)
        return np.add.accumulate(p, axis=1)[:, -1, :]
    order, facts = reveal(mm, 2, 3000, 2, check=1)
    # accumulate starts at its first product: a sum of -0 products stays -0
    assert order.describe() == "mul+add [0:3000] (-0 kept)" and facts["explained"] == 1.0


def test_a_sum_that_is_no_tree_raises_or_is_not_explained():
    """float64 accumulation rounded once: no float32 tree reproduces it on the random checks."""
    def mm(a, b):
        return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    try:
        order, facts = reveal(mm, 2, 24, 2, uniform=False)
    except NotATreeError as e:
        assert "not a fixed order of float32 additions" in str(e)
    else:
        assert facts["explained"] < 1.0


def test_check_order_counts_the_outputs_an_order_misses():
    from fp8emu.gemm.order_probe import check_order
    right = GemmOrder([SumTree.blocks([0, 40], fma=False)], np.zeros((3, 4)))
    wrong = GemmOrder([SumTree.blocks([0, 20, 40], fma=False)], np.zeros((3, 4)))
    assert check_order(right, _mul_add_chain, 3, 40, 4) == 0
    one, two = check_order(wrong, _mul_add_chain, 3, 40, 4, trials=1), check_order(wrong, _mul_add_chain, 3, 40, 4)
    assert 0 < one <= 12 and one < two <= 24


# ----------------------------------------------------------------------------- cpu_order: the recorded model
_REC = cpu_order.RECORDED["mkl-2024.2-avx512"]


@pytest.mark.parametrize("M,K,N,threads,want", [
    # one thread, small driver: kc = 384 while more than 768 remain, then one block or two halves (ceil first)
    (2, 1, 2, 1, "0 (-0 kept)"), (2, 384, 2, 1, "[0:384]"), (2, 385, 2, 1, "[0:193] + [193:385]"),
    (2, 768, 2, 1, "[0:384] + [384:768]"), (2, 769, 2, 1, "[0:384] + [384:577] + [577:769]"),
    (191, 1000, 500, 1, "[0:384] + [384:692] + [692:1000]"),
    # M and N both >= 192: the packing driver, plain blocks of 384 beyond 768
    (192, 1000, 192, 1, "[0:384] + [384:768] + [768:1000]"), (192, 769, 300, 1, "[0:384] + [384:768] + [768:769]"),
    (192, 768, 192, 1, "[0:384] + [384:768]"),
    # two threads: K split in halves only for K > 768 and more than 192,000 multiply-adds
    (16, 768, 16, 2, "[0:384] + [384:768]"), (16, 769, 16, 2, "[0:193] + [193:385] + [385:769]"),
    (16, 769, 15, 2, "[0:384] + [384:577] + [577:769]"),              # 184,560 multiply-adds: one thread's
    (16, 769, 16, 1, "[0:384] + [384:577] + [577:769]"),
    (8, 3001, 8, 2, "[0:384] + [384:768] + [768:1152] + [1152:1501] + ([1501:1885] + [1885:2269] + "
                    "[2269:2653] + [2653:3001])"),
])
def test_the_recorded_models_blocks_written_out(M, K, N, threads, want):
    assert _REC.order(M, K, N, threads).describe() == "fma " + want + (" (fma start)" if K > 1 else "")
    assert _REC.order(M, K, N, threads).classes.shape == (M, N)


def test_the_recorded_model_says_why_a_shape_is_unproven_at_each_boundary():
    ok = [(2, 64, 2, 1), (8, 4096, 8, 1), (8, 768, 8, None), (128, 4096, 128, 2), (8, 3000, 8, 2),
          (23, 1212, 7, 2), (8, 3050, 8, 2), (200, 768, 200, 2), (8, 64, 8, 2)]   # 192,000, 195,132: ends open
    assert [_REC.unproven(*s) for s in ok] == [None] * len(ok)
    assert "gemv" in _REC.unproven(1, 64, 8, 1) and "gemv" in _REC.unproven(8, 64, 1, 1)
    assert _REC.unproven(8, 4097, 8, 1) == "K <= 4096 was proven"
    assert "thread count is not known" in _REC.unproven(8, 769, 8, None)
    assert _REC.unproven(8, 64, 8, 3) == "1 and 2 thread(s) were proven"
    assert _REC.unproven(129, 769, 2, 2).endswith("proven for M, N <= 128")
    assert _REC.unproven(2, 769, 129, 2).endswith("proven for M, N <= 128")
    assert _REC.unproven(8, 3001, 8, 2).endswith("between 192,000 and 195,132 multiply-adds")    # 192,064
    assert _REC.unproven(11, 1772, 10, 2) is not None                                           # 194,920
    assert _REC.unproven(11, 1774, 10, 2) is None                                               # 195,140


def test_the_recorded_model_applies_to_its_vendor_and_kernel_only():
    here = {"vendor": "GenuineIntel", "flags": ["avx2", "avx512f"], "mkl_env": {}}
    assert _REC.applies_here(here)
    assert not _REC.applies_here({**here, "vendor": "AuthenticAMD"})
    assert not _REC.applies_here({**here, "flags": ["avx2"]})
    assert not _REC.applies_here({**here, "mkl_env": {"MKL_CBWR": "COMPATIBLE"}})


# ----------------------------------------------------------------------------- cpu_order: policy, machine, cache
def test_use_nests_and_restores_and_the_environment_is_read_when_no_block_is_active(monkeypatch):
    monkeypatch.delenv("FP8EMU_CPU_ORDER", raising=False)
    assert cpu_order.policy() == "auto"
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "")
    assert cpu_order.policy() == "auto"
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "revealed")
    with cpu_order.use("mkl-2024.2-avx512"):
        assert cpu_order.policy() == "mkl-2024.2-avx512"
        with cpu_order.use("auto"):
            assert cpu_order.policy() == "auto"
        assert cpu_order.policy() == "mkl-2024.2-avx512"
    assert cpu_order.policy() == "revealed"
    for bad in (None, 1, "Auto"):
        with pytest.raises(ValueError, match="use 'auto', 'revealed' or a recorded model, one of"):
            with cpu_order.use(bad):
                pass


def test_cpuinfo_keeps_the_first_cpus_vendor_model_and_flags(monkeypatch):
    text = ("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon X\nflags\t\t: fpu avx2 avx512f\n\n"
            "processor\t: 1\nvendor_id\t: Other\nmodel name\t: Y\nflags\t\t: sse\n")
    import io
    monkeypatch.setattr(cpu_order, "open", lambda *a, **k: io.StringIO(text), raising=False)
    assert cpu_order._cpuinfo.__wrapped__() == ("GenuineIntel", "Xeon X", frozenset({"fpu", "avx2", "avx512f"}))

    def missing(*a, **k):
        raise OSError("no /proc")
    monkeypatch.setattr(cpu_order, "open", missing, raising=False)
    import platform
    assert cpu_order._cpuinfo.__wrapped__() == ("", platform.processor(), frozenset())


def test_machine_keeps_the_kernel_flags_and_the_mkl_settings_only(monkeypatch):
    monkeypatch.setattr(cpu_order, "_cpuinfo", lambda: ("GenuineIntel", "Xeon", frozenset({"sse", "avx512f", "avx2"})))
    for k in ("MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "MKL_DEBUG_CPU_TYPE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("MKL_CBWR", "")
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    m = cpu_order.machine()
    assert m["vendor"] == "GenuineIntel" and m["model"] == "Xeon" and m["flags"] == ["avx2", "avx512f"]
    assert m["mkl_env"] == {}
    monkeypatch.setenv("MKL_DEBUG_CPU_TYPE", "5")
    assert cpu_order.machine()["mkl_env"] == {"MKL_DEBUG_CPU_TYPE": "5"}
    assert cpu_order.cpu_flags() == frozenset({"sse", "avx512f", "avx2"})


def test_cache_path_is_the_environments_or_the_homes(monkeypatch, tmp_path):
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    assert cpu_order.cache_path() == tmp_path / "cpu-order.json"
    monkeypatch.setenv("FP8EMU_CACHE", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cpu_order.cache_path() == tmp_path / "home" / ".cache" / "fp8emu" / "cpu-order.json"


class _FakeTorch:
    """What cpu_order reads of torch without probing: version, BLAS line, thread count."""
    __version__ = "9.9.9"

    class __config__:               # noqa: N801 (torch's own name)
        @staticmethod
        def show():
            return "PyTorch built with:\n  - GCC 9\n  - Intel(R) oneAPI Math Kernel Library Version 2099.1\n"

    def __init__(self, threads=3):
        self.threads = threads

    def get_num_threads(self):
        return self.threads


def test_a_cached_order_is_used_without_probing_and_a_partial_one_warns(monkeypatch, tmp_path):
    fake = _FakeTorch()
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "auto")
    monkeypatch.setattr(cpu_order, "_torch", lambda: fake)
    monkeypatch.setattr(cpu_order, "_MEMO", {})
    monkeypatch.setattr(cpu_order, "reveal_here", lambda *a, **k: pytest.fail("probed although cached"))
    assert cpu_order._library(fake) == {"torch": "9.9.9", "blas": "Intel(R) oneAPI Math Kernel Library Version 2099.1"}
    tree = SumTree.from_nested(((0, 2), (1, 3)), fma=False)
    entry = {"order": GemmOrder([tree], np.zeros((2, 5))).to_json(), "explained": 1.0, "calls": 9}
    info, lib = cpu_order.machine(), cpu_order._library(fake)
    (tmp_path / "cpu-order.json").write_text(json.dumps({
        cpu_order._key(info, lib, 3, 2, 4, 5, "NT"): entry,                                  # threads: torch's 3
        cpu_order._key(info, lib, 1, 2, 4, 5, "NN"): {**entry, "explained": 0.5}}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        order, src = cpu_order.order_for(2, 4, 5, layout="NT")
    assert src == "revealed" and order.trees == [tree]
    with pytest.warns(RuntimeWarning, match=r"2x4x5 \(NN\) explains 50.0% of torch's outputs"):
        order, src = cpu_order.order_for(2, 4, 5, threads=1)
    assert src == "revealed" and order.trees == [tree]
    with pytest.raises(ValueError, match="layout must be one of"):
        cpu_order.order_for(2, 4, 5, layout="nn")


def test_a_new_order_is_probed_once_and_stored_next_to_the_others(monkeypatch, tmp_path):
    fake = _FakeTorch(threads=2)
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path / "sub"))
    monkeypatch.setattr(cpu_order, "_torch", lambda: fake)
    monkeypatch.setattr(cpu_order, "_MEMO", {})
    probes = []
    tree = SumTree.blocks([0, 3, 6])

    def probe(M, K, N, *, threads, layout):
        probes.append((M, K, N, threads, layout))
        return GemmOrder([tree], np.zeros((M, N))), {"explained": 1.0, "calls": 11}
    monkeypatch.setattr(cpu_order, "reveal_here", probe)
    with cpu_order.use("revealed"):
        assert cpu_order.order_for(3, 6, 2)[0].trees == [tree]
        assert cpu_order.order_for(3, 6, 2)[0].trees == [tree]            # memo
        monkeypatch.setattr(cpu_order, "_MEMO", {})
        assert cpu_order.order_for(3, 6, 2)[0].trees == [tree]            # the file
    assert probes == [(3, 6, 2, 2, "NN")]
    data = json.loads((tmp_path / "sub" / "cpu-order.json").read_text())
    assert len(data) == 1 and next(iter(data.values()))["calls"] == 11
    assert not list((tmp_path / "sub").glob("*.tmp"))
    # a cache file that holds no mapping, or is no JSON, is read as empty; one that cannot be written is skipped
    for text in ("[1, 2]", "{not json"):
        (tmp_path / "sub" / "cpu-order.json").write_text(text)
        assert cpu_order._load_cache() == {}
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path / "file"))              # a file where the folder should be
    monkeypatch.setattr(cpu_order, "_MEMO", {})
    assert cpu_order.order_for(2, 6, 2, threads=1)[1] == "revealed" and len(probes) == 2


def test_the_recorded_policy_without_torch_uses_threads_and_shapes_it_was_given(monkeypatch):
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "auto")
    monkeypatch.delenv("MKL_CBWR", raising=False)
    monkeypatch.setattr(cpu_order, "_torch", lambda: None)
    monkeypatch.setattr(cpu_order, "_cpuinfo", lambda: ("AuthenticAMD", "EPYC", frozenset({"avx2"})))
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # named explicitly: compared with its own CPU's vectors
        with cpu_order.use("mkl-2024.2-avx512"):
            order, src = cpu_order.order_for(16, 769, 16, threads=2)
    assert src == "mkl-2024.2-avx512" and order.describe() == "fma [0:193] + [193:385] + [385:769] (fma start)"
    with pytest.warns(RuntimeWarning, match=r"^sgemm: this CPU \(AuthenticAMD, EPYC\) is not the one mkl-2024.2-avx512 was proven on"):
        order, _ = cpu_order.order_for(16, 769, 16)               # no thread count: one thread's order
    assert order.describe() == "fma [0:384] + [384:577] + [577:769] (fma start)"
    with pytest.warns(RuntimeWarning, match=r"mine: .*4x5000x4 on 1 thread\(s\)\): K <= 4096"):
        with cpu_order.use("mkl-2024.2-avx512"):
            cpu_order.order_for(4, 5000, 4, threads=1, name="mine")
    monkeypatch.setattr(cpu_order, "_torch", lambda: _FakeTorch())
    monkeypatch.setattr(cpu_order, "reveal_here", lambda *a, **k: pytest.fail("an empty product was probed"))
    monkeypatch.setattr(cpu_order, "_cpuinfo", lambda: ("GenuineIntel", "Xeon", frozenset({"avx512f"})))
    with cpu_order.use("auto"):                                   # an empty product: no probe, the model
        assert cpu_order.order_for(2, 0, 3, threads=1)[1] == "mkl-2024.2-avx512"


def test_describe_here_names_each_shapes_order_and_source(monkeypatch):
    monkeypatch.setattr(cpu_order, "_torch", lambda: None)
    monkeypatch.setattr(cpu_order, "_cpuinfo", lambda: ("GenuineIntel", "Xeon", frozenset({"avx512f"})))
    monkeypatch.setenv("MKL_CBWR", "AVX2")
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "auto")
    lines = cpu_order.describe_here([(4, 1024, 4), (4, 64, 4)], threads=1)
    assert lines[0] == "CPU: GenuineIntel Xeon (" + __import__("platform").machine() + "); kernel flags: avx512f"
    assert lines[1] == "MKL settings: {'MKL_CBWR': 'AVX2'}" and lines[2] == "library: torch not installed"
    assert lines[3].startswith("policy: auto; cache: ")
    assert lines[4].startswith("4x1024x4 NN: mkl-2024.2-avx512: fma [0:384] + [384:704] + [704:1024] (fma start)  [warning: ")
    assert "MKL settings {'MKL_CBWR': 'AVX2'}" in lines[4] and len(lines) == 6


def test_reveal_here_needs_torch_a_layout_and_restores_the_thread_count(monkeypatch):
    monkeypatch.setattr(cpu_order, "_torch", lambda: None)
    with pytest.raises(RuntimeError, match="needs torch"):
        cpu_order.reveal_here(2, 8, 2)
    monkeypatch.undo()
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match=r"layout must be one of \('NN', 'NT', 'TN', 'TT'\), got 'XY'"):
        cpu_order.reveal_here(2, 8, 2, layout="XY")
    old = torch.get_num_threads()
    want = 1 if old != 1 else 2
    seen = []
    real = cpu_order.reveal

    def spy(mm, M, K, N, **options):
        seen.append(torch.get_num_threads())
        assert options == {"max_calls": cpu_order.MAX_REVEAL_PRODUCTS}      # the probe's budget
        return real(mm, M, K, N, **options)
    monkeypatch.setattr(cpu_order, "reveal", spy)
    with torch.autocast("cpu", dtype=torch.bfloat16):            # the probe's own mm is float32 all the same
        order, facts = cpu_order.reveal_here(3, 16, 2, threads=want, layout="TN")
    assert seen == [want] and torch.get_num_threads() == old and facts["threads"] == want
    assert facts["explained"] == 1.0 and order.trees[0].K == 16
    order, facts = cpu_order.reveal_here(3, 16, 2)
    assert facts["threads"] == old and seen == [want, old]


def test_a_single_row_or_column_is_revealed_and_a_second_order_joins_the_cache_file(monkeypatch, tmp_path):
    """torch's own order is revealed for any non-empty product, gemv's (one row or column) included; each new
    key is added to the file already there (its folder exists by then)."""
    fake = _FakeTorch(threads=1)
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    monkeypatch.setattr(cpu_order, "_torch", lambda: fake)
    monkeypatch.setattr(cpu_order, "_MEMO", {})
    probes = []

    def probe(M, K, N, *, threads, layout):
        probes.append((M, K, N))
        return GemmOrder([SumTree.blocks([0, K])], np.zeros((M, N))), {"explained": 1.0, "calls": len(probes)}
    monkeypatch.setattr(cpu_order, "reveal_here", probe)
    with cpu_order.use("auto"), warnings.catch_warnings():
        warnings.simplefilter("error")                  # the recorded model would warn about gemv
        # the revealed gemv order's own warning (twelfth audit A #5) is not the recorded model's
        warnings.filterwarnings("ignore", message=r".*single row or column, which the BLAS sends to its gemv")
        assert cpu_order.order_for(3, 6, 1)[1] == "revealed"
        assert cpu_order.order_for(1, 6, 3)[1] == "revealed"
    assert probes == [(3, 6, 1), (1, 6, 3)]
    data = json.loads((tmp_path / "cpu-order.json").read_text())
    assert sorted(e["calls"] for e in data.values()) == [1, 2]


def test_the_recorded_orders_default_is_one_thread():
    """16x769x16 is 196,864 multiply-adds: two threads would split K; order() without a thread count is one's."""
    assert _REC.order(16, 769, 16).describe() == "fma [0:384] + [384:577] + [577:769] (fma start)"
    assert _REC.tree(16, 769, 16).describe() == "[0:384] + [384:577] + [577:769]"
    assert _REC.order(16, 769, 16, 2).describe() == "fma [0:193] + [193:385] + [385:769] (fma start)"


# ----------------------------------------------------------------------------- seed 66's survivors
def test_two_threads_split_k_only_beyond_twice_kc_and_an_empty_product_has_a_one_leaf_placeholder():
    # K = 768 = 2 kc is not split (the rule is K > 2 kc), though its tree is the same as the split one's
    assert _REC.splits_k(16, 768, 16, 2) is False and _REC.splits_k(16, 769, 16, 2) is True
    assert _REC.splits_k(16, 769, 16, 1) is False
    # K = 0: sgemm returns zeros before reading an order; the placeholder sums nothing (one leaf, no addition)
    t = _REC.tree(3, 0, 2)
    assert t.K == 1 and t.children.shape == (0, 2)
    assert _REC.order(3, 0, 2).classes.shape == (3, 2)


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_reveal_here_gives_torch_each_operand_in_its_own_layout(monkeypatch, layout):
    """A is transposed for a first letter T and B for a second: each operand's own letter (a 3 x 4 A and a
    4 x 2 B, so neither is contiguous as a transposed view)."""
    pytest.importorskip("torch")
    real, seen = cpu_order._tensor, []

    def spy(torch, a, transposed):
        t = real(torch, a, transposed)
        seen.append((tuple(t.shape), t.is_contiguous()))
        return t
    monkeypatch.setattr(cpu_order, "_tensor", spy)
    order, facts = cpu_order.reveal_here(3, 4, 2, threads=1, layout=layout)
    assert facts["explained"] == 1.0
    want = [((3, 4), layout[0] == "N"), ((4, 2), layout[1] == "N")]
    pairs = [seen[i:i + 2] for i in range(0, len(seen), 2)]          # each mm call: A, then B
    assert pairs and all(p == want for p in pairs)


def test_the_cache_key_is_canonical_json_and_each_damaged_entry_is_probed_again(monkeypatch, tmp_path):
    fake = _FakeTorch(threads=1)
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    monkeypatch.setattr(cpu_order, "_torch", lambda: fake)
    monkeypatch.setattr(cpu_order, "_MEMO", {})
    probes = []
    good = SumTree.blocks([0, 2, 4])

    def probe(M, K, N, *, threads, layout):
        probes.append((M, K, N))
        return GemmOrder([good], np.zeros((M, N))), {"explained": 1.0, "calls": 5}
    monkeypatch.setattr(cpu_order, "reveal_here", probe)
    with cpu_order.use("revealed"):
        cpu_order.order_for(2, 4, 3)
    (key,) = json.loads((tmp_path / "cpu-order.json").read_text())
    # the key is sorted-keys JSON (the same key whatever order a dict was built in, so a file stays readable)
    assert key == json.dumps(json.loads(key), sort_keys=True)
    info, lib, threads, *shape, version = json.loads(key)
    assert info == cpu_order.machine() and lib == {"torch": "9.9.9", "blas": "Intel(R) oneAPI Math Kernel "
                                                   "Library Version 2099.1"} and [threads, *shape] == [1, 2, 4, 3, "NN"]
    assert version == 6           # the orders' version: 6 keys the matmul setting, 5 asks every joined leaf, 4 lone blocks
    entry = {"order": GemmOrder([good], np.zeros((2, 3))).to_json(), "explained": 1.0, "calls": 5}
    damaged = [{**entry, "order": GemmOrder([SumTree.blocks([0, 5])], np.zeros((2, 3))).to_json()},  # K = 5 tree
               {**entry, "explained": 1.5}, {**entry, "explained": -0.5}, {**entry, "explained": True},
               {**entry, "explained": "1.0"}]
    assert cpu_order._cached(entry, 2, 4, 3)[1] == 1.0
    for bad in damaged:
        assert cpu_order._cached(bad, 2, 4, 3) is None, bad
        (tmp_path / "cpu-order.json").write_text(json.dumps({key: bad}))
        monkeypatch.setattr(cpu_order, "_MEMO", {})
        n = len(probes)
        with cpu_order.use("revealed"):
            assert cpu_order.order_for(2, 4, 3)[0].trees == [good]
        assert len(probes) == n + 1, bad


# ----------------------------------------------------------------------------- seed 68's holes
def test_an_empty_product_in_any_dimension_is_never_probed(monkeypatch):
    monkeypatch.setattr(cpu_order, "_torch", lambda: _FakeTorch())
    monkeypatch.setattr(cpu_order, "_revealed", lambda *a, **k: pytest.fail("an empty product was probed"))
    monkeypatch.setattr(cpu_order, "reveal_here", lambda *a, **k: pytest.fail("an empty product was probed"))
    monkeypatch.setattr(cpu_order, "_cpuinfo", lambda: ("GenuineIntel", "Xeon", frozenset({"avx512f"})))
    with cpu_order.use("auto"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # M or N of 0 or 1 is gemv's: the unproven warning
        for M, K, N in ((0, 5, 3), (2, 0, 3), (2, 5, 0)):
            assert cpu_order.order_for(M, K, N, threads=1)[1] == "mkl-2024.2-avx512", (M, K, N)


def test_cpuinfo_keeps_a_model_name_with_a_colon_whole(monkeypatch):
    import io
    text = "vendor_id\t: GenuineIntel\nmodel name\t: Xeon CPU @ 2.0GHz: stepping 7\nflags\t\t: avx2\n"
    monkeypatch.setattr(cpu_order, "open", lambda *a, **k: io.StringIO(text), raising=False)
    assert cpu_order._cpuinfo.__wrapped__()[1] == "Xeon CPU @ 2.0GHz: stepping 7"


# ----------------------------------------------------------------------------- seed 71's holes
def test_two_threads_split_k_beyond_192000_multiply_adds_not_at_it():
    # the recorded rule: split at MORE than 192,000 multiply-adds (K > 768).  192,001 = 101 x 1901 is reached
    # only with a 1 (gemv's shapes, which the model still orders); 192,000 = 1 x 960 x 200 is not split
    assert _REC.split_macs == 192_000
    assert _REC.splits_k(101, 1901, 1, 2) and _REC.splits_k(1, 1901, 101, 2)
    assert not _REC.splits_k(1, 960, 200, 2) and not _REC.splits_k(101, 1901, 1, 1)
    # halves of 951 and 950 (both beyond 768: the packing driver's plain blocks of 384), the second added to the
    # first; the small driver's 960 on one thread: 384, then the 576 left in two halves
    assert _REC.order(101, 1901, 1, 2).describe() == \
        "fma [0:384] + [384:768] + [768:951] + ([951:1335] + [1335:1719] + [1719:1901]) (fma start)"
    assert _REC.order(1, 960, 200, 2).describe() == "fma [0:384] + [384:672] + [672:960] (fma start)"


def test_order_for_refuses_zero_threads_and_negative_or_fractional_sizes(monkeypatch):
    monkeypatch.setattr(cpu_order, "_cpuinfo", lambda: ("GenuineIntel", "Xeon", frozenset({"avx512f"})))
    with cpu_order.use("mkl-2024.2-avx512"):
        for threads in (0, -1):          # torch.set_num_threads refuses them; a recorded model would not notice
            with pytest.raises(ValueError, match="sgemm: threads must be a positive integer"):
                cpu_order.order_for(2, 4, 3, threads=threads)
            with pytest.raises(ValueError, match="describe_here: threads must be a positive integer"):
                cpu_order.order_for(2, 4, 3, threads=threads, name="describe_here")
        for M, K, N in ((-1, 4, 3), (2, -4, 3), (2, 4, -3), (2.5, 4, 3), (2, 4.0, 3), (2, 4, np.float64(3))):
            with pytest.raises(ValueError, match="sgemm: M, K, N must be non-negative integers"):
                cpu_order.order_for(M, K, N, threads=1)
        assert cpu_order.order_for(np.int64(2), 4, np.int32(3), threads=1)[0].classes.shape == (2, 3)


def test_the_cpu_is_read_once_per_process(monkeypatch):
    # machine() runs for every GEMM order asked for; /proc/cpuinfo (about 1.4 kB per logical CPU, so it grows
    # with the machine) is read once and kept
    import io
    reads = []

    def fake_open(path, *a, **k):
        reads.append(path)
        return io.StringIO("vendor_id\t: GenuineIntel\nmodel name\t: Xeon\nflags\t\t: avx2 avx512f\n")
    monkeypatch.setattr(cpu_order, "open", fake_open, raising=False)
    cpu_order._cpuinfo.cache_clear()
    try:
        first = cpu_order.machine()
        assert cpu_order.machine() == first and cpu_order.cpu_flags() == frozenset({"avx2", "avx512f"})
        assert reads == ["/proc/cpuinfo"]
    finally:
        cpu_order._cpuinfo.cache_clear()        # the next caller reads this machine's own file


# ----------------------------------------------------------------------------- seed 72's hole
@pytest.mark.parametrize("where", ["env", "home"])
def test_a_revealed_order_is_stored_where_no_folder_of_the_cache_path_exists_yet(monkeypatch, tmp_path, where):
    # a fresh home has no ~/.cache; $FP8EMU_CACHE may name a folder several levels below any that exist
    if where == "env":
        monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path / "a" / "b" / "c"))
        want = tmp_path / "a" / "b" / "c" / "cpu-order.json"
    else:
        monkeypatch.setenv("FP8EMU_CACHE", "")
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        want = tmp_path / "home" / ".cache" / "fp8emu" / "cpu-order.json"
    monkeypatch.setattr(cpu_order, "_torch", lambda: _FakeTorch(threads=1))
    monkeypatch.setattr(cpu_order, "_MEMO", {})
    tree = SumTree.blocks([0, 2, 5])
    monkeypatch.setattr(cpu_order, "reveal_here", lambda M, K, N, *, threads, layout: (
        GemmOrder([tree], np.zeros((M, N))), {"explained": 1.0, "calls": 7}))
    with cpu_order.use("revealed"):
        assert cpu_order.order_for(2, 5, 3)[0].trees == [tree]
    data = json.loads(want.read_text())
    assert [v["calls"] for v in data.values()] == [7]


@pytest.mark.parametrize("shape", [(4, 0, 4), (0, 4, 4), (4, 4, 0)])
def test_an_empty_product_under_the_revealed_policy_is_no_error(shape):
    """An empty product sums nothing (torch.mm gives zeros): no order to probe, so FP8EMU_CPU_ORDER='revealed' has
    nothing to refuse, with or without torch (the placeholder order of the model in force)."""
    with cpu_order.use("revealed"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        order, _ = cpu_order.order_for(*shape, threads=1)
    assert order.classes.shape == (shape[0], shape[2])
