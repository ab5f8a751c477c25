"""`fp8emu study` on checkpoints as people have them.

Real safetensors shards (written with the safetensors package), a real dask.distributed LocalCluster
for the README's `fp8emu study ckpt/ --workers N`, resume files with duplicated or conflicting rows,
and the report's recipe styles with the whole recipe matrix.
"""

from __future__ import annotations

import json
import time
import warnings

import ml_dtypes
import numpy as np
import pytest
from safetensors import numpy as st_numpy

from fp8emu.cli import main
from fp8emu.lab import report, study
from fp8emu.lab.recipes import recipe_matrix

F32 = np.float32
RECIPES = ["tensor-e4m3fn", "mx-e4m3fn-floor", "nvfp4"]


def _tensors():
    g = np.random.default_rng(4)
    return {"model.layers.0.mlp.up.weight": (g.standard_normal((64, 48)) * 0.02).astype(ml_dtypes.bfloat16),
            "model.layers.0.mlp.down.weight": g.standard_t(3, (48, 64)).astype(F32),
            "model.layers.1.attn.q.weight": g.standard_normal((32, 32)).astype(np.float16),
            "model.embed": g.standard_normal((16, 48)).astype(F32)}


def _sharded(folder, index=True):
    folder.mkdir()
    t = _tensors()
    names = sorted(t)
    shards = {"model-00001-of-00002.safetensors": names[:2], "model-00002-of-00002.safetensors": names[2:]}
    for shard, keys in shards.items():
        st_numpy.save_file({k: t[k] for k in keys}, str(folder / shard))
    if index:
        (folder / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": 1}, "weight_map": {k: s for s, ks in shards.items() for k in ks}}))
    return folder


def _add_to_index(ck, name, shard):
    p = ck / "model.safetensors.index.json"
    d = json.loads(p.read_text())
    d["weight_map"][name] = shard
    p.write_text(json.dumps(d))


def _key(rows):
    return {(r["tensor"], r["recipe"]): {c: r[c] for c in study.COLUMNS if c != "checkpoint"} for r in rows}


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    d = tmp_path_factory.mktemp("single")
    st_numpy.save_file(_tensors(), str(d / "model.safetensors"))
    res = study.run_study([d / "model.safetensors"], d / "out", recipes=RECIPES, progress=False, report=False)
    return _key(res["rows"])


@pytest.mark.parametrize("index", [True, False])
def test_sharded_folder_is_one_model(tmp_path, single, index):
    ck = _sharded(tmp_path / "ckpt", index=index)
    res = study.run_study([ck], tmp_path / "out", recipes=RECIPES, progress=False, report=False)
    assert {r["checkpoint"] for r in res["rows"]} == {"ckpt"}
    assert _key(res["rows"]) == single                 # the same rows as the unsharded file


def test_readme_sharded_example_on_a_local_cluster(tmp_path, single, capsys):
    ck = _sharded(tmp_path / "ckpt")
    out = tmp_path / "study"
    assert main(["study", str(ck), "--out", str(out), "--workers", "2", "--quiet", "--no-report",
                 "--recipes", ",".join(RECIPES)]) == 0
    assert _key(study.read_results(out / "results.csv")) == single
    # nothing left to do: no cluster starts, results.csv is not rewritten, the rerun is quick
    before = (out / "results.csv").stat().st_mtime_ns
    t0 = time.perf_counter()
    assert main(["study", str(ck), "--out", str(out), "--workers", "2", "--no-report",
                 "--recipes", ",".join(RECIPES)]) == 0
    assert time.perf_counter() - t0 < 3
    assert (out / "results.csv").stat().st_mtime_ns == before
    assert "0 tensors studied, 4 already in" in capsys.readouterr().out


@pytest.mark.parametrize("damage,needle", [
    (lambda ck: (ck / "model-00002-of-00002.safetensors").unlink(), "missing from"),
    (lambda ck: st_numpy.save_file({"model.embed": np.ones((2, 2), F32)}, str(ck / "model-extra.safetensors")),
     "is in both"),
    (lambda ck: (ck / "model.safetensors.index.json").write_text('{"weight_map": [1]}'), "weight_map"),
    (lambda ck: (ck / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"model.embed": "model-00002-of-00002.safetensors"}})), "maps tensor 'model.embed'"),
    (lambda ck: (ck / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"model.embed": "model-00001-of-00002.safetensors"}})), "does not list tensor"),
    (lambda ck: _add_to_index(ck, "ghost", "model-00001-of-00002.safetensors"), "no shard holds"),
])
def test_inconsistent_shards_and_index_are_refused(tmp_path, capsys, damage, needle):
    ck = _sharded(tmp_path / "ckpt")
    damage(ck)
    with pytest.raises(ValueError, match=needle):
        study.discover([ck])
    assert main(["study", str(ck), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fp8emu study: error:")


def test_every_float8_safetensors_dtype_is_studied(tmp_path):
    vals = np.array([[0.5, -1.0, 2.0, 3.0, -0.25, 1.5, 0.0, 4.0]], F32)
    dtypes = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2,
              "e4m3fnuz": ml_dtypes.float8_e4m3fnuz, "e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
              "e8m0": ml_dtypes.float8_e8m0fnu}
    p = tmp_path / "f8.safetensors"
    st_numpy.save_file({k: (np.abs(vals) + 0.25 if k == "e8m0" else vals).astype(v) for k, v in dtypes.items()},
                       str(p))
    header = json.loads(p.read_bytes()[8:8 + int.from_bytes(p.read_bytes()[:8], "little")])
    assert {header[k]["dtype"] for k in dtypes} == {"F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0"}
    refs, skipped = study.discover([p])
    assert skipped == [] and sorted(r.name for r in refs) == sorted(dtypes)
    for r in refs:
        want = (np.abs(vals) + 0.25 if r.name == "e8m0" else vals).astype(dtypes[r.name])
        got = r.read()
        assert got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8))
        row = study.study_tensor(r, ["tensor-e4m3fn"])[0]
        assert row["amax"] == float(np.max(np.abs(want.astype(np.float64))))


