"""fp8emu study: readers, metrics, recipes, calibration, chunking, resume, reports, CLI.

Expectations come from exact Fraction arithmetic on the float32 inputs, the
spec's format constants, ml_dtypes' conversions and the public scaling
quantizers applied to whole tensors, never from the study's own numbers.
"""

import base64
import csv
import html
import math
import re
import tracemalloc
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import fp8emu
from fp8emu import metrics
from fp8emu.cli import main
from fp8emu.lab import analysis, report, study
from fp8emu.lab.recipes import (
    DEFAULT_RECIPES, calibrate, recipe_matrix, select_recipes, tensor_params,
)

safetensors_numpy = pytest.importorskip("safetensors.numpy")

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

F32 = np.float32


def _save(path, tensors):
    safetensors_numpy.save_file(tensors, str(path))
    return path


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """A small checkpoint with bf16/f32/f16/f8 tensors and the awkward cases."""
    g = np.random.default_rng(0)
    d = tmp_path_factory.mktemp("ckpt")
    t = {
        "layers.0.mlp.up.weight": (g.standard_normal((300, 96)) * 0.02).astype(ml_dtypes.bfloat16),
        "layers.0.mlp.down.weight": g.standard_t(3, (96, 300)).astype(F32),
        "layers.1.attn.q.weight": g.standard_normal((64, 64)).astype(np.float16),
        "layers.1.attn.k.weight": np.array([[1.0, -2.0, 3.5]], ml_dtypes.float8_e4m3fn).astype(ml_dtypes.float8_e4m3fn),
        "zeros": np.zeros((8, 32), F32),
        "equal": np.full((4, 40), -2.5, ml_dtypes.bfloat16),
        "special": np.array([[1.0, 464.0, 465.0, 1e-4, 0.0, np.nan, np.inf]], F32),
        "norm": np.ones(64, F32),
        "step": np.array(7, np.int64),
    }
    return _save(d / "model.safetensors", t), t


# --------------------------------------------------------------------------- readers

def test_safetensors_reader_returns_exact_values_and_dtypes(ckpt):
    path, t = ckpt
    refs, skipped = study.discover([path])
    assert skipped == ["model.safetensors:step"]
    by = {r.name: r for r in refs}
    assert by["layers.0.mlp.up.weight"].dtype == "bfloat16"
    assert by["layers.1.attn.k.weight"].dtype == "float8_e4m3fn"
    for name, ref in by.items():
        got = ref.read()
        assert got.dtype == t[name].dtype, name
        assert np.array_equal(got.astype(np.float64), t[name].astype(np.float64), equal_nan=True), name
    # Row ranges, as chunks read them.
    r = by["layers.0.mlp.up.weight"]
    assert np.array_equal(r.read(128, 256).view(np.uint16), t[r.name][128:256].view(np.uint16))
    r8 = by["layers.1.attn.k.weight"]
    assert np.array_equal(r8.read(0, 1).view(np.uint8), t[r8.name].view(np.uint8))


def test_npz_and_npy_folder_readers(tmp_path):
    a = np.arange(12, dtype=F32).reshape(3, 4)
    np.savez(tmp_path / "ck.npz", w=a, b=a[0].astype(np.float64))
    (tmp_path / "dir" / "layer0").mkdir(parents=True)
    np.save(tmp_path / "dir" / "layer0" / "w.npy", a.astype(np.float16))
    refs, _ = study.discover([tmp_path / "ck.npz", tmp_path / "dir"])
    assert [(r.checkpoint, r.name, r.shape, r.dtype) for r in refs] == [
        ("ck.npz", "b", (4,), "float64"), ("ck.npz", "w", (3, 4), "float32"),
        ("dir", "layer0.w", (3, 4), "float16")]
    assert np.array_equal(refs[1].read(1, 3), a[1:3])
    assert np.array_equal(refs[2].read(), a.astype(np.float16))


def test_include_exclude_filters(ckpt):
    path, _ = ckpt
    names = lambda **kw: [r.name for r in study.discover([path], **kw)[0]]
    assert names(include=["layers.*.mlp.*"]) == ["layers.0.mlp.down.weight", "layers.0.mlp.up.weight"]
    assert names(include=["attn"], exclude=["*.q.*"]) == ["layers.1.attn.k.weight"]
    with pytest.raises(ValueError, match="no floating-point tensor"):
        study.discover([path], include=["nothing-matches"])


