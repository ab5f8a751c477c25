"""Readers of untrusted files: JSON, ``.npy``, ``.npz`` and safetensors, checked against the file.

Every reader of a file that came from elsewhere (checkpoints, golden
vectors, snapshots, recorded tables) goes through here, so one set of rules
holds everywhere:

* a corrupted, truncated, lying or hostile file is one ``ValueError`` whose
  message starts with the file's path and says what is wrong, never another
  exception type;
* every size, shape and offset a file claims is checked against the file's
  real size *before* anything is allocated or enumerated, so memory is
  bounded by the file, not by its claims (a 600-byte header claiming
  ``[2**40, 2**20]`` elements is refused at once);
* no pickled objects are ever loaded, and parsing is bounded (JSON nesting
  depth, ``.npy`` header length).

The arrays come back as NumPy arrays of the file's dtype (``.npy`` files
memory-mapped, read-only); ml_dtypes types for bfloat16 and float8
safetensors tensors.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import os
import struct
import zipfile
import zlib

import ml_dtypes
import numpy as np

__all__ = ["read_bytes", "read_json", "parse_json", "read_text", "NpyHeader", "npy_header", "read_npy", "npz_headers", "read_npz",
           "read_npz_member", "SafetensorsEntry", "safetensors_header", "read_safetensors",
           "SAFETENSORS_DTYPES", "UNPACKED_DTYPES"]

#: Largest .npy header accepted (NumPy's own default limit is 10000 bytes).
_MAX_NPY_HEADER = 1 << 16
#: Largest safetensors JSON header (the format's own limit is 100 MB).
_MAX_ST_HEADER = 100_000_000
#: deflate cannot expand more than about 1032:1; a member claiming more is lying.
_MAX_DEFLATE_RATIO = 1100

#: safetensors dtype -> NumPy / ml_dtypes dtype, or the bits per element of a packed sub-byte type.
SAFETENSORS_DTYPES = {
    "BOOL": np.dtype(np.bool_), "U8": np.dtype(np.uint8), "I8": np.dtype(np.int8), "U16": np.dtype(np.uint16),
    "I16": np.dtype(np.int16), "U32": np.dtype(np.uint32), "I32": np.dtype(np.int32), "U64": np.dtype(np.uint64),
    "I64": np.dtype(np.int64), "F16": np.dtype(np.float16), "F32": np.dtype(np.float32),
    "F64": np.dtype(np.float64), "BF16": np.dtype(ml_dtypes.bfloat16), "C64": np.dtype(np.complex64),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn), "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "F8_E4M3FNUZ": np.dtype(ml_dtypes.float8_e4m3fnuz), "F8_E5M2FNUZ": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "F8_E8M0": np.dtype(ml_dtypes.float8_e8m0fnu),
    # packed sub-byte types: no one-element-per-item NumPy view
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}
#: Packed types read element-wise anyway, unpacked to one element per byte: F4 is FP4 E2M1 (OCP MX),
#: two per byte, the first element in the low nibble (as torch's float4_e2m1fn_x2 and CUDA's
#: __nv_fp4x2 hold them; safetensors writes the element count as the shape).
UNPACKED_DTYPES = {"F4": np.dtype(ml_dtypes.float4_e2m1fn)}


def _fail(path, what):
    return ValueError(f"{os.fspath(path)}: {what}")


def _size(path) -> int:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _fail(path, f"cannot be read ({exc.strerror or exc})") from None
    if not os.path.isfile(path):
        raise _fail(path, "is not a regular file")
    return st.st_size


def _read_bytes(path, limit, kind):
    n = _size(path)
    if n > limit:
        raise _fail(path, f"is {n} bytes, more than a {kind} may be ({limit})")
    try:
        with open(path, "rb") as fh:
            # bounded: a /proc file says 0 bytes (/proc/self/pagemap then reads the whole address space);
            # in chunks, as read(limit + 1) allocates the whole limit (1 GiB for a 12 kB file) up front
            chunks, total = [], 0
            while total <= limit:
                chunk = fh.read(min(1 << 20, limit + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
            raw = b"".join(chunks)
    except OSError as exc:
        raise _fail(path, f"cannot be read ({exc})") from None
    if len(raw) > limit:
        raise _fail(path, f"holds more than {limit} bytes, more than a {kind} may be (its size said {n})")
    return raw


class _DuplicateKey(ValueError):
    """Raised from inside the JSON parser; :func:`parse_json` turns it into the file's own message."""


