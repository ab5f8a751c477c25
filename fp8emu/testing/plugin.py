"""pytest plugin: the ``fp8_golden`` snapshot fixture and ``--fp8-update-golden``.

Registered through the ``pytest11`` entry point ``fp8emu.testing.plugin``,
so it is active in any project where fp8emu is installed (``-p
no:fp8emu.testing.plugin`` disables it; ``-p fp8emu.testing.plugin`` loads it
from a source tree that was not installed).

``fp8_golden.check(codes_or_values, x=inputs, fmt="e4m3fn", name=None,
**options)`` stores the first result in
``<test folder>/fp8_golden/<test module>/<test name>[__name].npz`` (npz: the
codes, the input bit patterns, format, profile and options as metadata;
``format_version`` 1) and compares every later run with it, failing with
the report of :func:`fp8emu.testing.compare_codes`.  ``pytest
--fp8-update-golden`` rewrites the files; ``--fp8-golden-missing=fail``
makes a missing file a failure (for CI, where new snapshots must be
committed rather than created).

A snapshot is only written (created or updated) when the result equals
``fp8emu.encode(x, fmt, **options)`` for the encode options among
``options`` (``profile``, ``rounding``, ``saturate``, ``via``, ``sr_bits``,
``random_bits``), so a wrong kernel cannot be recorded; ``x`` is therefore
required to record.  Options are stored exactly (arrays element by element;
a value that cannot be is a TypeError), and each file records the test and
name it belongs to: two names that map to one file name are an error.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from ..formats import get_format
from ..interop import ML_NARROW_DTYPES, to_numpy
from .compare import compare_codes, to_codes
from ..readers import parse_json, read_npz
from .golden import FORMAT_VERSION

__all__ = ["FP8Golden", "fp8_golden", "pytest_addoption"]

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
# ml_dtypes types (bfloat16 and the narrow floats) by name: npz files cannot name them, so x is stored as bits
_ML_TYPES = {dt.name: dt for dt in ML_NARROW_DTYPES | {np.dtype(ml_dtypes.bfloat16)}}


def pytest_addoption(parser):
    """Add ``--fp8-update-golden`` and ``--fp8-golden-missing``."""
    group = parser.getgroup("fp8emu", "fp8emu golden files")
    group.addoption("--fp8-update-golden", action="store_true", default=False,
                    help="rewrite the fp8_golden snapshot files with the current results")
    group.addoption("--fp8-golden-missing", choices=("create", "fail"), default="create",
                    help="a missing fp8_golden file is created (default, with a warning) or fails the test")


def _safe(name):
    return re.sub(r"[^\w.-]", "_", str(name))


#: Options of :func:`fp8emu.encode` that a snapshot's result is checked with before it is written.
_ENCODE_OPTIONS = ("profile", "rounding", "saturate", "via", "sr_bits", "random_bits")


def _exact(value, where):
    """``value`` as JSON that reads back as exactly the same value, or a TypeError naming ``where``.

    NumPy scalars become Python numbers; arrays become ``{"ndarray": dtype, "shape", "data"}`` with
    every element (``json.dumps(default=str)`` stored NumPy's shortened repr, so a changed element
    inside the ``...`` still matched)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, np.bool_):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        if f != value and not np.isnan(f):   # a float128 wider than a double: not stored exactly
            raise TypeError(f"fp8_golden option {where}: {value!r} cannot be stored exactly as a double")
        return f
    if isinstance(value, (list, tuple)):
        return [_exact(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError(f"fp8_golden option {where}: dict keys must be strings")
        return {k: _exact(v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf" and value.dtype.itemsize <= 8:
        return {"ndarray": value.dtype.name, "shape": list(value.shape),
                "data": _raw(np.ascontiguousarray(value)).reshape(-1).tolist()}
    raise TypeError(f"fp8_golden option {where}: a {type(value).__name__} cannot be stored exactly; pass "
                    "strings, numbers, bools, None, lists/dicts of them or NumPy arrays of numbers")


def _encode_kwargs(options):
    return {k: options[k] for k in _ENCODE_OPTIONS if k in options}


def _raw(a):
    """Bit patterns of float arrays (so NaN payloads and -0 compare exactly), the array otherwise."""
    return a.view(_UINT[a.dtype.itemsize]) if a.dtype.kind not in "biu" else a


def _x_arrays(x):
    """npz entries for the inputs: ml_dtypes types (which npz cannot name) are stored as their bits."""
    if x is None:
        return {}
    ml = _ML_TYPES.get(x.dtype.name) == x.dtype
    if x.dtype.kind not in "biuf" and not ml:
        raise TypeError(f"x must hold numbers, got dtype {x.dtype}")
    return {"x": x.view(_UINT[x.dtype.itemsize]) if ml else x, "x_dtype": np.array(x.dtype.name)}


def _text(z, key, path):
    v = z[key]
    if v.ndim != 0 or v.dtype.kind != "U":
        raise ValueError(f"{path}: {key} must be a string, got {v.dtype} of shape {v.shape}")
    return str(v)


def _read_snapshot(path):
    """(format name, options JSON, codes, inputs or None) of a snapshot, every entry checked."""
    z = read_npz(path)
    missing = [k for k in ("format_version", "format", "options", "codes") if k not in z]
    if missing:
        raise ValueError(f"{path}: missing key(s) {', '.join(missing)}")
    v = z["format_version"]
    if v.ndim != 0 or v.dtype.kind not in "iu":
        raise ValueError(f"{path}: format_version must be an integer")
    if not 0 <= int(v) <= FORMAT_VERSION:
        raise ValueError(f"{path}: format_version {int(v)} is not supported (this fp8emu reads up to "
                         f"{FORMAT_VERSION})")
    fmt = _text(z, "format", path)
    try:
        f = get_format(fmt)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    opts = _text(z, "options", path)
    parsed = parse_json(opts, f"{path}[options]", "JSON object of options")
    if not isinstance(parsed, dict):
        raise ValueError(f"{path}: options must be a JSON object")
    codes = z["codes"]
    if codes.dtype != np.uint8 or (codes.size and int(codes.max()) >= 1 << f.bits):
        raise ValueError(f"{path}: codes must be uint8 {f.bits}-bit codes of {f.name}")
    sx = None
    if "x" in z:
        if "x_dtype" not in z:
            raise ValueError(f"{path}: x without x_dtype")
        name = _text(z, "x_dtype", path)
        x = z["x"]
        if name in _ML_TYPES:
            ml = _ML_TYPES[name]
            if x.dtype.kind != "u" or x.dtype.itemsize != ml.itemsize:
                raise ValueError(f"{path}: x of {name} must be stored as {ml.itemsize * 8}-bit patterns")
            sx = x.view(ml)
        elif x.dtype.name == name and x.dtype.kind in "biuf":
            sx = x
        else:
            raise ValueError(f"{path}: x has dtype {x.dtype}, x_dtype says {name!r}")
        if sx.shape != codes.shape:
            raise ValueError(f"{path}: x {sx.shape} and codes {codes.shape} differ in shape")
    return f.name, opts, codes, sx


class FP8Golden:
    """The ``fp8_golden`` fixture's object (one per test)."""

    def __init__(self, request):
        self._request = request
        node = request.node
        self.folder = Path(node.path).parent / "fp8_golden" / Path(node.path).stem
        self._base = _safe(node.name)
        self._count = 0
        self.update = bool(request.config.getoption("fp8_update_golden"))
        self.missing = request.config.getoption("fp8_golden_missing")

    def path(self, name=None) -> Path:
        """File used by the next :meth:`check` with this ``name``."""
        if name is not None:
            return self.folder / f"{self._base}__{_safe(name)}.npz"
        return self.folder / (f"{self._base}.npz" if self._count == 0 else f"{self._base}_{self._count + 1}.npz")

    def check(self, codes_or_values, x=None, fmt="e4m3fn", name=None, **options):
        """Compare a result with its stored snapshot (create or rewrite it as configured).

        Parameters
        ----------
        codes_or_values : array_like
            Codes, an ml_dtypes/torch/JAX array of ``fmt`` or values exactly
            representable in it (see :func:`fp8emu.testing.compare_codes`).
        x : array_like, optional
            The inputs; stored and checked, and shown in the failure report.
        fmt : str or Format
        name : str, optional
            Distinguishes several snapshots in one test (default: numbered).
        **options
            How the result was produced (``profile="torch-cuda"``,
            ``saturate=True``...): JSON-serialisable metadata, stored and
            required to match.

        Returns
        -------
        pathlib.Path
            The snapshot file.
        """
        __tracebackhide__ = True
        f = get_format(fmt)
        path = self.path(name)
        if name is None:
            self._count += 1
        codes, _ = to_codes(codes_or_values, f)
        xa = None if x is None else to_numpy(x, what="x")
        if xa is not None and xa.shape != codes.shape:
            raise ValueError(f"shape mismatch: result {codes.shape}, inputs x {xa.shape}")
        opts = json.dumps({k: _exact(v, k) for k, v in options.items()}, sort_keys=True, allow_nan=True)
        ident = f"{self._request.node.name}::{'#' + str(self._count) if name is None else 'name=' + str(name)}"
        claimed = self._request.config.__dict__.setdefault("_fp8_golden_claimed", {})
        if claimed.setdefault(path, ident) != ident:
            pytest.fail(f"fp8_golden: {ident!r} and {claimed[path]!r} map to one file {path} (names that "
                        "differ only in punctuation); give one of them another name", pytrace=False)
        profile = str(options.get("profile", "ocp"))
        if self.update or not path.exists():
            if not path.exists() and not self.update and self.missing == "fail":
                pytest.fail(f"fp8_golden file {path} is missing (--fp8-golden-missing=fail); create it with "
                            "--fp8-update-golden and commit it", pytrace=False)
            self._verify(codes_or_values, xa, f, options, path)
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as fh:
                np.savez(fh, format_version=np.array(FORMAT_VERSION), kind=np.array("fp8_golden"),
                         format=np.array(f.name), profile=np.array(profile), identity=np.array(ident),
                         options=np.array(opts), codes=codes, **_x_arrays(xa))
            if not self.update:
                warnings.warn(f"fp8_golden: created {path}; commit it so later runs compare against it",
                              UserWarning, stacklevel=2)
            return path
        try:
            stored_fmt, stored_opts, stored, sx = _read_snapshot(path)
            stored_ident = _stored_identity(path)
            problem = None
        except ValueError as exc:
            problem = str(exc)
        if problem is not None:     # failed outside the except block: no chained traceback in the report
            pytest.fail(f"fp8_golden: the snapshot cannot be used: {problem} (delete it, or rerun with "
                        "--fp8-update-golden to rewrite it)", pytrace=False)
        if stored_ident is not None and stored_ident != ident:
            pytest.fail(f"fp8_golden: {path} holds the snapshot of {stored_ident!r}, not of {ident!r} (names that "
                        "differ only in punctuation share a file); give one of them another name", pytrace=False)
        hint = f"(golden file: {path}; rerun with --fp8-update-golden to accept the new result)"
        if stored_fmt != f.name or stored_opts != opts:
            pytest.fail(f"fp8_golden: the snapshot was recorded with format {stored_fmt} and options "
                        f"{stored_opts}, this check uses format {f.name} and options {opts} {hint}", pytrace=False)
        if stored.shape != codes.shape:
            pytest.fail(f"fp8_golden: shape {codes.shape} differs from the snapshot's {stored.shape} {hint}",
                        pytrace=False)
        if xa is not None and sx is not None:
            same = sx.shape == xa.shape and sx.dtype == xa.dtype and np.array_equal(_raw(sx), _raw(xa))
            if not same:
                pytest.fail(f"fp8_golden: the inputs x differ from the snapshot's {hint}", pytrace=False)
        shown = {k: v for k, v in options.items() if k in ("rounding", "saturate", "via")}
        res = compare_codes(codes_or_values, sx if xa is None else xa, f, expected=stored, profile=profile, **shown)
        if not res.ok:
            pytest.fail(f"{str(res).replace('from the expected codes', 'from the snapshot')}\n{hint}",
                        pytrace=False)
        return path

    def _verify(self, codes_or_values, xa, f, options, path):
        """Refuse to record a result that is not ``encode(x, fmt, **options)``: a snapshot of a wrong
        kernel would otherwise pass forever."""
        __tracebackhide__ = True
        if xa is None:
            pytest.fail(f"fp8_golden: recording {path} needs the inputs x (the result is checked against "
                        "fp8emu.encode(x, ...) before it is written)", pytrace=False)
        enc = _encode_kwargs(options)
        try:
            res = compare_codes(codes_or_values, xa, f, **enc)
        except (ValueError, TypeError) as exc:
            problem = str(exc)
        else:
            problem = None
        if problem is not None:
            pytest.fail(f"fp8_golden: cannot check the result against fp8emu.encode(x, {f.name!r}, "
                        f"{', '.join(f'{k}=...' for k in enc)}) before recording {path}: {problem}", pytrace=False)
        if not res.ok:
            pytest.fail(f"fp8_golden: not recorded: the result is not what fp8emu gives for these inputs and "
                        f"options, so it would pass forever as a snapshot.\n{res}\n(golden file: {path})",
                        pytrace=False)


def _stored_identity(path):
    """The test and name a snapshot was recorded for (None in files written before it was stored)."""
    z = read_npz(path)
    if "identity" not in z:
        return None
    return _text(z, "identity", path)


@pytest.fixture
def fp8_golden(request):
    """Snapshot testing of FP8 results: ``fp8_golden.check(codes, x=inputs, fmt="e4m3fn")``."""
    return FP8Golden(request)
