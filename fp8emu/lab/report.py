"""Reports of a checkpoint study: ``report.md`` and a self-contained ``report.html``, written for a reader.

From the rows of ``results.csv`` (:func:`fp8emu.lab.study.read_results`), in order:

* provenance: the input, the command, fp8emu's and its dependencies' versions, the date;
* a short conclusion computed from the rows (:func:`conclusions`);
* the recipes' summary (median / worst SQNR over tensors, the element-weighted
  fractions overflowed, saturated, flushed to zero and subnormal, tensors with an
  Inf/NaN output), grouped by recipe family (:data:`FAMILIES`), with the
  saturation of block recipes marked as by design;
* what every column means (:data:`DEFINITIONS`);
* the best recipe of each tensor, per element width (:func:`best_recipes`);
* a heat map of SQNR, recipes (grouped by family) x tensors, labelled on all four sides;
* SQNR against the tensors' dynamic range, one small panel per recipe family;
* the lowest-SQNR tensors of each recipe.

``report.md`` links the figures written to ``figures/``; ``report.html``
embeds the same PNGs as base64, so the one file can be mailed or attached.
Figures use matplotlib's object API (``matplotlib.figure.Figure``), imported
when a report is written; no backend is switched.
"""

from __future__ import annotations

import base64
import datetime
import html
import io
import json
import math
import os
import platform
import re
import shutil
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path

import numpy as np

from .. import readers
from ..formats import get_format
from ..version import __version__

__all__ = ["summarize", "worst_tensors", "figure_heatmap", "figure_sqnr_vs_range", "write_report",
           "MAX_HEATMAP_TENSORS", "check_in_browser", "recipe_family", "FAMILIES", "DEFINITIONS",
           "best_recipes", "conclusions", "provenance", "inputs_of", "recipe_styles"]

#: The heat map shows at most this many tensors (the worst by median SQNR).
MAX_HEATMAP_TENSORS = 60
#: SQNR (dB) shown for exact results in plots (their rows say ``inf``).
_EXACT_DB = 150.0

#: Recipe families, in report order: (name prefix, family title, whether its scales are per block).
FAMILIES = (
    ("cast-", "plain cast, no scale", False),
    ("tensor-", "one scale per tensor", False),
    ("calib-", "one calibrated scale per tensor", False),
    ("row-", "scale per row or block (FP32 scales)", True),
    ("block", "scale per row or block (FP32 scales)", True),
    ("mx-", "MX: E8M0 scale per 32 elements", True),
    ("nvfp4", "NVFP4: E4M3 scale per 16, FP32 per tensor", True),
)
_OTHER = "other recipes"

#: Column -> what it means (shown in the report under the summary).
DEFINITIONS = {
    "SQNR (dB)": "signal-to-quantization-noise ratio 10 log10(sum x^2 / sum (q - x)^2) over the finite inputs x "
                 "and their dequantized values q; +6 dB is one more bit. 'exact': no error; '-inf': a finite input "
                 "came out Inf or NaN.",
    "median / worst SQNR": "over the tensors studied with the recipe (the worst is the lowest).",
    "overflow": "elements whose scaled value y = x * scale lies past the format's rounding threshold (e4m3fn: "
                "|y| > 464, e5m2: |y| >= 61440): clipped to +-max by a saturating cast, Inf/NaN otherwise. "
                "Overflow is information lost.",
    "saturated": "outputs equal to +-max, whether clipped (overflow) or rounded there. A scaled recipe maps the "
                 "largest |x| of each scale group to (about) the max, so some saturation is by design.",
    "flushed to 0": "non-zero inputs that became 0 (underflow below half the smallest subnormal).",
    "subnormal": "outputs encoded as subnormals of the format (fewer significant bits than normal values).",
    "tensors with Inf/NaN out": "tensors in which at least one finite input came out Inf or NaN.",
    "dynamic range": "log2(max |x| / min non-zero |x|) of the tensor, in binades.",
    "fractions": "overflow, saturated, flushed and subnormal are fractions of all elements of the tensors, "
                 "each tensor weighted by its element count.",
}

_BY_DESIGN = ("by design: each block's largest |x| is scaled to about the max, so about one element per block "
              "(NVFP4 1 in 16, MX 1 in 32, 1x128 1 in 128; more where other elements of a block round to the max "
              "too) sits at +-max without being clipped; clipping is counted under overflow")


def recipe_family(name) -> str:
    """Family title of a recipe name (:data:`FAMILIES`), ``"other recipes"`` if none matches.

    Examples
    --------
    >>> recipe_family("mx-e4m3fn-floor"), recipe_family("block1x128-e4m3fn")
    ('MX: E8M0 scale per 32 elements', 'scale per row or block (FP32 scales)')
    """
    return next((title for prefix, title, _ in FAMILIES if str(name).startswith(prefix)), _OTHER)


