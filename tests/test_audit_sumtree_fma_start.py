"""The sign of a zero whose first product underflows (tests/AUDIT.md, "Eleventh fresh audit, part A", #1).

Products: -2**-200 first (nonzero; below half of float32's least subnormal, so it rounds to -0, IEEE 754 6.3),
then 0 x -1 = -0.  Most of torch's MKL kernels start an output as fma(x, y, +0): the exact product plus +0,
rounded once, -0, and -0 + -0 keeps it: torch returns -0 (2x2x2, 4x8x4, 8x64x8, 1x8x1, 1x1x4, and 4x2x1 with A
transposed).  Others round the product first and add it to +0: +0 (4x2x1 and 3x5x1 with A row-major, 1x1x1, 4x1x1,
1x2x4 with B transposed): which, depends on shape and layout.  ``evaluate`` did the latter for every tree that
started at +0, so the former came out +0, silently, on the revealed orders and on ``mkl-2024.2-avx512``:
``reveal`` asked only products that are exactly -0, which both starts turn into +0.  Now a SumTree has three
starts (``"add"``, ``"fma"``, ``"product"``), ``reveal`` and ``check_order`` also ask products whose spines' first
products underflow (the orders' cache version 3), and the recorded model starts by FMA where the survey says
(docs/data/cpu-order/xeon-amx-mkl-2024.2-starts.json).  torch is the reference.
"""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from fp8emu.gemm import cpu_order  # noqa: E402
from fp8emu.gemm.torch_cpu import sgemm  # noqa: E402


def _first_tiny(M, K, N):
    x = np.zeros((M, K), np.float32)
    y = np.full((K, N), -1.0, np.float32)
    x[:, 0], y[0, :] = -(2.0 ** -100), 2.0 ** -100
    return x, y


def _both(M, K, N, layout, policy, tmp_path, monkeypatch):
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    x, y = _first_tiny(M, K, N)
    xt = torch.from_numpy(np.ascontiguousarray(x.T)).T if layout[0] == "T" else torch.from_numpy(x)
    yt = torch.from_numpy(np.ascontiguousarray(y.T)).T if layout[1] == "T" else torch.from_numpy(y)
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        want = torch.mm(xt, yt).numpy()
        with cpu_order.use(policy), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = sgemm(x, y, threads=1, layout=layout)
    finally:
        torch.set_num_threads(old)
    return got, want


@pytest.mark.parametrize("policy", ["revealed", "recorded"])
@pytest.mark.parametrize("M, K, N, layout", [(2, 2, 2, "NN"), (4, 8, 4, "NN"), (8, 64, 8, "NN"), (1, 8, 1, "NN"),
                                             (1, 1, 4, "NN"), (4, 2, 1, "TN"), (64, 64, 64, "NN")])
def test_fma_started_kernels_keep_the_underflowed_products_minus_zero(M, K, N, layout, policy, tmp_path,
                                                                      monkeypatch):
    """The revealed order gives torch's zero sign on every CPU; the recorded model of this CPU wherever it claims."""
    info = cpu_order.machine()
    model = next((m for m in cpu_order.RECORDED.values() if m.applies_here(info)), None)
    if policy == "recorded":
        if model is None:
            pytest.skip(f"no recorded model was measured on this CPU ({info['vendor']} {info['model']})")
        if model.unproven(M, K, N, 1, layout) is not None and model.name != "mkl-2024.2-avx512":
            pytest.skip(f"{model.name} is not proven at {M}x{K}x{N} {layout} (it warns)")
        policy = model.name
    got, want = _both(M, K, N, layout, policy, tmp_path, monkeypatch)
    if cpu_order.RECORDED["mkl-2024.2-avx512"].applies_here(info) and (M, K, N) != (64, 64, 64):
        # what torch gave on the Xeon this was found and fixed on (MKL 2024.2; an AVX2 EPYC's kernels start by an
        # addition to +0 instead: +0, as mkl-2024.2-amd-avx2 says)
        assert np.all(np.signbit(want))
    assert np.array_equal(got.view(np.int32), want.view(np.int32))


@pytest.mark.parametrize("M, K, N, layout", [(4, 2, 1, "NN"), (3, 5, 1, "NT"), (1, 1, 1, "NN"), (4, 1, 1, "TT"),
                                             (1, 2, 4, "NT")])
def test_kernels_that_round_first_as_torch(M, K, N, layout, tmp_path, monkeypatch):
    got, want = _both(M, K, N, layout, "revealed", tmp_path, monkeypatch)
    assert np.array_equal(got.view(np.int32), want.view(np.int32))
