"""``tools/record_cpu_order.py --out`` through a symbolic link, and the command its file says made it.

A dangling link (``out.json -> missing/r.json``) or a link loop passed the ``--out`` check (its folder, the
link's, exists and takes files), the survey ran, then ``open`` failed with a traceback and nothing was
written.  And ``recorded_by`` left out ``--threads`` and ``--model``: rerun as written, it surveyed
other thread counts (or checked another model) than the file holds.
"""

import json
import os
import sys

import pytest


@pytest.mark.parametrize("link", ["dangling", "loop", "under_dangling"])
@pytest.mark.parametrize("survey", [[], ["--random", "1"]])
def test_an_out_through_a_link_to_nothing_is_refused_before_surveying(record_tool, tmp_path, monkeypatch, capsys, link, survey):
    monkeypatch.setattr(record_tool, "_random", lambda *a: pytest.fail("surveyed"))
    monkeypatch.setattr(record_tool.cpu_order, "reveal_here", lambda *a, **k: pytest.fail("surveyed"))
    monkeypatch.chdir(tmp_path)
    if link == "loop":
        os.symlink("l2", "l1")
        os.symlink("l1", "l2")
        out = "l1"
    else:
        os.symlink("missing/r.json", "dang")
        out = "dang" if link == "dangling" else "dang/r.json"
    monkeypatch.setattr(sys, "argv", ["record_cpu_order.py", "--out", out, *survey])
    with pytest.raises(SystemExit) as exc:
        record_tool.main()
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert "is a symbolic link to nothing" in err or "does not exist" in err, err


def test_an_out_through_a_link_to_a_writable_place_is_written(record_tool, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    os.symlink("data/r.json", "out.json")            # dangling until written: its folder exists
    assert record_tool._out("out.json") == "out.json"


@pytest.mark.parametrize("extra, said", [([], ""), (["--threads", "2"], " --threads 2"),
                                         (["--model", "mkl-2024.2-compatible"], " --model mkl-2024.2-compatible"),
                                         (["--threads", "1, 2"], "")])
def test_recorded_by_is_the_command_that_reproduces_the_file(record_tool, tmp_path, monkeypatch, extra, said):
    monkeypatch.setattr(record_tool, "_random", lambda args, threads: [])
    out = tmp_path / "r.json"
    monkeypatch.setattr(sys, "argv", ["record_cpu_order.py", "--out", str(out), "--random", "3", *extra])
    record_tool.main()
    doc = json.loads(out.read_text())
    assert doc["recorded_by"] == f"tools/record_cpu_order.py --random 3 --seed 0{said}"
