"""Accumulation drift: how the error of an FP8 GEMM's sum grows with K, per tensor-core model.

A transformer layer's per-tensor FP8 GEMMs (Transformer Engine's delayed and current scaling,
HYBRID formats) multiply E4M3 activations by E4M3 weights in fprop, and E5M2 output gradients
by E4M3 weights (dgrad) or E4M3 activations (wgrad) in the backward pass.  :func:`k_drift`
quantizes random operands as those recipes do (one current scale per tensor,
:func:`fp8emu.quantize_tensorwise`), sums the K products with each GPU model of
:func:`fp8emu.scaled_mm`, and measures each float32 output against the exact sum of the same
quantized values, as a function of K.

The models (:data:`DRIFT_MODELS`) are the ones the study's stacks (:mod:`fp8emu.training.stacks`,
``gpu=``) run per-tensor FP8 GEMMs with:

``hopper``
    Hopper with TE's split accumulator (``use_split_accumulator=True``, torch's
    ``use_fast_accum=False``): the tensor core's partial sum (14 significant bits, terms
    truncated when aligned) is promoted into an FP32 accumulator every 128 of K.
``hopper-fast``
    Hopper fast accumulation: the same tensor-core chain over the whole K, never promoted.
``blackwell``
    Blackwell ``tcgen05.mma`` ``kind::f8f6f4`` (MMA-Sim's model: 25 fraction bits, truncated).
``exact``
    The exact sum rounded once to float32 (the ``exact`` stack).
``bf16-output``
    Not a tensor core: the exact sum rounded to float32 and then to bfloat16, the rounding every
    fprop / dgrad output of a bf16 stack carries anyway; the floor against which an
    accumulator's error is small or not.

Both Hopper models run without cuBLAS's split-K (:func:`fp8emu.gemm.cublas_split_k`): a
layer's GEMMs have enough output tiles to fill the GPU (``cublas_split_k(4096, 4096, 16384)``
is 1), while the small M = N measured here would, with the ``"cublas"`` heuristic, split a long
K into pieces that each restart the fast accumulator (``split_k=`` chooses).

Errors are of the accumulated sum alone: the per-tensor scales multiply it afterwards, one more
float32 rounding that every model shares, so the codes are multiplied with unit scales.  Delayed
scaling quantizes with a scale from earlier steps' amax instead of the current one; that changes
which values saturate or fall subnormal, not how the products are summed, and is not measured
separately.

Examples
--------
>>> t = k_drift(ks=(128, 2048), m=4, n=4, seeds=(0,), models=("exact", "hopper-fast"),
...             gemms=("fprop",), distributions=("positive",))
>>> t.columns[:6]
('gemm', 'a_format', 'b_format', 'distribution', 'k', 'model')
>>> bool(t.where(model="exact")["max_rel_error"].max() <= 2.0 ** -24)
True
>>> fast = t.where(model="hopper-fast")["median_rel_error"]
>>> bool(fast[1] > 10 * fast[0])   # no promotion: the error grows with K
True
>>> from fp8emu.gemm import cublas_split_k
>>> cublas_split_k(4096, 4096, 16384), cublas_split_k(32, 32, 16384)
(1, 6)
"""

from __future__ import annotations

import csv
import dataclasses
import math

import numpy as np

from ..codec import decode
from ..gemm import scaled_mm
from ..gemm.models import get_model
from ..scaling import quantize_tensorwise
from .analysis import Table
from .store import plain_number, read_rows
from ..interop import is_integer

__all__ = ["DRIFT_MODELS", "DRIFT_GEMMS", "DRIFT_DISTRIBUTIONS", "STACK_MODELS", "DEFAULT_KS", "k_drift",
           "drift_models", "write_csv", "read_csv", "figure_k_drift", "first_k_above", "guide_block"]

#: Model name -> (``scaled_mm`` accumulator, output dtype).  The Hopper entries are models of
#: :data:`fp8emu.gemm.MODELS` whose ``split_k`` :func:`drift_models` sets.
DRIFT_MODELS = {
    "hopper": ("hopper", "float32"),
    "hopper-fast": ("hopper-fast", "float32"),
    "blackwell": ("blackwell-tcgen05-f8f6f4", "float32"),
    "exact": ("exact", "float32"),
    "bf16-output": ("exact", "bfloat16"),
}

