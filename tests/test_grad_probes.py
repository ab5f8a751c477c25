"""fp8emu.torch.probes and the gradient study's metrics, derived independently.

The probe's GEMMs are rebuilt from hand-composed quantizers (fp8emu.scaling) and float64 NumPy
products of their dequantized values, without autograd; the metrics from exact rational arithmetic.
"""

from fractions import Fraction

import numpy as np
import pytest

from fp8emu.lab import grad_metrics as gm

torch = pytest.importorskip("torch")

from fp8emu.scaling import NVFP4Quantizer, quantize_nvfp4_te, quantize_tensorwise  # noqa: E402
from fp8emu.torch import probes  # noqa: E402


def _frac_compare(a, r):
    a = [Fraction(float(v)) for v in a]
    r = [Fraction(float(v)) for v in r]
    rr = sum(v * v for v in r)
    dd = sum((x - y) ** 2 for x, y in zip(a, r))
    aa = sum(v * v for v in a)
    ar = sum(x * y for x, y in zip(a, r))
    return {"rel_err": (float(dd / rr)) ** 0.5, "cosine": float(ar) / (float(aa) * float(rr)) ** 0.5,
            "shrink": float(sum((x - y) * y for x, y in zip(a, r)) / rr)}


def test_compare_matches_exact_arithmetic():
    rng = np.random.default_rng(5)
    a, r = rng.standard_normal(50), rng.standard_normal(50)
    got, want = gm.compare(a, r), _frac_compare(a, r)
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-12)
    assert np.isnan(gm.compare(a, np.zeros(50))["rel_err"])
    with pytest.raises(ValueError, match="shapes differ"):
        gm.compare(a, r[:3])


def test_mean_curve_and_floor_fit():
    ref = np.array([1.0, 2.0, 3.0])
    draws = [ref + d for d in (np.array([1.0, 0, 0]), np.array([-1.0, 0, 0]), np.array([0, 2.0, 0]),
                               np.array([0, -2.0, 0]))]
    # means: n=1 -> (1,0,0), n=2 -> 0, n=4 -> 0; |ref| = sqrt(14)
    got = gm.mean_curve(draws, ref, [1, 2, 4])
    assert got == pytest.approx([1 / 14 ** 0.5, 0.0, 0.0])
    ns = [1, 2, 4, 8, 16]
    b, v = gm.fit_floor(ns, [(0.09 + 0.16 / n) ** 0.5 for n in ns])
    assert (b, v) == (pytest.approx(0.3), pytest.approx(0.16))
    assert gm.fit_floor(ns, [0.5] * 5) == (pytest.approx(0.5), pytest.approx(0.0, abs=1e-12))
    assert gm.loglog_slope([1, 2, 4], [8.0, 4.0, 2.0]) == pytest.approx(-1.0)


def _ops(seed=0, m=64, k=32, n=16):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((n, k)) / 4).astype(np.float32)
    dy = (rng.standard_normal((m, n)) / 8).astype(np.float32)
    return x, w, dy


def test_layer_probe_te_current_exact_stack_by_hand():
    x, w, dy = _ops()
    got = probes.layer_passes(x, w, None, dy, "te-current", "exact")
    # te-current: per-tensor scales, E4M3 input and weight, E5M2 output gradient; the backward GEMMs
    # read the forward's codes (one scale per tensor); the exact stack sums exactly, rounds once
    deq = {name: quantize_tensorwise(a, fmt).dequantize().astype(np.float64)
           for name, a, fmt in (("x", x, "e4m3fn"), ("w", w, "e4m3fn"), ("dy", dy, "e5m2"))}
    want = {"fprop": deq["x"] @ deq["w"].T, "dgrad": deq["dy"] @ deq["w"], "wgrad": deq["dy"].T @ deq["x"]}
    for gemm in want:
        # float32 roundings of the scaled sum: within a few float32 ulps of the largest output (a
        # wrong format, scale or operand would be off by percents)
        np.testing.assert_allclose(got[gemm], want[gemm], rtol=0, atol=4e-7 * np.abs(want[gemm]).max())
    ref = probes.exact_passes(x, w, None, dy)
    np.testing.assert_allclose(ref["wgrad"], dy.astype(np.float64).T @ x.astype(np.float64), rtol=0)


