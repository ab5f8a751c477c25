"""Block-scaled GEMM (MXFP8/MXFP6/MXFP4/MXINT8, NVFP4, mixed) as Blackwell-class hardware defines it.

``block_scaled_mm(a, b)`` computes ``D[m, n] = alpha * sum_k a[m, k] * sa[m, k // Ba]
* b[k, n] * sb[k // Bb, n]``: every product carries the product of its two block
scales (E8M0 powers of two for MX, E4M3 values for NVFP4; ``Ba``, ``Bb`` the
operands' blocks along K: 32 for MX, 16 for NVFP4), as cuBLASLt's
``CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0`` / ``VEC16_UE4M3`` modes and
``cuda.tile.mma_scaled`` document it.  ``alpha`` is 1 for MX; for NVFP4 it carries
the per-tensor scales as Transformer Engine passes them to cuBLASLt
(``transformer_engine/common/recipe/nvfp4.cu``, ``compute_nvfp4_per_tensor_scale``):
``alpha = fl32(fl32(amax_A * amax_B) * fl32(1 / (6 * 6 * E_A * E_B)))`` (``E`` an operand's
E4M3 bound: 448, or 256 for TE's 4over6 tensors; one alpha per row/column for row-scaled
operands), applied to the float32 accumulator in the epilogue, ``fl32(acc * alpha)``.  (When an operand's amax
is unknown, fp8emu uses its decode scale ``fl32(1 / S_enc)`` instead, and an MX
operand contributes 1.)

Accumulators, each defined exactly:

``"exact"``
    The exact sum of all block-scaled products, rounded once to float32 (round to
    nearest even), then the epilogue.
``"fp32"``
    K is cut into blocks over which both operands' scales are constant (the
    smaller block, 16 or 32); each block's unscaled products (exact in float32)
    are summed in K order with float32 additions from zero, and the block sum is
    added to the running float32 total with *one* rounding,
    ``total = fl32(total + partial * sa * sb)``, blocks in K order.
``"blackwell"`` (``blackwell-mma``'s step, :mod:`fp8emu.gemm.models`), or a block-scaled :class:`~fp8emu.gemm.GemmModel`
    Chained tensor-core steps of a catalogue row (align every term of a step to the
    largest exponent, truncate to its fraction bits, sum, round the step's result), with
    exponents unbounded (:func:`fp8emu.gemm.models.wide_row`) and the block scales applied
    either to each product (``Policy(scale_at="product")``: the scale exponents join the
    product exponents before alignment, as a hardware MMA that consumes the scales does,
    :func:`fp8emu.gemm.models.scaled_row`) or to each K-block's partial sum
    (``Policy(scale_at="block")``: ``total = fl32(total + partial * sa * sb)``, as software
    block scaling on Hopper does).

The ``"blackwell"`` preset: 32 products per step, every term aligned to the step's largest
exponent and truncated to 31 fraction bits, the step's result (C included) rounded to 24
bits, to nearest even, i.e. to float32.  Those widths come from GPU recordings, not from
guesses: Khattak and Mikaitis ("Accurate Models of NVIDIA Tensor Cores",
arXiv:2512.07004) published 10000 B200 results of ``mma.sync ... m16n8k32 ... .f32``
FP8 dot products with a float32 C (E4M3 and E5M2, kept in ``tests/data/tc_recordings``).
This step reproduces 9999 of them.  The one it misses, an E5M2 row, no width
reproduces.  31 fraction bits is the narrowest alignment that fits: 30 misses one more
row.  Wider alignments fit equally, so the recordings bound the width only from below.
Emulated here, their published ``B200TC`` parameters (25 fraction bits, result truncated) miss
1793 of the 5000 E4M3 rows, and their ``B200TCRN`` variant (25 bits, round to nearest)
misses 246.  What the recordings do *not* cover is how the block scales enter:
``tcgen05.mma``'s block-scaled kinds were not recorded.  The preset lets each product
carry its scales into the alignment (``scale_at="product"``), so unit scales give the
recorded FP8 datapath exactly.  That step for scales other than 1 is unverified.
To model other widths pass ``GemmModel(name, "instruction", step_row(...), Policy(scale_at=...))``
(:func:`fp8emu.gemm.models.step_row`).

B is (K, N) with its blocks along K (axis 0): quantize it with
``quantize_mx(b, fmt, axis=0)`` / ``quantize_nvfp4(b, axis=0)``.  2-D blocks
(32x32 MX, 16x16 NVFP4) are expanded to one scale per row and K-block.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import ml_dtypes
import numpy as np

from .. import parallel
from ..codec import decode
from ..formats import format_of_dtype, get_format
from ..interop import ML_NARROW_DTYPES, code_array, real_values, to_numpy
from ..scaling.mx import mx_from_codes
from ..scaling.nvfp4 import FP4_SCALE_FORMATS, nvfp4_from_codes
from ..scaling.tensor import ScaledTensor, expand
from .epilogue import ieee_specials, output_type, result_scale, to_output
from .fparith import add_scaled_f32, integers_kept
from .instructions import block_scaled_gemm
from .models import get_model, scaled_row, wide_row
from .code_tables import ZERO_EXP, values_and_exponents
from .kernels import exact_dot, fp32_dot
from .routes.wide import run_wide, scaled_operand

__all__ = ["block_scaled_mm", "nvfp4_alpha"]

#: The instructions' names of the scale formats a ScaledTensor's ``scale_format`` may name.
_SCALE_KINDS = {"e5m3fnu": "ue5m3", "e4m3fn": "ue4m3"}
#: float32(1 / (6 * 6 * 448 * 448)), Transformer Engine's ``factor_inv``.
_TE_FACTOR_INV = np.float32(1.0 / (6.0 * 6.0 * 448.0 * 448.0))


class _Operand(NamedTuple):
    """A block-scaled operand seen as rows x K: codes, Format, per-(row, K-block) scales, block."""

    codes: np.ndarray          # (rows, K) uint8
    fmt: object
    scales: np.ndarray         # (rows, ceil(K / block)) float64, NaN for the E8M0 NaN code
    block: int
    decode_global: np.float32 | None   # NVFP4: fl32(1 / S_enc)
    amax: np.float32 | None             # NVFP4: tensor amax, if known
    scale_max: np.float32 | None
    scale_kind: str                     # "ue8m0", "ue4m3" or "ue5m3": the instructions' name of the scale type


#: The typed scale arrays each kind of raw operand takes (torch tensors of these dtypes arrive as them).
_SCALE_DTYPES = {"mx": np.dtype(ml_dtypes.float8_e8m0fnu), "nvfp4": np.dtype(ml_dtypes.float8_e4m3fn)}


def _raw_codes(x, fmt, scales, global_scale, what):
    """(format, uint8 element codes, uint8 scale codes) of a raw operand.

    The one rule ``scaled_mm`` has for its operands: a typed array (a torch ``float8_*`` /
    ``float4_e2m1fn_x2`` tensor, an ml_dtypes array) says its element format, and a format given
    that disagrees with it is an error.  Scales: uint8 codes, or a ``float8_e8m0fnu`` (MX) /
    ``float8_e4m3fn`` (NVFP4) array whose bits are the codes.  FP4 codes with E4M3 scales or a
    global scale are NVFP4.
    """
    codes = to_numpy(x, what=what)
    said = format_of_dtype(codes.dtype)       # None for uint8 codes, which say nothing
    if scales is None:
        raise TypeError(f"{what} as raw codes needs {what}_scales (scale codes)")
    sc = to_numpy(scales, what=f"{what}_scales")
    if fmt is None:
        if said is None:
            raise TypeError(f"{what} as uint8 codes needs {what}_format (a torch float8_* / float4_e2m1fn_x2 "
                            "tensor or an ml_dtypes array says its own format)")
        nv = said.name == "e2m1fn" and (global_scale is not None or sc.dtype == _SCALE_DTYPES["nvfp4"])
        fmt = "nvfp4" if nv else said.name
    nvfp4 = isinstance(fmt, str) and fmt == "nvfp4"
    if said is not None:
        elem = "e2m1fn" if nvfp4 else (fmt.name if hasattr(fmt, "name") else str(fmt))
        if elem != said.name:
            raise ValueError(f"{what}_format is {fmt if isinstance(fmt, str) else elem} but {what} holds "
                             f"{said.name} codes (its dtype says so); omit {what}_format or pass a matching one")
        codes = codes.view(np.uint8)
    if sc.dtype in ML_NARROW_DTYPES:
        want = _SCALE_DTYPES["nvfp4" if nvfp4 else "mx"]
        if sc.dtype != want:
            raise ValueError(f"{what}_scales of dtype {sc.dtype.name} are not {'NVFP4' if nvfp4 else 'MX'} scale "
                             f"codes; pass {want.name} scales or uint8 codes")
        sc = sc.view(np.uint8)
    sc = code_array(sc, 256, f"{what}_scales", typed=True,
                    also=" or a float8_e8m0fnu (MX) / float8_e4m3fn (NVFP4) array of scale codes")
    return fmt, codes, sc


def _operand(x, fmt, scales, global_scale, k_axis, what) -> _Operand:
    if isinstance(x, ScaledTensor):
        if fmt is not None or scales is not None or global_scale is not None:
            raise ValueError(f"give {what} as a ScaledTensor or as codes with {what}_format and "
                             f"{what}_scales, not both")
        t = x
    else:
        fmt, x, scales = _raw_codes(x, fmt, scales, global_scale, what)
        if isinstance(fmt, str) and fmt == "nvfp4":
            if global_scale is None:
                raise ValueError(f"NVFP4 {what} needs {what}_global_scale (S_enc)")
            # One rule for a UE4M3 scale code in every GEMM, the instruction's: its sign bit is not
            # read (MMA-Sim's truncate_e4m3_to_ue4m3, mmasim/arithmetic/helper.py; as mma() reads it).
            scales = code_array(scales, 256, f"{what}_scales") & np.uint8(0x7F)
            t = nvfp4_from_codes(x, scales, global_scale, axis=k_axis)
        else:
            if global_scale is not None:
                raise ValueError(f"{what}_global_scale applies to NVFP4 operands only")
            t = mx_from_codes(x, scales, fmt, axis=k_axis)
    if t.scale_codes is None and t.block_scale_codes is None and t.scale_format_codes is None:
        raise ValueError(f"{what} is not block-scaled (MX or NVFP4); use scaled_mm for "
                         f"per-tensor/row-wise/1x128 scales")
    if len(t.shape) != 2:
        raise ValueError(f"{what} must be 2-D, got shape {t.shape}")
    if t.axis != k_axis:
        hint = "quantize B along K with axis=0" if what == "b" else "quantize A along K with axis=-1"
        raise ValueError(f"{what}'s blocks run along axis {t.axis}, but K is axis {k_axis} "
                         f"({hint})")
    other = 1 - k_axis
    # FP4 with a tensor scale: UE4M3 block scales (NVFP4), or UE5M3 ones (Rubin) in scale_format_codes
    nvfp4 = t.block_scale_codes is not None or t.scale_format_codes is not None
    if t.scale_format_codes is not None:
        sc_codes, kind = t.scale_format_codes, _SCALE_KINDS[t.scale_format.name]
    else:
        sc_codes, kind = (t.block_scale_codes, "ue4m3") if nvfp4 else (t.scale_codes, "ue8m0")
    if nvfp4:
        sval = decode(sc_codes, t.scale_format or get_format("e4m3fn"), dtype=np.float64)
    else:
        e = sc_codes.astype(np.float64) - 127
        sval = np.where(sc_codes == 255, np.nan, np.ldexp(1.0, np.where(sc_codes == 255, 0, e).astype(int)))
    # one scale per row (2-D tiles repeat along the rows)
    sval = expand(sval, tuple(t.block[d] if d == other else 1 for d in range(2)),
                  tuple(t.shape[d] if d == other else sval.shape[d] for d in range(2)))
    codes = t.codes
    if k_axis == 0:
        codes, sval = codes.T, sval.T
    dg = None
    if nvfp4:
        dg = np.float32(np.float32(1) / np.float32(t.global_scale))
    return _Operand(np.ascontiguousarray(codes), t.fmt, np.ascontiguousarray(sval), t.block[k_axis], dg,
                    t.global_amax if nvfp4 else None, t.scale_max if nvfp4 else None, kind)


def nvfp4_alpha(a_amax, b_amax, a_e4m3_max=448, b_e4m3_max=448):
    """Transformer Engine's NVFP4 GEMM alpha: ``fl32(fl32(amax_A * amax_B) * fl32(1/(6*6*E_A*E_B)))``.

    ``E`` is an operand's block-scale bound (``scale_max``: UE4M3 448, or 256 for TE's 4over6
    tensors; UE5M3 114688 or 65536 for FP4 tensors with UE5M3 scales, by the same rule), as TE's
    ``compute_nvfp4_per_tensor_scale_kernel`` (``transformer_engine/common/recipe/nvfp4.cu``)
    and its reference ``NVFP4QuantizerRef.qgemm`` on a GPU (PyTorch divides a CUDA tensor
    by a Python float as a product with the float32 reciprocal) compute it.  Row-scaled
    amaxes (arrays) give one alpha per row or column.

    Examples
    --------
    >>> float(nvfp4_alpha(2688.0, 2688.0))
    1.0
    >>> float(nvfp4_alpha(1536.0, 1536.0, 256, 256))
    1.0
    """
    amax = []
    for name, v in (("a_amax", a_amax), ("b_amax", b_amax)):   # checked as the float32 TE computes with
        try:
            with np.errstate(over="ignore"):
                v32 = np.asarray(v, dtype=np.float32)
        except (TypeError, ValueError):
            v32 = np.float32(np.nan)
        if isinstance(v, (bool, str, bytes)) or not np.all(np.isfinite(v32)) or np.any(v32 < 0):
            raise ValueError(f"{name} must be finite and >= 0 in float32 (the type alpha is computed in), got {v!r}")
        amax.append(v32)
    bounds = sorted({b for pair in FP4_SCALE_FORMATS.values() for b in pair})
    for name, e in (("a_e4m3_max", a_e4m3_max), ("b_e4m3_max", b_e4m3_max)):
        if isinstance(e, bool) or e not in bounds:
            raise ValueError(f"{name} must be one of {', '.join(f'{b:g}' for b in bounds)} (the block-scale "
                             f"bounds of UE4M3 and UE5M3), got {e!r}")
    p = np.multiply(amax[0], amax[1], dtype=np.float32)
    if a_e4m3_max == 448 and b_e4m3_max == 448:
        inv = _TE_FACTOR_INV
    else:
        inv = np.float32(np.float32(1) / np.float32(36.0 * float(a_e4m3_max) * float(b_e4m3_max)))
    return np.multiply(p, inv, dtype=np.float32)


def _alpha(A: _Operand, B: _Operand):
    if A.decode_global is None and B.decode_global is None:
        return None
    if A.amax is not None and B.amax is not None:
        return nvfp4_alpha(A.amax, B.amax, A.scale_max, B.scale_max)
    alpha = np.float32(1)
    for op in (A, B):
        if op.decode_global is not None:
            if op.amax is not None:
                d = np.float32(op.amax * np.float32(1.0 / (6.0 * float(op.scale_max))))
            else:
                d = op.decode_global
            alpha = np.float32(alpha * d)
    return alpha


def _get_model(acc):
    """The :class:`~fp8emu.gemm.models.GemmModel` an accumulator names, if block-scaled GEMMs take
    it: ``"exact"``, ``"fp32"``, a model with block scales (``Policy(scale_at=...)``), or a
    block-scaled instruction row (a chain of the row itself: its error if not block-scaled)."""
    try:
        model = get_model(acc)
    except ValueError:
        model = None
    if model is not None and model.policy.scale_at is not None and (
            model.policy.promote is not None or model.policy.split_k not in (None, 1)):
        raise ValueError(f"block-scaled model {model.name!r}: block_scaled_mm models one chain of steps along K "
                         f"(no promotion, no split-K), got {model.policy}")
    if model is not None and (model.kind in ("exact", "fp32") or model.policy.scale_at is not None or (
            model.kind == "instruction" and model.policy.specials == "instruction")):
        return model
    raise ValueError(f"unknown block-scaled accumulator {acc!r}; use 'exact', 'fp32', 'blackwell', a "
                     f"GemmModel with Policy(scale_at='product' or 'block'), or a block-scaled matrix-instruction "
                     f"preset such as 'blackwell-tcgen05-mxf8f6f4' (fp8emu.gemm.presets() lists them)")


def block_scaled_mm(a, b, *, a_format=None, b_format=None, a_scales=None, b_scales=None,
                    a_global_scale=None, b_global_scale=None, accumulator="blackwell", c=None, bias=None,
                    out_dtype="float32", scale_result=None):
    """Emulate a block-scaled GEMM (MX, NVFP4 or mixed operands): ``alpha * (A @ B)`` with block scales.

    Parameters
    ----------
    a : ScaledTensor (M, K) or ndarray of uint8 codes
        From :func:`fp8emu.quantize_mx` / :func:`fp8emu.quantize_nvfp4` (blocks along
        axis 1), or element codes (one per byte) with ``a_format`` and ``a_scales``.
    b : ScaledTensor (K, N) or ndarray of uint8 codes
        Blocks along K, i.e. axis 0 (``quantize_mx(b, fmt, axis=0)``).
    a_format, b_format : str or Format, optional
        For raw codes: an MX element format (``"e4m3fn"``, ``"e5m2"``, ``"e2m3fn"``,
        ``"e3m2fn"``, ``"e2m1fn"``, ``"int8"``) or ``"nvfp4"``.  Not needed when the codes'
        dtype says it (a torch ``float8_*`` / ``float4_e2m1fn_x2`` tensor, an ml_dtypes array;
        FP4 codes with ``float8_e4m3fn`` scales or a global scale are NVFP4); a format that
        disagrees with the dtype is an error, as in :func:`fp8emu.scaled_mm`.
    a_scales, b_scales : ndarray of uint8, optional
        For raw codes: E8M0 scale codes (MX, one per 32 along K) or UE4M3 codes
        (NVFP4, one per 16), shaped like the codes with K replaced by the block count;
        uint8, or a ``float8_e8m0fnu`` (MX) / ``float8_e4m3fn`` (NVFP4) array or torch
        tensor whose bits are the codes.
        A UE4M3 code's bit 7 is not read, as the block-scaled instructions (and
        :func:`fp8emu.gemm.mma`) read it: 0xB8 is 1.0 like 0x38.
    a_global_scale, b_global_scale : float, optional
        For raw NVFP4 codes: ``S_enc``.
    accumulator : {"blackwell", "exact", "fp32"}, a block-scaled GemmModel, or a block-scaled instruction
        See :mod:`fp8emu.gemm.block_scaled`.  A block-scaled matrix instruction of
        :data:`fp8emu.gemm.INSTRUCTIONS` (``"blackwell-tcgen05-mxf8f6f4"``, ``"...-mxf4nvf4"``,
        the RTX Blackwell ``mma.block_scale`` kinds, Rubin's ``"rubin-tcgen05-mxf4nvf4"``, a
        model only) chains that instruction along K (K a multiple of its k) with the scales as
        it applies them, C as its accumulator input.  FP4 operands with UE5M3 block scales
        (``quantize_nvfp4(..., scale_format="e5m3fnu", block_size=16 or 32)``) are taken by
        every accumulator here; through an instruction, both operands need one scale type.
    c : array_like of float32, shape (M, N) (or broadcastable), optional
        The accumulator input of an MMA, ``D = A @ B + C`` as ``mma.sync`` and
        ``tcgen05.mma`` (with the input accumulator enabled) take it: C joins the
        first tensor-core step as its running sum ("exact": summed exactly with the
        products; "fp32" and ``scale_at="block"``: the float32 total starts at C).
        Applied before ``alpha``; must be finite.  Default: zero.
    bias, out_dtype, scale_result
        As :func:`fp8emu.scaled_mm`.

    Returns
    -------
    ndarray, shape (M, N)

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> x = np.zeros((1, 64)); x[0, 0], x[0, 32] = 1.0, 2.0 ** -20   # two MX blocks
    >>> a = fp8emu.quantize_mx(x, "e4m3fn")
    >>> b = fp8emu.quantize_mx(np.ones((64, 1)), "e2m1fn", axis=0)
    >>> float(block_scaled_mm(a, b, accumulator="exact")[0, 0])      # 1 + 2**-20
    1.0000009536743164
    >>> float(block_scaled_mm(a, b, accumulator="blackwell")[0, 0])  # 31 fraction bits keep it
    1.0000009536743164
    """
    A = _operand(a, a_format, a_scales, a_global_scale, 1, "a")
    B = _operand(b, b_format, b_scales, b_global_scale, 0, "b")
    M, K = A.codes.shape
    N, Kb = B.codes.shape
    if Kb != K:
        raise ValueError(f"shape mismatch: a is ({M}, {K}) and b is ({Kb}, {N}); need (M, K) @ (K, N)")
    model = _get_model(accumulator)
    c = _accumulator_input(c, M, N)
    odt, ofmt = output_type(out_dtype)
    scale_result = result_scale(scale_result, ofmt)
    if model.kind == "instruction" and model.policy.scale_at is None:
        v = _through_instruction(A, B, model.instruction, c)
    elif M == 0 or N == 0:   # an empty result: nothing to accumulate (as scaled_mm)
        v = np.zeros((M, N), np.float32)
    else:
        v = _accumulate(A, B, model, c)
    alpha = _alpha(A, B)
    if alpha is not None:
        with np.errstate(over="ignore", invalid="ignore"):
            v = (v * alpha).astype(np.float32)
    return to_output(v, bias, odt, ofmt, scale_result)


def _accumulate(A: _Operand, B: _Operand, model, c):
    """float32 A @ B (+ C) of the block-scaled operands by an ``"exact"``, ``"fp32"`` or block-scaled
    model, with IEEE results for Inf/NaN codes and NaN for a NaN scale's row or column."""
    K = A.codes.shape[1]
    nan_rows = np.isnan(A.scales).any(axis=1)
    nan_cols = np.isnan(B.scales).any(axis=1)
    with np.errstate(over="ignore", invalid="ignore"):   # float32 overflow gives Inf, as the GPU
        if model.policy.scale_at == "product":
            # a NaN scale's row or column is NaN whatever the sum (below): the sum takes a zero scale
            row = scaled_row(model.instruction, formats=tuple(dict.fromkeys((A.fmt.name, B.fmt.name))))
            pa, ea2, la = scaled_operand(A.codes, A.fmt, _finite(A.scales), A.block)
            pbt, eb2t, lbt = scaled_operand(B.codes, B.fmt, _finite(B.scales), B.block)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                v = run_wide(row, pa, ea2, pbt.T, eb2t.T, c=c, lows=(la, lbt.T)).astype(np.float32)
        else:
            va, ea = values_and_exponents(A.codes, A.fmt)
            vbt, ebt = values_and_exponents(B.codes, B.fmt)
            if model.kind == "exact":
                sa = np.repeat(_finite(A.scales), A.block, axis=1)[:, :K]          # (M, K) per-element scale
                sbt = np.repeat(_finite(B.scales), B.block, axis=1)[:, :K]         # (N, K)
                v = _exact(va, sa, vbt.T, sbt.T, A.fmt.mbits, B.fmt.mbits, c)
            else:
                row = None if model.kind == "fp32" else wide_row(
                    model.instruction, formats=tuple(dict.fromkeys((A.fmt.name, B.fmt.name))))
                v = _blockwise(va, ea, vbt.T, ebt.T, A.scales, B.scales.T, A.block, B.block, row, c)
    v = np.where(nan_rows[:, None] | nan_cols[None, :], np.float32(np.nan), v).astype(np.float32)
    return ieee_specials(v, A.codes, A.fmt, np.ascontiguousarray(B.codes.T), B.fmt)