def test_bad_inputs_are_clear_errors(tmp_path, ckpt):
    with pytest.raises(FileNotFoundError):
        study.discover([tmp_path / "missing.safetensors"])
    (tmp_path / "x.bin").write_bytes(b"1234")
    with pytest.raises(ValueError, match="accepted are"):
        study.discover([tmp_path / "x.bin"])
    (tmp_path / "bad.safetensors").write_bytes(b"\xff" * 20)
    with pytest.raises(ValueError, match="not a safetensors"):
        study.discover([tmp_path / "bad.safetensors"])
    other = tmp_path / "a"
    other.mkdir()
    _save(other / "model.safetensors", {"w": np.ones((2, 2), F32)})
    with pytest.raises(ValueError, match="same file name|named"):
        study.discover([ckpt[0], other / "model.safetensors"])
    with pytest.raises(ValueError, match="no recipe matches"):
        select_recipes(["nope-*"])


# --------------------------------------------------------------------------- metrics

@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz"])
def test_overflow_threshold_is_where_the_codec_overflows(fmt):
    f = fp8emu.get_format(fmt)
    # Spec arithmetic: max + half an ulp at max, the ulp being 2**(floor(log2 max) - mbits).
    mx = Fraction(f.max)
    e = mx.numerator.bit_length() - mx.denominator.bit_length()
    e = e if Fraction(2) ** e <= mx else e - 1
    mid = mx + Fraction(2) ** (e - f.mbits) / 2
    thr, tie_up = metrics.overflow_threshold(fmt)
    assert Fraction(thr) == mid
    codes = fp8emu.encode(np.array([np.nextafter(thr, 0), thr, np.nextafter(thr, np.inf)]), fmt)
    finite = np.isfinite(fp8emu.decode(codes, fmt))
    assert finite.tolist() == [True, not tie_up, False]


def _hand_metrics(x, q, over, sat, flushed, sub):
    fin = [Fraction(float(v)) for v in x if math.isfinite(v)]
    qs = [Fraction(float(v)) for v, xv in zip(q, x) if math.isfinite(xv)]
    signal = sum(v * v for v in fin)
    noise = sum((a - b) ** 2 for a, b in zip(qs, fin))
    n = len(fin)
    return {"sqnr_db": 10 * math.log10(signal / noise), "frac_overflow": over / n,
            "frac_saturated": sat / n, "frac_flushed": flushed / n, "frac_subnormal": sub / n}


def test_row_metrics_of_hand_worked_tensor(ckpt):
    path, t = ckpt
    ref = [r for r in study.discover([path])[0] if r.name == "special"][0]
    rows = {r["recipe"]: r for r in study.study_tensor(ref, ["cast-e4m3fn-ocp", "cast-e4m3fn-cuda-satfinite"])}
    x = t["special"].ravel()
    ocp = rows["cast-e4m3fn-ocp"]
    # 465 is past e4m3fn's threshold 464 -> NaN without saturation; 464 ties to even 448.
    assert ocp["sqnr_db"] == -math.inf and ocp["n_nonfinite_out"] == 1
    assert ocp["n_nan"] == 1 and ocp["n_inf"] == 1 and ocp["numel"] == 7
    assert ocp["frac_overflow"] == 1 / 5 and ocp["frac_saturated"] == 1 / 5 and ocp["frac_flushed"] == 1 / 5
    sat = rows["cast-e4m3fn-cuda-satfinite"]
    q = [1.0, 448.0, 448.0, 0.0, 0.0, np.nan, 448.0]
    want = _hand_metrics(x, q, over=1, sat=2, flushed=1, sub=0)
    assert sat["sqnr_db"] == pytest.approx(want["sqnr_db"], rel=1e-12)
    for k in ("frac_overflow", "frac_saturated", "frac_flushed", "frac_subnormal"):
        assert sat[k] == want[k], k
    assert sat["max_abs_err"] == 17.0 and sat["max_rel_err"] == 1.0
    assert sat["amax"] == 465.0 and sat["dynamic_range_log2"] == pytest.approx(math.log2(465 / float(F32(1e-4))))
    # exponents: 1 -> 0, 464/465 -> 8, 1e-4 -> -14
    assert sat["exp_hist_in"] == "-14:1 0:1 8:2" and sat["exp_hist_out"] == "0:1 8:2"


def test_subnormal_fraction_counts_subnormal_codes():
    f = fp8emu.get_format("e4m3fn")
    x = np.array([[f.min_subnormal * 3, f.min_normal, 1.0, f.min_subnormal]], F32)
    p = metrics.error_partial(x, x, fp8emu.encode(x, f), fp8emu.decode(fp8emu.encode(x, f), f), f)
    assert p["n_subnormal"] == 2 and p["noise"] == 0


