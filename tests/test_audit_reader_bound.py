"""``fp8emu.readers``' size bound holds for files whose size lies (``read_bytes`` / ``read_text`` / ``read_json``).

The bound was checked against ``os.stat``'s size only, then the file was read to its end: a /proc file
says 0 bytes, so ``read_bytes("/proc/self/status", max_bytes=100)`` returned 1.4 kB, and
``/proc/self/pagemap`` would read the process's whole address space.  The read itself is now bounded.
"""
import os

import pytest

from fp8emu import readers

PROC = "/proc/self/status"


@pytest.mark.skipif(not os.path.isfile(PROC), reason="needs Linux's /proc")
@pytest.mark.parametrize("reader", [readers.read_bytes, readers.read_text, readers.read_json])
def test_a_file_that_says_zero_bytes_is_still_bounded(reader):
    assert os.stat(PROC).st_size == 0
    with pytest.raises(ValueError, match=r"/proc/self/status: holds more than 100 bytes.*its size said 0"):
        reader(PROC, max_bytes=100)


@pytest.mark.skipif(not os.path.isfile(PROC), reason="needs Linux's /proc")
def test_within_the_bound_it_is_read_whole():
    assert readers.read_text(PROC, max_bytes=1 << 20).startswith("Name:")


def test_a_file_of_exactly_the_bound_is_read(tmp_path):
    p = tmp_path / "x.bin"
    p.write_bytes(b"a" * 64)
    assert readers.read_bytes(p, max_bytes=64) == b"a" * 64
    with pytest.raises(ValueError, match="is 64 bytes, more than a file may be"):
        readers.read_bytes(p, max_bytes=63)
