"""Quantization-error metrics of whole tensors, computed chunk by chunk.

A checkpoint study measures each tensor under many recipes without ever
holding more than a chunk of it.  Every metric here is therefore split in
three steps:

1. a *partial* computed from one chunk (a dict of sums, counts, maxima and
   histograms) by :func:`input_partial` and :func:`error_partial`;
2. :func:`combine`, which merges partials (in the order given, so the same
   chunks always give the same floating-point sums, whether they were
   computed in one process or on a Dask cluster);
3. :func:`input_summary` and :func:`error_summary`, which turn the merged
   partials into the reported numbers.

Definitions (``x`` the input converted to float32, ``y`` the scaled value
handed to the cast, ``q`` the dequantized result; only elements with finite
``x`` count, NaN and Inf inputs are reported separately):

* ``sqnr_db = 10 log10(sum x^2 / sum (q - x)^2)``; ``inf`` when exact,
  ``-inf`` when a finite input became Inf/NaN (a non-saturating cast's
  overflow, an MX block holding Inf) or the signal is zero but the noise
  is not;
* ``rel_rms_err = sqrt(sum (q - x)^2 / sum x^2)``;
* ``max_abs_err``, ``max_rel_err`` (over ``x != 0``);
* ``frac_overflow``: ``|y|`` past the format's real rounding threshold,
  i.e. it would round above ``max`` with an unbounded exponent
  (:func:`overflow_threshold`: e4m3fn overflows above 464 -- exactly 464
  rounds to even, 448 -- e5m2 at 61440 and above); a saturating cast clamps
  these to ``+-max``, a non-saturating one makes them Inf or NaN;
* ``frac_saturated``: the output is ``+-max`` (clamped, or rounded there);
* ``frac_flushed``: ``x != 0`` became 0;
* ``frac_subnormal``: the element's code is a subnormal of the format;
* ``exp_hist``: counts of ``floor(log2 |v|)`` over finite non-zero ``v``
  (float32 exponents -149..127), before and after quantization.
"""

from __future__ import annotations

import math

import numpy as np

from .formats import Format, get_format

__all__ = [
    "EXP_MIN", "EXP_MAX", "CALIB_BINS", "as_matrix", "exponent_histogram", "overflow_threshold",
    "input_partial", "calibration_histogram", "error_partial", "combine", "input_summary",
    "error_summary", "histogram_text",
]

#: Smallest and largest float32 binade exponent (``floor(log2 |v|)``, subnormals included).
EXP_MIN, EXP_MAX = -149, 127
_NEXP = EXP_MAX - EXP_MIN + 1

#: Bins of the calibration histogram of ``|x|`` over ``[0, amax]`` (TensorRT uses 2048).
CALIB_BINS = 2048

_F32 = np.float32


def as_matrix(x) -> np.ndarray:
    """``x`` as a 2-D float32 array: ``(prod(shape[:-1]), shape[-1])``.

    A study treats a tensor of shape ``(..., K)`` as a matrix of rows of
    length ``K`` (the axis the row-wise, 1x128, MX and NVFP4 recipes block
    along); 1-D tensors are one row, scalars a 1x1 matrix.  bfloat16,
    float16 and float8 inputs convert to float32 exactly.

    Examples
    --------
    >>> as_matrix(np.zeros((2, 3, 4))).shape, as_matrix(np.float64(1)).shape
    ((6, 4), (1, 1))
    """
    a = np.asarray(x)
    if a.dtype == object or (a.dtype.kind not in "biufV"):
        raise TypeError(f"tensor must be a real numeric array, got dtype {a.dtype}")
    with np.errstate(over="ignore"):   # float64 beyond float32's range becomes Inf, as on a GPU
        a = a.astype(np.float32)
    if a.ndim == 0:
        return a.reshape(1, 1)
    # explicit row count: reshape(-1, 0) cannot infer the rows of a (5, 0) tensor
    return a.reshape(math.prod(a.shape[:-1]), a.shape[-1]) if a.ndim > 1 else a.reshape(1, -1)


def exponent_histogram(v) -> np.ndarray:
    """Counts of ``floor(log2 |v|)`` for finite non-zero ``v``; index 0 is ``EXP_MIN``.

    Examples
    --------
    >>> h = exponent_histogram(np.array([1.0, 1.5, 0.25, 0.0, np.inf], np.float32))
    >>> int(h[0 - EXP_MIN]), int(h[-2 - EXP_MIN]), int(h.sum())
    (2, 1, 3)
    """
    a = np.asarray(v, dtype=np.float32).ravel()
    a = a[np.isfinite(a) & (a != 0)]
    _, e = np.frexp(a)
    return np.bincount(e.astype(np.int64) - 1 - EXP_MIN, minlength=_NEXP).astype(np.int64)


def histogram_text(h) -> str:
    """Compact text of an exponent histogram: ``"E:count ..."`` for the non-zero bins.

    Examples
    --------
    >>> histogram_text(exponent_histogram(np.array([1.0, 3.0, 0.5], np.float32)))
    '-1:1 0:1 1:1'
    """
    h = np.asarray(h)
    idx = np.flatnonzero(h)
    return " ".join(f"{i + EXP_MIN}:{int(h[i])}" for i in idx)


