"""A K block of one product: MKL's sgemm sums it apart (the product rounded, then added to the other blocks' sum),
where a SumTree joins a lone leaf to the running sum by FMA.  The recorded model ``mkl-2024.2-avx512`` cuts such
a block from K = 384j + 1 beyond 768 in its packing driver (M, N >= 192, one thread) and from a two-thread half
of such a length; found by ``tools/record_cpu_order.py --random`` at 344x1921x351 (torch differed on about half
of the random products' outputs there).  It cannot say that order, so it warns there.  torch is the reference
where installed (the differences are measured live); the rule itself is checked without it."""

import warnings

import numpy as np
import pytest

from fp8emu.gemm import cpu_order, order_probe

REC = cpu_order.RECORDED["mkl-2024.2-avx512"]


@pytest.mark.parametrize("M, K, N, threads", [(192, 769, 192, 1), (192, 1153, 200, 1), (344, 1921, 351, 1),
                                              (32, 1537, 32, 2), (64, 1537, 64, 2)])
def test_a_block_of_one_product_is_outside_the_recorded_model(M, K, N, threads):
    assert "a K block of one product" in REC.unproven(M, K, N, threads)


@pytest.mark.parametrize("M, K, N, threads", [(192, 770, 192, 1), (191, 769, 192, 1), (192, 768, 192, 1),
                                              (16, 769, 16, 2), (32, 1540, 32, 2), (2, 1, 2, 1)])
def test_other_blocks_stay_proven(M, K, N, threads):
    assert REC.unproven(M, K, N, threads) is None


def test_the_recorded_order_warns_where_it_cannot_say_the_lone_block():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with cpu_order.use("mkl-2024.2-avx512"):
            cpu_order.order_for(192, 769, 192, threads=1, layout="NN")
    assert any("a K block of one product" in str(x.message) for x in w)


@pytest.mark.parametrize("M, K, N, threads, other", [(192, 769, 192, 1, (192, 770, 192)),
                                                     (32, 1537, 32, 2, (32, 1540, 32))])
def test_torch_sums_a_lone_product_apart(M, K, N, threads, other):
    torch = pytest.importorskip("torch")
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        def mm(a, b):
            return torch.mm(torch.from_numpy(a).clone(), torch.from_numpy(b).clone()).numpy()
        if cpu_order.machine()["vendor"] != "GenuineIntel" or not REC.applies_here(cpu_order.machine()):
            pytest.skip("the recorded model was measured on an Intel AVX-512 CPU with MKL's default kernel")
        assert order_probe.check_order(REC.order(M, K, N, threads), mm, M, K, N, trials=1) > 0
        assert order_probe.check_order(REC.order(*other, threads), mm, *other, trials=1) == 0   # the proven neighbour
    finally:
        torch.set_num_threads(old)
