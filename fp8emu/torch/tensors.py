"""NumPy results as torch tensors of their natural dtype, on a given device.

The one rule of :mod:`fp8emu.torch`: torch tensors in, torch tensors out.  A result is returned
as the torch dtype that holds it:

* codes of ``e4m3fn``, ``e5m2``, ``e4m3fnuz``, ``e5m2fnuz``, ``e8m0fnu`` -> ``torch.float8_*``
  (same bits);
* ``e2m1fn`` codes -> ``torch.float4_e2m1fn_x2``, two codes per byte along the last axis (the
  first in the low nibble, as torch defines it); the last axis must be even;
* codes of a format torch has no dtype for (FP6, E4M3 with Inf, P3109, ...) -> ``torch.uint8``;
* float32 / float16 / bfloat16 / float64 values -> the torch dtype of that name;
* a :class:`~fp8emu.ScaledTensor` -> :class:`TorchScaled` (codes, scales, E8M0 / UE4M3 scale codes
  as tensors, and the ScaledTensor itself for :mod:`fp8emu.torch.ops` to read back).

torch is imported by this module (``fp8emu.torch`` is the optional adapter at the top of the
package; the core never imports torch at module level).

Examples
--------
>>> import numpy as np, torch
>>> to_torch(np.array([0x38, 0x7E], np.uint8), fmt="e4m3fn").dtype
torch.float8_e4m3fn
>>> to_torch(np.array([[0x2, 0xF]], np.uint8), fmt="e2m1fn").view(torch.uint8).tolist()
[[242]]
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np

try:
    import torch
except ImportError as _e:          # one clear error naming the way to install it
    # a ModuleNotFoundError naming torch, so that pytest.importorskip("fp8emu.torch") and callers that
    # test for a missing optional module treat it as what it is
    raise ModuleNotFoundError("fp8emu.torch needs torch, which is not installed in this Python: pip install "
                              "'fp8emu[torch]' (the CPU wheel is enough)", name="torch") from _e

from ..formats import ML_DTYPES_NAMES, Format, get_format
from ..interop import TORCH_NARROW_NAMES, code_array, to_numpy
from ..layouts import pack_fp4
from ..scaling import ScaledTensor

__all__ = ["to_torch", "from_torch", "device_of", "torch_dtype", "TorchScaled", "scaled_to_torch", "check_eager"]

_FLOAT_TORCH = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
                "bfloat16": torch.bfloat16}


def torch_dtype(fmt):
    """The torch dtype holding ``fmt``'s codes: ``torch.float8_*``, ``torch.float4_e2m1fn_x2`` or ``torch.uint8``.

    Examples
    --------
    >>> torch_dtype("e5m2"), torch_dtype("e2m3fn")
    (torch.float8_e5m2, torch.uint8)
    """
    fmt = get_format(fmt)
    name = ML_DTYPES_NAMES.get(fmt.name)
    if name not in TORCH_NARROW_NAMES:
        name = None
    if name is None and fmt.name == "e2m1fn":
        name = "float4_e2m1fn_x2"
    if name is not None and get_format(fmt.name) == fmt and hasattr(torch, name):
        return getattr(torch, name)
    return torch.uint8


def device_of(*xs):
    """The device of the first torch tensor among ``xs`` (CPU when there is none).

    Examples
    --------
    >>> device_of(np.zeros(1), torch.zeros(1))
    device(type='cpu')
    """
    for x in xs:
        if isinstance(x, torch.Tensor):
            return x.device
        if isinstance(x, TorchScaled):
            return x.codes.device
    return torch.device("cpu")


def float32_overflow(t):
    """``(count, largest magnitude)`` of a float64 tensor's finite values that float32 rounds to Inf, or None
    (none, or not a float64 tensor): the emulation computes in float32, where such a value became Inf and a recipe
    then gave finite garbage.  Each caller words its own error.

    Examples
    --------
    >>> float32_overflow(torch.tensor([1.0, -1e39, 3e38], dtype=torch.float64))
    (1, 1e+39)
    >>> float32_overflow(torch.tensor([1e39])) is None      # float32 already: Inf is its own value
    True
    """
    if t is None or t.dtype != torch.float64:
        return None
    d = t.detach()
    over = torch.isfinite(d) & torch.isinf(d.to(torch.float32))      # float32's rounding decides, not a bound
    if not bool(over.any()):
        return None
    return int(over.sum()), float(d[over].abs().max())


def check_eager(owner):
    """One error where a NumPy computation cannot read torch's tensors: inside a ``torch.func`` transform (its
    wrapper tensors have no storage: torch's "Cannot access data pointer of Tensor that doesn't have storage")."""
    if torch._C._functorch.maybe_current_level() is not None:
        raise RuntimeError(f"{owner}: torch.func transforms (grad, vmap, jvp, jacrev, ...) cannot run fp8emu's "
                           "NumPy computations on the tensors' values; call it outside the transform")


def from_torch(x, what="x"):
    """A NumPy / ml_dtypes array with ``x``'s values or codes (see :func:`fp8emu.interop.to_numpy`)."""
    if isinstance(x, torch.Tensor):
        check_eager(f"fp8emu.torch, operand {what!r}")
    return to_numpy(x, what=what)


