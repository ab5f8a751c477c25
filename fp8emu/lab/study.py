"""Numerics study of real checkpoints: every tensor under every recipe, chunk by chunk.

:func:`run_study` reads checkpoints lazily (one tensor, and of a large
tensor one chunk of rows, at a time), runs the recipe matrix of
:mod:`fp8emu.recipes` and writes one row per tensor x recipe to
``results.csv`` (columns: :data:`COLUMNS`, documented in the README).

Inputs
------
* ``.safetensors`` files, read with the ``safetensors`` package's NumPy API
  (``safe_open(framework="np")``, row ranges through ``get_slice``).  Recent
  versions return bfloat16 as ``ml_dtypes.bfloat16``; where the NumPy API
  cannot express a dtype (float8 in safetensors 0.8, bfloat16 in old
  versions) the tensor's rows are read from the file's header offsets and
  viewed as the matching ``ml_dtypes`` type.
* ``.npz`` archives (members are read whole) and ``.npy`` files, or folders
  of them (``.npy`` files are memory-mapped; a tensor is named by its path
  in the folder, ``/`` written ``.``).
* Integer and boolean tensors are skipped.

Passes over a tensor (each chunk read afresh, so memory stays at a few
times one chunk): statistics (amax, counts, exponent histogram); the
calibration histogram when a ``calib-*`` recipe runs; then every recipe on
every chunk.  A tensor of shape ``(..., K)`` is studied as rows of ``K``
(:func:`fp8emu.metrics.as_matrix`); chunks are ranges of its first axis
holding a multiple of 128 rows, so no block straddles two chunks; 1-D
tensors are one chunk.  Partials are merged in chunk order, so the rows are
the same whether the chunks ran here or on a Dask cluster.
"""

from __future__ import annotations

import csv
import dataclasses
import fnmatch
import json
import math
import os
import struct
import sys
import threading
from pathlib import Path

import ml_dtypes
import numpy as np

from .. import metrics
from ..recipes import select_recipes, tensor_params, threshold
from . import report as report_mod

__all__ = [
    "COLUMNS", "TensorRef", "discover", "chunk_ranges", "study_tensor", "run_study", "read_results",
    "DEFAULT_CHUNK_MB",
]

#: Columns of results.csv, in order.
COLUMNS = (
    "checkpoint", "tensor", "shape", "dtype", "recipe", "format", "numel", "n_nan", "n_inf",
    "frac_zero", "amax", "min_nonzero", "dynamic_range_log2", "sqnr_db", "rel_rms_err",
    "max_abs_err", "max_rel_err", "frac_overflow", "frac_saturated", "frac_flushed",
    "frac_subnormal", "n_nonfinite_out", "clip_threshold", "exp_hist_in", "exp_hist_out",
)

#: Default chunk size (MiB of float32) of a large tensor.
DEFAULT_CHUNK_MB = 16

_ST_DTYPES = {
    "F64": np.dtype(np.float64), "F32": np.dtype(np.float32), "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16), "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
}
_FLOAT_KINDS = {np.dtype(t) for t in (np.float16, np.float32, np.float64, ml_dtypes.bfloat16,
                                      ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)}


# --------------------------------------------------------------------------- readers

@dataclasses.dataclass(frozen=True)
class TensorRef:
    """Where one tensor lives; :meth:`read` loads a range of its first axis.

    Attributes
    ----------
    checkpoint : str
        Label of the checkpoint (its file or folder name).
    path : str
        File holding the tensor.
    name : str
        Tensor name.
    shape : tuple of int
    dtype : str
        NumPy / ml_dtypes name (``"bfloat16"``, ``"float32"``, ...).
    kind : {"safetensors", "npz", "npy"}
    """

    checkpoint: str
    path: str
    name: str
    shape: tuple
    dtype: str
    kind: str

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    def read(self, start=None, stop=None) -> np.ndarray:
        """Elements ``[start:stop]`` along the first axis (the whole tensor by default)."""
        whole = start is None or not self.shape
        if self.kind == "npy":
            arr = np.load(self.path, mmap_mode="r")
            return np.array(arr if whole else arr[start:stop])
        if self.kind == "npz":
            with np.load(self.path) as z:
                arr = z[self.name]
            return arr if whole else arr[start:stop]
        return _read_safetensors(self, None if whole else start, None if whole else stop)


