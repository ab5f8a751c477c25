"""The gradient study's numbers: probe metrics, the findings (a)-(g) with their verdict rules, tables and report.

Torch-free: :mod:`fp8emu.torch.study.grad` runs the probes (cells) and hands their rows here;
everything below works on plain dicts and NumPy arrays, so the findings can be recomputed from the
committed CSV files alone (a test does).

The metrics of a result against its reference (``rel_err``, ``cosine``, ``shrink``, the error of a mean
over draws, slopes and floors) are :mod:`fp8emu.lab.grad_metrics`'s.

Examples
--------
>>> [(f["finding"], f["verdict"]) for f in findings({})][:2]     # no tables: nothing ran
[('a', 'not at this scale'), ('b', 'not at this scale')]
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path

import numpy as np

from .grad_metrics import fit_floor, loglog_slope
from .report import log_y, png_bytes
from .store import plain_number, read_rows, write_rows

__all__ = ["THRESHOLDS", "findings", "spike_summary",
           "write_csv", "read_csv", "read_tables", "write_report", "guide_table", "readme_block", "pair_summary", "TABLES",
           "DEFINITIONS", "SHORT"]

#: The CSV tables a study writes (one per cell kind; ``findings.csv`` is computed from them).
TABLES = ("probes", "bias", "draws", "operands", "ksweep", "widths", "spike", "forks")

#: The columns of each table that the finding rules, figures and summaries read (the cells write these and more).
COLUMNS = {
    "probes": ("accum_err", "cosine", "draws", "gemm", "layer", "model_rel_err_fp32", "model_rel_err_qat",
               "qat_rel_err_fp32", "quant_err", "recipe", "rel_err", "rel_err_mean", "shrink", "stack", "state"),
    "bias": ("case", "level", "n", "recipe", "rel_err_mean"),
    "draws": ("case", "gemm", "recipe", "rel_err"),
    "operands": ("case", "finding", "metric", "value"),
    "ksweep": ("K", "accum_err", "accum_max_rel", "gemm", "quant_err", "recipe", "rel_err", "stack"),
    "widths": ("K", "accum_err", "accum_max_rel", "gemm", "quant_err", "stack"),
    "spike": ("fprop_rel_err", "frac_saturated", "frac_underflow", "history", "recipe", "spiked", "step"),
    "forks": ("label", "loss_minus_fp32", "step", "weight_dist"),
}


#: The verdict rules' thresholds (each used by one finding below; the report prints them).
THRESHOLDS = {
    "a_slope": (-0.65, -0.35),     # SR operand mean error falls like n^slope, slope in this range: 1/sqrt(N)
    "a_floor_ratio": 0.8,          # SR's wgrad bias floor below this fraction of no-SR's error
    "b_zero": 1e-7,                # 2-D scaling: fprop and dgrad weights differ by less than this (relative)
    "b_mismatch": 1e-3,            # 1-D scaling: they differ by more than this
    "c_ratio": (0.95, 1.05),       # RHT / no-RHT wgrad error: below the first reproduces, above the second contradicts
    "d_slope": 0.25,               # fast accumulation's error grows at least like K^0.25
    "d_bound": 0.25,               # promotion every 128 keeps the error below this fraction of fast's at K max
    "e_factor": 2.0,               # the spike step saturates when its fprop error exceeds this x the median before;
                                   # a later step is off when its underflowed fraction exceeds this x the largest before
    "e_floor": 1e-3,               # ... plus this fraction of the input
    "e_tolerance": 1,              # delayed scaling off for the history length, +- this many steps
    "f_ratio": 2.0,                # SR / MS-EDEN mean squared error at least this ("over 2x lower")
    "f_slope": -0.35,              # MS-EDEN's mean over draws falls at least like n^this (unbiased)
    "g_ratio": 1.0,                # round-up's gradient error at most this x floor's
    "g_contradict": 1.05,          # above this x floor's, contradicted
}

#: The paper each finding tests.
PAPERS = {
    "a": "Tseng et al. arXiv 2502.20586; NVIDIA arXiv 2509.25149",
    "b": "NVIDIA arXiv 2509.25149 (16x16 2-D weight scaling)",
    "c": "NVIDIA arXiv 2509.25149 (random Hadamard transform on wgrad)",
    "d": "DeepSeek-V3 arXiv 2412.19437 (sec. 3.3.2)",
    "e": "Transformer Engine delayed scaling; NVIDIA FP8 formats (Micikevicius et al. arXiv 2209.05433)",
    "f": "Quartet II arXiv 2601.22813",
    "g": "Mishra et al. arXiv 2506.08027",
}

#: Each finding's claim: the statement the study tests.
CLAIMS = {
    "a": "stochastic rounding makes NVFP4's weight gradient unbiased: its mean over N draws falls like "
         "1/sqrt(N) and ends below no-SR's error",
    "b": "16x16 2-D weight scaling makes dgrad use the same quantized weight as fprop",
    "c": "the random Hadamard transform lowers NVFP4 wgrad error, with and without outlier channels",
    "d": "Hopper fast accumulation's error grows with K; promotion every 128 bounds it (~2 % max at K = 4096)",
    "e": "after an amax spike delayed scaling is off for as many steps as its history holds (saturating at the "
         "spike); current scaling is not",
    "f": "MS-EDEN has over 2x lower error than element-wise stochastic rounding, and is unbiased",
    "g": "MXFP8 scales rounded up (not OCP's floor) avoid saturation and lower the gradient error",
}


def _rows(tables, kind, **match):
    return [r for r in tables.get(kind, []) if all(str(r.get(k)) == str(v) for k, v in match.items())]


def _curve(tables, case, recipe, level):
    rows = sorted(_rows(tables, "bias", case=case, recipe=recipe, level=level), key=lambda r: int(r["n"]))
    return [int(r["n"]) for r in rows], [float(r["rel_err_mean"]) for r in rows]


def _finding_a(t):
    th = THRESHOLDS
    n_sr, e_sr = _curve(t, "plain", "te-nvfp4-no-rht", "operand")
    n_rn, e_rn = _curve(t, "plain", "te-nvfp4-no-rht-no-sr", "operand")
    gn, g_sr = _curve(t, "plain", "te-nvfp4", "wgrad")
    _, g_rn = _curve(t, "plain", "te-nvfp4-no-sr", "wgrad")
    if not (e_sr and e_rn and g_sr and g_rn):
        return math.nan, "not run", "not at this scale"
    slope = loglog_slope(n_sr, e_sr)
    floor, _ = fit_floor(gn, g_sr)
    number = (f"grad_output mean error {e_sr[0]:.3g} -> {e_sr[-1]:.3g} over N = 1..{n_sr[-1]} (slope {slope:.2f}; "
              f"RNE {e_rn[-1]:.3g}); wgrad {g_sr[0]:.3g} -> {g_sr[-1]:.3g}, bias floor {floor:.3g} vs no-SR "
              f"{g_rn[-1]:.3g}")
    if th["a_slope"][0] <= slope <= th["a_slope"][1] and floor < th["a_floor_ratio"] * g_rn[-1]:
        return slope, number, "reproduced"
    if e_sr[-1] >= e_rn[-1] or g_sr[-1] >= g_rn[-1]:
        return slope, number, "contradicted"
    return slope, number, "not at this scale"


def _op(t, finding, case, variant, metric):
    rows = _rows(t, "operands", finding=finding, case=case, variant=variant, metric=metric)
    return float(np.mean([float(r["value"]) for r in rows])) if rows else math.nan


def _finding_b(t):
    two = max((float(r["value"]) for r in _rows(t, "operands", finding="b", variant="te-nvfp4",
                                                metric="weight_mismatch")), default=math.nan)
    one = min((float(r["value"]) for r in _rows(t, "operands", finding="b", variant="te-nvfp4-no-2d",
                                                metric="weight_mismatch")), default=math.nan)
    number = f"|Q_fprop(W) - Q_dgrad(W)| / |W|: 2-D {two:.3g} (max over layers), 1x16 {one:.3g} (min over layers)"
    if not (two == two and one == one):
        return math.nan, "not run", "not at this scale"
    if two <= THRESHOLDS["b_zero"] and one > THRESHOLDS["b_mismatch"]:
        return one, number, "reproduced"
    return one, number, "contradicted" if two > THRESHOLDS["b_zero"] else "not at this scale"


def _draw_err(t, case, recipe):
    rows = _rows(t, "draws", case=case, recipe=recipe, gemm="wgrad")
    v = np.array([float(r["rel_err"]) for r in rows])
    return (float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else math.nan) if v.size else (math.nan, math.nan)


def _finding_c(t):
    lo, hi = THRESHOLDS["c_ratio"]
    ratios, parts = [], []
    for case in ("plain", "outliers"):
        (m1, s1), (m0, s0) = _draw_err(t, case, "te-nvfp4"), _draw_err(t, case, "te-nvfp4-no-rht")
        ratios.append(m1 / m0 if m0 > 0 else math.nan)
        parts.append(f"{case}: {m1:.3g}+-{s1:.2g} vs {m0:.3g}+-{s0:.2g} (x{ratios[-1]:.2f})")
    number = "wgrad rel. error per draw, RHT vs no RHT, " + "; ".join(parts)
    if not _rows(t, "draws", gemm="wgrad"):
        return math.nan, "not run", "not at this scale"
    if any(r != r for r in ratios):
        return math.nan, number, "not at this scale"
    if all(r < lo for r in ratios):
        return ratios[1], number, "reproduced"
    if all(r > hi for r in ratios):
        return ratios[1], number, "contradicted"
    return ratios[1], number, "not at this scale"


def _finding_d(t):
    def series(stack, col):
        rows = sorted(_rows(t, "ksweep", stack=stack, gemm="wgrad"), key=lambda r: int(r["K"]))
        return [int(r["K"]) for r in rows], [float(r[col]) for r in rows]
    kf, ef = series("h100-fast", "accum_err")
    ks, es = series("h100", "accum_err")
    _, mf = series("h100-fast", "accum_max_rel")
    _, ms = series("h100", "accum_max_rel")
    if not (ef and es):
        return math.nan, "not run", "not at this scale"
    slope = loglog_slope(kf, ef)
    number = (f"wgrad accumulation error at K = {kf[-1]}: fast {ef[-1]:.3g} (largest entry error {mf[-1]:.3g}), "
              f"split {es[-1]:.3g} ({ms[-1]:.3g}); fast's slope against K {slope:.2f}")
    if slope >= THRESHOLDS["d_slope"] and es[-1] <= THRESHOLDS["d_bound"] * ef[-1]:
        return slope, number, "reproduced"
    if es[-1] >= ef[-1]:
        return slope, number, "contradicted"
    return slope, number, "not at this scale"


def spike_summary(rows, factor=None) -> dict:
    """Per recipe: the spike step, its history length, whether the spike step saturated (its fprop error
    above ``factor`` x the median error before the spike, ``THRESHOLDS['e_factor']``), and the steps
    after it that are "off": an underflowed fraction of the input above ``factor`` x its largest before
    the spike plus ``THRESHOLDS['e_floor']``.  Steps 1 .. spike-1 are "before" (delayed scaling runs
    its first step with scale 1)."""
    factor = THRESHOLDS["e_factor"] if factor is None else factor
    if isinstance(factor, bool) or not isinstance(factor, (int, float, np.integer, np.floating)) \
            or not (math.isfinite(factor) and factor > 0):
        # a NaN factor called every step "not saturated, not off"; a negative one every step saturated
        raise ValueError(f"spike_summary: factor must be a finite number > 0, got {factor!r}")
    out = {}
    for recipe in dict.fromkeys(r["recipe"] for r in rows):
        rs = sorted((r for r in rows if r["recipe"] == recipe), key=lambda r: int(r["step"]))
        spike = next((int(r["step"]) for r in rs if str(r["spiked"]) in ("1", "True")), None)
        before = [r for r in rs if spike is not None and 0 < int(r["step"]) < spike]
        if spike is None or not before:    # StopIteration, or max() of no steps
            raise ValueError(f"spike_summary: recipe {recipe!r} has "
                             + ("no spiked step" if spike is None else f"no step between 1 and its spike {spike}")
                             + "; the summary compares steps before a spike with the steps after")
        after = [r for r in rs if int(r["step"]) > spike]
        at = next(r for r in rs if int(r["step"]) == spike)
        err0 = float(np.median([float(r["fprop_rel_err"]) for r in before]))
        limit = factor * max(float(r["frac_underflow"]) for r in before) + THRESHOLDS["e_floor"]
        out[recipe] = {"spike": spike, "history": int(rs[0]["history"]),
                       "saturated": float(at["fprop_rel_err"]) > factor * err0,
                       "off": sum(float(r["frac_underflow"]) > limit for r in after),
                       "under_after": max((float(r["frac_underflow"]) for r in after), default=math.nan),
                       "err_before": err0, "err_at": float(at["fprop_rel_err"]),
                       "err_after": max((float(r["fprop_rel_err"]) for r in after), default=math.nan)}
    return out


def _finding_e(t):
    rows = t.get("spike", [])
    if not rows:
        return math.nan, "not run", "not at this scale"
    s = spike_summary(rows)
    d, c = s.get("te-delayed"), s.get("te-current")
    if d is None or c is None:      # the finding compares both recipes ('NoneType' is not subscriptable)
        return math.nan, "not run", "not at this scale"
    number = (f"delayed (history {d['history']}): fprop error {d['err_before']:.3g} before, {d['err_at']:.3g} at "
              f"the spike ({'saturated' if d['saturated'] else 'not saturated'}), then {d['off']} steps with up to "
              f"{d['under_after']:.3g} of the input "
              f"underflowing (error <= {d['err_after']:.3g}); current: {c['err_at']:.3g} at the spike, "
              f"{c['off']} steps off")
    if (abs(d["off"] - d["history"]) <= THRESHOLDS["e_tolerance"] and d["saturated"] and c["off"] <= 1
            and not c["saturated"]):
        return float(d["off"]), number, "reproduced"
    if d["off"] <= 1 and not d["saturated"]:
        return float(d["off"]), number, "contradicted"
    return float(d["off"]), number, "not at this scale"


def _finding_f(t):
    mse_sr = _op(t, "f", "grad_output", "sr-rht", "rel_mse")
    mse_ed = _op(t, "f", "grad_output", "ms-eden-rht", "rel_mse")
    n_e, e_e = _curve(t, "eden", "ms-eden-rht", "operand")
    if not (mse_sr == mse_sr and mse_ed == mse_ed and e_e):
        return math.nan, "not run", "not at this scale"
    ratio = mse_sr / mse_ed
    slope = loglog_slope(n_e, e_e)
    _, e_s = _curve(t, "eden", "sr-rht", "operand")
    number = (f"relative MSE: SR {mse_sr:.3g}, MS-EDEN {mse_ed:.3g} (x{ratio:.2f} lower); MS-EDEN mean error "
              f"{e_e[0]:.3g} -> {e_e[-1]:.3g} over N = 1..{n_e[-1]} (slope {slope:.2f}; SR {e_s[-1]:.3g})")
    if ratio >= THRESHOLDS["f_ratio"] and slope <= THRESHOLDS["f_slope"]:
        return ratio, number, "reproduced"
    if ratio < 1:
        return ratio, number, "contradicted"
    return ratio, number, "not at this scale"


def _finding_g(t):
    sat_f = _op(t, "g", "grad_output", "floor", "frac_saturated")
    sat_c = _op(t, "g", "grad_output", "rceil", "frac_saturated")
    err_f = _op(t, "g", "wgrad", "floor", "rel_err")
    err_c = _op(t, "g", "wgrad", "rceil", "rel_err")
    if err_f != err_f or err_c != err_c:
        return math.nan, "not run", "not at this scale"
    ratio = err_c / err_f
    number = (f"grad_output saturated: floor {sat_f:.3g}, round-up {sat_c:.3g}; wgrad rel. error floor {err_f:.3g}, "
              f"round-up {err_c:.3g} (x{ratio:.3f})")
    if sat_f > 0 and sat_c == 0 and ratio <= THRESHOLDS["g_ratio"]:
        return ratio, number, "reproduced"
    if ratio > THRESHOLDS["g_contradict"]:
        return ratio, number, "contradicted"
    return ratio, number, "not at this scale"


_RULES = {
    "a": ("SR operand mean error slope in [-0.65, -0.35] and SR wgrad bias floor < 0.8 x no-SR error: reproduced; "
          "SR no better than RNE: contradicted", _finding_a),
    "b": ("2-D mismatch <= 1e-7 and 1x16 mismatch > 1e-3: reproduced; 2-D mismatch > 1e-7: contradicted",
          _finding_b),
    "c": ("RHT/no-RHT error ratio < 0.95 with and without outliers: reproduced; > 1.05 in both: contradicted",
          _finding_c),
    "d": ("fast error slope against K >= 0.25 and split <= 0.25 x fast at the largest K: reproduced; "
          "split >= fast: contradicted", _finding_d),
    "e": ("delayed saturates at the spike (fprop error > 2 x before) and is off (underflowed fraction > 2 x its "
          "largest before + 0.001) for history +- 1 steps after it, current neither (<= 1 step): reproduced; "
          "delayed neither: contradicted", _finding_e),
    "f": ("SR/MS-EDEN MSE ratio >= 2 and MS-EDEN mean-error slope <= -0.35: reproduced; ratio < 1: contradicted",
          _finding_f),
    "g": ("floor saturates, round-up does not, round-up error <= floor's: reproduced; round-up error > 1.05 x "
          "floor's: contradicted", _finding_g),
}


#: The measurements each finding's rule reads: (table, which rows, columns).  A NaN or an infinity among
#: them (a diverged or damaged measurement) gives no verdict: the rules' comparisons and fits would
#: otherwise drop it (a slope over the other points, Python's ``max``) and could call the finding reproduced.
_INPUTS = {
    "a": [("bias", lambda r: r["case"] == "plain" and (r["recipe"], r["level"]) in (
        ("te-nvfp4-no-rht", "operand"), ("te-nvfp4-no-rht-no-sr", "operand"), ("te-nvfp4", "wgrad"),
        ("te-nvfp4-no-sr", "wgrad")), ("rel_err_mean",))],
    "b": [("operands", lambda r: r["finding"] == "b" and r["metric"] == "weight_mismatch", ("value",))],
    "c": [("draws", lambda r: r["gemm"] == "wgrad" and r["recipe"] in ("te-nvfp4", "te-nvfp4-no-rht"),
           ("rel_err",))],
    "d": [("ksweep", lambda r: r["gemm"] == "wgrad" and r["stack"] in ("h100", "h100-fast"),
           ("accum_err", "accum_max_rel"))],
    "e": [("spike", lambda r: r["recipe"] in ("te-delayed", "te-current"),
           ("fprop_rel_err", "frac_underflow", "frac_saturated"))],
    "f": [("operands", lambda r: r["finding"] == "f", ("value",)),
          ("bias", lambda r: r["case"] == "eden", ("rel_err_mean",))],
    "g": [("operands", lambda r: r["finding"] == "g", ("value",))],
}


def _nan_inputs(tables, key) -> str:
    """How many of finding ``key``'s measurements are NaN or infinite, in words ("" for none)."""
    vals = [float(r[c]) for kind, pick, cols in _INPUTS[key] for r in tables.get(kind, []) if pick(r) for c in cols]
    # an infinite one too: loglog_slope leaves it out as no point of a power law, so an overflowed accumulation
    # at K = 2048 gave finding (d) a slope over the other K and "reproduced" (and at K = 4096 "fast inf" beat split)
    nan, inf = sum(v != v for v in vals), sum(math.isinf(v) for v in vals)
    return " and ".join(f"{n} {what}" for n, what in ((nan, "NaN"), (inf, "infinite")) if n) \
        + (" measurement(s)" if nan or inf else "")


