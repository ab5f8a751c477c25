"""The language-model study's fork design: contrasts from one shared checkpoint, in float32 on the whole split.

``fp8emu train-study --forks`` starts every run (each recipe x stack pair and the fp32/bf16 baselines, several
seeds) from one float32 checkpoint at step S and trains the last F steps from it, the same batches for every
precision at a seed (:mod:`fp8emu.torch.study.train`). Every run reports its trained weights evaluated in
float32 on the whole validation split (``fp32_val_loss``) and in float32 on its final windows
(``fp32_window_loss``), beside the loss through its own quantized forward (``final_val_loss``). This module
(NumPy and matplotlib, no torch) reads those columns of ``runs.csv``:

* :func:`paired_gaps`: per pair, the seed-paired gap to the bf16 fork in one measure, with its 95 % t interval;
* :func:`resolution`: what a design resolves, the median over distinct results of the seed-to-seed sd of the
  paired gap and of the 95 % half-width;
* :func:`fork_summary`: the fork study against the from-scratch study: both resolutions, the joint analysis
  and the pooled contrasts in float32, and the quantized-inference effect, which the float32 measure leaves out;
* :func:`guide_tables`, :func:`readme_block` and :func:`figure_resolution`: the guide's tables, the README's
  bullets and the figure, each made from the committed CSV files (tests compare).

Examples
--------
>>> rows = [{"recipe": r, "stack": st, "seed": k, "fp32_val_loss": v, "diverged": 0}
...         for r, st, k, v in [("bf16", "", 0, 2.0), ("bf16", "", 1, 2.5), ("a", "x", 0, 2.25), ("a", "x", 1, 2.5)]]
>>> g = paired_gaps(rows)
>>> [(r["label"], r["gap"], r["sd"]) for r in g]
[('bf16', 0.0, 0.0), ('a@x', 0.125, 0.1767766952966369)]
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .store import read_rows
from .lm_study import CONTRASTS, run_label, md_table, read_study_csv, contrast, gap_stats, identical_results, joint_analysis

__all__ = ["FP32", "RECIPE", "MEASURES", "measure_rows", "paired_gaps", "fork_gap_rows", "resolution", "fork_info",
           "fork_summary",
           "scratch_resolution", "contrasts", "guide_tables", "readme_block", "figure_resolution", "report_sections"]

#: The trained weights in float32 over the whole validation split.
FP32 = "fp32_val_loss"
#: The run's own forward (the recipe's quantization) over its final windows.
RECIPE = "final_val_loss"
#: Each measure's column and what it is.
MEASURES = {FP32: "float32, whole validation split", RECIPE: "the run's own (quantized) forward, final windows"}


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def measure_rows(runs, column=FP32) -> list:
    """Copies of ``runs`` whose ``final_val_loss`` is ``column`` (the form :func:`~fp8emu.lab.lm_study.contrast`
    and :func:`~fp8emu.lab.lm_study.joint_analysis` read); a run without the column is a ValueError."""
    if column not in MEASURES:
        raise ValueError(f"unknown measure {column!r}; the measures are: {', '.join(MEASURES)}")
    out = []
    for r in runs:
        if column not in r or (r.get(column) in ("", None) and not int(r.get("diverged", 0) or 0)):
            raise ValueError(f"run {r.get('run_id', r.get('recipe'))!r} has no {column!r} (a study run before "
                             "train-study reported it); rerun it")
        out.append({**r, "final_val_loss": _num(r[column])})
    return out


def paired_gaps(runs, column=FP32, base="bf16") -> list:
    """Per recipe@stack (baselines first, in the runs' order): mean ``column``, the gap to ``base`` at the same
    seed averaged over seeds, its sd and 95 % t interval (:func:`~fp8emu.lab.lm_study.gap_stats`), ``half``
    (the interval's half-width) and ``seeds`` (the seeds paired with a ``base`` run: a seed the baseline
    lacks is in ``loss`` but not in the gap)."""
    by = {}
    for r in runs:
        by.setdefault((r["recipe"], r["stack"] or None), {})[int(r["seed"])] = _num(r[column])
    if (base, None) not in by:
        raise ValueError(f"paired_gaps: the runs have no {base} baseline")
    ref = by[(base, None)]
    rows = []
    for (recipe, stack), seeds in by.items():
        st = gap_stats([seeds[k] - ref[k] for k in sorted(seeds) if k in ref])
        rows.append({"recipe": recipe, "stack": stack or "", "label": run_label(recipe, stack), "seeds": st["n"],
                     "loss": float(np.mean(list(seeds.values()))), "gap": st["mean"], "sd": st["sd"],
                     "ci_low": st["ci_low"], "ci_high": st["ci_high"], "half": (st["ci_high"] - st["ci_low"]) / 2})
    return rows


def fork_gap_rows(runs) -> list:
    """The rows of ``fork_gaps.csv``: :func:`paired_gaps` in both measures, one row per pair and measure."""
    keys = ("recipe", "stack", "label", "seeds", "loss", "gap", "sd", "ci_low", "ci_high", "half")
    return [{"measure": m, **{k: g[k] for k in keys}} for m in (FP32, RECIPE) for g in paired_gaps(runs, m)]


def resolution(gaps, same=()) -> dict:
    """``n`` distinct emulated results (identical results once), the median ``sd`` of their paired gaps and the
    median 95 % ``half``-width: the smallest gap to the baseline one pair resolves."""
    dup = {lab for g in same for lab in g[1:]}
    rows = [g for g in gaps if g["stack"] and g["label"] not in dup and g["sd"] == g["sd"]]
    if not rows:
        return {"n": 0, "sd": math.nan, "half": math.nan}
    return {"n": len(rows), "sd": float(np.median([g["sd"] for g in rows])),
            "half": float(np.median([g["half"] for g in rows]))}


def fork_info(runs) -> dict:
    """``S`` (the fork step), ``F`` (steps after it), ``seeds`` and ``trunk`` of a fork study's runs; a ValueError
    where a run is not a fork or the runs do not share one checkpoint."""
    runs = list(runs)
    at = {int(_num(r.get("fork_at", 0)) or 0) for r in runs}
    trunks = {r.get("trunk_sha256", "") for r in runs}
    if not runs or 0 in at or len(at) != 1:
        raise ValueError("fork_info: these runs are not one fork study (every run needs the same fork_at > 0)")
    if len(trunks) != 1 or "" in trunks:
        raise ValueError(f"fork_info: the runs start from {len(trunks)} different checkpoints; a fork study's "
                         "runs share one (same model, schedule, corpus and threads)")
    return {"S": at.pop(), "F": max(int(r["steps"]) for r in runs), "seeds": sorted({int(r["seed"]) for r in runs}),
            "trunk": trunks.pop()}


def scratch_resolution(folder) -> dict:
    """:func:`resolution` of the from-scratch study in ``folder`` (its ``gaps.csv``, identical results from its
    ``runs.csv`` and ``curves.csv``): the numbers its guide's interval line states."""
    folder = Path(folder)
    runs = read_study_csv(folder / "runs.csv")
    curves = read_study_csv(folder / "curves.csv") if (folder / "curves.csv").exists() else []
    gaps = [{"stack": g["stack"], "label": g["label"], "sd": g["gap_sd"],
             "half": (g["gap_ci95_high"] - g["gap_ci95_low"]) / 2} for g in read_study_csv(folder / "gaps.csv")]
    seeds = sorted({int(r["seed"]) for r in runs if r["stack"] != ""})
    return {**resolution(gaps, identical_results(runs, curves)), "seeds": len(seeds),
            "steps": max(int(r["steps"]) for r in runs)}


def fork_summary(runs, curves=(), scratch=None) -> dict:
    """Everything the fork study's tables and bullets state (``scratch``: :func:`scratch_resolution`'s dict).

    Returns ``info`` (:func:`fork_info`), ``same`` (identical results: the same float32 and quantized losses
    at every seed), ``gaps`` ({measure: :func:`paired_gaps`}), ``res`` ({measure: :func:`resolution`}),
    ``sharper`` (the scratch study's median sd over the fork design's, per measure), ``joint`` (the joint
    analysis in float32) and ``infer`` (per pair, the mean over seeds of its quantized forward's loss minus
    float32's on the same weights and windows; ``infer_range`` the emulated pairs' lowest and highest).
    """
    runs = list(runs)
    info = fork_info(runs)
    keyed = [{**r, "final_train_loss": _num(r[FP32])} for r in runs]   # identical: both measures the same bits
    same = identical_results(keyed, curves)
    gaps = {m: paired_gaps(runs, m) for m in MEASURES}
    res = {m: resolution(g, same) for m, g in gaps.items()}
    infer = {}
    for r in runs:
        infer.setdefault(run_label(r["recipe"], r["stack"] or None), []).append(
            _num(r["final_val_loss"]) - _num(r["fp32_window_loss"]))
    infer = {k: float(np.mean(v)) for k, v in infer.items()}
    emu = [v for k, v in infer.items() if "@" in k]
    try:   # too few results or seeds, or a diverged run: no joint analysis, and the tables say why
        joint, why = joint_analysis(measure_rows(runs, FP32), curves), ""
    except ValueError as exc:
        joint, why = None, str(exc)
    out = {"info": info, "same": same, "gaps": gaps, "res": res, "infer": infer,
           "infer_range": (min(emu), max(emu)) if emu else (math.nan, math.nan), "joint": joint, "no_joint": why}
    if scratch:
        out["scratch"] = scratch
        out["sharper"] = {m: scratch["sd"] / r["sd"] if r["sd"] > 0 else math.inf for m, r in res.items()}
    return out


def _f(v, fmt="+.4f"):
    return "" if v != v else format(v, fmt)


def _g(v):
    """Small gaps and sds with four significant digits: the fork design resolves 1e-4 nat/byte and below."""
    return "" if v != v else f"{v:+.3e}"


def _resolution_table(s) -> list:
    sc, info = s.get("scratch"), s["info"]
    t = [["design", "measure", "seeds", "distinct results", "median sd of the paired gap",
          "median 95 % half-width", "sharper than from scratch (sd ratio)"]]
    if sc:
        t.append([f"from scratch, {sc['steps']} steps (docs/data/lm-study)", MEASURES[RECIPE], str(sc["seeds"]),
                  str(sc["n"]), f"{sc['sd']:.4f}", f"{sc['half']:.4f}", "1"])
    for m in (RECIPE, FP32):
        r = s["res"][m]
        t.append([f"forks: float32 to step {info['S']}, then {info['F']} steps", MEASURES[m],
                  str(len(info["seeds"])), str(r["n"]), f"{r['sd']:.3e}", f"{r['half']:.3e}",
                  f"{s['sharper'][m]:.0f}" if sc else ""])
    return t


def _pair_table(s) -> list:
    twin = {lab: " = ".join(x for x in g if x != lab) for g in s["same"] for lab in g}
    rec = {g["label"]: g for g in s["gaps"][RECIPE]}
    t = [["recipe", "stack", "seeds", "float32 val loss (whole split)", "gap to bf16 fork", "95 % CI",
          "gap, quantized forward", "quantized forward - float32 (same windows)", "same losses as"]]
    for g in s["gaps"][FP32]:
        ci = "" if g["ci_low"] != g["ci_low"] else f"[{_g(g['ci_low'])}, {_g(g['ci_high'])}]"
        t.append([g["recipe"], g["stack"] or "-", str(g["seeds"]), f"{g['loss']:.5f}", _g(g["gap"]), ci,
                  _g(rec[g["label"]]["gap"]), _g(s["infer"][g["label"]]), twin.get(g["label"], "")])
    return t


def _ci(st):
    return "" if st["ci_low"] != st["ci_low"] else f"[{_g(st['ci_low'])}, {_g(st['ci_high'])}]"


def _joint(s) -> tuple:
    j = s["joint"]
    if j is None:
        return None, f"No joint analysis: {s['no_joint']}."
    sh, (d1, d2) = j["shift"], j["df"]
    t = [["question", "statistic", "p", "resolves (95 %)"],
         [f"a shift common to the {len(j['labels'])} results against bf16 (mean gap at each seed, "
          f"{', '.join(_g(v) for v in j['shift_per_seed'])}; t interval over {len(j['seeds'])} seeds)",
          f"{_g(sh['mean'])} {_ci(sh)}", "", f"+-{(sh['ci_high'] - sh['ci_low']) / 2:.3e} common to all"],
         ["do the results differ among themselves (two-way analysis of variance, result x seed; bf16 cancels)",
          f"F({d1}, {d2}) = {j['F']:.2f}", f"{j['p_F']:.2g} (permutation {j['p_perm_F']:.2g})",
          f"+-{j['pair_diff_half']:.3e} between two results"],
         [f"the largest distance of a result from the mean of all results at its seeds (permutation test of the "
          f"max over {len(j['labels'])}, labels shuffled within each seed, {j['n_perm']} shuffles)",
          f"{j['max_dev_label']} {_g(j['dev'][j['max_dev_label']])}", f"{j['p_max']:.2g}",
          f"+-{j['max_dev_crit']:.3e} for every result at once"]]
    return t, (f"Residual sd of a run about its result and seed effects: {j['residual_sd']:.3e}. A p-value "
               f"of a permutation test is at least 1/({j['n_perm']} + 1).")


def contrasts(runs, same=()) -> list:
    """The from-scratch study's :data:`~fp8emu.lab.lm_study.CONTRASTS` on the forks' float32 losses:
    ``[(label, contrast dict)]`` (those with a matched key)."""
    fp32 = measure_rows(runs, FP32)
    out = []
    for label, a, b in CONTRASTS:
        c = contrast(fp32, a, b, same)
        if c["keys"]:
            out.append((label, c))
    return out


def _contrast_rows(cs) -> list:
    t = [["contrast", "matched", "seeds", "mean difference", "95 % CI (over seeds)", "resolves", "verdict"]]
    for label, c in cs:
        keys = [str(k) + (f" (= {', '.join(c['merged'][k])})" if k in c["merged"] else "") for k in c["keys"]]
        t.append([label, ", ".join(keys), str(len(c["seeds"])), _g(c["mean"]), _ci(c),
                  "" if c["ci_low"] != c["ci_low"] else f"+-{(c['ci_high'] - c['ci_low']) / 2:.3e}", _verdict(c)])
    return t


def _verdict(c) -> str:
    if c["ci_low"] != c["ci_low"]:
        return ""
    if c["ci_low"] > 0:
        return "resolved: higher loss"
    if c["ci_high"] < 0:
        return "resolved: lower loss"
    return "not resolved"


def _tables(runs, curves, scratch):
    s = fork_summary(runs, curves, scratch)
    joint, note = _joint(s)
    s["contrasts"] = contrasts(runs, s["same"])
    return s, _resolution_table(s), _pair_table(s), joint, note, _contrast_rows(s["contrasts"])


def report_sections(runs, curves=(), scratch=None) -> list:
    """The fork study's report sections, ``[(title, table, how to read)]``; empty where the runs are not forks."""
    try:
        fork_info(runs)
    except ValueError:
        return []
    s, res, pairs, joint, note, contrasts = _tables(runs, curves, scratch)
    info = s["info"]
    read = (f"Every run started from one float32 checkpoint at step {info['S']} and trained {info['F']} steps "
            f"in its precision; at a seed every run saw the same batches. float32 val loss: the trained weights "
            f"in float32 over the whole validation split; gap to bf16 fork: minus the bf16 fork's at the same seed, "
            f"averaged over seeds, with its 95 % t interval. gap, quantized forward: the same through each run's "
            f"own forward on the final windows. quantized forward - float32: on the same weights and windows, "
            f"what quantized inference adds.")
    return [("Forks: resolution of the two designs", res, "median over the distinct results of the seed-to-seed "
             "sd of the paired gap to bf16, and of its 95 % half-width."),
            ("Forks: gap to the bf16 fork per recipe x stack", pairs, read),
            *([("Forks: joint analysis in float32", joint, note)] if joint else []),
            ("Forks: pooled contrasts in float32", contrasts, "as the contrasts of the from-scratch study, on the "
             "float32 whole-split losses of the forks.")]


def guide_tables(folder, scratch_folder) -> str:
    """The fork study's Markdown tables for ``docs/guides/lm-study.md`` (between its ``lm-forks:tables``
    markers; a test regenerates them from the committed CSV and compares)."""
    folder = Path(folder)
    runs = read_study_csv(folder / "runs.csv")
    curves = read_study_csv(folder / "curves.csv")
    s, res, pairs, joint, note, contrasts = _tables(runs, curves, scratch_resolution(scratch_folder))
    fp8 = [r for r in runs if r["stack"] != ""]
    return "\n".join([
        f"{len(runs)} runs ({len(runs) - len(fp8)} baseline, {len(fp8)} emulated) from one float32 checkpoint "
        f"(SHA-256 {s['info']['trunk'][:16]}...) at step {s['info']['S']}, {s['info']['F']} steps each; the "
        f"runs' wall times add up to {sum(r['wall_s'] for r in runs) / 60:.1f} min, one thread each.", "",
        "Resolution of the two designs (gap to bf16 at the same seed, nats/byte):", "", md_table(res), "",
        "Per pair (float32 whole-split loss of the trained weights; gaps paired by seed with the bf16 fork):", "",
        md_table(pairs), "",
        *(["Joint analysis of the distinct results in float32 (seeds " + ", ".join(map(str, s["joint"]["seeds"]))
           + "):", "", md_table(joint), "", note, ""] if joint else [note, ""]),
        "Pooled contrasts in float32 (identical results once; per seed the difference averaged over the matched "
        "recipes or stacks, a 95 % t interval over the seeds):", "", md_table(contrasts)]) + "\n"




def _infer_ratio(scratch_folder) -> str:
    path = Path(scratch_folder) / "inference.csv"
    if not path.exists():
        return ""
    ratios = [r["ppl_ratio_to_bf16"] for r in read_study_csv(path)]
    return (f" Inference of the from-scratch bf16 model with FP8/FP4 weights, activations, KV cache and "
            f"attention: perplexity {min(ratios):.4f}-{max(ratios):.4f} times bf16's.")


def _n_params(folder) -> str:
    prov = {r["item"]: r["value"] for r in read_rows(Path(folder) / "provenance.csv")}
    return f"{int(prov['n_params']) / 1000:.0f}k"


def readme_block(folder, scratch_folder) -> str:
    """The README's bullets on the language-model study (between its ``lm-study:readme`` markers), every number
    computed from the committed CSV files of the fork study (``folder``) and the from-scratch one."""
    folder = Path(folder)
    runs = read_study_csv(folder / "runs.csv")
    curves = read_study_csv(folder / "curves.csv")
    s, *_ = _tables(runs, curves, scratch_resolution(scratch_folder))
    sc, info, j = s["scratch"], s["info"], s["joint"]
    r32, rq = s["res"][FP32], s["res"][RECIPE]
    n_pairs = sum(1 for g in s["gaps"][FP32] if g["stack"])
    twins = "; ".join(" = ".join(g) for g in s["same"])
    cs = dict(s["contrasts"])

    def said(label, what):
        c = cs.get(label)
        if c is None:
            return f"{what}: not run"
        return f"{what} {_g(c['mean'])} (+-{(c['ci_high'] - c['ci_low']) / 2:.3e}, {_verdict(c)})"
    lo, hi = s["infer_range"]
    lines = [
        f"- Resolution. Trained from scratch ({sc['steps']} steps, {sc['seeds']} seeds), a pair's gap to bf16 moves "
        f"from seed to seed by a median sd of {sc['sd']:.4f} nat/byte (95 % half-width {sc['half']:.4f}): "
        f"far above the effects published for these recipes at scale, so that design can show only that a "
        f"recipe breaks a small model. Forked from one float32 checkpoint at step "
        f"{info['S']} for {info['F']} steps under each pair, same batches, the trained weights evaluated in "
        f"float32 on the whole validation split: median sd {r32['sd']:.3e} (half-width {r32['half']:.3e}), "
        f"{s['sharper'][FP32]:.0f} times sharper ({rq['sd']:.3e} through each recipe's own forward). What a fork "
        f"measures is what {info['F']} steps under a recipe do, not a whole training run.",
        f"- {n_pairs} pairs are {r32['n']} distinct results" + (f" ({twins} give the same bits)" if twins else "")
        + f". Joint analysis in float32 (one bf16 fork per seed, shared by every gap): a shift common to all "
        f"against bf16 {_g(j['shift']['mean'])} (+-{(j['shift']['ci_high'] - j['shift']['ci_low']) / 2:.3e}, "
        f"{_verdict(j['shift'])}); differences among the results F({j['df'][0]}, {j['df'][1]}) = {j['F']:.2f}, "
        f"p {j['p_F']:.2g} (" + ("resolved" if j["p_F"] < 0.05 else "not resolved")
        + f" at +-{j['pair_diff_half']:.3e} between two results); farthest from the mean "
        f"{j['max_dev_label']} {_g(j['dev'][j['max_dev_label']])} (+-{j['max_dev_crit']:.3e} for every result "
        f"at once, p {j['p_max']:.2g}).",
        "- Contrasts in float32 (forks): " + "; ".join([
            said("h100-fast - h100 (same recipes)", "Hopper fast accumulation against its split accumulator"),
            said("te-nvfp4-no-rht - te-nvfp4 (same stacks)", "NVFP4 without its Hadamard transform"),
            said("te-nvfp4-no-sr - te-nvfp4 (same stacks)", "without stochastic rounding"),
            said("te-nvfp4-no-2d - te-nvfp4 (same stacks)", "without 2-D weight scaling")])
        + f", over {info['F']} steps of a {_n_params(folder)}-parameter model; the gradient study measures the "
        "mechanisms.",
        f"- Quantized inference apart from training: each pair's own forward minus float32 on the same trained "
        f"weights and windows, {_g(lo)} to {_g(hi)} nat/byte (mean over seeds)." + _infer_ratio(scratch_folder),
    ]
    return "\n".join(lines) + "\n"


def figure_resolution(folder, scratch_folder):
    """Gap to bf16 per pair, 95 % t interval: from scratch (left) and forked, in float32 (right), every pair."""
    from matplotlib.figure import Figure
    scratch = [g for g in read_study_csv(Path(scratch_folder) / "gaps.csv") if g["stack"] != ""]
    runs = read_study_csv(Path(folder) / "runs.csv")
    s = fork_summary(runs, read_study_csv(Path(folder) / "curves.csv"), scratch_resolution(scratch_folder))
    forks = {g["label"]: g for g in s["gaps"][FP32] if g["stack"]}
    labels = [g["label"] for g in scratch if g["label"] in forks] + \
        [lab for lab in forks if lab not in {g["label"] for g in scratch}]
    sg = {g["label"]: (g["gap_to_bf16"], g["gap_ci95_low"], g["gap_ci95_high"]) for g in scratch}
    fg = {k: (g["gap"], g["ci_low"], g["ci_high"]) for k, g in forks.items()}
    fig = Figure(figsize=(11, 0.22 * len(labels) + 1.8))
    axes = fig.subplots(1, 2, sharey=True)
    y = np.arange(len(labels))
    info = s["info"]
    panels = ((axes[0], sg, f"from scratch, {s['scratch']['steps']} steps, own forward\nmedian 95 % half-width "
               f"{s['scratch']['half']:.4f}"),
              (axes[1], fg, f"forks: float32 to step {info['S']}, {info['F']} steps; float32, whole split\n"
               f"median 95 % half-width {s['res'][FP32]['half']:.2e} ({s['sharper'][FP32]:.0f}x sharper sd)"))
    for ax, d, title in panels:
        m = np.array([d.get(k, (np.nan,) * 3)[0] for k in labels], dtype=float)
        lo = np.array([d.get(k, (np.nan,) * 3)[1] for k in labels], dtype=float)
        hi = np.array([d.get(k, (np.nan,) * 3)[2] for k in labels], dtype=float)
        err = np.where(np.isfinite(lo), np.vstack([m - lo, hi - m]), 0)
        ax.errorbar(m, y, xerr=err, fmt="o", ms=3, capsize=2)
        ax.axvline(0, color="k", lw=0.8)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("gap to bf16 (nats/byte), 95 % t interval")
        ax.grid(alpha=0.3)
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-2, 2))
    axes[0].set_yticks(y, labels, fontsize=7)
    axes[0].invert_yaxis()
    fig.tight_layout()
    return fig
