"""Framework arrays in, NumPy arrays out: the one place where inputs are coerced.

:func:`to_numpy` turns whatever a caller holds into a NumPy (or ml_dtypes)
array without copying where it can:

* NumPy arrays and ml_dtypes arrays pass through (big-endian arrays are
  byte-swapped to native order; masked arrays are rejected, since a masked
  element has no value to encode: call ``x.filled(v)`` or pass ``x.data``);
* torch tensors on any device, with or without ``requires_grad``: detached,
  moved to the host and their bits viewed as the matching ml_dtypes type
  (``float8_*``, ``bfloat16``); ``float4_e2m1fn_x2`` (two FP4 codes per byte,
  the first element in the low nibble, as torch defines it) is unpacked to
  an ml_dtypes ``float4_e2m1fn`` array whose last axis is twice as long;
* JAX arrays (bfloat16 and float8 included: JAX uses ml_dtypes types);
* any object with ``__array__`` or ``__dlpack__``; Python scalars, lists
  and tuples.

torch and JAX are recognised through ``sys.modules``: a tensor can only exist
if its framework was imported by the caller, so this module never imports
either.  This module sits at the bottom of the package (it imports only
NumPy, ml_dtypes and sys), so every layer can route its inputs through it.

Examples
--------
>>> import numpy as np
>>> to_numpy(np.array([1.0, 2.0], ">f4")).dtype.byteorder in "=<"
True
>>> to_numpy([1, 2]).tolist()
[1, 2]
"""

from __future__ import annotations

import numbers
import sys

import ml_dtypes
import numpy as np

__all__ = ["to_numpy", "source_array", "narrow_codes", "byte_codes", "code_array", "real_values", "unpack_nibbles",
           "ML_NARROW_DTYPES", "is_integer"]

def is_integer(v) -> bool:
    """Whether ``v`` is an integer (Python's or NumPy's), not a bool: a size or count as given.

    Examples
    --------
    >>> is_integer(3), is_integer(np.int64(3)), is_integer(True), is_integer(3.0), is_integer("3")
    (True, True, False, False, False)
    """
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


#: Every ml_dtypes type of 8 bits or fewer (FP8, FP6, FP4, E8M0), as NumPy dtypes.
ML_NARROW_DTYPES = frozenset(np.dtype(getattr(ml_dtypes, n)) for n in dir(ml_dtypes)
                             if n.startswith(("float8_", "float6_", "float4_")))
#: The floating-point types fp8emu reads exactly, in order (float16, bfloat16, float32, float64):
#: :data:`fp8emu.tables.SOURCE_DTYPES` names them.
SOURCE_FLOATS = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32), np.dtype(np.float64))
#: The narrow float dtypes torch has, by the name torch and ml_dtypes both give them (torch's
#: ``float4_e2m1fn_x2`` packs two codes per byte and has no ml_dtypes twin).
TORCH_NARROW_NAMES = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")

# torch dtype name -> the ml_dtypes type with the same bit layout.
_TORCH_VIEW = {name: getattr(ml_dtypes, name) for name in TORCH_NARROW_NAMES + ("bfloat16",)}


def unpack_nibbles(packed: np.ndarray) -> np.ndarray:
    """Two 4-bit codes per uint8, first in the low nibble (torch's ``float4_e2m1fn_x2``, cuBLASLt).

    The last axis doubles (a 0-d byte gives two codes).  :func:`fp8emu.layouts.unpack_fp4` validates
    its input and calls this.

    Examples
    --------
    >>> import numpy as np
    >>> unpack_nibbles(np.array([0xF2], np.uint8)).tolist()
    [2, 15]
    """
    out = np.empty(packed.shape[:-1] + (2 * packed.shape[-1],) if packed.ndim else (2,), np.uint8)
    flat = packed.reshape(packed.shape if packed.ndim else (1,))
    out[..., 0::2] = flat & 0x0F
    out[..., 1::2] = flat >> 4
    return out


