"""Encode, decode and quantize: the bit-exact codec.

``encode`` rounds each input *once*, from its exact value, to a narrow format
and returns the codes; ``decode`` maps codes back to values; ``quantize`` is
``decode(encode(x))``.

Implementation
--------------
Every finite input is described exactly as ``(-1)**s * m * 2**e`` and rounded
by :func:`fp8emu.rounding.round_exact`; where that is exact, encoding is a
look-up in a table built by the same core (:mod:`fp8emu.tables`: every 16-bit
pattern, float32 by its upper 16 bits and a sticky bit, float64 by its upper
19 bits and a sticky bit, so float64 is rounded once, never through float32).
A profile other than ``ocp`` is one look-up in that profile's table
(:meth:`fp8emu.profiles.Profile.encode_table`).  Stochastic
rounding adds the random bits to the bit pattern below the rounding position
and truncates through a table (see :func:`_sr_range`); elements whose result
code could come from a zero, subnormal or Inf/NaN pattern (:func:`_sr_trusted`)
go through the exact core.  The tables are built by the same exact core, so they
agree with it by construction, and the tests compare every path with an
independent rational oracle.

Throughput comes from working in cache-sized chunks with preallocated
buffers and in-place ufuncs (``out=``), so encoding needs only the output
array and a few hundred kB beyond the input; ``benchmarks/bench_codec.py``
measures it against ml_dtypes.
"""

from __future__ import annotations

import functools
import sys
from typing import NamedTuple

import numpy as np

from . import parallel
from . import tables as _tables
from .formats import get_format
from .interop import byte_codes, narrow_codes, source_array
from .profiles import get_profile
from .random_bits import draw_bits, random_source
from .rounding import DETERMINISTIC_MODES, STOCHASTIC_MODES, check_rounding, check_saturation, finish_codes
from .tables import (
    CHUNK, DECODE_DTYPES, SOURCE_DTYPES, cached_encode_table, decode_dtype, decode_take, encode_exact, encode_table,
    encoder_plan, lookup, source_name, sticky16_ok, table_ok,
)

__all__ = ["encode", "decode", "quantize", "as_ml_dtypes"]

_U64 = np.uint64
#: A float64 table (2**20 entries, ~0.2 s to build) is built for a call of at least this
#: many elements, or once small calls with the same key have been seen _SMALL_CALLS times;
#: until then the exact core encodes them (well under a millisecond for a few elements).
_TABLE_MIN = 1 << 12
_SMALL_CALLS = 64
_small_calls = {}


def _worth_building(fmt, src, rounding, saturate, n):
    """Whether to build a missing encode table now (always for 16-bit and float32 sources: ~10 ms)."""
    if src != "float64" or n >= _TABLE_MIN:
        return True
    key = (fmt, rounding, saturate)
    seen = _small_calls.get(key, 0) + 1
    if len(_small_calls) > 4096:
        _small_calls.clear()
    _small_calls[key] = seen
    return seen > _SMALL_CALLS


_VIA = {name: SOURCE_DTYPES[name] for name in ("float32", "float16", "bfloat16")}

# (uint view, exponent bits, mantissa bits, bits below the table index) of the pattern
# types stochastic rounding works on, and the integer/narrow sources widened to them exactly.
_SR_LAYOUT = {
    np.dtype(np.float16): (np.uint16, 5, 10, 0),
    SOURCE_DTYPES["bfloat16"]: (np.uint16, 8, 7, 0),
    np.dtype(np.float32): (np.uint32, 8, 23, 16),
    np.dtype(np.float64): (np.uint64, 11, 52, 45),
}
_TO_F32 = frozenset(np.dtype(t) for t in (np.bool_, np.int8, np.uint8, np.int16, np.uint16))
_TO_F64 = frozenset(np.dtype(t) for t in (np.int32, np.uint32, np.int64, np.uint64))


