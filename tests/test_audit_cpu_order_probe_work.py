"""Fourth fresh audit: ``fp8emu cpu-order`` refuses a probe that would take hours, before probing."""

import time

import pytest

from fp8emu.cli import cpu_order as cli
from fp8emu.cli import main


def test_a_probe_of_a_long_k_and_a_single_output_is_refused_before_probing(monkeypatch, capsys, tmp_path):
    # before: 1x131072x1 had printed nothing after 15 minutes (131071 products of 1 x 131072 x 1 in the
    # first round alone; 1x16384x1 took 90 s): K up to 2**20 is refused only past 2**20
    pytest.importorskip("torch")
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    monkeypatch.setattr(cli.cpu_order, "reveal_here", lambda *a, **k: pytest.fail("probed"))
    t0 = time.perf_counter()
    assert main(["cpu-order", "64x512x64", "1x131072x1"]) == 2
    err = capsys.readouterr().err
    assert "probing 1x131072x1 takes at least 131,071 products" in err and "FP8EMU_CPU_ORDER=" in err
    assert time.perf_counter() - t0 < 5 and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("M, K, N, ok", [
    (1, 8193, 1, True), (1, 8194, 1, False),              # 8192 products in the first round allowed
    (4, 32769, 4, True), (4, 32770, 4, False), (1, 1 << 20, 128, True), (128, 1 << 20, 1, True),
    (2, 1 << 20, 3, False), (1, 1, 1, True),
])
def test_the_bound_is_the_first_rounds_products(M, K, N, ok):
    # ceil((K - 1) / max(M, N)) products, computed independently here
    assert ((K - 1 + max(M, N) - 1) // max(M, N) <= 8192) == ok
    if ok:
        cli._check_probe_work(M, K, N)
    else:
        with pytest.raises(ValueError, match="takes at least"):
            cli._check_probe_work(M, K, N)


def test_a_recorded_model_describes_the_shape_without_probing(monkeypatch, capsys):
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "mkl-2024.2-avx512")
    assert main(["cpu-order", "1x131072x1", "--threads", "1"]) == 0
    assert "1x131072x1 NN: mkl-2024.2-avx512:" in capsys.readouterr().out


def test_order_for_does_not_probe_a_shape_past_the_bound(monkeypatch, tmp_path):
    # the CLI's bound holds for every caller: a GEMM of 1x131072x1 from Python probed for minutes
    pytest.importorskip("torch")
    from fp8emu.gemm import cpu_order
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    monkeypatch.delenv("FP8EMU_CPU_ORDER", raising=False)
    monkeypatch.setattr(cpu_order, "reveal_here", lambda *a, **k: pytest.fail("probed"))
    with pytest.warns(RuntimeWarning, match=r"probing 1x131072x1 takes at least 131,071 products.*is used instead"):
        order, source = cpu_order.order_for(1, 131072, 1, threads=1)
    assert source in cpu_order.RECORDED and order.classes.shape == (1, 1)
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "revealed")
    with pytest.raises(RuntimeError, match="takes at least 131,071 products"):
        cpu_order.order_for(1, 131072, 1, threads=1)


def test_without_torch_the_bound_is_not_mentioned(monkeypatch):
    from fp8emu.gemm import cpu_order
    monkeypatch.delenv("FP8EMU_CPU_ORDER", raising=False)
    monkeypatch.setattr(cpu_order, "_torch", lambda: None)
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cpu_order.order_for(1, 131072, 1, threads=1)
    assert not any("takes at least" in str(w.message) for w in caught)
