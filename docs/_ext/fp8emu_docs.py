"""Pages of the fp8emu documentation generated from the code at build time.

Two kinds of generated source, written when the builder starts (``builder-inited``) and never
committed (``docs/_generated/`` and ``docs/reference/api/`` are in ``.gitignore``):

* the API reference: one page per public module, listing every name of its ``__all__``
  (:data:`API_SECTIONS` says which modules, in which order), each documented once, at its
  *canonical* place (:func:`api_entries`);
* tables included by the reference pages: formats, recorded conformance, live engines, profiles,
  accumulator presets, study recipes, the command line's ``--help`` texts.

``tests/test_docs_site.py`` imports this module (it needs no Sphinx) to check that every public
name has an entry and an example.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1]

#: (section title, modules) of the API reference, in reading order.  Every fp8emu module that
#: has an ``__all__`` must be listed (a test enforces it).
API_SECTIONS = [
    ("The package", ["fp8emu", "fp8emu.version"]),
    ("Formats, rounding and the codec", ["fp8emu.formats", "fp8emu.rounding", "fp8emu.tables",
                                         "fp8emu.profiles", "fp8emu.profiles.profile",
                                         "fp8emu.profiles.versions", "fp8emu.codec", "fp8emu.parallel",
                                         "fp8emu.registry", "fp8emu.interop", "fp8emu.describe",
                                         "fp8emu.readers", "fp8emu.hifloat"]),
    ("Scaling recipes", ["fp8emu.scaling", "fp8emu.scaling.tensor", "fp8emu.scaling.current",
                         "fp8emu.scaling.delayed", "fp8emu.scaling.mx", "fp8emu.scaling.nvfp4",
                         "fp8emu.scaling.hadamard", "fp8emu.scaling.nvfp4_te", "fp8emu.scaling.ms_eden",
                         "fp8emu.scaling.hifloat4", "fp8emu.scaling.torchao_variants"]),
    ("Training recipes and GPU stacks", ["fp8emu.training", "fp8emu.training.recipes", "fp8emu.training.stacks"]),
    ("GEMM and storage layouts", ["fp8emu.gemm", "fp8emu.gemm.models", "fp8emu.gemm.quantized", "fp8emu.gemm.kernels",
                                  "fp8emu.gemm.instructions", "fp8emu.gemm.catalogue", "fp8emu.gemm.outputs",
                                  "fp8emu.gemm.aligned_sums", "fp8emu.gemm.code_tables", "fp8emu.gemm.wide_inputs",
                                  "fp8emu.gemm.instruction_inputs", "fp8emu.gpu.tc_questions",
                                  "fp8emu.gemm.fparith", "fp8emu.gemm.epilogue", "fp8emu.gemm.scaled_mm",
                                  "fp8emu.gemm.block_scaled", "fp8emu.gemm.torch_cpu", "fp8emu.gemm.sumtree",
                                  "fp8emu.gemm.order_probe",
                                  "fp8emu.gemm.cpu_order", "fp8emu.gemm.mkl_cnr", "fp8emu.layouts"]),
    ("Validation kit, conformance and engines", ["fp8emu.testing", "fp8emu.testing.compare",
                                                 "fp8emu.testing.golden", "fp8emu.testing.plugin",
                                                 "fp8emu.conformance", "fp8emu.engines",
                                                 "fp8emu.gpu.validate", "fp8emu.data"]),
    ("FP8 attention", ["fp8emu.attention", "fp8emu.attention.emulate", "fp8emu.attention.recipes",
                       "fp8emu.attention.operands", "fp8emu.attention.report", "fp8emu.attention.reference"]),
    ("Studies, metrics and the lab", ["fp8emu.metrics", "fp8emu.lab.recipes", "fp8emu.dask",
                                      "fp8emu.lab.inputs", "fp8emu.lab.analysis", "fp8emu.lab.plots", "fp8emu.lab.train",
                                      "fp8emu.lab.study", "fp8emu.lab.tensors", "fp8emu.lab.results", "fp8emu.lab.store",
                                      "fp8emu.lab.report", "fp8emu.lab.attention",
                                      "fp8emu.lab.drift", "fp8emu.lab.lm_study", "fp8emu.lab.lm_forks",
                                      "fp8emu.lab.grad_metrics", "fp8emu.lab.grad_study"]),
    ("Command line", ["fp8emu.cli"]),
]
# The optional torch adapter (fp8emu.torch) needs torch: documented where torch is installed.
if importlib.util.find_spec("torch") is not None:
    API_SECTIONS.append(("torch adapter and model emulation",
                         ["fp8emu.torch", "fp8emu.torch.tensors", "fp8emu.torch.ops", "fp8emu.torch.swap",
                          "fp8emu.torch.linear",
                          "fp8emu.torch.gemms", "fp8emu.torch.attention", "fp8emu.torch.autocast",
                          "fp8emu.torch.probes", "fp8emu.torch.compiled"]))
    API_SECTIONS.append(("Transformer Engine's API (fp8emu.torch.te)",
                         ["fp8emu.torch.te", "fp8emu.torch.te.recipe", "fp8emu.torch.te.quantization",
                          "fp8emu.torch.te.modules", "fp8emu.torch.te.attention", "fp8emu.torch.te.gemm",
                          "fp8emu.torch.te.distributed"]))
    API_SECTIONS.append(("The language-model study", ["fp8emu.torch.study.corpus",
                                                       "fp8emu.torch.study.model", "fp8emu.torch.study.train",
                                                       "fp8emu.torch.study.runs", "fp8emu.torch.study.infer",
                                                       "fp8emu.torch.study.grad"]))

#: the packages whose ``__all__`` make up the public API that must have examples
#: (``fp8emu`` and its subpackages).
EXAMPLE_SCOPE = ["fp8emu", "fp8emu.cli", "fp8emu.data", "fp8emu.gemm", "fp8emu.scaling", "fp8emu.testing",
                 "fp8emu.training"]


def documented_modules() -> list:
    """Every module of :data:`API_SECTIONS`, in order."""
    return [m for _, mods in API_SECTIONS for m in mods]


def modules_with_all() -> list:
    """Every fp8emu module that declares ``__all__`` (imported)."""
    import fp8emu
    out = ["fp8emu"]
    for info in pkgutil.walk_packages(fp8emu.__path__, prefix="fp8emu."):
        if info.name == "fp8emu.__main__":
            continue
        if info.name.startswith("fp8emu.torch") and importlib.util.find_spec("torch") is None:
            continue
        if hasattr(importlib.import_module(info.name), "__all__"):
            out.append(info.name)
    return out


def is_routine(obj) -> bool:
    """Functions, classes and other callables are documented with their docstring."""
    return inspect.isclass(obj) or inspect.isroutine(obj) or (callable(obj) and hasattr(obj, "__wrapped__"))


def _key(name, obj):
    # Data objects are told apart by name as well: two modules' ``0`` constants are one object.
    return ("routine", id(obj)) if is_routine(obj) else ("data", name, id(obj))


def api_entries() -> list:
    """One ``(module, name, canonical, kind)`` per name of each documented module's ``__all__``.

    ``canonical`` is the full name under which the object is documented: routines at the first
    module of :data:`API_SECTIONS` that exports them (``fp8emu.encode``, not
    ``fp8emu.codec.encode``) unless that full name is a documented module's, data at the module whose source assigns them (where its ``#:``
    comment is; else the deepest module that exports them).  ``kind`` is ``"function"``, ``"class"`` or ``"data"``.
    """
    mods = documented_modules()
    where = {}
    rows = []
    for modname in mods:
        mod = importlib.import_module(modname)
        for name in mod.__all__:
            obj = getattr(mod, name)
            where.setdefault(_key(name, obj), []).append(modname)
            kind = "class" if inspect.isclass(obj) else "function" if is_routine(obj) else "data"
            rows.append((modname, name, obj, kind))
    out = []
    for modname, name, obj, kind in rows:
        places = where[_key(name, obj)]
        if kind != "data":
            # a name that is also a documented module's (fp8emu.torch.autocast, the function that its
            # module re-exports under the module's own name) is described in its defining module, so
            # that Sphinx does not see two objects of one name
            home = next((m for m in places if f"{m}.{name}" not in mods), places[0])
        else:
            defining = [m for m in places if _assigns(m, name)]
            home = defining[0] if defining else max(places, key=lambda m: (m.count("."), -places.index(m)))
        out.append((modname, name, f"{home}.{name}", kind))
    return out


def _assigns(modname, name) -> bool:
    """Whether module ``modname``'s own source assigns ``name`` at top level."""
    import re
    src = inspect.getsource(importlib.import_module(modname))
    return re.search(rf"^{re.escape(name)}\s*(:[^=\n]*)?=", src, re.M) is not None


