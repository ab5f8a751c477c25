"""How many threads fp8emu's large array operations use.

NumPy releases the GIL inside its loops, so a large encode, decode or quantize
split into contiguous pieces runs on several cores from plain Python threads.
The count comes from, in order: the ``threads=`` argument of a call, the
process-wide setting :func:`set_threads`, the environment variable
``FP8EMU_THREADS``, and finally the number of cores this process may run on.
Calls below :data:`MIN_PARALLEL` elements always use one thread (starting
threads would cost more than it saves).  Every piece is computed exactly as the
single-thread path computes it, so results do not depend on the thread count.
"""

from __future__ import annotations

import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["set_threads", "get_threads", "resolve_threads", "MIN_PARALLEL", "ENV_VAR", "max_threads",
           "max_local_workers", "check_workers", "check_scheduler_address"]

#: Environment variable read when no process-wide setting is made.
ENV_VAR = "FP8EMU_THREADS"
#: Inputs with fewer elements than this run on one thread unless ``threads=`` is given.
MIN_PARALLEL = 1 << 18

_setting: int | None = None
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_pool_lock = threading.Lock()
_local = threading.local()   # marks the pool's own threads, which must not wait on the pool


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))   # respects taskset / cgroup cpusets
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _check_count(n, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) and not hasattr(n, "__index__"):
        raise TypeError(f"{what} must be a positive int, got {n!r}")
    n = int(n)
    if n < 1:
        raise ValueError(f"{what} must be >= 1, got {n}")
    return n


def max_threads() -> int:
    """The most threads a call may ask for here: eight per core, at least 64.

    Every thread holds work arrays of its own, and NumPy's loops gain nothing past one thread
    per core, so a count far above that only costs memory (a typo such as ``10**6`` would start
    as many threads as a large input has pieces).

    Examples
    --------
    >>> max_threads() >= 64
    True
    """
    return max(64, 8 * _cores())


def _check_threads(n, what: str = "threads") -> int:
    n = _check_count(n, what)
    top = max_threads()
    if n > top:
        raise ValueError(f"{what} must be in 1..{top} (eight per core here, at least 64), got {n}")
    return n


def max_local_workers() -> int:
    """The most worker processes a local Dask cluster may start here: four per core, at least 8.

    Each worker is a Python process of its own (about 100 MB before any
    data), so a count far above the cores only costs memory and start-up.

    Examples
    --------
    >>> max_local_workers() >= 8
    True
    """
    return max(8, 4 * _cores())


def check_workers(n, what: str = "workers") -> int:
    """``n`` as a local cluster's worker count: an int in ``1..max_local_workers()``.

    Examples
    --------
    >>> check_workers(2)
    2
    >>> check_workers(10**6)                                  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: workers must be in 1..., got 1000000 (a local cluster starts one process per worker)
    """
    n = _check_count(n, what)
    top = max_local_workers()
    if n > top:
        raise ValueError(f"{what} must be in 1..{top} (four per core here, at least 8), got {n} "
                         f"(a local cluster starts one process per worker)")
    return n


#: Dask's network communication schemes (``distributed.comm``); ``inproc`` is left out: it only
#: reaches a scheduler inside the same process, which no address given from outside can name.
SCHEDULER_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")
_ADDRESS = re.compile(r"(?:(?P<scheme>[a-z]+)://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::(?P<port>[0-9]+))?")


def check_scheduler_address(address, what: str = "scheduler") -> str:
    """``address`` if it reads as a Dask scheduler address, ``[scheme://]host[:port]``; else ValueError.

    The scheme must be one of :data:`SCHEDULER_SCHEMES`, the host a name or
    an address (IPv6 in brackets) and the port, where given, 1..65535.  Only
    the form is checked here; whether a scheduler answers is found when
    connecting.

    Examples
    --------
    >>> check_scheduler_address("tcp://127.0.0.1:8786")
    'tcp://127.0.0.1:8786'
    >>> check_scheduler_address("tcp://host:99999")
    Traceback (most recent call last):
    ...
    ValueError: scheduler 'tcp://host:99999': port 99999 is not in 1..65535
    """
    if not isinstance(address, str):
        raise TypeError(f"{what} must be a str such as 'tcp://host:8786', got {address!r}")
    m = _ADDRESS.fullmatch(address.strip())
    if m is None or not address.strip():
        raise ValueError(f"{what} {address!r} is not a scheduler address: expected [scheme://]host[:port], "
                         f"e.g. tcp://127.0.0.1:8786")
    if m["scheme"] is not None and m["scheme"] not in SCHEDULER_SCHEMES:
        raise ValueError(f"{what} {address!r}: unknown scheme {m['scheme']!r}; expected one of "
                         f"{', '.join(SCHEDULER_SCHEMES)}")
    if m["port"] is not None and not 1 <= int(m["port"]) <= 65535:
        raise ValueError(f"{what} {address!r}: port {int(m['port'])} is not in 1..65535")
    return address.strip()


