"""Which float32 summation order torch's CPU ``mm`` (a BLAS sgemm) takes here: revealed, or recorded.

A BLAS picks its kernel, K blocking and thread split by CPU vendor, instruction set, library
version, thread count and shape, so an order measured on one CPU is not a fact about another
(MKL 2024.2 sums a 64x512x64 product in blocks of 256 with AVX-512, in even and odd lanes at the
edge tiles of its AVX2 kernel, and without FMA under ``MKL_CBWR=COMPATIBLE``).  This module says
which order :func:`fp8emu.gemm.torch_cpu.sgemm` uses for a shape:

``"revealed"``
    Found on this machine by probing torch's own ``mm`` (:func:`fp8emu.gemm.order_probe.reveal`),
    once per CPU, torch and MKL version, MKL settings, thread count, shape and operand layout (and
    torch's float32 matmul setting where it may send ``mm`` to oneDNN), and kept in a cache file
    (``$FP8EMU_CACHE`` or ``~/.cache/fp8emu``, ``cpu-order.json``); a process that changed MKL's
    settings in ``os.environ`` (MKL reads them once) keeps them for itself.
    The default wherever torch is importable: exact on the machine the user has.
A recorded model (:data:`RECORDED`)
    Used without torch.  Each names where it was proven; on another CPU (or outside its proven
    shapes and operand layouts) the GEMM runs with it and a RuntimeWarning says why torch may
    differ.  ``mkl-2024.2-avx512``: MKL's default kernel on an AVX-512 Xeon;
    ``mkl-2024.2-amd-avx2``: MKL's default kernels on an AMD EPYC, AVX2 ones with or without AVX-512 on the CPU
    (an FMA kernel in K blocks of 192, and a small kernel without FMA where M < 4 or N < 12; measured alike on a
    family-23 EPYC with AVX2 and a Zen 4 one with AVX-512);
    ``mkl-2024.2-compatible``: MKL under ``MKL_CBWR=COMPATIBLE`` (:mod:`fp8emu.gemm.mkl_cnr`), the
    branch MKL documents as giving the same results on Intel and other vendors' x86 CPUs (measured
    alike on the Xeon and the EPYC).

``FP8EMU_CPU_ORDER`` (environment) or :func:`use` chooses: ``"auto"`` (revealed where torch is
importable, else the recorded model proven on this CPU and MKL setting, else the one of this
MKL setting or ``mkl-2024.2-avx512``, with a warning), ``"revealed"`` (an error without torch) or a recorded
model's name (no probing: what recorded vectors from that CPU are compared with).

Examples
--------
>>> with use("mkl-2024.2-avx512"):
...     print(order_for(4, 1024, 4, threads=1, layout="NN")[0].describe())
fma [0:384] + [384:704] + [704:1024] (fma start)
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import json
import os
import platform
import stat
import sys
import threading
import warnings
from pathlib import Path

import numpy as np

from ..interop import is_integer
from ..readers import parse_json
from .mkl_cnr import LAYOUTS, chain_tree, check_gemm
from .mkl_cnr import MODEL as _COMPATIBLE
from .order_probe import ProbeBudgetError, reveal
from .sumtree import GemmOrder, SumTree

__all__ = ["RECORDED", "RecordedModel", "use", "policy", "order_for", "probe_too_long", "MAX_PROBE_PRODUCTS",
           "MAX_REVEAL_PRODUCTS",
           "machine", "library", "cpu_flags", "cache_path", "LAYOUTS",
           "reveal_here", "describe_here", "cache_problem", "order_and_warnings"]



def _small_blocks(K, kc):
    """K blocks of MKL's small-matrix sgemm driver: ``kc`` while more than ``2 kc`` remain, then the
    rest in one block or two halves (``ceil`` first)."""
    bounds = [0]
    while K - bounds[-1] > 2 * kc:
        bounds.append(bounds[-1] + kc)
    rest = K - bounds[-1]
    if rest > kc:
        bounds.append(bounds[-1] + -(-rest // 2))
    return bounds + [K] if K > 0 else [0, 0]


def _packed_blocks(K, kc):
    """K blocks of MKL's packing sgemm driver: up to ``2 kc`` as the small driver, beyond plain
    blocks of ``kc`` and what is left."""
    if K <= 2 * kc:
        return _small_blocks(K, kc)
    return list(range(0, K, kc)) + [K]


def _check_threads(threads):
    """One ValueError for a thread count that is no positive integer (None, "2", 2.5, 0 each read as another)."""
    if not is_integer(threads) or threads < 1:
        raise ValueError(f"threads must be a positive integer (torch's thread count), got {threads!r}")


def _peeled_rows(M, N, r0=0):
    """Outputs MKL's small kernel (AMD EPYC, B row-major) sums apart, as ``(first row, columns)`` pairs: in each
    row of the row-major C, those before the first 16-byte-aligned element, where at least 4 outputs of that
    row follow it (C 64-byte aligned, as torch allocates it).  Row i starts at element i N, so its count
    depends on i mod 4 only: rows ``first, first + 4, ...`` (from ``r0``) each have their first ``columns``.

    Examples
    --------
    >>> _peeled_rows(8, 7)        # rows 1, 2, 3 (and 5, 6, 7) start 1, 2, 3 floats before a boundary
    [(1, 1), (2, 2), (3, 3)]
    """
    # as pairs, not an M x N mask: the mask and its int64 row numbers took 1.7 GB for 3 x 10**8 outputs
    out = []
    for first in range(r0, min(r0 + 4, M)):
        peel = (-(first * N)) % 4
        if peel and N - peel >= 4:
            out.append((first, peel))
    return out


def _peel_tree(K):
    """The sum of one such output, without FMA: per 8 products, the first 4 join the running sum one by one
    and the last 4 are summed apart and added; the products past the last whole 8 join one by one.

    Examples
    --------
    >>> _peel_tree(18).describe()
    '[0:4] + [4:8] then [8:12] + [12:16] then [16:18]'
    """
    t = None
    for c in range(K // 8):
        for k in range(8 * c, 8 * c + 4):
            t = k if t is None else (t, k)
        h = 8 * c + 4
        t = (t, (((h, h + 1), h + 2), h + 3))
    for k in range(8 * (K // 8), K):
        t = k if t is None else (t, k)
    return SumTree.from_nested(t, fma=False)


@dataclasses.dataclass(frozen=True)
class RecordedModel:
    """A summation order measured on one CPU family (MKL's sgemm), with where it was proven.

    The order is a rule over the shape and torch's thread count:

    * one thread: K blocks of ``kc`` as :func:`_small_blocks` gives, except where both M and N
      reach ``packed_min`` (MKL's packing driver: plain ``kc`` blocks beyond ``2 kc``); with
      ``odd_half_apart`` an odd K between ``kc`` and ``2 kc`` is two halves of ``floor(K / 2)`` and its
      last product summed apart;
    * two threads and K > ``2 kc``: at more than ``split_macs`` multiply-adds MKL gives each
      thread half of K (``ceil(K/2)`` first), each half in the packing driver's blocks, and adds
      the second half's sum to the first's.  Proven for M, N <= ``split_proven_mn`` outside
      ``split_window`` (multiply-adds where the threshold lies); larger shapes split by a rule
      not measured, and warn.  ``split_macs=None``: K is never split (the AMD EPYC's kernel);
    * where ``small_mn`` is set (the AMD EPYC), shapes with M < m or N < n go to a small kernel that
      sums each output as one chain without FMA, the outputs of a row before C's first 16-byte boundary
      apart with B row-major (:func:`_peel_tree`); on two threads a second thread's last rows can too
      (:meth:`small_rows`), except where ``one_thread`` says MKL keeps the product on one thread;
    * each K block's sum starts as ``start`` says (``SumTree.start``).
    """

    name: str
    proven_on: str
    vendor: str                    # /proc/cpuinfo vendor_id it was proven on
    needs_flags: tuple             # CPU flags the measured kernel needs
    kc: int
    packed_min: int
    split_macs: int
    split_window: tuple
    split_proven_mn: int
    max_k: int
    proven_threads: tuple = (1, 2)
    proven_layouts: tuple = ("NN",)
    mkl_env: tuple = ()            # the MKL settings it was measured under, as (name, value) pairs
    small_mn: tuple = ()           # (m, n): below M < m or N < n MKL's small kernel sums without FMA (AMD)
    small_layouts: tuple = ()      # the layouts where that kernel's order (one chain) was proven
    start: str = "fma"             # how each K block's sum starts (SumTree.start) in the FMA kernel
    odd_half_apart: bool = False   # an odd K in (kc, 2 kc] is two halves of floor(K / 2) and a lone product
    one_thread: tuple = ()         # (k, n) pairs: K <= k and N <= n run on one thread though torch has two

    def applies_here(self, info):
        return info["vendor"] == self.vendor and all(f in info["flags"] for f in self.needs_flags) \
            and info["mkl_env"] == dict(self.mkl_env)

    def small(self, M, N):
        """Whether an M x N output goes to MKL's small kernel, which sums each output without FMA."""
        # M "3" was Python's "'<' not supported", M -1 answered True
        if not all(is_integer(v) and v >= 0 for v in (M, N)):
            raise ValueError(f"{self.name}: M, N must be non-negative integers, got {M!r}, {N!r}")
        return bool(self.small_mn) and (M < self.small_mn[0] or N < self.small_mn[1])

    def blocks(self, K, M=2, N=2):
        """Bounds of the K blocks one thread sums separately for an M x K x N product."""
        check_gemm(M, K, N, name=self.name)       # K = -5 gave [0, 0], 2.5 gave [0, 2.5]
        M, K, N = int(M), int(K), int(N)          # NumPy integers: Python's bounds, not np.int64 among them
        if self.odd_half_apart and self.kc < K <= 2 * self.kc and K % 2:
            return [0, K // 2, K - 1, K]           # measured on the EPYC: 317 as [0:158] + [158:316] + [316:317]
        packed = min(M, N) >= self.packed_min
        return (_packed_blocks if packed else _small_blocks)(K, self.kc)

    def splits_k(self, M, K, N, threads):
        """Whether MKL gives each of two threads half of K (the rule as measured)."""
        # "2" or None read as one thread (another order, silently); order_for passes 1 for an unknown count
        check_gemm(M, K, N, name=self.name)    # K "8" was Python's "'>' not supported", M -1 answered False
        # np.int16 sizes wrapped M * K * N (200 x 5000 x 200 read as not split: another order, with only NumPy's
        # overflow warning)
        M, K, N = int(M), int(K), int(N)
        _check_threads(threads)
        return threads == 2 and self.split_macs is not None and K > 2 * self.kc and M * K * N > self.split_macs

    def tree(self, M, K, N, threads=1):
        """The :class:`SumTree` of one output."""
        check_gemm(M, K, N, name=self.name)
        if K == 0:      # an empty product sums nothing (sgemm returns zeros before using an order): a placeholder
            self.splits_k(M, K, N, threads)          # threads checked all the same
            return SumTree.blocks([0, 1])
        if K == 1 and min(M, N) >= 2:
            # an outer product is its products as they are, a -0 kept (1 and 2 threads, every layout, with and
            # without MKL_CBWR=COMPATIBLE on the Xeon with AMX)
            self.splits_k(M, K, N, threads)
            return SumTree.blocks([0, 1], start="product")
        if K == 1 and N == 1:
            # one product to a single column (gemv: 1x1x1, 4x1x1, every layout) is rounded, then added to +0
            self.splits_k(M, K, N, threads)
            return SumTree.blocks([0, 1], start="add")
        if self.small(M, N):
            # MKL's small kernel (AMD EPYC): products rounded, then added in K order from +0
            self.splits_k(M, K, N, threads)
            return chain_tree(K)
        # every other sum starts as fma(x, y, +0): an underflowing first product keeps its sign (the survey in
        # docs/data/cpu-order/xeon-amx-mkl-2024.2-starts.json: every M, N >= 2 in NN)
        # a K block of one product (K = 384j + 1 beyond 768 in the packing driver, or such a two-thread half) is
        # summed apart, its product rounded and then added: SumTree.blocks says so (192x769x192, 192x1153x200 and
        # 344x1921x351 on one thread, 32x1537x32 and 64x1537x64 on two, against torch on random products)
        if self.splits_k(M, K, N, threads):
            h = -(-K // 2)
            bounds = _packed_blocks(h, self.kc) + [h + b for b in _packed_blocks(K - h, self.kc)[1:]]
            return SumTree.blocks(bounds, start=self.start, split=h)
        return SumTree.blocks(self.blocks(K, M, N), start=self.start)

    def small_rows(self, M, K, N, threads):
        """The first row of C that MKL's small kernel sums (M where none does).

        Every row where the shape is small; on two threads, where the first thread's ``4 ceil(M / 8)`` rows
        leave the second fewer than the small kernel's ``m`` (M = 5 .. 11, not a multiple of 4), those rows,
        unless MKL keeps the product on one thread (K <= 4 and N <= 100, or K and N <= 16, as measured on the
        EPYC: ``one_thread``).
        """
        check_gemm(M, K, N, name=self.name)
        # threads None or "2" read as one thread (another order, silently): tree() and splits_k refuse them too
        _check_threads(threads)
        if not self.small_mn or M == 0 or N == 0:
            return M
        if self.small(M, N):
            return 0
        r0 = 4 * -(-M // 8)
        if threads != 2 or not 0 < M - r0 < self.small_mn[0]:
            return M
        # MKL runs a small enough product on one thread though torch asked for two: its rows are then the FMA
        # kernel's (7x16x16 and 7x4x100 all FMA on two threads, 7x17x16, 7x5x17 and 7x4x101 rows 4.. the small
        # kernel's; the model had given those rows the small kernel's order, and differed from torch silently)
        if any(K <= k and N <= n for k, n in self.one_thread):
            return M
        return r0

    def order(self, M, K, N, threads=1, layout="NN"):
        """The :class:`GemmOrder` of an M x K x N product on ``threads`` with operands in ``layout``."""
        tree = self.tree(M, K, N, threads)       # checks the sizes and threads before they shape an array
        check_gemm(M, K, N, layout=layout, name=self.name)
        r0 = self.small_rows(M, K, N, threads) if K > 1 else M     # K <= 1: no sum to order
        if r0 < M:
            # rows of MKL's small kernel: one chain without FMA, and with B row-major (NN, TN) each row's outputs
            # before C's first 16-byte boundary summed apart (_peel_tree); with a transposed B by another rule
            # (unproven says so), the chain given for them
            trees = [tree, chain_tree(K)] if r0 > 0 else [tree]
            peeled = _peeled_rows(M, N, r0) if layout in ("NN", "TN") else []
            classes = np.zeros((M, N), np.int16)   # written only where some output is not class 0 (calloc'd
            if r0 > 0:                             # pages of 3 x 10**8 outputs of one tree stay untouched)
                classes[r0:] = 1
            if peeled:
                trees.append(_peel_tree(K))
                for first, cols in peeled:
                    classes[first::4, :cols] = len(trees) - 1
            classes.flags.writeable = False
            return GemmOrder(trees, classes)
        classes = np.zeros((M, N), np.int16)     # read-only: GemmOrder keeps it without a copy (calloc'd pages
        classes.flags.writeable = False          # stay untouched for 10**9 outputs)
        return GemmOrder([tree], classes)

    def unproven(self, M, K, N, threads, layout="NN"):
        """Why this shape, thread count and operand layout lie outside what was proven (``None`` inside)."""
        check_gemm(M, K, N, threads, layout, name=self.name)    # "2" was "outside 1 and 2 thread(s)", True 1
        M, K, N = int(M), int(K), int(N)          # np.int16 sizes wrapped M * K * N against the split window
        if M == 0 or K == 0 or N == 0:
            return None       # an empty product sums nothing (+0, as torch.mm): no order to prove (M = 0 was "gemv")
        if layout not in self.proven_layouts:
            return (f"the order was proven for the layouts {', '.join(self.proven_layouts)}; with {layout} MKL "
                    "sums some shapes in another order")
        if M < 2 or N < 2:
            return "a single row or column goes to MKL's gemv, whose order is not a fixed tree"
        if self.small_mn and threads is None and (r2 := self.small_rows(M, K, N, 2)) != self.small_rows(M, K, N, 1):
            return f"the thread count is not known, and on two threads MKL's small kernel sums the last {M - r2} row(s)"
        # K = 1: the products as they are (an outer product), no sum whose order the lanes could change
        if K > 1 and self.small_rows(M, K, N, threads or 1) < M and layout not in self.small_layouts:
            return (f"MKL's small kernel (M < {self.small_mn[0]} or N < {self.small_mn[1]}, or a second thread's "
                    f"last rows) sums the outputs of {layout} in SIMD lanes over K, by a rule not measured")
        if K > self.max_k:
            return f"K <= {self.max_k} was proven"
        if threads is None:
            if self.split_macs is not None and K > 2 * self.kc:
                return (f"the thread count is not known, and on two threads MKL splits K > {2 * self.kc} "
                        "between them for some shapes")
            return None
        if threads not in self.proven_threads:
            return f"{' and '.join(map(str, self.proven_threads))} thread(s) were proven"
        if threads == 2 and self.split_macs is None and max(M, N) > self.split_proven_mn:
            return f"on two threads, M, N <= {self.split_proven_mn} were measured"
        if threads == 2 and self.split_macs is not None and K > 2 * self.kc:
            lo, hi = self.split_window
            if max(M, N) > self.split_proven_mn:
                return (f"on two threads with K > {2 * self.kc}, MKL's choice to split K between threads was "
                        f"proven for M, N <= {self.split_proven_mn}")
            if lo < M * K * N < hi:
                return (f"on two threads MKL starts splitting K between threads between {lo:,} and {hi:,} "
                        "multiply-adds")
        return None


#: Orders recorded on a CPU, by name.
RECORDED = {
    "mkl-2024.2-avx512": RecordedModel(
        name="mkl-2024.2-avx512",
        proven_on="Intel Xeon with AVX-512 and AMX (KVM, 2 vCPUs), torch 2.13.0+cpu, MKL 2024.2: "
                  "2,017,364 torch._scaled_mm outputs on one thread (K <= 4096), 1,953,284 on two "
                  "(K <= 768), and torch.mm on 300 random shapes (M, N up to 1200, K up to 4096, 1 and 2 "
                  "threads) and 80 more in the layouts TN, TT and NT; M, N >= 2 (a single row or column goes to "
                  "MKL's gemv); B row-major (NN, TN): with B transposed MKL sums some shapes in another order",
        vendor="GenuineIntel", needs_flags=("avx512f",), kc=384, packed_min=192,
        split_macs=192_000, split_window=(192_000, 195_132), split_proven_mn=128, max_k=4096,
        proven_layouts=("NN", "TN")),
    "mkl-2024.2-amd-avx2": RecordedModel(
        name="mkl-2024.2-amd-avx2",
        proven_on="AMD EPYC (KVM, 2 vCPUs) of family 23 with AVX2 and FMA and of family 25 (Zen 4) with AVX-512 "
                  "too, where MKL takes the same AVX2 kernels, torch 2.13.0+cpu, MKL 2024.2: on each, a survey of 154 "
                  "GEMMs (77 shapes, 1 and 2 threads), the starts of 216 (27 shapes, every layout), torch.mm on 300 "
                  "random shapes (M, N up to 1200, K up to 4096, 1 and 2 threads, every layout); the small kernel's "
                  "rows and peeled outputs as revealed at the shapes its tests write out; M, N >= 2 (a single row or "
                  "column goes to MKL's gemv); the small kernel with B transposed (NT) sums by a rule not measured",
        vendor="AuthenticAMD", needs_flags=("avx2", "fma"), kc=192, packed_min=2,
        split_macs=None, split_window=(0, 0), split_proven_mn=1200, max_k=4096,
        proven_layouts=("NN", "NT", "TN", "TT"), small_mn=(4, 12), small_layouts=("NN", "TN", "TT"), start="add",
        odd_half_apart=True, one_thread=((4, 100), (16, 16))),
    _COMPATIBLE.name: _COMPATIBLE,
}
_DEFAULT_MODEL = "mkl-2024.2-avx512"

_POLICY = contextvars.ContextVar("fp8emu_cpu_order", default=None)
_LOCK = threading.Lock()
_MEMO = {}


@contextlib.contextmanager
def use(name):
    """Use ``"auto"``, ``"revealed"`` or a recorded model's name for the torch CPU GEMMs in this block."""
    _check_policy(name)
    token = _POLICY.set(name)
    try:
        yield
    finally:
        _POLICY.reset(token)


def _check_policy(name, what="CPU order"):
    if not isinstance(name, str) or (name not in ("auto", "revealed") and name not in RECORDED):
        raise ValueError(f"{what} {name!r}: use 'auto', 'revealed' or a recorded model, one of {sorted(RECORDED)}")


def policy():
    """The order policy in force: :func:`use`'s, else ``$FP8EMU_CPU_ORDER``, else ``"auto"``."""
    p = _POLICY.get()
    if p is None:
        p = os.environ.get("FP8EMU_CPU_ORDER", "auto") or "auto"
        _check_policy(p, "the environment variable FP8EMU_CPU_ORDER =")
    return p


@functools.lru_cache(maxsize=1)
def _cpuinfo():
    vendor, model, flags = "", "", frozenset()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                key = line.split(":", 1)[0].strip()
                if key == "vendor_id" and not vendor:
                    vendor = line.split(":", 1)[1].strip()
                elif key == "model name" and not model:
                    model = line.split(":", 1)[1].strip()
                elif key == "flags" and not flags:
                    flags = frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return vendor, model or platform.processor(), flags


def cpu_flags() -> frozenset:
    """This machine's CPU feature flags (``/proc/cpuinfo``; empty where it cannot be read)."""
    return _cpuinfo()[2]


#: CPU flags that decide a BLAS kernel (the cache key keeps only these).
_KERNEL_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "avx512_fp16", "amx_tile",
                 "amx_int8", "amx_bf16", "amx_fp16", "asimd", "sve")
#: Environment variables that make MKL pick another kernel.  Thread counts are not among them: the
#: order's key has torch's thread count (dask.distributed sets MKL_NUM_THREADS=1 in its client's process).
_MKL_ENV = ("MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "MKL_DEBUG_CPU_TYPE")


def machine():
    """This machine's facts that decide a BLAS order (without torch's library versions)."""
    vendor, model, flags = _cpuinfo()
    return {"vendor": vendor, "model": model, "arch": platform.machine(),
            "flags": sorted(f for f in _KERNEL_FLAGS if f in flags),
            "mkl_env": {k: os.environ[k] for k in _MKL_ENV if os.environ.get(k)}}


@functools.lru_cache(maxsize=1)
def _started_mkl_env():
    """The MKL settings this process was started with (``/proc/self/environ``, which a change to
    ``os.environ`` does not touch), or None where that cannot be read."""
    try:
        with open("/proc/self/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep and v and os.fsdecode(k) in _MKL_ENV:
            env[os.fsdecode(k)] = os.fsdecode(v)
    return env


def cache_path():
    """The file revealed orders are kept in (``$FP8EMU_CACHE``, ``~`` expanded, else ``~/.cache/fp8emu``)."""
    # "~" expanded as torch's TORCH_HOME is: FP8EMU_CACHE="~/c" (quoted, so no shell expanded it) made a folder
    # named "~" in the working directory, silently
    root = os.path.expanduser(os.environ.get("FP8EMU_CACHE") or os.path.join(Path.home(), ".cache", "fp8emu"))
    return Path(root) / "cpu-order.json"


def _torch():
    try:
        import torch          # optional: only to reveal torch's own order on this machine
    except ImportError:
        return None
    return torch


def library():
    """torch's version and its BLAS, which decide a revealed order (its cache key holds them); None without torch.

    ``fp8emu cpu-order`` gives them in its text (``library:``) and its ``--json`` (``"library"``).
    """
    torch = _torch()
    return None if torch is None else dict(_library(torch))


@functools.lru_cache(maxsize=4)
def _library(torch):
    cfg = torch.__config__.show()
    blas = next((ln.strip(" -") for ln in cfg.splitlines() if "Math Kernel Library" in ln or "OpenBLAS" in ln), "")
    return {"torch": torch.__version__, "blas": blas}


#: The revealed orders' version: 5 asks every joined leaf whether it is rounded first (4 asked only where the
#: random checks failed, which seldom tell a fused leaf from a rounded one in small products, so some lone leaves
#: passed for fused with "explained" 1.0); 4 knows a K block of one product summed apart (SumTree.lone: 3 fused it, so
#: K = 384j + 1 beyond 768 came out unexplained); 3 the three ways a sum starts (SumTree.start: 2 told a -0 kept
#: from +0 only, so an FMA start of an underflowing product came out +0; 1 left every output at +0, wrong for
#: outer products); 6 keys torch's float32 matmul setting where it is not IEEE (5 stored an order revealed under
#: torch.set_float32_matmul_precision("medium"), oneDNN's kernel, under the key of the default's MKL one, and the
#: other way: 900 of 1024 outputs of a 32x256x32 product differed from torch, silently, in every later process).
#: Entries of older versions are not read.
_ORDERS = 6


def _key(info, lib, threads, M, K, N, layout, matmul=None):
    parts = [info, lib, threads, M, K, N, layout, _ORDERS]
    if matmul is not None:
        parts.append({"fp32_matmul": matmul})
    return json.dumps(parts, sort_keys=True)


#: torch's float32 matmul precisions that keep a CPU torch.mm on the BLAS (MKL's sgemm): "tf32" acts on Intel GPUs
#: only (torch warns so; 0 outputs of a CPU mm changed), "high" is the legacy name of "tf32".
_IEEE_MATMUL = ("none", "ieee", "tf32", "highest", "high")


def _matmul_setting(torch=None):
    """torch's float32 matmul setting where it may send a CPU ``torch.mm`` off MKL's sgemm, else None.

    ``torch.set_float32_matmul_precision("medium")`` (``torch.backends.mkldnn.matmul.fp32_precision = "bf16"``,
    or the same at a broader level) makes torch multiply float32 matrices above a size with oneDNN's kernel, in
    another order (on an AMD EPYC with AVX512-BF16: 900 of 1024 outputs of a 32x256x32 product, 3800 of 4096 of
    64x512x64), wherever mkldnn is enabled and available.  Revealed orders are kept per setting.  ``torch``: the
    module (default: the one imported, if any; this function never imports torch).

    Examples
    --------
    >>> _matmul_setting(object()) is None       # no setting to read: MKL's sgemm
    True
    """
    if torch is None:
        torch = sys.modules.get("torch")
    try:
        mkldnn = torch.backends.mkldnn
        if not (mkldnn.is_available() and mkldnn.enabled):
            return None                   # torch.mm stays on the BLAS whatever the precision says
        # the matmul's own setting, else the oneDNN backend's, else torch's: "none" defers to the next
        levels = (mkldnn.matmul.fp32_precision, mkldnn.fp32_precision, torch.backends.fp32_precision)
    except Exception:                     # no torch, a torch before these settings, or a stand-in
        return None
    p = next((v for v in levels if v != "none"), "none")
    return None if p in _IEEE_MATMUL else str(p)


def _tensor(torch, a, transposed):
    # a copy in torch's own allocation (64-byte aligned, as every tensor torch makes): a kernel may peel
    # elements until its loads are aligned, so the order can depend on where a row starts
    t = torch.from_numpy(np.ascontiguousarray(a.T)).T if transposed else torch.from_numpy(np.ascontiguousarray(a))
    return t.clone()


def reveal_here(M, K, N, *, threads=None, layout="NN"):
    """Probe torch's ``mm`` at this shape on this machine (no cache); (GemmOrder, facts).

    ``threads``: torch's thread count for the probe (default: ``torch.get_num_threads()``).
    ``layout``: ``"NN"``, ``"NT"``, ``"TN"`` or ``"TT"``: whether A and B reach ``mm`` as
    row-major (N) or transposed views (T), as a BLAS sees them (``transa`` / ``transb``).
    """
    torch = _torch()
    if torch is None:
        raise RuntimeError("revealing torch's CPU GEMM order needs torch (pip install 'fp8emu[torch]')")
    check_gemm(M, K, N, threads, layout, name="reveal_here")
    old = torch.get_num_threads()
    want = old if threads is None else int(threads)
    ta, tb = layout[0] == "T", layout[1] == "T"

    def mm(a, b):
        # the caller may be inside torch.autocast (which would run mm in bfloat16) or no_grad/inference_mode
        with torch.no_grad(), torch.autocast("cpu", enabled=False):
            return torch.mm(_tensor(torch, a, ta), _tensor(torch, b, tb)).numpy()

    try:
        if want != old:
            torch.set_num_threads(want)
        order, facts = reveal(mm, M, K, N, max_calls=MAX_REVEAL_PRODUCTS)
    finally:
        if want != old:
            torch.set_num_threads(old)
    facts["threads"] = want
    return order, facts


#: The most products :func:`reveal_here` computes (the first round's limit, :data:`MAX_PROBE_PRODUCTS`, four times:
#: MKL's orders take the first round, a few more, and the leaf probe's round or rounds).
MAX_REVEAL_PRODUCTS = 1 << 15

#: The largest order cache read (bytes): past it the file is not read and nothing more is stored in it.
CACHE_LIMIT = 256 << 20


def _cache_file():
    """The cache file's bytes; None where it is absent or unreadable (a miss).  A path that is not a
    regular file (a FIFO would block the read, a device never end) or a file past :data:`CACHE_LIMIT`
    warns once and is neither read nor replaced."""
    p = cache_path()
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))   # a FIFO opens at once, unread
    except OSError:
        return None
    why = _unusable(os.fstat(fd))
    if why:
        os.close(fd)
        _refuse_cache(p, why)
        return None
    with os.fdopen(fd, "rb") as f:
        try:
            return f.read(CACHE_LIMIT + 1)
        except OSError:
            return None


def _unusable(st):
    """Why a cache file of this ``os.stat`` result is neither read nor written, or None."""
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    return f"holds {st.st_size} bytes, past the {CACHE_LIMIT}-byte limit" if st.st_size > CACHE_LIMIT else None


def _refuse_cache(p, why):
    if str(p) not in _REFUSED:
        _REFUSED.add(str(p))
        warnings.warn(f"the order cache {p} {why}: it is not read or written (orders are kept for this process "
                      f"only); set FP8EMU_CACHE to another folder or remove it", RuntimeWarning, stacklevel=4)


_REFUSED: set = set()


def _load_cache():
    raw = _cache_file()
    if raw is None:
        return {}
    try:
        # parse_json refuses a key twice (json.loads would keep the last): such a file is damaged, a miss
        data = parse_json(raw, cache_path(), "fp8emu order cache")
        return data if isinstance(data, dict) else {}
    except ValueError:
        return {}


def _cached(entry, M, K, N):
    """A cache entry's ``(order, explained)``, or None where it is absent or damaged (probed again).

    Damaged includes an order that does not fit the shape of its key and an ``explained`` outside
    [0, 1] (a NaN would silence the warning about outputs the order does not explain)."""
    try:
        # the shape first: from_json builds an array of the entry's shape (a MemoryError at [2**40, 3])
        if entry["order"]["shape"] != [M, N]:
            return None
        order = GemmOrder.from_json(entry["order"])
        explained = entry["explained"]
    except (TypeError, KeyError, ValueError, AttributeError):
        return None
    if order.trees[0].K != K or order.classes.shape != (M, N) or isinstance(explained, bool) \
            or not isinstance(explained, (int, float)) or not 0.0 <= explained <= 1.0:
        return None
    return order, float(explained)


def _store(key, entry):
    p = cache_path()
    if str(p) in _REFUSED:
        return                # not a regular file, or too large: left as it is
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        data = _load_cache()
        if str(p) in _REFUSED:
            return
        data[key] = entry
        tmp = p.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, p)
    except OSError:
        pass                  # a read-only home: the order is still kept for this process


def _revealed(M, K, N, threads, layout):
    torch = _torch()
    if torch is None:
        return None
    t = torch.get_num_threads() if threads is None else int(threads)
    info, lib = machine(), _library(torch)
    # read at each call, as torch reads it at each mm: set_float32_matmul_precision may change between GEMMs
    key = _key(info, lib, t, M, K, N, layout, _matmul_setting(torch))
    # MKL reads its settings once, when it starts: where this process changed them in os.environ, which ones
    # MKL took is not known, so the file's orders (keyed by settings) are neither read nor written (a setting
    # made after MKL started stored the default kernel's order under MKL_CBWR=COMPATIBLE, silently wrong for
    # every later process started with it); the order is still revealed live and kept for this process
    shared = _started_mkl_env() in (None, info["mkl_env"])
    with _LOCK:
        hit = _MEMO.get(key)
        if isinstance(hit, ProbeBudgetError):      # probed once in this process past the budget: not again
            raise hit
        if hit is None:
            hit = _cached(_load_cache().get(key), M, K, N) if shared else None   # absent or damaged: probe again
            if hit is None:
                try:
                    order, facts = reveal_here(M, K, N, threads=t, layout=layout)
                except ProbeBudgetError as e:
                    _MEMO[key] = e
                    raise
                hit = (order, facts["explained"])
                if shared:
                    _store(key, {"order": order.to_json(), "explained": facts["explained"],
                                 "calls": facts["calls"]})
            _MEMO[key] = hit
    # a GemmOrder of its own (the memo's trees are immutable, its classes read-only): a change to the list of trees
    # handed out (order.trees[0] = another tree) was the memo's, so every later GEMM of that shape, silently
    return GemmOrder(hit[0].trees, hit[0].classes), hit[1]


#: The most products a probe's first round may take (:func:`probe_too_long`).
MAX_PROBE_PRODUCTS = 1 << 13


def probe_too_long(M, K, N):
    """Why probing an M x K x N product would take too long (``None`` where it would not).

    The probe's first question is which terms join term 0 first; one product answers it for at most
    max(M, N) other terms (one per output of a row or column), so that round alone takes
    ceil((K - 1) / max(M, N)) products of the full size (1x8000x1: 7999 products, 11 s on a 2-vCPU
    Xeon; 1x131072x1 had not finished after 15 minutes).

    Examples
    --------
    >>> probe_too_long(64, 4096, 64) is None
    True
    >>> probe_too_long(1, 131072, 1)
    'probing 1x131072x1 takes at least 131,071 products of that size (its first round asks about K - 1 = 131,071 terms, at most max(M, N) = 1 per product; 8,192 are allowed)'
    """
    check_gemm(M, K, N, name="probe_too_long")    # True x 10**6 x True answered "probing Truex1000000xTrue"
    M, K, N = int(M), int(K), int(N)    # np.uint16 K = 0 wrapped K - 1 to 65,535 terms
    least = -(-(K - 1) // max(M, N, 1))
    if least <= MAX_PROBE_PRODUCTS:
        return None
    return (f"probing {M}x{K}x{N} takes at least {least:,} products of that size (its first round asks about "
            f"K - 1 = {K - 1:,} terms, at most max(M, N) = {max(M, N):,} per product; {MAX_PROBE_PRODUCTS:,} "
            "are allowed)")


def order_for(M, K, N, *, threads=None, layout="NN", name="sgemm", stacklevel=2):
    """``(GemmOrder, source)`` for torch's CPU ``mm`` of this shape under the policy in force.

    ``source`` is ``"revealed"`` or the recorded model's name.  A recorded model used off the CPU
    or shapes it was proven on, and a revealed order that does not explain every output, warn, at the
    caller's line (``stacklevel`` as :func:`warnings.warn` counts it from here: a wrapper passes its own + 1).
    """
    check_gemm(M, K, N, threads, layout, name=name)
    # NumPy integers wrapped (K - 1 of an np.uint16 0) and failed the cache's JSON key
    M, K, N = int(M), int(K), int(N)
    threads = None if threads is None else int(threads)
    p = policy()
    too_long = probe_too_long(M, K, N) if p in ("auto", "revealed") else None
    if too_long and p == "revealed":
        raise RuntimeError(f"FP8EMU_CPU_ORDER='revealed': {too_long}; set FP8EMU_CPU_ORDER=<a recorded model> "
                           "to describe it without probing")
    hit = None
    if p in ("auto", "revealed") and K > 0 and M > 0 and N > 0 and not too_long:   # an empty product: nothing to probe
        try:
            hit = _revealed(M, K, N, threads, layout)
        except ProbeBudgetError as e:
            if p == "revealed":
                raise RuntimeError(f"FP8EMU_CPU_ORDER='revealed': {e}; set FP8EMU_CPU_ORDER=<a recorded model> "
                                   "to describe it without probing") from None
            too_long = str(e)
    if p in ("auto", "revealed") and K > 0 and M > 0 and N > 0 and not too_long:
        if hit is not None:
            order, explained = hit
            if explained < 1.0:
                warnings.warn(f"{name}: the summation order revealed on this machine for {M}x{K}x{N} "
                              f"({layout}) explains {explained:.1%} of torch's outputs (not a fixed order of "
                              "float32 additions); the rest may differ in the last bits", RuntimeWarning,
                              stacklevel=stacklevel)
            elif min(M, N) == 1 and K > 1:
                # MKL's gemv is no fixed tree: an order explaining the probe's few products (1x7x4 NT, 5x17x1 NN)
                # differed from torch on others (6 of 80, 4 of 100 outputs), silently
                warnings.warn(f"{name}: {M}x{K}x{N} ({layout}) is a single row or column, which the BLAS sends to "
                              "its gemv (on MKL no fixed order of float32 additions): the order revealed on this "
                              "machine explains the probe's products, but torch may differ in the last bits on "
                              "others", RuntimeWarning, stacklevel=stacklevel)
            return order, "revealed"
        if p == "revealed":
            raise RuntimeError("FP8EMU_CPU_ORDER='revealed' needs torch to probe this machine's GEMM order")
    info = machine()
    # without torch, "auto" takes the recorded model proven on this CPU and MKL setting, else one measured
    # under this MKL setting on another CPU (it warns), else the default kernel's (it warns)
    model = RECORDED[p] if p in RECORDED else next(
        (m for m in RECORDED.values() if m.applies_here(info)),
        next((m for m in RECORDED.values() if dict(m.mkl_env) == info["mkl_env"]), RECORDED[_DEFAULT_MODEL]))
    why = None
    if too_long and _torch() is not None:
        why = f"{too_long}, so {model.name} is used instead of this machine's order"
    elif p not in RECORDED and not model.applies_here(info):
        why = (f"this CPU ({info['vendor'] or 'unknown vendor'}, {info['model'] or 'unknown model'}"
               f"{', MKL settings ' + str(info['mkl_env']) if info['mkl_env'] else ''}) is not the one "
               f"{model.name} was proven on ({model.proven_on}); install torch so that fp8emu reveals "
               "this machine's order")
    elif (gap := model.unproven(M, K, N, threads, layout)) is not None:
        why = (f"{model.name} is not proven for this GEMM ({M}x{K}x{N} on {threads or 'an unknown number of'} "
               f"thread(s)): {gap}")
    if why:
        warnings.warn(f"{name}: {why}, so torch may differ in the last bits", RuntimeWarning, stacklevel=stacklevel)
    return model.order(M, K, N, 1 if threads is None else threads, layout=layout), model.name


def describe_here(shapes, *, threads=None, layout="NN"):
    """Lines saying which order each ``(M, K, N)`` takes here and where it comes from."""
    # a pair or a "64x512x64" string was Python's "not enough values to unpack (expected 3, got 2)", None
    # "'NoneType' object is not iterable"
    if isinstance(shapes, (str, bytes)) or not isinstance(shapes, (list, tuple)) or not all(
            isinstance(s, (list, tuple)) and len(s) == 3 for s in shapes):
        raise ValueError(f"describe_here: shapes must be a list of (M, K, N) triples, e.g. [(64, 512, 64)], "
                         f"got {shapes!r:.80}")
    for M, K, N in shapes:
        check_gemm(M, K, N, threads, layout, name="describe_here")
    info = machine()
    lines = [f"CPU: {info['vendor']} {info['model']} ({info['arch']}); kernel flags: {' '.join(info['flags'])}"]
    if info["mkl_env"]:
        lines.append(f"MKL settings: {info['mkl_env']}")
    lib = library()
    lines.append(f"library: {lib}" if lib is not None else "library: torch not installed")
    # the cache's own warning, said here and before the shapes: caught with the first shape's, it stood in that
    # shape's [warning: ...] in place of the order's own (a gemv shape's "torch may differ" was dropped)
    why = cache_problem()
    lines.append(f"policy: {policy()}; cache: {cache_path()}" + (f" (not read or written: it {why})" if why else ""))
    for M, K, N in shapes:
        order, src, said = order_and_warnings(M, K, N, threads=threads, layout=layout)
        lines.append(f"{M}x{K}x{N} {layout}: {src}: {order.describe()}" + "".join(f"  [warning: {m}]" for m in said))
    return lines


def cache_problem():
    """Why the order cache (:func:`cache_path`) is not used under the policy in force (None where it is, or where
    the policy probes nothing): a path that is not a regular file, or one past its size limit.  It warns once.

    Examples
    --------
    >>> with use("mkl-2024.2-avx512"):      # a recorded model reads no cache
    ...     print(cache_problem())
    None
    """
    if policy() not in ("auto", "revealed") or _torch() is None:
        return None
    p = cache_path()
    try:
        why = _unusable(os.stat(p))       # stat opens nothing: a FIFO does not block it
    except OSError:
        return None                       # absent or unreadable: a miss, and written when an order is found
    if why:
        _refuse_cache(p, why)             # warned once, as a GEMM would
    return why


def order_and_warnings(M, K, N, *, threads=None, layout="NN"):
    """``(order, source, messages)``: :func:`order_for`'s result and the text of every warning it gave.

    Examples
    --------
    >>> with use("mkl-2024.2-avx512"):
    ...     order, source, said = order_and_warnings(4, 1024, 4, threads=1)
    >>> source, said
    ('mkl-2024.2-avx512', [])
    >>> with use("mkl-2024.2-avx512"):
    ...     said = order_and_warnings(4, 1024, 4, threads=1, layout="NT")[2]
    >>> len(said), said[0][:37]
    (1, 'sgemm: mkl-2024.2-avx512 is not prove')
    """
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        order, src = order_for(M, K, N, threads=threads, layout=layout)
    return order, src, [str(m.message) for m in w]
