"""The table fixes of the built-in profiles: each ``fix(table, x, fmt, rule)`` edits a copy of an encode
table, each ``decode_fix(table, fmt, dtype)`` a decode table, as the rules found in the recordings and on
the engines say (listed in :mod:`fp8emu.profiles`)."""

from __future__ import annotations

import numpy as np

from ..formats import get_format
from ..tables import SOURCE_DTYPES, encode_table, lookup, source_name


_FLOAT16 = SOURCE_DTYPES["float16"]
_BFLOAT16 = SOURCE_DTYPES["bfloat16"]
_E4M3FN, _E5M2 = get_format("e4m3fn"), get_format("e5m2")


# ----------------------------------------------------------------------------- encode fixes
def _isnan(x):
    with np.errstate(over="ignore", invalid="ignore"):   # float64 beyond float32 is not NaN either way
        return np.isnan(x.astype(np.float32))


def nan_7f(table, x, fmt, rule):
    """NaN inputs give 0x7F, the sign dropped (CUDA intrinsics, Triton, XLA)."""
    table[_isnan(x)] = 0x7F


def torch_nan(table, x, fmt, rule):
    """NaN gives 0x7F with the sign kept, except from float16, whose kernel drops it (torch CUDA)."""
    nan = _isnan(x)
    if x.dtype == _FLOAT16:
        table[nan] = 0x7F
    else:
        table[nan] = 0x7F | (table[nan] & 0x80)


def nan_7f_keep_inf(table, x, fmt, rule):
    """NaN gives 0x7F; +-Inf stays +-Inf while finite overflow is clamped (Triton rtz)."""
    nan_7f(table, x, fmt, rule)
    inf = np.isinf(x.astype(np.float32))
    table[inf] = fmt.inf_code | np.where(np.signbit(x[inf].astype(np.float32)), 0x80, 0).astype(np.uint8)


def e8m0_unsigned_zero_min(table, x, fmt, rule):
    """E8M0 on the GPU: the sign is ignored and zero maps to the smallest code (2**-127)."""
    lookup(np.abs(x), table, encode_table(fmt, source_name(x.dtype), rule.rounding, rule.saturate))
    table[x.astype(np.float32) == 0] = 0


def e8m0_torch(table, x, fmt, rule):
    """torch's E8M0: float32 significand rounded to nearest, ties up, but down in float32 subnormals."""
    u = x.astype(np.float32).view(np.uint32) & 0x7FFFFFFF
    exp = (u >> 23).astype(np.int64)
    mant = u & 0x7FFFFF
    up = (mant > 0x400000) | ((mant == 0x400000) & (exp > 0))
    c = np.where(exp == 255, 255, np.minimum(exp + up, 255))
    table[...] = c.astype(np.uint8)


def e8m0_subnormal_round_up(table, x, fmt, rule):
    """E8M0 as ml_dtypes 0.5.1-0.6 (and JAX 0.10.2 CPU) compute it: values in (2**-127, 1.5 * 2**-127),
    float32 subnormals, round up to 2**-126 (code 1), although 2**-127 (code 0) is nearer."""
    with np.errstate(invalid="ignore"):
        v = x.astype(np.float64)
    table[(v > 2.0 ** -127) & (v < 1.5 * 2.0 ** -127)] = 1


# ----------------------------------------------------------------------------- decode fixes
def _nan_mask_and_sign(fmt):
    codes = np.arange(1 << fmt.bits)
    nan = fmt.nan_mask(codes)
    neg = (codes >> (fmt.bits - 1)) & 1 if fmt.signed else np.zeros(codes.size, dtype=np.int64)
    return nan, neg


def _put_nan_bits(table, nan, pat):
    uint = {2: np.uint16, 4: np.uint32, 8: np.uint64}[table.dtype.itemsize]
    table.view(uint)[nan] = pat[nan].astype(uint)


def gpu_decode_nan(table, fmt, dtype):
    """GPU decoders give float16/bfloat16 NaN 0x7FFF (sign dropped); wider NaNs as the spec."""
    nan, _ = _nan_mask_and_sign(fmt)
    if nan.any() and dtype.itemsize == 2:
        _put_nan_bits(table, nan, np.full(nan.shape, 0x7FFF, dtype=np.uint64))


def torch_decode_nan(table, fmt, dtype):
    """torch CUDA: 16-bit NaN 0x7FFF; float32 0x7FF00000|sign (E4M3FN), 0x7FFFFFFF|sign (E5M2),
    0x7F800001 otherwise; float64 widens the float32 pattern (quiet bit, payload << 29)."""
    nan, neg = _nan_mask_and_sign(fmt)
    if not nan.any():
        return
    if dtype.itemsize == 2:
        return gpu_decode_nan(table, fmt, dtype)
    sign = neg.astype(np.uint64) << np.uint64(31)
    if fmt == _E4M3FN:
        f32 = np.uint64(0x7FF00000) | sign
    elif fmt == _E5M2:
        f32 = np.uint64(0x7FFFFFFF) | sign
    else:
        f32 = np.full(neg.shape, 0x7F800001, dtype=np.uint64)
    if dtype.itemsize == 8:
        f32 = ((f32 >> np.uint64(31)) << np.uint64(63)) | np.uint64(0x7FF8000000000000) | (
            (f32 & np.uint64(0x7FFFFF)) << np.uint64(29))
    _put_nan_bits(table, nan, f32)