def _from_torch(t, torch, what):
    t = t.detach()
    # a tensor without one dense array of values reached torch's bare errors: "Internal error: NestedTensorImpl
    # doesn't support sizes. Please file an issue." (nested), "Got unsupported ScalarType QUInt8" (quantized)
    if t.is_nested or t.layout != torch.strided:
        kind = "nested (torch.nested)" if t.is_nested else f"{t.layout} (sparse or opaque)"
        way = f"its components one at a time ({what}.unbind())" if t.is_nested else f"{what}.to_dense()"
        raise TypeError(f"{what} is a {kind} tensor, which has no one dense array of values to read; pass {way}")
    if t.is_quantized:
        raise TypeError(f"{what} is a quantized tensor ({t.dtype}), whose integers are not its values; pass "
                        f"{what}.dequantize()")
    if t.is_complex():
        raise TypeError(f"{what}: complex tensors are not supported (got {t.dtype})")
    if t.device.type == "meta":
        raise TypeError(f"{what} is a meta tensor: it has shapes but no values to read")
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.resolve_conj().resolve_neg()
    name = str(t.dtype).removeprefix("torch.")
    if name == "float4_e2m1fn_x2":
        return unpack_nibbles(t.view(torch.uint8).numpy()).view(ml_dtypes.float4_e2m1fn)
    if name in _TORCH_VIEW:
        dt = np.dtype(_TORCH_VIEW[name])
        ui = {1: torch.uint8, 2: torch.int16}[dt.itemsize]
        return t.view(ui).numpy().view(dt)
    try:
        return t.numpy()
    except TypeError:       # a dtype NumPy has no counterpart for (torch.bits8, torch.uint3, ...): torch's bare
        # "Got unsupported ScalarType Bits8"
        raise TypeError(f"{what}: a {t.dtype} tensor has no NumPy counterpart to read; pass a bool, integer or "
                        "floating-point tensor (float8_* and float4_e2m1fn_x2 included)") from None


def _is_instance(x, module, attr):
    mod = sys.modules.get(module)
    cls = getattr(mod, attr, None) if mod is not None else None
    return cls is not None and isinstance(x, cls)


def to_numpy(x, *, what="x") -> np.ndarray:
    """A NumPy (or ml_dtypes) array holding the same values or codes as ``x``.

    Parameters
    ----------
    x : array_like, torch.Tensor, jax.Array, or an object with ``__array__`` / ``__dlpack__``
        Never modified.  Shares memory with ``x`` where NumPy can (host
        arrays of a native-order NumPy dtype).
    what : str, keyword-only
        Name of the argument, used in error messages.

    Returns
    -------
    numpy.ndarray
        torch ``float8_*``/``bfloat16`` tensors become the matching ml_dtypes
        array (same bits); ``float4_e2m1fn_x2`` becomes ``float4_e2m1fn`` with
        the packed pairs unpacked (low nibble first).

    Raises
    ------
    TypeError
        For objects NumPy cannot read (the message says what is accepted).
    ValueError
        For masked arrays.

    Examples
    --------
    >>> import ml_dtypes, numpy as np
    >>> to_numpy(np.array([1.5], ml_dtypes.bfloat16)).dtype.name
    'bfloat16'
    >>> to_numpy(np.ma.masked_array([1.0], mask=[True]))
    Traceback (most recent call last):
    ...
    ValueError: x is a masked array; masked elements have no value: pass x.filled(value) or x.data
    """
    # a masked array exists only once numpy.ma is loaded; asking np.ma would load it (~10 ms).  Another
    # thread may be importing it right now: until MaskedArray is defined, no masked array can exist.
    masked = getattr(sys.modules.get("numpy.ma"), "MaskedArray", None)
    if masked is not None and isinstance(x, masked):
        raise ValueError(f"{what} is a masked array; masked elements have no value: "
                         f"pass {what}.filled(value) or {what}.data")
    if isinstance(x, np.ndarray):
        arr = x if type(x) is np.ndarray else np.asarray(x)
    elif _is_instance(x, "torch", "Tensor"):
        arr = _from_torch(x, sys.modules["torch"], what)
    elif hasattr(x, "__array__") or np.isscalar(x) or isinstance(x, (list, tuple)):
        # JAX arrays land here too: np.asarray copies them to the host with their ml_dtypes dtype.
        try:
            arr = np.asarray(x)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{what}: NumPy cannot read {type(x).__name__}: {exc}") from None
    elif hasattr(x, "__dlpack__"):
        try:
            arr = np.from_dlpack(x)
        except (BufferError, TypeError, RuntimeError, ValueError) as exc:
            raise TypeError(
                f"{what}: NumPy cannot import this {type(x).__name__} through DLPack ({exc}); NumPy reads "
                "only host memory and standard dtypes that way: convert it to a NumPy array, or view "
                "narrow floats as uint8 codes, before passing it") from None
    else:
        raise TypeError(f"{what} must be array-like (a NumPy/ml_dtypes array, a torch tensor, a JAX array, "
                        f"or an object with __array__ or __dlpack__), got {type(x).__name__}")
    if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "<" and sys.byteorder == "big"):
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr


