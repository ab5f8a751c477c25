"""torchao's quantizers, step by step: its MX scale modes, its NVFP4 chain and its Float8Linear scales.

torchao (``pytorch/ao``) computes the same recipes as the spec and Transformer
Engine with different float32 steps and different edge blocks.  These are the
``variant="torchao"`` options of :func:`fp8emu.quantize_mx`,
:func:`fp8emu.quantize_nvfp4`, :func:`fp8emu.quantize_tensorwise` and
:func:`fp8emu.quantize_axiswise`; each is proven bit for bit against the
torchao versions in :data:`TORCHAO_PROVEN` (live tests, and vectors recorded by
``tools/record_torchao.py`` into ``tests/data/torchao/``), on torch's CPU eager
path (the ``torch.compile`` / Triton / CUDA paths can differ; see each function).

Versions: only 0.18.0 is proven.  From torchao's history: RCEIL and its eager
``torch.log2`` fallback came with pytorch/ao#1835 (merged March 2025), the
FLOOR/CEIL/EVEN modes with pytorch/ao#516 (2024); pytorch/ao#4001 (open)
plans to fold RCEIL into ``to_mx``, so later releases may differ.  On sm_100
under ``torch.compile`` torchao's RCEIL uses ``cvt.rp.satfinite.ue8m0x2.f32``,
whose codes for finite blocks are fp8emu's default ``scale_rule="rceil"`` (not
proven here: no GPU).

Examples
--------
>>> TORCHAO_PROVEN
'0.18.0'
>>> import numpy as np
>>> codes, mult = mx_scales(np.array([np.inf, 448.0, 0.0], np.float32), np.array([False, False, False]),
...                         "e4m3fn", "floor")
>>> codes.tolist(), mult.tolist()     # Inf block: exponent field 255 - 127 - 8; zero block: 1 / 2**-126
([247, 127, 0], [7.52316384526264e-37, 1.0, 8.507059173023462e+37])
"""

from __future__ import annotations

import math

import numpy as np

from ..codec import decode, encode
from ..formats import Format, get_format
from .tensor import expand

__all__ = ["TORCHAO_PROVEN", "mx_scales", "subbyte_cast", "fp8_cast", "nvfp4_chain", "float8_scale", "nan_bits",
           "float8_quantize", "FLOAT8_FORMATS"]

#: torchao versions the variants are proven on (live and recorded vectors), with torch 2.13.0 (CPU).
TORCHAO_PROVEN = "0.18.0"

F32 = np.float32
#: torchao's ``F32_MIN_NORMAL``: the floor its FLOOR/CEIL/EVEN scales are clamped to.
F32_MIN_NORMAL = F32(2.0 ** -126)
#: torchao's ``E4M3_EPS`` (``finfo(float8_e4m3fn).tiny``): the floor of its NVFP4 block scales (code 0x08).
E4M3_TINY = F32(2.0 ** -6)
#: torchao.float8's ``EPS``: the amax floor of its Float8Linear scales (a float64 constant).
FLOAT8_EPS = 1e-12


def _emax(fmt: Format) -> int:
    return int(math.floor(math.log2(fmt.max)))