def _family_order():
    return list(dict.fromkeys(title for _, title, _ in FAMILIES)) + [_OTHER]


def _blockwise(name) -> bool:
    return next((blocks for prefix, _, blocks in FAMILIES if str(name).startswith(prefix)), False)


def _recipes(rows):
    """Recipe names grouped by family (family order, then first appearance)."""
    seen = list(dict.fromkeys(r["recipe"] for r in rows))
    order = _family_order()
    return sorted(seen, key=lambda n: (order.index(recipe_family(n)), seen.index(n)))


def _tensors(rows):
    seen = {}
    for r in rows:
        seen.setdefault((r["checkpoint"], r["tensor"]), None)
    return list(seen)


def summarize(rows) -> list:
    """One dict per recipe (grouped by family): tensors, median and worst SQNR, weighted fractions.

    Fractions are weighted by the tensors' element counts; ``nonfinite``
    counts tensors with an Inf/NaN output from a finite input.

    Examples
    --------
    >>> rows = [dict(recipe="r", tensor="a", checkpoint="c", sqnr_db=30.0, numel=10, frac_overflow=0.0,
    ...              frac_saturated=0.1, frac_flushed=0.0, frac_subnormal=0.0, n_nonfinite_out=0, format="e4m3fn",
    ...              rel_rms_err=0.03),
    ...         dict(recipe="r", tensor="b", checkpoint="c", sqnr_db=20.0, numel=30, frac_overflow=0.0,
    ...              frac_saturated=0.0, frac_flushed=0.0, frac_subnormal=0.0, n_nonfinite_out=0, format="e4m3fn",
    ...              rel_rms_err=0.1)]
    >>> s = summarize(rows)[0]
    >>> s["median_sqnr_db"], s["min_sqnr_db"], s["frac_saturated"], s["family"]
    (25.0, 20.0, 0.025, 'other recipes')
    """
    out = []
    for name in _recipes(rows):
        rs = [r for r in rows if r["recipe"] == name]
        sq = np.array([r["sqnr_db"] for r in rs], dtype=np.float64)
        w = np.array([r["numel"] for r in rs], dtype=np.float64)
        wsum = w.sum() or 1.0

        def wavg(col):
            return float(np.dot([r[col] for r in rs], w) / wsum)

        out.append({
            "recipe": name, "family": recipe_family(name), "format": rs[0]["format"], "tensors": len(rs),
            "median_sqnr_db": float(np.median(sq)), "min_sqnr_db": float(sq.min()),
            "frac_overflow": wavg("frac_overflow"), "frac_saturated": wavg("frac_saturated"),
            "frac_flushed": wavg("frac_flushed"), "frac_subnormal": wavg("frac_subnormal"),
            "nonfinite": int(sum(r["n_nonfinite_out"] > 0 for r in rs)),
        })
    return out


def worst_tensors(rows, k=5) -> dict:
    """The ``k`` tensors with the lowest SQNR under each recipe: ``{recipe: [row, ...]}``.

    Examples
    --------
    >>> rows = [dict(recipe="r", tensor=t, sqnr_db=s) for t, s in [("a", 3.0), ("b", 1.0), ("c", 2.0)]]
    >>> [r["tensor"] for r in worst_tensors(rows, 2)["r"]]
    ['b', 'c']
    """
    out = {}
    for name in _recipes(rows):
        rs = sorted((r for r in rows if r["recipe"] == name), key=lambda r: r["sqnr_db"])
        out[name] = rs[:k]
    return out


def _bits(fmt) -> int:
    try:
        return int(get_format(fmt).bits)
    except (ValueError, KeyError, TypeError):
        return 0


def best_recipes(rows) -> list:
    """Per tensor: the recipe of highest SQNR overall and per element width (8, 6, 4 bits).

    Returns
    -------
    list of dict
        ``tensor`` (``checkpoint:tensor`` when there are several checkpoints), ``dynamic_range_log2``,
        ``best`` and ``best_<bits>bit`` (each ``(recipe, sqnr_db)`` or None), in tensor order.

    Examples
    --------
    >>> rows = [dict(checkpoint="c", tensor="t", recipe=r, format=f, sqnr_db=s, dynamic_range_log2=9.0)
    ...         for r, f, s in [("a", "e4m3fn", 31.0), ("b", "e5m2", 25.0), ("n", "e2m1fn", 20.0)]]
    >>> b = best_recipes(rows)[0]
    >>> b["best"], b["best_8bit"], b["best_4bit"], b["best_6bit"]
    (('a', 31.0), ('a', 31.0), ('n', 20.0), None)
    """
    tensors = _tensors(rows)
    several = len({c for c, _ in tensors}) > 1
    out = []
    for key in tensors:
        rs = [r for r in rows if (r["checkpoint"], r["tensor"]) == key]
        entry = {"tensor": f"{key[0]}:{key[1]}" if several else key[1],
                 "dynamic_range_log2": rs[0].get("dynamic_range_log2", math.nan)}
        for label, pick in (("best", rs), ("best_8bit", [r for r in rs if _bits(r["format"]) == 8]),
                            ("best_6bit", [r for r in rs if _bits(r["format"]) == 6]),
                            ("best_4bit", [r for r in rs if _bits(r["format"]) == 4])):
            top = max(pick, key=lambda r: r["sqnr_db"], default=None)
            entry[label] = None if top is None else (top["recipe"], float(top["sqnr_db"]))
        out.append(entry)
    return out


