"""Second fresh audit (issue 53): ``tools/record_cpu_order.py``'s options that apply to ``--random`` only."""

import importlib.util
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "record_cpu_order.py"


def _tool():
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("record_cpu_order_audit3", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("args", [["--layouts", "NT,TT"], ["--seed", "3"], ["--random", "0", "--layouts", "TN"]])
def test_random_only_options_are_refused_by_the_grid_survey(tmp_path, monkeypatch, capsys, args):
    # before: the survey probed NN with the default seed and wrote "layout": "NN", the option ignored
    mod = _tool()
    probed = []
    monkeypatch.setattr(mod.cpu_order, "reveal_here", lambda *a, **k: probed.append(a) or pytest.fail("surveyed"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["record_cpu_order.py", "--out", "r.json", *args])
    with pytest.raises(SystemExit) as exc:
        mod.main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "apply to --random N only" in err and args[-2] in err
    assert not probed and not (tmp_path / "r.json").exists()


def test_random_still_takes_its_layouts_and_seed(tmp_path, monkeypatch):
    mod = _tool()
    seen = {}

    def fake_random(args, threads):
        seen.update(layouts=args.layouts, seed=args.seed)
        return []
    monkeypatch.setattr(mod, "_random", fake_random)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["record_cpu_order.py", "--out", "r.json", "--random", "2", "--seed", "4",
                                      "--layouts", "NT,TT"])
    mod.main()
    assert seen == {"layouts": ["NT", "TT"], "seed": 4}
    monkeypatch.setattr(sys, "argv", ["record_cpu_order.py", "--out", "s.json", "--random", "2"])
    mod.main()
    assert seen == {"layouts": ["NN"], "seed": 0}
