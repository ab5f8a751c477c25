"""The documentation site: every public name has a reference entry and an example, every page's
Python example runs, the generated tables are the code's, the version is one, and the site checker
(tools/check_docs_site.py, run by .ci/docs on the built site) finds what it is meant to find.

Code blocks fenced ```python in the pages are run; snippets that need a GPU are fenced ```py.
"""

import doctest
import importlib
import inspect
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import fp8emu

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(ROOT / "tools"))
import check_docs_site  # noqa: E402
import fp8emu_docs  # noqa: E402

PAGES = sorted(p for p in DOCS.rglob("*.md") if not {"_build", "_generated"} & set(p.relative_to(DOCS).parts))


# ----------------------------------------------------------------------------- reference entries
def test_every_module_with_all_is_in_the_reference():
    have = set(fp8emu_docs.documented_modules())
    need = set(fp8emu_docs.modules_with_all())
    assert need - have == set(), "modules with __all__ missing from API_SECTIONS (docs/_ext/fp8emu_docs.py)"
    assert have - need == set(), "API_SECTIONS names modules without __all__"


def test_every_public_name_has_a_reference_entry():
    entries = fp8emu_docs.api_entries()
    pages = {m: fp8emu_docs._api_page(m, [e for e in entries if e[0] == m]) for m in fp8emu_docs.documented_modules()}
    for modname in fp8emu_docs.documented_modules():
        mod = importlib.import_module(modname)
        listed = [e for e in entries if e[0] == modname]
        assert [e[1] for e in listed] == list(mod.__all__), modname
        for _, name, canonical, kind in listed:
            home = canonical.rsplit(".", 1)[0]
            directive = {"class": "autoclass", "function": "autofunction", "data": "autodata"}[kind]
            assert f".. {directive}:: {canonical}\n" in pages[home], (modname, name)
            # the page of every module exporting it lists it
            assert re.search(rf"^   ~?\S*\b{re.escape(name)}$", pages[modname], re.M), (modname, name)


def test_built_inventory_has_every_public_name():
    inv = DOCS / "_build" / "html" / "objects.inv"
    if not inv.exists():
        pytest.skip("the site is not built (bash .ci/docs builds it)")
    from sphinx.util.inventory import InventoryFile
    inv_data = InventoryFile.loads(inv.read_bytes(), uri="")
    data = getattr(inv_data, "data", inv_data)            # Sphinx >= 8.2 wraps the dict
    names = {n for objects in data.values() for n in objects}
    missing = sorted({c for _, _, c, _ in fp8emu_docs.api_entries()} - names)
    assert not missing, f"public names missing from the built reference: {missing[:10]}"


# ----------------------------------------------------------------------------- examples
def _data_comment(module, name) -> bool:
    src = inspect.getsource(module)
    return re.search(rf"^#:.*\n(#:.*\n)*{re.escape(name)}\s*[:=]", src, re.M) is not None \
        or re.search(rf"^{re.escape(name)}\s*[:=].*#:", src, re.M) is not None


def _doctest_sources(module) -> str:
    finder = doctest.DocTestFinder(exclude_empty=True)
    return "\n".join(ex.source for t in finder.find(module) for ex in t.examples)


def _scope():
    for modname in fp8emu_docs.EXAMPLE_SCOPE:
        mod = importlib.import_module(modname)
        for name in mod.__all__:
            yield modname, name


@pytest.mark.parametrize("modname, name", list(_scope()), ids=lambda v: v)
def test_every_public_name_has_an_example(modname, name):
    obj = getattr(importlib.import_module(modname), name)
    if fp8emu_docs.is_routine(obj):
        doc = inspect.getdoc(obj) or ""
        assert ">>>" in doc, f"{modname}.{name}: its docstring has no example (an Examples section with >>>)"
        return
    canonical = next(c for m, n, c, _ in fp8emu_docs.api_entries() if (m, n) == (modname, name))
    home = importlib.import_module(fp8emu_docs.data_module(canonical))
    assert _data_comment(home, name), f"{canonical}: no #: comment (its reference text) where it is defined"
    assert re.search(rf"\b{re.escape(name)}\b", _doctest_sources(home)), \
        f"{canonical}: no docstring example of {home.__name__} uses it"


