"""``scaled_mm``: the ``torch._scaled_mm`` entry point (operands, scales, epilogue).

See :mod:`fp8emu.gemm` for the semantics of each step.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np

from ..formats import format_of_dtype, get_format
from ..interop import narrow_codes, to_numpy
from .block_scaled import block_scaled_mm
from .code_tables import values_and_exponents
from .epilogue import as_scale, bias_values, ieee_specials, output_type, result_scale, to_output
from .instructions import gemm as instruction_gemm
from .models import HW_K_MULTIPLE, MODELS, get_model, row_for_formats, run_steps
from .torch_cpu import fast_accum_accumulator, torch_cpu_mm

__all__ = ["scaled_mm"]


def _dtype_format(x):
    """The built-in Format whose ml_dtypes type is ``x``'s dtype (torch float8 / ml_dtypes arrays), or None."""
    if getattr(x, "dtype", None) is None:
        return None
    try:
        return format_of_dtype(to_numpy(x[:0] if getattr(x, "ndim", 0) else x).dtype)
    except (TypeError, ValueError, IndexError):
        return None


def _operand(x, fmt, what):
    """(codes, Format, scale_inv or None) from codes or a ScaledTensor-like object."""
    scale = None
    if hasattr(x, "codes") and hasattr(x, "fmt"):
        own = get_format(x.fmt)
        if fmt is not None and get_format(fmt) != own:
            # the codes would be read as another format: silently wrong values
            raise ValueError(f"{what} is a ScaledTensor of format {own.name} but {what}_format is "
                             f"{get_format(fmt).name}; omit {what}_format or pass the same format")
        fmt = own
        scale = getattr(x, "scale_inv", None)
        x = x.codes
    said = _dtype_format(x)         # a torch float8 tensor or an ml_dtypes float8 array says its format
    if fmt is not None and said is not None and get_format(fmt) != said:
        raise ValueError(f"{what}_format is {get_format(fmt).name} but {what} holds {said.name} codes (its "
                         f"dtype says so); omit {what}_format or pass {said.name!r}")
    if fmt is None:
        fmt = said
    if fmt is None:
        raise TypeError(f"{what}_format is required when {what} is an array of uint8 codes (a torch "
                        f"float8 tensor or an ml_dtypes float8 array says its own format)")
    fmt = get_format(fmt)
    # uint8 codes, an ml_dtypes array of fmt, or a framework tensor of fmt (torch float8, JAX):
    # range-checked, and an array of another narrow format is an error, not a reinterpretation
    try:
        codes = narrow_codes(x, fmt)
    except TypeError as exc:
        raise TypeError(f"{what} must hold {fmt.name} codes (or be a ScaledTensor): {exc}") from None
    if codes.ndim != 2:
        raise ValueError(f"{what} must be 2-D, got shape {codes.shape}")
    if fmt.bits > 8:
        raise ValueError(f"{what}_format must be a format of at most 8 bits, got {fmt.name}")
    return codes, fmt, scale


# ----------------------------------------------------------------------------- scales
_KBLOCK = 128


class _Scale(NamedTuple):
    """An operand's scale: ``kind`` "scalar", "row" or "block"; ``values`` shaped
    () / (rows, 1) / (row blocks, K blocks); ``row_block`` rows per block (1 or 128)."""

    kind: str
    values: np.ndarray
    row_block: int