def conclusions(rows) -> list:
    """A few sentences computed from the rows: what to use, what to avoid, where it hurts.

    Examples
    --------
    >>> rows = [dict(checkpoint="c", tensor=t, recipe=r, format="e4m3fn", sqnr_db=s, numel=4,
    ...              frac_overflow=0.0, frac_saturated=0.0, frac_flushed=0.0, frac_subnormal=0.0,
    ...              n_nonfinite_out=0, dynamic_range_log2=8.0)
    ...         for t, r, s in [("a", "row-e4m3fn", 33.0), ("a", "tensor-e4m3fn", 31.0),
    ...                         ("b", "row-e4m3fn", 32.0), ("b", "tensor-e4m3fn", 30.0)]]
    >>> print(conclusions(rows)[0])
    Highest median SQNR in 8 bits: row-e4m3fn (32.5 dB median, worst tensor 32.0 dB).
    """
    summary = summarize(rows)
    out = []
    for bits in (8, 6, 4):
        group = [s for s in summary if _bits(s["format"]) == bits]
        if group:
            top = max(group, key=lambda s: (s["median_sqnr_db"], s["min_sqnr_db"]))
            out.append(f"Highest median SQNR in {bits} bits: {top['recipe']} ({_db(top['median_sqnr_db'])} dB "
                       f"median, worst tensor {_db(top['min_sqnr_db'])} dB).")
    best = best_recipes(rows)
    wins = {}
    for b in best:
        if b["best_8bit"] is not None:
            wins[b["best_8bit"][0]] = wins.get(b["best_8bit"][0], 0) + 1
    if wins:
        name, n = max(wins.items(), key=lambda kv: kv[1])
        out.append(f"{name} is the best 8-bit recipe for {n} of {len(best)} tensors.")
    fragile = [s for s in summary if s["min_sqnr_db"] < s["median_sqnr_db"] - 10]
    if fragile:
        worst = min(fragile, key=lambda s: s["min_sqnr_db"] - s["median_sqnr_db"])
        victim = worst_tensors(rows, 1)[worst["recipe"]][0]
        out.append(f"Fragile: {len(fragile)} recipe(s) lose more than 10 dB on some tensor; the largest drop is "
                   f"{worst['recipe']} on {victim['tensor']} ({_db(victim['sqnr_db'])} dB against a median of "
                   f"{_db(worst['median_sqnr_db'])} dB).")
    clipped = [s for s in summary if s["frac_overflow"] > 0]
    if clipped:
        top = max(clipped, key=lambda s: s["frac_overflow"])
        out.append(f"{len(clipped)} recipe(s) clip values (overflow > 0); the most: {top['recipe']}, "
                   f"{_pct(top['frac_overflow'])} of the elements.")
    broken = [s for s in summary if s["nonfinite"]]
    if broken:
        out.append("Inf/NaN outputs from finite inputs under: "
                   + ", ".join(f"{s['recipe']} ({s['nonfinite']} tensors)" for s in broken) + ".")
    return out


def inputs_of(refs) -> list:
    """The checkpoints of a study's tensors (:class:`fp8emu.lab.study.TensorRef`), for :func:`provenance`.

    Examples
    --------
    >>> from types import SimpleNamespace as T
    >>> inputs_of([T(checkpoint="m", path="/d/m/a.safetensors"), T(checkpoint="m", path="/d/m/b.safetensors")])
    ['m: /d/m (2 tensors studied)']
    """
    files = {}
    for r in refs:
        files.setdefault(r.checkpoint, []).append(str(r.path))
    out = []
    for label, paths in files.items():
        where = paths[0] if len(set(paths)) == 1 else os.path.commonpath(paths)
        out.append(f"{label}: {where} ({len(paths)} tensors studied)")
    return out


def provenance(*, inputs=(), command=None, when=None) -> dict:
    """What produced a report: input, command, versions (fp8emu, Python, its dependencies), date (UTC).

    Examples
    --------
    >>> p = provenance(inputs=["model.safetensors"], command="fp8emu study model.safetensors --out r")
    >>> sorted(p)
    ['command', 'date', 'input', 'versions']
    >>> p["versions"].split(",")[0].startswith("fp8emu ")
    True
    """
    versions = [f"fp8emu {__version__}", f"Python {platform.python_version()}"]
    for dist in ("numpy", "ml_dtypes", "matplotlib"):
        try:
            versions.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{dist} (not installed)")
    when = when or datetime.datetime.now(datetime.timezone.utc)
    return {"input": "; ".join(str(i) for i in inputs) or "(rows given directly)",
            "command": command or "(from Python: fp8emu.lab.report.write_report)",
            "versions": ", ".join(versions), "date": when.strftime("%Y-%m-%d %H:%M UTC")}