#: GEMM -> (A's format, B's format): Transformer Engine's HYBRID recipe (E4M3 forward, E5M2
#: gradients).  dgrad (dY @ W) and wgrad (dY^T @ X) multiply the same formats.
DRIFT_GEMMS = {
    "fprop": ("e4m3fn", "e4m3fn"),
    "dgrad/wgrad": ("e5m2", "e4m3fn"),
}

#: Operand distributions: ``gaussian``, both operands N(0, 1), whose products have random signs, so
#: the sum stays near sqrt(K) and truncation errors partly cancel; ``positive``, both ``abs(N(0, 1))``
#: (half-normal, as after ReLU), where every product is positive, the sum grows as K and no
#: truncation cancels (the worst case); ``mixed``, A all-positive ``abs(N(0, 1))`` and B N(0, 1), as
#: post-ReLU/GELU activations times weights, softmax probabilities times values, or a wgrad's
#: gradients times post-activation inputs.
DRIFT_DISTRIBUTIONS = ("gaussian", "positive", "mixed")

#: Which model each of the study's stacks runs a per-tensor FP8 GEMM with under TE's
#: delayed / current scaling (fprop without split accumulator, dgrad / wgrad with it:
#: TE's ``_2X_ACC_FPROP/DGRAD/WGRAD``); tested against :mod:`fp8emu.torch`'s stacks.
STACK_MODELS = {
    "h100": {"fprop": "hopper-fast", "dgrad": "hopper", "wgrad": "hopper"},
    "h100-fast": {"fprop": "hopper-fast", "dgrad": "hopper-fast", "wgrad": "hopper-fast"},
    "b200": {"fprop": "blackwell", "dgrad": "blackwell", "wgrad": "blackwell"},
    "exact": {"fprop": "exact", "dgrad": "exact", "wgrad": "exact"},
}

#: K of the committed table: powers of two from 64 to 16384.
DEFAULT_KS = tuple(2 ** i for i in range(6, 15))

#: The table's columns, in order.
COLUMNS = ("gemm", "a_format", "b_format", "distribution", "k", "model", "stacks", "outputs",
           "median_rel_error", "max_rel_error", "norm_rel_error")


def drift_models(split_k=None) -> dict:
    """Model name -> (GEMM model or instruction name, output dtype).

    ``split_k``: the Hopper models' split-K (None: none, as in a layer-sized GEMM; ``"cublas"``:
    cuBLAS's choice for the measured shape; an int: that many pieces).

    Examples
    --------
    >>> drift_models()["hopper"][0].policy.promote, drift_models()["hopper-fast"][0].policy.split_k
    (4, None)
    """
    out = {}
    for name, (acc, dtype) in DRIFT_MODELS.items():
        if acc in ("hopper", "hopper-fast"):
            model = get_model(acc)
            acc = dataclasses.replace(model, policy=dataclasses.replace(model.policy, split_k=split_k))
        out[name] = (acc, dtype)
    return out


def _stacks(gemm, model) -> str:
    passes = ("fprop",) if gemm == "fprop" else ("dgrad", "wgrad")
    return " ".join(s for s, m in STACK_MODELS.items() if any(m[p] == model for p in passes))


def _names(value, accepted, what):
    if isinstance(value, str) or not hasattr(value, "__iter__"):
        raise TypeError(f"{what} must be a sequence of names from {', '.join(accepted)}, got {value!r}")
    value = tuple(value)
    bad = [v for v in value if v not in accepted]
    if bad or not value:
        raise ValueError(f"{what}: unknown or none given {bad!r}; accepted: {', '.join(accepted)}")
    return value


def _ints(value, what, *, minimum, multiple=1):
    if is_integer(value):
        value = (value,)
    if isinstance(value, str) or not hasattr(value, "__iter__"):
        raise TypeError(f"{what} must be a sequence of integers, got {value!r}")
    value = tuple(value)
    ok = value and all(is_integer(v) and v >= minimum
                       and v % multiple == 0 for v in value)
    if not ok:
        need = f"integers >= {minimum}" + (f" and multiples of {multiple}" if multiple > 1 else "")
        raise ValueError(f"{what} must be a non-empty sequence of {need}, got {value!r}")
    return tuple(int(v) for v in value)


def _operands(dist, seed, m, k, n):
    """float64 A (m, k) and B (k, n) of a distribution; one generator per (seed, k)."""
    g = np.random.default_rng([seed, k])
    a, b = g.standard_normal((m, k)), g.standard_normal((k, n))
    if dist == "gaussian":
        return a, b
    return (np.abs(a), np.abs(b)) if dist == "positive" else (np.abs(a), b)


