"""Compare another implementation's results with fp8emu and explain every difference.

:func:`compare_codes` checks narrow-format codes (from any kernel, any
framework) against the emulator and returns a :class:`Comparison`: how many
differ, of which kind, by how many steps of the format, and the first
differing elements with their inputs.  :func:`assert_fp8_equal` raises that
report.  :func:`compare_ulp` / :func:`assert_close_ulp` do the same for
float32/bfloat16/float16 outputs (e.g. of a GEMM) in units in the last place.

Examples
--------
>>> KINDS[:2]
('NaN code', 'saturation/overflow')
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..codec import decode, encode
from ..describe import code_bits
from ..formats import get_format
from ..interop import ML_NARROW_DTYPES, narrow_codes, to_numpy, is_integer
from ..tables import SOURCE_DTYPES

__all__ = ["Comparison", "compare_codes", "to_codes", "assert_fp8_equal", "UlpComparison", "compare_ulp",
           "assert_close_ulp", "KINDS"]

#: Kinds of code mismatch, in report order.
KINDS = ("NaN code", "saturation/overflow", "rounding direction", "zero/sign", "other")
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _bits_hex(arr):
    """Hex bit patterns (strings) of a 1-D float array, or decimal text for integers."""
    if arr.dtype.kind in "biu":
        return [str(v) for v in arr.tolist()]
    w = arr.dtype.itemsize
    return [f"0x{int(b):0{2 * w}x}" for b in arr.view(_UINT[w]).tolist()]


def _value_text(v) -> str:
    v = float(v)
    return "nan" if np.isnan(v) else repr(v)


def _index_text(i, shape):
    if len(shape) <= 1:
        return str(int(i))
    return str(tuple(int(k) for k in np.unravel_index(int(i), shape)))


def _ordinal(codes, f):
    """Position of each code on the format's value line (sign-magnitude -> signed integer)."""
    c = codes.astype(np.int64)
    if not f.signed:
        return c
    mag = c & f.magnitude_mask
    return np.where(c & f.sign_bit, -mag, mag)


