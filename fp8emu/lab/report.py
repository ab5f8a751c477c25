"""Reports of a checkpoint study: ``report.md`` and a self-contained ``report.html``.

From the rows of ``results.csv`` (:func:`fp8emu.lab.study.read_results`):

* a summary table of the recipes (median / worst SQNR over tensors, the
  element-weighted fractions overflowed, saturated, flushed to zero and
  subnormal, tensors that came out with Inf/NaN);
* a heat map of SQNR, tensors x recipes;
* SQNR against the tensors' dynamic range (``log2(max / min non-zero |x|)``);
* the worst tensors of each recipe.

``report.md`` links the figures written to ``figures/``; ``report.html``
embeds the same PNGs as base64, so the one file can be mailed or attached.
Figures use matplotlib's object API (``matplotlib.figure.Figure``), imported
when a report is written; no backend is switched.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["summarize", "worst_tensors", "figure_heatmap", "figure_sqnr_vs_range", "write_report",
           "MAX_HEATMAP_TENSORS", "check_in_browser"]

#: The heat map shows at most this many tensors (the worst by median SQNR).
MAX_HEATMAP_TENSORS = 60
#: SQNR (dB) shown for exact results in plots (their rows say ``inf``).
_EXACT_DB = 150.0


def _recipes(rows):
    seen = {}
    for r in rows:
        seen.setdefault(r["recipe"], None)
    return list(seen)


def _tensors(rows):
    seen = {}
    for r in rows:
        seen.setdefault((r["checkpoint"], r["tensor"]), None)
    return list(seen)


def summarize(rows) -> list:
    """One dict per recipe: tensors, median and worst SQNR, weighted fractions.

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
    >>> s["median_sqnr_db"], s["min_sqnr_db"], s["frac_saturated"]
    (25.0, 20.0, 0.025)
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
            "recipe": name, "format": rs[0]["format"], "tensors": len(rs),
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


def _grid(rows):
    tensors, recipes = _tensors(rows), _recipes(rows)
    ti = {t: i for i, t in enumerate(tensors)}
    ri = {r: i for i, r in enumerate(recipes)}
    grid = np.full((len(tensors), len(recipes)), np.nan)
    for r in rows:
        grid[ti[(r["checkpoint"], r["tensor"])], ri[r["recipe"]]] = r["sqnr_db"]
    return tensors, recipes, grid


def _new_figure(width, height):
    from matplotlib.figure import Figure
    return Figure(figsize=(width, height), dpi=100)