def findings(tables) -> list:
    """The findings table: one row per finding (a)-(g) with its number, verdict, rule and paper.

    ``tables``: ``{kind: rows}`` as :func:`read_csv` reads the study's CSV files (missing kinds give
    "not run" and the verdict "not at this scale"; a NaN or an infinity among a finding's measurements
    gives the verdict "not at this scale" and says how many)."""
    out = []
    for key, (rule, fn) in _RULES.items():
        value, number, verdict = fn(tables)
        bad = _nan_inputs(tables, key)
        if bad:     # a rule's "not run" of NaN numbers was false: the finding ran, and measured NaN
            number = f"{'ran' if number == 'not run' else number}; {bad}: no verdict"
            value, verdict = math.nan, "not at this scale"
        out.append({"finding": key, "claim": CLAIMS[key], "paper": PAPERS[key], "value": value,
                    "measured": number, "verdict": verdict, "rule": rule})
    return out


# --------------------------------------------------------------------------- CSV


def write_csv(path, rows, columns=None):
    """Write dict rows as CSV (columns: ``columns`` or the union of the rows' keys in order; NaN as ``nan``)."""
    rows = list(rows)
    if columns is None:
        columns = list(dict.fromkeys(k for r in rows for k in r))
    write_rows(path, rows, columns)


