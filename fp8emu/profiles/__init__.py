"""Implementation profiles: what a particular GPU or library cast produces.

A :class:`Profile` names a code path (``"torch-cuda"``, ``"cuda-satfinite"``,
...) and fixes, per target format, the rounding modes it offers, its
saturation behaviour and its intermediate type.  Each :class:`Rule` is the
exact encode with those options plus an optional *fix*: a callable with the
one signature ``fix(table, x, fmt, rule)`` that edits a copy of the small
encode table in place (never per element), so ``encode(x, fmt, profile=...)``
is a table look-up as fast as plain encode.  Decoders differ only in NaN bit
patterns, described by a ``decode_fix(table, fmt, dtype)`` callable.

``"ocp"`` (the spec; every option of :func:`fp8emu.encode`) and the
``"ml_dtypes"`` variants are ordinary profiles.  A user-built :class:`Profile` is used
exactly as given: tables are cached on the Profile object itself and on the
:class:`~fp8emu.formats.Format` object, never looked up again by name.  Rules
are keyed on the built-in Format objects they describe, so a look-alike
Format that merely shares a built-in's name is rejected with a clear error.

Rules found in the H200 recordings (``fp8emu/data/golden``)
-----------------------------------------------------------
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
* torch (and ml_dtypes before 0.7) round float64 through float32 (double rounding); the
  CUDA, Triton and JAX paths take float32 inputs, so float64 is first
  rounded to float32 there too.

Rules found on the CPU engines (every input through the engine itself)
----------------------------------------------------------------------
``fp8emu.engines`` runs the real engines and ``tests/test_engines.py``
proves these profiles against them on every run (all inputs under ``-m
exhaustive``); each profile's :attr:`Profile.versions` names the library
versions it is proven for (onnx 1.23.2 over ml_dtypes 0.5.4-0.7, onnxruntime
1.32.0, jaxlib 0.10.2, torch 2.13.0+cpu).

Version-scoped library profiles
-------------------------------
A library that changed behaviour has one profile per behaviour, and its
plain name means the installed version, chosen at use
(:func:`resolve_versioned`): ``ml_dtypes`` is ``ml_dtypes-0.6`` (0.5.4 to
0.6: float64 through float32; E8M0 float32 subnormals in (2**-127,
1.5 * 2**-127) round up to 2**-126) or ``ml_dtypes-0.7`` (float64 rounded
once; the spec E8M0); both turn FP4/FP6 NaN into -0 and -NaN into +0.  The
ONNX reference evaluator casts FP8/FP6/FP4 through ml_dtypes, so ``onnx``
and ``onnx-nosat`` follow the installed ml_dtypes the same way
(``onnx-ml_dtypes-0.6``, ``onnx-ml_dtypes-0.7``, ...).  The rules are
proven against casts recorded from each release
(``tools/record_library_vectors.py``) and against the installed one.

* ``onnx`` / ``onnx-nosat``: the ONNX reference evaluator's ``Cast`` and
  ``QuantizeLinear`` (scale 1) with ``saturate=1`` (ONNX's default) / ``0``:
  the spec for FP8 (float64 through float32 over ml_dtypes 0.6, rounded once
  over 0.7); FLOAT4E2M1/FLOAT6 NaN gives -0
  (0x8/0x20) and -NaN +0; FLOAT8E8M0 keeps the float32 exponent field, ignoring the sign,
  with ``round_mode`` up/down/nearest as the rounding options ``rup``,
  ``rtz``, ``rne`` (see :func:`e8m0_onnx`).  ONNX's default ``round_mode`` is
  "up": pass ``rounding="rup"`` (fp8emu's default ``"rne"`` selects "nearest").
* ``onnxruntime-cpu`` / ``-nosat``: ONNX Runtime's CPU provider, the same
  attributes: E5M2 NaN 0x7F|sign; with ``saturate=0`` E4M3FN gives +-448 for
  ``|x|`` in [480, 496) and E5M2 gives NaN for values that round past max
  (:func:`onnxruntime_fp8`); E8M0 only rounds inside [2**-127, 2**127]
  (:func:`e8m0_onnxruntime`).
* ``jax-cpu``: XLA on the CPU rounds float64 once (no float32 step) and
  follows the spec except E5M2 NaN from 16-bit sources (0x7F), FP4 NaN
  (0x8) and E8M0 near 2**-127 (:func:`jax_cpu_e8m0`).
* ``torch-cpu``: E4M3FN *saturates* overflow and Inf to +-448 (torch 2.11's
  CUDA cast gave NaN); E5M2 NaN 0x7F|sign from every source; E8M0 as torch CUDA;
  float64 through float32.

Version-scoped GPU profiles
---------------------------
``torch-cuda`` means the installed torch: ``torch-cuda-2.11`` (torch 2.1 to 2.11; the H200
recordings, made with torch 2.11) or ``torch-cuda-2.12`` (2.12 to 2.15).  The second is *from
source, not recorded*: pytorch#178817 (merged 2026-04-17, in 2.12) makes the ``C10_HOST_DEVICE``
float -> E4M3FN conversion (``torch/headeronly/util/Float8_e4m3fn.h``; the 2.13 header is on disk
with torch) saturate finite overflow *and* Inf to +-448 with NaN -> 0x7F|sign, and ``Copy.cu``
(the snapshot read: CUDA >= 13.0 on sm_89+) converts float32/float16/bfloat16 to E4M3FN with
``__nv_cvt_*_to_fp8(..., __NV_SATFINITE, __NV_E4M3)`` (NaN -> 0x7F, sign dropped) and to E5M2, off
Blackwell, with the c10 conversion (RNE, overflow -> Inf, NaN -> 0x7F|sign from every source).
The one code the sources read do not settle across 2.12-2.15 is E4M3FN's -NaN (0xFF where a build
still takes the c10 path).  Without torch the plain name refuses to guess
(:class:`UndecidedVersionError` names both variants).  ``triton-rtne``/``triton-rtz`` (Triton
3.6) and ``jax-gpu`` (jaxlib 0.11) carry the version ranges of their recordings.
"""

