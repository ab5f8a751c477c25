"""Rounding modes and the exact rounding core.

The core works on an *exact* description of each finite input value,
``(-1)**neg * m * 2**lsb`` with ``m`` an unsigned 64-bit integer, so it rounds
once, from the exact value, whatever the source type was.  It returns
magnitude-ordered codes of the target :class:`~fp8emu.formats.Format`.

Every special case is handled here in plain sight: ties, the sticky bit,
subnormal targets, overflow by rounding direction, saturation, signed zeros
and the formats without zero (E8M0).

Examples
--------
>>> list(ROUNDING_MODES)[:4]
['rne', 'rna', 'rtz', 'rup']
>>> STOCHASTIC_MODES[0], "satfinite" in SATURATION_MODES
('stochastic', True)
"""

from __future__ import annotations

import numpy as np

from .formats import Format

__all__ = ["ROUNDING_MODES", "DETERMINISTIC_MODES", "STOCHASTIC_MODES", "SATURATION_MODES",
           "P3109_ROUNDING_NAMES", "check_rounding", "check_saturation"]

#: Rounding modes understood by :func:`fp8emu.encode`.
ROUNDING_MODES = {
    "rne": "round to nearest, ties to even (IEEE default)",
    "rna": "round to nearest, ties away from zero",
    "rtz": "round toward zero (truncate)",
    "rup": "round toward +infinity",
    "rdn": "round toward -infinity",
    "rto": "round to odd (truncate, then set the last bit if inexact)",
    "stochastic": "add k random bits to the top k discarded bits; a carry rounds away from zero",
    "stochastic_p3109": "round the discarded fraction to k bits (ties to even), add k random bits; "
                        "a carry rounds away (gfloat Stochastic, its reading of P3109)",
    "stochastic_odd": "as stochastic_p3109 with ties to odd (gfloat StochasticOdd)",
    "stochastic_fast": "round away iff fraction + (2r + 1) / 2**(k+1) >= 1 (gfloat StochasticFast)",
}
#: The stochastic modes (they need random bits: ``rng`` or ``random_bits``).
STOCHASTIC_MODES = ("stochastic", "stochastic_p3109", "stochastic_odd", "stochastic_fast")
DETERMINISTIC_MODES = tuple(m for m in ROUNDING_MODES if m not in STOCHASTIC_MODES)
#: Overflow behaviours accepted as ``encode(..., saturate=...)`` besides True/False (IEEE P3109
#: interim report's saturation modes): "satfinite" = True, "satnone" (the name in report v4.0) and
#: "ovfinf" (its name in v3.x) = False, "satpropagate": finite overflow saturates to +-max, +-Inf
#: inputs stay +-Inf.
SATURATION_MODES = ("satfinite", "satpropagate", "ovfinf", "satnone")
#: The IEEE P3109 interim report v4.0's rounding modes (section 4.7.4) by the names fp8emu gives them.
#: Its stochastic variants, with fraction d of the way to the upper neighbour and N random bits R:
#: A rounds away iff floor(d 2^N) + R >= 2^N, B iff floor(d 2^(N+1)) + 2R + 1 >= 2^(N+1), C iff
#: RNITE(d 2^N) + R >= 2^N.
P3109_ROUNDING_NAMES = {
    "NearestTiesToEven": "rne", "NearestTiesToAway": "rna", "ToOdd": "rto", "TowardPositive": "rup",
    "TowardNegative": "rdn", "TowardZero": "rtz", "StochasticA": "stochastic", "StochasticB": "stochastic_fast",
    "StochasticC": "stochastic_p3109",
}

_U64 = np.uint64


def check_rounding(rounding) -> str:
    """Validate a rounding-mode name and return it.

    Raises
    ------
    ValueError
        If ``rounding`` is not one of :data:`ROUNDING_MODES` (the message
        lists them).

    Examples
    --------
    >>> from fp8emu.rounding import check_rounding
    >>> check_rounding("rne")
    'rne'
    """
    if not isinstance(rounding, str) or rounding not in ROUNDING_MODES:
        raise ValueError(
            f"unknown rounding mode {rounding!r}; valid modes: {', '.join(ROUNDING_MODES)}"
        )
    return rounding


def check_saturation(saturate):
    """Normalise ``saturate``: a bool, or one of :data:`SATURATION_MODES`.

    Returns
    -------
    bool or str
        True (saturate-finite), False (overflow to Inf), or ``"satpropagate"``.

    Examples
    --------
    >>> from fp8emu.rounding import check_saturation
    >>> check_saturation("ovfinf"), check_saturation("satfinite"), check_saturation("satpropagate")
    (False, True, 'satpropagate')
    """
    if isinstance(saturate, (bool, np.bool_)):
        return bool(saturate)
    if isinstance(saturate, str) and saturate in SATURATION_MODES:
        return {"satfinite": True, "ovfinf": False, "satnone": False}.get(saturate, saturate)
    raise TypeError(f"saturate must be a bool or one of {', '.join(SATURATION_MODES)}, "
                    f"got {saturate!r}")


