"""``tools/record_cpu_order.py --threads`` takes each thread count once.

``--threads 1,1`` surveyed every grid shape twice, wrote each row twice and counted it twice in its summary
("2N GEMMs; ... fully explained"), as train-study's names given twice did before the sixth audit.
"""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "record_cpu_order.py"


def _tool():
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("record_cpu_order_audit10", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("text, want", [("1,1", [1]), ("2, 1,2", [2, 1]), ("1,2", [1, 2])])
def test_each_thread_count_is_taken_once(text, want):
    assert _tool()._threads(text) == want


def test_the_grid_survey_of_a_count_given_twice_has_each_shape_once(tmp_path, monkeypatch, capsys):
    mod = _tool()
    calls = []
    real = mod.cpu_order.reveal_here

    def counted(M, K, N, threads):
        calls.append((M, K, N, threads))
        return real(M, K, N, threads=threads)

    monkeypatch.setattr(mod, "GRID", [(2, 3, 2), (1, 4, 1)])
    monkeypatch.setattr(mod.cpu_order, "reveal_here", counted)
    monkeypatch.setattr(sys, "argv", ["record_cpu_order.py", "--out", str(tmp_path / "r.json"), "--threads", "1,1"])
    mod.main()
    assert calls == [(2, 3, 2, 1), (1, 4, 1, 1)]
    assert len(json.loads((tmp_path / "r.json").read_text())["gemms"]) == 2
    assert capsys.readouterr().out.startswith("2 GEMMs;")
