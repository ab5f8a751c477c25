"""What one implementation profile is: a :class:`Profile` of :class:`Rule` objects (per format and
rounding option, the exact encode plus a table fix), and the cached encode/decode tables it makes."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from ..formats import Format
from ..rounding import DETERMINISTIC_MODES
from ..tables import SOURCE_DTYPES, encode_table, decode_table, table_inputs
from .versions import VersionRange

__all__ = ["Rule", "Profile"]

#: Sources a profile's tables cover directly; others are first converted to ``Profile.via64``.
_TABLE_SOURCES = ("float32", "float16", "bfloat16")


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