def test_layer_probe_nvfp4_stochastic_draws_by_hand():
    x, w, dy = _ops(1, m=64, k=64, n=32)
    recipe = probes.get_recipe("te-nvfp4-no-rht")
    ref = probes.exact_passes(x, w, None, dy)["wgrad"]
    draws_probe, draws_hand = [], []
    for seed in range(3):
        draws_probe.append(probes.layer_passes(x, w, None, dy, recipe, "exact", seed=seed)["wgrad"])
        # wgrad = dY^T X, both quantized along the tokens; dY with stochastic rounding drawn from
        # emulate's documented generator (seed, layer index 0, step 0, pass code 2 = wgrad)
        g = quantize_nvfp4_te(dy.T, NVFP4Quantizer(stochastic_rounding=True), axis=1,
                              rng=np.random.default_rng([seed, 0, 0, 2])).dequantize().astype(np.float64)
        xc = quantize_nvfp4_te(x, NVFP4Quantizer(), axis=0).dequantize().astype(np.float64)
        draws_hand.append(g @ xc)
    for a, b in zip(draws_probe, draws_hand):
        np.testing.assert_allclose(a, b, rtol=0, atol=4e-7 * np.abs(b).max())
    assert not np.array_equal(draws_probe[0], draws_probe[1])          # the seeds are different draws
    curve = gm.mean_curve(draws_probe, ref, [1, 3])
    hand = [np.linalg.norm(np.mean(draws_hand[:n], axis=0) - ref) / np.linalg.norm(ref) for n in (1, 3)]
    assert curve == pytest.approx(hand, rel=1e-5)


def test_exact_accumulation_splits_quantization_from_accumulation():
    x, w, dy = _ops(2, m=512, k=128, n=64)
    s = probes.layer_passes(x, w, None, dy, "te-current", "h100-fast")["wgrad"]
    ea = probes.layer_passes(x, w, None, dy, "te-current", probes.exact_accumulation("h100-fast"))["wgrad"]
    # same quantized operands (bf16-rounded, as the stack computes): exact accumulation, rounded once
    xb = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    dyb = torch.from_numpy(dy).to(torch.bfloat16).float().numpy()
    hand = (quantize_tensorwise(dyb, "e5m2").dequantize().astype(np.float64).T
            @ quantize_tensorwise(xb, "e4m3fn").dequantize().astype(np.float64))
    np.testing.assert_allclose(ea, hand, rtol=0, atol=4e-7 * np.abs(hand).max())
    assert 0 < np.abs(s - ea).max()                    # the fast accumulator differs from exact
    assert probes.exact_accumulation("b200").nvfp4 == "exact"
    assert probes.exact_accumulation("h100").mx is None    # no MX GEMM stays no MX GEMM


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))


def test_capture_and_qat_against_float64_backprop():
    model = _mlp()
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 32)).astype(np.float32)
    c = rng.standard_normal((64, 16)).astype(np.float32)
    xt, ct = torch.from_numpy(x), torch.from_numpy(c)
    loss_fn = lambda m: (m(xt) * ct).sum()  # noqa: E731
    W1, b1 = (p.detach().double().numpy() for p in (model[0].weight, model[0].bias))
    W2 = model[2].weight.detach().double().numpy()
    # float64 backprop by hand: loss = sum(c * (relu(x W1^T + b1) W2^T + b2))
    h = x.astype(np.float64) @ W1.T + b1
    r = np.maximum(h, 0)
    dW2 = c.astype(np.float64).T @ r
    dh = (c.astype(np.float64) @ W2) * (h > 0)
    dW1 = dh.T @ x.astype(np.float64)
    _, caps = probes.capture(model, loss_fn)
    np.testing.assert_allclose(caps["2"].dw, dW2, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(caps["0"].dw, dW1, rtol=1e-4, atol=1e-4)
    assert caps["0"].dx is None and caps["2"].dx.shape == (64, 32)
    # QAT: forward as the recipe (its layer outputs), backward the exact chain rule through those values
    qat = probes.qat_model(model, "te-current", "exact")
    _, q = probes.capture(qat, loss_fn)
    yq1 = probes.layer_passes(x, W1.astype(np.float32), b1.astype(np.float32), np.zeros((64, 32), np.float32),
                              "te-current", "exact")["fprop"].astype(np.float64)
    rq = np.maximum(yq1, 0)
    np.testing.assert_allclose(q["2"].x, rq, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(q["2"].dw, c.astype(np.float64).T @ rq, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(q["0"].dw, ((c.astype(np.float64) @ W2) * (yq1 > 0)).T @ x, rtol=1e-4, atol=1e-4)
    # the model is left as it was: its layers are still torch's
    assert isinstance(model[0], torch.nn.Linear) and type(model[0]) is torch.nn.Linear


def test_capture_refuses_a_layer_called_twice():
    lin = torch.nn.Linear(8, 8)
    m = torch.nn.Module()
    m.lin = lin
    x = torch.ones(2, 8)
    with pytest.raises(ValueError, match="called twice"):
        probes.capture(m, lambda mod: mod.lin(mod.lin(x)).sum())


def test_layer_passes_refuses_a_layer_the_recipe_cannot_take():
    x, w, dy = _ops(m=64, k=24, n=16)
    with pytest.raises(ValueError, match="does not take"):
        probes.layer_passes(x, w, None, dy, "te-nvfp4", "b200")
