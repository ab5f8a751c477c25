"""fp8emu.readers on valid files of every kind it accepts (the hostile side is test_hostile_files.py).

Files are written by the real safetensors package and by NumPy; what comes back must be bit-identical.
"""

from __future__ import annotations

import json
import struct

import ml_dtypes
import numpy as np
import pytest
from safetensors import numpy as st_numpy

from fp8emu import readers

# every dtype the safetensors NumPy API writes, with the name it writes
ST_DTYPES = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "U16": np.uint16, "I16": np.int16,
             "U32": np.uint32, "I32": np.int32, "U64": np.uint64, "I64": np.int64, "F16": np.float16,
             "F32": np.float32, "F64": np.float64, "BF16": ml_dtypes.bfloat16, "C64": np.complex64,
             "F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E5M2": ml_dtypes.float8_e5m2,
             "F8_E4M3FNUZ": ml_dtypes.float8_e4m3fnuz, "F8_E5M2FNUZ": ml_dtypes.float8_e5m2fnuz,
             "F8_E8M0": ml_dtypes.float8_e8m0fnu}


def _raw(a):
    return np.ascontiguousarray(a).view(np.uint8)


def test_every_safetensors_dtype_reads_back_bit_exactly(tmp_path):
    g = np.random.default_rng(1)
    tensors = {}
    for name, dt in ST_DTYPES.items():
        size = np.dtype(dt).itemsize
        bits = g.integers(0, 256, 5 * 3 * size, dtype=np.uint8)
        if dt is np.bool_:
            bits = bits % 2
        tensors[name.lower()] = bits.view(dt).reshape(5, 3)
    p = tmp_path / "all.safetensors"
    st_numpy.save_file(tensors, str(p))
    entries, meta = readers.safetensors_header(p)
    assert meta == {}
    for name, dt in ST_DTYPES.items():
        e = entries[name.lower()]
        assert e.st_dtype == name and e.dtype == np.dtype(dt) and e.shape == (5, 3)
        assert np.array_equal(_raw(readers.read_safetensors(p, e)), _raw(tensors[name.lower()]))
        assert np.array_equal(_raw(readers.read_safetensors(p, e, 1, 4)), _raw(tensors[name.lower()][1:4]))


def _st(path, entries, nbytes):
    head = json.dumps(entries).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + bytes(nbytes))
    return path


@pytest.mark.parametrize("st,shape,nbytes,ok", [
    ("F4", [2, 3], 3, True), ("F4", [1, 3], 2, False), ("F4", [1, 3], 1, False),
    ("F6_E2M3", [4], 3, True), ("F6_E3M2", [4], 4, False), ("F6_E2M3", [2], 2, False),
])
def test_packed_sub_byte_sizes(tmp_path, st, shape, nbytes, ok):
    p = _st(tmp_path / "p.safetensors", {"t": {"dtype": st, "shape": shape, "data_offsets": [0, nbytes]}}, nbytes)
    if not ok:
        with pytest.raises(ValueError, match="needs"):
            readers.safetensors_header(p)
        return
    e = readers.safetensors_header(p)[0]["t"]
    assert e.end - e.begin == nbytes
    if st == "F4":      # read as what it is: FP4 E2M1, one element per byte
        assert e.dtype == np.dtype(ml_dtypes.float4_e2m1fn)
        assert readers.read_safetensors(p, e).shape == tuple(shape)
        return
    assert e.dtype is None
    with pytest.raises(ValueError, match="packed"):
        readers.read_safetensors(p, e)


# OCP MX v1.0 FP4 E2M1 values of the codes 0..15 (sign bit 3)
_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


@pytest.mark.parametrize("shape", [(4, 3), (4, 2), (8,)])
def test_f4_unpacks_low_nibble_first_with_row_ranges(tmp_path, shape):
    n = int(np.prod(shape))
    codes = np.random.default_rng(n).integers(0, 16, n)
    packed = (codes[0::2] | (codes[1::2] << 4)).astype(np.uint8).tobytes()    # first element: low nibble
    head = json.dumps({"w": {"dtype": "F4", "shape": list(shape), "data_offsets": [0, len(packed)]}}).encode()
    p = tmp_path / "f4.safetensors"
    p.write_bytes(struct.pack("<Q", len(head)) + head + packed)
    e = readers.safetensors_header(p)[0]["w"]
    want = np.array([_E2M1[c] for c in codes]).reshape(shape)
    got = readers.read_safetensors(p, e)
    assert got.dtype == np.dtype(ml_dtypes.float4_e2m1fn)
    np.testing.assert_array_equal(got.astype(np.float64), want)
    if len(shape) > 1:                         # rows 1..2: an odd row length starts mid-byte
        np.testing.assert_array_equal(readers.read_safetensors(p, e, 1, 3).astype(np.float64), want[1:3])