class _SRPlan(NamedTuple):
    """How one source dtype is rounded stochastically by pattern addition (see :func:`_sr_range`)."""

    work: np.dtype        # float type whose bit patterns are added to (exact widening of the source)
    uint: type
    table: np.ndarray     # stochastic rounding with zero random bits, indexed by pattern >> ishift
    s0: int               # discarded bits of a pattern in the target's normal range
    ishift: int
    mag_mask: np.uint8    # the code bits below the sign bit (all of them for unsigned formats)
    trust_lo: np.uint8    # codes whose magnitude lies in [trust_lo, trust_lo + trust_span] are
    trust_span: np.uint8  # exact results (see :func:`_sr_trusted`)
    big: bool             # 64-bit integers: magnitudes >= 2**53 are not exact in float64


def _sr_plan(fmt, dt, saturate, n):
    """A plan for stochastic rounding of ``n`` inputs of ``dt`` to ``fmt``, or None (exact core only).

    A table not built yet is built only when :func:`_worth_building` says so.
    """
    if dt in _SR_LAYOUT:
        work = dt
    elif dt in _TO_F32 or dt.kind == "V":   # ml_dtypes' narrow floats widen exactly
        work = np.dtype(np.float32)
    elif dt in _TO_F64:
        work = np.dtype(np.float64)
    else:
        return None
    if not table_ok(fmt, work) and work == np.float32 and table_ok(fmt, np.float64):
        work = np.dtype(np.float64)
    uint, eb, mb, ishift = _SR_LAYOUT[work]
    s0 = mb - fmt.mbits
    if not table_ok(fmt, work) or s0 < max(ishift, 1):
        return None
    src = source_name(work)
    table = cached_encode_table(fmt, src, "sr0", saturate)
    if table is None:
        if not _worth_building(fmt, src, "sr0", saturate, n):
            return None
        table = encode_table(fmt, src, "sr0", saturate)
    trust = _sr_trusted(fmt, work, check_saturation(saturate))
    if trust is None:
        return None
    return _SRPlan(work, uint, trust[0], s0, ishift, *trust[1:], dt.itemsize == 8 and dt.kind in "iu")


def _window_any(mask, w):
    """``out[j] = mask[j - w .. j].any()``, indices taken modulo ``mask.size``."""
    m = mask.size
    run = np.concatenate([mask[m - w:], mask]).astype(np.int64).cumsum()
    return run[w:] - np.concatenate([[0], run[:m - 1]]) > 0