def test_f4_and_e8m0_checkpoint_is_studied_as_what_it_holds(tmp_path, capsys):
    """A DeepSeek-V4-style file: packed FP4 weights (F4) and E8M0 scales, written by safetensors itself."""
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("this torch has no float4_e2m1fn_x2")
    codes = np.random.default_rng(4).integers(0, 16, (4, 32))
    packed = torch.from_numpy((codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8))
    scales = torch.tensor([[126, 127], [128, 129]], dtype=torch.uint8)
    p = tmp_path / "ds.safetensors"
    st_torch.save_file({"w": packed.view(torch.float4_e2m1fn_x2), "w_scale": scales.view(torch.float8_e8m0fnu)},
                       str(p))
    refs, skipped = study.discover([p])
    assert skipped == [] and {r.name: (r.dtype, tuple(r.shape)) for r in refs} == {
        "w": ("float4_e2m1fn", (4, 32)), "w_scale": ("float8_e8m0fnu", (2, 2))}
    e2m1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]           # OCP MX FP4 E2M1, sign bit 3
    want = np.array([[e2m1[c & 7] * (-1 if c & 8 else 1) for c in row] for row in codes])
    w = next(r for r in refs if r.name == "w")
    np.testing.assert_array_equal(w.read().astype(np.float64), want)
    assert study.study_tensor(w, ["tensor-e4m3fn"])[0]["amax"] == float(np.max(np.abs(want)))
    assert main(["study", str(p), "--out", str(tmp_path / "o"), "--recipes", "tensor-e4m3fn", "--quiet"]) == 0


def test_a_missing_path_fails_before_any_cluster_starts(tmp_path, capsys):
    t0 = time.perf_counter()
    assert main(["study", str(tmp_path / "nope"), "--out", str(tmp_path / "o"), "--workers", "4"]) == 2
    assert time.perf_counter() - t0 < 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope" in err[0]
    t0 = time.perf_counter()
    assert main(["study", "--demo", "--out", str(tmp_path / "o"), "--recipes", "nope-*", "--workers", "4"]) == 2
    assert time.perf_counter() - t0 < 1 and "no recipe matches" in capsys.readouterr().err


# ----------------------------------------------------------------------------- resume
@pytest.fixture
def resumed(tmp_path):
    p = tmp_path / "w.npy"
    np.save(p, np.linspace(-3, 3, 256, dtype=F32).reshape(8, 32))
    out = tmp_path / "out"
    study.run_study([p], out, recipes=RECIPES, progress=False, report=False)
    return p, out


