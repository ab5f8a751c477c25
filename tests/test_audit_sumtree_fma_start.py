"""The sign of a zero whose first product underflows (tests/AUDIT.md, "Eleventh fresh audit, part A", #1).

An FMA chain whose accumulator starts at +0 computes its first term as fma(x, y, +0): the exact product plus +0,
rounded once.  A nonzero product below half of float32's least subnormal (2**-150) rounds to a zero of its own
sign (IEEE 754, 6.3), so -2**-200 gives -0, and a following -0 product keeps it: torch's MKL returns -0.
``evaluate`` rounded the product first (-0) and then added +0: +0, silently, on every FMA order that starts at +0
(the revealed orders and ``mkl-2024.2-avx512``).  A chain that multiplies and adds apart rounds the product
first, so +0 is right there.  Expectations are IEEE's; torch itself is the reference where installed.
"""

import warnings

import numpy as np
import pytest

from fp8emu.gemm import cpu_order
from fp8emu.gemm.sumtree import SumTree, evaluate
from fp8emu.gemm.torch_cpu import sgemm

NEG0, POS0 = np.float32(-0.0).view(np.int32), np.float32(0.0).view(np.int32)


def _first_tiny(M, K, N):
    """Products: -2**-200 (nonzero, rounds to -0) first, then 0 x -1 = -0."""
    x = np.zeros((M, K), np.float32)
    y = np.full((K, N), -1.0, np.float32)
    x[:, 0], y[0, :] = -(2.0 ** -100), 2.0 ** -100
    return x, y


@pytest.mark.parametrize("K", [1, 2, 8])
def test_an_fma_chain_from_plus_zero_keeps_an_underflowed_products_sign(K):
    x, y = _first_tiny(3, K, 2)
    got = evaluate(SumTree.blocks([0, K]), x, y)
    assert np.all(got.view(np.int32) == NEG0)          # fma(-2**-100, 2**-100, +0) = -0; -0 + -0 = -0


def test_multiply_then_add_from_plus_zero_gives_plus_zero():
    x, y = _first_tiny(3, 4, 2)
    got = evaluate(SumTree.blocks([0, 4], fma=False), x, y)
    assert np.all(got.view(np.int32) == POS0)          # round(-2**-200) = -0, +0 + -0 = +0


def test_an_exact_minus_zero_first_product_still_starts_at_plus_zero():
    x = np.zeros((2, 3), np.float32)
    y = -np.ones((3, 2), np.float32)
    assert np.all(evaluate(SumTree.blocks([0, 3]), x, y).view(np.int32) == POS0)          # -0 + +0 = +0
    assert np.all(evaluate(SumTree.blocks([0, 3], zero_start=False), x, y).view(np.int32) == NEG0)


def test_each_block_starts_its_own_fma_chain():
    # blocks [0:2] + [2:4], each from +0: a block of -0 products is +0, one led by the tiny product -0, and
    # +0 + -0 = +0; where both blocks are led by it, -0 + -0 = -0
    x, y = _first_tiny(2, 4, 2)
    assert np.all(evaluate(SumTree.blocks([0, 2, 4]), x, y).view(np.int32) == POS0)
    x[:, 2], y[2, :] = x[:, 0], y[0, :]
    assert np.all(evaluate(SumTree.blocks([0, 2, 4]), x, y).view(np.int32) == NEG0)


def test_the_avx512_model_keeps_the_sign():
    x, y = _first_tiny(4, 8, 4)
    with cpu_order.use("mkl-2024.2-avx512"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = sgemm(x, y, threads=1)
    assert np.all(got.view(np.int32) == NEG0)


@pytest.mark.parametrize("M, K, N", [(2, 2, 2), (4, 8, 4), (1, 3, 2), (8, 64, 8)])
def test_the_revealed_order_gives_torchs_bits(M, K, N, tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    x, y = _first_tiny(M, K, N)
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        want = torch.mm(torch.from_numpy(x), torch.from_numpy(y)).numpy()
        with cpu_order.use("revealed"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = sgemm(x, y, threads=1)
    finally:
        torch.set_num_threads(old)
    assert np.array_equal(got.view(np.int32), want.view(np.int32))