def bit_length(m: np.ndarray) -> np.ndarray:
    """Number of significant bits of each uint64 in ``m`` (0 for 0), as int64."""
    _, bl = np.frexp(m.astype(np.float64))
    bl = np.minimum(bl.astype(np.int64), 64)
    # float64(m) may round up to the next power of two; undo that.
    too_big = (bl > 0) & ((m >> np.maximum(bl - 1, 0).astype(_U64)) == 0)
    return bl - too_big


def _shift_right(m, s):
    """m >> s for uint64 m and any int64 s >= 0 (0 once s >= 64)."""
    out = m >> np.minimum(s, 63).astype(_U64)
    return np.where(s >= 64, _U64(0), out)


def overflow_code(fmt: Format, neg, rounding: str, saturate) -> np.ndarray:
    """Magnitude code (or full NaN code) that an overflowing finite value becomes.

    OCP non-saturating mode with IEEE 754 section 7.4: round-to-nearest and
    stochastic modes overflow to Inf (NaN where the format has no Inf, +-max
    where it has neither); ``rtz`` and ``rto``, ``rdn`` for positive and
    ``rup`` for negative values give +-max.  ``saturate`` always gives +-max.

    IEEE P3109 formats (Inf at the top code, ``inf="top"``) differ for
    ``rto`` in overflow-to-infinity mode: the code after max is Inf, so a
    value above max, truncated to max (even code) and inexact, takes the odd
    neighbour, Inf (the P3109 interim report; fp8emu's OCP formats keep +-max).
    Returns int64 codes *without* the sign bit applied, except for NaN codes,
    which are complete; use together with :func:`finish_codes`.
    """
    neg = np.asarray(neg, dtype=bool)
    rto_max = rounding == "rto" and fmt.inf != "top"
    to_max = np.full(neg.shape, bool(saturate) or rounding == "rtz" or rto_max, dtype=bool)
    if rounding == "rdn":
        to_max |= ~neg
    elif rounding == "rup":
        to_max |= neg
    if fmt.has_inf:
        big = fmt.inf_code
    elif fmt.has_nan:
        big = -1  # marker: NaN, resolved by finish_codes
    else:
        big = fmt.max_code
    return np.where(to_max, np.int64(fmt.max_code), np.int64(big))


def round_exact(neg, m, lsb, fmt: Format, rounding: str, saturate,
                random_bits=None, sr_bits: int = 0) -> np.ndarray:
    """Round exact finite values ``(-1)**neg * m * 2**lsb`` to ``fmt`` codes.

    Parameters
    ----------
    neg : ndarray of bool
        Sign of each value.
    m : ndarray of uint64
        Integer significand (any value, zero allowed).
    lsb : ndarray of int64
        Exponent of the significand's least significant bit.
    fmt : Format
    rounding : str
        One of :data:`ROUNDING_MODES`.
    saturate : bool or "satpropagate"
        Finite overflow to +-max instead of Inf/NaN (both truthy values; they
        differ only for Inf inputs, which this function does not see).
    random_bits : ndarray of uint64, optional
        For ``"stochastic"``: ``sr_bits`` random bits per element.
    sr_bits : int
        Number of random bits (1..32) for stochastic rounding.

    Returns
    -------
    ndarray of uint8
        Codes, with the sign applied and -1 NaN markers resolved.
    """
    m = np.asarray(m, dtype=_U64)
    lsb = np.asarray(lsb, dtype=np.int64)
    neg = np.asarray(neg, dtype=bool)
    is_zero = m == 0

    top = lsb + bit_length(m) - 1                 # exponent of the leading bit
    e_t = np.where(is_zero, fmt.emin, np.maximum(top, fmt.emin))  # exponent of the result's binade
    s = np.where(is_zero, 0, e_t - fmt.mbits - lsb)  # bits of m to discard

    exact = s <= 0
    n = np.where(exact, m << np.minimum(np.maximum(-s, 0), 63).astype(_U64), _shift_right(m, s))
    s_pos = np.maximum(s, 0)
    low_mask = np.where(s_pos >= 64, ~_U64(0), (_U64(1) << np.minimum(s_pos, 63).astype(_U64)) - _U64(1))
    rem = m & low_mask                            # the discarded bits (0 when exact)
    inexact = rem != 0

    code = ((e_t - fmt.emin) << fmt.mbits) + n.astype(np.int64)
    if not fmt.subnormals:
        code -= 1 << fmt.mbits
    if fmt.parity == "significand" and fmt.mbits == 0:
        odd = (n & _U64(1)).astype(bool)
    else:
        odd = (code & 1).astype(bool)

    if rounding in ("rne", "rna"):
        half = _U64(1) << np.clip(s - 1, 0, 63).astype(_U64)
        in_reach = (s >= 1) & (s <= 64)           # beyond 64 bits rem < half always
        above = in_reach & (rem > half)
        tie = in_reach & (rem == half)
        inc = above | (tie & odd) if rounding == "rne" else above | tie
    elif rounding == "rtz":
        inc = np.zeros(code.shape, dtype=bool)
    elif rounding == "rup":
        inc = inexact & ~neg
    elif rounding == "rdn":
        inc = inexact & neg
    elif rounding == "rto":
        inc = inexact & ~odd
    elif rounding in STOCHASTIC_MODES:
        inc = _stochastic_increment(rounding, rem, s_pos, np.asarray(random_bits, dtype=_U64), int(sr_bits))
        inc &= inexact
    else:  # pragma: no cover - guarded by check_rounding
        raise ValueError(rounding)
    code = code + inc

    if not fmt.subnormals:
        code = np.maximum(code, 0)                # below the smallest value: the smallest value
    over = code > fmt.max_code
    if over.any():
        code = np.where(over, overflow_code(fmt, neg, rounding, saturate), code)
    return finish_codes(code, neg, fmt, zero_input=is_zero)


