"""One GEMM pass of an emulated linear layer: quantized operands into the stack's GEMM model."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from ..codec import decode
from ..gemm import block_scaled_mm, scaled_mm
from ..gemm.torch_cpu import TORCHAO_EMULATE, cpu_path, sgemm, torchao_emulated_mm
from ..training.recipes import Operand
from ..training.stacks import BLACKWELL_MXF8

__all__ = ["run_gemm", "operand_stats"]


def run_gemm(a: Operand, b: Operand, accumulator, out_dtype, bias=None, layout="NN", fast_accum=False) -> np.ndarray:
    """``A @ B`` (+ bias) of two quantized operands with the stack's accumulator.

    FP8 operands (per-tensor, row-wise, 1x128 / 128x128 block scales) go to
    :func:`fp8emu.gemm.scaled_mm`, MX / NVFP4 ScaledTensors to
    :func:`fp8emu.gemm.block_scaled_mm`; high-precision operands are multiplied in float64
    and rounded once to float32 (then to ``out_dtype``).

    ``accumulator="torch-cpu"`` (the ``cpu`` stack) is resolved here to the path torch's CPU
    ``_scaled_mm`` takes for these operands (:func:`fp8emu.gemm.torch_cpu.cpu_path`); a
    tensor-wise scale against a row-wise one is repeated along its axis first, as torchao's
    ``preprocess_addmm`` does before it calls ``torch._scaled_mm``.
    ``accumulator="torchao-emulate"``: torchao's ``Float8Linear(emulate=True)`` GEMM
    (:func:`fp8emu.gemm.torch_cpu.torchao_emulated_mm`, operands divided by ``divisor``;
    high-precision operands: float32 ``torch.mm``, :func:`fp8emu.gemm.torch_cpu.sgemm`), in
    float32 (the caller converts and adds the bias as ``Float8Linear`` does).  ``layout``: how
    torchao's ``torch.mm`` receives the two operands (``"NN"``, ``"NT"``, ``"TN"``, ``"TT"``), which
    can change the BLAS's summation order (:mod:`fp8emu.gemm.cpu_order`).  torchao's operands
    (``divisor`` set) on ``"torch-cpu"``: torchao's ``addmm_float8_unwrapped`` around torch's CPU
    ``_scaled_mm`` (:func:`_torchao_scaled_mm`); ``fast_accum``: the pass's ``use_fast_accum``.
    """
    if accumulator == TORCHAO_EMULATE:
        if bias is not None:
            raise ValueError("torchao-emulate: Float8Linear adds the bias after its GEMM; pass bias=None")
        threads = torch.get_num_threads()       # the sgemm order torch would take depends on it
        if a.kind == "hp":
            return sgemm(a.hp, b.hp, threads=threads, layout=layout, name=TORCHAO_EMULATE, stacklevel=3)
        return torchao_emulated_mm(a.codes, a.fmt, a.divisor, b.codes, b.fmt, b.divisor, threads=threads,
                                   layout=layout)
    if accumulator == "torch-cpu" and a.kind == "hp":
        v = sgemm(a.hp, b.hp, threads=torch.get_num_threads(), layout=layout, name="torch.mm", stacklevel=3)
        return _hp_epilogue(v, bias, out_dtype)
    if accumulator == "torch-cpu" and a.kind == "fp8" and a.divisor is not None:
        if bias is not None:
            raise ValueError("torchao on the CPU adds the bias after its GEMM; pass bias=None")
        return _torchao_scaled_mm(a, b, out_dtype, fast_accum)
    if accumulator == "torch-cpu" and a.kind == "fp8":
        return _torch_cpu(a, b, out_dtype, bias)
    if a.kind == "hp":
        with np.errstate(all="ignore"):
            v = (a.hp.astype(np.float64) @ b.hp.astype(np.float64)).astype(np.float32)
        return _hp_epilogue(v, bias, out_dtype)
    if a.kind == "fp8" and accumulator == BLACKWELL_MXF8:
        return _block_fp8_as_mx(a, b, bias, out_dtype)
    if a.kind == "fp8":
        return scaled_mm(a.codes, b.codes, a_format=a.fmt, b_format=b.fmt, scale_a=a.scale_inv,
                         scale_b=b.scale_inv, bias=bias, out_dtype=out_dtype, accumulator=accumulator)
    return block_scaled_mm(a.st, b.st, accumulator=accumulator, bias=bias, out_dtype=out_dtype)


def _block_fp8_as_mx(a, b, bias, out_dtype):
    """A 1x128 / 128x128 block-scaled FP8 GEMM on Blackwell's ``kind::mxf8f6f4``: the codes as
    they are, each block's float32 scale as its UE8M0 code (the exponent byte, as TE's
    ``swizzle_block_scaling.cu`` takes it) in every 32-element scale slot the block covers."""
    M, K = a.codes.shape
    N = b.codes.shape[1]
    sa = _e8m0_slots(a.scale_inv, (M, K), k_axis=1)
    sb = _e8m0_slots(b.scale_inv, (K, N), k_axis=0)
    return block_scaled_mm(a.codes, b.codes, a_format=a.fmt, b_format=b.fmt, a_scales=sa, b_scales=sb,
                           accumulator=BLACKWELL_MXF8, bias=bias, out_dtype=out_dtype)


def _e8m0_slots(scale_inv, shape, k_axis):
    """UE8M0 scale codes, one per 32 along K, of an operand of ``shape`` whose float32 scales
    cover 128 along K and 1 or 128 across (zero-padded partial blocks are cut off)."""
    s = np.asarray(scale_inv, np.float32)
    bits = s.view(np.uint32)
    pow2 = ((bits & 0x807FFFFF) == 0) | (bits == 0x00400000)     # 2**e, e in [-127, 127]; 2**-127 subnormal
    if s.ndim != 2 or not pow2.all():
        raise ValueError("block FP8 on Blackwell's MXFP8 instruction needs power-of-two (UE8M0) "
                         "block scales; quantize with power-of-two scales")
    codes = ((bits >> 23) & 0xFF).astype(np.uint8)
    other = 1 - k_axis
    reps = [0, 0]
    reps[k_axis] = 4                                                 # one 128-block: four 32-element slots
    reps[other] = 1 if codes.shape[other] == shape[other] else 128  # 1x128 or 128x128 blocks
    out = np.repeat(np.repeat(codes, reps[0], axis=0), reps[1], axis=1)
    want = list(shape)
    want[k_axis] = -(-shape[k_axis] // 32)
    return np.ascontiguousarray(out[:want[0], :want[1]])


def _torch_cpu(a, b, out_dtype, bias):
    sa, sb = np.asarray(a.scale_inv, np.float32), np.asarray(b.scale_inv, np.float32)
    M, N = a.codes.shape[0], b.codes.shape[1]
    if sa.size == 1 and sb.size != 1:
        sa = np.full((M, 1), sa.reshape(()), np.float32)
    elif sb.size == 1 and sa.size != 1:
        sb = np.full((1, N), sb.reshape(()), np.float32)
    mkldnn = bool(torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled)
    path = cpu_path(a.fmt.name, b.fmt.name, tensorwise=sa.size == 1 and sb.size == 1, mkldnn=mkldnn)
    return scaled_mm(a.codes, b.codes, a_format=a.fmt, b_format=b.fmt, scale_a=sa, scale_b=sb, bias=bias,
                     out_dtype=out_dtype, accumulator=path)


def _torchao_scaled_mm(a, b, out_dtype, fast_accum):
    """torchao 0.18's ``addmm_float8_unwrapped`` (``torchao/float8/float8_ops.py``) on torch's CPU.

    torchao passes the reciprocals of its scales, ``fl32(1 / s)``; with row-wise scales and no fast
    accumulation it calls ``_scaled_mm`` with unit scales and multiplies the output by the outer
    product ``fl32(1/s_a * 1/s_b)`` afterwards; with row-wise scales a float32 or float16 output is
    asked for in bfloat16 (``_scaled_mm``'s row-wise output type) and converted back."""
    M, N = a.codes.shape[0], b.codes.shape[1]
    with np.errstate(divide="ignore"):
        ia = (np.float32(1) / np.asarray(a.divisor, np.float32)).astype(np.float32)
        ib = (np.float32(1) / np.asarray(b.divisor, np.float32)).astype(np.float32)
    if ia.size == 1 and ib.size != 1:           # preprocess_addmm repeats a tensor-wise scale along its axis
        ia = np.full((M, 1), ia.reshape(()), np.float32)
    elif ib.size == 1 and ia.size != 1:
        ib = np.full((1, N), ib.reshape(()), np.float32)
    rowwise = ia.shape == (M, 1) and ib.shape == (1, N)
    post = None
    if rowwise and not fast_accum:
        with np.errstate(all="ignore"):
            post = (ia * ib).astype(np.float32)
        ia, ib = np.float32(1), np.float32(1)
    gemm_dtype = "bfloat16" if rowwise and out_dtype in ("float32", "float16") else out_dtype
    op = Operand("fp8", codes=a.codes, fmt=a.fmt, scale_inv=ia)
    oq = Operand("fp8", codes=b.codes, fmt=b.fmt, scale_inv=ib)
    out = _torch_cpu(op, oq, gemm_dtype, None)
    if post is not None:
        with np.errstate(all="ignore"):
            out = (np.asarray(out, np.float32) * post).astype(out.dtype)       # torch's in-place `output *= post`
    return out if gemm_dtype == out_dtype else _hp_epilogue(np.asarray(out, np.float32), None, out_dtype)


def _hp_epilogue(v, bias, out_dtype):
    """A float32 GEMM result plus ``bias`` in float32, converted to ``out_dtype``."""
    if bias is not None:
        v = (v + np.asarray(bias, np.float32)).astype(np.float32)
    return v if out_dtype == "float32" else v.astype(_np_dtype(out_dtype))


def _np_dtype(name):
    return np.dtype(getattr(ml_dtypes, name))


def operand_stats(arr: np.ndarray, op: Operand) -> dict:
    """Per-operand diagnostics: amax, a representative scale, fractions of the elements.

    ``scale``: the quantization multiplier (per-tensor recipes), NVFP4's global ``S_enc``,
    or the median of the block / row scales.  ``frac_saturated``: elements whose code sits at
    the format's largest magnitude; ``frac_underflow``: finite non-zero inputs whose code is
    zero; ``frac_flushed``: non-zero codes in the format's subnormal range;
    ``n_nonfinite``: NaN / Inf in the input.  For an operand quantized after a random Hadamard
    transform (NVFP4's wgrad copies) the codes are those of the transformed values; ``amax`` and
    ``n_nonfinite`` are of the input.
    """
    x = np.asarray(arr, np.float32)
    finite = np.isfinite(x)
    with np.errstate(invalid="ignore"):
        amax = float(np.max(np.abs(x[finite]))) if finite.any() else float("nan")
    row = {"amax": amax, "n_nonfinite": int(x.size - finite.sum())}
    if op.kind == "hp":
        row.update(scale=1.0, frac_saturated=0.0, frac_underflow=0.0, frac_flushed=0.0)
        return row
    if op.kind == "fp8":
        fmt, codes = op.fmt, op.codes
        with np.errstate(divide="ignore"):
            row["scale"] = float(1.0 / _median_of_numbers(op.scale_inv))
    else:
        st = op.st
        fmt, codes = st.fmt, st.codes
        g = st.global_scale if st.global_scale is not None else None
        row["scale"] = float(np.median(g)) if g is not None else _median_of_numbers(st.scale)
    v = np.abs(decode(codes, fmt).astype(np.float64))
    n = max(x.size, 1)
    row["frac_saturated"] = float(np.sum(v == float(fmt.max)) / n)
    row["frac_underflow"] = float(np.sum((v == 0) & finite & (x != 0)) / n)
    row["frac_flushed"] = float(np.sum((v > 0) & (v < fmt.min_normal)) / n)
    return row


def _median_of_numbers(a) -> float:
    """The median of the non-NaN entries, NaN when there are none (np.nanmedian warns 'All-NaN slice')."""
    v = np.asarray(a, np.float64).reshape(-1)
    v = v[~np.isnan(v)]
    return float(np.median(v)) if v.size else float("nan")