def test_f4_and_e8m0_files_written_by_safetensors(tmp_path):
    """Real files from the safetensors package (torch's float4_e2m1fn_x2 and float8_e8m0fnu tensors)."""
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("this torch has no float4_e2m1fn_x2")
    packed = torch.tensor([[0x21, 0x43], [0x65, 0xF7]], dtype=torch.uint8)
    scales = torch.tensor([127, 128, 1, 255], dtype=torch.uint8)
    p = tmp_path / "w.safetensors"
    st_torch.save_file({"w": packed.view(torch.float4_e2m1fn_x2), "s": scales.view(torch.float8_e8m0fnu)}, str(p))
    entries, _ = readers.safetensors_header(p)
    w, s = entries["w"], entries["s"]
    assert (w.st_dtype, w.shape, s.st_dtype, s.shape) == ("F4", (2, 4), "F8_E8M0", (4,))
    np.testing.assert_array_equal(readers.read_safetensors(p, w).astype(np.float64),
                                  [[_E2M1[1], _E2M1[2], _E2M1[3], _E2M1[4]], [_E2M1[5], _E2M1[6], _E2M1[7], _E2M1[15]]])
    e8 = readers.read_safetensors(p, s).astype(np.float64)       # E8M0: 2**(code - 127), 0xFF NaN
    assert e8[:3].tolist() == [1.0, 2.0, 2.0 ** -126] and np.isnan(e8[3])


@pytest.mark.parametrize("arr", [
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.asfortranarray(np.arange(12, dtype=np.int16).reshape(3, 4)),
    np.zeros(3, dtype=[("\u00e9", "<f4")]),          # latin1 field name: a version 1.0 header
    np.zeros(3, dtype=[("\u20ac", "<f4")]),          # not latin1: NumPy writes version 3.0 (UTF-8)
    np.zeros((0, 5), np.float64),
])
@pytest.mark.parametrize("mmap", [True, False])
@pytest.mark.filterwarnings("ignore:Stored array in format 3.0")
def test_npy_files_read_back_exactly(tmp_path, arr, mmap):
    p = tmp_path / "a.npy"
    np.save(p, arr)
    got = readers.read_npy(p, mmap=mmap)
    assert got.dtype == arr.dtype and got.shape == arr.shape and np.array_equal(_raw(got), _raw(arr))
    if mmap and arr.size:         # memory-mapped read-only, as documented
        assert isinstance(got, np.memmap) and not got.flags.writeable
    assert got.flags.f_contiguous == arr.flags.f_contiguous or arr.size == 0
    z = tmp_path / "a.npz"
    np.savez(z, a=arr)
    back = readers.read_npz(z)["a"]
    assert back.dtype == arr.dtype and np.array_equal(_raw(back), _raw(arr))


def test_npy_versions_magic_and_header_limits(tmp_path):
    p = tmp_path / "a.npy"
    np.save(p, np.arange(3.0))
    raw = p.read_bytes()
    (tmp_path / "m.npy").write_bytes(b"\x93NUMPZ" + raw[6:])
    with pytest.raises(ValueError, match="no NUMPY magic"):
        readers.read_npy(tmp_path / "m.npy")
    for version in (0, 4):
        (tmp_path / "v.npy").write_bytes(raw[:6] + bytes([version]) + raw[7:])
        with pytest.raises(ValueError, match="unsupported .npy format version"):
            readers.read_npy(tmp_path / "v.npy")
    for cut in (9, 11):
        (tmp_path / "t.npy").write_bytes(raw[:cut])
        with pytest.raises(ValueError, match="truncated|claims"):
            readers.read_npy(tmp_path / "t.npy")

    def v2(header_len):
        text = repr({"descr": "<f8", "fortran_order": False, "shape": (3,)}).encode()
        text += b" " * (header_len - len(text) - 1) + b"\n"
        return b"\x93NUMPY\x02\x00" + struct.pack("<I", len(text)) + text + np.arange(3.0).tobytes()
    (tmp_path / "big.npy").write_bytes(v2(60_000))             # long but within the limit
    assert readers.read_npy(tmp_path / "big.npy").tolist() == [0.0, 1.0, 2.0]
    (tmp_path / "huge.npy").write_bytes(v2(70_000))            # beyond 2**16
    with pytest.raises(ValueError, match="header claims 70000"):
        readers.read_npy(tmp_path / "huge.npy")