# ----------------------------------------------------------------------------- CPU engine fixes
# Rules below were found by running every input through the engine itself
# (fp8emu.engines; proven on the versions each profile's ``versions`` names:
# onnx 1.23.2, onnxruntime 1.32.0, jax/jaxlib 0.10.2, torch 2.13.0+cpu).
def _f32(x):
    with np.errstate(over="ignore", invalid="ignore"):   # float64 beyond float32 becomes Inf, as in the engines
        return x.astype(np.float32)


def _sign_code(x):
    return np.where(np.signbit(_f32(x)), 0x80, 0).astype(np.uint8)


def nan_7f_signed(table, x, fmt, rule):
    """NaN gives 0x7F with the sign kept (torch 2.13 CPU e5m2; ONNX Runtime 1.32 CPU e5m2)."""
    nan = _isnan(x)
    table[nan] = 0x7F | _sign_code(x[nan])


def subbyte_nan_ml_dtypes(table, x, fmt, rule):
    """FP4/FP6 have no NaN: ml_dtypes' cast (0.5.4 to 0.7.0), and so the ONNX reference (onnx 1.23.2),
    gives NaN the code of -0 (0x8 for E2M1, 0x20 for E2M3/E3M2) and -NaN +0; the spec's NaN -> +max
    does not apply."""
    nan = _isnan(x)
    table[nan] = np.where(np.signbit(_f32(x[nan])), 0, fmt.sign_bit)


def fp4_nan_jax(table, x, fmt, rule):
    """E2M1 on JAX 0.10.2 CPU: NaN of either sign gives 0x8 (-0)."""
    table[_isnan(x)] = 0x8


def e8m0_onnx(table, x, fmt, rule):
    """ONNX Cast to FLOAT8E8M0 as the reference evaluator computes it (onnx 1.23.2).

    The input is rounded to float32 and only its biased exponent field e is
    kept: the sign is ignored, NaN and +-Inf give 0xFF, zero gives 0x00.
    round_mode "up" (``rup``) adds 1 when any mantissa bit is set, so every
    float32 subnormal (e = 0) gives code 1 (2**-126) where 2**-127 is the
    correct round-up; "down" (``rtz``) keeps e; "nearest" (``rne``) adds the
    guard bit when the rest is non-zero or e > 0 (ties up, but down in the
    float32 subnormal range).  saturate=1 stops the increment at e = 254;
    saturate=0 lets it reach 0xFF (NaN).
    """
    u = _f32(x).view(np.uint32)
    e = ((u >> 23) & 0xFF).astype(np.int64)
    m = u & 0x7FFFFF
    if rule.rounding == "rup":
        up = m != 0
    elif rule.rounding == "rtz":
        up = np.zeros(u.shape, dtype=bool)
    else:
        up = ((m & 0x400000) != 0) & (((m & 0x3FFFFF) != 0) | (e > 0))
    up &= e != 255
    if rule.saturate:
        up &= e != 254
    table[...] = np.where(e == 255, 255, e + up).astype(np.uint8)


def e8m0_onnxruntime(table, x, fmt, rule):
    """ONNX Runtime 1.32 CPU Cast to FLOAT8E8M0: the spec's rounding on [2**-127, 2**127] only.

    Outside it, with saturate=1: zero, negatives, -Inf and positives below
    2**-127 give 0x00 (2**-127), values above 2**127 and +Inf give 0xFE
    (2**127); with saturate=0 all of them give 0xFF (NaN), even a value above
    2**127 that round_mode "down" would bring back to 2**127.  NaN gives 0xFF.
    """
    v = _f32(x)
    with np.errstate(invalid="ignore"):
        low = ~(v >= np.float32(2.0 ** -127))
        high = v > np.float32(2.0 ** 127)
    table[low] = 0x00 if rule.saturate else 0xFF
    table[high] = 0xFE if rule.saturate else 0xFF
    table[np.isnan(v)] = 0xFF


