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
    assert e.dtype is None and e.end - e.begin == nbytes
    with pytest.raises(ValueError, match="packed"):
        readers.read_safetensors(p, e)


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
    bound = readers._MAX_DEFLATE_RATIO * csize + 1024
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
