"""Fourteenth audit, part C (audit24): the recorded CPU order ``mkl-2024.2-amd-avx2`` after the EPYC was added.

Expectations are what torch 2.13.0+cpu's ``mm`` (MKL 2024.2) did on a 2-vCPU KVM "AMD EPYC" (family 23, AVX2,
no AVX-512) on 2026-12-07, revealed there by ``cpu_order.reveal_here`` and checked by ``order_probe.check_order``,
written out by hand; the live checks run where the model applies (elsewhere they are skipped).
"""

from __future__ import annotations

import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pytest

from fp8emu.gemm import cpu_order

NAME = "mkl-2024.2-amd-avx2"
MODEL = cpu_order.RECORDED[NAME]

# (M, K, N) on two threads: whether the rows past the first thread's 4 ceil(M / 8) are the FMA kernel's (MKL ran
# the product on one thread) or the small kernel's (no FMA), as revealed on the EPYC
ONE_THREAD = [(7, 16, 16), (7, 4, 100), (5, 2, 12), (5, 3, 12), (11, 16, 13), (9, 4, 64), (5, 13, 12), (7, 2, 13)]
TWO_THREADS = [(7, 17, 16), (7, 5, 17), (7, 4, 101), (5, 17, 12), (11, 5, 40), (9, 3, 500)]


def _fma_rows(M, K, N, threads=2, layout="NN"):
    o = MODEL.order(M, K, N, threads, layout=layout)
    return [all(o.trees[c].fma for c in row) for row in o.classes]


@pytest.mark.parametrize("M, K, N", ONE_THREAD)
def test_mkl_keeps_a_small_product_on_one_thread(M, K, N):
    # two threads asked, one used: every row is the FMA kernel's (the model gave rows 4.. the small kernel's,
    # and differed from torch in 3 to 40 outputs of random products, called proven)
    assert _fma_rows(M, K, N) == [True] * M
    two, one = MODEL.order(M, K, N, 2), MODEL.order(M, K, N, 1)
    assert two.trees == one.trees and (two.classes == one.classes).all()


