"""fp8emu.torch: torch tensors in, torch tensors of the natural dtype out (needs torch).

Expectations come from torch itself (its own casts and dtypes) and from the NumPy API's results,
which the rest of the suite proves; these tests check the conversion, never the numerics again.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fp8emu  # noqa: E402
import fp8emu.torch as ft  # noqa: E402

X = torch.linspace(-500, 500, 64 * 4, dtype=torch.float32).reshape(4, 64)


def test_encode_and_decode_round_trip_as_torch_dtypes():
    codes = ft.encode(X, "e4m3fn", profile="torch-cpu")
    assert codes.dtype == torch.float8_e4m3fn and codes.shape == X.shape
    # torch's own cast gives the same bits (torch-cpu is proven against it elsewhere)
    assert torch.equal(codes.view(torch.uint8), X.to(torch.float8_e4m3fn).view(torch.uint8))
    back = ft.decode(codes)                                   # the dtype says the format
    assert back.dtype == torch.float32 and torch.equal(back, codes.float())
    assert ft.decode(codes, dtype=torch.bfloat16).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="float8_e4m3fn are not e5m2 codes"):
        ft.decode(codes, "e5m2")
    assert ft.encode(X, "e5m2").dtype == torch.float8_e5m2
    assert ft.encode(X, "e2m3fn").dtype == torch.uint8          # torch has no FP6 dtype
    assert ft.encode(X.abs() + 1, "e8m0fnu", rounding="rtz").dtype == torch.float8_e8m0fnu


def test_fp4_comes_back_packed_as_float4_e2m1fn_x2():
    codes = ft.encode(X, "e2m1fn")
    assert codes.dtype == torch.float4_e2m1fn_x2 and codes.shape == (4, 32)
    flat = fp8emu.encode(X.numpy(), "e2m1fn")
    low_first = (flat[:, 0::2] | (flat[:, 1::2] << 4)).astype(np.uint8)
    assert np.array_equal(codes.view(torch.uint8).numpy(), low_first)
    assert torch.equal(ft.decode(codes), torch.from_numpy(fp8emu.decode(flat, "e2m1fn")))
    with pytest.raises(ValueError, match="last dimension must be even"):
        ft.encode(torch.ones(3), "e2m1fn")


def test_quantize_keeps_the_input_dtype():
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        q = ft.quantize(X.to(dt), "e4m3fn", saturate=True)
        assert q.dtype == dt
    assert torch.equal(ft.quantize(X, "e5m2"), torch.from_numpy(fp8emu.quantize(X.numpy(), "e5m2")))


@pytest.mark.parametrize("fn, args, codes_dtype, extra", [
    (ft.quantize_tensorwise, ("e4m3fn",), torch.float8_e4m3fn, None),
    (ft.quantize_axiswise, ("e5m2",), torch.float8_e5m2, None),
    (ft.quantize_blockwise, ("e4m3fn",), torch.float8_e4m3fn, None),
    (ft.quantize_mx, ("e4m3fn",), torch.float8_e4m3fn, ("scale_codes", torch.float8_e8m0fnu)),
    (ft.quantize_mx, ("e2m1fn",), torch.float4_e2m1fn_x2, ("scale_codes", torch.float8_e8m0fnu)),
    (ft.quantize_nvfp4, (), torch.float4_e2m1fn_x2, ("block_scale_codes", torch.float8_e4m3fn)),
])
def test_quantizers_return_torch_tensors(fn, args, codes_dtype, extra):
    t = fn(X, *args)
    assert t.codes.dtype == codes_dtype
    assert t.scale.dtype == torch.float32 and t.scale_inv.dtype == torch.float32
    if extra:
        name, dt = extra
        tensor = getattr(t, name)
        assert tensor.dtype == dt
        assert np.array_equal(tensor.view(torch.uint8).numpy(), getattr(t.scaled, name))
    assert torch.equal(t.dequantize(), torch.from_numpy(t.scaled.dequantize()))
    assert t.dequantize(torch.bfloat16).dtype == torch.bfloat16


def test_scaled_mm_with_torch_operands_bias_and_out_dtypes():
    a = torch.randn(8, 64, generator=torch.Generator().manual_seed(0)).to(torch.float8_e4m3fn)
    b = torch.randn(16, 64, generator=torch.Generator().manual_seed(1)).to(torch.float8_e4m3fn).t()
    bias = torch.randn(16, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    sa, sb = torch.tensor(0.5), torch.tensor(2.0)
    out = ft.scaled_mm(a, b, scale_a=sa, scale_b=sb, bias=bias, out_dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16 and out.shape == (8, 16)
    # the same GEMM through the NumPy API with uint8 codes and explicit formats
    want = fp8emu.scaled_mm(a.view(torch.uint8).numpy(), b.contiguous().view(torch.uint8).numpy(), a_format="e4m3fn",
                            b_format="e4m3fn", scale_a=0.5, scale_b=2.0, bias=bias.float().numpy(),
                            out_dtype="bfloat16")
    assert np.array_equal(out.view(torch.int16).numpy(), want.view(np.int16))
    fp8 = ft.scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.float8_e5m2, scale_result=torch.tensor(2.0))
    assert fp8.dtype == torch.float8_e5m2
    with pytest.raises(ValueError, match="a_format is e5m2 but a holds e4m3fn codes"):   # against the dtype
        ft.scaled_mm(a, b, a_format="e5m2")


def test_scaled_mm_equals_torch_on_the_cpu():
    # the torch-cpu-onednn preset through the adapter gives torch's own CPU _scaled_mm bits
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import record_torch_cpu_scaled_mm as rec
    if "amx_int8" not in rec._cpu_flags():
        pytest.skip("torch takes its emulated path on a CPU without AMX-INT8")
    a = torch.tensor([[5.5, 3.0] + [0.0] * 14]).to(torch.float8_e4m3fn)
    b = torch.tensor([[2.0, 1.0] + [0.0] * 14]).to(torch.float8_e4m3fn).t()
    kw = dict(scale_a=torch.tensor(1.3712345), scale_b=torch.tensor(0.0912345), out_dtype=torch.float32)
    want = torch._scaled_mm(a, b, **kw)
    got = ft.scaled_mm(a, b, accumulator="torch-cpu-onednn", **kw)
    assert torch.equal(got, want) and got.item() == 1.7514545917510986


def test_batched_and_block_scaled():
    a = torch.randn(3, 4, 32).to(torch.float8_e4m3fn)
    b = torch.randn(3, 32, 8).to(torch.float8_e4m3fn)
    out = ft.scaled_mm(a, b)
    assert out.shape == (3, 4, 8)
    for i in range(3):
        assert torch.equal(out[i], ft.scaled_mm(a[i], b[i]))
    ma = ft.quantize_mx(torch.randn(4, 64), "e2m1fn")
    mb = ft.quantize_mx(torch.randn(64, 8), "e2m1fn", axis=0)
    got = ft.block_scaled_mm(ma, mb, out_dtype=torch.float16)
    assert got.dtype == torch.float16
    assert np.array_equal(got.numpy(), fp8emu.block_scaled_mm(ma.scaled, mb.scaled, out_dtype="float16"))


def test_block_scaled_mm_takes_a_bfloat16_bias():
    ma = ft.quantize_mx(torch.randn(4, 64), "e4m3fn")
    mb = ft.quantize_mx(torch.randn(64, 8), "e4m3fn", axis=0)
    bias = torch.linspace(-2, 2, 8).to(torch.bfloat16)
    got = ft.block_scaled_mm(ma, mb, bias=bias)
    want = fp8emu.block_scaled_mm(ma.scaled, mb.scaled, bias=bias.float().numpy())
    assert np.array_equal(got.numpy(), want)