from __future__ import annotations

import functools
import importlib.metadata
import warnings
from dataclasses import dataclass

from ..formats import get_format
from ..registry import Registry
from .fixes import (e8m0_onnx, e8m0_onnxruntime, e8m0_subnormal_round_up, e8m0_torch, e8m0_unsigned_zero_min,
                    fp4_nan_jax, gpu_decode_nan, jax_cpu_decode, jax_cpu_e5m2, jax_cpu_e8m0, nan_7f, nan_7f_keep_inf,
                    nan_7f_signed, onnxruntime_fp8, signed_nan_decode, subbyte_nan_ml_dtypes, torch_cpu_decode,
                    torch_decode_nan, torch_nan)
from .profile import Profile, Rule
from .versions import UndecidedVersionError, UnprovenVersionWarning, VersionRange, release_of, version_key

__all__ = ["Rule", "Profile", "VersionRange", "UnprovenVersionWarning", "UndecidedVersionError",
           "profile_names", "get_profile",
           "register_profile", "resolve_versioned", "versioned_names", "installed_version", "PROFILE_NAMES"]


# ----------------------------------------------------------------------------- the profiles
_F = {n: get_format(n) for n in ("e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz", "e8m0fnu",
                                  "e2m3fn", "e3m2fn", "e2m1fn")}
_E4M3FN, _E5M2 = _F["e4m3fn"], _F["e5m2"]
_FP8 = (_F["e4m3fn"], _F["e5m2"])
_FNUZ = (_F["e4m3fnuz"], _F["e5m2fnuz"])
_SUBBYTE = (_F["e2m3fn"], _F["e3m2fn"], _F["e2m1fn"])


def _only(rnd, sat, fix=None):
    return {rnd: Rule(rnd, sat, fix)}


def _cuda_rules(sat):
    rules = {f: _only("rne", sat, nan_7f) for f in _FP8}
    rules[_F["e8m0fnu"]] = {m: Rule(m, sat, e8m0_unsigned_zero_min) for m in ("rtz", "rup")}
    for f in _SUBBYTE:
        rules[f] = {m: Rule(m, True) for m in ("rne", "rtz")}
    return rules


