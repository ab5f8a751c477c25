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
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from packaging.version import InvalidVersion, Version

from .formats import Format, get_format
from .registry import Registry
from .rounding import DETERMINISTIC_MODES
from .tables import SOURCE_DTYPES, encode_table, decode_table, lookup, source_name, table_inputs

__all__ = ["Rule", "Profile", "VersionRange", "UnprovenVersionWarning", "UndecidedVersionError",
           "profile_names", "get_profile",
           "register_profile", "resolve_versioned", "versioned_names", "installed_version", "PROFILE_NAMES"]

_FLOAT16 = SOURCE_DTYPES["float16"]
_BFLOAT16 = SOURCE_DTYPES["bfloat16"]
#: Sources a profile's tables cover directly; others are first converted to ``Profile.via64``.
_TABLE_SOURCES = ("float32", "float16", "bfloat16")


class UnprovenVersionWarning(UserWarning):
    """An installed library's version lies outside every range a versioned profile is proven for."""


class UndecidedVersionError(ValueError):
    """A plain profile name depends on a library that is not installed, so no variant can be chosen."""


def _version_key(version: str) -> Version:
    """A release string as a PEP 440 :class:`packaging.version.Version` (compared as PEP 440 orders them).

    ``"0.7.0.0"`` equals ``"0.7"``; ``"2.13.0+cpu"`` lies in ``[2.13, 2.14)``; a pre-release sorts below
    its release.  A string that does not start with a digit (``"v1.0"``, ``"latest"``) is refused.
    """
    if not isinstance(version, str) or not re.match(r"\d", version):
        raise ValueError(f"not a release version: {version!r}")
    try:
        return Version(version)
    except InvalidVersion:
        raise ValueError(f"not a release version: {version!r} (PEP 440)") from None


def _release_of(version: str) -> str:
    """The release a pre-release or dev release leads up to (``"0.7.0rc1"`` -> ``"0.7.0"``)."""
    return _version_key(version).base_version


@dataclass(frozen=True)
class VersionRange:
    """The versions of one library that a profile's rules are proven for.

    Attributes
    ----------
    distribution : str
        The Python distribution whose version decides the result (``"ml_dtypes"``, ``"onnx"``).
    minimum : str
        Lowest version the rules hold for (inclusive).
    below : str or None
        First version they are not claimed for (exclusive); None: no upper bound.
    proven : tuple of str
        The versions the rules were proven on, bit for bit, by recorded vectors or live tests.

    Examples
    --------
    >>> from fp8emu.profiles import VersionRange
    >>> r = VersionRange("ml_dtypes", "0.5.4", "0.7", ("0.5.4", "0.6.0"))
    >>> r.contains("0.6.0"), r.contains("0.7.0"), str(r)
    (True, False, 'ml_dtypes >=0.5.4,<0.7 (proven on 0.5.4, 0.6.0)')
    """

    distribution: str
    minimum: str
    below: str | None = None
    proven: tuple = ()

    def __post_init__(self):
        _version_key(self.minimum)
        if self.below is not None and _version_key(self.below) <= _version_key(self.minimum):
            raise ValueError(f"VersionRange({self.distribution!r}): below={self.below!r} must be above "
                             f"minimum={self.minimum!r}")
        if not isinstance(self.proven, tuple) or not all(self.contains(v) for v in self.proven):
            raise ValueError(f"VersionRange({self.distribution!r}): every proven version must lie in the range")

    def contains(self, version: str) -> bool:
        """Whether ``version`` lies in ``[minimum, below)``, compared by PEP 440.

        A pre-release or dev release of a bound is in neither range the bound separates:
        ``0.7.0rc1`` sorts below ``0.7`` but is not the ``<0.7`` code, and is not the ``0.7``
        release either (:func:`resolve_versioned` then warns).  Pre-releases of versions strictly
        inside a range (``1.3.0rc1`` in ``[1.2, 1.4)``) are in it.
        """
        k = _version_key(version)
        if k < _version_key(self.minimum):
            return False
        if self.below is None:
            return True
        hi = _version_key(self.below)
        return k < hi and not (k.is_prerelease and Version(k.base_version) == hi)

    def __str__(self):
        rng = f">={self.minimum}" + (f",<{self.below}" if self.below else "")
        proven = f" (proven on {', '.join(self.proven)})" if self.proven else ""
        return f"{self.distribution} {rng}{proven}"


