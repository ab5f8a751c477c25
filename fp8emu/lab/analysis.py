"""Error analysis: metrics and seeded sweeps of quantization error.

Metrics compare an exact reference ``x`` with its quantized version ``q``
(absolute, relative, in ULPs of the target format, MSE, SQNR in dB and the
mean error, i.e. the bias).  Sweeps measure those metrics over input scale
(the dynamic range), distributions, formats, rounding modes and scaling
recipes, and return a :class:`Table` that plots and notebooks share.

Everything is vectorised and seeded: the same arguments give the same numbers.

Examples
--------
>>> import numpy as np
>>> m = error_metrics(np.array([1.0, 2.0]), np.array([1.0, 2.5]))
>>> float(m["mse"]), float(m["bias"])
(0.125, 0.25)
>>> t = sweep_scale(["e4m3fn"], ["gaussian"], [1.0], n=1000, seed=0)
>>> t.columns
('format', 'distribution', 'rounding', 'recipe', 'scale', 'sqnr_db', 'mse', 'bias', 'rel_err', 'overflow', 'underflow')
>>> bool(25 < t["sqnr_db"][0] < 35)
True
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .. import scaling
from ..codec import decode, encode
from ..formats import get_format
from ..gemm import block_scaled_mm, scaled_mm
from ..tables import SOURCE_DTYPES
from .inputs import load_data

__all__ = [
    "DISTRIBUTIONS", "RECIPES", "Table", "sample", "quantize_values", "ulp", "error_metrics",
    "sqnr_db", "values_per_binade", "relative_error_curve", "sweep_scale", "rounding_bias",
    "stochastic_variance", "overflow_threshold", "overflow_mask", "binade_errors", "granularity_sqnr",
    "GRANULARITY_RECIPES", "gemm_error_vs_k", "BLOCK_GEMM_RECIPES", "block_gemm_error_vs_k",
]

#: Distributions understood by :func:`sample` (all with unit-order spread before scaling).
DISTRIBUTIONS = ("gaussian", "laplace", "student_t", "lognormal", "uniform", "outliers")
#: Scaling recipes of :func:`sweep_scale`: none, or one per-tensor scale mapping amax to the format's max.
RECIPES = ("none", "tensor")
# Wide types not in the narrow-format registry, reached through ml_dtypes/NumPy casts from float32.
_WIDE = {n: SOURCE_DTYPES[n] for n in ("bfloat16", "float16")}


class Table:
    """A small column table: named, equal-length NumPy columns.

    Parameters
    ----------
    columns : dict of str to array-like
        Column name to values; all columns must have the same length.

    Examples
    --------
    >>> t = Table({"a": [1, 2, 3], "b": ["x", "y", "x"]})
    >>> len(t), t["a"].tolist()
    (3, [1, 2, 3])
    >>> t.where(b="x")["a"].tolist()
    [1, 3]
    >>> print(t.where(a=2))
    a | b
    2 | y
    """

    def __init__(self, columns):
        if not isinstance(columns, dict) or not columns:
            raise TypeError("Table needs a non-empty dict of column name -> values")
        self._cols = {str(k): np.asarray(v) for k, v in columns.items()}
        lengths = {len(v) for v in self._cols.values()}
        if len(lengths) != 1:
            raise ValueError(f"Table columns must have equal lengths, got {sorted(lengths)}")

    @property
    def columns(self) -> tuple:
        """Column names, in order."""
        return tuple(self._cols)

    def __len__(self) -> int:
        return len(next(iter(self._cols.values())))

    def __getitem__(self, name) -> np.ndarray:
        if name not in self._cols:
            raise KeyError(f"no column {name!r}; columns are {', '.join(self._cols)}")
        return self._cols[name]

    def where(self, **equal) -> "Table":
        """Rows whose columns equal the given values (``t.where(format="e5m2")``)."""
        keep = np.ones(len(self), bool)
        for k, v in equal.items():
            keep &= self[k] == v
        return Table({k: c[keep] for k, c in self._cols.items()})

    def rows(self) -> list:
        """The rows as a list of dicts of Python scalars."""
        return [{k: c[i].item() for k, c in self._cols.items()} for i in range(len(self))]

    def __str__(self) -> str:
        def fmt(v):
            return f"{v:.4g}" if isinstance(v, float) else str(v)
        lines = [" | ".join(self.columns)]
        lines += [" | ".join(fmt(v) for v in r.values()) for r in self.rows()]
        return "\n".join(lines)

    __repr__ = __str__


def sample(dist: str, n: int, rng=0) -> np.ndarray:
    """Draw ``n`` float64 samples of a named distribution.

    Parameters
    ----------
    dist : str
        One of :data:`DISTRIBUTIONS`: ``gaussian`` (standard normal), ``laplace`` (scale 1),
        ``student_t`` (ν = 3), ``lognormal`` (σ = 1, random sign), ``uniform`` (on [-1, 1]) or
        ``outliers`` (standard normal with 0.1 % of entries multiplied by 1000).
    n : int
        Number of samples.
    rng : int or numpy.random.Generator
        Seed or generator.

    Returns
    -------
    numpy.ndarray
        float64 samples.

    Examples
    --------
    >>> x = sample("uniform", 1000, rng=1)
    >>> bool(np.all(np.abs(x) <= 1)), x.dtype
    (True, dtype('float64'))
    """
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    g = np.random.default_rng(rng)
    if dist == "gaussian":
        return g.standard_normal(n)
    if dist == "laplace":
        return g.laplace(size=n)
    if dist == "student_t":
        return g.standard_t(3, size=n)
    if dist == "lognormal":
        return g.lognormal(0.0, 1.0, n) * g.choice([-1.0, 1.0], n)
    if dist == "uniform":
        return g.uniform(-1.0, 1.0, n)
    if dist == "outliers":
        x = g.standard_normal(n)
        return np.where(g.random(n) < 1e-3, x * 1000.0, x)
    raise ValueError(f"unknown distribution {dist!r}; accepted: {', '.join(DISTRIBUTIONS)}")


def quantize_values(x, fmt, **encode_options) -> np.ndarray:
    """Quantize ``x`` (float64) to a narrow format or to ``bfloat16``/``float16``; float64 result.

    Narrow formats go through :func:`fp8emu.encode` (rounded once); the wide names are
    NumPy/ml_dtypes round-to-nearest-even casts from float32.

    Examples
    --------
    >>> quantize_values([1.0625, 300.0], "e4m3fn").tolist()
    [1.0, 288.0]
    >>> quantize_values([1.00390625], "bfloat16").tolist()
    [1.0]
    """
    x = np.asarray(x, np.float64)
    if isinstance(fmt, str) and fmt in _WIDE:
        return x.astype(np.float32).astype(_WIDE[fmt]).astype(np.float64)
    return decode(encode(x, fmt, **encode_options), fmt, dtype=np.float64)


def _precision(fmt):
    """(mantissa bits, min normal, min subnormal) of a narrow or wide format."""
    if isinstance(fmt, str) and fmt in _WIDE:
        fi = ml_dtypes.finfo(_WIDE[fmt])
        return int(fi.nmant), float(fi.smallest_normal), float(fi.smallest_subnormal)
    f = get_format(fmt)
    return f.mbits, f.min_normal, f.min_subnormal


def ulp(x, fmt) -> np.ndarray:
    """Unit in the last place of ``fmt`` at each magnitude ``|x|`` (spacing of the binade).

    Examples
    --------
    >>> ulp([1.0, 1.9, 448.0, 0.001], "e4m3fn").tolist()
    [0.125, 0.125, 32.0, 0.001953125]
    """
    mbits, min_normal, min_sub = _precision(fmt)
    a = np.abs(np.asarray(x, np.float64))
    _, e = np.frexp(np.maximum(a, min_normal))
    return np.ldexp(1.0, e - 1 - mbits)


def overflow_threshold(fmt, rounding="rne") -> tuple[float, bool]:
    """Where rounding to ``fmt`` overflows: ``(h, tie_overflows)``.

    A magnitude above ``h`` rounds beyond ``fmt.max`` (to Inf/NaN, or clamped to max when
    saturating); exactly ``h`` does so only when ``tie_overflows``.  ``h`` is the midpoint
    between max and the next value of the format's binade grid: 464 for e4m3fn, whose
    tie rounds to the even code 0x7E (448), so nothing up to 464 overflows.

    Parameters
    ----------
    fmt : str or Format
    rounding : {"rne", "rna"}
        The round-to-nearest modes (the casts of the scaling recipes).

    Examples
    --------
    >>> overflow_threshold("e4m3fn"), overflow_threshold("e5m2")
    ((464.0, False), (61440.0, True))
    """
    f = get_format(fmt)
    if rounding not in ("rne", "rna"):
        raise ValueError(f"overflow_threshold supports rounding 'rne' or 'rna', got {rounding!r}")
    _, e = np.frexp(f.max)
    half_ulp = float(np.ldexp(1.0, int(e) - 2 - f.mbits))
    # ties to even: the code after max_code would be the even one iff max_code is odd
    # (with no mantissa bits and significand parity every significand is odd: ties go up)
    odd_next = (f.parity == "significand" and f.mbits == 0) or f.max_code % 2 == 1
    return f.max + half_ulp, bool(rounding == "rna" or odd_next)


def overflow_mask(y, fmt, rounding="rne") -> np.ndarray:
    """Elements of ``y`` (finite ones) that round beyond ``fmt.max`` under ``rounding``.

    Examples
    --------
    >>> overflow_mask([448.0, 464.0, 464.5, -500.0, float("inf")], "e4m3fn").tolist()
    [False, False, True, True, False]
    """
    h, tie = overflow_threshold(fmt, rounding)
    a = np.abs(np.asarray(y, np.float64))
    return (a > h) & np.isfinite(a) | ((a == h) & tie)


def sqnr_db(x, q) -> float:
    """Signal-to-quantization-noise ratio ``10 log10(sum x² / sum (q - x)²)`` in dB (inf if exact).

    Examples
    --------
    >>> round(sqnr_db([1.0, -1.0], [1.1, -1.1]), 6)
    20.0
    """
    x = np.asarray(x, np.float64)
    q = np.asarray(q, np.float64)
    noise = np.sum((q - x) ** 2)
    signal = np.sum(x ** 2)
    with np.errstate(divide="ignore"):
        return float(10 * np.log10(signal / noise)) if noise > 0 else float("inf")


def error_metrics(x, q, fmt=None) -> dict:
    """Error metrics of ``q`` as an approximation of ``x``.

    Parameters
    ----------
    x, q : array-like
        Reference values and their quantized versions (same shape).  Non-finite ``q``
        (overflow to Inf/NaN) are excluded from the error averages and counted in ``nonfinite``.
    fmt : str or Format, optional
        When given, ``ulp_err`` (max ``|q - x|`` in ULPs of ``fmt`` at ``x``) is included.

    Returns
    -------
    dict
        ``abs_err`` (max), ``mean_abs_err``, ``rel_err`` (mean ``|q - x| / |x|`` over ``x != 0``),
        ``max_rel_err``, ``mse``, ``sqnr_db``, ``bias`` (mean q - x), ``nonfinite``
        and optionally ``ulp_err``.

    Examples
    --------
    >>> m = error_metrics([1.0, 3.0], [1.0, 2.0], fmt="e4m3fn")
    >>> float(m["abs_err"]), float(m["rel_err"]), float(m["ulp_err"])
    (1.0, 0.16666666666666666, 4.0)
    """
    x = np.asarray(x, np.float64)
    q = np.asarray(q, np.float64)
    if x.shape != q.shape:
        raise ValueError(f"x and q must have the same shape, got {x.shape} and {q.shape}")
    ok = np.isfinite(q)
    xo, qo = x[ok], q[ok]
    err = qo - xo
    nz = xo != 0
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.abs(err[nz]) / np.abs(xo[nz])
    out = {
        "abs_err": float(np.max(np.abs(err))) if err.size else 0.0,
        "mean_abs_err": float(np.mean(np.abs(err))) if err.size else 0.0,
        "rel_err": float(np.mean(rel)) if rel.size else 0.0,
        "max_rel_err": float(np.max(rel)) if rel.size else 0.0,
        "mse": float(np.mean(err ** 2)) if err.size else 0.0,
        "sqnr_db": sqnr_db(xo, qo),
        "bias": float(np.mean(err)) if err.size else 0.0,
        "nonfinite": int(np.count_nonzero(~ok)),
    }
    if fmt is not None:
        out["ulp_err"] = float(np.max(np.abs(err) / ulp(xo, fmt))) if err.size else 0.0
    return out


def values_per_binade(fmt):
    """Number of positive finite values of ``fmt`` in each binade ``[2**e, 2**(e+1))``.

    Returns
    -------
    (exponents, counts) : tuple of int arrays

    Examples
    --------
    >>> e, c = values_per_binade("e2m1fn")     # 0.5 | 1, 1.5 | 2, 3 | 4, 6
    >>> e.tolist(), c.tolist()
    ([-1, 0, 1, 2], [1, 2, 2, 2])
    """
    f = get_format(fmt)
    v = f.values()
    v = np.unique(v[np.isfinite(v) & (v > 0)])
    _, e = np.frexp(v)
    exps, counts = np.unique(e - 1, return_counts=True)
    return exps.astype(int), counts.astype(int)


def relative_error_curve(fmt, lo=None, hi=None, n=4001, rounding="rne"):
    """Relative error ``|q(x) - x| / |x|`` on a log-spaced grid (the saw-tooth).

    Parameters
    ----------
    fmt : str or Format
        Narrow format, or ``"bfloat16"`` / ``"float16"``.
    lo, hi : float, optional
        Grid range; defaults to [min subnormal, max] of the format (clipped to [2^-20, 2^20]
        for the wide types).
    n : int
        Grid points.

    Returns
    -------
    (x, rel) : tuple of float64 arrays

    Examples
    --------
    >>> x, r = relative_error_curve("e4m3fn", 1.0, 2.0, n=5)
    >>> bool(r.max() <= 2.0 ** -4)
    True
    """
    if isinstance(fmt, str) and fmt in _WIDE:
        fi = ml_dtypes.finfo(_WIDE[fmt])
        lo = 2.0 ** -20 if lo is None else lo
        hi = min(float(fi.max), 2.0 ** 20) if hi is None else hi
    else:
        f = get_format(fmt)
        lo = f.min_subnormal if lo is None else lo
        hi = f.max if hi is None else hi
    x = np.geomspace(lo, hi, n)
    q = quantize_values(x, fmt, rounding=rounding) if fmt not in _WIDE else quantize_values(x, fmt)
    return x, np.abs(q - x) / x


def _apply_recipe(x, fmax, recipe):
    """(x * scale, scale) of a recipe: ``none`` (scale 1) or ``tensor`` (amax -> fmax)."""
    if recipe == "none":
        return x, 1.0
    if recipe == "tensor":
        amax = float(np.max(np.abs(x)))
        scale = fmax / amax if amax > 0 else 1.0
        return x * scale, scale
    raise ValueError(f"unknown recipe {recipe!r}; accepted: {', '.join(RECIPES)}")


def _scales_arg(scales) -> np.ndarray:
    """Input scales as float64: a sequence of finite numbers > 0."""
    if isinstance(scales, (str, bytes)) or np.ndim(scales) != 1:
        raise TypeError(f"scales must be a 1-D sequence of numbers, got {scales!r}")
    arr = np.asarray(scales)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"scales must be real numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr) & (arr > 0)):
        raise ValueError(f"scales must be finite and > 0, got {scales!r}")
    return arr


def sweep_scale(formats, distributions, scales, *, n=4096, roundings=("rne",), recipes=("none",),
                saturate=True, seed=0) -> Table:
    """SQNR and error of quantization as the input scale sweeps the dynamic range.

    For each distribution one seeded sample ``z`` is drawn; every scale ``s`` quantizes ``s * z``
    (after the recipe's scaling, undone after decoding) for every format, rounding and recipe.

    Parameters
    ----------
    formats : sequence of str
        Formats (narrow, ``bfloat16`` or ``float16``).
    distributions : sequence of str, or dict of str to array_like
        Names from :data:`DISTRIBUTIONS`, or your own data: ``{label: values}`` with arrays,
        framework tensors or lists (through :func:`fp8emu.lab.inputs.load_data`); each scale
        then multiplies the values as given (``n`` and ``seed`` do not apply to them), and
        the ``distribution`` column holds the label.
    scales : sequence of float
        Input scales (e.g. ``np.logspace(-8, 8, 33, base=2)``).
    n : int
        Samples per distribution.
    roundings : sequence of str
        Rounding modes (``stochastic`` uses a seeded generator).
    recipes : sequence of str
        From :data:`RECIPES`.
    saturate : bool
        Saturate overflow to ±max (else overflows become Inf/NaN and count as ``overflow``).
    seed : int
        Seed of the samples.

    Returns
    -------
    Table
        Columns format, distribution, rounding, recipe, scale, sqnr_db, mse (relative to the
        signal power), bias (relative to the RMS), rel_err, overflow (count of ``|x|`` above max
        after scaling), underflow (nonzero inputs that became zero).

    Examples
    --------
    >>> t = sweep_scale(["e4m3fn"], ["gaussian"], [2.0 ** -12, 1.0], n=2000, recipes=("none", "tensor"))
    >>> bool(t.where(recipe="none")["sqnr_db"][0] < t.where(recipe="tensor")["sqnr_db"][0])
    True
    """
    for what, seq in (("formats", formats), ("distributions", distributions), ("roundings", roundings),
                      ("recipes", recipes)):
        if isinstance(seq, str):   # would be iterated character by character
            raise TypeError(f"{what} must be a sequence of names, e.g. [{seq!r}], got the string {seq!r}")
    scales = _scales_arg(scales)
    if isinstance(distributions, dict):
        data = [(str(k), load_data(v, what=f"distributions[{k!r}]").ravel()) for k, v in distributions.items()]
    else:
        data = [(d, sample(d, n, rng=[seed, i])) for i, d in enumerate(distributions)]
    rows = {c: [] for c in ("format", "distribution", "rounding", "recipe", "scale", "sqnr_db",
                            "mse", "bias", "rel_err", "overflow", "underflow")}
    for d_i, (dist, z) in enumerate(data):
        for fmt in formats:
            wide = isinstance(fmt, str) and fmt in _WIDE
            fmax = float(ml_dtypes.finfo(_WIDE[fmt]).max) if wide else get_format(fmt).max
            for rnd in roundings:
                for recipe in recipes:
                    for s in scales:
                        x = z * float(s)
                        xs, scale = _apply_recipe(x, fmax, recipe)
                        opts = {} if wide else {"rounding": rnd, "saturate": saturate,
                                                "rng": np.random.default_rng([seed, d_i, 1])}
                        if not wide and rnd != "stochastic":
                            opts.pop("rng")
                        q = quantize_values(xs, fmt, **opts) / scale
                        m = error_metrics(x, q)
                        power = float(np.mean(x ** 2))
                        for k, v in (("format", str(fmt)), ("distribution", dist), ("rounding", rnd),
                                     ("recipe", recipe), ("scale", float(s)),
                                     ("sqnr_db", m["sqnr_db"]), ("mse", m["mse"] / power),
                                     ("bias", m["bias"] / np.sqrt(power)), ("rel_err", m["rel_err"]),
                                     ("overflow", int(np.count_nonzero(np.abs(xs) > fmax))),
                                     ("underflow", int(np.count_nonzero((q == 0) & (x != 0))))):
                            rows[k].append(v)
    return Table(rows)


def rounding_bias(fmt, x, modes=("rne", "rtz", "stochastic"), *, draws=256, sr_bits=None, seed=0):
    """Mean error of each rounding mode at each input value, averaged over ``draws`` repetitions.

    Deterministic modes give the same error every draw; stochastic rounding's mean error tends
    to zero (unbiased) as the draws grow.

    Returns
    -------
    dict of str to numpy.ndarray
        Mode -> mean error ``E[q(x)] - x`` per entry of ``x``.

    Examples
    --------
    >>> b = rounding_bias("e4m3fn", [1.03125], modes=("rtz",), draws=4)
    >>> b["rtz"].tolist()
    [-0.03125]
    """
    x = np.asarray(x, np.float64)
    rep = np.broadcast_to(x, (draws,) + x.shape)
    out = {}
    for mode in modes:
        opts = {"rounding": mode}
        if mode == "stochastic":
            opts.update(rng=np.random.default_rng(seed), sr_bits=sr_bits)
        out[mode] = np.mean(quantize_values(rep, fmt, **opts), axis=0) - x
    return out


def stochastic_variance(fmt, x, bits=(1, 2, 3, 4, 6, 8, 12, 16), *, draws=512, seed=0):
    """Bias and variance of stochastic rounding as the number of random bits varies.

    Returns
    -------
    Table
        Columns ``bits``, ``mean_abs_bias`` (mean over ``x`` of ``|E q - x| / ulp``), ``variance``
        (mean over ``x`` of Var q / ulp²) and ``ideal_variance`` (the infinite-precision value
        ``f (1 - f)`` with ``f`` the fractional position of ``x`` between its neighbours).

    Examples
    --------
    >>> t = stochastic_variance("e4m3fn", [1.0 + 1 / 32], bits=(2,), draws=4000)
    >>> round(float(t["ideal_variance"][0]), 4)
    0.1875
    """
    x = np.asarray(x, np.float64).ravel()
    u = ulp(x, fmt)
    frac = (np.abs(x) - np.floor(np.abs(x) / u) * u) / u
    ideal = float(np.mean(frac * (1 - frac)))
    rep = np.broadcast_to(x, (draws, x.size))
    rows = {"bits": [], "mean_abs_bias": [], "variance": [], "ideal_variance": []}
    for k in bits:
        q = quantize_values(rep, fmt, rounding="stochastic", rng=np.random.default_rng([seed, k]),
                            sr_bits=int(k))
        rows["bits"].append(int(k))
        rows["mean_abs_bias"].append(float(np.mean(np.abs(q.mean(0) - x) / u)))
        rows["variance"].append(float(np.mean(q.var(0) / u ** 2)))
        rows["ideal_variance"].append(ideal)
    return Table(rows)


def binade_errors(x, fmt, *, recipe="tensor", checkpoint=None) -> Table:
    """Relative rounding error of your data, binade by binade of ``|x|`` (error vs dynamic range).

    The data are quantized as a whole (``recipe`` ``"tensor"``: one scale mapping amax to the
    format's max, as :func:`sweep_scale`; ``"none"``: as given, saturating) and each non-zero
    element's ``|q - x| / |x|`` is grouped by the binade ``[2^e, 2^(e+1))`` of ``|x|``.

    Parameters
    ----------
    x : array_like, tensor, or a tensor name with ``checkpoint``
        The data (see :func:`fp8emu.lab.inputs.load_data`).
    fmt : str
        Narrow format, ``bfloat16`` or ``float16``.
    recipe : {"tensor", "none"}, keyword-only
    checkpoint : str or Path, optional, keyword-only

    Returns
    -------
    Table
        Columns ``exponent`` (e), ``count`` (non-zero elements in the binade), ``mean_rel_err``,
        ``max_rel_err`` and ``flushed`` (elements of the binade that became 0); binades
        without elements are left out.

    Examples
    --------
    >>> t = binade_errors([1.0625, 1.5, 3.0, 0.0], "e4m3fn", recipe="none")
    >>> t["exponent"].tolist(), t["count"].tolist(), t["max_rel_err"].tolist()
    ([0, 1], [2, 1], [0.058823529411764705, 0.0])
    """
    x = load_data(x, checkpoint=checkpoint, what="x").ravel()
    wide = isinstance(fmt, str) and fmt in _WIDE
    fmax = float(ml_dtypes.finfo(_WIDE[fmt]).max) if wide else get_format(fmt).max
    xs, scale = _apply_recipe(x, fmax, recipe)
    q = quantize_values(xs, fmt) / scale if wide else quantize_values(xs, fmt, saturate=True) / scale
    nz = x != 0
    rel = np.abs(q[nz] - x[nz]) / np.abs(x[nz])
    _, e = np.frexp(np.abs(x[nz]))
    e = e - 1
    exps = np.unique(e)
    rows = {"exponent": exps.astype(int), "count": [], "mean_rel_err": [], "max_rel_err": [], "flushed": []}
    for b in exps:
        sel = e == b
        rows["count"].append(int(np.count_nonzero(sel)))
        rows["mean_rel_err"].append(float(np.mean(rel[sel])))
        rows["max_rel_err"].append(float(np.max(rel[sel])))
        rows["flushed"].append(int(np.count_nonzero(q[nz][sel] == 0)))
    return Table(rows)


def _granularity_recipes(fmt):
    """(label, family, quantizer of a 2-D array) of :func:`granularity_sqnr`."""
    out = [
        ("per-tensor", "scale per tensor / row / block", lambda x: scaling.quantize_tensorwise(x, fmt)),
        ("row-wise", "scale per tensor / row / block", lambda x: scaling.quantize_axiswise(x, fmt, axis=-1)),
        ("1x128 (pow2 scales)", "scale per tensor / row / block",
         lambda x: scaling.quantize_blockwise(x, fmt, block=(1, 128))),
        ("128x128 (pow2 scales)", "scale per tensor / row / block",
         lambda x: scaling.quantize_blockwise(x, fmt, block=(128, 128))),
    ]
    out += [(f"MX32 {fmt.removesuffix('fn')} {r}", "MX (E8M0 per 32)",
             (lambda x, r=r: scaling.quantize_mx(x, fmt, block=32, scale_rule=r)))
            for r in ("floor", "ceil", "even", "rceil")]
    out += [("MX32 e2m1 floor", "MX FP4", lambda x: scaling.quantize_mx(x, "e2m1fn", block=32, scale_rule="floor")),
            ("NVFP4 (e2m1, 16)", "NVFP4 (E4M3 per 16, fp32 per tensor)", lambda x: scaling.quantize_nvfp4(x))]
    return out


#: Labels of the recipes of :func:`granularity_sqnr` (with ``fmt="e4m3fn"``), in order.
GRANULARITY_RECIPES = tuple(label for label, _, _ in _granularity_recipes("e4m3fn"))


def granularity_sqnr(x, *, fmt="e4m3fn", checkpoint=None) -> Table:
    """SQNR of your tensor under scaling recipes of growing granularity (tensor, row, block, MX, NVFP4).

    An N-D tensor is taken as rows of its last axis (``(-1, shape[-1])``); a 1-D one as one row.

    Parameters
    ----------
    x : array_like, tensor, or a tensor name with ``checkpoint``
    fmt : str, keyword-only
        The FP8 format of the per-tensor, row, block and MX recipes (the FP4 ones use e2m1fn).
    checkpoint : str or Path, optional, keyword-only

    Returns
    -------
    Table
        Columns ``recipe``, ``family`` and ``sqnr_db`` (:func:`sqnr_db` of the dequantized tensor).

    Examples
    --------
    >>> t = granularity_sqnr(np.random.default_rng(0).standard_normal((4, 64)))
    >>> str(t["recipe"][0]), bool(t["sqnr_db"][0] > 25)
    ('per-tensor', True)
    """
    x = load_data(x, checkpoint=checkpoint, what="x")
    x = x.reshape(1, -1) if x.ndim < 2 else x.reshape(-1, x.shape[-1])
    rows = {"recipe": [], "family": [], "sqnr_db": []}
    for label, family, quantize in _granularity_recipes(get_format(fmt).name):
        q = np.asarray(quantize(x).dequantize(np.float64), np.float64)
        rows["recipe"].append(label)
        rows["family"].append(family)
        rows["sqnr_db"].append(sqnr_db(x, q))
    return Table(rows)


def _k_grid(k, ks):
    if ks is None:
        grid = [2 ** i for i in range(4, 40) if 2 ** i < k] + [k]
        return grid[-8:]
    vals = list(ks) if not isinstance(ks, (str, bytes)) and np.ndim(ks) == 1 else None
    if (not vals or any(isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) for v in vals)
            or any(v < 1 or v > k for v in vals)):
        raise ValueError(f"ks must be a sequence of integers in 1..{k} (the operands' K), got {ks!r}")
    return [int(v) for v in vals]


def gemm_error_vs_k(a, b, *, accumulators=("exact", "fp32", "hopper-fast", "hopper"), fmt="e4m3fn",
                    ks=None, b_transposed=False, checkpoint=None) -> Table:
    """GEMM error of your operands vs the inner dimension K, for accumulator presets.

    ``a`` (M, K) and ``b`` (K, N) are quantized to ``fmt`` with one scale per tensor
    (:func:`fp8emu.quantize_tensorwise`); for each K in ``ks`` the first K columns of A and
    rows of B are multiplied by :func:`fp8emu.scaled_mm` with each accumulator.

    Parameters
    ----------
    a, b : array_like, tensors, or tensor names with ``checkpoint``
    accumulators : sequence of str, keyword-only
        :func:`fp8emu.scaled_mm` accumulators: ``exact``, ``fp32``, ``hopper``, ``hopper-fast``,
        or instruction presets (``ada-mma``, ``blackwell-mma``, ...; see the GEMM guide).
    fmt : str, keyword-only
        FP8 format of both operands.
    ks : sequence of int, optional, keyword-only
        Prefix lengths of K (default: powers of two from 16, the last 8 below K, and K).
    b_transposed : bool, keyword-only
        ``b`` is given as (N, K), as a ``torch.nn.Linear`` weight or a Hugging Face checkpoint's
        ``*.weight`` is: the product is then ``a @ b.T``.
    checkpoint : str or Path, optional, keyword-only

    Returns
    -------
    Table
        Columns ``k``, ``accumulator``, ``accumulation_error`` (``||C - R_q|| / ||R_q||``
        against the float64 product ``R_q`` of the dequantized operands: the accumulator's
        error alone) and ``total_error`` (against the float64 product of the given
        operands: quantization and accumulation); norms are Frobenius norms.

    Examples
    --------
    >>> g = np.random.default_rng(0)
    >>> t = gemm_error_vs_k(g.uniform(0, 1, (4, 256)), g.uniform(0, 1, (256, 4)), accumulators=("exact",))
    >>> t["k"].tolist()[-2:], bool(t["accumulation_error"].max() < 1e-7)
    ([128, 256], True)
    """
    a, b = _operands(a, b, b_transposed, checkpoint)
    if isinstance(accumulators, str):
        raise TypeError(f"accumulators must be a sequence of names, e.g. [{accumulators!r}]")
    ta, tb = scaling.quantize_tensorwise(a, fmt), scaling.quantize_tensorwise(b, fmt)
    # the dequantized operands in float64 (codes times scale_inv, not rounded to float32 again)
    da, db = (decode(t.codes, fmt, dtype=np.float64) * np.float64(t.scale_inv) for t in (ta, tb))
    rows = {"k": [], "accumulator": [], "accumulation_error": [], "total_error": []}
    for k in _k_grid(a.shape[1], ks):
        exact_q = da[:, :k] @ db[:k]
        exact = a[:, :k] @ b[:k]
        for acc in accumulators:
            out = np.asarray(scaled_mm(ta.codes[:, :k], tb.codes[:k], a_format=fmt, b_format=fmt,
                                       scale_a=ta.scale_inv, scale_b=tb.scale_inv, accumulator=acc), np.float64)
            rows["k"].append(int(k))
            rows["accumulator"].append(str(acc))
            rows["accumulation_error"].append(_rel_norm(out, exact_q))
            rows["total_error"].append(_rel_norm(out, exact))
    return Table(rows)


def _operands(a, b, b_transposed, checkpoint):
    """GEMM operands as float64 (M, K) and (K, N) matrices."""
    a = load_data(a, checkpoint=checkpoint, what="a")
    b = load_data(b, checkpoint=checkpoint, what="b")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1 if b_transposed else 0]:
        want = "(M, K) and (N, K) (b_transposed=True)" if b_transposed else "(M, K) and (K, N)"
        raise ValueError(f"a and b must be matrices {want}, got shapes {a.shape} and {b.shape}")
    return a, (b.T if b_transposed else b)


def _mx(fmt):
    return lambda x, axis: scaling.quantize_mx(x, fmt, axis=axis)


#: Block-scaled GEMM recipes of :func:`block_gemm_error_vs_k`: name -> (label, quantizer(x, axis)),
#: blocks along K (axis 1 of A, axis 0 of B).
BLOCK_GEMM_RECIPES = {
    "mxfp8": ("MXFP8 (e4m3, E8M0 / 32)", _mx("e4m3fn")),
    "mxfp6": ("MXFP6 (e2m3, E8M0 / 32)", _mx("e2m3fn")),
    "mxfp4": ("MXFP4 (e2m1, E8M0 / 32)", _mx("e2m1fn")),
    "nvfp4": ("NVFP4 (e2m1, E4M3 / 16 + fp32)", lambda x, axis: scaling.quantize_nvfp4(x, axis=axis)),
    "nvfp4-rht": ("NVFP4 + random Hadamard",
                  lambda x, axis: scaling.quantize_nvfp4(x, axis=axis, random_hadamard_transform=True)),
}


def block_gemm_error_vs_k(a, b, *, recipes=("mxfp8", "mxfp6", "mxfp4", "nvfp4"), accumulator="exact", ks=None,
                          b_transposed=False, checkpoint=None) -> Table:
    """Block-scaled (MX, NVFP4) GEMM error of your operands vs K.

    For each K in ``ks``, the first K columns of A and rows of B are quantized with the recipe
    (blocks along K) and multiplied by :func:`fp8emu.block_scaled_mm` with ``accumulator``.

    Parameters
    ----------
    a, b : array_like, tensors, or tensor names with ``checkpoint``
        (M, K) and (K, N), or (N, K) with ``b_transposed=True``.
    recipes : sequence of str, keyword-only
        Names of :data:`BLOCK_GEMM_RECIPES`.
    accumulator : str, keyword-only
        ``"exact"``, ``"fp32"``, ``"blackwell"`` or a block-scaled instruction preset.
    ks : sequence of int, optional, keyword-only
        Multiples of 32 up to K (default: powers of two from 32 below K, the last 8, and K
        when it is a multiple of 32).
    b_transposed : bool, keyword-only
    checkpoint : str or Path, optional, keyword-only

    Returns
    -------
    Table
        Columns ``k``, ``recipe`` and ``error`` (``||C - R|| / ||R||``, R the float64 product
        of the operands as given: quantization and accumulation together).

    Examples
    --------
    >>> g = np.random.default_rng(0)
    >>> t = block_gemm_error_vs_k(g.standard_normal((4, 64)), g.standard_normal((64, 4)), recipes=["mxfp8"])
    >>> t["k"].tolist(), bool(t["error"].max() < 0.1)
    ([32, 64], True)
    """
    a, b = _operands(a, b, b_transposed, checkpoint)
    if isinstance(recipes, str) or not len(recipes):
        raise TypeError(f"recipes must be a non-empty sequence of names, e.g. ['nvfp4'], got {recipes!r}")
    unknown = [r for r in recipes if r not in BLOCK_GEMM_RECIPES]
    if unknown:
        raise ValueError(f"unknown block-scaled recipe {unknown[0]!r}; accepted: {', '.join(BLOCK_GEMM_RECIPES)}")
    k_all = a.shape[1]
    if k_all < 32:
        raise ValueError(f"block-scaled GEMMs need K of at least 32 (the MX block), got K = {k_all}")
    if ks is None:
        ks = ([2 ** i for i in range(5, 40) if 2 ** i < k_all] + ([k_all] if k_all % 32 == 0 else []))[-8:]
    ks = _k_grid(k_all, ks)
    if not ks or any(k % 32 for k in ks):
        raise ValueError(f"block-scaled GEMMs need K in multiples of 32 (the MX block), got {ks!r} "
                         f"for operands of K = {k_all}")
    rows = {"k": [], "recipe": [], "error": []}
    for k in ks:
        exact = a[:, :k] @ b[:k]
        for name in recipes:
            quantize = BLOCK_GEMM_RECIPES[name][1]
            out = block_scaled_mm(quantize(a[:, :k], -1), quantize(b[:k], 0), accumulator=accumulator)
            rows["k"].append(int(k))
            rows["recipe"].append(name)
            rows["error"].append(_rel_norm(np.asarray(out, np.float64), exact))
    return Table(rows)


def _rel_norm(out, ref):
    den = float(np.linalg.norm(ref))
    num = float(np.linalg.norm(out - ref))
    return num / den if den > 0 else (0.0 if num == 0 else float("inf"))
