"""Golden vectors and tables for other projects' kernel tests, in files they can read without fp8emu.

Examples
--------
>>> FORMAT_VERSION
1
>>> g = golden_vectors("e4m3fn", source_dtype="bfloat16")
>>> g["source_dtype"] in SOURCE_DTYPES, g["codes"].dtype
(True, dtype('uint8'))

File formats (all carry ``format_version``; this is version 1)
---------------------------------------------------------------
Vectors (:func:`save_golden`, ``fp8emu golden --out``), chosen by extension:

``.npz``  NumPy zip, no pickled objects: ``bits`` (unsigned ints of the
    source width: the input bit patterns), ``codes`` (uint8 expected codes,
    FP6/FP4 in the low bits), ``random_bits`` (uint32, stochastic rounding
    only) and 0-d metadata arrays ``format_version``, ``format``,
    ``source_dtype``, ``profile``, ``rounding``, ``saturate``, ``sr_bits``
    (0 when not stochastic), ``seed`` (-1 when none).
``.json`` the same metadata and ``bits``/``codes``/``random_bits`` as lists
    of hex strings (``"0x3f800000"``).
``.h``, ``.hpp``, ``.cuh``  a C/C++/CUDA header: ``static const`` arrays
    ``NAME_input_bits``, ``NAME_expected_codes`` (and ``NAME_random_bits``),
    ``#define NAME_COUNT``, the options in a comment; compiles with
    ``-Wall -Werror`` as C and C++.

Run-length tables (:func:`rle_table`, ``fp8emu golden --out X.rle``): the
text format of the recorded GPU tables in ``fp8emu/data/golden`` (see
:func:`fp8emu.conformance.read_rle`): a ``#`` header line with ``inputs=N``
and the options, then one ``start code`` pair in hex per run: every input bit
pattern from ``start`` up to the next start encodes to ``code``.

GEMM cases (:func:`scaled_mm_cases`, ``fp8emu golden --scaled-mm``): an
``.npz`` with, per case ``i``, operands ``case{i}_a`` (M, K) / ``case{i}_b``
(K, N) as uint8 codes, float32 scales ``case{i}_scale_a``/``_scale_b`` (0-d)
and ``_rowscale_a`` (M, 1) / ``_rowscale_b`` (1, N), ``case{i}_bias`` (N,)
float32, and the expected outputs ``case{i}_{variant}_{accumulator}`` for
the variants ``tensorwise_f32`` (float32), ``tensorwise_bf16_bias`` and
``rowwise_bf16`` (bfloat16 bit patterns as uint16); metadata
``format_version``, ``a_format``, ``b_format``, ``shapes`` (n, 3),
``accumulators``.
"""

from __future__ import annotations

import json
import os
import re

import ml_dtypes
import numpy as np

from ..codec import encode
from ..profiles import get_profile
from ..conformance import read_rle
from ..readers import read_json, read_npz, read_text
from ..rounding import ROUNDING_MODES, STOCHASTIC_MODES, check_saturation
from ..tables import SOURCE_DTYPES, SOURCE_SHORT_NAMES, table_inputs
from ..formats import get_format
from ..interop import narrow_codes, is_integer
from ..gemm import scaled_mm

__all__ = ["FORMAT_VERSION", "SOURCE_DTYPES", "golden_vectors", "save_golden", "load_golden", "c_header",
           "rle_table", "save_rle", "scaled_mm_cases", "save_scaled_mm_cases"]

#: Version of the file formats written here; readers reject newer versions.
FORMAT_VERSION = 1
_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}
_META = ("format", "source_dtype", "profile", "rounding", "saturate")
_HEADER_EXT = (".h", ".hpp", ".cuh")


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


def _edge_inputs(f, dt):
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
    return x[np.sort(first)]


