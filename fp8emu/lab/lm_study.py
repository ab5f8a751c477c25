"""The language-model study's tables, figures and report (``report.md`` and a self-contained ``report.html``).

NumPy and matplotlib only (no torch): the runs come from :mod:`fp8emu.torch.study`, and the committed
tables in ``docs/data/lm-study`` can be read, drawn and summarised where torch is not installed.

Tables (CSV, written by :func:`write_tables`):

* ``runs.csv``: one row per run (final validation loss over the final windows,
  mean of the last ten training losses, divergence, seconds per step);
* ``curves.csv``: validation loss at every evaluation step of every run;
* ``gaps.csv``: per recipe x stack, the final validation loss minus the bf16
  baseline's at the same seed (paired), averaged over seeds, with a 95 %
  Student-t confidence interval (``mean +- t(0.975, n-1) * sd / sqrt(n)``;
  empty with one seed), and the slowdown of a training step against fp32;
* ``diagnostics.csv``: :func:`fp8emu.torch.diagnostics` averaged per layer,
  pass and evaluation interval (the first seed of every recipe x stack).

Examples
--------
>>> gap_stats([0.1, 0.3])["mean"], round(gap_stats([0.1, 0.3])["ci_high"], 4)
(0.2, 1.4706)
"""

from __future__ import annotations

import base64
import csv
import html
import math
from pathlib import Path

import numpy as np

from .report import _png

__all__ = ["gap_stats", "run_rows", "gap_rows", "write_csv", "write_tables", "write_report", "guide_tables", "T975",
           "figure_curves", "figure_gaps", "figure_diagnostics"]

#: Two-sided 95 % Student-t quantiles t(0.975, df) for df = 1..30 (standard tables); beyond, 1.96.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)


def gap_stats(gaps) -> dict:
    """Mean, sample sd and 95 % t interval of paired gaps (NaN where undefined)."""
    g = np.asarray([x for x in gaps], dtype=np.float64)
    n = int(g.size)
    mean = float(g.mean()) if n else math.nan
    if n < 2 or not np.isfinite(g).all():
        return {"n": n, "mean": mean, "sd": math.nan, "ci_low": math.nan, "ci_high": math.nan}
    sd = float(g.std(ddof=1))
    t = T975[n - 2] if n - 1 <= len(T975) else 1.96
    half = t * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "ci_low": mean - half, "ci_high": mean + half}


def _label(recipe, stack):
    return recipe if stack is None else f"{recipe}@{stack}"


def run_rows(results) -> list:
    """One dict per run (the columns of ``runs.csv``)."""
    rows = []
    for r in results:
        s = r["spec"]
        rows.append({"run_id": r["run_id"], "recipe": s["recipe"], "stack": s["stack"] or "", "seed": s["seed"],
                     "final_val_loss": r["final_val_loss"], "final_train_loss": r["final_train_loss"],
                     "diverged": int(bool(r["diverged"])), "steps": len(r["train_loss"]),
                     "s_per_step": r["s_per_step"], "wall_s": r["wall_s"], "swapped": len(r["swapped"])})
    return rows


def gap_rows(results) -> list:
    """Per recipe x stack (baselines included): loss, paired gap to bf16 with its interval, slowdown vs fp32."""
    by = {}
    for r in results:
        s = r["spec"]
        by.setdefault((s["recipe"], s["stack"]), {})[s["seed"]] = r
    bf16 = by.get(("bf16", None), {})
    fp32 = by.get(("fp32", None), {})
    fp32_step = np.mean([r["s_per_step"] for r in fp32.values()]) if fp32 else math.nan
    rows = []
    for (recipe, stack), seeds in by.items():
        finals = [r["final_val_loss"] for r in seeds.values()]
        paired = [seeds[k]["final_val_loss"] - bf16[k]["final_val_loss"] for k in sorted(seeds) if k in bf16]
        st = gap_stats(paired)
        step = float(np.mean([r["s_per_step"] for r in seeds.values()]))
        rows.append({"recipe": recipe, "stack": stack or "", "label": _label(recipe, stack),
                     "seeds": len(seeds), "diverged": sum(bool(r["diverged"]) for r in seeds.values()),
                     "mean_final_val_loss": float(np.mean(finals)), "gap_to_bf16": st["mean"],
                     "gap_sd": st["sd"], "gap_ci95_low": st["ci_low"], "gap_ci95_high": st["ci_high"],
                     "paired_seeds": st["n"], "s_per_step": step, "slowdown_vs_fp32": float(step / fp32_step)})
    return rows