def _through_instruction(A: _Operand, B: _Operand, ins, c):
    """float32 A @ B (+ C) as a chain of a block-scaled matrix instruction (its own Inf/NaN results)."""
    if A.scale_kind != B.scale_kind:
        raise ValueError(f"{ins.name} takes one scale type for both operands, got {A.scale_kind} and "
                         f"{B.scale_kind} (mixed scale types are not an instruction kind)")
    if A.block != B.block:
        raise ValueError(f"{ins.name} needs the same block along K for both operands, got {A.block} and {B.block}")
    return block_scaled_gemm(A.codes, A.fmt, A.scales, np.ascontiguousarray(B.codes.T), B.fmt,
                             np.ascontiguousarray(B.scales.T), instruction=ins, scale_format=A.scale_kind, c=c)


def _exponents(v):
    """floor(log2|v|) of float64 values as int16-range int64; the zero sentinel for zeros."""
    _, e = np.frexp(v)
    return np.where(v == 0, ZERO_EXP, e.astype(np.int64) - 1)


def _accumulator_input(c, M, N):
    """C as a float32 (M, N) array, or None for a zero accumulator."""
    if c is None:
        return None
    arr = real_values(c, "c", "a float32 array broadcastable to (M, N)")
    try:
        arr = np.broadcast_to(arr, (M, N))
    except ValueError:
        raise ValueError(f"c has shape {arr.shape}, which does not broadcast to the result's ({M}, {N})") from None
    if not np.isfinite(arr).all():
        raise ValueError("c must be finite; Inf/NaN accumulators are not modelled")
    with np.errstate(over="ignore"):
        c32 = arr.astype(np.float32)
    if not np.isfinite(c32).all():
        big = float(np.max(np.abs(np.asarray(arr, np.float64))))
        raise ValueError(f"c overflows float32, the accumulator's type: its largest magnitude {big:.6g} is beyond "
                         f"float32's largest finite value {float(np.finfo(np.float32).max):.6g}")
    # an int64 2**53 + 1 rounds in float64 too: it passed the comparison alone as 2**53
    if not (np.array_equal(c32.astype(np.float64), arr.astype(np.float64)) and integers_kept(arr, c32)):
        raise ValueError("c must hold float32 values (the accumulator is float32); round it first")
    return c32


