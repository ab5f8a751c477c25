"""A small byte-level GPT whose projections are ``nn.Linear`` layers.

Pre-LayerNorm decoder blocks: causal multi-head attention (one ``qkv``
``nn.Linear`` of ``d_model -> 3 d_model``, an ``out`` projection) and a GELU
MLP (``fc`` ``d_model -> 4 d_model``, ``proj`` back).  These four
projections per block are what :func:`fp8emu.torch.emulate` swaps.  The byte
embedding, the learned positions, the LayerNorms, softmax and the output head
stay in float32: the head is a plain parameter used with ``F.linear`` (not an
``nn.Linear``), as Megatron-LM and Transformer Engine users keep the first and
last layers in high precision.  The residual stream is float32 (the output of
every swapped projection is upcast, exact for bf16).

The attention is written out (scores, causal mask, softmax, weighted sum) so
that inference can replace it with :mod:`fp8emu.attention`'s emulated
kernels (:mod:`fp8emu.torch.study.infer`).

Examples
--------
>>> import torch
>>> cfg = ModelConfig(n_layer=1, d_model=128, n_head=4, seq_len=16)
>>> m = GPT(cfg, seed=0)
>>> m(torch.zeros(2, 16, dtype=torch.long)).shape
torch.Size([2, 16, 256])
>>> sorted(n for n, x in m.named_modules() if isinstance(x, torch.nn.Linear))
['blocks.0.attn.out', 'blocks.0.attn.qkv', 'blocks.0.mlp.fc', 'blocks.0.mlp.proj']
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["ModelConfig", "GPT", "VOCAB", "check_config"]

#: Bytes.
VOCAB = 256
#: Largest float32 working set (bytes) a run may need; above it the run is refused before it starts.
MAX_WORKING_BYTES = 8 << 30


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shape of the model and of a batch."""

    n_layer: int = 2
    d_model: int = 128
    n_head: int = 4
    seq_len: int = 64
    batch: int = 8

    @property
    def n_params(self) -> int:
        d = self.d_model
        per_block = 12 * d * d + 9 * d + 4 * d   # qkv, out, fc, proj (+ biases), 2 LayerNorms
        return VOCAB * d + self.seq_len * d + self.n_layer * per_block + 2 * d + VOCAB * d

    def working_bytes(self) -> int:
        """A float32 estimate of a training step's memory: activations kept for backward, scores, weights."""
        t = self.batch * self.seq_len
        acts = self.n_layer * t * self.d_model * 16 + self.n_layer * self.batch * self.n_head * self.seq_len ** 2 * 3
        return 4 * (acts + t * VOCAB * 3 + 4 * self.n_params)


def check_config(cfg: ModelConfig) -> ModelConfig:
    """Every size a positive integer, ``d_model`` a multiple of ``n_head``, the step within memory.

    Examples
    --------
    >>> check_config(ModelConfig(d_model=100, n_head=3))
    Traceback (most recent call last):
    ...
    ValueError: d_model (100) must be a multiple of n_head (3)
    """
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{f.name} must be a positive integer, got {v!r}")
    if cfg.d_model % cfg.n_head:
        raise ValueError(f"d_model ({cfg.d_model}) must be a multiple of n_head ({cfg.n_head})")
    need = cfg.working_bytes()
    if need > MAX_WORKING_BYTES:
        raise ValueError(f"a training step of this model needs about {need / 2**30:.1f} GiB "
                         f"(batch {cfg.batch} x seq_len {cfg.seq_len}, d_model {cfg.d_model}, "
                         f"{cfg.n_layer} layers); at most {MAX_WORKING_BYTES / 2**30:.0f} GiB is allowed")
    return cfg


class Attention(nn.Module):
    """Causal self-attention with ``nn.Linear`` projections; ``kernel`` may replace the core."""

    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        #: None: float32 softmax attention below; else a callable (q, k, v) -> o on (B, H, T, dh) tensors.
        self.kernel = None

    def forward(self, x):
        B, T, C = x.shape
        qkv = self.qkv(x).float()
        q, k, v = qkv.view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
        if self.kernel is not None:
            o = self.kernel(q, k, v)
        else:
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            s = s.masked_fill(~mask, float("-inf"))
            o = torch.softmax(s.float(), dim=-1).to(v.dtype) @ v
        o = o.transpose(1, 2).reshape(B, T, C)
        return self.out(o).float()


class MLP(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x).float())).float()


class Block(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_head)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """The byte-level GPT of :class:`ModelConfig`, initialised from ``seed`` (GPT-2's scheme)."""

    def __init__(self, cfg: ModelConfig, seed: int = 0):
        super().__init__()
        check_config(cfg)
        self.cfg = cfg
        gen = torch.Generator().manual_seed(int(seed))
        d = cfg.d_model
        self.tok = nn.Parameter(torch.randn(VOCAB, d, generator=gen) * 0.02)
        self.pos = nn.Parameter(torch.randn(cfg.seq_len, d, generator=gen) * 0.02)
        self.blocks = nn.ModuleList(Block(d, cfg.n_head) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Parameter(torch.randn(VOCAB, d, generator=gen) * 0.02)
        resid = 0.02 / math.sqrt(2 * cfg.n_layer)
        with torch.no_grad():
            for b in self.blocks:
                for lin, std in ((b.attn.qkv, 0.02), (b.attn.out, resid), (b.mlp.fc, 0.02), (b.mlp.proj, resid)):
                    lin.weight.copy_(torch.randn(lin.weight.shape, generator=gen) * std)
                    lin.bias.zero_()

    def forward(self, idx):
        T = idx.shape[1]
        x = self.tok[idx] + self.pos[:T]
        for b in self.blocks:
            x = b(x)
        return F.linear(self.ln_f(x.float()), self.head)

    def loss(self, idx, targets):
        """Mean cross-entropy (nats per byte) in float32."""
        logits = self(idx).float()
        return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