def read_csv(path) -> list:
    """Rows of a CSV written by :func:`write_csv`, values as strings (the finding rules convert);
    refused as every study CSV is (:func:`fp8emu.lab.store.read_rows`: a column named twice made
    finding (d) read the second ``accum_err``)."""
    return read_rows(path, kind="grad-study CSV")


#: Columns the rules read as integers; every other column of :data:`COLUMNS` but the names is read as a float.
_INTS = ("n", "K", "step", "state", "history", "draws")
#: Of those, the draw counts and sizes: >= 1 (an edited ``draws`` of 0 was the report's raw "float division by zero",
#: an ``n`` of 0 fit_floor's error naming no file).
_COUNTS = ("n", "K", "draws")
_NAMES = ("recipe", "stack", "layer", "gemm", "case", "level", "finding", "metric", "label", "spiked")


def _checked(col, text):
    """``text`` as it is, once it reads as its column's number (the rules' ``int()`` named no file)."""
    try:
        if (col in _INTS or col not in _NAMES and text != "" and any(col in c for c in COLUMNS.values())) \
                and not plain_number(text):     # int("6_0") is 60, int(" 3") 3: an edited cell read as another
            raise ValueError(text)
        if col in _INTS:
            if int(text) < 1 and col in _COUNTS:
                raise ValueError(text)
        elif col not in _NAMES and text != "" and any(col in c for c in COLUMNS.values()):
            float(text)
    except ValueError:
        kind = "an integer >= 1" if col in _COUNTS else "an integer" if col in _INTS else "a number"
        raise ValueError(f"column {col!r} holds {text!r}, not {kind}") from None
    return text