def data_module(canonical: str) -> str:
    """The module part of a canonical name."""
    return canonical.rsplit(".", 1)[0]


# ----------------------------------------------------------------------------- API pages
def _api_page(modname, entries) -> str:
    title = f"``{modname}``"
    lines = [f".. _api-{modname}:", "", title, "=" * len(title), "",
             f".. automodule:: {modname}", "   :no-members:", "", f".. currentmodule:: {modname}", ""]
    lines += ["Names", "-----", "", ".. autosummary::", "   :nosignatures:", ""]
    # Names documented here are written relative to the current module (autosummary asks so).
    lines += [f"   {c[len(modname) + 1:]}" if c.startswith(modname + ".") else f"   ~{c}"
              for _, _, c, _ in entries]
    own = [(n, c, k) for _, n, c, k in entries if c == f"{modname}.{n}"]
    if own:
        lines += ["", "Reference", "---------", ""]
    for name, canonical, kind in own:
        if kind == "class":
            lines += [f".. autoclass:: {canonical}", "   :members:", "   :show-inheritance:", ""]
        elif kind == "function":
            lines += [f".. autofunction:: {canonical}", ""]
        else:
            lines += [f".. autodata:: {canonical}", ""]
    return "\n".join(lines) + "\n"


def write_api(outdir: Path) -> list:
    """Write ``reference/api/<module>.rst`` for every documented module and the API index."""
    outdir.mkdir(parents=True, exist_ok=True)
    entries = api_entries()
    written = []
    for modname in documented_modules():
        mine = [e for e in entries if e[0] == modname]
        written.append(_write(outdir / f"{modname}.rst", _api_page(modname, mine)))
    idx = ["API reference", "=============", "",
           "Every public name (each module's ``__all__``), generated from its docstring. A name that",
           "several modules export is described once and linked from the others.", ""]
    for title, mods in API_SECTIONS:
        idx += [title, "-" * len(title), "", ".. toctree::", "   :maxdepth: 1", ""]
        idx += [f"   {m}" for m in mods]
        idx += [""]
    written.append(_write(outdir / "index.rst", "\n".join(idx)))
    return written


