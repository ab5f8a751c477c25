"""The tensors a study reads: :func:`discover` finds them in checkpoints (``.safetensors`` files and
folders of shards, ``.npz``, ``.npy``) as lazy :class:`TensorRef` objects, and :func:`chunk_ranges` cuts a
large one into chunks of whole 128-row blocks (see :mod:`fp8emu.lab.study`)."""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import os
from pathlib import Path

import ml_dtypes
import numpy as np

from .. import readers
from ..interop import is_integer

__all__ = ["TensorRef", "discover", "chunk_ranges"]

#: Float dtypes studied (every float8 safetensors dtype among them).
_FLOAT_KINDS = {np.dtype(t) for t in (np.float16, np.float32, np.float64, ml_dtypes.bfloat16,
                                      ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fnuz,
                                      ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e8m0fnu,
                                      ml_dtypes.float4_e2m1fn)}


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
        """Elements ``[start:stop]`` along the first axis (the whole tensor by default).

        The file is re-checked on every read (see :mod:`fp8emu.readers`): a
        file changed or truncated since discovery is a ValueError, not a
        wrong result.
        """
        whole = start is None or not self.shape
        if self.kind == "npy":
            arr = readers.read_npy(self.path)
            out = np.array(arr if whole else arr[start:stop])
        elif self.kind == "npz":
            arr = readers.read_npz_member(self.path, self.name)
            out = arr if whole else arr[start:stop]
        else:
            entries, _ = readers.safetensors_header(self.path)
            if self.name not in entries:
                raise ValueError(f"{self.path}: tensor {self.name!r} is no longer in the file")
            out = readers.read_safetensors(self.path, entries[self.name], None if whole else start,
                                           None if whole else stop)
        if out.dtype.name != self.dtype or (whole and tuple(out.shape) != tuple(self.shape)):
            raise ValueError(f"{self.path}: tensor {self.name!r} changed since it was discovered "
                             f"({out.dtype.name} {out.shape}, was {self.dtype} {self.shape})")
        return out


def _matches(name, patterns):
    for pat in patterns:
        if any(c in pat for c in "*?["):
            if fnmatch.fnmatchcase(name, pat):
                return True
        elif pat in name:
            return True
    return False


_ACCEPTED = (".safetensors, .npz and .npy files, and folders of .safetensors shards (with or without "
             "model.safetensors.index.json) or of .npy files")


def _safetensors_refs(label, path: Path, checkpoint_dir=None):
    entries, _ = readers.safetensors_header(path)
    for name in sorted(entries):
        e = entries[name]
        dtype = e.dtype.name if e.dtype is not None else e.st_dtype
        yield TensorRef(label, str(path), name, e.shape, dtype, "safetensors")


def _npy_ref(label, path: Path, name):
    h = readers.npy_header(path)
    return TensorRef(label, str(path), name, h.shape, h.dtype.name, "npy")


def _index_map(folder: Path, shards):
    """The weight_map of ``model.safetensors.index.json`` (if present), checked against the shards."""
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        others = sorted(folder.glob("*.safetensors.index.json"))
        if not others:
            return None
        index = others[0]
    doc = readers.read_json(index, kind="safetensors index (JSON)", max_bytes=1 << 28)
    wm = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(wm, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in wm.items()):
        raise ValueError(f"{index}: not a safetensors index (expected an object with a \"weight_map\" "
                         "of tensor name -> shard file)")
    names = {p.name for p in shards}
    missing = sorted({v for v in wm.values() if v not in names})
    if missing:
        raise ValueError(f"{index}: names shard(s) missing from {folder}: {', '.join(missing[:5])}")
    return index, wm


def _no_repeats(refs):
    seen = {}
    for r in refs:
        if r.name in seen:
            raise ValueError(f"tensor {r.name!r} is in both {seen[r.name]} and {r.path}; the shards of one "
                             "model must not repeat a tensor")
        seen[r.name] = r.path


