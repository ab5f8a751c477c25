"""The numerics lab's figures, and ``fp8emu figures --out DIR`` to regenerate them all.

Every figure function takes a ``size`` factor (1.0 for the committed figures;
smaller values give quick, coarse versions for tests and notebooks), uses
fixed seeds, and returns a :class:`matplotlib.figure.Figure` built with the
object API: importing this module never switches the caller's matplotlib
backend, and a notebook displays a returned figure as usual.

Examples
--------
>>> fig = figure_values_per_binade()
>>> fig.axes[1].get_xlabel()
'binade exponent e  (values in [2^e, 2^(e+1)))'
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from .. import scaling
from ..codec import encode
from ..conformance import report
from ..formats import format_names, get_format
from ..gemm import block_scaled_mm, scaled_mm
from ..scaling import DelayedScaling, current_scale
from . import analysis
from .attention import figure_attention, figure_data_attention
from .inputs import load_data
from .train import compare

__all__ = [
    "FIGURES", "available_figures", "save_figures", "figure_values_per_binade",
    "figure_relative_error", "figure_sqnr_vs_scale", "figure_rounding_bias",
    "figure_delayed_scaling", "figure_granularity", "figure_gemm_accumulation",
    "figure_training", "figure_conformance", "figure_block_scaled_gemm",
    "figure_data_error_vs_range", "figure_data_sqnr_vs_scale", "figure_data_granularity",
    "figure_data_gemm_error", "figure_data_block_scaled_gemm", "figure_data_attention",
]

_STYLE = {"figure.dpi": 100, "font.size": 10, "axes.grid": True, "grid.alpha": 0.3,
          "savefig.bbox": "tight", "legend.fontsize": 8}


def _new(ncols=1, width=7.0, height=4.2):
    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=(width, height))
        axes = fig.subplots(1, ncols, squeeze=False)
    for ax in axes.ravel():
        ax.grid(True, alpha=0.3)
    return fig, list(axes.ravel())


def _label(ax, xlabel, ylabel, title, **legend):
    """Axis labels, title and legend (keyword arguments go to ``Axes.legend``)."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(**legend)


def figure_values_per_binade(size=1.0):
    """Figure 1: the representable positive values of every format on a log axis, and their density.

    Examples
    --------
    >>> fig = figure_values_per_binade()
    >>> len(fig.axes), fig.axes[1].get_ylabel()
    (2, 'values per binade')
    """

    fmts = [f for f in format_names() if f != "e8m0fnu"] + ["e8m0fnu"]
    fig, (ax, ax2) = _new(ncols=2, width=13, height=5.5)
    for row, f in enumerate(fmts):
        v = get_format(f).values()
        v = np.unique(v[np.isfinite(v) & (v > 0)])
        ax.plot(np.log2(v), np.full(v.size, row), "|", ms=9, color=f"C{row % 10}")
    ax.set_yticks(range(len(fmts)), fmts)
    ax.invert_yaxis()
    ax.set_xlim(-20, 18)
    ax.set_xlabel("log2 of the value (positive finite values; e8m0fnu, binary8p1/p2 extend beyond)")
    ax.set_title("Every representable positive value, log2 axis")
    main = ["e4m3fn", "e5m2", "e3m4", "e2m3fn", "e3m2fn", "e2m1fn", "binary8p3"]
    for i, f in enumerate(main):
        e, c = analysis.values_per_binade(f)
        ax2.step(e, c + 0.04 * i, where="mid", lw=1.5, label=f)
    ax2.set_xlim(-20, 18)
    _label(ax2, "binade exponent e  (values in [2^e, 2^(e+1)))", "values per binade",
           "Density: 2^mbits per normal binade, fewer in subnormals", loc="upper left")
    return fig


