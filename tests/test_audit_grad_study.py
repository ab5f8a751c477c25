"""Hostile input to the same-state probes, the gradient study's configuration and cells, ``fp8emu
grad-study`` and its verdict rules (tests/AUDIT.md)."""

import copy
import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from fp8emu.lab import grad_metrics as gm
from fp8emu.lab import grad_study as gs

DATA = Path(__file__).resolve().parents[1] / "docs" / "data" / "grad-study"


def _operands(rng=None):
    rng = rng or np.random.default_rng(0)
    return [rng.standard_normal(s).astype(np.float32) for s in ((32, 32), (16, 32), (32, 16))]


# ----------------------------------------------------------------------------- probes
def test_probe_operands_are_float32_as_the_reference_reads_them():
    pytest.importorskip("torch")
    from fp8emu.torch import probes
    x, w, dy = _operands()
    # before: a float64 x was rounded to float32 by the layer and not by exact_passes (the reference was
    # off the operands), 1e39 became Inf with only NumPy's cast warning, ints and complex were cast
    for bad, dtype in ((x.astype(np.float64), "float64"), (x.astype(np.int64), "int64"),
                       (x.astype(np.complex64), "complex64"), (x.tolist(), "float64")):
        for fn in (lambda a: probes.layer_passes(a, w, None, dy, "te-current", "exact"),
                   lambda a: probes.exact_passes(a, w, None, dy)):
            with pytest.raises(TypeError, match=f"x must be a float32 array .* got {dtype}"):
                fn(bad)


def test_probe_operand_shapes_are_named():
    pytest.importorskip("torch")
    from fp8emu.torch import probes
    x, w, dy = _operands()
    b = np.zeros(16, np.float32)
    cases = [((x, w[:, :24], b, dy), "w has shape \\(16, 24\\), expected \\(16, 32\\)"),
             ((x, w, b, dy[:, :8]), "dy has shape \\(32, 8\\), expected \\(32, 16\\)"),
             ((x, w, b[:8], dy), "b has shape \\(8,\\), expected \\(16,\\)"),
             ((x, w, b[None], dy), "b must be 1-D \\(out_features\\)"),
             ((x[0], w, b, dy), "x must be a 2-D matrix"),
             # before: a 3-D x ran in layer_passes while exact_passes' wgrad transposed it wrongly
             ((x.reshape(2, 16, 32), w, b, dy.reshape(2, 16, 16)), "x must be a 2-D matrix")]
    for args, msg in cases:
        for fn in (lambda *a: probes.layer_passes(*a, "te-current", "exact"), probes.exact_passes):
            with pytest.raises(ValueError, match=msg):
                fn(*args)
    with pytest.raises(TypeError, match="warm must be True or False, got 'no'"):
        probes.layer_passes(x, w, None, dy, "te-delayed", "h100", warm="no")


def test_capture_names_what_it_cannot_probe():
    torch = pytest.importorskip("torch")
    from torch import nn

    from fp8emu.torch import probes
    x = torch.randn(16, 32)
    m = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 16))
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got str"):
        probes.capture("m", lambda mm: mm(x).sum())
    with pytest.raises(TypeError, match="loss_fn must be a callable"):
        probes.capture(m, 3)
    for loss_fn, got in ((lambda mm: mm(x), "a tensor of shape \\(16, 16\\)"), (lambda mm: 1.0, "float")):
        with pytest.raises(ValueError, match=f"loss_fn must return a scalar loss tensor, got {got}"):
            probes.capture(m, loss_fn)
    with torch.no_grad(), pytest.raises(RuntimeError, match="capture runs a backward"):
        probes.capture(m, lambda mm: mm(x).sum())

    class Side(nn.Module):            # b runs, its output is dropped: no output gradient (was KeyError 'dy')
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(32, 16), nn.Linear(32, 8)

        def forward(self, x):
            self.b(x)
            return self.a(x)
    with pytest.raises(ValueError, match="layer 'b' ran in the forward but its output does not reach the loss"):
        probes.capture(Side(), lambda mm: mm(x).sum())
    frozen = copy.deepcopy(m)
    frozen[2].weight.requires_grad_(False)     # was AttributeError: 'NoneType' object has no attribute 'detach'
    with pytest.raises(ValueError, match="the weight of layer '2' needs no gradient \\(frozen\\)"):
        probes.capture(frozen, lambda mm: mm(x).sum())
    # a layer the forward does not call is left out, as documented; a model without linear layers has none
    assert probes.capture(nn.Sequential(nn.Linear(32, 8), nn.Linear(32, 16)), lambda mm: mm[1](x).sum())[1].keys() \
        == {"1"}
    assert probes.capture(nn.Sequential(nn.ReLU()), lambda mm: mm(x.requires_grad_()).sum())[1] == {}


