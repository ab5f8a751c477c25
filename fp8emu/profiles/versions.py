"""The library versions a profile is proven for: :class:`VersionRange`, compared by PEP 440, and the
warning and error :func:`fp8emu.profiles.resolve_versioned` gives when the installed version is outside
every range or the library is not installed."""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

__all__ = ["VersionRange", "UnprovenVersionWarning", "UndecidedVersionError"]


class UnprovenVersionWarning(UserWarning):
    """An installed library's version lies outside every range a versioned profile is proven for."""


class UndecidedVersionError(ValueError):
    """A plain profile name depends on a library that is not installed, so no variant can be chosen."""


def version_key(version: str) -> Version:
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


def release_of(version: str) -> str:
    """The release a pre-release or dev release leads up to (``"0.7.0rc1"`` -> ``"0.7.0"``)."""
    return version_key(version).base_version


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
        version_key(self.minimum)
        if self.below is not None and version_key(self.below) <= version_key(self.minimum):
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
        k = version_key(version)
        if k < version_key(self.minimum):
            return False
        if self.below is None:
            return True
        hi = version_key(self.below)
        return k < hi and not (k.is_prerelease and Version(k.base_version) == hi)

    def __str__(self):
        rng = f">={self.minimum}" + (f",<{self.below}" if self.below else "")
        proven = f" (proven on {', '.join(self.proven)})" if self.proven else ""
        return f"{self.distribution} {rng}{proven}"