def _unique_keys(pairs):
    # json's default keeps the last of two equal keys: a header naming one tensor twice would be read
    # silently, the last entry winning. Refuse it instead (safetensors refuses a duplicate field).
    out = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def parse_json(raw, path, kind="JSON file"):
    """Parse JSON ``raw`` (bytes or str) read from ``path``: its value, or one ValueError naming the file.

    Invalid UTF-8 or JSON, nesting too deep for the parser, and an object holding one key twice
    (at any depth) are refused.

    Examples
    --------
    >>> parse_json(b'{"a": 1, "b": {"c": 2}}', "x.json")
    {'a': 1, 'b': {'c': 2}}
    >>> parse_json('{"w": 1, "w": 2}', "x.json", "safetensors index")
    Traceback (most recent call last):
    ...
    ValueError: x.json: not a safetensors index (the key 'w' appears twice in one object)
    """
    if isinstance(raw, str):
        text = raw
    else:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _fail(path, f"not a {kind} (not UTF-8 text: {exc.reason} at byte {exc.start})") from None
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        key = repr(exc.args[0])
        key = key if len(key) <= 80 else key[:60] + f"... ({len(exc.args[0])} characters)"
        raise _fail(path, f"not a {kind} (the key {key} appears twice in one object)") from None
    except RecursionError:
        # the C parser counts its nesting against the recursion limit: a million "[" end here
        raise _fail(path, f"not a {kind} (JSON nested too deeply)") from None
    except (json.JSONDecodeError, ValueError) as exc:
        raise _fail(path, f"not a {kind} (invalid JSON: {exc})") from None


def read_bytes(path, *, kind="file", max_bytes=1 << 30) -> bytes:
    """A regular file's bytes, or one ValueError naming the file: a path that is not a regular file (a
    FIFO would block the read, a device never end) or one larger than ``max_bytes`` (default 1 GiB) is
    refused before any of it is read.

    Examples
    --------
    >>> import os, tempfile
    >>> d = tempfile.mkdtemp(); p = os.path.join(d, "x.bin")
    >>> _ = open(p, "wb").write(b"ab"); read_bytes(p)
    b'ab'
    >>> read_bytes(d, kind="model file")
    Traceback (most recent call last):
    ...
    ValueError: ...: is not a regular file
    """
    return _read_bytes(path, max_bytes, kind)


def read_json(path, *, kind="JSON file", max_bytes=1 << 30):
    """Parse a JSON file: its object, or one ValueError naming the file.

    A file larger than ``max_bytes`` (default 1 GiB) is refused before any of it is read.

    Examples
    --------
    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "x.json")
    >>> _ = open(p, "w").write('{"a": [1]}'); read_json(p)
    {'a': [1]}
    >>> _ = open(p, "w").write("[" * 100000)
    >>> read_json(p)
    Traceback (most recent call last):
    ...
    ValueError: ...x.json: not a JSON file (JSON nested too deeply)
    """
    return parse_json(_read_bytes(path, max_bytes, kind), path, kind)