def _exact_sums(va, vb):
    """The exact sums of the (exact in float64) products, each correctly rounded to float64."""
    return np.array([[math.fsum(va[i] * vb[:, j]) for j in range(vb.shape[1])] for i in range(va.shape[0])])


def _norm(v):
    """The 2-norm of a float64 vector, the same bits on every CPU: each square rounded, their sum exact
    (``math.fsum``), then rounded once.  ``np.linalg.norm`` sums in the BLAS's order, which differs between CPUs
    (the CSV's ``norm_rel_error`` differed in its last bit on an AMD EPYC from the Xeon's)."""
    return math.sqrt(math.fsum((v * v).tolist()))


def _rel_errors(y, s):
    """|y - s| / |s| per output (0 where both are 0, inf where only s is)."""
    d = np.abs(y - s)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = d / np.abs(s)
    return np.where(s == 0, np.where(d == 0, 0.0, np.inf), r)


def k_drift(ks=DEFAULT_KS, *, models=tuple(DRIFT_MODELS), gemms=tuple(DRIFT_GEMMS),
            distributions=DRIFT_DISTRIBUTIONS, m=32, n=32, seeds=(0, 1, 2), split_k=None) -> Table:
    """Relative error of each GPU model's FP8 GEMM output against the exact sum, vs K.

    For every GEMM (operand formats), distribution, seed and K, A (m x K) and B (K x n) are
    drawn, each quantized with its own current per-tensor scale, and the codes multiplied by
    :func:`fp8emu.scaled_mm` with each model; every output is compared with the exact sum of
    the products of the same quantized values (``math.fsum`` of the float64 products, which
    are exact).

    Parameters
    ----------
    ks : sequence of int
        Inner dimensions, multiples of 32 (whole tensor-core steps).
    models : sequence of str, keyword-only
        Names from :data:`DRIFT_MODELS`.
    gemms : sequence of str, keyword-only
        Names from :data:`DRIFT_GEMMS`.
    distributions : sequence of str, keyword-only
        Names from :data:`DRIFT_DISTRIBUTIONS`.
    m, n : int, keyword-only
        Output shape of each GEMM.
    seeds : sequence of int, keyword-only
        One draw of the operands per seed (and K); the statistics pool every seed's outputs.
    split_k : None, "cublas" or int, keyword-only
        The Hopper models' split-K (:func:`drift_models`).

    Returns
    -------
    Table
        One row per (gemm, distribution, K, model): ``a_format``, ``b_format``; ``stacks``, the
        study stacks that run this GEMM with this model (:data:`STACK_MODELS`, space-separated);
        ``outputs`` (m * n * seeds); ``median_rel_error`` and ``max_rel_error`` of
        ``|y - s| / |s|`` over the outputs, and ``norm_rel_error`` = ``||Y - S|| / ||S||``
        (Frobenius norms over every output of every seed: not dominated by the outputs that
        cancel to near zero, as the maximum of a Gaussian GEMM is).

    Examples
    --------
    >>> t = k_drift(ks=(128,), m=2, n=2, seeds=(0,), models=("hopper", "hopper-fast"), gemms=("fprop",),
    ...             distributions=("positive",))
    >>> bool(t["median_rel_error"][0] == t["median_rel_error"][1])   # one promotion per 128: the same sum
    True
    """
    ks = _ints(ks, "ks", minimum=32, multiple=32)
    models = _names(models, tuple(DRIFT_MODELS), "models")
    gemms = _names(gemms, tuple(DRIFT_GEMMS), "gemms")
    distributions = _names(distributions, DRIFT_DISTRIBUTIONS, "distributions")
    for v, what in ((m, "m"), (n, "n")):
        if not is_integer(v) or v < 1:
            raise ValueError(f"{what} must be a positive integer, got {v!r}")
    seeds = _ints(seeds, "seeds", minimum=0)
    chosen = {k: v for k, v in drift_models(split_k).items() if k in models}
    rows = {c: [] for c in COLUMNS}
    for gemm in gemms:
        fa, fb = DRIFT_GEMMS[gemm]
        for dist in distributions:
            for k in ks:
                outs = {name: [] for name in chosen}
                sums = []
                for seed in seeds:
                    a, b = _operands(dist, seed, m, k, n)
                    qa, qb = quantize_tensorwise(a, fa), quantize_tensorwise(b, fb)
                    s = _exact_sums(decode(qa.codes, fa, dtype=np.float64), decode(qb.codes, fb, dtype=np.float64))
                    sums.append(s)
                    for name, (acc, out) in chosen.items():
                        y = scaled_mm(qa.codes, qb.codes, a_format=fa, b_format=fb, accumulator=acc, out_dtype=out)
                        outs[name].append(np.asarray(y, np.float64))
                s = np.concatenate([x.ravel() for x in sums])
                for name, ys in outs.items():
                    y = np.concatenate([x.ravel() for x in ys])
                    r, e = _rel_errors(y, s), y - s
                    for col, v in zip(COLUMNS, (gemm, fa, fb, dist, k, name, _stacks(gemm, name), s.size,
                                                float(np.median(r)), float(r.max()),
                                                _norm(e) / _norm(s))):
                        rows[col].append(v)
    return Table(rows)


