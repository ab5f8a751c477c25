"""Emulated layers without autograd: only the forward GEMM's rules, one-token decode steps."""

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
ft = pytest.importorskip("fp8emu.torch")
nn = torch.nn


def _pairs():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for r in ft.recipe_names():
            for g in ft.stack_names():
                try:
                    ft.emulate(nn.Sequential(nn.Linear(128, 128)), r, g)
                except ValueError:
                    continue
                yield r, g


PAIRS = list(_pairs())


def test_every_pair_a_stack_runs_is_covered():
    assert len(PAIRS) == 48


@pytest.mark.parametrize("recipe, gpu", PAIRS, ids=lambda v: v)
def test_one_token_equals_the_first_row_of_the_zero_padded_batch(recipe, gpu):
    # the expectation is the training path (which needs whole multiples of tokens) on the token padded
    # with zero rows by hand, as a kernel pads a partial tile and as a user had to before
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(128, 128))
    ft.emulate(base, recipe, gpu)
    mult = base[0].multiple
    x = torch.randn(1, 128) * 3
    padded = torch.cat([x, torch.zeros(mult - 1, 128)]).requires_grad_(True)
    ref = copy.deepcopy(base)(padded)[:1].detach()
    with torch.no_grad():
        assert torch.equal(copy.deepcopy(base)(x), ref)
    with torch.inference_mode():
        assert torch.equal(copy.deepcopy(base)(x), ref)
    frozen = copy.deepcopy(base).requires_grad_(False)      # grad mode on, nothing requires grad
    assert torch.equal(frozen(x), ref)


def test_one_token_decode_runs_and_training_still_refuses():
    model = nn.Sequential(nn.Linear(64, 64))
    ft.emulate(model, "te-mxfp8", "b200")
    with torch.no_grad():
        assert model(torch.randn(1, 64)).shape == (1, 64)
        assert model(torch.randn(2, 1, 64)).shape == (2, 1, 64)     # (batch, one new token, features)
    with pytest.raises(ValueError, match=r"^layer '0': 1 tokens .* wgrad GEMM \(K = tokens\)"):
        model(torch.randn(1, 64))


def test_forward_only_records_fprop_rows_only():
    model = nn.Sequential(nn.Linear(64, 64))
    ft.emulate(model, "te-nvfp4", "b200", diagnostics=True)
    with torch.no_grad():
        model(torch.randn(3, 64))
    rows = ft.diagnostics(model)
    assert [(r["pass"], r["tensor"]) for r in rows] == [("fprop", "input"), ("fprop", "weight")]


def test_encoder_layer_fast_path_no_longer_bypasses_the_emulated_layers():
    # in eval mode without autograd torch's fused encoder-layer kernel reads linear1.weight directly;
    # emulate turns it off, so the emulated layers run (their step counters move) and the output is the one
    # with autograd (the layer-by-layer path) up to nn.MultiheadAttention's own fast path, float32 rounding
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ft.HighPrecisionWarning)
        rep = ft.emulate(layer, "te-current", "h100")
    assert rep.fast_path_off == [""]
    x = torch.randn(2, 16, 64)
    with_grad = layer(x).detach()
    steps = int(layer.linear1.fp8emu_step), int(layer.linear2.fp8emu_step)
    with torch.no_grad():
        out = layer(x)
        assert (int(layer.linear1.fp8emu_step), int(layer.linear2.fp8emu_step)) == (steps[0] + 1, steps[1] + 1)
        assert torch.allclose(out, with_grad, rtol=0, atol=1e-5)
        with ft.autocast(enabled=False):
            assert float((layer(x) - out).abs().max()) > 1e-3        # high precision is visibly other
        assert torch.equal(layer(x[:, :1]), layer(x[:, :1]))        # one-token step, deterministic
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(64, 4, 128, batch_first=True), 2,
                                enable_nested_tensor=True).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = ft.emulate(enc, "te-current", "h100")
    assert rep.fast_path_off == ["", "layers.0", "layers.1"] and enc.use_nested_tensor is False
    mask = torch.zeros(2, 16, dtype=torch.bool)
    mask[1, 10:] = True
    with torch.no_grad():
        assert enc(x, src_key_padding_mask=mask).shape == x.shape


@pytest.mark.parametrize("recipe, gpu", [("te-nvfp4", "b200"), ("te-current", "h100"), ("te-block", "h100")])
def test_diagnostics_of_a_padded_step_count_the_real_rows(recipe, gpu):
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(128, 128))
    ft.emulate(base, recipe, gpu, diagnostics=True)
    mult = base[0].multiple
    x = torch.randn(3, 128)
    padded = torch.cat([x, torch.zeros(mult - 3, 128)])
    one, full = copy.deepcopy(base), copy.deepcopy(base)
    with torch.no_grad():
        one(x)
        full(padded)
    a, b = ft.diagnostics(one)[0], ft.diagnostics(full)[0]
    for k in ("frac_saturated", "frac_clipped", "frac_underflow", "frac_flushed"):
        assert a[k] * 3 == pytest.approx(b[k] * mult, rel=1e-12), k   # same counts, over the real rows
    assert a["amax"] == b["amax"]
