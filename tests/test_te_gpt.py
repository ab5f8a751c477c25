"""A small GPT written with Transformer Engine's modules, as TE's getting-started tutorial and examples write
one, trained on a CPU with only the import line changed; beside it the same model written with plain torch
modules and run through fp8emu.torch.emulate (the nn.Linear swap).

``python tests/test_te_gpt.py`` prints the training-curve table of docs/guides/te.md (minutes on two
cores); the tests run one step under every recipe and stack and recompute the table's first steps.
"""

import re
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import fp8emu.torch as ft  # noqa: E402
from fp8emu.torch.study.corpus import load_corpus, sample_batch  # noqa: E402

# ------------------------------------------------------------------ TE model code: only these two lines differ
import fp8emu.torch.te as te  # noqa: E402          # import transformer_engine.pytorch as te
from fp8emu.torch.te import recipe  # noqa: E402    # from transformer_engine.common import recipe


class GPT(nn.Module):
    """Byte-level GPT: embeddings, ``te.TransformerLayer`` blocks, ``te.LayerNorm``, a ``te.Linear`` head."""

    def __init__(self, vocab=256, hidden=64, ffn=256, heads=4, layers=2, seq_len=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.pos = nn.Parameter(torch.zeros(seq_len, hidden))
        self.layers = nn.ModuleList([
            te.TransformerLayer(hidden, ffn, heads, hidden_dropout=0.0, attention_dropout=0.0,
                                self_attn_mask_type="causal", attn_input_format="bshd", layer_number=i + 1)
            for i in range(layers)])
        self.norm = te.LayerNorm(hidden)
        self.head = te.Linear(hidden, vocab, bias=False)

    def forward(self, idx):
        x = self.embed(idx) + self.pos[: idx.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def train_step(model, opt, x, y, fp8_recipe):
    with te.fp8_autocast(enabled=fp8_recipe is not None, fp8_recipe=fp8_recipe):
        logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()
# ------------------------------------------------------------------ end of TE model code


class TwinBlock(nn.Module):
    """TE's TransformerLayer written with torch modules (``nn.Linear`` for fp8emu.torch.emulate to swap)."""

    def __init__(self, hidden, ffn, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.fc1, self.fc2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

    def forward(self, x):
        b, s, h = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, s, self.heads, 3, h // self.heads)   # TE's interleaved layout
        q, k, v = (qkv[..., i, :].transpose(1, 2) for i in range(3))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, h)
        x = x + self.proj(a)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class TwinGPT(nn.Module):
    def __init__(self, te_model: GPT, heads=4):
        super().__init__()
        hidden, ffn = te_model.embed.embedding_dim, te_model.layers[0].layernorm_mlp.ffn_hidden_size
        self.embed, self.pos = nn.Embedding(*te_model.embed.weight.shape), nn.Parameter(te_model.pos.detach().clone())
        self.blocks = nn.ModuleList([TwinBlock(hidden, ffn, heads) for _ in te_model.layers])
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, te_model.head.out_features, bias=False)
        with torch.no_grad():
            self.embed.weight.copy_(te_model.embed.weight)
            for blk, layer in zip(self.blocks, te_model.layers):
                att, mlp = layer.self_attention, layer.layernorm_mlp
                for dst, src in ((blk.ln1.weight, att.layernorm_qkv.layer_norm_weight),
                                 (blk.ln1.bias, att.layernorm_qkv.layer_norm_bias),
                                 (blk.qkv.weight, att.layernorm_qkv.weight), (blk.qkv.bias, att.layernorm_qkv.bias),
                                 (blk.proj.weight, att.proj.weight), (blk.proj.bias, att.proj.bias),
                                 (blk.ln2.weight, mlp.layer_norm_weight), (blk.ln2.bias, mlp.layer_norm_bias),
                                 (blk.fc1.weight, mlp.fc1_weight), (blk.fc1.bias, mlp.fc1_bias),
                                 (blk.fc2.weight, mlp.fc2_weight), (blk.fc2.bias, mlp.fc2_bias)):
                    dst.copy_(src)
            self.norm.weight.copy_(te_model.norm.weight)
            self.norm.bias.copy_(te_model.norm.bias)
            self.head.weight.copy_(te_model.head.weight)

    def forward(self, idx):
        x = self.embed(idx) + self.pos[: idx.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


# every TE recipe the adapter has on every stack that runs it
COMBOS = [("delayed", "h100"), ("delayed", "h100-fast"), ("delayed", "b200"), ("delayed", "cpu"), ("delayed", "exact"),
          ("current", "h100"), ("current", "h100-fast"), ("current", "b200"), ("current", "cpu"), ("current", "exact"),
          ("block", "h100"), ("block", "b200"), ("block", "cpu"), ("block", "exact"),
          ("mxfp8", "b200"), ("mxfp8", "cpu"), ("mxfp8", "exact"),
          ("nvfp4", "b200"), ("nvfp4", "cpu"), ("nvfp4", "exact")]
TE_RECIPES = {"delayed": recipe.DelayedScaling, "current": recipe.Float8CurrentScaling,
              "block": recipe.Float8BlockScaling, "mxfp8": recipe.MXFP8BlockScaling, "nvfp4": recipe.NVFP4BlockScaling}
NAMES = {"delayed": "te-delayed", "current": "te-current", "block": "te-block", "mxfp8": "te-mxfp8",
         "nvfp4": "te-nvfp4"}
CURVE = [("fp32", None), ("delayed", "h100"), ("current", "h100"), ("block", "h100"), ("mxfp8", "b200"),
         ("nvfp4", "b200")]
REPORT_STEPS = (1, 2, 10, 20, 30)


def run(name, gpu, *, steps, way="te", seed=0, batch=8, seq_len=32):
    """Training losses of ``steps`` Adam steps: ``way`` "te" (the TE model code) or "swap" (its torch twin
    through fp8emu.torch.emulate)."""
    torch.manual_seed(seed)
    model = GPT(seq_len=seq_len)
    fp8_recipe = None if name == "fp32" else TE_RECIPES[name]()
    if way == "swap":
        model = TwinGPT(model)
        if fp8_recipe is not None:
            ft.emulate(model, NAMES[name], gpu, seed=seed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    data, rng = load_corpus().train, np.random.default_rng(seed)
    losses = []
    outer = te.autocast(enabled=False, gpu=gpu) if gpu else te.autocast(enabled=False)    # the stack, from outside
    with outer:
        for _ in range(steps):
            x, y = (torch.from_numpy(a) for a in sample_batch(data, rng, batch, seq_len))
            if way == "te":
                losses.append(train_step(model, opt, x, y, fp8_recipe))
            else:
                logits = model(x)
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
    return losses


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("name, gpu", COMBOS, ids=[f"{n}-{g}" for n, g in COMBOS])
def test_te_model_code_trains_under_every_recipe_and_stack(name, gpu):
    torch.manual_seed(0)
    model = GPT(layers=1)
    x = torch.randint(0, 256, (2, 32))
    with te.autocast(enabled=False, gpu=gpu):
        with te.fp8_autocast(enabled=True, fp8_recipe=TE_RECIPES[name]()):
            assert te.current_autocast().stack.name == gpu
            logits = model(x)
    F.cross_entropy(logits.reshape(-1, 256), x.reshape(-1)).backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    with torch.no_grad():
        hp = model(x)
    assert not torch.equal(logits.detach(), hp)          # the FP8 forward is not the high-precision one


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_twin_is_the_same_model():
    # without FP8 the TE model code and its nn.Linear twin compute the same losses: the swap column of the
    # curve table compares the same model
    assert run("fp32", None, steps=2, way="te") == run("fp32", None, steps=2, way="swap")


def curve_rows(steps=max(REPORT_STEPS), report=REPORT_STEPS):
    rows = []
    for name, gpu in CURVE:
        for way in ("te", "swap"):
            if name == "fp32" and way == "swap":
                continue
            losses = run(name, gpu, steps=steps, way=way)
            label = "TE modules" if way == "te" else "nn.Linear swap"
            rows.append((name, gpu or "-", label, *(f"{losses[s - 1]:.4f}" for s in report if s <= steps)))
    return rows


def table(rows=None):
    rows = rows or curve_rows()
    lines = ["| recipe | gpu | model code | " + " | ".join(f"step {s}" for s in REPORT_STEPS) + " |",
             "|" + "---|" * (3 + len(REPORT_STEPS))]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _page_rows():
    text = (Path(__file__).resolve().parents[1] / "docs" / "guides" / "te.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- curve-table -->\n(.*?)\n<!-- /curve-table -->", text, re.S)
    assert block, "docs/guides/te.md has no curve-table block"
    return [[c.strip() for c in line.strip("|").split("|")] for line in block.group(1).splitlines()[2:]]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_page_curve_starts_as_this_run():
    # the first two steps of the delayed-scaling rows (the full table: python tests/test_te_gpt.py, minutes)
    page = {(r[0], r[2]): r[3:5] for r in _page_rows()}
    for way, label in (("te", "TE modules"), ("swap", "nn.Linear swap")):
        losses = run("delayed", "h100", steps=2, way=way)
        assert page[("delayed", label)] == [f"{v:.4f}" for v in losses]


@pytest.mark.exhaustive
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_page_curve_is_this_run():
    assert [list(r) for r in curve_rows()] == _page_rows()


if __name__ == "__main__":
    import warnings
    warnings.simplefilter("ignore", DeprecationWarning)
    print(table(), file=sys.stdout)
