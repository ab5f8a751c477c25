"""Resumable studies' files: JSON that keeps NaN and Inf, its canonical digest, atomic writes, and the
``--out`` folder they go in (checked before anything runs).

Every study that keeps one file per run or cell (``train-study``, ``grad-study``) writes through these,
so a file is either whole or absent and a rerun can trust what it finds.

Examples
--------
>>> json_safe({"x": float("nan"), "y": [1.5, float("-inf")]})
{'x': 'nan', 'y': [1.5, '-inf']}
>>> json_restore(json_safe({"x": float("inf")}))
{'x': inf}
>>> digest({"b": 1, "a": 2}) == digest({"a": 2, "b": 1})
True
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import tempfile
from pathlib import Path

import numpy as np

from .. import readers

__all__ = ["json_safe", "json_restore", "digest", "atomic_write", "csv_value", "write_rows", "read_rows",
           "numbers_except", "check_out", "make_out"]


def json_safe(obj):
    """A JSON-safe copy: NaN/Inf as the strings ``'nan'``/``'inf'``/``'-inf'`` (json's NaN is not
    standard JSON), NumPy scalars as Python numbers, tuples as lists, keys as strings."""
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else repr(obj)
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def json_restore(obj):
    """Undo :func:`json_safe`'s strings for NaN and Inf."""
    if isinstance(obj, str) and obj in ("nan", "inf", "-inf"):
        return float(obj)
    if isinstance(obj, dict):
        return {k: json_restore(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [json_restore(v) for v in obj]
    return obj


def digest(obj) -> str:
    """SHA-256 of the canonical JSON of ``obj`` (sorted keys, no spaces, :func:`json_safe`)."""
    text = json.dumps(json_safe(obj), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def atomic_write(path, data: bytes):
    """Write ``data`` to ``path`` through a temporary file and a rename: whole or not at all."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def csv_value(v) -> str:
    """A CSV cell: floats by ``repr`` (round-trips), NaN as ``nan``, None as empty.

    Examples
    --------
    >>> [csv_value(v) for v in (0.1, float("nan"), float("-inf"), None, np.float32(2.5), 3)]
    ['0.1', 'nan', '-inf', '', '2.5', '3']
    """
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ("nan" if v != v else repr(v))
    return "" if v is None else str(v)


def write_rows(path, rows, columns):
    """Write dict ``rows`` as CSV with exactly ``columns`` (a missing key is an empty cell)."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(columns)
        for row in rows:
            w.writerow([csv_value(row.get(c)) for c in columns])


def read_rows(path, *, convert=None, kind="study CSV") -> list:
    """The rows of a CSV that :func:`write_rows` wrote, as dicts keyed by its header.

    Every study's CSV is read here, so each is refused the same way, with the file (and line): a path
    that is not a regular file or not UTF-8 text (:func:`fp8emu.readers.read_text`), a header naming a
    column twice (which of the two would a reader keep?), a row whose field count is not the
    header's, and what ``convert(column, text)`` refuses with a ValueError.  Blank lines are skipped.

    Examples
    --------
    >>> import tempfile, os
    >>> f = os.path.join(tempfile.mkdtemp(), "t.csv")
    >>> write_rows(f, [{"a": 1.5, "b": "x, y"}], ["a", "b"])
    >>> read_rows(f)
    [{'a': '1.5', 'b': 'x, y'}]
    >>> read_rows(f, convert=lambda col, text: float(text) if col == "a" else text)
    [{'a': 1.5, 'b': 'x, y'}]
    """
    reader = csv.reader(io.StringIO(readers.read_text(path, kind=kind), newline=""))
    rows = []
    try:
        header = next(reader, None)
        if header is None:
            return []
        twice = sorted({k for k in header if header.count(k) > 1})
        if twice:
            raise ValueError(f"{path}: the header names column {twice[0]!r} more than once; a {kind} names each "
                             "column once")
        for row in reader:
            if not row:
                continue
            if len(row) != len(header):
                raise ValueError(f"{path}, line {reader.line_num}: {len(row)} fields where the header names "
                                 f"{len(header)}")
            if convert is None:
                rows.append(dict(zip(header, row)))
                continue
            try:
                rows.append({k: convert(k, v) for k, v in zip(header, row)})
            except ValueError as exc:
                raise ValueError(f"{path}, line {reader.line_num}: {exc}") from None
    except csv.Error as exc:
        raise ValueError(f"{path}, line {reader.line_num}: not CSV ({exc})") from None
    return rows


def plain_number(text) -> bool:
    """Whether ``text`` may be a number as written to a CSV: ASCII, no spaces and no ``_``.  Python's
    ``int`` and ``float`` take " 3", "1_000" and Arabic-Indic digits, which no writer of a study CSV
    wrote (a cell edited to "1_0" was read as 10).

    Examples
    --------
    >>> [plain_number(t) for t in ("-1.5e-05", "nan", "1_000", " 3", "\u0663")]
    [True, True, False, False, False]
    """
    return text.isascii() and text.isprintable() and " " not in text and "_" not in text


def numbers_except(text_columns):
    """A :func:`read_rows` ``convert``: ints, else floats, empty cells NaN, text in ``text_columns``.

    Examples
    --------
    >>> conv = numbers_except({"recipe"})
    >>> [conv("recipe", "12"), conv("seed", "3"), conv("loss", "1.5"), conv("loss", "")]
    ['12', 3, 1.5, nan]
    >>> conv("loss", "abc")
    Traceback (most recent call last):
    ...
    ValueError: column 'loss' holds 'abc', which is not a number
    """
    def convert(k, v):
        if k in text_columns:
            return v
        if v == "":
            return math.nan
        if not plain_number(v):
            raise ValueError(f"column {k!r} holds {v!r}, which is not a number")
        try:
            return int(v)
        except ValueError:
            pass
        try:
            return float(v)
        except ValueError:
            raise ValueError(f"column {k!r} holds {v!r}, which is not a number") from None
    return convert


def check_out(out, writes=(), inside=(), *, hint="use another --out") -> Path:
    """``--out`` as a Path, or one ValueError naming what in it a study could not write, before anything runs.

    Refused: an empty name, a path through a symbolic link to nothing or through a file, and what the study
    writes at the wrong kind: ``writes``, ``(name, is_folder)`` pairs (a folder at report.md failed with
    "[Errno 21] Is a directory" after every run had trained, a FIFO there blocked for ever), and ``inside``,
    ``(folder, suffix)`` pairs, the files written inside a folder.  ``hint``: the message's last words.

    Examples
    --------
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp(); os.mkdir(os.path.join(d, "report.md"))
    >>> check_out(d, [("report.md", False)])
    Traceback (most recent call last):
    ...
    ValueError: --out '...' holds report.md as a folder, where the study writes a file; use another --out
    """
    if str(out) == "":
        raise ValueError("--out '' names no folder; give a folder (created if missing)")
    out = Path(out)
    try:
        for p in [q for q in reversed(out.parents) if str(q) not in ("", ".")] + [out]:
            if p.is_symlink() and not p.exists():      # mkdir said "[Errno 17] File exists" of what does not exist
                raise ValueError(f"--out {str(out)!r}: {str(p)!r} is a symbolic link to nothing (dangling, or a loop); "
                                 "give a folder (created if missing)")
            if p.exists() and not p.is_dir():
                what = "a file" if p.is_file() else "a FIFO, device or socket"
                raise ValueError(f"--out {str(out)!r}: {str(p)!r} is {what}; give a folder (created if missing)")
        found = [(name, folder, out / name) for name, folder in writes]
        for sub, suffix in inside:       # a folder at figures/bias_vs_n.png was "[Errno 21] Is a directory" at the end
            found += [(f"{sub}/{p.name}", False, p) for p in sorted((out / sub).glob(f"*{suffix}"))
                      if (out / sub).is_dir()]
        for name, folder, p in found:
            if p.exists() and (p.is_dir() != folder or not (folder or p.is_file())):
                kind = "a folder" if p.is_dir() else "a file" if p.is_file() else \
                    "a FIFO, device or socket (not a regular file)"
                raise ValueError(f"--out {str(out)!r} holds {name} as {kind}, where the study writes "
                                 f"{'a folder' if folder else 'a file'}; {hint}")
    except OSError as exc:      # a folder on the way that cannot be searched: "[Errno 13] Permission denied: ..."
        raise ValueError(f"--out {str(out)!r}: {exc.filename or str(out)!r} cannot be examined ({exc.strerror}); "
                         "give a folder (created if missing)") from None
    return out


def make_out(out: Path) -> Path:
    """Create the ``--out`` folder (and its parents), or one ValueError naming it (not "[Errno 2] ...")."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:      # "[Errno 2] No such file or directory: '/proc/x'", not naming --out
        raise ValueError(f"--out {str(out)!r}: the folder cannot be created ({exc.strerror}); give a folder "
                         "(created if missing)") from None
    return out
