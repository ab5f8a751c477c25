"""fp8emu.training.recipes: what the issue-53 mutation samples of the moved module found untested
(tests/MUTATION.md, "torch's CPU GEMM, its order and the training recipes: fresh samples").

Expectations come from the classes the recipes follow (Transformer Engine's recipe defaults at 000b637,
torchao 0.18.0's ``amax_to_scale``: ``fp8_max / max(amax, 1e-12)`` in float64, then float32, rounded down
to a power of two for the row-wise recipes) computed here with Python floats and ``math.frexp``, never
with the module's own helpers.  No torch needed."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from fp8emu.training import recipes


def test_each_recipes_defaults_are_the_followed_classes():
    """TE's DelayedScaling (margin 0, HYBRID, a 1024-step history, "max"), Float8CurrentScaling (HYBRID,
    scales not rounded to powers of two), Float8BlockScaling (E4M3, power-of-two scales), MXFP8BlockScaling
    (E4M3, 32-element blocks), NVFP4BlockScaling (RHT, stochastic rounding and 2-D weight scales all on,
    16-element blocks); DeepSeek-V3 float32 scales, the UE8M0 choice left to the stack."""
    d = recipes.TEDelayedScaling()
    assert (d.margin, d.fp8_format, d.amax_history_len, d.amax_compute_algo) == (0, "HYBRID", 1024, "max")
    c = recipes.TECurrentScaling()
    assert (c.fp8_format, c.use_power_2_scales, c.multiple, c.family) == ("HYBRID", False, 16, "fp8")
    b = recipes.TEBlockScaling()
    assert (b.fp8_format, b.use_f32_scales, b.family) == ("E4M3", False, "fp8-block")
    ds = recipes.DeepSeekV3()
    assert (ds.fp8_format, ds.use_f32_scales, ds.ue8m0_scales, ds.family) == ("E4M3", True, None, "fp8-block")
    mx = recipes.TEMXFP8BlockScaling()
    assert (mx.fp8_format, mx.multiple, mx.family) == ("E4M3", 32, "mx")
    nv = recipes.TENVFP4BlockScaling()
    assert (nv.disable_rht, nv.disable_stochastic_rounding, nv.disable_2d_quantization) == (False, False, False)
    assert (nv.multiple, nv.family) == (16, "nvfp4")
    # the named variants switch exactly one option off
    assert [(r.disable_rht, r.disable_stochastic_rounding, r.disable_2d_quantization)
            for r in (recipes.RECIPES[n] for n in ("te-nvfp4-no-rht", "te-nvfp4-no-sr", "te-nvfp4-no-2d"))] == [
        (True, False, False), (False, True, False), (False, False, True)]


def test_a_recipe_class_that_does_not_say_its_formats_or_operands_is_refused():
    """The base class leaves formats() and operand() to each recipe; its other answers are the plain ones."""
    @dataclasses.dataclass(frozen=True)
    class Bare(recipes.TrainingRecipe):
        name: str = "bare"

    r = Bare()
    with pytest.raises(NotImplementedError):
        r.formats()
    with pytest.raises(NotImplementedError):
        r.operand("input", np.ones((2, 16), np.float32), 1, "fprop")
    assert [r.split(p) for p in ("fprop", "dgrad", "wgrad")] == [False, True, True]
    assert (r.delayed(), r.shared_copies(), r.high_precision("wgrad")) == (False, False, False)
    assert r.gemm_family("fprop") == "fp8" and r.on(None) is r and r.unbound() is r


def test_block_recipes_scale_1x128_along_k_and_128x128_weights():
    """TE's Float8BlockScaling: 1x128 blocks along each GEMM's K for inputs and gradients (128x1 for a
    column-wise copy), 128x128 for weights, power-of-two scales; DeepSeek-V3's amax / 448 are not."""
    x = np.random.default_rng(61).standard_normal((256, 256)).astype(np.float32)
    te, ds = recipes.get_recipe("te-block"), recipes.get_recipe("deepseek-v3")
    assert np.shape(te.operand("input", x, 1, "fprop").scale_inv) == (256, 2)
    assert np.shape(te.operand("grad_output", x, 0, "wgrad").scale_inv) == (2, 256)
    assert np.shape(te.operand("weight", x, 1, "fprop").scale_inv) == (2, 2)
    for role, axis in (("input", 1), ("weight", 0)):
        mant_te = np.frexp(np.asarray(te.operand(role, x, axis, "fprop").scale_inv, np.float64))[0]
        mant_ds = np.frexp(np.asarray(ds.operand(role, x, axis, "fprop").scale_inv, np.float64))[0]
        assert np.all(mant_te == 0.5) and not np.all(mant_ds == 0.5)


def _torchao_multiplier(amax, pow2):
    """torchao's amax_to_scale: fl32(448 / max(amax, 1e-12)) in float64, rounded down to 2**k if pow2."""
    s = float(np.float32(448.0 / max(float(amax), 1e-12)))
    if pow2:
        m, e = math.frexp(s)                            # s = m * 2**e, 0.5 <= m < 1
        s = math.ldexp(0.5, e)
    return s


def test_torchaos_multipliers_and_the_nan_of_a_tensor_or_row_whose_amax_is_not_finite():
    x = np.random.default_rng(62).standard_normal((4, 32)).astype(np.float32) * np.float32(3.7)
    x[1] = 0.0                                          # amax 0: the 1e-12 floor
    tw = recipes.get_recipe("torchao-tensorwise").operand("input", x, 1, "fprop")
    assert float(tw.divisor) == _torchao_multiplier(np.abs(x).max(), False)
    rw = recipes.get_recipe("torchao-rowwise").operand("input", x, 1, "fprop")
    assert np.asarray(rw.divisor).reshape(-1).tolist() == [_torchao_multiplier(np.abs(r).max(), True) for r in x]
    assert rw.divisor.reshape(-1)[1] == 2.0 ** 48       # 448e12 = 1.59 * 2**48
    bad = x.copy()
    bad[2, 5], bad[3, 7] = np.nan, np.inf               # NaN amax; Inf amax gives the multiplier 0
    rw = recipes.get_recipe("torchao-rowwise").operand("input", bad, 1, "fprop")
    for got in (np.asarray(rw.divisor).reshape(-1), np.asarray(rw.scale_inv).reshape(-1)):
        assert np.isfinite(got[:2]).all() and np.isnan(got[2:]).all()
    for where in ((2, 5, np.nan), (3, 7, np.inf)):
        one = x.copy()
        one[where[0], where[1]] = where[2]
        tw = recipes.get_recipe("torchao-tensorwise").operand("input", one, 1, "fprop")
        assert np.isnan(tw.divisor) and np.isnan(tw.scale_inv)