# The GPU recordings (fp8emu/data/golden, an H200) name the library versions they were made with; the
# torch >= 2.12 rules are read from torch's source (see the module docstring), not recorded.
_TORCH_CUDA_OLD = VersionRange("torch", "2.1", "2.12", ("2.11",))
_TORCH_CUDA_NEW = VersionRange("torch", "2.12", "2.16")
_TRITON = VersionRange("triton", "3.6", "3.7", ("3.6",))
_JAX_GPU = VersionRange("jaxlib", "0.11", "0.12", ("0.11",))

_BUILTIN = [
    Profile("ocp", "OCP OFP8 / OCP MX spec: exact single rounding, every option of encode (the default)",
            None, None),
    # torch on CUDA, one profile per behaviour; the plain name "torch-cuda" picks one by the installed torch
    Profile("torch-cuda-2.11", "torch <= 2.11 tensor.to(float8_*) on CUDA 13.0 (recorded on an H200 with "
            "torch 2.11): RNE non-saturating, E5M2 NaN 0x7F, f16 NaN unsigned, e8m0 ties-up rule, float64 "
            "via float32",
            {**{f: _only("rne", False, torch_nan) for f in _FP8}, **{f: _only("rne", False) for f in _FNUZ},
             _F["e8m0fnu"]: _only("rne", False, e8m0_torch)},
            "float32", torch_decode_nan, versions=(_TORCH_CUDA_OLD,)),
    Profile("torch-cuda-2.12", "torch >= 2.12 tensor.to(float8_*) on CUDA 13 (from source, not recorded: "
            "pytorch#178817 and Copy.cu): E4M3FN saturates overflow and Inf to +-448, NaN 0x7F; E5M2 RNE "
            "non-saturating, NaN 0x7F|sign; e8m0 ties-up rule, float64 via float32",
            {_E4M3FN: _only("rne", True, nan_7f), _E5M2: _only("rne", False, nan_7f_signed),
             **{f: _only("rne", False) for f in _FNUZ}, _F["e8m0fnu"]: _only("rne", False, e8m0_torch)},
            "float32", torch_decode_nan, versions=(_TORCH_CUDA_NEW,)),
    Profile("cuda-satfinite", "cuda_fp8/fp6/fp4.h intrinsics with __NV_SATFINITE: overflow and Inf -> max, "
            "NaN 0x7F; e8m0 rz/rp; FP6/FP4 rn/rz", _cuda_rules(True), "float32", gpu_decode_nan,
            saturation_alternative="cuda-nosat"),
    Profile("cuda-nosat", "cuda_fp8/fp6/fp4.h intrinsics with __NV_NOSAT: overflow -> Inf/NaN, NaN 0x7F; "
            "e8m0 rz/rp; FP6/FP4 rn/rz", _cuda_rules(False), "float32", gpu_decode_nan,
            saturation_alternative="cuda-satfinite"),
    Profile("triton-rtne", "Triton 3.6 fp_downcast_rounding='rtne' (e4m3fn, e5m2): saturates overflow and "
            "Inf to max, NaN 0x7F", {f: _only("rne", True, nan_7f) for f in _FP8}, "float32", gpu_decode_nan,
            versions=(_TRITON,)),
    Profile("triton-rtz", "Triton 3.6 fp_downcast_rounding='rtz' (e5m2 only): overflow -> max, Inf kept, "
            "NaN 0x7F", {_E5M2: _only("rtz", False, nan_7f_keep_inf)}, "float32", gpu_decode_nan,
            versions=(_TRITON,)),
    Profile("jax-gpu", "JAX 0.11 astype under jit on the GPU (XLA): RNE non-saturating, NaN 0x7F for "
            "e4m3fn/e5m2", {**{f: _only("rne", False, nan_7f) for f in _FP8},
                            **{f: _only("rne", False) for f in _FNUZ}}, "float32", gpu_decode_nan,
            versions=(_JAX_GPU,)),
]