def overflow_threshold(fmt) -> tuple:
    """Where round-to-nearest-even overflows past ``fmt.max``: ``(threshold, tie_overflows)``.

    The threshold is the midpoint between ``max`` and the next value the
    format would have with an unbounded exponent, ``max + ulp(max) / 2``.  A
    value exactly at the midpoint rounds to the neighbour with the even code,
    so it overflows only when ``max``'s code is odd.

    Returns
    -------
    (float, bool)

    Examples
    --------
    >>> overflow_threshold("e4m3fn"), overflow_threshold("e5m2")
    ((464.0, False), (61440.0, True))
    """
    f = fmt if isinstance(fmt, Format) else get_format(fmt)
    top = math.floor(math.log2(f.max))
    return f.max + 2.0 ** (top - f.mbits) / 2, bool(f.max_code & 1)


def _finite_abs(x):
    a = np.abs(x)
    return np.where(np.isfinite(a), a, _F32(0))


def input_partial(x) -> dict:
    """Partial statistics of one chunk of a tensor (float32 or convertible).

    Keys: ``n``, ``n_nan``, ``n_inf``, ``n_zero``, ``amax`` (finite values),
    ``min_nonzero`` (finite, ``inf`` if none), ``exp_hist``.

    Examples
    --------
    >>> p = input_partial(np.array([0.0, -2.0, np.nan, 0.5], np.float32))
    >>> p["n"], p["n_nan"], p["n_zero"], p["amax"], p["min_nonzero"]
    (4, 1, 1, 2.0, 0.5)
    """
    return _sliced(_input_partial, [np.asarray(x, dtype=np.float32).ravel()])


def _input_partial(x):
    a = _finite_abs(x)
    nz = a[a > 0]
    return {
        "n": int(x.size),
        "n_nan": int(np.count_nonzero(np.isnan(x))),
        "n_inf": int(np.count_nonzero(np.isinf(x))),
        "n_zero": int(np.count_nonzero(x == 0)),
        "amax": float(a.max(initial=0.0)),
        "min_nonzero": float(nz.min()) if nz.size else math.inf,
        "exp_hist": exponent_histogram(x),
    }


def calibration_histogram(x, amax) -> np.ndarray:
    """Counts of finite ``|x|`` in :data:`CALIB_BINS` equal bins over ``[0, amax]`` (int64).

    Examples
    --------
    >>> h = calibration_histogram(np.array([0.0, 1.0, -2.0, np.nan], np.float32), 2.0)
    >>> int(h[0]), int(h[1024]), int(h[-1]), int(h.sum())
    (1, 1, 1, 3)
    """
    a = np.abs(np.asarray(x, dtype=np.float32)).ravel()
    a = a[np.isfinite(a)]
    if not amax > 0:
        return np.bincount(np.zeros(a.size, np.int64), minlength=CALIB_BINS).astype(np.int64)
    idx = np.minimum((a.astype(np.float64) * (CALIB_BINS / float(amax))).astype(np.int64), CALIB_BINS - 1)
    return np.bincount(idx, minlength=CALIB_BINS).astype(np.int64)


#: Elements per slice inside the partial functions, which bounds their float64 temporaries.
_SLICE = 1 << 16


def _sliced(fn, arrays):
    """``fn`` over aligned 1-D slices of ``arrays``, combined in order (bounded temporaries)."""
    n = arrays[0].size
    if n <= _SLICE:
        return fn(*arrays)
    return combine([fn(*(a[i:i + _SLICE] for a in arrays)) for i in range(0, n, _SLICE)])


def error_partial(x, y, codes, q, fmt) -> dict:
    """Partial error statistics of one chunk under one recipe.

    Parameters
    ----------
    x : array_like
        Inputs (float32).
    y : array_like
        The scaled values handed to the cast (``x`` for plain casts).
    codes : numpy.ndarray of uint8
        The element codes.
    q : array_like
        The dequantized values (float32).
    fmt : str or Format
        Element format.

    Examples
    --------
    >>> x = np.array([1.0, 500.0, 1e-5], np.float32)
    >>> import fp8emu
    >>> c = fp8emu.encode(x, "e4m3fn", saturate=True)
    >>> q = fp8emu.decode(c, "e4m3fn")
    >>> p = error_partial(x, x, c, q, "e4m3fn")
    >>> p["n_overflow"], p["n_saturated"], p["n_flushed"]
    (1, 1, 1)
    """
    f = fmt if isinstance(fmt, Format) else get_format(fmt)
    arrays = [np.asarray(x, dtype=np.float32).ravel(), np.asarray(y, dtype=np.float32).ravel(),
              np.asarray(codes).ravel(), np.asarray(q, dtype=np.float32).ravel()]
    if len({a.size for a in arrays}) != 1:
        raise ValueError(f"x, y, codes and q must have the same size, got {[a.size for a in arrays]}")
    return _sliced(lambda *a: _error_partial(*a, f), arrays)


