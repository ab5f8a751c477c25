"""``train-study``'s result folder after a user's edits (a copied or renamed run file), and ``--report-only``'s options.

Every ``runs/*.json`` is read into the report (a study grows run by run), and each was counted as one
more run whatever its name: a Finder-style copy ``bf16-s0 copy.json`` put bf16's seed 0 twice in
``runs.csv`` and ``curves.csv``.  A run file must carry its run's name.  ``--report-only`` trains nothing:
``--workers 3`` was ignored, and ``provenance.csv`` said "workers 3"; ``--seeds 5`` made the report say
"5 per recipe x stack, 5 per baseline" of a study of two seeds.
"""

import shutil

import pytest

pytest.importorskip("torch")

from fp8emu.cli import main  # noqa: E402

TINY = ["--quick", "--recipes", "none", "--baselines", "bf16,fp32", "--seeds", "2", "--steps", "4",
        "--eval-every", "2", "--no-inference", "--quiet"]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("ts") / "study"
    assert main(["train-study", *TINY, "--out", str(out)]) == 0
    return out


def _run_ids(out):
    lines = (out / "runs.csv").read_text().splitlines()[1:]
    return [ln.split(",", 1)[0] for ln in lines]


def test_the_study_reports_each_run_once(study):
    assert sorted(_run_ids(study)) == ["bf16-s0", "bf16-s1", "fp32-s0", "fp32-s1"]


@pytest.mark.parametrize("edit", ["copy", "rename"])
@pytest.mark.parametrize("report_only", [True, False])
def test_a_copied_or_renamed_run_file_is_refused_not_counted_twice(study, tmp_path, capsys, edit, report_only):
    out = tmp_path / "o"
    shutil.copytree(study, out)
    src = out / "runs" / "bf16-s0.json"
    dst = out / "runs" / ("bf16-s0 copy.json" if edit == "copy" else "bf16-s7.json")
    (shutil.copy if edit == "copy" else shutil.move)(src, dst)
    (out / "runs.csv").unlink()
    argv = ["train-study", *TINY, "--out", str(out)] + (["--report-only"] if report_only else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{dst.name} holds run 'bf16-s0'" in err and "runs/bf16-s0.json" in err
    assert not (out / "runs.csv").exists()
    # renamed: bf16-s0 is missing, and is refused before it is trained again (not after)
    assert (out / "runs" / "bf16-s0.json").exists() == (edit == "copy")


@pytest.mark.parametrize("option", [["--workers", "3"], ["--scheduler", "tcp://127.0.0.1:8786"]])
def test_report_only_refuses_the_workers_it_would_ignore(study, tmp_path, capsys, option):
    out = tmp_path / "o"
    shutil.copytree(study, out)
    (out / "provenance.csv").unlink()
    assert main(["train-study", *TINY, "--out", str(out), "--report-only", *option]) == 2
    assert f"--report-only trains nothing: {option[0]} would be ignored" in capsys.readouterr().err
    assert not (out / "provenance.csv").exists()


def test_the_reports_seed_count_is_the_runs_not_the_options(study, tmp_path):
    out = tmp_path / "o"
    shutil.copytree(study, out)
    argv = ["train-study", *TINY, "--out", str(out), "--report-only"]
    argv[argv.index("--seeds") + 1] = "5"        # the folder holds two seeds per baseline
    assert main(argv) == 0
    prov = dict(ln.split(",", 1) for ln in (out / "provenance.csv").read_text().splitlines()[1:])
    assert prov["seeds"] == '"0 per recipe x stack, 2 per baseline"'
    assert prov["diagnostics"] == "none"
    assert "| seeds | 0 per recipe x stack, 2 per baseline |" in (out / "report.md").read_text()