@functools.lru_cache(maxsize=64)
def _sr_trusted(fmt, work, saturate):
    """(table, mag_mask, lo, span) for :func:`_sr_range`: its table, and the codes it may trust.

    Pattern addition is exact for inputs in the target's normal range below
    the source's two top exponent fields (there a carry cannot reach an
    Inf/NaN pattern).  Rather than testing every input's exponent (three
    passes over 4- or 8-byte patterns), the result codes are tested (three
    passes over bytes): a code whose magnitude lies in [lo, lo + span] proves
    its result exact.  A sum with index j comes from a pattern whose index
    lies in j - w .. j (the added bits are below 2**s0; NaN patterns wrap
    round to small ones).  A code is not trusted if a sum from a pattern
    outside that range can give it, unless that pattern's exact result is the
    same code for every draw (NaNs, and values whose truncation already
    overflows): so overflow codes stay trusted, while the inputs of zero, the
    subnormals and the smallest normal are held for :func:`_sr_low` (or the
    exact core).  None if no code qualifies.
    """
    uint, eb, mb, ishift = _SR_LAYOUT[work]
    s0 = mb - fmt.mbits
    # the sticky half of the table does not matter to truncation
    table = encode_table(fmt, source_name(work), "sr0", saturate)[: 1 << (8 * work.itemsize - ishift)]
    m = table.size
    emask = (1 << eb) - 1
    w = -(-((1 << s0) - 1) >> ishift)
    # Sums from the top finite field can carry into the Inf/NaN field; there (and at Inf's own
    # index, which holds NaNs too where the index drops low bits) the table is made to give one
    # code that the test below cannot trust (+0's), so that those sums, and the Inf and NaN
    # inputs of those indices, take the exact core while overflow codes stay trusted.
    poison = (np.array([emask << (mb - ishift), (emask << (mb - ishift)) | (m >> 1)])[:, None]
              + np.arange(min(w + 1, 1 << (mb - ishift)))).ravel()   # within that field
    table = table.copy()
    table[poison] = table[0]
    table.setflags(write=False)
    e_lo, e_hi = max(1, (1 << (eb - 1)) - 1 + fmt.emin), emask - 2
    ef = (np.arange(m, dtype=_U64) << _U64(ishift) >> _U64(mb)) & _U64(emask)
    inside = (ef >= e_lo) & (ef <= e_hi)
    # Of the top two fields, the indices whose every pattern gives one code for any draw: the
    # smallest pattern with no increment and the largest with the largest increment agree
    # (stochastic rounding is monotone in the value and in the draw; 32 bits of 1s increment
    # wherever any k-bit draw does).
    top = np.flatnonzero(ef > e_hi).astype(_U64)
    lo_pat = (top << _U64(ishift)).astype(uint)
    hi_pat = lo_pat | uint((1 << ishift) - 1)
    # (tables' exact core, as the table builds use it: the codec's name stands for encodes of inputs)
    c0 = _tables.encode_exact(lo_pat.view(work), fmt, "stochastic", saturate, np.zeros(top.size, _U64), 32)
    c1 = _tables.encode_exact(hi_pat.view(work), fmt, "stochastic", saturate,
                              np.full(top.size, 2 ** 32 - 1, _U64), 32)
    same = top[c0 == c1].astype(np.intp)
    fixed = np.zeros(m, bool)
    fixed[same] = True
    exact = np.zeros(m, np.uint8)
    exact[same] = c0[c0 == c1]                    # (not the table's code where it was replaced)
    untrusted = np.zeros(256, bool)
    untrusted[table[_window_any(~inside & ~fixed, w)]] = True
    for c in np.unique(exact[fixed]):
        reach = _window_any(fixed & (exact == c), w)
        untrusted[table[reach & (table != c)]] = True
    if fmt.signed:
        mag_mask = fmt.sign_bit - 1
        mags = np.arange(fmt.sign_bit)
        ok = ~(untrusted[mags] | untrusted[mags | fmt.sign_bit])
    else:
        mag_mask = 0xFF
        ok = ~untrusted
    # of the runs of trusted magnitudes (with either sign), the one that the most in-range
    # sums give (not merely the longest: codes that no sum gives at all qualify too)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], ok.astype(np.int8), [0]])))
    if not edges.size:
        return None
    starts, stops = edges[0::2], edges[1::2]
    hits = np.concatenate([[0], np.bincount(table[inside] & mag_mask, minlength=ok.size).cumsum()])
    best = int(np.argmax(hits[stops] - hits[starts]))
    return table, np.uint8(mag_mask), np.uint8(starts[best]), np.uint8(stops[best] - 1 - starts[best])