def read_tables(folder, kinds=TABLES) -> dict:
    """``{kind: rows}`` of the study's CSV files in ``folder`` (kinds without a file are left out; ``kinds``: which
    of :data:`TABLES` to read); a table without the columns of :data:`COLUMNS` is a ValueError naming the file."""
    folder = Path(folder)
    if not folder.is_dir():     # a mistyped folder read as a study of no cells: every finding "not run"
        raise FileNotFoundError(f"{folder}: no such study folder (the grad-study's --out)")
    tables = {}
    for k in (k for k in TABLES if k in kinds and (folder / f"{k}.csv").exists()):
        path = folder / f"{k}.csv"
        rows = read_rows(path, kind="grad-study CSV", convert=_checked)
        # an edited table was a raw KeyError in a rule; the report reads every table in the folder
        missing = [c for c in COLUMNS[k] if rows and c not in rows[0]]
        if missing:
            raise ValueError(f"{path}: not a grad-study {k} table (it lacks the column(s) {', '.join(map(repr, missing))}"
                             "); delete it (a grad-study run of its kind writes it again from the cells)")
        tables[k] = rows
    return tables


# --------------------------------------------------------------------------- figures


def _figure(w, h):
    from matplotlib.figure import Figure
    return Figure(figsize=(w, h))


