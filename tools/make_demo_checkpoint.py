"""Write the demo checkpoint of ``fp8emu study --demo``: fp8emu/data/demo/demo.safetensors.

Deterministic (fixed seeds; run: ``python3 tools/make_demo_checkpoint.py``), about 3 MB:

* ``mlp.*``: the float32 weights and biases the training demo's MLP
  (:mod:`fp8emu.lab.train`, synthetic task, 400 SGD steps) learns;
* ``model.*``: synthetic "LLM-like" bfloat16 tensors of a 2-layer
  transformer (hidden 256, MLP 512): Gaussian attention weights, a key
  projection with a few outlier output channels, heavy-tailed (Student-t,
  3 degrees of freedom) MLP weights, RMSNorm gains near 1 with a few
  "massive" channels, and an embedding table;
* ``activations.*``: float32 activations with outlier feature channels
  (LLM.int8()-style, 100x the rest) and a tensor with exact zeros.
"""

import argparse
import os
from pathlib import Path

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

from fp8emu.lab.train import MLP, make_task, sgd_momentum_step

OUT = Path(__file__).resolve().parents[1] / "fp8emu" / "data" / "demo" / "demo.safetensors"
BF16 = ml_dtypes.bfloat16


def bf16(x):
    """float64 values as bfloat16, rounded through float32 first.

    The shipped file was made that way (ml_dtypes 0.6 always went through float32); ml_dtypes 0.7 rounds
    float64 once, which changes a few values, so the float32 step is explicit to reproduce the file byte
    for byte under every supported ml_dtypes.
    """
    return np.asarray(x, np.float64).astype(np.float32).astype(BF16)


def learned_mlp(steps=400, batch=128, lr=0.05, momentum=0.9, seed=0):
    """Weights of the training demo's float32 MLP after ``steps`` SGD steps (its loop, restated)."""
    data = make_task(8192, 512, seed=seed)
    model = MLP([data["x_train"].shape[1], 128, 128, data["classes"]], seed=seed)
    vel = [(np.zeros_like(w), np.zeros_like(b)) for w, b in zip(model.W, model.b)]
    g = np.random.default_rng([seed, 1])
    for _ in range(steps):
        idx = g.integers(0, len(data["x_train"]), batch)
        logits, cache = model.forward(data["x_train"][idx])
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        p[np.arange(batch), data["y_train"][idx]] -= 1
        sgd_momentum_step(model, model.backward(p / batch, cache), vel, lr, momentum)
    out = {}
    for i, (w, b) in enumerate(zip(model.W, model.b)):
        # (out, in), as torch stores it; contiguous, since safetensors before 0.5 wrote a transposed
        # view's underlying buffer, not its values
        out[f"mlp.layers.{i}.weight"] = np.ascontiguousarray(w.T, dtype=np.float32)
        out[f"mlp.layers.{i}.bias"] = b.astype(np.float32)
    return out


def llm_like(hidden=256, ffn=512, layers=2, vocab=512, seed=1):
    g = np.random.default_rng(seed)
    out = {"model.embed_tokens.weight": bf16(g.standard_normal((vocab, hidden)) * 0.02)}
    for i in range(layers):
        p = f"model.layers.{i}."
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            w = g.standard_normal((hidden, hidden)) * 0.02
            if name == "k_proj":
                w[g.choice(hidden, 4, replace=False)] *= 25.0   # outlier output channels
            out[p + f"self_attn.{name}.weight"] = bf16(w)
        for name, shape in (("gate_proj", (ffn, hidden)), ("up_proj", (ffn, hidden)),
                            ("down_proj", (hidden, ffn))):
            out[p + f"mlp.{name}.weight"] = bf16(g.standard_t(3, shape) * 0.01)
        gain = 1.0 + 0.05 * g.standard_normal(hidden)
        gain[g.choice(hidden, 2, replace=False)] = 40.0   # "massive" channels
        out[p + "input_layernorm.weight"] = bf16(gain)
        out[p + "post_attention_layernorm.weight"] = bf16(1.0 + 0.05 * g.standard_normal(hidden))
        act = g.standard_normal((128, hidden))
        act[:, g.choice(hidden, 3, replace=False)] *= 100.0   # outlier feature channels
        out[f"activations.layers.{i}.mlp_input"] = act.astype(np.float32)
        relu = np.maximum(g.standard_normal((128, ffn)) * g.lognormal(0, 1, (1, ffn)), 0)
        out[f"activations.layers.{i}.mlp_hidden"] = relu.astype(np.float32)   # half exact zeros
    out["model.norm.weight"] = np.ones(hidden, BF16)   # all equal
    return out


def write(path):
    """Write the demo checkpoint to ``path`` (mode 0644, whatever the umask or safetensors choose)."""
    tensors = {**learned_mlp(), **llm_like()}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={"generator": "tools/make_demo_checkpoint.py"})
    os.chmod(path, 0o644)
    return tensors


def main(argv=None):
    p = argparse.ArgumentParser(description="Write the demo checkpoint of fp8emu study --demo.")
    p.add_argument("--out", type=Path, default=OUT, help=f"where to write it (default {OUT})")
    args = p.parse_args(argv)
    tensors = write(args.out)
    print(f"{args.out}: {len(tensors)} tensors, {args.out.stat().st_size / 2**20:.2f} MiB")


if __name__ == "__main__":
    main()