def _sr_range(src, r, out, plan, fmt, saturate, k, draw=None):
    """Stochastic rounding of one range by integer addition on the bit patterns.

    Where the result lies in the target's normal range, the discarded part is
    the lowest ``s0 = mantissa bits - fmt.mbits`` bits of the pattern, so
    adding the k random bits aligned below bit ``s0`` (``r << (s0 - k)``, or
    ``r >> (k - s0)`` when ``k > s0``, which gives the same carry since the
    discarded part is an integer) carries into bit ``s0`` exactly when the
    exact core increments; a carry out of the mantissa moves to the next
    binade as it should.  The truncated sum is then looked up in a table of
    stochastic rounding with zero random bits (truncation with overflow to
    Inf/NaN or max).  Elements whose code may come from outside that range
    (:func:`_sr_trusted`: zeros, target subnormals and the smallest normal,
    sums that reach Inf/NaN patterns), and 64-bit integers beyond 2**53, are
    held with their own random bits and rounded by :func:`_sr_low` (those
    below ``2**(emin + 1)``) or the exact core.  Sources other than the
    pattern types are first widened exactly (float16 and bfloat16 patterns
    are used as they are).
    ``r`` holds the k-bit draws of the range, in order; or ``r`` is None and
    ``draw(m)`` returns the next ``m`` draws (called with even ``m`` but for
    the last step, so the steps continue one stream).
    """
    uint = plan.uint
    s0 = plan.s0
    step = CHUNK * 2
    nb = min(step, src.size)
    wide = np.dtype(uint).itemsize >= 4
    v_buf = np.empty(nb, uint)                    # sums wrap only for NaN/Inf patterns (left to the exact core)
    t_buf = np.empty(nb, np.uint8)
    b_buf = np.empty(nb, bool)
    w_buf = np.empty(nb, plan.work) if src.dtype != plan.work else None
    signed = plan.mag_mask != 0xFF
    low_ok = fmt.signed and fmt.subnormals and fmt.has_zero and (2 << fmt.mbits) <= fmt.max_code
    # Elements left to the exact core are gathered over steps: one call per CHUNK of them
    # rather than one (~0.15 ms even for a handful) per step.
    held, n_held = [], 0

    def flush():
        nonlocal n_held
        if held:
            sel = np.concatenate([h[0] for h in held])
            bits = np.concatenate([h[1] for h in held]).astype(_U64)
            xs = src[sel]
            if low_ok:
                sel, bits, xs = _sr_low(xs, bits, sel, out, fmt, k)
            if sel.size:
                out[sel] = encode_exact(xs, fmt, "stochastic", saturate, bits, k)
            held.clear()
            n_held = 0

    for i in range(0, src.size, step):
        xs = src[i:i + step]
        n = xs.size
        if w_buf is not None:
            w = w_buf[:n]
            np.copyto(w, xs, casting="unsafe")
        else:
            w = xs
        u = w.view(uint)
        ri = r[i:i + n] if draw is None else draw(n)
        if ri.dtype != np.uint32:                 # caller's bits of any integer type (all < 2**32)
            ri = ri.astype(np.uint32)
        v, t = v_buf[:n], t_buf[:n]
        if s0 >= k:
            np.left_shift(ri, uint(s0 - k) if wide else np.uint32(s0 - k), out=v, casting="unsafe")
        else:
            np.right_shift(ri, np.uint32(k - s0), out=v, casting="unsafe")
        np.add(v, u, out=v, casting="unsafe")
        if plan.ishift:
            np.right_shift(v, uint(plan.ishift), out=v)
        o = out[i:i + n]
        # mode='wrap' (every index is in range): NumPy's wrap loop is faster than its checked one
        plan.table.take(v.view(np.int64) if uint is np.uint64 else v, out=o, mode="wrap")
        if signed:
            np.bitwise_and(o, plan.mag_mask, out=t)
            t -= plan.trust_lo                    # wraps for magnitudes below trust_lo
        else:
            np.subtract(o, plan.trust_lo, out=t)
        bad = b_buf[:n]
        np.greater(t, plan.trust_span, out=bad)
        if plan.big:
            bad |= np.abs(w) >= 2.0 ** 53
        sel = np.flatnonzero(bad)                 # ~0.2 % of Gaussian data
        if sel.size:
            held.append((sel + i, ri[sel]))
            n_held += sel.size
            if n_held >= CHUNK:
                flush()
    flush()


def _sr_low(xs, bits, sel, out, fmt, k):
    """Round the held elements below ``2**(emin + 1)`` (zeros, target subnormals, the smallest
    normal binade) into ``out[sel]``; return the others' (sel, bits, xs) for the exact core.

    Those results share one quantum ``q = 2**(emin - mbits)`` and their codes are ``floor(|x| / q)``
    plus the increment, so ``(floor(|x| * 2**k / q) + r) >> k`` is the code: the discarded
    fraction truncated to k bits plus the draw carries exactly when the exact core increments.
    In float64 the product is exact (a power of two; it stays below 2**39) and so is its floor.
    The signs, -0 and the formats without -0 are applied as the exact core applies them.
    """
    with np.errstate(invalid="ignore"):           # ml_dtypes' NaNs warn when cast; they stay NaN
        xf = xs.astype(np.float64)                # exact here: larger integers are not below the bound
    a = np.abs(xf)
    low = a < 2.0 ** (fmt.emin + 1)               # False for NaN
    if not low.any():
        return sel, bits, xs
    t = np.floor(a[low] * 2.0 ** (k + fmt.mbits - fmt.emin)).astype(_U64)
    code = ((t + bits[low]) >> _U64(k)).astype(np.int64)
    out[sel[low]] = finish_codes(code, np.signbit(xf[low]), fmt)
    keep = ~low
    return sel[keep], bits[keep], xs[keep]


