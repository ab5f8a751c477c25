"""Quantized operands in, GEMM out: the one entry a framework adapter calls for a layer's GEMM.

An operand is any object with the fields of :class:`fp8emu.torch.recipes.Operand` (``kind`` "fp8",
"block" or "hp"; ``codes``, ``fmt``, ``scale_inv``, ``st``, ``hp``, ``divisor``).  FP8 operands go to
:func:`fp8emu.gemm.scaled_mm`, MX / NVFP4 ones to :func:`fp8emu.gemm.block_scaled_mm`, high-precision
ones are multiplied in float64 and rounded once to float32; ``accumulator`` is a name of
:func:`fp8emu.gemm.models.get_model`, or one of the CPU GEMMs torch itself would run: ``"torch-cpu"``
(the path torch's CPU ``_scaled_mm`` takes, :func:`fp8emu.gemm.torch_cpu.cpu_path`) and
``"torchao-emulate"`` (torchao's ``Float8Linear(emulate=True)``).  What only the framework knows
(its thread count, whether oneDNN is on) is passed in.
"""

from __future__ import annotations

from typing import NamedTuple

import ml_dtypes
import numpy as np

from .block_scaled import block_scaled_mm
from .models import get_model
from .scaled_mm import scaled_mm
from .torch_cpu import TORCHAO_EMULATE, cpu_path, sgemm, torchao_emulated_mm

__all__ = ["quantized_mm"]


class _FP8(NamedTuple):
    codes: np.ndarray
    fmt: object
    scale_inv: object


def quantized_mm(a, b, accumulator, out_dtype="float32", bias=None, *, layout="NN", fast_accum=False, threads=1,
                 mkldnn=True, stacklevel=2) -> np.ndarray:
    """``A @ B`` (+ bias) of two quantized operands with one GEMM model.

    ``"torch-cpu"``: a tensor-wise scale against a row-wise one is repeated along its axis first, as
    torchao's ``preprocess_addmm`` does before it calls ``torch._scaled_mm``; torchao's operands
    (``divisor`` set): torchao's ``addmm_float8_unwrapped`` around torch's CPU ``_scaled_mm``
    (``fast_accum``: the pass's ``use_fast_accum``).  ``"torchao-emulate"``: operands divided by
    ``divisor`` (high-precision operands: float32 ``torch.mm``, :func:`fp8emu.gemm.torch_cpu.sgemm`), in
    float32 (the caller converts and adds the bias as ``Float8Linear`` does).  ``layout``: how torch's
    ``torch.mm`` receives the two operands (``"NN"``, ``"NT"``, ``"TN"``, ``"TT"``), which can change
    the BLAS's summation order (:mod:`fp8emu.gemm.cpu_order`), as can ``threads``.  1x128 / 128x128
    block FP8 operands on a block-scaled instruction (Blackwell's ``kind::mxf8f6f4``) are its MX
    operands (:func:`_block_fp8_as_mx`).

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> from types import SimpleNamespace as Operand          # fp8emu.torch.recipes.Operand's fields
    >>> e4m3 = fp8emu.get_format("e4m3fn")
    >>> x = Operand(kind="fp8", codes=fp8emu.encode(np.ones((2, 32)), e4m3), fmt=e4m3, scale_inv=np.float32(0.5))
    >>> w = Operand(kind="fp8", codes=fp8emu.encode(np.ones((32, 3)), e4m3), fmt=e4m3, scale_inv=np.float32(2.0))
    >>> quantized_mm(x, w, "hopper").tolist()
    [[32.0, 32.0, 32.0], [32.0, 32.0, 32.0]]
    """
    if accumulator == TORCHAO_EMULATE:
        if bias is not None:
            raise ValueError("torchao-emulate: Float8Linear adds the bias after its GEMM; pass bias=None")
        if a.kind == "hp":
            return sgemm(a.hp, b.hp, threads=threads, layout=layout, name=TORCHAO_EMULATE, stacklevel=stacklevel + 1)
        return torchao_emulated_mm(a.codes, a.fmt, a.divisor, b.codes, b.fmt, b.divisor, threads=threads,
                                   layout=layout)
    if accumulator == "torch-cpu" and a.kind == "hp":
        v = sgemm(a.hp, b.hp, threads=threads, layout=layout, name="torch.mm", stacklevel=stacklevel + 1)
        return _hp_epilogue(v, bias, out_dtype)
    if accumulator == "torch-cpu" and a.kind == "fp8" and a.divisor is not None:
        if bias is not None:
            raise ValueError("torchao on the CPU adds the bias after its GEMM; pass bias=None")
        return _torchao_scaled_mm(a, b, out_dtype, fast_accum, mkldnn)
    if accumulator == "torch-cpu" and a.kind == "fp8":
        return _torch_cpu(a, b, out_dtype, bias, mkldnn)
    if a.kind == "hp":
        with np.errstate(all="ignore"):
            v = (a.hp.astype(np.float64) @ b.hp.astype(np.float64)).astype(np.float32)
        return _hp_epilogue(v, bias, out_dtype)
    if a.kind == "fp8" and _block_scaled_instruction(accumulator):
        return _block_fp8_as_mx(a, b, accumulator, bias, out_dtype)
    if a.kind == "fp8":
        return scaled_mm(a.codes, b.codes, a_format=a.fmt, b_format=b.fmt, scale_a=a.scale_inv,
                         scale_b=b.scale_inv, bias=bias, out_dtype=out_dtype, accumulator=accumulator)
    return block_scaled_mm(a.st, b.st, accumulator=accumulator, bias=bias, out_dtype=out_dtype)


