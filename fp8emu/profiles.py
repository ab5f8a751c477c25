"""Implementation profiles: what a particular GPU or library cast produces.

A profile names a code path (``"torch-cuda"``, ``"cuda-satfinite"``, ...) and
fixes, per source dtype and target format, the rounding mode, the saturation
behaviour, the intermediate type (``via``) and the NaN/Inf codes of that
path.  Each is expressed as the plain codec with those options plus a
post-processing step on the small encode tables (never per element), so
``encode(x, fmt, profile=...)`` is a table look-up as fast as plain encode.

Rules found in the H200 recordings (``tests/golden``)
------------------------------------------------------
* NaN inputs: CUDA intrinsics, Triton and JAX (XLA) give ``0x7F`` for both
  E4M3 and E5M2, the sign dropped; torch keeps the sign and gives
  ``0x7F``/``0xFF`` for float32 and bfloat16 sources, but its float16 kernel
  gives ``0x7F`` with the sign dropped; the spec (and ml_dtypes) E5M2 NaN is
  ``0x7E``/``0xFE``.
* ``cuda-satfinite`` and ``triton-rtne`` saturate finite overflow *and* Inf
  to +-max; ``triton-rtz`` clamps finite overflow to max but keeps Inf.
* E8M0 on the GPU ignores the sign and maps 0 to code 0 (2**-127).  CUDA
  ``rz``/``rp`` truncate / round up the magnitude; torch rounds the float32
  significand to nearest with ties up, except that a tie in the float32
  subnormal range rounds down (the implicit bit acts as the even/odd bit).
* Decoding: the GPU decoders give float16/bfloat16 NaN 0x7FFF (sign dropped);
  torch's float32 NaN is 0x7FF00000|sign (E4M3FN), 0x7FFFFFFF|sign (E5M2) or
  0x7F800001 (FNUZ formats, E8M0); its float64 NaN widens that pattern.
* torch and ml_dtypes round float64 through float32 (double rounding); the
  CUDA, Triton and JAX paths take float32 inputs, so float64 is first
  rounded to float32 there too.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .formats import get_format

__all__ = ["profile_names", "get_profile", "profile_encode", "profile_decode", "PROFILE_NAMES", "Profile"]

_F32 = np.dtype(np.float32)
_F16 = np.dtype(np.float16)
_BF16 = np.dtype(ml_dtypes.bfloat16)
_SRC_NAMES = {_F32: "float32", _F16: "float16", _BF16: "bfloat16"}


@dataclass(frozen=True)
class Profile:
    """One implementation profile.

    Attributes
    ----------
    name : str
    description : str
    rules : dict
        ``{format name: {rounding: (codec rounding, saturate, fix name)}}``.
    via64 : str or None
        Intermediate type for sources other than float32/float16/bfloat16.
    """

    name: str
    description: str
    rules: dict
    via64: str | None = "float32"


def _r(rnd, sat, fix=None):
    return {rnd: (rnd, sat, fix)}


_FP8 = ("e4m3fn", "e5m2")
_FNUZ = ("e4m3fnuz", "e5m2fnuz")
_SUBBYTE = ("e2m3fn", "e3m2fn", "e2m1fn")


def _cuda_rules(sat):
    rules = {f: _r("rne", sat, "nan7f") for f in _FP8}
    rules["e8m0fnu"] = {"rtz": ("rtz", sat, "e8m0_gpu"), "rup": ("rup", sat, "e8m0_gpu")}
    for f in _SUBBYTE:
        rules[f] = {"rne": ("rne", True, None), "rtz": ("rtz", True, None)}
    return rules


_PROFILES = {p.name: p for p in [
    Profile("ocp", "OCP OFP8 / OCP MX spec: exact single rounding, every option of encode (the default)",
            {}, None),
    Profile("ml_dtypes", "ml_dtypes NumPy astype casts: RNE, non-saturating, float64 via float32",
            {}, "float32"),
    Profile("torch-cuda", "torch 2.11 tensor.to(float8_*) on CUDA 13.0: RNE non-saturating, "
            "E5M2 NaN 0x7F, f16 NaN unsigned, e8m0 ties-up rule, float64 via float32",
            dict({f: _r("rne", False, "torch_nan") for f in _FP8},
                 **{f: _r("rne", False) for f in _FNUZ}, e8m0fnu=_r("rne", False, "e8m0_torch"))),
    Profile("cuda-satfinite", "cuda_fp8/fp6/fp4.h intrinsics with __NV_SATFINITE: overflow and Inf -> max, "
            "NaN 0x7F; e8m0 rz/rp; FP6/FP4 rn/rz", _cuda_rules(True)),
    Profile("cuda-nosat", "cuda_fp8/fp6/fp4.h intrinsics with __NV_NOSAT: overflow -> Inf/NaN, NaN 0x7F; "
            "e8m0 rz/rp; FP6/FP4 rn/rz", _cuda_rules(False)),
    Profile("triton-rtne", "Triton 3.6 fp_downcast_rounding='rtne' (e4m3fn, e5m2): saturates overflow and "
            "Inf to max, NaN 0x7F", {f: _r("rne", True, "nan7f") for f in _FP8}),
    Profile("triton-rtz", "Triton 3.6 fp_downcast_rounding='rtz' (e5m2 only): overflow -> max, Inf kept, "
            "NaN 0x7F", {"e5m2": _r("rtz", False, "nan7f_inf")}),
    Profile("jax-gpu", "JAX 0.11 astype under jit on the GPU (XLA): RNE non-saturating, NaN 0x7F for "
            "e4m3fn/e5m2", dict({f: _r("rne", False, "nan7f") for f in _FP8},
                                **{f: _r("rne", False) for f in _FNUZ})),
]}

#: Profile names, in the order of :func:`profile_names`.
PROFILE_NAMES = tuple(_PROFILES)


def profile_names() -> dict:
    """Names of the implementation profiles and a one-line description of each.

    Examples
    --------
    >>> import fp8emu
    >>> list(fp8emu.profile_names())[:3]
    ['ocp', 'ml_dtypes', 'torch-cuda']
    """
    return {p.name: p.description for p in _PROFILES.values()}


def get_profile(name) -> Profile:
    """The :class:`Profile` called ``name``.

    Raises
    ------
    ValueError
        If there is no such profile.

    Examples
    --------
    >>> from fp8emu.profiles import get_profile
    >>> get_profile("cuda-nosat").rules["e8m0fnu"].keys()
    dict_keys(['rtz', 'rup'])
    """
    if isinstance(name, Profile):
        return name
    if name not in _PROFILES:
        raise ValueError(f"unknown profile {name!r}; valid: {', '.join(_PROFILES)}")
    return _PROFILES[name]


def _rule(prof: Profile, fmt, rounding):
    """(codec rounding, saturate, fix) for ``prof`` and ``fmt``; clear errors otherwise."""
    rules = prof.rules.get(fmt.name)
    if rules is None:
        raise ValueError(f"profile {prof.name!r} cannot express format {fmt.name!r}; it covers: "
                         f"{', '.join(prof.rules)}")
    if rounding in rules:
        return rules[rounding]
    if rounding == "rne" and len(rules) == 1:   # the default selects the path's only mode
        return next(iter(rules.values()))
    raise ValueError(f"profile {prof.name!r} has no rounding {rounding!r} for {fmt.name}; "
                     f"it offers: {', '.join(rules)}")


# ----------------------------------------------------------------------------- fixes
def _isnan(x):
    return np.isnan(x.astype(np.float32))


def _nan7f(codes, x, fmt):
    codes[_isnan(x)] = 0x7F


def _torch_nan(codes, x, fmt):
    nan = _isnan(x)
    if x.dtype == _F16:      # torch's float16 kernel drops the NaN sign
        codes[nan] = 0x7F
    else:
        codes[nan] = 0x7F | (codes[nan] & 0x80)


def _nan7f_inf(codes, x, fmt):
    _nan7f(codes, x, fmt)
    inf = np.isinf(x.astype(np.float32))
    codes[inf] = fmt.inf_code | np.where(np.signbit(x[inf].astype(np.float32)), 0x80, 0).astype(np.uint8)


def _e8m0_gpu(codes, x, fmt, rounding, saturate):
    # The GPU ignores the sign and maps zero to the smallest code: re-encode |x|.
    from .codec import _table, lookup
    lookup(np.abs(x), codes, _table(fmt, _SRC_NAMES[x.dtype], rounding, saturate))
    codes[x.astype(np.float32) == 0] = 0


def _e8m0_torch(codes, x, fmt):
    u = x.astype(np.float32).view(np.uint32) & 0x7FFFFFFF
    exp = (u >> 23).astype(np.int64)
    mant = u & 0x7FFFFF
    up = (mant > 0x400000) | ((mant == 0x400000) & (exp > 0))
    c = np.where(exp == 255, 255, np.minimum(exp + up, 255))
    codes[...] = c.astype(np.uint8)


def _ml_dtypes_cast(x, fmt):
    return x.astype(fmt.ml_dtype).view(np.uint8)


_FIXES = {"nan7f": _nan7f, "torch_nan": _torch_nan, "nan7f_inf": _nan7f_inf, "e8m0_torch": _e8m0_torch}


@functools.lru_cache(maxsize=128)
def profile_table(name, fmt, src, rounding="rne"):
    """Encode table of a profile: the code of every representative input of ``src``.

    ``src`` is "float32" (2**17 entries indexed by ``hi16 | (lo16 != 0) << 16``),
    "float16" or "bfloat16" (2**16 entries indexed by the bit pattern).

    Examples
    --------
    >>> from fp8emu.profiles import profile_table
    >>> t = profile_table("torch-cuda", "e5m2", "float32")
    >>> hex(t[0xFFC0]), hex(t[0x7FC0])      # NaN keeps its sign in torch's float32 path
    ('0xff', '0x7f')
    """
    from .codec import _table, table_inputs
    prof = get_profile(name)
    fmt = get_format(fmt)
    x = table_inputs(src)
    if prof.name == "ml_dtypes":
        if fmt.ml_dtype is None:
            raise ValueError(f"ml_dtypes has no type for format {fmt.name!r}")
        with np.errstate(invalid="ignore", over="ignore"):
            t = _ml_dtypes_cast(x, fmt).copy()
    else:
        rnd, sat, fix = _rule(prof, fmt, rounding)
        t = _table(fmt, src, rnd, sat).copy()
        if fix == "e8m0_gpu":
            _e8m0_gpu(t, x, fmt, rnd, sat)
        elif fix is not None:
            _FIXES[fix](t, x, fmt)
    t.setflags(write=False)
    return t


def profile_encode(x, fmt, profile, *, rounding="rne", saturate=False, rng=None, sr_bits=None,
                   random_bits=None, via=None):
    """:func:`fp8emu.encode` under a profile; see there.  ``profile="ocp"`` is plain encode.

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> x = np.array([464.33, np.nan, -np.nan], np.float32)
    >>> fp8emu.encode(x, "e4m3fn", profile="cuda-satfinite").tolist()
    [126, 127, 127]
    >>> fp8emu.encode(x, "e4m3fn", profile="torch-cuda").tolist()
    [127, 127, 255]
    """
    from .codec import _as_array, encode, lookup
    prof = get_profile(profile)
    if prof.name == "ocp":
        return encode(x, fmt, rounding=rounding, saturate=saturate, rng=rng, sr_bits=sr_bits,
                      random_bits=random_bits, via=via)
    fmt = get_format(fmt)
    if rng is not None or sr_bits is not None or random_bits is not None or rounding == "stochastic":
        raise ValueError(f"profile {prof.name!r} is deterministic: stochastic rounding options "
                         "apply only to profile='ocp'")
    if saturate:
        raise ValueError(f"profile {prof.name!r} fixes saturation itself (pick cuda-satfinite or "
                         "cuda-nosat, or use profile='ocp' with saturate=True)")
    if via is not None:
        raise ValueError(f"profile {prof.name!r} fixes the intermediate type; via applies to profile='ocp'")
    arr = _as_array(x)
    if arr.dtype not in _SRC_NAMES:
        with np.errstate(over="ignore", invalid="ignore"):   # float64 -> float32 overflows to Inf, as on the GPU
            arr = arr.astype(np.float32)   # every profiled path takes float32 (double rounding)
    table = profile_table(prof.name, fmt.name, _SRC_NAMES[arr.dtype], rounding)
    flat = np.ascontiguousarray(arr).reshape(-1)
    out = np.empty(flat.shape, dtype=np.uint8)
    lookup(flat, out, table)
    return out.reshape(arr.shape)


# ----------------------------------------------------------------------------- decode
def _decode_nan_bits(prof, fmt, dtype, neg):
    """NaN bit patterns the GPU decoders produce (None: keep the ``ocp`` patterns).

    Recorded: float16/bfloat16 outputs are always 0x7FFF (sign dropped).  torch's
    float32 outputs keep the FP8 bits in place for E4M3FN (0x7FF00000 | sign),
    go through float16 for E5M2 (canonical 0x7FFFFFFF | sign) and are 0x7F800001
    for the unsigned-zero formats and E8M0; float64 widens the float32 pattern.
    """
    if dtype.itemsize == 2:
        return np.full(neg.shape, 0x7FFF, dtype=np.uint64)
    if prof != "torch-cuda":
        return None
    if fmt.name == "e4m3fn":
        f32 = np.uint64(0x7FF00000) | (neg.astype(np.uint64) << np.uint64(31))
    elif fmt.name == "e5m2":
        f32 = np.uint64(0x7FFFFFFF) | (neg.astype(np.uint64) << np.uint64(31))
    else:
        f32 = np.full(neg.shape, 0x7F800001, dtype=np.uint64)
    if dtype.itemsize == 4:
        return f32
    # float32 -> float64 widening on the GPU: quiet bit set, payload shifted up by 29.
    sign = (f32 >> np.uint64(31)) << np.uint64(63)
    return sign | np.uint64(0x7FF8000000000000) | ((f32 & np.uint64(0x7FFFFF)) << np.uint64(29))


@functools.lru_cache(maxsize=64)
def profile_decode_table(name, fmt, dtype):
    """Decoded value of every code under a profile (read-only array of ``dtype``).

    The profiles differ from ``ocp`` only in the bit patterns of NaN.

    Examples
    --------
    >>> import numpy as np
    >>> from fp8emu.profiles import profile_decode_table
    >>> hex(profile_decode_table("torch-cuda", "e4m3fn", np.dtype(np.float32)).view(np.uint32)[0xFF])
    '0xfff00000'
    """
    prof = get_profile(name).name
    fmt = get_format(fmt)
    dtype = np.dtype(dtype)
    vals = fmt.values()
    if prof == "ml_dtypes" and fmt.ml_dtype is not None:
        t = np.arange(vals.size, dtype=np.uint8).view(fmt.ml_dtype).astype(dtype)
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            t = vals.astype(dtype)
    nan = np.isnan(vals)
    if prof not in ("ocp", "ml_dtypes") and nan.any():
        codes = np.arange(vals.size)
        neg = (codes >> (fmt.bits - 1)) & 1 if fmt.signed else np.zeros(vals.size, dtype=np.int64)
        pat = _decode_nan_bits(prof, fmt, dtype, neg)
        if pat is not None:
            uint = {2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize]
            t.view(uint)[nan] = pat[nan].astype(uint)
    t.setflags(write=False)
    return t


def profile_decode(codes, fmt, profile, *, dtype=np.float32):
    """:func:`fp8emu.decode` under a profile (differs from ``ocp`` only in NaN bit patterns)."""
    from .codec import _as_codes, decode, DECODE_DTYPES
    prof = get_profile(profile)
    if prof.name == "ocp":
        return decode(codes, fmt, dtype=dtype)
    fmt = get_format(fmt)
    dt = np.dtype(dtype)
    if dt not in DECODE_DTYPES:
        raise TypeError(f"unsupported decode dtype {dtype!r}; accepted: float16, bfloat16, float32, float64")
    return np.take(profile_decode_table(prof.name, fmt.name, dt), _as_codes(codes, fmt))