def test_npz_member_claiming_more_than_deflate_can_hold(tmp_path):
    """A deflated member whose directory entry claims ~4 GiB: refused before any shape is believed."""
    import zipfile
    import zlib
    size = 0xFFFFFFF0
    text = repr({"descr": "<f8", "fortran_order": False, "shape": ((size - 128) // 8,)}).encode()
    text += b" " * (128 - 10 - len(text) - 1) + b"\n"
    payload = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + bytes(64)
    p = tmp_path / "bomb.npz"
    with zipfile.ZipFile(p, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.npy", payload)
    raw = bytearray(p.read_bytes())
    local, central = raw.find(b"PK\x03\x04"), raw.find(b"PK\x01\x02")
    struct.pack_into("<I", raw, local + 22, size)              # uncompressed size, local header
    struct.pack_into("<I", raw, central + 24, size)            # and central directory
    p.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="claims 4294967280 bytes"):
        readers.npz_headers(p)
    with pytest.raises(ValueError, match="claims"):
        readers.read_npz(p)


def test_safetensors_header_length_may_not_run_past_the_file(tmp_path):
    p = tmp_path / "h.safetensors"
    for n in (3, 10):                       # "{}" is 2 bytes: a length of 3 or 10 claims bytes that are not there
        p.write_bytes(struct.pack("<Q", n) + b"{}")
        with pytest.raises(ValueError, match=f"header length {n}"):
            readers.safetensors_header(p)
    p.write_bytes(struct.pack("<Q", 2) + b"{}")
    assert readers.safetensors_header(p) == ({}, {})


def test_deflated_member_size_bound_is_exact(tmp_path):
    """The directory's size claim is checked at the deflate bound itself: at it passes, one above fails."""
    import zipfile
    p = tmp_path / "d.npz"
    with zipfile.ZipFile(p, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.npy", bytes(4096))
    raw = bytearray(p.read_bytes())
    local, central = raw.find(b"PK\x03\x04"), raw.find(b"PK\x01\x02")
    (csize,) = struct.unpack_from("<I", raw, central + 20)
    bound = 1100 * csize + 1024               # the documented bound (read_npz), not the module's constant
    for claim, needle in ((bound, "no NUMPY magic"), (bound + 1, f"claims {bound + 1} bytes")):
        struct.pack_into("<I", raw, local + 22, claim)
        struct.pack_into("<I", raw, central + 24, claim)
        p.write_bytes(bytes(raw))
        with pytest.raises(ValueError, match=needle):
            readers.npz_headers(p)


def test_data_offsets_may_not_run_past_the_file_by_a_byte(tmp_path):
    for have, ok in ((8, True), (7, False), (0, False)):
        p = _st(tmp_path / "o.safetensors", {"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, have)
        if ok:
            assert readers.safetensors_header(p)[0]["t"].end - readers.safetensors_header(p)[0]["t"].begin == 8
        else:
            with pytest.raises(ValueError, match=f"outside the {have}-byte data section"):
                readers.safetensors_header(p)


def test_seed10_holes(tmp_path):
    # a 64-dimensional shape is the most accepted; 65 is refused
    for ndim, ok in ((64, True), (65, False)):
        p = _st(tmp_path / "d.safetensors", {"t": {"dtype": "U8", "shape": [1] * ndim, "data_offsets": [0, 1]}}, 1)
        if ok:
            assert readers.safetensors_header(p)[0]["t"].shape == (1,) * 64
        else:
            with pytest.raises(ValueError, match="65 dimensions"):
                readers.safetensors_header(p)
    # data_offsets of three integers are refused as such (not by a failed unpacking)
    p = _st(tmp_path / "o.safetensors", {"t": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1, 1]}}, 1)
    with pytest.raises(ValueError, match="data_offsets must be"):
        readers.safetensors_header(p)
    # row ranges from row 0, and a one-byte array (the empty-array branch is for zero bytes only)
    t = np.arange(12, dtype=np.float32).reshape(4, 3)
    st_numpy.save_file({"t": t}, str(tmp_path / "r.safetensors"))
    e = readers.safetensors_header(tmp_path / "r.safetensors")[0]["t"]
    assert readers.read_safetensors(tmp_path / "r.safetensors", e, 0, 2).tolist() == t[0:2].tolist()
    assert readers.read_safetensors(tmp_path / "r.safetensors", e, -1, 2).tolist() == t[0:2].tolist()  # clamped
    for v in (0xA5, 0x5A):        # two values: an uninitialised array cannot match both
        np.save(tmp_path / "one.npy", np.array([v], np.uint8))
        one = readers.read_npy(tmp_path / "one.npy")
        assert one.tolist() == [v] and isinstance(one, np.memmap)
        assert readers.read_npy(tmp_path / "one.npy", mmap=False).tolist() == [v]
    # a key the archive lacks is a ValueError naming it
    np.savez(tmp_path / "k.npz", a=np.zeros(2))
    with pytest.raises(ValueError, match="missing key.*nope"):
        readers.read_npz(tmp_path / "k.npz", ["nope"])


# ----------------------------------------------------------------------------- seed 11 holes: limits, 0-d, branches
@pytest.mark.parametrize("reader, kind, small", [(readers.read_json, "JSON file", "abcdefgh"),
                                                 (readers.read_text, "text file", '"abcdefgh"')])
def test_default_size_limit_of_json_and_text_is_one_gib(tmp_path, reader, kind, small):
    p = tmp_path / "big"
    with open(p, "wb") as fh:                 # a sparse file: 1 GiB + 1 byte on disk costs nothing
        fh.truncate((1 << 30) + 1)
    with pytest.raises(ValueError, match=rf"is 1073741825 bytes, more than a {kind} may be \(1073741824\)"):
        reader(p)
    q = tmp_path / "small.json"
    q.write_text('"abcdefgh"')                # 10 bytes: the limit is inclusive
    assert reader(q, max_bytes=10) == small
    with pytest.raises(ValueError, match=r"is 10 bytes, more than a .* may be \(9\)"):
        reader(q, max_bytes=9)


def test_an_empty_npy_array_is_in_memory_not_mapped(tmp_path):
    for shape in ((0,), (0, 5), (3, 0)):
        np.save(tmp_path / "e.npy", np.zeros(shape, np.float32))
        for mmap in (True, False):
            got = readers.read_npy(tmp_path / "e.npy", mmap=mmap)
            assert type(got) is np.ndarray and got.shape == shape and got.dtype == np.float32


@pytest.mark.parametrize("method", ["ZIP_BZIP2", "ZIP_LZMA"])
def test_npz_members_neither_stored_nor_deflated_are_refused(tmp_path, method):
    import io
    import zipfile
    buf = io.BytesIO()
    np.save(buf, np.arange(3.0))
    p = tmp_path / "c.npz"
    with zipfile.ZipFile(p, "w", compression=getattr(zipfile, method)) as z:
        z.writestr("a.npy", buf.getvalue())
    for read in (readers.read_npz, readers.npz_headers):
        with pytest.raises(ValueError, match=r"member 'a.npy' uses an unsupported compression \(method \d+; "):
            read(p)


@pytest.mark.parametrize("offs", [[-1, 3], [-4, 0], [-8, -4]])
def test_negative_data_offsets_are_refused(tmp_path, offs):
    n = (offs[1] - offs[0]) // 4
    p = _st(tmp_path / "n.safetensors", {"t": {"dtype": "F32", "shape": [n], "data_offsets": offs}}, 8)
    with pytest.raises(ValueError, match="fall outside the 8-byte data section"):
        readers.safetensors_header(p)


def test_0d_tensors_read_whole_and_refuse_a_row_range(tmp_path):
    p = tmp_path / "s.safetensors"
    st_numpy.save_file({"a": np.array(1.5, np.float32), "b": np.array([7, 8, 9], np.int16),
                        "c": np.array(-2.25, np.float64)}, str(p))
    e, _ = readers.safetensors_header(p)
    assert e["a"].shape == () and e["c"].shape == ()
    for name, want, dt in (("a", 1.5, np.float32), ("c", -2.25, np.float64)):
        got = readers.read_safetensors(p, e[name])
        assert got.shape == () and got.dtype == dt and got.item() == want
        for start, stop in ((0, 1), (1, 2), (None, 1), (0, None)):
            with pytest.raises(ValueError, match=rf"{name}' is 0-d: it has no rows"):
                readers.read_safetensors(p, e[name], start, stop)
    assert readers.read_safetensors(p, e["b"]).tolist() == [7, 8, 9]


def test_row_ranges_are_clamped_as_documented(tmp_path):
    t = np.arange(15, dtype=np.int32).reshape(5, 3)
    p = tmp_path / "r.safetensors"
    st_numpy.save_file({"t": t}, str(p))
    e = readers.safetensors_header(p)[0]["t"]
    rows = [t[i].tolist() for i in range(5)]

    def clamp(v, lo, hi):
        return max(lo, min(v, hi))

    for start in (None, -3, -1, 0, 1, 4, 5, 7):
        for stop in (None, -2, 0, 1, 3, 5, 9):
            lo = 0 if start is None else clamp(start, 0, 5)
            hi = 5 if stop is None else clamp(stop, lo, 5)
            got = readers.read_safetensors(p, e, start, stop)
            assert got.shape == (hi - lo, 3) and got.tolist() == rows[lo:hi], (start, stop)


# ----------------------------------------------------------------------------- every refusal, pinned
def _npy_bytes(header, data=b"", major=1):
    text = (header if isinstance(header, bytes) else repr(header).encode("latin1"))
    width = 2 if major == 1 else 4
    text += b" " * ((64 - (len(text) + 9 + width) % 64) % 64) + b"\n"
    return b"\x93NUMPY" + bytes([major, 0]) + struct.pack("<H" if width == 2 else "<I", len(text)) + text + data


def _npz_bytes(members, compression=0):
    import io
    import zipfile
    import warnings
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as z, warnings.catch_warnings():
        warnings.simplefilter("ignore")           # "Duplicate name": the archive is meant to be wrong
        for name, raw in members:
            z.writestr(name, raw)
    return buf.getvalue()


def _st_bytes(header, data=b""):
    head = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(head)) + head + data


_F4 = {"descr": "<f4", "fortran_order": False, "shape": (2,)}
_W = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
REFUSALS = {
    # the file itself
    "text with NUL bytes": ("read_text", b"ab\0cd", r"not a text file \(it holds NUL bytes\)"),
    "text not UTF-8": ("read_text", b"\xff\xfe", r"not a text file \(not UTF-8 text: invalid start byte at byte 0\)"),
    "JSON not UTF-8": ("read_json", b'{"a": "\xe9"}', r"not a JSON file \(not UTF-8 text: .* at byte 7\)"),
    "JSON invalid": ("read_json", b"{'a': 1}", r"not a JSON file \(invalid JSON: "),
    # .npy
    "npy shape not a list": ("read_npy", _npy_bytes(dict(_F4, shape=3)), r"\.npy shape must be a list of dimensions, got int"),
    "npy float dimension": ("read_npy", _npy_bytes(dict(_F4, shape=(1.5,))), r"\.npy shape must hold non-negative integers, got 1\.5"),
    "npy bool dimension": ("read_npy", _npy_bytes(dict(_F4, shape=(True,))), "must hold non-negative integers, got True"),
    "npy negative dimension": ("read_npy", _npy_bytes(dict(_F4, shape=(-2,))), r"\.npy shape has a negative dimension -2"),
    "npy 65 dimensions": ("read_npy", _npy_bytes(dict(_F4, shape=(1,) * 65), bytes(4)), "has 65 dimensions \\(at most 64\\)"),
    "npy no magic": ("read_npy", b"\x93NUMPZ\x01\x00" + bytes(100), r"not a \.npy array \(no NUMPY magic\)"),
    "npy short magic": ("read_npy", b"\x93NUM", r"not a \.npy array \(no NUMPY magic\)"),
    "npy version 4": ("read_npy", b"\x93NUMPY\x04\x01" + bytes(100), r"unsupported \.npy format version 4\.1"),
    "npy header length cut": ("read_npy", b"\x93NUMPY\x01\x00\x10", r"truncated \.npy header"),
    "npy v2 header length cut": ("read_npy", b"\x93NUMPY\x02\x00\x10\x00\x00", r"truncated \.npy header"),
    "npy header past the file": ("read_npy", b"\x93NUMPY\x01\x00\x00\x01" + bytes(100), r"\.npy header claims 256 bytes; the file holds 110"),
    "npy header not a literal": ("read_npy", _npy_bytes(b"{'descr': <f4}"), r"malformed \.npy header \(SyntaxError\)"),
    "npy header not a dict": ("read_npy", _npy_bytes(b"[1, 2]"), r"expected the keys descr, fortran_order, shape"),
    "npy header extra key": ("read_npy", _npy_bytes(dict(_F4, extra=1), bytes(8)), "expected the keys descr, fortran_order, shape"),
    "npy fortran_order 1": ("read_npy", _npy_bytes(dict(_F4, fortran_order=1), bytes(8)), "fortran_order must be True or False"),
    "npy bad descr": ("read_npy", _npy_bytes(dict(_F4, descr="nonsense"), bytes(8)), r"malformed \.npy dtype 'nonsense'"),
    "npy objects": ("read_npy", _npy_bytes(dict(_F4, descr="|O"), bytes(16)), r"holds Python objects \(pickled data is never loaded\)"),
    "npy zero-size dtype": ("read_npy", _npy_bytes(dict(_F4, descr="|V0")), "has a zero-size dtype"),
    "npy data short": ("read_npy", _npy_bytes(_F4, bytes(7)), r"shape \(2,\) of float32 needs 8 bytes of data; the file holds 7"),
    "npy data long": ("read_npy", _npy_bytes(_F4, bytes(9)), r"needs 8 bytes of data; the file holds 9"),
    # .npz
    "npz not a zip": ("read_npz", b"PK\x03\x04" + bytes(60), r"not an \.npz \(zip\) archive"),
    "npz member not npy": ("read_npz", _npz_bytes([("a.txt", b"x")]), r"member 'a.txt' is not an \.npy array"),
    "npz member twice": ("read_npz", _npz_bytes([("a.npy", _npy_bytes(_F4, bytes(8)))] * 2), "member 'a.npy' appears twice"),
    "npz member lying header": ("read_npz", _npz_bytes([("a.npy", _npy_bytes(_F4, bytes(4)))]),
                                r"\[a.npy\]: shape \(2,\) of float32 needs 8 bytes of data; the file holds 4"),
    "npz member no magic": ("npz_headers", _npz_bytes([("a.npy", b"hello")], 8), r"\[a.npy\]: not a \.npy array"),
    # safetensors
    "st empty file": ("safetensors_header", b"", r"not a safetensors file \(0 bytes, shorter than its 8-byte header length\)"),
    "st header past the file": ("safetensors_header", struct.pack("<Q", 3) + b"{}", r"header length 3, the file holds 10 bytes"),
    "st header a list": ("safetensors_header", _st_bytes([1]), r"header is a JSON list, not an object"),
    "st metadata a list": ("safetensors_header", _st_bytes({"__metadata__": ["a"]}), "__metadata__ must map strings to strings"),
    "st metadata value": ("safetensors_header", _st_bytes({"__metadata__": {"a": 1}}), "__metadata__ must map strings to strings"),
    "st entry a list": ("safetensors_header", _st_bytes({"w": [1]}), r"tensor 'w': entry must be an object, got list"),
    "st no dtype": ("safetensors_header", _st_bytes({"w": {"shape": [2], "data_offsets": [0, 8]}}, bytes(8)), "tensor 'w': entry has no 'dtype'"),
    "st no offsets": ("safetensors_header", _st_bytes({"w": {"dtype": "F32", "shape": [2]}}, bytes(8)), "entry has no 'data_offsets'"),
    "st dtype not a string": ("safetensors_header", _st_bytes({"w": dict(_W, dtype=4)}, bytes(8)), r"tensor 'w': unknown dtype 4; safetensors dtypes are BOOL, U8"),
    "st offsets a string": ("safetensors_header", _st_bytes({"w": dict(_W, data_offsets="0,8")}, bytes(8)), r"data_offsets must be \[begin, end\] integers, got '0,8'"),
    "st offsets one": ("safetensors_header", _st_bytes({"w": dict(_W, data_offsets=[8])}, bytes(8)), r"data_offsets must be \[begin, end\] integers"),
    "st offsets bool": ("safetensors_header", _st_bytes({"w": dict(_W, data_offsets=[False, 8])}, bytes(8)), r"data_offsets must be \[begin, end\] integers"),
    "st offsets float": ("safetensors_header", _st_bytes({"w": dict(_W, data_offsets=[0, 8.0])}, bytes(8)), r"data_offsets must be \[begin, end\] integers"),
    "st offsets reversed": ("safetensors_header", _st_bytes({"w": dict(_W, shape=[0], data_offsets=[8, 0])}, bytes(8)), r"fall outside the 8-byte data section"),
    "st needs": ("safetensors_header", _st_bytes({"w": dict(_W, data_offsets=[0, 4])}, bytes(8)), r"shape \[2\] of F32 needs 8 bytes, data_offsets \[0, 4\] cover 4"),
    "st overlap by a byte": ("safetensors_header", _st_bytes({"a": _W, "b": dict(_W, data_offsets=[7, 15])}, bytes(15)),
                             "tensors 'a' and 'b' overlap in the data section"),
}


@pytest.mark.parametrize("name", list(REFUSALS))
def test_every_refusal_names_the_file_and_the_reason(tmp_path, name):
    func, raw, needle = REFUSALS[name]
    p = tmp_path / "f.bin"
    p.write_bytes(raw)
    with pytest.raises(ValueError, match=needle) as exc:
        getattr(readers, func)(p)
    assert str(exc.value).startswith(str(p))


def test_refusals_of_the_path_itself(tmp_path):
    for func in ("read_json", "read_text", "npy_header", "read_npy", "read_npz", "npz_headers", "safetensors_header"):
        with pytest.raises(ValueError, match=r"no-such\.file: cannot be read \(No such file or directory\)"):
            getattr(readers, func)(tmp_path / "no-such.file")
        with pytest.raises(ValueError, match=f"{tmp_path.name}: is not a regular file"):
            getattr(readers, func)(tmp_path)


def test_what_the_refusals_let_through(tmp_path):
    # adjacent tensors, and an empty one inside another's bytes, do not overlap
    p = tmp_path / "ok.safetensors"
    p.write_bytes(_st_bytes({"a": _W, "b": dict(_W, data_offsets=[8, 16]), "e": dict(_W, shape=[0], data_offsets=[4, 4]),
                             "__metadata__": None}, bytes(16)))
    e, meta = readers.safetensors_header(p)
    assert meta == {} and [(e[k].begin - e["a"].begin, e[k].shape) for k in "abe"] == [(0, (2,)), (8, (2,)), (4, (0,))]
    # a tensor shrunk after its header was checked is truncated, not short
    q = tmp_path / "t.safetensors"
    q.write_bytes(_st_bytes({"w": _W}, np.arange(2, dtype=np.float32).tobytes()))
    w = readers.safetensors_header(q)[0]["w"]
    assert readers.read_safetensors(q, w).tolist() == [0.0, 1.0]
    q.write_bytes(q.read_bytes()[:-1])
    with pytest.raises(ValueError, match="tensor 'w' is truncated"):
        readers.read_safetensors(q, w)
    # a .npy header of exactly the limit (2**16 bytes) is read; one byte more is refused
    body = repr(_F4).encode()
    for hlen, ok in ((1 << 16, True), ((1 << 16) + 1, False)):
        text = body + b" " * (hlen - len(body) - 1) + b"\n"
        r = tmp_path / "h.npy"
        r.write_bytes(b"\x93NUMPY\x02\x00" + struct.pack("<I", hlen) + text + np.float32([3, 4]).tobytes())
        if ok:
            assert readers.read_npy(r).tolist() == [3.0, 4.0]
        else:
            with pytest.raises(ValueError, match=f"header claims {hlen} bytes"):
                readers.read_npy(r)


def test_safetensors_header_limit_is_100_mb(tmp_path):
    p = tmp_path / "big.safetensors"
    for n, needle in ((100_000_000, "invalid JSON"), (100_000_001, "header length 100000001")):
        with open(p, "wb") as fh:             # sparse: the header's bytes are zeros that cost no disk
            fh.write(struct.pack("<Q", n))
            fh.truncate(8 + n + 16)
        with pytest.raises(ValueError, match=needle):
            readers.safetensors_header(p)
