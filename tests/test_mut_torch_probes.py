"""Tests answering the mutation sample of fp8emu.torch.probes (tests/MUTATION.md)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.checkpoint import checkpoint  # noqa: E402

from fp8emu.torch import probes  # noqa: E402


def test_a_layer_the_recipe_cannot_take_is_one_error_and_no_warning():
    """The swap's HighPrecisionWarning for the skipped layer is not raised on top of the ValueError."""
    rng = np.random.default_rng(0)
    x, w, dy = (rng.standard_normal(s).astype(np.float32) for s in ((64, 24), (16, 24), (64, 16)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="does not take a 24 -> 16 layer with 64 tokens"):
            probes.layer_passes(x, w, None, dy, "te-nvfp4", "b200")


def test_capture_keeps_each_layers_bias_and_input_gradient_for_3d_inputs():
    """A bias-free and a biased layer on (batch, tokens, features) inputs: ``b`` is the bias or None, ``dx``
    the gradient torch itself gives the layer's input, tokens flattened into rows."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3, bias=False), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    x = torch.randn(2, 5, 4, requires_grad=True)
    loss, caps = probes.capture(model, lambda m: m(x).square().sum())
    assert caps["0"].b is None
    assert np.array_equal(caps["2"].b, model[2].bias.detach().numpy())
    assert caps["0"].dx.shape == (10, 4)
    assert np.array_equal(caps["0"].dx, x.grad.reshape(10, 4).numpy())
    h = torch.tanh(x.detach() @ model[0].weight.detach().T).requires_grad_(True)
    (model[2](h)).square().sum().backward()
    assert np.array_equal(caps["2"].dx, h.grad.reshape(10, 3).numpy())


def test_exact_passes_are_float64_products_with_the_bias_in_fprop_only():
    """Small integers and halves: every product is exact, so the three passes are the hand sums."""
    x = np.array([[1.0, 2.0], [0.5, -1.0], [3.0, 0.0]], np.float32)          # 3 tokens, 2 in_features
    w = np.array([[1.0, -1.0], [2.0, 0.5]], np.float32)                       # 2 out_features
    dy = np.array([[1.0, 0.0], [0.0, 2.0], [-1.0, 1.0]], np.float32)
    b = np.array([0.25, -4.0], np.float32)
    xw = np.array([[-1.0, 3.0], [1.5, 0.5], [3.0, 6.0]])                       # x @ w.T by hand
    out = probes.exact_passes(x, w, b, dy)
    assert all(v.dtype == np.float64 for v in out.values())
    assert np.array_equal(out["fprop"], xw + [0.25, -4.0])
    assert np.array_equal(probes.exact_passes(x, w, None, dy)["fprop"], xw)
    assert np.array_equal(out["dgrad"], [[1.0, -1.0], [4.0, 1.0], [1.0, 1.5]])     # dy @ w
    assert np.array_equal(out["wgrad"], [[-2.0, 2.0], [4.0, -2.0]])                 # dy.T @ x


def test_layer_passes_default_to_draw_0_and_to_a_warmed_delayed_history():
    """The documented defaults: ``seed=0`` (draw 0 of the stochastic rounding) and ``warm=True`` (a delayed
    recipe's amax history holds these operands' amax, not the first step's scale 1)."""
    rng = np.random.default_rng(3)
    x, w, dy = (rng.standard_normal(s).astype(np.float32) for s in ((64, 64), (64, 64), (64, 64)))
    same = lambda a, b: all(np.array_equal(a[p], b[p]) for p in a)      # noqa: E731
    sr = [probes.layer_passes(x, w, None, dy, "te-nvfp4", "b200", **kw) for kw in ({}, {"seed": 0}, {"seed": 1})]
    assert same(sr[0], sr[1]) and not np.array_equal(sr[0]["wgrad"], sr[2]["wgrad"])
    # a cold history quantizes with scale 1, a warm one with 448 / amax (standard-normal operands, amax
    # about 4): other E4M3 codes, other passes
    d = [probes.layer_passes(x, w, None, dy, "te-delayed", "h100", **kw) for kw in ({}, {"warm": True},
                                                                                    {"warm": False})]
    assert same(d[0], d[1]) and not np.array_equal(d[0]["fprop"], d[2]["fprop"])


def test_capture_flattens_the_tokens_of_each_layers_input_and_output_into_rows():
    """A (3, 5, 4) input through a 4 -> 2 layer: x is (15, 4), y (15, 2), each torch's own values."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 2))
    x = torch.randn(3, 5, 4)
    _, caps = probes.capture(model, lambda m: m(x).sum())
    assert np.array_equal(caps["0"].x, x.reshape(15, 4).numpy())
    assert np.array_equal(caps["0"].y, model(x).detach().reshape(15, 2).numpy())
    assert caps["0"].dx is None and np.array_equal(caps["0"].dy, np.ones((15, 2), np.float32))


def test_capture_clears_the_gradients_a_previous_backward_left():
    """Gradients left from an earlier backward are not added in: ``dw`` and the layer's ``.grad`` after
    the capture are this backward's alone (torch's own gradient of a fresh copy)."""
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3))
    x = torch.randn(6, 4)
    model(x).square().sum().backward()            # stale gradients
    _, caps = probes.capture(model, lambda m: m(x).sum())
    fresh = torch.nn.Linear(4, 3)
    fresh.load_state_dict(model[0].state_dict())
    fresh(x).sum().backward()
    assert np.array_equal(caps["0"].dw, fresh.weight.grad.numpy())
    assert torch.equal(model[0].weight.grad, fresh.weight.grad) and torch.equal(model[0].bias.grad, fresh.bias.grad)


def test_emulated_model_is_a_copy_at_draw_0_by_default():
    """``emulated_model`` leaves the original float32 and, like ``emulate``, draws with seed 0 unless told."""
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    x = torch.randn(64, 64)

    def wgrad(m):
        m(x).square().sum().backward()
        return m[0].weight.grad

    copies = [probes.emulated_model(model, "te-nvfp4", "b200", **kw) for kw in ({}, {"seed": 0}, {"seed": 1})]
    assert type(model[0]) is torch.nn.Linear and all(type(c[0]) is not torch.nn.Linear for c in copies)
    g = [wgrad(c) for c in copies]
    assert torch.equal(g[0], g[1]) and not torch.equal(g[0], g[2])


# ----------------------------------------------------------------------------- seed 74 (fresh sample)
def test_a_weight_that_also_reaches_the_loss_in_a_penalty_is_refused():
    """``.grad`` sums every path to the weight: a penalty on it in ``loss_fn`` is a second path besides the
    layer's one call, so the weight's gradient is not the layer's wgrad and capture names it."""
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    x = torch.randn(5, 8)
    with pytest.raises(ValueError, match=r"the weight of layer '0' reaches the loss outside the layer too"):
        probes.capture(model, lambda m: m(x).sum() + m[0].weight.square().sum())


def test_a_layer_output_used_twice_is_one_path_to_its_weight():
    """A skip connection uses the layer's output twice: the loss's graph reaches the layer's node by two paths,
    but its weight by one edge (the layer's one call), so capture runs; dw is the layer's wgrad dy^T x
    (float64 products of the captured float32 operands)."""
    torch.manual_seed(6)
    lin = torch.nn.Linear(8, 8)
    x = torch.randn(5, 8)

    def loss_fn(m):
        h = m(x)
        return (h + torch.tanh(h)).square().sum()
    _, caps = probes.capture(lin, loss_fn)
    c = caps[""]
    np.testing.assert_allclose(c.dw, c.dy.astype(np.float64).T @ c.x.astype(np.float64), rtol=1e-5, atol=1e-6)


def test_the_input_gradient_is_the_layers_own_when_its_input_is_given_by_keyword():
    """The layer's input also feeds a residual path: ``dx`` is the layer's own dgrad (``dy W``), not the
    input's whole gradient (which adds the residual's dy).  The layer is called as ``lin(input=h)``: the
    input is the keyword argument, there is no positional one.  (A subclass of nn.Linear with a forward of
    its own, which could take more arguments, is refused: tests/test_audit_capture_linear_subclass.py.)"""
    torch.manual_seed(6)
    model = torch.nn.ModuleDict({"lin": torch.nn.Linear(4, 4)})
    x = torch.randn(6, 4, requires_grad=True)

    def loss_fn(m):
        h = torch.tanh(x)
        return (m["lin"](input=h) + h).square().sum()

    _, caps = probes.capture(model, loss_fn)
    c = caps["lin"]
    dy = c.dy.astype(np.float64)
    own = dy @ c.w.astype(np.float64)
    np.testing.assert_allclose(c.dx, own, rtol=1e-5, atol=1e-6)
    assert not np.allclose(c.dx, own + dy, rtol=1e-3, atol=1e-3)        # the residual's share is not in dx


class _Segment(torch.nn.Module):
    """``relu(a(x * k))`` then ``b``, ``a`` under reentrant checkpointing; ``k`` counts the segment's runs
    when ``drift`` (a segment that is not a function of its input: its recompute differs from its forward)."""

    def __init__(self, drift=False):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)
        self.drift, self.runs = drift, 0

    def inner(self, t):
        self.runs += 1
        return torch.relu(self.a(t * (self.runs if self.drift else 1)))

    def forward(self, x, ckpt=True):
        h = checkpoint(self.inner, x, use_reentrant=True) if ckpt else self.inner(x)
        return self.b(h)


