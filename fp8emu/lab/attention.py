"""The attention study: where emulated FP8 attention loses accuracy, and the figure of it.

:func:`attention_study` runs :func:`fp8emu.attention.attention` over a grid of
cases and returns one row per case (errors against float64 attention of the
unquantized inputs, P saturation/underflow counts):

``context``
    error versus context length (keys; a few query rows attend to all of them,
    memory bounded by the key block), FA3 recipe with O kept in the tensor-core
    chain (``promote_every=None``, as FA3) and promoted every block;
``promotion``
    error versus the promotion interval (1, 4, 64 key blocks, never) at the
    longest context;
``prescale``
    P pre-scale and saturation at the middle context: FA3 with max offset
    0, 4, 8, and FlashAttention-4 before/after PR #2717 (stale max, P saturating);
``scales``
    per-tensor versus per-head descales (4 heads whose Q, K, V ranges differ by powers of :data:`HEAD_GAIN`).

Each case is run on ``gaussian`` Q/K/V and on ``outlier`` Q/K (a few channels
20x larger, as in LLM activations); V has mean :data:`V_MEAN`.  All data come from
fixed seeds (:func:`make_qkv`).

Examples
--------
>>> rows = attention_study(contexts=(256,), queries=4, head_dim=32, experiments=("promotion",),
...                        distributions=("gaussian",))
>>> sorted({r["variant"] for r in rows})
['every 1', 'every 4', 'every 64', 'never']
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np

from ..attention import RECIPES, attention, get_recipe
from .inputs import load_data
from ..interop import is_integer

__all__ = ["attention_study", "make_qkv", "figure_attention", "EXPERIMENTS", "DISTRIBUTIONS",
           "study_table", "attention_error", "figure_data_attention"]

EXPERIMENTS = ("context", "promotion", "prescale", "scales")
DISTRIBUTIONS = ("gaussian", "outlier")
#: Outlier channels: how many of the head dimension and how much larger.
OUTLIER_CHANNELS, OUTLIER_GAIN = 4, 20.0
#: Mean of V in the study: value caches have non-zero channel means, which make O's running sum grow
#: with the context (with zero-mean V it stays small and the promotion interval hardly matters).
V_MEAN = 0.5
#: Magnitude ratio between consecutive heads in the ``scales`` experiment.
HEAD_GAIN = 64.0


def make_qkv(distribution, *, heads=1, queries=8, context=1024, head_dim=128, seed=0, head_gain=1.0,
             v_mean=0.0):
    """float32 (q, k, v) of shapes (heads, queries, d), (heads, context, d), (heads, context, d).

    ``gaussian``: standard normal.  ``outlier``: the same, then the first :data:`OUTLIER_CHANNELS`
    channels of Q and K multiplied by :data:`OUTLIER_GAIN` and all of Q and K by
    ``1 / sqrt(OUTLIER_GAIN)``.  Head h of Q and V is multiplied by ``head_gain ** h`` and of K
    by ``head_gain ** -h`` (the scores are unchanged; only the tensors' ranges differ).
    ``v_mean`` is added to V.

    Examples
    --------
    >>> q, k, v = make_qkv("outlier", queries=2, context=16, head_dim=8)
    >>> q.shape, k.shape, bool(np.abs(k[..., :4]).mean() > 5 * np.abs(k[..., 4:]).mean())
    ((1, 2, 8), (1, 16, 8), True)
    """
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {distribution!r}")
    for name, val in (("heads", heads), ("queries", queries), ("context", context), ("head_dim", head_dim)):
        if not is_integer(val) or val < 1:
            raise ValueError(f"{name} must be a positive integer, got {val!r}")
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((heads, queries, head_dim)).astype(np.float32)
    k = rng.standard_normal((heads, context, head_dim)).astype(np.float32)
    v = (rng.standard_normal((heads, context, head_dim)) + v_mean).astype(np.float32)
    if distribution == "outlier":
        c = min(OUTLIER_CHANNELS, head_dim)
        for x in (q, k):
            x[..., :c] *= OUTLIER_GAIN
            x *= np.float32(1 / np.sqrt(OUTLIER_GAIN))
    gain = (np.float32(head_gain) ** np.arange(heads, dtype=np.float32))[:, None, None]
    return q * gain, k / gain, v * gain


def _cases(contexts, experiments, distributions, promote_every):
    fa3 = get_recipe("fa3-fp8")
    mid = contexts[len(contexts) // 2]
    longest = contexts[-1]
    out = []
    for dist in distributions:
        if "context" in experiments:
            for n in contexts:
                out.append(("context", dist, n, "FA3 (never promoted)", fa3, 1))
                out.append(("context", dist, n, "FA3, promoted every block",
                            dataclasses.replace(fa3, promote_every=1), 1))
        if "promotion" in experiments:
            for pe in tuple(promote_every) + (None,):
                label = "never" if pe is None else f"every {pe}"
                out.append(("promotion", dist, longest, label, dataclasses.replace(fa3, promote_every=pe), 1))
        if "prescale" in experiments:
            for mo in (0, 4, 8):
                out.append(("prescale", dist, mid, f"max offset {mo}",
                            dataclasses.replace(fa3, max_offset=mo, promote_every=1), 1))
            out.append(("prescale", dist, mid, "FA4 pre-#2717 (saturating)", get_recipe("fa4-sm100-fp8-pre2717"), 1))
            out.append(("prescale", dist, mid, "FA4 fixed", get_recipe("fa4-sm100-fp8"), 1))
        if "scales" in experiments:
            for gran in ("tensor", "head"):
                out.append(("scales", dist, mid, f"per-{gran}",
                            dataclasses.replace(fa3, granularity=gran, promote_every=1), 4))
    return out


def _run_case(case, queries, head_dim, seed):
    experiment, dist, n, variant, recipe, heads = case
    q, k, v = make_qkv(dist, heads=heads, queries=queries, context=n, head_dim=head_dim, seed=seed,
                       head_gain=HEAD_GAIN if heads > 1 else 1.0, v_mean=V_MEAN)
    rep = attention(q, k, v, recipe).report
    return {"experiment": experiment, "distribution": dist, "context": n, "variant": variant,
            "recipe": recipe.name, "rms_rel_error": float(np.max(rep.rms_rel_error)),
            "kernel_rms_rel_error": float(np.max(rep.kernel_rms_rel_error)),
            "max_rel_error": float(np.max(rep.max_rel_error)), "cosine": float(np.min(rep.cosine)),
            "p_saturated": int(rep.p_saturated.sum()), "p_underflow": int(rep.p_underflow.sum()),
            "s_overflow": int(rep.s_overflow.sum())}


def attention_study(*, contexts=(1024, 2048, 4096), queries=8, head_dim=128, experiments=EXPERIMENTS,
                    distributions=DISTRIBUTIONS, promote_every=(1, 4, 64), seed=0, progress=False,
                    client=None) -> list:
    """Run the attention study; one dict per case (see the module docstring).

    Parameters
    ----------
    contexts : sequence of int
        Key counts (increasing); the promotion cases use the last, the pre-scale
        and scale cases the middle one.
    queries, head_dim : int
        Query rows (all attending to every key) and head dimension.
    experiments, distributions : sequence of str
        Subsets of :data:`EXPERIMENTS` and :data:`DISTRIBUTIONS`.
    promote_every : sequence of int
        Promotion intervals (key blocks) of the ``promotion`` experiment (never is added).
    seed : int
        Seed of the data.
    progress : bool
        One line per case on stderr.
    client : dask.distributed.Client, optional
        Run the cases as tasks on this client (results in the same order).

    Returns
    -------
    list of dict
        Keys: experiment, distribution, context, variant, recipe, rms_rel_error,
        kernel_rms_rel_error (against float64 attention of the dequantized inputs),
        max_rel_error, cosine, p_saturated, p_underflow, s_overflow (errors: the
        largest over heads; counts: summed).
    """
    contexts = tuple(contexts)
    if not contexts or any(not is_integer(n) or n < 1
                           for n in contexts):
        raise ValueError(f"contexts must be positive integers, got {contexts!r}")
    if list(contexts) != sorted(set(contexts)):        # 1024,1024 ran every case of that context twice
        raise ValueError(f"contexts must be increasing (each once), got {contexts!r}")
    bad = [e for e in experiments if e not in EXPERIMENTS] + [d for d in distributions if d not in DISTRIBUTIONS]
    if bad:
        raise ValueError(f"unknown experiment or distribution {bad[0]!r}; experiments: {EXPERIMENTS}, "
                         f"distributions: {DISTRIBUTIONS}")
    if any(not is_integer(p) or p < 1 for p in promote_every):
        raise ValueError(f"promote_every must be positive integers, got {promote_every!r}")
    for name, val in (("queries", queries), ("head_dim", head_dim)):
        if not is_integer(val) or val < 1:
            raise ValueError(f"{name} must be a positive integer, got {val!r}")
    # each name and interval once, in the order given (a repeated one ran and printed its cases again)
    experiments, distributions, promote_every = (tuple(dict.fromkeys(v)) for v in
                                                 (experiments, distributions, promote_every))
    cases = _cases(contexts, experiments, distributions, promote_every)
    if client is not None:
        futures = client.map(_run_case, cases, queries=queries, head_dim=head_dim, seed=seed, pure=False)
        return client.gather(futures)
    rows = []
    for i, case in enumerate(cases):
        if progress:
            print(f"[{i + 1}/{len(cases)}] {case[0]} {case[1]} context={case[2]} {case[3]}",
                  file=sys.stderr, flush=True)
        rows.append(_run_case(case, queries, head_dim, seed))
    return rows


def study_table(rows) -> str:
    """The study's rows as a Markdown table.

    Examples
    --------
    >>> print(study_table([{"experiment": "scales", "distribution": "gaussian", "context": 8,
    ...     "variant": "per-head", "rms_rel_error": 0.01, "max_rel_error": 0.02, "cosine": 0.9999,
    ...     "p_saturated": 0, "p_underflow": 3}]).splitlines()[2])
    | scales | gaussian | 8 | per-head | 0.0100 | nan | 0.0200 | 0.999900 | 0 | 3 |
    """
    head = ("| experiment | distribution | context | variant | RMS rel. error | kernel RMS rel. error "
            "| max rel. error | cosine | P saturated | P underflow |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        lines.append(f"| {r['experiment']} | {r['distribution']} | {r['context']} | {r['variant']} | "
                     f"{r['rms_rel_error']:.4f} | {r.get('kernel_rms_rel_error', float('nan')):.4f} | "
                     f"{r['max_rel_error']:.4f} | {r['cosine']:.6f} | {r['p_saturated']} | {r['p_underflow']} |")
    return "\n".join(lines)


def _legend(ax):
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def figure_attention(size=1.0, rows=None, progress=False):
    """Four panels of the attention study: context, promotion interval, P pre-scale, descales.

    ``size`` 1.0: contexts 1K to 128K (8 queries, head dim 128); smaller sizes use fewer
    and shorter contexts.  ``rows`` from :func:`attention_study` skips the computation.

    Examples
    --------
    >>> fig = figure_attention(size=0.01)
    >>> [ax.get_title()[:3] for ax in fig.axes]
    ['(a)', '(b)', '(c)', '(d)']
    """
    from matplotlib.figure import Figure   # matplotlib is a core dependency; imported when drawing

    if rows is None:
        n = max(2, int(round(8 * size)))
        contexts = tuple(1024 * 2 ** i for i in range(n)) if size >= 0.25 else (256, 512)
        rows = attention_study(contexts=contexts, queries=8, head_dim=128 if size >= 0.25 else 32,
                               progress=progress)
    fig = Figure(figsize=(13, 8.5))
    axes = fig.subplots(2, 2).ravel()
    styles = {"gaussian": "-", "outlier": "--"}
    ax = axes[0]
    for dist in DISTRIBUTIONS:
        for variant in sorted({r["variant"] for r in rows if r["experiment"] == "context"}):
            pts = [(r["context"], r["kernel_rms_rel_error"]) for r in rows
                   if r["experiment"] == "context" and r["distribution"] == dist and r["variant"] == variant]
            if pts:
                x, y = zip(*pts)
                ax.plot(x, y, styles[dist], marker="o", label=f"{variant}, {dist}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set(xlabel="context length (keys)", ylabel="kernel RMS rel. error of O (vs dequantized inputs)",
           title="(a) error vs context (FA3 recipe, Hopper accumulator)")
    _legend(ax)
    panels = ((axes[1], "promotion", "(b) error vs P·V promotion interval (longest context)", "kernel_rms_rel_error"),
              (axes[2], "prescale", "(c) P pre-scale and saturation (middle context)", "kernel_rms_rel_error"),
              (axes[3], "scales", "(d) per-tensor vs per-head descales (4 heads, ranges 64^h)", "rms_rel_error"))
    for ax, exp, title, key in panels:
        sel = [r for r in rows if r["experiment"] == exp]
        variants = list(dict.fromkeys(r["variant"] for r in sel))
        width = 0.38
        for j, dist in enumerate(DISTRIBUTIONS):
            vals = [next((r[key] for r in sel if r["variant"] == vname and r["distribution"] == dist),
                         np.nan) for vname in variants]
            xs = np.arange(len(variants)) + (j - 0.5) * width
            ax.bar(xs, vals, width, label=dist)
            for x, vname in zip(xs, variants):
                r = next((r for r in sel if r["variant"] == vname and r["distribution"] == dist), None)
                if r is not None and (r["p_saturated"] or r["p_underflow"]):
                    ax.annotate(f"sat {r['p_saturated']}\nunder {r['p_underflow']}", (x, r[key]),
                                ha="center", va="bottom", fontsize=6)
        ax.set_xticks(np.arange(len(variants)))
        ax.set_xticklabels(variants, rotation=15, fontsize=8)
        ax.set_yscale("log")
        ax.set(ylabel=("kernel RMS rel. error (vs dequantized inputs)" if key.startswith("kernel")
                       else "RMS rel. error of O (vs float64 of the inputs)"), title=title)
        _legend(ax)
    for ax in axes:
        ax.grid(True, alpha=0.3)
    fig.suptitle("Emulated FP8 attention (fp8emu.attention): errors against float64 attention", fontsize=11)
    fig.tight_layout()
    return fig


def _contexts_arg(contexts, nk):
    if contexts is None:
        grid = [2 ** i for i in range(6, 40) if 2 ** i < nk] + [nk]
        return grid[-8:]
    vals = list(contexts) if not isinstance(contexts, (str, bytes)) and np.ndim(contexts) == 1 else None
    if (not vals or any(isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, np.integer)) for c in vals)
            or any(c < 1 or c > nk for c in vals)):
        raise ValueError(f"contexts must be a sequence of key counts in 1..{nk} (the keys given), got {contexts!r}")
    return [int(c) for c in vals]


def attention_error(q, k, v, *, recipes=("fa3-fp8", "fa4-sm100-fp8", "flashinfer-fp8-prefill"), contexts=None,
                    causal=False, checkpoint=None) -> list:
    """Emulated FP8 attention error on your Q, K, V, per recipe and context length.

    For each context ``n`` in ``contexts`` the first ``n`` keys and values attend
    (:func:`fp8emu.attention.attention`), and the report's errors are taken: RMS and max
    relative error of O against float64 attention of the given inputs, the kernel's RMS
    error against float64 attention of the dequantized inputs, and P saturation/underflow.

    Parameters
    ----------
    q : array_like, tensor, or name with ``checkpoint``; shape (H, Nq, d) or (Nq, d)
    k, v : the same, shapes (H_kv, Nk, d) and (H_kv, Nk, dv) or (Nk, d), (Nk, dv)
    recipes : sequence of str, keyword-only
        Names of :data:`fp8emu.attention.RECIPES`.
    contexts : sequence of int, optional, keyword-only
        Key counts (default: powers of two from 64 below Nk, the last 8, and Nk).
    causal : bool, keyword-only
    checkpoint : str or Path, optional, keyword-only

    Returns
    -------
    list of dict
        Keys ``recipe``, ``context``, ``rms_rel_error``, ``max_rel_error``,
        ``kernel_rms_rel_error`` (errors: the largest over heads), ``cosine`` (the smallest),
        ``p_saturated``, ``p_underflow`` (summed).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((32, 16)) for _ in range(3))
    >>> rows = attention_error(q, k, v, recipes=["fa3-fp8"], contexts=[16, 32])
    >>> [r["context"] for r in rows], bool(rows[0]["rms_rel_error"] < 0.1)
    ([16, 32], True)
    """
    q, k, v = (load_data(x, checkpoint=checkpoint, what=n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    if isinstance(recipes, str) or not recipes:
        raise TypeError(f"recipes must be a non-empty sequence of recipe names, e.g. ['fa3-fp8'], got {recipes!r}")
    unknown = [r for r in recipes if r not in RECIPES]
    if unknown:
        raise ValueError(f"unknown attention recipe {unknown[0]!r}; accepted: {', '.join(RECIPES)}")
    if k.ndim not in (2, 3) or k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"k and v must have shapes (H_kv, Nk, d) and (H_kv, Nk, dv) (or without H_kv), "
                         f"got {k.shape} and {v.shape}")
    rows = []
    for name in recipes:
        for n in _contexts_arg(contexts, k.shape[-2]):
            rep = attention(q, k[..., :n, :], v[..., :n, :], name, causal=causal).report
            rows.append({"recipe": name, "context": n, "rms_rel_error": float(np.max(rep.rms_rel_error)),
                         "max_rel_error": float(np.max(rep.max_rel_error)),
                         "kernel_rms_rel_error": float(np.max(rep.kernel_rms_rel_error)),
                         "cosine": float(np.min(rep.cosine)), "p_saturated": int(rep.p_saturated.sum()),
                         "p_underflow": int(rep.p_underflow.sum())})
    return rows


def figure_data_attention(q, k, v, *, recipes=("fa3-fp8", "fa4-sm100-fp8", "flashinfer-fp8-prefill"),
                          contexts=None, causal=False, checkpoint=None, label="your Q, K, V"):
    """Emulated FP8 attention error on your Q, K, V vs context, one line per recipe.

    Numbers: :func:`attention_error`.  Left: RMS relative error of O against float64
    attention of the inputs as given (quantization included); right: the kernel's own
    error (against float64 attention of the dequantized inputs).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((8, 16)) for _ in range(3))
    >>> fig = figure_data_attention(q, k, v, recipes=["fa3-fp8"], contexts=[8])
    >>> fig.axes[1].get_ylabel()
    'kernel RMS rel. error of O (vs dequantized inputs)'
    """
    from matplotlib.figure import Figure   # matplotlib is a core dependency; imported when drawing

    rows = attention_error(q, k, v, recipes=recipes, contexts=contexts, causal=causal, checkpoint=checkpoint)
    fig = Figure(figsize=(12, 4.6))
    axes = fig.subplots(1, 2)
    for i, name in enumerate(dict.fromkeys(r["recipe"] for r in rows)):
        sel = [r for r in rows if r["recipe"] == name]
        x = [r["context"] for r in sel]
        for ax, key in zip(axes, ("rms_rel_error", "kernel_rms_rel_error")):
            ax.plot(x, np.maximum([r[key] for r in sel], 1e-12), "o-", color=f"C{i}", label=name)
    for ax, ylabel in zip(axes, ("RMS rel. error of O (vs float64 of the inputs)",
                                 "kernel RMS rel. error of O (vs dequantized inputs)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set(xlabel="context length (first n keys)", ylabel=ylabel)
        ax.grid(True, alpha=0.3)
        _legend(ax)
    axes[0].set_title(f"(a) total error, {label}")
    axes[1].set_title("(b) the kernel's arithmetic alone")
    fig.tight_layout()
    return fig