def figure_heatmap(rows):
    """Heat map of SQNR (dB), tensors x recipes (worst tensors first if there are many).

    Cells are annotated with the SQNR; ``-inf`` (Inf/NaN output) is black,
    exact results are shown as ``exact``; the colour scale stops at 40..80 dB.
    """
    from matplotlib import colormaps
    tensors, recipes, grid = _grid(rows)
    labels = [t for _, t in tensors] if len({c for c, _ in tensors}) == 1 else [f"{c}:{t}" for c, t in tensors]
    note = ""
    if len(tensors) > MAX_HEATMAP_TENSORS:
        med = np.nanmedian(np.where(np.isinf(grid) & (grid > 0), _EXACT_DB, grid), axis=1)
        keep = np.sort(np.argsort(med, kind="stable")[:MAX_HEATMAP_TENSORS])
        grid, labels = grid[keep], [labels[i] for i in keep]
        note = f" (the {MAX_HEATMAP_TENSORS} tensors of lowest median SQNR of {len(tensors)})"
    finite = grid[np.isfinite(grid)]
    # FP8-scale results span 0..60 dB; a few near-exact tensors must not wash the colours out.
    vmax = float(np.clip(np.max(finite), 40.0, 80.0)) if finite.size else 60.0
    vmin = float(min(0.0, np.min(finite))) if finite.size else 0.0
    shown = np.where(np.isposinf(grid), vmax + 1, grid)
    cmap = colormaps["viridis"].with_extremes(under="black", over="#fff7a0", bad="lightgrey")
    fig = _new_figure(max(7.0, 0.42 * len(recipes) + 3.5), max(3.0, 0.26 * len(labels) + 2.2))
    ax = fig.add_subplot()
    img = ax.imshow(np.where(np.isneginf(shown), vmin - 1, shown), aspect="auto", cmap=cmap,
                    vmin=vmin, vmax=vmax, interpolation="nearest")
    ax.set_xticks(range(len(recipes)), recipes, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    if grid.size <= 2500:
        for (i, j), v in np.ndenumerate(grid):
            text = "exact" if np.isposinf(v) else "-inf" if np.isneginf(v) else f"{v:.0f}"
            colour = "white" if (np.isneginf(v) or (np.isfinite(v) and v < (vmin + vmax) / 2)) else "black"
            text = text if not (np.isfinite(v) and v > vmax) else f"{v:.0f}"
            ax.text(j, i, text, ha="center", va="center", fontsize=6, color=colour)
    fig.colorbar(img, ax=ax, label="SQNR (dB)", extend="both")
    ax.set_title("SQNR per tensor and recipe" + note, fontsize=10)
    fig.tight_layout()
    return fig


#: Colours (matplotlib's tab20, strong ones first) and markers of the recipes in the scatter plot:
#: recipe i gets colour i % 20 and marker i // 20, so up to 20 x 13 = 260 recipes (the whole
#: matrix has fewer) each have a distinct pair, and neighbours in the legend differ in colour.
RECIPE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                  "#bcbd22", "#17becf",          # tab20's strong colours first (a few recipes: tab10)
                  "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7",
                  "#dbdb8d", "#9edae5")
RECIPE_MARKERS = ("o", "s", "^", "v", "D", "<", ">", "p", "h", "*", "P", "X", "d")
#: Legend entries per column.
_LEGEND_ROWS = 28


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