@pytest.mark.parametrize("M, K, N", TWO_THREADS)
def test_past_those_sizes_the_second_threads_last_rows_are_the_small_kernels(M, K, N):
    r0 = 4 * -(-M // 8)
    assert _fma_rows(M, K, N) == [True] * r0 + [False] * (M - r0)


def test_the_rows_of_one_thread_are_proven_in_every_layout():
    # the small kernel's NT rule was not measured, but MKL's one thread sums these shapes by the FMA kernel in NT
    # too (all 4 layouts matched torch on the EPYC)
    for M, K, N in ONE_THREAD:
        for layout in cpu_order.LAYOUTS:
            assert MODEL.unproven(M, K, N, 2, layout) is None
            assert MODEL.unproven(M, K, N, None, layout) is None     # one and two threads alike
    assert "SIMD lanes" in MODEL.unproven(7, 17, 16, 2, "NT")


@pytest.mark.parametrize("threads", [None, "2", True, 2.0, 0, -1])
def test_small_rows_refuses_a_thread_count_that_is_not_one(threads):
    # None and "2" answered "no row" (one thread's answer), silently
    with pytest.raises(ValueError, match="threads must be a positive integer"):
        MODEL.small_rows(7, 64, 20, threads)


@pytest.mark.parametrize("M, K, N", [(-1, 64, 20), (7.0, 64, 20), (7, "64", 20), (7, 64, None)])
def test_small_rows_refuses_bad_sizes(M, K, N):
    with pytest.raises(ValueError, match="M, K, N must be non-negative integers"):
        MODEL.small_rows(M, K, N, 2)


def test_small_rows_takes_numpy_integers():
    assert MODEL.small_rows(np.int64(7), np.uint16(64), np.int32(20), np.int8(2)) == 4


def _peak(fn):
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("M, K, N, threads, layout", [
    (3, 64, 10**7, 1, "NN"), (10**7, 64, 3, 1, "NN"), (10**7, 64, 3, 1, "TN"),
])
def test_a_small_kernel_order_builds_no_output_sized_temporaries(M, K, N, threads, layout):
    # one tree: only the (calloc'd, untouched) classes array, as the other recorded models; the M x N mask and
    # its int64 row numbers took 170 MB of temporaries here (1.7 GB for 3 x 10**8 outputs)
    classes = M * N * 2
    peak = _peak(lambda: MODEL.order(M, K, N, threads, layout=layout))
    assert peak < classes + (4 << 20), peak
    assert peak < _peak(lambda: cpu_order.RECORDED["mkl-2024.2-avx512"].order(M, K, N, threads)) + (4 << 20)


def test_the_peeled_outputs_are_those_revealed_on_a_tall_c():
    # 10 x 64 x 7 NN: rows 1, 2, 3 and 5, 6, 7 start 1, 2, 3 floats before a 16-byte boundary, row 9 one
    o = MODEL.order(10, 64, 7)
    peeled = np.array([["then" in o.trees[c].describe() for c in row] for row in o.classes])
    want = np.zeros((10, 7), bool)
    for r, n in {1: 1, 2: 2, 3: 3, 5: 1, 6: 2, 7: 3, 9: 1}.items():
        want[r, :n] = True
    assert (peeled == want).all()


def test_live_torch_equals_the_model_where_it_keeps_one_thread():
    torch = pytest.importorskip("torch")
    if not MODEL.applies_here(cpu_order.machine()):
        pytest.skip(f"{NAME} is not this CPU's model (an AMD EPYC with AVX2, no AVX-512)")
    from fp8emu.gemm import torch_cpu
    rng = np.random.default_rng(24)
    old = torch.get_num_threads()
    bad = {}
    try:
        torch.set_num_threads(2)
        for M, K, N in ONE_THREAD + TWO_THREADS:
            for layout in ("NN", "TT"):
                a = (rng.standard_normal((M, K)) * np.exp2(rng.integers(-12, 13, (M, K)))).astype(np.float32)
                b = rng.standard_normal((K, N)).astype(np.float32)
                ta = torch.from_numpy(a) if layout[0] == "N" else torch.from_numpy(np.ascontiguousarray(a.T)).t()
                tb = torch.from_numpy(b) if layout[1] == "N" else torch.from_numpy(np.ascontiguousarray(b.T)).t()
                want = torch.mm(ta, tb)
                with cpu_order.use(NAME), warnings.catch_warnings():
                    warnings.simplefilter("error")
                    got = torch_cpu.sgemm(a, b, threads=2, layout=layout)
                n = int((got.view(np.int32) != want.numpy().view(np.int32)).sum())
                if n:
                    bad[(M, K, N, layout)] = n
    finally:
        torch.set_num_threads(old)
    assert not bad, bad


def test_the_guide_says_how_an_odd_k_up_to_384_is_summed():
    # "the last two halved" read as [0:159] + [159:317] for K = 317 (ceil first, as an even K or the Xeon's
    # small driver); MKL sums [0:158] + [158:316] + [316:317] on the EPYC (torch.mm at 64x317x64, 1 and 2 threads)
    text = " ".join((Path(__file__).resolve().parents[1] / "docs/guides/torch.md").read_text().split())
    assert MODEL.blocks(317, 64, 64) == [0, 158, 316, 317]
    assert ("an odd K there as two halves of floor(K / 2) and its last product summed apart: 317 as [0:158] + "
            "[158:316] + [316:317]") in text


@pytest.mark.parametrize("name", ["mkl-2024.2-avx512", NAME])
@pytest.mark.parametrize("M, K, N", [(8, "8", 8), (8, None, 8), (-1, 5000, 64), (64, 5000.0, 64), (True, 5000, 64)])
def test_splits_k_refuses_bad_sizes(name, M, K, N):
    # K "8" and None were Python's "'>' not supported between instances", -1 x 5000 x 64 answered False
    with pytest.raises(ValueError, match="M, K, N must be non-negative integers"):
        cpu_order.RECORDED[name].splits_k(M, K, N, 2)


def test_splits_k_still_answers_for_sizes_given_as_numpy_integers():
    # 64 x 5000 x 64 on two threads: 20,480,000 multiply-adds, past the Xeon's 192,000: K split (the rule as
    # recorded); the EPYC's kernel never splits K
    assert cpu_order.RECORDED["mkl-2024.2-avx512"].splits_k(np.int64(64), np.uint16(5000), np.int32(64), 2) is True
    assert MODEL.splits_k(64, 5000, 64, 2) is False


def test_numpy_int16_sizes_give_the_order_of_the_same_python_sizes():
    # 200 x 5000 x 200 on two threads: 200,000,000 multiply-adds, K split (as recorded); np.int16 sizes wrapped
    # the product and gave the unsplit order (NumPy's overflow warning the only sign)
    xeon = cpu_order.RECORDED["mkl-2024.2-avx512"]
    small = (np.int16(200), np.int16(5000), np.int16(200))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert xeon.splits_k(*small, 2) is True
        assert xeon.order(*small, 2).describe() == xeon.order(200, 5000, 200, 2).describe()
        assert xeon.unproven(np.int16(64), np.int16(3000), np.int16(64), 2) == xeon.unproven(64, 3000, 64, 2)
        assert [type(b) for b in MODEL.blocks(np.int64(317))] == [int] * 4


@pytest.mark.parametrize("name", sorted(cpu_order.RECORDED))
@pytest.mark.parametrize("M, K, N, threads", [(0, 64, 8, None), (8, 64, 0, 2), (8, 0, 8, None), (0, 0, 0, 1)])
def test_an_empty_product_is_not_called_unproven(name, M, K, N, threads):
    # nothing is summed (torch.mm gives +0): M or N = 0 warned "a single row or column goes to MKL's gemv", and
    # the compatible model's K = 0 "one and two threads tile this shape differently"
    assert cpu_order.RECORDED[name].unproven(M, K, N, threads, "NN") is None
    with cpu_order.use(name), warnings.catch_warnings():
        warnings.simplefilter("error")
        order, src = cpu_order.order_for(M, K, N, threads=threads)
    assert src == name and order.classes.shape == (M, N)


@pytest.mark.parametrize("shapes", [[(8, 64)], "64x512x64", None, [(8, 64, 8, 2)], (64, 512, 64), [[8, 64, 8], 5]])
def test_describe_here_refuses_what_is_no_list_of_shapes(shapes):
    # Python's "not enough values to unpack (expected 3, got 2)" / "'NoneType' object is not iterable"
    with pytest.raises(ValueError, match=r"describe_here: shapes must be a list of \(M, K, N\) triples"):
        cpu_order.describe_here(shapes)


def test_describe_here_names_itself_for_a_bad_size_before_any_line():
    with cpu_order.use(NAME), pytest.raises(ValueError, match="describe_here: M, K, N must be non-negative"):
        cpu_order.describe_here([(8, 64, 8), (-1, 64, 8)])
    with cpu_order.use(NAME):
        assert cpu_order.describe_here([[7, 16, 16]], threads=2)[-1] == "7x16x16 NN: mkl-2024.2-amd-avx2: fma [0:16]"


@pytest.mark.parametrize("M, N", [("3", 20), (-1, 20), (3.0, 20), (None, 20), (20, True)])
def test_small_refuses_bad_sizes(M, N):
    with pytest.raises(ValueError, match="M, N must be non-negative integers"):
        MODEL.small(M, N)


def test_small_answers_as_measured():
    # the EPYC's small kernel: M < 4 or N < 12 (3x64x20 and 20x64x11 without FMA, 4x64x12 with)
    assert MODEL.small(3, 20) and MODEL.small(np.int64(20), np.int8(11)) and not MODEL.small(4, 12)


@pytest.mark.parametrize("M, K, N", [(8, 64, 8), (20, 112, 20), (9, 1, 40), (13, 100, 29)])
def test_the_compatible_model_does_not_warn_of_an_unknown_thread_count_where_both_give_one_order(M, K, N):
    # K <= 112: each output one chain, whatever the tiling (it warned "one and two threads tile this shape
    # differently", though its orders on 1 and 2 threads, each proven, are the same)
    comp = cpu_order.RECORDED["mkl-2024.2-compatible"]
    one, two = comp.order(M, K, N, 1), comp.order(M, K, N, 2)
    assert one.trees == two.trees and (one.classes == two.classes).all()
    assert comp.unproven(M, K, N, 1, "NN") is None and comp.unproven(M, K, N, 2, "NN") is None
    assert comp.unproven(M, K, N, None, "NN") is None


def test_the_compatible_model_still_warns_where_the_thread_counts_differ():
    comp = cpu_order.RECORDED["mkl-2024.2-compatible"]
    assert comp.order(20, 113, 20, 1).describe() != comp.order(20, 113, 20, 2).describe()
    assert "tile this shape differently" in comp.unproven(20, 113, 20, None, "NN")