def figure_bias(t):
    """Relative error of the mean over N draws against N (log-log), with the 1/sqrt(N) reference."""
    fig = _figure(12, 4.2)
    axes = fig.subplots(1, 2)
    for ax, level, title in ((axes[0], "operand", "quantized grad_output (mean over N draws)"),
                             (axes[1], "wgrad", "wgrad GEMM (mean over N draws)")):
        combos = dict.fromkeys((r["case"], r["recipe"]) for r in t.get("bias", []) if r["level"] == level)
        for case, recipe in combos:
            n, e = _curve(t, case, recipe, level)
            line, = ax.plot(n, e, "o-", ms=3, label=f"{recipe} ({case})")
            ax.plot(n, [e[0] / math.sqrt(k) for k in n], ":", color=line.get_color(), lw=0.8)
        ax.set_xscale("log")
        log_y(ax)
        ax.set_xlabel("draws N")
        ax.set_ylabel("relative error of the mean vs float64")
        ax.set_title(title + "; dotted: err(1)/sqrt(N)", fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def figure_ksweep(t):
    """Accumulation error against K (log-log), per stack: wgrad with K = tokens (left), and fprop / dgrad
    of square layers with K = the width (right, when the study has ``widths``)."""
    fig = _figure(12 if t.get("widths") else 7, 4.2)
    axes = fig.subplots(1, 2 if t.get("widths") else 1, squeeze=False)[0]
    ax = axes[0]
    for stack in dict.fromkeys(r["stack"] for r in t.get("ksweep", [])):
        for col, style in (("accum_err", "o-"), ("accum_max_rel", "s--")):
            rows = sorted(_rows(t, "ksweep", stack=stack, gemm="wgrad"), key=lambda r: int(r["K"]))
            ax.plot([int(r["K"]) for r in rows], [max(float(r[col]), 1e-12) for r in rows], style, ms=3,
                    label=f"{stack}: {'rel. error' if col == 'accum_err' else 'largest entry error'}")
    if len(axes) > 1:
        for stack in dict.fromkeys(r["stack"] for r in t["widths"]):
            for gemm, style in (("fprop", "o-"), ("dgrad", "s--")):
                rows = sorted(_rows(t, "widths", stack=stack, gemm=gemm), key=lambda r: int(r["K"]))
                axes[1].plot([int(r["K"]) for r in rows], [max(float(r["accum_err"]), 1e-12) for r in rows], style,
                             ms=3, label=f"{stack}: {gemm}")
    for a, lab in zip(axes, ("K (tokens per batch), wgrad", "K (layer width), fprop and dgrad")):
        a.set_xscale("log", base=2)
        log_y(a)
        a.set_xlabel(lab)
        a.set_ylabel("accumulation error (stack vs exact accumulation)")
        a.legend(fontsize=7)
        a.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def figure_spike(t):
    """fprop error and saturated / underflowed fractions per step around the amax spike."""
    fig = _figure(12, 4.2)
    axes = fig.subplots(1, 2)
    for recipe in dict.fromkeys(r["recipe"] for r in t.get("spike", [])):
        rows = sorted(_rows(t, "spike", recipe=recipe), key=lambda r: int(r["step"]))
        steps = [int(r["step"]) for r in rows]
        axes[0].plot(steps, [float(r["fprop_rel_err"]) for r in rows], "o-", ms=3, label=recipe)
        axes[1].plot(steps, [float(r["frac_saturated"]) for r in rows], "o-", ms=3, label=f"{recipe} saturated")
        axes[1].plot(steps, [float(r["frac_underflow"]) for r in rows], "x--", ms=3, label=f"{recipe} underflow")
    axes[0].set_yscale("log")
    for ax, lab in zip(axes, ("fprop relative error", "fraction of the input")):
        ax.set_xlabel("step (the spike at the marked step)")
        ax.set_ylabel(lab)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    for r in t.get("spike", []):
        if str(r["spiked"]) in ("1", "True"):
            for ax in axes:
                ax.axvline(int(r["step"]), color="r", lw=0.6)
            break
    fig.tight_layout()
    return fig


def figure_forks(t):
    """Forks from a shared checkpoint: float32 loss of the fork's weights minus the float32 fork's."""
    fig = _figure(12, 4.2)
    axes = fig.subplots(1, 2)
    for label in dict.fromkeys(r["label"] for r in t.get("forks", [])):
        rows = sorted(_rows(t, "forks", label=label), key=lambda r: int(r["step"]))
        steps = [int(r["step"]) for r in rows]
        axes[0].plot(steps, [float(r["loss_minus_fp32"]) for r in rows], "-", lw=1, label=label)
        axes[1].plot(steps, [float(r["weight_dist"]) for r in rows], "-", lw=1, label=label)
    axes[0].set_ylabel("eval loss - fp32 fork's (nats/byte)")
    axes[1].set_ylabel("|theta - theta_fp32| / |theta_fp32 - theta_0|")
    for ax in axes:
        ax.set_xlabel("steps after the fork")
        ax.legend(fontsize=6)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- report

#: (name, meaning) of every quantity in the tables; the report prints them.
DEFINITIONS = [
    ("rel_err", "|a - r| / |r|, Frobenius norms, float64; r is the reference named by the column"),
    ("cosine", "<a, r> / (|a| |r|): 1 is the reference's direction"),
    ("shrink", "<a - r, r> / |r|^2: the error along the reference; -0.01 is a gradient 1 % too short"),
    ("layer level", "the layer's float32 operands (X, W, b, dY of a float32 run) through the recipe's quantizers "
                    "and the stack's GEMM; reference: float64 products of the same operands"),
    ("model level", "the whole model's forward and backward under the recipe; references: torch float32 "
                    "autograd (fp32) and QAT (forward quantized as the recipe does, backward exact float32)"),
    ("quant_err", "the recipe on the stack with exact accumulation (same dtype, same quantized operands) "
                  "against float64: the quantization's share"),
    ("accum_err", "|stack - stack with exact accumulation| / |reference|: the accumulator's share"),
    ("rel_err_mean", "error of the mean over N draws (seeds 0..N-1 of the recipe's stochastic rounding); an "
                     "unbiased result falls like err(1)/sqrt(N), a bias stops it at a floor"),
    ("accum_max_rel", "largest |stack - exact accumulation| over entries with |exact| >= 0.1 max|exact|, "
                      "divided by that entry's |exact|"),
]

#: How to read the report's numbers (printed at its top).
HOW_TO_READ = [
    "Every number compares runs that share the weights and the batch: the only differences are the recipe's "
    "quantization, its random draws and the stack's accumulation, so a difference of 1e-3 is resolved where "
    "the language-model study resolves 0.1 nat.",
    "A verdict is computed by the rule printed beside it from the CSV files; 'not at this scale' means the "
    "effect's sign or size is not decided by this model and these sizes, not that it is absent.",
    "Layer-level errors isolate one GEMM; model-level errors include everything upstream (the error of layer "
    "2's input from layer 1), and QAT separates the forward's part from the backward's.",
]


def _md_table(t):
    lines = ["| " + " | ".join(t[0]) + " |", "|" + "---|" * len(t[0])]
    return "\n".join(lines + ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in t[1:]])