def source_array(x, what="x") -> np.ndarray:
    """``x`` as an array of a type the codec reads (:func:`to_numpy`, no copy where possible): bool,
    integers, float16, bfloat16, float32, float64 or ml_dtypes' narrow floats; any other dtype is one
    TypeError naming the accepted ones.

    Examples
    --------
    >>> source_array([1.5, 2]).dtype.name
    'float64'
    >>> source_array(np.array([1j]))
    Traceback (most recent call last):
    ...
    TypeError: unsupported x dtype complex128; accepted: bool, integers, float16, bfloat16, float32, float64 (and ml_dtypes' narrow float types)
    """
    arr = to_numpy(x, what=what)
    dt = arr.dtype
    if dt in SOURCE_FLOATS or dt in ML_NARROW_DTYPES or dt.kind in "biu":
        return arr
    raise TypeError(
        f"unsupported {what} dtype {dt}; accepted: bool, integers, float16, bfloat16, "
        "float32, float64 (and ml_dtypes' narrow float types)"
    )


def byte_codes(codes, fmt, what) -> np.ndarray:
    """``codes`` as an array, checked to be uint8 codes, one element per byte, within ``fmt``'s bits:
    the rule of the matrix instructions' operands (:func:`fp8emu.gemm.instructions.mma`), stricter
    than :func:`narrow_codes` (no other integer type, no ml_dtypes array).  ``fmt``: any object with
    ``name`` and ``bits``; ``what`` names the operand in the error.

    Examples
    --------
    >>> from fp8emu.formats import get_format
    >>> byte_codes(np.uint8([1, 15]), get_format("e2m1fn"), "a").tolist()
    [1, 15]
    >>> byte_codes([1, 15], get_format("e2m1fn"), "a")
    Traceback (most recent call last):
    ...
    TypeError: a must be uint8 codes (one element per byte), got dtype int64
    >>> byte_codes(np.uint8([1, 16]), get_format("e2m1fn"), "a")
    Traceback (most recent call last):
    ...
    ValueError: a holds codes above e2m1fn's 4 bits (accepted: 0..15)
    """
    codes = np.asarray(codes)
    if codes.dtype != np.uint8:
        raise TypeError(f"{what} must be uint8 codes (one element per byte), got dtype {codes.dtype}")
    if fmt.bits < 8 and int(codes.max(initial=0)) >> fmt.bits:
        raise ValueError(f"{what} holds codes above {fmt.name}'s {fmt.bits} bits (accepted: 0..{(1 << fmt.bits) - 1})")
    return codes


def code_array(x, limit: int, what: str, *, held="", typed=None, also="") -> np.ndarray:
    """Raw codes as uint8: unsigned integers whose values are all below ``limit``.

    The one rule for codes handed in from outside (element codes, E8M0 and
    UE4M3 scale codes, kernel buffers, golden files).  An array with a dtype
    must have an unsigned integer one: a signed, float or bool array is a
    TypeError (an int32 300, a -1 or a float 3.7 would otherwise wrap or
    truncate to a different uint8 code).  Python ints, lists and tuples
    carry no dtype and are read as integers; a negative one is a ValueError.
    A value the format cannot hold is a ValueError naming it, its index and
    the accepted range; ``held`` says what the limit means.  A uint8 array is
    returned as it is.  ``typed`` says whether the caller's object had a
    dtype, for a caller that has converted it already (default: whether
    ``x`` has one); ``also`` names what else that caller accepts, for the
    TypeError.

    Examples
    --------
    >>> import numpy as np
    >>> code_array(np.array([1, 2], np.uint16), 256, "codes").dtype.name
    'uint8'
    >>> code_array([0x38, 0x40], 256, "codes").tolist()
    [56, 64]
    >>> code_array(np.array([1, 2], np.int32), 256, "codes")
    Traceback (most recent call last):
    ...
    TypeError: codes must be unsigned integers (uint8 codes, or Python ints), got dtype int32
    >>> code_array(np.array([0xB8], np.uint8), 0x80, "block_scale_codes", held="UE4M3: sign bit 0")
    Traceback (most recent call last):
    ...
    ValueError: block_scale_codes out of range: must lie in 0..127 (0x0..0x7f; UE4M3: sign bit 0), got 184 (0xb8) at index 0
    """
    typed = hasattr(x, "dtype") if typed is None else typed
    arr = to_numpy(x, what=what)
    kind = arr.dtype.kind
    if kind != "u" and (typed or kind != "i"):
        got = f"dtype {arr.dtype}" if typed else f"values of type {arr.dtype}"
        raise TypeError(f"{what} must be unsigned integers (uint8 codes, or Python ints){also}, got {got}")
    # a uint8 array holds no code past 255, and an unsigned one no negative code: no pass for those
    if arr.size and not (arr.dtype == np.uint8 and limit >= 256):
        bad = arr >= limit
        if kind == "i":
            bad |= arr < 0
        if bad.any():
            i = int(np.flatnonzero(bad.reshape(-1))[0])
            v = int(arr.reshape(-1)[i])
            raise ValueError(f"{what} out of range: must lie in 0..{limit - 1} (0x0..{limit - 1:#x}"
                             + (f"; {held}" if held else "") + f"), got {v}" + (f" ({v:#x})" if v >= 0 else "")
                             + f" at index {i}")
    return arr if arr.dtype == np.uint8 else arr.astype(np.uint8)


