"""Inference of the trained model with FP8/FP4 weights, activations, KV cache and attention.

Perplexity (``exp`` of the mean cross-entropy in nats per byte) on the
validation windows of the corpus, for each configuration of :data:`CONFIGS`:

* ``bf16``: the reference, the forward under ``torch.autocast`` to bf16; ``fp32``;
* ``fp8-w8a8``: e4m3 weights and activations with **per-tensor static scales**
  as TensorRT-LLM / ModelOpt calibrate them: each projection's input amax is
  the maximum over calibration windows (from the training split) run through
  the float32 model, ``scale = 448 / amax``; weights get ``448 / amax(W)``.
  Operands are quantized with :func:`fp8emu.quantize_tensorwise` (saturating
  RNE cast of ``fl32(x * scale)``) and multiplied as their exact dequantized
  values with a float32 matmul (e4m3 products are exact in float32; the sums
  are float32, as the tensor cores' fp32 accumulation of an FP8 GEMM up to
  the order of additions);
* attention through :func:`fp8emu.attention.attention` recipes: ``fa3-fp8``
  (FP8 Q, K, V and P, Hopper accumulators) and ``vllm-fp8-kv-decode`` (e4m3
  K/V cache, bf16 Q and P), each with the scales the recipe derives (per-tensor
  amax of Q, K, V for each window);
* weight-only FP4: NVFP4 (:func:`fp8emu.quantize_nvfp4`, 16-element blocks
  along K with e4m3 scales and a float32 tensor scale) and MXFP4
  (:func:`fp8emu.quantize_mx`, e2m1 in 32-element blocks along K with E8M0
  scales), and MXFP8 (e4m3) weights; activations stay float32.

Everything that is not a projection or the attention core runs in float32.
"""

from __future__ import annotations

import dataclasses
import io
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...attention import attention as fp8_attention
from ...scaling import quantize_mx, quantize_nvfp4, quantize_tensorwise
from .corpus import eval_windows, load_corpus
from .model import GPT, ModelConfig
from .train import evaluate

__all__ = ["CONFIGS", "InferConfig", "perplexity_table", "load_model"]

E4M3_MAX = 448.0


@dataclasses.dataclass(frozen=True)
class InferConfig:
    """One inference configuration: weight and activation quantization, attention recipe."""

    name: str
    weights: str = "fp32"          # fp32 | e4m3-tensor | nvfp4 | mxfp4 | mxfp8
    activations: str = "fp32"      # fp32 | e4m3-static
    attention: str | None = None   # None (float32 softmax attention) or an fp8emu.attention recipe
    autocast_bf16: bool = False


CONFIGS = (
    InferConfig("bf16", "bf16", "bf16", None, autocast_bf16=True),
    InferConfig("fp32"),
    InferConfig("fp8-w8a8", "e4m3-tensor", "e4m3-static"),
    InferConfig("fp8-kv-cache (vllm-fp8-kv-decode)", attention="vllm-fp8-kv-decode"),
    InferConfig("fp8-attention (fa3-fp8)", attention="fa3-fp8"),
    InferConfig("fp8-w8a8 + fa3-fp8", "e4m3-tensor", "e4m3-static", "fa3-fp8"),
    InferConfig("mxfp8 weights", "mxfp8"),
    InferConfig("nvfp4 weights", "nvfp4"),
    InferConfig("mxfp4 weights", "mxfp4"),
)


def load_model(path_or_bytes, cfg: ModelConfig) -> GPT:
    """A :class:`~fp8emu.torch.study.model.GPT` with the weights saved by a baseline run."""
    src = io.BytesIO(path_or_bytes) if isinstance(path_or_bytes, bytes) else path_or_bytes
    state = torch.load(src, weights_only=True)
    model = GPT(cfg, seed=0)
    model.load_state_dict(state)
    return model.eval()


def _quantized_weight(w: np.ndarray, kind: str) -> np.ndarray:
    if kind == "e4m3-tensor":
        return quantize_tensorwise(w, "e4m3fn").dequantize()
    if kind == "nvfp4":
        return quantize_nvfp4(w, axis=-1).dequantize()
    if kind == "mxfp4":
        return quantize_mx(w, "e2m1fn", block=32, axis=-1).dequantize()
    if kind == "mxfp8":
        return quantize_mx(w, "e4m3fn", block=32, axis=-1).dequantize()
    raise ValueError(f"unknown weight quantization {kind!r}")


