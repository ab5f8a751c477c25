"""TE's getting-started tutorial (docs/getting_started/getting_started_pytorch.py at d0067d0) builds one
transformer layer three ways: unfused TE modules (te.LayerNorm, te.Linear, te.DotProductAttention, torch's
gelu), fused ones (te.LayerNormLinear for LayerNorm + QKV, te.LayerNormMLP), and te.TransformerLayer; each runs
under autocast with DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=16, amax_compute_algo="max").
The layers here are written after that description, small, on a CPU (the tutorial's ``.cuda()`` goes: there is
no CUDA device), with ``import fp8emu.torch.te as te``.

With the same weights, the fused layer differs from the unfused one under delayed scaling, where TE's fused
kernels quantize float32 norm and activation outputs, and agrees with it (up to torch's gelu against TE's)
under current scaling, where TE's kernels round to bfloat16 first.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fp8emu.torch.te as te  # noqa: E402
from fp8emu.torch.te.recipe import DelayedScaling, Float8CurrentScaling, Format  # noqa: E402

HIDDEN, FFN, HEADS, SEQ, BATCH = 64, 256, 4, 32, 2
DELAYED = DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=16, amax_compute_algo="max")


def _attend(layer, qkv):
    # the tutorial's QKV layout: [s, b, heads, 3 * kv] split into q, k, v along the last dimension
    qkv = qkv.view(qkv.size(0), qkv.size(1), HEADS, 3 * (HIDDEN // HEADS))
    q, k, v = torch.split(qkv, HIDDEN // HEADS, dim=3)
    return layer.attention(q, k, v)


class Unfused(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = te.LayerNorm(HIDDEN), te.LayerNorm(HIDDEN)
        self.qkv_projection = te.Linear(HIDDEN, 3 * HIDDEN)
        self.attention = te.DotProductAttention(HEADS, HIDDEN // HEADS, attention_dropout=0.0, attn_mask_type="causal")
        self.projection = te.Linear(HIDDEN, HIDDEN)
        self.linear1, self.linear2 = te.Linear(HIDDEN, FFN), te.Linear(FFN, HIDDEN)

    def forward(self, x):
        x = x + self.projection(_attend(self, self.qkv_projection(self.ln1(x))))
        h = torch.nn.functional.gelu(self.linear1(self.ln2(x)), approximate="tanh")
        return x + self.linear2(h)


class Fused(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_qkv = te.LayerNormLinear(HIDDEN, 3 * HIDDEN)
        self.attention = te.DotProductAttention(HEADS, HIDDEN // HEADS, attention_dropout=0.0, attn_mask_type="causal")
        self.projection = te.Linear(HIDDEN, HIDDEN)
        self.ln_mlp = te.LayerNormMLP(HIDDEN, FFN)

    def forward(self, x):
        x = x + self.projection(_attend(self, self.ln_qkv(x)))
        return x + self.ln_mlp(x)

    def load_unfused(self, u):
        with torch.no_grad():
            pairs = [(self.ln_qkv.layer_norm_weight, u.ln1.weight), (self.ln_qkv.layer_norm_bias, u.ln1.bias),
                     (self.ln_qkv.weight, u.qkv_projection.weight), (self.ln_qkv.bias, u.qkv_projection.bias),
                     (self.projection.weight, u.projection.weight), (self.projection.bias, u.projection.bias),
                     (self.ln_mlp.layer_norm_weight, u.ln2.weight), (self.ln_mlp.layer_norm_bias, u.ln2.bias),
                     (self.ln_mlp.fc1_weight, u.linear1.weight), (self.ln_mlp.fc1_bias, u.linear1.bias),
                     (self.ln_mlp.fc2_weight, u.linear2.weight), (self.ln_mlp.fc2_bias, u.linear2.bias)]
            for dst, src in pairs:
                dst.copy_(src)
        return self


def _pair():
    torch.manual_seed(0)
    u = Unfused()
    with torch.no_grad():
        for p in u.parameters():
            if p.dim() == 1:
                p.normal_(0, 0.5)
    return u, Fused().load_unfused(u)


def _rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float(torch.linalg.norm(a - b) / torch.linalg.norm(b))


def difference(recipe, steps=3):
    """Relative difference of the fused layer's output from the unfused one's at the last of ``steps`` steps."""
    u, f = _pair()
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(SEQ, BATCH, HIDDEN, generator=gen)
        with te.autocast(enabled=recipe is not None, recipe=recipe), torch.no_grad():
            yu, yf = u(x), f(x)
    return _rel(yf, yu)


@pytest.mark.parametrize("variant", ["unfused", "fused", "transformer_layer"])
def test_the_tutorial_layers_train_under_its_recipe(variant):
    torch.manual_seed(0)
    layer = {"unfused": Unfused, "fused": Fused,
             "transformer_layer": lambda: te.TransformerLayer(
                 hidden_size=HIDDEN, ffn_hidden_size=FFN, num_attention_heads=HEADS, self_attn_mask_type="causal",
                 layernorm_epsilon=1e-5, bias=True, hidden_dropout=0.0, attention_dropout=0.0)}[variant]()
    x = torch.rand(SEQ, BATCH, HIDDEN)
    with te.autocast(enabled=True, recipe=DELAYED):
        out = layer(x)
    out.backward(torch.randn_like(out))
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in layer.parameters())


def test_fused_and_unfused_layers_differ_where_te_quantizes_differently():
    hp, current, delayed = difference(None), difference(Float8CurrentScaling()), difference(DELAYED)
    assert hp < 1e-6                      # the same layer: float32 reassociation only
    assert current < 1e-3                 # TE's gelu constants against torch's, rounded to bf16 now and then
    assert delayed > max(1e-4, 10 * current)      # float32 norm / activation straight to FP8


if __name__ == "__main__":
    for name, r in (("high precision", None), ("current", Float8CurrentScaling()), ("delayed", DELAYED)):
        print(name, f"{difference(r):.2e}")