def _exact_range(src, bits, out, fmt, rounding, saturate, k):
    """The exact core over one range in chunks; ``bits`` are that range's draws (or None)."""
    for i in range(0, src.size, CHUNK):
        b = None if bits is None else bits[i:i + CHUNK].astype(_U64)
        out[i:i + CHUNK] = encode_exact(src[i:i + CHUNK], fmt, rounding, saturate, b, k)


# Small deterministic calls skip the general path: (Format, rounding, saturate, dtype) ->
# a function of the input array, registered once the general path has used that table.
_FAST = {}
_FAST_MAX = 4096


def _remember_fast(fmt, rounding, saturate, dt, table):
    key = (fmt, rounding, saturate, dt)
    if key in _FAST:
        return
    if dt.itemsize == 2:
        fn = lambda x: table.take(x.view(np.uint16))   # noqa: E731 - every pattern is an index
    elif sticky16_ok(fmt, dt):
        # Bit 16 lies below the rounding bit of every float32 input, so it is itself only a
        # sticky bit: OR-ing "lower half non-zero" into it makes the upper half the whole index.
        half = table[: 1 << 16]
        low, s16 = np.uint32(0xFFFF), np.uint32(16)
        little = sys.byteorder == "little"

        def fn(x):
            if little and x.flags.c_contiguous:
                # the same index from the two 16-bit halves: two operations instead of four
                h = x.view(np.uint16)
                return half.take(h[..., 1::2] | (h[..., 0::2] != 0))
            u = x.view(np.uint32)
            v = u & low
            v += low                               # bit 16 set iff the lower half is non-zero
            v |= u
            v >>= s16
            return half.take(v)
    elif dt == np.float64 and fmt.mbits <= 5:
        # the same for float64: bit 45 (the lowest of the 19-bit index) is only a sticky bit
        half = table[: 1 << 19]
        low, s45 = np.uint64((1 << 45) - 1), np.uint64(45)

        def fn(x):
            u = x.view(np.uint64)
            v = u & low
            v += low                               # bit 45 set iff the low 45 bits are non-zero
            v |= u
            v >>= s45
            return half.take(v.view(np.int64))
    elif dt == np.float32 and sys.byteorder == "little":
        pairs = table.reshape(2, 1 << 16)          # [sticky, upper 16 bits]

        def fn(x):
            if not x.flags.c_contiguous:
                return table.take(_f32_index(x))
            h = x.view(np.uint16)
            return pairs[(h[..., 0::2] != 0).view(np.uint8), h[..., 1::2]]
    else:
        return
    if len(_FAST) >= _FAST_MAX:
        _FAST.clear()
    _FAST[key] = fn


def _f32_index(x):
    u = x.view(np.uint32)
    return (u >> np.uint32(16)) | (((u & np.uint32(0xFFFF)) != 0).astype(np.uint32) << np.uint32(16))