def _stochastic_increment(rounding, rem, s, r, k):
    """Whether stochastic rounding rounds away, from the discarded bits ``rem`` (``s`` of them).

    With ``f = rem / 2**s`` the discarded fraction and ``r`` the k random bits:

    * ``stochastic``: ``floor(f * 2**k) + r >= 2**k`` (gfloat ``StochasticFastest``);
    * ``stochastic_p3109``: ``rne(f * 2**k) + r >= 2**k``, ``f * 2**k`` rounded to an
      integer with ties to even (gfloat ``Stochastic``);
    * ``stochastic_odd``: the same with ties to odd (gfloat ``StochasticOdd``);
    * ``stochastic_fast``: ``f + (2r + 1) / 2**(k+1) >= 1`` (gfloat ``StochasticFast``).

    All comparisons are done on integers, exactly.
    """
    if rounding == "stochastic_fast":
        t = (_U64(1) << _U64(k + 1)) - (r << _U64(1)) - _U64(1)          # odd, >= 1
        j = s - (k + 1)
        # f >= t / 2**(k+1)  <=>  rem >= t * 2**j  <=>  floor(rem / 2**j) >= t (j >= 0)
        big = _shift_right(rem, np.maximum(j, 0)) >= t
        small = (rem << np.clip(-j, 0, 63).astype(_U64)) >= t               # rem < 2**s, no overflow
        return np.where(j >= 0, big, small)
    down = _shift_right(rem, np.maximum(s - k, 0))                        # floor(f * 2**k), s >= k
    up = rem << np.clip(k - s, 0, 63).astype(_U64)                        # exact when s < k
    top_k = np.where(s >= k, down, up)
    if rounding in ("stochastic_p3109", "stochastic_odd"):
        j = s - k                                                          # bits below the k kept
        in_reach = (j >= 1) & (j <= 64)
        low_mask = np.where(j >= 64, ~_U64(0), (_U64(1) << np.clip(j, 0, 63).astype(_U64)) - _U64(1))
        low = rem & low_mask
        half = _U64(1) << np.clip(j - 1, 0, 63).astype(_U64)
        odd = (top_k & _U64(1)).astype(bool)
        tie_up = odd if rounding == "stochastic_p3109" else ~odd
        top_k = top_k + (in_reach & ((low > half) | ((low == half) & tie_up))).astype(_U64)
    return (top_k + r) >= (_U64(1) << _U64(k))


def finish_codes(code, neg, fmt: Format, zero_input=None) -> np.ndarray:
    """Apply signs and NaN markers to int64 magnitude codes; return uint8 codes.

    ``code == -1`` marks NaN.  Zero results take the input's sign where the
    format has -0.  For unsigned formats every negative non-zero input (and,
    without a zero, every zero input) becomes NaN.
    """
    code = np.asarray(code, dtype=np.int64)
    neg = np.asarray(neg, dtype=bool)
    is_nan = code < 0
    if fmt.signed:
        signed = neg & ~is_nan
        if not fmt.has_negative_zero:
            signed &= code != 0
        out = np.where(signed, code | fmt.sign_bit, code)
    else:
        out = code
        if not fmt.has_zero:
            bad = neg if zero_input is None else neg | zero_input
        elif zero_input is not None:
            # a negative non-zero input is NaN even where it rounds to zero (there is no -0)
            bad = neg & ~np.asarray(zero_input, dtype=bool)
        else:
            bad = neg & (code != 0)
        is_nan = is_nan | bad
    out = np.where(is_nan, nan_codes(fmt, neg), out)
    return out.astype(np.uint8)


def nan_codes(fmt: Format, neg) -> np.ndarray:
    """The canonical NaN code for each sign in ``neg``.

    Formats with signed NaNs keep the sign; formats without NaN give +max.
    """
    neg = np.asarray(neg, dtype=bool)
    if not fmt.has_nan:
        return np.full(neg.shape, fmt.max_code, dtype=np.int64)
    if fmt.has_signed_nan:
        return np.where(neg, fmt.nan_code | fmt.sign_bit, fmt.nan_code).astype(np.int64)
    return np.full(neg.shape, fmt.nan_code, dtype=np.int64)