def _read_safetensors(ref, start, stop):
    from safetensors import safe_open
    want = np.dtype(ref.dtype) if ref.dtype != "bfloat16" else np.dtype(ml_dtypes.bfloat16)
    try:
        with safe_open(ref.path, framework="np") as f:
            if start is None:
                arr = f.get_tensor(ref.name)
            else:
                arr = f.get_slice(ref.name)[start:stop]
    except (AttributeError, TypeError, KeyError, ValueError):
        # The NumPy API has no dtype for this tensor (float8 in safetensors 0.8): read its bytes.
        return _read_raw(ref, want, start, stop)
    arr = np.asarray(arr)
    if arr.dtype != want:
        if arr.dtype.itemsize != want.itemsize:
            raise OSError(f"{ref.path}: tensor {ref.name!r} came back as {arr.dtype}, expected {want}")
        arr = arr.view(want)   # e.g. bfloat16 handed back as uint16 or raw bytes
    return arr


def _safetensors_header(path):
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise OSError(f"{path}: not a safetensors file (too short)")
        (n,) = struct.unpack("<Q", raw)
        if n > 100_000_000:
            raise OSError(f"{path}: not a safetensors file (header length {n})")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise OSError(f"{path}: not a safetensors file ({exc})") from exc
    return 8 + n, header


def _read_raw(ref, dtype, start, stop):
    base, header = _safetensors_header(ref.path)
    begin, _ = header[ref.name]["data_offsets"]
    shape = tuple(ref.shape)
    per_row = math.prod(shape[1:]) if shape else 1
    lo = 0 if start is None else max(0, min(start, shape[0]))
    hi = (shape[0] if shape else 1) if stop is None else max(lo, min(stop, shape[0]))
    count = (hi - lo) * per_row
    with open(ref.path, "rb") as f:
        f.seek(base + begin + lo * per_row * dtype.itemsize)
        arr = np.fromfile(f, dtype=np.uint8, count=count * dtype.itemsize)
    if arr.size != count * dtype.itemsize:
        raise OSError(f"{ref.path}: tensor {ref.name!r} is truncated")
    out = arr.view(dtype)
    return out.reshape(((hi - lo),) + shape[1:]) if shape else out.reshape(())


def _matches(name, patterns):
    for pat in patterns:
        if any(c in pat for c in "*?["):
            if fnmatch.fnmatchcase(name, pat):
                return True
        elif pat in name:
            return True
    return False


def _refs_of(path: Path):
    label = path.name
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.npy") if p.is_file())
        if not files:
            raise ValueError(f"folder {path} holds no .npy files")
        for p in files:
            arr = np.load(p, mmap_mode="r")
            name = ".".join(p.relative_to(path).with_suffix("").parts)
            yield TensorRef(label, str(p), name, tuple(arr.shape), arr.dtype.name, "npy")
        return
    if not path.exists():
        raise FileNotFoundError(f"no such checkpoint: {path}")
    suffix = path.suffix.lower()
    if suffix == ".safetensors":
        _, header = _safetensors_header(path)
        for name in sorted(k for k in header if k != "__metadata__"):
            entry = header[name]
            dt = _ST_DTYPES.get(entry.get("dtype"))
            yield TensorRef(label, str(path), name, tuple(entry["shape"]),
                            dt.name if dt is not None else str(entry.get("dtype")), "safetensors")
    elif suffix == ".npz":
        with np.load(path) as z:
            for name in sorted(z.files):
                # The .npy header inside the archive gives shape and dtype without loading the data.
                with z.zip.open(name + ".npy") as member:
                    version = np.lib.format.read_magic(member)
                    shape, _, dtype = np.lib.format._read_array_header(member, version)
                yield TensorRef(label, str(path), name, tuple(shape), np.dtype(dtype).name, "npz")
    elif suffix == ".npy":
        arr = np.load(path, mmap_mode="r")
        yield TensorRef(label, str(path), path.stem, tuple(arr.shape), arr.dtype.name, "npy")
    else:
        raise ValueError(f"unsupported checkpoint {path}: accepted are .safetensors, .npz, .npy "
                         "files and folders of .npy files")


