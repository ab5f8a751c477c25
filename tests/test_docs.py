"""The README's two commands and example, the docs' format table and training numbers, and every docstring
example must stay true (the other pages' examples: tests/test_docs_site.py)."""

import doctest
import math
import re
from pathlib import Path

import pytest

import fp8emu

ROOT = Path(__file__).resolve().parents[1]


def test_readme_starts_with_the_two_commands():
    lines = [l for l in (ROOT / "README.md").read_text().splitlines() if l.strip()]
    assert lines[1:5] == ["```", "pip install -e '.[dev]' && fp8emu study --demo", "pytest", "```"]


def test_format_table_page_is_generated():
    # The formats page includes the table that the docs build generates with fp8emu.format_table().
    import sys
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    import fp8emu_docs
    text = (ROOT / "docs" / "reference" / "formats.md").read_text()
    assert "```{include} ../_generated/formats.md\n```" in text
    assert fp8emu_docs.TABLES["formats.md"]() == fp8emu.format_table()
    assert fp8emu.format_table().splitlines()[2].startswith("| e4m3fn | 8 | 4 | 3 | 7 | 448 | 2^-6 | 2^-9 |")


def test_readme_catalogue_is_the_generated_one():
    # the README's table of matrix-instruction presets is fp8emu.gemm.presets() as generated: it cannot
    # drift from the evidence the tests check
    import sys
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    import fp8emu_docs
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- catalogue: generated[^\n]*-->\n(.*?)\n<!-- catalogue end -->", text, re.S)
    assert block is not None
    assert block.group(1) == fp8emu_docs.readme_catalogue()
    assert block.group(1).count("\n| `") == len(fp8emu.gemm.presets())


def test_readme_python_blocks_run():
    text = (ROOT / "README.md").read_text()
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        exec(compile(block, "README.md", "exec"), {})


def _modules():
    import importlib
    import importlib.util
    import pkgutil
    for info in pkgutil.walk_packages(fp8emu.__path__, prefix="fp8emu."):
        if info.name == "fp8emu.__main__":   # importing it runs the command line
            continue
        if info.name.startswith("fp8emu.torch") and importlib.util.find_spec("torch") is None:
            continue                           # the optional torch adapter needs torch
        yield importlib.import_module(info.name)


@pytest.mark.parametrize("mod", list(_modules()), ids=lambda m: m.__name__)
def test_docstring_examples(mod):
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert res.failed == 0


def test_lab_guide_training_table_reproduces():
    # The numerics-lab guide promises these numbers on any machine (no BLAS, fixed summation
    # order): this test runs wherever the suite runs (CI included), so every machine that passes
    # it is one more on which they reproduced.
    from fp8emu.lab import train

    text = (ROOT / "docs" / "guides" / "lab.md").read_text()
    rows = {}
    for name, key in (("float32", "float32"), ("FP8 (HYBRID, delayed)", "fp8")):
        m = re.search(r"^\| " + re.escape(name) + r" \| ([0-9.]+) \| ([0-9.]+) \|(.*)$", text, re.M)
        assert m, f"lab guide training table row {name!r} not found"
        rows[key] = m
    res = train.compare()
    for key, m in rows.items():
        assert f"{res[key]['final_loss']:.4f}" == m.group(1), key
        assert f"{res[key]['accuracy']:.4f}" == m.group(2), key
    counts = [c.strip() for c in rows["fp8"].group(3).strip(" |").split("|")]
    r = res["fp8"]
    assert counts == ["/".join(str(r[f"{k}_{what}"]) for k in "xwg").replace("/", " / ")
                      for what in ("overflow", "underflow", "count")]


def test_lab_extra_installs_a_notebook_front_end_and_getting_started_names_it():
    # After the documented install, `jupyter lab notebooks/` must exist (the dev extra only runs them headless).
    import tomllib
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(req.startswith("jupyterlab") for req in extras["lab"])
    text = (ROOT / "docs" / "getting-started.md").read_text()
    assert "pip install -e '.[dev,lab]'\njupyter lab notebooks/\n" in text and "`[lab]`" in text


