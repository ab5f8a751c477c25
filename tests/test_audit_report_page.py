"""``lab.report.check_in_browser`` reads its page as every fp8emu reader does: a regular UTF-8 file, or
one ValueError naming the page.  A folder was ``IsADirectoryError``, a FIFO blocked the call for ever (the
order cache's and the studies' hole, closed there), a binary file was ``UnicodeDecodeError``.  Chromium is
stood in by ``/bin/true``: the page is read before it would be rendered."""

import os
import threading

import pytest

from fp8emu.lab import report


def _check(page):
    box = {}

    def run():
        try:
            report.check_in_browser(page, executable="/bin/true", timeout=5)
        except Exception as exc:  # noqa: BLE001 - the test inspects what was raised
            box["exc"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), "check_in_browser blocked reading the page"
    return box.get("exc")


@pytest.mark.skipif(not os.path.exists("/bin/true"), reason="needs /bin/true to stand in for chromium")
@pytest.mark.parametrize("kind", ["folder", "fifo", "binary"])
def test_a_page_that_is_no_regular_utf8_file_is_one_error_naming_it(tmp_path, kind):
    page = tmp_path / "report.html"
    if kind == "folder":
        page.mkdir()
    elif kind == "fifo":
        os.mkfifo(page)
    elif kind == "binary":
        page.write_bytes(b"<html>\xff\xfe</html>")
    exc = _check(page)
    assert isinstance(exc, ValueError), repr(exc)
    assert str(page) in str(exc) and "\n" not in str(exc)


@pytest.mark.skipif(not os.path.exists("/bin/true"), reason="needs /bin/true to stand in for chromium")
def test_a_readable_page_reaches_the_browser(tmp_path):
    page = tmp_path / "report.html"
    page.write_text("<html><body><p>ok</p></body></html>")
    exc = _check(page)           # /bin/true renders nothing: no probe result, chromium's own OSError
    assert isinstance(exc, OSError) and "chromium could not render" in str(exc)