def _log2_f32(v: np.ndarray) -> np.ndarray:
    """torch.log2 of float32 values on the CPU: the float32 rounding of log2.

    Computed in float64 and rounded once; checked against torch 2.13 CPU at and
    next to every power of two of float32 (see tests/test_scaling_torchao.py).
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log2(np.asarray(v, np.float64)).astype(np.float32)


def mx_scales(amax: np.ndarray, has_nan: np.ndarray, fmt, rule: str):
    """(E8M0 codes, float32 multiplier) of torchao ``to_mx`` for block amaxes.

    ``amax`` is torchao's ``torch.amax(|x|)`` per block (Inf where a block holds
    Inf; ``has_nan`` marks blocks holding NaN, whose amax torch makes NaN).
    The multiplier is what the elements are scaled by: ``1 / scale_fp32`` for
    FLOOR, CEIL and EVEN (torchao divides by ``scale_fp32``, the code's power
    of two clamped below at 2**-126, +Inf for code 255), ``rcp`` for RCEIL
    (NaN for NaN blocks, 2**-127 for Inf blocks, 1 for code 0).
    """
    fmt = get_format(fmt)
    amax = np.where(has_nan, F32(np.nan), np.asarray(amax, F32)).astype(F32)
    emax = _emax(fmt)
    if rule == "rceil":
        with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
            descale = np.divide(amax, F32(fmt.max), dtype=F32)
            e = np.clip(np.ceil(_log2_f32(descale)), -127, 127)
        e = np.where(np.isfinite(descale), e, 0).astype(np.int64)
        codes = np.where(np.isnan(descale), 255, np.where(np.isinf(descale), 254, e + 127)).astype(np.uint8)
        pow2 = np.ldexp(np.float64(1), 127 - codes.astype(np.int64)).astype(F32)
        mult = np.where(codes == 255, descale,
                        np.where(codes == 254, F32(2.0 ** -127), np.where(codes == 0, F32(1), pow2)))
        return codes, mult.astype(F32)
    bits = amax.view(np.uint32).astype(np.int64)
    if rule == "even":
        # round amax to the element's mantissa width on its float32 bits (the carry may reach the exponent)
        bits = (bits + (1 << (22 - fmt.mbits))) & 0xFF800000
    field = (bits >> 23) & 0xFF
    e = field - 127 - emax
    if rule == "ceil":
        e = e + ((bits & 0x7FFFFF) > 0)
    elif rule not in ("floor", "even"):
        raise ValueError(f"torchao has no MX scale mode {rule!r}; accepted: floor, ceil, even, rceil")
    codes = (np.clip(e, -127, 128) + 127).astype(np.uint8)
    codes = np.where(np.isnan(amax), np.uint8(255), codes)
    scale_fp32 = np.maximum((codes.astype(np.uint32) << np.uint32(23)).view(F32), F32_MIN_NORMAL)
    with np.errstate(divide="ignore"):
        mult = np.divide(F32(1), scale_fp32, dtype=F32)
    return codes, mult


def fp8_cast(y: np.ndarray, fmt: Format) -> np.ndarray:
    """torch's eager cast to float8 after torchao's clamp to +-max: RNE, NaN to 0x7F with its sign bit."""
    with np.errstate(invalid="ignore"):
        clamped = np.clip(y, -F32(fmt.max), F32(fmt.max))
    codes = encode(clamped, fmt, saturate=True)
    sign = (np.asarray(y, F32).view(np.uint32) >> np.uint32(31)).astype(np.uint8) << np.uint8(7)
    return np.where(np.isnan(y), np.uint8(0x7F) | sign, codes).astype(np.uint8)


def subbyte_cast(y: np.ndarray, fmt: Format) -> np.ndarray:
    """torchao's ``f32_to_f6_*_unpacked`` / ``f32_to_f4_unpacked`` codes for float32 values.

    Finite values and Inf: round to nearest even, saturating (Inf to +-max).
    NaN has no code in FP6/FP4, and torchao's bit arithmetic treats it as a
    normal number with exponent field 255: the code is the low 8 bits of
    ``(bits + ((bias - 127) << 23) + 2**(22 - m) - 1 + lsb) >> (23 - m)`` for
    its magnitude bits, kept to the format's width, with the sign bit set for
    -NaN (the default NaN gives FP4 0x3 / 0xB, E2M3 0x0C, E3M2 0x0E).
    """
    y = np.asarray(y, F32)
    codes = encode(y, fmt, saturate=True)
    nan = np.isnan(y)
    if not nan.any():
        return codes
    bits = y.view(np.uint32).astype(np.int64)
    mag = bits & 0x7FFFFFFF
    shift = 23 - fmt.mbits
    lsb = (mag >> shift) & 1
    raw = ((mag + ((fmt.bias - 127) << 23) + (1 << (shift - 1)) - 1 + lsb) >> shift) & 0xFF
    width = (1 << (fmt.bits - 1)) - 1
    nan_codes = (raw & width) | np.where(bits >> 31, 1 << (fmt.bits - 1), 0)
    return np.where(nan, nan_codes, codes).astype(np.uint8)


def element_cast(y: np.ndarray, fmt: Format) -> np.ndarray:
    """The cast torchao's MX path gives: torch's for FP8, torchao's own bit arithmetic for FP6/FP4."""
    if fmt.bits == 8:
        return fp8_cast(y, fmt)
    return subbyte_cast(y, fmt)


