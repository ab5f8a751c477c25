"""The recipe matrix of a checkpoint study, and post-training scale calibration.

A :class:`Recipe` is a small named object: a name, an element format, a
description and a function that quantizes a 2-D float32 chunk of a tensor
given the tensor-wide parameters a first pass computed (the global amax
for per-tensor scales, a calibrated scale, NVFP4's global amax).  Every
recipe is built from the public quantizers of :mod:`fp8emu.scaling` and
:func:`fp8emu.encode`; an option the installed scaling module lacks (e.g.
NVFP4's 2-D weight blocks) is simply not offered.

Recipe families (see :func:`recipe_matrix` for every name):

* ``cast-FMT-PROFILE``: a plain cast, no scale, as a GPU or library casts
  (:func:`fp8emu.profile_names`);
* ``tensor-FMT``: per-tensor current scaling (Transformer Engine
  ``Float8CurrentScaling``);
* ``row-FMT``: one scale per row (row-wise ``torch._scaled_mm`` scales);
* ``block1x128-FMT`` and ``block128x128-FMT``: DeepSeek-V3 / Transformer
  Engine ``Float8BlockScaling`` (power-of-two scales);
* ``mx-FMT-RULE``: OCP MX, 32-element blocks, E8M0 scales, scale rule
  floor/ceil/even/rceil;
* ``nvfp4`` (1x16 blocks) and, where available, ``nvfp4-2d`` (16x16);
* ``nvfp4-rowscaled`` (Transformer Engine's row-scaled NVFP4: one global amax
  per row) and ``nvfp4-4over6-te`` (TE's Four Over Six: MAE selection, global
  E4M3 bound 256), bit-exact with TE (:func:`fp8emu.scaling.quantize_nvfp4_te`);
* ``calib-METHOD-FMT``: one per-tensor scale ``fmt.max / T`` with the
  clipping threshold ``T`` calibrated as inference toolkits do
  (:func:`calibrate`): ``amax``, ``p99.9``, ``p99.99``, ``mse``, ``kl``.

Calibration works on a histogram of ``|x|`` (:data:`fp8emu.metrics.CALIB_BINS`
equal bins over ``[0, amax]``, as TensorRT's and TensorRT Model Optimizer's
histogram calibrators), so it needs one extra pass over a tensor and never
holds it whole.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import inspect
import math
from typing import Callable

import numpy as np

from ..codec import decode, encode
from ..metrics import CALIB_BINS
from ..profiles import UndecidedVersionError, get_profile, profile_names
from ..scaling import (
    MX_ELEMENT_FORMATS, MX_SCALE_RULES, ScaledTensor, current_scale, quantize_axiswise,
    quantize_blockwise, quantize_mx, quantize_nvfp4, quantize_tensorwise,
)
from ..scaling.nvfp4_te import NVFP4Quantizer, quantize_nvfp4_te
from ..scaling.tensor import expand, scale_times

__all__ = [
    "Recipe", "Quantized", "recipe_matrix", "recipe_names", "select_recipes", "DEFAULT_RECIPES",
    "CALIBRATION_METHODS", "calibrate", "tensor_params", "threshold",
]

_F32 = np.float32

#: Calibration methods of :func:`calibrate` (percentiles written ``pNN.NN``).
CALIBRATION_METHODS = ("amax", "p99.9", "p99.99", "mse", "kl")

#: Candidate thresholds of the MSE and KL searches: bin edges from this bin on ...
_SEARCH_START = 128
#: ... every this many bins (TensorRT steps by 1; 4 keeps a 2048-bin search to ~480 candidates).
_SEARCH_STRIDE = 4

#: The recipes a study runs when none are named.
DEFAULT_RECIPES = (
    "cast-e4m3fn-ocp", "cast-e4m3fn-cuda-satfinite", "cast-e5m2-ocp",
    "tensor-e4m3fn", "tensor-e5m2", "row-e4m3fn", "block1x128-e4m3fn", "block128x128-e4m3fn",
    "mx-e4m3fn-floor", "mx-e4m3fn-rceil", "mx-e5m2-floor", "mx-e2m3fn-floor", "mx-e3m2fn-floor",
    "mx-e2m1fn-floor", "nvfp4", "nvfp4-2d",
    "calib-amax-e4m3fn", "calib-p99.9-e4m3fn", "calib-p99.99-e4m3fn", "calib-mse-e4m3fn",
    "calib-kl-e4m3fn",
)


@dataclasses.dataclass(frozen=True)
class Quantized:
    """One chunk under one recipe.

    Attributes
    ----------
    y : numpy.ndarray of float32
        The values handed to the cast (``x`` times the scale).
    codes : numpy.ndarray of uint8
    q : numpy.ndarray of float32
        The dequantized values.
    """

    y: np.ndarray
    codes: np.ndarray
    q: np.ndarray


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A named quantization recipe of a study.

    Attributes
    ----------
    name : str
    fmt : str
        Element format.
    description : str
    quantize : callable
        ``quantize(x, params) -> ScaledTensor or numpy.ndarray of codes``:
        ``x`` a 2-D float32 chunk of whole rows, ``params`` the dict of
        :func:`tensor_params`.  A bare code array means a plain cast.
    needs_histogram : bool
        Whether ``params`` needs the calibration histogram.
    row_multiple : int
        Chunks must hold a multiple of this many rows (block height).
    calibration : str or None
        The :func:`calibrate` method of a ``calib-*`` recipe.

    Examples
    --------
    >>> import numpy as np
    >>> r = recipe_matrix()["tensor-e4m3fn"]
    >>> x = np.array([[1.0, -2.0]], np.float32)
    >>> r.apply(x, tensor_params(2.0, 0, None)).q.tolist()
    [[1.0, -2.0]]
    """

    name: str
    fmt: str
    description: str
    quantize: Callable
    needs_histogram: bool = False
    row_multiple: int = 1
    calibration: str | None = None

    def apply(self, x, params) -> Quantized:
        """Quantize a 2-D float32 chunk; returns the scaled input, codes and dequantized values."""
        out = self.quantize(x, params)
        if isinstance(out, ScaledTensor):
            y = _scaled_input(x, out)
            return Quantized(y=y, codes=out.codes, q=out.dequantize(np.float32))
        return Quantized(y=x, codes=out, q=decode(out, self.fmt, dtype=np.float32))