def figure_relative_error(size=1.0):
    """Figure 2: relative rounding error vs magnitude (the saw-tooth), round to nearest even.

    Examples
    --------
    >>> figure_relative_error(size=0.1).axes[0].get_yscale()
    'log'
    """
    fmts = ["e4m3fn", "e5m2", "e3m4", "e2m1fn", "bfloat16"]
    fig, (ax,) = _new(width=8)
    n = max(201, int(6001 * size))
    for i, f in enumerate(fmts[::-1]):
        x, r = analysis.relative_error_curve(f, n=n)
        keep = r > 0
        ax.plot(x[keep], r[keep], lw=0.7, label=f, color=f"C{len(fmts) - 1 - i}", alpha=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_ylim(2.0 ** -12, 1.5)
    _label(ax, "|x| (input magnitude, log2 axis)", "relative error |q(x) - x| / |x|",
           "Relative error of RNE rounding: 2^-(m+1) saw-tooth, rising in the subnormals", loc="upper right")
    return fig


def figure_sqnr_vs_scale(size=1.0):
    """Figure 3: SQNR vs input scale (dynamic range), unscaled vs per-tensor scaled, Gaussian input.

    Examples
    --------
    >>> len(figure_sqnr_vs_scale(size=0.1).axes)
    2
    """
    fmts = ["e4m3fn", "e5m2", "e3m4", "e2m1fn", "bfloat16"]
    scales = np.logspace(-24, 24, 49, base=2)
    n = max(256, int(16384 * size))
    t = analysis.sweep_scale(fmts, ["gaussian", "student_t"], scales, n=n, recipes=("none", "tensor"))
    fig, axes = _new(ncols=2, width=12, height=5.2)
    for ax, dist in zip(axes, ["gaussian", "student_t"]):
        for i, f in enumerate(fmts):
            color = f"C{i}"
            for recipe, ls in (("none", "-"), ("tensor", "--")):
                r = t.where(format=f, distribution=dist, recipe=recipe)
                ax.plot(r["scale"], np.minimum(r["sqnr_db"], 80), ls, color=color, lw=1.3,
                        label=f"{f} {'unscaled' if recipe == 'none' else 'per-tensor scaled'}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("input standard scale σ (log2 axis)")
        ax.set_ylabel("SQNR (dB)")
        ax.set_ylim(-2, 60)
        ax.set_title(f"SQNR vs input scale, {dist.replace('_', '-')} input (saturating)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.subplots_adjust(bottom=0.28)
    fig.legend(handles, labels, ncol=5, loc="lower center", bbox_to_anchor=(0.5, 0.0))
    return fig


def figure_rounding_bias(size=1.0):
    """Figure 4: mean error of rne / rtz / stochastic across a binade, and SR variance vs random bits.

    Examples
    --------
    >>> len(figure_rounding_bias(size=0.05).axes)
    2
    """
    draws = max(64, int(2048 * size))
    x = np.linspace(1.0, 2.0, 161)[:-1]
    b = analysis.rounding_bias("e4m3fn", x, modes=("rne", "rtz", "stochastic"), draws=draws, seed=0)
    fig, (ax1, ax2) = _new(ncols=2, width=12)
    for mode, ls in (("rne", "-"), ("rtz", "-"), ("stochastic", "-")):
        ax1.plot(x, b[mode] / 0.125, ls, lw=1.3, label=f"{mode} (mean over x: {np.mean(b[mode]) / 0.125:+.3f} ulp)")
    _label(ax1, "input x in [1, 2) (e4m3fn ulp = 0.125)", "mean error E[q(x)] - x  (ulp)",
           f"Rounding bias, e4m3fn, {draws} stochastic draws per x", loc="lower left")
    xs = np.linspace(1.0, 2.0, 41)[:-1] + 0.01
    t = analysis.stochastic_variance("e4m3fn", xs, bits=(1, 2, 3, 4, 5, 6, 8, 10, 12, 16), draws=draws)
    ax2.plot(t["bits"], t["variance"], "o-", label="measured variance / ulp²")
    ax2.plot(t["bits"], t["ideal_variance"], "k--", label="infinite-precision SR f(1-f)")
    ax2.plot(t["bits"], t["mean_abs_bias"], "s-", label="mean |bias| / ulp")
    ax2.set_yscale("log", base=10)
    _label(ax2, "random bits used by stochastic rounding", "ulp units (e4m3fn)",
           "Stochastic rounding: bias and variance vs random bits")
    return fig


def figure_delayed_scaling(size=1.0):
    """Figure 5: delayed (amax history) vs current scaling on a tensor whose amax drifts and spikes."""

    steps = max(40, int(300 * size))
    g = np.random.default_rng(5)
    base = 0.1 * np.exp(np.linspace(0, 3, steps))  # slow drift over ~1.3 decades
    spikes = np.zeros(steps)
    spikes[steps // 3] = 40.0
    spikes[2 * steps // 3:2 * steps // 3 + 3] = 8.0
    fmt = "e4m3fn"
    ds = DelayedScaling(fmt, amax_history_len=16)
    fmax = 448.0
    tiny = 2.0 ** -9       # e4m3fn's smallest subnormal: RNE sends |y| <= tiny/2 to zero
    rec = {k: [] for k in ("amax", "d_amax", "c_scale", "d_scale", "d_over", "c_over", "d_under", "c_under")}
    for t in range(steps):
        x = g.standard_normal(4096) * base[t] * (1 + spikes[t])
        amax = float(np.max(np.abs(x)))
        d_scale = float(ds.scale)
        c_scale = float(current_scale(amax, fmt))
        ds.quantize(x)
        for name, s in (("d", d_scale), ("c", c_scale)):
            # the recipe's scaled value fl32(x * scale), counted against the thresholds of its
            # RNE cast (nothing up to 464 overflows in e4m3fn)
            xs = np.abs(np.multiply(x.astype(np.float32), np.float32(s), dtype=np.float32))
            rec[f"{name}_over"].append(int(np.count_nonzero(analysis.overflow_mask(xs, fmt))))
            rec[f"{name}_under"].append(int(np.count_nonzero((xs <= tiny / 2) & (x != 0))))
        rec["amax"].append(amax)
        rec["d_scale"].append(d_scale)
        rec["c_scale"].append(c_scale)
    fig, (ax1, ax2) = _new(ncols=2, width=12)
    t = np.arange(steps)
    ax1.plot(t, rec["amax"], label="amax of the step's tensor")
    ax1.plot(t, fmax / np.asarray(rec["d_scale"]), label="delayed: amax implied by scale (history 16)")
    ax1.plot(t, fmax / np.asarray(rec["c_scale"]), "--", label="current: amax of this tensor")
    ax1.set_yscale("log")
    _label(ax1, "training step", "amax (absolute value)", "Amax trace: drift and spikes\n(e4m3fn, margin 0)")
    ax2.plot(t, rec["d_over"], label=f"delayed: overflows (total {sum(rec['d_over'])})")
    ax2.plot(t, rec["c_over"], "--", label=f"current: overflows (total {sum(rec['c_over'])})")
    ax2.plot(t, rec["d_under"], label=f"delayed: underflows to 0 (total {sum(rec['d_under'])})")
    ax2.plot(t, rec["c_under"], "--", label=f"current: underflows to 0 (total {sum(rec['c_under'])})")
    ax2.set_xlabel("training step")
    ax2.set_yscale("symlog", linthresh=1)
    ax2.set_ylabel("elements per step (of 4096, symlog axis)")
    # two lines: on one line this title ran into the left panel's
    ax2.set_title("Overflows (beyond 448: > 464 after scaling)\nand underflows to zero, per step")
    ax2.legend()
    return fig


def figure_granularity(size=1.0):
    """Figure 6: SQNR vs scaling granularity on activations with outlier channels."""

    g = np.random.default_rng(6)
    rows, cols = (256, 512) if size >= 1 else (128, 256)
    x = g.standard_normal((rows, cols))
    x[:, g.choice(cols, 4, replace=False)] *= 100.0  # outlier channels, as in LLM activations
    x *= np.exp(g.standard_normal((rows, 1)))  # per-token magnitude spread
    return _granularity_bars(analysis.granularity_sqnr(x),
                             f"Scaling granularity vs SQNR: {rows}x{cols} activations with 4 outlier channels (x100)")


def _granularity_bars(t, title):
    """Horizontal SQNR bars of a :func:`analysis.granularity_sqnr` table, one colour per family."""
    names, vals = list(t["recipe"]), [float(v) for v in t["sqnr_db"]]
    family_colour = {f: f"C{i}" for i, f in enumerate(dict.fromkeys(t["family"]))}
    colors = [family_colour[f] for f in t["family"]]
    fig, (ax,) = _new(width=9)
    ax.barh(names[::-1], vals[::-1], color=colors[::-1])
    for i, v in enumerate(vals[::-1]):
        ax.text(v + 0.3, i, f"{v:.1f}", va="center", fontsize=8)
    ax.set_xlabel("SQNR (dB), higher is better")
    ax.set_title(title)
    return fig


def figure_gemm_accumulation(size=1.0):
    """Figure 7: relative GEMM error vs K for the exact, fp32, hopper-fast and hopper accumulators."""

    g = np.random.default_rng(7)
    ks = [64, 256, 1024, 4096] + ([16384] if size >= 1 else [])
    m = n = 8 if size >= 1 else 4
    fig, (ax,) = _new(width=8)
    res = {a: [] for a in ("exact", "fp32", "hopper-fast", "hopper")}
    for k in ks:
        a = g.uniform(0.0, 1.0, (m, k))  # same-sign inputs: the sum grows, as DeepSeek-V3 observed
        b = g.uniform(0.0, 1.0, (k, n))
        aq = analysis.quantize_values(a * 448 / a.max(), "e4m3fn")
        bq = analysis.quantize_values(b * 448 / b.max(), "e4m3fn")
        ref = aq @ bq
        ca, cb = encode(aq, "e4m3fn"), encode(bq, "e4m3fn")
        for acc in res:
            out = np.asarray(scaled_mm(ca, cb, a_format="e4m3fn", b_format="e4m3fn", accumulator=acc),
                             np.float64)
            res[acc].append(float(np.max(np.abs(out - ref) / np.abs(ref))))
    notes = {"exact": "exact (only the final float32 rounding)", "fp32": "fp32 (float32 running sum)",
             "hopper-fast": "hopper-fast (use_fast_accum=True)", "hopper": "hopper (use_fast_accum=False)"}
    for acc, v in res.items():
        ax.plot(ks, np.maximum(v, 1e-10), "o-", label=notes[acc])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    _label(ax, "inner dimension K", "max relative error vs exact sum (M=N=8)",
           "FP8 GEMM accumulation error vs K (e4m3fn x e4m3fn, positive inputs)")
    return fig


def _block_scaled_recipes():
    """(label, quantize A along K, quantize B along K) for the block-scaled GEMM comparison."""
    def mx(fmt):
        return (lambda a: scaling.quantize_mx(a, fmt), lambda b: scaling.quantize_mx(b, fmt, axis=0))
    return [
        ("MXFP8 (e4m3, E8M0 / 32)",) + mx("e4m3fn"),
        ("MXFP6 (e2m3, E8M0 / 32)",) + mx("e2m3fn"),
        ("MXFP4 (e2m1, E8M0 / 32)",) + mx("e2m1fn"),
        ("NVFP4 (e2m1, E4M3 / 16 + fp32)", lambda a: scaling.quantize_nvfp4(a),
         lambda b: scaling.quantize_nvfp4(b, axis=0)),
        ("NVFP4 + random Hadamard", lambda a: scaling.quantize_nvfp4(a, random_hadamard_transform=True),
         lambda b: scaling.quantize_nvfp4(b, axis=0, random_hadamard_transform=True)),
        ("NVFP4 Four Over Six (256)", lambda a: scaling.quantize_nvfp4(a, four_over_six=True, scale_max=256),
         lambda b: scaling.quantize_nvfp4(b, axis=0, four_over_six=True, scale_max=256)),
    ]


def figure_block_scaled_gemm(size=1.0):
    """Figure 10: block-scaled GEMM error vs the exact product on heavy-tailed data (MX, NVFP4, Hadamard)."""

    g = np.random.default_rng(10)
    ks = [128, 512, 2048] + ([8192] if size >= 1 else [])
    m, n = (32, 32) if size >= 1 else (8, 8)
    recipes = _block_scaled_recipes()
    err = {name: [] for name, _, _ in recipes}
    acc_gap = {name: [] for name, _, _ in recipes}
    for k in ks:
        # heavy-tailed activations (Student t, 3 dof) with outlier channels; Gaussian weights
        x = g.standard_t(3, (m, k))
        x[:, g.choice(k, max(1, k // 256), replace=False)] *= 30.0
        w = g.standard_normal((k, n)) / np.sqrt(k)
        ref = x @ w
        for name, qa, qb in recipes:
            a, b = qa(x), qb(w)
            out = np.asarray(block_scaled_mm(a, b, accumulator="exact"), np.float64)
            err[name].append(float(np.linalg.norm(out - ref) / np.linalg.norm(ref)))
            hw = np.asarray(block_scaled_mm(a, b, accumulator="blackwell"), np.float64)
            acc_gap[name].append(float(np.linalg.norm(hw - out) / np.linalg.norm(ref)))
    fig, (ax1, ax2) = _new(ncols=2, width=13)
    for i, (name, v) in enumerate(err.items()):
        ax1.plot(ks, v, "o-", color=f"C{i}", label=name)
        ax2.plot(ks, np.maximum(acc_gap[name], 1e-12), "o-", color=f"C{i}", label=name)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
    _label(ax1, "inner dimension K", "relative error vs exact float64 product",
           f"Block-scaled GEMM error, {m}x{n} output, t(3) inputs", fontsize=7)
    _label(ax2, "inner dimension K", "|blackwell - exact| / |exact product|",
           "Accumulator model: 'blackwell' vs 'exact'", fontsize=7)
    ax2.text(0.02, 0.97, "1e-12 = identical; 'blackwell': B200 FP8 widths from recordings,\n"
             "block scales per product (not recorded)", transform=ax2.transAxes, fontsize=7, va="top")
    return fig


def figure_training(size=1.0):
    """Figure 8: training loss curves, float32 vs emulated FP8 (HYBRID, delayed scaling)."""

    res = compare(steps=max(30, int(400 * size)), progress=False)
    fig, (ax1, ax2) = _new(ncols=2, width=12)
    for name, r in res.items():
        ax1.plot(r["loss"], lw=1, label=f"{name}: final loss {r['final_loss']:.3f}, acc {r['accuracy']:.3f}")
        ax2.plot(r["test_accuracy"][0], r["test_accuracy"][1], "o-", ms=3, label=name)
    ax1.set_yscale("log")
    _label(ax1, "step", "training cross-entropy loss (nats)",
           "MLP training: float32 vs FP8 (E4M3 fwd / E5M2 bwd, delayed scaling)")
    _label(ax2, "step", "held-out accuracy", "Held-out accuracy")
    return fig


def figure_conformance(size=1.0):
    """Figure 9: which recorded GPU float32 conversion paths depart from the OCP spec, and how.

    Bars are the exact share of all 2^32 float32 inputs that each path (reproduced bit-exactly by
    its profile) encodes differently from ``ocp`` (round to nearest even, non-saturating), split
    by kind of difference.
    """

    rows = [r for r in report() if r["kind"] == "cast" and r["source"] == "float32"]
    kinds = ["ocp_nan", "ocp_saturation", "ocp_rounding", "ocp_zero/sign", "ocp_e8m0"]
    labels = [f"{r['table']}  [{r['profile']}]" for r in rows]
    fig, (ax,) = _new(width=10, height=0.28 * len(rows) + 1.8)
    left = np.zeros(len(rows))
    for i, kind in enumerate(kinds):
        v = np.array([r.get(kind, 0) for r in rows], float) / 2.0 ** 32 * 100
        ax.barh(labels, v, left=left, label=kind.removeprefix("ocp_"), color=f"C{i}")
        left += v
    for y, (r, x) in enumerate(zip(rows, left)):
        ax.text(max(x, 1e-4) * 1.15, y, "= ocp" if r["differs_from_ocp"] == 0 else f"{x:.3g} %",
                va="center", fontsize=7)
    ax.set_xscale("log")
    ax.set_xlim(1e-4, 400)
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xlabel("float32 inputs encoded differently from the OCP spec (% of 2^32, log axis)")
    ax.set_title("Recorded H200 conversion paths vs OCP (RNE, non-saturating), by kind of difference")
    ax.legend(title="difference", loc="upper right")
    return fig


#: (label, accumulator, operand format) of the catalogue figure, one per architecture's preset.
_CATALOGUE_LINES = [
    ("exact (one rounding)", "exact", "e4m3fn"),
    ("fp32 running sum", "fp32", "e4m3fn"),
    ("Ada mma.sync (2 x 16, 13 bits, RZ)", "ada-mma", "e4m3fn"),
    ("Hopper wgmma / mma.sync (32, 13 bits, RZ)", "hopper-wgmma", "e4m3fn"),
    ("Hopper cuBLAS, FP32 promotion every 128", "hopper", "e4m3fn"),
    ("Blackwell mma.sync (recordings: 31 bits, RNE)", "blackwell-mma", "e4m3fn"),
    ("Blackwell tcgen05 f8f6f4 (MMA-Sim: 25 bits, RZ)", "blackwell-tcgen05-f8f6f4", "e4m3fn"),
    ("RTX Blackwell mma (MMA-Sim: 25 bits, RZ)", "rtx-blackwell-mma", "e4m3fn"),
    ("CDNA3 v_mfma fp8 (MMA-Sim: paired, 24/31 bits)", "cdna3-mfma-fp8", "e4m3fnuz"),
]


def figure_tensor_core_catalogue(size=1.0):
    """Figure 12: FP8 GEMM error against the exact product vs K for every architecture's preset.

    Same data for every line: positive uniform inputs scaled to 240 and rounded to E4M3 (each
    value is also an E4M3-FNUZ value, so CDNA3 sees the same numbers), M = N = 8; the error is
    the largest relative difference from the exact (float64) product of the rounded inputs.
    Each instruction preset is chained along K from C = 0, as an MMA kernel's K-loop does.
    """
    g = np.random.default_rng(0)
    ks = [256, 1024, 4096, 16384, 65536] if size >= 1 else [256, 1024]
    m = n = 8 if size >= 1 else 2
    fig, (ax,) = _new(width=9, height=5.5)
    res = {lab: [] for lab, _, _ in _CATALOGUE_LINES}
    for k in ks:
        a = analysis.quantize_values(g.uniform(0.0, 1.0, (m, k)) * 240, "e4m3fn")
        b = analysis.quantize_values(g.uniform(0.0, 1.0, (k, n)) * 240, "e4m3fn")
        ref = a @ b
        for lab, acc, fmt in _CATALOGUE_LINES:
            out = np.asarray(scaled_mm(encode(a, fmt), encode(b, fmt), a_format=fmt, b_format=fmt,
                                       accumulator=acc), np.float64)
            res[lab].append(float(np.max(np.abs(out - ref) / np.abs(ref))))
    for i, (lab, v) in enumerate(res.items()):
        ax.plot(ks, np.maximum(v, 1e-10), "o-" if i > 1 else "--", lw=1.2, ms=3, label=lab)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    _label(ax, "inner dimension K", "max relative error vs exact product (M=N=8)",
           "FP8 GEMM error vs K, every tensor-core preset on the same E4M3 data", fontsize=7)
    return fig


# ----------------------------------------------------------------------------- your own data
# One call each, same styling as the figures above; the numbers come from the sweeps of
# :mod:`fp8emu.lab.analysis` (and :func:`fp8emu.lab.attention.attention_error`), which take the
# same data and return the tables drawn.

def _formats_arg(formats):
    if isinstance(formats, str) or not formats:
        raise TypeError(f"formats must be a non-empty sequence of format names, e.g. ['e4m3fn'], got {formats!r}")
    return [str(f) for f in formats]


def figure_data_error_vs_range(data, *, checkpoint=None, formats=("e4m3fn", "e5m2"), recipe="tensor",
                               label="your data"):
    """Relative rounding error of your tensor, binade by binade, with its histogram of magnitudes.

    Parameters
    ----------
    data : array_like, framework tensor, or a tensor name with ``checkpoint``
        See :func:`fp8emu.lab.inputs.load_data`.
    checkpoint : str or Path, optional, keyword-only
    formats : sequence of str, keyword-only
    recipe : {"tensor", "none"}, keyword-only
        One scale per tensor (amax to the format's max), or the values as given (saturating).
    label : str, keyword-only
        Name of the data in the title.

    Returns
    -------
    matplotlib.figure.Figure
        Left: mean (solid) and max (dotted) relative error per binade of ``|x|``
        (:func:`fp8emu.lab.analysis.binade_errors`); right: elements per binade.

    Examples
    --------
    >>> x = np.random.default_rng(0).standard_normal(1000)
    >>> fig = figure_data_error_vs_range(x, formats=["e4m3fn"])
    >>> fig.axes[0].get_ylabel()
    'relative error |q(x) - x| / |x|'
    """
    x = load_data(data, checkpoint=checkpoint)
    fig, (ax, ax2) = _new(ncols=2, width=12)
    for i, f in enumerate(_formats_arg(formats)):
        t = analysis.binade_errors(x, f, recipe=recipe)
        ax.plot(t["exponent"], np.maximum(t["mean_rel_err"], 2.0 ** -30), "o-", ms=3, color=f"C{i}",
                label=f"{f} mean")
        ax.plot(t["exponent"], np.maximum(t["max_rel_err"], 2.0 ** -30), ":", color=f"C{i}", label=f"{f} max")
    ax.set_yscale("log", base=2)
    scaled = "one scale per tensor" if recipe == "tensor" else "unscaled, saturating"
    _label(ax, "binade e of |x|  (|x| in [2^e, 2^(e+1)))", "relative error |q(x) - x| / |x|",
           f"(a) relative error per binade ({scaled})", fontsize=7)
    exps, counts = np.unique(np.frexp(np.abs(x[x != 0]))[1] - 1, return_counts=True)
    ax2.bar(exps, counts, width=0.9, color="C7")
    ax2.set_xlim(ax.get_xlim())
    ax2.set_xlabel("binade e of |x|")
    ax2.set_ylabel("non-zero elements")
    ax2.set_title(f"(b) dynamic range: {x.size} elements, {int(np.count_nonzero(x == 0))} zeros")
    fig.suptitle(f"Rounding error vs magnitude: {label}")
    return fig


def figure_data_sqnr_vs_scale(data, *, checkpoint=None, formats=("e4m3fn", "e5m2", "e2m1fn", "bfloat16"),
                              scales=None, label="your data"):
    """SQNR of your tensor as a factor ``s`` multiplies it, unscaled vs one scale per tensor.

    ``s = 1`` (a vertical line) is the data as given.  Numbers: :func:`fp8emu.lab.analysis.sweep_scale`
    with ``distributions={label: data}``, saturating.

    Parameters
    ----------
    data, checkpoint
        As in :func:`figure_data_error_vs_range`.
    formats : sequence of str, keyword-only
    scales : sequence of float, optional, keyword-only
        Factors (default ``2^-16 .. 2^16``, one per binade).
    label : str, keyword-only

    Examples
    --------
    >>> fig = figure_data_sqnr_vs_scale([0.5, -1.0, 2.0], formats=["e4m3fn"], scales=[0.5, 1.0, 2.0])
    >>> len(fig.axes[0].lines)
    3
    """
    x = load_data(data, checkpoint=checkpoint)
    scales = np.logspace(-16, 16, 33, base=2) if scales is None else scales
    fmts = _formats_arg(formats)
    t = analysis.sweep_scale(fmts, {label: x}, scales, recipes=("none", "tensor"))
    fig, (ax,) = _new(width=8)
    for i, f in enumerate(fmts):
        for recipe, ls in (("none", "-"), ("tensor", "--")):
            r = t.where(format=f, recipe=recipe)
            ax.plot(r["scale"], np.minimum(r["sqnr_db"], 80), ls, marker="o", ms=3, color=f"C{i}", lw=1.3,
                    label=f"{f} {'unscaled' if recipe == 'none' else 'per-tensor scaled'}")
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("factor s multiplying the data (log2 axis; s = 1: as given)")
    ax.set_ylabel("SQNR (dB)")
    ax.set_title(f"SQNR vs scale, {label} (saturating)")
    handles, labels = ax.get_legend_handles_labels()
    fig.subplots_adjust(bottom=0.3)
    fig.legend(handles, labels, ncol=min(4, len(labels)), loc="lower center", bbox_to_anchor=(0.5, 0.0))
    return fig


def figure_data_granularity(data, *, checkpoint=None, fmt="e4m3fn", label="your data"):
    """SQNR of your tensor under scaling recipes of growing granularity (tensor, row, block, MX, NVFP4).

    Numbers: :func:`fp8emu.lab.analysis.granularity_sqnr` (an N-D tensor is taken as rows of its last axis).

    Examples
    --------
    >>> fig = figure_data_granularity(np.random.default_rng(0).standard_normal((8, 128)))
    >>> len(fig.axes[0].patches)
    10
    """
    x = load_data(data, checkpoint=checkpoint)
    return _granularity_bars(analysis.granularity_sqnr(x, fmt=fmt),
                             f"Scaling granularity vs SQNR: {label}, shape {tuple(x.shape)}")


def figure_data_gemm_error(a, b, *, checkpoint=None, accumulators=("exact", "fp32", "hopper-fast", "hopper"),
                           fmt="e4m3fn", ks=None, b_transposed=False, label="your operands"):
    """GEMM error of your operands vs K for accumulator presets (K prefixes of A and B).

    Numbers: :func:`fp8emu.lab.analysis.gemm_error_vs_k`.  Solid lines: the accumulator's
    error alone (against the float64 product of the quantized operands); dashed: the total
    error (against the float64 product of the operands as given).  ``b_transposed=True`` takes
    ``b`` as (N, K), a ``Linear`` weight as checkpoints store it.

    Examples
    --------
    >>> g = np.random.default_rng(0)
    >>> fig = figure_data_gemm_error(g.standard_normal((4, 128)), g.standard_normal((128, 4)),
    ...                              accumulators=["exact", "fp32"])
    >>> len(fig.axes[0].lines)
    4
    """
    t = analysis.gemm_error_vs_k(a, b, accumulators=accumulators, fmt=fmt, ks=ks, b_transposed=b_transposed,
                                 checkpoint=checkpoint)
    fig, (ax,) = _new(width=9, height=5.2)
    for i, acc in enumerate(dict.fromkeys(t["accumulator"])):
        r = t.where(accumulator=acc)
        ax.plot(r["k"], np.maximum(r["accumulation_error"], 1e-10), "o-", ms=4, color=f"C{i}",
                label=f"{acc}: accumulation")
        ax.plot(r["k"], np.maximum(r["total_error"], 1e-10), "--", color=f"C{i}", label=f"{acc}: total")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    _label(ax, "inner dimension K (first K columns of A, rows of B)", "||C - R|| / ||R||  (Frobenius)",
           f"{fmt} GEMM error vs K, {label} (1e-10: exact)", fontsize=8, loc="upper left",
           bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return fig


def figure_data_block_scaled_gemm(a, b, *, checkpoint=None, recipes=("mxfp8", "mxfp6", "mxfp4", "nvfp4"),
                                  accumulator="exact", ks=None, b_transposed=False, label="your operands"):
    """Block-scaled (MX, NVFP4) GEMM error of your operands vs K, one line per recipe.

    Numbers: :func:`fp8emu.lab.analysis.block_gemm_error_vs_k` (error against the float64
    product of the operands as given; K prefixes in multiples of 32).

    Examples
    --------
    >>> g = np.random.default_rng(0)
    >>> fig = figure_data_block_scaled_gemm(g.standard_normal((4, 64)), g.standard_normal((64, 4)),
    ...                                     recipes=["mxfp8", "nvfp4"])
    >>> [ln.get_label() for ln in fig.axes[0].lines]
    ['MXFP8 (e4m3, E8M0 / 32)', 'NVFP4 (e2m1, E4M3 / 16 + fp32)']
    """
    t = analysis.block_gemm_error_vs_k(a, b, recipes=recipes, accumulator=accumulator, ks=ks,
                                       b_transposed=b_transposed, checkpoint=checkpoint)
    fig, (ax,) = _new(width=8)
    for i, name in enumerate(dict.fromkeys(t["recipe"])):
        r = t.where(recipe=name)
        ax.plot(r["k"], r["error"], "o-", color=f"C{i}", label=analysis.BLOCK_GEMM_RECIPES[name][0])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    _label(ax, "inner dimension K (first K columns of A, rows of B)", "||C - R|| / ||R||  (R: float64 product)",
           f"Block-scaled GEMM error vs K, {label} ({accumulator} accumulator)", fontsize=8)
    return fig


#: name -> figure function.
FIGURES = {
    "fig1_values_per_binade": figure_values_per_binade,
    "fig2_relative_error": figure_relative_error,
    "fig3_sqnr_vs_scale": figure_sqnr_vs_scale,
    "fig4_rounding_bias": figure_rounding_bias,
    "fig5_delayed_scaling": figure_delayed_scaling,
    "fig6_granularity": figure_granularity,
    "fig7_gemm_accumulation": figure_gemm_accumulation,
    "fig8_training": figure_training,
    "fig9_conformance": figure_conformance,
    "fig10_block_scaled_gemm": figure_block_scaled_gemm,
    "fig11_attention": figure_attention,
    "fig12_tensor_core_catalogue": figure_tensor_core_catalogue,
}


def available_figures() -> list:
    """Names of the figures whose dependencies are installed.

    Examples
    --------
    >>> available_figures()[:2]
    ['fig1_values_per_binade', 'fig2_relative_error']
    """
    return list(FIGURES)


def save_figures(out, names=None, *, size=1.0, progress=False) -> list:
    """Render figures to ``out/NAME.png`` and return the paths written.

    Parameters
    ----------
    out : str or Path
        Output folder (created if missing).
    names : sequence of str, optional
        Figure names (keys of :data:`FIGURES`); default: :func:`available_figures`.
    size : float
        Work factor (1.0 for the committed figures).
    progress : bool
        Print one line per figure on stderr.
    """
    names = available_figures() if names is None else list(names)
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        raise ValueError(f"unknown figure {unknown[0]!r}; accepted: {', '.join(FIGURES)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, name in enumerate(names):
        if progress:
            print(f"[{i + 1}/{len(names)}] {name}", file=sys.stderr, flush=True)
        fig = FIGURES[name](size=size)
        path = out / f"{name}.png"
        # No software/date metadata, so the same figure gives the same bytes.
        fig.savefig(path, dpi=100, bbox_inches="tight", metadata={"Software": None})
        paths.append(path)
    return paths
