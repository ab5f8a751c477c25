"""fp8emu's functions with torch tensors in and torch tensors out.

Each function takes what its NumPy counterpart takes (torch tensors anywhere an array is
accepted, on any device; torch dtypes for ``dtype`` / ``out_dtype``), runs the NumPy
emulation, and returns torch tensors of the natural dtype (:mod:`fp8emu.torch.tensors`) on the
device of the first tensor argument:

========================  ============================================================
``encode``                codes as ``torch.float8_*`` / ``float4_e2m1fn_x2`` / uint8
``decode``                values as ``dtype`` (a torch dtype; default float32); the format
                          may be omitted for a ``float8_*`` / ``float4_e2m1fn_x2`` tensor
``quantize``              values in the input's float dtype
``quantize_tensorwise``,  :class:`~fp8emu.torch.tensors.TorchScaled` (codes, float32 scales,
``quantize_axiswise``,    ``float8_e8m0fnu`` MX scale codes, ``float8_e4m3fn`` NVFP4 block
``quantize_blockwise``,   scales)
``quantize_mx``,
``quantize_nvfp4``
``scaled_mm``,            float32 / bfloat16 / float16 values, or ``float8_*`` codes for an
``block_scaled_mm``       FP8 ``out_dtype``; TorchScaled operands are accepted
========================  ============================================================

Examples
--------
>>> import torch
>>> x = torch.tensor([1.0, 300.0, -0.3])
>>> codes = encode(x, "e4m3fn")
>>> codes.dtype, decode(codes).tolist()
(torch.float8_e4m3fn, [1.0, 288.0, -0.3125])
>>> t = quantize_mx(torch.ones(2, 32), "e2m1fn")
>>> t.codes.dtype, t.codes.shape, t.scale_codes.dtype
(torch.float4_e2m1fn_x2, torch.Size([2, 16]), torch.float8_e8m0fnu)
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from .. import codec, gemm, scaling
from ..formats import get_format
from ..gemm.epilogue import output_type
from ..interop import ML_NARROW_DTYPES
from .tensors import TorchScaled, device_of, from_torch, scaled_to_torch, to_torch

__all__ = ["encode", "decode", "quantize", "quantize_tensorwise", "quantize_axiswise", "quantize_blockwise",
           "quantize_mx", "quantize_nvfp4", "scaled_mm", "block_scaled_mm"]

_NP_FLOAT = {torch.float32: np.dtype(np.float32), torch.float64: np.dtype(np.float64),
             torch.float16: np.dtype(np.float16), torch.bfloat16: np.dtype(ml_dtypes.bfloat16)}


def _host(x, what):
    """A torch tensor (or TorchScaled) as what the NumPy functions take; anything else as given."""
    if isinstance(x, TorchScaled):
        return x.scaled
    if isinstance(x, torch.Tensor):
        return from_torch(x, what)
    return x


def _values(x, what):
    """An input of values (what encode and the quantizers take) as :func:`_host` gives it, or one error for a
    :class:`TorchScaled`, which holds codes and scales: unwrapped, it reached the NumPy function's "x must be
    array-like ..., got ScaledTensor", naming a type the caller never passed."""
    if isinstance(x, TorchScaled):
        raise TypeError(f"{what} is a TorchScaled (quantized codes and their scales), not values; pass "
                        f"{what}.dequantize() for the values it stands for")
    return _host(x, what)


def _host_kwargs(kw):
    return {k: _host(v, k) for k, v in kw.items()}


def encode(x, fmt, **options):
    """:func:`fp8emu.encode` of a tensor: codes as the torch dtype of ``fmt``."""
    fmt = get_format(fmt)
    return to_torch(codec.encode(_values(x, "x"), fmt, **_host_kwargs(options)), fmt=fmt, device=device_of(x))


def _codes_format(codes, fmt):
    if fmt is not None:
        return get_format(fmt)
    arr = codes if isinstance(codes, np.ndarray) else from_torch(codes, "codes")
    if arr.dtype in ML_NARROW_DTYPES:
        name = arr.dtype.name.split("_", 1)[1]           # float8_e4m3fn -> e4m3fn
        return get_format(name)
    raise TypeError(f"fmt is required for codes of dtype {arr.dtype}; a torch float8_* / float4_e2m1fn_x2 "
                    "tensor says its own format")


