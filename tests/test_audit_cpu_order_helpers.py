"""The CPU order's public helpers take only the sizes, thread counts and layouts they describe.

``order_for`` and ``sgemm`` check their arguments; the recorded models' own ``order`` / ``tree`` /
``blocks`` / ``unproven``, the ``mkl-2024.2-compatible`` trees (``block_tree``, ``edge_tree``,
``chain_tree``), ``sgemm_k_blocks`` and ``probe_too_long`` are public too and answered other
inputs silently: a negative K gave a one-term order, a layout ``"XX"`` was called proven, ``True``
threads read as one, ``kc=True`` as 1.  Expectations are what the accepted values give.
"""

import numpy as np
import pytest

from fp8emu.gemm import cpu_order, mkl_cnr, torch_cpu

AVX = cpu_order.RECORDED["mkl-2024.2-avx512"]
MODELS = [AVX, mkl_cnr.MODEL]
BAD_SIZES = [-1, 2.5, True, "4", None, np.float64(4.0)]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
@pytest.mark.parametrize("bad", BAD_SIZES, ids=repr)
@pytest.mark.parametrize("at", [0, 1, 2])
def test_a_recorded_models_order_and_unproven_refuse_a_size_that_is_no_count(model, bad, at):
    shape = [8, 300, 8]
    shape[at] = bad
    with pytest.raises(ValueError, match=r"M, K, N must be non-negative integers"):
        model.order(*shape, threads=1)
    with pytest.raises(ValueError, match=r"M, K, N must be non-negative integers"):
        model.unproven(*shape, 1)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
@pytest.mark.parametrize("layout", ["XX", "nn", None, 3, ("N", "N")], ids=repr)
def test_unproven_refuses_a_layout_that_is_none_of_the_four(model, layout):
    # mkl-2024.2-compatible called "XX" proven (None) for a shape tiled whole
    with pytest.raises(ValueError, match=r"layout must be one of \('NN', 'NT', 'TN', 'TT'\)"):
        model.unproven(8, 300, 8, 1, layout)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
@pytest.mark.parametrize("threads", [0, -1, 2.5, "2", True, np.bool_(True)], ids=repr)
def test_unproven_takes_a_positive_integer_or_none_for_threads(model, threads):
    # True was read as one thread ("proven"); "2" and 2.5 were said to lie outside "1 and 2 thread(s)"
    with pytest.raises(ValueError, match=r"threads must be a positive integer \(torch's thread count\) or None"):
        model.unproven(8, 300, 8, threads)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_the_accepted_arguments_answer_as_before(model):
    for threads in (None, 1, 2, np.int64(2), 3):
        for layout in cpu_order.LAYOUTS:
            model.unproven(16, 500, 16, threads, layout)
    assert model.unproven(16, 500, 16, 1, "NN") is None
    assert model.unproven(16, 5000, 16, 1, "NN") == f"K <= {model.max_k} was proven"
    assert model.order(3, 0, 2).classes.shape == (3, 2)
    assert model.order(0, 5, 4, threads=np.int64(2)).classes.shape == (0, 4)


@pytest.mark.parametrize("fn", [mkl_cnr.block_tree, mkl_cnr.edge_tree])
@pytest.mark.parametrize("kc", [0, -5, 2.5, True, "112", None], ids=repr)
def test_the_compatible_trees_refuse_a_block_that_is_no_positive_count(fn, kc):
    # kc=True was read as blocks of one term; edge_tree(300, kc=-5) gave one plain chain
    with pytest.raises(ValueError, match=r"kc must be a positive integer"):
        fn(300, kc)


@pytest.mark.parametrize("fn", [mkl_cnr.block_tree, mkl_cnr.edge_tree, mkl_cnr.chain_tree])
@pytest.mark.parametrize("K", [0, -3, 2.5, True, "4"], ids=repr)
def test_the_compatible_trees_refuse_a_k_that_is_no_positive_count(fn, K):
    # block_tree(0) said "a sum tree's leaves are integer term indices, got None"
    with pytest.raises(ValueError, match=r"K must be a positive integer"):
        fn(K)


def test_the_compatible_trees_are_as_before():
    assert mkl_cnr.block_tree(300).describe() == "[0:112] + [224:300] + [112:224]"
    assert mkl_cnr.edge_tree(300).describe() == "0 + [224:300] then [1:224]"
    assert mkl_cnr.block_tree(1).describe() == "0" and mkl_cnr.edge_tree(np.int64(5), np.int64(2)).K == 5


@pytest.mark.parametrize("K", [-5, 2.5, True, "300"], ids=repr)
def test_sgemm_k_blocks_refuses_a_k_that_is_no_count(K):
    # -5 gave [0, 0], 2.5 gave [0, 2.5], True [0, True]
    with pytest.raises(ValueError, match=r"M, K, N must be non-negative integers"):
        torch_cpu.sgemm_k_blocks(K)
    assert torch_cpu.sgemm_k_blocks(300) == [0, 300]


@pytest.mark.parametrize("shape", [(True, 10 ** 6, True), (-1, 5, 1), (1, 2.5, 1), ("1", 5, 1)], ids=repr)
def test_probe_too_long_refuses_sizes_that_are_no_counts(shape):
    # (True, 10**6, True) answered "probing Truex1000000xTrue ..."; a negative M answered None
    with pytest.raises(ValueError, match=r"M, K, N must be non-negative integers"):
        cpu_order.probe_too_long(*shape)
    assert cpu_order.probe_too_long(1, 8193, 1) is None and cpu_order.probe_too_long(1, 8194, 1) is not None


@pytest.mark.parametrize("shape", [((0, 3), (3, 2)), ((2, 0), (0, 2)), ((2, 3), (3, 0))])
def test_sgemm_checks_its_layout_for_an_empty_product_too(shape):
    x, y = np.zeros(shape[0], np.float32), np.zeros(shape[1], np.float32)
    with pytest.raises(ValueError, match=r"layout must be one of"):
        torch_cpu.sgemm(x, y, layout="XX")
    out = torch_cpu.sgemm(x, y, layout="TT")
    assert out.shape == (shape[0][0], shape[1][1]) and not out.any()


@pytest.mark.parametrize("kw", [dict(m_tile=0), dict(m_tile=-4), dict(m_tile=True), dict(n_tile=0),
                                dict(n_tile=2.5), dict(m_min=-1), dict(m_min="8")], ids=repr)
def test_tile_classes_takes_positive_integer_tiles(kw):
    # m_tile=0 was ZeroDivisionError, -4 and True tiled as some other kernel, 2.5 a slicing TypeError
    with pytest.raises(ValueError, match=r"tile_classes: m_min, m_tile and n_tile must be positive integers"):
        mkl_cnr.tile_classes(9, 9, **kw)


@pytest.mark.parametrize("shape", [(-1, 4), (2.5, 4), (True, 3), (4, "4")], ids=repr)
def test_tile_classes_takes_non_negative_integer_sizes(shape):
    # NumPy's "negative dimensions are not allowed", "'float' object cannot be interpreted as an integer"
    with pytest.raises(ValueError, match=r"tile_classes: M, N must be non-negative integers"):
        mkl_cnr.tile_classes(*shape)
    assert mkl_cnr.tile_classes(9, 9)[[0, 8], :][:, [0, 8]].tolist() == [[0, 1], [2, 2]]