def _error_partial(x, y, codes, q, f):
    fin = np.isfinite(x)
    xf = x[fin].astype(np.float64)
    qf = q[fin].astype(np.float64)
    qok = np.isfinite(qf)
    err = np.abs(qf[qok] - xf[qok])
    ax = np.abs(xf[qok])
    nz = ax > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = err[nz] / ax[nz]
    thr, tie = overflow_threshold(f)
    ay = np.abs(y[fin])
    over = (ay > thr) | ((ay == thr) if tie else False)
    mag = codes[fin] & np.uint8(f.magnitude_mask)
    ebits = mag >> np.uint8(f.mbits)
    sub = (ebits == 0) & (mag != 0) if f.subnormals else np.zeros(mag.shape, bool)
    return {
        "n_finite": int(xf.size),
        "signal": float(np.sum(xf * xf)),
        "noise": float(np.sum(err * err)),
        "n_nonfinite_out": int(np.count_nonzero(~qok)),
        "max_abs_err": float(err.max(initial=0.0)),
        "max_rel_err": float(rel.max(initial=0.0)),
        "n_overflow": int(np.count_nonzero(over)),
        "n_saturated": int(np.count_nonzero(mag == np.uint8(f.max_code & f.magnitude_mask))),
        "n_flushed": int(np.count_nonzero((xf != 0) & (qf == 0))),
        "n_subnormal": int(np.count_nonzero(sub)),
        "exp_hist": exponent_histogram(q[fin]),
    }


def combine(parts) -> dict:
    """Merge partials of the same kind, left to right (sums, counts, maxima, minima, histograms).

    Examples
    --------
    >>> a, b = input_partial(np.array([1.0], np.float32)), input_partial(np.array([-4.0], np.float32))
    >>> c = combine([a, b])
    >>> c["n"], c["amax"], c["min_nonzero"]
    (2, 4.0, 1.0)
    """
    parts = list(parts)
    if not parts:
        raise ValueError("combine needs at least one partial")
    out = dict(parts[0])
    for p in parts[1:]:
        for k, v in p.items():
            if k.startswith("max") or k == "amax":
                out[k] = max(out[k], v)
            elif k.startswith("min"):
                out[k] = min(out[k], v)
            elif isinstance(v, np.ndarray):
                out[k] = out[k] + v
            else:
                out[k] = out[k] + v
    return out


def input_summary(p) -> dict:
    """Reported input columns from a combined :func:`input_partial`.

    ``dynamic_range_log2 = log2(amax / min_nonzero)`` (0 for an all-zero or
    all-equal tensor, NaN if it holds no finite non-zero value).

    Examples
    --------
    >>> s = input_summary(input_partial(np.array([0.25, -4.0, 0.0], np.float32)))
    >>> s["amax"], s["dynamic_range_log2"], s["frac_zero"]
    (4.0, 4.0, 0.3333333333333333)
    """
    n = max(p["n"], 1)
    if p["min_nonzero"] == math.inf:
        dr = math.nan
    else:
        dr = math.log2(p["amax"] / p["min_nonzero"])
    return {
        "numel": p["n"], "n_nan": p["n_nan"], "n_inf": p["n_inf"], "frac_zero": p["n_zero"] / n,
        "amax": p["amax"], "min_nonzero": p["min_nonzero"] if p["min_nonzero"] != math.inf else 0.0,
        "dynamic_range_log2": dr, "exp_hist_in": histogram_text(p["exp_hist"]),
    }


def error_summary(p) -> dict:
    """Reported metric columns from a combined :func:`error_partial`.

    Examples
    --------
    >>> x = np.array([1.0, 2.0], np.float32)
    >>> s = error_summary(error_partial(x, x, np.zeros(2, np.uint8), x * 1.5, "e4m3fn"))
    >>> round(s["sqnr_db"], 3), s["max_rel_err"]
    (6.021, 0.5)
    """
    n = max(p["n_finite"], 1)
    signal, noise = p["signal"], p["noise"]
    if p["n_nonfinite_out"]:
        sqnr, rel_rms = -math.inf, math.inf
    elif noise == 0:
        sqnr, rel_rms = math.inf, 0.0
    elif signal == 0:
        sqnr, rel_rms = -math.inf, math.inf
    else:
        sqnr = 10 * math.log10(signal / noise)
        rel_rms = math.sqrt(noise / signal)
    return {
        "sqnr_db": sqnr, "rel_rms_err": rel_rms,
        "max_abs_err": math.inf if p["n_nonfinite_out"] else p["max_abs_err"],
        "max_rel_err": math.inf if p["n_nonfinite_out"] else p["max_rel_err"],
        "frac_overflow": p["n_overflow"] / n, "frac_saturated": p["n_saturated"] / n,
        "frac_flushed": p["n_flushed"] / n, "frac_subnormal": p["n_subnormal"] / n,
        "n_nonfinite_out": p["n_nonfinite_out"], "exp_hist_out": histogram_text(p["exp_hist"]),
    }
