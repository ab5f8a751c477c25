"""The attention study (fp8emu.lab.attention), its figure and the ``attention-study`` command."""

import csv

import numpy as np
import pytest

from fp8emu.cli import main
from fp8emu.lab import attention as al
from fp8emu.lab import plots

SMALL = dict(contexts=(256, 512), queries=8, head_dim=64)


def test_study_rows_cover_every_case_and_show_the_failure_modes():
    rows = al.attention_study(**SMALL)
    keys = {(r["experiment"], r["distribution"], r["variant"]) for r in rows}
    assert len(rows) == len(keys) + 2 * 2   # context cases repeat per context (2 contexts x 2 variants)
    by = {(r["experiment"], r["distribution"], r["variant"], r["context"]): r for r in rows}
    for dist in al.DISTRIBUTIONS:
        bad = by[("prescale", dist, "FA4 pre-#2717 (saturating)", 512)]
        fixed = by[("prescale", dist, "FA4 fixed", 512)]
        assert bad["p_saturated"] > 0 and fixed["p_saturated"] == 0
        assert bad["kernel_rms_rel_error"] > fixed["kernel_rms_rel_error"]
        # per-head descales beat one descale for heads whose ranges differ by 64x each
        assert by[("scales", dist, "per-head", 512)]["rms_rel_error"] < \
            by[("scales", dist, "per-tensor", 512)]["rms_rel_error"]
    for r in rows:
        assert 0 <= r["kernel_rms_rel_error"] < 1 and -1 <= r["cosine"] <= 1


def test_study_is_deterministic_and_validates_its_arguments():
    a = al.attention_study(**SMALL, experiments=("promotion",), distributions=("gaussian",))
    b = al.attention_study(**SMALL, experiments=("promotion",), distributions=("gaussian",))
    assert a == b
    with pytest.raises(ValueError, match="increasing"):
        al.attention_study(contexts=(512, 256))
    with pytest.raises(ValueError, match="unknown experiment"):
        al.attention_study(contexts=(256,), experiments=("nope",))
    with pytest.raises(ValueError, match="promote_every"):
        al.attention_study(contexts=(256,), promote_every=(0,))
    with pytest.raises(ValueError, match="distribution"):
        al.make_qkv("laplace")


def test_outlier_distribution_has_large_channels():
    q, k, v = al.make_qkv("outlier", queries=64, context=256, head_dim=32, seed=3)
    big = np.abs(k[..., :al.OUTLIER_CHANNELS]).mean()
    small = np.abs(k[..., al.OUTLIER_CHANNELS:]).mean()
    assert big / small == pytest.approx(al.OUTLIER_GAIN, rel=0.2)
    assert abs(float(v.mean()) - 0.0) < 0.05


def test_figure_has_four_labelled_panels_and_is_registered():
    fig = al.figure_attention(size=0.01)
    assert len(fig.axes) == 4
    for ax in fig.axes:
        assert ax.get_title() and ax.get_ylabel()
        assert ax.lines or ax.patches
    assert plots.FIGURES["fig11_attention"] is al.figure_attention


def test_cli_prints_the_table_and_writes_csv_and_figure(tmp_path, capsys):
    out_csv, out_png = tmp_path / "a.csv", tmp_path / "a.png"
    rc = main(["attention-study", "--contexts", "256", "--queries", "4", "--head-dim", "32",
               "--experiments", "prescale", "--distributions", "gaussian", "--csv", str(out_csv),
               "--figure", str(out_png)])
    assert rc == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].startswith("| experiment |") and len(lines) == 2 + 5
    assert "[1/5] prescale gaussian" in captured.err
    rows = list(csv.DictReader(out_csv.open()))
    assert [r["variant"] for r in rows] == ["max offset 0", "max offset 4", "max offset 8",
                                            "FA4 pre-#2717 (saturating)", "FA4 fixed"]
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_quiet_prints_nothing(capsys):
    assert main(["attention-study", "--contexts", "128", "--queries", "2", "--head-dim", "16",
                 "--experiments", "scales", "--distributions", "gaussian", "--quiet"]) == 0
    c = capsys.readouterr()
    assert c.out == "" and c.err == ""


@pytest.mark.parametrize("args, msg", [
    (["--contexts", "256,x"], "--contexts must be comma-separated integers"),
    (["--contexts", "0"], "--contexts must be integers in 1.."),
    (["--experiments", "foo"], "--experiments must be among"),
    (["--distributions", "uniform"], "--distributions must be among"),
    (["--contexts", "512,256"], "increasing"),
    (["--queries", "0"], "argument --queries: expected an integer in 1.."),
    (["--figure", "/nonexistent-dir/a.png"], "does not exist"),
    (["--workers", "0"], "argument --workers: expected an integer in 1.."),
])
def test_cli_bad_arguments_are_one_error_line(args, msg, capsys):
    assert main(["attention-study", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()   # argparse's refusals too: no usage lines first
    assert len(err) == 1 and err[0].startswith("fp8emu attention-study: error:") and msg in err[0]
