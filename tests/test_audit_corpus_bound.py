"""``train-study --corpus`` (``corpus.load_corpus``) reads at most ``MAX_CORPUS_BYTES``, whatever the file says.

The corpus was read with ``Path.read_bytes()`` after an ``is_file`` check: a /proc file is "regular" and says
0 bytes, so ``--corpus /proc/self/pagemap`` would read the whole address space (the sixth audit bounded
``readers.read_bytes`` so; the corpus did not use it).  It is now read through it: one line naming the
file, the bound and the size it said.
"""

import os

import pytest

pytest.importorskip("torch")
from fp8emu.torch.study import corpus  # noqa: E402

STATUS = "/proc/self/status"


@pytest.mark.skipif(not os.path.exists(STATUS), reason="needs Linux's /proc")
def test_a_file_that_says_zero_bytes_is_bounded(monkeypatch):
    assert os.stat(STATUS).st_size == 0          # the size the check before the read saw
    monkeypatch.setattr(corpus, "MAX_CORPUS_BYTES", 100, raising=False)
    with pytest.raises(ValueError, match=r"/proc/self/status: holds more than 100 bytes, more than a corpus "
                                         r"may be \(its size said 0\)"):
        corpus.load_corpus(STATUS)


def test_a_file_past_the_bound_is_refused(tmp_path, monkeypatch):
    p = tmp_path / "c.txt"
    p.write_text("abc " * 100)
    monkeypatch.setattr(corpus, "MAX_CORPUS_BYTES", 100, raising=False)
    with pytest.raises(ValueError, match="is 400 bytes, more than a corpus may be"):
        corpus.load_corpus(p)


def test_a_file_within_it_is_read_as_before(tmp_path):
    p = tmp_path / "c.txt"
    p.write_bytes(b"hello world\n" * 200)
    c = corpus.load_corpus(p)
    assert c.n_bytes == 2400 and bytes(c.train) + bytes(c.val) == b"hello world\n" * 200