def test_identical_duplicated_rows_are_repaired(resumed, capsys):
    p, out = resumed
    csv_path = out / "results.csv"
    lines = csv_path.read_text().splitlines(keepends=True)
    csv_path.write_text("".join(lines + lines[1:3]))           # two rows appended twice
    assert main(["study", str(p), "--out", str(out), "--recipes", ",".join(RECIPES), "--no-report"]) == 0
    assert "2 duplicated rows dropped" in capsys.readouterr().out
    rows = study.read_results(csv_path)
    assert len(rows) == len(RECIPES) == len({(r["tensor"], r["recipe"]) for r in rows})


def test_conflicting_rows_are_refused(resumed, capsys):
    p, out = resumed
    csv_path = out / "results.csv"
    lines = csv_path.read_text().splitlines(keepends=True)
    cells = lines[1].split(",")
    sqnr = study.COLUMNS.index("sqnr_db")
    cells[sqnr] = "99.0"
    csv_path.write_text("".join(lines) + ",".join(cells))
    assert main(["study", str(p), "--out", str(out), "--recipes", ",".join(RECIPES), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "two different rows" in err[0] and str(csv_path) in err[0]
    assert not (out / "report.md").exists()                    # never carried into a report


def test_rows_of_a_changed_checkpoint_are_refused(resumed):
    p, out = resumed
    np.save(p, np.ones((4, 32), F32))
    with pytest.raises(ValueError, match="the checkpoint changed"):
        study.plan_study([p], out, recipes=RECIPES)


@pytest.mark.parametrize("column,value", [("recipe", "tensor-e9m9"), ("format", "e5m2")])
def test_rows_of_unknown_recipes_are_refused(resumed, column, value):
    p, out = resumed
    csv_path = out / "results.csv"
    lines = csv_path.read_text().splitlines(keepends=True)
    cells = lines[1].split(",")
    cells[study.COLUMNS.index(column)] = value
    csv_path.write_text(lines[0] + ",".join(cells) + "".join(lines[2:]))
    with pytest.raises(ValueError, match="does not have"):
        study.plan_study([p], out, recipes=RECIPES)


def test_rerun_with_nothing_to_do_keeps_the_files(resumed):
    p, out = resumed
    study.run_study([p], out, recipes=RECIPES, progress=False, report=True)
    stamps = {f: (out / f).stat().st_mtime_ns for f in ("results.csv", "report.md", "report.html")}
    t0 = time.perf_counter()
    res = study.run_study([p], out, recipes=RECIPES, progress=False, report=True)
    assert time.perf_counter() - t0 < 1.5 and res["computed"] == 0
    assert {f: (out / f).stat().st_mtime_ns for f in stamps} == stamps


# ----------------------------------------------------------------------------- report
def _synthetic_rows(names):
    g = np.random.default_rng(0)
    base = {c: 0.0 for c in study.COLUMNS}
    base.update(checkpoint="c", shape="4x4", dtype="float32", format="e4m3fn", exp_hist_in="", exp_hist_out="",
                clip_threshold="", numel=16, n_nan=0, n_inf=0, n_nonfinite_out=0)
    return [dict(base, tensor=f"t{j}", recipe=n, sqnr_db=float(g.uniform(5, 40)),
                 dynamic_range_log2=float(g.uniform(2, 20))) for n in names for j in range(2)]


def test_every_recipe_has_a_distinct_colour_and_marker_in_its_panel():
    names = list(recipe_matrix())
    styles = report.recipe_styles(names)
    assert len(set(styles.values())) == len(names)
    fig = report.figure_sqnr_vs_range(_synthetic_rows(names))
    n, legends = 0, 0
    for ax in fig.axes:       # one panel per recipe family; within a panel, colours and markers both differ
        colours, shapes, pairs = set(), set(), set()
        for col in ax.collections:
            colour = tuple(np.round(col.get_facecolor()[0][:3], 4))
            shape = tuple(np.round(col.get_paths()[0].vertices.ravel(), 4))
            colours.add(colour)
            shapes.add(shape)
            pairs.add((colour, shape))
        assert len(pairs) == len(ax.collections)
        if len(ax.collections) <= 10:
            assert len(colours) == len(shapes) == len(ax.collections)
        n += len(ax.collections)
        legends += len(ax.get_legend().get_texts()) if ax.get_legend() else 0
    assert n == len(names) and legends == len(names)


def test_all_recipes_render_without_matplotlib_warnings(tmp_path):
    rows = _synthetic_rows(list(recipe_matrix()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report.write_report(rows, tmp_path)
    assert (tmp_path / "figures" / "sqnr_vs_dynamic_range.png").stat().st_size > 10_000