def test_edge_tensors_give_no_warnings_and_sane_rows(ckpt):
    path, _ = ckpt
    refs = [r for r in study.discover([path])[0] if r.name in ("zeros", "equal", "norm")]
    for ref in refs:
        rows = study.study_tensor(ref, ["all"])
        assert len(rows) == len(recipe_matrix())
        for r in rows:
            if ref.name == "zeros":
                assert r["sqnr_db"] == math.inf and math.isnan(r["dynamic_range_log2"]) and r["frac_zero"] == 1
            else:
                assert r["dynamic_range_log2"] == 0.0
                assert r["n_nonfinite_out"] == 0
    norm = {r["recipe"]: r for r in study.study_tensor(refs[1], ["tensor-e4m3fn", "calib-kl-e4m3fn", "calib-mse-e4m3fn"])}
    # A constant tensor is exact under per-tensor scaling whatever the calibration (nothing to clip).
    assert all(r["sqnr_db"] == math.inf for r in norm.values())


# --------------------------------------------------------------------------- recipes and chunks

def _whole(ref):
    return np.asarray(ref.read(), F32).reshape(-1, ref.shape[-1])


@pytest.mark.parametrize("name, direct", [
    ("tensor-e4m3fn", lambda x: fp8emu.quantize_tensorwise(x, "e4m3fn")),
    ("row-e4m3fn", lambda x: fp8emu.quantize_axiswise(x, "e4m3fn", axis=-1)),
    ("block128x128-e4m3fn", lambda x: fp8emu.quantize_blockwise(x, "e4m3fn", block=(128, 128))),
    ("block1x128-e5m2", lambda x: fp8emu.quantize_blockwise(x, "e5m2", block=(1, 128))),
    ("mx-e2m1fn-rceil", lambda x: fp8emu.quantize_mx(x, "e2m1fn", scale_rule="rceil")),
    ("nvfp4", lambda x: fp8emu.quantize_nvfp4(x)),
])
def test_chunked_recipe_codes_equal_the_whole_tensor_quantizer(ckpt, name, direct):
    path, _ = ckpt
    ref = [r for r in study.discover([path])[0] if r.name == "layers.0.mlp.up.weight"][0]
    ranges = study.chunk_ranges(ref, 128 * 96)
    assert len(ranges) == 3 and all((b - a) % 128 == 0 for a, b in ranges[:-1])
    stats = metrics.combine([study.stage_stats(ref, a, b) for a, b in ranges])
    params = tensor_params(stats["amax"], stats["n_inf"], None)
    recipe = recipe_matrix()[name]
    codes = np.concatenate([recipe.apply(metrics.as_matrix(ref.read(a, b)), params).codes for a, b in ranges])
    whole = direct(_whole(ref))
    assert np.array_equal(codes, whole.codes)
    # The row's SQNR is the whole tensor's, computed with exact sums.
    row = study.study_tensor(ref, [name], chunk_mb=128 * 96 * 4 / 2 ** 20)[0]
    x = _whole(ref).astype(np.float64)
    q = whole.dequantize(np.float64)
    want = 10 * math.log10(math.fsum((x * x).ravel()) / math.fsum(((q - x) ** 2).ravel()))
    assert row["sqnr_db"] == pytest.approx(want, rel=1e-12)


def test_rows_do_not_depend_on_chunk_size(ckpt):
    path, _ = ckpt
    ref = [r for r in study.discover([path])[0] if r.name == "layers.0.mlp.down.weight"][0]
    small = study.study_tensor(ref, None, chunk_mb=0.01)
    big = study.study_tensor(ref, None, chunk_mb=64)
    for a, b in zip(small, big):
        for k, v in a.items():
            if isinstance(v, float) and math.isfinite(v):
                assert v == pytest.approx(b[k], rel=1e-12, abs=0), (a["recipe"], k)
            else:
                assert v == b[k], (a["recipe"], k)


def test_recipe_matrix_offers_every_family():
    m = recipe_matrix()
    for fmt in ("e4m3fn", "e5m2", "e2m3fn", "e3m2fn", "e2m1fn"):
        for rule in ("floor", "ceil", "even", "rceil"):
            assert f"mx-{fmt}-{rule}" in m
    for method in ("amax", "p99.9", "p99.99", "mse", "kl"):
        assert f"calib-{method}-e4m3fn" in m
    assert {"cast-e4m3fn-torch-cuda-2.11", "cast-e5m2-triton-rtz", "nvfp4", "block128x128-e4m3fn"} <= set(m)
    assert "cast-e4m3fn-triton-rtz" not in m   # the profile cannot express it
    assert [r.name for r in select_recipes()] == [n for n in DEFAULT_RECIPES if n in m]