@dataclass(frozen=True)
class Rule:
    """How a profile produces one format under one rounding option.

    Attributes
    ----------
    rounding : str
        Rounding mode of the exact encode the table starts from.
    saturate : bool
        Saturation of that exact encode.
    fix : callable or None
        ``fix(table, x, fmt, rule) -> None`` edits the writable encode table
        ``table`` (one code per representative input ``x``, see
        :func:`fp8emu.tables.table_inputs`) in place.
    saturation : bool, str or None
        The saturation the code path shows once ``fix`` is applied, as
        :func:`fp8emu.encode` names it (True, False or ``"satpropagate"``),
        where it differs from ``saturate``; an explicit ``saturate=`` given
        to :func:`fp8emu.encode` with this profile must equal it.
    via64 : {"float32", "float64", None}
        For this format only, the intermediate type of sources other than
        float32/float16/bfloat16, where it differs from the profile's
        :attr:`Profile.via64` (the ONNX reference over ml_dtypes 0.7 rounds
        float64 once to FP8 but through float32 to E8M0).
    """

    rounding: str
    saturate: bool
    fix: Callable | None = None
    saturation: bool | str | None = None
    via64: str | None = None

    @property
    def policy(self):
        """The saturation this rule shows: ``saturation`` when given, else ``saturate``."""
        return self.saturate if self.saturation is None else self.saturation


