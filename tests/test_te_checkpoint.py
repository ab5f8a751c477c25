"""``fp8emu.torch.te.checkpoint``: TE's activation checkpointing (``transformer_engine/pytorch/distributed.py``).

The property TE's ``checkpoint`` exists for, checked bit for bit against a peer, the same model without
checkpointing: outputs, gradients and module state (step counters, delayed scaling's amax histories and scales)
after training steps are those of the plain model, for every recipe (stochastic rounding's bits too), with dropout
inside the segment, and with the backward outside the ``autocast`` block or inside another one.  Before it, ``te``
had no ``checkpoint`` (AttributeError), and ``torch.utils.checkpoint`` recomputes outside the block, as in TE.
"""

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils.checkpoint import checkpoint as torch_checkpoint  # noqa: E402

import fp8emu.torch.te as te  # noqa: E402

W = 64          # NVFP4 on b200 takes multiples of 64
RECIPES = {
    "delayed": (lambda: te.recipe.DelayedScaling(), "h100"),
    "current": (lambda: te.recipe.Float8CurrentScaling(), "h100"),
    "mxfp8": (lambda: te.recipe.MXFP8BlockScaling(), "b200"),
    "nvfp4-sr": (lambda: te.recipe.NVFP4BlockScaling(disable_stochastic_rounding=False), "b200"),
}


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = te.Linear(W, W)
        self.mlp = te.LayerNormMLP(W, 2 * W)

    def forward(self, x, is_first_microbatch=None):
        return self.mlp(self.lin(x, is_first_microbatch=is_first_microbatch), is_first_microbatch=is_first_microbatch)


def _pair(make):
    torch.manual_seed(0)
    model = make()
    return model, copy.deepcopy(model)


def _assert_same(plain, ckpt):
    a, b = plain.state_dict(), ckpt.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    for (n, p), q in zip(plain.named_parameters(), ckpt.parameters()):
        assert (p.grad is None) == (q.grad is None) and (p.grad is None or torch.equal(p.grad, q.grad)), n


def _run(model, x, recipe, gpu, ckpt, reentrant):
    with te.autocast(recipe=recipe, gpu=gpu):
        h = x
        for blk in model:
            h = te.checkpoint(blk, h, use_reentrant=reentrant) if ckpt else blk(h)
    return h


@pytest.mark.parametrize("name,reentrant", [("delayed", True), ("delayed", False), ("nvfp4-sr", True),
                                             ("nvfp4-sr", False), ("current", False), ("mxfp8", True)])
def test_training_steps_are_those_without_checkpointing(name, reentrant):
    make_recipe, gpu = RECIPES[name]
    plain, ckpt = _pair(lambda: nn.Sequential(Block(), Block()))
    opts = [torch.optim.Adam(m.parameters(), lr=1e-2) for m in (plain, ckpt)]
    for step in range(2):
        x = torch.randn(W, W)
        outs, xgrads = [], []
        for m, opt, use in ((plain, opts[0], False), (ckpt, opts[1], True)):
            opt.zero_grad()
            xi = x.clone().requires_grad_(True)
            y = _run(m, xi, make_recipe(), gpu, use, reentrant)
            y.square().mean().backward()        # outside the autocast block, as TE's examples
            outs.append(y.detach())
            xgrads.append(xi.grad)
            opt.step()
        assert torch.equal(*outs) and torch.equal(*xgrads)
        _assert_same(plain, ckpt)
    # one forward call per step: the recompute advanced no step counter
    assert int(ckpt[0].lin.fp8emu_gemm.fp8emu_step) == 2 and int(ckpt[1].mlp.fp8emu_fc2.fp8emu_step) == 2
    if name == "delayed":
        assert torch.equal(ckpt[0].mlp.fp8emu_fc1.amax_history_input, plain[0].mlp.fp8emu_fc1.amax_history_input)


@pytest.mark.parametrize("reentrant", [True, False])
@pytest.mark.parametrize("fp8", [True, False])
def test_transformer_layer_with_dropout(fp8, reentrant):
    """Dropout inside the segment draws the forward's mask in the recompute (the RNG state restored); outside
    autocast (high precision) too."""
    plain, ckpt = _pair(lambda: te.TransformerLayer(W, 2 * W, 4, hidden_dropout=0.25, attention_dropout=0.25))
    x = torch.randn(16, 4, W)
    outs = []
    for m, use in ((plain, False), (ckpt, True)):
        torch.manual_seed(1)
        xi = x.clone().requires_grad_(True)
        with te.autocast(enabled=fp8, recipe=te.recipe.DelayedScaling()):
            y = te.checkpoint(m, xi, use_reentrant=reentrant) if use else m(xi)
        y.square().mean().backward()
        outs.append((y.detach(), xi.grad))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    _assert_same(plain, ckpt)