# ----------------------------------------------------------------------------- the study's configuration
def _cfg(**kw):
    from fp8emu.torch.study import grad
    tiny = dataclasses.replace(grad.QUICK, ref_steps=2, checkpoints=(0, 2), fork_at=2, fork_steps=1, ks=(256,),
                               widths=(128,))
    return dataclasses.replace(tiny, **kw)


@pytest.mark.parametrize("kw, msg", [
    ({"draws": 0}, "draws must be an integer 1"),                  # was IndexError in every probe cell
    ({"bias_draws": 0}, "bias_draws must be an integer 1"),        # was max() of an empty sequence
    ({"ks": (0,)}, "ks must be a tuple of distinct integers >= 1"),   # was ZeroDivisionError
    ({"ks": (-256,)}, "ks must be a tuple"),                        # was accepted
    ({"checkpoints": ()}, "checkpoints must name at least one step"),
    ({"checkpoints": (0, 0)}, "distinct"),                          # was every row twice
    ({"pairs": (("te-current", "h100"),) * 2}, "distinct \\(recipe, stack\\)"),
    ({"pairs": ("te-current@h100",)}, "pairs must be a tuple of distinct"),
    ({"spike_at": 1}, "spike_at must be an integer 2"),             # was a crash in the report
    ({"spike_history": 0}, "spike_history must be an integer 1"),
    ({"widths": (100,)}, "widths: te-current on h100 cannot run a 100-wide layer"),
    ({"spike_width": 24}, "spike_width: te-delayed on h100 cannot run a 24-wide layer"),
    ({"lr": float("nan")}, "lr must be a positive number that float32 holds"),
    ({"outlier_factor": float("inf")}, "outlier_factor must be a positive number"),
    ({"outlier_channels": 65}, "outlier_channels must be an integer 0..64"),
    ({"fork_steps": 0}, "fork_steps must be an integer 1"),
    ({"corpus": 123}, "corpus must be None"),
])
def test_every_field_of_the_configuration_is_checked_before_anything_runs(kw, msg):
    pytest.importorskip("torch")
    from fp8emu.torch.study import grad
    with pytest.raises(ValueError, match=msg):
        grad.plan_cells(_cfg(**kw))


def test_the_shipped_configurations_pass_their_checks():
    pytest.importorskip("torch")
    from fp8emu.torch.study import grad
    assert len(grad.plan_cells(grad.QUICK)) == 24 and len(grad.plan_cells(grad.FULL)) == 59


def test_a_cell_or_dictionary_of_another_configuration_is_one_clear_error():
    pytest.importorskip("torch")
    from fp8emu.torch.study import grad
    cfg = _cfg().as_dict()
    for cell in ({"kind": "bogus"}, {"kind": "probe", "state": 7, "pair": "te-current@h100"}):   # were KeyError
        with pytest.raises(ValueError, match="is not a cell of this configuration"):
            grad.run_cell(cfg, cell)
    with pytest.raises(ValueError, match="not a GradConfig dictionary .*'pairs'"):
        grad.GradConfig.from_dict({"model": cfg["model"]})


# ----------------------------------------------------------------------------- fp8emu grad-study
def _spike_study(tmp_path):
    from fp8emu.cli import main
    out = tmp_path / "gs"
    (out / "cells").mkdir(parents=True)
    return main, out, ["grad-study", "--quick", "--kinds", "spike", "--quiet", "--out", str(out)]


@pytest.mark.parametrize("text, msg", [
    ("[1, 2]", "holds a study.json that is not a grad-study's"),                 # was AttributeError
    ('{"model": {"n_layer": 1}, "corpus_sha256": "ab"}', "holds a study.json that is not a grad-study's"),
    ('{"config": {}, "config_sha256": "a", "config_sha256": "b"}',                 # was "is not valid JSON"
     "the key 'config_sha256' appears twice"),
])
def test_a_foreign_or_damaged_study_file_is_named_as_what_it_is(tmp_path, capsys, text, msg):
    pytest.importorskip("torch")
    main, out, argv = _spike_study(tmp_path)
    (out / "study.json").write_text(text)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1
    assert not list((out / "cells").iterdir())          # nothing ran