def discover(paths, include=None, exclude=None) -> tuple:
    """The floating-point tensors of the checkpoints, filtered by name.

    Parameters
    ----------
    paths : str, Path or sequence of them
        Checkpoint files (``.safetensors``, ``.npz``, ``.npy``) or folders of ``.npy``.
    include, exclude : sequence of str, optional
        Name filters: a glob (``*``, ``?``, ``[``) must match the whole
        tensor name, a plain string matches anywhere in it.  ``include``
        keeps tensors matching any pattern, ``exclude`` then drops some.

    Returns
    -------
    (list of TensorRef, list of str)
        The tensors in checkpoint order (names sorted within a file) and the
        names of non-float tensors skipped.

    Raises
    ------
    ValueError
        Unsupported input, two checkpoints with the same file name, or no tensor selected.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    refs, skipped, labels = [], [], set()
    for p in map(Path, paths):
        if p.name in labels:
            raise ValueError(f"two checkpoints are named {p.name!r}; results are keyed by file name, "
                             "so give them distinct names")
        labels.add(p.name)
        for ref in _refs_of(p):
            if include and not _matches(ref.name, include):
                continue
            if exclude and _matches(ref.name, exclude):
                continue
            try:
                dt = np.dtype(getattr(ml_dtypes, ref.dtype, None) or ref.dtype)
            except TypeError:
                dt = None
            if dt not in _FLOAT_KINDS:
                if dt is not None and dt.kind == "V":
                    raise ValueError(f"tensor {ref.name!r} in {ref.path} has a raw {dt} dtype: ml_dtypes "
                                     "arrays lose their type in .npy/.npz; save it in safetensors")
                skipped.append(f"{ref.checkpoint}:{ref.name}")
                continue
            refs.append(ref)
    if not refs:
        raise ValueError("no floating-point tensor selected" + (f" by --include {list(include)}" if include else ""))
    return refs, skipped


def chunk_ranges(ref: TensorRef, chunk_elems: int) -> list:
    """``(start, stop)`` ranges of the first axis, each about ``chunk_elems`` elements.

    Every chunk but the last holds a multiple of 128 rows of the matrix view,
    so 128x128 and 16x16 blocks never straddle chunks.  1-D and 0-D tensors
    are one chunk.

    Examples
    --------
    >>> r = TensorRef("c", "p", "w", (1000, 64), "float32", "npy")
    >>> chunk_ranges(r, 300 * 64)
    [(0, 256), (256, 512), (512, 768), (768, 1000)]
    """
    shape = tuple(ref.shape)
    if len(shape) < 2 or shape[0] == 0:
        return [(None, None)]
    per_index = math.prod(shape[1:])
    rows_per_index = math.prod(shape[1:-1])
    unit = 128 // math.gcd(rows_per_index, 128) if rows_per_index else 1
    step = max(unit, (int(chunk_elems) // max(per_index, 1)) // unit * unit)
    if step >= shape[0]:
        return [(None, None)]
    return [(i, min(i + step, shape[0])) for i in range(0, shape[0], step)]


# --------------------------------------------------------------------------- stages (picklable)

def _chunk(ref, start, stop):
    return metrics.as_matrix(ref.read(start, stop))


def stage_stats(ref, start, stop) -> dict:
    """Input statistics partial of one chunk."""
    return metrics.input_partial(_chunk(ref, start, stop))


def stage_histogram(ref, start, stop, amax) -> np.ndarray:
    """Calibration histogram of one chunk."""
    return metrics.calibration_histogram(_chunk(ref, start, stop), amax)


def stage_errors(ref, start, stop, recipe_names, params) -> list:
    """Error partials of one chunk under each recipe (in the order given)."""
    x = _chunk(ref, start, stop)
    matrix = {r.name: r for r in select_recipes(list(recipe_names))}
    out = []
    for name in recipe_names:
        r = matrix[name]
        qz = r.apply(x, params)
        out.append(metrics.error_partial(x, qz.y, qz.codes, qz.q, r.fmt))
    return out


def _params(recipes, stats, hist):
    params = tensor_params(stats["amax"], stats["n_inf"], hist)
    for r in recipes:
        if r.calibration:
            threshold(params, r.fmt, r.calibration)
    return params


def _rows(ref, recipes, stats, params, errors):
    base = {"checkpoint": ref.checkpoint, "tensor": ref.name,
            "shape": "x".join(map(str, ref.shape)) or "scalar", "dtype": ref.dtype}
    base.update(metrics.input_summary(stats))
    rows = []
    for r, err in zip(recipes, errors):
        row = dict(base, recipe=r.name, format=r.fmt, **metrics.error_summary(err))
        row["clip_threshold"] = (params["thresholds"][f"{r.calibration}/{r.fmt}"]
                                 if r.calibration else "")
        rows.append({c: row[c] for c in COLUMNS})
    return rows


def _pipeline(ref, recipes, chunk_elems, submit, gather):
    """The three passes of one tensor; ``submit`` runs or schedules a stage, ``gather`` waits."""
    ranges = chunk_ranges(ref, chunk_elems)
    stats = metrics.combine(gather([submit(stage_stats, ref, a, b) for a, b in ranges]))
    hist = None
    if any(r.needs_histogram for r in recipes):
        hist = metrics.combine([{"h": h} for h in gather(
            [submit(stage_histogram, ref, a, b, stats["amax"]) for a, b in ranges])])["h"]
    params = _params(recipes, stats, hist)
    names = tuple(r.name for r in recipes)
    parts = gather([submit(stage_errors, ref, a, b, names, params) for a, b in ranges])
    errors = [metrics.combine([p[i] for p in parts]) for i in range(len(recipes))]
    return _rows(ref, recipes, stats, params, errors)


def study_tensor(ref: TensorRef, recipes=None, *, chunk_mb=DEFAULT_CHUNK_MB) -> list:
    """Rows of one tensor under ``recipes`` (names, globs or :class:`~fp8emu.recipes.Recipe`), in-process.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> d = tempfile.mkdtemp(); np.save(os.path.join(d, "w.npy"), np.linspace(-1, 1, 256).astype(np.float32))
    >>> ref = discover([os.path.join(d, "w.npy")])[0][0]
    >>> row = study_tensor(ref, ["tensor-e4m3fn"])[0]
    >>> row["recipe"], row["numel"], 30 < row["sqnr_db"] < 40
    ('tensor-e4m3fn', 256, True)
    """
    recipes = _as_recipes(recipes)
    return _pipeline(ref, recipes, _chunk_elems(chunk_mb), lambda f, *a: f(*a), list)


def _as_recipes(recipes):
    if recipes is None or isinstance(recipes, str):
        return select_recipes(recipes)
    recipes = list(recipes)
    if recipes and all(hasattr(r, "apply") for r in recipes):
        return recipes
    return select_recipes(recipes)


def _chunk_elems(chunk_mb):
    if not (isinstance(chunk_mb, (int, float)) and math.isfinite(chunk_mb) and chunk_mb > 0):
        raise ValueError(f"chunk size must be a positive number of MiB, got {chunk_mb!r}")
    return max(1, int(chunk_mb * 2 ** 20) // 4)


# --------------------------------------------------------------------------- results.csv

def _parse(value, column):
    if column in ("checkpoint", "tensor", "shape", "dtype", "recipe", "format", "exp_hist_in",
                  "exp_hist_out"):
        return value
    if column == "clip_threshold" and value == "":
        return ""
    if column in ("numel", "n_nan", "n_inf", "n_nonfinite_out"):
        return int(value)
    return float(value)


def read_results(path) -> list:
    """Rows of a ``results.csv`` as dicts with numbers parsed (incomplete last lines dropped).

    Raises
    ------
    ValueError
        If the file's header is not :data:`COLUMNS`.
    """
    path = Path(path)
    if not path.exists():
        return []
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            return []
        if tuple(header) != COLUMNS:
            raise ValueError(f"{path} is not a results.csv of this version of fp8emu study "
                             f"(columns {header[:4]}...)")
        rows = []
        for rec in reader:
            if len(rec) != len(COLUMNS):
                continue   # an interrupted write
            try:
                rows.append({c: _parse(v, c) for c, v in zip(COLUMNS, rec)})
            except ValueError:
                continue
    return rows


def _fmt_cell(v):
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _write_rows(path, rows, mode="a"):
    new = mode == "w" or not path.exists() or path.stat().st_size == 0
    with open(path, mode, newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        if new:
            w.writerow(COLUMNS)
        # One write of a whole tensor's rows, flushed: an interrupted run loses at most this tensor.
        w.writerows([[_fmt_cell(r[c]) for c in COLUMNS] for r in rows])
        f.flush()


def _canonical(rows, refs, recipe_order):
    pos = {(r.checkpoint, r.name): i for i, r in enumerate(refs)}
    rec = {n: i for i, n in enumerate(recipe_order)}
    keyed = [(pos.get((r["checkpoint"], r["tensor"]), len(pos)), rec.get(r["recipe"], len(rec)), i, r)
             for i, r in enumerate(rows)]
    return [k[-1] for k in sorted(keyed, key=lambda k: k[:3])]


# --------------------------------------------------------------------------- driver

class _Progress:
    def __init__(self, total, enabled):
        self.bar = None
        if enabled and total:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                return
            self.bar = tqdm(total=total, unit="tensor", desc="fp8emu study", file=sys.stderr)

    def update(self, n=1):
        if self.bar is not None:
            self.bar.update(n)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def run_study(paths, out, *, recipes=None, include=None, exclude=None, chunk_mb=DEFAULT_CHUNK_MB,
              progress=True, client=None, report=True) -> dict:
    """Study checkpoints and write ``out/results.csv`` (and the reports).

    Parameters
    ----------
    paths : str, Path or sequence of them
        Checkpoints (see :func:`discover`).
    out : str or Path
        Output folder (created).  Rows already in ``out/results.csv`` are
        kept and their tensor x recipe pairs not recomputed (resume).
    recipes : sequence of str, optional
        Recipe names or globs (``"all"`` for the whole matrix); default
        :data:`fp8emu.recipes.DEFAULT_RECIPES`.
    include, exclude : sequence of str, optional
        Tensor name filters (see :func:`discover`).
    chunk_mb : float
        Rows of a large tensor are processed in chunks of about this many
        MiB of float32.
    progress : bool
        tqdm progress bar on stderr.
    client : distributed.Client, optional
        Run the passes on this Dask cluster instead of in-process; the rows
        are the same.
    report : bool
        Also write ``report.md`` and ``report.html`` (:mod:`fp8emu.lab.report`).

    Returns
    -------
    dict
        ``rows`` (all rows, canonical order), ``computed`` (tensors
        studied now), ``skipped`` (tensors whose rows were present),
        ``non_float`` (names of skipped non-float tensors), ``out``.
    """
    chunk_elems = _chunk_elems(chunk_mb)
    recs = _as_recipes(recipes)
    refs, non_float = discover(paths, include, exclude)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "results.csv"
    existing = read_results(csv_path)
    done = {(r["checkpoint"], r["tensor"], r["recipe"]) for r in existing}
    # Rewrite what survived (drops a torn last line) so appends start on a clean file.
    _write_rows(csv_path, existing, mode="w")

    todo = []
    for ref in refs:
        missing = [r for r in recs if (ref.checkpoint, ref.name, r.name) not in done]
        if missing:
            todo.append((ref, missing))
    bar = _Progress(len(todo), progress)
    lock = threading.Lock()
    all_rows = list(existing)

    def write(rows):
        with lock:
            _write_rows(csv_path, rows)
            all_rows.extend(rows)
            bar.update()

    try:
        if client is None:
            for ref, missing in todo:
                write(_pipeline(ref, missing, chunk_elems, lambda f, *a: f(*a), list))
        else:
            _run_distributed(client, todo, chunk_elems, write)
    finally:
        bar.close()
    rows = _canonical(all_rows, refs, [r.name for r in select_recipes(["all"])])
    _write_rows(csv_path, rows, mode="w")
    result = {"rows": rows, "computed": len(todo), "skipped": len(refs) - len(todo),
              "non_float": non_float, "out": out}
    if report:
        result["reports"] = report_mod.write_report(rows, out)
    return result


def _tensor_task(ref, recipe_names, chunk_elems):
    recipes = select_recipes(list(recipe_names))
    return _pipeline(ref, recipes, chunk_elems, lambda f, *a: f(*a), list)


def _run_distributed(client, todo, chunk_elems, write):
    """Small tensors as one task each; a large tensor's chunks as separate tasks per pass."""
    from distributed import as_completed

    small = [(ref, m) for ref, m in todo if len(chunk_ranges(ref, chunk_elems)) == 1]
    large = [(ref, m) for ref, m in todo if len(chunk_ranges(ref, chunk_elems)) > 1]
    futures = [client.submit(_tensor_task, ref, tuple(r.name for r in m), chunk_elems, pure=False)
               for ref, m in small]
    pending = as_completed(futures)

    def drain():
        for fut in list(futures):
            if fut.done():
                futures.remove(fut)
                write(fut.result())

    def submit(f, *a):
        return client.submit(f, *a, pure=False)

    def gather(fs):
        res = client.gather(fs)
        drain()
        return res

    for ref, missing in large:
        write(_pipeline(ref, missing, chunk_elems, submit, gather))
    for fut in pending:
        if fut in futures:
            futures.remove(fut)
            write(fut.result())