@pytest.mark.parametrize("reentrant", [True, False])
@pytest.mark.parametrize("backward_in", [dict(enabled=False), dict(recipe=te.recipe.Float8CurrentScaling())])
def test_the_recompute_runs_in_the_forwards_block(backward_in, reentrant):
    """The backward inside another block (high precision, another recipe): the recompute still runs the
    forward's recipe, as TE re-enters ``autocast(enabled, recipe)`` of the forward."""
    plain, ckpt = _pair(Block)
    x = torch.randn(W, W)
    res = []
    for m, use in ((plain, False), (ckpt, True)):
        xi = x.clone().requires_grad_(True)
        with te.autocast(recipe=te.recipe.DelayedScaling()):
            y = te.checkpoint(m, xi, use_reentrant=reentrant) if use else m(xi)
        with te.autocast(**backward_in):
            y.square().mean().backward()
        res.append((y.detach(), xi.grad))
    assert torch.equal(res[0][0], res[1][0]) and torch.equal(res[0][1], res[1][1])
    _assert_same(plain, ckpt)


def _micro_batch(m, use, reentrant):
    """``f(x, first)``: one micro-batch of ``m``, checkpointed where ``use``."""
    def f(x, first):
        return te.checkpoint(m, x, is_first_microbatch=first, use_reentrant=reentrant) if use else m(x, first)
    return f


@pytest.mark.parametrize("reentrant", [True, False])
def test_micro_batches_keep_the_weight_cache(reentrant):
    """``is_first_microbatch``: a first micro-batch quantizes the weights, the next reuse the copy.  A recompute
    reuses its forward's copy and leaves the cache as it found it: here micro-batch A's recompute comes after
    B, a new first micro-batch (delayed scaling: another weight scale), and C reuses B's copy."""
    plain, ckpt = _pair(Block)
    xs = [torch.randn(W, W, requires_grad=True) for _ in range(3)]
    for m, use in ((plain, False), (ckpt, True)):
        f = _micro_batch(m, use, reentrant)
        with te.autocast(recipe=te.recipe.DelayedScaling()):
            ya, yb = f(xs[0], True), f(xs[1], True)
            ya.square().mean().backward()
            yc = f(xs[2], False)
            for y in (yb, yc):
                y.square().mean().backward()
    _assert_same(plain, ckpt)


@pytest.mark.parametrize("reentrant", [True, False])
def test_a_later_micro_batch_recomputes_with_the_first_ones_weight_copy(reentrant):
    """The first micro-batch of a fresh module quantizes its weights with delayed scaling's initial scale (1.0); a
    later one reuses that copy although the scale has moved since, and so must its recompute."""
    plain, ckpt = _pair(Block)
    xs = [torch.randn(W, W, requires_grad=True) for _ in range(2)]
    for m, use in ((plain, False), (ckpt, True)):
        f = _micro_batch(m, use, reentrant)
        with te.autocast(recipe=te.recipe.DelayedScaling()):
            ys = [f(xs[0], True), f(xs[1], False)]
        for y in reversed(ys):
            y.square().mean().backward()
    _assert_same(plain, ckpt)


def test_nested_segments_and_a_second_backward():
    """A segment inside a segment replays the outer forward's state; ``retain_graph`` recomputes twice."""
    plain, ckpt = _pair(lambda: nn.Sequential(Block(), Block()))

    def outer(h, use):
        h = te.checkpoint(ckpt[0], h) if use else plain[0](h)
        return ckpt[1](h) if use else plain[1](h)

    x = torch.randn(W, W, requires_grad=True)
    for use in (False, True):
        with te.autocast(recipe=te.recipe.DelayedScaling()):
            y = te.checkpoint(outer, x, True) if use else outer(x, False)
        y.square().mean().backward(retain_graph=True)
        y.square().mean().backward()
    _assert_same(plain, ckpt)


