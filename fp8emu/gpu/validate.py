"""Live validation of the profiles against the GPU casts of torch, Triton and JAX, and of ``torch._scaled_mm``.

This is the only module that imports torch, triton or jax, and it does so
lazily, inside the functions that build the GPU calls.  Every float32 bit
pattern (2**32, in chunks; ``limit`` for fewer) and every float16/bfloat16
pattern is cast on the GPU and compared with the matching profile; a few
``torch._scaled_mm`` products (tensor-wise and row-wise scales,
``use_fast_accum`` both ways, one shape that cuBLASLt splits along K) are
compared bit for bit with :func:`fp8emu.scaled_mm`.

The comparison itself (:func:`check_cast`, :func:`check_scaled_mm`,
:func:`run`) takes the GPU call as a plain function from NumPy inputs to
anything :func:`fp8emu.interop.to_numpy` reads, so it is tested on machines
without a GPU by passing CPU functions in its place (a NumPy cast, or a
function replaying recorded H200 outputs); only :func:`validate` builds the
real GPU calls.

Exit status of ``fp8emu validate-gpu`` (:func:`exit_status`)
-------------------------------------------------------------
0 every case compared and matched; 1 a mismatch or a failed case (or no GPU
with ``--require-gpu``); 3 (:data:`EXIT_NO_GPU`) no CUDA device or no torch, or
every case skipped: nothing was validated.  A library that is not installed (Triton, JAX) is
reported as skipped and does not fail the run.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import asdict, dataclass, field
from typing import Callable

import ml_dtypes
import numpy as np

from ..codec import encode
from ..formats import get_format
from ..interop import is_integer, narrow_codes, to_numpy
from ..tables import SOURCE_DTYPES
from ..testing import scaled_mm_cases

__all__ = ["validate", "gpu_available", "check_cast", "check_scaled_mm", "run", "exit_status", "CastCase",
           "CaseResult", "report_dict", "EXIT_OK", "EXIT_MISMATCH", "EXIT_NO_GPU", "CASES"]

EXIT_OK, EXIT_MISMATCH, EXIT_NO_GPU = 0, 1, 3
#: Version of the ``--json`` report layout.
REPORT_VERSION = 1

# (library, format, profile, rounding, sources)
CASES = [
    ("torch", "e4m3fn", "torch-cuda", "rne", ("float32", "float16", "bfloat16")),
    ("torch", "e5m2", "torch-cuda", "rne", ("float32", "float16", "bfloat16")),
    ("torch", "e4m3fnuz", "torch-cuda", "rne", ("float32", "float16", "bfloat16")),
    ("torch", "e5m2fnuz", "torch-cuda", "rne", ("float32", "float16", "bfloat16")),
    ("torch", "e8m0fnu", "torch-cuda", "rne", ("float32", "float16", "bfloat16")),
    ("triton", "e4m3fn", "triton-rtne", "rne", ("float32",)), ("triton", "e5m2", "triton-rtne", "rne", ("float32",)),
    ("triton", "e5m2", "triton-rtz", "rtz", ("float32",)),
    ("jax", "e4m3fn", "jax-gpu", "rne", ("float32",)), ("jax", "e5m2", "jax-gpu", "rne", ("float32",)),
    ("jax", "e4m3fnuz", "jax-gpu", "rne", ("float32",)), ("jax", "e5m2fnuz", "jax-gpu", "rne", ("float32",)),
]
#: GEMM shapes (M, N, K) checked against torch._scaled_mm; K = 16384 at M = N = 32 is split along K.
MM_SHAPES = ((32, 32, 64), (64, 48, 256), (128, 64, 1024), (32, 32, 16384))
#: (a format, b format, variants) of the GEMM checks; torch's row-wise scaling takes e4m3fn operands.
MM_PAIRS = (("e4m3fn", "e4m3fn", ("tensorwise_f32", "tensorwise_bf16_bias", "rowwise_bf16")),
            ("e4m3fn", "e5m2", ("tensorwise_f32", "tensorwise_bf16_bias")))
_UINT = {2: np.uint16, 4: np.uint32}


@dataclass
class CastCase:
    """One cast to validate: ``cast`` maps a NumPy array of ``source`` values to codes (None: skipped)."""

    library: str
    format: str
    profile: str
    rounding: str
    source: str
    cast: Callable | None = None
    note: str = ""


@dataclass
class CaseResult:
    """Outcome of one case: ``status`` is ``ok``, ``mismatch``, ``failed`` or ``skipped``."""

    library: str
    kind: str
    name: str
    profile: str
    inputs: int = 0
    mismatches: int = 0
    status: str = "ok"
    message: str = ""
    examples: list = field(default_factory=list)


def _try_import(name):
    try:
        return importlib.import_module(name)
    except Exception:   # not installed, or broken install: that library is skipped
        return None


def gpu_available():
    """``(True, torch module)`` when torch sees a CUDA device, else ``(False, reason)``.

    Examples
    --------
    >>> from fp8emu.gpu.validate import gpu_available
    >>> ok, why = gpu_available()
    >>> isinstance(ok, bool)
    True
    """
    torch = _try_import("torch")
    if torch is None:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, "torch sees no CUDA device"
    return True, torch


def _check_limit(limit):
    # 0 or -5 swept nothing and the case said "ok" with 0 inputs; 2.5 and "3" were truncated and parsed
    if limit is not None and (not is_integer(limit) or limit < 1):
        raise ValueError(f"limit must be None (every pattern) or a positive integer (the first N "
                         f"patterns), got {limit!r}")


def source_chunks(source, limit=None, chunk_bits=24):
    """Every bit pattern of ``source`` (or the first ``limit``) as arrays of that dtype, in order.

    Examples
    --------
    >>> [c.size for c in source_chunks("float16", chunk_bits=15)]
    [32768, 32768]
    >>> next(source_chunks("float32", limit=3)).view("u4").tolist()
    [0, 1, 2]
    """
    _check_limit(limit)
    dt = SOURCE_DTYPES[source]
    total = 1 << (dt.itemsize * 8)
    if limit is not None:
        total = min(total, int(limit))
    step = 1 << chunk_bits
    for base in range(0, total, step):
        n = min(step, total - base)
        yield np.arange(base, base + n, dtype=_UINT[dt.itemsize]).view(dt)


def _bits_text(v):
    return f"0x{int(v):0{2 * v.dtype.itemsize}x}"


def check_cast(case: CastCase, *, limit=None, chunk_bits=24, n_examples=5, on_chunk=None) -> CaseResult:
    """Run ``case.cast`` over every input pattern of ``case.source`` and compare with the profile.

    Examples
    --------
    >>> import ml_dtypes
    >>> c = CastCase("ml_dtypes", "e5m2", "ml_dtypes", "rne", "float16", lambda x: x.astype(ml_dtypes.float8_e5m2))
    >>> r = check_cast(c)
    >>> r.status, r.inputs, r.mismatches
    ('ok', 65536, 0)
    """
    _check_limit(limit)        # here, not inside the try below, where it was reported as a failed case
    name = f"{case.source}->{case.format}" + (f" ({case.rounding})" if case.rounding != "rne" else "")
    res = CaseResult(case.library, "cast", name, case.profile)
    if case.cast is None:
        res.status, res.message = "skipped", case.note or f"{case.library} not available"
        return res
    f = get_format(case.format)
    try:
        for x in source_chunks(case.source, limit, chunk_bits):
            with np.errstate(invalid="ignore", over="ignore"):   # NaN and overflowing inputs are cast on purpose
                y = case.cast(x)
            got = narrow_codes(to_numpy(y, what="GPU result"), f, what="GPU result")
            exp = encode(x, f, profile=case.profile, rounding=case.rounding)
            if got.shape != exp.shape:
                raise ValueError(f"the cast returned shape {got.shape} for {exp.shape} inputs")
            bad = np.flatnonzero(got != exp)
            res.inputs += x.size
            res.mismatches += int(bad.size)
            if on_chunk is not None:
                on_chunk(x.size)
            vals = f.values()
            for i in bad[:max(0, n_examples - len(res.examples))]:   # only the reported few are formatted
                res.examples.append({"bits": _bits_text(x.view(_UINT[x.dtype.itemsize])[i]),
                                     "input": repr(float(x[i])), "expected": f"0x{int(exp[i]):02x}",
                                     "expected_value": repr(float(vals[exp[i]])), "got": f"0x{int(got[i]):02x}",
                                     "got_value": repr(float(vals[got[i]]))})
    except Exception as exc:   # a cast that cannot run is a failed case, reported with its reason
        res.status, res.message = "failed", f"{type(exc).__name__}: {exc}"
        return res
    if res.mismatches:
        res.status = "mismatch"
    return res


def _same_bits(got, exp):
    """Elementwise equality of bit patterns, any NaN equal to any NaN."""
    g, e = got.astype(np.float64), exp.astype(np.float64)
    w = exp.dtype.itemsize
    same = got.view(_UINT[w]) == exp.view(_UINT[w])
    return same | (np.isnan(g) & np.isnan(e))


def check_scaled_mm(mm, *, shapes=MM_SHAPES, pairs=MM_PAIRS, seed=0, n_examples=5, cases=None,
                    library="torch._scaled_mm") -> list:
    """Compare ``mm`` with :func:`fp8emu.scaled_mm` (``hopper`` / ``hopper-fast``) on a few GEMMs.

    Parameters
    ----------
    mm : callable
        ``mm(a, b, a_format, b_format, scale_a, scale_b, bias, out_dtype, use_fast_accum)`` with uint8
        code matrices ``a`` (M, K), ``b`` (K, N), float32 scales (0-d, or (M, 1) and (1, N)), a float32
        bias (N,) or None and ``out_dtype`` ``"float32"`` or ``"bfloat16"``; returns the (M, N) result
        as anything :func:`fp8emu.interop.to_numpy` reads.
    cases : list of dict, optional
        Operands as for :func:`fp8emu.testing.scaled_mm_cases` (default: random, of ``shapes``).

    Returns
    -------
    list of CaseResult
        One per (format pair, shape, variant, use_fast_accum).
    """
    results = []
    for fa, fb, variants in pairs:
        data = scaled_mm_cases(seed=seed, shapes=shapes, a_format=fa, b_format=fb,
                               accumulators=("hopper", "hopper-fast"), operands=cases)
        for i, (M, N, K) in enumerate(data["shapes"].tolist()):
            p = f"case{i}_"
            for variant in variants:
                for fast, acc in ((False, "hopper"), (True, "hopper-fast")):
                    name = f"{fa}x{fb} {M}x{N}x{K} {variant} fast_accum={int(fast)}"
                    res = CaseResult(library, "scaled_mm", name, acc)
                    row = variant.startswith("rowwise")
                    sa = data[p + ("rowscale_a" if row else "scale_a")]
                    sb = data[p + ("rowscale_b" if row else "scale_b")]
                    bias = data[p + "bias"] if variant.endswith("bias") else None
                    out = "float32" if variant.endswith("f32") else "bfloat16"
                    exp = data[f"{p}{variant}_{acc}"]
                    if out == "bfloat16":
                        exp = exp.view(ml_dtypes.bfloat16)
                    try:
                        got = to_numpy(mm(data[p + "a"], data[p + "b"], fa, fb, sa, sb, bias, out, fast),
                                       what="GPU result")
                        if got.shape != exp.shape or got.dtype != exp.dtype:
                            raise ValueError(f"expected a {exp.dtype} {exp.shape} result, got {got.dtype} "
                                             f"{got.shape}")
                        same = _same_bits(got, exp)
                        bad = np.flatnonzero(~same.reshape(-1))
                        res.inputs, res.mismatches = int(exp.size), int(bad.size)
                        for j in bad[:n_examples]:
                            r_, c_ = divmod(int(j), N)
                            g, e = got.reshape(-1)[j], exp.reshape(-1)[j]
                            res.examples.append({"index": f"({r_}, {c_})", "expected": repr(float(e)),
                                                 "expected_bits": _bits_text(np.asarray(e).view(_UINT[e.dtype.itemsize])),
                                                 "got": repr(float(g)),
                                                 "got_bits": _bits_text(np.asarray(g).view(_UINT[g.dtype.itemsize]))})
                        res.status = "mismatch" if bad.size else "ok"
                    except Exception as exc:   # reported as a failed case
                        res.status, res.message = "failed", f"{type(exc).__name__}: {exc}"
                    results.append(res)
    return results


def exit_status(results) -> int:
    """:data:`EXIT_MISMATCH` if any case mismatched or failed, :data:`EXIT_NO_GPU` if no case was compared
    (every one skipped: nothing was validated), else :data:`EXIT_OK`.

    Examples
    --------
    >>> skipped = CaseResult("torch", "cast", "x", "p", status="skipped")
    >>> exit_status([skipped, CaseResult("torch", "cast", "y", "p", status="ok")])
    0
    >>> exit_status([skipped])
    3
    >>> exit_status([CaseResult("torch", "cast", "x", "p", status="failed")])
    1
    """
    if any(r.status in ("mismatch", "failed") for r in results):
        return EXIT_MISMATCH
    # every case skipped (no library could cast) said 0, "every case compared and matched"
    return EXIT_OK if any(r.status == "ok" for r in results) else EXIT_NO_GPU


def markdown(results) -> list:
    """Lines of the report: a Markdown table, then the first differing inputs of each failing case."""
    lines = ["| library | case | profile | inputs | mismatches | status |", "|---|---|---|---|---|---|"]
    for r in results:
        status = r.status + (f": {r.message}" if r.message else "")
        lines.append(f"| {r.library} | {r.name} | {r.profile} | {r.inputs} | {r.mismatches} | {status} |")
    for r in results:
        if r.examples:
            lines.append("")
            lines.append(f"{r.library} {r.name} ({r.profile}): first {len(r.examples)} of {r.mismatches} differences")
            for e in r.examples:
                if r.kind == "cast":
                    lines.append(f"  input {e['input']} (bits {e['bits']}): expected {e['expected']} "
                                 f"({e['expected_value']}), got {e['got']} ({e['got_value']})")
                else:
                    lines.append(f"  element {e['index']}: expected {e['expected']} ({e['expected_bits']}), "
                                 f"got {e['got']} ({e['got_bits']})")
    return lines


class _Bar:
    """Progress over all inputs on stderr: a tqdm bar when tqdm is installed, else a line per 10 %."""

    def __init__(self, total):
        try:
            tqdm = importlib.import_module("tqdm")
        except ImportError:
            tqdm = None
        self.bar = None if tqdm is None else tqdm.tqdm(total=total, unit="inputs", unit_scale=True,
                                                        desc="validate-gpu", file=sys.stderr)
        self.total, self.done, self.shown = total, 0, -1

    def update(self, n):
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.total and 10 * self.done // self.total > self.shown:
            self.shown = 10 * self.done // self.total
            print(f"validate-gpu: {self.done}/{self.total} inputs", file=sys.stderr, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def run(cast_cases, mm=None, *, limit=None, chunk_bits=24, out=print, mm_options=None, progress=False) -> list:
    """Check every cast case (and the GEMMs when ``mm`` is given); print and return the results.

    ``limit``: cast only the first ``limit`` float32 patterns (the float16 and bfloat16 sources are
    always swept whole).  ``progress`` shows how many inputs have been compared on stderr.
    """
    _check_limit(limit)
    bar = None

    def cap(c):
        # ``limit`` shortens the float32 sweep only: every float16 / bfloat16 pattern (65,536) is always cast
        return limit if c.source == "float32" else None

    if progress:
        bar = _Bar(sum(min(1 << (SOURCE_DTYPES[c.source].itemsize * 8), cap(c) or (1 << 32))
                       for c in cast_cases if c.cast is not None))
    try:
        results = [check_cast(c, limit=cap(c), chunk_bits=chunk_bits, on_chunk=bar and bar.update)
                   for c in cast_cases]
    finally:
        if bar is not None:
            bar.close()
    if mm is not None:
        results += check_scaled_mm(mm, **(mm_options or {}))
    for line in markdown(results):
        out(line)
    return results


def report_dict(results, *, gpu=True, reason="", device="") -> dict:
    """The ``--json`` report: ``report_version``, ``gpu``, ``reason``, ``device``, ``exit_status``, ``results``."""
    status = EXIT_NO_GPU if not gpu else exit_status(results)
    return {"report_version": REPORT_VERSION, "gpu": bool(gpu), "reason": reason, "device": device,
            "exit_status": status, "results": [asdict(r) for r in results]}


# ----------------------------------------------------------------------------- the GPU calls
# The GPU calls take the device as a parameter so that the same code can be exercised with torch's CPU
# kernels in the tests of a machine without a GPU.
def _to_torch(torch, x, device="cuda"):
    if x.dtype == np.dtype(ml_dtypes.bfloat16):
        return torch.from_numpy(x.view(np.int16)).to(device).view(torch.bfloat16)
    return torch.from_numpy(x).to(device)


def _torch_cast(torch, fmt, device="cuda"):
    dt = getattr(torch, "float8_" + fmt, None)
    if dt is None:
        return None
    return lambda x: _to_torch(torch, x, device).to(dt)


def _triton_cast(torch, fmt, rounding):
    triton = _try_import("triton")
    if triton is None:
        return None
    tl = importlib.import_module("triton.language")
    dt = {"e4m3fn": tl.float8e4nv, "e5m2": tl.float8e5}[fmt]
    rnd = {"rne": "rtne", "rtz": "rtz"}[rounding]

    @triton.jit
    def kernel(x_ptr, y_ptr, n, DT: tl.constexpr, RND: tl.constexpr, BLOCK: tl.constexpr):
        off = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = off < n
        x = tl.load(x_ptr + off, mask=m)
        tl.store(y_ptr + off, x.to(DT, fp_downcast_rounding=RND).to(tl.int8, bitcast=True), mask=m)

    def cast(x):
        xt = _to_torch(torch, x)
        y = torch.empty(xt.shape, dtype=torch.uint8, device=xt.device)
        kernel[(triton.cdiv(xt.numel(), 4096),)](xt, y, xt.numel(), DT=dt, RND=rnd, BLOCK=4096)
        return y
    return cast


def _jax_cast(fmt):
    # JAX would otherwise reserve most of the GPU memory that torch is using.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = _try_import("jax")
    if jax is None:
        return None
    jnp = importlib.import_module("jax.numpy")
    dt = getattr(jnp, "float8_" + fmt)
    f = jax.jit(lambda v: v.astype(dt))
    gpu = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpu:
        raise RuntimeError("JAX sees no GPU (install jax[cuda])")
    return lambda x: f(jax.device_put(x, gpu[0]))


def _torch_mm(torch, device="cuda"):
    def mm(a, b, fa, fb, scale_a, scale_b, bias, out_dtype, fast):
        A = torch.from_numpy(a).to(device).view(getattr(torch, "float8_" + fa))
        # cuBLASLt wants B column-major: a (N, K) row-major tensor, transposed
        B = torch.from_numpy(np.ascontiguousarray(b.T)).to(device).view(getattr(torch, "float8_" + fb)).t()
        sa = torch.from_numpy(np.asarray(scale_a, np.float32)).to(device)
        sb = torch.from_numpy(np.asarray(scale_b, np.float32)).to(device)
        bt = None if bias is None else torch.from_numpy(bias).to(device).to(torch.bfloat16)
        od = {"float32": torch.float32, "bfloat16": torch.bfloat16}[out_dtype]
        return torch._scaled_mm(A, B, scale_a=sa, scale_b=sb, bias=bt, out_dtype=od, use_fast_accum=fast)
    return mm


def gpu_cases(torch) -> list:
    """The :data:`CASES` with their GPU cast functions (None where the library is missing)."""
    out = []
    for lib, fmt, prof, rnd, sources in CASES:
        try:
            cast = (_torch_cast(torch, fmt) if lib == "torch" else
                    _triton_cast(torch, fmt, rnd) if lib == "triton" else _jax_cast(fmt))
            note = "" if cast is not None else f"{lib} not installed"
        except Exception as exc:   # a library that cannot build this cast is reported, not fatal
            cast, note = None, f"unavailable: {type(exc).__name__}: {exc}"
        out += [CastCase(lib, fmt, prof, rnd, src, cast, note) for src in sources]
    return out


def validate(limit=None, out=print, *, scaled_mm=True, chunk_bits=24, progress=False):
    """Cast all input patterns on the GPU, run the GEMMs, and compare with the profiles.

    Returns ``(results, device name)``, or ``None`` (after printing why) when
    there is no GPU/torch.
    """
    ok, torch = gpu_available()
    if not ok:
        out(f"validate-gpu: {torch}; nothing to validate (the recorded tables are checked by "
            "`fp8emu conformance`)")
        return None
    device = torch.cuda.get_device_name()
    out(f"validate-gpu: {device}, torch {torch.__version__}")
    results = run(gpu_cases(torch), _torch_mm(torch) if scaled_mm else None, limit=limit,
                  chunk_bits=chunk_bits, out=out, progress=progress)
    return results, device
