"""Hostile input: a ``.npy`` header holding a key twice."""

import struct
import zipfile

import numpy as np
import pytest

from fp8emu import readers


def _npy(header: str, data: bytes) -> bytes:
    h = header.encode("latin1")
    pad = 64 - (10 + len(h) + 1) % 64
    h = h + b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + data


DOUBLED = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'descr': '<i4', }"


def test_a_npy_header_with_a_key_twice_is_refused_naming_the_file_and_key(tmp_path):
    # before: ast.literal_eval kept the last 'descr': the float32 file's bytes read as int32, silently
    data = np.array([1.5, -2.0], "<f4").tobytes()
    p = tmp_path / "a.npy"
    p.write_bytes(_npy(DOUBLED, data))
    for read in (readers.npy_header, readers.read_npy):
        with pytest.raises(ValueError, match=r"a\.npy: malformed \.npy header \(the key 'descr' appears twice\)"):
            read(p)
    z = tmp_path / "b.npz"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("x.npy", _npy(DOUBLED, data))
    with pytest.raises(ValueError, match=r"b\.npz\[x\.npy\]: malformed \.npy header \(the key 'descr' appears twice\)"):
        readers.read_npz(z)
    p.write_bytes(_npy(DOUBLED.replace(", 'descr': '<i4'", ""), data))     # the same file without the key twice
    assert readers.read_npy(p).tolist() == [1.5, -2.0]
