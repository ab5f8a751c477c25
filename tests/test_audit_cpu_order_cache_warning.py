"""Fifteenth audit, part B (audit26): the order cache's warning does not take a shape's own warning's place.

``describe_here`` and ``fp8emu cpu-order --json`` caught the warnings of each shape's ``order_for`` and showed the
first: where the cache file could not be used (a folder or a FIFO at ``$FP8EMU_CACHE/cpu-order.json``, a file
past the limit), its warning (given once per process, at the first lookup) was that first one, shown as the first
shape's ``[warning: ...]``, and the shape's own warning ("explains 50.0% of torch's outputs", a gemv's "torch may
differ") was dropped.  A stand-in torch reveals an order that explains half the outputs (no probing).
"""

import json
import warnings

import numpy as np
import pytest

from fp8emu.cli import main
from fp8emu.gemm import cpu_order
from fp8emu.gemm.sumtree import GemmOrder, SumTree
from test_mut_cpu_order import _FakeTorch   # what cpu_order reads of torch without probing


OWN = "8x64x8 (NN) explains 50.0% of torch's outputs"


@pytest.fixture
def half_explained(monkeypatch, tmp_path):
    monkeypatch.setenv("FP8EMU_CACHE", str(tmp_path))
    monkeypatch.setenv("FP8EMU_CPU_ORDER", "auto")
    monkeypatch.setattr(cpu_order, "_torch", lambda: _FakeTorch(threads=1))
    monkeypatch.setattr(cpu_order, "_MEMO", {})
    monkeypatch.setattr(cpu_order, "_REFUSED", set())
    monkeypatch.setattr(cpu_order, "reveal_here", lambda M, K, N, **k: (
        GemmOrder([SumTree.blocks([0, K])], np.zeros((M, N), np.int16)), {"explained": 0.5, "calls": 1}))
    return tmp_path


def test_describe_here_keeps_the_shapes_warning_beside_a_refused_cache(half_explained):
    (half_explained / "cpu-order.json").mkdir()        # a folder where the file would be
    with pytest.warns(RuntimeWarning, match="is not a regular file"):
        lines = cpu_order.describe_here([(8, 64, 8), (8, 64, 8)])
    cache_line = next(ln for ln in lines if ln.startswith("policy:"))
    assert cache_line.endswith("cpu-order.json (not read or written: it is not a regular file)")
    shape_lines = [ln for ln in lines if ln.startswith("8x64x8")]
    assert len(shape_lines) == 2
    for ln in shape_lines:
        assert OWN in ln and "regular file" not in ln     # the first said only the cache's warning


def test_a_usable_cache_is_named_without_a_note(half_explained):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # the order's own warning is in the line, as before
        lines = cpu_order.describe_here([(8, 64, 8)])
    assert any(ln.endswith(f"cache: {half_explained / 'cpu-order.json'}") for ln in lines)
    assert OWN in lines[-1]
    assert cpu_order.cache_problem() is None


def test_the_json_keeps_the_shapes_warning_and_says_the_cache_apart(half_explained, capsys):
    (half_explained / "cpu-order.json").mkdir()
    with pytest.warns(RuntimeWarning, match="is not a regular file"):
        assert main(["cpu-order", "--json", "8x64x8"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert OWN in doc["gemms"][0]["warning"] and "regular file" not in doc["gemms"][0]["warning"]
    assert doc["cache"] == {"path": str(half_explained / "cpu-order.json"), "not_used": "is not a regular file"}


def test_a_recorded_policy_does_not_look_at_the_cache(half_explained):
    (half_explained / "cpu-order.json").mkdir()
    with cpu_order.use("mkl-2024.2-compatible"):
        assert cpu_order.cache_problem() is None
