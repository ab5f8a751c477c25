"""The study's ``results.csv``: its :data:`COLUMNS`, :func:`read_results`, and the writing and resuming of
its rows by :func:`fp8emu.lab.study.run_study`."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from .. import readers
from .recipes import recipe_matrix

__all__ = ["COLUMNS", "read_results"]

#: Columns of results.csv, in order.
COLUMNS = (
    "checkpoint", "tensor", "shape", "dtype", "recipe", "format", "numel", "n_nan", "n_inf",
    "frac_zero", "amax", "min_nonzero", "dynamic_range_log2", "sqnr_db", "rel_rms_err",
    "max_abs_err", "max_rel_err", "frac_overflow", "frac_saturated", "frac_flushed",
    "frac_subnormal", "n_nonfinite_out", "clip_threshold", "exp_hist_in", "exp_hist_out",
)


_TEXT_COLUMNS = ("checkpoint", "tensor", "shape", "dtype", "recipe", "format", "exp_hist_in", "exp_hist_out")
_COUNT_COLUMNS = ("numel", "n_nan", "n_inf", "n_nonfinite_out")


def _parse(value, column):
    if column in _TEXT_COLUMNS:
        return value
    if column == "clip_threshold" and value == "":
        return ""
    if column in _COUNT_COLUMNS:
        if not value.isdigit():
            raise ValueError(f"{column} must be a non-negative integer, got {value[:40]!r}")
        return int(value)
    return float(value)


def read_results(path) -> list:
    """Rows of a ``results.csv`` as dicts with numbers parsed.

    An interrupted write leaves a last line without its newline: that line
    is dropped (its tensor is recomputed).  Anything else that is not a row
    of :data:`COLUMNS` is an error, not a row silently skipped.

    Raises
    ------
    ValueError
        If the file is not a results.csv of this version (header, binary
        content, a malformed row), naming the file and the line.
    """
    return read_results_file(path)[0]


def read_results_file(path):
    """:func:`read_results` and whether a torn last line was dropped: ``(rows, torn)``; a missing
    file has no rows."""
    path = Path(path)
    if not path.exists():
        return [], False
    text = readers.read_text(path, kind="results.csv")
    torn = bool(text) and not text.endswith("\n")
    if torn:
        text = text[:text.rfind("\n") + 1]      # the torn last line of an interrupted write
    reader = csv.reader(io.StringIO(text, newline=""))
    rows = []
    try:
        header = next(reader, None)
        if header is None:
            return [], torn
        if tuple(header) != COLUMNS:
            raise ValueError(f"{path} is not a results.csv of this version of fp8emu study "
                             f"(columns {header[:4]}...)")
        for rec in reader:
            if not rec:
                continue
            if len(rec) != len(COLUMNS):
                raise ValueError(f"{path}: line {reader.line_num}: {len(rec)} fields, expected {len(COLUMNS)} "
                                 "(delete the line or the file to recompute it)")
            try:
                rows.append({c: _parse(v, c) for c, v in zip(COLUMNS, rec)})
            except ValueError as exc:
                raise ValueError(f"{path}: line {reader.line_num}: {exc}") from None
    except csv.Error as exc:
        raise ValueError(f"{path}: line {reader.line_num}: not CSV ({exc})") from None
    return rows, torn


def resume_rows(rows, refs, path):
    """The rows of a results.csv fit to resume from: identical duplicates dropped (counted), conflicts refused.

    A second row for the same checkpoint x tensor x recipe with other values,
    a row whose tensor now has another shape or dtype (the checkpoint
    changed), or a row of a recipe (or format) this version does not have,
    would carry a wrong or stale number into the report: refused.
    """
    now = {(r.checkpoint, r.name): (("x".join(map(str, r.shape)) or "scalar"), r.dtype) for r in refs}
    matrix = recipe_matrix()
    seen, kept, dropped = {}, [], 0
    for row in rows:
        key = (row["checkpoint"], row["tensor"], row["recipe"])
        known = matrix.get(row["recipe"])
        if known is None or known.fmt != row["format"]:
            raise ValueError(f"{path}: a row for {key[0]}:{key[1]} names recipe {row['recipe']!r} of format "
                             f"{row['format']!r}, which this fp8emu does not have (a results.csv of another "
                             "version?): study into a new --out")
        cells = tuple(_fmt_cell(row[c]) for c in COLUMNS)
        if key in seen:
            if seen[key] != cells:
                raise ValueError(f"{path}: two different rows for {key[0]}:{key[1]} under {key[2]}; results.csv "
                                 "was edited or merged from different runs: delete one of them (or the file) "
                                 "to recompute")
            dropped += 1
            continue
        shape_dtype = now.get(key[:2])
        if shape_dtype is not None and shape_dtype != (row["shape"], row["dtype"]):
            raise ValueError(f"{path}: its rows for {key[0]}:{key[1]} are of a {row['shape']} {row['dtype']} tensor, "
                             f"the checkpoint's is {shape_dtype[0]} {shape_dtype[1]}: the checkpoint changed; "
                             "study it into a new --out (or delete results.csv)")
        seen[key] = cells
        kept.append(row)
    return kept, dropped


def _fmt_cell(v):
    if isinstance(v, float):
        return repr(v)
    return str(v)


def write_results(path, rows, mode="a"):
    """Append ``rows`` to a results.csv (``mode="w"``: write it anew), the header first in a new or
    empty file; one write per call, flushed, so an interrupted run loses at most these rows."""
    new = mode == "w" or not path.exists() or path.stat().st_size == 0
    with open(path, mode, newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        if new:
            w.writerow(COLUMNS)
        # One write of a whole tensor's rows, flushed: an interrupted run loses at most this tensor.
        w.writerows([[_fmt_cell(r[c]) for c in COLUMNS] for r in rows])
        f.flush()


def canonical_order(rows, refs, recipe_order):
    """``rows`` sorted by their tensor's place in ``refs``, then their recipe's in ``recipe_order``
    (rows of neither last, in the order given), so that a resumed study writes the file a fresh one does."""
    pos = {(r.checkpoint, r.name): i for i, r in enumerate(refs)}
    rec = {n: i for i, n in enumerate(recipe_order)}
    keyed = [(pos.get((r["checkpoint"], r["tensor"]), len(pos)), rec.get(r["recipe"], len(rec)), i, r)
             for i, r in enumerate(rows)]
    return [k[-1] for k in sorted(keyed, key=lambda k: k[:3])]