def _html_table(t):
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in t[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in t[1:])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def findings_table(rows) -> list:
    t = [["", "claim", "paper", "measured", "verdict", "rule"]]
    for r in rows:
        t.append([f"({r['finding']})", r["claim"], r["paper"], r["measured"], r["verdict"], r["rule"]])
    return t


def pair_summary(tables) -> list:
    """Per recipe x stack at the last checkpoint: each GEMM's error averaged over the layers (layer level,
    draw 0), wgrad's shrink, the accumulator's share of wgrad's error, and the model-level wgrad error
    against fp32 and against QAT."""
    rows = tables.get("probes", [])
    if not rows:
        return []
    last = max(int(r["state"]) for r in rows)
    out = []
    for pair in dict.fromkeys((r["recipe"], r["stack"]) for r in rows):
        rs = [r for r in rows if (r["recipe"], r["stack"]) == pair and int(r["state"]) == last]

        def m(gemm, col):
            # NaN where the pair has no cell at the last state (deleted): np.mean of nothing printed NumPy's "Mean of
            # empty slice" and "invalid value" warnings, under --quiet too
            v = [float(r[col]) for r in rs if r["gemm"] == gemm]
            return float(np.mean(v)) if v else math.nan

        out.append({"recipe": pair[0], "stack": pair[1], "state": last, "fprop": m("fprop", "rel_err"),
                    "dgrad": m("dgrad", "rel_err"), "wgrad": m("wgrad", "rel_err"),
                    "wgrad_shrink": m("wgrad", "shrink"), "wgrad_accum": m("wgrad", "accum_err"),
                    "model_wgrad_fp32": m("wgrad", "model_rel_err_fp32"),
                    "model_wgrad_qat": m("wgrad", "model_rel_err_qat")})
    return out


