"""Storage layouts used by block-scaled GEMM kernels: packed FP4/FP6 and swizzled block scales.

Packed FP4 (two E2M1 codes per byte)
    Element ``2i`` in the low nibble (bits 3..0), element ``2i + 1`` in the high
    nibble (bits 7..4): PyTorch's ``torch.float4_e2m1fn_x2``
    (``torch/headeronly/util/Float4_e2m1fn_x2.h``: "val1 : val0 / bit index
    7654 : 3210") and CUDA's ``__nv_fp4x2_e2m1`` as cuBLASLt consumes it.

Packed FP6 (four codes ``a, b, c, d`` in three bytes)
    The layout of torchao's MX FP6 kernels (``pack_uint6`` in
    ``torchao/prototype/mx_formats/kernels.py``), which splits each code into
    its high 4 bits and low 2 bits::

        byte 0 = a[5:2] << 4 | b[5:2]
        byte 1 = d[5:2] << 4 | c[5:2]
        byte 2 = a[1:0] << 6 | b[1:0] << 4 | d[1:0] << 2 | c[1:0]

Swizzled block scales (cuBLASLt "1D block scaling factors layout", also TE's and torchao's)
    The layout of Transformer Engine's ``nvte_swizzle_scaling_factors`` and torchao's
    ``to_blocked``.  A ``(rows, cols)`` scale matrix (rows = M or N, cols = K / block) is zero-padded
    to rows a multiple of 128 and cols a multiple of 4 and cut into 128 x 4 tiles,
    stored tile after tile, the column tiles of a row of tiles first.  Inside a
    tile, scale ``(r, c)`` sits at offset ``(r % 32) * 16 + (r // 32) * 4 + c``.
    So scale ``(i, j)`` of the matrix is at::

        ((i // 128) * ceil(cols / 4) + j // 4) * 512 + (i % 32) * 16 + ((i % 128) // 32) * 4 + j % 4

:func:`export_kernel_buffers` / :func:`import_kernel_buffers` turn an MX or NVFP4
:class:`~fp8emu.scaling.ScaledTensor` (2-D, blocks along K) into the buffers a
kernel receives and back, so fp8emu can be fed the exact buffers of a GPU run.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .formats import get_format
from .interop import unpack_nibbles, is_integer
from .scaling.mx import MXINT8, mx_from_codes
from .scaling.nvfp4 import NVFP4_BLOCK, nvfp4_from_codes
from .scaling.tensor import ScaledTensor, code_array, expand, int_arg, size_arg

__all__ = ["pack_fp4", "unpack_fp4", "pack_fp6", "unpack_fp6", "pack", "unpack",
           "swizzle_scales", "unswizzle_scales", "swizzled_offset", "export_kernel_buffers",
           "import_kernel_buffers", "int8_from_mxint8", "mxint8_from_int8", "SCALE_TILE"]

#: Rows x columns of one swizzled scale tile.
SCALE_TILE = (128, 4)


def _codes(codes, bits, what="codes"):
    arr = code_array(codes, 1 << bits, what, held=f"{bits}-bit codes")
    if arr.ndim == 0:
        raise ValueError(f"{what} need at least one dimension")
    return arr


def _group(arr, n, what):
    if arr.shape[-1] % n:
        raise ValueError(f"the last dimension ({arr.shape[-1]}) must be a multiple of {n} to {what}")
    return arr.reshape(arr.shape[:-1] + (arr.shape[-1] // n, n))


def pack_fp4(codes) -> np.ndarray:
    """Pack 4-bit codes two per byte along the last axis (first element in the low nibble).

    Parameters
    ----------
    codes : array_like of uint8
        Codes below 16; the last dimension must be even.

    Returns
    -------
    numpy.ndarray of uint8
        Shape ``codes.shape[:-1] + (n // 2,)``.

    Examples
    --------
    >>> import numpy as np
    >>> hex(int(pack_fp4(np.array([0x2, 0xF], np.uint8))[0]))     # 1.0 then -6.0
    '0xf2'
    """
    g = _group(_codes(codes, 4), 2, "pack two FP4 codes per byte")
    return (g[..., 0] | (g[..., 1] << 4)).astype(np.uint8)


def unpack_fp4(packed) -> np.ndarray:
    """Inverse of :func:`pack_fp4`: one code per byte, the last axis doubled.

    Examples
    --------
    >>> import numpy as np
    >>> unpack_fp4(np.array([0xF2], np.uint8)).tolist()
    [2, 15]
    """
    return unpack_nibbles(_codes(packed, 8, "packed"))


def pack_fp6(codes) -> np.ndarray:
    """Pack 6-bit codes four per three bytes along the last axis (torchao's MX FP6 layout).

    Parameters
    ----------
    codes : array_like of uint8
        Codes below 64; the last dimension must be a multiple of 4.

    Returns
    -------
    numpy.ndarray of uint8
        Shape ``codes.shape[:-1] + (3 * n // 4,)``.

    Examples
    --------
    >>> import numpy as np
    >>> [hex(int(b)) for b in pack_fp6(np.array([0b111111, 0, 0, 0], np.uint8))]
    ['0xf0', '0x0', '0xc0']
    """
    g = _group(_codes(codes, 6), 4, "pack four FP6 codes in three bytes")
    a, b, c, d = (g[..., i].astype(np.uint8) for i in range(4))
    b0 = ((a >> 2) << 4) | (b >> 2)
    b1 = ((d >> 2) << 4) | (c >> 2)
    b2 = ((a & 3) << 6) | ((b & 3) << 4) | ((d & 3) << 2) | (c & 3)
    out = np.stack([b0, b1, b2], axis=-1)
    return out.reshape(g.shape[:-2] + (3 * g.shape[-2],)).astype(np.uint8)


def unpack_fp6(packed) -> np.ndarray:
    """Inverse of :func:`pack_fp6`: one 6-bit code per byte.

    Examples
    --------
    >>> import numpy as np
    >>> unpack_fp6(np.array([0xF0, 0x00, 0xC0], np.uint8)).tolist()
    [63, 0, 0, 0]
    """
    g = _group(_codes(packed, 8, "packed"), 3, "unpack three bytes into four FP6 codes")
    b0, b1, b2 = g[..., 0], g[..., 1], g[..., 2]
    a = ((b0 >> 4) << 2) | (b2 >> 6)
    b = ((b0 & 0xF) << 2) | ((b2 >> 4) & 3)
    c = ((b1 & 0xF) << 2) | (b2 & 3)
    d = ((b1 >> 4) << 2) | ((b2 >> 2) & 3)
    out = np.stack([a, b, c, d], axis=-1)
    return out.reshape(g.shape[:-2] + (4 * g.shape[-2],)).astype(np.uint8)


def pack(codes, bits: int) -> np.ndarray:
    """Pack codes of ``bits`` = 4, 6 or 8 bits (8: a copy) along the last axis.

    Examples
    --------
    >>> import numpy as np
    >>> pack(np.array([1, 2], np.uint8), 4).tolist()
    [33]
    """
    if bits == 4:
        return pack_fp4(codes)
    if bits == 6:
        return pack_fp6(codes)
    if bits == 8:
        return _codes(codes, 8).copy()
    raise ValueError(f"bits must be 4, 6 or 8, got {bits!r}")


def unpack(packed, bits: int) -> np.ndarray:
    """Inverse of :func:`pack`.

    Examples
    --------
    >>> import numpy as np
    >>> unpack(np.array([33], np.uint8), 4).tolist()
    [1, 2]
    """
    if bits == 4:
        return unpack_fp4(packed)
    if bits == 6:
        return unpack_fp6(packed)
    if bits == 8:
        return _codes(packed, 8, "packed").copy()
    raise ValueError(f"bits must be 4, 6 or 8, got {bits!r}")


# ----------------------------------------------------------------------------- swizzled scales
def swizzled_offset(i, j, cols: int):
    """Offset of scale ``(i, j)`` in the swizzled buffer of a matrix with ``cols`` scale columns.

    Examples
    --------
    >>> swizzled_offset(0, 1, 4), swizzled_offset(32, 0, 4), swizzled_offset(1, 0, 4)
    (1, 4, 16)
    >>> swizzled_offset(128, 0, 4), swizzled_offset(0, 4, 8)
    (512, 512)
    """
    i, j = np.asarray(i), np.asarray(j)
    for what, v in (("i", i), ("j", j)):
        if v.dtype.kind not in "iu":
            raise TypeError(f"{what} must be integer indices, got dtype {v.dtype}")
        if v.size and int(v.min()) < 0:
            raise ValueError(f"{what} must be >= 0")
    ctiles = -(-size_arg(cols, "cols") // SCALE_TILE[1])
    off = ((i // 128) * ctiles + j // 4) * 512 + (i % 32) * 16 + ((i % 128) // 32) * 4 + j % 4
    return int(off) if off.ndim == 0 else off


def swizzle_scales(scales) -> np.ndarray:
    """Scale matrix ``(rows, cols)`` to the flat swizzled 128x4-tile layout of cuBLASLt.

    Rows are zero-padded to a multiple of 128 and columns to a multiple of 4
    (the padding holds zero bytes, as TE and torchao allocate it); the result
    has ``ceil(rows/128) * 128 * ceil(cols/4) * 4`` entries of the input dtype.

    Examples
    --------
    >>> import numpy as np
    >>> s = np.arange(8, dtype=np.uint8).reshape(2, 4)
    >>> flat = swizzle_scales(s)
    >>> flat.shape, flat[:4].tolist(), flat[16:20].tolist()
    ((512,), [0, 1, 2, 3], [4, 5, 6, 7])
    """
    s = np.asarray(scales)
    if s.ndim != 2:
        raise ValueError(f"scales must be a 2-D (rows, K blocks) matrix, got shape {s.shape}")
    rows, cols = s.shape
    rt, ct = -(-rows // 128), -(-cols // 4)
    padded = np.zeros((rt * 128, ct * 4), dtype=s.dtype)
    padded[:rows, :cols] = s
    # (row tile, 4 sub-rows of 32, 32, col tile, 4) -> (row tile, col tile, 32, 4 sub-rows, 4)
    t = padded.reshape(rt, 4, 32, ct, 4).transpose(0, 3, 2, 1, 4)
    return np.ascontiguousarray(t).reshape(-1)


def unswizzle_scales(flat, rows: int, cols: int) -> np.ndarray:
    """Inverse of :func:`swizzle_scales`: the ``(rows, cols)`` matrix (padding dropped).

    Examples
    --------
    >>> import numpy as np
    >>> s = np.arange(6, dtype=np.uint8).reshape(3, 2)
    >>> unswizzle_scales(swizzle_scales(s), 3, 2).tolist()
    [[0, 1], [2, 3], [4, 5]]
    """
    f = np.asarray(flat)
    rows, cols = size_arg(rows, "rows"), size_arg(cols, "cols")
    rt, ct = -(-rows // 128), -(-cols // 4)
    if f.ndim != 1 or f.size != rt * ct * 512:
        raise ValueError(f"a swizzled buffer for ({rows}, {cols}) scales has {rt * ct * 512} entries "
                         f"(rows padded to 128, columns to 4), got shape {f.shape}")
    t = f.reshape(rt, ct, 32, 4, 4).transpose(0, 3, 2, 1, 4)
    return np.ascontiguousarray(t.reshape(rt * 128, ct * 4)[:rows, :cols])


# ----------------------------------------------------------------------------- MXINT8 bytes
def int8_from_mxint8(codes) -> np.ndarray:
    """Sign-magnitude :data:`~fp8emu.scaling.MXINT8` codes to the two's-complement int8 of OCP MX.

    Examples
    --------
    >>> import numpy as np
    >>> int8_from_mxint8(np.array([0x01, 0x81, 0x7F], np.uint8)).tolist()
    [1, -1, 127]
    """
    c = _codes(codes, 8)
    mag = (c & 0x7F).astype(np.int16)
    return np.where(c & 0x80, -mag, mag).astype(np.int8)


def mxint8_from_int8(values) -> np.ndarray:
    """Two's-complement int8 (``k``, value ``k / 64``) to MXINT8 codes; -128 is rejected.

    Examples
    --------
    >>> import numpy as np
    >>> mxint8_from_int8(np.array([1, -1, 127], np.int8)).tolist()
    [1, 129, 127]
    """
    v = np.asarray(values)
    if v.dtype != np.int8:
        raise TypeError(f"values must be int8, got dtype {v.dtype}")
    if np.any(v == -128):
        raise ValueError("MXINT8 elements are symmetric: -128 is not accepted")
    k = v.astype(np.int16)
    return np.where(k < 0, 0x80 | -k, k).astype(np.uint8)


# ----------------------------------------------------------------------------- ScaledTensor buffers
def _k_major(t: ScaledTensor):
    """(codes as rows x K, per-row scale codes rows x K-blocks, block) of a 2-D block-scaled tensor."""
    if len(t.shape) != 2:
        raise ValueError(f"kernel buffers are for 2-D tensors, got shape {t.shape}")
    if t.scale_codes is None and t.block_scale_codes is None:
        raise ValueError("kernel buffers need an MX or NVFP4 ScaledTensor (with scale_codes or "
                         "block_scale_codes)")
    sc = t.scale_codes if t.scale_codes is not None else t.block_scale_codes
    k_ax = t.axis
    other = 1 - k_ax
    kblock = t.block[k_ax]
    # 2-D tiles (32x32 MX, 16x16 NVFP4): each row of the tile shares the tile's scale
    per_row = expand(sc, tuple(t.block[d] if d == other else 1 for d in range(2)),
                     tuple(t.shape[d] if d == other else sc.shape[d] for d in range(2)))
    codes = t.codes
    if k_ax == 0:
        codes, per_row = codes.T, per_row.T
    return np.ascontiguousarray(codes), np.ascontiguousarray(per_row), kblock


def export_kernel_buffers(t: ScaledTensor) -> dict:
    """The buffers a cuBLASLt block-scaled GEMM receives for a 2-D MX or NVFP4 tensor.

    The data is K-major: rows are M for A (blocks along axis 1) and N for B
    (blocks along axis 0, so B's buffer is ``B.T``, cuBLASLt's "TN" layout).

    Returns
    -------
    dict
        ``data``: uint8 rows x K codes, packed for 4- and 6-bit elements
        (:func:`pack`); int8 two's complement for MXINT8;
        ``scales``: the swizzled uint8 scale codes (:func:`swizzle_scales`);
        ``rows``, ``k``, ``block`` (elements per scale along K), ``fmt``
        (the element Format, ``"nvfp4"`` for NVFP4), ``k_axis``,
        ``block_shape`` (the tensor's own block, e.g. ``(16, 16)`` for 2-D
        tiles, whose scales the buffer repeats per row), ``recipe``; for
        NVFP4 also ``global_scale`` (``S_enc``), ``global_amax`` (may be
        None) and ``scale_max``.  ``import_kernel_buffers(**buffers)``
        rebuilds a tensor equal to ``t`` in every field.

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> t = fp8emu.quantize_nvfp4(np.ones((2, 32)))
    >>> buf = export_kernel_buffers(t)
    >>> buf["data"].shape, buf["scales"].shape
    ((2, 16), (512,))
    """
    codes, per_row, kblock = _k_major(t)
    if t.fmt == MXINT8:
        data = int8_from_mxint8(codes)
    else:
        data = pack(codes, t.fmt.bits if t.fmt.bits in (4, 6) else 8)
    nvfp4 = t.block_scale_codes is not None
    out = {"data": data, "scales": swizzle_scales(per_row), "rows": codes.shape[0],
           "k": codes.shape[1], "block": kblock, "fmt": "nvfp4" if nvfp4 else t.fmt, "k_axis": t.axis,
           "block_shape": tuple(t.block), "recipe": t.recipe}
    if nvfp4:
        out["global_scale"] = t.global_scale
        out["global_amax"] = t.global_amax
        out["scale_max"] = t.scale_max
    return out


def import_kernel_buffers(data, scales, *, fmt, k: int, block: int | None = None, k_axis: int = 1,
                          global_scale=None, global_amax=None, scale_max=None, block_shape=None, recipe=None,
                          rows=None) -> ScaledTensor:
    """Rebuild a 2-D MX or NVFP4 :class:`ScaledTensor` from kernel buffers.

    Parameters
    ----------
    data : ndarray
        rows x K codes as the kernel holds them: packed bytes for 4/6-bit
        formats, int8 for MXINT8 (``fmt="int8"``), uint8 otherwise.
    scales : ndarray of unsigned integers
        Swizzled scale codes (E8M0 for MX, UE4M3 for NVFP4), each below 256
        (below 0x80 for NVFP4); signed or float arrays are a TypeError.
    fmt : str or Format
        Element format; ``"nvfp4"`` for NVFP4 (E2M1 with E4M3 scales).
    k : int
        K (needed to undo FP6/FP4 packing and the scale padding).
    block : int, optional
        Elements per scale (default 32 for MX, 16 for NVFP4).
    k_axis : {1, 0}
        1: the tensor is rows x K (operand A); 0: it is K x rows (operand B),
        returned transposed back to (K, N).
    global_scale, global_amax : float, optional
        NVFP4 only: ``S_enc`` (required) and the tensor amax.
    scale_max : {448, 256}, optional
        NVFP4 only: the block-scale target ``S_enc`` was made for (default 448).
    block_shape : tuple of 2 ints, optional
        The tensor's block (as :func:`export_kernel_buffers` gives it): for
        2-D tiles (``(16, 16)``, ``(32, 32)``) the per-row scales must repeat
        each tile's scale, and the tensor is rebuilt with one scale per tile.
    recipe : str, optional
        Name recorded in the tensor (default ``"mx-codes"`` / ``"nvfp4-codes"``).
    rows : int, optional
        Expected rows (checked against ``data``).

    Examples
    --------
    >>> import numpy as np, fp8emu
    >>> t = fp8emu.quantize_mx(np.arange(64.0).reshape(2, 32), "e2m1fn")
    >>> b = export_kernel_buffers(t)
    >>> u = import_kernel_buffers(b["data"], b["scales"], fmt="e2m1fn", k=32)
    >>> bool(np.array_equal(u.codes, t.codes))
    True
    """
    nvfp4 = isinstance(fmt, str) and fmt == "nvfp4"
    if not is_integer(k_axis) or k_axis not in (0, 1):
        raise ValueError(f"k_axis must be 0 or 1, got {k_axis!r}")
    k = size_arg(k, "k", minimum=1)
    arr = np.asarray(data)
    if nvfp4:
        bits, elem = 4, get_format("e2m1fn")
    elif isinstance(fmt, str) and fmt in ("int8", "mxint8"):
        bits, elem = 8, MXINT8
    else:
        elem = get_format(fmt)
        bits = elem.bits if elem.bits in (4, 6) else 8
    if elem == MXINT8:
        codes = mxint8_from_int8(arr)
    else:
        codes = unpack(arr, bits)
    if codes.ndim != 2 or codes.shape[1] != k:
        raise ValueError(f"data unpack to shape {codes.shape}, expected (rows, {k})")
    if rows is not None and size_arg(rows, "rows") != codes.shape[0]:
        raise ValueError(f"data hold {codes.shape[0]} rows, rows={rows} was given")
    rows = codes.shape[0]
    block = int_arg(block, "block", minimum=1) if block is not None else (NVFP4_BLOCK if nvfp4 else 32)
    # the scale codes follow the same rule as every raw code: unsigned integers the format holds
    # (E8M0: any byte; UE4M3: sign bit 0, checked by nvfp4_from_codes), never wrapped to uint8
    sc = unswizzle_scales(code_array(scales, 256, "scales", held="one byte per scale code"),
                          rows, -(-k // block))
    if k_axis == 0:
        codes, sc = codes.T, sc.T
    axis = 1 if k_axis == 1 else 0
    if nvfp4:
        if global_scale is None:
            raise ValueError("NVFP4 buffers need global_scale (S_enc)")
        t = nvfp4_from_codes(codes, sc, global_scale, axis=axis, global_amax=global_amax,
                             scale_max=448 if scale_max is None else scale_max)
    else:
        if scale_max is not None or global_amax is not None:
            raise ValueError("scale_max and global_amax apply to NVFP4 buffers (fmt='nvfp4')")
        t = mx_from_codes(codes, sc, elem, axis=axis, block=block)
    if block_shape is not None:
        t = _tiled(t, block_shape, block)
    if recipe is not None:
        if not isinstance(recipe, str):
            raise TypeError(f"recipe must be a str, got {recipe!r}")
        t = dataclasses.replace(t, recipe=recipe)
    return t


def _tiled(t: ScaledTensor, block_shape, kblock) -> ScaledTensor:
    """``t`` (one scale per ``kblock`` along its axis) with one scale per ``block_shape`` tile."""
    if (not isinstance(block_shape, (tuple, list)) or len(block_shape) != 2
            or any(not is_integer(b) or b < 1 for b in block_shape)):
        raise ValueError(f"block_shape must be two positive ints, got {block_shape!r}")
    bs = tuple(int(b) for b in block_shape)
    if bs[t.axis] != kblock:
        raise ValueError(f"block_shape {bs} has {bs[t.axis]} along K, the buffers' block is {kblock}")
    if bs == t.block:
        return t
    other = 1 - t.axis
    step = bs[other]
    take = [slice(None), slice(None)]
    take[other] = slice(None, None, step)
    take = tuple(take)
    fields = {}
    for name in ("scale", "scale_inv", "scale_codes", "block_scale_codes"):
        v = getattr(t, name)
        if v is None:
            continue
        tile = v[take]
        if not np.array_equal(expand(tile, tuple(step if d == other else 1 for d in range(2)), v.shape),
                              v, equal_nan=v.dtype.kind == "f"):
            raise ValueError(f"the per-row scales do not repeat one scale per {bs} tile")
        fields[name] = np.ascontiguousarray(tile)
    return dataclasses.replace(t, block=bs, **fields)