def golden_vectors(fmt, *, source_dtype="float32", profile="ocp", rounding="rne", saturate=None,
                   seed=None, sr_bits=None, exhaustive=False):
    """Edge-case (or all) inputs and their expected codes.

    The edge-case inputs are: every representable value; every rounding
    midpoint between neighbouring values and the nearest source floats on
    both sides; the overflow threshold (midpoint above max) and its
    neighbours; half the minimum subnormal and its neighbours; +-0; +-Inf;
    NaNs of both signs with several payloads (each in ``source_dtype``,
    duplicates removed, both signs).

    Parameters
    ----------
    fmt : str or Format
    source_dtype : {"float32", "float16", "bfloat16", "float64"}, keyword-only
    profile, rounding, saturate : keyword-only
        Options of :func:`fp8emu.encode`.
    seed : int, keyword-only
        Stochastic rounding only (and required there): seed of the random
        bits, drawn with ``numpy.random.default_rng(seed)``.  Each input
        appears four times: with random bits 0, with ``2**sr_bits - 1`` and
        with two random draws, so a kernel is tested with explicit bits.
    sr_bits : int, keyword-only
        Stochastic rounding only: number of random bits (1..32, default 32).
    exhaustive : bool, keyword-only
        Every bit pattern of a 16-bit ``source_dtype`` (float16 or bfloat16)
        in order, instead of the edge cases.

    Returns
    -------
    dict
        ``x`` (inputs of ``source_dtype``), ``bits`` (their bit patterns),
        ``codes`` (uint8 expected codes), ``random_bits`` (uint32, stochastic
        only), and the metadata ``format``, ``source_dtype``, ``profile``,
        ``rounding``, ``saturate``, ``sr_bits``, ``seed``.

    Examples
    --------
    >>> import fp8emu
    >>> g = fp8emu.golden_vectors("e4m3fn")
    >>> int(g["codes"][list(g["x"]).index(448.0)])
    126
    >>> g = fp8emu.golden_vectors("e5m2", source_dtype="bfloat16", exhaustive=True)
    >>> g["x"].size
    65536
    """
    f = get_format(fmt)
    if source_dtype not in SOURCE_DTYPES:
        raise ValueError(f"unknown source_dtype {source_dtype!r}; valid: {', '.join(SOURCE_DTYPES)}")
    dt = np.dtype(SOURCE_DTYPES[source_dtype])
    uint = _UINT[dt.itemsize]
    if exhaustive:
        if dt.itemsize != 2:
            raise ValueError(f"exhaustive vectors cover the 2**16 patterns of float16 or bfloat16, not "
                             f"{source_dtype} (use rle_table for float32: every input in run-length form)")
        x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dt)
    else:
        x = _edge_inputs(f, dt)
    rb = None
    if rounding in STOCHASTIC_MODES:      # each of the four takes its random bits the same way
        if seed is None:
            raise ValueError("stochastic vectors need a seed for their random bits (seed=..., --seed)")
        k = 32 if sr_bits is None else sr_bits
        if not is_integer(k) or not 1 <= k <= 32:
            raise ValueError(f"sr_bits must be an int in 1..32, got {sr_bits!r}")
        n = x.size
        x = np.tile(x, 4)
        rnd = np.random.default_rng(seed).integers(0, 1 << k, size=2 * n, dtype=np.uint64)
        rb = np.concatenate([np.zeros(n, np.uint64), np.full(n, (1 << k) - 1, np.uint64), rnd]).astype(np.uint32)
        codes = encode(x, f, profile=profile, rounding=rounding, saturate=saturate, random_bits=rb, sr_bits=k)
        sr, sd = int(k), int(seed)
    else:
        if seed is not None or sr_bits is not None:
            raise ValueError(f"seed and sr_bits apply only to the stochastic roundings ({', '.join(STOCHASTIC_MODES)})")
        codes = encode(x, f, profile=profile, rounding=rounding, saturate=saturate)
        sr, sd = 0, -1
    out = {"format": f.name, "source_dtype": source_dtype, "profile": profile, "rounding": rounding,
           "saturate": _saturation(profile, f, rounding, saturate), "sr_bits": sr, "seed": sd, "x": x, "bits": x.view(uint), "codes": codes}
    if rb is not None:
        out["random_bits"] = rb
    return out


def _meta(g):
    return {"format_version": FORMAT_VERSION, **{k: g[k] for k in _META},
            "sr_bits": int(g.get("sr_bits", 0)), "seed": int(g.get("seed", -1))}