def read_text(path, *, kind="text file", max_bytes=1 << 30) -> str:
    """A UTF-8 text file's contents, or one ValueError naming the file (binary, NUL bytes, or larger
    than ``max_bytes``, default 1 GiB, which is refused before any of it is read)."""
    raw = _read_bytes(path, max_bytes, kind)
    if b"\0" in raw:
        raise _fail(path, f"not a {kind} (it holds NUL bytes)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(path, f"not a {kind} (not UTF-8 text: {exc.reason} at byte {exc.start})") from None


# ----------------------------------------------------------------------------- .npy
@dataclasses.dataclass(frozen=True)
class NpyHeader:
    """What a ``.npy`` header says, already checked: ``offset`` is where the data starts."""

    shape: tuple
    dtype: np.dtype
    fortran_order: bool
    offset: int

    @property
    def nbytes(self) -> int:
        """Bytes of data the header claims."""
        return math.prod(self.shape) * self.dtype.itemsize


def _shape(value, path, what):
    if not isinstance(value, (list, tuple)):
        raise _fail(path, f"{what} must be a list of dimensions, got {type(value).__name__}")
    dims = []
    for d in value:
        if isinstance(d, bool) or not isinstance(d, int):
            raise _fail(path, f"{what} must hold non-negative integers, got {d!r}")
        if d < 0:
            raise _fail(path, f"{what} has a negative dimension {d}")
        dims.append(d)
    if len(dims) > 64:
        raise _fail(path, f"{what} has {len(dims)} dimensions (at most 64)")
    return tuple(dims)


def _fits_numpy(shape, itemsize, path, what):
    """NumPy refuses a shape whose non-zero dimensions times the item size exceed its index range,
    even when another dimension is 0 (``(2**62, 0)``): refuse it here, naming the file."""
    size = math.prod(d for d in shape if d) * max(itemsize, 1)
    if size > np.iinfo(np.intp).max:
        raise _fail(path, f"{what} {list(shape)} is too large for a NumPy array (its non-zero dimensions "
                          f"times the {itemsize}-byte element exceed {np.iinfo(np.intp).max})")


def _npy_header_from(fh, path, data_size):
    """Parse a .npy header from an open binary stream holding ``data_size`` bytes in all."""
    magic = fh.read(8)
    if len(magic) < 8 or magic[:6] != b"\x93NUMPY":
        raise _fail(path, "not a .npy array (no NUMPY magic)")
    major = magic[6]
    if major not in (1, 2, 3):
        raise _fail(path, f"unsupported .npy format version {major}.{magic[7]}")
    width = 2 if major == 1 else 4
    hlen_raw = fh.read(width)
    if len(hlen_raw) != width:
        raise _fail(path, "truncated .npy header")
    (hlen,) = struct.unpack("<H" if width == 2 else "<I", hlen_raw)
    offset = 8 + width + hlen
    if hlen > _MAX_NPY_HEADER or offset > data_size:
        raise _fail(path, f".npy header claims {hlen} bytes; the file holds {data_size}")
    raw = fh.read(hlen)
    if len(raw) != hlen:
        raise _fail(path, "truncated .npy header")
    try:
        text = raw.decode("utf-8" if major == 3 else "latin1")
        tree = ast.parse(text.strip(), mode="eval")
        d = ast.literal_eval(tree)
    except (UnicodeDecodeError, ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        raise _fail(path, f"malformed .npy header ({type(exc).__name__})") from None
    # a dict literal keeps the last of a key given twice (as json.loads would): refused, as in JSON headers
    keys = [k.value for k in getattr(tree.body, "keys", []) if isinstance(k, ast.Constant)]
    twice = sorted({k for k in keys if keys.count(k) > 1}, key=str)
    if twice:
        raise _fail(path, f"malformed .npy header (the key {twice[0]!r} appears twice)")
    if not isinstance(d, dict) or set(d) != {"descr", "fortran_order", "shape"}:
        raise _fail(path, "malformed .npy header (expected the keys descr, fortran_order, shape)")
    if not isinstance(d["fortran_order"], bool):
        raise _fail(path, "malformed .npy header (fortran_order must be True or False)")
    shape = _shape(d["shape"], path, ".npy shape")
    try:
        dtype = np.lib.format.descr_to_dtype(d["descr"])
    except (ValueError, TypeError, KeyError, IndexError, RecursionError) as exc:
        raise _fail(path, f"malformed .npy dtype {d['descr']!r} ({exc})") from None
    if dtype.hasobject:
        raise _fail(path, "holds Python objects (pickled data is never loaded)")
    if dtype.itemsize == 0 and math.prod(shape):
        raise _fail(path, f"has a zero-size dtype {dtype}")
    _fits_numpy(shape, dtype.itemsize, path, ".npy shape")
    h = NpyHeader(shape, dtype, d["fortran_order"], offset)
    if h.nbytes != data_size - offset:
        raise _fail(path, f"shape {shape} of {dtype} needs {h.nbytes} bytes of data; the file holds "
                          f"{data_size - offset}")
    return h


def npy_header(path) -> NpyHeader:
    """The checked header of a ``.npy`` file (its data size must match the file exactly)."""
    size = _size(path)
    try:
        with open(path, "rb") as fh:
            return _npy_header_from(fh, path, size)
    except OSError as exc:
        raise _fail(path, f"cannot be read ({exc})") from None


def read_npy(path, *, mmap=True) -> np.ndarray:
    """A ``.npy`` file's array (memory-mapped read-only by default); never unpickles.

    An empty array (no data bytes) is a plain in-memory array, never a mapping: NumPy releases
    without the fix of numpy#27723 (merged late 2024) map a whole file, or fail, when asked to map
    zero bytes at an offset on a page boundary.

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> p = os.path.join(tempfile.mkdtemp(), "a.npy"); np.save(p, np.arange(3.0))
    >>> read_npy(p).tolist()
    [0.0, 1.0, 2.0]
    """
    h = npy_header(path)
    order = "F" if h.fortran_order else "C"
    try:
        if h.nbytes == 0:
            return np.empty(h.shape, h.dtype, order=order)
        if mmap:
            return np.memmap(path, dtype=h.dtype, mode="r", offset=h.offset, shape=h.shape, order=order)
        with open(path, "rb") as fh:
            fh.seek(h.offset)
            buf = fh.read(h.nbytes)
    except (OSError, ValueError) as exc:
        raise _fail(path, f"cannot be read ({exc})") from None
    if len(buf) != h.nbytes:
        raise _fail(path, "is truncated")
    return np.frombuffer(buf, h.dtype).reshape(h.shape, order=order).copy(order="K")


# ----------------------------------------------------------------------------- .npz
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError,
               struct.error, KeyError, UnicodeDecodeError, RuntimeError, OverflowError)


def _open_zip(path):
    size = _size(path)
    try:
        zf = zipfile.ZipFile(path)
        infos = zf.infolist()
    except _ZIP_ERRORS as exc:
        raise _fail(path, f"not an .npz (zip) archive ({exc})") from None
    for info in infos:
        if info.compress_type == zipfile.ZIP_STORED:
            ok = info.file_size == info.compress_size
        elif info.compress_type == zipfile.ZIP_DEFLATED:
            ok = info.file_size <= _MAX_DEFLATE_RATIO * info.compress_size + 1024
        else:
            zf.close()
            raise _fail(path, f"member {info.filename!r} uses an unsupported compression "
                              f"(method {info.compress_type}; .npz files are stored or deflated)")
        if not ok or info.compress_size > size:
            zf.close()
            raise _fail(path, f"member {info.filename!r} claims {info.file_size} bytes, more than its "
                              f"{info.compress_size} stored bytes can hold")
    return zf, infos


def _members(zf, infos, path):
    out = {}
    for info in infos:
        name = info.filename
        if not name.endswith(".npy"):
            raise _fail(path, f"member {name!r} is not an .npy array")
        key = name[:-4]
        if key in out:
            raise _fail(path, f"member {name!r} appears twice")
        out[key] = info
    return out


def _member_header(zf, info, path):
    where = f"{os.fspath(path)}[{info.filename}]"
    try:
        with zf.open(info) as m:
            return _npy_header_from(m, where, info.file_size)
    except ValueError as exc:
        if str(exc).startswith(where):
            raise
        raise _fail(where, f"unreadable ({exc})") from None
    except _ZIP_ERRORS as exc:
        raise _fail(where, f"corrupted ({type(exc).__name__}: {exc})") from None


def npz_headers(path) -> dict:
    """``{name: NpyHeader}`` of an ``.npz`` archive's arrays, every claim checked, no data read."""
    zf, infos = _open_zip(path)
    with zf:
        return {k: _member_header(zf, info, path) for k, info in _members(zf, infos, path).items()}


def _read_member(zf, info, path):
    h = _member_header(zf, info, path)
    where = f"{os.fspath(path)}[{info.filename}]"
    try:
        with zf.open(info) as m:
            m.read(h.offset)
            buf = m.read(h.nbytes)
            extra = m.read(1)        # reading to the end makes zipfile check the CRC
    except _ZIP_ERRORS as exc:
        raise _fail(where, f"corrupted ({type(exc).__name__}: {exc})") from None
    if len(buf) != h.nbytes or extra:
        raise _fail(where, "data length differs from its header")
    order = "F" if h.fortran_order else "C"
    return np.frombuffer(buf, h.dtype).reshape(h.shape, order=order).copy(order="K")


def read_npz(path, keys=None) -> dict:
    """Every array (or those in ``keys``) of an ``.npz`` archive, checked; never unpickles.

    Raises
    ------
    ValueError
        Not a zip archive, a bad CRC, a member that is not a plain ``.npy``
        array, a header whose shape does not match its data, a missing key;
        a member neither stored nor deflated, or one whose directory entry
        claims more than its stored bytes can hold (stored: exactly its
        compressed size; deflated: at most 1100 times it plus 1024 bytes,
        above deflate's largest expansion of about 1032:1).

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> p = os.path.join(tempfile.mkdtemp(), "a.npz"); np.savez(p, a=np.arange(2), b=np.array("x"))
    >>> d = read_npz(p); d["a"].tolist(), str(d["b"])
    ([0, 1], 'x')
    """
    zf, infos = _open_zip(path)
    with zf:
        members = _members(zf, infos, path)
        if keys is not None:
            missing = [k for k in keys if k not in members]
            if missing:
                raise _fail(path, f"missing key(s) {', '.join(missing)}")
            members = {k: members[k] for k in keys}
        return {k: _read_member(zf, info, path) for k, info in members.items()}


def read_npz_member(path, key) -> np.ndarray:
    """One array of an ``.npz`` archive (see :func:`read_npz`)."""
    return read_npz(path, [key])[key]


# ----------------------------------------------------------------------------- safetensors
@dataclasses.dataclass(frozen=True)
class SafetensorsEntry:
    """One tensor of a safetensors file, as its checked header describes it.

    ``begin``/``end`` are absolute byte offsets in the file; ``dtype`` is the
    NumPy / ml_dtypes dtype of the elements as read (``float4_e2m1fn``, one per
    byte, for the packed ``F4``; None for the packed FP6 types, which are not read).
    """

    name: str
    st_dtype: str
    dtype: np.dtype | None
    shape: tuple
    begin: int
    end: int


def safetensors_header(path) -> tuple:
    """``(entries, metadata)`` of a safetensors file: ``{name: SafetensorsEntry}`` and ``__metadata__``.

    Checked: the 8-byte header length against the file size; the header is a
    JSON object; every entry an object with a known ``dtype``, a ``shape`` of
    non-negative integers and ``data_offsets`` ``[begin, end]`` inside the
    data section whose length is exactly the shape's byte size; no two
    tensors overlap; ``__metadata__`` maps strings to strings.

    Examples
    --------
    >>> import os, tempfile, json, struct
    >>> p = os.path.join(tempfile.mkdtemp(), "w.safetensors")
    >>> head = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    >>> _ = open(p, "wb").write(struct.pack("<Q", len(head)) + head + bytes(8))
    >>> e, _ = safetensors_header(p); e["w"].shape, e["w"].dtype.name
    ((2,), 'float32')
    """
    size = _size(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(8)
            if len(raw) != 8:
                raise _fail(path, f"not a safetensors file ({size} bytes, shorter than its 8-byte header length)")
            (n,) = struct.unpack("<Q", raw)
            if n > min(size - 8, _MAX_ST_HEADER):
                raise _fail(path, f"not a safetensors file (header length {n}, the file holds {size} bytes)")
            head = fh.read(n)
    except OSError as exc:
        raise _fail(path, f"cannot be read ({exc})") from None
    header = parse_json(head, path, "safetensors file")
    if not isinstance(header, dict):
        raise _fail(path, f"not a safetensors file (header is a JSON {type(header).__name__}, not an object)")
    data_start, data_len = 8 + n, size - 8 - n
    meta = header.get("__metadata__", {})
    if meta is None:
        meta = {}
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise _fail(path, "__metadata__ must map strings to strings")
    entries = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        what = f"tensor {name!r}"
        if not isinstance(e, dict):
            raise _fail(path, f"{what}: entry must be an object, got {type(e).__name__}")
        for key in ("dtype", "shape", "data_offsets"):
            if key not in e:
                raise _fail(path, f"{what}: entry has no {key!r}")
        st = e["dtype"]
        if not isinstance(st, str) or st not in SAFETENSORS_DTYPES:
            raise _fail(path, f"{what}: unknown dtype {st!r}; safetensors dtypes are "
                              + ", ".join(SAFETENSORS_DTYPES))
        shape = _shape(e["shape"], path, f"{what}: shape")
        offs = e["data_offsets"]
        if (not isinstance(offs, list) or len(offs) != 2
                or any(isinstance(o, bool) or not isinstance(o, int) for o in offs)):
            raise _fail(path, f"{what}: data_offsets must be [begin, end] integers, got {offs!r}")
        begin, end = offs
        if not 0 <= begin <= end <= data_len:
            raise _fail(path, f"{what}: data_offsets {offs} fall outside the {data_len}-byte data section "
                              "(truncated or lying file)")
        kind = SAFETENSORS_DTYPES[st]
        dtype, bits = (kind, 8 * kind.itemsize) if isinstance(kind, np.dtype) else (UNPACKED_DTYPES.get(st), kind)
        numel = math.prod(shape)
        _fits_numpy(shape, max(1, bits // 8), path, f"{what}: shape")
        if (numel * bits) % 8 or end - begin != numel * bits // 8:
            raise _fail(path, f"{what}: shape {list(shape)} of {st} needs {numel * bits / 8:g} bytes, "
                              f"data_offsets {offs} cover {end - begin}")
        entries[name] = SafetensorsEntry(name, st, dtype, shape, data_start + begin, data_start + end)
    spans = sorted((e.begin, e.end, e.name) for e in entries.values() if e.end > e.begin)
    for (b0, e0, n0), (b1, _, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise _fail(path, f"tensors {n0!r} and {n1!r} overlap in the data section")
    return entries, meta


def read_safetensors(path, entry: SafetensorsEntry, start=None, stop=None) -> np.ndarray:
    """Rows ``[start:stop]`` of the first axis of one checked entry (the whole tensor by default).

    ``start`` and ``stop`` are clamped to ``0..rows`` (a negative start reads from row 0, not from
    the end as a Python slice would), and a stop below the start reads no rows.  A 0-d tensor has
    no rows: it is read whole, and a row range of it is a ValueError.
    """
    if entry.dtype is None:
        raise _fail(path, f"tensor {entry.name!r}: packed {entry.st_dtype} has no element-wise NumPy type")
    shape = entry.shape
    if not shape and (start is not None or stop is not None):
        raise _fail(path, f"tensor {entry.name!r} is 0-d: it has no rows (read it with start=None, stop=None)")
    per_row = math.prod(shape[1:]) if shape else 1
    rows = shape[0] if shape else 1
    lo = 0 if start is None else max(0, min(int(start), rows))
    hi = rows if stop is None else max(lo, min(int(stop), rows))
    packed = entry.st_dtype in UNPACKED_DTYPES
    if packed:
        # elements [lo * per_row, hi * per_row) live in the bytes holding those nibbles
        first, last = lo * per_row, hi * per_row
        offset, nbytes = first // 2, (last + 1) // 2 - first // 2
    else:
        offset, nbytes = lo * per_row * entry.dtype.itemsize, (hi - lo) * per_row * entry.dtype.itemsize
    try:
        with open(path, "rb") as fh:
            fh.seek(entry.begin + offset)
            buf = fh.read(nbytes)
    except OSError as exc:
        raise _fail(path, f"cannot be read ({exc})") from None
    if len(buf) != nbytes:
        raise _fail(path, f"tensor {entry.name!r} is truncated")
    if packed:
        b = np.frombuffer(buf, np.uint8)
        nib = np.stack([b & 0x0F, b >> 4], axis=-1).reshape(-1)
        arr = nib[first % 2:first % 2 + last - first].copy().view(entry.dtype)
    else:
        arr = np.frombuffer(buf, entry.dtype).copy()
    if not shape:
        return arr.reshape(())
    if start is None and stop is None:
        return arr.reshape(shape)
    return arr.reshape((hi - lo,) + shape[1:])
