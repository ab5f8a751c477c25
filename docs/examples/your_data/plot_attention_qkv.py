"""
Given Q, K, V: attention error vs context for three recipes
===========================================================

Q, K and V made from the demo checkpoint's recorded activations and its attention projections
(4 heads of 64), as a model's first layer would make them; in your code, pass your own arrays or
torch tensors.
"""

from fp8emu.lab import plots
from fp8emu.lab.inputs import load_data
from fp8emu.lab.study import demo_checkpoint

ckpt = demo_checkpoint()
x = load_data("activations.layers.0.mlp_input", checkpoint=ckpt)          # (128 tokens, 256)


def heads(proj):
    w = load_data(f"model.layers.0.self_attn.{proj}.weight", checkpoint=ckpt)   # (256, 256) = (out, in)
    return (x @ w.T).reshape(128, 4, 64).transpose(1, 0, 2)                 # (heads, tokens, 64)


q, k, v = heads("q_proj"), heads("k_proj"), heads("v_proj")
fig = plots.figure_data_attention(q, k, v, recipes=["fa3-fp8", "fa4-sm100-fp8", "flashinfer-fp8-prefill"],
                                  contexts=[16, 32, 64, 128], label="demo layer 0, 4 heads")