def _c_name(text):
    name = re.sub(r"\W", "_", text)
    return name if name and not name[0].isdigit() else "v_" + name


def c_header(g, name="fp8emu_golden") -> str:
    """C/C++/CUDA header text for vectors ``g`` (from :func:`golden_vectors`).

    The arrays are ``static const`` (one private copy per translation unit)
    and marked unused for GCC/Clang/NVCC, so including the header without
    using every array passes ``-Wall -Werror``.

    Examples
    --------
    >>> h = c_header(golden_vectors("e2m1fn"), "fp4")
    >>> "static const uint8_t fp4_expected_codes[FP4_COUNT]" in h, "#define FP4_COUNT" in h
    (True, True)
    """
    name = _c_name(name)
    up = name.upper()
    n = int(g["codes"].size)
    bits = g["bits"]
    w = bits.dtype.itemsize
    ctype = {2: "uint16_t", 4: "uint32_t", 8: "uint64_t"}[w]
    suffix = "ULL" if w == 8 else "u"

    def rows(vals, width, suf):
        items = [f"0x{int(v):0{width}x}{suf}" for v in vals.tolist()]
        per = max(1, 96 // (len(items[0]) + 2)) if items else 1
        return ",\n".join("    " + ", ".join(items[i:i + per]) for i in range(0, len(items), per))

    meta = _meta(g)
    opts = " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in meta.items())
    f = get_format(g["format"])
    parts = [
        f"/* fp8emu golden vectors: {n} {g['source_dtype']} inputs -> {f.name} codes.",
        f" * {opts}",
        f" * {name}_input_bits[i]: bit pattern of input i ({g['source_dtype']});",
        f" * {name}_expected_codes[i]: its {f.bits}-bit {f.name} code"
        + (" (in the low bits)" if f.bits < 8 else "") + ".",
    ]
    if "random_bits" in g:
        parts.append(f" * {name}_random_bits[i]: the {meta['sr_bits']} random bits used for input i.")
    parts += [" * Generated by fp8emu; see fp8emu.testing.golden for the file formats. */",
              f"#ifndef {up}_H", f"#define {up}_H", "", "#include <stdint.h>", "",
              "#ifndef FP8EMU_GOLDEN_UNUSED",
              "#if defined(__GNUC__) || defined(__clang__)",
              "#define FP8EMU_GOLDEN_UNUSED __attribute__((unused))",
              "#else", "#define FP8EMU_GOLDEN_UNUSED", "#endif", "#endif", "",
              f"#define {up}_COUNT {n}", f"#define {up}_FORMAT_VERSION {FORMAT_VERSION}", "",
              f"static const {ctype} {name}_input_bits[{up}_COUNT] FP8EMU_GOLDEN_UNUSED = {{",
              rows(bits, 2 * w, suffix), "};", "",
              f"static const uint8_t {name}_expected_codes[{up}_COUNT] FP8EMU_GOLDEN_UNUSED = {{",
              rows(g["codes"], 2, "u"), "};", ""]
    if "random_bits" in g:
        parts += [f"static const uint32_t {name}_random_bits[{up}_COUNT] FP8EMU_GOLDEN_UNUSED = {{",
                  rows(g["random_bits"], 8, "u"), "};", ""]
    parts += [f"#endif /* {up}_H */", ""]
    return "\n".join(parts)


def save_golden(path, fmt, *, name=None, **options):
    """Write :func:`golden_vectors` to ``path``, chosen by its extension (see the module docs).

    ``.npz``, ``.json`` or a C/C++/CUDA header ``.h``/``.hpp``/``.cuh``
    (case-insensitive); the file is written at exactly ``path``.  ``name``
    prefixes the header's identifiers (default: the file's stem).  Returns
    the vectors.

    Examples
    --------
    >>> import json, os, tempfile, fp8emu
    >>> p = os.path.join(tempfile.mkdtemp(), "v.json")
    >>> _ = fp8emu.save_golden(p, "e5m2", profile="torch-cuda-2.11")
    >>> d = json.load(open(p)); d["format"], d["format_version"], d["bits"][0][:2]
    ('e5m2', 1, '0x')
    """
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".json", ".npz") + _HEADER_EXT:
        raise ValueError(f"save_golden writes .json, .npz or C headers (.h, .hpp, .cuh), got {path!r}")
    g = golden_vectors(fmt, **options)
    meta = _meta(g)
    w = g["bits"].dtype.itemsize * 2
    if ext == ".json":
        doc = dict(meta, bits=[f"0x{int(b):0{w}x}" for b in g["bits"]],
                   codes=[f"0x{int(c):02x}" for c in g["codes"]])
        if "random_bits" in g:
            doc["random_bits"] = [f"0x{int(r):08x}" for r in g["random_bits"]]
        with open(path, "w") as fh:
            json.dump(doc, fh, indent=1)
    elif ext == ".npz":
        arrays = {"bits": g["bits"], "codes": g["codes"], **{k: np.array(v) for k, v in meta.items()}}
        if "random_bits" in g:
            arrays["random_bits"] = g["random_bits"]
        with open(path, "wb") as fh:          # a file object: np.savez would append ".npz" to a name
            np.savez(fh, **arrays)
    else:
        stem = os.path.splitext(os.path.basename(path))[0]
        with open(path, "w") as fh:
            fh.write(c_header(g, name or stem))
    return g