def real_values(x, what: str, accepted: str = "a float or an array of floats") -> np.ndarray:
    """``x`` as an integer or float NumPy array; bfloat16 (torch or ml_dtypes) is widened to float32.

    The one rule for real numbers handed in (GEMM and quantizer scales, a bias, ``S_enc``): every
    integer and float dtype torch and ml_dtypes have, bfloat16 included (widened exactly); strings,
    bools, complex and narrow floats are a TypeError naming ``what`` and ``accepted``.

    Examples
    --------
    >>> real_values(np.array([1.5], ml_dtypes.bfloat16), "scale").dtype.name
    'float32'
    >>> real_values(np.array([True]), "scale")
    Traceback (most recent call last):
    ...
    TypeError: scale must be a float or an array of floats (an integer, float or bfloat16 dtype), got dtype bool
    """
    arr = to_numpy(x, what=what)
    if arr.dtype == np.dtype(ml_dtypes.bfloat16):
        return arr.astype(np.float32)
    if arr.dtype == object and arr.size and all(type(v) is int for v in arr.flat):
        # Python integers past int64 (2**64, a float32 scale) were "got dtype object", integers being accepted
        try:
            wide = arr.astype(np.float64)
        except OverflowError:
            raise ValueError(f"{what} holds an integer beyond float64's range (about 1.8e308)") from None
        if any(float(w) != v for w, v in zip(wide.flat, arr.flat)):    # 2**64 + 1 would round silently
            raise ValueError(f"{what} holds an integer that float64 does not hold exactly; give it as a float")
        return wide
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{what} must be {accepted} (an integer, float or bfloat16 dtype), got dtype {arr.dtype}")
    return arr


def narrow_codes(arr, fmt, *, what="codes") -> np.ndarray:
    """uint8 codes of ``fmt`` from codes (unsigned integers) or an ml_dtypes narrow-float array.

    Parameters
    ----------
    arr : array_like
        Codes under the rule of :func:`code_array` (an unsigned integer
        array, or Python ints, each below ``2**fmt.bits``), or an ml_dtypes
        array whose type must be ``fmt``'s (an ``float8_e5m2`` array passed
        as ``e4m3fn`` is an error, not a reinterpretation of its bits).
        Anything :func:`to_numpy` reads.
    fmt : Format
        Any object with ``name``, ``bits`` and ``ml_dtype`` attributes.
    what : str, keyword-only
        Name of the argument for error messages.

    Returns
    -------
    numpy.ndarray of uint8

    Examples
    --------
    >>> import ml_dtypes, numpy as np
    >>> from fp8emu.formats import get_format
    >>> narrow_codes(np.array([1.0], ml_dtypes.float8_e4m3fn), get_format("e4m3fn")).tolist()
    [56]
    >>> narrow_codes(np.array([1.0], ml_dtypes.float8_e5m2), get_format("e4m3fn"))
    Traceback (most recent call last):
    ...
    ValueError: codes of dtype float8_e5m2 are not e4m3fn codes; pass float8_e4m3fn values or uint8 codes
    """
    a = to_numpy(arr, what=what)
    if a.dtype in ML_NARROW_DTYPES:
        want = fmt.ml_dtype
        if want is None or a.dtype != np.dtype(want):
            hint = f"pass {np.dtype(want).name} values or uint8 codes" if want is not None else \
                "pass uint8 codes"
            raise ValueError(f"{what} of dtype {a.dtype.name} are not {fmt.name} codes; {hint}")
        return a.view(np.uint8)
    return code_array(a, 1 << fmt.bits, what, held=f"{fmt.bits}-bit {fmt.name} codes", typed=hasattr(arr, "dtype"),
                      also=f" or an ml_dtypes {fmt.name} array")
