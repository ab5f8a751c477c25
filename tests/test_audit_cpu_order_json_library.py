"""``fp8emu cpu-order --json`` gives the library its text gives (tests/AUDIT.md, "Sixteenth audit, part B", #3).

The text's ``library:`` line names torch's version and its BLAS (both in the revealed orders' cache key: another
MKL sums in another order); the JSON, "the facts as JSON", left them out.  The reference is torch's own
``__version__`` and ``torch.__config__.show()``, read here apart from fp8emu.
"""

import json

import pytest

from fp8emu.cli import main
from fp8emu.gemm import cpu_order


def test_the_json_names_the_library_as_the_text_does(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "mkl-2024.2-avx512")        # no probe: the library all the same
    assert main(["cpu-order", "--json", "4x16x4", "--threads", "1"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert main(["cpu-order", "4x16x4", "--threads", "1"]) == 0
    text = capsys.readouterr().out
    assert f"library: {facts['library']}\n" in text if facts["library"] is not None else \
        "library: torch not installed" in text
    torch = pytest.importorskip("torch")
    assert facts["library"]["torch"] == torch.__version__
    blas = facts["library"]["blas"]
    assert blas and blas in torch.__config__.show()


def test_without_torch_the_library_is_null(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "mkl-2024.2-avx512")
    monkeypatch.setattr(cpu_order, "_torch", lambda: None)
    assert main(["cpu-order", "--json", "4x16x4", "--threads", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["library"] is None
    assert main(["cpu-order", "4x16x4", "--threads", "1"]) == 0
    assert "library: torch not installed" in capsys.readouterr().out