def _summary_table(rows):
    t = [["recipe@stack", "fprop", "dgrad", "wgrad", "wgrad shrink", "wgrad accum_err", "model wgrad vs fp32",
          "model wgrad vs QAT"]]
    for r in rows:
        t.append([f"{r['recipe']}@{r['stack']}"] + [f"{r[k]:.3g}" for k in (
            "fprop", "dgrad", "wgrad", "wgrad_shrink", "wgrad_accum", "model_wgrad_fp32", "model_wgrad_qat")])
    return t


def guide_table(folder) -> str:
    """The findings table and the per-pair summary as Markdown, from the CSV files in ``folder`` (the
    guide holds this text; a test compares)."""
    t = read_tables(folder)
    text = _md_table(findings_table(findings(t))) + "\n"
    summary = pair_summary(t)
    if summary:
        text += (f"\nPer recipe x stack at step {summary[0]['state']} (relative errors against float64, averaged "
                 "over the layers; model level: the whole backward, against torch float32 and QAT):\n\n"
                 + _md_table(_summary_table(summary)) + "\n")
    return text


#: One line per finding for the README: its claim in short and what ``value`` is.
SHORT = {
    "a": ("SR makes NVFP4's weight gradient unbiased", "mean error against N, log-log slope {:.2f}"),
    "b": ("2-D weight scaling: dgrad uses fprop's weight", "1x16 blocks differ by {:.3f} of |W|"),
    "c": ("the Hadamard transform lowers NVFP4 wgrad error", "x{:.2f} with outlier channels"),
    "d": ("fast accumulation's error grows with K", "log-log slope {:.2f}"),
    "e": ("delayed scaling is off for its history after a spike", "{:.0f} steps"),
    "f": ("MS-EDEN over 2x lower error than SR", "x{:.2f}"),
    "g": ("MXFP8 scales rounded up beat OCP's floor", "wgrad error x{:.2f}"),
}


def readme_block(folder) -> str:
    """The README's lines on the findings, from the CSV files in ``folder`` (a test compares)."""
    lines = []
    for r in findings(read_tables(folder)):
        claim, fmt = SHORT[r["finding"]]
        v = float(r["value"])
        # no value is "not run" only where the finding did not run: one that measured NaN (its table says "ran; 1 NaN
        # measurement(s): no verdict") was "not run" here too
        none = "not run" if r["measured"] == "not run" else r["measured"].rsplit("; ", 1)[-1] \
            if r["measured"].endswith(": no verdict") else "no value measured"
        lines.append(f"- ({r['finding']}) {r['verdict']}: {claim} ({fmt.format(v) if v == v else none})")
    return "\n".join(lines) + "\n"