def _scaled_input(x, st: ScaledTensor) -> np.ndarray:
    """fl32(x * scale) with the scale repeated over its block, as the quantizers compute it."""
    return scale_times(x, expand(st.scale, st.block, x.shape) if st.block else st.scale)


# --------------------------------------------------------------------------- calibration

def _check_hist(hist, amax):
    h = np.asarray(hist)
    if h.shape != (CALIB_BINS,):
        raise ValueError(f"calibration histogram must have {CALIB_BINS} bins, got shape {h.shape}")
    if not (math.isfinite(amax) and amax >= 0):
        raise ValueError(f"amax must be finite and >= 0, got {amax!r}")
    return h.astype(np.float64)


def _candidates(amax):
    """Candidate thresholds (bin edges) of the MSE and KL searches and their bin counts."""
    stop = np.arange(_SEARCH_START, CALIB_BINS + 1, _SEARCH_STRIDE)
    if stop[-1] != CALIB_BINS:
        stop = np.append(stop, CALIB_BINS)
    return stop, stop * (amax / CALIB_BINS)


def _fake_quant(values, thresholds, fmt):
    """Values (float32, 1-D) quantized with scale current_scale(T) for each T: (len(T), len(values))."""
    scales = np.array([current_scale(_F32(t), fmt) for t in thresholds], dtype=np.float32)[:, None]
    with np.errstate(over="ignore"):
        y = np.multiply(values[None, :], scales, dtype=np.float32)
    codes = encode(y, fmt, saturate=True)
    inv = (_F32(1) / scales).astype(np.float32)
    return codes, np.multiply(decode(codes, fmt, dtype=np.float32), inv, dtype=np.float32)


