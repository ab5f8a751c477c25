"""Docs that cannot drift: extras, the torch version bound, the headless notebook command, lab numbers."""

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
GETTING_STARTED = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")


def test_getting_started_names_every_extra():
    for name in EXTRAS:
        assert f"`[{name}]`" in GETTING_STARTED, name


def test_the_torch_bound_is_the_same_in_the_code_the_extra_and_the_guide():
    # read from the source: the adapter's module cannot be imported without torch
    src = (ROOT / "fp8emu" / "torch" / "swap.py").read_text(encoding="utf-8")
    code = tuple(int(v) for v in re.search(r"^MIN_TORCH = \((\d+), (\d+)\)$", src, re.M).groups())
    (req,) = [r for r in EXTRAS["torch"] if r.startswith("torch")]
    extra = tuple(int(v) for v in re.fullmatch(r"torch>=(\d+)\.(\d+)", req).groups())
    assert code == extra
    guide = (ROOT / "docs" / "guides" / "torch.md").read_text(encoding="utf-8")
    assert f"torch {code[0]}.{code[1]} or later" in guide


def _headless_command():
    block = re.search(r"```\npip install -e '\.\[dev,torch\]'\n(jupyter execute [^\n]+)\n```", GETTING_STARTED)
    assert block, "getting-started lost its headless notebook command"
    return shlex.split(block.group(1))


def test_the_headless_notebook_command_comes_with_the_dev_extra():
    words = _headless_command()
    assert (ROOT / words[2]).exists()
    # `jupyter execute` is nbclient's console script, and nbclient is in [dev]
    assert any(r.startswith("nbclient") for r in EXTRAS["dev"])
    try:
        scripts = {e.name for e in metadata.distribution("nbclient").entry_points if e.group == "console_scripts"}
    except metadata.PackageNotFoundError:
        pytest.skip("nbclient is not installed (the dev extra installs it)")
    assert "jupyter-execute" in scripts


def test_the_headless_notebook_command_runs_a_notebook(tmp_path):
    jupyter = shutil.which("jupyter", path=str(Path(sys.executable).parent))
    if jupyter is None or not any(
            e.name == "jupyter-execute" for e in metadata.distribution("nbclient").entry_points):
        pytest.skip("jupyter execute is not installed (the dev extra installs it)")
    words = _headless_command()
    # the documented command on the quickest notebook (06 needs torch and minutes); nothing is written
    nb = "notebooks/01_formats_tour.ipynb"
    before = sorted(p.name for p in (ROOT / "notebooks").iterdir())
    r = subprocess.run([jupyter, *words[1:-1], nb], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert sorted(p.name for p in (ROOT / "notebooks").iterdir()) == before


def test_lab_guide_states_the_fp4_student_t_sqnr_with_its_sample_size():
    from fp8emu.lab import analysis

    text = " ".join((ROOT / "docs" / "guides" / "lab.md").read_text(encoding="utf-8").split())
    m = re.search(r"only (\d+) dB \(Gaussian\) and (\d+) dB \(Student-t, ν = 3\) on the figure's samples "
                  r"\((\d+) values, seed 0\)\. .*? over ten seeds of (\d+) values it ranges from ([\d.]+) to "
                  r"([\d.]+) dB \(median ([\d.]+) dB\), and the median falls as samples grow: ([\d.]+) dB at "
                  r"n = (\d+), ([\d.]+) dB at n = (\d+)\.", text)
    assert m, "lab.md's FP4 SQNR sentence changed shape"
    gauss, student, n_fig, n_seeds, lo, hi, med, med1, n1, med2, n2 = m.groups()
    # the figure's own call (fp8emu.lab.plots.figure_sqnr_vs_scale at size 1: both distributions, n = 16384)
    src = (ROOT / "fp8emu" / "lab" / "plots.py").read_text(encoding="utf-8")
    assert "n = max(256, int(16384 * size))" in src and n_fig == n_seeds == "16384"
    assert 'analysis.sweep_scale(fmts, ["gaussian", "student_t"], scales, n=n' in src

    def sqnr(n, dist, dists, seed=0):
        t = analysis.sweep_scale(["e2m1fn"], dists, [1.0], n=n, recipes=("tensor",), seed=seed)
        return float(np.asarray(t.where(format="e2m1fn", distribution=dist, recipe="tensor")["sqnr_db"])[0])

    both = ["gaussian", "student_t"]
    assert f"{sqnr(16384, 'gaussian', both):.0f}" == gauss
    assert f"{sqnr(16384, 'student_t', both):.0f}" == student
    spread = [sqnr(16384, "student_t", ["student_t"], s) for s in range(10)]
    assert (f"{min(spread):.1f}", f"{max(spread):.1f}", f"{np.median(spread):.1f}") == (lo, hi, med)
    for n, want in ((n1, med1), (n2, med2)):
        assert f"{np.median([sqnr(int(n), 'student_t', ['student_t'], s) for s in range(10)]):.1f}" == want