# --------------------------------------------------------------------------- calibration

def test_percentile_calibration_matches_the_sorted_data():
    x = np.arange(1, 10001, dtype=F32)
    h = metrics.calibration_histogram(x, 10000.0)
    t = calibrate(h, 10000.0, "e4m3fn", "p99.9")
    # 99.9 % of the values are <= 9990; the threshold is the upper edge of that bin (width 10000/2048).
    assert 9990 <= t < 9990 + 10000 / 2048 + 1e-9
    assert calibrate(h, 10000.0, "e4m3fn", "amax") == 10000.0
    with pytest.raises(ValueError, match="percentile"):
        calibrate(h, 10000.0, "e4m3fn", "p101")
    with pytest.raises(ValueError, match="unknown calibration"):
        calibrate(h, 10000.0, "e4m3fn", "entropy")


def test_calibration_clips_a_lone_outlier_where_it_pays(tmp_path):
    g = np.random.default_rng(1)
    x = g.standard_normal((64, 256)).astype(F32)
    x[0, 0] = 100.0   # with amax scaling, E2M1 (max 6, min subnormal 0.5) flushes nearly everything else
    np.save(tmp_path / "w.npy", x)
    ref = study.discover([tmp_path / "w.npy"])[0][0]
    rows = {r["recipe"]: r for r in study.study_tensor(ref, ["calib-*-e2m1fn"])}
    assert rows["calib-amax-e2m1fn"]["clip_threshold"] == 100.0
    for m in ("mse", "kl", "p99.9", "p99.99"):
        r = rows[f"calib-{m}-e2m1fn"]
        assert r["clip_threshold"] < 50
        # Reference: the same scale through the public quantizer and analysis.sqnr_db.
        st = fp8emu.quantize_tensorwise(x, "e2m1fn", scale=fp8emu.current_scale(F32(r["clip_threshold"]), "e2m1fn"))
        assert r["sqnr_db"] == pytest.approx(analysis.sqnr_db(x, st.dequantize()), rel=1e-9)
    assert rows["calib-mse-e2m1fn"]["sqnr_db"] > rows["calib-amax-e2m1fn"]["sqnr_db"] + 2


def test_mse_calibration_minimises_the_histogram_error():
    g = np.random.default_rng(3)
    x = np.abs(g.standard_t(2, 50000)).astype(F32)
    amax = float(x.max())
    h = metrics.calibration_histogram(x, amax)
    t = calibrate(h, amax, "e2m1fn", "mse")
    centres = (np.arange(2048) + 0.5) * amax / 2048

    def loss(th):   # independent: float64 fake quantization through the E2M1 value set
        vals = fp8emu.get_format("e2m1fn").values()
        vals = np.unique(np.abs(vals[np.isfinite(vals)]))
        s = 6.0 / th
        y = np.minimum(centres * s, 6.0)
        q = vals[np.abs(y[:, None] - vals[None, :]).argmin(1)] / s
        return float(np.sum(h * (q - centres) ** 2))

    cands = np.arange(128, 2049, 4) * amax / 2048
    best = min(loss(c) for c in cands)
    assert loss(t) <= best * (1 + 1e-3)


# --------------------------------------------------------------------------- driver, resume, reports

def test_resume_skips_done_tensors_and_repairs_a_torn_line(ckpt, tmp_path):
    path, _ = ckpt
    recipes = ["tensor-e4m3fn", "mx-e4m3fn-floor"]
    first = study.run_study([path], tmp_path, recipes=recipes, include=["layers.*"], progress=False, report=False)
    assert first["computed"] == 4
    with open(tmp_path / "results.csv", "a") as f:
        f.write("model.safetensors,zeros,8x32")   # a run killed mid-line
    second = study.run_study([path], tmp_path, recipes=recipes, progress=False, report=False)
    assert second["computed"] == 4 and second["skipped"] == 4
    third = study.run_study([path], tmp_path, recipes=recipes + ["nvfp4"], progress=False, report=False)
    assert third["computed"] == 8   # every tensor misses only the new recipe
    fresh = study.run_study([path], tmp_path / "fresh", recipes=recipes + ["nvfp4"], progress=False, report=False)
    assert (tmp_path / "results.csv").read_text() == (tmp_path / "fresh" / "results.csv").read_text()
    assert len(fresh["rows"]) == 8 * 3