# ml_dtypes: its astype casts, per behaviour.  Recorded from each version by
# tools/record_library_vectors.py (tests/data/library_vectors/); 0.5.4 and 0.6.0 agree on every probe.
# The formats the recordings cover (an explicit list: a type a later release adds is not claimed).
_ML_FORMATS = tuple(get_format(n) for n in ("e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz", "e4m3b11fnuz", "e4m3",
                                           "e3m4", "e8m0fnu", "e2m3fn", "e3m2fn", "e2m1fn"))
_ML_06 = VersionRange("ml_dtypes", "0.5.4", "0.7", ("0.5.4", "0.6.0"))
_ML_07 = VersionRange("ml_dtypes", "0.7", "0.8", ("0.7.0",))


def _ml_dtypes_rules(e8m0_fix, added=()):
    rules = {f: _only("rne", False) for f in (*_ML_FORMATS, *added) if f not in _SUBBYTE}
    rules.update({f: _only("rne", True, subbyte_nan_ml_dtypes) for f in _SUBBYTE})
    if e8m0_fix is not None:
        rules[_F["e8m0fnu"]] = _only("rne", False, e8m0_fix)
    return rules


def _onnx_rules(sat):
    rules = {f: _only("rne", sat) for f in (*_FP8, *_FNUZ)}
    rules.update({f: _only("rne", True, subbyte_nan_ml_dtypes) for f in _SUBBYTE})
    # E8M0 is ONNX's own code, on the float32 value, whatever ml_dtypes does with float64
    rules[_F["e8m0fnu"]] = {m: Rule(m, sat, e8m0_onnx, via64="float32") for m in ("rup", "rtz", "rne")}
    return rules


def _onnxruntime_rules(sat):
    rules = {f: _only("rne", sat, onnxruntime_fp8) for f in _FP8}
    rules.update({f: _only("rne", sat) for f in _FNUZ})
    rules[_F["e8m0fnu"]] = {m: Rule(m, sat, e8m0_onnxruntime) for m in ("rup", "rtz", "rne")}
    return rules


_JAX_CPU = {f: _only("rne", False) for f in (get_format(n) for n in (
    "e4m3fn", "e4m3fnuz", "e5m2fnuz", "e4m3b11fnuz", "e4m3", "e3m4"))}
_JAX_CPU.update({_E5M2: _only("rne", False, jax_cpu_e5m2), _F["e2m1fn"]: _only("rne", True, fp4_nan_jax),
                 _F["e8m0fnu"]: _only("rne", False, jax_cpu_e8m0)})

_ONNX = VersionRange("onnx", "1.23.2", "1.24", ("1.23.2",))
_ORT = VersionRange("onnxruntime", "1.32.0", "1.33", ("1.32.0",))
_ONNX_SAT = ("saturate=1, the default: FP8 RNE saturating", "saturate=0: FP8 RNE non-saturating (the spec)")