def _curve_rows(results):
    for r in results:
        s = r["spec"]
        for step, v in zip(r["eval_steps"], r["val_loss"]):
            yield {"run_id": r["run_id"], "recipe": s["recipe"], "stack": s["stack"] or "", "seed": s["seed"],
                   "step": step, "val_loss": v}


def _diag_rows(results):
    for r in results:
        for d in r.get("diagnostics") or []:
            yield {"run_id": r["run_id"], **d}


def _fmt(v):
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ("nan" if v != v else repr(v))
    return "" if v is None else str(v)


def write_csv(path, rows, columns=None):
    """Write dict rows as CSV (columns: ``columns`` or the first row's keys; NaN as ``nan``)."""
    rows = list(rows)
    columns = columns or (list(rows[0]) if rows else [])
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(columns)
        for row in rows:
            w.writerow([_fmt(row.get(c)) for c in columns])


def write_tables(results, out) -> dict:
    """Write the four CSV files under ``out``; returns {name: path}."""
    out = Path(out)
    paths = {}
    for name, rows in (("runs", run_rows(results)), ("curves", _curve_rows(results)),
                       ("gaps", gap_rows(results)), ("diagnostics", _diag_rows(results))):
        paths[name] = out / f"{name}.csv"
        write_csv(paths[name], rows)
    return paths


# --------------------------------------------------------------------------- figures

def _figure(w, h):
    from matplotlib.figure import Figure
    return Figure(figsize=(w, h))


def figure_curves(results):
    """Validation loss against step: mean over seeds, band from the lowest to the highest seed; a panel per stack."""
    groups = {}
    for r in results:
        s = r["spec"]
        groups.setdefault((s["recipe"], s["stack"]), []).append(r)
    stacks = sorted({k[1] for k in groups if k[1] is not None}) or [None]
    fig = _figure(6 * len(stacks), 4.2)
    axes = fig.subplots(1, len(stacks), squeeze=False)[0]
    for ax, stack in zip(axes, stacks):
        for (recipe, st), rs in groups.items():
            if st is not None and st != stack:
                continue
            steps = rs[0]["eval_steps"]
            n = min(len(r["val_loss"]) for r in rs)
            v = np.array([r["val_loss"][:n] for r in rs], dtype=float)
            style = dict(color="k", ls="--") if recipe == "bf16" else dict(color="0.5", ls=":") \
                if recipe == "fp32" else {}
            line, = ax.plot(steps[:n], v.mean(0), label=f"{recipe} ({len(rs)} seeds)", lw=1.3, **style)
            ax.fill_between(steps[:n], v.min(0), v.max(0), color=line.get_color(), alpha=0.18, lw=0)
        ax.set_title(f"stack {stack}" if stack else "baselines")
        ax.set_xlabel("step")
        ax.set_ylabel("validation loss (nats/byte)")
        lo = min(min(r["val_loss"]) for r in results)
        ax.set_ylim(lo - 0.05, lo + 1.5)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def figure_gaps(rows):
    """Final validation loss minus bf16's (paired by seed), with its 95 % interval, per recipe x stack."""
    rows = [r for r in rows if r["recipe"] != "bf16"]
    fig = _figure(7, 0.35 * len(rows) + 1.4)
    ax = fig.subplots()
    y = np.arange(len(rows))
    mean = np.array([r["gap_to_bf16"] for r in rows], dtype=float)
    lo = np.array([r["gap_ci95_low"] for r in rows], dtype=float)
    hi = np.array([r["gap_ci95_high"] for r in rows], dtype=float)
    err = np.where(np.isfinite(lo), np.vstack([mean - lo, hi - mean]), 0)
    ax.errorbar(mean, y, xerr=err, fmt="o", ms=4, capsize=3)
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks(y, [r["label"] for r in rows], fontsize=8)
    ax.set_xlabel("final validation loss - bf16 (nats/byte); bars: 95 % t interval over seeds")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