def figure_sqnr_vs_range(rows):
    """SQNR against the dynamic range ``log2(max/min non-zero |x|)``, one colour+marker pair per recipe.

    Exact results are drawn at the top edge, Inf/NaN outputs at the bottom.
    The legend has as many columns as the recipes need (at most
    ``_LEGEND_ROWS`` entries each) and the figure grows to hold it.
    """
    recipes = _recipes(rows)
    styles = recipe_styles(recipes)
    ncol = max(1, -(-len(recipes) // _LEGEND_ROWS))
    rows_shown = min(len(recipes), _LEGEND_ROWS)
    fig = _new_figure(7.0 + 2.3 * ncol, max(5.0, 0.16 * rows_shown + 1.5))
    ax = fig.add_subplot()
    finite = [r["sqnr_db"] for r in rows if math.isfinite(r["sqnr_db"])]
    top = max(finite) + 5 if finite else 60.0
    bottom = min(min(finite) - 5, -5.0) if finite else -5.0
    for name in recipes:
        rs = [r for r in rows if r["recipe"] == name and not math.isnan(r["dynamic_range_log2"])]
        x = np.array([r["dynamic_range_log2"] for r in rs])
        y = np.array([r["sqnr_db"] for r in rs], dtype=np.float64)
        y = np.where(np.isposinf(y), top, np.where(np.isneginf(y), bottom, y))
        colour, marker = styles[name]
        ax.scatter(x, y, s=18, alpha=0.75, color=colour, marker=marker, label=name)
    ax.set_ylim(bottom - 2, top + 2)
    ax.set_xlabel("dynamic range of the tensor: log2(max |x| / min non-zero |x|)")
    ax.set_ylabel("SQNR (dB)")
    ax.grid(True, alpha=0.3)
    ax.set_title("SQNR vs dynamic range (top edge: exact; bottom edge: Inf/NaN output)", fontsize=10)
    ax.legend(fontsize=7, ncol=ncol, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    # the axes keep a fixed share of the width; the legend sits in the rest (savefig's tight
    # bounding box keeps all of it), so no tight_layout that a tall legend could defeat
    fig.subplots_adjust(left=0.9 / fig.get_figwidth(), right=6.3 / fig.get_figwidth(), top=0.92,
                        bottom=0.7 / fig.get_figheight() + 0.05)
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def _db(v):
    return "exact" if v == math.inf else "-inf" if v == -math.inf else f"{v:.1f}"


def _pct(v):
    return f"{100 * v:.3g}%"


def _tables(rows):
    summary = [["recipe", "format", "tensors", "median SQNR (dB)", "worst SQNR (dB)", "overflow",
                "saturated", "flushed to 0", "subnormal", "tensors with Inf/NaN out"]]
    for s in summarize(rows):
        summary.append([s["recipe"], s["format"], str(s["tensors"]), _db(s["median_sqnr_db"]),
                        _db(s["min_sqnr_db"]), _pct(s["frac_overflow"]), _pct(s["frac_saturated"]),
                        _pct(s["frac_flushed"]), _pct(s["frac_subnormal"]), str(s["nonfinite"])])
    worst = [["recipe", "worst tensors (SQNR dB, dynamic range log2)"]]
    for name, rs in worst_tensors(rows).items():
        worst.append([name, ", ".join(f"{r['tensor']} ({_db(r['sqnr_db'])}, {r['dynamic_range_log2']:.1f})"
                                      for r in rs)])
    return summary, worst


def _md_table(t):
    lines = ["| " + " | ".join(t[0]) + " |", "|" + "---|" * len(t[0])]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in t[1:]]
    return "\n".join(lines)


def _html_table(t):
    head = "".join(f"<th>{html.escape(c)}</th>" for c in t[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in t[1:])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_CSS = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;font-size:13px;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f0f0f0}"
        "img{max-width:100%;display:block;margin:1em 0}")


def write_report(rows, out) -> list:
    """Write ``report.md``, ``report.html`` and ``figures/*.png`` under ``out``; return their paths.

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
    figures = {"sqnr_heatmap": ("SQNR per tensor and recipe", figure_heatmap(rows)),
               "sqnr_vs_dynamic_range": ("SQNR vs dynamic range", figure_sqnr_vs_range(rows))}
    pngs = {}
    paths = []
    for name, (_, fig) in figures.items():
        pngs[name] = _png(fig)
        path = out / "figures" / f"{name}.png"
        path.write_bytes(pngs[name])
        paths.append(path)
    summary, worst = _tables(rows)
    n_t = len(_tensors(rows))
    n_r = len(_recipes(rows))
    intro = (f"{n_t} tensors x {n_r} recipes ({len(rows)} rows of results.csv). SQNR is "
             "10 log10(sum x^2 / sum (q - x)^2) over the finite inputs; 'exact' means no error, "
             "'-inf' that a finite input came out as Inf or NaN.")
    md = ["# fp8emu study report", "", intro, "", "## Recipes", "", _md_table(summary), ""]
    for name, (title, _) in figures.items():
        md += [f"## {title}", "", f"![{title}](figures/{name}.png)", ""]
    md += ["## Worst tensors per recipe", "", _md_table(worst), ""]
    (out / "report.md").write_text("\n".join(md))
    body = [f"<h1>fp8emu study report</h1><p>{html.escape(intro)}</p>", "<h2>Recipes</h2>",
            _html_table(summary)]
    for name, (title, _) in figures.items():
        data = base64.b64encode(pngs[name]).decode("ascii")
        body.append(f"<h2>{html.escape(title)}</h2>"
                    f'<img id="{name}" alt="{html.escape(title)}" src="data:image/png;base64,{data}">')
    body += ["<h2>Worst tensors per recipe</h2>", _html_table(worst)]
    page = ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>fp8emu study report</title>"
            f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>")
    (out / "report.html").write_text(page)
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
        probe.write_text(page.read_text().replace("</body>", _PROBE + "</body>"))
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
