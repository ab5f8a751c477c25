"""Hostile input to ``fp8emu cpu-order`` and ``FP8EMU_CPU_ORDER`` (tests/AUDIT.md)."""

import json
import warnings

import pytest

from fp8emu.cli import cpu_order as cli
from fp8emu.cli import main
from fp8emu.gemm import cpu_order


def test_threads_beyond_what_torch_survives_are_refused(capsys):
    # 100000 threads crashed torch itself (a segmentation fault after the probe); nothing is probed now
    assert main(["cpu-order", "--threads", "100000", "2x2x2"]) == 2
    assert "--threads must be an integer in 1..1024, got 100000" in capsys.readouterr().err
    assert main(["cpu-order", "--threads", "0", "2x2x2"]) == 2
    assert "got 0" in capsys.readouterr().err


def test_recorded_honours_json_and_refuses_what_it_would_ignore(capsys):
    assert main(["cpu-order", "--recorded", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in listed] == list(cpu_order.RECORDED)
    assert all(m["proven_on"] for m in listed)
    for extra in (["4x4x4"], ["--threads", "2"], ["--layout", "NT"]):
        assert main(["cpu-order", "--recorded", *extra]) == 2
        err = capsys.readouterr().err
        assert "--recorded lists the recorded models; it takes no" in err and err.count("\n") == 1


def test_a_bad_environment_value_names_the_variable(monkeypatch, capsys):
    monkeypatch.setenv("FP8EMU_CPU_ORDER", " auto")
    assert main(["cpu-order", "--recorded"]) == 0       # listing needs no policy
    capsys.readouterr()
    assert main(["cpu-order", "4x8x4"]) == 2
    err = capsys.readouterr().err
    assert "FP8EMU_CPU_ORDER = ' auto'" in err and "one of ['mkl-2024.2-amd-avx2', 'mkl-2024.2-avx512', 'mkl-2024.2-compatible']" in err
    with pytest.raises(ValueError, match="FP8EMU_CPU_ORDER = 'AUTO'"):
        monkeypatch.setenv("FP8EMU_CPU_ORDER", "AUTO")
        cpu_order.policy()
    # a use() block names no variable: its argument was wrong
    with pytest.raises(ValueError, match="^CPU order 'x'"):
        with cpu_order.use("x"):
            pass


def test_a_shape_whose_probe_does_not_fit_in_memory_is_refused_before_probing(monkeypatch, capsys):
    pytest.importorskip("torch")
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "auto")
    # 100000x4096x100000 held 22 GB and ran 5 minutes on a 24 GiB machine before this check
    monkeypatch.setattr(cli, "_available_bytes", lambda: 8 << 30)
    monkeypatch.setattr(cpu_order, "reveal_here", lambda *a, **k: pytest.fail("probed"))
    assert main(["cpu-order", "100000x4096x100000"]) == 2
    err = capsys.readouterr().err
    need = 64 * (100000 * 4096 * 2 + 100000 ** 2) / 2 ** 30
    assert f"needs about {need:.1f} GiB" in err and "8.0 GiB is available" in err
    # a recorded model probes nothing: no memory check
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "mkl-2024.2-avx512")
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # the JSON carries the warning, as the text does
        assert main(["cpu-order", "--json", "100000x4096x100000"]) == 0
    row = json.loads(capsys.readouterr().out)["gemms"][0]
    assert row["source"] == "mkl-2024.2-avx512"
    assert "the thread count is not known, and on two threads MKL splits K > 768" in row["warning"]
