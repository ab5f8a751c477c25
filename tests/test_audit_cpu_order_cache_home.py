"""``FP8EMU_CACHE`` starting with ``~`` (tests/AUDIT.md, "Tenth fresh audit, part A", #7)."""

import os
from pathlib import Path

from fp8emu.gemm import cpu_order


def test_a_tilde_in_fp8emu_cache_is_the_home_folder(monkeypatch, tmp_path):
    # before: Path("~/fp8c/cpu-order.json"), a folder named "~" in the working directory, silently
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("FP8EMU_CACHE", "~/fp8c")
    assert cpu_order.cache_path() == tmp_path / "fp8c" / "cpu-order.json"
    monkeypatch.setenv("FP8EMU_CACHE", "~")
    assert cpu_order.cache_path() == tmp_path / "cpu-order.json"


def test_other_values_as_before(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path / "a~b"))
    assert cpu_order.cache_path() == tmp_path / "a~b" / "cpu-order.json"
    monkeypatch.setenv("FP8EMU_CACHE", "rel")
    assert cpu_order.cache_path() == Path("rel") / "cpu-order.json"
    monkeypatch.setenv("FP8EMU_CACHE", "")
    assert cpu_order.cache_path() == Path(os.path.expanduser("~")) / ".cache" / "fp8emu" / "cpu-order.json"