@dataclass(frozen=True, eq=False)
class Profile:
    """One implementation profile: what a GPU or library cast produces.

    Profiles compare and hash by identity: caches are keyed on the object.

    Attributes
    ----------
    name : str
    description : str
    rules : mapping or None
        ``{Format: {rounding option: Rule}}``; ``None`` means the spec: every
        format and every option of :func:`fp8emu.encode` (the ``ocp`` profile).
    via64 : {"float32", "float64", None}
        Intermediate type for sources other than float32/float16/bfloat16;
        ``"float64"`` rounds float64 (and integers) once, from float64 tables.
    decode_fix : callable or None
        ``decode_fix(table, fmt, dtype) -> None`` edits a writable copy of the
        decode table (value of every code in ``dtype``) in place.
    versions : tuple of VersionRange
        For a profile of a software library: the versions of each library
        that determines its result, with those it was proven on (empty for
        GPU code paths and the spec).
    saturation_alternative : str or None
        Name of the profile of the same code path with the other saturation
        setting (``cuda-satfinite`` for ``cuda-nosat``), named in the error
        for a contradicting ``saturate=``.

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> from fp8emu.profiles import Profile, Rule
    >>> sat = Profile("my-sat", "saturating RNE", {fp8emu.get_format("e4m3fn"): {"rne": Rule("rne", True)}})
    >>> fp8emu.encode(np.float32(1000.0), "e4m3fn", profile=sat).tolist()
    126
    """

    name: str
    description: str
    rules: Mapping | None
    via64: str | None = "float32"
    decode_fix: Callable | None = None
    versions: tuple = ()
    saturation_alternative: str | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("Profile.name must be a non-empty string")
        if not isinstance(self.versions, tuple) or not all(isinstance(v, VersionRange) for v in self.versions):
            raise TypeError("Profile.versions must be a tuple of VersionRange")
        if self.via64 not in (None, "float32", "float64"):
            raise ValueError(f"Profile.via64 must be 'float32', 'float64' or None, got {self.via64!r}")
        if self.rules is None:
            return
        if not isinstance(self.rules, Mapping):
            raise TypeError(f"Profile.rules must be a mapping {{Format: {{rounding: Rule}}}}, "
                            f"got {type(self.rules).__name__}")
        for fmt, by_mode in self.rules.items():
            if not isinstance(fmt, Format):
                raise TypeError(f"Profile.rules keys must be Format objects, got {fmt!r}")
            if not isinstance(by_mode, Mapping) or not by_mode:
                raise TypeError(f"Profile.rules[{fmt.name}] must be a non-empty mapping {{rounding: Rule}}")
            for mode, rule in by_mode.items():
                if mode not in DETERMINISTIC_MODES or not isinstance(rule, Rule):
                    raise ValueError(f"Profile.rules[{fmt.name}][{mode!r}] must map a deterministic "
                                     f"rounding mode ({', '.join(DETERMINISTIC_MODES)}) to a Rule")
                if rule.rounding not in DETERMINISTIC_MODES:
                    raise ValueError(f"Rule.rounding must be one of {DETERMINISTIC_MODES}, got {rule.rounding!r}")
                if rule.via64 not in (None, "float32", "float64"):
                    raise ValueError(f"Rule.via64 must be 'float32', 'float64' or None, got {rule.via64!r}")

    @property
    def is_spec(self) -> bool:
        """True for a profile with every option of the exact encode (``ocp``)."""
        return self.rules is None

    def check_format(self, fmt: Format) -> None:
        """Raise a clear error unless this (non-spec) profile describes ``fmt``."""
        if self.is_spec or fmt in self.rules:
            return
        if any(f.name == fmt.name for f in self.rules):
            raise ValueError(f"profile {self.name!r} describes the built-in format {fmt.name!r}; the "
                             f"Format given under that name differs from it ({fmt!r})")
        covered = ", ".join(f.name for f in self.rules)
        raise ValueError(f"profile {self.name!r} cannot express format {fmt.name!r}; it covers: {covered}")

    def rule(self, fmt: Format, rounding: str) -> Rule:
        """The :class:`Rule` for ``fmt`` and ``rounding``; a clear error when the profile lacks it."""
        if self.is_spec:
            raise ValueError(f"profile {self.name!r} is the exact encode: it has no fixed rules")
        self.check_format(fmt)
        by_mode = self.rules[fmt]
        if rounding in by_mode:
            return by_mode[rounding]
        if rounding == "rne" and len(by_mode) == 1:   # the default selects the path's only mode
            return next(iter(by_mode.values()))
        raise ValueError(f"profile {self.name!r} has no rounding {rounding!r} for {fmt.name}; "
                         f"it offers: {', '.join(by_mode)}")

    def check_options(self, fmt: Format, rounding: str, *, saturate=None, stochastic=False, via=None) -> None:
        """Reject encode options that this fixed code path does not take.

        ``saturate`` is None when the caller did not give it; an explicit
        value must equal the saturation the profile shows for ``fmt`` (see
        :attr:`Rule.policy`), except for formats with neither Inf nor NaN,
        which always saturate.
        """
        if self.is_spec:
            return
        if stochastic:
            raise ValueError(f"profile {self.name!r} is deterministic: stochastic rounding options "
                             "apply only to profile='ocp'")
        if via is not None:
            raise ValueError(f"profile {self.name!r} fixes the intermediate type; via applies to profile='ocp'")
        if saturate is None or (fmt.inf is None and fmt.nan is None):
            return
        policy = self.rule(fmt, rounding).policy
        if saturate == policy:
            return
        shown = {True: "saturates (saturate=True)", False: "does not saturate (saturate=False)",
                 "satpropagate": "clamps finite overflow but keeps Inf (saturate='satpropagate')"}[policy]
        alt = (f"use profile={self.saturation_alternative!r} for the other setting of this code path, or "
               if self.saturation_alternative else "this code path has no other setting; use ")
        raise ValueError(f"profile {self.name!r} fixes saturation for {fmt.name}: it {shown}, so saturate="
                         f"{saturate!r} contradicts it; {alt}profile='ocp' with saturate={saturate!r}")

    def saturation(self, fmt: Format, rounding: str = "rne", saturate=None):
        """The saturation an encode to ``fmt`` under this profile shows, as ``encode`` names it.

        The spec profile gives ``saturate`` (False when None); a fixed code
        path gives its rule's :attr:`Rule.policy` (after checking that an
        explicit ``saturate`` agrees with it).

        Examples
        --------
        >>> from fp8emu.profiles import get_profile
        >>> from fp8emu.formats import get_format
        >>> get_profile("cuda-satfinite").saturation(get_format("e4m3fn")), get_profile("ocp").saturation(
        ...     get_format("e4m3fn"))
        (True, False)
        """
        if self.is_spec:
            return False if saturate is None else saturate
        self.check_options(fmt, rounding, saturate=saturate)
        return self.rule(fmt, rounding).policy

    def source(self, arr: np.ndarray, fmt: Format | None = None, rounding: str = "rne") -> np.ndarray:
        """``arr`` in a type the profile's tables cover (float64 and integers go through ``via64``,
        or the rule's own :attr:`Rule.via64` for ``fmt`` and ``rounding`` where it has one)."""
        if arr.dtype in (SOURCE_DTYPES[n] for n in _TABLE_SOURCES):
            return arr
        via = self.via64
        if fmt is not None and not self.is_spec:
            via = self.rule(fmt, rounding).via64 or via
        if via is None:
            raise ValueError(f"profile {self.name!r} takes float32, float16 or bfloat16 inputs, got {arr.dtype}")
        if arr.dtype == SOURCE_DTYPES[via]:
            return arr
        with np.errstate(over="ignore", invalid="ignore"):   # float64 -> float32 overflows to Inf, as on the GPU
            return arr.astype(SOURCE_DTYPES[via])

    def encode_table(self, fmt: Format, src: str, rounding: str = "rne") -> np.ndarray:
        """Read-only code of every representative ``src`` input (see :func:`fp8emu.tables.table_inputs`).

        Examples
        --------
        >>> from fp8emu.profiles import get_profile
        >>> from fp8emu.formats import get_format
        >>> t = get_profile("torch-cuda-2.11").encode_table(get_format("e5m2"), "float32")
        >>> hex(t[0xFFC0]), hex(t[0x7FC0])      # NaN keeps its sign in torch's float32 path
        ('0xff', '0x7f')
        """
        return _profile_encode_table(self, fmt, src, rounding)

    def decode_table(self, fmt: Format, dtype) -> np.ndarray:
        """Read-only decoded value of every code of ``fmt`` in ``dtype``.

        Examples
        --------
        >>> import numpy as np
        >>> from fp8emu.profiles import get_profile
        >>> from fp8emu.formats import get_format
        >>> t = get_profile("torch-cuda-2.11").decode_table(get_format("e4m3fn"), np.float32)
        >>> hex(t.view(np.uint32)[0xFF])
        '0xfff00000'
        """
        return _profile_decode_table(self, fmt, np.dtype(dtype))


@functools.lru_cache(maxsize=128)
def _profile_encode_table(prof: Profile, fmt: Format, src: str, rounding: str) -> np.ndarray:
    if prof.is_spec:
        return encode_table(fmt, src, rounding, False)
    rule = prof.rule(fmt, rounding)
    t = encode_table(fmt, src, rule.rounding, rule.saturate).copy()
    if rule.fix is not None:
        rule.fix(t, table_inputs(src), fmt, rule)
    t.setflags(write=False)
    return t


@functools.lru_cache(maxsize=128)
def _profile_decode_table(prof: Profile, fmt: Format, dtype: np.dtype) -> np.ndarray:
    if prof.decode_fix is None:
        return decode_table(fmt, dtype)
    prof.check_format(fmt)
    t = decode_table(fmt, dtype).copy()
    prof.decode_fix(t, fmt, dtype)
    t.setflags(write=False)
    return t


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
                   and _version_key(installed[r.distribution]) < _version_key(r.minimum) for r in p.versions)

    # a pre-release is proven for nothing, but is nearest to the release it leads up to
    released = {d: None if v is None else _release_of(v) for d, v in installed.items()}
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