def _write(path: Path, text: str) -> Path:
    # Rewrite only when the text changed, so that Sphinx does not re-read unchanged pages.
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- tables
def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|")


def profiles_table() -> str:
    """Markdown table of the registered profiles and their descriptions."""
    import fp8emu
    from fp8emu.profiles import versioned_names

    def versions(n):
        if n in versioned_names():
            return "the installed release picks a variant"
        return "; ".join(map(str, fp8emu.get_profile(n).versions)) or "-"
    rows = ["| profile | what it reproduces | versions |", "|---|---|---|"]
    rows += [f"| `{n}` | {_md_escape(d)} | {_md_escape(versions(n))} |" for n, d in fp8emu.profile_names().items()]
    return "\n".join(rows)


def accumulators_table() -> str:
    """Markdown table of the named GEMM models (catalogue row plus kernel policy) and torch's CPU paths."""
    from fp8emu.gemm import MODELS
    from fp8emu.gemm.torch_cpu import TORCH_CPU_PATHS

    out = ["**GEMM models (`fp8emu.gemm.MODELS`; any float32-output instruction preset by name too)**", "",
           "| model | kind | instruction | promote | split_k | scale_at | specials |", "|---|---|---|---|---|---|---|"]
    for name, m in MODELS.items():
        if m.kind == "torch-cpu":
            continue
        p = m.policy
        ins = f"`{m.instruction.name}`" if m.instruction is not None else "-"
        out.append(f"| `{name}` | {m.kind} | {ins} | `{p.promote!r}` | `{p.split_k!r}` | `{p.scale_at!r}` | "
                   f"{p.specials} |")
    out.append("")
    out += ["**torch's own CPU `_scaled_mm` (`fp8emu.gemm.torch_cpu`)**", "", "| model | path and evidence |",
            "|---|---|"]
    out += [f"| `{name}` | {_md_escape(text)} |" for name, text in TORCH_CPU_PATHS.items()]
    out.append("")
    return "\n".join(out)


def recipes_table() -> str:
    """Markdown table of every study recipe; the default ones are marked."""
    from fp8emu.lab.recipes import DEFAULT_RECIPES, recipe_matrix
    rows = ["| recipe | format | default | what it does |", "|---|---|---|---|"]
    for name, r in recipe_matrix().items():
        rows.append(f"| `{name}` | {r.fmt} | {'yes' if name in DEFAULT_RECIPES else ''} | "
                    f"{_md_escape(r.description)} |")
    return "\n".join(rows)