@dataclass
class Comparison:
    """Result of :func:`compare_codes`; ``str()`` gives the readable report.

    Attributes
    ----------
    format, profile : str
    options : dict
        The encode options the expected codes were computed with.
    shape : tuple
    total, mismatches : int
    kinds : dict
        Mismatch count per kind (:data:`KINDS`): a NaN code on either side;
        saturation/overflow (Inf on either side, or max for an input beyond
        max); rounding direction (the neighbouring code on the other side of
        the input); zero/sign (same magnitude, other sign); other.
    distance_histogram : dict
        ``{actual - expected in steps of the format (int) or "nan": count}``.
    examples : list of dict
        The first differing elements: ``index``, ``input``, ``input_bits``,
        ``expected_code``, ``expected_value``, ``actual_code``,
        ``actual_value``, ``kind``, ``distance``.

    Examples
    --------
    >>> import numpy as np
    >>> c = compare_codes(np.array([0x7E], np.uint8), np.array([500.0], np.float32), "e4m3fn")
    >>> c.ok, c.mismatches, c.kinds["saturation/overflow"], c.examples[0]["expected_code"]
    (False, 1, 1, 127)
    """

    format: str
    profile: str
    options: dict
    shape: tuple
    total: int
    mismatches: int
    kinds: dict = field(default_factory=dict)
    distance_histogram: dict = field(default_factory=dict)
    examples: list = field(default_factory=list)
    source: str = "fp8emu"

    @property
    def ok(self) -> bool:
        """True when every code matches."""
        return self.mismatches == 0

    def __str__(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in self.options.items())
        head = (f"{self.mismatches} of {self.total} {self.format} codes differ from {self.source} "
                f"(profile {self.profile!r}{opts})")
        if self.ok:
            return head
        f = get_format(self.format)
        width = (f.bits + 3) // 4
        kinds = ", ".join(f"{k} {n}" for k, n in self.kinds.items() if n)
        hist = ", ".join(f"{k:+d}: {n}" if isinstance(k, int) else f"{k}: {n}"
                         for k, n in self.distance_histogram.items())
        lines = [head, f"by kind: {kinds}",
                 f"code distance (actual - expected, in steps of {self.format}): {hist}",
                 f"first {len(self.examples)} differences:",
                 "index | input (bits) | expected code [bits] = value | actual code [bits] = value | kind | distance"]
        for e in self.examples:
            d = e["distance"]
            dist = "nan" if d is None else f"{d:+d}"
            inp = "-" if e["input"] is None else f"{e['input']} ({e['input_bits']})"
            lines.append(
                f"{e['index']} | {inp} | 0x{e['expected_code']:0{width}x} [{code_bits(e['expected_code'], f)}] = "
                f"{e['expected_value']} | 0x{e['actual_code']:0{width}x} [{code_bits(e['actual_code'], f)}] = "
                f"{e['actual_value']} | {e['kind']} | {dist}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """Plain-JSON form (for reports)."""
        return {"format": self.format, "profile": self.profile, "options": dict(self.options),
                "shape": list(self.shape), "total": self.total, "mismatches": self.mismatches,
                "kinds": dict(self.kinds),
                "distance_histogram": {str(k): v for k, v in self.distance_histogram.items()},
                "examples": list(self.examples)}


def to_codes(actual, fmt, *, what="actual"):
    """``(uint8 codes, given_as_values)`` from codes, an array of ``fmt`` or values exactly in ``fmt``.

    Examples
    --------
    >>> import numpy as np
    >>> codes, as_values = to_codes(np.float32([1.0, -448.0]), "e4m3fn")
    >>> codes.tolist(), as_values
    ([56, 254], True)
    """
    f = get_format(fmt)
    a = to_numpy(actual, what=what)
    if a.dtype in ML_NARROW_DTYPES or a.dtype.kind in "iu":
        # the original, not ``a``: narrow_codes reads Python ints (no dtype) as codes, but a signed array as an error
        return narrow_codes(actual, f, what=what), False
    if a.dtype in SOURCE_DTYPES.values():
        codes = encode(a, f)
        with np.errstate(invalid="ignore"):
            back = decode(codes, f, dtype=np.float64)
            ok = (back == a.astype(np.float64)) | (np.isnan(back) & np.isnan(a.astype(np.float64)))
        if not ok.all():
            i = int(np.flatnonzero(~ok.reshape(-1))[0])
            raise ValueError(f"{what} holds {a.dtype} values that are not {f.name} values (first at index "
                             f"{_index_text(i, a.shape)}: {a.reshape(-1)[i]!r}); pass codes (uint8), an "
                             f"ml_dtypes {f.name} array, or values exactly representable in {f.name}")
        return codes, True
    raise TypeError(f"{what} must hold {f.name} codes (unsigned integers), an ml_dtypes/torch/JAX {f.name} "
                    f"array or float values of the format, got dtype {a.dtype}")


def compare_codes(actual, x, fmt, *, profile="ocp", expected=None, max_examples=10,
                  **encode_options) -> Comparison:
    """Compare codes from another implementation with fp8emu's, without raising on differences.

    Parameters
    ----------
    actual : array_like
        uint8 codes (FP6/FP4 in the low bits), an ml_dtypes array of ``fmt``,
        a torch tensor (``float8_*``, ``float4_e2m1fn_x2``, uint8) on any
        device, a JAX array, anything with ``__array__``/``__dlpack__``, or
        float values exactly representable in ``fmt`` (then NaN matches any
        expected NaN code, since values carry no NaN code).
    x : array_like or None
        The inputs that produced ``actual`` (same shape).  May be None only
        when ``expected`` is given.
    fmt : str or Format
    profile : str, keyword-only
        Code path to emulate (see :func:`fp8emu.profile_names`).
    expected : array_like, optional, keyword-only
        Expected codes; default ``encode(x, fmt, profile=profile, **encode_options)``.
    max_examples : int, keyword-only
        How many differing elements to describe.
    **encode_options
        Further options of :func:`fp8emu.encode` (``rounding``, ``saturate``,
        ``random_bits``, ``sr_bits``, ``via``...).

    Returns
    -------
    Comparison

    Raises
    ------
    ValueError
        Shapes differ, codes out of range for the format, an ml_dtypes array
        of another format, or float values that are not values of ``fmt``.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([1.0, 1.0625, 500.0], np.float32)
    >>> c = compare_codes(np.array([0x38, 0x39, 0x7E], np.uint8), x, "e4m3fn")
    >>> c.mismatches, c.kinds["rounding direction"], c.kinds["saturation/overflow"]
    (2, 1, 1)
    >>> print(str(c).splitlines()[0])
    2 of 3 e4m3fn codes differ from fp8emu (profile 'ocp')
    """
    max_examples = _count(max_examples, "max_examples")
    f = get_format(fmt)
    got, was_values = to_codes(actual, f)
    xa = None if x is None else to_numpy(x, what="x")
    if expected is None:
        if xa is None:
            raise ValueError("pass the inputs x (or the expected codes)")
        exp = encode(xa, f, profile=profile, **encode_options)
    else:
        exp = narrow_codes(expected, f, what="expected")
    if got.shape != exp.shape:
        raise ValueError(f"shape mismatch: actual {got.shape}, expected {exp.shape}")
    if xa is not None and xa.shape != exp.shape:
        raise ValueError(f"shape mismatch: actual {got.shape}, inputs x {xa.shape}")
    vals = f.values()
    g, e = got.reshape(-1), exp.reshape(-1)
    diff = g != e
    if was_values:
        diff &= ~(np.isnan(vals[g]) & np.isnan(vals[e]))
    bad = np.flatnonzero(diff)
    opts = {k: v for k, v in encode_options.items() if k not in ("random_bits", "rng")}
    res = Comparison(f.name, str(profile), opts, tuple(exp.shape), int(exp.size), int(bad.size),
                     {k: 0 for k in KINDS}, {}, [], "fp8emu" if expected is None else "the expected codes")
    if not bad.size:
        return res
    gb, eb = g[bad], e[bad]
    va, ve = vals[gb], vals[eb]
    xb = None if xa is None else xa.reshape(-1)[bad]
    xv = None if xb is None else xb.astype(np.float64)
    vnan = np.isnan(va) | np.isnan(ve)    # no distance to a NaN code
    nan = vnan.copy()
    inf = np.isinf(va) | np.isinf(ve)
    sat = inf & ~nan
    if xv is not None:
        # A finite input beyond max overflows: NaN (formats without Inf), Inf and max are all overflow results.
        with np.errstate(invalid="ignore"):
            xnan = np.isnan(xv)
            over = (np.abs(xv) > f.max) & ~xnan
        sat = ~xnan & (sat | over & (nan | inf | (np.abs(va) == f.max) | (np.abs(ve) == f.max)))
        nan &= ~sat
    zero = ~vnan & ~sat & (np.abs(va) == np.abs(ve))
    dist = _ordinal(gb, f) - _ordinal(eb, f)
    rnd = ~vnan & ~sat & ~zero & (np.abs(dist) == 1)
    if xv is not None:
        with np.errstate(invalid="ignore"):
            rnd &= (np.minimum(va, ve) < xv) & (xv < np.maximum(va, ve))   # an exact input never rounds
    kind = np.select([nan, sat, zero, rnd], [0, 1, 3, 2], default=4)   # indices into KINDS
    res.kinds = {k: int(np.count_nonzero(kind == i)) for i, k in enumerate(KINDS)}
    keys, counts = np.unique(dist[~vnan], return_counts=True)
    hist = {int(k): int(n) for k, n in zip(keys.tolist(), counts.tolist())}
    if vnan.any():
        hist["nan"] = int(vnan.sum())
    res.distance_histogram = hist
    n = min(max_examples, bad.size)
    xs = None if xb is None else xb[:n]
    xbits = None if xs is None else _bits_hex(xs)
    for j in range(n):   # only the few reported elements are formatted
        res.examples.append({
            "index": _index_text(bad[j], exp.shape),
            "input": None if xs is None else (str(xs[j].item()) if xs.dtype.kind in "biu"
                                               else _value_text(xs[j])),
            "input_bits": None if xbits is None else xbits[j],
            "expected_code": int(eb[j]), "expected_value": _value_text(ve[j]),
            "actual_code": int(gb[j]), "actual_value": _value_text(va[j]),
            "kind": KINDS[kind[j]], "distance": None if vnan[j] else int(dist[j]),
        })
    return res


def assert_fp8_equal(actual, x, fmt, *, profile="ocp", max_examples=10, **encode_options):
    """Assert that ``actual`` holds the codes fp8emu gives for ``x``.

    Parameters
    ----------
    actual : array_like
        As for :func:`compare_codes`: codes, ml_dtypes/torch/JAX arrays of
        ``fmt`` (any device), or exactly representable float values.
    x : array_like
        The inputs that produced ``actual`` (same shape); NumPy, ml_dtypes
        (bfloat16, float8...), torch or JAX arrays.
    fmt : str or Format
    profile : str, keyword-only
        The code path to emulate (see :func:`fp8emu.profile_names`).
    max_examples : int, keyword-only
        Differing elements listed in the message.
    **encode_options
        Further options of :func:`fp8emu.encode` (e.g. ``saturate=True``).

    Raises
    ------
    AssertionError
        Shapes differ, or with ``str(compare_codes(...))``: counts by kind,
        the code distance histogram and the first differing elements (index,
        input value and bits, expected and actual code, bits and value).

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> x = np.array([1.0, 464.33], np.float32)
    >>> fp8emu.assert_fp8_equal(np.array([0x38, 0x7E], np.uint8), x, "e4m3fn", profile="cuda-satfinite")
    >>> try:
    ...     fp8emu.assert_fp8_equal(np.array([0x38, 0x7E], np.uint8), x, "e4m3fn")
    ... except AssertionError as e:
    ...     print(str(e).splitlines()[0])
    1 of 2 e4m3fn codes differ from fp8emu (profile 'ocp')
    """
    __tracebackhide__ = True   # pytest shows the caller's line, not this helper's
    try:
        res = compare_codes(actual, x, fmt, profile=profile, max_examples=max_examples, **encode_options)
    except ValueError as exc:
        if str(exc).startswith("shape mismatch"):   # a kernel returning the wrong shape fails the test
            raise AssertionError(str(exc)) from None
        raise
    if not res.ok:
        raise AssertionError(str(res))


# ----------------------------------------------------------------------------- ULP comparison
@dataclass
class UlpComparison:
    """Result of :func:`compare_ulp`; ``str()`` gives the readable report.

    ``histogram`` maps ULP-distance buckets (``"0"``, ``"1"``, ``"2"``,
    ``"3-4"``, ``"5-8"``, ... and ``"nan"`` for a NaN on one side only) to
    counts; ``worst`` lists the largest distances first.  ``max_distance`` is
    the largest distance as an exact int (``float("inf")`` when a NaN faces a
    number).

    Examples
    --------
    >>> import numpy as np
    >>> one_up = np.nextafter(np.float32(2), np.float32(3))
    >>> u = compare_ulp(np.float32([1.0, 2.0]), np.float32([1.0, one_up]), "float32")
    >>> u.ok, u.max_distance, u.histogram
    (False, 1, {'0': 1, '1': 1})
    """

    dtype: str
    shape: tuple
    total: int
    max_ulp: int
    exceeding: int
    max_distance: int | float
    histogram: dict
    worst: list

    @property
    def ok(self) -> bool:
        """True when every element is within ``max_ulp``."""
        return self.exceeding == 0

    def __str__(self) -> str:
        md = "nan" if self.max_distance == float("inf") else str(int(self.max_distance))
        lines = [f"{self.exceeding} of {self.total} {self.dtype} elements differ by more than "
                 f"{self.max_ulp} ULP (largest distance: {md} ULP)",
                 "ULP distance histogram: " + ", ".join(f"{k}: {n}" for k, n in self.histogram.items())]
        if self.worst:
            lines.append(f"worst {len(self.worst)} elements:")
            lines.append("index | actual (bits) | expected (bits) | ULP")
            for w in self.worst:
                lines.append(f"{w['index']} | {w['actual']} ({w['actual_bits']}) | {w['expected']} "
                             f"({w['expected_bits']}) | {w['ulp']}")
        return "\n".join(lines)


def _count(value, what):
    """A count option: a non-negative int (2.5 or True is refused, not truncated)."""
    if not is_integer(value) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer, got {value!r}")
    return int(value)


def _as_float(a, dt, what):
    arr = to_numpy(a, what=what)
    if arr.dtype == dt:
        return arr
    if arr.dtype not in SOURCE_DTYPES.values() and arr.dtype not in ML_NARROW_DTYPES:
        raise TypeError(f"{what} must hold float values (got dtype {arr.dtype}); view bit patterns as "
                        f"{dt.name} first")
    with np.errstate(over="ignore", invalid="ignore"):
        conv = arr.astype(dt)
        back = conv.astype(np.float64)
        src = arr.astype(np.float64)
    ok = (back == src) | (np.isnan(back) & np.isnan(src))
    if not ok.all():
        i = int(np.flatnonzero(~ok.reshape(-1))[0])
        raise ValueError(f"{what} has dtype {arr.dtype} and its value {src.reshape(-1)[i]!r} (index "
                         f"{_index_text(i, arr.shape)}) is not a {dt.name} value; compare in {arr.dtype} "
                         f"or pass {dt.name} results")
    return conv


def compare_ulp(actual, expected, dtype, *, max_ulp=0, n_worst=10) -> UlpComparison:
    """Distance in units in the last place of ``dtype`` between two float arrays.

    Parameters
    ----------
    actual, expected : array_like
        Same shape; NumPy/ml_dtypes/torch/JAX arrays.  Each must already be
        of ``dtype`` or hold values exactly representable in it (a float32
        array of bfloat16 results is fine, a float32 GEMM result checked as
        bfloat16 is an error rather than a silent rounding).
    dtype : {"float32", "bfloat16", "float16", "float64"} or dtype
    max_ulp : int, keyword-only
        Largest distance that counts as equal.
    n_worst : int, keyword-only
        Elements listed in the report.

    Returns
    -------
    UlpComparison
        The distance counts consecutive representable values (so +0 and -0
        are 0 apart and max and Inf 1 apart); NaN against NaN is 0, NaN
        against a number is infinitely far.

    Examples
    --------
    >>> import numpy as np
    >>> r = compare_ulp(np.float32([1.0, 1.0000001]), np.float32([1.0, 1.0]), "float32")
    >>> r.exceeding, r.histogram
    (1, {'0': 1, '1': 1})
    """
    key = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    if key not in SOURCE_DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r}; accepted: {', '.join(SOURCE_DTYPES)}")
    if not is_integer(max_ulp) or max_ulp < 0:
        raise ValueError(f"max_ulp must be a non-negative integer, got {max_ulp!r}")
    n_worst = _count(n_worst, "n_worst")
    dt = SOURCE_DTYPES[key]
    a = _as_float(actual, dt, "actual")
    e = _as_float(expected, dt, "expected")
    if a.shape != e.shape:
        raise ValueError(f"shape mismatch: actual {a.shape}, expected {e.shape}")
    nbits = dt.itemsize * 8
    uint = _UINT[dt.itemsize]

    # Distances in unsigned integers: sign-magnitude patterns a, b are |ma - mb| apart on the same
    # side of zero and ma + mb apart across it, below 2**64 for every width (float64 included;
    # through float64 a 1-ULP float64 distance would read as 0 and 300 as 512).
    mask = uint((1 << (nbits - 1)) - 1)
    ua, ue = a.reshape(-1).view(uint), e.reshape(-1).view(uint)
    ma, me = (ua & mask).astype(np.uint64), (ue & mask).astype(np.uint64)
    same_side = (ua >> uint(nbits - 1)) == (ue >> uint(nbits - 1))
    dist = np.where(same_side, np.maximum(ma, me) - np.minimum(ma, me), ma + me)
    af, ef = a.reshape(-1), e.reshape(-1)
    an, en = np.isnan(af.astype(np.float64)), np.isnan(ef.astype(np.float64))
    dist = np.where(an & en, np.uint64(0), dist)
    nan_one = an != en                    # NaN against a number: infinitely far, counted apart
    exceed = nan_one | (~nan_one & (dist > np.uint64(max_ulp)))
    hist = {}
    fin = dist[~nan_one]
    for v in (0, 1, 2):
        c = int(np.count_nonzero(fin == np.uint64(v)))
        if c:
            hist[str(v)] = c
    top = int(fin.max()) if fin.size else 0
    k = 2
    while (1 << (k - 1)) < top and k <= 64:   # buckets (2^(k-1), 2^k]
        lo, hi = np.uint64(1 << (k - 1)), np.uint64(min((1 << k), (1 << 64) - 1))
        c = int(np.count_nonzero((fin > lo) & (fin <= hi)))
        if c:
            hist[f"{(1 << (k - 1)) + 1}-{1 << k}"] = c
        k += 1
    if nan_one.any():
        hist["nan"] = int(nan_one.sum())
    # order: one-sided NaNs first, then by distance (exact integers)
    order = np.lexsort((-np.arange(dist.size), dist, nan_one))[::-1][:n_worst] if dist.size else \
        np.zeros(0, np.int64)
    order = order[nan_one[order] | (dist[order] > 0)]
    worst = []
    abits, ebits = _bits_hex(af[order]), _bits_hex(ef[order])
    for j, i in enumerate(order.tolist()):
        worst.append({"index": _index_text(i, a.shape), "actual": _value_text(af[i]), "actual_bits": abits[j],
                      "expected": _value_text(ef[i]), "expected_bits": ebits[j],
                      "ulp": "nan" if nan_one[i] else int(dist[i])})
    max_distance = float("inf") if nan_one.any() else top
    return UlpComparison(key, tuple(a.shape), int(a.size), int(max_ulp), int(exceed.sum()),
                         max_distance, hist, worst)


def assert_close_ulp(actual, expected, dtype, max_ulp=0, *, n_worst=10):
    """Assert that ``actual`` is within ``max_ulp`` units in the last place of ``expected``.

    For float32/bfloat16/float16 outputs such as :func:`fp8emu.scaled_mm`
    results; see :func:`compare_ulp` for the inputs accepted.

    Raises
    ------
    AssertionError
        With the ULP-distance histogram and the worst elements.

    Examples
    --------
    >>> import numpy as np
    >>> assert_close_ulp(np.float32([1.0, 2.0]), np.float32([1.0, 2.0]), "float32")
    >>> try:
    ...     assert_close_ulp(np.float32([1.0, 2.5]), np.float32([1.0, 2.0]), "bfloat16")
    ... except AssertionError as e:
    ...     print(str(e).splitlines()[0])
    1 of 2 bfloat16 elements differ by more than 0 ULP (largest distance: 32 ULP)
    """
    __tracebackhide__ = True
    res = compare_ulp(actual, expected, dtype, max_ulp=max_ulp, n_worst=n_worst)
    if not res.ok:
        raise AssertionError(str(res))