def test_memory_is_bounded_by_the_chunk_not_the_tensor(tmp_path):
    x = np.random.default_rng(2).standard_normal((4096, 1024)).astype(F32)   # 16 MiB
    _save(tmp_path / "big.safetensors", {"w": x})
    del x
    recipes = ["tensor-e4m3fn", "mx-e4m3fn-floor"]
    study.run_study([tmp_path / "big.safetensors"], tmp_path / "warm", recipes=recipes,
                    chunk_mb=0.5, progress=False, report=False)   # encode tables, imports
    tracemalloc.start()
    study.run_study([tmp_path / "big.safetensors"], tmp_path / "o", recipes=recipes,
                    chunk_mb=1, progress=False, report=False)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 12 * 2 ** 20, peak / 2 ** 20   # well under the 16 MiB tensor


@pytest.fixture(scope="module")
def demo_run(demo_study):
    return demo_study                       # tests/conftest.py: shared with test_docs


def test_demo_writes_results_and_reports(demo_run):
    rows = study.read_results(demo_run / "results.csv")
    refs, _ = study.discover([study.demo_checkpoint()])
    assert len(rows) == len(refs) * len(select_recipes())
    assert {r["dtype"] for r in rows} == {"bfloat16", "float32"}
    with open(demo_run / "results.csv") as f:
        assert tuple(next(csv.reader(f))) == study.COLUMNS
    md = (demo_run / "report.md").read_text()
    for link in re.findall(r"\]\((figures/[^)]+)\)", md):
        assert (demo_run / link).is_file()
    page = (demo_run / "report.html").read_text()
    imgs = re.findall(r'<img[^>]*src="data:image/png;base64,([^"]+)"', page)
    assert len(imgs) == 2
    for data in imgs:
        assert base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n"
    assert "src=\"http" not in page and "<script" not in page   # self-contained
    # The outlier-channel activations lose most under a per-tensor e4m3 scale clipped by KL.
    worst = report.worst_tensors(rows, 1)["calib-kl-e4m3fn"][0]
    assert worst["tensor"].startswith("activations.") or worst["tensor"].startswith("mlp.")


def test_cli_errors_exit_2(capsys, tmp_path):
    assert main(["study", "--out", str(tmp_path)]) == 2
    assert "give checkpoint" in capsys.readouterr().err
    assert main(["study", str(tmp_path / "nope.safetensors"), "--out", str(tmp_path)]) == 2
    assert "no such checkpoint" in capsys.readouterr().err
    assert main(["study", "--demo", "--out", str(tmp_path), "--recipes", "bogus"]) == 2
    assert "no recipe matches 'bogus'" in capsys.readouterr().err
    assert main(["study", "--demo", "--out", str(tmp_path), "--chunk-mb", "0"]) == 2
    assert main(["study", "--list-recipes"]) == 0
    assert "calib-kl-e4m3fn" in capsys.readouterr().out


def test_report_renders_in_headless_chromium_with_every_figure(demo_run, tmp_path):
    import shutil
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
    from PIL import Image
    images = report.check_in_browser(demo_run / "report.html", screenshot=tmp_path / "shot.png",
                                     width=1280, height=1600)
    assert [i["id"] for i in images] == ["sqnr_heatmap", "sqnr_vs_dynamic_range"]
    assert all(i["complete"] and i["width"] > 300 and i["height"] > 200 for i in images)
    # The screenshot is the page as drawn: the requested size, text and tables on a white page
    # (many dark pixels, in many shades), not a blank or error page.
    shot = Image.open(tmp_path / "shot.png").convert("L")
    assert shot.size == (1280, 1600)
    px = np.asarray(shot)
    assert (px < 128).mean() > 0.01 and (px > 250).mean() > 0.5 and len(np.unique(px)) > 64
    # The probe does see a figure the browser cannot decode.
    page = (demo_run / "report.html").read_text()
    broken = tmp_path / "broken.html"
    broken.write_text(page.replace("base64,iVBOR", "base64,AAAAA", 1))
    widths = [i["width"] for i in report.check_in_browser(broken)]
    assert widths[0] == 0 and widths[1] > 0


def _text(page):
    return html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r'src="data:[^"]+"', "", page)))


