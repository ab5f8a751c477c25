"""emulate(module_filter_fn=...): torchao's layer selection, attention projections, first / last layers."""

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
ft = pytest.importorskip("fp8emu.torch")
nn = torch.nn


class _Block(nn.Module):
    """A torch user's own block: an attention module, an MLP, a shared layer and an LM head."""

    def __init__(self, d=64, vocab=96):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        h = self.embed(tokens)
        h = h + self.attn(h, h, h, need_weights=False)[0]
        return self.head(h + self.mlp(h))


def _emulate(model, *args, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rep = ft.emulate(model, *args, **kw)
    return rep, [w for w in caught if issubclass(w.category, ft.HighPrecisionWarning)]


def test_the_filter_sees_the_modules_and_names_torchao_gives_it():
    # torchao's convert_to_float8_training is the reference for which (module, fqn) pairs the filter sees
    float8 = pytest.importorskip("torchao.float8")
    seen_ours, seen_torchao = [], []

    def recorder(seen):
        def fn(mod, fqn):
            seen.append((type(mod).__name__, fqn))
            return False
        return fn

    ft.emulate(_Block(), "te-current", "h100", module_filter_fn=recorder(seen_ours))
    float8.convert_to_float8_training(_Block(), module_filter_fn=recorder(seen_torchao))
    assert sorted(seen_ours) == sorted(seen_torchao)
    assert ("NonDynamicallyQuantizableLinear", "attn.out_proj") in seen_ours


def test_filtered_layers_stay_plain_and_are_not_warned_about():
    torch.manual_seed(0)
    plain = _Block()
    model = copy.deepcopy(plain)
    keep = {"mlp.0", "mlp.2"}
    rep, warned = _emulate(model, "te-current", "h100",
                           module_filter_fn=lambda mod, fqn: fqn in keep)
    assert list(rep.swapped) == ["mlp.0", "mlp.2"]
    assert rep.filtered == {"attn.out_proj": "module_filter_fn returned False",
                            "head": "module_filter_fn returned False",
                            "attn.in_proj_weight": "module_filter_fn returned False for its attention's out_proj"}
    assert rep.skipped == {} and warned == []
    assert type(model.head) is nn.Linear and isinstance(model.mlp[0], ft.EmulatedLinear)
    assert (rep.first, rep.last) == ("attn.out_proj", "head")
    tokens = torch.randint(0, 96, (2, 16))
    with ft.autocast(enabled=False):
        assert torch.equal(model(tokens), plain(tokens))


def test_attention_projections_are_named_and_warned_about():
    rep, warned = _emulate(nn.TransformerEncoderLayer(64, 4, 128), "te-current", "h100")
    assert list(rep.swapped) == ["linear1", "linear2"]
    assert set(rep.skipped) == {"self_attn.in_proj_weight", "self_attn.out_proj"}
    assert "never calls out_proj" in rep.skipped["self_attn.out_proj"]
    assert len(warned) == 1
    msg = str(warned[0].message)
    assert "'self_attn.in_proj_weight'" in msg and "'self_attn.out_proj'" in msg
    # separate q/k/v weights (kdim != embed_dim) are named one by one
    rep, _ = _emulate(nn.Sequential(nn.MultiheadAttention(64, 4, kdim=32, vdim=32)), "te-current", "h100")
    assert set(rep.skipped) == {"0.q_proj_weight", "0.k_proj_weight", "0.v_proj_weight", "0.out_proj"}


def test_the_reason_given_for_out_proj_holds_torch_never_calls_it():
    # the report says nn.MultiheadAttention bypasses out_proj's forward; if torch ever calls it, this fails
    mha = nn.MultiheadAttention(32, 4, batch_first=True)

    def called(*a):
        raise AssertionError("out_proj.forward was called")

    mha.out_proj.forward = called
    x = torch.randn(2, 8, 32)
    mha(x, x, x)
    mha(x, x, x, need_weights=False)


def test_the_stochastic_rounding_seed_does_not_change_with_the_filter():
    # a layer's index seeds its stochastic rounding: filtering another layer out must not move it
    torch.manual_seed(1)
    base = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64))
    a, b = copy.deepcopy(base), copy.deepcopy(base)
    ft.emulate(a, "te-nvfp4", "exact")
    ft.emulate(b, "te-nvfp4", "exact", module_filter_fn=lambda mod, fqn: fqn == "1")
    x, dy = torch.randn(32, 64), torch.randn(32, 64)
    for m in (a, b):
        m[1](x).backward(dy)
    assert torch.equal(a[1].weight.grad, b[1].weight.grad)


def test_bad_filters_are_refused_naming_the_layer():
    with pytest.raises(TypeError, match="module_filter_fn must be None or a callable"):
        ft.emulate(nn.Sequential(nn.Linear(16, 16)), "te-current", "h100", module_filter_fn="head")
    with pytest.raises(TypeError, match=r"must return True or False, got None for layer '0'"):
        ft.emulate(nn.Sequential(nn.Linear(16, 16)), "te-current", "h100", module_filter_fn=lambda m, n: None)
    shared = nn.Linear(16, 16)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    with pytest.raises(ValueError, match=r"accepts one layer under some of its names"):
        ft.emulate(model, "te-current", "h100", module_filter_fn=lambda m, n: n == "0")
    assert type(model[0]) is nn.Linear        # nothing swapped before the refusal
