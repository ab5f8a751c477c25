"""fp8emu.torch.te: TE's API (modules, recipes, autocast) on the emulated GEMMs.

Expectations come from elsewhere: the per-GEMM emulation of an ``nn.Linear`` by fp8emu.torch.emulate
(whose recipes and stacks have their own tests against TE's and torch's kernels), torch's own float
math, and float64 attention written out here.
"""

import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fp8emu.torch as ft  # noqa: E402
import fp8emu.torch.te as te  # noqa: E402
from fp8emu.torch.te import recipe  # noqa: E402
from fp8emu.torch.te.modules import _activation  # noqa: E402

CASES = [  # (TE recipe object, fp8emu recipe name, stack)
    (recipe.DelayedScaling(amax_history_len=4), None, "h100"),
    (recipe.Float8CurrentScaling(), "te-current", "h100"),
    (recipe.Float8CurrentScaling(), "te-current", "h100-fast"),
    (recipe.Float8BlockScaling(), "te-block", "h100"),
    (recipe.MXFP8BlockScaling(), "te-mxfp8", "b200"),
    (recipe.NVFP4BlockScaling(disable_stochastic_rounding=True), "te-nvfp4-no-sr", "b200"),
    (recipe.Float8CurrentScaling(), "te-current", "cpu"),
    (recipe.MXFP8BlockScaling(), "te-mxfp8", "exact"),
]


def _pair(seed=0, n_in=64, n_out=32):
    torch.manual_seed(seed)
    te_lin = te.Linear(n_in, n_out)
    ref = torch.nn.Sequential(torch.nn.Linear(n_in, n_out))
    with torch.no_grad():
        te_lin.bias.normal_()
        ref[0].weight.copy_(te_lin.weight)
        ref[0].bias.copy_(te_lin.bias)
    return te_lin, ref


@pytest.mark.parametrize("rec, name, gpu", CASES, ids=[f"{type(c[0]).__name__}-{c[2]}" for c in CASES])
def test_linear_is_the_emulated_nn_linear_bit_for_bit(rec, name, gpu):
    # te.Linear under autocast runs the same quantizers and GEMMs as emulate() on an nn.Linear: forward and
    # the three gradients, over three steps (delayed scaling's state evolves the same way)
    te_lin, ref = _pair(n_out=64)
    ft.emulate(ref, name or recipe.DelayedScaling(amax_history_len=4).training_recipe(), gpu)
    for step in range(3):
        x = torch.randn(64, 64)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        with te.autocast(recipe=rec, gpu=gpu):
            ya = te_lin(xa)
        yb = ref(xb)
        assert torch.equal(ya, yb), step
        g = torch.randn_like(ya)
        ya.backward(g)
        yb.backward(g)
        assert torch.equal(xa.grad, xb.grad)
        assert torch.equal(te_lin.weight.grad, ref[0].weight.grad)
        assert torch.equal(te_lin.bias.grad, ref[0].bias.grad)
        te_lin.zero_grad()
        ref.zero_grad()


def test_outside_autocast_and_disabled_blocks_run_high_precision():
    te_lin, _ = _pair()
    x = torch.randn(16, 64)
    plain = torch.nn.functional.linear(x, te_lin.weight, te_lin.bias)
    assert torch.equal(te_lin(x), plain)
    with te.autocast(recipe=recipe.Float8CurrentScaling()):
        fp8 = te_lin(x)
        with te.autocast(enabled=False):
            inner = te_lin(x)
    assert torch.equal(inner, plain)
    assert not torch.equal(fp8, plain)


def test_backward_after_the_block_uses_the_forward_recipe():
    te_lin, ref = _pair()
    ft.emulate(ref, "te-block", "h100")
    x = torch.randn(16, 64)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    with te.autocast(recipe=recipe.Float8BlockScaling()):
        ya = te_lin(xa)
    with te.autocast(recipe=recipe.Float8CurrentScaling()):     # another recipe while backward runs
        ya.sum().backward()
    ref(xb).sum().backward()
    assert torch.equal(xa.grad, xb.grad)


def test_deprecated_names_warn_as_te_and_still_work():
    lin, _ = _pair()
    x = torch.randn(16, 64)
    with pytest.warns(DeprecationWarning, match="fp8_autocast"):
        ctx = te.fp8_autocast(enabled=True, fp8_recipe=recipe.Float8CurrentScaling())
    with ctx:
        a = lin(x)
    with te.autocast(enabled=True, recipe=recipe.Float8CurrentScaling()):
        b = lin(x)
    assert torch.equal(a, b)
    with pytest.warns(DeprecationWarning, match="fp8_model_init"):
        with te.fp8_model_init(enabled=True, recipe=recipe.Float8CurrentScaling()):
            m = te.Linear(32, 32)
    assert m.primary_weights