def _from_env() -> int | None:
    raw = os.environ.get(ENV_VAR, "").strip()
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"environment variable {ENV_VAR}={raw!r} is not a positive integer")
    if n > max_threads():
        raise ValueError(f"environment variable {ENV_VAR}={raw!r} is above {max_threads()} "
                         f"(eight threads per core here, at least 64)")
    return n


def set_threads(n) -> None:
    """Set the process-wide thread count for large calls (``None``: back to the default).

    Parameters
    ----------
    n : int or None
        Threads to use (>= 1); ``None`` restores the default
        (``FP8EMU_THREADS`` if set, else every core this process may use).

    Examples
    --------
    >>> import fp8emu
    >>> fp8emu.set_threads(1); fp8emu.get_threads()
    1
    >>> fp8emu.set_threads(None)
    """
    global _setting
    _setting = None if n is None else _check_threads(n)


def get_threads() -> int:
    """The thread count large calls use when no ``threads=`` argument is given.

    Raises
    ------
    ValueError
        If ``FP8EMU_THREADS`` is set to something other than a positive integer.

    Examples
    --------
    >>> import fp8emu
    >>> fp8emu.get_threads() >= 1
    True
    """
    if _setting is not None:
        return _setting
    env = _from_env()
    return env if env is not None else _cores()


def resolve_threads(threads, size: int) -> int:
    """Threads to use for ``size`` elements: the argument if given, else the default above
    :data:`MIN_PARALLEL`; always 1 inside one of fp8emu's own worker threads.

    Examples
    --------
    >>> resolve_threads(None, 10)
    1
    >>> resolve_threads(2, 10)
    2
    """
    n = get_threads() if threads is None else _check_threads(threads)
    if getattr(_local, "worker", False) or (threads is None and size < MIN_PARALLEL):
        return 1
    return n


def _mark_worker():
    _local.worker = True


def executor(n: int) -> ThreadPoolExecutor:
    """A shared pool with at least ``n`` workers (created on first use, grown when needed)."""
    global _pool, _pool_size
    with _pool_lock:
        if _pool is None or _pool_size < n:
            old = _pool
            _pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="fp8emu",
                                       initializer=_mark_worker)
            _pool_size = n
            if old is not None:
                old.shutdown(wait=False)
        return _pool


def _forget_pool():
    # A forked child inherits the pool object but not its threads: work submitted to it would
    # wait forever, so the child starts a pool of its own when it needs one.
    global _pool, _pool_size, _pool_lock
    _pool, _pool_size, _pool_lock = None, 0, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def split(start: int, stop: int, parts: int, align: int):
    """``[start, stop)`` as at most ``parts`` contiguous ranges whose inner bounds are multiples of ``align``.

    Examples
    --------
    >>> split(0, 10, 2, 4)
    [(0, 8), (8, 10)]
    """
    n = stop - start
    per = -(-n // max(1, parts))
    per = max(align, -(-per // align) * align)
    return [(a, min(stop, a + per)) for a in range(start, stop, per)]


def run(fn, ranges, threads: int) -> None:
    """Call ``fn(a, b)`` for every range, on ``threads`` threads when there is more than one range."""
    if threads <= 1 or len(ranges) <= 1:
        for a, b in ranges:
            fn(a, b)
        return
    pool = executor(threads)
    futures = [pool.submit(fn, a, b) for a, b in ranges]
    for f in futures:
        f.result()
