"""Hostile input: ``tools/record_cpu_order.py``: options of ``--random`` only, and its "proven" marks."""

import json
import sys

import pytest


@pytest.mark.parametrize("args", [["--layouts", "NT,TT"], ["--seed", "3"], ["--random", "0", "--layouts", "TN"]])
def test_random_only_options_are_refused_by_the_grid_survey(record_tool, tmp_path, monkeypatch, capsys, args):
    # before: the survey probed NN with the default seed and wrote "layout": "NN", the option ignored
    probed = []
    monkeypatch.setattr(record_tool.cpu_order, "reveal_here", lambda *a, **k: probed.append(a) or pytest.fail("surveyed"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["record_cpu_order.py", "--out", "r.json", *args])
    with pytest.raises(SystemExit) as exc:
        record_tool.main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "apply to --random N only" in err and args[-2] in err
    assert not probed and not (tmp_path / "r.json").exists()


def test_random_still_takes_its_layouts_and_seed(record_tool, tmp_path, monkeypatch):
    seen = {}

    def fake_random(args, threads):
        seen.update(layouts=args.layouts, seed=args.seed)
        return []
    monkeypatch.setattr(record_tool, "_random", fake_random)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["record_cpu_order.py", "--out", "r.json", "--random", "2", "--seed", "4",
                                      "--layouts", "NT,TT"])
    record_tool.main()
    assert seen == {"layouts": ["NT", "TT"], "seed": 4}
    monkeypatch.setattr(sys, "argv", ["record_cpu_order.py", "--out", "s.json", "--random", "2"])
    record_tool.main()
    assert seen == {"layouts": ["NN"], "seed": 0}


@pytest.mark.parametrize("env, proven", [({}, False), ({"MKL_CBWR": "COMPATIBLE"}, True)])
def test_random_rows_are_proven_only_where_the_model_applies(record_tool, tmp_path, monkeypatch, capsys, env, proven):
    # before: without MKL_CBWR=COMPATIBLE every row of `--model mkl-2024.2-compatible` said "proven": true (and
    # its differing outputs read as the model's fault) where order_for warns for every shape
    info = {"vendor": "GenuineIntel", "model": "x", "arch": "x86_64", "flags": ["avx512f"], "mkl_env": env}
    monkeypatch.setattr(record_tool.cpu_order, "machine", lambda: info)
    monkeypatch.setattr(record_tool.order_probe, "check_order", lambda *a, **k: 0)        # no GEMM: only the marks
    monkeypatch.setattr(record_tool.torch, "set_num_threads", lambda t: None)
    monkeypatch.setattr(record_tool.cpu_order, "_library", lambda torch: {})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["record_cpu_order.py", "--out", "r.json", "--random", "3", "--threads", "1",
                                      "--model", "mkl-2024.2-compatible"])
    record_tool.main()
    rows = json.loads((tmp_path / "r.json").read_text())["gemms"]
    m = record_tool.cpu_order.RECORDED["mkl-2024.2-compatible"]
    want = [proven and m.unproven(r["M"], r["K"], r["N"], 1, "NN") is None for r in rows]
    assert [r["proven"] for r in rows] == want and (proven or "is not where mkl-2024.2-compatible was proven"
                                                     in capsys.readouterr().err)


@pytest.mark.parametrize("args, message", [
    # third fresh audit: FileNotFoundError after the whole survey
    (["--out", "/proc/r.json"], "cannot write a file in the folder of '/proc/r.json'"),
    # "²".isdigit() is True, int("²") a ValueError: argparse's "invalid _threads value"
    (["--threads", "²"], "expected thread counts 1..1024 separated by commas, got '²'"),
])
def test_an_out_folder_that_takes_no_file_and_a_non_ascii_digit_are_refused_before_surveying(record_tool, 
        tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.setattr(record_tool, "_random", lambda *a: pytest.fail("surveyed"))
    monkeypatch.chdir(tmp_path)
    full = ["--random", "1"] + (args if "--out" in args else ["--out", "r.json"] + args)
    monkeypatch.setattr(sys, "argv", ["record_cpu_order.py", *full])
    with pytest.raises(SystemExit) as exc:
        record_tool.main()
    assert exc.value.code == 2 and message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("env, proven", [({}, False), ({"MKL_CBWR": "COMPATIBLE"}, True)])
def test_starts_rows_are_proven_only_where_the_model_applies(record_tool, tmp_path, monkeypatch, capsys, env, proven):
    # twelfth audit A #4: `--starts --model mkl-2024.2-compatible` without MKL_CBWR=COMPATIBLE marked rows
    # "proven": true (the neighbour of the --random fix above), where order_for warns for every shape
    info = {"vendor": "GenuineIntel", "model": "x", "arch": "x86_64", "flags": ["avx512f"], "mkl_env": env}
    m = record_tool.cpu_order.RECORDED["mkl-2024.2-compatible"]
    monkeypatch.setattr(record_tool.cpu_order, "machine", lambda: info)
    # no GEMM: the model's own order stands for torch's (only the marks are checked)
    monkeypatch.setattr(record_tool.cpu_order, "reveal_here",
                        lambda M, K, N, threads, layout: (m.order(M, K, N, threads), {"explained": 1.0}))
    monkeypatch.setattr(record_tool, "STARTS_GRID", [(2, 2, 2), (4, 8, 4), (1, 1, 4)])
    monkeypatch.setattr(record_tool.cpu_order, "_library", lambda torch: {})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["record_cpu_order.py", "--out", "r.json", "--starts", "--threads", "1",
                                      "--layouts", "NN", "--model", "mkl-2024.2-compatible"])
    record_tool.main()
    rows = json.loads((tmp_path / "r.json").read_text())["gemms"]
    want = [proven and m.unproven(r["M"], r["K"], r["N"], 1, "NN") is None for r in rows]
    assert len(rows) == 3 and any(m.unproven(r["M"], r["K"], r["N"], 1, "NN") is None for r in rows)
    assert [r["proven"] for r in rows] == want and all(r["model_agrees"] == r["outputs"] for r in rows)
    assert proven or "is not where mkl-2024.2-compatible was proven" in capsys.readouterr().err