def test_report_has_provenance_definitions_and_block_context(demo_run):
    page = (demo_run / "report.html").read_text()
    text = _text(page)
    for needle in ("input", "demo.safetensors", "(30 tensors studied)", f"fp8emu {fp8emu.__version__}",
                   f"numpy {np.__version__}", "ml_dtypes", "matplotlib", " UTC"):
        assert needle in text, needle
    assert f"fp8emu study --demo --out {demo_run}" in text
    for column in ("overflow", "saturated", "flushed to 0", "subnormal", "SQNR (dB)", "dynamic range"):
        assert re.search(rf"<dt>{re.escape(column)}</dt><dd>[^<]{{30,}}</dd>", page), column
    # NVFP4's saturation carries its context next to the number, and the note explains it
    nvfp4 = re.search(r"<tr><td>nvfp4</td>(.*?)</tr>", page).group(1)
    assert re.search(r"<td>[0-9.]+ % †</td>", nvfp4)
    assert "† by design" in text and "clipping is counted under overflow" in text
    md = (demo_run / "report.md").read_text()
    assert "| NVFP4: E4M3 scale per 16, FP32 per tensor | nvfp4 |" in md and "† by design" in md


def test_report_conclusion_and_best_recipes_follow_from_the_rows(demo_run):
    import statistics
    rows = study.read_results(demo_run / "results.csv")
    text = _text((demo_run / "report.html").read_text())
    fp8 = {r["recipe"] for r in rows if r["format"] in ("e4m3fn", "e5m2")}
    med = {n: statistics.median(r["sqnr_db"] for r in rows if r["recipe"] == n) for n in fp8}
    top = max(med, key=med.get)
    assert f"Highest median SQNR in 8 bits: {top} ({med[top]:.1f} dB median" in text
    tensors = sorted({r["tensor"] for r in rows})
    best = {t: max((r for r in rows if r["tensor"] == t and r["recipe"] in fp8), key=lambda r: r["sqnr_db"])
            for t in tensors}
    wins = statistics.mode(best[t]["recipe"] for t in tensors)
    n = sum(best[t]["recipe"] == wins for t in tensors)
    assert f"{wins} is the best 8-bit recipe for {n} of {len(tensors)} tensors." in text
    table = dict((b["tensor"], b) for b in report.best_recipes(rows))
    for t in tensors:
        assert table[t]["best_8bit"][1] == best[t]["sqnr_db"]


def test_heatmap_groups_recipes_by_family_with_labels_on_every_side(demo_run):
    rows = study.read_results(demo_run / "results.csv")
    fig = report.figure_heatmap(rows)
    ax = fig.axes[0]
    both = [t.get_text() for t in ax.get_yticklabels()]     # the left side's labels, then the right's
    names = both[:len(both) // 2]
    assert names == both[len(both) // 2:] and len(names) == len({r["recipe"] for r in rows})
    families = [report.recipe_family(n) for n in names]
    # each family is one contiguous run, in the FAMILIES order
    runs = [f for i, f in enumerate(families) if i == 0 or families[i - 1] != f]
    order = list(dict.fromkeys(title for _, title, _ in report.FAMILIES))
    assert runs == sorted(set(runs), key=order.index)
    assert names[-1] == "nvfp4" and names[0].startswith("cast-")
    xt, yt = ax.xaxis.get_major_ticks(), ax.yaxis.get_major_ticks()   # label1: bottom/left, label2: top/right
    assert all(t.label1.get_visible() and t.label2.get_visible() for t in xt)
    assert all(t.label1.get_visible() and t.label2.get_visible() for t in yt)
    cell_sizes = {t.get_fontsize() for t in ax.texts}
    assert min(cell_sizes) >= 7          # legible cell text
    # one panel per family in the scatter figure, each with its own legend
    fig = report.figure_sqnr_vs_range(rows)
    shown = [a for a in fig.axes if a.get_visible()]
    assert [a.get_title() for a in shown] == runs
    assert all(a.get_legend() is not None for a in shown)


def test_safetensors_read_without_the_safetensors_package(tmp_path):
    # A plain `pip install fp8emu` has no safetensors package: the demo study must still run, reading
    # the file's documented layout (8-byte header length, JSON header, raw bytes) directly.
    import subprocess
    import sys
    code = ("import sys; sys.modules['safetensors'] = None\n"
            "from fp8emu.cli import main\n"
            f"sys.exit(main(['study', '--demo', '--quiet', '--out', {str(tmp_path / 'out')!r},"
            " '--recipes', 'tensor-e4m3fn']))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = (tmp_path / "out" / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + 30