def calibrate(hist, amax, fmt, method) -> float:
    """Clipping threshold ``T`` of a per-tensor scale ``fmt.max / T``, from a histogram of ``|x|``.

    ``hist`` has :data:`~fp8emu.metrics.CALIB_BINS` equal bins over ``[0, amax]``
    (:func:`fp8emu.metrics.calibration_histogram`); bin ``i`` has centre
    ``c_i = (i + 1/2) amax / 2048``.

    * ``"amax"``: ``T = amax`` (max calibration: nothing clips).
    * ``"pP"`` (e.g. ``"p99.9"``, ``"p99.99"``): the upper edge of the first
      bin where the cumulative fraction reaches ``P`` percent (TensorRT
      Model Optimizer's percentile calibrator, on the same histogram).
    * ``"mse"``: the candidate ``T`` minimising the histogram-weighted squared
      error ``sum_i hist_i (Q_T(c_i) - c_i)^2`` of the bin centres quantized
      exactly as the recipe will (scale ``current_scale(T)``, saturating RNE
      cast); candidates are the bin edges from bin 128 on, every 4 bins
      (Model Optimizer's MSE calibrator, which steps by 1).
    * ``"kl"``: TensorRT's entropy calibration adapted to a float grid: for
      each candidate edge ``i`` (as for ``"mse"``), ``P`` is ``hist[:i]`` with
      the clipped mass ``sum hist[i:]`` added to its last bin; ``Q`` merges the
      bins of ``P`` whose centres quantize to the same code at that ``T``
      (TensorRT merges into 128 uniform INT8 levels instead) and spreads each
      merged mass evenly over the non-empty bins of ``P``; ``T`` minimises
      ``KL(P || Q)``.

    Ties in the MSE and KL searches go to the largest threshold (least clipping).

    Returns 0 for an all-zero histogram (the recipe then uses scale 1).

    Parameters
    ----------
    hist : array_like of int, shape (2048,)
    amax : float
        Largest finite ``|x|`` (the histogram's upper edge).
    fmt : str or Format
    method : str
        ``"amax"``, ``"mse"``, ``"kl"`` or ``"pP"`` with ``0 < P <= 100``.

    Examples
    --------
    >>> import numpy as np
    >>> from fp8emu.metrics import calibration_histogram
    >>> x = np.concatenate([np.linspace(-1, 1, 9999), [50.0]]).astype(np.float32)
    >>> h = calibration_histogram(x, 50.0)
    >>> calibrate(h, 50.0, "e4m3fn", "amax"), calibrate(h, 50.0, "e4m3fn", "p99.9")
    (50.0, 1.0009765625)
    """
    h = _check_hist(hist, amax)
    total = h.sum()
    if total == 0 or amax == 0:
        return 0.0
    width = amax / CALIB_BINS
    if method == "amax":
        return float(amax)
    if isinstance(method, str) and method.startswith("p"):
        try:
            pct = float(method[1:])
        except ValueError:
            pct = math.nan
        if not 0 < pct <= 100:
            raise ValueError(f"percentile method must be 'pP' with 0 < P <= 100, got {method!r}")
        cdf = np.cumsum(h) / total
        idx = int(np.searchsorted(cdf, pct / 100.0 - 1e-12))
        return float(min(idx + 1, CALIB_BINS) * width)
    if method not in ("mse", "kl"):
        raise ValueError(f"unknown calibration method {method!r}; accepted: "
                         + ", ".join(CALIBRATION_METHODS) + " or pP")
    stops, thresholds = _candidates(amax)
    centres = ((np.arange(CALIB_BINS) + 0.5) * width).astype(np.float32)
    # Candidates in groups bound the (candidates x bins) temporaries to a few MB.
    loss = np.concatenate([_search_loss(method, h, total, centres, stops[i:i + 64], thresholds[i:i + 64], fmt)
                           for i in range(0, stops.size, 64)])
    return _best(thresholds, loss)


def _search_loss(method, h, total, centres, stops, thresholds, fmt):
    codes, q = _fake_quant(centres, thresholds, fmt)
    if method == "mse":
        return ((q.astype(np.float64) - centres.astype(np.float64)) ** 2) @ h
    # KL: row r keeps bins [0, stops[r]) and folds the clipped mass into its last bin.
    cols = np.arange(CALIB_BINS)
    keep = cols[None, :] < stops[:, None]
    p = np.where(keep, h[None, :], 0.0)
    clipped = total - p.sum(axis=1)
    p[np.arange(stops.size), stops - 1] += clipped
    nonzero = p > 0
    rows = np.arange(stops.size)[:, None] * 256 + codes.astype(np.int64)
    mass = np.bincount(rows.ravel(), weights=p.ravel(), minlength=stops.size * 256)
    count = np.bincount(rows.ravel(), weights=nonzero.ravel().astype(np.float64),
                        minlength=stops.size * 256)
    with np.errstate(divide="ignore", invalid="ignore"):
        qd = np.where(nonzero, mass[rows] / count[rows], 0.0)
        pn = p / p.sum(axis=1, keepdims=True)
        qn = qd / qd.sum(axis=1, keepdims=True)
        return np.sum(np.where(nonzero, pn * np.log(pn / qn), 0.0), axis=1)