def test_reentrant_checkpointings_recompute_gives_the_capture_without_checkpointing():
    """With ``use_reentrant=True`` the forward runs under no_grad and the recompute in the backward is the
    graph the gradients take: the capture is the one without checkpointing, bit for bit."""
    torch.manual_seed(7)
    model = _Segment()
    x = torch.randn(6, 8, requires_grad=True)
    loss, caps = probes.capture(model, lambda m: m(x).square().sum())
    want_loss, want = probes.capture(model, lambda m: m(x, ckpt=False).square().sum())
    assert loss == want_loss and sorted(caps) == sorted(want) == ["a", "b"]
    for name in caps:
        for f in ("x", "w", "b", "y", "dy", "dx", "dw"):
            assert np.array_equal(getattr(caps[name], f), getattr(want[name], f)), (name, f)


def test_a_recompute_that_gives_the_layer_another_input_is_refused():
    """The segment scales its input by its run count: the recompute's input is twice the forward's, so the
    gradients would be of other operands than the captured ones."""
    torch.manual_seed(8)
    x = torch.randn(6, 8, requires_grad=True)
    with pytest.raises(ValueError, match=r"layer 'a': activation checkpointing's recompute gave it another input "
                                         r"or output than its forward"):
        probes.capture(_Segment(drift=True), lambda m: m(x).square().sum())