_INT_COLUMNS = ("k", "outputs")
_FLOAT_COLUMNS = ("median_rel_error", "max_rel_error", "norm_rel_error")


def write_csv(table, path) -> None:
    """Write a :func:`k_drift` table as CSV (floats as ``repr``, so reading back gives the same numbers)."""
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"not a k_drift table: columns {missing} are missing")
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(COLUMNS)
        w.writerows([[repr(float(r[c])) if c in _FLOAT_COLUMNS else r[c] for c in COLUMNS] for r in table.rows()])


def read_csv(path) -> Table:
    """A :func:`k_drift` table from a CSV :func:`write_csv` wrote.

    Examples
    --------
    >>> import tempfile, os
    >>> t = k_drift(ks=(64,), m=2, n=2, seeds=(0,), models=("exact",), gemms=("fprop",), distributions=("gaussian",))
    >>> with tempfile.TemporaryDirectory() as d:
    ...     write_csv(t, os.path.join(d, "k.csv"))
    ...     back = read_csv(os.path.join(d, "k.csv"))
    >>> back.rows() == t.rows()
    True
    """
    rows = read_rows(path, kind="k_drift CSV")
    if not rows or tuple(rows[0]) != COLUMNS:
        raise ValueError(f"{path}: not a k_drift CSV (expected the columns {', '.join(COLUMNS)})")
    conv = {c: int for c in _INT_COLUMNS} | {c: float for c in _FLOAT_COLUMNS}
    cols = {c: [] for c in COLUMNS}
    for i, r in enumerate(rows, start=2):
        for c in COLUMNS:
            try:
                if c in conv and not plain_number(r[c]):   # int(" 3"), int("1_0") read an edited cell
                    raise ValueError(r[c])
                cols[c].append(conv.get(c, str)(r[c]))
            except (TypeError, ValueError):   # a short row gives None: not text either
                kind = conv[c].__name__ if c in conv else "text"
                raise ValueError(f"{path}: line {i}: {c} = {r[c]!r} is not {kind}") from None
    return Table(cols)


_COLOURS = {"hopper-fast": "tab:red", "hopper": "tab:blue", "blackwell": "tab:green", "exact": "black",
            "bf16-output": "tab:gray"}
_STYLES = {"positive": "-", "gaussian": "--", "mixed": ":"}


def figure_k_drift(table, *, floor=1e-9):
    """Median relative error vs K, log-log: one panel per GEMM, one line per model and distribution.

    A median of exactly 0 (every output exact) is drawn at ``floor``.

    Examples
    --------
    >>> t = k_drift(ks=(64, 128), m=2, n=2, seeds=(0,), models=("exact", "hopper-fast"), gemms=("fprop",))
    >>> len(figure_k_drift(t).axes[0].lines)   # 2 models x 3 distributions
    6
    """
    from matplotlib.figure import Figure   # only the figure needs matplotlib; the table does not
    gemms = list(dict.fromkeys(table["gemm"].tolist()))
    fig = Figure(figsize=(6.0 * len(gemms), 4.6))
    axes = fig.subplots(1, len(gemms), squeeze=False, sharey=True)[0]
    for ax, gemm in zip(axes, gemms):
        t = table.where(gemm=gemm)
        for model in dict.fromkeys(t["model"].tolist()):
            for dist in dict.fromkeys(t["distribution"].tolist()):
                s = t.where(model=model, distribution=dist)
                ax.plot(s["k"], np.maximum(s["median_rel_error"], floor), _STYLES.get(dist, ":"), marker="o",
                        ms=3, color=_COLOURS.get(model), label=f"{model}, {dist}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.set_xlabel("inner dimension K")
        ax.set_title(f"{gemm}: {t['a_format'][0]} x {t['b_format'][0]}", fontsize=10)
    axes[0].set_ylabel(f"median |y - exact| / |exact|  (0 drawn at {floor:g})")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, ncol=min(5, len(labels)), loc="upper center",
               bbox_to_anchor=(0.5, 0.0), frameon=False)
    fig.suptitle("FP8 GEMM accumulation error vs K (per-tensor scaled operands, float32 outputs)", fontsize=11)
    return fig