def _exact(va, sa, vb, sb, ma, mb, c=None):
    """Exact sum of the scaled products (and of ``c``), rounded once to float32."""
    pa, pb = va * sa, vb * sb        # exact: element and scale significands have <= 8 bits together
    # the scaled significands have at most mbits + 4 bits (E4M3 scales carry 3 fraction bits)
    return exact_dot(pa, _exponents(pa), pb, _exponents(pb), ma + 4, mb + 4, extra=c)


#: (M, N) elements of a row chunk in the float32 block sum (speed only: any size gives the same bits)
_CACHED_ELEMS = 1 << 16


def _finite(scales):
    """Block scales with NaN made zero (a NaN scale's row or column is made NaN apart)."""
    return np.where(np.isnan(scales), 0.0, scales)


def _blockwise(va, ea, vb, eb, sa_blocks, sb_blocks, ba, bb, row, c=None):
    """K-blocks with constant scales, each summed from zero by ``row``'s chain of steps (``None``:
    float32 additions); each block's partial joins a float32 total with one rounding."""
    M, K = va.shape
    N = vb.shape[1]
    g = math.gcd(ba, bb)
    if row is not None and g % row.step:
        raise ValueError(f"scale_at='block' needs K blocks ({g}) that are a multiple of the step "
                         f"({row.step})")
    total = np.zeros((M, N), np.float32) if c is None else c.copy()

    def rows(r):
        t = total[r]
        for k0 in range(0, K, g):
            sl = slice(k0, min(K, k0 + g))
            if row is None:
                part = fp32_dot(va[r, sl], vb[sl])
            else:
                with np.errstate(over="ignore"):      # a step result beyond float32's range: Inf, as the GPU
                    part = run_wide(row, va[r, sl], ea[r, sl], vb[sl], eb[sl]).astype(np.float32)
            f = sa_blocks[r, k0 // ba][:, None] * sb_blocks[k0 // bb][None, :]
            f = np.where(np.isnan(f), 0.0, f)
            with np.errstate(over="ignore", invalid="ignore"):
                t = add_scaled_f32(t, part.astype(np.float64), f)
        total[r] = t

    if row is not None:            # run_wide splits its rows over threads itself
        rows(slice(None))
        return total
    # the float32 sum, a few rows at a time: a block's float64 temporaries then stay in cache
    step = max(1, _CACHED_ELEMS // max(1, N))

    def row_range(m0, m1):
        for r0 in range(m0, m1, step):
            rows(slice(r0, min(m1, r0 + step)))

    threads = parallel.resolve_threads(None, M * N * K)
    parallel.run(row_range, parallel.split(0, M, threads, 1), threads)
    return total
