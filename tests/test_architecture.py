"""The package's shape: one-way layers, no cycles, no lazy imports of fp8emu modules, objects used as given."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fp8emu
from fp8emu.formats import Format
from fp8emu.profiles import Profile, Rule

PKG = Path(fp8emu.__file__).resolve().parent

# Layer of each module (by dotted name prefix, longest match wins); imports may only go to the same
# layer or below.  A new module must be given a layer here.
LAYERS = {
    "fp8emu.data": 0, "fp8emu.version": 0, "fp8emu.interop": 0, "fp8emu.registry": 0, "fp8emu.parallel": 0,
    "fp8emu.readers": 0,
    "fp8emu.formats": 1, "fp8emu.rounding": 2, "fp8emu.random_bits": 2, "fp8emu.tables": 3, "fp8emu.profiles": 4,
    "fp8emu.codec": 5, "fp8emu.hifloat": 5,
    "fp8emu.scaling": 6, "fp8emu.gemm": 6, "fp8emu.describe": 6, "fp8emu.testing": 6,
    "fp8emu.conformance": 6, "fp8emu.layouts": 6, "fp8emu.gpu": 6, "fp8emu.engines": 6,
    "fp8emu.metrics": 6,
    "fp8emu.training": 6,   # training recipes and GPU stacks: framework-free, for NumPy, Dask, the lab and torch
    "fp8emu.lab.recipes": 6,   # the study's recipe matrix sits with the study, below dask, which runs it
    "fp8emu.dask": 7, "fp8emu.attention": 7,
    "fp8emu.lab": 8,
    "fp8emu.cli": 9, "fp8emu.__main__": 9,
    "fp8emu.torch": 9,   # the torch adapter, at the top with the command line
    "fp8emu.torch.te": 9,   # Transformer Engine's API on the adapter's emulated GEMMs
    "fp8emu": 10,   # the package's __init__ re-exports the public API
}


def _modules():
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_pkg)
    return out


MODULES = _modules()


def _from_target(mod, is_pkg, node):
    """The module a ``from ... import`` statement inside module ``mod`` names."""
    if not node.level:
        return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _resolve(mod, is_pkg, node):
    """fp8emu modules named by an import statement inside module ``mod``."""
    names = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        target = _from_target(mod, is_pkg, node)
        for a in node.names:
            sub = f"{target}.{a.name}"
            names.append(sub if sub in MODULES else target)
    return [n for n in names if n == "fp8emu" or n.startswith("fp8emu.")]


def _layer(mod):
    best = max((p for p in LAYERS if mod == p or mod.startswith(p + ".")), key=len, default=None)
    return None if best is None else LAYERS[best]


def _edges():
    """(module-level edges, function-local fp8emu imports, imports from tests)."""
    edges, local, from_tests = {}, [], []
    for mod, (path, is_pkg) in MODULES.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
        in_func = {id(x) for f in funcs for x in ast.walk(f) if x is not f}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            raw = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(r == "tests" or r.startswith(("tests.", "oracle", "conftest")) for r in raw):
                from_tests.append((mod, node.lineno))
            targets = [t for t in _resolve(mod, is_pkg, node) if t != mod]
            if id(node) in in_func and targets:
                local.append((mod, node.lineno, targets))
            elif targets:
                edges.setdefault(mod, set()).update(targets)
    return edges, local, from_tests


def test_every_module_has_a_layer():
    missing = [m for m in MODULES if _layer(m) is None]
    assert not missing, f"give these modules a layer in tests/test_architecture.py: {missing}"


def test_no_function_local_imports_of_fp8emu_modules_and_none_from_tests():
    _, local, from_tests = _edges()
    assert not local, f"function-local imports of fp8emu modules: {local}"
    assert not from_tests, f"fp8emu modules importing from tests: {from_tests}"


def test_imports_go_down_the_layers():
    edges, _, _ = _edges()
    bad = [(a, b) for a, bs in edges.items() for b in bs
           if b != "fp8emu" and _layer(b) is not None and _layer(a) is not None and _layer(b) > _layer(a)]
    assert not bad, f"imports against the layer order: {sorted(bad)}"
    upward_to_package = [a for a, bs in edges.items() if "fp8emu" in bs and a != "fp8emu"]
    assert not upward_to_package, f"modules importing names from the fp8emu package itself: {upward_to_package}"


def _cycles(edges):
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for n in sorted(edges.get(m, ())):
            if n == "fp8emu":
                continue
            if state.get(n) == 1:
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(set(edges) | {n for ns in edges.values() for n in ns}):
        if m not in state:
            visit(m)
    return cycles


def test_no_import_cycles():
    edges, _, _ = _edges()
    cycles = _cycles(edges)
    assert not cycles, f"import cycles: {cycles}"


def test_the_checker_can_fail():
    # The checks above must be able to fail: a synthetic cycle, and relative imports resolved right.
    assert _cycles({"fp8emu.a": {"fp8emu.b"}, "fp8emu.b": {"fp8emu.c"}, "fp8emu.c": {"fp8emu.a"}})
    assert not _cycles({"fp8emu.a": {"fp8emu.b"}, "fp8emu.b": {"fp8emu.c"}})
    tree = ast.parse("from ..codec import encode\nfrom . import analysis\nfrom .. import scaling\n")
    got = [_resolve("fp8emu.lab.plots", False, n) for n in tree.body]
    assert got == [["fp8emu.codec"], ["fp8emu.lab.analysis"], ["fp8emu.scaling"]]


# ----------------------------------------------------------------------------- public seams
def _private_crossings(mod, is_pkg, tree):
    """(module, name) of every private name ``mod`` takes from another fp8emu module: ``from X import
    _name`` and ``X._name`` where X is a module bound by an import (dunders are not private)."""
    out, aliases = set(), {}

    def private(name):
        return name.startswith("_") and not name.startswith("__")

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _from_target(mod, is_pkg, node)
            if not target.startswith("fp8emu"):
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                if sub in MODULES:
                    aliases[a.asname or a.name] = sub
                elif private(a.name) and target != mod:
                    out.add((target, a.name))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("fp8emu"):
                    # "import fp8emu.x.y as z" binds z to fp8emu.x.y; without "as", fp8emu is bound
                    aliases[a.asname or "fp8emu"] = a.name if a.asname else "fp8emu"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            chain, v = [], node.value
            while isinstance(v, ast.Attribute):
                chain.append(v.attr)
                v = v.value
            if isinstance(v, ast.Name) and v.id in aliases:
                target = ".".join([aliases[v.id]] + chain[::-1])
                if target in MODULES and target != mod:
                    out.add((target, node.attr))
    return out


def _all_private_crossings():
    out = {}
    for mod, (path, is_pkg) in MODULES.items():
        for target, name in _private_crossings(mod, is_pkg, ast.parse(path.read_text(), filename=str(path))):
            out.setdefault((mod, target), set()).add(name)
    return out


# The private names allowed to cross a module boundary, by (importer, the module defining them), each
# with its reason: none.  A helper that several modules share has a public name in a module of its own
# (the GEMM datapaths' output types, aligned sums, per-code tables, wide inputs and instruction inputs;
# attention's input checks, operands and GEMMs).  An entry that no longer crosses fails the test too.
ALLOWED_PRIVATE: dict = {}


def test_no_module_imports_another_modules_private_names():
    got = _all_private_crossings()
    new = {k: sorted(v - ALLOWED_PRIVATE.get(k, (set(), ""))[0]) for k, v in got.items()}
    new = {k: v for k, v in new.items() if v}
    assert not new, ("private names crossing a module boundary (give a helper that several modules share a "
                     f"public name in a module of its own): {new}")
    gone = {k: sorted(names - got.get(k, set())) for k, (names, _) in ALLOWED_PRIVATE.items()}
    gone = {k: v for k, v in gone.items() if v}
    assert not gone, f"these no longer cross: take them out of ALLOWED_PRIVATE: {gone}"


def test_the_private_name_checker_can_fail():
    src = ("from .codes import _pair_tables, pair_decode\nfrom . import steps\nfrom ..datapaths import _pow2\n"
           "import fp8emu.gemm.kernels as k\nfrom .exact import __doc__\n"
           "x = steps._halves(k._value_tables, steps.halves)\n_own = 1\n")
    got = _private_crossings("fp8emu.gemm.routes.tables", False, ast.parse(src))
    assert got == {("fp8emu.gemm.routes.codes", "_pair_tables"), ("fp8emu.gemm.routes.steps", "_halves"),
                   ("fp8emu.gemm.datapaths", "_pow2"), ("fp8emu.gemm.kernels", "_value_tables")}
    # a package's own submodules cross a boundary too
    got = _private_crossings("fp8emu.gemm.routes", True, ast.parse("from .exact import _run_exact\n"))
    assert got == {("fp8emu.gemm.routes.exact", "_run_exact")}


# ----------------------------------------------------------------------------- the architecture page
ROOT = PKG.parent
sys.path.insert(0, str(ROOT / "tools"))
import make_architecture_figure  # noqa: E402


def test_the_architecture_figure_shows_the_layers_as_they_are():
    from PIL import Image

    table = make_architecture_figure.layer_table(LAYERS, MODULES)
    assert sum(c for _, row in table for _, c in row) == len(MODULES)
    with Image.open(ROOT / "figures" / "architecture.png") as im:
        drawn = im.text.get("Description")
    assert drawn == make_architecture_figure.summary(table), \
        "figures/architecture.png is not the layers as they are: run python3 tools/make_architecture_figure.py"


def test_the_architecture_page_has_one_paragraph_per_layer_with_its_numbers():
    import re

    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = make_architecture_figure.layer_table(LAYERS, MODULES)
    assert f"fp8emu is {len(MODULES)} modules in {len(table)} layers." in " ".join(text.split())
    paragraphs = re.findall(r"^\*\*Layer (\d+),[^*]*\((\d+) modules?\)\.\*\*(.*?)(?=^\*\*Layer |\Z)", text, re.S | re.M)
    assert [int(n) for n, _, _ in paragraphs] == [n for n, _ in table], "one paragraph per layer, bottom up"
    for (n, count, body), (_, row) in zip(paragraphs, table):
        assert int(count) == sum(c for _, c in row), f"layer {n}: the page says {count} modules"
        for prefix, _ in row:
            name = "fp8emu" if prefix == "fp8emu" else prefix[len("fp8emu."):]
            assert f"`{name}`" in body, f"layer {n}'s paragraph does not name `{name}`"
    assert "../figures/architecture.png" in text


def test_no_function_shadows_a_submodule():
    subs = {m.split(".")[1] for m in MODULES if m.count(".") >= 1}
    for name in subs:
        obj = getattr(fp8emu, name, None)
        assert obj is None or type(obj).__name__ == "module", f"fp8emu.{name} is a {type(obj).__name__}"


def test_all_lists_documented_public_names():
    assert len(set(fp8emu.__all__)) == len(fp8emu.__all__)
    for name in fp8emu.__all__:
        obj = getattr(fp8emu, name)
        if callable(obj):
            assert obj.__doc__ and obj.__doc__.strip(), f"fp8emu.{name} has no docstring"
    assert "add_cli" not in fp8emu.__all__


def _run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_table_command_does_not_import_matplotlib():
    r = _run("import sys\nfrom fp8emu.cli import main\nmain(['table', 'e2m1fn'])\n"
             "print('MPL' if 'matplotlib' in sys.modules else 'NOMPL')")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("NOMPL")


def test_plots_keep_the_callers_backend():
    r = _run("import matplotlib\nmatplotlib.use('svg')\nfrom fp8emu.lab import plots\n"
             "fig = plots.figure_values_per_binade(size=0.05)\nprint(matplotlib.get_backend())")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().lower() == "svg"


def test_cli_bad_input_is_one_line_and_exit_2():
    r = subprocess.run([sys.executable, "-m", "fp8emu", "table", "nope"], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.startswith("fp8emu table: error: unknown format 'nope'") and "Traceback" not in r.stderr


# ----------------------------------------------------------------------------- objects used as given
E4M3FN = fp8emu.get_format("e4m3fn")


def test_user_profile_named_like_a_builtin_uses_its_own_rules():
    # cuda-nosat gives NaN (0x7F) for 500; a user's saturating profile of the same name must give 0x7E.
    mine = Profile("cuda-nosat", "user: saturating RNE", {E4M3FN: {"rne": Rule("rne", True)}})
    x = np.array([500.0, -500.0, 1.0], np.float32)
    assert fp8emu.encode(x, "e4m3fn", profile=mine).tolist() == [0x7E, 0xFE, 0x38]
    assert fp8emu.encode(x, "e4m3fn", profile="cuda-nosat").tolist() == [0x7F, 0xFF, 0x38]
    assert fp8emu.encode(x.astype(np.float16), "e4m3fn", profile=mine).tolist() == [0x7E, 0xFE, 0x38]


def test_user_profile_fix_and_decode_fix_are_called():
    def all_ones(table, x, fmt, rule):
        table[...] = 0x11

    def nan_payload(table, fmt, dtype):
        table[np.isnan(table)] = -7.0

    p = Profile("ones", "test", {E4M3FN: {"rtz": Rule("rtz", False, all_ones)}}, decode_fix=nan_payload)
    assert fp8emu.encode(np.float32([3.0]), "e4m3fn", profile=p, rounding="rtz").tolist() == [0x11]
    assert fp8emu.decode([0x7F, 0x38], "e4m3fn", profile=p).tolist() == [-7.0, 1.0]


def test_lookalike_format_is_not_the_builtin():
    ieee = Format("e4m3fn", 4, 3, 7, inf="ieee", nan="ieee")       # IEEE specials under the OCP name
    with pytest.raises(ValueError, match="differs from it"):
        fp8emu.encode(np.float32([1.0]), ieee, profile="torch-cuda-2.11")
    # With the spec profile the look-alike is used as given: 0x78 is its +Inf, 240 its max.
    assert fp8emu.encode(np.float32([np.inf, 240.0, 1e6]), ieee).tolist() == [0x78, 0x77, 0x78]
    assert fp8emu.decode([0x78], ieee).tolist() == [np.inf]
    assert fp8emu.decode([0x78], "e4m3fn").tolist() == [256.0]


def test_gemm_value_tables_distinguish_special_encodings():
    # Same name and field widths, different specials: 0x7F is 480 without NaN, NaN with nan="fn".
    plain = Format("e4m3x", 4, 3, 7)
    fn = Format("e4m3x", 4, 3, 7, nan="fn")
    a = np.full((1, 16), 0x7F, np.uint8)
    b = np.zeros((16, 1), np.uint8)
    b[0, 0] = 0x38   # 1.0
    assert np.isnan(fp8emu.scaled_mm(a, b, a_format=fn, b_format="e4m3fn", accumulator="exact")[0, 0])
    assert fp8emu.scaled_mm(a, b, a_format=plain, b_format="e4m3fn", accumulator="exact")[0, 0] == 480.0
    assert np.isnan(fp8emu.scaled_mm(a, b, a_format=fn, b_format="e4m3fn", accumulator="exact")[0, 0])


def test_profile_rejects_malformed_rules():
    with pytest.raises(TypeError, match="Format objects"):
        Profile("bad", "x", {"e4m3fn": {"rne": Rule("rne", False)}})
    with pytest.raises(ValueError, match="deterministic rounding"):
        Profile("bad", "x", {E4M3FN: {"stochastic": Rule("rne", False)}})


def test_a_missing_core_dependency_is_named_with_the_way_to_install_it():
    code = ("import sys; sys.modules['ml_dtypes'] = None\n"
            "try:\n    import fp8emu\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=str(PKG.parent), check=True).stdout
    assert out.startswith("fp8emu needs ml_dtypes, which is not installed in this Python")
    assert "pip install -e '.[dev]'" in out
