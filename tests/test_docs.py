"""The README's format table and examples, and every docstring example, must stay true."""

import doctest
import re
from pathlib import Path

import pytest

import fp8emu

ROOT = Path(__file__).resolve().parents[1]


def test_readme_starts_with_the_two_commands():
    lines = [l for l in (ROOT / "README.md").read_text().splitlines() if l.strip()]
    assert lines[1:5] == ["```", "pip install -e '.[dev]' && fp8emu study --demo", "pytest", "```"]


def test_readme_format_table_is_generated():
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- format-table:start -->\n(.*?)\n<!-- format-table:end -->", text, re.S)
    assert m and m.group(1) == fp8emu.format_table()


def test_readme_python_blocks_run():
    text = (ROOT / "README.md").read_text()
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        exec(compile(block, "README.md", "exec"), {})


def _modules():
    import importlib
    import pkgutil
    for info in pkgutil.walk_packages(fp8emu.__path__, prefix="fp8emu."):
        if info.name == "fp8emu.__main__":   # importing it runs the command line
            continue
        yield importlib.import_module(info.name)


@pytest.mark.parametrize("mod", list(_modules()), ids=lambda m: m.__name__)
def test_docstring_examples(mod):
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert res.failed == 0
