"""The self-audit of the torch adapter (``fp8emu.torch`` outside the study).  Each test pins
one defect the audit found; every one failed before its fix.  The audit's list of checks is
in ``tests/AUDIT.md`` (and ``tests/MUTATION.md`` keeps the mutation record).

Expectations come from live torch (its own float8 / e8m0 conversions and ``_scaled_mm``), exact
arithmetic with ``fractions.Fraction``, or spec constants; never from the code under test.
"""

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import fp8emu


# ----------------------------------------------------------------------------- bfloat16 scales
def test_a_bfloat16_scale_is_a_float_scale_in_every_function_that_takes_scales():
    """A bfloat16 scale (torch's CPU ``_scaled_mm`` takes one on its oneDNN path) was refused with
    'must be a float or an array of floats (integer or float dtype), got ... bfloat16'."""
    bf = np.array(0.375, ml_dtypes.bfloat16)                   # 3/8: exact in bfloat16 and float32
    a = np.full((2, 16), 0x38, np.uint8)                       # E4M3 1.0
    b = np.full((16, 2), 0x40, np.uint8)                       # E4M3 2.0
    for acc in ("exact", "torch-cpu-emulated", "torch-cpu-onednn"):
        out = fp8emu.scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", scale_a=bf, scale_b=1.0,
                               accumulator=acc)
        assert out.tolist() == [[float(Fraction(3, 8) * 32)] * 2] * 2
    t = fp8emu.quantize_tensorwise(np.array([1.0, 2.0]), "e4m3fn", scale=bf)
    assert float(t.scale) == 0.375
    with pytest.raises(TypeError, match=r"scale_a must be .*bfloat16 dtype\), got dtype bool"):
        fp8emu.scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", scale_a=np.array(True))


def test_a_global_scale_of_two_numbers_is_one_clear_error():
    """``nvfp4_from_codes(..., global_scale=<2 numbers>)`` raised numpy's 'truth value of an array ... is
    ambiguous'."""
    t = fp8emu.quantize_nvfp4(np.ones((1, 16)))
    with pytest.raises(ValueError, match=r"global_scale must be one number .*shape \(2,\)"):
        fp8emu.scaling.nvfp4_from_codes(t.codes, t.block_scale_codes, np.ones(2))
    with pytest.raises(ValueError, match=r"global_scale must be finite and > 0 in float32"):
        fp8emu.scaling.nvfp4_from_codes(t.codes, t.block_scale_codes, 1e39)


def test_torch_takes_the_bfloat16_scale_as_fp8emu_does():
    torch = pytest.importorskip("torch")
    ft = pytest.importorskip("fp8emu.torch")
    from fp8emu.gemm.torch_cpu import cpu_path
    if cpu_path("e4m3fn", "e4m3fn", tensorwise=True) != "torch-cpu-onednn":
        pytest.skip("torch takes a bfloat16 scale on its oneDNN path only (an AMX-INT8 CPU)")
    torch.manual_seed(0)
    a = (torch.randn(8, 64) * 4).to(torch.float8_e4m3fn)
    b = (torch.randn(16, 64) * 4).to(torch.float8_e4m3fn).t()
    sa, sb = torch.tensor(0.7, dtype=torch.bfloat16), torch.tensor(1.3)
    ref = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.float32)
    got = ft.scaled_mm(a, b, scale_a=sa, scale_b=sb, accumulator="torch-cpu-onednn")
    assert torch.equal(ref.view(torch.int32), got.view(torch.int32))


