"""fp8emu.training's recipes on their own, without torch: what each recipe object says and returns, checked
against the classes it follows (Transformer Engine's recipe formats, torchao's Float8LinearConfig) and
ml_dtypes decodes, not against fp8emu's codec.  The recipes' numbers in training are
tests/test_torch_emulate.py's."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import fp8emu.training
from fp8emu.training import recipes, stacks

ML = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def _x(shape=(32, 64), seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# TE: HYBRID is E4M3 forward, E5M2 backward (transformer_engine/common/recipe Format.HYBRID); the block,
# MXFP8 and DeepSeek recipes default to E4M3; torchao: tensorwise E5M2 grad_output, rowwise E4M3 throughout
DESCRIBED = {
    "te-delayed": "te-delayed: input e4m3fn, weight e4m3fn, grad_output e5m2",
    "te-current": "te-current: input e4m3fn, weight e4m3fn, grad_output e5m2",
    "te-block": "te-block: input e4m3fn, weight e4m3fn, grad_output e4m3fn",
    "deepseek-v3": "deepseek-v3: input e4m3fn, weight e4m3fn, grad_output e4m3fn",
    "te-mxfp8": "te-mxfp8: input e4m3fn, weight e4m3fn, grad_output e4m3fn",
    "te-nvfp4": "te-nvfp4: input nvfp4, weight nvfp4, grad_output nvfp4",
    "torchao-tensorwise": "torchao-tensorwise: input e4m3fn, weight e4m3fn, grad_output e5m2",
    "torchao-rowwise": "torchao-rowwise: input e4m3fn, weight e4m3fn, grad_output e4m3fn",
}


@pytest.mark.parametrize("name", sorted(DESCRIBED))
def test_describe_names_each_roles_format(name):
    assert recipes.get_recipe(name).describe() == DESCRIBED[name]


@pytest.mark.parametrize("name", ["te-current", "te-delayed", "torchao-tensorwise", "torchao-rowwise", "te-block"])
def test_values_of_a_per_tensor_or_row_operand_are_its_codes_decoded(name):
    r = recipes.get_recipe(name)
    op = r.operand("input", _x(), 1, "fprop", **({"scale": np.float32(2.0)} if name == "te-delayed" else {}))
    assert op.kind == "fp8"
    want = np.asarray(op.codes, np.uint8).view(ML[op.fmt.name]).astype(np.float64)
    np.testing.assert_array_equal(op.values(), want)


def test_values_of_a_block_operand_are_its_element_codes_decoded():
    op = recipes.get_recipe("te-mxfp8").operand("input", _x(), 1, "fprop")
    assert op.kind == "block"
    want = np.asarray(op.st.codes, np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    np.testing.assert_array_equal(op.values(), want)


def test_values_of_a_high_precision_operand_are_the_values():
    hp = _x((4, 8))
    assert recipes.Operand("hp", hp=hp).values() is hp


@pytest.mark.parametrize("name", [None, 5, ""])
def test_torchao_recipe_name_is_checked_like_every_recipes(name):
    """TorchaoFloat8 fills an empty name from its granularity; any other non-string is refused, as by every
    recipe (a name is how reports and `train-study` tell recipes apart)."""
    if name == "":
        assert recipes.TorchaoFloat8("rowwise", name=name).name == "torchao-rowwise"
        return
    with pytest.raises(TypeError, match="TorchaoFloat8: name must be a non-empty string"):
        recipes.TorchaoFloat8("tensorwise", name=name)
    with pytest.raises(TypeError, match="TECurrentScaling: name must be a non-empty string"):
        recipes.TECurrentScaling(name=name)


@pytest.mark.parametrize("name", recipes.recipe_names())
def test_unbound_is_the_recipe_as_given(name):
    """``unbound()`` undoes what ``on(stack)`` set (autocast uses it when only the stack changes): every
    named recipe is unbound already; DeepSeek-V3 drops the UE8M0 choice a Blackwell stack made."""
    r = recipes.get_recipe(name)
    assert r.unbound() == r and type(r.unbound()) is type(r)
    if name == "deepseek-v3":
        assert recipes.DeepSeekV3(ue8m0_scales=True).unbound() == recipes.DeepSeekV3()


# ----------------------------------------------------------------------------- where they live
def test_training_imports_no_framework():
    """NumPy, Dask and lab code use the recipes and stacks in a Python without torch: a blocked torch
    import is not touched."""
    code = ("import sys\nsys.modules['torch'] = None\nimport fp8emu.training as t\n"
            "print(t.get_recipe('te-mxfp8').family, t.get_stack('b200').mx, "
            "sorted(m for m in ('torch', 'jax', 'dask') if sys.modules.get(m) is not None))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["mx", "blackwell-tcgen05-mxf8f6f4", "[]"]


def test_torch_adapter_re_exports_the_same_objects_and_the_old_paths_are_gone():
    pytest.importorskip("torch")
    import fp8emu.torch as ft
    for name in ("TrainingRecipe", "TEDelayedScaling", "TECurrentScaling", "TEBlockScaling", "DeepSeekV3",
                 "TEMXFP8BlockScaling", "TENVFP4BlockScaling", "TorchaoFloat8", "recipe_names", "get_recipe",
                 "Stack", "get_stack", "stack_names"):
        assert name in ft.__all__ and getattr(ft, name) is getattr(fp8emu.training, name), name
    for old in ("fp8emu.torch.recipes", "fp8emu.torch.stacks"):
        assert importlib.util.find_spec(old) is None, old


def test_unknown_names_say_what_is_accepted():
    with pytest.raises(ValueError, match="unknown recipe 'te-fp8'; accepted: te-delayed, .* or an "
                                         "fp8emu.training.TrainingRecipe"):
        recipes.get_recipe("te-fp8")
    with pytest.raises(ValueError, match="unknown gpu 'a100'; accepted: h100, h100-fast, b200, cpu, exact or "
                                         "an fp8emu.training.Stack"):
        stacks.get_stack("a100")