_DIAG_PANELS = (("gemm_rel_err", "log10 GEMM rel. error", True), ("frac_underflow", "fraction underflowed", False),
                ("frac_saturated", "fraction saturated", False), ("amax", "log2 amax", None))


def figure_diagnostics(result):
    """Heat maps (layer.pass x step) of one run's diagnostics."""
    cells = result.get("diagnostics") or []
    keys = sorted({(c["layer"], c["pass"]) for c in cells})
    steps = sorted({c["step"] for c in cells})
    fig = _figure(16, 0.22 * len(keys) + 1.8)
    axes = fig.subplots(1, len(_DIAG_PANELS), squeeze=False)[0]
    for ax, (field, title, log10) in zip(axes, _DIAG_PANELS):
        grid = np.full((len(keys), len(steps)), np.nan)
        for c in cells:
            v = c.get(field)
            if v is None:
                continue
            v = float(v)
            if log10 is True:
                v = math.log10(v) if v > 0 else np.nan
            elif log10 is None:
                v = math.log2(v) if v > 0 else np.nan
            grid[keys.index((c["layer"], c["pass"])), steps.index(c["step"])] = v
        im = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="viridis")
        fig.colorbar(im, ax=ax, shrink=0.8)
        ax.set_title(title, fontsize=9)
        ax.set_xticks(range(len(steps)), [str(s) for s in steps], fontsize=6, rotation=90)
        ax.set_yticks(range(len(keys)), [f"{a}.{b}" for a, b in keys], fontsize=6)
        ax.set_xlabel("step")
    fig.suptitle(f"diagnostics of {result['run_id']}", fontsize=10)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- report

def _cell(v, digits=4):
    if isinstance(v, float):
        return "" if v != v else f"{v:.{digits}f}"
    return str(v)


def _gap_table(rows):
    t = [["recipe", "stack", "seeds", "diverged", "final val loss", "gap to bf16", "95 % CI", "s/step",
          "x fp32 step"]]
    for r in rows:
        ci = "" if r["gap_ci95_low"] != r["gap_ci95_low"] else \
            f"[{r['gap_ci95_low']:+.4f}, {r['gap_ci95_high']:+.4f}]"
        t.append([r["recipe"], r["stack"] or "-", str(r["seeds"]), str(r["diverged"]),
                  _cell(r["mean_final_val_loss"]), "" if r["gap_to_bf16"] != r["gap_to_bf16"]
                  else f"{r['gap_to_bf16']:+.4f}", ci, _cell(r["s_per_step"], 3), _cell(r["slowdown_vs_fp32"], 1)])
    return t


def _md_table(t):
    lines = ["| " + " | ".join(t[0]) + " |", "|" + "---|" * len(t[0])]
    return "\n".join(lines + ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in t[1:]])


def _html_table(t):
    head = "".join(f"<th>{html.escape(c)}</th>" for c in t[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in t[1:])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_CSS = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;font-size:13px;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f0f0f0}"
        "img{max-width:100%;display:block;margin:1em 0}")