def _check_version(v, path):
    if isinstance(v, np.integer):
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{path}: format_version must be an integer, got {v!r}")
    if not 0 <= v <= FORMAT_VERSION:
        raise ValueError(f"{path}: format_version {v} is not supported (this fp8emu reads up to "
                         f"{FORMAT_VERSION}); upgrade fp8emu")


def _option(raw, key, path, check, want):
    v = raw[key]
    if isinstance(v, np.ndarray):        # a 0-d npz array that .item() could not make a scalar
        v = v.tolist()
    if not check(v):
        raise ValueError(f"{path}: {key} must be {want}, got {v!r}")
    return v


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _options(raw, path):
    """The metadata of a golden file, validated as the arguments of golden_vectors are."""
    _check_version(raw.get("format_version", 0), path)
    out = {}
    for key in ("format", "source_dtype", "profile", "rounding"):
        out[key] = _option(raw, key, path, lambda v: isinstance(v, str), "a string")
    if out["source_dtype"] not in SOURCE_DTYPES:
        raise ValueError(f"{path}: unknown source_dtype {out['source_dtype']!r}; valid: {', '.join(SOURCE_DTYPES)}")
    try:
        f = get_format(out["format"])
        get_profile(out["profile"])
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    if out["rounding"] not in ROUNDING_MODES:
        raise ValueError(f"{path}: unknown rounding {out['rounding']!r}; valid: {', '.join(ROUNDING_MODES)}")
    out["saturate"] = _option(raw, "saturate", path, lambda v: isinstance(v, (bool, np.bool_)),
                              "true or false (a JSON/NumPy bool)")
    out["saturate"] = bool(out["saturate"])
    stochastic = out["rounding"] in STOCHASTIC_MODES
    raw.setdefault("sr_bits", 0)
    raw.setdefault("seed", -1)
    if stochastic:
        out["sr_bits"] = _option(raw, "sr_bits", path, lambda v: _is_int(v) and 1 <= v <= 32,
                                 "an integer in 1..32 for stochastic rounding")
        out["seed"] = _option(raw, "seed", path, lambda v: _is_int(v) and v >= 0,
                              "a non-negative integer for stochastic rounding")
        if "random_bits" not in raw:
            raise ValueError(f"{path}: stochastic vectors need random_bits")
    else:
        out["sr_bits"] = _option(raw, "sr_bits", path, lambda v: v == 0 and _is_int(v),
                                 "0 unless rounding is stochastic")
        out["seed"] = _option(raw, "seed", path, lambda v: v == -1 and _is_int(v),
                              "-1 unless rounding is stochastic")
        if "random_bits" in raw:
            raise ValueError(f"{path}: random_bits apply only to the stochastic roundings")
    out["format"] = f.name
    out["format_version"] = int(raw.get("format_version", 0))
    return f, out


