"""Conformance of the profiles with the recorded H200 tables, computed exactly.

A recorded cast table is a run-length list over every input bit pattern
(2**32 float32 or 2**16 float16/bfloat16 patterns).  A profile's float32
code depends only on the upper 16 bits of the input and on whether the lower
16 bits are non-zero (see :mod:`fp8emu.codec`), so its own run-length form
has at most 2**17 runs.  Intersecting run lists (merging their start points)
gives exact counts over all 2**32 inputs without enumerating them: the number
of mismatches with the recording, and how far the GPU path departs from the
spec (``ocp``: round to nearest even, non-saturating), split by kind.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np

from .codec import encode
from .data import golden_dir
from .formats import get_format
from .profiles import get_profile
from .readers import npz_headers, read_npz, read_npz_member, read_text
from .tables import SOURCE_DTYPES, SOURCE_SHORT_NAMES, table_inputs

__all__ = ["read_rle", "RecordedTable", "recorded_tables", "report", "markdown_table", "rle_at",
           "profile_runs"]

KINDS = ("nan", "saturation", "rounding", "zero/sign", "e8m0")


def classify_differences(fmt, x, got, ocp) -> np.ndarray:
    """Kind (one of :data:`KINDS`) of each input where an implementation's code differs from the spec's.

    ``x`` are the inputs (any float dtype), ``got`` the implementation's codes
    and ``ocp`` the spec's codes for them, by the rule of the recorded
    tables' report: NaN inputs are "nan"; Inf inputs, and results where
    either side is Inf/NaN (or both are +-max), are "saturation"; equal
    magnitudes or two zeros are "zero/sign"; anything else is "rounding";
    every E8M0 difference of a non-NaN input is "e8m0".

    Examples
    --------
    >>> import numpy as np
    >>> from fp8emu.formats import get_format
    >>> x = np.array([np.nan, 470.0, 0.3], np.float32)
    >>> classify_differences(get_format("e4m3fn"), x, np.array([0xFF, 0x7E, 0x2A]),
    ...                      np.array([0x7F, 0x7F, 0x2B])).tolist()
    ['nan', 'saturation', 'rounding']
    """
    f = get_format(fmt)
    got = np.asarray(got, dtype=np.int64)
    ocp = np.asarray(ocp, dtype=np.int64)
    vals = f.values()
    gv, ov = vals[got], vals[ocp]
    kind = np.full(got.shape, "rounding", dtype=object)
    with np.errstate(over="ignore", invalid="ignore"):
        xv = np.asarray(x).astype(np.float64)
        big = ~np.isfinite(gv) | ~np.isfinite(ov) | ((np.abs(gv) == f.max) & (np.abs(ov) == f.max))
        big &= ~np.isnan(gv) | ~np.isnan(ov) | np.isinf(xv)    # two different NaN codes are not saturation
        same = ((gv == 0) & (ov == 0)) | (np.abs(gv) == np.abs(ov))
    kind[big | np.isinf(xv)] = "saturation"
    kind[same & ~big] = "zero/sign"
    if f.name == "e8m0fnu":
        kind[:] = "e8m0"
    kind[np.isnan(xv)] = "nan"
    return kind.astype(str)


_HEX = frozenset("0123456789abcdefABCDEF")
_INPUT_COUNTS = frozenset(str(1 << k) for k in range(1, 33))


def read_rle(path):
    """Read a run-length table: ``(starts uint64, codes int64, n_inputs)``.

    Examples
    --------
    >>> import fp8emu.conformance as C
    >>> from fp8emu.data import golden_path
    >>> s, c, n = C.read_rle(golden_path("cuda_f32_e2m1_rn.rle"))
    >>> n == 2**32, int(s[0]), int(c[0])
    (True, 0, 0)
    """
    text = read_text(path, kind="run-length table")
    starts, codes, n = [], [], None
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.startswith("#"):
            for tok in line.split():
                if tok.startswith(("inputs=", "n=")):
                    v = tok.split("=", 1)[1]
                    if not (v.isdigit() and len(v) <= 10 and v in _INPUT_COUNTS):
                        raise ValueError(f"{path}: malformed run-length table: line {lineno}: {tok} (a table covers 2**k inputs, "
                                         "k in 1..32)")
                    n = int(v)
            continue
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or not all(0 < len(p) <= w and all(c in _HEX for c in p)
                                      for p, w in zip(parts, (8, 15))):
            raise ValueError(f"{path}: malformed run-length table: line {lineno}: expected 'start code' in hex (a 32-bit start, a code "
                             f"below 2**60), got {line[:60]!r}")
        starts.append(int(parts[0], 16))
        codes.append(int(parts[1], 16))
    s = np.array(starts, dtype=np.uint64)
    if s.size == 0 or s[0] != 0 or np.any(np.diff(s.astype(np.int64)) <= 0):
        raise ValueError(f"{path}: not a run-length table (starts must begin at 0 and increase)")
    if n is None:
        n = 1 << 32 if s[-1] >= (1 << 16) else 1 << 16
    if int(s[-1]) >= n:
        raise ValueError(f"{path}: run start {int(s[-1]):#x} is beyond the table's {n} inputs")
    return s, np.array(codes, dtype=np.int64), n


def rle_at(starts, codes, patterns):
    """Codes of a run-length table at the given input bit patterns.

    Examples
    --------
    >>> import numpy as np, fp8emu.conformance as C
    >>> C.rle_at(np.array([0, 10], np.uint64), np.array([5, 7]), np.array([0, 9, 10, 99], np.uint64)).tolist()
    [5, 5, 7, 7]
    """
    return codes[np.searchsorted(starts, np.asarray(patterns, dtype=np.uint64), side="right") - 1]


def _compress(starts, codes):
    keep = np.ones(codes.size, dtype=bool)
    keep[1:] = codes[1:] != codes[:-1]
    return starts[keep], codes[keep]


def profile_runs(profile, fmt, src, rounding="rne"):
    """Run-length form ``(starts, codes)`` of a profile's cast over every ``src`` bit pattern.

    Examples
    --------
    >>> import fp8emu.conformance as C
    >>> s, c = C.profile_runs("ocp", "e2m1fn", "float32")
    >>> len(s)          # 8 magnitudes x 2 signs, plus NaN inputs (-> +max) in the negative half
    17
    """
    f = get_format(fmt)
    t = get_profile(profile).encode_table(f, src, rounding).astype(np.int64)
    # Each table entry's representative input starts the run of inputs that share its code.
    x = table_inputs(src)
    starts = x.view(np.uint32 if x.itemsize == 4 else np.uint16).astype(np.uint64)
    order = np.argsort(starts, kind="stable")
    return _compress(starts[order], t[order])


def _classes(src):
    """Boundaries between input classes (finite / Inf / NaN per sign) of a source type."""
    if src == "float32":
        w, e, m = 32, 8, 23
    elif src == "float16":
        w, e, m = 16, 5, 10
    else:
        w, e, m = 16, 8, 7
    inf = ((1 << e) - 1) << m
    sign = 1 << (w - 1)
    return inf, sign


@dataclass
class RecordedTable:
    """One recorded GPU table and the profile that must reproduce it."""

    name: str
    path: str
    kind: str          # "cast" (run-length), "cast16" (npz array), "decode" or "probe" (float64 inputs)
    src: str
    fmt: str
    profile: str
    rounding: str = "rne"
    key: str | None = None
    dtype: str | None = None


_FMT = {"e4m3": "e4m3fn", "e5m2": "e5m2", "e8m0": "e8m0fnu", "e2m3": "e2m3fn", "e3m2": "e3m2fn",
        "e2m1": "e2m1fn", "e4m3fn": "e4m3fn", "e4m3fnuz": "e4m3fnuz", "e5m2fnuz": "e5m2fnuz",
        "e8m0fnu": "e8m0fnu"}
_DTYPE_NAMES = {short: name for name, short in SOURCE_SHORT_NAMES.items()}
_SRC = {short: name for short, name in _DTYPE_NAMES.items() if short != "f64"}   # cast sources
_RND = {"rn": "rne", "rz": "rtz", "rp": "rup", "rtne": "rne", "rtz": "rtz"}


def recorded_tables(folder=None):
    """Every recorded table in ``folder`` (default: the package's recordings) with its profile.

    Examples
    --------
    >>> import fp8emu.conformance as C
    >>> t = {r.name: r for r in C.recorded_tables()}
    >>> t["cuda_f32_e8m0_rp_nosat"].profile, t["cuda_f32_e8m0_rp_nosat"].rounding
    ('cuda-nosat', 'rup')
    """
    folder = folder or golden_dir()
    if not os.path.isdir(folder):
        raise ValueError(f"no recorded tables: {folder} is not a folder")
    out = []
    for fn in sorted(os.listdir(folder)):
        path = os.path.join(folder, fn)
        name, ext = os.path.splitext(fn)
        p = name.split("_")
        try:
            if ext == ".rle" and p[0] == "cuda" and p[1] == "decode":
                out.append(RecordedTable(name, path, "decode", p[2], _FMT[p[2]], "cuda-nosat", dtype=p[4]))
            elif ext == ".rle" and p[0] == "cuda":
                fmt = _FMT[p[2]]
                if fmt == "e8m0fnu":
                    prof, rnd = f"cuda-{p[4]}", _RND[p[3]]
                elif fmt in ("e4m3fn", "e5m2"):
                    prof, rnd = f"cuda-{p[3]}", "rne"
                else:
                    prof, rnd = "cuda-satfinite", _RND[p[3]]
                out.append(RecordedTable(name, path, "cast", _SRC[p[1]], fmt, prof, rnd))
            elif ext == ".rle" and p[0] in ("torch", "jax", "triton"):
                if p[0] == "triton":
                    prof, rnd = f"triton-{p[3]}", _RND[p[3]]
                else:
                    prof, rnd = {"torch": "torch-cuda-2.11", "jax": "jax-gpu"}[p[0]], "rne"
                out.append(RecordedTable(name, path, "cast", _SRC[p[1]], _FMT[p[2]], prof, rnd))
            elif fn == "torch_tables.npz":
                for k in sorted(npz_headers(path)):
                    a, _, b = k.partition("_to_")
                    fmt_name, other = (b, None) if a in _SRC else (a, b)
                    try:
                        get_format(fmt_name)
                    except (ValueError, TypeError):
                        raise ValueError(f"{path}[{k}]: not a recorded table key (format {fmt_name!r})") from None
                    if other is not None and other not in _DTYPE_NAMES:
                        raise ValueError(f"{path}[{k}]: not a recorded table key (decode type {other!r}; known: "
                                         f"{', '.join(_DTYPE_NAMES)})")
                    if a in _SRC:
                        out.append(RecordedTable(f"torch_{k}", path, "cast16", _SRC[a], b, "torch-cuda-2.11",
                                                 key=k))
                    else:
                        out.append(RecordedTable(f"torch_{k}", path, "decode", a, a, "torch-cuda-2.11",
                                                 key=k, dtype=b))
            elif fn == "torch_f64_midpoints.npz":
                for k in sorted(npz_headers(path)):
                    if k.endswith("_from_f64"):
                        fmt = k[:-len("_from_f64")]
                        try:
                            get_format(fmt)
                        except (ValueError, TypeError):
                            raise ValueError(f"{path}[{k}]: not a recorded probe key (format {fmt!r})") from None
                        out.append(RecordedTable(f"torch_f64_midpoints[{fmt}]", path, "probe", "float64",
                                                 fmt, "torch-cuda-2.11", key=fmt))
        except (IndexError, KeyError) as exc:
            raise ValueError(f"{path}: not named as the recorded tables are (cannot read its format, "
                             f"source or profile from the name: {exc!r})") from None
    return out


def _load_runs(t: RecordedTable):
    if t.kind == "cast":
        s, c, n = read_rle(t.path)
        return s, c, n
    a = _recorded_array(t, t.key, (1 << 16,))
    return _compress(np.arange(a.size, dtype=np.uint64), a.astype(np.int64)) + (a.size,)


def _recorded_array(t: RecordedTable, key, shape=None):
    """An integer array of a recorded .npz table, its shape checked (one ValueError naming it)."""
    a = read_npz_member(t.path, key)
    if a.dtype.kind not in "iu" or a.ndim != 1 or (shape is not None and a.shape != shape):
        raise ValueError(f"{t.path}[{key}]: expected {'a 1-D' if shape is None else shape} integer array, "
                         f"got {a.dtype} of shape {a.shape}")
    return a


def _ocp_kind(f, gpu, ocp, lo, src):
    """Kind of each differing interval (vectorised over intervals)."""
    inf_pat, sign = _classes(src)
    mag = lo & np.uint64(sign - 1)
    nan = mag > inf_pat
    isinf = mag == inf_pat
    kind = np.full(gpu.shape, "rounding", dtype=object)
    vals = f.values()
    gv, ov = vals[gpu], vals[ocp]
    big = ~np.isfinite(ov) | ~np.isfinite(gv) | (np.abs(gv) == f.max) & (np.abs(ov) == f.max)
    big &= ~np.isnan(gv) | ~np.isnan(ov) | isinf
    kind[big | isinf] = "saturation"
    zero = (gv == 0) & (ov == 0) | (np.abs(gv) == np.abs(ov))
    kind[zero & ~big] = "zero/sign"
    if f.name == "e8m0fnu":
        kind[:] = "e8m0"
    kind[nan] = "nan"
    return kind


def _compare_cast(t: RecordedTable):
    s, c, n = _load_runs(t)
    ps, pc = profile_runs(t.profile, t.fmt, t.src, t.rounding)
    os_, oc = profile_runs("ocp", t.fmt, t.src, "rne")
    inf_pat, sign = _classes(t.src)
    extra = np.array([inf_pat, inf_pat + 1, sign, sign | inf_pat, sign | (inf_pat + 1)], dtype=np.uint64)
    b = np.unique(np.concatenate([s, ps, os_, extra]))
    length = np.diff(np.append(b, np.uint64(n))).astype(np.int64)
    rec, prof, ocp = rle_at(s, c, b), rle_at(ps, pc, b), rle_at(os_, oc, b)
    mismatches = int(length[rec != prof].sum())
    d = rec != ocp
    f = get_format(t.fmt)
    kinds = _ocp_kind(f, rec[d], ocp[d], b[d], t.src)
    by_kind = {k: int(length[d][kinds == k].sum()) for k in KINDS}
    return mismatches, n, int(length[d].sum()), by_kind


def _compare_decode(t: RecordedTable):
    dt = SOURCE_DTYPES[_DTYPE_NAMES[t.dtype]]
    uint = {2: np.uint16, 4: np.uint32, 8: np.uint64}[dt.itemsize]
    f = get_format(t.fmt)
    n = 1 << f.bits
    if t.kind == "decode" and t.key is None:
        s, c, _ = read_rle(t.path)
        rec = rle_at(s, c, np.arange(n, dtype=np.uint64)).astype(np.uint64)
    else:
        rec = _recorded_array(t, t.key, (n,)).astype(np.uint64)
    prof = get_profile(t.profile).decode_table(f, dt).view(uint).astype(np.uint64)
    ocp = get_profile("ocp").decode_table(f, dt).view(uint).astype(np.uint64)
    d = rec != ocp
    nan = np.isnan(f.values())
    by_kind = {k: 0 for k in KINDS}
    by_kind["nan"] = int((d & nan).sum())
    by_kind["rounding"] = int((d & ~nan).sum())
    return int((rec != prof).sum()), n, int(d.sum()), by_kind


def _compare_probe(t: RecordedTable):
    z = read_npz(t.path, [f"{t.key}_x", f"{t.key}_from_f64"])
    x = z[f"{t.key}_x"]
    rec = _recorded_array(t, f"{t.key}_from_f64", x.shape).astype(np.int64)
    if x.dtype != np.float64:
        raise ValueError(f"{t.path}[{t.key}_x]: expected float64 inputs, got {x.dtype}")
    f = get_format(t.fmt)
    prof = encode(x, f, profile=t.profile).astype(np.int64)
    ocp = encode(x, f).astype(np.int64)
    d = rec != ocp
    vals = f.values()
    kind = np.full(x.shape, "rounding", dtype=object)
    big = ~np.isfinite(vals[rec]) | ~np.isfinite(vals[ocp])
    kind[big] = "saturation"
    kind[(vals[rec] == 0) & (vals[ocp] == 0)] = "zero/sign"
    if f.name == "e8m0fnu":
        kind[:] = "e8m0"
    kind[np.isnan(x)] = "nan"
    by_kind = {k: int(np.count_nonzero(d & (kind == k))) for k in KINDS}
    return int(np.count_nonzero(rec != prof)), x.size, int(d.sum()), by_kind


@functools.lru_cache(maxsize=4)
def _report(folder):
    rows = []
    for t in recorded_tables(folder):
        if t.kind == "decode":
            mm, n, diff, by_kind = _compare_decode(t)
        elif t.kind == "probe":
            mm, n, diff, by_kind = _compare_probe(t)
        else:
            mm, n, diff, by_kind = _compare_cast(t)
        rows.append(dict(table=t.name, kind=t.kind, source=t.src if t.kind != "decode" else t.fmt,
                         format=t.fmt, profile=t.profile, rounding=t.rounding, inputs=n,
                         mismatches=mm, differs_from_ocp=diff, **{f"ocp_{k}": v for k, v in by_kind.items()}))
    return tuple(rows)


def report(folder=None):
    """Conformance rows, one per recorded table, as a list of dicts.

    Keys: ``table``, ``kind``, ``source``, ``format``, ``profile``,
    ``rounding``, ``inputs`` (size of the input space), ``mismatches``
    (profile vs recording; 0 means reproduced bit-exactly),
    ``differs_from_ocp`` (inputs on which the recording differs from the
    spec: round to nearest even, non-saturating) and its split
    ``ocp_nan``, ``ocp_saturation``, ``ocp_rounding``, ``ocp_zero/sign``,
    ``ocp_e8m0``.

    Examples
    --------
    >>> import fp8emu.conformance as C
    >>> rows = {r["table"]: r for r in C.report()}
    >>> r = rows["cuda_f32_e4m3_satfinite"]
    >>> r["mismatches"], r["ocp_nan"], r["ocp_saturation"]
    (0, 8388607, 1999634432)
    """
    return [dict(r) for r in _report(os.path.abspath(folder or golden_dir()))]


def markdown_table(rows=None) -> str:
    """The conformance report as a Markdown table.

    Examples
    --------
    >>> import fp8emu.conformance as C
    >>> C.markdown_table().splitlines()[0].startswith("| table | profile")
    True
    """
    rows = report() if rows is None else rows
    head = ["table", "profile", "inputs", "mismatches", "≠ ocp", "NaN code", "saturation", "rounding",
            "zero/sign", "e8m0 rule"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        prof = r["profile"] + (f" ({r['rounding']})" if r["rounding"] != "rne" else "")
        n = r["inputs"]
        size = f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)
        lines.append("| " + " | ".join([f"`{r['table']}`", prof, size, str(r["mismatches"]),
                                        str(r["differs_from_ocp"])]
                                       + [str(r[f"ocp_{k}"]) for k in KINDS]) + " |")
    return "\n".join(lines)