def _best(thresholds, loss):
    """The largest threshold among the minimal losses (ties: clip least; a constant tensor has KL 0 everywhere)."""
    lo = loss.min()
    best = np.flatnonzero(loss <= lo + 1e-12 * max(abs(lo), 1e-300))[-1]
    return float(thresholds[best])


def tensor_params(amax, n_inf, hist, *, amax_with_inf=None) -> dict:
    """Tensor-wide parameters the recipes need, from the first pass over a tensor.

    Parameters
    ----------
    amax : float
        Largest finite ``|x|``.
    n_inf : int
        Number of infinite elements (an Inf makes the per-tensor amax Inf, as
        in Transformer Engine, so the scale is 1).
    hist : numpy.ndarray or None
        Calibration histogram (needed by ``calib-*`` recipes).

    Returns
    -------
    dict
        ``amax`` (NaN-ignoring, Inf-including, as the scaling recipes
        reduce), ``amax_finite``, ``hist`` and a cache of calibrated
        thresholds.

    Examples
    --------
    >>> tensor_params(3.0, 1, None)["amax"]
    inf
    """
    return {"amax": math.inf if n_inf else float(amax), "amax_finite": float(amax), "hist": hist,
            "thresholds": {}}


# --------------------------------------------------------------------------- the matrix

def _cast(fmt, profile):
    def q(x, params):
        return encode(x, fmt, profile=profile)
    return q


def _tensor(fmt):
    def q(x, params):
        return quantize_tensorwise(x, fmt, scale=current_scale(_F32(params["amax"]), fmt))
    return q


def _row(fmt):
    def q(x, params):
        return quantize_axiswise(x, fmt, axis=-1)
    return q


def _block(fmt, block):
    def q(x, params):
        return quantize_blockwise(x, fmt, block=block)
    return q


def _mx(fmt, rule):
    def q(x, params):
        return quantize_mx(x, fmt, block=32, axis=-1, scale_rule=rule)
    return q


def _nvfp4(extra):
    def q(x, params):
        return quantize_nvfp4(x, axis=-1, global_amax=params["amax"], **extra)
    return q


def _nvfp4_te(quantizer, per_tensor_amax):
    def q(x, params):
        amax = params["amax"] if per_tensor_amax else None     # row-scaled: each row's own amax
        return quantize_nvfp4_te(x, quantizer, axis=-1, global_amax=amax)
    return q


def _calib(fmt, method):
    def q(x, params):
        t = threshold(params, fmt, method)
        return quantize_tensorwise(x, fmt, scale=current_scale(_F32(t), fmt))
    return q


def threshold(params, fmt, method) -> float:
    """The calibrated threshold of ``(fmt, method)`` for a tensor, computed once per ``params``.

    Examples
    --------
    >>> import numpy as np
    >>> from fp8emu.metrics import calibration_histogram
    >>> p = tensor_params(2.0, 0, calibration_histogram(np.array([1.0, 2.0], np.float32), 2.0))
    >>> threshold(p, "e4m3fn", "amax")
    2.0
    """
    key = f"{method}/{fmt}"
    if key not in params["thresholds"]:
        if params.get("hist") is None:
            raise ValueError(f"calibration {method!r} needs the histogram of the tensor")
        params["thresholds"][key] = calibrate(params["hist"], params["amax_finite"], fmt, method)
    return params["thresholds"][key]


def _nvfp4_2d_option():
    """Keyword arguments of quantize_nvfp4 for 16x16 weight blocks, or None if it has no such option."""
    sig = inspect.signature(quantize_nvfp4).parameters
    if "block" in sig:
        return {"block": (16, 16)}
    for name in ("weight_2d", "two_d", "block_2d", "blocks_2d"):
        if name in sig:
            return {name: True}
    return None


_CAST_FORMATS = ("e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz")
_SCALED_FORMATS = ("e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz", "e2m3fn", "e3m2fn", "e2m1fn")