_BUILTIN += [
    Profile("onnxruntime-cpu", "ONNX Runtime 1.32 CPU Cast/QuantizeLinear with saturate=1 (default): E5M2 NaN "
            "0x7F|sign; E8M0 rounds in [2**-127, 2**127] only, else 0x00/0xFE", _onnxruntime_rules(True),
            "float32", signed_nan_decode, versions=(_ORT,), saturation_alternative="onnxruntime-cpu-nosat"),
    Profile("onnxruntime-cpu-nosat", "ONNX Runtime 1.32 CPU Cast/QuantizeLinear with saturate=0: E4M3FN "
            "|x| in [480, 496) -> +-448 (spec: NaN), E5M2 round-up overflow -> NaN, NaN 0x7F|sign; E8M0 "
            "outside [2**-127, 2**127] -> NaN", _onnxruntime_rules(False), "float32", signed_nan_decode,
            versions=(_ORT,), saturation_alternative="onnxruntime-cpu"),
    Profile("jax-cpu", "JAX 0.10.2 astype on the CPU (XLA, eager or jit): the spec, float64 rounded once; "
            "E5M2 NaN 0x7F from 16-bit sources, FP4 NaN 0x8, E8M0 as ml_dtypes 0.6 (float64: below 2**-127 "
            "-> NaN)", _JAX_CPU, "float64", jax_cpu_decode,
            versions=(VersionRange("jaxlib", "0.10.2", "0.11", ("0.10.2",)),)),
    Profile("torch-cpu", "torch 2.13 tensor.to(float8_*) on the CPU: E4M3FN saturates overflow and Inf to "
            "+-448, E5M2 NaN 0x7F|sign, e8m0 ties-up rule, float64 via float32",
            {_E4M3FN: _only("rne", True), _E5M2: _only("rne", False, nan_7f_signed),
             **{f: _only("rne", False) for f in _FNUZ}, _F["e8m0fnu"]: _only("rne", False, e8m0_torch)},
            "float32", torch_cpu_decode, versions=(VersionRange("torch", "2.13.0", "2.14", ("2.13.0+cpu",)),)),
    # Versioned variants: the plain names "ml_dtypes", "onnx" and "onnx-nosat" pick one of these at use.
    Profile("ml_dtypes-0.6", "ml_dtypes 0.5.4-0.6 astype: RNE non-saturating, float64 via float32 (double "
            "rounding), FP4/FP6 NaN -> -0 and -NaN -> +0, e8m0 (2**-127, 1.5*2**-127) -> 2**-126",
            _ml_dtypes_rules(e8m0_subnormal_round_up), "float32", versions=(_ML_06,)),
    Profile("ml_dtypes-0.7", "ml_dtypes 0.7 astype: the spec (RNE non-saturating, float64 rounded once) but "
            "FP4/FP6 NaN -> -0 and -NaN -> +0; UE5M3 (float8_e5m3fnu, new in 0.7) as the spec",
            _ml_dtypes_rules(None, added=(get_format("e5m3fnu"),)), "float64", versions=(_ML_07,)),
]
for _sat, _sfx, _alt in ((True, "", "onnx-nosat"), (False, "-nosat", "onnx")):
    for _ml, _via in ((_ML_06, "float32"), (_ML_07, "float64")):
        _v = _ml.minimum[:3] if _ml is _ML_07 else "0.6"
        _BUILTIN.append(Profile(
            f"onnx{_sfx}-ml_dtypes-{_v}",
            f"ONNX Cast/QuantizeLinear (reference evaluator, onnx 1.23.2, opset 28, over ml_dtypes {_v}) with "
            f"{_ONNX_SAT[0 if _sat else 1]}, FP4/FP6 NaN -> -0, E8M0 exponent-field rule (round_mode "
            f"up/down/nearest = rup/rtz/rne), float64 {'via float32' if _via == 'float32' else 'rounded once'}",
            _onnx_rules(_sat), _via, signed_nan_decode, versions=(_ONNX, _ml),
            saturation_alternative=f"onnx{'-nosat' if _sat else ''}-ml_dtypes-{_v}"))
_PROFILES = Registry("profile", Profile, _BUILTIN)


@dataclass(frozen=True)
class _Versioned:
    """A plain library name that means "the installed version": one variant per behaviour, oldest first."""

    name: str
    what: str
    variants: tuple
    #: A distribution without which no variant is chosen (the name refuses to guess), or None.
    required: str | None = None


_VERSIONED = {v.name: v for v in (
    _Versioned("torch-cuda", "torch tensor.to(float8_*) on CUDA", ("torch-cuda-2.11", "torch-cuda-2.12"),
               required="torch"),
    _Versioned("ml_dtypes", "ml_dtypes NumPy astype casts", ("ml_dtypes-0.6", "ml_dtypes-0.7")),
    _Versioned("onnx", "ONNX Cast/QuantizeLinear (reference evaluator) with saturate=1",
               ("onnx-ml_dtypes-0.6", "onnx-ml_dtypes-0.7")),
    _Versioned("onnx-nosat", "ONNX Cast/QuantizeLinear (reference evaluator) with saturate=0",
               ("onnx-nosat-ml_dtypes-0.6", "onnx-nosat-ml_dtypes-0.7")),
)}
# Listing order: the plain names where the single profiles of those libraries used to stand.
_ORDER = ("ocp", "ml_dtypes", "torch-cuda", "cuda-satfinite", "cuda-nosat", "triton-rtne", "triton-rtz",
          "jax-gpu", "onnx", "onnx-nosat")