def test_a_tracker_s_rng_states_are_the_forwards():
    """``get_rng_state_tracker``: its states in force in the recompute, restored after it (TE's): noise drawn
    from the tracker's generator inside the segment is the forward's."""

    class Tracker:
        def __init__(self):
            self.gen = torch.Generator().manual_seed(7)

        def get_states(self):
            return {"g": self.gen.get_state()}

        def set_states(self, states):
            self.gen.set_state(states["g"])

    plain, ckpt = _pair(Block)
    x = torch.randn(W, W)
    res = []
    for m, use in ((plain, False), (ckpt, True)):
        tracker = Tracker()

        def noisy(h):
            return m(h) * torch.rand(W, generator=tracker.gen)

        xi = x.clone().requires_grad_(True)
        with te.autocast(recipe=te.recipe.Float8CurrentScaling()):
            y = te.checkpoint(noisy, xi, get_rng_state_tracker=lambda: tracker) if use else noisy(xi)
        y.square().mean().backward()
        res.append((y.detach(), xi.grad, tracker.gen.get_state()))
    for a, b in zip(*res):
        assert torch.equal(a, b)
    _assert_same(plain, ckpt)


def test_context_fn_and_keywords_go_where_te_sends_them():
    seen = []

    class Mark:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            seen.append(self.name)

        def __exit__(self, *exc):
            return False

    block = Block()
    x = torch.randn(W, W, requires_grad=True)
    with te.autocast(recipe=te.recipe.Float8CurrentScaling()):
        y = te.checkpoint(block, x, is_first_microbatch=True, context_fn=lambda: (Mark("fwd"), Mark("re")))
    y.sum().backward()
    assert seen == ["fwd", "re"]
    # a keyword TE does not take goes to the function, as TE sends it
    with pytest.raises(TypeError, match="preserve_rng_state"):
        te.checkpoint(block, x, preserve_rng_state=False)


def test_a_module_without_te_modules_goes_to_torch():
    lin = nn.Linear(4, 4)
    x = torch.randn(2, 4, requires_grad=True)
    assert torch.equal(te.checkpoint(lin, x), lin(x))
    # torch's reentrant checkpoint takes no keywords for the function (TE sends them there too)
    with pytest.raises(ValueError, match="Unexpected keyword arguments"):
        te.checkpoint(lambda_module(lin), x, scale=2.0)


def lambda_module(lin):
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, x, scale=1.0):
            return self.lin(x) * scale
    return Scaled()


def test_deprecated_positional_form():
    layer = te.Linear(W, W)
    x = torch.randn(W, W, requires_grad=True)

    class Tracker:
        def get_states(self):
            return {}

        def set_states(self, states):
            pass

    with pytest.warns(DeprecationWarning, match="keyword arguments to `checkpoint`"):
        y = te.checkpoint(layer, False, lambda: Tracker(), None, x)
    assert torch.equal(y, layer(x))


def test_a_function_whose_own_arguments_look_like_the_old_form_gets_them():
    """TE takes the old positional form only where the third argument is None or a process group: a segment whose
    own arguments are (a bool, a callable, a tensor, ...) gets them all, without the deprecation warning."""
    layer = te.Linear(W, W)
    x = torch.randn(W, W, requires_grad=True)

    def segment(flag, act, h, scale):
        return act(layer(h)) * scale if flag else layer(h)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = te.checkpoint(segment, True, torch.tanh, x, 2.0)
    assert torch.equal(y, torch.tanh(layer(x)) * 2.0)


@pytest.mark.parametrize("call,err,match", [
    (lambda x: te.checkpoint(3, x), TypeError, "function must be callable"),
    (lambda x: te.checkpoint(te.Linear(W, W), x, use_reentrant="no"), TypeError, "use_reentrant must be True or False"),
    (lambda x: te.checkpoint(te.Linear(W, W), x, distribute_saved_activations=1), TypeError,
     "distribute_saved_activations must be True or False"),
    (lambda x: te.checkpoint(te.Linear(W, W), x, get_rng_state_tracker=object()), TypeError,
     "get_rng_state_tracker must be a callable"),
    (lambda x: te.checkpoint(te.Linear(W, W), x, distribute_saved_activations=True), RuntimeError,
     "torch.distributed is not initialized"),
])
def test_bad_arguments(call, err, match):
    with pytest.raises(err, match=match):
        call(torch.randn(W, W, requires_grad=True))


def test_distribute_saved_activations_without_reentrancy_warns_as_te():
    with pytest.warns(UserWarning, match="no effect when `use_reentrant=False`"):
        te.checkpoint(te.Linear(W, W), torch.randn(W, W, requires_grad=True), distribute_saved_activations=True,
                      use_reentrant=False)


def test_a_recompute_that_calls_a_module_more_often_is_refused():
    layer = te.Linear(W, W)
    calls = []

    def grows(x):
        calls.append(None)
        for _ in calls:
            x = layer(x)
        return x

    x = torch.randn(W, W, requires_grad=True)
    with te.autocast(recipe=te.recipe.Float8CurrentScaling()):
        y = te.checkpoint(grows, x)
    with pytest.raises(RuntimeError, match="recompute calls Linear more often than the checkpointed forward"):
        y.sum().backward()
    assert int(layer.fp8emu_gemm.fp8emu_step) == 1        # the state left as the forward left it