def test_default_recipe_follows_the_gpu():
    with te.autocast():
        assert te.current_autocast().training.name == "te-delayed"
    with te.autocast(gpu="b200"):
        assert te.current_autocast().training.name == "te-mxfp8"
        with te.autocast(recipe="te-current"):          # gpu inherited from the enclosing block
            assert te.current_autocast().stack.name == "b200"


@pytest.mark.parametrize("make, match", [
    (lambda: recipe.DelayedScaling(fp8_format=recipe.Format.E5M2).training_recipe(), "pure E5M2"),
    (lambda: recipe.Float8CurrentScaling(fp8_gemm_fprop=recipe.MMParams(True)).training_recipe(), "fp8_gemm_fprop"),
    (lambda: recipe.Float8BlockScaling(x_block_scaling_dim=2).training_recipe(), "x_block_scaling_dim"),
    (lambda: recipe.NVFP4BlockScaling(row_scaled_activation=True).training_recipe(), "row_scaled_activation"),
    (lambda: recipe.DelayedScaling(fp8_mha=True).training_recipe(), "fp8_mha"),
    (lambda: te.Linear(32, 32, tp_size=2), "tp_size=2"),
    (lambda: te.Linear(32, 32, fuse_wgrad_accumulation=True), "fuse_wgrad_accumulation"),
    (lambda: te.LayerNormMLP(32, 64, activation="clamped_swiglu"), "clamped_swiglu"),
    (lambda: te.TransformerLayer(32, 64, 2, layer_type="decoder"), "layer_type"),
    (lambda: te.autocast(calibrating=True), "calibrating"),
    (lambda: te.autocast(recipe="torchao-rowwise"), "torchao"),
    (lambda: te.autocast(recipe=recipe.MXFP8BlockScaling(), gpu="h100"), "MXFP8"),
])
def test_numerics_changing_arguments_are_refused_by_name(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_distribution_arguments_are_accepted_and_change_nothing():
    torch.manual_seed(1)
    a = te.LayerNormLinear(64, 32, tp_group=object(), sequence_parallel=True, parallel_mode="column",
                           ub_overlap_ag=True, ub_name="qkv", device="cuda")
    torch.manual_seed(1)
    b = te.LayerNormLinear(64, 32)
    x = torch.randn(16, 64)
    with te.autocast(recipe=recipe.DelayedScaling()):
        assert torch.equal(a(x), b(x))


def test_sizes_the_gemm_cannot_take_are_one_clear_error():
    lin = te.Linear(24, 32)
    with te.autocast(recipe=recipe.Float8CurrentScaling()):
        with pytest.raises(ValueError, match="in_features 24 is not a multiple of 16"):
            lin(torch.randn(16, 24))
        with pytest.raises(ValueError, match="tokens 8 is not a multiple of 16"):
            te.Linear(32, 32)(torch.randn(8, 32))


def test_first_microbatch_caches_the_weight_as_te():
    # is_first_microbatch=False reuses the FP8 weight quantized at the first micro-batch (TE's cache): a change
    # of the weight in between is not seen until the next first micro-batch
    lin, _ = _pair()
    x = torch.randn(16, 64)
    with te.autocast(recipe=recipe.Float8CurrentScaling()):
        first = lin(x, is_first_microbatch=True)
        with torch.no_grad():
            lin.weight.mul_(2)
        cached = lin(x, is_first_microbatch=False)
        fresh = lin(x, is_first_microbatch=True)
    assert torch.equal(first, cached)
    assert not torch.equal(first, fresh)


def test_return_bias_leaves_the_bias_out_of_the_gemm():
    lin, _ = _pair()
    lin.return_bias = True
    x = torch.randn(16, 64)
    with te.autocast(recipe=recipe.Float8CurrentScaling(), gpu="exact"):
        out, bias = lin(x)
    lin.return_bias = False
    nobias = te.Linear(64, 32, bias=False)
    with torch.no_grad():
        nobias.weight.copy_(lin.weight)
    with te.autocast(recipe=recipe.Float8CurrentScaling(), gpu="exact"):
        assert torch.equal(out, nobias(x))
    assert bias is lin.bias


def test_activations_are_te_formulas():
    x = torch.linspace(-4, 4, 64, dtype=torch.float64).reshape(2, 32)
    a, b = x[:, :16], x[:, 16:]
    np.testing.assert_allclose(_activation("gelu", x), torch.nn.functional.gelu(x, approximate="tanh"), rtol=1e-6)  # TE rounds the constants
    assert torch.allclose(_activation("swiglu", x), torch.nn.functional.silu(a) * b)
    # TE gates with the first half, torch's glu with the second (TE's ops/basic/activation.py warns of it)
    assert torch.allclose(_activation("glu", x), torch.nn.functional.glu(torch.cat([b, a], -1)))
    assert torch.allclose(_activation("srelu", x), torch.relu(x) ** 2)
    assert torch.allclose(_activation("qgeglu", x), a * torch.sigmoid(1.702 * a) * b)


def _attention64(q, k, v, masked):
    """Float64 softmax attention of [b, h, s, d] tensors; ``masked`` True where excluded."""
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(masked, float("-inf"))
    return torch.softmax(s, -1) @ v.double()


def test_dot_product_attention_masks_as_te():
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 4, 16, 8) for _ in range(3))      # [b, h, s, d]
    dpa = te.DotProductAttention(4, 8, qkv_format="bshd", attn_mask_type="padding")
    pad = torch.zeros(2, 1, 1, 16, dtype=torch.bool)
    pad[1, ..., 12:] = True                                     # TE: True = masked out
    out = dpa(*(t.transpose(1, 2) for t in (q, k, v)), attention_mask=pad)
    want = _attention64(q, k, v, pad.expand(2, 4, 16, 16)).transpose(1, 2).reshape(2, 16, 32)
    np.testing.assert_allclose(out.detach().numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    causal = te.DotProductAttention(4, 8)(*(t.permute(2, 0, 1, 3) for t in (q, k, v)))
    tri = torch.ones(16, 16, dtype=torch.bool).triu(1)
    want = _attention64(q, k, v, tri).permute(2, 0, 1, 3).reshape(16, 2, 32)
    np.testing.assert_allclose(causal.detach().numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_multihead_attention_reads_te_interleaved_qkv_layout():
    # TE's fused QKV weight, interleaved: rows [head h: q (d rows), k (d), v (d)] (ng = heads)
    torch.manual_seed(3)
    h, d, hidden = 2, 8, 16
    mha = te.MultiheadAttention(hidden, h, attention_dropout=0.0, bias=False)
    x = torch.randn(16, 1, hidden)
    w = mha.qkv.weight.detach().view(h, 3, d, hidden)
    q, k, v = ((x[:, 0].double() @ w[:, i].double().transpose(-1, -2)).unsqueeze(0) for i in range(3))
    ctx = _attention64(q, k, v, torch.ones(16, 16, dtype=torch.bool).triu(1))      # [1, h, s, d]
    want = (ctx[0].permute(1, 0, 2).reshape(16, h * d) @ mha.proj.weight.double().T).detach()
    np.testing.assert_allclose(mha(x)[:, 0].detach().numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_fp8_attention_when_the_recipe_asks_for_it():
    torch.manual_seed(4)
    q, k, v = (torch.randn(32, 1, 2, 64) for _ in range(3))
    dpa = te.DotProductAttention(2, 64)
    plain = dpa(q, k, v)
    with torch.no_grad(), te.autocast(recipe=recipe.DelayedScaling(fp8_dpa=True)):
        fp8 = dpa(q, k, v)
    sdpa = ft.fp8_sdpa("fa3-fp8")
    want = sdpa(*(t.permute(1, 2, 0, 3) for t in (q, k, v)), is_causal=True, scale=1 / 8)
    assert torch.equal(fp8, want.permute(2, 0, 1, 3).reshape(32, 1, 128))
    assert not torch.equal(fp8, plain)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with te.autocast(recipe=recipe.DelayedScaling(fp8_dpa=True)):
            with pytest.raises(RuntimeError, match="forward only"):
                dpa(q.requires_grad_(), k, v)


def test_delayed_scaling_state_is_in_the_state_dict():
    # amax histories and scales (and the step counter) travel with the model: a fresh model loaded from it
    # continues exactly as the original
    torch.manual_seed(5)
    a = te.LayerNormMLP(64, 128)
    rec = recipe.DelayedScaling(amax_history_len=4)
    xs = [torch.randn(32, 64) for _ in range(3)]
    with te.autocast(recipe=rec):
        a(xs[0])
    b = te.LayerNormMLP(64, 128)
    b.load_state_dict(a.state_dict())
    assert "fp8emu_fc1.amax_history_input" in a.state_dict()
    with te.autocast(recipe=rec):
        for x in xs[1:]:
            assert torch.equal(a(x), b(x))