# ----------------------------------------------------------------------------- block_scaled_mm: torch dtypes
def _exact_mx(codes_a, sc_a, codes_b, sc_b, torch):
    """Exact sum of products of torch-decoded elements and E8M0 scales (blocks of 32 along K)."""
    va, vb = codes_a.to(torch.float64).tolist(), codes_b.to(torch.float64).tolist()
    sa, sb = sc_a.to(torch.float64).tolist(), sc_b.to(torch.float64).tolist()
    M, K, N = len(va), len(va[0]), len(vb[0])
    return [[float(sum(Fraction(va[m][k]) * Fraction(sa[m][k // 32]) * Fraction(vb[k][n]) * Fraction(sb[k // 32][n])
                       for k in range(K))) for n in range(N)] for m in range(M)]


def test_block_scaled_mm_takes_the_torch_dtypes_its_quantizers_return():
    """``fp8emu.torch.block_scaled_mm`` refused float8 / float4_e2m1fn_x2 codes and float8_e8m0fnu /
    float8_e4m3fn scales ('codes must be unsigned integers ... got dtype float8_e4m3fn'), the dtypes of
    the TorchScaled its own quantizers return, and needed a_format although the dtype says it (as
    ``scaled_mm`` reads it)."""
    torch = pytest.importorskip("torch")
    ft = pytest.importorskip("fp8emu.torch")
    torch.manual_seed(0)
    x, w = torch.randn(4, 64), torch.randn(64, 8)
    qa, qb = ft.quantize_mx(x, "e4m3fn"), ft.quantize_mx(w, "e4m3fn", axis=0)
    assert qa.codes.dtype == torch.float8_e4m3fn and qa.scale_codes.dtype == torch.float8_e8m0fnu
    got = ft.block_scaled_mm(qa.codes, qb.codes, a_scales=qa.scale_codes, b_scales=qb.scale_codes,
                             accumulator="exact")
    exact = _exact_mx(qa.codes, qa.scale_codes, qb.codes, qb.scale_codes, torch)
    assert got.tolist() == torch.tensor(exact, dtype=torch.float32).tolist()
    # FP4 codes packed two per byte, as torch holds them
    fa, fb = ft.quantize_mx(x, "e2m1fn"), ft.quantize_mx(w, "e2m1fn", axis=0)
    assert fa.codes.dtype == torch.float4_e2m1fn_x2
    ref = ft.block_scaled_mm(fa, fb, accumulator="exact")
    for kw in ({}, {"a_format": "e2m1fn", "b_format": "e2m1fn"}):
        got = ft.block_scaled_mm(fa.codes, fb.codes, a_scales=fa.scale_codes, b_scales=fb.scale_codes,
                                 accumulator="exact", **kw)
        assert torch.equal(got, ref)
    # NVFP4: FP4 codes with float8_e4m3fn block scales and S_enc are NVFP4
    na, nb = ft.quantize_nvfp4(x), ft.quantize_nvfp4(w, axis=0)
    got = ft.block_scaled_mm(na.codes, nb.codes, a_scales=na.block_scale_codes, b_scales=nb.block_scale_codes,
                             a_global_scale=na.global_scale, b_global_scale=nb.global_scale, accumulator="exact")
    raw = fp8emu.block_scaled_mm(
        fp8emu.layouts.unpack_fp4(na.codes.view(torch.uint8).numpy()), nb.scaled.codes, a_format="nvfp4",
        b_format="nvfp4", a_scales=na.block_scale_codes.view(torch.uint8).numpy(),
        b_scales=nb.block_scale_codes.view(torch.uint8).numpy(), a_global_scale=float(na.global_scale),
        b_global_scale=float(nb.global_scale), accumulator="exact")
    assert got.numpy().tolist() == raw.tolist()


def test_block_scaled_mm_refuses_a_dtype_that_contradicts_the_format_or_the_scale_kind():
    torch = pytest.importorskip("torch")
    ft = pytest.importorskip("fp8emu.torch")
    qa, qb = ft.quantize_mx(torch.ones(2, 32), "e4m3fn"), ft.quantize_mx(torch.ones(32, 2), "e4m3fn", axis=0)
    with pytest.raises(ValueError, match=r"a_format is e5m2 but a holds e4m3fn codes"):
        ft.block_scaled_mm(qa.codes, qb.codes, a_format="e5m2", a_scales=qa.scale_codes, b_scales=qb.scale_codes)
    with pytest.raises(ValueError, match=r"a_scales of dtype float8_e4m3fn are not MX scale codes"):
        ft.block_scaled_mm(qa.codes, qb.codes, a_scales=qa.scale_codes.view(torch.uint8).view(torch.float8_e4m3fn),
                           b_scales=qb.scale_codes)
    with pytest.raises(TypeError, match=r"a_scales must be unsigned integers .*float8_e8m0fnu \(MX\)"):
        ft.block_scaled_mm(qa.codes, qb.codes, a_scales=qa.scale_codes.float(), b_scales=qb.scale_codes)
    with pytest.raises(TypeError, match=r"a as uint8 codes needs a_format"):
        ft.block_scaled_mm(qa.codes.view(torch.uint8), qb.codes, a_scales=qa.scale_codes, b_scales=qb.scale_codes)


# ----------------------------------------------------------------------------- diagnostics
@pytest.mark.parametrize("recipe", ["te-current", "te-mxfp8"])
def test_the_fprop_error_of_a_layer_with_a_bias_compares_like_with_like(recipe):
    """The fprop GEMM adds the bias, but its reference was the product alone: a layer with a bias of 10
    reported gemm_rel_err 16.7 for an output 0.2 % off."""
    torch = pytest.importorskip("torch")
    ft = pytest.importorskip("fp8emu.torch")
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 64)
    with torch.no_grad():
        lin.bias.fill_(10.0)
    model = torch.nn.Sequential(lin)
    ft.emulate(model, recipe, "exact", diagnostics=True)
    x = torch.randn(32, 64)
    y = model(x).detach().double()
    ref = x.double() @ lin.weight.detach().double().t() + lin.bias.detach().double()
    want = (torch.linalg.norm(y - ref) / torch.linalg.norm(ref)).item()
    rows = [r for r in ft.diagnostics(model) if r["pass"] == "fprop"]
    assert len(rows) == 2 and 0 < want < 0.05
    assert all(r["gemm_rel_err"] == pytest.approx(want, rel=1e-12) for r in rows)


# ----------------------------------------------------------------------------- dtypes and flags of the layers
def test_an_integer_input_is_refused_not_truncated():
    """An int64 input ran the FP8 GEMMs and came back as int64, every value truncated toward zero
    (nn.Linear refuses it)."""
    torch = pytest.importorskip("torch")
    ft = pytest.importorskip("fp8emu.torch")
    model = torch.nn.Sequential(torch.nn.Linear(32, 32))
    ft.emulate(model, "te-current", "exact")
    with pytest.raises(TypeError, match=r"layer '0': input must be a float32, .* got torch.int64"):
        model(torch.ones(16, 32, dtype=torch.int64))
    sdpa = ft.fp8_sdpa("fa3-fp8")
    q = torch.ones(1, 2, 16, 32, dtype=torch.int64)
    with torch.no_grad(), pytest.raises(TypeError, match=r"query must be a float32, .* got torch.int64"):
        sdpa(q, q, q)


def test_fp8_sdpa_reads_is_causal_and_enable_gqa_as_torch_does():
    """``is_causal="no"`` ran causal attention (bool("no") is True); ``enable_gqa`` was ignored, so two KV
    heads for four query heads ran GQA where torch refuses; a batch mismatch raised an IndexError and
    an empty batch numpy's 'need at least one array to stack'."""
    torch = pytest.importorskip("torch")
    ft = pytest.importorskip("fp8emu.torch")
    F = torch.nn.functional
    sdpa = ft.fp8_sdpa("fa3-fp8")
    torch.manual_seed(0)
    q, k = torch.randn(1, 4, 16, 32), torch.randn(1, 2, 16, 32)
    with torch.no_grad():
        with pytest.raises(RuntimeError):
            F.scaled_dot_product_attention(q, k, k)                     # torch: GQA must be asked for
        with pytest.raises(ValueError, match=r"pass enable_gqa=True"):
            sdpa(q, k, k)
        out = sdpa(q, k, k, enable_gqa=True)
        ref = F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
        assert out.shape == ref.shape and 0 < float((out - ref).abs().max()) < 0.2
        with pytest.raises(TypeError, match=r"is_causal must be True or False, got 'no'"):
            sdpa(q, q, q, is_causal="no")
        with pytest.raises(ValueError, match=r"share their leading \(batch\) dimensions"):
            sdpa(torch.randn(2, 4, 16, 32), q, q)
        empty = torch.randn(0, 4, 16, 32)
        assert sdpa(empty, empty, empty).shape == F.scaled_dot_product_attention(empty, empty, empty).shape


# ----------------------------------------------------------------------------- recipe and stack fields
def test_recipe_and_stack_fields_are_checked_as_they_are_used():
    """``TEBlockScaling(use_f32_scales="no")`` quantized with float32 scales and
    ``TENVFP4BlockScaling(disable_rht="x")`` without the RHT (truthy strings); E5M2 was refused by
    TEDelayedScaling only, although TE's Float8CurrentScaling, Float8BlockScaling and MXFP8BlockScaling
    assert "Pure E5M2 training is not supported" too; a bad format name waited for the first forward;
    ``Stack(dtype="float16")`` ran float32 activations with float16 outputs."""
    pytest.importorskip("torch")
    ft = pytest.importorskip("fp8emu.torch")
    for cls, field in ((ft.TEBlockScaling, "use_f32_scales"), (ft.TENVFP4BlockScaling, "disable_rht"),
                       (ft.TECurrentScaling, "use_power_2_scales"), (ft.DeepSeekV3, "ue8m0_scales")):
        with pytest.raises(TypeError, match=rf"{cls.__name__}: {field} must be True or False"):
            cls(**{field: "no"})
    for cls in (ft.TEDelayedScaling, ft.TECurrentScaling, ft.TEBlockScaling, ft.TEMXFP8BlockScaling):
        with pytest.raises(ValueError, match=r"TE refuses pure E5M2"):
            cls(fp8_format="E5M2")
        with pytest.raises(ValueError, match=r"unknown fp8_format 'E9'"):
            cls(fp8_format="E9")
        assert cls(fp8_format="HYBRID").formats()["grad_output"] == "e5m2"
    with pytest.raises(TypeError, match=r"name must be a non-empty string"):
        ft.TECurrentScaling(name="")
    assert ft.TorchaoFloat8("rowwise").name == "torchao-rowwise"
    with pytest.raises(ValueError, match=r"dtype must be 'bfloat16' or 'float32', got 'float16'"):
        ft.Stack("s", "d", "hopper", "hopper", dtype="float16")


# ----------------------------------------------------------------------------- conversions and devices
def test_to_torch_range_checks_codes_and_names_a_device_it_cannot_use():
    """``to_torch(np.array([0xFF]), fmt="e2m3fn")`` returned a uint8 tensor holding a code FP6 does not
    have; ``device="cuda"`` without CUDA raised torch's AssertionError, ``device="gpu"`` its RuntimeError;
    a meta tensor raised 'Cannot copy out of meta tensor'."""
    torch = pytest.importorskip("torch")
    ft = pytest.importorskip("fp8emu.torch")
    with pytest.raises(ValueError, match=r"codes out of range: must lie in 0\.\.63"):
        ft.to_torch(np.array([0xFF], np.uint8), fmt="e2m3fn")
    assert ft.to_torch(np.array([0x3F], np.uint8), fmt="e2m3fn").tolist() == [63]
    with pytest.raises(ValueError, match=r"device 'gpu' is not a torch device"):
        ft.to_torch(np.ones(2, np.float32), device="gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"device 'cuda': this torch .* has no CUDA device"):
            ft.to_torch(np.ones(2, np.float32), device="cuda")
    with pytest.raises(TypeError, match=r"x is a meta tensor"):
        ft.encode(torch.ones(4, device="meta"), "e4m3fn")


def test_a_nan_input_gives_nan_diagnostics_without_numpy_warnings():
    """torchao's tensor-wise scale of a tensor holding a NaN is NaN; its diagnostics row leaked numpy's
    'All-NaN slice encountered' RuntimeWarning twice per pass."""
    torch = pytest.importorskip("torch")
    ft = pytest.importorskip("fp8emu.torch")
    import warnings
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    ft.emulate(model, "torchao-tensorwise", "cpu", diagnostics=True)
    x = torch.randn(32, 64)
    x[0, 0] = float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model(x).sum().backward()
    row = ft.diagnostics(model)[0]
    assert (row["pass"], row["tensor"], row["n_nonfinite"]) == ("fprop", "input", 1)
    assert np.isnan(row["scale"]) and np.isnan(row["gemm_rel_err"])


# ----------------------------------------------------------------------------- a Linear used twice
def test_a_linear_used_twice_is_emulated_at_both_uses():
    """``Sequential(lin, ReLU, lin)``: torch's ``named_modules`` lists the shared layer once, and the second
    use stayed an ``nn.Linear`` running in full precision while the report said the layer was emulated.
    Both uses are now one emulated layer; the output equals that of two separate emulated copies (a
    stateless recipe, so the shared layer's two calls and the copies' one call each compute alike)."""
    torch = pytest.importorskip("torch")
    import copy

    import fp8emu.torch as ft
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 32)
    shared = torch.nn.Sequential(lin, torch.nn.ReLU(), lin)
    apart = torch.nn.Sequential(copy.deepcopy(lin), torch.nn.ReLU(), copy.deepcopy(lin))
    rep = ft.emulate(shared, "te-current", gpu="exact")
    ft.emulate(apart, "te-current", gpu="exact")
    assert shared[0] is shared[2] and type(shared[2]).__name__ == "EmulatedLinear"
    assert list(rep.swapped) == ["0"] and "also used as '2'" in rep.swapped["0"]
    x = torch.randn(16, 32)
    with torch.no_grad():
        y, want = shared(x), apart(x)
        half = lin(torch.relu(shared[0](x)))                  # the old result: second use in full precision
    assert torch.equal(y, want) and not torch.equal(y, half)
