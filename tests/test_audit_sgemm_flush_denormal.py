"""Fifteenth audit, part B (audit26): ``sgemm`` where torch flushes subnormals (``torch.set_flush_denormal(True)``).

``sgemm`` is "torch.mm ... summed in the order torch's BLAS takes here".  With FTZ / DAZ set on the thread, torch.mm
gives 0 where the IEEE float32 sum is subnormal, and ``sgemm`` (IEEE arithmetic, partly flushed by the thread's
NumPy) differed from it, with no warning: on this AMD EPYC 520 of 4096 outputs of a 64x512x64 product on one thread,
32 of 64 of an 8x64x8 one on two (torch's worker thread flushed nothing).  It now warns where the operands can
reach subnormals (typical operands cannot).  The reference is torch's own ``mm`` on this machine.
"""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fp8emu.gemm import torch_cpu  # noqa: E402

RNG = np.random.default_rng(0)
TINY_X = (RNG.standard_normal((8, 64)) * 2.0 ** -70).astype(np.float32)     # products near 2**-130: subnormal sums
TINY_Y = (RNG.standard_normal((64, 8)) * 2.0 ** -60).astype(np.float32)
X = RNG.standard_normal((8, 64)).astype(np.float32)
Y = RNG.standard_normal((64, 8)).astype(np.float32)


def _mm(a, b):
    return torch.mm(torch.from_numpy(a).clone(), torch.from_numpy(b).clone()).numpy()


@pytest.fixture
def one_thread(monkeypatch, tmp_path):
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "auto")
    _mm(X, Y)        # torch's worker threads exist before any flushing: a thread started under it keeps it for good
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)
        torch.set_num_threads(old)


def test_subnormal_sums_under_flush_denormal_warn(one_thread):
    ieee = _mm(TINY_X, TINY_Y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.array_equal(torch_cpu.sgemm(TINY_X, TINY_Y, threads=1).view(np.int32), ieee.view(np.int32))
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush subnormals")
    flushed = _mm(TINY_X, TINY_Y)
    assert np.any(flushed.view(np.int32) != ieee.view(np.int32))       # torch's sums are no IEEE sums now
    with pytest.warns(RuntimeWarning, match=r"sgemm: this thread flushes subnormal floats to zero "
                                            r"\(torch.set_flush_denormal\(True\)"):
        torch_cpu.sgemm(TINY_X, TINY_Y, threads=1)


def test_operands_that_reach_no_subnormal_do_not_warn(one_thread):
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush subnormals")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = torch_cpu.sgemm(X, Y, threads=1)
    assert np.array_equal(got.view(np.int32), _mm(X, Y).view(np.int32))
