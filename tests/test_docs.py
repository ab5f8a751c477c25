"""The README's two commands and example, the docs' format table and training numbers, and every docstring
example must stay true (the other pages' examples: tests/test_docs_site.py)."""

import doctest
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