#: Built-in profile names, in the order of :func:`profile_names` (plain library names, then variants).
PROFILE_NAMES = _ORDER + tuple(n for n in _PROFILES if n not in _ORDER)


def installed_version(distribution: str) -> str | None:
    """The installed version of a Python distribution, or None when it is not installed.

    Reads the distribution's metadata; imports nothing.

    Examples
    --------
    >>> from fp8emu.profiles import installed_version
    >>> installed_version("ml_dtypes") is not None, installed_version("no-such-distribution-xyz")
    (True, None)
    """
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def versioned_names() -> dict:
    """The plain library names that pick a versioned variant at use: ``{name: (variant, ...)}``.

    Examples
    --------
    >>> from fp8emu.profiles import versioned_names
    >>> versioned_names()["ml_dtypes"]
    ('ml_dtypes-0.6', 'ml_dtypes-0.7')
    """
    return {n: v.variants for n, v in _VERSIONED.items()}


def resolve_versioned(name: str, installed=None) -> Profile:
    """The variant of the plain library profile ``name`` that describes the installed versions.

    Parameters
    ----------
    name : str
        A plain library name (see :func:`versioned_names`).
    installed : mapping, optional
        ``{distribution: version or None}`` to decide with instead of the
        installed distributions (not installed: None).

    Returns
    -------
    Profile
        The variant whose :attr:`Profile.versions` contain every installed
        version of the libraries it depends on (libraries not installed are
        not checked).  Versions are compared by PEP 440 (``packaging.version``;
        ``0.7.0.0`` is ``0.7``).  When none does, an :class:`UnprovenVersionWarning`
        names the installed versions and every variant's range, and the
        variant agreeing on most libraries is used: of equals the newest,
        or the oldest when an installed version lies below a range.  A
        pre-release or dev release of a range's bound (``0.7.0rc1``) is
        proven for no variant: it warns, and gets the variant of the release
        it leads up to (``0.7.0``'s).

    Examples
    --------
    >>> from fp8emu.profiles import resolve_versioned
    >>> resolve_versioned("ml_dtypes", {"ml_dtypes": "0.6.0"}).name
    'ml_dtypes-0.6'
    >>> resolve_versioned("onnx", {"onnx": "1.23.2", "ml_dtypes": "0.7.0"}).name
    'onnx-ml_dtypes-0.7'
    """
    if name not in _VERSIONED:
        raise ValueError(f"{name!r} is not a versioned profile name; those are: {', '.join(_VERSIONED)}")
    if installed is None:
        return _resolve_installed(name)
    return _resolve(name, dict(installed))


@functools.lru_cache(maxsize=None)
def _resolve_installed(name):
    variants = [_PROFILES[v] for v in _VERSIONED[name].variants]
    dists = {r.distribution for p in variants for r in p.versions}
    return _resolve(name, {d: installed_version(d) for d in dists})


