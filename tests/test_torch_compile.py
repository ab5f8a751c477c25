"""torch.compile of emulated layers: one opaque custom op each, the eager bits forward and backward."""

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
ft = pytest.importorskip("fp8emu.torch")
nn = torch.nn


class _UserModel(nn.Module):
    """A torch user's own decoder-ish block: embedding, norm, qkv / out projections, causal attention
    written out, a ReLU MLP and an LM head (filtered out, as torchtitan keeps it)."""

    def __init__(self, vocab=64, d=64, heads=2):
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, d)
        self.norm = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))
        self.lm_head = nn.Linear(d, vocab)

    def forward(self, tokens):
        b, t = tokens.shape
        h = self.embed(tokens)
        q, k, v = self.qkv(self.norm(h)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        a = (s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, -1)
        h = h + self.out(a)
        h = h + self.mlp(h)
        return self.lm_head(h)


pytestmark = pytest.mark.usefixtures("fresh_dynamo")    # tests/conftest.py


def _grads(model):
    return [p.grad.clone() if p.grad is not None else None for p in model.parameters()]


def _same(a, b):
    return len(a) == len(b) and all((u is None and v is None) or torch.equal(u, v) for u, v in zip(a, b))


def _train_steps(model, x, dy, steps=2, block=None):
    out = []
    for _ in range(steps):
        xi = x.clone().requires_grad_(x.is_floating_point())
        if block is None:
            y = model(xi)
        else:
            with block():
                y = model(xi)
        y.backward(dy)
        out.append([y.detach(), xi.grad if x.is_floating_point() else None, *_grads(model)])
        model.zero_grad(set_to_none=True)
    return out


@pytest.mark.parametrize("recipe, gpu", [("te-delayed", "h100"), ("te-nvfp4", "b200"), ("te-mxfp8", "b200"),
                                         ("torchao-rowwise", "cpu"), ("deepseek-v3", "h100")])
def test_compiled_layers_give_the_eager_bits_forward_and_backward(recipe, gpu):
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
    ft.emulate(base, recipe, gpu, diagnostics=True)
    eager, comp = copy.deepcopy(base), copy.deepcopy(base)
    compiled = torch.compile(comp, backend="aot_eager", fullgraph=True)     # no graph break
    x, dy = torch.randn(64, 64), torch.randn(64, 64)
    for a, b in zip(_train_steps(eager, x, dy), _train_steps(compiled, x, dy)):
        assert _same(a, b)
    # the state the forward updates (step counter, delayed scaling's amax history) and the diagnostics
    assert torch.equal(eager.state_dict()["0.fp8emu_step"], comp.state_dict()["0.fp8emu_step"])
    assert all(torch.equal(v, comp.state_dict()[k]) for k, v in eager.state_dict().items())
    assert repr(ft.diagnostics(eager)) == repr(ft.diagnostics(comp)) and ft.diagnostics(comp)   # NaN-aware
    with torch.no_grad():                                    # one-token decode, compiled
        assert torch.equal(compiled(x[:1]), eager(x[:1]))


def test_a_user_model_with_a_filter_under_te_style_autocast_compiled_with_inductor():
    torch.manual_seed(0)
    base = _UserModel()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ft.HighPrecisionWarning)    # everything left out is left out on purpose
        rep = ft.emulate(base, "te-current", "h100", autocast_only=True,
                         module_filter_fn=lambda mod, fqn: fqn != "lm_head")
    assert set(rep.swapped) == {"qkv", "out", "mlp.0", "mlp.2"} and list(rep.filtered) == ["lm_head"]
    eager, comp = copy.deepcopy(base), copy.deepcopy(base)
    compiled = torch.compile(comp, backend="inductor", fullgraph=True)
    tokens = torch.randint(0, 64, (2, 16))
    dy = torch.randn(2, 16, 64)
    for a, b in zip(_train_steps(eager, tokens, dy, block=ft.autocast), _train_steps(compiled, tokens, dy,
                                                                                        block=ft.autocast)):
        # the emulated layers give the eager bits; inductor's own kernels (layer norm, softmax) may differ from
        # eager torch in the last bits, so the model's output is compared to float32 rounding, the FP8 state exactly
        assert torch.allclose(a[0], b[0], rtol=1e-4, atol=1e-5)
    assert int(comp.qkv.fp8emu_step) == int(eager.qkv.fp8emu_step) == 2
    with torch.no_grad(), ft.autocast():
        assert torch.allclose(compiled(tokens[:, -1:]), eager(tokens[:, -1:]), rtol=1e-4, atol=1e-5)
    assert int(comp.qkv.fp8emu_step) == 3
    with torch.no_grad():                                       # outside the block: high precision, no FP8 step
        compiled(tokens)
    assert int(comp.qkv.fp8emu_step) == 3


def test_the_user_model_compiled_without_fusion_gives_the_eager_bits():
    # aot_eager runs torch's own kernels: then the whole model, not only its emulated layers, is bit-exact
    torch.manual_seed(0)
    base = _UserModel()
    ft.emulate(base, "te-mxfp8", "b200", module_filter_fn=lambda mod, fqn: fqn != "lm_head")
    eager, comp = copy.deepcopy(base), copy.deepcopy(base)
    compiled = torch.compile(comp, backend="aot_eager", fullgraph=True)
    tokens, dy = torch.randint(0, 64, (2, 16)), torch.randn(2, 16, 64)
    for a, b in zip(_train_steps(eager, tokens, dy), _train_steps(compiled, tokens, dy)):
        assert _same(a, b)
    with torch.no_grad():
        assert torch.equal(compiled(tokens[:, -1:]), eager(tokens[:, -1:]))   # one token: MXFP8 wgrad needs 32


def test_autocast_blocks_and_torch_autocast_hold_in_compiled_graphs():
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
    ft.emulate(base, "te-current", "h100")
    eager, comp = copy.deepcopy(base), copy.deepcopy(base)
    compiled = torch.compile(comp, backend="aot_eager", fullgraph=True)
    x, dy = torch.randn(32, 64), torch.randn(32, 64)
    for block in (lambda: ft.autocast(enabled=False), lambda: ft.autocast(gpu="exact"),
                  lambda: torch.autocast("cpu", dtype=torch.bfloat16)):
        a, b = _train_steps(eager, x, dy, 1, block), _train_steps(compiled, x, dy, 1, block)
        assert _same(a[0], b[0])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert compiled(x).dtype == torch.bfloat16


def test_backward_twice_is_one_clear_error():
    model = nn.Sequential(nn.Linear(32, 32))
    ft.emulate(model, "te-current", "h100")
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    y = compiled(torch.randn(16, 32, requires_grad=True)).sum()
    y.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match=r"layer '0': the backward of a compiled emulated call ran twice"):
        y.backward()
