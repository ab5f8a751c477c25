"""The order cache and torch's float32 matmul precision (tests/AUDIT.md, "Sixteenth audit, part B", #1).

``torch.set_float32_matmul_precision("medium")`` (``torch.backends.mkldnn.matmul.fp32_precision = "bf16"``) sends
a CPU ``torch.mm`` of float32 matrices above a size to oneDNN, in another order than MKL's sgemm (on this AMD EPYC
Zen 4 with AVX512-BF16: 900 of 1024 outputs of a 32x256x32 product).  The order cache's key did not hold the
setting: an order revealed under one setting was used (in the process, and from the file in every later process)
under the other, and ``sgemm`` differed from torch's own ``mm``, silently.  The reference is torch's ``mm`` under
the setting in force; on a machine where the setting changes nothing the tests hold trivially.
"""

import os

import numpy as np
import pytest

from fp8emu.gemm import cpu_order
from fp8emu.gemm.torch_cpu import sgemm

torch = pytest.importorskip("torch")

M, K, N = 32, 256, 32


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    if any(os.environ.get(v) for v in ("MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "MKL_DEBUG_CPU_TYPE")):
        pytest.skip("this process was started with MKL settings")
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "auto")
    monkeypatch.setattr(cpu_order, "_MEMO", {})
    old = torch.backends.mkldnn.matmul.fp32_precision
    try:
        yield
    finally:
        torch.backends.mkldnn.matmul.fp32_precision = old


def _operands():
    rng = np.random.default_rng(28)
    return (rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32))


def _torch_mm(a, b):
    with torch.no_grad():
        return torch.mm(torch.from_numpy(a).clone(), torch.from_numpy(b).clone()).numpy()


def _differ(x, y):
    return int((sgemm(x, y, threads=torch.get_num_threads()) != _torch_mm(x, y)).sum())


@pytest.mark.parametrize("first, then", [("ieee", "bf16"), ("bf16", "ieee")])
def test_an_order_revealed_under_one_matmul_precision_is_not_used_under_another(fresh, first, then):
    x, y = _operands()
    torch.backends.mkldnn.matmul.fp32_precision = first
    assert _differ(x, y) == 0                  # revealed (and stored) under the first setting
    torch.backends.mkldnn.matmul.fp32_precision = then
    assert _differ(x, y) == 0                  # was 900 of 1024 on this EPYC: the first setting's order
    cpu_order._MEMO.clear()                    # a later process: the file alone
    assert _differ(x, y) == 0
    torch.backends.mkldnn.matmul.fp32_precision = first
    assert _differ(x, y) == 0


@pytest.mark.filterwarnings("ignore:TF32 acceleration")
def test_the_default_setting_keeps_the_key_of_no_setting(fresh):
    # the default (IEEE float32, and "none", which defers to it) adds nothing to the key
    torch.backends.mkldnn.matmul.fp32_precision = "ieee"
    assert cpu_order._matmul_setting(torch) is None
    torch.backends.mkldnn.matmul.fp32_precision = "bf16"
    assert cpu_order._matmul_setting(torch) == "bf16"
    with torch.backends.mkldnn.flags(enabled=False):     # torch.mm stays on MKL's sgemm
        assert cpu_order._matmul_setting(torch) is None


class _Level:
    def __init__(self, p, **more):
        self.fp32_precision = p
        self.__dict__.update(more)


class _Mkldnn(_Level):
    def __init__(self, matmul, backend, enabled=True):
        super().__init__(backend, matmul=_Level(matmul), enabled=enabled)

    @staticmethod
    def is_available():
        return True


class _Backends(_Level):
    pass


class _FakeTorch:
    def __init__(self, matmul, backend, generic, enabled=True):
        self.backends = _Backends(generic, mkldnn=_Mkldnn(matmul, backend, enabled))


@pytest.mark.parametrize("levels, want", [
    (("none", "none", "none"), None), (("ieee", "bf16", "bf16"), None), (("none", "bf16", "ieee"), "bf16"),
    (("none", "none", "bf16"), "bf16"), (("tf32", "none", "none"), None), (("bf16", "ieee", "ieee"), "bf16")])
def test_the_matmul_setting_is_the_nearest_level_that_does_not_defer(levels, want):
    assert cpu_order._matmul_setting(_FakeTorch(*levels)) == want
    assert cpu_order._matmul_setting(_FakeTorch(*levels, enabled=False)) is None
