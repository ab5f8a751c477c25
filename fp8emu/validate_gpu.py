"""Live validation of the profiles against the GPU casts of torch, Triton and JAX.

This is the only module that imports torch, triton or jax, and it does so
lazily, inside :func:`validate`.  Every float32 bit pattern (2**32, in
chunks) is cast on the GPU and compared with the matching profile.
"""

from __future__ import annotations

import importlib
import os

import numpy as np

from .codec import encode

__all__ = ["validate", "gpu_available"]

# (library, format, profile, rounding)
CASES = [
    ("torch", "e4m3fn", "torch-cuda", "rne"), ("torch", "e5m2", "torch-cuda", "rne"),
    ("torch", "e4m3fnuz", "torch-cuda", "rne"), ("torch", "e5m2fnuz", "torch-cuda", "rne"),
    ("torch", "e8m0fnu", "torch-cuda", "rne"),
    ("triton", "e4m3fn", "triton-rtne", "rne"), ("triton", "e5m2", "triton-rtne", "rne"),
    ("triton", "e5m2", "triton-rtz", "rtz"),
    ("jax", "e4m3fn", "jax-gpu", "rne"), ("jax", "e5m2", "jax-gpu", "rne"),
    ("jax", "e4m3fnuz", "jax-gpu", "rne"), ("jax", "e5m2fnuz", "jax-gpu", "rne"),
]


def _try_import(name):
    try:
        return importlib.import_module(name)
    except Exception:   # not installed, or broken install: that library is skipped
        return None


def gpu_available():
    """``(True, torch module)`` when torch sees a CUDA device, else ``(False, reason)``.

    Examples
    --------
    >>> from fp8emu.validate_gpu import gpu_available
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


def _torch_cast(torch, fmt):
    dt = getattr(torch, "float8_" + fmt, None)
    if dt is None:
        return None
    return lambda x: x.to(dt).view(torch.uint8)


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
        y = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
        kernel[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), DT=dt, RND=rnd, BLOCK=4096)
        return y
    return cast


def _jax_cast(torch, fmt):
    # JAX would otherwise reserve most of the GPU memory that torch is using.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = _try_import("jax")
    if jax is None:
        return None
    jnp = importlib.import_module("jax.numpy")
    dt = getattr(jnp, "float8_" + fmt)
    f = jax.jit(lambda v: jax.lax.bitcast_convert_type(v.astype(dt), jnp.uint8))

    def cast(x):
        return torch.from_dlpack(f(jax.dlpack.from_dlpack(x)))
    return cast


def validate(chunk_bits=28, limit=None, out=print):
    """Cast all float32 patterns on the GPU and count mismatches with the profiles.

    Returns a list of rows ``(library, format, profile, inputs, mismatches or
    message)``, or ``None`` (after printing why) when there is no GPU/torch.
    """
    ok, torch = gpu_available()
    if not ok:
        out(f"validate-gpu: {torch}; nothing to validate (the recorded tables are checked by "
            "`fp8emu conformance`)")
        return None

    total = (1 << 32) if limit is None else int(limit)
    step = 1 << chunk_bits
    rows = []
    for lib, fmt, prof, rnd in CASES:
        try:
            cast = (_torch_cast(torch, fmt) if lib == "torch" else
                    _triton_cast(torch, fmt, rnd) if lib == "triton" else _jax_cast(torch, fmt))
        except Exception as exc:   # a library that cannot build this cast is reported, not fatal
            rows.append((lib, fmt, prof, 0, f"unavailable: {type(exc).__name__}: {exc}"))
            continue
        if cast is None:
            rows.append((lib, fmt, prof, 0, f"{lib} not installed"))
            continue
        bad = 0
        try:
            for base in range(0, total, step):
                n = min(step, total - base)
                bits = torch.arange(base, base + n, dtype=torch.int64, device="cuda")
                x = torch.where(bits >= (1 << 31), bits - (1 << 32), bits).to(torch.int32).view(torch.float32)
                got = cast(x).cpu().numpy()
                exp = encode(x.cpu().numpy(), fmt, profile=prof, rounding=rnd)
                bad += int(np.count_nonzero(got != exp))
            rows.append((lib, fmt, prof, total, bad))
        except Exception as exc:
            rows.append((lib, fmt, prof, 0, f"failed: {type(exc).__name__}: {exc}"))
    out("| library | format | profile | inputs | mismatches |")
    out("|---|---|---|---|---|")
    for r in rows:
        out("| " + " | ".join(str(v) for v in r) + " |")
    return rows