def _load_rle(path):
    """A table written by :func:`save_rle`: its header's options validated, then its runs."""
    text = read_text(path, kind="run-length table")
    first = text.split("\n", 1)[0]
    if not first.startswith("#"):
        raise ValueError(f"{path}: not an fp8emu run-length table (no '# ...' header line)")
    tokens = {}
    for tok in first[1:].split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            if k in tokens:
                raise ValueError(f"{path}: header repeats {k}=")
            tokens[k] = v
    missing = [k for k in ("format", "source", "profile", "rounding", "saturate", "format_version", "inputs")
               if k not in tokens]
    if missing:
        raise ValueError(f"{path}: header lacks {', '.join(k + '=' for k in missing)} (a table of "
                         "fp8emu.testing.save_rle)")
    version = tokens["format_version"]
    sat = tokens["saturate"]
    if sat not in ("True", "False"):
        raise ValueError(f"{path}: saturate must be True or False, got {sat!r}")
    raw = {"format": tokens["format"], "source_dtype": tokens["source"], "profile": tokens["profile"],
           "rounding": tokens["rounding"], "saturate": sat == "True",
           "format_version": int(version) if version.isdigit() else version}
    f, out = _options(raw, path)
    del out["sr_bits"], out["seed"]
    if out["rounding"].startswith("stochastic"):
        raise ValueError(f"{path}: stochastic rounding has no table")
    if out["source_dtype"] not in ("float32", "float16", "bfloat16"):
        raise ValueError(f"{path}: run-length tables cover float32, float16 or bfloat16 sources, "
                         f"not {out['source_dtype']!r}")
    starts, codes, n = read_rle(path)
    want = 1 << (8 * np.dtype(SOURCE_DTYPES[out["source_dtype"]]).itemsize)
    if n != want:
        raise ValueError(f"{path}: inputs={n}, but a {out['source_dtype']} table covers {want}")
    if codes.size and (int(codes.min()) < 0 or int(codes.max()) >= 1 << f.bits):
        raise ValueError(f"{path}: codes out of range for the {f.bits}-bit format {f.name}")
    out.update(starts=starts, codes=codes.astype(np.uint8), inputs=n)
    return out