def decode(codes, fmt=None, *, dtype=torch.float32, **options):
    """:func:`fp8emu.decode` of a tensor of codes: values as the torch ``dtype`` (float32 by default).

    ``fmt`` may be omitted when ``codes`` is a ``torch.float8_*`` / ``float4_e2m1fn_x2`` tensor (or
    an ml_dtypes array); given, it must agree with that dtype.
    """
    if dtype not in _NP_FLOAT:
        raise TypeError(f"dtype must be one of {list(_NP_FLOAT)}, got {dtype!r}")
    fmt = _codes_format(codes, fmt)
    arr = codec.decode(_host(codes, "codes"), fmt, dtype=_NP_FLOAT[dtype], **_host_kwargs(options))
    return to_torch(arr, device=device_of(codes))


def quantize(x, fmt, **options):
    """:func:`fp8emu.quantize` of a tensor: the rounded values in ``x``'s float dtype."""
    return to_torch(codec.quantize(_values(x, "x"), fmt, **_host_kwargs(options)), device=device_of(x))


def _scaled(fn, x, args, options):
    return scaled_to_torch(fn(_values(x, "x"), *args, **_host_kwargs(options)), device=device_of(x))


def quantize_tensorwise(x, fmt, **options):
    """:func:`fp8emu.quantize_tensorwise` of a tensor, as a :class:`TorchScaled`."""
    return _scaled(scaling.quantize_tensorwise, x, (fmt,), options)


def quantize_axiswise(x, fmt, **options):
    """:func:`fp8emu.quantize_axiswise` of a tensor, as a :class:`TorchScaled`."""
    return _scaled(scaling.quantize_axiswise, x, (fmt,), options)


def quantize_blockwise(x, fmt, **options):
    """:func:`fp8emu.quantize_blockwise` of a tensor, as a :class:`TorchScaled`."""
    return _scaled(scaling.quantize_blockwise, x, (fmt,), options)


def quantize_mx(x, elem_format, **options):
    """:func:`fp8emu.quantize_mx` of a tensor, as a :class:`TorchScaled` (scale codes ``float8_e8m0fnu``)."""
    return _scaled(scaling.quantize_mx, x, (elem_format,), options)


def quantize_nvfp4(x, **options):
    """:func:`fp8emu.quantize_nvfp4` of a tensor, as a :class:`TorchScaled` (FP4 codes packed)."""
    return _scaled(scaling.quantize_nvfp4, x, (), options)


def _gemm_out(arr, out_dtype, device):
    _, ofmt = output_type(out_dtype)
    return to_torch(arr, fmt=ofmt, device=device)


def scaled_mm(a, b, **options):
    """:func:`fp8emu.scaled_mm` of tensors (torch float8 operands say their format).

    ``out_dtype`` defaults to float32, as :func:`fp8emu.scaled_mm`'s does; ``torch._scaled_mm``
    without ``out_dtype`` returns the first operand's float8 dtype: pass ``out_dtype=a.dtype`` for that.

    Examples
    --------
    >>> a = torch.tensor([[5.5, 3.0] + [0.0] * 14]).to(torch.float8_e4m3fn)
    >>> b = torch.tensor([[2.0, 1.0] + [0.0] * 14]).to(torch.float8_e4m3fn).t()
    >>> out = scaled_mm(a, b, scale_a=torch.tensor(1.3712345), scale_b=torch.tensor(0.0912345),
    ...                 accumulator="torch-cpu-onednn")
    >>> out.dtype, out.item()
    (torch.float32, 1.7514545917510986)
    """
    out = gemm.scaled_mm(_host(a, "a"), _host(b, "b"), **_host_kwargs(options))
    return _gemm_out(out, options.get("out_dtype", "float32"), device_of(a, b))


def block_scaled_mm(a, b, **options):
    """:func:`fp8emu.block_scaled_mm` of TorchScaled operands, or of codes with their scales as tensors:
    ``float8_*`` / ``float4_e2m1fn_x2`` codes (their dtype says the format) with ``float8_e8m0fnu``
    (MX) or ``float8_e4m3fn`` (NVFP4, with ``a_global_scale``) scales, as the quantizers return them."""
    out = gemm.block_scaled_mm(_host(a, "a"), _host(b, "b"), **_host_kwargs(options))
    return _gemm_out(out, options.get("out_dtype", "float32"), device_of(a, b))
