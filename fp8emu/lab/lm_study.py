"""The language-model study's tables, figures and report (``report.md`` and a self-contained ``report.html``).

NumPy and matplotlib only (no torch): the runs come from :mod:`fp8emu.torch.study`, and the committed
tables in ``docs/data/lm-study`` can be read, drawn and summarised where torch is not installed.

Tables (CSV, written by :func:`write_tables`):

* ``runs.csv``: one row per run (final validation loss over the final windows, the trained weights' loss in
  float32 over the whole validation split and over those windows, mean of the last ten training losses,
  divergence, seconds per step; for forks, the fork step and the checkpoint's SHA-256, :mod:`.lm_forks`);
* ``curves.csv``: validation loss at every evaluation step of every run;
* ``gaps.csv``: per recipe x stack, the final validation loss minus the bf16
  baseline's at the same seed (paired), averaged over seeds, with a 95 %
  Student-t confidence interval (``mean +- t(0.975, n-1) * sd / sqrt(n)``;
  empty with one seed), and the seconds per step and slowdown against fp32 of the seeds that record
  no diagnostics (``s_per_step_diagnostics``: of those that do);
* ``diagnostics.csv``: :func:`fp8emu.torch.diagnostics` averaged per layer,
  pass and evaluation interval (the first seed of every recipe x stack).

Examples
--------
>>> gap_stats([0.1, 0.3])["mean"], round(gap_stats([0.1, 0.3])["ci_high"], 4)
(0.2, 1.4706)
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path

import numpy as np

from .report import png_bytes
from .store import numbers_except, read_rows, write_rows

__all__ = ["gap_stats", "run_rows", "gap_rows", "write_csv", "write_tables", "write_report", "how_to_read",
           "guide_tables", "T975",
           "figure_curves", "figure_gaps", "figure_diagnostics", "contrast", "CONTRASTS",
           "identical_results", "joint_analysis", "t_quantile", "f_sf"]

#: Two-sided 95 % Student-t quantiles t(0.975, df) for df = 1..30 (standard tables); beyond, 1.96.
T975 = (12.7062047362, 4.3026527297, 3.1824463053, 2.7764451052, 2.5705818356, 2.4469118511, 2.3646242516,
        2.3060041352, 2.2621571628, 2.2281388520, 2.2009851601, 2.1788128297, 2.1603686565, 2.1447866879,
        2.1314495456, 2.1199052992, 2.1098155778, 2.1009220402, 2.0930240544, 2.0859634473, 2.0796138447,
        2.0738730679, 2.0686576104, 2.0638985616, 2.0595385528, 2.0555294386, 2.0518305165, 2.0484071418,
        2.0452296421, 2.0422724563)


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


def run_label(recipe, stack):
    return recipe if stack is None else f"{recipe}@{stack}"


def run_rows(results) -> list:
    """One dict per run (the columns of ``runs.csv``)."""
    rows = []
    for r in results:
        s = r["spec"]
        rows.append({"run_id": r["run_id"], "recipe": s["recipe"], "stack": s["stack"] or "", "seed": s["seed"],
                     "final_val_loss": r["final_val_loss"], "final_train_loss": r["final_train_loss"],
                     "diverged": int(bool(r["diverged"])), "steps": len(r["train_loss"]),
                     "s_per_step": r["s_per_step"], "wall_s": r["wall_s"], "swapped": len(r["swapped"]),
                     "fp32_val_loss": r.get("fp32_val_loss", math.nan),
                     "fp32_window_loss": r.get("fp32_window_loss", math.nan),
                     "fork_at": s["train"].get("fork_at", 0), "trunk_sha256": r.get("trunk_sha256", "")})
    return rows


def gap_rows(results) -> list:
    """Per recipe x stack (baselines included): loss, paired gap to bf16 with its interval, slowdown vs fp32."""
    by = {}
    for r in results:
        s = r["spec"]
        by.setdefault((s["recipe"], s["stack"]), {})[s["seed"]] = r
    bf16 = by.get(("bf16", None), {})
    fp32 = by.get(("fp32", None), {})
    fp32_step = _step_time(fp32.values())[0] if fp32 else math.nan
    rows = []
    for (recipe, stack), seeds in by.items():
        finals = [r["final_val_loss"] for r in seeds.values()]
        paired = [seeds[k]["final_val_loss"] - bf16[k]["final_val_loss"] for k in sorted(seeds) if k in bf16]
        st = gap_stats(paired)
        step, timed, diag_step = _step_time(seeds.values())
        rows.append({"recipe": recipe, "stack": stack or "", "label": run_label(recipe, stack),
                     "seeds": len(seeds), "diverged": sum(bool(r["diverged"]) for r in seeds.values()),
                     "mean_final_val_loss": float(np.mean(finals)), "gap_to_bf16": st["mean"],
                     "gap_sd": st["sd"], "gap_ci95_low": st["ci_low"], "gap_ci95_high": st["ci_high"],
                     "paired_seeds": st["n"], "s_per_step": step, "slowdown_vs_fp32": float(step / fp32_step),
                     "timed_seeds": timed, "s_per_step_diagnostics": diag_step})
    return rows


def _step_time(runs) -> tuple:
    """(s/step over the runs that recorded no diagnostics, how many, s/step of those that did).

    Recording diagnostics (the first seed of each recipe) costs several times a step; a group whose every
    run recorded them is timed with them (``timed_seeds`` 0)."""
    runs = list(runs)
    plain = [r["s_per_step"] for r in runs if not r["spec"].get("diagnostics")]
    diag = [r["s_per_step"] for r in runs if r["spec"].get("diagnostics")]
    step = float(np.mean(plain)) if plain else float(np.mean(diag))
    return step, len(plain), float(np.mean(diag)) if diag else math.nan


def contrast(runs, a, b, same=()) -> dict:
    """Pooled, seed-paired difference of final validation loss between two groups of runs.

    ``a`` and ``b`` are ``(recipe, stack)`` patterns in which ``"*"`` matches any value (``None``
    is a baseline's stack). Runs are matched on the wildcard (the recipes, or the stacks, both
    groups have at every seed) and on the seed; at each seed the differences ``a - b`` are averaged
    over the matched keys, and the interval is the 95 % Student-t interval over the seeds
    (:func:`gap_stats`). Averaging over recipes first keeps the runs of one seed, which share the
    initial weights and batches, from being counted as independent samples.

    Parameters
    ----------
    runs : iterable of dict
        Rows of ``runs.csv`` (``recipe``, ``stack`` (``""`` or None for a baseline), ``seed``,
        ``final_val_loss``, ``diverged``).
    a, b : tuple of (str, str or None)
        The two groups, e.g. ``("*", "h100-fast")`` against ``("*", "h100")``, or
        ``("te-nvfp4-no-sr", "*")`` against ``("te-nvfp4", "*")``, or ``("*", "b200")`` against
        ``("bf16", None)``.

    Returns
    -------
    dict
        ``keys`` (the matched recipes or stacks, each result once), ``merged`` ({key: the keys counted
        with it}), ``seeds`` and :func:`gap_stats`'s ``n``,
        ``mean``, ``sd``, ``ci_low``, ``ci_high``; all NaN when no seed matches, or when a matched
        run diverged (its loss says nothing about a gap).

    Examples
    --------
    >>> rows = [{"recipe": r, "stack": st, "seed": k, "final_val_loss": v, "diverged": 0}
    ...         for r, st, k, v in [("x", "fast", 0, 3.0), ("x", "slow", 0, 2.5),
    ...                             ("x", "fast", 1, 2.0), ("x", "slow", 1, 2.0)]]
    >>> c = contrast(rows, ("*", "fast"), ("*", "slow"))
    >>> c["keys"], c["seeds"], c["mean"], round(c["ci_high"], 3)
    (['x'], [0, 1], 0.25, 3.427)
    """
    for name, pat in (("a", a), ("b", b)):
        if not (isinstance(pat, tuple) and len(pat) == 2 and isinstance(pat[0], str)
                and (pat[1] is None or isinstance(pat[1], str))):
            raise ValueError(f"contrast: {name} must be a (recipe, stack) tuple of strings ('*' for any; "
                             f"stack None for a baseline), got {pat!r}")
    wild = [i for i in (0, 1) if a[i] == "*"]
    wild_b = [i for i in (0, 1) if b[i] == "*"]
    if len(wild) != 1 or wild_b not in ([], wild):
        raise ValueError(f"contrast: a must leave one field open ('*') and b the same one or none, "
                         f"got {a!r} and {b!r}")
    wild = wild[0]
    loss, bad = {}, set()
    for r in runs:
        row = (r["recipe"], r["stack"] or None)
        for pat, side in ((a, "a"), (b, "b")):
            if all(p == "*" or p == v for p, v in zip(pat, row)):
                key = (side, row[wild] if side == "a" or wild_b else "*", int(r["seed"]))
                loss[key] = float(r["final_val_loss"])
                if int(r["diverged"]):
                    bad.add(key)

    def b_of(k, s):   # b's run matched to a's key k at seed s
        return ("b", k if wild_b else "*", s)
    seeds = sorted({k[2] for k in loss})
    keys = sorted({k[1] for k in loss if k[0] == "a"}, key=lambda v: "" if v is None else v)
    keys = [k for k in keys if all(("a", k, s) in loss and b_of(k, s) in loss for s in seeds)]
    if not keys:   # no key at every seed: keep the seeds at which some key is complete
        seeds = [s for s in seeds if any(("a", k, s) in loss and b_of(k, s) in loss
                                         for k in {k[1] for k in loss if k[0] == "a"})]
        keys = sorted({k[1] for k in loss if k[0] == "a"
                       and all(("a", k[1], s) in loss and b_of(k[1], s) in loss for s in seeds)},
                      key=lambda v: "" if v is None else v) if seeds else []
        seeds = seeds if keys else []
    canon = {lab: g[0] for g in same for lab in g}

    def sides(k):   # the (a, b) results key k compares, identical labels mapped to one
        pa = tuple(k if p == "*" else p for p in a)
        pb = tuple(k if p == "*" else p for p in b)
        return tuple(canon.get(run_label(*p), run_label(*p)) for p in (pa, pb))
    merged = {}
    for k in keys:
        first = next(j for j in keys if sides(j) == sides(k))
        merged.setdefault(first, [])
        if first != k:
            merged[first].append(k)
    keys = list(merged)
    merged = {k: v for k, v in merged.items() if v}
    per_seed = [float(np.mean([loss[("a", k, s)] - loss[b_of(k, s)] for k in keys])) for s in seeds]
    used = {("a", k, s) for k in keys for s in seeds} | {b_of(k, s) for k in keys for s in seeds}
    st = gap_stats(per_seed if not used & bad else [math.nan] * max(2, len(seeds)))
    if used & bad:
        st["mean"] = math.nan
    return {"keys": keys, "merged": merged, "seeds": seeds, **st}


#: The contrasts the guide shows: (label, a, b); see :func:`contrast`.
CONTRASTS = (
    ("every pair on h100 - bf16", ("*", "h100"), ("bf16", None)),
    ("every pair on h100-fast - bf16", ("*", "h100-fast"), ("bf16", None)),
    ("every pair on b200 - bf16", ("*", "b200"), ("bf16", None)),
    ("every pair on cpu - bf16", ("*", "cpu"), ("bf16", None)),
    ("every pair on exact - bf16", ("*", "exact"), ("bf16", None)),
    ("h100-fast - h100 (same recipes)", ("*", "h100-fast"), ("*", "h100")),
    ("h100 - exact (same recipes)", ("*", "h100"), ("*", "exact")),
    ("b200 - exact (same recipes)", ("*", "b200"), ("*", "exact")),
    ("cpu - exact (same recipes)", ("*", "cpu"), ("*", "exact")),
    ("te-nvfp4-no-rht - te-nvfp4 (same stacks)", ("te-nvfp4-no-rht", "*"), ("te-nvfp4", "*")),
    ("te-nvfp4-no-sr - te-nvfp4 (same stacks)", ("te-nvfp4-no-sr", "*"), ("te-nvfp4", "*")),
    ("te-nvfp4-no-2d - te-nvfp4 (same stacks)", ("te-nvfp4-no-2d", "*"), ("te-nvfp4", "*")),
    ("te-current - te-delayed (same stacks)", ("te-current", "*"), ("te-delayed", "*")),
    ("te-mxfp8 - te-block (same stacks)", ("te-mxfp8", "*"), ("te-block", "*")),
)


def _contrast_table(runs, same=()):
    t = [["contrast", "matched", "seeds", "mean difference", "95 % CI (over seeds)", "resolves"]]
    for label, a, b in CONTRASTS:
        c = contrast(runs, a, b, same)
        if not c["keys"]:
            continue
        ci = "" if c["ci_low"] != c["ci_low"] else f"[{c['ci_low']:+.4f}, {c['ci_high']:+.4f}]"
        keys = [str(k) + (f" (= {', '.join(c['merged'][k])})" if k in c["merged"] else "") for k in c["keys"]]
        t.append([label, ", ".join(keys), str(len(c["seeds"])),
                  "" if c["mean"] != c["mean"] else f"{c['mean']:+.4f}", ci,
                  "" if c["ci_low"] != c["ci_low"] else f"+-{(c['ci_high'] - c['ci_low']) / 2:.4f}"])
    return t


# --------------------------------------------------------------------------- joint analysis over pairs

def _betai(a, b, x):
    """Regularized incomplete beta I_x(a, b): its continued fraction (modified Lentz), on its fast side."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    if x > (a + 1.0) / (a + b + 2.0):   # the fraction converges for x below its mean; use the symmetry there
        return 1.0 - _betai(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny, f, c, d = 1e-300, 1.0, 1.0, 0.0
    for i in range(400):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2:
            num = -((a + m) * (a + b + m) * x) / ((a + 2 * m) * (a + 2 * m + 1))
        else:
            num = (m * (b - m) * x) / ((a + 2 * m - 1) * (a + 2 * m))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + num / c
        c = c if abs(c) > tiny else tiny
        f *= c * d
        if abs(1.0 - c * d) < 1e-15:
            break
    return front * (f - 1.0)


def t_quantile(p, df) -> float:
    """Quantile of Student's t distribution with ``df`` degrees of freedom (bisection on its CDF).

    Examples
    --------
    >>> round(t_quantile(0.975, 2), 6), round(t_quantile(0.975, 86), 4)
    (4.302653, 1.9879)
    """
    if not 0.5 <= p < 1 or df < 1:
        raise ValueError(f"t_quantile: p must be in [0.5, 1) and df >= 1, got p={p!r}, df={df!r}")

    def cdf(t):
        return 1.0 - 0.5 * _betai(df / 2.0, 0.5, df / (df + t * t))
    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2.0


def f_sf(f, d1, d2) -> float:
    """Upper tail P(F > f) of the F distribution with (d1, d2) degrees of freedom."""
    return 1.0 if f <= 0 else _betai(d2 / 2.0, d1 / 2.0, d2 / (d2 + d1 * f))


def _loss_key(r, curves):
    return (float(r["final_val_loss"]), float(r["final_train_loss"]), curves.get(r["run_id"], ()))


def identical_results(runs, curves=()) -> list:
    """Groups of recipe@stack labels whose runs give the same losses bit for bit at every seed.

    Two pairs are one result when, seed by seed, their final validation loss, final training loss and
    (where ``curves`` rows are given) the validation loss at every evaluation are the same floats.

    Examples
    --------
    >>> runs = [{"run_id": f"{r}-{k}", "recipe": r, "stack": "h100", "seed": k, "final_val_loss": v,
    ...          "final_train_loss": 3.0} for r, k, v in [("a", 0, 2.5), ("b", 0, 2.5), ("c", 0, 2.6),
    ...                                                    ("a", 1, 2.4), ("b", 1, 2.4), ("c", 1, 2.4)]]
    >>> identical_results(runs)
    [['a@h100', 'b@h100']]
    """
    curve = {}
    for c in curves:
        curve.setdefault(c["run_id"], []).append((int(c["step"]), float(c["val_loss"])))
    curve = {k: tuple(sorted(v)) for k, v in curve.items()}
    by = {}
    for r in runs:
        if r["stack"]:
            by.setdefault(run_label(r["recipe"], r["stack"]), {})[int(r["seed"])] = _loss_key(r, curve)
    groups = {}
    for label, seeds in by.items():
        groups.setdefault(tuple(sorted(seeds.items())), []).append(label)
    return [g for g in groups.values() if len(g) > 1]


def joint_analysis(runs, curves=(), n_perm=9999, seed=0) -> dict:
    """One analysis over every emulated pair that counts the shared bf16 run and identical results once.

    Every pair's gap to bf16 at seed s shares bf16's run at s, so the pairs' intervals are not independent
    tests. Identical results (:func:`identical_results`) are kept once, under their first label; results
    are compared at the seeds shared with bf16 that keep the most runs (``incomplete``: those run at fewer). With
    ``L[p, s]`` the final validation loss of distinct result p at seed s and ``B[s]`` bf16's:

    * ``shift``: the per-seed mean gap ``mean_p L[p, s] - B[s]`` and its t interval over the seeds
      (:func:`gap_stats`): one test of a shift common to the recipes, the shared baseline in its noise;
    * ``dev``: per result, ``mean_s (L[p, s] - mean_q L[q, s])``, its distance from the mean of all results
      at the same seeds (bf16 cancels);
    * ``F`` and ``p_F`` (F distribution), the two-way (result x seed) analysis of variance of ``L``:
      do the results differ among themselves; ``pair_diff_half``: the 95 % half-width for the
      difference of two results, ``t(0.975, df) * sqrt(2 MSE / S)``, df = (P - 1)(S - 1);
    * ``max_dev``, ``p_max`` and ``max_dev_crit``: a permutation test of the largest ``|dev|`` over all
      results, the labels shuffled independently within each seed (``n_perm`` shuffles from
      ``numpy.random.default_rng(seed)``; p = (1 + exceedances) / (1 + n_perm)); ``max_dev_crit`` is
      the 95 % point of that null, the simultaneous half-width for every result's ``dev``, and
      ``p_perm_F`` the same shuffles' p-value for F.

    Examples
    --------
    >>> rows = [{"run_id": f"{r}{k}", "recipe": r, "stack": st, "seed": k, "final_val_loss": v,
    ...          "final_train_loss": 3.0, "diverged": 0}
    ...         for r, st, k, v in [("bf16", "", 0, 2.0), ("bf16", "", 1, 2.5), ("a", "x", 0, 2.25),
    ...                             ("a", "x", 1, 2.5), ("b", "x", 0, 2.75), ("b", "x", 1, 3.25)]]
    >>> j = joint_analysis(rows, n_perm=99)
    >>> j["shift_per_seed"], j["dev"]
    ([0.5, 0.375], {'a@x': -0.3125, 'b@x': 0.3125})
    """
    if int(n_perm) < 19:
        raise ValueError(f"joint_analysis: n_perm must be at least 19 (a 95 % point needs 20 values), got {n_perm!r}")
    runs = list(runs)
    bad = [r["run_id"] for r in runs if int(r.get("diverged", 0))]
    if bad:
        raise ValueError(f"joint_analysis: diverged runs have no loss to compare: {', '.join(bad)}; "
                         "pass the runs that finished")
    same = identical_results(runs, curves)
    dropped = {lab for g in same for lab in g[1:]}
    loss = {}
    for r in runs:
        lab = run_label(r["recipe"], r["stack"] or None)
        if lab not in dropped:
            loss.setdefault(lab, {})[int(r["seed"])] = float(r["final_val_loss"])
    if "bf16" not in loss:
        raise ValueError("joint_analysis: the runs have no bf16 baseline; the study's gaps are to bf16")
    labels = [lab for lab in dict.fromkeys(run_label(r["recipe"], r["stack"]) for r in runs if r["stack"])
              if lab not in dropped]
    # the seeds shared with bf16 that keep the most runs; a result run at fewer is left out ("incomplete")
    sets = [frozenset(loss[lab]) & frozenset(loss["bf16"]) for lab in labels]
    common = max(set(sets), key=lambda c: (sum(c <= x for x in sets) * len(c), len(c)), default=frozenset())
    incomplete = [lab for lab, x in zip(labels, sets) if not common <= x]
    labels, seeds = [lab for lab in labels if lab not in incomplete], sorted(common)
    if len(labels) < 2 or len(seeds) < 2:
        raise ValueError(f"joint_analysis: needs two emulated results at two seeds shared with bf16, "
                         f"got {len(labels)} results at seeds {seeds}")
    L = np.array([[loss[lab][s] for s in seeds] for lab in labels])
    B = np.array([loss["bf16"][s] for s in seeds])
    P, S = L.shape
    shift = [float(v) for v in L.mean(0) - B]
    E = L - L.mean(0)                       # against the mean of all results at the same seed
    dev = E.mean(1)
    ss_tot = float((E ** 2).sum())          # within seeds; a shuffle within seeds keeps it
    ss_pairs = S * float((dev ** 2).sum())
    df_e = (P - 1) * (S - 1)
    mse = (ss_tot - ss_pairs) / df_e
    # no residual at all (every result moves with the seed alike): any difference among results is exact
    F = (ss_pairs / (P - 1)) / mse if mse > 0 else (math.inf if ss_pairs > 0 else math.nan)
    rng = np.random.default_rng(seed)
    order = rng.random((int(n_perm), P, S)).argsort(axis=1)
    Ep = np.take_along_axis(np.broadcast_to(E, (int(n_perm), P, S)), order, axis=1)
    devp = Ep.mean(2)
    maxp = np.abs(devp).max(1)
    ssp = S * (devp ** 2).sum(1)
    max_dev = float(np.abs(dev).max())
    k = math.ceil(0.95 * (n_perm + 1)) - 1
    crit = float(np.sort(np.concatenate([maxp, [max_dev]]))[k])
    return {"labels": labels, "identical": same, "seeds": seeds, "incomplete": incomplete,
            "shift_per_seed": shift, "shift": gap_stats(shift),
            "dev": {lab: float(v) for lab, v in zip(labels, dev)}, "F": F, "df": (P - 1, df_e),
            "p_F": f_sf(F, P - 1, df_e) if mse > 0 else (0.0 if ss_pairs > 0 else math.nan),
            "residual_sd": math.sqrt(mse),
            "pair_diff_half": t_quantile(0.975, df_e) * math.sqrt(2 * mse / S),
            "max_dev": max_dev, "max_dev_label": labels[int(np.abs(dev).argmax())],
            "p_max": float((1 + (maxp >= max_dev).sum()) / (1 + n_perm)), "max_dev_crit": crit,
            "p_perm_F": float((1 + (ssp >= ss_pairs).sum()) / (1 + n_perm)), "n_perm": int(n_perm)}


def _interval_line(gaps, same=()):
    dup = {lab for g in same for lab in g[1:]}
    rows = [g for g in gaps if g["stack"] != "" and g["gap_ci95_low"] == g["gap_ci95_low"] and g["label"] not in dup]
    out = [g["label"] for g in rows if g["gap_ci95_low"] > 0 or g["gap_ci95_high"] < 0]
    sd = float(np.median([g["gap_sd"] for g in rows])) if rows else math.nan
    half = float(np.median([(g["gap_ci95_high"] - g["gap_ci95_low"]) / 2 for g in rows])) if rows else math.nan
    twins = (f"{len(same)} groups of pairs give the same losses bit for bit at every seed ("
             + "; ".join(" = ".join(g) for g in same) + f"): one result each, so the {len(rows) + len(dup)} "
             f"emulated pairs are {len(rows)} distinct results." if same
             else "No two pairs give the same losses bit for bit at every seed.")
    return (twins + f" Of their {len(rows)} intervals {len(out)} "
            f"exclude{'s' if len(out) == 1 else ''} zero" + (f" ({', '.join(out)})" if out else "")
            + ". The intervals share one bf16 run per seed, so they are not independent tests and their "
            "count is no test of the recipes (the joint analysis below is). The median seed-to-seed sd of a "
            f"pair's gap is {sd:.4f}; the median 95 % half-width, the smallest gap to bf16 one pair resolves, "
            f"{half:.4f}.")


def _joint_table(runs_, curves):
    j = joint_analysis(runs_, curves)
    sh, (d1, d2) = j["shift"], j["df"]
    all_pairs, kept = {}, set(j["labels"]).union(*(g for g in j["identical"] if g[0] in j["labels"]))
    bf = {int(r["seed"]): r["final_val_loss"] for r in runs_ if r["recipe"] == "bf16"}
    for r in runs_:
        if run_label(r["recipe"], r["stack"] or None) in kept and int(r["seed"]) in j["seeds"]:
            all_pairs.setdefault(int(r["seed"]), []).append(r["final_val_loss"] - bf[int(r["seed"])])
    per = ", ".join(f"{v:+.4f}" for v in j["shift_per_seed"])
    per48 = ", ".join(f"{float(np.mean(all_pairs[s])):+.4f}" for s in j["seeds"])
    t = [["question", "statistic", "p", "resolves (95 %)"],
         [f"a shift common to the {len(j['labels'])} results against bf16 (mean gap at each seed, "
          f"{per}; t interval over {len(j['seeds'])} seeds)",
          f"{sh['mean']:+.4f} [{sh['ci_low']:+.4f}, {sh['ci_high']:+.4f}]", "",
          f"+-{(sh['ci_high'] - sh['ci_low']) / 2:.4f} common to all"],
         ["do the results differ among themselves (two-way analysis of variance, result x seed; bf16 cancels)",
          f"F({d1}, {d2}) = {j['F']:.2f}", f"{j['p_F']:.2f} (permutation {j['p_perm_F']:.2f})",
          f"+-{j['pair_diff_half']:.4f} between two results"],
         [f"the largest distance of a result from the mean of all results at its seeds (permutation test "
          f"of the max over {len(j['labels'])}, labels shuffled within each seed, {j['n_perm']} shuffles)",
          f"{j['max_dev_label']} {j['dev'][j['max_dev_label']]:+.4f}", f"{j['p_max']:.2f}",
          f"+-{j['max_dev_crit']:.4f} for every result at once"]]
    note = (f"Per seed, the mean gap over all {sum(len(v) for v in all_pairs.values()) // len(all_pairs)} pairs, "
            f"identical results counted twice, is {per48}: one bf16 run per seed moves every pair's gap "
            f"together. Residual sd of a run about its result and seed effects: {j['residual_sd']:.4f}.")
    return j, t, note


def curve_rows(results):
    for r in results:
        s = r["spec"]
        for step, v in zip(r["eval_steps"], r["val_loss"]):
            yield {"run_id": r["run_id"], "recipe": s["recipe"], "stack": s["stack"] or "", "seed": s["seed"],
                   "step": step, "val_loss": v}


def _diag_rows(results):
    for r in results:
        for d in r.get("diagnostics") or []:
            yield {"run_id": r["run_id"], **d}


def write_csv(path, rows, columns=None):
    """Write dict rows as CSV (columns: ``columns`` or the first row's keys; NaN as ``nan``)."""
    rows = list(rows)
    columns = columns or (list(rows[0]) if rows else [])
    write_rows(path, rows, columns)


def write_tables(results, out) -> dict:
    """Write the four CSV files under ``out``; returns {name: path}."""
    out = Path(out)
    paths = {}
    for name, rows in (("runs", run_rows(results)), ("curves", curve_rows(results)),
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
    recipes = list(dict.fromkeys(k[0] for k in groups))   # one colour per recipe in every panel
    from matplotlib import colormaps
    palette = colormaps["tab20"]
    cols = min(3, len(stacks))   # rows of three panels: five stacks side by side are too wide to read
    rows = -(-len(stacks) // cols)
    fig = _figure(6 * cols, 4.2 * rows)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[len(stacks):]:
        ax.set_visible(False)
    for ax, stack in zip(axes, stacks):
        for (recipe, st), rs in groups.items():
            if st is not None and st != stack:
                continue
            steps = rs[0]["eval_steps"]
            n = min(len(r["val_loss"]) for r in rs)
            v = np.array([r["val_loss"][:n] for r in rs], dtype=float)
            style = dict(color="k", ls="--") if recipe == "bf16" else dict(color="0.5", ls=":") \
                if recipe == "fp32" else dict(color=palette(recipes.index(recipe) % 20))
            line, = ax.plot(steps[:n], v.mean(0), label=f"{recipe} ({len(rs)} seeds)", lw=1.3, **style)
            ax.fill_between(steps[:n], v.min(0), v.max(0), color=line.get_color(), alpha=0.18, lw=0)
        ax.set_title(f"stack {stack}" if stack else "baselines")
        ax.set_xlabel("step")
        ax.set_ylabel("validation loss (nats/byte)")
        if (lo := min((v for r in results for v in r["val_loss"] if np.isfinite(v)), default=None)) is not None:
            ax.set_ylim(lo - 0.05, lo + 1.5)      # finite losses only: NaN limits (diverged forks) raised
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
                ("frac_clipped", "fraction clipped (beyond the scaled range)", False),
                ("frac_saturated", "fraction at the format's max\n(block formats: each block's max, by design)", False),
                ("amax", "log2 amax", None))


def figure_diagnostics(result):
    """Heat maps (layer.pass x step) of one run's diagnostics."""
    cells = result.get("diagnostics") or []
    keys = sorted({(c["layer"], c["pass"]) for c in cells})
    steps = sorted({c["step"] for c in cells})
    fig = _figure(20, 0.22 * len(keys) + 2.0)
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


def _gap_table(rows, diagnostics_column=False, same=()):
    t = [["recipe", "stack", "seeds", "diverged", "final val loss", "gap to bf16", "95 % CI", "s/step",
          "x fp32 step"] + (["s/step with diagnostics"] if diagnostics_column else [])
         + (["same losses as"] if same else [])]
    twin = {lab: " = ".join(x for x in g if x != lab) for g in same for lab in g}
    for r in rows:
        ci = "" if r["gap_ci95_low"] != r["gap_ci95_low"] else \
            f"[{r['gap_ci95_low']:+.4f}, {r['gap_ci95_high']:+.4f}]"
        t.append([r["recipe"], r["stack"] or "-", str(r["seeds"]), str(r["diverged"]),
                  _cell(r["mean_final_val_loss"]), "" if r["gap_to_bf16"] != r["gap_to_bf16"]
                  else f"{r['gap_to_bf16']:+.4f}", ci, _cell(r["s_per_step"], 3), _cell(r["slowdown_vs_fp32"], 1)]
                 + ([_cell(r.get("s_per_step_diagnostics", math.nan), 3)] if diagnostics_column else [])
                 + ([twin.get(r["label"], "")] if same else []))
    return t


def how_to_read(provenance: dict, gaps=None) -> dict:
    """The report's "how to read" paragraphs: ``{"report": ..., "gaps": ..., "inference": ..., "figures": ...}``.

    Examples
    --------
    >>> text = how_to_read({"train.final_windows": 64, "infer_windows": 32})
    >>> "64 validation windows" in text["gaps"] and "32 validation windows" in text["inference"]
    True
    """
    final = provenance.get("final_windows_evaluated", provenance.get("train.final_windows", "the final"))
    infer = provenance.get("infer_windows", "--infer-windows")
    untimed = [g["label"] for g in gaps or [] if g.get("timed_seeds") == 0 and g["stack"]]
    return {
        "report": "Each run trains the same model from the same initial weights on the same batches at its seed, in "
                  "fp32, bf16 or an emulated FP8/FP4 recipe on a GPU stack (recipe@stack). Losses are in nats per "
                  "byte (lower is better). Seeds are paired: a recipe's gap at seed s is compared with bf16 at "
                  "seed s. The tables are also CSV files beside this report (runs, curves, gaps, diagnostics, "
                  "inference, provenance).",
        "gaps": f"final val loss: the validation loss over {final} validation windows after the last step, "
                "averaged over seeds. gap to bf16: at each seed, this row's final loss minus bf16's, averaged; "
                "95 % CI: Student-t interval over the paired seeds (empty with one seed); an interval that "
                "contains 0 resolves no difference from bf16. s/step: seconds per training step on this "
                "machine, one thread, averaged over the seeds that recorded no diagnostics; x fp32 step: that "
                "over fp32's. s/step with diagnostics: the first seed of each recipe, which records "
                "fp8emu.torch.diagnostics at a cost of several times a step"
                + (f" (every seed of {', '.join(untimed)} recorded them: their s/step includes it)." if untimed
                   else "."),
        "inference": f"The bf16 baseline's first seed, trained once, evaluated as each configuration on "
                     f"{infer} validation windows (--infer-windows): its bf16 val loss is over other windows than "
                     f"the gap table's final val loss ({final} windows), so the two differ. x bf16 ppl: "
                     "perplexity over the bf16 row's.",
        "figures": "Curves: validation loss every evaluation, mean over seeds, band from the lowest to the highest "
                   "seed. Diagnostics heat maps (first seed of each recipe): one row per layer.pass.operand, one "
                   "column per evaluation interval. 'fraction clipped' is true saturation: inputs beyond what "
                   "their scale lets the format hold (more than rounding). 'fraction at the format's max' counts "
                   "codes at the largest magnitude: block formats (MXFP8, NVFP4, 1x128 blocks) put each block's "
                   "largest element there by design, so a large fraction there is normal and is not clipping.",
    }


def md_table(t):
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


def write_report(results, out, provenance: dict, inference_rows=None, sections=()) -> list:
    """Write the CSV tables, ``figures/*.png``, ``report.md`` and ``report.html`` under ``out``
    (``sections``: more ``(title, table, how to read)`` after the joint analysis)."""
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
    pngs = {name: png_bytes(fig, dpi=90) for name, _, fig in figs}
    for name, data in pngs.items():
        (out / "figures" / f"{name}.png").write_bytes(data)
    prov = [["item", "value"]] + [[k, str(v)] for k, v in provenance.items()]
    write_csv(out / "provenance.csv", [{"item": k, "value": v} for k, v in provenance.items()])
    read = how_to_read(provenance, gaps)
    runs_, curves = run_rows(results), list(curve_rows(results))
    same = identical_results(runs_, curves)
    tables = [("Provenance", prov, None),
              ("Final gap to bf16 per recipe x stack", _gap_table(gaps, True, same),
               read["gaps"] + " " + _interval_line(gaps, same))]
    try:   # a study too small for it (one result or seed) or with a diverged run has no joint analysis
        tables.append(("Joint analysis over the pairs", *_joint_table(runs_, curves)[1:]))
    except ValueError:
        pass
    tables += list(sections)
    if inference_rows:
        tables.append(("Inference: perplexity of the trained bf16 model", _infer_table(inference_rows),
                       read["inference"]))
    md = ["# fp8emu train-study report", "", "## How to read this report", "", read["report"], "", read["figures"], ""]
    body = ["<h1>fp8emu train-study report</h1>", "<h2>How to read this report</h2>",
            f"<p>{html.escape(read['report'])}</p>", f"<p>{html.escape(read['figures'])}</p>"]
    for title, t, note in tables:
        md += [f"## {title}", ""] + ([f"How to read: {note}", ""] if note else []) + [md_table(t), ""]
        body += [f"<h2>{html.escape(title)}</h2>"] + ([f"<p>How to read: {html.escape(note)}</p>"] if note else []) \
            + [_html_table(t)]
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

def read_study_csv(path) -> list:
    """The rows of a study CSV (``runs.csv``, ``gaps.csv``, ...) as dicts: text columns as strings, empty
    cells NaN, the rest ints or floats; refused with file and line as every study CSV is
    (:func:`fp8emu.lab.store.read_rows`)."""
    return read_rows(path, convert=numbers_except(_TEXT_COLUMNS))


#: Study CSV columns that hold text (every other column holds numbers).
_TEXT_COLUMNS = frozenset(("recipe", "stack", "label", "config", "weights", "activations", "attention", "run_id",
                           "trunk_sha256"))


def guide_tables(folder) -> str:
    """The Markdown tables the guide shows, made from ``runs.csv``, ``gaps.csv``, ``curves.csv`` and ``inference.csv``.

    All four are read from ``folder``; without ``curves.csv``, identical results are judged on the final
    losses alone. ``docs/guides/lm-study.md`` holds this text between its ``lm-study:tables`` markers; a test
    regenerates it from the committed CSV and compares.
    """
    folder = Path(folder)
    runs_ = read_study_csv(folder / "runs.csv")
    gaps = read_study_csv(folder / "gaps.csv")
    fp8 = [r for r in runs_ if r["stack"] != ""]
    curves = read_study_csv(folder / "curves.csv") if (folder / "curves.csv").exists() else []
    try:
        j, joint, note = _joint_table(runs_, curves)
        same = j["identical"]
        joint_part = ["Joint analysis of the distinct results (seeds " + ", ".join(map(str, j["seeds"])) + "):", "",
                      md_table(joint), "", note, ""]
    except ValueError as e:   # too few results or seeds, or a diverged run: say so instead of a table
        same = identical_results(runs_, curves)
        joint_part = [f"No joint analysis: {e}.", ""]
    parts = [f"{len(runs_)} runs ({len(runs_) - len(fp8)} baseline, {len(fp8)} emulated); the runs' wall times "
             f"add up to {sum(r['wall_s'] for r in runs_) / 60:.1f} min "
             f"({sum(r['wall_s'] for r in fp8) / 60:.1f} min in emulated runs), one thread each.", "",
             "Final validation loss and gap to bf16 (paired by seed; 95 % t interval):", "",
             md_table(_gap_table(gaps, same=same)), "", _interval_line(gaps, same), ""] + joint_part + [
             "Pooled contrasts (final validation loss, nats/byte; identical results once; at each seed the "
             "difference is averaged over the matched recipes or stacks, then a 95 % t interval is taken over "
             "the seeds, whose half-width is what the contrast resolves):", "",
             md_table(_contrast_table(runs_, same))]
    if (folder / "inference.csv").exists():
        parts += ["", "Inference of the trained bf16 model (seed 0), validation perplexity:", "",
                  md_table(_infer_table(read_study_csv(folder / "inference.csv")))]
    return "\n".join(parts) + "\n"
