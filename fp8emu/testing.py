"""Golden-value kit for other projects' tests.

``assert_fp8_equal`` checks codes produced by any implementation (a torch
float8 tensor, an ml_dtypes array, raw uint8 codes) against fp8emu under a
profile; ``golden_vectors`` / ``save_golden`` produce edge-case inputs with
their expected codes in files that can be read without fp8emu.

A pytest fixture ``fp8_golden`` (returning :func:`golden_vectors`) is
available when this module is loaded as a plugin (``-p fp8emu.testing``).
"""

from __future__ import annotations

import json
import os
import sys

import ml_dtypes
import numpy as np

from .codec import encode
from .formats import get_format

__all__ = ["assert_fp8_equal", "golden_vectors", "save_golden", "load_golden"]

SOURCE_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16,
            "float64": np.float64}
_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def _to_codes(actual):
    """uint8 codes from codes, an ml_dtypes array, or an ``__array__`` / ``__dlpack__`` object."""
    if isinstance(actual, np.ndarray):
        arr = actual
    elif hasattr(actual, "__dlpack__"):
        try:
            arr = np.from_dlpack(actual)
        except (BufferError, TypeError, RuntimeError):
            # NumPy cannot import float8 dtypes through DLPack: view the tensor's bytes.
            view = getattr(actual, "view", None)
            torch = sys.modules.get("torch")      # the caller's torch; fp8emu never imports it here
            if view is None or torch is None:
                raise
            arr = np.from_dlpack(view(torch.uint8).cpu())
    elif hasattr(actual, "__array__") or isinstance(actual, (list, tuple)) or np.isscalar(actual):
        arr = np.asarray(actual)
    else:
        raise TypeError(f"actual must be codes, an ml_dtypes array or an object with __array__ or "
                        f"__dlpack__, got {type(actual).__name__}")
    if arr.dtype.itemsize == 1 and arr.dtype.kind not in "iub":
        return arr.view(np.uint8)         # an ml_dtypes narrow float array
    if arr.dtype.kind not in "iu":
        raise TypeError(f"actual must hold FP8 codes (uint8) or an FP8 array, got dtype {arr.dtype}")
    if arr.size and (arr.min() < 0 or arr.max() > 255):
        raise ValueError("actual codes must lie in 0..255")
    return arr.astype(np.uint8)


def _bits_hex(x):
    dt = x.dtype
    if dt.kind == "f" or dt == np.dtype(ml_dtypes.bfloat16):
        w = dt.itemsize
        return "0x" + format(int(np.asarray(x).view(_UINT[w])), f"0{2 * w}x")
    return hex(int(x))


def assert_fp8_equal(actual, x, fmt, *, profile="ocp", **encode_options):
    """Assert that ``actual`` holds the codes fp8emu gives for ``x``.

    Parameters
    ----------
    actual : array_like
        uint8 codes, an ml_dtypes array of ``fmt``, or any object exposing
        ``__array__`` or ``__dlpack__`` (e.g. a torch float8 tensor; fp8emu
        does not import torch for this unless NumPy cannot read it directly).
    x : array_like
        The inputs that produced ``actual`` (same shape).
    fmt : str or Format
    profile : str, keyword-only
        The code path to emulate (see :func:`fp8emu.profile_names`).
    **encode_options
        Further options of :func:`fp8emu.encode` (e.g. ``saturate=True``).

    Raises
    ------
    AssertionError
        With the number of mismatches and the first 10: index, input
        (decimal and hex bits), expected and actual code and value, and the
        distance in codes.

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> x = np.array([1.0, 464.33], np.float32)
    >>> fp8emu.assert_fp8_equal(np.array([0x38, 0x7E], np.uint8), x, "e4m3fn", profile="cuda-satfinite")
    >>> try:
    ...     fp8emu.assert_fp8_equal(np.array([0x38, 0x7E], np.uint8), x, "e4m3fn")
    ... except AssertionError as e:
    ...     print(str(e).splitlines()[0])
    1 of 2 FP8 codes differ from fp8emu (e4m3fn, profile 'ocp')
    """
    f = get_format(fmt)
    got = _to_codes(actual)
    xa = np.asarray(x)
    exp = encode(xa, f, profile=profile, **encode_options)
    if got.shape != exp.shape:
        raise AssertionError(f"shape mismatch: actual {got.shape}, inputs {exp.shape}")
    bad = np.flatnonzero(got != exp)
    if bad.size == 0:
        return
    vals = f.values()
    xf, gf, ef = xa.reshape(-1), got.reshape(-1), exp.reshape(-1)
    lines = [f"{bad.size} of {exp.size} FP8 codes differ from fp8emu ({f.name}, profile {profile!r})",
             "index | input (bits) | expected code = value | actual code = value | distance"]
    for i in bad[:10]:
        dist = int(gf[i]) - int(ef[i])
        xi = xf[i].item() if xf.dtype.kind in "biu" else float(xf[i])
        lines.append(f"{int(i)} | {xi!r} ({_bits_hex(xf[i])}) | 0x{int(ef[i]):02x} = {float(vals[ef[i]])!r} | "
                     f"0x{int(gf[i]):02x} = {float(vals[gf[i]])!r} | {dist:+d}")
    raise AssertionError("\n".join(lines))