def test_what_the_study_writes_in_out_must_be_of_its_kind(tmp_path, capsys):
    pytest.importorskip("torch")
    main, out, argv = _spike_study(tmp_path)
    (out / "figures").write_text("x")
    assert main(argv) == 2                               # was "[Errno 17] File exists"
    assert "holds figures as a file, where the study writes a folder" in capsys.readouterr().err
    (out / "figures").unlink()
    (out / "study.json").mkdir()
    assert main(argv) == 2                               # was "[Errno 21] Is a directory"
    assert "holds study.json as a folder" in capsys.readouterr().err
    f = tmp_path / "file"
    f.write_text("x")
    assert main(argv[:-1] + [str(f / "sub")]) == 2       # was "[Errno 20] Not a directory"
    assert f"{str(f)!r} is a file; give a folder" in capsys.readouterr().err
    assert main(argv[:-1] + [""]) == 2                   # was the default folder, silently
    assert "--out '' names no folder" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the verdict rules and NaN
def _poisoned(kind, pick, col):
    t = gs.read_tables(DATA)
    n = 0
    for r in t[kind]:
        if pick(r):
            r[col], n = "nan", n + 1
    assert n
    return {r["finding"]: r for r in gs.findings(t)}


def test_a_nan_measurement_gives_no_verdict():
    base = {r["finding"]: r["verdict"] for r in gs.findings(gs.read_tables(DATA))}
    assert base["a"] == base["b"] == base["d"] == "reproduced"
    b_cases = [r["case"] for r in gs.read_tables(DATA)["operands"] if r["finding"] == "b"]
    ks = sorted({int(r["K"]) for r in gs.read_tables(DATA)["ksweep"]})
    cases = {
        # before: Python's max() dropped a NaN after the first layer, and the fit a NaN point: "reproduced"
        "b": ("operands", lambda r: r["finding"] == "b" and r["case"] == b_cases[-1], "value"),
        "d": ("ksweep", lambda r: r["stack"] == "h100-fast" and int(r["K"]) == ks[1], "accum_err"),
        "a": ("bias", lambda r: (r["case"], r["recipe"], r["level"], r["n"]) == ("plain", "te-nvfp4-no-rht",
                                                                                  "operand", "4"), "rel_err_mean"),
        "c": ("draws", lambda r: (r["case"], r["recipe"], r["draw"]) == ("plain", "te-nvfp4", "3"), "rel_err"),
    }
    for key, (kind, pick, col) in cases.items():
        row = _poisoned(kind, pick, col)[key]
        assert row["verdict"] == "not at this scale", key
        assert "NaN measurement(s): no verdict" in row["measured"], key
        assert math.isnan(float(row["value"])), key
        assert row["measured"] != "not run", key       # c said "not run" of a run with a NaN


def test_mean_curve_takes_increasing_draw_counts_only():
    ref = np.ones(4)
    draws = [ref + 1, ref - 1, ref + 1, ref - 1]
    assert gm.mean_curve(draws, ref, [1, 2, 4]) == [1.0, 0.0, 0.0]
    # before: [4, 1] came back in draw order (n=1's error first, paired with 4 by the caller), [0, 2]
    # without an entry for 0, [] as "max() arg is an empty sequence"
    for ns in ([4, 1], [0, 2], [], [1, 1], [1.5]):
        with pytest.raises(ValueError, match="ns must be increasing integers >= 1"):
            gm.mean_curve(draws, ref, ns)


def test_the_spike_finding_says_saturated_only_when_it_is():
    t = gs.read_tables(DATA)
    assert "at the spike (saturated)" in gs.findings(t)[4]["measured"]
    for r in t["spike"]:           # the delayed recipe's spike step no worse than the others: not saturated
        if r["recipe"] == "te-delayed" and r["spiked"] in ("1", "True"):
            r["fprop_rel_err"] = "0.01"
    row = gs.findings(t)[4]
    assert "at the spike (not saturated)" in row["measured"] and row["verdict"] != "reproduced"


def test_the_committed_findings_are_unchanged():
    rows = gs.read_csv(DATA / "findings.csv")
    now = gs.findings(gs.read_tables(DATA))
    assert [(r["finding"], r["verdict"], r["measured"]) for r in rows] == \
        [(r["finding"], r["verdict"], r["measured"]) for r in now]
    assert json.loads((DATA / "study.json").read_text())["config_sha256"]
