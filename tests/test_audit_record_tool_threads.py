"""``tools/record_cpu_order.py --threads`` takes each thread count once.

``--threads 1,1`` surveyed every grid shape twice, wrote each row twice and counted it twice in its summary
("2N GEMMs; ... fully explained"), as train-study's names given twice did before the sixth audit.
"""

import json
import sys

import pytest


@pytest.mark.parametrize("text, want", [("1,1", [1]), ("2, 1,2", [2, 1]), ("1,2", [1, 2])])
def test_each_thread_count_is_taken_once(record_tool, text, want):
    assert record_tool._threads(text) == want


def test_the_grid_survey_of_a_count_given_twice_has_each_shape_once(record_tool, tmp_path, monkeypatch, capsys):
    calls = []
    real = record_tool.cpu_order.reveal_here

    def counted(M, K, N, threads):
        calls.append((M, K, N, threads))
        return real(M, K, N, threads=threads)

    monkeypatch.setattr(record_tool, "GRID", [(2, 3, 2), (1, 4, 1)])
    monkeypatch.setattr(record_tool.cpu_order, "reveal_here", counted)
    monkeypatch.setattr(sys, "argv", ["record_cpu_order.py", "--out", str(tmp_path / "r.json"), "--threads", "1,1"])
    record_tool.main()
    assert calls == [(2, 3, 2, 1), (1, 4, 1, 1)]
    assert len(json.loads((tmp_path / "r.json").read_text())["gemms"]) == 2
    assert capsys.readouterr().out.startswith("2 GEMMs;")