def _block_scaled_instruction(accumulator):
    try:
        m = get_model(accumulator)
    except ValueError:
        return False
    return m.kind == "instruction" and m.policy.specials == "instruction" and m.instruction.block_scaled


def _block_fp8_as_mx(a, b, accumulator, bias, out_dtype):
    """A 1x128 / 128x128 block-scaled FP8 GEMM on a block-scaled instruction (Blackwell's
    ``kind::mxf8f6f4``): the codes as they are, each block's float32 scale as its UE8M0 code (the
    exponent byte, as TE's ``swizzle_block_scaling.cu`` takes it) in every 32-element scale slot the
    block covers."""
    M, K = a.codes.shape
    N = b.codes.shape[1]
    sa = _e8m0_slots(a.scale_inv, (M, K), k_axis=1)
    sb = _e8m0_slots(b.scale_inv, (K, N), k_axis=0)
    return block_scaled_mm(a.codes, b.codes, a_format=a.fmt, b_format=b.fmt, a_scales=sa, b_scales=sb,
                           accumulator=accumulator, bias=bias, out_dtype=out_dtype)


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


def _torch_cpu(a, b, out_dtype, bias, mkldnn):
    sa, sb = np.asarray(a.scale_inv, np.float32), np.asarray(b.scale_inv, np.float32)
    M, N = a.codes.shape[0], b.codes.shape[1]
    if sa.size == 1 and sb.size != 1:
        sa = np.full((M, 1), sa.reshape(()), np.float32)
    elif sb.size == 1 and sa.size != 1:
        sb = np.full((1, N), sb.reshape(()), np.float32)
    path = cpu_path(a.fmt.name, b.fmt.name, tensorwise=sa.size == 1 and sb.size == 1, mkldnn=mkldnn)
    return scaled_mm(a.codes, b.codes, a_format=a.fmt, b_format=b.fmt, scale_a=sa, scale_b=sb, bias=bias,
                     out_dtype=out_dtype, accumulator=path)


def _torchao_scaled_mm(a, b, out_dtype, fast_accum, mkldnn):
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
    out = _torch_cpu(_FP8(a.codes, a.fmt, ia), _FP8(b.codes, b.fmt, ib), gemm_dtype, None, mkldnn)
    if post is not None:
        with np.errstate(all="ignore"):
            out = (np.asarray(out, np.float32) * post).astype(out.dtype)       # torch's in-place `output *= post`
    return out if gemm_dtype == out_dtype else _hp_epilogue(np.asarray(out, np.float32), None, out_dtype)


def _hp_epilogue(v, bias, out_dtype):
    """A float32 GEMM result plus ``bias`` in float32, converted to ``out_dtype``."""
    if bias is not None:
        v = (v + np.asarray(bias, np.float32)).astype(np.float32)
    return v if out_dtype == "float32" else v.astype(np.dtype(getattr(ml_dtypes, out_dtype)))
