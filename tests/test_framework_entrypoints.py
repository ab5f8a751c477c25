"""Scaling recipes and scaled_mm take framework arrays as they are (real JAX; torch where installed)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fp8emu

jnp = pytest.importorskip("jax.numpy")

X = np.random.default_rng(3).standard_normal((32, 96)).astype(np.float32) * 7
RECIPES = {
    "tensorwise": lambda x: fp8emu.quantize_tensorwise(x, "e4m3fn"),
    "axiswise": lambda x: fp8emu.quantize_axiswise(x, "e5m2", axis=0),
    "blockwise": lambda x: fp8emu.quantize_blockwise(x, "e4m3fn", block=(1, 32)),
    "mx": lambda x: fp8emu.quantize_mx(x, "e2m1fn"),
    "nvfp4": lambda x: fp8emu.quantize_nvfp4(x),
}


@pytest.mark.parametrize("name", list(RECIPES))
def test_recipes_take_jax_arrays(name):
    want = RECIPES[name](X)
    got = RECIPES[name](jnp.asarray(X))
    np.testing.assert_array_equal(got.codes, want.codes)
    np.testing.assert_array_equal(got.scale, want.scale)


@pytest.mark.parametrize("name", list(RECIPES))
def test_recipes_take_torch_tensors(name):
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(X.copy()).requires_grad_()
    want = RECIPES[name](X)
    for src in (t, t.to(torch.bfloat16)):
        got = RECIPES[name](src)
        ref = want if src.dtype == torch.float32 else RECIPES[name](X.astype(ml_dtypes.bfloat16))
        np.testing.assert_array_equal(got.codes, ref.codes)


def _operands():
    a = fp8emu.encode(X, "e4m3fn")
    b = fp8emu.encode(X.T / 4, "e4m3fn")
    return a, b


def test_scaled_mm_takes_ml_dtypes_and_jax_fp8_operands():
    a, b = _operands()
    want = fp8emu.scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", accumulator="exact")
    got = fp8emu.scaled_mm(a.view(ml_dtypes.float8_e4m3fn), jnp.asarray(b.view(ml_dtypes.float8_e4m3fn)),
                           a_format="e4m3fn", b_format="e4m3fn", accumulator="exact")
    np.testing.assert_array_equal(got, want)


def test_scaled_mm_refuses_an_operand_of_another_format():
    a, b = _operands()
    with pytest.raises(ValueError, match="a_format is e4m3fn but a holds e5m2 codes"):
        fp8emu.scaled_mm(a.view(ml_dtypes.float8_e5m2), b, a_format="e4m3fn", b_format="e4m3fn")


def test_scaled_mm_takes_torch_float8_tensors():
    torch = pytest.importorskip("torch")
    a, b = _operands()
    want = fp8emu.scaled_mm(a, b, a_format="e4m3fn", b_format="e4m3fn", accumulator="hopper")
    ta = torch.from_numpy(a).view(torch.float8_e4m3fn)
    tb = torch.from_numpy(b).view(torch.float8_e4m3fn)
    got = fp8emu.scaled_mm(ta, tb, a_format="e4m3fn", b_format="e4m3fn", accumulator="hopper")
    np.testing.assert_array_equal(got, want)