def _grid(rows):
    """(tensors, recipes grouped by family, SQNR grid of shape (recipes, tensors))."""
    tensors, recipes = _tensors(rows), _recipes(rows)
    ti = {t: i for i, t in enumerate(tensors)}
    ri = {r: i for i, r in enumerate(recipes)}
    grid = np.full((len(recipes), len(tensors)), np.nan)
    for r in rows:
        grid[ri[r["recipe"]], ti[(r["checkpoint"], r["tensor"])]] = r["sqnr_db"]
    return tensors, recipes, grid


def _new_figure(width, height):
    from matplotlib.figure import Figure
    return Figure(figsize=(width, height), dpi=100)


def _heat_cells(ax, grid, vmin, vmax):
    for (i, j), v in np.ndenumerate(grid):
        text = "exact" if np.isposinf(v) else "-inf" if np.isneginf(v) else "" if np.isnan(v) else f"{v:.0f}"
        dark = np.isneginf(v) or (np.isfinite(v) and v < (vmin + vmax) / 2)
        ax.text(j, i, text, ha="center", va="center", fontsize=8 if len(text) < 4 else 7,
                color="white" if dark else "black")


def _family_bands(ax, recipes, ncols):
    """Separators between recipe families and the family titles on the right."""
    fams = [recipe_family(r) for r in recipes]
    start = 0
    for i in range(1, len(fams) + 1):
        if i == len(fams) or fams[i] != fams[start]:
            if i < len(fams):
                ax.axhline(i - 0.5, color="white", lw=3)
            ax.annotate(fams[start], xy=(1.0, 1 - (start + i) / 2 / len(fams)), xycoords="axes fraction",
                        xytext=(150, 0), textcoords="offset points", ha="left", va="center", fontsize=8,
                        fontweight="bold")
            start = i


def figure_heatmap(rows):
    """Heat map of SQNR (dB): recipes (rows, grouped by family) x tensors (columns).

    Recipe names are written on both sides (family titles on the right), tensor names
    above and below; cells hold the SQNR in dB (``exact``: no error; ``-inf``, black:
    Inf/NaN output).  The colour scale stops at 40..80 dB.  With more than
    :data:`MAX_HEATMAP_TENSORS` tensors, the ones of lowest median SQNR are shown.
    """
    from matplotlib import colormaps
    tensors, recipes, grid = _grid(rows)
    labels = [t for _, t in tensors] if len({c for c, _ in tensors}) == 1 else [f"{c}:{t}" for c, t in tensors]
    note = ""
    if len(tensors) > MAX_HEATMAP_TENSORS:
        med = np.nanmedian(np.where(np.isinf(grid) & (grid > 0), _EXACT_DB, grid), axis=0)
        keep = np.sort(np.argsort(med, kind="stable")[:MAX_HEATMAP_TENSORS])
        grid, labels = grid[:, keep], [labels[i] for i in keep]
        note = f" (the {MAX_HEATMAP_TENSORS} tensors of lowest median SQNR of {len(tensors)})"
    finite = grid[np.isfinite(grid)]
    # FP8-scale results span 0..60 dB; a few near-exact tensors must not wash the colours out.
    vmax = float(np.clip(np.max(finite), 40.0, 80.0)) if finite.size else 60.0
    vmin = float(min(0.0, np.min(finite))) if finite.size else 0.0
    shown = np.where(np.isposinf(grid), vmax + 1, grid)
    cmap = colormaps["viridis"].with_extremes(under="black", over="#fff7a0", bad="lightgrey")
    longest = max(len(t) for t in labels)
    label_in = 0.058 * longest + 0.3
    fig = _new_figure(0.42 * len(labels) + 8.0, 0.3 * len(recipes) + 2 * label_in + 0.8)
    ax = fig.add_subplot()
    img = ax.imshow(np.where(np.isneginf(shown), vmin - 1, shown), aspect="auto", cmap=cmap,
                    vmin=vmin, vmax=vmax, interpolation="nearest")
    ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=8)
    ax.set_yticks(range(len(recipes)), recipes, fontsize=8)
    ax.tick_params(top=True, labeltop=True, right=True, labelright=True)
    ax.grid(False)
    _heat_cells(ax, grid, vmin, vmax)
    _family_bands(ax, recipes, len(labels))
    w, h = fig.get_figwidth(), fig.get_figheight()
    fig.subplots_adjust(left=2.3 / w, right=1 - 5.6 / w, top=1 - (label_in + 0.4) / h, bottom=label_in / h)
    cax = fig.add_axes((1 - 5.6 / w + 0.1 / w, 1 - (label_in + 0.4) / h + 0.15 / h, 3.0 / w, 0.12 / h))
    fig.colorbar(img, cax=cax, orientation="horizontal", extend="both").set_label("SQNR (dB)", fontsize=8)
    cax.tick_params(labelsize=7)
    fig.suptitle("SQNR (dB) per recipe and tensor" + note, fontsize=11)
    return fig


