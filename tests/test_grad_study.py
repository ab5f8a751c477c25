"""fp8emu grad-study: the command, resume, same bits in process, on 1 and 2 threads and on Dask;
the verdict rules on hand-made rows; the guide's findings table against the committed CSV files."""

import json
import math
import re
from pathlib import Path

import pytest

from fp8emu.lab import grad_study as gs
from fp8emu.lab.store import json_safe

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data" / "grad-study"
GUIDE = ROOT / "docs" / "guides" / "grad-study.md"
BEGIN, END = "<!-- grad-study:findings -->", "<!-- /grad-study:findings -->"


def _tiny():
    from fp8emu.torch.study import grad
    from fp8emu.torch.study.model import ModelConfig
    pair = (("te-nvfp4", "b200"),)
    return grad.GradConfig(model=ModelConfig(n_layer=1, d_model=64, n_head=2, seq_len=32, batch=8), ref_steps=2,
                           checkpoints=(2,), draws=2, bias_draws=2, pairs=pair, fork_pairs=pair, fork_at=2,
                           fork_steps=1, ks=(256,), spike_width=32, spike_tokens=32, spike_at=2, spike_history=4)


_CELLS = [{"kind": "probe", "state": 2, "pair": "te-nvfp4@b200"}, {"kind": "bias", "case": "plain"},
          {"kind": "fork", "pair": "te-nvfp4@b200"}]