def _classify_scale(s, rows, K, what, other, transposed=False) -> _Scale:
    """The :class:`_Scale` of an operand seen as rows x K.

    ``transposed``: the caller gave ``s`` as K x rows (``scale_b``); the error
    message then shows its shape and the accepted shapes in that orientation.
    """
    kb = -(-K // _KBLOCK)
    if s.size == 1:
        return _Scale("scalar", s.reshape(()), 1)
    if s.ndim != 2:
        raise ValueError(f"{what} must be a scalar or 2-D, got shape {s.shape}")
    if transposed:
        s = s.T

    def shown(shape):
        return tuple(reversed(shape)) if transposed else tuple(shape)
    r, c = s.shape
    if (r, c) == (rows, 1):
        return _Scale("row", s, 1)
    if (r, c) == (rows, kb):
        return _Scale("block", s, 1)
    if (r, c) == (-(-rows // _KBLOCK), kb):
        return _Scale("block", s, _KBLOCK)
    raise ValueError(
        f"{what} has shape {shown(s.shape)}; accepted: a scalar, {other}, {shown((rows, kb))} 1x128 "
        f"blocks or {shown((-(-rows // _KBLOCK), kb))} 128x128 blocks")


# ----------------------------------------------------------------------------- public API
def scaled_mm(a, b, *, a_format=None, b_format=None, scale_a=1.0, scale_b=1.0, bias=None,
              out_dtype="float32", accumulator=None, scale_result=None, use_fast_accum=None):
    """Emulate ``torch._scaled_mm``: ``(A @ B) * scale_a * scale_b (+ bias)`` from FP8 codes.

    Parameters
    ----------
    a : ndarray of uint8, shape (M, K) or (batch, M, K), or ScaledTensor
        FP8 codes of A (uint8, an ml_dtypes float8 array or a torch float8 tensor), or an
        object with ``codes``, ``fmt`` and ``scale_inv`` (then ``a_format`` may be omitted
        and ``scale_inv`` is used as ``scale_a``).  3-D operands are a batch of GEMMs
        (``b`` 3-D with the same batch, or 2-D and shared); scalar or 2-D scales are
        shared by the batch, 3-D ones are given per batch entry.
    b : ndarray of uint8, shape (K, N) or (batch, K, N), or ScaledTensor
        FP8 codes of B (logical K x N layout).
    a_format, b_format : str or Format, optional
        Formats of the codes.  Not needed when the array's dtype says it (a torch
        ``float8_*`` tensor, an ml_dtypes ``float8_*`` array); a format that
        disagrees with that dtype is an error.
    scale_a, scale_b : float or ndarray
        float32 dequantisation multipliers: scalars, row-wise (``scale_a`` (M, 1),
        ``scale_b`` (1, N)), or block scales: ``scale_a`` (M, ceil(K/128)) for 1x128
        blocks or (ceil(M/128), ceil(K/128)) for 128x128 blocks; ``scale_b``
        (ceil(K/128), N) or (ceil(K/128), ceil(N/128)).  Block scales multiply each
        128-wide K block's partial sum before it joins the FP32 accumulator.  Inf and NaN
        are multiplied in IEEE float32, as cuBLAS's epilogue does (the ``torch-cpu-*``
        accumulators: NaN, as torch's CPU gives), with a RuntimeWarning; a finite value
        beyond float32's range is an "overflows float32" error.
    bias : array_like of shape (N,), optional
        Added to every row; converted to the output type first (as torch does on the
        GPU; the ``torch-cpu-*`` accumulators add it in float32, as torch's CPU does).
        float32, float16 or bfloat16 (NumPy, ml_dtypes or torch).
    out_dtype : str, numpy dtype or torch.dtype
        ``"float32"``, ``"bfloat16"``, ``"float16"``, an FP8/narrow format name, or the
        matching torch dtype (``torch.bfloat16``, ``torch.float8_e4m3fn``, ...).
    accumulator : str or GemmModel, optional
        ``"hopper"`` (``use_fast_accum=False``, the default), ``"hopper-fast"``
        (``use_fast_accum=True``), ``"fp32"``, ``"exact"``, a :class:`~fp8emu.gemm.GemmModel` (a catalogue
        row, e.g. :func:`~fp8emu.gemm.models.step_row` of other step widths, and a kernel policy), or a
        float32-output matrix instruction of :data:`fp8emu.gemm.INSTRUCTIONS` (name or
        :class:`Instruction`): the GEMM is then that instruction chained along K from C = 0
        (K padded with zeros to whole steps), with the instruction's own Inf/NaN results.
        MX / NVFP4 operands (ScaledTensors with block scale codes) are passed to
        :func:`fp8emu.gemm.block_scaled_mm`, whose default is ``"blackwell"``.
        ``"torch-cpu-onednn"`` / ``"torch-cpu-emulated"``: torch's own CPU ``_scaled_mm``,
        one per path, with that path's scaling, bias and output conversion
        (:mod:`fp8emu.gemm.torch_cpu` says which path torch takes when, and the range
        reproduced bit for bit).
    scale_result : float, optional
        Narrow output only: the float32 result is multiplied by it before the
        (round-to-nearest-even, saturating) conversion.  The ``torch-cpu-*``
        accumulators divide by it and convert as torch's CPU paths do.
    use_fast_accum : bool, optional
        torch's flag, mapped to an accumulator: ``True`` -> ``"hopper-fast"``,
        ``False`` -> ``"hopper"`` (cuBLASLt on Hopper).  With a ``torch-cpu-*``
        accumulator both are accepted (the CPU ignores the flag); an accumulator that
        contradicts the flag is an error.

    Returns
    -------
    ndarray, shape (M, N) or (batch, M, N)
        float32 / bfloat16 / float16 values, or uint8 codes for a narrow ``out_dtype``.

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> a = fp8emu.encode(np.array([[1.0] + [2.0 ** -9] * 15]), "e4m3fn")
    >>> b = fp8emu.encode(np.array([[1.0]] + [[2.0 ** -6]] * 15), "e4m3fn")
    >>> float(scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", accumulator="exact")[0, 0])
    1.000457763671875
    >>> float(scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", accumulator="hopper")[0, 0])
    1.0
    """
    if _is_batched(a) or _is_batched(b):
        return _batched(a, b, dict(a_format=a_format, b_format=b_format, scale_a=scale_a, scale_b=scale_b,
                                   bias=bias, out_dtype=out_dtype, accumulator=accumulator,
                                   scale_result=scale_result, use_fast_accum=use_fast_accum))
    bias = bias_values(bias)
    if _block_scaled(a) or _block_scaled(b):
        if use_fast_accum is not None:
            raise ValueError("use_fast_accum applies to FP8 GEMMs; MX / NVFP4 operands take a "
                             "block_scaled_mm accumulator")
        if not (np.ndim(scale_a) == 0 and float(scale_a) == 1.0 and np.ndim(scale_b) == 0
                and float(scale_b) == 1.0):
            raise ValueError("MX / NVFP4 operands carry their own block scales; leave scale_a and "
                             "scale_b at 1")
        return block_scaled_mm(a, b, a_format=a_format, b_format=b_format, bias=bias,
                               out_dtype=out_dtype, scale_result=scale_result,
                               accumulator="blackwell" if accumulator is None else accumulator)
    accumulator = fast_accum_accumulator(use_fast_accum, accumulator)
    model = get_model("hopper" if accumulator is None else accumulator)
    if model.policy.scale_at is not None:
        fp8 = sorted(n for n, m in MODELS.items() if m.policy.scale_at is None)
        raise ValueError(f"accumulator {model.name!r} is a block-scaled model: give MX / NVFP4 operands "
                         f"(fp8emu.block_scaled_mm), or use one of {fp8} or a float32-output instruction "
                         f"preset such as 'hopper-wgmma'")
    ca, fa, scale_a = _operand_and_scale(a, a_format, scale_a, "a")
    cb, fb, scale_b = _operand_and_scale(b, b_format, scale_b, "b")
    M, K = ca.shape
    if cb.shape[0] != K:
        raise ValueError(f"shape mismatch: a is {ca.shape} and b is {cb.shape}; need (M, K) @ (K, N)")
    N = cb.shape[1]
    cpu = model.kind == "torch-cpu"
    ins = model.instruction
    if ins is not None and (ins.block_scaled or ins.out == "float16"):
        instruction_gemm(ca[:0], cb, instruction=ins, a_format=fa, b_format=fb)   # its own error
    odt, ofmt = output_type(out_dtype)
    scale_result = result_scale(scale_result, ofmt)
    if K % HW_K_MULTIPLE and not cpu:
        warnings.warn(f"K = {K} is not a multiple of {HW_K_MULTIPLE}: cuBLASLt rejects such FP8 "
                      "GEMMs; computing anyway", RuntimeWarning, stacklevel=2)
    # torch's CPU makes NaN of every output an Inf or NaN scale touches (Inf * 3 too): not cuBLAS's IEEE product
    specials = {"specials": "every output it scales is NaN, as torch's CPU _scaled_mm gives"} if cpu else {}
    sa = _classify_scale(as_scale(scale_a, "scale_a", finite=False, **specials), M, K, "scale_a", f"({M}, 1) row-wise")
    sb = _classify_scale(as_scale(scale_b, "scale_b", finite=False, **specials), N, K, "scale_b",
                         f"(1, {N}) column-wise", transposed=True)
    if cpu:
        return _torch_cpu(model.name, ca, fa, cb, fb, sa, sb, bias, odt, ofmt, scale_result)
    if M == 0 or N == 0:   # an empty result: nothing to accumulate
        return to_output(np.zeros((M, N), np.float32), bias, odt, ofmt, scale_result)
    blocks = "block" in (sa.kind, sb.kind)
    kscale = _kscale(sa, sb, M, N, K) if blocks else None
    row = None if ins is None else row_for_formats(model, fa, fb, K)
    # the decoded operands of a sum held here, until the epilogue is done: freed before it, glibc handed their
    # pages back and the epilogue and the next call took fresh ones (2508 minor page faults a call of the exact
    # 256x256x4096 sum against 2025, 4 % of its time; benchmarks/RESULTS.md)
    vals = (values_and_exponents(ca, fa), values_and_exponents(cb, fb)) if model.kind in ("exact", "fp32") else None
    v = run_steps(model, ca, fa, cb, fb, kscale=kscale, kblock=_KBLOCK, ins=row, values=vals)
    v = v if blocks else _scale_epilogue(v, sa, sb)
    if model.policy.specials == "instruction":
        return to_output(v, bias, odt, ofmt, scale_result)   # the instruction's own Inf/NaN results
    return to_output(ieee_specials(v, ca, fa, cb, fb), bias, odt, ofmt, scale_result)


def _torch_cpu(path, ca, fa, cb, fb, sa, sb, bias, odt, ofmt, scale_result):
    """torch's CPU ``_scaled_mm`` by one of its paths: tensor-wise or row-wise scales only."""
    N = cb.shape[1]
    if "block" in (sa.kind, sb.kind) or (sa.kind != sb.kind):
        raise ValueError(f"{path}: torch's CPU _scaled_mm takes tensor-wise scales for both operands or "
                         f"row-wise scales for both ((M, 1) and (1, N)), got {sa.kind} and {sb.kind}")
    if bias is not None and bias.shape not in ((N,), (1, N)):
        raise ValueError(f"bias must have shape ({N},), got {bias.shape}")
    tensorwise = sa.kind == "scalar"
    return torch_cpu_mm(path, ca, fa, cb, fb, sa.values if tensorwise else None, None if tensorwise else sa.values,
                        sb.values if tensorwise else None, None if tensorwise else sb.values, bias,
                        odt if odt is not None else np.dtype(np.float32), ofmt,
                        None if scale_result is None else float(scale_result))


def _is_batched(x):
    if hasattr(x, "codes") and hasattr(x, "fmt"):
        return False
    return getattr(x, "ndim", np.ndim(x) if isinstance(x, (list, tuple)) else 0) == 3


def _batched(a, b, kw):
    """A batch of GEMMs: 3-D operands (and 3-D per-entry scales) sliced along the first axis."""
    na = a.shape[0] if _is_batched(a) else None
    nb = b.shape[0] if _is_batched(b) else None
    if na is None:
        raise ValueError(f"a batched GEMM needs a 3-D a (batch, M, K); a has shape {tuple(np.shape(a))}")
    if nb is not None and nb != na:
        raise ValueError(f"batch sizes differ: a has {na} GEMMs and b {nb}")
    per = {}
    for key in ("scale_a", "scale_b"):
        s = kw[key]
        if np.ndim(s) == 3 or getattr(s, "ndim", 0) == 3:
            if s.shape[0] != na:
                raise ValueError(f"{key} has {s.shape[0]} batch entries, a has {na}")
            per[key] = s
    outs = [scaled_mm(a[i], b[i] if nb is not None else b, **{**kw, **{k: v[i] for k, v in per.items()}})
            for i in range(na)]
    return np.stack(outs) if outs else np.zeros((0,) + tuple(a.shape[1:2]) + (np.shape(b)[-1],), np.float32)


def _block_scaled(x):
    return getattr(x, "scale_codes", None) is not None or getattr(x, "block_scale_codes", None) is not None


def _operand_and_scale(x, fmt, scale, what):
    """Codes, Format and scale of an operand; a ScaledTensor brings its own ``scale_inv``."""
    codes, fmt, own = _operand(x, fmt, what)
    if own is None:
        return codes, fmt, scale
    if not (np.ndim(scale) == 0 and float(scale) == 1.0):
        raise ValueError(f"give scale_{what} or a ScaledTensor with scale_inv, not both")
    return codes, fmt, own


def _per_kblock(scale, rows, K):
    """A scale as a float64 (rows, K-blocks) array, one entry per row and 128-wide K block."""
    nkb = -(-K // _KBLOCK)
    if scale.kind == "scalar":
        return np.full((rows, nkb), float(scale.values))
    if scale.kind == "row":
        return np.repeat(scale.values.astype(np.float64), nkb, axis=1)
    return np.repeat(scale.values.astype(np.float64), scale.row_block, axis=0)[:rows]


def _kscale(sa, sb, M, N, K):
    """The float64 (M, N) factor ``fl32(sa[m, kb] * sb[kb, n])`` of each 128-wide K block ``kb``."""
    SA, SB = _per_kblock(sa, M, K), _per_kblock(sb, N, K)

    def kscale(kb):
        return (SA[:, kb, None].astype(np.float32) * SB[None, :, kb].astype(np.float32)).astype(np.float64)
    return kscale


def _scale_epilogue(c, sa, sb):
    """``fl32(c * fl32(sa * sb))`` for scalars; ``fl32(fl32(c * sa[m]) * sb[n])`` for row-wise scales."""
    with np.errstate(over="ignore", invalid="ignore"):
        if sa.kind == "scalar" and sb.kind == "scalar":
            v = c * (sa.values * sb.values).astype(np.float32)
        else:
            v = (c * sa.values.reshape(-1, 1) if sa.kind == "row" else c * sa.values).astype(np.float32)
            v = v * (sb.values.reshape(1, -1) if sb.kind == "row" else sb.values)
    return v.astype(np.float32)
