"""Per-thread work arrays of the fast routes (:mod:`fp8emu.gemm.routes`), kept between calls.

Fresh arrays of a block's size are returned to the OS when freed and page-faulted in again on
every call, which costs more than the arithmetic on them; each thread keeps its own, so that
threads running GEMMs at once never share one.
"""

from __future__ import annotations

import threading

import numpy as np

_LOCAL = threading.local()


def work(name, n, dtype):
    """This thread's work array ``name`` of ``n`` elements of ``dtype`` (grown, never shrunk).

    Examples
    --------
    >>> w = work("doc", 4, np.float32)
    >>> w.shape, w.dtype.name
    ((4,), 'float32')
    >>> work("doc", 2, np.float32).base is w.base
    True
    """
    ws = _LOCAL.__dict__.setdefault("operand", {})
    w = ws.get(name)
    if w is None or w.size < n or w.dtype != dtype:
        w = ws[name] = np.empty(max(n, 1), dtype)
    return w[:n]