def test_ci_docs_refuses_to_pip_install_outside_a_virtual_environment(tmp_path):
    # A python3 that is no venv (the base interpreter) and, run with -S, has no docs packages: .ci/docs must
    # stop with one clear message before installing anything or touching the build folders.
    import os
    import subprocess
    import sys
    base = Path(sys.base_prefix) / "bin" / "python3"
    if not base.is_file():
        pytest.skip(f"no base interpreter at {base}")
    fake = tmp_path / "python3"
    fake.write_text(f'#!/bin/sh\nexec {base} -S "$@"\n')
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("CONDA_PREFIX", "VIRTUAL_ENV")}
    env["PATH"] = f"{tmp_path}:{env['PATH']}"
    r = subprocess.run(["bash", str(ROOT / ".ci" / "docs")], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "is not a virtual environment" in r.stderr and "python3 -m venv .venv" in r.stderr
    assert "installing" not in r.stdout


def test_validate_kernel_cpu_scaled_mm_note_holds():
    # The guide's CPU snippet runs as written (the exact preset, scale 0.3, 0 ulp), and its claim that a
    # non-power-of-two scale breaks the fp32 match is true on this machine (torch's CPU kernel, here and now).
    torch = pytest.importorskip("torch")
    import numpy as np
    text = (ROOT / "docs" / "guides" / "validate-kernel.md").read_text()
    note = text.split("(validate-torch-cpu-scaled-mm)=", 1)[1]
    block = re.search(r"```py\n# needs torch; runs on the CPU\n(.*?)```", note, re.S).group(1)
    torch.manual_seed(0)
    exec(compile(block, "validate-kernel.md", "exec"), {})
    import fp8emu
    a = torch.randn(32, 256).to(torch.float8_e4m3fn)
    b = torch.randn(16, 256).to(torch.float8_e4m3fn).t()
    got = torch._scaled_mm(a, b, scale_a=torch.tensor(0.3), scale_b=torch.tensor(1.0), out_dtype=torch.float32)
    want = fp8emu.scaled_mm(a.view(torch.uint8).numpy(), b.contiguous().view(torch.uint8).numpy(),
                            a_format="e4m3fn", b_format="e4m3fn", scale_a=0.3, accumulator="fp32")
    assert np.mean(got.numpy() == np.asarray(want)) < 0.5


def test_study_guide_numbers_are_the_demo_study(demo_study):
    """docs/guides/study.md said NVFP4's median is 20.4 dB when the demo study gave 20.5. Every
    number of its "What it shows" paragraph is now read back and compared with the study's own output
    (``fp8emu study --demo``'s results.csv: tests/conftest.py runs it once for the session)."""
    import statistics
    from fp8emu.lab import study
    text = " ".join((ROOT / "docs" / "guides" / "study.md").read_text().split())
    para = text[text.index("What it shows"):text.index("(study-dask)")]
    nums = lambda pat: [float(v) for v in re.search(pat, para).groups()]   # noqa: E731
    rows = study.read_results(demo_study / "results.csv")

    def col(recipe, key="sqnr_db", where=lambda r: True):
        return [float(r[key]) for r in rows if r["recipe"] == recipe and where(r)]

    def med(recipe):
        return round(statistics.median(col(recipe)), 1)
    assert nums(r"keep a median of (\d+) dB") == [round(med("cast-e4m3fn-ocp"))]
    proj = lambda r: r["dtype"] == "bfloat16" and r["tensor"].endswith(("proj.weight", "embed_tokens.weight"))  # noqa
    sub = [round(100 * v) for v in col("cast-e4m3fn-ocp", "frac_subnormal", proj)]
    flush = [round(100 * v) for v in col("cast-e4m3fn-ocp", "frac_flushed", proj)]
    assert nums(r"\((\d+)-(\d+) % of the projection") == [min(sub), max(sub)]
    assert nums(r"subnormal, (\d+)-(\d+) % flush") == [min(flush), max(flush)]
    assert nums(r"scale fixes that \(median ([\d.]+) dB\)") == [med("tensor-e4m3fn")]
    acts = lambda r: r["tensor"].startswith("activations")   # noqa: E731
    assert nums(r"outlier-channel activations \((\d+) dB\)") == [round(max(col("row-e4m3fn", where=acts)))]
    assert nums(r"NVFP4 \(median ([\d.]+) dB\) beats MXFP4 \(([\d.]+) dB\)") == [med("nvfp4"), med("mx-e2m1fn-floor")]
    kl = [v for v in col("calib-kl-e4m3fn", where=lambda r: r["tensor"].endswith("mlp_input"))]
    assert nums(r"drops them to (\d+)-(\d+) dB") == [math.floor(min(kl)), math.floor(max(kl))]


def test_no_page_is_announced_as_coming():
    """The guides index called FP8 attention "coming" after its guide was published."""
    for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        assert "(coming)" not in p.read_text(), p


def test_validate_kernel_guide_golden_options_run(tmp_path, capsys):
    """The guide's `golden --exhaustive` example failed (exhaustive vectors need a 16-bit source)."""
    import shlex
    from fp8emu.cli import main
    text = " ".join((ROOT / "docs" / "guides" / "validate-kernel.md").read_text().split())
    sentence = text[text.index("Other outputs:"):]
    sentence = sentence[:sentence.index(". ")]
    groups = [g for g in re.findall(r"`(--[^`]+)`", sentence) if g.startswith(("--exhaustive", "--rounding"))]
    assert len(groups) == 2
    for g in groups:
        assert main(["golden", "--format", "e4m3fn", *shlex.split(g), "--out", str(tmp_path / "v.npz")]) == 0, \
            capsys.readouterr().err