#: Colours (matplotlib's tab20, strong ones first) and markers of the recipes in the scatter plot:
#: recipe i gets colour i % 20 and marker i // 20, so up to 20 x 13 = 260 recipes (the whole
#: matrix has fewer) each have a distinct pair, and neighbours in the legend differ in colour.
RECIPE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                  "#bcbd22", "#17becf",          # tab20's strong colours first (a few recipes: tab10)
                  "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7",
                  "#dbdb8d", "#9edae5")
RECIPE_MARKERS = ("o", "s", "^", "v", "D", "<", ">", "p", "h", "*", "P", "X", "d")


def recipe_styles(names) -> dict:
    """``{recipe: (colour, marker)}``, a distinct pair for every recipe (in the order given).

    Examples
    --------
    >>> s = recipe_styles([f"r{i}" for i in range(40)])
    >>> len(set(s.values())), s["r0"], s["r20"]
    (40, ('#1f77b4', 'o'), ('#1f77b4', 's'))
    """
    names = list(names)
    nc, nm = len(RECIPE_COLOURS), len(RECIPE_MARKERS)
    if len(names) > nc * nm:
        raise ValueError(f"at most {nc * nm} recipes can have distinct styles, got {len(names)}")
    return {n: (RECIPE_COLOURS[i % nc], RECIPE_MARKERS[i // nc]) for i, n in enumerate(names)}


def _family_styles(recipes):
    """Within each family (one panel), recipe i gets colour i % 20 (strong ones first) and marker i % 13:
    up to 10 recipes differ in both colour and marker, up to 260 in the pair."""
    out = {}
    for fam in dict.fromkeys(recipe_family(r) for r in recipes):
        for i, name in enumerate(r for r in recipes if recipe_family(r) == fam):
            out[name] = (RECIPE_COLOURS[i % len(RECIPE_COLOURS)], RECIPE_MARKERS[i % len(RECIPE_MARKERS)])
    return out


#: A family with more recipes than this gets a whole row and a legend beside its panel.
_INSIDE_LEGEND = 8
#: Legend entries per column beside a panel.
_LEGEND_ROWS = 24


def _panel_grid(fams, sizes):
    """(figure, axes, stacked): a grid of 3 with legends inside, or one panel per row with legends beside."""
    if max(sizes) <= _INSIDE_LEGEND:
        ncol = min(3, len(fams))
        nrow = -(-len(fams) // ncol)
        fig = _new_figure(4.6 * ncol, 3.6 * nrow + 0.6)
        return fig, fig.subplots(nrow, ncol, squeeze=False, sharex=True, sharey=True), False
    legend_cols = max(-(-n // _LEGEND_ROWS) for n in sizes)
    heights = [max(3.0, 0.16 * min(n, _LEGEND_ROWS) + 0.8) for n in sizes]
    fig = _new_figure(7.0 + 2.4 * legend_cols, sum(heights) + 0.8)
    axes = fig.subplots(len(fams), 1, squeeze=False, sharex=True, sharey=True, height_ratios=heights)
    return fig, axes, True


def figure_sqnr_vs_range(rows):
    """SQNR against the dynamic range ``log2(max/min non-zero |x|)``: one panel per recipe family.

    Within a panel every recipe has its own colour and marker (up to 10 recipes: distinct
    colours and distinct markers; more: distinct pairs).  Exact results are
    drawn at the top edge, Inf/NaN outputs at the bottom; the panels share their axes.
    Families of up to 8 recipes share a grid of three panels a row, legends inside;
    a larger family (the whole recipe matrix) gets a row and a legend beside its panel.
    """
    recipes = _recipes(rows)
    styles = _family_styles(recipes)
    fams = list(dict.fromkeys(recipe_family(r) for r in recipes))
    members = {f: [r for r in recipes if recipe_family(r) == f] for f in fams}
    fig, grid, stacked = _panel_grid(fams, [len(members[f]) for f in fams])
    axes = grid.ravel()
    finite = [r["sqnr_db"] for r in rows if math.isfinite(r["sqnr_db"])]
    top = max(finite) + 5 if finite else 60.0
    bottom = min(min(finite) - 5, -5.0) if finite else -5.0
    for ax, fam in zip(axes, fams):
        for name in members[fam]:
            rs = [r for r in rows if r["recipe"] == name and not math.isnan(r["dynamic_range_log2"])]
            x = np.array([r["dynamic_range_log2"] for r in rs])
            y = np.array([r["sqnr_db"] for r in rs], dtype=np.float64)
            y = np.where(np.isposinf(y), top, np.where(np.isneginf(y), bottom, y))
            colour, marker = styles[name]
            ax.scatter(x, y, s=22, alpha=0.8, color=colour, marker=marker, label=name)
        ax.set_title(fam, fontsize=9)
        ax.grid(True, alpha=0.3)
        if stacked:
            ax.legend(fontsize=7, ncol=-(-len(members[fam]) // _LEGEND_ROWS), loc="upper left",
                      bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
        else:
            ax.legend(fontsize=7, loc="lower left")
    for ax in axes[len(fams):]:
        ax.set_visible(False)
    axes[0].set_ylim(bottom - 2, top + 2)
    ncol = grid.shape[1]
    for ax in axes[(grid.shape[0] - 1) * ncol:]:
        ax.set_xlabel("dynamic range: log2(max|x| / min non-zero |x|)", fontsize=8)
    for ax in axes[::ncol]:
        ax.set_ylabel("SQNR (dB)")
    fig.suptitle("SQNR vs dynamic range, one panel per recipe family (top edge: exact; bottom edge: Inf/NaN)",
                 fontsize=10)
    if stacked:
        # the panels keep a fixed width; the legends sit beside them (savefig's tight bounding box keeps them)
        w, h = fig.get_figwidth(), fig.get_figheight()
        fig.subplots_adjust(left=0.9 / w, right=6.5 / w, top=1 - 0.6 / h, bottom=0.6 / h, hspace=0.35)
    else:
        fig.tight_layout()
    return fig


def log_y(ax) -> None:
    """A log y axis where its lines hold a positive finite value, else linear: an axis of NaN only (every
    measurement NaN) made matplotlib raise "Data cannot be log-scaled" when the figure was drawn."""
    if any((np.isfinite(y) & (y > 0)).any() for y in (np.asarray(ln.get_ydata(), float) for ln in ax.get_lines())):
        ax.set_yscale("log")


def png_bytes(fig, dpi=100, *, crop=True) -> bytes:
    """The figure as PNG bytes, reproducibly (no software stamp); ``crop``: cropped to what is drawn.

    Examples
    --------
    >>> from matplotlib.figure import Figure
    >>> png_bytes(Figure(figsize=(1, 1)), crop=False)[:8]
    b'\\x89PNG\\r\\n\\x1a\\n'
    """
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight" if crop else None, metadata={"Software": None})
    return buf.getvalue()


def _db(v):
    return "exact" if v == math.inf else "-inf" if v == -math.inf else f"{v:.1f}"


def _pct(v):
    return f"{100 * v:.3g} %"


def _summary_table(rows):
    """(header, [(family, [cells...]), ...]); block recipes' saturation is marked as by design."""
    head = ["recipe", "format", "tensors", "median SQNR (dB)", "worst SQNR (dB)", "overflow", "saturated",
            "flushed to 0", "subnormal", "tensors with Inf/NaN out"]
    body = []
    for s in summarize(rows):
        sat = _pct(s["frac_saturated"]) + (" †" if _blockwise(s["recipe"]) and s["frac_saturated"] > 0 else "")
        body.append((s["family"], [s["recipe"], s["format"], str(s["tensors"]), _db(s["median_sqnr_db"]),
                                   _db(s["min_sqnr_db"]), _pct(s["frac_overflow"]), sat, _pct(s["frac_flushed"]),
                                   _pct(s["frac_subnormal"]), str(s["nonfinite"])]))
    return head, body


def _best_table(rows):
    best = best_recipes(rows)
    widths = [b for b in ("best_8bit", "best_6bit", "best_4bit") if any(e[b] for e in best)]
    head = ["tensor", "dynamic range (log2)", "best recipe"] + [f"best {w[5]}-bit" for w in widths]

    def cell(v):
        return "-" if v is None else f"{v[0]} ({_db(v[1])}{'' if math.isinf(v[1]) else ' dB'})"
    body = [[b["tensor"], "nan" if math.isnan(b["dynamic_range_log2"]) else f"{b['dynamic_range_log2']:.1f}",
             cell(b["best"])] + [cell(b[w]) for w in widths] for b in best]
    return head, body


def _worst_table(rows, k=3):
    head = ["recipe"] + [f"{['lowest', '2nd lowest', '3rd lowest'][i] if i < 3 else f'{i + 1}th'} SQNR"
                         for i in range(k)]
    body = []
    for name, rs in worst_tensors(rows, k).items():
        body.append([name] + [f"{r['tensor']} — {_db(r['sqnr_db'])} dB, range {r['dynamic_range_log2']:.1f}"
                              for r in rs] + [""] * (k - len(rs)))
    return head, body


def _md_table(head, body):
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in body]
    return "\n".join(lines)


def _html_table(head, body, *, groups=None, cls=""):
    """A table; with ``groups`` (one family per row), a header row starts each family."""
    h = "".join(f"<th>{html.escape(c)}</th>" for c in head)
    out, last = [], None
    for i, row in enumerate(body):
        if groups is not None and groups[i] != last:
            last = groups[i]
            out.append(f'<tr class="family"><th colspan="{len(head)}">{html.escape(last)}</th></tr>')
        out.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
    return f'<table class="{cls}"><thead><tr>{h}</tr></thead><tbody>{"".join(out)}</tbody></table>'


_CSS = ("body{font-family:system-ui,sans-serif;max-width:1240px;margin:2em auto;padding:0 1em;color:#222;"
        "line-height:1.45}h1{margin-bottom:.2em}h2{margin-top:1.8em;border-bottom:1px solid #ddd}"
        "table{border-collapse:collapse;font-size:13px;margin:.6em 0}"
        "td,th{border:1px solid #d4d4d4;padding:3px 8px;text-align:left;vertical-align:top}"
        "thead th{background:#eef1f5;position:sticky;top:0}tbody tr:nth-child(even) td{background:#fafafa}"
        "tr.family th{background:#dde6f0;text-align:left;font-size:13px}"
        "table.summary td:nth-child(n+3){text-align:right;font-variant-numeric:tabular-nums}"
        "table.worst td{font-size:12px;max-width:360px;overflow-wrap:anywhere}"
        ".prov{background:#f6f8fa;border:1px solid #ddd;padding:.6em 1em;font-size:13px}"
        ".prov dt{font-weight:bold;float:left;clear:left;width:7em}.prov dd{margin-left:7.5em}"
        ".prov code{overflow-wrap:anywhere}dl.defs dt{font-weight:bold;margin-top:.4em}dl.defs dd{margin-left:1.5em}"
        ".note{font-size:13px;color:#444}.wide{overflow-x:auto;border:1px solid #eee}"
        ".wide img{max-width:none}img{max-width:100%;display:block;margin:1em 0}"
        ".conclusion li{margin:.2em 0}")


def _sections(rows, prov):
    """The report's parts, shared by the Markdown and the HTML writers."""
    n_t, n_r = len(_tensors(rows)), len(_recipes(rows))
    summary_head, summary_body = _summary_table(rows)
    return {
        "intro": f"{n_t} tensors x {n_r} recipes ({len(rows)} rows of results.csv).",
        "provenance": prov,
        "conclusion": conclusions(rows),
        "summary": (summary_head, summary_body),
        "by_design": any(row[6].endswith("†") for _, row in summary_body),
        "best": _best_table(rows),
        "worst": _worst_table(rows),
    }


def _markdown(parts, figures):
    md = ["# fp8emu study report", "", parts["intro"], ""]
    md += [f"- **{k}**: `{v}`" if k == "command" else f"- **{k}**: {v}" for k, v in parts["provenance"].items()]
    md += ["", "## Conclusion", ""] + [f"- {c}" for c in parts["conclusion"]] + ["", "## Recipes", ""]
    head, body = parts["summary"]
    md += [_md_table(["family"] + head, [[fam] + row for fam, row in body]), ""]
    if parts["by_design"]:
        md += [f"† {_BY_DESIGN}.", ""]
    md += ["## What the columns mean", ""] + [f"- **{k}**: {v}" for k, v in DEFINITIONS.items()] + [""]
    md += ["## Best recipe per tensor", "", _md_table(*parts["best"]), ""]
    for name, (title, _) in figures.items():
        md += [f"## {title}", "", f"![{title}](figures/{name}.png)", ""]
    md += ["## Lowest-SQNR tensors per recipe", "", _md_table(*parts["worst"]), ""]
    return "\n".join(md)


def _html(parts, figures, pngs):
    prov = "".join(f"<dt>{html.escape(k)}</dt><dd>" + (f"<code>{html.escape(v)}</code>" if k == "command"
                                                          else html.escape(v)) + "</dd>"
                   for k, v in parts["provenance"].items())
    head, body = parts["summary"]
    body_html = [f"<h1>fp8emu study report</h1><p>{html.escape(parts['intro'])}</p>",
                 f'<dl class="prov" id="provenance">{prov}</dl>',
                 '<h2 id="conclusion">Conclusion</h2><ul class="conclusion">'
                 + "".join(f"<li>{html.escape(c)}</li>" for c in parts["conclusion"]) + "</ul>",
                 "<h2>Recipes</h2>",
                 _html_table(head, [row for _, row in body], groups=[fam for fam, _ in body], cls="summary")]
    if parts["by_design"]:
        body_html.append(f'<p class="note">† {html.escape(_BY_DESIGN)}.</p>')
    body_html.append('<h2 id="definitions">What the columns mean</h2><dl class="defs">'
                     + "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in DEFINITIONS.items())
                     + "</dl>")
    body_html += ['<h2 id="best">Best recipe per tensor</h2>', _html_table(*parts["best"], cls="best")]
    for name, (title, _) in figures.items():
        data = base64.b64encode(pngs[name]).decode("ascii")
        # the heat map keeps its size (legible cells) and scrolls sideways; other figures fit the page
        box = "wide" if name == "sqnr_heatmap" else "fit"
        body_html.append(f'<h2>{html.escape(title)}</h2><div class="{box}"><img id="{name}" '
                         f'alt="{html.escape(title)}" src="data:image/png;base64,{data}"></div>')
    body_html += ["<h2>Lowest-SQNR tensors per recipe</h2>", _html_table(*parts["worst"], cls="worst")]
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>fp8emu study report</title>"
            f"<style>{_CSS}</style></head><body>{''.join(body_html)}</body></html>")


def write_report(rows, out, *, inputs=(), command=None) -> list:
    """Write ``report.md``, ``report.html`` and ``figures/*.png`` under ``out``; return their paths.

    Parameters
    ----------
    rows : iterable of dict
        Rows of ``results.csv``.
    out : str or Path
        Output folder.
    inputs : sequence of str, keyword-only
        The checkpoints studied, for the provenance block.
    command : str, optional, keyword-only
        The command that ran the study, for the provenance block.

    Raises
    ------
    ValueError
        If there are no rows.
    """
    rows = list(rows)
    if not rows:
        raise ValueError("no results to report")
    out = Path(out)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    figures = {"sqnr_heatmap": ("SQNR per recipe and tensor", figure_heatmap(rows)),
               "sqnr_vs_dynamic_range": ("SQNR vs dynamic range", figure_sqnr_vs_range(rows))}
    pngs = {}
    paths = []
    for name, (_, fig) in figures.items():
        pngs[name] = png_bytes(fig)
        path = out / "figures" / f"{name}.png"
        path.write_bytes(pngs[name])
        paths.append(path)
    parts = _sections(rows, provenance(inputs=inputs, command=command))
    (out / "report.md").write_text(_markdown(parts, figures), encoding="utf-8")
    (out / "report.html").write_text(_html(parts, figures, pngs), encoding="utf-8")
    return [out / "report.md", out / "report.html"] + paths


_PROBE = """<script>window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var out = document.createElement('pre'); out.id = 'fp8emu-image-check';
  out.textContent = JSON.stringify(imgs.map(function (i) {
    return {id: i.id, complete: i.complete, width: i.naturalWidth, height: i.naturalHeight}; }));
  document.body.appendChild(out);
});</script>"""


def _chromium(executable):
    exe = executable or shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        raise FileNotFoundError("no chromium executable found (Debian: apt-get install chromium)")
    return [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--mute-audio",
            "--no-first-run", "--allow-file-access-from-files"]


def check_in_browser(report_html, *, screenshot=None, executable=None, width=1280, height=2400,
                     timeout=120) -> list:
    """Render ``report.html`` in headless Chromium and report how each ``<img>`` loaded.

    A copy of the page with a small probe script (the report itself has no
    script) is loaded with ``--dump-dom``; on the ``load`` event the probe
    records, for every image, whether it completed and its decoded size
    (``naturalWidth`` is 0 for an image the browser could not decode).
    With ``screenshot``, the original page is also rendered to that PNG.

    Returns
    -------
    list of dict
        ``{"id", "complete", "width", "height"}`` per image, in page order.

    Raises
    ------
    FileNotFoundError
        If Chromium is not installed.
    OSError
        If Chromium fails or the probe's result is missing.
    """
    page = Path(report_html).resolve()
    cmd = _chromium(executable)
    with tempfile.TemporaryDirectory() as d:
        probe = Path(d) / "probe.html"
        # a regular UTF-8 file or one line naming it (a FIFO blocked here, a folder was IsADirectoryError)
        probe.write_text(readers.read_text(page, kind="report page").replace("</body>", _PROBE + "</body>"))
        run = subprocess.run(cmd + ["--virtual-time-budget=10000", "--dump-dom", probe.as_uri()],
                             capture_output=True, text=True, timeout=timeout)
    m = re.search(r'<pre id="fp8emu-image-check">(.*?)</pre>', run.stdout, re.S)
    if run.returncode or not m:
        raise OSError(f"chromium could not render {page}: exit {run.returncode}, {run.stderr[-500:]}")
    images = json.loads(html.unescape(m.group(1)))
    if screenshot is not None:
        shot = Path(screenshot).resolve()
        run = subprocess.run(cmd + [f"--window-size={width},{height}", f"--screenshot={shot}", page.as_uri()],
                             capture_output=True, text=True, timeout=timeout)
        if run.returncode or not shot.is_file():
            raise OSError(f"chromium could not take a screenshot of {page}: {run.stderr[-500:]}")
    return images
