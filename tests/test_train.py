"""The FP8 training demo: HYBRID formats, delayed scaling, counts, and parity with float32."""

import importlib.util

import numpy as np
import pytest

from fp8emu.lab import train

pytestmark = pytest.mark.skipif(importlib.util.find_spec("fp8emu.scaling") is None,
                                reason="needs fp8emu.scaling")


def test_task_is_seeded_and_balanced():
    a, b = train.make_task(600, 200, seed=3), train.make_task(600, 200, seed=3)
    assert np.array_equal(a["x_train"], b["x_train"]) and a["x_train"].dtype == np.float32
    assert np.bincount(a["y_train"], minlength=10).min() > 20
    with pytest.raises(ValueError, match="dataset"):
        train.make_task(dataset="mnist")


def test_mlp_uses_hybrid_formats_and_same_init():
    m32 = train.MLP([8, 16, 4], precision="float32", seed=1)
    m8 = train.MLP([8, 16, 4], precision="fp8", seed=1)
    assert all(np.array_equal(a, b) for a, b in zip(m32.W, m8.W))
    assert [q["x"].fmt for q in m8.q] == ["e4m3fn", "e4m3fn"]
    assert [q["g"].fmt for q in m8.q] == ["e5m2", "e5m2"]
    with pytest.raises(ValueError, match="precision"):
        train.MLP([2, 2], precision="fp16")


def test_fp8_forward_is_the_product_of_e4m3_operands():
    import fp8emu
    m = train.MLP([8, 4], precision="fp8", seed=0)
    x = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    logits, _ = m.forward(x)
    # first call: delayed scale is 1 (empty history), so operands are plain e4m3fn casts
    xq = fp8emu.quantize(x, "e4m3fn", saturate=True).astype(np.float32)
    wq = fp8emu.quantize(m.W[0], "e4m3fn", saturate=True).astype(np.float32)
    assert np.allclose(logits, xq @ wq, rtol=1e-6, atol=1e-6)


def test_fp8_training_tracks_float32():
    res = train.compare(steps=60, n_train=1024, n_test=512)
    f32, f8 = res["float32"], res["fp8"]
    assert f32["loss"][-1] < f32["loss"][0] / 3
    assert abs(f8["final_loss"] - f32["final_loss"]) < 0.25 * f32["final_loss"] + 0.05
    assert abs(f8["accuracy"] - f32["accuracy"]) < 0.05
    for role in "xwg":
        assert 0 <= f8[f"{role}_overflow"] < f8[f"{role}_count"]
        assert 0 <= f8[f"{role}_underflow"] < f8[f"{role}_count"]
    # every step quantizes one batch of activations per layer: 60 steps x 128 rows x (32 + 128 + 128)
    assert f8["x_count"] == 60 * 128 * (32 + 128 + 128)
    assert "fp8" in train.summary(res)
