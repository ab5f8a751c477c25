"""Packed FP4/FP6 storage, swizzled block scales and ScaledTensor kernel buffers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import fp8emu
from fp8emu import layouts as L
from fp8emu.scaling import mx_from_codes, nvfp4_from_codes


def test_fp4_every_pair_round_trips_and_low_nibble_is_first():
    a, b = np.meshgrid(np.arange(16, dtype=np.uint8), np.arange(16, dtype=np.uint8), indexing="ij")
    codes = np.stack([a.ravel(), b.ravel()], axis=-1)          # every (first, second) pair
    packed = L.pack_fp4(codes)
    assert packed.shape == (256, 1)
    # torch's Float4_e2m1fn_x2: val0 in bits 3..0, val1 in bits 7..4
    assert np.array_equal(packed[:, 0], (codes[:, 0] + 16 * codes[:, 1]).astype(np.uint8))
    assert np.array_equal(L.unpack_fp4(packed), codes)
    # 1.0 (E2M1 0b0010) then -6.0 (0b1111) -> 0xF2, as CUDA's __nv_fp4x2_e2m1{1.0f, -6.0f}
    one, m6 = fp8emu.encode(np.array([1.0, -6.0]), "e2m1fn")
    assert L.pack_fp4(np.array([one, m6], np.uint8)).tolist() == [0xF2]


def _fp6_reference(quad):
    """Bytes of four FP6 codes written out bit by bit from the documented layout."""
    a, b, c, d = (format(int(v), "06b") for v in quad)
    bits = a[:4] + b[:4] + d[:4] + c[:4] + a[4:] + b[4:] + d[4:] + c[4:]
    return [int(bits[i:i + 8], 2) for i in (0, 8, 16)]


def test_fp6_every_code_in_every_position_round_trips():
    rng = np.random.default_rng(0)
    for pos in range(4):
        quads = rng.integers(0, 64, (64, 4)).astype(np.uint8)
        quads[:, pos] = np.arange(64)
        packed = L.pack_fp6(quads.reshape(1, -1))
        assert packed.shape == (1, 192)
        assert np.array_equal(L.unpack_fp6(packed).reshape(64, 4), quads)
        ref = [byte for q in quads for byte in _fp6_reference(q)]
        assert packed.ravel().tolist() == ref
    assert np.array_equal(L.unpack(L.pack(np.arange(64, dtype=np.uint8), 6), 6), np.arange(64))


def test_pack_errors():
    with pytest.raises(ValueError, match="multiple of 2"):
        L.pack_fp4(np.zeros(3, np.uint8))
    with pytest.raises(ValueError, match="multiple of 4"):
        L.pack_fp6(np.zeros(6, np.uint8))
    with pytest.raises(ValueError, match="4-bit codes"):
        L.pack_fp4(np.array([16, 0], np.uint8))
    with pytest.raises(TypeError, match="uint8"):
        L.pack_fp6(np.zeros(4, np.int32))
    with pytest.raises(ValueError, match="bits must be"):
        L.pack(np.zeros(4, np.uint8), 5)


@pytest.mark.parametrize("rows,cols", [(1, 1), (128, 4), (130, 5), (300, 9), (64, 12)])
def test_swizzle_matches_documented_offsets(rows, cols):
    rng = np.random.default_rng(rows * 100 + cols)
    s = rng.integers(1, 255, (rows, cols)).astype(np.uint8)
    flat = L.swizzle_scales(s)
    prow, pcol = -(-rows // 128) * 128, -(-cols // 4) * 4
    assert flat.shape == (prow * pcol,)
    seen = np.zeros(flat.shape, bool)
    ctiles = pcol // 4
    for i, j in itertools.product(range(rows), range(cols)):
        # cuBLAS "1D block scaling factors layout": tiles of 128x4 in row-major tile order,
        # inside a tile offset (r % 32) * 16 + (r // 32) * 4 + c
        tile = (i // 128) * ctiles + j // 4
        r, c = i % 128, j % 4
        off = tile * 512 + (r % 32) * 16 + (r // 32) * 4 + c
        assert flat[off] == s[i, j]
        seen[off] = True
    assert np.all(flat[~seen] == 0)                 # padding is zeros
    assert np.array_equal(L.unswizzle_scales(flat, rows, cols), s)
    ii, jj = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    assert np.array_equal(flat[L.swizzled_offset(ii, jj, cols)], s)


def test_unswizzle_errors():
    with pytest.raises(ValueError, match="512 entries"):
        L.unswizzle_scales(np.zeros(100, np.uint8), 3, 2)
    with pytest.raises(ValueError, match="2-D"):
        L.swizzle_scales(np.zeros(4, np.uint8))


def test_mxint8_bytes_round_trip():
    k = np.arange(-127, 128, dtype=np.int8)
    codes = L.mxint8_from_int8(k)
    assert np.array_equal(L.int8_from_mxint8(codes), k)
    vals = fp8emu.decode(codes, fp8emu.scaling.MXINT8, dtype=np.float64)
    assert np.array_equal(vals, k / 64.0)
    with pytest.raises(ValueError, match="-128"):
        L.mxint8_from_int8(np.array([-128], np.int8))


CASES = [("mx", "e4m3fn"), ("mx", "e5m2"), ("mx", "e3m2fn"), ("mx", "e2m3fn"), ("mx", "e2m1fn"),
         ("mx", "int8"), ("nvfp4", None)]


@pytest.mark.parametrize("kind,fmt", CASES)
@pytest.mark.parametrize("k_axis", [1, 0])
def test_kernel_buffers_round_trip(kind, fmt, k_axis):
    rng = np.random.default_rng(3)
    rows, K = 130, 96
    x = rng.standard_t(3, (rows, K) if k_axis == 1 else (K, rows)).astype(np.float32)
    if kind == "mx":
        t = fp8emu.quantize_mx(x, fmt, axis=k_axis)
    else:
        t = fp8emu.quantize_nvfp4(x, axis=k_axis)
    buf = L.export_kernel_buffers(t)
    assert buf["rows"] == rows and buf["k"] == K
    bits = t.fmt.bits
    assert buf["data"].shape == (rows, K * bits // 8 if bits in (4, 6) else K)
    u = L.import_kernel_buffers(buf["data"], buf["scales"], fmt="nvfp4" if kind == "nvfp4" else fmt,
                                k=K, k_axis=k_axis, global_scale=buf.get("global_scale"),
                                global_amax=buf.get("global_amax"))
    if fmt == "int8":   # two's complement has no -0: sign-magnitude -0 comes back as +0
        assert np.array_equal(u.codes, np.where(t.codes == 0x80, 0, t.codes))
    else:
        assert np.array_equal(u.codes, t.codes)
    assert np.array_equal(u.dequantize(), t.dequantize(), equal_nan=True)


def test_kernel_buffers_2d_blocks_expand_per_row():
    x = np.random.default_rng(4).standard_normal((64, 64)).astype(np.float32)
    t = fp8emu.quantize_mx(x, "e4m3fn", block=(32, 32))
    buf = L.export_kernel_buffers(t)
    per_row = L.unswizzle_scales(buf["scales"], 64, 2)
    assert np.array_equal(per_row, np.repeat(t.scale_codes, 32, axis=0))
    u = L.import_kernel_buffers(buf["data"], buf["scales"], fmt="e4m3fn", k=64)
    assert np.array_equal(u.dequantize(), t.dequantize())
    t16 = fp8emu.quantize_nvfp4(x, fp4_2d_quantization=True)
    b16 = L.export_kernel_buffers(t16)
    assert np.array_equal(L.unswizzle_scales(b16["scales"], 64, 4), np.repeat(t16.block_scale_codes, 16, 0))


def test_from_codes_errors():
    with pytest.raises(ValueError, match="scale_codes have shape"):
        mx_from_codes(np.zeros((2, 64), np.uint8), np.zeros((2, 3), np.uint8), "e4m3fn")
    with pytest.raises(ValueError, match=r"out of range: must lie in 0\.\.15"):
        nvfp4_from_codes(np.full((1, 16), 17, np.uint8), np.zeros((1, 1), np.uint8), 1.0)
    with pytest.raises(ValueError, match="global_scale"):
        L.import_kernel_buffers(np.zeros((1, 8), np.uint8), np.zeros(512, np.uint8), fmt="nvfp4", k=16)