def _python_blocks():
    for page in PAGES:
        for i, block in enumerate(re.findall(r"^```python\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M)):
            yield pytest.param(page, block, id=f"{page.relative_to(DOCS)}#{i}")


@pytest.mark.parametrize("page, block", list(_python_blocks()))
def test_page_python_blocks_run(page, block, tmp_path, monkeypatch):
    if "fp8emu.torch" in block:
        pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    exec(compile(block, str(page), "exec"), {"__name__": "__docs__"})


def test_guides_cover_every_task():
    titles = {p.stem: p.read_text(encoding="utf-8").split("\n# ", 1)[-1].splitlines()[0]
              for p in (DOCS / "guides").glob("*.md")}
    assert set(titles) >= {"validate-kernel", "profiles", "scaling", "gemm", "block-scaled", "study",
                           "attention", "lab"}
    kernel = (DOCS / "guides" / "validate-kernel.md").read_text(encoding="utf-8")
    for heading in ("## torch", "## JAX", "## Triton", "## CUDA C"):
        assert heading in kernel
    if importlib.util.find_spec("fp8emu.attention") is None:
        assert "Coming" in (DOCS / "guides" / "attention.md").read_text(encoding="utf-8")


def test_gallery_has_every_committed_figure():
    figures = sorted(p.stem for p in (ROOT / "figures").glob("*.png"))
    examples = sorted(p.stem[len("plot_"):] for p in (DOCS / "examples").glob("plot_*.py"))
    assert figures == examples
    from fp8emu.lab import plots
    slow = {"fig11_attention"}       # tens of minutes at full size: the page shows the committed file
    for name in plots.FIGURES:       # the lab's figures are drawn by the page, with their own function
        src = (DOCS / "examples" / f"plot_{name}.py").read_text(encoding="utf-8")
        if name in slow:
            assert f'"figures" / "{name}.png"' in src and f"--only {name}" in src, name
        else:
            assert f"fig = plots.{plots.FIGURES[name].__name__}()" in src, name


# ----------------------------------------------------------------------------- generated tables
def test_every_generated_table_is_included_by_a_page():
    text = "\n".join(p.read_text(encoding="utf-8") for p in PAGES)
    for name in fp8emu_docs.TABLES:
        assert f"```{{include}} ../_generated/{name}\n```" in text, name


def test_generated_tables_come_from_the_code():
    from fp8emu.gemm import MODELS
    from fp8emu.lab.recipes import recipe_names

    profiles = fp8emu_docs.profiles_table().splitlines()[2:]
    assert [r.split("|")[1].strip(" `") for r in profiles] == list(fp8emu.profile_names())
    acc = fp8emu_docs.accumulators_table()
    for name in MODELS:
        assert f"| `{name}` |" in acc
    assert "| `hopper` | instruction | `hopper-wgmma` | `4` | `'cublas'` | `None` | ieee |" in acc
    recipes = fp8emu_docs.recipes_table().splitlines()[2:]
    assert [r.split("|")[1].strip(" `") for r in recipes] == recipe_names()
    cli = fp8emu_docs.cli_help()
    from fp8emu.cli import COMMANDS
    for name in COMMANDS:
        assert f"## `fp8emu {name}`" in cli and f"usage: fp8emu {name}" in cli


# ----------------------------------------------------------------------------- README and metadata
def test_readme_fits_on_two_screens_and_links_into_the_docs():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert links and all((ROOT / l).exists() for l in links if "://" not in l), links
    assert "docs/guides/validate-kernel.md" in links and "docs/_static/landing.png" in links
    assert "pip install fp8emu`\ndoes not work" in text


def test_one_version_for_package_cli_and_docs():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in meta["project"] and meta["project"]["dynamic"] == ["version"]
    assert meta["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "fp8emu.version.__version__"}
    assert fp8emu.version.__version__ is fp8emu.__version__
    out = subprocess.run([sys.executable, "-m", "fp8emu", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == f"fp8emu {fp8emu.__version__}"
    assert "version = release = fp8emu.__version__" in (DOCS / "conf.py").read_text()
    assert re.fullmatch(r"\d+\.\d+\.\d+", fp8emu.__version__)
    from importlib.metadata import PackageNotFoundError, version
    try:
        assert version("fp8emu") == fp8emu.__version__
    except PackageNotFoundError:
        pass


def test_package_metadata_a_publisher_expects():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # No project URLs until the project has a public address: a made-up one would be a false claim.
    assert "urls" not in meta
    assert any(c.startswith("Programming Language :: Python :: 3.1") for c in meta["classifiers"])
    assert "fp8emu[docs]" in meta["optional-dependencies"]["dev"]
    assert "## [Unreleased]" in (ROOT / "CHANGELOG.md").read_text()


# ----------------------------------------------------------------------------- the site checker
def _tiny_site(root: Path, *, broken=False):
    from PIL import Image
    (root / "sub").mkdir(parents=True)
    Image.new("RGB", (4, 3), "red").save(root / "ok.png")
    (root / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n not an image")
    img = "bad.png" if broken else "ok.png"
    (root / "index.html").write_text(
        f'<html><head><title>t</title><link rel="stylesheet" href="s.css"></head><body><main id="top">'
        f'<a href="sub/page.html#there">x</a><a href="{"missing.html" if broken else "sub/page.html"}">y</a>'
        f'<a href="#{"nowhere" if broken else "top"}">z</a><a href="https://example.org/">ext</a>'
        f'<img src="{img}"></main></body></html>')
    (root / "s.css").write_text("body { margin: 0 }")
    (root / "sub" / "page.html").write_text(
        '<html><head><title>p</title><link rel="stylesheet" href="../s.css"></head>'
        '<body><article><h1 id="there">p</h1><a href="../index.html#top">back</a></article></body></html>')


def test_link_checker_finds_missing_files_and_anchors(tmp_path):
    _tiny_site(tmp_path / "good")
    assert check_docs_site.check_links(tmp_path / "good") == []
    _tiny_site(tmp_path / "bad", broken=True)
    problems = check_docs_site.check_links(tmp_path / "bad")
    assert len(problems) == 2
    assert any("missing.html" in p and "no such file" in p for p in problems)
    assert any("no anchor #nowhere" in p for p in problems)


def test_image_check_finds_an_image_that_does_not_decode(tmp_path):
    _tiny_site(tmp_path)
    n, problems = check_docs_site.check_images(tmp_path)
    assert n == 2 and len(problems) == 1 and problems[0].startswith("bad.png: does not decode")


@pytest.mark.skipif(not (shutil.which("chromium") or shutil.which("chromium-browser")),
                    reason="chromium is not installed (Debian: apt-get install chromium; .ci/docs installs it)")
def test_browser_check_loads_every_page_and_finds_a_broken_image(tmp_path):
    exe = check_docs_site.chromium()
    _tiny_site(tmp_path / "good")
    n, problems = check_docs_site.check_in_browser(tmp_path / "good", exe, timeout=120)
    assert (n, problems) == (2, [])
    _tiny_site(tmp_path / "bad", broken=True)
    n, problems = check_docs_site.check_in_browser(tmp_path / "bad", exe, timeout=120)
    assert n == 2 and problems == ["index.html: image 'bad.png' did not decode in Chromium"]