def nan_bits(bits: int) -> np.float32:
    """The float32 NaN with these bits (torch's CPU ops make several: its full max reduction
    0xFFFFFFFF, its float8_e4m3fn NaN widened 0x7FF00000)."""
    return np.array([bits], np.uint32).view(F32)[0]


def nvfp4_chain(amax: np.ndarray, per_tensor_scale):
    """torchao ``nvfp4_quantize``'s block scales: (UE4M3 codes, element multiplier, scale_inv).

    ``per_tensor_scale`` None is torchao's single-level mode; otherwise the
    float32 ``per_tensor_scale`` (``per_tensor_amax_to_scale(amax) =
    fl32(amax / 2688)``).  Block scales ``fl32(amax / 6)`` (divided by the
    tensor scale) are clamped to [2**-6, 448] before the E4M3 cast (so a zero
    block gets code 0x08, a NaN block 0x7F); the elements are multiplied by
    ``fl32(1 / s)`` (single level) or ``fl32(fl32(1 / pts) / s)``; dequantization
    multiplies by ``s`` or ``fl32(pts * s)``.  NaN bits follow torch's CPU ops
    (a NaN block scale widens to 0x7FF00000 with its sign), because torchao's
    FP4 cast maps NaN payloads to different codes.
    """
    e4m3 = get_format("e4m3fn")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        block_scale = np.divide(amax, F32(6), dtype=F32)
        if per_tensor_scale is not None:
            block_scale = np.divide(block_scale, per_tensor_scale, dtype=F32)
        clamped = np.clip(block_scale, E4M3_TINY, F32(448))
        nan = np.isnan(clamped)
        negative = (clamped.view(np.uint32) >> np.uint32(31)).astype(bool)
        bcodes = np.where(nan, np.uint8(0x7F), encode(np.where(nan, F32(0), clamped), e4m3,
                                                      saturate=True)).astype(np.uint8)
        s = np.where(nan, np.where(negative, nan_bits(0xFFF00000), nan_bits(0x7FF00000)),
                     decode(bcodes, e4m3, dtype=F32)).astype(F32)
        if per_tensor_scale is None:
            mult = np.divide(F32(1), s, dtype=F32)
            inv = s
        else:
            mult = np.divide(np.divide(F32(1), per_tensor_scale, dtype=F32), s, dtype=F32)
            inv = np.multiply(per_tensor_scale, s, dtype=F32)
    return bcodes, mult.astype(F32), np.asarray(inv, F32)


def float8_scale(amax: np.ndarray, fmt: Format, pow2: bool) -> np.ndarray:
    """torchao.float8 ``amax_to_scale``: ``fl32(fmax / max(amax, 1e-12))`` in float64, then rounded once.

    NaN amax gives NaN, Inf amax gives 0, a zero amax ``fmax * 1e12``.  With
    ``pow2`` (``round_scales_to_power_of_2``): ``exp2(floor(log2 scale))`` in
    float32, where log2 rounds to float32 first (a scale just below a power of
    two rounds up to it: 16383.999 gives 16384).
    """
    a = np.asarray(amax, np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # np.maximum keeps a NaN amax's bits (its sign reaches the codes' NaN)
        scale = (np.float64(fmt.max) / np.maximum(a, FLOAT8_EPS)).astype(F32)
        if pow2:
            scale = np.exp2(np.floor(_log2_f32(scale)).astype(np.float64)).astype(F32)
    return scale


#: Element formats of torchao's Float8Linear variant here (torch's CPU float8 dtypes with NaN 0x7F).
FLOAT8_FORMATS = ("e4m3fn", "e5m2")


def float8_quantize(xf: np.ndarray, fmt: Format, block, amax, pow2: bool, given=None):
    """torchao.float8 ``hp_tensor_to_float8_dynamic`` on float32 values: (codes, scale).

    ``amax`` per block (NaN bits as torch makes them), or ``given`` scales;
    ``codes = e4m3/e5m2(clamp(fl32(x * scale), -max, max))`` with torch's cast
    (NaN to 0x7F/0xFF by its sign; a NaN scale's NaN wins over the element's).
    """
    scale = float8_scale(amax, fmt, pow2) if given is None else np.asarray(given, F32)
    full = expand(scale, block, xf.shape) if block else scale
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        y = np.multiply(xf, full, dtype=F32)
    y = np.where(np.isnan(full), full, y).astype(F32)
    return fp8_cast(y, fmt), np.asarray(scale, F32)