class _QuantLinear(nn.Module):
    """A projection with quantized (dequantized-exact) weights and, optionally, static-scale e4m3 inputs."""

    def __init__(self, lin: nn.Linear, weights: str, act_scale):
        super().__init__()
        w = lin.weight.detach().float().numpy()
        wq = w if weights in ("fp32", "bf16") else _quantized_weight(w, weights)
        self.weight = torch.from_numpy(np.ascontiguousarray(wq, dtype=np.float32))
        self.bias = lin.bias.detach().float()
        self.act_scale = act_scale

    def forward(self, x):
        x = x.float()
        if self.act_scale is not None:
            xq = quantize_tensorwise(x.detach().numpy(), "e4m3fn", scale=self.act_scale).dequantize()
            x = torch.from_numpy(np.ascontiguousarray(xq, dtype=np.float32))
        return F.linear(x, self.weight, self.bias)


def _linears(model):
    return [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]


@torch.no_grad()
def calibrate(model, data, n_windows, seq_len, batch) -> dict:
    """Input amax of every projection over ``n_windows`` windows of ``data`` (float32 forward)."""
    amax, hooks = {}, []
    for name, lin in _linears(model):
        def hook(_m, inp, _name=name):
            amax[_name] = max(amax.get(_name, 0.0), float(inp[0].detach().abs().max()))
        hooks.append(lin.register_forward_pre_hook(hook))
    x, _ = eval_windows(data, n_windows, seq_len)
    try:
        for i in range(0, x.shape[0], batch):
            model(torch.from_numpy(x[i:i + batch]))
    finally:
        for h in hooks:
            h.remove()
    return amax


def _attention_kernel(recipe):
    def kernel(q, k, v):
        out = np.empty(tuple(q.shape), dtype=np.float32)
        qn, kn, vn = (t.detach().float().numpy() for t in (q, k, v))
        for b in range(qn.shape[0]):
            out[b] = fp8_attention(qn[b], kn[b], vn[b], recipe, causal=True, reference=False).out
        return torch.from_numpy(out)
    return kernel


def _configured(weights_bytes, mcfg, conf: InferConfig, amax) -> GPT:
    model = load_model(weights_bytes, mcfg)
    if conf.weights not in ("fp32", "bf16") or conf.activations == "e4m3-static":
        for name, lin in _linears(model):
            scale = None
            if conf.activations == "e4m3-static":
                a = amax[name]
                scale = np.float32(E4M3_MAX / a) if a > 0 else np.float32(1.0)
            parent = model.get_submodule(name.rsplit(".", 1)[0])
            setattr(parent, name.rsplit(".", 1)[1], _QuantLinear(lin, conf.weights, scale))
    if conf.attention is not None:
        for b in model.blocks:
            b.attn.kernel = _attention_kernel(conf.attention)
    return model


def perplexity_table(weights_bytes, mcfg: ModelConfig, corpus=None, *, n_windows=32, calib_windows=16,
                     configs=CONFIGS, progress=None) -> list:
    """One row per configuration: validation loss, perplexity and its ratio to bf16's."""
    c = load_corpus(corpus, min_split_bytes=mcfg.seq_len + 1)
    base = load_model(weights_bytes, mcfg)
    amax = calibrate(base, c.train, calib_windows, mcfg.seq_len, mcfg.batch)
    rows = []
    for conf in configs:
        model = _configured(weights_bytes, mcfg, conf, amax)
        loss = evaluate(model, "bf16" if conf.autocast_bf16 else "fp32", c.val, n_windows, mcfg.seq_len,
                        mcfg.batch)
        rows.append({"config": conf.name, "weights": conf.weights, "activations": conf.activations,
                     "attention": conf.attention or "float32 softmax", "val_loss": loss,
                     "perplexity": math.exp(loss)})
        if progress:
            progress(conf.name)
    ref = next((r["perplexity"] for r in rows if r["config"] == "bf16"), math.nan)
    for r in rows:
        r["ppl_ratio_to_bf16"] = r["perplexity"] / ref
    return rows