# ----------------------------------------------------------------------------- public API
def encode(x, fmt, *, rounding="rne", saturate=None, rng=None, sr_bits=None,
           random_bits=None, via=None, profile=None, threads=None) -> np.ndarray:
    """Round values to a narrow format and return their codes.

    Each value is rounded once, from its exact value (float64 and integer
    inputs are not first rounded to float32).

    Parameters
    ----------
    x : array_like
        bool, integer, float16, bfloat16, float32 or float64 values (or
        ml_dtypes' narrow floats), or any object exposing ``__array__``.
        Never modified.
    fmt : str or Format
        Target format (see :func:`fp8emu.format_names`).
    rounding : str, keyword-only
        ``"rne"``, ``"rna"``, ``"rtz"``, ``"rup"``, ``"rdn"``, ``"rto"`` or a
        stochastic mode (``"stochastic"``, ``"stochastic_p3109"``,
        ``"stochastic_odd"``, ``"stochastic_fast"``); see
        :data:`fp8emu.rounding.ROUNDING_MODES`.
    saturate : bool or {"satfinite", "satpropagate", "satnone", "ovfinf"}, keyword-only
        Not given (None) means False, or the profile's own saturation.
        If True (``"satfinite"``), overflows and +-Inf become +-max (NaN stays
        NaN).  If False (``"satnone"``, P3109 v3's ``"ovfinf"``; OCP non-saturating mode with IEEE 754
        section 7.4), overflow gives +-Inf, or NaN where the format has no Inf,
        except that ``rtz``/``rto``, ``rdn`` for positive and ``rup`` for
        negative values give +-max (for the P3109 formats ``rto`` gives Inf,
        as P3109 says); formats with neither Inf nor NaN (FP6, FP4) always
        saturate.  ``"satpropagate"`` (P3109): finite overflows give +-max,
        +-Inf inputs keep what ``saturate=False`` gives them.
    rng : numpy.random.Generator or int, keyword-only
        Randomness for stochastic rounding.  Bits are drawn as
        ``rng.integers(0, 2**sr_bits, size, dtype=np.uint64)`` in C order.
    sr_bits : int, keyword-only
        Number k of random bits (1..32) for stochastic rounding; defaults to
        the width of ``random_bits``' dtype, else 32.  The k bits are added,
        as an integer, to the top k discarded bits of the exact magnitude; a
        carry out rounds away from zero.
    random_bits : array_like of unsigned int, keyword-only
        Explicit random bits (broadcast to ``x``), each in ``[0, 2**k)``.
    via : {None, "float32", "float16", "bfloat16"}, keyword-only
        Round to this type first (NumPy/ml_dtypes ``astype``), reproducing the
        double rounding of casts that go through an intermediate type.
    profile : str, keyword-only
        Reproduce a GPU or library code path exactly (see
        :func:`fp8emu.profile_names`); ``None`` or ``"ocp"`` is the spec.
        A profile fixes its saturation: an explicit ``saturate`` that
        contradicts it is a ValueError naming the profile's counterpart.
    threads : int, keyword-only
        Threads to split the work over; default :func:`fp8emu.get_threads`
        for inputs of at least :data:`fp8emu.parallel.MIN_PARALLEL` elements,
        else 1.  The result does not depend on it (random bits are drawn in
        the same order).

    Returns
    -------
    numpy.ndarray of uint8
        Codes, same shape as ``x`` (FP6/FP4 codes in the low bits).

    Notes
    -----
    NaN inputs give the format's canonical NaN (``Format.nan_code``, with the
    sign kept where NaNs are signed); formats without NaN give ``+max``.  -0
    and negative values that round to zero give -0 where the format has it,
    else +0.  For unsigned E8M0, zero and negative inputs give NaN and
    positive values below ``2**-127`` give ``2**-127``.

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> fp8emu.encode(np.array([1.0, 0.3, 500.0]), "e4m3fn").tolist()
    [56, 42, 127]
    >>> fp8emu.encode(np.array([500.0]), "e4m3fn", saturate=True).tolist()
    [126]
    >>> fp8emu.encode(np.float64(1.0625), "e4m3fn", rounding="rup").tolist()
    57
    """
    if (type(x) is np.ndarray and rng is random_bits is sr_bits is via is profile is None
            and 0 < x.ndim and x.size <= CHUNK and (saturate is None or saturate is False or saturate is True)
            and type(rounding) is str
            and (threads is None or type(threads) is int and 0 < threads <= parallel.max_threads())):
        # Small calls with plain options: one dict look-up, then the table (see _remember_fast).
        fast = _FAST.get((get_format(fmt), rounding, saturate is True, x.dtype))
        if fast is not None:
            return fast(x)
    fmt = get_format(fmt)
    prof = get_profile(profile)
    rounding = check_rounding(rounding)
    saturate = None if saturate is None else check_saturation(saturate)
    arr = source_array(x)
    if not prof.is_spec:
        prof.check_options(fmt, rounding, saturate=saturate, via=via, stochastic=(
            rounding in STOCHASTIC_MODES or rng is not None or sr_bits is not None or random_bits is not None))
        return _encode_profile(arr, fmt, prof, rounding, threads)
    if saturate is None:
        saturate = False
    k, rb, gen = random_source(rounding, rng, sr_bits, random_bits, arr.shape)
    if via is not None:
        if via not in _VIA:
            raise ValueError(f"unknown via {via!r}; valid: None, {', '.join(_VIA)}")
        with np.errstate(over="ignore", invalid="ignore"):   # overflow to Inf is the intended rounding
            arr = arr.astype(_VIA[via])
    flat = np.ascontiguousarray(arr).reshape(-1)
    out = np.empty(flat.shape, dtype=np.uint8)
    rb_flat = None if rb is None else rb.reshape(-1) if rb.flags.c_contiguous else np.ascontiguousarray(rb).reshape(-1)

    _encode_flat(flat, out, fmt, rounding, saturate, k, rb_flat, gen,
                 threads=parallel.resolve_threads(threads, flat.size))
    return out.reshape(arr.shape)