def test_torch_utils_checkpoint_recomputes_outside_the_block_as_in_te():
    """``torch.utils.checkpoint`` over TE modules knows no autocast block (TE's modules too): with the backward
    outside the block, its (reentrant) recompute runs in high precision, so the gradients are those of the
    high-precision model; ``te.checkpoint`` is the one that recomputes in FP8."""
    hp, ckpt = _pair(Block)
    x = torch.randn(W, W)
    hp(x.requires_grad_(True)).sum().backward()
    with te.autocast(recipe=te.recipe.Float8CurrentScaling()):
        y = torch_checkpoint(ckpt, x.detach().requires_grad_(True), use_reentrant=True)
    y.sum().backward()
    for p, q in zip(hp.parameters(), ckpt.parameters()):
        assert torch.equal(p.grad, q.grad)
    # non-reentrant: the high-precision recompute saves other tensors than the FP8 forward did (torch's error)
    with te.autocast(recipe=te.recipe.Float8CurrentScaling()):
        y = torch_checkpoint(ckpt, x.detach().requires_grad_(True), use_reentrant=False)
    with pytest.raises(torch.utils.checkpoint.CheckpointError):
        y.sum().backward()


def test_no_warning_in_a_plain_use():
    layer = te.LayerNormMLP(W, 2 * W)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with te.autocast(recipe=te.recipe.DelayedScaling()):
            y = te.checkpoint(layer, torch.randn(W, W, requires_grad=True), use_reentrant=False)
        y.sum().backward()


def test_the_guide_s_example_runs_and_prints_what_it_says(capsys):
    from pathlib import Path
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "guides" / "te.md").read_text(encoding="utf-8")
    section = text[text.index("## Activation checkpointing"):]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(block, "te.md", "exec"), {})
    assert capsys.readouterr().out.split() == ["True", "True"]


@pytest.mark.parametrize("reentrant", [True, False])
def test_fp8_primary_weights(reentrant):
    """Weights made inside ``quantized_model_init``: the recompute uses the forward's quantized copy (delayed
    scaling: made with the forward's scale), the optimizer's steps re-quantize as without checkpointing."""
    with te.quantized_model_init(recipe=te.recipe.DelayedScaling()):
        plain, ckpt = _pair(Block)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (plain, ckpt)]
    for _ in range(2):
        x = torch.randn(W, W, requires_grad=True)
        for m, opt, use in ((plain, opts[0], False), (ckpt, opts[1], True)):
            opt.zero_grad()
            with te.autocast(recipe=te.recipe.DelayedScaling()):
                y = te.checkpoint(m, x, use_reentrant=reentrant) if use else m(x)
            y.square().mean().backward()
            opt.step()
        _assert_same(plain, ckpt)


def test_distribute_saved_activations_in_one_process(tmp_path):
    """TE splits the saved input across the tensor-parallel group: a group of one process holds all of it, so
    it changes nothing (TE needs ``torch.distributed`` initialized, as here)."""
    dist = torch.distributed
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        plain, ckpt = _pair(Block)
        x = torch.randn(W, W, requires_grad=True)
        for m, use in ((plain, False), (ckpt, True)):
            with te.autocast(recipe=te.recipe.DelayedScaling()):
                y = te.checkpoint(m, x, distribute_saved_activations=True) if use else m(x)
            y.square().mean().backward()
        _assert_same(plain, ckpt)
    finally:
        dist.destroy_process_group()


def test_the_non_reentrant_mode_takes_inputs_that_need_no_gradient():
    """torch's non-reentrant checkpoint (``use_reentrant=False``) differentiates a segment whose inputs need no
    gradient (the weights' gradients through it) and works with ``torch.autograd.grad``; the reentrant one does
    neither (torch's own limits, which TE's reentrant mode shares)."""
    plain, ckpt = _pair(lambda: te.Linear(W, W))
    x = torch.randn(W, W)                              # no gradient needed: the first layer's input
    with te.autocast(recipe=te.recipe.Float8CurrentScaling()):
        want = plain(x)
        got = te.checkpoint(ckpt, x, use_reentrant=False)
    assert got.requires_grad and torch.equal(got, want)
    (gw,) = torch.autograd.grad(got.square().sum(), [ckpt.weight])
    want.square().sum().backward()
    assert torch.equal(gw, plain.weight.grad)