def _g(v) -> str:
    return f"{v:.3g}"


def first_k_above(table, gemm, distribution, model, threshold) -> int | None:
    """The smallest K from which ``model``'s median error stays above ``threshold`` (a number, or a
    model name: that model's median at the same K), or None.

    Examples
    --------
    >>> t = k_drift(ks=(64, 512, 2048), m=2, n=2, seeds=(0,), models=("hopper-fast", "bf16-output"),
    ...             gemms=("fprop",), distributions=("positive",))
    >>> first_k_above(t, "fprop", "positive", "hopper-fast", 0.01)
    2048
    """
    t = table.where(gemm=gemm, distribution=distribution)
    mine = t.where(model=model)
    ref = (t.where(model=threshold)["median_rel_error"] if isinstance(threshold, str)
           else np.full(len(mine), float(threshold)))
    above = mine["median_rel_error"] > ref
    out = None
    for k, a in zip(mine["k"][::-1], above[::-1]):
        if not a:
            break
        out = int(k)
    return out


def _summary_line(t, gemm, dist) -> str:
    """Where hopper-fast passes bf16's output rounding and 1 %, and its error at the largest K."""
    bf, one = (first_k_above(t, gemm, dist, "hopper-fast", x) for x in ("bf16-output", 0.01))
    fast, split = (t.where(model=m, distribution=dist) for m in ("hopper-fast", "hopper"))
    kmax = int(fast["k"][-1])

    def since(k):
        return f"from K = {k}" if k is not None else f"at no K up to {kmax}"
    line = (f"- {gemm}, {dist}: hopper-fast's median error exceeds bf16 output rounding's {since(bf)}, "
            f"1 % {since(one)}; at K = {kmax} its median is {_g(fast['median_rel_error'][-1])}")
    if dist == "positive":
        line += f" and its largest {_g(fast['max_rel_error'][-1])}"
    return (line + f", its norm-wise error {_g(fast['norm_rel_error'][-1])}, against hopper's "
            f"{_g(split['norm_rel_error'].max())} at most over every K.")


def guide_block(table) -> str:
    """The Markdown tables and summary lines the guide shows (median errors per K; where fast
    accumulation passes bf16's output rounding and 1 %; the exact model's largest error).

    Examples
    --------
    >>> t = k_drift(ks=(64, 128), m=2, n=2, seeds=(0,), gemms=("fprop",))
    >>> guide_block(t).splitlines()[2].split(" | ")[1:3]
    ['hopper-fast (pos.)', 'hopper (pos.)']
    """
    models = ("hopper-fast", "hopper", "blackwell", "bf16-output")
    dists = [d for d in ("positive", "gaussian") if d in table["distribution"]]
    out = []
    for gemm in dict.fromkeys(table["gemm"].tolist()):
        t = table.where(gemm=gemm)
        out += [f"Median relative error, {gemm} ({t['a_format'][0]} x {t['b_format'][0]}):", "",
                "| K | " + " | ".join(f"{m} ({d[:3]}.)" for d in dists for m in models) + " |",
                "|---" * (1 + len(models) * len(dists)) + "|"]
        for k in dict.fromkeys(t["k"].tolist()):
            cells = [_g(t.where(k=k, model=m, distribution=d)["median_rel_error"][0]) for d in dists for m in models]
            out.append(f"| {k} | " + " | ".join(cells) + " |")
        out.append("")
        for d in ("positive", "mixed", "gaussian"):
            if d in t["distribution"]:
                out.append(_summary_line(t, gemm, d))
        out.append("")
    ex = table.where(model="exact")["max_rel_error"]
    out.append(f"The exact model's largest error over every row: {_g(ex.max())} (one float32 rounding).")
    return "\n".join(out)