def recipe_matrix() -> dict:
    """Every recipe a study can run, by name.

    Examples
    --------
    >>> m = recipe_matrix()
    >>> m["mx-e2m1fn-floor"].fmt, m["block128x128-e4m3fn"].row_multiple
    ('e2m1fn', 128)
    >>> "cast-e5m2-triton-rtz" in m, "cast-e4m3fn-triton-rtz" in m
    (True, False)
    """
    out = {}

    def add(r):
        out[r.name] = r

    for prof in profile_names():
        try:
            rules = get_profile(prof).rules
        except UndecidedVersionError:     # "torch-cuda" without torch: its variants are listed by name
            continue
        covered = None if not rules else {getattr(k, "name", k) for k in rules}
        for fmt in _CAST_FORMATS:
            if covered is not None and fmt not in covered:
                continue
            add(Recipe(f"cast-{fmt}-{prof}", fmt, f"plain cast to {fmt}, no scale, as {prof} casts",
                       _cast(fmt, prof)))
    for fmt in _SCALED_FORMATS:
        add(Recipe(f"tensor-{fmt}", fmt, f"per-tensor current scaling (amax -> {fmt} max)", _tensor(fmt)))
        add(Recipe(f"row-{fmt}", fmt, "one current scale per row", _row(fmt)))
        add(Recipe(f"block1x128-{fmt}", fmt, "1x128 blocks, power-of-two scales (DeepSeek-V3)",
                   _block(fmt, (1, 128))))
        add(Recipe(f"block128x128-{fmt}", fmt, "128x128 blocks, power-of-two scales (DeepSeek-V3 weights)",
                   _block(fmt, (128, 128)), row_multiple=128))
    for fmt in MX_ELEMENT_FORMATS:
        for rule in MX_SCALE_RULES:
            add(Recipe(f"mx-{fmt}-{rule}", fmt, f"OCP MX: 32-element blocks of {fmt}, E8M0 scale ({rule})",
                       _mx(fmt, rule)))
    add(Recipe("nvfp4", "e2m1fn", "NVFP4: 1x16 blocks, E4M3 block scales, float32 tensor scale", _nvfp4({})))
    two_d = _nvfp4_2d_option()
    if two_d is not None:
        add(Recipe("nvfp4-2d", "e2m1fn", "NVFP4 with 16x16 weight blocks", _nvfp4(two_d), row_multiple=16))
    add(Recipe("nvfp4-rowscaled", "e2m1fn", "NVFP4 with one global amax per row (TE row_scaled_nvfp4)",
               _nvfp4_te(NVFP4Quantizer(row_scaled_nvfp4=True), False)))
    add(Recipe("nvfp4-4over6-te", "e2m1fn", "NVFP4 Four Over Six as Transformer Engine: MAE, E4M3 bound 256",
               _nvfp4_te(NVFP4Quantizer(nvfp4_use_4over6=True, nvfp4_e4m3_max=256), True)))
    for fmt in _SCALED_FORMATS:
        for method in CALIBRATION_METHODS:
            add(Recipe(f"calib-{method}-{fmt}", fmt,
                       f"per-tensor scale, threshold calibrated by {method} on a |x| histogram",
                       _calib(fmt, method), needs_histogram=True, calibration=method))
    return out


def recipe_names() -> list:
    """Names of every available recipe (see :func:`recipe_matrix`).

    Examples
    --------
    >>> "calib-kl-e4m3fn" in recipe_names()
    True
    """
    return list(recipe_matrix())


def select_recipes(patterns=None) -> list:
    """Recipes by name or glob, in matrix order; ``None`` gives :data:`DEFAULT_RECIPES`.

    ``"all"`` selects every recipe.  A pattern that matches nothing is an
    error naming the available recipes, and so is an empty selection.

    Examples
    --------
    >>> [r.name for r in select_recipes(["mx-e4m3fn-*"])]
    ['mx-e4m3fn-floor', 'mx-e4m3fn-ceil', 'mx-e4m3fn-even', 'mx-e4m3fn-rceil']
    """
    matrix = recipe_matrix()
    if patterns is None:
        return [matrix[n] for n in DEFAULT_RECIPES if n in matrix]
    if isinstance(patterns, str):
        patterns = [p for p in patterns.split(",") if p]
    if not patterns:   # '' or []: a study of nothing would write an empty results.csv and say ok
        raise ValueError("no recipe named (an empty selection); give recipe names or globs, 'all', or "
                         "None for the default selection")
    chosen = set()
    for pat in patterns:
        if pat == "all":
            chosen.update(matrix)
            continue
        hits = [n for n in matrix if fnmatch.fnmatchcase(n, pat)]
        if not hits:
            raise ValueError(f"no recipe matches {pat!r}; available: {', '.join(matrix)}")
        chosen.update(hits)
    return [r for n, r in matrix.items() if n in chosen]