def to_torch(arr, *, fmt=None, device=None):
    """``arr`` as a torch tensor of its natural dtype (module docstring) on ``device``.

    Parameters
    ----------
    arr : numpy.ndarray
        uint8 codes (then ``fmt`` is required), or float64 / float32 / float16 / bfloat16 values.
    fmt : str or Format, optional
        The format of uint8 codes.
    device : torch.device or str, optional
        Where the tensor goes (default: the CPU).

    Returns
    -------
    torch.Tensor

    Examples
    --------
    >>> import ml_dtypes
    >>> to_torch(np.array([1.5], ml_dtypes.bfloat16)).dtype
    torch.bfloat16
    >>> to_torch(np.array([1, 2, 3], np.uint8), fmt="e2m1fn")
    Traceback (most recent call last):
    ...
    ValueError: FP4 codes go into torch.float4_e2m1fn_x2 two per byte: the last dimension must be even, got shape (3,)
    """
    arr = np.asarray(arr)
    if fmt is not None:
        fmt = fmt if isinstance(fmt, Format) else get_format(fmt)
        if arr.dtype != np.uint8:
            raise TypeError(f"codes of {fmt.name} must be uint8 to become a torch tensor, got {arr.dtype}")
        # codes the format cannot hold (0xFF as FP6) would be passed on as they are
        arr = code_array(arr, 1 << fmt.bits, "codes", held=f"{fmt.bits}-bit {fmt.name} codes")
        dt = torch_dtype(fmt)
        if dt == torch.uint8:
            t = torch.from_numpy(_c_order(arr))
        elif dt == getattr(torch, "float4_e2m1fn_x2", None):
            if arr.ndim == 0 or arr.shape[-1] % 2:
                raise ValueError("FP4 codes go into torch.float4_e2m1fn_x2 two per byte: the last dimension "
                                 f"must be even, got shape {arr.shape}")
            t = torch.from_numpy(np.ascontiguousarray(pack_fp4(arr))).view(dt)
        else:
            t = torch.from_numpy(_c_order(arr)).view(dt)
    else:
        name = arr.dtype.name
        if name not in _FLOAT_TORCH:
            raise TypeError(f"to_torch converts float64/float32/float16/bfloat16 values or uint8 codes with "
                            f"fmt=; got dtype {arr.dtype} without fmt")
        arr = _c_order(arr)
        if name == "bfloat16":
            t = torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
        else:
            t = torch.from_numpy(arr)
    return t.to(_device(device)) if device is not None else t


def _c_order(arr):
    """``arr`` in C order, its shape kept: ``np.ascontiguousarray`` makes a 0-d array 1-d, and every 0-d result
    (the encoding of a scalar tensor, a tensorwise scale, NVFP4's global scale) came back of shape (1,).  A 0-d
    array is copied, as that function copied it (a read-only scalar made torch warn that it is not writable)."""
    return arr if arr.flags.c_contiguous and arr.ndim else arr.copy(order="C")


def _device(device):
    """``device`` as a torch.device this torch can use, or one error naming it."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device {device!r} is not a torch device ({exc})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: this torch ({torch.__version__}) has no CUDA device; "
                         "use device='cpu'")
    return dev


@dataclasses.dataclass(eq=False)
class TorchScaled:
    """A :class:`~fp8emu.ScaledTensor` as torch tensors.

    Attributes
    ----------
    codes : torch.Tensor
        ``torch.float8_*``, ``torch.float4_e2m1fn_x2`` (FP4, packed along the last axis) or uint8.
    scale, scale_inv : torch.Tensor of float32
        Per block, as in the ScaledTensor.
    scale_codes : torch.Tensor of float8_e8m0fnu or None
        MX: the E8M0 block scales.
    block_scale_codes : torch.Tensor of float8_e4m3fn or None
        NVFP4: the UE4M3 block scales.
    global_scale : torch.Tensor of float32 (0-d) or None
        NVFP4: ``S_enc``.
    scaled : ScaledTensor
        The NumPy object the tensors were made from (read back by :mod:`fp8emu.torch.ops`).
    """

    codes: torch.Tensor
    scale: torch.Tensor
    scale_inv: torch.Tensor
    scale_codes: torch.Tensor | None
    block_scale_codes: torch.Tensor | None
    global_scale: torch.Tensor | None
    scaled: ScaledTensor

    def dequantize(self, dtype=torch.float32):
        """The dequantised values as a torch tensor of ``dtype`` (float32, float16, bfloat16, float64)."""
        names = {v: k for k, v in _FLOAT_TORCH.items()}
        if dtype not in names:
            raise TypeError(f"dequantize dtype must be one of {list(_FLOAT_TORCH.values())}, got {dtype!r}")
        np_dt = ml_dtypes.bfloat16 if dtype == torch.bfloat16 else np.dtype(names[dtype])
        return to_torch(self.scaled.dequantize(np_dt), device=self.codes.device)


def scaled_to_torch(t: ScaledTensor, device=None) -> TorchScaled:
    """A :class:`TorchScaled` holding ``t``'s codes and scales as torch tensors on ``device``."""
    if not isinstance(t, ScaledTensor):
        # anything else reached a bare AttributeError ("'Tensor' object has no attribute 'global_scale'")
        got = "a TorchScaled already" if isinstance(t, TorchScaled) else type(t).__name__
        raise TypeError(f"scaled_to_torch takes an fp8emu.ScaledTensor (what fp8emu.quantize_tensorwise, "
                        f"quantize_mx, quantize_nvfp4, ... return), got {got}; fp8emu.torch's quantizers take tensors "
                        "and return a TorchScaled themselves")
    def opt(a, fmt):
        return None if a is None else to_torch(np.asarray(a, np.uint8), fmt=fmt, device=device)
    gs = None if t.global_scale is None else to_torch(np.asarray(t.global_scale, np.float32), device=device)
    return TorchScaled(to_torch(t.codes, fmt=t.fmt, device=device),
                       to_torch(t.scale, device=device), to_torch(t.scale_inv, device=device),
                       opt(t.scale_codes, "e8m0fnu"), opt(t.block_scale_codes, "e4m3fn"), gs, t)