def _nextafter_both(v, dt):
    v = v.astype(dt)
    inf = np.array(np.inf, dtype=dt)
    up = np.nextafter(v, inf) if dt != np.dtype(ml_dtypes.bfloat16) else _bf16_step(v, 1)
    dn = np.nextafter(v, -inf) if dt != np.dtype(ml_dtypes.bfloat16) else _bf16_step(v, -1)
    return np.concatenate([dn, v, up])


def _bf16_step(v, d):
    # Step one ulp away from / towards zero in the bit pattern, matching nextafter.
    u = v.view(np.uint16).astype(np.int32)
    neg = (u & 0x8000) != 0
    mag = u & 0x7FFF
    towards_up = (d > 0) != neg
    mag = np.where(towards_up, mag + 1, mag - 1)
    zero_cross = (u & 0x7FFF) == 0
    res = np.where(zero_cross, np.where(d > 0, 1, 0x8001), np.where(neg, mag | 0x8000, mag))
    return res.astype(np.uint16).view(ml_dtypes.bfloat16)


def golden_vectors(fmt, *, source_dtype="float32", profile="ocp", rounding="rne", saturate=False):
    """Edge-case inputs and their expected codes.

    The inputs are: every representable value; every rounding midpoint
    between neighbouring values and the nearest source floats on both sides;
    the overflow threshold (midpoint above max) and its neighbours; half the
    minimum subnormal and its neighbours; +-0; +-Inf; NaNs of both signs with
    several payloads (each in ``source_dtype``, duplicates removed, both
    signs).

    Returns
    -------
    dict
        ``x`` (inputs of ``source_dtype``), ``bits`` (their bit patterns),
        ``codes`` (uint8 expected codes), and the metadata ``format``,
        ``source_dtype``, ``profile``, ``rounding``, ``saturate``.

    Examples
    --------
    >>> import fp8emu
    >>> g = fp8emu.golden_vectors("e4m3fn")
    >>> int(g["codes"][list(g["x"]).index(448.0)])
    126
    """
    f = get_format(fmt)
    if source_dtype not in SOURCE_DTYPES:
        raise ValueError(f"unknown source_dtype {source_dtype!r}; valid: {', '.join(SOURCE_DTYPES)}")
    dt = np.dtype(SOURCE_DTYPES[source_dtype])
    vals = f.values()
    fin = np.unique(np.abs(vals[np.isfinite(vals)]))
    mids = (fin[1:] + fin[:-1]) / 2           # exact in float64: narrow values have few bits
    # Linear midpoints are the rounding boundaries of every format except E8M0 (and they are
    # still informative there); the overflow threshold is the midpoint above max.
    over = f.max + (f.max - fin[-2]) / 2 if fin.size > 1 else f.max
    half_min = np.array([f.min_subnormal / 2])
    with np.errstate(over="ignore", under="ignore"):
        pts = [fin.astype(dt), _nextafter_both(mids, dt), _nextafter_both(np.array([over]), dt),
               _nextafter_both(half_min, dt)]
    mag = np.concatenate(pts).astype(np.float64)
    mag = mag[np.isfinite(mag)]
    x = np.concatenate([mag, -mag, [0.0, -0.0, np.inf, -np.inf]]).astype(dt)
    uint = _UINT[dt.itemsize]
    nbits = dt.itemsize * 8
    mb = {2: 10 if dt == np.float16 else 7, 4: 23, 8: 52}[dt.itemsize]
    exp_all = ((1 << (nbits - 1)) - 1) ^ ((1 << mb) - 1)
    payloads = [1 << (mb - 1), 1, (1 << mb) - 1, (1 << (mb - 1)) | 1]
    nans = np.array([exp_all | p for p in payloads] + [(1 << (nbits - 1)) | exp_all | p for p in payloads],
                    dtype=np.uint64).astype(uint).view(dt)
    x = np.concatenate([x, nans])
    _, first = np.unique(x.view(uint), return_index=True)
    x = x[np.sort(first)]
    codes = encode(x, f, profile=profile, rounding=rounding, saturate=saturate)
    return {"format": f.name, "source_dtype": source_dtype, "profile": profile, "rounding": rounding,
            "saturate": bool(saturate), "x": x, "bits": x.view(uint), "codes": codes}


