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
rounding of float32 adds the random bits to the bit pattern below the
rounding position and truncates through a table (see :func:`_encode_sr_f32`);
elements whose result would be subnormal, zero or near float32's top binade go
through the exact core.  The tables are built by the same exact core, so they
agree with it by construction, and the tests compare every path with an
independent rational oracle.

Throughput comes from working in cache-sized chunks with preallocated
buffers and in-place ufuncs (``out=``), so encoding needs only the output
array and a few hundred kB beyond the input; ``benchmarks/bench_codec.py``
measures it against ml_dtypes.
"""

from __future__ import annotations

import sys

import numpy as np

from .formats import get_format
from .profiles import get_profile
from .rounding import DETERMINISTIC_MODES, STOCHASTIC_MODES, check_rounding, check_saturation
from .tables import (
    CHUNK, DECODE_DTYPES, SOURCE_DTYPES, as_array, as_codes, decode_take, encode_exact,
    encode_table, lookup, source_name, table_ok,
)

__all__ = ["encode", "decode", "quantize", "as_ml_dtypes"]

_U64 = np.uint64
_VIA = {name: SOURCE_DTYPES[name] for name in ("float32", "float16", "bfloat16")}

# Bit generators whose ``random_raw`` is the 64-bit stream that ``Generator.integers``
# splits into two 32-bit draws (low half first); MT19937's raw output is 32-bit.
_RAW64 = (np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.SFC64)


def _draw_bits(gen, k, n):
    """``gen.integers(0, 2**k, n, dtype=np.uint64)`` as uint32 (the documented stream).

    For even ``n`` and a 64-bit bit generator, ``integers`` with a power-of-two
    range up to 2**32 takes the top k bits of consecutive 32-bit halves of the
    raw 64-bit outputs (Lemire's method never rejects there); taking them from
    ``random_raw`` directly gives the same bits and state, several times faster.
    """
    if n % 2 == 0 and sys.byteorder == "little" and type(gen.bit_generator) in _RAW64:
        r = gen.bit_generator.random_raw(n // 2).view(np.uint32)
        if k < 32:
            r >>= np.uint32(32 - k)
        return r
    return gen.integers(0, 1 << k, size=n, dtype=_U64).astype(np.uint32)


def _encode_sr_f32(flat, out, fmt, saturate, k, rb_flat, gen):
    """Stochastic rounding of float32 by integer addition on the bit patterns.

    Where the result lies in the target's normal range, the discarded part is
    the lowest ``s = 23 - mbits`` bits of the pattern, so adding the k random
    bits aligned below bit ``s`` (``r << (s - k)``, or ``r >> (k - s)`` when
    ``k > s``, which gives the same carry since the discarded part is an
    integer) carries into bit ``s`` exactly when the exact core increments; a
    carry out of the mantissa moves to the next binade as it should.  The
    truncated sum is then looked up in a table of stochastic rounding with
    zero random bits (truncation with overflow to Inf/NaN or max).  Elements
    outside that range (target subnormals, zeros, exponents 254/255) go
    through the exact core with their own random bits.
    """
    table = encode_table(fmt, "float32", "sr0", saturate)[: 1 << 16]   # sticky does not matter to truncation
    s0 = 23 - fmt.mbits
    e_lo = max(1, 127 + fmt.emin)
    lo_bias = np.uint32(e_lo << 23)
    span = np.uint32((253 - e_lo) << 23)
    step = CHUNK * 2                              # amortises the per-chunk random draw
    nb = min(step, flat.size)
    v_buf, e_buf, b_buf = np.empty(nb, np.uint32), np.empty(nb, np.uint32), np.empty(nb, bool)
    for i in range(0, flat.size, step):
        u = flat[i:i + step].view(np.uint32)
        n = u.size
        if rb_flat is not None:
            r = rb_flat[i:i + n].astype(np.uint32)
        else:
            r = _draw_bits(gen, k, n)
        v, e, bad = v_buf[:n], e_buf[:n], b_buf[:n]
        if s0 >= k:
            np.left_shift(r, np.uint32(s0 - k), out=v)
        else:
            np.right_shift(r, np.uint32(k - s0), out=v)
        v += u
        v >>= np.uint32(16)
        np.take(table, v, out=out[i:i + n])
        np.bitwise_and(u, np.uint32(0x7F800000), out=e)
        e -= lo_bias                              # wraps for exponents below e_lo
        np.greater(e, span, out=bad)
        if bad.any():
            sel = np.flatnonzero(bad)
            out[i + sel] = encode_exact(flat[i + sel], fmt, "stochastic", saturate,
                                         r[sel].astype(_U64), k)


# ----------------------------------------------------------------------------- public API
def _random_source(rounding, rng, sr_bits, random_bits, shape):
    """Validate the stochastic-rounding options; return (k, bits array or None, Generator)."""
    if rounding not in STOCHASTIC_MODES:
        if rng is not None or random_bits is not None or sr_bits is not None:
            raise ValueError("rng, sr_bits and random_bits apply only to rounding='stochastic' and "
                             f"the other stochastic modes ({', '.join(STOCHASTIC_MODES[1:])})")
        return 0, None, None
    if random_bits is None and rng is None:
        raise ValueError(f"rounding={rounding!r} needs a source of randomness: pass rng "
                         "(np.random.Generator or int seed) or random_bits")
    if random_bits is not None and rng is not None:
        raise ValueError("pass either rng or random_bits, not both")
    rb = None
    if random_bits is not None:
        rb = np.asarray(random_bits)
        if rb.dtype.kind not in "iu":
            raise TypeError(f"random_bits must be an unsigned integer array, got dtype {rb.dtype}")
        if sr_bits is None:
            if rb.dtype.kind != "u" or rb.dtype.itemsize > 4:
                raise ValueError("pass sr_bits with random_bits that are not uint8/uint16/uint32")
            sr_bits = rb.dtype.itemsize * 8
    if sr_bits is None:
        sr_bits = 32
    if isinstance(sr_bits, bool) or not isinstance(sr_bits, (int, np.integer)) or not 1 <= sr_bits <= 32:
        raise ValueError(f"sr_bits must be an int in 1..32, got {sr_bits!r}")
    if rb is not None:
        try:
            rb = np.broadcast_to(rb, shape)
        except ValueError:
            raise ValueError(f"random_bits of shape {rb.shape} does not broadcast to {shape}") from None
        if rb.size and (rb.min() < 0 or int(rb.max()) >= (1 << sr_bits)):
            raise ValueError(f"random_bits must lie in [0, 2**sr_bits) = [0, {1 << sr_bits})")
        return int(sr_bits), rb, None
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        rng = np.random.default_rng(int(rng))
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator or an int seed, got {type(rng).__name__}")
    return int(sr_bits), None, rng


def encode(x, fmt, *, rounding="rne", saturate=False, rng=None, sr_bits=None,
           random_bits=None, via=None, profile=None) -> np.ndarray:
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
    saturate : bool or {"satfinite", "satpropagate", "ovfinf"}, keyword-only
        If True (``"satfinite"``), overflows and +-Inf become +-max (NaN stays
        NaN).  If False (``"ovfinf"``; OCP non-saturating mode with IEEE 754
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
    fmt = get_format(fmt)
    prof = get_profile(profile)
    rounding = check_rounding(rounding)
    saturate = check_saturation(saturate)
    if saturate == "satpropagate":
        options = dict(rounding=rounding, rng=rng, sr_bits=sr_bits, random_bits=random_bits, via=via,
                       profile=profile)
        out = encode(x, fmt, saturate=True, **options)
        arr = as_array(x)
        inf = np.isinf(arr) if arr.dtype.kind in "fc" else np.zeros(arr.shape, bool)
        if inf.any():
            out = np.where(inf, encode(np.where(inf, arr, 0), fmt, saturate=False, **options), out)
        return out.astype(np.uint8)
    arr = as_array(x)
    if not prof.is_spec:
        prof.check_options(saturate=saturate, via=via, stochastic=(
            rounding in STOCHASTIC_MODES or rng is not None or sr_bits is not None or random_bits is not None))
        return _encode_profile(arr, fmt, prof, rounding)
    k, rb, gen = _random_source(rounding, rng, sr_bits, random_bits, arr.shape)
    if via is not None:
        if via not in _VIA:
            raise ValueError(f"unknown via {via!r}; valid: None, {', '.join(_VIA)}")
        with np.errstate(over="ignore", invalid="ignore"):   # overflow to Inf is the intended rounding
            arr = arr.astype(_VIA[via])
    flat = np.ascontiguousarray(arr).reshape(-1)
    out = np.empty(flat.shape, dtype=np.uint8)
    rb_flat = None if rb is None else rb.reshape(-1) if rb.flags.c_contiguous else np.ascontiguousarray(rb).reshape(-1)

    _encode_flat(flat, out, fmt, rounding, saturate, k, rb_flat, gen)
    return out.reshape(arr.shape)


def _encode_profile(arr, fmt, prof, rounding):
    """Encode under a fixed code path: one look-up in the profile's table."""
    arr = prof.source(arr)
    table = prof.encode_table(fmt, source_name(arr.dtype), rounding)
    flat = np.ascontiguousarray(arr).reshape(-1)
    out = np.empty(flat.shape, dtype=np.uint8)
    lookup(flat, out, table)
    return out.reshape(arr.shape)


def _encode_flat(flat, out, fmt, rounding, saturate, k, rb_flat, gen, fast=True):
    """Encode a contiguous 1-D array into ``out``, choosing the fastest exact path."""
    dt = flat.dtype
    if fast and flat.size:
        if rounding in DETERMINISTIC_MODES and table_ok(fmt, dt):
            lookup(flat, out, encode_table(fmt, source_name(dt), rounding, saturate))
            return
        if rounding == "stochastic" and dt == SOURCE_DTYPES["float32"] and table_ok(fmt, dt):
            _encode_sr_f32(flat, out, fmt, saturate, k, rb_flat, gen)
            return
    for i in range(0, flat.size, CHUNK):
        chunk = flat[i:i + CHUNK]
        bits = None
        if k:
            bits = (rb_flat[i:i + CHUNK].astype(_U64) if rb_flat is not None
                    else _draw_bits(gen, k, chunk.size).astype(_U64))
        out[i:i + CHUNK] = encode_exact(chunk, fmt, rounding, saturate, bits, k)


def decode(codes, fmt, *, dtype=np.float32, profile=None) -> np.ndarray:
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
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt not in DECODE_DTYPES:
        raise TypeError(f"unsupported decode dtype {dtype!r}; accepted: float16, bfloat16, float32, float64")
    if isinstance(codes, (list, tuple)) and np.size(codes) == 0:
        codes = np.zeros(np.shape(codes), np.uint8)   # NumPy would make an empty list float64
    c = as_codes(codes, fmt)
    # A 0-d input gives a 0-d array, as encode does (np.take would return a scalar).
    return np.asarray(decode_take(prof.decode_table(fmt, dt), c))


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
    arr = as_array(x)
    if arr.dtype in DECODE_DTYPES:
        dt = arr.dtype
    elif arr.dtype.kind in "biu":
        dt = np.dtype(np.float64)
    else:   # ml_dtypes' narrow floats, the only other types as_array accepts (their kind is "f" or "V")
        dt = np.dtype(np.float32)
    profile = encode_options.get("profile")
    return decode(encode(arr, fmt, **encode_options), fmt, dtype=dt, profile=profile)


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
    arr = np.asarray(codes)
    if arr.dtype != np.uint8:
        raise TypeError(f"as_ml_dtypes expects uint8 codes, got dtype {arr.dtype}")
    if fmt.bits < 8 and arr.size and int(arr.max()) >= (1 << fmt.bits):
        # ml_dtypes would read the stray high bits (0x1F as e2m1fn is -6): refuse instead.
        raise ValueError(f"codes out of range for {fmt.bits}-bit format {fmt.name}: "
                         f"expected 0..{(1 << fmt.bits) - 1}, got a maximum of {int(arr.max())}")
    return arr.view(fmt.ml_dtype)