def cli_help() -> str:
    """Every command's ``--help`` text, as MyST sections."""
    from fp8emu.cli import COMMANDS, build_parser
    out = ["```text", build_parser().format_help().rstrip(), "```", ""]
    for name in COMMANDS:
        parser = build_parser(name)
        sub = next(a for a in parser._actions if a.dest == "command").choices[name]
        out += [f"## `fp8emu {name}`", "", "```text", sub.format_help().rstrip(), "```", ""]
    return "\n".join(out)


def live_table() -> str:
    """Run the CPU engines installed on the build machine on their probe inputs; Markdown table.

    Settings where an engine differs from its profile are counted in the table and named in a
    warning box above it (``tests/test_engines.py`` is what fails on them).
    """
    import warnings

    import numpy as np

    from fp8emu import engines
    installed = engines.installed_engines()
    if not installed:
        return "*No CPU engine is installed on the machine that built these pages.*"
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        rows = engines.live_report(list(installed), n_random=0)
    bad = [f"{r['engine']} {r['format']} {r['setting']}" for r in rows
           if r["mismatches"] or r["decode_mismatches"]]
    warn = ""
    if bad:
        warn = ("```{warning}\nOn the build machine, " + str(len(bad)) + " of " + str(len(rows))
                + " settings differ from their profiles (the installed versions are not all the proven"
                " ones, or a profile is out of date): " + "; ".join(bad) + ".\n```\n\n")
    missing = [e for e in engines.ENGINES if e not in installed]
    note = (f"\n\nNot installed on the build machine: {', '.join(f'`{e}`' for e in missing)}."
            if missing else "")
    return warn + engines.live_markdown(rows) + note


def instructions_table() -> str:
    """Markdown table of every matrix-instruction preset with its evidence (:func:`fp8emu.gemm.presets`)."""
    from fp8emu.gemm import presets
    rows = ["| preset | architecture | instruction | evidence |", "|---|---|---|---|"]
    for p in presets():
        rows.append(f"| `{p['name']}` | {_md_escape(p['arch'])} | {_md_escape(p['ptx'])} | "
                    f"{_md_escape('; '.join(p['evidence']))} |")
    return "\n".join(rows)


def readme_catalogue() -> str:
    """The README's catalogue table: every matrix-instruction preset, its instruction, the random MMAs
    it equals MMA-Sim on and the public GPU recordings it reproduces (rows per file)."""
    from fp8emu.gemm import presets
    rows = ["| preset | instruction | equals MMA-Sim on | GPU recording rows reproduced |", "|---|---|---|---|"]
    for p in presets():
        sim = [f"{r[2]:,} random MMAs ({r[1]})" for r in p["records"] if r[0] == "mmasim"]
        rec = []
        for r in p["records"]:
            if r[0] in ("recordings", "disagrees"):
                out = "fp16 out" if r[2] == "d16_bits" else "fp32 out"
                why = "; " + r[5] if r[5] else ""
                mark = " (disagrees)" if r[0] == "disagrees" else ""
                rec.append(f"{r[1]} {out}: {r[3]}/{r[4]}{mark}{_md_escape(why)}")
        rows.append(f"| `{p['name']}` | {_md_escape(p['ptx'])} | {'; '.join(sim) or ('-' if rec else 'model only')} | "
                    f"{'<br>'.join(rec) or '-'} |")
    return "\n".join(rows)


def conformance_table() -> str:
    """The recorded-H200 conformance table (:func:`fp8emu.conformance.markdown_table`)."""
    from fp8emu import conformance
    return conformance.markdown_table()


def format_table() -> str:
    """The format table (:func:`fp8emu.format_table`)."""
    import fp8emu
    return fp8emu.format_table()


#: generated file name -> function returning its Markdown text.
TABLES = {
    "formats.md": format_table,
    "conformance.md": conformance_table,
    "live.md": live_table,
    "profiles.md": profiles_table,
    "accumulators.md": accumulators_table,
    "instructions.md": instructions_table,
    "recipes.md": recipes_table,
    "cli.md": cli_help,
}


def write_tables(outdir: Path) -> list:
    """Write every table of :data:`TABLES` into ``outdir``."""
    outdir.mkdir(parents=True, exist_ok=True)
    return [_write(outdir / name, fn() + "\n") for name, fn in TABLES.items()]


def _builder_inited(app):
    write_api(DOCS / "reference" / "api")
    write_tables(DOCS / "_generated")


def setup(app):
    app.connect("builder-inited", _builder_inited)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