def encode_into(flat, out, fmt, rounding="rne", saturate=True):
    """``out[:] = encode(flat, fmt, rounding=rounding, saturate=saturate)`` on one thread, for callers
    (the scaling recipes' fused chunks) that already hold a checked Format, a deterministic
    rounding mode and 1-D contiguous arrays: no option checks, no fresh output array.

    Examples
    --------
    >>> out = np.empty(2, np.uint8)
    >>> encode_into(np.array([1.0, 500.0]), out, get_format("e4m3fn"))
    >>> out.tolist()
    [56, 126]
    """
    _encode_flat(flat, out, fmt, rounding, saturate, 0, None, None, threads=1)


def _encode_profile(arr, fmt, prof, rounding, threads=None):
    """Encode under a fixed code path: one look-up in the profile's table."""
    if prof.versions and fmt.ml_dtype is not None and arr.dtype == fmt.ml_dtype:
        # A library's cast of an array to its own type is the identity: ml_dtypes' astype (and ONNX's
        # Cast, torch's .to, JAX's astype) keep every code, NaN payloads included.
        return arr.view(np.uint8).copy()
    arr = prof.source(arr, fmt, rounding)
    table = prof.encode_table(fmt, source_name(arr.dtype), rounding)
    flat = np.ascontiguousarray(arr).reshape(-1)
    out = np.empty(flat.shape, dtype=np.uint8)
    nt = parallel.resolve_threads(threads, flat.size)
    parallel.run(lambda a, b: lookup(flat[a:b], out[a:b], table), parallel.split(0, flat.size, nt, CHUNK), nt)
    return out.reshape(arr.shape)


def _encode_flat(flat, out, fmt, rounding, saturate, k, rb_flat, gen, fast=True, threads=1):
    """Encode a contiguous 1-D array into ``out``, choosing the fastest exact path.

    The work is split into contiguous ranges on ``threads`` threads; every
    range is computed as the single-thread path computes it.  With ``rng``,
    the random bits are drawn in order on the calling thread, one block
    ahead of the threads working on the previous block, so the stream is
    that of one ``rng.integers`` call over the whole array.
    """
    n = flat.size
    if not n:
        return
    dt = flat.dtype
    if rounding in DETERMINISTIC_MODES:
        # one question to tables: a ready encoder, or None (no table applies, or not worth building yet)
        plan = encoder_plan(fmt, dt, rounding, saturate,
                            build=lambda src: _worth_building(fmt, src, rounding, saturate, n)) if fast else None
        if plan is not None:
            _remember_fast(fmt, rounding, saturate, dt, plan.table)
            work = lambda a, b: plan(flat[a:b], out[a:b])   # noqa: E731
        else:
            work = lambda a, b: _exact_range(flat[a:b], None, out[a:b], fmt, rounding, saturate, 0)  # noqa: E731
        parallel.run(work, parallel.split(0, n, threads, CHUNK), threads)
        return
    # the pattern addition is plain stochastic rounding; the other stochastic modes use the exact core
    plan = _sr_plan(fmt, dt, saturate, n) if fast and rounding == "stochastic" else None

    def work_on(bits, a0):
        def work(a, b):
            r = bits[a - a0:b - a0]
            if plan is None:
                _exact_range(flat[a:b], r, out[a:b], fmt, rounding, saturate, k)
            else:
                _sr_range(flat[a:b], r, out[a:b], plan, fmt, saturate, k)
        return work

    if rb_flat is not None:
        parallel.run(work_on(rb_flat, 0), parallel.split(0, n, threads, CHUNK), threads)
        return
    if threads == 1 and plan is not None:
        # one pass over the whole array, drawing each step's bits as it goes
        _sr_range(flat, None, out, plan, fmt, saturate, k, draw=lambda m: draw_bits(gen, k, m))
        return
    # Draw a block's bits (an even count, so blocks continue one stream) while the
    # threads work on the previous block.
    block = CHUNK * 2 * (8 if threads > 1 else 1) * threads
    pending = []
    pool = parallel.executor(threads) if threads > 1 else None
    for a0 in range(0, n, block):
        b0 = min(n, a0 + block)
        bits = draw_bits(gen, k, b0 - a0)
        ranges = parallel.split(a0, b0, threads, CHUNK)
        if pool is None:
            work_on(bits, a0)(a0, b0)
            continue
        submitted = [pool.submit(work_on(bits, a0), a, b) for a, b in ranges]
        for f in pending:
            f.result()
        pending = submitted
    for f in pending:
        f.result()