def onnxruntime_fp8(table, x, fmt, rule):
    """ONNX Runtime 1.32 CPU Cast/QuantizeLinear to FLOAT8E4M3FN/FLOAT8E5M2 (float64 via float32).

    * E5M2 NaN gives 0x7F with the sign kept (the spec: 0x7E/0xFE).
    * saturate=0, E4M3FN: ``|x|`` in [480, 496) gives +-448 (0x7E/0xFE), as if
      the truncated code 0x7F (NaN) were replaced by 0x7E before rounding up
      from the bit below; from 464 to 480 it rounds up to NaN as the spec
      does, and from 496 on it gives NaN again.
    * saturate=0, E5M2: a value that rounds up past 57344 (``|x|`` in
      [61440, 65536)) gives NaN 0x7F/0xFF instead of Inf; ``|x|`` >= 65536 gives Inf.
    * saturate=0, bfloat16 inputs: NaN gives 0x7F, the sign dropped.
    """
    nan = _isnan(x)
    sign = _sign_code(x)
    a = np.abs(_f32(x))
    if not rule.saturate:
        if fmt == _E4M3FN:
            band = (a >= 480) & (a < 496)
            table[band] = 0x7E | sign[band]
        else:
            band = (a >= 61440) & (a < 65536)
            table[band] = 0x7F | sign[band]
    if fmt == _E5M2:
        table[nan] = 0x7F | sign[nan]
    if not rule.saturate and x.dtype == _BFLOAT16:
        table[nan] = 0x7F


def jax_cpu_e5m2(table, x, fmt, rule):
    """JAX 0.10.2 CPU E5M2: NaN from float16/bfloat16 gives 0x7F, the sign dropped (float32/64 keep the spec)."""
    if x.dtype.itemsize == 2:
        table[_isnan(x)] = 0x7F


def jax_cpu_e8m0(table, x, fmt, rule):
    """JAX 0.10.2 CPU E8M0 (as ml_dtypes 0.6): values in (2**-127, 1.5 * 2**-127) round up to 2**-126
    (code 1); from float64, positive values below 2**-127 give NaN 0xFF (from float32 they give 2**-127)."""
    e8m0_subnormal_round_up(table, x, fmt, rule)
    if x.dtype == np.float64:
        table[(x > 0) & (x < 2.0 ** -127)] = 0xFF


def _quiet_nan(dtype, neg):
    """The output type's default quiet NaN bit pattern (0x7FC00000 in float32), with sign ``neg``."""
    bits = 8 * dtype.itemsize
    q = int(np.array(np.nan, dtype=np.float32).astype(dtype).view(f"u{dtype.itemsize}"))
    q &= (1 << (bits - 1)) - 1
    return np.uint64(q) | (neg.astype(np.uint64) << np.uint64(bits - 1))


def signed_nan_decode(table, fmt, dtype):
    """NaN codes decode to the output type's quiet NaN with the code's sign (FNUZ 0x80 is -NaN):
    the ONNX reference (onnx 1.23.2) and ONNX Runtime 1.32 CPU."""
    nan, neg = _nan_mask_and_sign(fmt)
    if nan.any():
        _put_nan_bits(table, nan, _quiet_nan(dtype, neg))


def jax_cpu_decode(table, fmt, dtype):
    """JAX 0.10.2 CPU: NaN codes decode to the quiet NaN with the code's sign; FNUZ 0x80 is +NaN."""
    nan, neg = _nan_mask_and_sign(fmt)
    if nan.any():
        _put_nan_bits(table, nan, _quiet_nan(dtype, neg * (fmt.nan != "negzero")))


def torch_cpu_decode(table, fmt, dtype):
    """torch 2.13 CPU NaN bit patterns.

    float32: E4M3FN 0x7FF00000|sign (the FP8 bits in place); E5M2 goes through
    float16, whose NaN ``code << 8`` is quieted (| 0x200) and widened;
    FNUZ and E8M0 give 0x7F800001.  float64 widens the float32 pattern (quiet
    bit set, payload << 29).  float16: E4M3FN 0x7F80|sign, E5M2 ``code << 8 |
    0x200``, others 0x7E00.  bfloat16: always 0x7FC0.
    """
    nan, neg = _nan_mask_and_sign(fmt)
    if not nan.any():
        return
    if dtype == _BFLOAT16:
        _put_nan_bits(table, nan, _quiet_nan(dtype, np.zeros_like(neg)))
        return
    codes = np.arange(1 << fmt.bits, dtype=np.uint64)
    neg = neg.astype(np.uint64)
    if fmt == _E4M3FN:     # float32 keeps the FP8 bits in place; float16 narrows that pattern
        f32 = np.uint64(0x7FF00000) | (neg << np.uint64(31))
        f16 = np.uint64(0x7F80) | (neg << np.uint64(15))
    elif fmt == _E5M2:     # the float16 NaN code << 8, quieted; float32 widens it (payload << 13)
        f16 = (codes << np.uint64(8)) | np.uint64(0x200)
        f32 = (neg << np.uint64(31)) | np.uint64(0x7F800000) | ((f16 & np.uint64(0x3FF)) << np.uint64(13))
    else:
        f16 = _quiet_nan(dtype, np.zeros_like(neg)) if dtype.itemsize == 2 else None
        f32 = np.full(codes.shape, 0x7F800001, dtype=np.uint64)
    if dtype.itemsize == 2:
        _put_nan_bits(table, nan, f16)
        return
    if dtype.itemsize == 8:
        f32 = ((f32 >> np.uint64(31)) << np.uint64(63)) | np.uint64(0x7FF8000000000000) | (
            (f32 & np.uint64(0x7FFFFF)) << np.uint64(29))
    _put_nan_bits(table, nan, f32)