def test_same_bits_on_one_and_two_threads_and_on_dask(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("distributed")
    from fp8emu.cli import grad_study as cli
    from fp8emu.lab.study import dask_client
    from fp8emu.torch.study import grad
    cfg = _tiny()
    runs = []
    old = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            grad._reference.cache_clear()          # the reference run is recomputed on each thread count
            runs.append([grad.run_cell(cfg.as_dict(), c) for c in _CELLS])
    finally:
        torch.set_num_threads(old)
    assert json.dumps(runs[0]) == json.dumps(runs[1])
    assert runs[0][0]["probes"] and runs[0][1]["bias"] and runs[0][2]["forks"]
    with dask_client(workers=2) as client:
        res = cli.execute(tmp_path / "dask", cfg, _CELLS, client=client, progress=False)
    assert res["computed"] == 3
    merged = cli.merge(_CELLS, res["rows"])
    local = cli.merge(_CELLS, {grad.cell_id(c): r for c, r in zip(_CELLS, runs[0])})
    assert json.dumps(json_safe(merged), sort_keys=True) == json.dumps(json_safe(local), sort_keys=True)


def test_command_resumes_and_refuses_a_modified_cell(tmp_path, capsys):
    pytest.importorskip("torch")
    from fp8emu.cli import main
    out = tmp_path / "gs"
    argv = ["grad-study", "--quick", "--kinds", "spike,operands", "--out", str(out)]
    assert main(argv + ["--quiet"]) == 0
    for name in ("spike.csv", "operands.csv", "findings.csv", "report.md", "report.html", "provenance.csv",
                 "figures/spike.png"):
        assert (out / name).exists(), name
    rows = gs.read_csv(out / "findings.csv")
    assert [r["finding"] for r in rows] == list("abcdefg")
    assert {r["verdict"] for r in rows} <= {"reproduced", "not at this scale", "contradicted"}
    assert [r["measured"] for r in rows if r["finding"] in "acdf"] == ["not run"] * 4
    capsys.readouterr()
    assert main(argv) == 0
    assert "0 cells computed, 3 already in" in capsys.readouterr().out
    cell = next((out / "cells").glob("spike*te-current*.json"))
    payload = json.loads(cell.read_text())
    payload["rows"]["spike"][0]["fprop_rel_err"] = 0.5
    cell.write_text(json.dumps(payload))
    assert main(argv + ["--quiet"]) == 2
    assert "was modified" in capsys.readouterr().err


def _bias_rows(case, recipe, level, errs):
    return [{"case": case, "recipe": recipe, "level": level, "n": n, "rel_err_mean": e}
            for n, e in zip((1, 4, 16, 64), errs)]


def test_verdict_rules_on_hand_made_rows():
    unbiased = [0.2 / math.sqrt(n) for n in (1, 4, 16, 64)]
    t = {"bias": _bias_rows("plain", "te-nvfp4-no-rht", "operand", unbiased)
         + _bias_rows("plain", "te-nvfp4-no-rht-no-sr", "operand", [0.15] * 4)
         + _bias_rows("plain", "te-nvfp4", "wgrad", [math.sqrt(0.01 + 0.04 / n) for n in (1, 4, 16, 64)])
         + _bias_rows("plain", "te-nvfp4-no-sr", "wgrad", [0.2] * 4)}
    a = {r["finding"]: r for r in gs.findings(t)}["a"]
    assert a["verdict"] == "reproduced" and a["value"] == pytest.approx(-0.5)
    # SR no better than round-to-nearest: contradicted
    t["bias"] = [dict(r, rel_err_mean=0.3) if r["recipe"] == "te-nvfp4" else r for r in t["bias"]]
    assert {r["finding"]: r for r in gs.findings(t)}["a"]["verdict"] == "contradicted"
    ops = [{"finding": "b", "case": "l", "variant": "te-nvfp4", "metric": "weight_mismatch", "value": 1e-3},
           {"finding": "b", "case": "l", "variant": "te-nvfp4-no-2d", "metric": "weight_mismatch", "value": 0.1}]
    assert {r["finding"]: r for r in gs.findings({"operands": ops})}["b"]["verdict"] == "contradicted"
    ops[0]["value"] = 0.0
    assert {r["finding"]: r for r in gs.findings({"operands": ops})}["b"]["verdict"] == "reproduced"
    spike = []
    for recipe, off in (("te-delayed", range(3, 7)), ("te-current", ())):
        for step in range(10):
            spike.append({"recipe": recipe, "history": 4, "step": step, "spiked": int(step == 2),
                          "fprop_rel_err": 0.9 if (recipe, step) == ("te-delayed", 2) else 0.03,
                          "frac_saturated": 0.0, "frac_underflow": 0.006 if step in off else 0.0001 * (step % 2)})
    e = {r["finding"]: r for r in gs.findings({"spike": spike})}["e"]
    assert e["verdict"] == "reproduced" and e["value"] == 4
    # no saturation at the spike and no steps off: contradicted
    flat = [dict(r, fprop_rel_err=0.03, frac_underflow=0.0) for r in spike]
    assert {r["finding"]: r for r in gs.findings({"spike": flat})}["e"]["verdict"] == "contradicted"
    assert {r["verdict"] for r in gs.findings({})} == {"not at this scale"}


def test_guide_findings_table_is_the_committed_csv():
    if not DATA.exists():
        pytest.skip("no committed grad-study data")
    text = GUIDE.read_text(encoding="utf-8")
    block = text[text.index(BEGIN) + len(BEGIN):text.index(END)]
    assert block.strip() == gs.guide_table(DATA).strip()
    committed = gs.read_csv(DATA / "findings.csv")
    again = gs.findings(gs.read_tables(DATA))
    assert [r["verdict"] for r in committed] == [r["verdict"] for r in again]
    assert [r["measured"] for r in committed] == [r["measured"] for r in again]
    # the README's lines on the findings are the committed CSV's
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- grad-study:readme -->\n(.*?)<!-- /grad-study:readme -->", readme, re.S)
    assert m, "README lacks the grad-study block"
    assert m.group(1) == gs.readme_block(DATA)
    assert "- (a) " in m.group(1) and "- (g) " in m.group(1)


def test_a_cell_or_run_file_with_a_key_twice_is_refused(tmp_path):
    """Every JSON fp8emu reads refuses a repeated key; the studies' own files too."""
    pytest.importorskip("torch")
    from fp8emu.cli import grad_study as cli
    from fp8emu.torch.study import runs
    cell = tmp_path / "cell.json"
    cell.write_text('{"config_sha256": "a", "cell": {}, "rows": {}, "rows": {"x": 1}, "sha256": "b"}')
    with pytest.raises(ValueError, match="cell file .* is unreadable"):
        cli.read_cell(cell, "a", {})
    run = tmp_path / "run.json"
    run.write_text('{"spec": {}, "result": {}, "result": {}, "sha256": "c"}')
    with pytest.raises(ValueError, match="result file .* is unreadable"):
        runs.read_result(run)