def decode(codes, fmt, *, dtype=np.float32, profile=None, threads=None) -> np.ndarray:
    """Values of narrow-format codes.

    Parameters
    ----------
    codes : array_like of unsigned int, or an ml_dtypes array of ``fmt``
        Codes (FP6/FP4 in the low bits).
    fmt : str or Format
    dtype : {float16, bfloat16, float32, float64}, keyword-only
        Output type.  Values are converted from exact float64 values with
        round-to-nearest-even (only E8M0 and E5M2 extremes can fall outside
        float16 or need rounding).
    profile : str, keyword-only
        GPU decoders give their own NaN bit patterns (see :func:`fp8emu.profile_names`).
    threads : int, keyword-only
        Threads to split the work over (as for :func:`encode`).

    Returns
    -------
    numpy.ndarray
        Values, same shape as ``codes``.

    Examples
    --------
    >>> import fp8emu
    >>> fp8emu.decode([0x38, 0x7E, 0x7F], "e4m3fn").tolist()
    [1.0, 448.0, nan]
    """
    fmt = get_format(fmt)
    prof = get_profile(profile)
    dt = decode_dtype(dtype)
    if isinstance(codes, (list, tuple)) and np.size(codes) == 0:
        codes = np.zeros(np.shape(codes), np.uint8)   # NumPy would make an empty list float64
    c = narrow_codes(codes, fmt)
    # A 0-d input gives a 0-d array, as encode does (np.take would return a scalar).
    return np.asarray(decode_take(prof.decode_table(fmt, dt), c, parallel.resolve_threads(threads, c.size)))


def quantize(x, fmt, **encode_options) -> np.ndarray:
    """Round ``x`` to ``fmt`` and return the values: ``decode(encode(x))``.

    The result has ``x``'s float dtype (float64 for integer and bool
    inputs, float32 for ml_dtypes' narrow float inputs).

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> fp8emu.quantize(np.array([0.3, 1000.0], np.float32), "e5m2").tolist()
    [0.3125, 1024.0]
    """
    arr = source_array(x)
    if arr.dtype in DECODE_DTYPES:
        dt = arr.dtype
    elif arr.dtype.kind in "biu":
        dt = np.dtype(np.float64)
    else:   # ml_dtypes' narrow floats, the only other types source_array accepts (their kind is "f" or "V")
        dt = np.dtype(np.float32)
    return decode(encode(arr, fmt, **encode_options), fmt, dtype=dt, profile=encode_options.get("profile"),
                  threads=encode_options.get("threads"))


def as_ml_dtypes(codes, fmt) -> np.ndarray:
    """Zero-copy view of uint8 codes as the matching ml_dtypes array.

    Raises
    ------
    ValueError
        If ml_dtypes has no type for ``fmt``.

    Examples
    --------
    >>> import fp8emu
    >>> c = fp8emu.encode([1.5], "e4m3fn")
    >>> fp8emu.as_ml_dtypes(c, "e4m3fn").dtype.name
    'float8_e4m3fn'
    """
    fmt = get_format(fmt)
    if fmt.ml_dtype is None:
        have = [n for n in ("e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz", "e4m3b11fnuz", "e4m3", "e3m4",
                            "e8m0fnu", "e2m3fn", "e3m2fn", "e2m1fn") if get_format(n).ml_dtype is not None]
        raise ValueError(f"ml_dtypes has no type for format {fmt.name!r}; it has: {', '.join(have)}")
    # ml_dtypes would read the stray high bits of a narrower format (0x1F as e2m1fn is -6): refused
    return byte_codes(codes, fmt, "codes").view(fmt.ml_dtype)