def _probe_table(rows, limit=60):
    t = [["state", "recipe@stack", "layer", "pass", "rel_err", "cosine", "shrink", "mean of N", "rel_err/sqrt(N)",
          "quant_err", "accum_err", "model vs fp32", "model vs QAT", "QAT vs fp32"]]
    c = lambda v: "" if v in ("", None) or v != v else f"{float(v):.3g}"  # noqa: E731
    for r in rows[:limit]:
        # an unbiased result's mean over N draws would fall to rel_err / sqrt(N); a deterministic one stays
        t.append([r["state"], f"{r['recipe']}@{r['stack']}", r["layer"], r["gemm"], c(r["rel_err"]),
                  c(r["cosine"]), c(r["shrink"]), f"{c(r['rel_err_mean'])} (N={r['draws']})",
                  c(float(r["rel_err"]) / math.sqrt(float(r["draws"]))), c(r["quant_err"]), c(r["accum_err"]),
                  c(r["model_rel_err_fp32"]), c(r["model_rel_err_qat"]), c(r["qat_rel_err_fp32"])])
    return t


_CSS = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;font-size:13px;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f0f0f0}"
        "img{max-width:100%;display:block;margin:1em 0}")


def write_report(tables, out, provenance: dict) -> list:
    """Write the CSV tables, ``findings.csv``, ``figures/*.png``, ``report.md`` and ``report.html`` under ``out``.

    ``tables``: ``{kind: rows}`` (the cells' rows, in a fixed order); a table or figure of a kind without rows is
    removed from ``out`` (an earlier invocation's, whose cells are gone)."""
    out = Path(out)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    # a table of no cell here (its cells deleted) stayed, and the report and findings read it: removed, once it reads
    # as the study's own (another file under its name is refused, as the report's reader refuses it)
    stale = [k for k in TABLES if not tables.get(k) and (out / f"{k}.csv").exists()]
    read_tables(out, stale)
    for kind in TABLES:
        if tables.get(kind):
            write_csv(out / f"{kind}.csv", tables[kind])
        elif kind in stale:
            (out / f"{kind}.csv").unlink()
    t = read_tables(out)        # the report is made from the CSV as written, as the guide's test does
    rows = findings(t)
    write_csv(out / "findings.csv", rows)
    write_csv(out / "provenance.csv", [{"item": k, "value": v} for k, v in provenance.items()])
    figs = [(name, title, fn(t)) for name, title, fn, kind in (
        ("bias_vs_n", "Bias: error of the mean over N draws (a, f)", figure_bias, "bias"),
        ("error_vs_k", "Accumulation error against K (d)", figure_ksweep, "ksweep"),
        ("spike", "Around an amax spike (e)", figure_spike, "spike"),
        ("forks", "Forks from a shared checkpoint", figure_forks, "forks")) if t.get(kind)]
    pngs = {name: png_bytes(fig, dpi=90, crop=False) for name, _, fig in figs}
    for name, data in pngs.items():
        (out / "figures" / f"{name}.png").write_bytes(data)
    for name in {"bias_vs_n", "error_vs_k", "spike", "forks"} - set(pngs):       # the same: a figure of no table
        (out / "figures" / f"{name}.png").unlink(missing_ok=True)
    sections = [("Findings", findings_table(rows)),
                ("Per recipe x stack at the last checkpoint", _summary_table(pair_summary(t))),
                ("Definitions", [["name", "meaning"]] + [list(d) for d in DEFINITIONS]),
                ("Thresholds of the verdict rules", [["name", "value"]] + [[k, str(v)] for k, v in THRESHOLDS.items()]),
                ("Per-layer probes (first 60 rows; all in probes.csv)", _probe_table(t.get("probes", []))),
                ("Provenance", [["item", "value"]] + [[k, str(v)] for k, v in provenance.items()])]
    md, body = ["# fp8emu grad-study report", ""], ["<h1>fp8emu grad-study report</h1>"]
    md += ["## How to read it", ""] + [f"* {s}" for s in HOW_TO_READ] + [""]
    body += ["<h2>How to read it</h2><ul>"] + [f"<li>{html.escape(s)}</li>" for s in HOW_TO_READ] + ["</ul>"]
    for title, tab in sections:
        md += [f"## {title}", "", _md_table(tab), ""]
        body += [f"<h2>{html.escape(title)}</h2>", _html_table(tab)]
    for name, title, _ in figs:
        md += [f"## {title}", "", f"![{title}](figures/{name}.png)", ""]
        data = base64.b64encode(pngs[name]).decode("ascii")
        body.append(f"<h2>{html.escape(title)}</h2><img alt=\"{html.escape(title)}\" "
                    f"src=\"data:image/png;base64,{data}\">")
    (out / "report.md").write_text("\n".join(md), encoding="utf-8")
    (out / "report.html").write_text(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>fp8emu grad-study report</title>"
        f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>", encoding="utf-8")
    return [out / "report.md", out / "report.html"] + [out / "figures" / f"{n}.png" for n in pngs]