def load_golden(path):
    """Read and validate a ``.npz``, ``.json`` or ``.rle`` file written by :func:`save_golden` / :func:`save_rle`.

    A ``.rle`` table gives ``starts`` (uint64 run starts), ``codes`` (uint8,
    one per run), ``inputs`` and its header's options (``format``,
    ``source_dtype``, ``profile``, ``rounding``, ``saturate``,
    ``format_version``), validated as below.

    Returns a dict like :func:`golden_vectors`' result (every metadata field
    and array, ``format_version`` added).  Never unpickles; the file is read
    through :mod:`fp8emu.readers`, so a corrupted or lying file (a bad CRC,
    a header whose shape does not match its data, JSON nested without end)
    is a ValueError naming it.  The options are validated as
    :func:`golden_vectors`' arguments are: a known format, source dtype,
    profile and rounding, ``saturate`` a real bool (``"no"`` is refused, not
    read as True), ``sr_bits``/``seed``/``random_bits`` consistent with the
    rounding.

    Raises
    ------
    ValueError
        Not a zip/JSON file, a missing key, an invalid option, bits of the
        wrong width, codes out of range, arrays of different lengths, or a
        newer ``format_version``.

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
    need = _META + ("bits", "codes")
    if path.lower().endswith(".rle"):
        return _load_rle(path)
    if path.lower().endswith(".json"):
        d = read_json(path, kind="golden JSON file")
        if not isinstance(d, dict):
            raise ValueError(f"{path}: not a golden JSON file (expected an object)")
        missing = [k for k in need if k not in d]
        if missing:
            raise ValueError(f"{path}: missing key(s) {', '.join(missing)}")

        def hexes(key, limit):
            vals = d[key]
            if not isinstance(vals, list) or not all(isinstance(v, str) and 2 < len(v) <= 20 for v in vals):
                raise ValueError(f"{path}: {key} must be a list of hex strings")
            try:
                ints = [int(v, 16) for v in vals]
            except ValueError as exc:
                raise ValueError(f"{path}: {key}: {exc}") from None
            if ints and (min(ints) < 0 or max(ints) >= limit):
                raise ValueError(f"{path}: {key} holds values wider than {limit.bit_length() - 1} bits")
            return np.array(ints, dtype=np.uint64)
        raw = dict(d)
    else:
        arrays = read_npz(path)
        missing = [k for k in need if k not in arrays]
        if missing:
            raise ValueError(f"{path}: missing key(s) {', '.join(missing)}")
        raw = {k: (v.item() if v.ndim == 0 and v.dtype.kind in "biuUb" else v) for k, v in arrays.items()}
        hexes = None
    f, out = _options(raw, path)
    dt = np.dtype(SOURCE_DTYPES[out["source_dtype"]])
    uint = _UINT[dt.itemsize]
    if hexes is not None:
        bits = hexes("bits", 1 << (8 * dt.itemsize)).astype(uint)
        codes = hexes("codes", 1 << f.bits).astype(np.uint8)
        rb = hexes("random_bits", 1 << 32).astype(np.uint32) if "random_bits" in raw else None
    else:
        bits, codes, rb = raw["bits"], raw["codes"], raw.get("random_bits")
        for key, arr in (("bits", bits), ("codes", codes), ("random_bits", rb)):
            if arr is not None and not isinstance(arr, np.ndarray):
                raise ValueError(f"{path}: {key} must be an array, got a scalar")
        if bits.dtype.kind != "u" or bits.dtype.itemsize != dt.itemsize:
            raise ValueError(f"{path}: bits have dtype {bits.dtype}, but {out['source_dtype']} inputs need "
                             f"{dt.itemsize * 8}-bit unsigned patterns")
        if codes.dtype != np.uint8:
            raise ValueError(f"{path}: codes have dtype {codes.dtype}; expected uint8")
        if codes.size and int(codes.max()) >= (1 << f.bits):
            raise ValueError(f"{path}: codes out of range for the {f.bits}-bit format {f.name}")
        if rb is not None and (rb.dtype.kind != "u" or rb.dtype.itemsize > 4):
            raise ValueError(f"{path}: random_bits have dtype {rb.dtype}; expected uint32")
        if rb is not None and rb.size and int(rb.max()) >= (1 << out["sr_bits"]):
            raise ValueError(f"{path}: random_bits wider than sr_bits={out['sr_bits']}")
    if bits.ndim != 1 or codes.ndim != 1 or bits.size != codes.size:
        raise ValueError(f"{path}: bits ({bits.size}) and codes ({codes.size}) must be 1-D of equal length")
    if rb is not None and (rb.ndim != 1 or rb.size != bits.size):
        raise ValueError(f"{path}: random_bits ({rb.size}) and bits ({bits.size}) differ in length")
    out.update(bits=bits, codes=codes, x=bits.view(dt))
    if rb is not None:
        out["random_bits"] = rb.astype(np.uint32)
    return out


# ----------------------------------------------------------------------------- run-length tables
def _saturation(profile, f, rounding, saturate):
    """The saturation the vectors were made with (a profile's own when ``saturate`` is None)."""
    sat = get_profile(profile).saturation(f, rounding, None if saturate is None else check_saturation(saturate))
    return sat if isinstance(sat, str) else bool(sat)


def rle_table(fmt, *, source_dtype="float32", profile="ocp", rounding="rne", saturate=None, runs=None) -> str:
    """Run-length table of a cast over every ``source_dtype`` bit pattern, as text.

    Same format as the recorded GPU tables (see the module docs): a kernel
    test can check any input by looking up the last run start at or below
    its bit pattern.  float32 tables are exact over all 2**32 inputs with at
    most 2**17 runs (see :func:`fp8emu.tables.table_inputs`).

    Examples
    --------
    >>> t = rle_table("e4m3fn", profile="torch-cuda-2.11").splitlines()
    >>> t[0].split()[:3], t[1], t[2]
    (['#', 'fp8emu_f32_e4m3fn_torch-cuda-2.11_rne', 'inputs=4294967296'], '0 0', '3a800001 1')
    """
    f = get_format(fmt)
    if source_dtype not in ("float32", "float16", "bfloat16"):
        raise ValueError(f"run-length tables cover float32, float16 or bfloat16 sources, not {source_dtype!r}")
    if rounding in STOCHASTIC_MODES:
        raise ValueError(f"{rounding} rounding has no table: its result depends on the random bits")
    if source_dtype == "float32" and not (f.mbits <= 6 and f.emin - f.mbits >= -132):
        raise ValueError(f"{f.name}: its float32 rounding position can fall below the upper 16 bits, so "
                         "a 2**17-run table cannot describe it exactly")
    if runs is not None:
        # runs computed elsewhere, e.g. by fp8emu.dask.float32_runs encoding every input on a cluster
        starts, codes = np.asarray(runs[0], np.uint64), np.asarray(runs[1], np.int64)
    else:
        x = table_inputs(source_dtype)
        codes = encode(x, f, profile=profile, rounding=rounding, saturate=saturate).astype(np.int64)
        starts = x.view(np.uint32 if x.itemsize == 4 else np.uint16).astype(np.uint64)
        order = np.argsort(starts, kind="stable")
        starts, codes = starts[order], codes[order]
        keep = np.ones(codes.size, dtype=bool)
        keep[1:] = codes[1:] != codes[:-1]
        starts, codes = starts[keep], codes[keep]
    saturate = _saturation(profile, f, rounding, saturate)
    n = 1 << (32 if source_dtype == "float32" else 16)
    short = SOURCE_SHORT_NAMES[source_dtype]
    head = (f"# fp8emu_{short}_{f.name}_{profile}_{rounding}{'_sat' if saturate else ''} inputs={n} "
            f"runs={starts.size} format={f.name} source={source_dtype} profile={profile} rounding={rounding} "
            f"saturate={bool(saturate)} format_version={FORMAT_VERSION}")
    body = "\n".join(f"{s:x} {c:x}" for s, c in zip(starts.tolist(), codes.tolist()))
    return head + "\n" + body + "\n"


def save_rle(path, fmt, **options) -> int:
    """Write :func:`rle_table` to exactly ``path``; returns the number of runs.

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "e2m1.rle")
    >>> save_rle(path, "e2m1fn")
    17
    >>> open(path).read().splitlines()[1:3]
    ['0 0', '3e800001 1']
    """
    text = rle_table(fmt, **options)
    with open(os.fspath(path), "w") as fh:
        fh.write(text)
    return text.count("\n") - 1


# ----------------------------------------------------------------------------- GEMM cases
#: Shapes (M, N, K) of the default GEMM cases; K = 16384 at M = N = 32 is split along K by cuBLASLt.
SCALED_MM_SHAPES = ((32, 32, 64), (64, 48, 256), (32, 32, 16384))
_VARIANTS = ("tensorwise_f32", "tensorwise_bf16_bias", "rowwise_bf16")


def scaled_mm_cases(*, seed=0, shapes=SCALED_MM_SHAPES, a_format="e4m3fn", b_format="e4m3fn",
                    accumulators=("hopper", "hopper-fast"), operands=None):
    """Operands, scales, bias and expected :func:`fp8emu.scaled_mm` outputs per accumulator.

    Parameters
    ----------
    seed : int, keyword-only
        Seed of the operands (normal values x 4, saturated to the format),
        scales (powers of two times 1..2) and bias.
    shapes : sequence of (M, N, K), keyword-only
    a_format, b_format : str, keyword-only
    accumulators : sequence of str, keyword-only
        ``"hopper"`` is ``torch._scaled_mm(use_fast_accum=False)`` on an
        H100/H200, ``"hopper-fast"`` is ``use_fast_accum=True``.
    operands : sequence of dict or (a, b), optional, keyword-only
        Use these uint8 code matrices ``a``, ``b`` (shapes then come from
        them) and optionally ``scale_a``, ``scale_b``, ``rowscale_a``,
        ``rowscale_b``, ``bias`` instead of random ones.

    Returns
    -------
    dict of numpy arrays, keyed as described in the module docs.

    Examples
    --------
    >>> c = scaled_mm_cases(shapes=[(16, 16, 32)], accumulators=["fp32"])
    >>> c["case0_a"].shape, c["case0_tensorwise_f32_fp32"].dtype.name, c["case0_rowwise_bf16_fp32"].dtype.name
    ((16, 32), 'float32', 'uint16')
    """
    rng = np.random.default_rng(seed)
    if operands is None:
        operands = [{"a": encode(rng.normal(size=(M, K)) * 4, a_format, saturate=True),
                     "b": encode(rng.normal(size=(K, N)) * 4, b_format, saturate=True)} for M, N, K in shapes]
    operands = [dict(zip(("a", "b"), op)) if isinstance(op, (tuple, list)) else dict(op) for op in operands]
    out = {"format_version": np.array(FORMAT_VERSION), "a_format": np.array(get_format(a_format).name),
           "b_format": np.array(get_format(b_format).name),
           "accumulators": np.array([str(a) for a in accumulators]),
           "shapes": np.array([(np.shape(op["a"])[0], np.shape(op["b"])[1], np.shape(op["a"])[1])
                               for op in operands], np.int64)}
    for i, op in enumerate(operands):
        # range-checked codes of their formats (an int 300 or a float is refused, never wrapped to uint8)
        a, b = narrow_codes(op["a"], get_format(a_format)), narrow_codes(op["b"], get_format(b_format))
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
            raise ValueError(f"operands {i}: a (M, K) and b (K, N) codes expected, got {a.shape} and {b.shape}")
        M, K = a.shape
        N = b.shape[1]

        def pick(key, draw):
            # Draw every random quantity, used or not, so a case does not depend on which were given.
            v = draw()
            return np.asarray(op[key], np.float32) if key in op else np.asarray(v, np.float32)
        sa = pick("scale_a", lambda: 2.0 ** rng.integers(-4, 2) * rng.uniform(1, 2))
        sb = pick("scale_b", lambda: 2.0 ** rng.integers(-4, 2) * rng.uniform(1, 2))
        ra = pick("rowscale_a", lambda: 2.0 ** rng.integers(-3, 2, size=(M, 1)) * rng.uniform(1, 2, size=(M, 1)))
        rb = pick("rowscale_b", lambda: 2.0 ** rng.integers(-3, 2, size=(1, N)) * rng.uniform(1, 2, size=(1, N)))
        # bias values exact in bfloat16, as torch requires a bf16 bias for a bf16 output
        bias = pick("bias", lambda: rng.normal(size=N).astype(ml_dtypes.bfloat16).astype(np.float32))
        p = f"case{i}_"
        out.update({p + "a": a, p + "b": b, p + "scale_a": np.array(sa), p + "scale_b": np.array(sb),
                    p + "rowscale_a": ra, p + "rowscale_b": rb, p + "bias": bias})
        for acc in accumulators:
            kw = dict(a_format=a_format, b_format=b_format, accumulator=acc)
            out[f"{p}tensorwise_f32_{acc}"] = scaled_mm(a, b, scale_a=sa, scale_b=sb, **kw)
            out[f"{p}tensorwise_bf16_bias_{acc}"] = scaled_mm(
                a, b, scale_a=sa, scale_b=sb, bias=bias, out_dtype="bfloat16", **kw).view(np.uint16)
            out[f"{p}rowwise_bf16_{acc}"] = scaled_mm(
                a, b, scale_a=ra, scale_b=rb, out_dtype="bfloat16", **kw).view(np.uint16)
    return out


def save_scaled_mm_cases(path, **options) -> dict:
    """Write :func:`scaled_mm_cases` to exactly ``path`` (an ``.npz``); returns the arrays.

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "mm.npz")
    >>> cases = save_scaled_mm_cases(path, shapes=((2, 2, 32),), accumulators=("exact",))
    >>> int(cases["format_version"]) == FORMAT_VERSION, cases["case0_a"].shape
    (True, (2, 32))
    """
    cases = scaled_mm_cases(**options)
    with open(os.fspath(path), "wb") as fh:
        np.savez(fh, **cases)
    return cases
