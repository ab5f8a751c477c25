"""Draw the package's layers (``LAYERS`` of ``tests/test_architecture.py``) as one picture.

Run: ``python3 tools/make_architecture_figure.py`` (matplotlib; a second).  Writes
``figures/architecture.png``: one band per layer, bottom up, each holding its modules and packages with
how many modules each has.  The PNG carries the summary it was drawn from (its ``Description``
text); ``tests/test_architecture.py`` checks that summary against the layers as they are now, so a
new module or layer without a new figure fails there.  ``--out FILE`` writes elsewhere.
"""

import argparse
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "figures" / "architecture.png"

#: One line per layer, bottom up: what it is for (the page docs/architecture.md says more).
ROLES = {
    0: "the ground: inputs in, package data, threads, registries",
    1: "formats: what each narrow format is",
    2: "rounding: the exact integer core",
    3: "tables: exact encode and its cached tables",
    4: "profiles: the code paths of GPUs and libraries",
    5: "codec: encode, decode, quantize",
    6: "users of the codec: scaling, GEMMs, checks",
    7: "attention and Dask",
    8: "the numerics lab",
    9: "the command line and the torch adapter",
    10: "the package's public API",
}


def load_layers():
    """``(LAYERS, MODULES, layer_of)`` from tests/test_architecture.py."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests"))
    spec = importlib.util.spec_from_file_location("architecture_layers", ROOT / "tests" / "test_architecture.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.LAYERS, mod.MODULES, mod._layer


def layer_table(layers, modules):
    """Per layer, bottom up: ``(layer, [(prefix, number of modules), ...])``, each module counted
    under the longest prefix that names it (as ``LAYERS`` assigns it)."""
    counts = {p: 0 for p in layers}
    for m in modules:
        best = max((p for p in layers if m == p or m.startswith(p + ".")), key=len, default=None)
        if best is not None:
            counts[best] += 1
    rows = {}
    for p, n in layers.items():
        rows.setdefault(n, []).append((p, counts[p]))
    return [(n, sorted(rows[n])) for n in sorted(rows)]


def summary(table):
    """The table as one line of text (what the PNG records and the test compares)."""
    return "; ".join(f"{n}: " + " ".join(f"{p}={c}" for p, c in row) for n, row in table)


def _label(prefix, count):
    short = prefix[len("fp8emu."):] if prefix.startswith("fp8emu.") else prefix
    if short == "fp8emu":
        return "fp8emu (__init__)"
    return f"{short}/ ({count})" if count > 1 else short


def figure(table):
    """The layers as a matplotlib Figure: one band per layer, its modules as boxes."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 8.5))
    ax = fig.add_axes((0.01, 0.01, 0.98, 0.93))
    ax.set_xlim(0, 100)
    ax.set_ylim(0, len(table))
    ax.set_axis_off()
    cmap = ["#dbe9f6", "#e5f0d8"]
    for i, (n, row) in enumerate(table):
        ax.add_patch(_rect(0, i + 0.06, 100, 0.88, cmap[i % 2], None))
        total = sum(c for _, c in row)
        ax.text(1, i + 0.72, f"layer {n}", fontsize=9, fontweight="bold", va="center")
        ax.text(1, i + 0.32, f"{total} module{'s' * (total != 1)}", fontsize=8, va="center", color="#444444")
        ax.text(99, i + 0.5, ROLES.get(n, ""), fontsize=8, va="center", ha="right", style="italic", color="#333333")
        labels = [_label(p, c) for p, c in row]
        widths = [0.72 * len(t) + 2.5 for t in labels]
        # the boxes in one line from x = 13 to 70, or in two where they do not fit
        lines = [list(range(len(row)))]
        if sum(widths) + 0.8 * len(row) > 57:
            half = (len(row) + 1) // 2
            lines = [list(range(half)), list(range(half, len(row)))]
        h = 0.6 / len(lines)
        for j, line in enumerate(lines):
            x, y = 13.0, i + 0.2 + (len(lines) - 1 - j) * (h + 0.04 * (len(lines) - 1))
            for k in line:
                ax.add_patch(_rect(x, y, widths[k], h - 0.02 * (len(lines) - 1), "white", "#555555"))
                ax.text(x + widths[k] / 2, y + h / 2 - 0.01 * (len(lines) - 1), labels[k], fontsize=8,
                        ha="center", va="center")
                x += widths[k] + 0.8
    total = sum(c for _, row in table for _, c in row)
    fig.suptitle(f"fp8emu: {len(table)} layers, {total} modules; a module imports only its own layer "
                 "or those below", fontsize=11, y=0.985)
    return fig


def _rect(x, y, w, h, face, edge):
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), w, h, facecolor=face, edgecolor=edge or face, linewidth=0.8)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT, help=f"the PNG to write (default {OUT.relative_to(ROOT)})")
    args = p.parse_args(argv)
    layers, modules, _ = load_layers()
    table = layer_table(layers, modules)
    figure(table).savefig(args.out, dpi=100, metadata={"Software": None, "Description": summary(table)})
    print(f"{len(table)} layers, {sum(c for _, row in table for _, c in row)} modules -> {args.out}")


if __name__ == "__main__":
    main()