def save_golden(path, fmt, **options):
    """Write :func:`golden_vectors` to ``path`` (``.npz`` or ``.json``).

    The ``.json`` file holds the metadata and two lists of hex strings,
    ``bits`` (input bit patterns) and ``codes``; the ``.npz`` file holds
    ``bits``, ``codes`` and the metadata as 0-d arrays.  Neither needs
    fp8emu to be read.  Returns the vectors.

    Examples
    --------
    >>> import json, os, tempfile, fp8emu
    >>> p = os.path.join(tempfile.mkdtemp(), "v.json")
    >>> _ = fp8emu.save_golden(p, "e5m2", profile="torch-cuda")
    >>> d = json.load(open(p)); d["format"], d["bits"][0][:2]
    ('e5m2', '0x')
    """
    g = golden_vectors(fmt, **options)
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    meta = {k: g[k] for k in ("format", "source_dtype", "profile", "rounding", "saturate")}
    w = g["bits"].dtype.itemsize * 2
    if ext == ".json":
        doc = dict(meta, bits=[f"0x{int(b):0{w}x}" for b in g["bits"]],
                   codes=[f"0x{int(c):02x}" for c in g["codes"]])
        with open(path, "w") as fh:
            json.dump(doc, fh, indent=1)
    elif ext == ".npz":
        np.savez(path, bits=g["bits"], codes=g["codes"], **{k: np.array(v) for k, v in meta.items()})
    else:
        raise ValueError(f"save_golden writes .json or .npz files, got {path!r}")
    return g


def load_golden(path):
    """Read a file written by :func:`save_golden`: a dict like :func:`golden_vectors`' result.

    Examples
    --------
    >>> import os, tempfile, fp8emu
    >>> from fp8emu.testing import load_golden
    >>> p = os.path.join(tempfile.mkdtemp(), "v.npz")
    >>> g = fp8emu.save_golden(p, "e4m3fn")
    >>> bool((load_golden(p)["codes"] == g["codes"]).all())
    True
    """
    path = os.fspath(path)
    if path.lower().endswith(".json"):
        with open(path) as fh:
            d = json.load(fh)
        dt = np.dtype(SOURCE_DTYPES[d["source_dtype"]])
        bits = np.array([int(b, 16) for b in d["bits"]], dtype=np.uint64).astype(_UINT[dt.itemsize])
        codes = np.array([int(c, 16) for c in d["codes"]], dtype=np.uint8)
    else:
        with np.load(path) as z:
            d = {k: z[k].item() for k in ("format", "source_dtype", "profile", "rounding", "saturate")}
            bits, codes = z["bits"], z["codes"]
        dt = np.dtype(SOURCE_DTYPES[d["source_dtype"]])
    out = {k: d[k] for k in ("format", "source_dtype", "profile", "rounding", "saturate")}
    out.update(bits=bits, codes=codes, x=bits.view(dt))
    return out


# A fixture only when loaded under pytest (``-p fp8emu.testing``); fp8emu does not depend on pytest.
_pytest = __import__("sys").modules.get("pytest")
if _pytest is not None:
    @_pytest.fixture
    def fp8_golden():
        """pytest fixture: the :func:`golden_vectors` function."""
        return golden_vectors