def _folder_refs(path: Path):
    label = path.name
    shards = sorted(p for p in path.rglob("*.safetensors") if p.is_file())
    npys = sorted(p for p in path.rglob("*.npy") if p.is_file())
    if not shards and not npys:
        raise ValueError(f"folder {path} holds no .safetensors or .npy files (accepted: {_ACCEPTED})")
    index = _index_map(path, shards)
    refs = []
    for shard in shards:
        refs.extend(_safetensors_refs(label, shard))
    _no_repeats(refs)
    if index is not None:
        ipath, wm = index
        for r in refs:
            want = wm.get(r.name)
            if want is None:
                raise ValueError(f"{ipath}: does not list tensor {r.name!r} of {Path(r.path).name} (an index "
                                 "from another checkpoint? remove it to study the shards as they are)")
            if want != Path(r.path).name:
                raise ValueError(f"{ipath}: maps tensor {r.name!r} to {want}, but it is in {Path(r.path).name}")
        have = {r.name for r in refs}
        lost = sorted(n for n in wm if n not in have)
        if lost:
            raise ValueError(f"{ipath}: lists tensor(s) no shard holds: {', '.join(lost[:5])}")
    for p in npys:
        refs.append(_npy_ref(label, p, ".".join(p.relative_to(path).with_suffix("").parts)))
    _no_repeats(refs)
    return refs


def _refs_of(path: Path):
    label = path.name
    if path.is_dir():
        return _folder_refs(path)
    if not path.exists():
        raise FileNotFoundError(f"no such checkpoint: {path}")
    suffix = path.suffix.lower()
    if suffix == ".safetensors":
        return list(_safetensors_refs(label, path))
    if suffix == ".npz":
        heads = readers.npz_headers(path)
        return [TensorRef(label, str(path), name, heads[name].shape, heads[name].dtype.name, "npz")
                for name in sorted(heads)]
    if suffix == ".npy":
        return [_npy_ref(label, path, path.stem)]
    raise ValueError(f"unsupported checkpoint {path}: accepted are {_ACCEPTED}")


def discover(paths, include=None, exclude=None) -> tuple:
    """The floating-point tensors of the checkpoints, filtered by name.

    Parameters
    ----------
    paths : str, Path or sequence of them
        Checkpoint files (``.safetensors``, ``.npz``, ``.npy``) or folders:
        a folder is one model, its ``*.safetensors`` shards (checked against
        ``model.safetensors.index.json`` when there is one) and ``.npy``
        files together.
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
        Unsupported input, a corrupted or lying file (see :mod:`fp8emu.readers`),
        two checkpoints with the same file name, a tensor in two shards, or no
        tensor selected.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    for flag, patterns in (("--include", include), ("--exclude", exclude)):
        if patterns and any(p == "" for p in patterns):
            # a substring every name holds: --include '' kept every tensor, --exclude '' dropped them all
            # ("no floating-point tensor selected", the pattern unnamed)
            raise ValueError(f"{flag} '' is an empty pattern, which every tensor name contains; give a "
                             "pattern (a glob such as '*.weight', or a substring)")
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
    if len(shape) < 2 or math.prod(shape) == 0:
        # empty tensors are one chunk too: a (2**40, 0) shape must not enumerate 2**40 / step ranges
        return [(None, None)]
    per_index = math.prod(shape[1:])
    rows_per_index = math.prod(shape[1:-1])
    unit = 128 // math.gcd(rows_per_index, 128) if rows_per_index else 1
    if not is_integer(chunk_elems) or chunk_elems < 1:
        raise ValueError(f"chunk_elems must be a positive integer, got {chunk_elems!r}")
    step = max(unit, (int(chunk_elems) // max(per_index, 1)) // unit * unit)
    if step >= shape[0]:
        return [(None, None)]
    return [(i, min(i + step, shape[0])) for i in range(0, shape[0], step)]
