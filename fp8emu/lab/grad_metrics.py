"""A result against its reference, as the gradient study measures it: :func:`compare` (``rel_err``,
``cosine``, ``shrink``), :func:`norm`, the error of a mean over draws (:func:`mean_curve`), power-law
slopes (:func:`loglog_slope`) and the bias floor under averaging (:func:`fit_floor`).

All in float64, summed in NumPy's fixed pairwise order (the same bits on any thread count), on real
arrays only; values whose squares leave float64's range are scaled by a power of two first.

Metrics of a result ``a`` against a reference ``r`` (both flattened):

* ``rel_err = |a - r| / |r|`` (Frobenius norms);
* ``cosine = <a, r> / (|a| |r|)``;
* ``shrink = <a - r, r> / |r|^2``: the error's component along the reference, as a fraction of it
  (negative: the result is shrunk toward zero along the true gradient, as a step with a smaller
  learning rate would be).

Examples
--------
>>> m = compare(np.array([1.0, 1.0]), np.array([2.0, 0.0]))
>>> round(m["rel_err"], 4), round(m["cosine"], 4), m["shrink"]
(0.7071, 0.7071, -0.5)
>>> round(loglog_slope([1, 4, 16], [1.0, 0.5, 0.25]), 3)
-0.5
"""

from __future__ import annotations

import math

import numpy as np

from ..interop import real_values

__all__ = ["compare", "norm", "mean_curve", "loglog_slope", "fit_floor"]


def compare(a, ref) -> dict:
    """``rel_err``, ``cosine`` and ``shrink`` of ``a`` against ``ref`` (float64; NaN for a zero reference)."""
    shapes = np.shape(a), np.shape(ref)
    a, r = _real(a, "compare"), _real(ref, "compare")
    if a.shape != r.shape:
        raise ValueError(f"compare: shapes differ ({a.size} against {r.size} elements)")
    a, r = np.ldexp(a, -(e := _scale_exponent(a, r))), np.ldexp(r, -e)
    # the shapes as given (axes of length 1 aside): compared flattened, a (2, 3) array against a (3, 2)
    # reference (a transposed gradient) passed and was measured element by element in the wrong pairing
    if tuple(d for d in shapes[0] if d != 1) != tuple(d for d in shapes[1] if d != 1):
        raise ValueError(f"compare: shapes differ ({shapes[0]} against the reference's {shapes[1]})")
    rr = _dot(r, r)
    if rr == 0 or not np.all(np.isfinite(a)):
        return {"rel_err": math.nan, "cosine": math.nan, "shrink": math.nan}
    d = a - r
    na = math.sqrt(_dot(a, a))
    # |<a, r>| <= |a| |r| (Cauchy-Schwarz), but the three rounded sums are not: compare(a, a) of a random float32
    # vector gave 1.0000000000000002 about one time in four, a cosine no two vectors have
    cosine = min(1.0, max(-1.0, _dot(a, r) / (na * math.sqrt(rr)))) if na > 0 else math.nan
    return {"rel_err": math.sqrt(_dot(d, d)) / math.sqrt(rr),
            "cosine": cosine,
            "shrink": _dot(d, r) / rr}


def _real(a, where, what="arrays"):
    try:    # interop's rule: complex lost its imaginary part (a ComplexWarning only), "1" and True were numbers
        return np.asarray(real_values(a, "each input"), np.float64).ravel()
    except TypeError as exc:
        raise TypeError(f"{where}: takes real {what}: {exc}") from None


def _scale_exponent(*arrays):
    # 2**-e brings squares within float64 (norms of 1e200 were Inf, of 1e-200 0); float32 values need none (e = 0)
    top = max(float(np.max(np.abs(a), initial=0.0, where=np.isfinite(a))) for a in arrays)
    return 0 if top == 0.0 or 2.0 ** -400 < top < 2.0 ** 400 else math.frexp(top)[1]


def _dot(a, b) -> float:
    # NumPy's own pairwise sum, not BLAS: a BLAS dot splits the sum over its threads, and a Dask worker
    # (one BLAS thread) and the driver (several) then differ in the last bits
    return float(np.sum(a * b))


