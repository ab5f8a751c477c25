"""Inputs of the torch CPU ``_scaled_mm`` vectors, rebuilt from a case's spec (seed, shape, kinds).

Shared by ``tools/record_torch_cpu_scaled_mm.py`` (which runs torch on them) and
``tests/test_torch_cpu_scaled_mm.py`` (which runs fp8emu on them).  Inputs come from NumPy's
generator alone: FP8 codes are drawn as bit fields, scales and biases as float32 / ml_dtypes
values; nothing here calls fp8emu or torch.
"""

from __future__ import annotations

import hashlib

import ml_dtypes
import numpy as np

# per format: (exponent field shift, mantissa values, exponent fields of the usual band, NaN/Inf codes)
_FIELDS = {"e4m3fn": (3, 8, (4, 11), (0x7F, 0xFF)), "e5m2": (2, 4, (12, 19), (0x7C, 0xFE, 0xFC))}
BIAS_DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
OUT_FLOAT = {"float32": (np.float32, np.uint32), "bfloat16": (ml_dtypes.bfloat16, np.uint16),
             "float16": (np.float16, np.uint16)}


def codes(rng, shape, fmt, specials=False):
    """Random FP8 codes: sign, a mantissa, an exponent field in a band (some zeros, subnormals, specials)."""
    shift, nman, (lo, hi), special = _FIELDS[fmt]
    c = (rng.integers(0, 2, shape) << 7) | (rng.integers(lo, hi, shape) << shift) | rng.integers(0, nman, shape)
    u = rng.random(shape)
    c = np.where(u < 0.08, 0, c)                                        # zeros
    c = np.where((u >= 0.08) & (u < 0.11), rng.integers(1, nman, shape) | (c & 0x80), c)   # subnormals
    if specials:
        c = np.where(u > 0.997, rng.choice(np.array(special), shape), c)
    return c.astype(np.uint8)


def _scale(rng, kind, n):
    if kind == "unit":
        return np.float32(1.0)
    if kind == "pow2":
        return np.float32(2.0 ** int(rng.integers(-4, 5)))
    if kind == "arbitrary":
        return np.float32(rng.uniform(0.05, 4.0))
    if kind == "rowwise":
        return rng.uniform(0.05, 4.0, n).astype(np.float32)
    raise ValueError(kind)


def inputs(spec):
    """(codes_a (M, K), codes_b (K, N), scale_a, scale_b, bias or None, scale_result or None) of a case.

    ``scale_a`` / ``scale_b``: float32 scalars, or (M, 1) / (1, N) arrays for row-wise cases;
    ``bias``: (N,) values in the case's bias dtype.
    """
    if "explicit" in spec:
        e = spec["explicit"]
        bias = None if e.get("bias") is None else np.array(e["bias"], np.float32).astype(BIAS_DTYPES[spec["bias"]])
        return (np.array(e["a"], np.uint8), np.array(e["b"], np.uint8), np.float32(e["sa"]), np.float32(e["sb"]),
                bias, None if spec.get("scale_result") is None else np.float32(spec["scale_result"]))
    rng = np.random.default_rng(spec["seed"])
    M, K, N = spec["M"], spec["K"], spec["N"]
    a = codes(rng, (M, K), spec["a"], spec.get("specials", False))
    b = codes(rng, (K, N), spec["b"], spec.get("specials", False))
    sa = _scale(rng, spec["scales"], M)
    sb = _scale(rng, spec["scales"], N)
    if spec["scales"] == "rowwise":
        sa, sb = sa.reshape(M, 1), sb.reshape(1, N)
    bias = None
    if spec.get("bias"):
        bias = (rng.standard_normal(N) * 8).astype(np.float32).astype(BIAS_DTYPES[spec["bias"]])
    sr = spec.get("scale_result")
    return a, b, sa, sb, bias, None if sr is None else np.float32(sr)


def output_bits(out, out_name):
    """The output as unsigned integers, NaNs made one NaN (their sign is not compared), for hashing."""
    out = np.asarray(out)
    if out_name in OUT_FLOAT:
        dt, ui = OUT_FLOAT[out_name]
        v = out.astype(dt)
        bits = v.view(ui).copy()
        nan = np.isnan(v.astype(np.float32))
        bits[nan] = {np.uint32: 0x7FC00000, np.uint16: 0x7E00 if dt is np.float16 else 0x7FC0}[ui]
        return bits
    # an FP8 NaN code keeps the sign of the float32 NaN it came from, and that sign is not
    # reproduced (which operand's NaN an x86 instruction passes on, or its negative default NaN)
    c = out.astype(np.uint8).copy()
    nan = (c & 0x7F) == 0x7F if out_name == "e4m3fn" else (c & 0x7F) > 0x7C
    c[nan] = 0x7F
    return c


def digest(bits):
    return hashlib.sha256(np.ascontiguousarray(bits).tobytes()).hexdigest()[:32]
