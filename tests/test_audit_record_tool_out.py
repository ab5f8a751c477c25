"""Fourth fresh audit: ``tools/record_cpu_order.py --out`` names a file, checked before the survey."""

import sys

import pytest


@pytest.mark.parametrize("out", ["new/", "r.json/", "sub/r.json/"])
@pytest.mark.parametrize("survey", [[], ["--random", "1"]])
def test_an_out_ending_with_a_separator_is_refused_before_surveying(record_tool, tmp_path, monkeypatch, capsys, out, survey):
    # before: os.path.abspath dropped the trailing "/", the check passed, the survey ran (16 s for --random 1),
    # then open("new/", "w") raised IsADirectoryError (a traceback) and nothing was written
    monkeypatch.setattr(record_tool, "_random", lambda *a: pytest.fail("surveyed"))
    monkeypatch.setattr(record_tool.cpu_order, "reveal_here", lambda *a, **k: pytest.fail("surveyed"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "r.json").write_text("kept")
    monkeypatch.setattr(sys, "argv", ["record_cpu_order.py", "--out", out, *survey])
    with pytest.raises(SystemExit) as exc:
        record_tool.main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"{out!r} ends with '/', a folder's name; give a file name" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "sub"] and not any((tmp_path / "sub").iterdir())
    assert (tmp_path / "r.json").read_text() == "kept"