def write_report(results, out, provenance: dict, inference_rows=None) -> list:
    """Write the CSV tables, ``figures/*.png``, ``report.md`` and ``report.html`` under ``out``."""
    results = list(results)
    if not results:
        raise ValueError("no finished runs to report")
    out = Path(out)
    write_tables(results, out)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    gaps = gap_rows(results)
    figs = [("val_loss_curves", "Validation loss (mean over seeds, band: lowest to highest seed)",
             figure_curves(results)),
            ("gap_to_bf16", "Final gap to bf16 (paired by seed, 95 % t interval)", figure_gaps(gaps))]
    figs += [(f"diagnostics_{r['run_id'].replace('@', '_at_')}", f"Per-layer diagnostics: {r['run_id']}",
              figure_diagnostics(r)) for r in results if r.get("diagnostics")]
    pngs = {name: _png(fig, dpi=90) for name, _, fig in figs}
    for name, data in pngs.items():
        (out / "figures" / f"{name}.png").write_bytes(data)
    prov = [["item", "value"]] + [[k, str(v)] for k, v in provenance.items()]
    write_csv(out / "provenance.csv", [{"item": k, "value": v} for k, v in provenance.items()])
    tables = [("Provenance", prov), ("Final gap to bf16 per recipe x stack", _gap_table(gaps))]
    if inference_rows:
        tables.append(("Inference: perplexity of the trained bf16 model", _infer_table(inference_rows)))
    md = ["# fp8emu train-study report", ""]
    body = ["<h1>fp8emu train-study report</h1>"]
    for title, t in tables:
        md += [f"## {title}", "", _md_table(t), ""]
        body += [f"<h2>{html.escape(title)}</h2>", _html_table(t)]
    for name, title, _ in figs:
        md += [f"## {title}", "", f"![{title}](figures/{name}.png)", ""]
        data = base64.b64encode(pngs[name]).decode("ascii")
        body.append(f"<h2>{html.escape(title)}</h2><img id=\"{name}\" alt=\"{html.escape(title)}\" "
                    f"src=\"data:image/png;base64,{data}\">")
    (out / "report.md").write_text("\n".join(md), encoding="utf-8")
    (out / "report.html").write_text(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>fp8emu train-study report</title>"
        f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>", encoding="utf-8")
    return [out / "report.md", out / "report.html"] + [out / "figures" / f"{n}.png" for n in pngs]


def _infer_table(rows):
    t = [["configuration", "weights", "activations", "attention / KV", "val loss", "perplexity", "x bf16 ppl"]]
    for r in rows:
        t.append([r["config"], r["weights"], r["activations"], r["attention"], _cell(r["val_loss"]),
                  _cell(r["perplexity"], 3), _cell(r["ppl_ratio_to_bf16"], 4)])
    return t


# --------------------------------------------------------------------------- the guide's tables

def _read_csv(path) -> list:
    def conv(k, v):
        if k in ("recipe", "stack", "label", "config", "weights", "activations", "attention", "run_id"):
            return v
        if v == "":
            return math.nan
        try:
            return int(v)
        except ValueError:
            return float(v)
    with open(path, newline="", encoding="utf-8") as f:
        return [{k: conv(k, v) for k, v in row.items()} for row in csv.DictReader(f)]


def guide_tables(folder) -> str:
    """The Markdown tables the guide shows, made from ``gaps.csv`` and ``inference.csv`` in ``folder``.

    ``docs/guides/lm-study.md`` holds this text between its ``lm-study:tables`` markers; a test
    regenerates it from the committed CSV and compares.
    """
    folder = Path(folder)
    runs_ = _read_csv(folder / "runs.csv")
    fp8 = [r for r in runs_ if r["stack"] != ""]
    parts = [f"{len(runs_)} runs ({len(runs_) - len(fp8)} baseline, {len(fp8)} emulated); the runs' wall times "
             f"add up to {sum(r['wall_s'] for r in runs_) / 60:.1f} min "
             f"({sum(r['wall_s'] for r in fp8) / 60:.1f} min in emulated runs), one thread each.", "",
             "Final validation loss and gap to bf16 (paired by seed; 95 % t interval):", "",
             _md_table(_gap_table(_read_csv(folder / "gaps.csv")))]
    if (folder / "inference.csv").exists():
        parts += ["", "Inference of the trained bf16 model (seed 0), validation perplexity:", "",
                  _md_table(_infer_table(_read_csv(folder / "inference.csv")))]
    return "\n".join(parts) + "\n"