# ----------------------------------------------------------------------------- seed 76 (fresh sample)
def test_a_captures_passes_are_its_output_and_gradients_by_pass():
    torch.manual_seed(12)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3))
    x = torch.randn(5, 4, requires_grad=True)
    _, caps = probes.capture(model, lambda m: m(x).square().sum())
    c = caps["0"]
    got = c.passes()
    assert sorted(got) == ["dgrad", "fprop", "wgrad"]
    assert got["fprop"] is c.y and got["dgrad"] is c.dx and got["wgrad"] is c.dw


def test_a_float64_layer_is_refused_naming_its_input_and_a_float16_one_is_captured():
    """float32 would round a float64 layer's operands (the captured y no longer their product): refused,
    naming the layer's input; float16 is exact in float32, so a float16 layer's operands and gradients are
    captured as they are."""
    torch.manual_seed(13)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3)).double()
    x = torch.randn(5, 4, dtype=torch.float64)
    with pytest.raises(TypeError, match=r"the input of layer '0' is torch.float64; capture records float32"):
        probes.capture(model, lambda m: m(x).sum())
    half = torch.nn.Sequential(torch.nn.Linear(4, 3)).half()
    xh = torch.randn(5, 4).half().requires_grad_()
    _, caps = probes.capture(half, lambda m: m(xh).float().square().sum())
    c = caps["0"]
    assert c.x.dtype == c.dw.dtype == c.dx.dtype == np.float32
    assert np.array_equal(c.x, xh.detach().float().numpy())
    assert np.array_equal(c.dw, half[0].weight.grad.float().numpy())
    assert np.array_equal(c.dx, xh.grad.float().numpy())


def test_a_loss_fn_that_runs_its_own_backward_is_refused():
    """Its backward (with retain_graph) and capture's would both add into ``.grad``: dw twice the wgrad."""
    torch.manual_seed(14)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3))
    x = torch.randn(5, 4)

    def step(m):
        loss = m(x).square().sum()
        loss.backward(retain_graph=True)
        return loss

    with pytest.raises(ValueError, match=r"loss_fn ran a backward itself"):
        probes.capture(model, step)


def test_a_layer_called_with_its_input_under_another_keyword_is_refused_naming_the_call():
    """A QAT wrapper (``qat_model``) names its input ``x``: called as ``lin(x=t)``, no positional input and no
    ``input`` keyword reach the hook, which finds no input tensor: one TypeError naming the layer and the call's
    arguments, not ``'NoneType' object has no attribute 'device'`` from the autocast check.  (A plain
    nn.Linear called so is torch's own TypeError, before any hook.)"""
    torch.manual_seed(15)
    model = probes.qat_model(torch.nn.ModuleDict({"lin": torch.nn.Linear(16, 16)}), "te-current", "h100")
    x = torch.randn(5, 16)
    with pytest.raises(TypeError, match=r"layer 'lin' was called without an input tensor \(args 0, keywords \['x'\]\)"):
        probes.capture(model, lambda m: m["lin"](x=x).square().sum())