def norm(a) -> float:
    """Frobenius norm in float64, summed in a fixed order (the same bits on any thread count).

    Examples
    --------
    >>> norm(np.array([[3.0], [4.0]]))
    5.0
    """
    a = _real(a, "norm")
    a = np.ldexp(a, -(e := _scale_exponent(a)))
    return math.sqrt(_dot(a, a)) * 2.0 ** (e // 2) * 2.0 ** (e - e // 2)     # Inf past float64, no OverflowError


def mean_curve(draws, ref, ns) -> list:
    """Relative error of the mean of the first ``n`` draws against ``ref``, for each ``n`` in ``ns``.

    Examples
    --------
    >>> ref = np.ones(4)
    >>> [round(e, 3) for e in mean_curve([ref + 1, ref - 1], ref, [1, 2])]
    [1.0, 0.0]
    """
    try:
        ns = list(ns)
    except TypeError:       # Python's "'int' object is not iterable", naming no argument
        raise TypeError(f"mean_curve: ns must be a sequence of draw counts (e.g. [1, 4, 16]), got {ns!r}") from None
    if not ns or any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) for n in ns) or ns[0] < 1 \
            or any(b <= a for a, b in zip(ns, ns[1:])):
        # the errors come out in draw order: an unsorted ns would pair them with the wrong n
        raise ValueError(f"mean_curve: ns must be increasing integers >= 1, got {ns}")
    draws = [np.reshape(_real(d, "mean_curve", "draws"), np.shape(d)) for d in draws]   # "1", True misread
    if max(ns) > len(draws):
        raise ValueError(f"mean_curve: {max(ns)} draws asked for, {len(draws)} given")
    shapes = {d.shape for d in draws} | {np.shape(ref)}
    if len(shapes) > 1:        # NumPy broadcast (or failed with its own message) draws of another shape
        raise ValueError(f"mean_curve: every draw must have the reference's shape {np.shape(ref)}, got shapes "
                         f"{sorted({d.shape for d in draws})}")
    out, acc = [], np.zeros_like(draws[0])
    for i, d in enumerate(draws, 1):
        acc += d
        if i in ns:
            out.append(compare(acc / i, ref)["rel_err"])
    return out


def loglog_slope(xs, ys) -> float:
    """Least-squares slope of ``log y`` against ``log x`` (NaN with fewer than two positive points, or one x)."""
    x, y = (np.reshape(_real(v, "loglog_slope"), np.shape(v)) for v in (xs, ys))     # "1", True misread
    if x.ndim != 1 or x.shape != y.shape:
        # NumPy's broadcast error named neither argument
        raise ValueError(f"loglog_slope: xs and ys must be 1-D of one length, got shapes {x.shape} and {y.shape}")
    # an infinite x (as an infinite y) is no point of a power law: LAPACK's SVD failed on it
    ok = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    if np.unique(x[ok]).size < 2:      # one x: no slope (polyfit made one up, with a RankWarning)
        return math.nan
    return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0])


def fit_floor(ns, errs) -> tuple:
    """``(b, v)`` of ``err(n)^2 = b^2 + v / n`` by least squares with ``b^2, v >= 0``: the bias that
    averaging over draws cannot remove (``b``) and the part that falls like ``1/sqrt(n)`` (``v``); NaN
    with fewer than two distinct ``n`` (no split is determined).

    Examples
    --------
    >>> ns = [1, 4, 16, 64]
    >>> b, v = fit_floor(ns, [math.sqrt(0.01 + 0.04 / n) for n in ns])
    >>> round(b, 4), round(v, 4)
    (0.1, 0.04)
    """
    n, e = (np.reshape(_real(v, "fit_floor"), np.shape(v)) for v in (ns, errs))  # "1", True
    e2 = e ** 2
    # no points fitted "b = 0, v = 0" (a claim about nothing); other lengths, or n <= 0 (1/n), failed in LAPACK
    if n.ndim != 1 or n.shape != e2.shape or n.size == 0:
        raise ValueError(f"fit_floor: ns and errs must be 1-D of one length >= 1, got shapes {n.shape} and "
                         f"{e2.shape}")
    if not np.all(np.isfinite(n) & (n > 0)):
        raise ValueError(f"fit_floor: ns are draw counts, finite and > 0, got {list(ns)}")
    if np.any(e < 0):       # squared, an error of -0.1 was fitted as 0.1, silently (NaN: no fit, NaN)
        raise ValueError(f"fit_floor: errs are errors, >= 0, got {list(errs)}")
    if np.unique(n).size < 2:
        # one draw count fits every split of its error exactly: fit_floor([1], [0.1]) said (0.1, 0.0), all of it bias,
        # and [4, 4, 4] an arbitrary split (as loglog_slope of one x made up a slope)
        return math.nan, math.nan
    A = np.stack([np.ones_like(n), 1 / n], axis=1)
    best = None
    # the four active sets of a two-variable non-negative least squares
    for cols in ((0, 1), (0,), (1,)):
        coef, *_ = np.linalg.lstsq(A[:, cols], e2, rcond=None)
        if np.any(coef < 0):
            continue
        full = np.zeros(2)
        full[list(cols)] = coef
        res = float(np.sum((A @ full - e2) ** 2))
        if best is None or res < best[0]:
            best = (res, full)
    full = best[1] if best else np.zeros(2)
    return float(math.sqrt(full[0])), float(full[1])