def _resolve(name, installed):
    variants = [_PROFILES[v] for v in _VERSIONED[name].variants]
    need = _VERSIONED[name].required
    if need is not None and installed.get(need) is None:
        raise UndecidedVersionError(
            f"profile {name!r} depends on the {need} version and {need} is not installed here; name the "
            "variant you mean: " + "; ".join(f"{p.name!r} ({', '.join(str(r) for r in p.versions)})"
                                             for p in variants))

    def agree(p):
        return sum(installed.get(r.distribution) is None or r.contains(installed[r.distribution])
                   for r in p.versions)

    scores = [agree(p) for p in variants]
    for p, score in zip(variants, scores):
        if score == len(p.versions):
            return p
    def below(p):   # an installed version under a failing range: prefer older variants
        return any(installed.get(r.distribution) is not None and not r.contains(installed[r.distribution])
                   and version_key(installed[r.distribution]) < version_key(r.minimum) for r in p.versions)

    # a pre-release is proven for nothing, but is nearest to the release it leads up to
    released = {d: None if v is None else release_of(v) for d, v in installed.items()}
    near = [sum(released.get(r.distribution) is None or r.contains(released[r.distribution])
                for r in p.versions) for p in variants]
    best = max(range(len(variants)), key=lambda i: (near[i], scores[i], -i if below(variants[i]) else i))
    have = ", ".join(f"{d} {v}" for d, v in sorted(installed.items()) if v is not None)
    ranges = "; ".join(f"{p.name}: {', '.join(str(r) for r in p.versions)}" for p in variants)
    warnings.warn(f"profile {name!r}: the installed {have} lies outside every version range it is proven "
                  f"for ({ranges}); using {variants[best].name!r}. Install a proven version, or name a variant "
                  f"to be explicit.", UnprovenVersionWarning, stacklevel=4)
    return variants[best]


def profile_names() -> dict:
    """Names of the registered implementation profiles and a one-line description of each.

    The plain library names (``"ml_dtypes"``, ``"onnx"``, ``"onnx-nosat"``)
    mean the installed version: their description names the variant they
    resolve to here (see :func:`resolve_versioned`).

    Examples
    --------
    >>> import fp8emu
    >>> list(fp8emu.profile_names())[:3]
    ['ocp', 'ml_dtypes', 'torch-cuda']
    """
    out = {}
    for n in PROFILE_NAMES + tuple(n for n in _PROFILES if n not in PROFILE_NAMES):
        if n in _VERSIONED:
            v = _VERSIONED[n]
            try:
                here = resolve_versioned(n).name
            except UndecidedVersionError:
                here = f"none ({v.required} is not installed)"
            out[n] = f"{v.what} of the installed version: here {here} (variants: {', '.join(v.variants)})"
        else:
            out[n] = _PROFILES[n].description
    return out


def register_profile(profile: Profile, *, replace: bool = False) -> Profile:
    """Make a user-built :class:`Profile` available by its name.

    Built-in profiles cannot be replaced; another user registration only with ``replace=True``.

    Examples
    --------
    >>> import fp8emu
    >>> from fp8emu.profiles import Profile, Rule, register_profile
    >>> p = register_profile(Profile("demo-sat", "RNE, saturating",
    ...     {fp8emu.get_format("e5m2"): {"rne": Rule("rne", True)}}), replace=True)
    >>> fp8emu.get_profile("demo-sat") is p
    True
    """
    if profile.name in _VERSIONED:
        raise ValueError(f"a profile named {profile.name!r} is already registered")
    return _PROFILES.register(profile, replace=replace)


def get_profile(profile=None) -> Profile:
    """The :class:`Profile` called ``profile`` (``None``: ``"ocp"``); a Profile object is used as given.

    A plain library name (``"ml_dtypes"``, ``"onnx"``, ``"onnx-nosat"``)
    gives the variant for the installed library versions
    (:func:`resolve_versioned`).

    Raises
    ------
    ValueError
        If there is no such profile (the message lists them).
    TypeError
        If ``profile`` is neither a name nor a Profile.

    Examples
    --------
    >>> from fp8emu.profiles import get_profile
    >>> sorted(m for r in get_profile("cuda-nosat").rules.values() for m in r if m != "rne")[:2]
    ['rtz', 'rtz']
    >>> get_profile("ml_dtypes").name in ("ml_dtypes-0.6", "ml_dtypes-0.7")
    True
    """
    if profile is None:
        return _PROFILES["ocp"]
    if isinstance(profile, Profile):
        return profile
    if not isinstance(profile, str):
        raise TypeError(f"profile must be a name or a Profile, got {type(profile).__name__}")
    if profile in _VERSIONED:
        return _resolve_installed(profile)
    try:
        return _PROFILES[profile]
    except KeyError:
        raise ValueError(f"unknown profile {profile!r}; valid profiles: "
                         f"{', '.join(profile_names())}") from None
